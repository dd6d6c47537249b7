//! What a read reports once repair has failed: damage parity cannot rebuild is reported as
//! damage (`ChecksumMismatch`, or `Corrupt` for a header whose size overruns its block) and
//! counted once in `objects_unrecoverable`; a read with the wrong type of an intact object
//! stays the caller's `TypeMismatch` and counts nothing.

mod support;

use pgl::{Config, Error, Fault, Oid, Pool};

fn path(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-repair-rep-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

type Small = [u64; 4];

/// A pool with parity as asked, holding one small, one mid-sized and one large object.
fn pool_of_three(name: &str, parity: bool) -> (std::path::PathBuf, Pool, [u64; 3]) {
    let p = path(name);
    let cfg = Config::small("rep").parity(parity);
    let pool = Pool::create(&p, &cfg.clone().size(cfg.geometry().pool_size(2))).unwrap();
    let s = pool.tx(|tx| tx.alloc([5u64; 4])).unwrap();
    let m = pool.tx(|tx| tx.alloc([6u8; 3000])).unwrap();
    let l = pool.tx(|tx| tx.alloc([7u8; 100_000])).unwrap();
    (p, pool, [s.raw(), m.raw(), l.raw()])
}

/// Whether `r` reports damage to the object at `oid`.
fn is_damage<T>(r: &pgl::Result<T>, oid: u64) -> bool {
    match r {
        Err(Error::ChecksumMismatch { offset, .. }) => *offset == oid,
        Err(Error::Corrupt { what, offset, .. }) => {
            *what == "object header" && *offset == oid - 16
        }
        _ => false,
    }
}

#[test]
fn a_read_of_an_intact_object_as_the_wrong_type_counts_no_damage() {
    for parity in [true, false] {
        let (p, pool, [s, ..]) = pool_of_three(&format!("wrong{parity}"), parity);
        let wrong = Oid::<[u8; 32]>::from_raw(s);
        for _ in 0..2 {
            assert!(matches!(pool.get(wrong), Err(Error::TypeMismatch { .. })));
            let r = pool.tx(|tx| tx.open(wrong).map(|_| ()));
            assert!(matches!(r, Err(Error::TypeMismatch { .. })), "{r:?}");
        }
        let st = pool.stats();
        assert_eq!(
            (st.objects_repaired, st.objects_unrecoverable),
            (0, 0),
            "parity {parity}"
        );
        assert_eq!(*pool.get(Oid::<Small>::from_raw(s)).unwrap(), [5; 4]);
        drop(pool);
        std::fs::remove_file(&p).unwrap();
    }
}

#[test]
fn damage_that_its_parity_agrees_with_counts_as_unrecoverable_once() {
    // The same bits flipped in an object and in its parity page: the column still XORs to
    // zero, so parity cannot see which row is wrong (the docs' "a row and the parity page").
    let (p, pool, oids) = pool_of_three("agree", true);
    let oid = oids[0];
    for offset in [oid + 8, support::parity_of(&pool, oid + 8)] {
        pool.inject(&Fault::BitFlips { offset, bits: 1, seed: 4 }).unwrap();
    }
    let small = Oid::<Small>::from_raw(oid);
    for _ in 0..2 {
        let r = pool.tx(|tx| Ok(*tx.open(small)?));
        assert!(is_damage(&r, oid), "{r:?}");
    }
    let report = pool.scrub(true, |_, _| {}).unwrap();
    assert_eq!(report.damaged.len(), 1);
    assert!(!report.is_clean());
    let s = pool.stats();
    assert_eq!((s.objects_repaired, s.objects_unrecoverable), (0, 1));
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}
