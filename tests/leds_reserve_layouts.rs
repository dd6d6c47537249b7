//! How groups lie in a reserve (`leds::inline`): each starts where the one before it
//! ends, link included, aligned; the last one the reserve holds ends without its link.
//! Group layouts at the edges (alignment 16, two groups with the second cut short) and
//! field names the generated glue must not trip over, each upgraded, created, written,
//! copied and freed, with no group in an object of its own.

mod support;

use pgl::{Config, Oid, Pool};

fn pool(name: &str) -> (Pool, std::path::PathBuf) {
    let path =
        support::test_dir().join(format!("pgl-reserve-layouts-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (
        Pool::create(&path, &Config::small("layouts")).unwrap(),
        path,
    )
}

/// Align-16 group, short, at a payload offset that needs alignment padding.
mod a16v0 {
    use pgl::{extendible, Persistent};
    #[extendible(reserve = 32)]
    #[derive(Persistent)]
    #[pgl(id = 0x7e11_0001)]
    #[repr(C)]
    pub struct Node {
        pub key: u64,
        pub value: u64,
    }
}
mod a16v1 {
    use pgl::{extendible, Persistent};
    #[extendible(reserve = 32)]
    #[derive(Persistent)]
    #[pgl(id = 0x7e11_0001)]
    #[repr(C)]
    pub struct Node {
        pub key: u64,
        pub value: u64,
        #[extension(1, init = |old| u128::from(old.key()) << 64 | 7)]
        pub wide: u128,
        #[extension(1, init = 9)]
        pub more: u64,
    }
}

/// Two groups in a 24-byte reserve: group 1 whole, group 2 short.
mod twov0 {
    use pgl::{extendible, Persistent};
    #[extendible(reserve = 24)]
    #[derive(Persistent)]
    #[pgl(id = 0x7e11_0002)]
    #[repr(C)]
    pub struct Node {
        pub key: u64,
    }
}
mod twov1 {
    use pgl::{extendible, Persistent};
    #[extendible(reserve = 24)]
    #[derive(Persistent)]
    #[pgl(id = 0x7e11_0002)]
    #[repr(C)]
    pub struct Node {
        pub key: u64,
        #[extension(1, init = |old| old.key() + 1)]
        pub a: u64,
    }
}
mod twov2 {
    use pgl::{extendible, Persistent};
    #[extendible(reserve = 24)]
    #[derive(Persistent)]
    #[pgl(id = 0x7e11_0002)]
    #[repr(C)]
    pub struct Node {
        pub key: u64,
        #[extension(1, init = |old| old.key() + 1)]
        pub a: u64,
        #[extension(2, init = |old| old.a() + 1)]
        pub b: u64,
    }
}

/// A trait with a method taking `self`, implemented for every type, as a program may
/// have in scope where it reads a group field of the same name.
pub trait Stamp: Sized {
    fn stamp(self) -> Self {
        self
    }
}
impl<T> Stamp for T {}

/// Raw identifiers, the glue's own field names, and group fields named like methods that
/// take `self` of traits implemented for every type (`Into::into`, `TryInto::try_into`,
/// `Stamp::stamp`): a generated getter must call the group's glue, not those.
mod names {
    // In scope where the getters are generated, which is the point; with the fix no
    // getter resolves to it, so the import is unused.
    #[allow(unused_imports)]
    use super::Stamp as _;
    use pgl::{extendible, Persistent};
    #[extendible(reserve = 40)]
    #[derive(Persistent)]
    #[pgl(id = 0x7e11_0003)]
    #[repr(C)]
    pub struct Node {
        pub key: u64,
        #[extension(1, init = 5)]
        pub r#type: u32,
        #[extension(1, init = 6)]
        pub g1: u32,
        #[extension(1, init = 7)]
        pub into: u64,
        #[extension(1, init = 8)]
        pub try_into: u64,
        #[extension(1, init = 9)]
        pub stamp: u64,
    }
}

#[test]
fn align16_short_group() {
    use a16v1::NodeExtFields as _;
    let (pool, path) = pool("a16");
    assert_eq!(
        <a16v1::Node as pgl::Extendible>::__INLINE_AT,
        &[32],
        "value 24, group at 32, 24 bytes of fields end at 56 = end"
    );
    let old = pool
        .tx(|tx| tx.alloc_ext(a16v0::NodeData { key: 3, value: 4 }))
        .unwrap();
    let old = Oid::<a16v1::Node>::from_raw(old.raw());
    let new = pool
        .tx(|tx| {
            tx.alloc_ext(a16v1::NodeData {
                key: 1,
                value: 2,
                wide: 77,
                more: 88,
            })
        })
        .unwrap();
    pool.tx(|tx| {
        let e = tx.ext(old)?;
        assert_eq!((*e.wide(), *e.more()), ((3u128 << 64) | 7, 9));
        let e = tx.ext(new)?;
        assert_eq!((*e.wide(), *e.more()), (77, 88));
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        let mut m = tx.ext_mut(old)?;
        m.set_wide(u128::MAX);
        m.set_more(u64::MAX);
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.objects().unwrap().len(), 2, "both inline");
    pool.tx(|tx| {
        let e = tx.ext(old)?;
        assert_eq!((*e.wide(), *e.more()), (u128::MAX, u64::MAX));
        assert_eq!(e.value, 4);
        Ok(())
    })
    .unwrap();
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn two_groups_second_short() {
    let (pool, path) = pool("two");
    assert_eq!(<twov2::Node as pgl::Extendible>::__INLINE_AT, &[16, 32]);
    let v0s = pool
        .tx(|tx| {
            (0..4u64)
                .map(|k| tx.alloc_ext(twov0::NodeData { key: k * 10 }))
                .collect::<pgl::Result<Vec<_>>>()
        })
        .unwrap();
    // Upgrade two of them to v1 only.
    {
        use twov1::NodeExtFields as _;
        pool.tx(|tx| {
            for &o in &v0s[..2] {
                assert_eq!(
                    *tx.ext(Oid::<twov1::Node>::from_raw(o.raw()))?.a(),
                    o_key(tx, o)? + 1
                );
            }
            Ok(())
        })
        .unwrap();
    }
    let created = pool
        .tx(|tx| {
            tx.alloc_ext(twov2::NodeData {
                key: 100,
                a: 101,
                b: 102,
            })
        })
        .unwrap();
    use twov2::NodeExtFields as _;
    pool.tx(|tx| {
        for &o in &v0s {
            let e = tx.ext(Oid::<twov2::Node>::from_raw(o.raw()))?;
            assert_eq!((*e.a(), *e.b()), (e.key + 1, e.key + 2));
        }
        let e = tx.ext(created)?;
        assert_eq!((e.key, *e.a(), *e.b()), (100, 101, 102));
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        let mut m = tx.ext_mut(created)?;
        m.set_b(5);
        m.set_a(6);
        let c = tx.copy_ext(Oid::<twov2::Node>::from_raw(v0s[0].raw()))?;
        assert_eq!(*tx.ext(c)?.b(), 2);
        tx.free(c)?;
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.objects().unwrap().len(), 5, "all groups inline");
    pool.tx(|tx| {
        let e = tx.ext(created)?;
        assert_eq!((*e.a(), *e.b()), (6, 5));
        Ok(())
    })
    .unwrap();
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

fn o_key(tx: &pgl::Tx<'_>, o: Oid<twov0::Node>) -> pgl::Result<u64> {
    Ok(tx.get(o)?.key)
}

#[test]
fn names() {
    let (pool, path) = pool("names");
    let o = pool
        .tx(|tx| {
            tx.alloc_ext(names::NodeData {
                key: 1,
                r#type: 2,
                g1: 3,
                into: 4,
                try_into: 5,
                stamp: 6,
            })
        })
        .unwrap();
    pool.tx(|tx| {
        {
            let mut m = tx.ext_mut(o)?;
            m.set_type(20);
            m.set_into(40);
            m.set_stamp(60);
        }
        let e = tx.ext(o)?;
        // On the view itself, method syntax would pick those traits' methods too (they
        // take `self`, the accessors `&self`): the accessors are called by their trait.
        use names::NodeExtFields as F;
        assert_eq!(
            (
                *e.r#type(),
                *e.g1(),
                *F::into(&e),
                *F::try_into(&e),
                *F::stamp(&e)
            ),
            (20, 3, 40, 5, 60)
        );
        Ok(())
    })
    .unwrap();
    assert_eq!(
        pool.objects().unwrap().len(),
        1,
        "the group lives in the reserve"
    );
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
