// What a user writes on an `#[extendible]` struct and its fields: `Oid<Self>` in base and
// extension fields (spelled out in the types generated beside the struct), derived
// `PartialEq`/`Eq`/`Hash`/`PartialOrd`/`Ord` that see the fields and not the hidden link,
// lint attributes that reach the generated code (`#[allow(non_snake_case)]`,
// `#[deprecated]` fields, under `#![deny(warnings)]`), an `init` closure in parentheses,
// and `replaces = r#key` naming the field `key`.
#![deny(warnings)]
#![allow(dead_code)]

use pgl::{extendible, Oid, Persistent};

mod v0 {
    use pgl::{extendible, Oid, Persistent};

    #[extendible(reserve = 8)]
    #[derive(Persistent, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
    #[pgl(id = 0x0e17_0201)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Self>,
    }
}

#[extendible(reserve = 8)]
#[derive(Persistent, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
#[pgl(id = 0x0e17_0201)]
#[repr(C)]
pub struct Node {
    pub key: u32,
    pub value: u32,
    pub next: Oid<Self>,
    #[extension(1, replaces = r#key, init = (|old| u64::from(old.key()) + 1))]
    pub key64: u64,
    #[extension(2, init = Oid::NULL)]
    pub parent: Oid<Self>,
    #[extension(2, init = [Oid::NULL; 2])]
    pub kids: [Oid<Self>; 2],
}

#[extendible]
#[derive(Persistent)]
#[pgl(id = 0x0e17_0202)]
#[repr(C)]
#[allow(non_snake_case)]
pub struct Legacy {
    pub Base: u64,
    #[deprecated = "read `Wide`"]
    pub old: u64,
    #[extension(1, init = 0)]
    pub Wide: u64,
}

fn main() {
    use pgl::{Config, Pool};
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;
    use NodeExtFields as _;

    let path = std::env::temp_dir().join(format!("pgl-ui-user-attrs-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::small("ui")).unwrap();

    // Two objects with the same fields, one linked to a group of its own, one not.
    let (a, b) = pool
        .tx(|tx| {
            let a = tx.alloc_ext(v0::NodeData {
                key: 4,
                value: 5,
                next: Oid::NULL,
            })?;
            let b = tx.alloc_ext(v0::NodeData {
                key: 4,
                value: 5,
                next: Oid::NULL,
            })?;
            Ok((a, b))
        })
        .unwrap();
    let (a, b): (Oid<Node>, Oid<Node>) = (a.cast(), b.cast());
    pool.tx(|tx| tx.upgrade(a).map(drop)).unwrap();
    pool.tx(|tx| {
        let (x, y) = (*tx.get(a)?, *tx.get(b)?);
        assert_eq!(x, y, "equal fields, whatever the links");
        assert_eq!(x.cmp(&y), std::cmp::Ordering::Equal);
        let s = RandomState::new();
        assert_eq!(s.hash_one(x), s.hash_one(y));
        let n = tx.ext(a)?;
        assert_eq!((*n.key(), *n.parent(), *n.kids()), (5, Oid::NULL, [Oid::NULL; 2]));
        Ok(())
    })
    .unwrap();

    let l = pool
        .tx(|tx| {
            #[allow(deprecated)]
            let data = LegacyData {
                Base: 1,
                old: 2,
                Wide: 3,
            };
            tx.alloc_ext(data)
        })
        .unwrap();
    pool.tx(|tx| {
        assert_eq!(*LegacyExtFields::Wide(&tx.ext(l)?), 3);
        Ok(())
    })
    .unwrap();

    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
