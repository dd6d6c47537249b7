//! Verify policies and scrubbing as a program meets them: the counters of `pool.stats()`
//! count each damaged object once, however often scrubs, reads and transactions meet it.

mod support;

use pgl::{Config, Error, Fault, Oid, Pool, VerifyPolicy};
use std::time::{Duration, Instant};

fn path(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-scrub-policy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

type Obj = [u64; 8];

/// Two objects of one page column of one zone: damage to the same bytes of both is beyond
/// parity.
fn same_column(pool: &Pool, cfg: &Config) -> (Oid<Obj>, Oid<Obj>) {
    let geo = cfg.geometry();
    let mut by_col = std::collections::HashMap::new();
    for i in 0..20_000u64 {
        let o = pool.tx(|tx| tx.alloc([i; 8])).unwrap();
        let rel = o.raw() - geo.zones_offset();
        let key = (rel / geo.zone_size(), rel % geo.row_size());
        if let Some(&other) = by_col.get(&key) {
            return (other, o);
        }
        by_col.insert(key, o);
    }
    panic!("no two objects share a page column");
}

/// Damages the same bytes of both objects (beyond parity).
/// Commits (bumping `counter`) until the background scrubber has run `n` more passes.
fn run_scrubs(pool: &Pool, counter: Oid<u64>, n: u64) {
    let start = pool.stats().scrubs;
    // Generous: a loaded machine may not schedule the scrubber for seconds.
    let deadline = Instant::now() + Duration::from_secs(60);
    while pool.stats().scrubs < start + n {
        assert!(Instant::now() < deadline, "the scrubber did not run");
        pool.tx(|tx| {
            *tx.open(counter)? += 1;
            Ok(())
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn damage_both(pool: &Pool, (a, b): (Oid<Obj>, Oid<Obj>)) {
    for (o, seed) in [(a, 1), (b, 2)] {
        pool.inject(&Fault::ObjectScribble {
            oid: o.raw(),
            at: 16,
            len: 8,
            seed,
        })
        .unwrap();
    }
}

#[test]
fn an_object_beyond_repair_is_counted_once_however_often_it_is_met() {
    let p = path("unrec-once");
    let cfg = Config::small("scrub-policy").verify(VerifyPolicy::Conservative);
    let pool = Pool::create(&p, &cfg).unwrap();
    let (a, b) = same_column(&pool, &cfg);
    damage_both(&pool, (a, b));
    for _ in 0..3 {
        let r = pool.scrub(true, |_, _| {}).unwrap();
        assert_eq!(r.damaged.len(), 2, "{r:?}");
    }
    for o in [a, b] {
        for _ in 0..2 {
            assert!(matches!(
                pool.get(o).map(|r| *r),
                Err(Error::ChecksumMismatch { .. })
            ));
            assert!(matches!(
                pool.tx(|tx| Ok(*tx.open(o)?)),
                Err(Error::ChecksumMismatch { .. })
            ));
        }
    }
    let s = pool.stats();
    assert_eq!(
        (s.objects_unrecoverable, s.objects_repaired),
        (2, 0),
        "two damaged objects, met 3 scrubs and 4 reads each: {s:?}"
    );
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn the_background_scrubber_counts_an_object_beyond_repair_once() {
    let p = path("unrec-bg");
    let cfg = Config::small("scrub-policy").verify(VerifyPolicy::Scrub { every_n_tx: 1 });
    let pool = Pool::create(&p, &cfg).unwrap();
    let pair = same_column(&pool, &cfg);
    let counter = pool.tx(|tx| tx.alloc(0u64)).unwrap();
    damage_both(&pool, pair);
    run_scrubs(&pool, counter, 4);
    assert_eq!(pool.stats().objects_unrecoverable, 2, "{:?}", pool.stats());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn without_parity_a_damaged_object_is_counted_once() {
    let p = path("unrec-noparity");
    let pool = Pool::create(&p, &Config::small("scrub-policy").parity(false)).unwrap();
    let a = pool.tx(|tx| tx.alloc([1u64; 8])).unwrap();
    pool.inject(&Fault::BitFlips {
        offset: a.raw() + 8,
        bits: 1,
        seed: 3,
    })
    .unwrap();
    for _ in 0..2 {
        assert_eq!(pool.scrub(true, |_, _| {}).unwrap().damaged.len(), 1);
        assert!(matches!(
            pool.tx(|tx| Ok(*tx.open(a)?)),
            Err(Error::ChecksumMismatch { .. })
        ));
    }
    assert_eq!(pool.stats().objects_unrecoverable, 1);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_zone_metadata_copy_the_background_scrubber_rewrites_is_counted() {
    let p = path("meta-bg");
    let cfg = Config::small("scrub-policy").verify(VerifyPolicy::Scrub { every_n_tx: 1 });
    let pool = Pool::create(&p, &cfg).unwrap();
    let counter = pool.tx(|tx| tx.alloc(0u64)).unwrap();
    let geo = pool.info().header.geo;
    // Copy B's chunk table (copy A is the first half of the metadata chunk).
    pool.inject(&Fault::MetadataScribble {
        zone: 0,
        at: geo.chunk_size / 2 + 1024 + 8,
        len: 16,
        seed: 9,
    })
    .unwrap();
    run_scrubs(&pool, counter, 2);
    assert!(
        pool.scrub(false, |_, _| {}).unwrap().is_clean(),
        "rewritten"
    );
    assert_eq!(pool.stats().metadata_repairs, 1, "{:?}", pool.stats());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_long_held_ref_does_not_make_the_scrubber_stall_other_transactions() {
    // One thread keeps a `Ref` to one object; the scrubber must wait for it (a scrub
    // freezes the pool), but meanwhile transactions on every other object go on.
    let p = path("ref-stall");
    let cfg = Config::small("scrub-policy").verify(VerifyPolicy::Scrub { every_n_tx: 1 });
    let pool = Pool::create(&p, &cfg).unwrap();
    let objs: Vec<Oid<u64>> = (0..64)
        .map(|i| pool.tx(|tx| tx.alloc(i)).unwrap())
        .collect();
    let (held, others) = objs.split_last().unwrap();
    // The `Ref` is kept until the transactions are done (at least `busy` of them), not for
    // a set time that a descheduled thread could outlive. A scrub that stalled them would
    // hold them until it gave up waiting for the `Ref` (`repair::WAIT`, 10 s): the bound
    // is half that, far above what a loaded machine takes for one transaction.
    let busy = Duration::from_millis(800);
    std::thread::scope(|s| {
        let pool = &pool;
        let (ready, got) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        s.spawn(move || {
            let r = pool.get(*held).unwrap();
            ready.send(()).unwrap();
            let _ = released.recv_timeout(Duration::from_secs(60));
            drop(r);
        });
        got.recv().unwrap();
        let start = Instant::now();
        let mut worst = Duration::ZERO;
        for o in others.iter().cycle() {
            if start.elapsed() >= busy {
                break;
            }
            let t = Instant::now();
            pool.tx(|tx| {
                *tx.open(*o)? += 1;
                Ok(())
            })
            .unwrap();
            worst = worst.max(t.elapsed());
        }
        release.send(()).unwrap();
        assert!(
            worst < Duration::from_secs(5),
            "a transaction on another object waited {worst:?} for the scrub"
        );
    });
    // The scrub the Ref held up ran once it was gone.
    let deadline = Instant::now() + Duration::from_secs(60);
    while pool.stats().scrubs == 0 {
        assert!(Instant::now() < deadline, "the scrubber never completed");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_bitmap_word_the_background_scrubber_cannot_rebuild_takes_its_run_out_of_service() {
    // Damage beyond parity that the scrubber finds shows in `stats()` at once, and no
    // transaction has to fail on it first.
    let p = path("bitmap-bg");
    let cfg = Config::small("scrub-policy").verify(VerifyPolicy::Scrub { every_n_tx: 1 });
    let pool = Pool::create(&p, &cfg).unwrap();
    let objs: Vec<Oid<Obj>> = (0..20u64)
        .map(|i| pool.tx(|tx| tx.alloc([i; 8])).unwrap())
        .collect();
    let w = support::bitmap_word_of(&pool, objs[0].raw(), std::mem::size_of::<Obj>() as u64);
    for (offset, seed) in [(w, 41), (support::parity_of(&pool, w), 42)] {
        pool.inject(&Fault::Scribble {
            offset,
            len: 8,
            seed,
        })
        .unwrap();
    }
    let counter = pool.tx(|tx| tx.alloc(0u64)).unwrap();
    run_scrubs(&pool, counter, 2);
    assert_eq!(pool.stats().runs_quarantined, 1, "{:?}", pool.stats());
    for i in 0..50u64 {
        pool.tx(|tx| tx.alloc([i; 8])).unwrap();
    }
    for (i, o) in objs.iter().enumerate() {
        assert_eq!(*pool.get(*o).unwrap(), [i as u64; 8]);
    }
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn background_scrubs_that_leave_damage_are_counted() {
    let p = path("unclean");
    let cfg = Config::small("scrub-policy").verify(VerifyPolicy::Scrub { every_n_tx: 1 });
    let pool = Pool::create(&p, &cfg).unwrap();
    let pair = same_column(&pool, &cfg);
    let counter = pool.tx(|tx| tx.alloc(0u64)).unwrap();
    run_scrubs(&pool, counter, 2);
    assert_eq!(pool.stats().scrubs_unclean, 0, "nothing damaged yet");
    damage_both(&pool, pair);
    run_scrubs(&pool, counter, 3);
    let s = pool.stats();
    assert!(
        s.scrubs_unclean >= 2 && s.scrubs_unclean <= s.scrubs - 2,
        "every scrub since the damage left it: {s:?}"
    );
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}
