// The code `#[extendible]` generates compiles, and works, whatever names the user's scope
// holds: its own `Ok`, `Some` and `None` (a glob import of an enum's variants), and
// constants named like the struct's fields or like the glue's locals (a `let` or a
// struct pattern would resolve to them instead of binding).
#![allow(dead_code, non_upper_case_globals, unused_imports)]

/// Version 0: the base alone.
mod v0 {
    use pgl::{extendible, Oid, Persistent};

    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x0e17_0001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
    }
}

/// Version 2, in a scope full of look-alikes.
mod v2 {
    use pgl::{extendible, Oid, Persistent};

    pub enum Outcome {
        Ok(u8),
        Some(u8),
        None,
    }
    pub use Outcome::*;

    const key: u32 = 1;
    const value: u32 = 2;
    const hits: u32 = 3;
    const g1: u8 = 4;
    const g2: u8 = 5;

    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x0e17_0001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |old| old.key() as u64 * 10)]
        pub wide: u64,
        #[extension(2, init = 7)]
        pub hits: u32,
        #[extension(2, init = 0)]
        pub _pad: u32,
    }
}

fn main() {
    use pgl::{Config, Oid, Pool};
    use v2::NodeExtFields as _;

    let path = std::env::temp_dir().join(format!("pgl-ui-ext-hyg-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::small("ui")).unwrap();

    // An object of version 0, upgraded by version 2 (both groups from their inits).
    let old = pool
        .tx(|tx| {
            tx.alloc_ext(v0::NodeData {
                key: 5,
                value: 50,
                next: Oid::NULL,
            })
        })
        .unwrap();
    let old: Oid<v2::Node> = old.cast();
    pool.tx(|tx| {
        let n = tx.ext(old)?;
        assert_eq!((n.key, n.value, *n.wide(), *n.hits()), (5, 50, 50, 7));
        Ok(())
    })
    .unwrap();

    // A new object of version 2, with its whole chain.
    let new = pool
        .tx(|tx| {
            tx.alloc_ext(v2::NodeData {
                key: 1,
                value: 2,
                next: Oid::NULL,
                wide: 3,
                hits: 4,
                _pad: 0,
            })
        })
        .unwrap();
    pool.tx(|tx| {
        let mut n = tx.ext_mut(new)?;
        n.set_hits(9);
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        let n = tx.ext(new)?;
        assert_eq!((n.key, n.value, *n.wide(), *n.hits()), (1, 2, 3, 9));
        Ok(())
    })
    .unwrap();

    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
