//! Damaged redo-lane copies are told apart from copies that legitimately differ: a pool
//! closed cleanly whose lane copy holds a retire mark or a seal no commit leaves counts it
//! in `Stats::lane_copies_damaged` (what `pgl check` reports); copy B of a pool without
//! lane replication, and copies a crash left different, are rewritten (`lane_repairs`)
//! without being called damaged.

use pgl::{Config, CrashSim, Fault, Pool};
use std::sync::{Arc, Mutex};

const LAYOUT: &str = "lane-damage";

fn path(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("pgl-lane-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn a_damaged_lane_copy_is_counted_and_repaired() {
    let p = path("damaged");
    let cfg = Config::small(LAYOUT);
    let pool = Pool::create(&p, &cfg).unwrap();
    pool.tx(|tx| tx.alloc(1u64)).unwrap();
    let geo = pool.info().header.geo;
    let mark = |lane: u64, copy: u64| {
        let at = geo.lane_offset(lane, copy) as usize;
        std::fs::read(&p).unwrap()[at..at + 16].to_vec()
    };
    let used = (0..2)
        .find(|&l| mark(l, 0) != [0; 16])
        .expect("a lane committed");
    let unused = 1 - used;
    assert_eq!(mark(unused, 1), [0; 16]);
    // The used lane's seal in copy 0 (copy B holds the same record), then the other
    // lane's retire mark in copy 0 (never used: both copies zeros, neither is newer).
    for (lane, copy, at, len) in [(used, 0, 64, 8), (unused, 0, 0, 16)] {
        let seed = 9;
        let f = Fault::LaneScribble {
            lane,
            copy,
            at,
            len,
            seed,
        };
        pool.inject(&f).unwrap();
    }
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    let s = pool.stats();
    assert_eq!((s.lane_repairs, s.lane_copies_damaged), (2, 2), "{s:?}");
    drop(pool);
    for copy in 0..2 {
        assert_eq!(
            mark(unused, copy),
            [0; 16],
            "copy {copy}: repaired from the good copy, not the junk copied over it"
        );
    }
    let pool = Pool::open_with(&p, &cfg).unwrap();
    let s = pool.stats();
    assert_eq!((s.lane_repairs, s.lane_copies_damaged), (0, 0), "{s:?}");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn copy_b_without_lane_replication_is_not_damage() {
    let p = path("unreplicated");
    let mut cfg = Config::small(LAYOUT);
    cfg.replicate_lanes = false;
    let pool = Pool::create(&p, &cfg).unwrap();
    for i in 0..4u64 {
        pool.tx(|tx| tx.alloc(i)).unwrap();
    }
    drop(pool);
    for replicate in [false, true] {
        cfg.replicate_lanes = replicate;
        let pool = Pool::open_with(&p, &cfg).unwrap();
        let s = pool.stats();
        assert_eq!(s.lane_copies_damaged, 0, "replicate {replicate}: {s:?}");
        pool.tx(|tx| tx.alloc(9u64)).unwrap();
        drop(pool);
    }
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn lane_copies_a_crash_left_different_are_not_damage() {
    let cfg = Config::small(LAYOUT);
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let points = Arc::new(Mutex::new(Vec::new()));
    let pts = points.clone();
    sim.set_fence_hook(move |s| pts.lock().unwrap().push(s.crash_point()));
    for i in 0..3u64 {
        pool.tx(|tx| tx.alloc([i; 40])).unwrap();
    }
    sim.clear_fence_hook();
    std::mem::forget(pool); // a crash: no clean close
    let points = std::mem::take(&mut *points.lock().unwrap());
    let mut rng = 0x5eed_u64;
    let (mut images, mut rewritten) = (0, 0);
    for c in &points {
        for _ in 0..24 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let seed = rng;
            let dev = c.device(cfg.max_size, |i| (seed >> (i % 61)) & 1 == 1);
            let pool = Pool::open_sim(&dev, LAYOUT).unwrap();
            let s = pool.stats();
            assert_eq!(s.lane_copies_damaged, 0, "fence {}: {s:?}", c.fence());
            rewritten += s.lane_repairs;
            images += 1;
        }
    }
    assert!(
        images > 0 && rewritten > 0,
        "{rewritten} rewrites in {images} images"
    );
}
