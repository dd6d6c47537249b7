//! Every call that takes an oid refuses one that names no object with `Error::InvalidOid`:
//! no panic, no read outside the mapping, no change to the pool. `Oid::from_raw` is safe, and
//! a damaged file or a program's bug hands out such oids.

mod support;

use pgl::{Config, Error, Oid, Pool};

mod v0 {
    use pgl::prelude::*;

    #[extendible(reserve = 16)]
    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0xbad_01d)]
    pub struct Node {
        pub key: u32,
        pub _pad: u32,
        pub next: Oid<Node>,
    }
}

mod v1 {
    use pgl::prelude::*;

    #[extendible(reserve = 16)]
    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0xbad_01d)]
    pub struct Node {
        pub key: u32,
        pub _pad: u32,
        pub next: Oid<Node>,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()))]
        pub key64: u64,
    }
}

use v1::NodeExtFields as _;

/// The oids tried: null, inside the first header, past the pool, all ones, unaligned,
/// inside a live object, a live object's header, and a freed object.
fn bad_oids(live: u64, freed: u64) -> Vec<(&'static str, u64)> {
    vec![
        ("null", 0),
        ("8", 8),
        ("past the pool", 1 << 44),
        ("all ones", u64::MAX),
        ("unaligned", live + 1),
        ("inside an object", live + 16),
        ("an object's header", live - 16),
        ("freed", freed),
    ]
}

/// Runs `f` for every bad oid and checks it failed with `Error::InvalidOid` and left the
/// pool's objects as they were.
fn each_refused<R: std::fmt::Debug>(
    pool: &Pool,
    what: &str,
    oids: &[(&'static str, u64)],
    f: impl Fn(u64) -> pgl::Result<R>,
) -> usize {
    let before = pool.objects().unwrap();
    for &(name, raw) in oids {
        let r = f(raw);
        assert!(
            r.is_err(),
            "{what} of {name} ({raw:#x}) did not fail: {r:?}"
        );
        let e = r.unwrap_err();
        assert!(
            matches!(e, Error::InvalidOid { .. }),
            "{what} of {name} ({raw:#x}): {e:?}"
        );
        assert_eq!(
            pool.objects().unwrap(),
            before,
            "{what} of {name} changed the pool"
        );
    }
    oids.len()
}

#[test]
fn every_call_taking_an_oid_refuses_one_that_names_no_object() {
    let path = support::test_dir().join(format!("pgl-bad-oids-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::small("bad-oids")).unwrap();
    let live = pool.tx(|tx| tx.alloc([1u64, 2])).unwrap();
    let node: Oid<v1::Node> = pool
        .tx(|tx| {
            tx.alloc_ext(v0::NodeData {
                key: 3,
                _pad: 0,
                next: Oid::NULL,
            })
        })
        .unwrap()
        .cast();
    let freed = pool.tx(|tx| tx.alloc([0u64; 2])).unwrap();
    pool.tx(|tx| tx.free(freed)).unwrap();
    let oids = bad_oids(live.raw(), freed.raw());
    let plain = |raw| Oid::<[u64; 2]>::from_raw(raw);
    let ext = |raw| Oid::<v1::Node>::from_raw(raw);

    let mut calls = 0;
    calls += each_refused(&pool, "pool.get", &oids, |r| pool.get(plain(r)).map(|v| *v));
    calls += each_refused(&pool, "tx.get", &oids, |r| {
        pool.tx(|tx| tx.get(plain(r)).map(|v| *v))
    });
    calls += each_refused(&pool, "tx.open", &oids, |r| {
        pool.tx(|tx| tx.open(plain(r)).map(|v| *v))
    });
    calls += each_refused(&pool, "tx.open after reads", &oids, |r| {
        pool.tx(|tx| {
            tx.get(live)?;
            tx.get(live)?;
            tx.open(plain(r)).map(|v| *v)
        })
    });
    calls += each_refused(&pool, "tx.free", &oids, |r| pool.tx(|tx| tx.free(plain(r))));
    calls += each_refused(&pool, "tx.ext", &oids, |r| {
        pool.tx(|tx| tx.ext(ext(r)).map(|v| *v.key()))
    });
    calls += each_refused(&pool, "tx.ext_with", &oids, |r| {
        pool.tx(|tx| tx.ext_with(ext(r), |v| *v.key()))
    });
    calls += each_refused(&pool, "tx.ext_mut", &oids, |r| {
        pool.tx(|tx| tx.ext_mut(ext(r)).map(|v| *v.key()))
    });
    calls += each_refused(&pool, "tx.upgrade", &oids, |r| {
        pool.tx(|tx| tx.upgrade(ext(r)))
    });
    calls += each_refused(&pool, "tx.groups_present", &oids, |r| {
        pool.tx(|tx| tx.groups_present(ext(r)))
    });
    calls += each_refused(&pool, "tx.copy_ext", &oids, |r| {
        pool.tx(|tx| tx.copy_ext(ext(r)))
    });
    calls += each_refused(&pool, "tx.free of an extendible", &oids, |r| {
        pool.tx(|tx| tx.free(ext(r)))
    });
    calls += each_refused(&pool, "pool.read_object", &oids, |r| pool.read_object(r));
    println!("bad oids refused: {calls} calls");

    // The good ones still work.
    assert_eq!(*pool.get(live).unwrap(), [1, 2]);
    assert_eq!(pool.tx(|tx| tx.ext_with(node, |v| *v.key())).unwrap(), 3);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
