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
type Mid = [u8; 3000];
type Large = [u8; 100_000];

/// Scribbles `len` random bytes at byte `at` of each object of `oids` (from its header's
/// start), object `i` with seed `i + 1`.
fn scribble_each(pool: &Pool, oids: &[u64], at: u64, len: u64) {
    for (i, &oid) in oids.iter().enumerate() {
        let seed = i as u64 + 1;
        pool.inject(&Fault::ObjectScribble { oid, at, len, seed })
            .unwrap();
    }
}

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
        Err(Error::Corrupt { what, offset, .. }) => *what == "object header" && *offset == oid - 16,
        _ => false,
    }
}

/// Reads the three objects of `pool_of_three` every way a program can; each must report
/// damage, not a wrong type.
fn every_read_reports_damage(pool: &Pool, oids: [u64; 3]) {
    let [s, m, l] = oids;
    let (s, m, l) = (
        Oid::<Small>::from_raw(s),
        Oid::<Mid>::from_raw(m),
        Oid::<Large>::from_raw(l),
    );
    let r = pool.get(s).map(|_| ());
    assert!(is_damage(&r, s.raw()), "pool.get: {r:?}");
    let r = pool.tx(|tx| tx.open(m).map(|_| ()));
    assert!(is_damage(&r, m.raw()), "tx.open: {r:?}");
    let r = pool.tx(|tx| tx.get(l).map(|_| ()));
    assert!(is_damage(&r, l.raw()), "tx.get: {r:?}");
    let r = pool.open_mut(s).map(|_| ());
    assert!(is_damage(&r, s.raw()), "pool.open_mut: {r:?}");
}

#[test]
fn a_damaged_header_without_parity_is_reported_as_damage_not_as_a_wrong_oid() {
    // The size field, the type id, and both.
    for (k, (at, len)) in [(0u64, 8u64), (8, 4), (0, 12)].into_iter().enumerate() {
        let (p, pool, oids) = pool_of_three(&format!("np{k}"), false);
        scribble_each(&pool, &oids, at, len);
        every_read_reports_damage(&pool, oids);
        let msg = pool
            .get(Oid::<Small>::from_raw(oids[0]))
            .err()
            .unwrap()
            .to_string();
        assert!(!msg.contains("check which Oid you used"), "{msg}");
        assert_eq!(
            pool.stats().objects_unrecoverable,
            3,
            "at {at}, {len} bytes"
        );
        drop(pool);
        std::fs::remove_file(&p).unwrap();
    }
}

#[test]
fn a_damaged_root_header_without_parity_is_reported_as_damage() {
    let p = path("root");
    let pool = Pool::create(&p, &Config::small("rep").parity(false)).unwrap();
    let r = pool.root::<Small>().unwrap();
    pool.inject(&Fault::ObjectScribble {
        oid: r.raw(),
        at: 8,
        len: 4,
        seed: 1,
    })
    .unwrap();
    let got = pool.root::<Small>();
    assert!(is_damage(&got, r.raw()), "{got:?}");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_header_damaged_with_its_parity_is_reported_as_damage() {
    let (p, pool, oids) = pool_of_three("both", true);
    scribble_each(&pool, &oids, 8, 4);
    for (i, &oid) in oids.iter().enumerate() {
        // Other random bytes over the same bytes of its parity page.
        let offset = support::parity_of(&pool, oid - 8);
        pool.inject(&Fault::Scribble {
            offset,
            len: 4,
            seed: i as u64 + 11,
        })
        .unwrap();
    }
    every_read_reports_damage(&pool, oids);
    let s = pool.stats();
    assert_eq!((s.objects_repaired, s.objects_unrecoverable), (0, 3));
    drop(pool);
    std::fs::remove_file(&p).unwrap();
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
fn a_wrong_type_read_does_not_wait_for_other_transactions() {
    // A repair freezes the pool: it waits for every transaction in flight (up to 10 s),
    // then keeps new ones out. A read with the wrong type of an intact object has nothing
    // to repair: it must be told so by the object's checksum, without the freeze, so it
    // returns while another thread's transaction stays open.
    let (p, pool, [s, m, _]) = pool_of_three("wrong-busy", true);
    let pool = std::sync::Arc::new(pool);
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (done_tx, done) = std::sync::mpsc::channel::<()>();
    let other = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            pool.tx(|tx| {
                tx.open(Oid::<Mid>::from_raw(m))?[0] = 9;
                ready_tx.send(()).unwrap();
                done.recv().unwrap();
                Ok(())
            })
            .unwrap();
        })
    };
    ready.recv().unwrap();
    let wrong = Oid::<[u8; 32]>::from_raw(s);
    let t = std::time::Instant::now();
    assert!(matches!(pool.get(wrong), Err(Error::TypeMismatch { .. })));
    let r = pool.tx(|tx| tx.open(wrong).map(|_| ()));
    assert!(matches!(r, Err(Error::TypeMismatch { .. })), "{r:?}");
    let took = t.elapsed();
    done_tx.send(()).unwrap();
    other.join().unwrap();
    // Against the freeze's 10 s wait, not a performance bound: both reads return at once
    // unless one waits for the other thread.
    assert!(
        took < std::time::Duration::from_secs(5),
        "the wrong-type reads waited {took:?} for the other transaction"
    );
    let st = pool.stats();
    assert_eq!((st.objects_repaired, st.objects_unrecoverable), (0, 0));
    assert_eq!(pool.get(Oid::<Mid>::from_raw(m)).unwrap()[0], 9);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn damage_that_its_parity_agrees_with_counts_as_unrecoverable_once() {
    // The same bits flipped in an object and in its parity page: the column still XORs to
    // zero, so parity cannot see which row is wrong (the docs' "a row and the parity page").
    let (p, pool, oids) = pool_of_three("agree", true);
    let oid = oids[0];
    for offset in [oid + 8, support::parity_of(&pool, oid + 8)] {
        pool.inject(&Fault::BitFlips {
            offset,
            bits: 1,
            seed: 4,
        })
        .unwrap();
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

#[test]
fn a_scrub_repairs_an_object_whose_size_field_was_scribbled() {
    let (p, pool, oids) = pool_of_three("scrub-size", true);
    scribble_each(&pool, &oids, 0, 8);
    let r = pool.scrub(true, |_, _| {}).unwrap();
    assert!(r.is_clean(), "{r:?}");
    assert_eq!(r.objects_repaired, 3, "{r:?}");
    assert_eq!(pool.stats().objects_repaired, 3);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}
