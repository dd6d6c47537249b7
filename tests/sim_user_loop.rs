//! `CrashSim` as a user drives it to test a structure of their own: a pair of counters
//! whose sum a transaction keeps constant, crashed at every fence of the transaction that
//! moves an amount from one to the other, every crash image recovered and checked.

use pgl::prelude::*;
use pgl::{CrashPoint, CrashSim};
use std::sync::{Arc, Mutex};

#[derive(Persistent)]
#[repr(C)]
struct Pair {
    a: u64,
    b: u64,
}

/// Runs `f`, capturing a crash point at every fence it issues and one after it returns.
fn crash_points(sim: &CrashSim, f: impl FnOnce()) -> Vec<CrashPoint> {
    let points = Arc::new(Mutex::new(Vec::new()));
    let sink = points.clone();
    sim.set_fence_hook(move |s| sink.lock().unwrap().push(s.crash_point()));
    f();
    sim.clear_fence_hook();
    let mut points = std::mem::take(&mut *points.lock().unwrap());
    points.push(sim.crash_point());
    points
}

#[test]
fn every_crash_image_of_a_transfer_keeps_the_sum() {
    let cfg = Config::small("pair");
    let sim = CrashSim::new(cfg.size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Pair>().unwrap();
    pool.tx(|tx| {
        tx.open(root)?.a = 100;
        Ok(())
    })
    .unwrap();
    let points = crash_points(&sim, || {
        pool.tx(|tx| {
            let mut p = tx.open(root)?;
            p.a -= 30;
            p.b += 30;
            Ok(())
        })
        .unwrap()
    });
    assert!(points.len() >= 2, "a logged commit fences at least once");
    let mut seen = std::collections::BTreeSet::new();
    for cp in &points {
        let n = cp.pending();
        // None, all, each word alone, and all but each one.
        let mut subsets: Vec<Box<dyn Fn(usize) -> bool>> =
            vec![Box::new(|_| false), Box::new(|_| true)];
        for k in 0..n {
            subsets.push(Box::new(move |i| i == k));
            subsets.push(Box::new(move |i| i != k));
        }
        for pick in subsets {
            let dev = cp.device(0, pick);
            let pool = Pool::open_sim(&dev, "pair").unwrap();
            let root = pool.root::<Pair>().unwrap();
            let p = pool.get(root).unwrap();
            assert_eq!(p.a + p.b, 100, "crash image at fence {}", cp.fence());
            if std::ptr::eq(cp, points.last().unwrap()) {
                assert_eq!((p.a, p.b), (70, 30), "the transaction returned: durable");
            }
            seen.insert((p.a, p.b));
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        vec![(70, 30), (100, 0)],
        "both the state before and the state after are reachable"
    );
}

#[test]
fn a_device_sized_for_the_default_config_holds_a_pool() {
    // `Config::new`'s `max_size` is 1 TiB: a device that may grow that far costs only
    // what the pool on it uses (it aborted the process, allocating 1 TiB).
    let mut cfg = Config::small("pair");
    cfg.max_size = Config::new("pair").max_size;
    assert_eq!(cfg.max_size, 1 << 40);
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Pair>().unwrap();
    pool.tx(|tx| {
        tx.open(root)?.b = 7;
        Ok(())
    })
    .unwrap();
    let cp = sim.crash_point();
    drop(pool);
    let dev = cp.device(0, |_| true);
    let pool = Pool::open_sim(&dev, "pair").unwrap();
    assert_eq!(pool.get(root).unwrap().b, 7);
}
