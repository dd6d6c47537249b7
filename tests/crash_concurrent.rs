//! Crash consistency with two threads committing at once, on two lanes: the case the
//! single-threaded crash suite cannot reach, where one lane's record may be applied but not
//! yet retired on media while the other lane commits over the same object (the retire
//! ordering of `tx/lane.rs`).
//!
//! Each transaction bumps a shared counter object `S = [count, thread, i, _]` and writes its
//! thread's progress object `P_t = [i, count, _, _]`; every third one also allocates and
//! frees a scratch object, so the heap metadata words change on both lanes too. Because
//! every transaction opens `S`, they commit one after another, and a crash image must hold
//! a prefix of that order: after recovery `S.count == P_0.i + P_1.i`, `S` names the thread
//! whose `P_t.count` is the largest, and `P_t.i` is at least what thread `t` had seen
//! acknowledged when the crash point was captured. Crash points are captured at every fence
//! of either thread (`CrashSim` persists, at a fence, only the fencing thread's flushes).
//!
//! `PGL_CRASH_STATES` raises the number of crash images checked (default 10,000).

mod common;

use common::crash::{config, target_states, Rng, DEFAULT_STATES, LAYOUT};
use pgl::{CrashPoint, CrashSim, Oid, Pool};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const THREADS: usize = 2;

/// Root: the shared object and one progress object per thread.
type Root = [u64; 4];

/// Crash points, each with the progress acknowledged when it was captured.
type Points = Arc<Mutex<Vec<(CrashPoint, [u64; THREADS])>>>;

/// One transaction of thread `t`, its `i`-th.
fn step(pool: &Pool, s: Oid<[u64; 4]>, p: Oid<[u64; 4]>, t: u64, i: u64) -> pgl::Result<()> {
    pool.tx(|tx| {
        let mut shared = tx.open(s)?;
        let count = shared[0] + 1;
        shared.place().set([count, t, i, 0]);
        tx.open(p)?.place().set([i, count, 0, 0]);
        if i % 3 == 0 {
            let scratch = tx.alloc([t, i, 0u64, 0u64])?;
            tx.free(scratch)?;
        }
        Ok(())
    })
}

/// What a recovered pool must satisfy, given the acknowledged progress at the crash point.
fn check(pool: &Pool, root: Oid<Root>, acked: [u64; THREADS]) -> Result<(), String> {
    let r = *pool.get(root).map_err(|e| format!("root: {e}"))?;
    let s = *pool
        .get(Oid::<[u64; 4]>::from_raw(r[0]))
        .map_err(|e| format!("S: {e}"))?;
    let mut ps = [[0u64; 4]; THREADS];
    for t in 0..THREADS {
        ps[t] = *pool
            .get(Oid::<[u64; 4]>::from_raw(r[1 + t]))
            .map_err(|e| format!("P_{t}: {e}"))?;
        if ps[t][0] < acked[t] {
            return Err(format!(
                "thread {t}: {} transactions survived, {} were acknowledged",
                ps[t][0], acked[t]
            ));
        }
    }
    let total: u64 = ps.iter().map(|p| p[0]).sum();
    if s[0] != total {
        return Err(format!(
            "S.count {} but the threads' progress adds up to {total} ({ps:?}): a transaction \
             is half there, or an older record replayed over a newer one",
            s[0]
        ));
    }
    if total > 0 {
        let (t, p) = ps
            .iter()
            .enumerate()
            .max_by_key(|(_, p)| p[1])
            .expect("two threads");
        if p[1] != s[0] || s[1] != t as u64 || s[2] != p[0] {
            return Err(format!(
                "S = {s:?} is not the last transaction of the prefix (P = {ps:?})"
            ));
        }
    }
    // Every scratch object is freed by the transaction that allocates it: in any prefix
    // of the commit order the heap holds exactly the root, `S` and the progress objects.
    let mut got: Vec<u64> = pool
        .objects()
        .map_err(|e| format!("objects: {e}"))?
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    got.sort_unstable();
    let mut want = vec![root.raw(), r[0], r[1], r[2]];
    want.sort_unstable();
    if got != want {
        return Err(format!(
            "allocated objects {got:x?}, expected only the root, S and P ({want:x?}): a \
             scratch object leaked, or one of them was lost"
        ));
    }
    let bad = pool.verify_objects(|_, _| {}).map_err(|e| e.to_string())?;
    if !bad.is_empty() {
        return Err(format!("damaged objects after recovery: {bad:?}"));
    }
    parity_consistent(pool)
}

