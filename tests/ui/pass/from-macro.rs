// Structs a `macro_rules!` macro writes compile and work: fields, types, visibility and
// `#[pgl(..)]` keys passed in as fragments (`$vis`, `$t:ty`, `$id:literal`, `$id:expr`,
// which arrive in invisible groups), and `#[extendible]` structs whose extension fields,
// `init` expressions (`$init:expr`, a closure or a constant), `reserve` and `replaces`
// come from the caller (the generated code mixes the caller's tokens with its own).
#![allow(dead_code)]

macro_rules! plain {
    ($id:literal, $vis:vis struct $name:ident { $($fvis:vis $f:ident : $t:ty),* $(,)? }) => {
        #[derive(pgl::Persistent)]
        #[pgl(id = $id)]
        #[repr(C)]
        $vis struct $name { $($fvis $f: $t),* }
    };
}

plain!(0x0e17_0101, pub struct Item { pub n: u64, pub arr: [u16; 4], pub next: pgl::Oid<Item> });

macro_rules! node {
    ($id:expr, $reserve:expr, $init:expr, $rep:ident, $($ext:tt)*) => {
        #[pgl::extendible(reserve = $reserve)]
        #[derive(pgl::Persistent)]
        #[pgl(id = $id)]
        #[repr(C)]
        pub struct Node {
            pub key: u32,
            pub value: u32,
            #[extension(1, replaces = $rep, init = $init)]
            pub key64: u64,
            $($ext)*
        }
    };
}

mod v0 {
    #[pgl::extendible(reserve = 16)]
    #[derive(pgl::Persistent)]
    #[pgl(id = 0x0e17_0102)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
    }
}

mod v2 {
    node!(
        0x0e17_0102,
        16,
        |old| u64::from(old.key()) * 3,
        key,
        #[extension(2, init = 7)]
        pub hits: u64,
        #[extension(2, init = |old| old.key64() + u64::from(old.value()))]
        pub sum: u64,
    );
}

fn main() {
    use pgl::{Config, Oid, Pool};
    use v2::NodeExtFields as _;
    use ItemFields as _;

    let path = std::env::temp_dir().join(format!("pgl-ui-from-macro-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::small("ui")).unwrap();

    let item = pool
        .tx(|tx| {
            tx.alloc(Item {
                n: 1,
                arr: [1, 2, 3, 4],
                next: Oid::NULL,
            })
        })
        .unwrap();
    pool.tx(|tx| {
        let mut m = tx.open(item)?;
        m.set_arr_at(3, 8);
        m.set_next(item);
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        let r = tx.get(item)?;
        assert_eq!((*r.arr_at(3), r.next), (8, item));
        Ok(())
    })
    .unwrap();

    // An object of version 0, upgraded by version 2 (both groups from their inits).
    let old = pool
        .tx(|tx| tx.alloc_ext(v0::NodeData { key: 5, value: 50 }))
        .unwrap();
    let old: Oid<v2::Node> = old.cast();
    pool.tx(|tx| {
        let n = tx.ext(old)?;
        assert_eq!((*n.key(), n.value, *n.hits(), *n.sum()), (15, 50, 7, 65));
        Ok(())
    })
    .unwrap();

    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
