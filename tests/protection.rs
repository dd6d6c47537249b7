//! Protection switches (`Config::replicate_lanes`, `Config::checksums`, with
//! `Config::parity` the paper's configurations): each really turns its protection off,
//! the pool stays crash-consistent without it, and turning it back on restores it.

mod support;

use pgl::{Config, CrashSim, Fault, Oid, Pool};
use std::sync::{Arc, Mutex};

fn path(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-protection-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn without_lane_replication_a_stale_copy_b_never_replays() {
    // Copy B's retire marks damaged while it holds the pool's last record; reopened
    // without lane replication (commits write copy A alone), then copy A destroyed
    // whole: recovery must not replay B's old record over the newer data.
    let p = path("one-copy");
    let cfg = Config::small("repair");
    let lanes = cfg.lanes;
    let lane_size = cfg.lane_size;
    let pool = Pool::create(&p, &cfg).unwrap();
    let root = pool.root::<[u64; 8]>().unwrap();
    pool.tx(|tx| {
        tx.open(root)?[0] = 1;
        Ok(())
    })
    .unwrap();
    for lane in 0..lanes {
        pool.inject(&Fault::LaneScribble {
            lane,
            copy: 1,
            at: 0,
            len: 16,
            seed: lane,
        })
        .unwrap();
    }
    drop(pool);

    let mut one = cfg.clone();
    one.replicate_lanes = false;
    let pool = Pool::open_with(&p, &one).unwrap();
    for v in [2, 3] {
        pool.tx(|tx| {
            tx.open(root)?[0] = v;
            Ok(())
        })
        .unwrap();
    }
    for lane in 0..lanes {
        pool.inject(&Fault::LaneScribble {
            lane,
            copy: 0,
            at: 0,
            len: lane_size,
            seed: 10 + lane,
        })
        .unwrap();
    }
    drop(pool);

    let pool = Pool::open_with(&p, &one).unwrap();
    assert_eq!(pool.get(root).unwrap()[0], 3, "the newest committed value");
    assert_eq!(pool.stats().records_replayed, 0);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn without_lane_replication_torn_retire_marks_never_replay_copy_b() {
    // Reopened without lane replication, copy B of the lane holds the record that set
    // the root to 1 (retired), and commits write records to copy A alone while they
    // store retire marks in both copies without flushing them. A crash while the fourth
    // commit writes its record into copy A: both copies' marks torn (the seq word of the
    // newest mark on media, its check word not), A's record torn. Recovery must not
    // replay B's old record over the two commits acknowledged since.
    let mut one = Config::small("torn-marks");
    one.replicate_lanes = false;
    let sim = CrashSim::new(one.max_size);
    let pool = Pool::create_sim(&sim, &one).unwrap();
    let root = pool.root::<[u64; 8]>().unwrap();
    // Each commit also allocates: it applies under its own fence and stores its retire
    // marks at once (one that only overwrote would leave them to the next fence).
    let set = |pool: &Pool, v: u64| {
        pool.tx(|tx| {
            tx.open(root)?[0] = v;
            tx.alloc(v).map(drop)
        })
        .unwrap()
    };
    set(&pool, 1);
    drop(pool);
    let pool = Pool::open_sim_with(&sim, &one).unwrap();
    set(&pool, 2);
    set(&pool, 3);
    let first = Arc::new(Mutex::new(None));
    let sink = first.clone();
    sim.set_fence_hook(move |s: &CrashSim| {
        sink.lock().unwrap().get_or_insert_with(|| s.crash_point());
    });
    set(&pool, 4);
    sim.clear_fence_hook();
    let geo = pool.info().header.geo;
    drop(pool);
    let cp = first.lock().unwrap().take().unwrap();
    let (old, new) = (cp.image(|_| false), cp.image(|_| true));
    let word = |off: u64| (off / 8) as usize;
    // The lane whose copy A the fourth commit was writing its record into.
    let lane = (0..geo.lanes)
        .find(|&l| {
            let seal = geo.lane_offset(l, 0) + 64;
            old[word(seal)..word(seal + 64)] != new[word(seal)..word(seal + 64)]
        })
        .expect("a lane with a record being written");
    let mut img = old.clone();
    for copy in 0..2 {
        let mark = word(geo.lane_offset(lane, copy));
        assert_ne!(old[mark], new[mark], "copy {copy}'s retire mark is pending");
        img[mark] = new[mark];
    }
    // Copy A: every pending word of the new record but the seal's first (its checksum and
    // magic, at 64): a torn record.
    let a = geo.lane_offset(lane, 0);
    let torn = word(a + 72)..word(a + geo.lane_size);
    img[torn.clone()].copy_from_slice(&new[torn]);
    let dev = CrashSim::from_image(&img, sim.len(), sim.capacity());
    let pool = Pool::open_sim_with(&dev, &one).unwrap();
    assert_eq!(pool.get(root).unwrap()[0], 3, "the newest committed value");
    assert_eq!(pool.stats().records_replayed, 0);
}

#[test]
fn without_checksums_nothing_is_verified_and_turning_them_on_recomputes_them() {
    let p = path("no-sums");
    let mut off = Config::small("sums");
    off.checksums = false;
    let pool = Pool::create(&p, &off).unwrap();
    let objs: Vec<Oid<[u64; 16]>> = (0..50u64)
        .map(|i| pool.tx(|tx| tx.alloc([i; 16])).unwrap())
        .collect();
    for (i, &o) in objs.iter().enumerate().step_by(3) {
        pool.tx(|tx| {
            tx.open(o)?[5] = 1000 + i as u64;
            Ok(())
        })
        .unwrap();
    }
    assert!(
        pool.info().header.flags & 4 != 0,
        "NO_CHECKSUMS is on media"
    );
    // A scribble goes unnoticed: nothing verifies.
    pool.inject(&Fault::ObjectScribble {
        oid: objs[7].raw(),
        at: 16,
        len: 8,
        seed: 1,
    })
    .unwrap();
    let seen = pool.tx(|tx| Ok(tx.open(objs[7])?[0])).unwrap();
    assert_ne!(seen, 7, "the scribbled word is read as it is");
    let report = pool.scrub(true, |_, _| {}).unwrap();
    assert!(report.damaged.is_empty(), "{report:?}");
    assert_eq!(report.objects_checked, 0, "nothing can be verified");
    assert!(matches!(
        pool.verify_objects(|_, _| {}),
        Err(pgl::Error::InvalidConfig { .. })
    ));
    drop(pool);

    // Opened with checksums: every one recomputed over the bytes as they are now.
    let on = Config::small("sums");
    let pool = Pool::open_with(&p, &on).unwrap();
    assert_eq!(pool.info().header.flags & 4, 0, "NO_CHECKSUMS cleared");
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    assert!(pool.verify_parity().unwrap().is_empty());
    for (i, &o) in objs.iter().enumerate() {
        let mut want = [i as u64; 16];
        if i % 3 == 0 {
            want[5] = 1000 + i as u64;
        }
        if i == 7 {
            want[0] = seen;
        }
        assert_eq!(pool.tx(|tx| Ok(*tx.open(o)?)).unwrap(), want, "object {i}");
    }
    // And damage is found (and repaired) again.
    pool.inject(&Fault::ObjectScribble {
        oid: objs[9].raw(),
        at: 20,
        len: 8,
        seed: 2,
    })
    .unwrap();
    assert_eq!(pool.tx(|tx| Ok(tx.open(objs[9])?[1])).unwrap(), 9);
    assert_eq!(pool.stats().objects_repaired, 1);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_pool_without_checksums_stays_without_them_when_a_tool_opens_it() {
    let p = path("keep");
    let mut off = Config::small("keep");
    off.checksums = false;
    let pool = Pool::create(&p, &off).unwrap();
    pool.tx(|tx| tx.alloc([3u64; 4])).unwrap();
    drop(pool);
    let pool = Pool::open_any(&p).unwrap();
    assert!(pool.info().header.flags & 4 != 0, "open_any keeps the mode");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// The byte range of zone `zone`'s metadata copy `copy` that holds chunk-table entries.
fn table_at(pool: &Pool, copy: u64) -> u64 {
    let geo = pool.info().header.geo;
    copy * (geo.chunk_size / 2) + 1024 + 8
}

#[test]
fn a_damaged_zone_metadata_copy_is_rewritten_from_the_other_on_open() {
    let p = path("meta");
    let cfg = Config::small("meta").size(Config::small("meta").geometry().pool_size(4));
    let pool = Pool::create(&p, &cfg).unwrap();
    // Large objects (whole chunks) and runs: chunk-table entries in zone 0.
    let big: Vec<Oid<[u8; 40_000]>> = (0..3)
        .map(|i| pool.tx(|tx| tx.alloc([i as u8; 40_000])).unwrap())
        .collect();
    let small = pool.tx(|tx| tx.alloc([9u64; 4])).unwrap();
    let mut pool = pool;
    for copy in [0, 1] {
        pool.inject(&Fault::MetadataScribble {
            zone: 0,
            at: table_at(&pool, copy),
            len: 24,
            seed: copy + 1,
        })
        .unwrap();
        drop(pool);
        // The damage is on media; the next open finds it.
        pool = Pool::open_with(&p, &cfg).unwrap();
        assert_eq!(pool.stats().metadata_repairs, 1, "copy {copy} rewritten");
    }
    for (i, &o) in big.iter().enumerate() {
        assert_eq!(pool.get(o).unwrap()[39_999], i as u8);
    }
    assert_eq!(*pool.get(small).unwrap(), [9u64; 4]);
    assert!(
        pool.verify_parity().unwrap().is_empty(),
        "a repair changes no parity"
    );
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn concurrent_metadata_changes_keep_both_copies_equal() {
    // One zone, so that both threads' commits change the same zone's metadata words and
    // checksum words (under its metadata locks), not each a zone of its own.
    let p = path("meta-threads");
    let mut cfg = Config::small("meta");
    cfg.rows = 32;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.size;
    assert!(
        cfg.geometry().chunks_per_zone() >= 2 * 6 + 2 + 4,
        "the zone holds the objects both threads keep, with room to spare"
    );
    let pool = Pool::create(&p, &cfg).unwrap();
    std::thread::scope(|s| {
        for t in 0..2u8 {
            let pool = &pool;
            s.spawn(move || {
                for i in 0..60u8 {
                    // Whole-chunk objects change chunk-table entries of the zone each time.
                    let o = pool.tx(|tx| tx.alloc([t ^ i; 40_000])).unwrap();
                    if i % 10 != 0 {
                        pool.tx(|tx| tx.free(o)).unwrap();
                    }
                }
            });
        }
    });
    assert_eq!(pool.info().header.zones, 1, "no zone was added");
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(
        pool.stats().metadata_repairs,
        0,
        "both copies verify and agree"
    );
    assert!(pool.verify_parity().unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_pool_of_format_3_gets_its_zone_metadata_copies_on_open() {
    let p = path("v3");
    let cfg = Config::small("v3").size(Config::small("v3").geometry().pool_size(2));
    let pool = Pool::create(&p, &cfg).unwrap();
    let root = pool.root::<[u64; 4]>().unwrap();
    pool.tx(|tx| {
        tx.open(root)?[1] = 11;
        Ok(())
    })
    .unwrap();
    let big = pool.tx(|tx| tx.alloc([5u8; 40_000])).unwrap();
    let h = pool.info().header;
    drop(pool);

    // What format 3 left: copy B and the checksum words zero, parity over that, version 3.
    let geo = h.geo;
    let mut file = std::fs::read(&p).unwrap();
    for z in 0..h.zones {
        let meta = geo.chunk_offset(z, 0) as usize;
        let half = (geo.chunk_size / 2) as usize;
        file[meta + 8..meta + 16].fill(0);
        file[meta + half..meta + geo.chunk_size as usize].fill(0);
        let (zone, row) = (geo.zone_offset(z) as usize, geo.row_size() as usize);
        let parity = geo.parity_offset(z) as usize;
        for col in 0..row {
            file[parity + col] =
                (0..geo.rows as usize).fold(0, |x, r| x ^ file[zone + r * row + col]);
        }
    }
    let mut old = h.clone();
    old.version = 3;
    let b = geo.header_offset(1) as usize;
    file[..4096].copy_from_slice(&old.encode());
    file[b..b + 4096].copy_from_slice(&old.encode());
    std::fs::write(&p, &file).unwrap();

    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(pool.info().header.version, pgl::FORMAT_VERSION);
    assert_eq!(pool.get(root).unwrap()[1], 11);
    assert_eq!(pool.get(big).unwrap()[123], 5);
    assert!(
        pool.verify_parity().unwrap().is_empty(),
        "the new copies are in parity"
    );
    drop(pool);
    // Both copies now verify and agree: a damaged A is repaired from the new B.
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(pool.stats().metadata_repairs, 0);
    pool.inject(&Fault::MetadataScribble {
        zone: 0,
        at: 0,
        len: 8,
        seed: 4,
    })
    .unwrap();
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(pool.stats().metadata_repairs, 1);
    assert_eq!(pool.get(root).unwrap()[1], 11, "the root word came back");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn scrub_finds_and_rewrites_a_damaged_zone_metadata_copy_while_the_pool_runs() {
    let p = path("meta-scrub");
    let cfg = Config::small("meta").size(Config::small("meta").geometry().pool_size(2));
    let pool = Pool::create(&p, &cfg).unwrap();
    let root = pool.root::<[u64; 4]>().unwrap();
    let big = pool.tx(|tx| tx.alloc([3u8; 40_000])).unwrap();
    for copy in [1, 0] {
        pool.inject(&Fault::MetadataScribble {
            zone: 0,
            at: table_at(&pool, copy),
            len: 16,
            seed: 7 + copy,
        })
        .unwrap();
        let found = pool.scrub(false, |_, _| {}).unwrap();
        assert_eq!(found.metadata_copies_bad, 1, "copy {copy}");
        assert!(!found.is_clean());
        let fixed = pool.scrub(true, |_, _| {}).unwrap();
        assert_eq!(fixed.metadata_copies_fixed, 1);
        assert!(fixed.is_clean(), "{fixed:?}");
        assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    }
    assert!(pool.verify_parity().unwrap().is_empty());
    assert_eq!(pool.get(big).unwrap()[7], 3);
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(
        pool.stats().metadata_repairs,
        0,
        "nothing left for the open to repair"
    );
    assert_eq!(pool.root::<[u64; 4]>().unwrap(), root);
    // Both copies damaged: rebuilt from parity (they lie in other page columns)...
    for copy in [0, 1] {
        pool.inject(&Fault::MetadataScribble {
            zone: 1,
            at: table_at(&pool, copy),
            len: 8,
            seed: 20 + copy,
        })
        .unwrap();
    }
    let r = pool.scrub(true, |_, _| {}).unwrap();
    assert_eq!((r.metadata_copies_bad, r.metadata_copies_fixed), (2, 2));
    assert!(r.is_clean(), "{r:?}");
    drop(pool);
    // ... and, in a pool without parity, reported: never "repaired" from garbage.
    let mut no_parity = cfg.clone();
    no_parity.parity = false;
    let pool = Pool::open_with(&p, &no_parity).unwrap();
    for copy in [0, 1] {
        pool.inject(&Fault::MetadataScribble {
            zone: 1,
            at: table_at(&pool, copy),
            len: 8,
            seed: 40 + copy,
        })
        .unwrap();
    }
    let r = pool.scrub(true, |_, _| {}).unwrap();
    assert_eq!((r.metadata_copies_bad, r.metadata_copies_fixed), (2, 0));
    assert!(
        matches!(r.damaged[..], [(_, pgl::Error::Corrupt { .. })]),
        "{r:?}"
    );
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_commit_over_a_damaged_metadata_word_leaves_parity_right_after_the_repair() {
    // The commit computes its parity update from the damaged bytes; the open that rewrites
    // the copy must reconcile the zone's parity too.
    let p = path("meta-commit-over");
    let cfg = Config::small("meta").size(Config::small("meta").geometry().pool_size(2));
    let pool = Pool::create(&p, &cfg).unwrap();
    pool.inject(&Fault::MetadataScribble {
        zone: 0,
        at: 1024 + 8,
        len: 48,
        seed: 31,
    })
    .unwrap();
    // Whole-chunk objects: their chunk-table entries are the damaged words.
    let big: Vec<Oid<[u8; 40_000]>> = (0..3)
        .map(|i| pool.tx(|tx| tx.alloc([i as u8 + 1; 40_000])).unwrap())
        .collect();
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(pool.stats().metadata_repairs, 1);
    assert!(
        pool.verify_parity().unwrap().is_empty(),
        "parity reconciled"
    );
    for (i, &o) in big.iter().enumerate() {
        assert_eq!(pool.get(o).unwrap()[100], i as u8 + 1);
    }
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_zeroed_zone_metadata_copy_is_not_taken_for_the_good_one() {
    // A zone's metadata copy A fits one page; that page zeroed while the pool was closed
    // (a lost page read back as zeros). A zeroed copy verifies (a new zone is zeros), but
    // it differs from copy B: it is the damaged one, and B must be copied over it, not it
    // over B (which would free every chunk of the zone).
    let p = path("zeroed");
    let cfg = Config::small("meta").size(Config::small("meta").geometry().pool_size(4));
    let geo = cfg.geometry();
    let pool = Pool::create(&p, &cfg).unwrap();
    let mut objs = Vec::new();
    let in_zone_1 = loop {
        let i = objs.len() as u8;
        let o: Oid<[u8; 40_000]> = pool.tx(|tx| tx.alloc([i; 40_000])).unwrap();
        objs.push(o);
        if o.raw() >= geo.zone_offset(1) {
            break o;
        }
        assert!(objs.len() < 20, "an object lands in zone 1");
    };
    assert!(in_zone_1.raw() < geo.zone_offset(2));
    drop(pool);
    support::file_write(&p, geo.chunk_offset(1, 0), &[0u8; 4096]);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(pool.stats().metadata_repairs, 1, "copy A rewritten");
    for (i, &o) in objs.iter().enumerate() {
        assert_eq!(pool.get(o).unwrap()[39_999], i as u8);
    }
    // Its chunk is still allocated: a new object does not land on it.
    let other: Oid<[u8; 40_000]> = pool.tx(|tx| tx.alloc([0xee; 40_000])).unwrap();
    assert_ne!(other.raw(), in_zone_1.raw());
    assert_eq!(pool.get(in_zone_1).unwrap()[0], objs.len() as u8 - 1);
    assert!(pool.scrub(true, |_, _| {}).unwrap().is_clean());
    assert!(pool.verify_parity().unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn both_zone_metadata_copies_rebuilt_on_open_count_as_two_repairs() {
    // `Stats::metadata_repairs` counts copies rewritten, as a scrub counts them: an open
    // that rebuilds both copies of a zone from parity rewrote two, not one.
    let p = path("meta-both-open");
    let cfg = Config::small("meta").size(Config::small("meta").geometry().pool_size(2));
    let pool = Pool::create(&p, &cfg).unwrap();
    let big = pool.tx(|tx| tx.alloc([9u8; 40_000])).unwrap();
    for copy in [0, 1] {
        pool.inject(&Fault::MetadataScribble {
            zone: 0,
            at: table_at(&pool, copy),
            len: 8,
            seed: 60 + copy,
        })
        .unwrap();
    }
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(pool.stats().metadata_repairs, 2, "both copies rewritten");
    assert_eq!(pool.get(big).unwrap()[39_999], 9);
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn turning_parity_back_on_counts_the_columns_it_recomputes() {
    let p = path("parity-back");
    let cfg = Config::small("parity-back");
    let pool = Pool::create(&p, &cfg).unwrap();
    let objs: Vec<Oid<[u8; 4096]>> = (0..8)
        .map(|_| pool.tx(|tx| tx.alloc_zeroed::<[u8; 4096]>()).unwrap())
        .collect();
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(pool.stats().parity_columns_recomputed, 0, "parity was kept");
    drop(pool);
    // A session without parity changes the objects' bytes, each in its own page column
    // or more: their parity no longer agrees.
    let mut no_parity = cfg.clone();
    no_parity.parity = false;
    let pool = Pool::open_with(&p, &no_parity).unwrap();
    for (i, &o) in objs.iter().enumerate() {
        pool.tx(|tx| {
            tx.open(o)?.fill(i as u8 + 1);
            Ok(())
        })
        .unwrap();
    }
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    let n = pool.stats().parity_columns_recomputed;
    assert!(n >= 2, "the changed columns are counted: {n}");
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(pool.stats().parity_columns_recomputed, 0);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}