/// Zone parity after recovery: the commits of both lanes kept it, recovery recomputed the
/// zones they marked.
fn parity_consistent(pool: &Pool) -> Result<(), String> {
    match pool.verify_parity() {
        Ok(bad) if bad.is_empty() => Ok(()),
        Ok(bad) => Err(format!("parity disagrees with the rows at pages {bad:x?}")),
        Err(e) => Err(format!("verify_parity: {e}")),
    }
}

/// Explores `points`, checking each recovered image with `check`; returns the number of
/// images.
fn explore(
    points: &[(CrashPoint, [u64; THREADS])],
    capacity: u64,
    what: &str,
    check: impl Fn(&Pool, [u64; THREADS]) -> Result<(), String>,
) -> u64 {
    let target = target_states();
    let per_point = (target as usize).div_ceil(points.len().max(1)).max(2);
    let mut rng = Rng::new(0xc0ffee);
    let (mut states, mut violations) = (0u64, Vec::new());
    for (k, (cp, acked)) in points.iter().enumerate() {
        for j in 0..per_point {
            // The first two images of each point: nothing pending reached media, and
            // everything did; then random subsets.
            let image = match j {
                0 => cp.device(capacity, |_| false),
                1 => cp.device(capacity, |_| true),
                _ => cp.device(capacity, |_| rng.chance(500)),
            };
            states += 1;
            let verdict = match Pool::open_sim(&image, LAYOUT) {
                Ok(p) => check(&p, *acked),
                Err(e) => Err(format!("recovery failed: {e}")),
            };
            if let Err(e) = verdict {
                violations.push(format!(
                    "crash point {k} (fence {}, {} pending words), image {j}: {e}",
                    cp.fence(),
                    cp.pending()
                ));
            }
        }
    }
    // Straight to the process's stderr, which the harness does not capture, so that CI
    // logs show the counts of passing runs too (as the crash suite does).
    let line = format!(
        "crash states explored: {states} (op: {what}; {} crash points)\n",
        points.len()
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    assert!(
        violations.is_empty(),
        "{} violation(s), first: {:#?}",
        violations.len(),
        &violations[..violations.len().min(5)]
    );
    assert!(
        states >= target.min(DEFAULT_STATES),
        "explored only {states} states"
    );
    states
}

/// Installs a fence hook that captures a crash point and the acknowledged progress.
fn capture(sim: &CrashSim, acked: &Arc<[AtomicU64; THREADS]>) -> Points {
    let points: Points = Arc::default();
    let (sink, seen) = (points.clone(), acked.clone());
    sim.set_fence_hook(move |sim: &CrashSim| {
        // The acknowledged progress is read before the image: whatever was acknowledged by
        // then is durable in the image captured after.
        let a = [
            seen[0].load(Ordering::SeqCst),
            seen[1].load(Ordering::SeqCst),
        ];
        sink.lock().unwrap().push((sim.crash_point(), a));
    });
    points
}

/// Thread 0 allocates objects (recording each in its progress object) and hands their oids
/// to thread 1, which frees them (recording each in its own). The two threads' records share
/// no object: they meet only in the heap metadata of thread 0's run, so this checks that
/// metadata words count as touched chunks in the retire ordering. After recovery the
/// allocated objects must be exactly those thread 0 allocated in its surviving prefix minus
/// those thread 1 freed in its surviving prefix.
#[test]
fn crash_handoff_allocs_and_frees_across_lanes() {
    let mut cfg = config(2);
    cfg.lanes = 2;
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    // Progress objects of different sizes: different size classes, hence different run
    // chunks from each other and from the handed-off objects.
    let (p0, p1) = pool
        .tx(|tx| {
            let p0 = tx.alloc([0u64; 8])?;
            let p1 = tx.alloc([0u64; 16])?;
            tx.open(root)?.place().set([p0.raw(), p1.raw(), 0, 0]);
            Ok((p0, p1))
        })
        .unwrap();
    let fixed: Vec<u64> = vec![root.raw(), p0.raw(), p1.raw()];

    let acked: Arc<[AtomicU64; THREADS]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let points = capture(&sim, &acked);
    let per_thread = 60u64;
    let oids: Mutex<Vec<u64>> = Mutex::default();
    let (tx_oid, rx_oid) = std::sync::mpsc::channel::<u64>();
    std::thread::scope(|scope| {
        let (pool, acked, oids) = (&pool, &acked, &oids);
        scope.spawn(move || {
            for i in 1..=per_thread {
                let o = pool
                    .tx(|tx| {
                        let o = tx.alloc([i; 3])?;
                        tx.open(p0)?.place().project(|p| &p[0]).set(i);
                        Ok(o)
                    })
                    .expect("alloc tx");
                oids.lock().unwrap().push(o.raw());
                acked[0].store(i, Ordering::SeqCst);
                tx_oid.send(o.raw()).expect("send");
            }
        });
        scope.spawn(move || {
            for j in 1..=per_thread {
                let o = Oid::<[u64; 3]>::from_raw(rx_oid.recv().expect("recv"));
                pool.tx(|tx| {
                    tx.free(o)?;
                    tx.open(p1)?.place().project(|p| &p[0]).set(j);
                    Ok(())
                })
                .expect("free tx");
                acked[1].store(j, Ordering::SeqCst);
            }
        });
    });
    sim.clear_fence_hook();
    drop(pool);
    let oids = oids.into_inner().unwrap();
    let points = std::mem::take(&mut *points.lock().unwrap());
    explore(
        &points,
        cfg.size,
        "alloc on one lane, free on the other",
        |pool, acked| {
            let n0 = pool.get(p0).map_err(|e| e.to_string())?[0];
            let n1 = pool.get(p1).map_err(|e| e.to_string())?[0];
            if n0 < acked[0] || n1 < acked[1] {
                return Err(format!(
                    "progress ({n0}, {n1}) behind acknowledged {acked:?}"
                ));
            }
            if n1 > n0 {
                return Err(format!("{n1} frees survived but only {n0} allocations"));
            }
            let mut want: Vec<u64> = fixed.clone();
            want.extend(&oids[n1 as usize..n0 as usize]);
            want.sort_unstable();
            let mut got: Vec<u64> = pool
                .objects()
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|(o, _)| o)
                .collect();
            got.sort_unstable();
            if got != want {
                return Err(format!(
                    "allocated {got:x?}, expected {want:x?} (progress {n0} allocs, {n1} frees)"
                ));
            }
            for &o in &oids[n1 as usize..n0 as usize] {
                let v = *pool
                    .get(Oid::<[u64; 3]>::from_raw(o))
                    .map_err(|e| format!("{o:#x}: {e}"))?;
                if v[0] == 0 || v != [v[0]; 3] {
                    return Err(format!("object {o:#x} holds {v:?}"));
                }
            }
            parity_consistent(pool)
        },
    );
}

#[test]
fn crash_two_threads_on_two_lanes() {
    let mut cfg = config(2);
    cfg.lanes = 2;
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    pool.tx(|tx| {
        let s = tx.alloc([0u64; 4])?;
        let p0 = tx.alloc([0u64; 4])?;
        let p1 = tx.alloc([0u64; 4])?;
        tx.open(root)?.place().set([s.raw(), p0.raw(), p1.raw(), 0]);
        Ok(())
    })
    .unwrap();
    let r = *pool.get(root).unwrap();
    let s = Oid::<[u64; 4]>::from_raw(r[0]);

    let acked: Arc<[AtomicU64; THREADS]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let points = capture(&sim, &acked);
    let per_thread = 60;
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (pool, acked) = (&pool, &acked);
            let p = Oid::<[u64; 4]>::from_raw(r[1 + t]);
            scope.spawn(move || {
                for i in 1..=per_thread {
                    step(pool, s, p, t as u64, i).expect("step");
                    acked[t].store(i, Ordering::SeqCst);
                }
            });
        }
    });
    sim.clear_fence_hook();
    check(&pool, root, [per_thread; THREADS]).expect("the live pool");
    drop(pool);

    let points = std::mem::take(&mut *points.lock().unwrap());
    explore(
        &points,
        cfg.size,
        "two threads bumping one counter",
        |pool, acked| check(pool, root, acked),
    );
}
