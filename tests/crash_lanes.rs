//! Crash consistency of a stream of operations spread over two redo lanes, one at a time:
//! each op runs on one of two worker threads, each bound to its own lane, chosen at random.
//! A record a lane applied but whose retire mark is not durable must never replay over
//! what the other lane committed since (the retire ordering of `tx/lane.rs`), whether the
//! later commit is logged, direct (a lone bitmap word, no record) or makes new objects in
//! blocks the older record wrote. Each op is explored as in `tests/crash_suite.rs`.
//!
//! `PGL_CRASH_STATES` raises the number of crash images checked (default 10,000).

mod common;
mod support;

use common::crash::*;
use pgl::{Oid, Pool};
use std::sync::mpsc;

type Job = Box<dyn FnOnce(&Pool) + Send>;

/// A thread that runs jobs on its own redo lane (its lane hint, fixed by the order in
/// which the two workers first take a lane).
struct Worker {
    jobs: Option<mpsc::Sender<(Job, mpsc::Sender<()>)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn new(pool: &Pool) -> Worker {
        let pool = pool.clone();
        let (tx, rx) = mpsc::channel::<(Job, mpsc::Sender<()>)>();
        let thread = std::thread::spawn(move || {
            for (job, done) in rx {
                job(&pool);
                let _ = done.send(());
            }
        });
        let w = Worker {
            jobs: Some(tx),
            thread: Some(thread),
        };
        // Takes its lane now: the next worker's first lane is the next one.
        w.run(|pool| {
            pool.tx(|_| Ok(())).expect("empty tx");
        });
        w
    }

    /// Runs `f` on the worker and waits for it.
    fn run<R: Send + 'static>(&self, f: impl FnOnce(&Pool) -> R + Send + 'static) -> R {
        let (rtx, rrx) = mpsc::channel();
        let (dtx, drx) = mpsc::channel();
        let job: Job = Box::new(move |pool| {
            let _ = rtx.send(f(pool));
        });
        self.jobs
            .as_ref()
            .expect("worker alive")
            .send((job, dtx))
            .expect("send job");
        drx.recv().expect("job done");
        rrx.recv().expect("job result")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One op of the stream.
fn step(
    run: &mut Run<'_>,
    workers: &[Worker; 2],
    lane: usize,
    orphans: &mut Vec<(u64, Vec<u8>)>,
    large: bool,
) {
    let w = &workers[lane];
    let used = run.model.used();
    let pick = run.rng.below(100);
    if pick < 45 && !used.is_empty() {
        // Overwrite a range of one object (or of two, in one transaction): the root is not
        // touched, so two lanes' records meet only where they write the same objects.
        let n = if run.rng.chance(250) && used.len() > 1 {
            2
        } else {
            1
        };
        let mut parts = Vec::new();
        for _ in 0..n {
            let slot = run.rng.pick(&used);
            if parts.iter().any(|&(s, _, _, _)| s == slot) {
                continue;
            }
            let size = run.model.size(slot);
            let at = run.rng.below(size);
            let span = run.rng.pick(&[8, 64, 300, 5000]);
            let end = run.rng.range(at + 1, size.min(at + 1 + span));
            let data = run.rng.bytes(end - at);
            let oid = slot_oid(&run.pool, run.root, slot);
            parts.push((slot, oid, size, (at, data)));
        }
        let label = format!(
            "lane {lane}: write {}",
            parts
                .iter()
                .map(|(s, _, n, (at, d))| format!("slot {s} ({n} B) [{at}, {})", at + d.len()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        run.op("write", label, |_, _, m, _| {
            let p = parts.clone();
            w.run(move |pool| {
                pool.tx(|tx| {
                    for (_, oid, size, (at, data)) in &p {
                        tx_write(tx, *oid, *size, *at, data)?;
                    }
                    Ok(())
                })
                .expect("write tx")
            });
            for (slot, _, _, (at, data)) in &parts {
                m.write(*slot, *at, data);
            }
        });
    } else if pick < 60 && used.len() < SLOTS - 2 {
        let n = if large && run.rng.chance(300) {
            65536
        } else {
            run.rng.pick(&[64, 64, 256, 1024, 4096, 16384])
        };
        let slot = run.model.free_slot();
        let data = run.rng.bytes(n);
        let unzeroed = run.rng.chance(400);
        let ranges: Vec<(usize, usize)> = (0..run.rng.below(3))
            .map(|_| {
                let a = run.rng.below(n);
                (a, run.rng.range(a + 1, n))
            })
            .collect();
        let label = format!(
            "lane {lane}: alloc {n} B into slot {slot}{}",
            if unzeroed {
                format!(" (unzeroed, writes {ranges:?})")
            } else {
                String::new()
            }
        );
        let root = run.root;
        run.op("alloc", label, |_, _, m, _| {
            let d = data.clone();
            let r = w.run(move |pool| {
                pool.tx(|tx| {
                    let (o, c) = if unzeroed {
                        tx_alloc_unzeroed(tx, &d, &ranges)?
                    } else {
                        (tx_alloc(tx, &d)?, d.clone())
                    };
                    tx_set_slot(tx, root, slot, o, false)?;
                    Ok(c)
                })
            });
            match r {
                Ok(contents) => m.put(slot, contents),
                // No room for a large object: nothing changed.
                Err(pgl::Error::PoolFull { .. }) => {}
                Err(e) => panic!("alloc tx: {e}"),
            }
        });
    } else if pick < 75 && !used.is_empty() {
        let slot = run.rng.pick(&used);
        let size = run.model.size(slot);
        let oid = slot_oid(&run.pool, run.root, slot);
        let root = run.root;
        run.op(
            "free",
            format!("lane {lane}: free slot {slot} ({size} B)"),
            |_, _, m, _| {
                w.run(move |pool| {
                    pool.tx(|tx| {
                        tx_free(tx, oid, size)?;
                        tx_set_slot(tx, root, slot, 0, false)
                    })
                    .expect("free tx")
                });
                m.take(slot);
            },
        );
    } else if pick < 88 {
        // An allocation stored nowhere: from an existing run, a direct commit (no record).
        let n = run.rng.pick(&[64, 256]);
        let data = run.rng.bytes(n);
        let unzeroed = run.rng.chance(400);
        let mut got = None;
        run.op(
            "orphan",
            format!(
                "lane {lane}: alloc {n} B stored nowhere{}",
                if unzeroed { " (unzeroed)" } else { "" }
            ),
            |_, _, m, _| {
                let d = data.clone();
                let r = w.run(move |pool| {
                    pool.tx(|tx| {
                        if unzeroed {
                            tx_alloc_unzeroed(tx, &d, &[(0, 8)])
                        } else {
                            Ok((tx_alloc(tx, &d)?, d.clone()))
                        }
                    })
                });
                match r {
                    Ok((o, c)) => {
                        m.orphans.push(c.clone());
                        got = Some((o, c));
                    }
                    // Orphans pile up over a long stream (`PGL_CRASH_STATES`): once no
                    // run of the class has room and no chunk is free, nothing changed.
                    Err(pgl::Error::PoolFull { .. }) => {}
                    Err(e) => panic!("orphan tx: {e}"),
                }
            },
        );
        orphans.extend(got);
    } else if !orphans.is_empty() {
        // Free an orphan: a direct commit of one bitmap word.
        let i = run.rng.below(orphans.len());
        let (oid, data) = orphans.swap_remove(i);
        let n = data.len();
        run.op(
            "free orphan",
            format!("lane {lane}: free a {n} B orphan (direct commit)"),
            |_, _, m, _| {
                w.run(move |pool| pool.tx(|tx| tx_free(tx, oid, n)).expect("free orphan tx"));
                let k = m
                    .orphans
                    .iter()
                    .position(|o| *o == data)
                    .expect("model orphan");
                m.orphans.swap_remove(k);
            },
        );
    }
}

/// `observe_copies`: a deferred record stays pending from one op into the next (see
/// `Run::observe_copies`), with large objects (whole chunks) among the allocations.
fn stream(op: &str, tune: impl Fn(&mut pgl::Config), first_seed: u64, observe_copies: bool) {
    let mut suite = Suite::new(op);
    let mut seed = first_seed;
    while !suite.done() {
        seed += 1;
        let mut cfg = config(3);
        cfg.lanes = 2;
        tune(&mut cfg);
        let mut run = suite.run(format!("{op} #{seed}"), cfg, seed);
        run.observe_copies = observe_copies;
        run.setup(|pool, root, m, rng| {
            fill_slots(pool, root, m, rng, &[64, 64, 256, 1024, 4096, 16384]);
        });
        let workers = [Worker::new(&run.pool), Worker::new(&run.pool)];
        let mut orphans = Vec::new();
        let mut lane = 0;
        for _ in 0..40 {
            if run.done() {
                break;
            }
            // Runs on one lane, then the other: a lane's older records stay unretired on
            // media while the other lane commits over their bytes.
            if run.rng.chance(400) {
                lane ^= 1;
            }
            step(&mut run, &workers, lane, &mut orphans, observe_copies);
        }
    }
    suite.assert_clean();
}

#[test]
fn crash_two_lanes_op_stream() {
    stream("two lanes", |_| {}, 1000, false);
}

#[test]
fn crash_two_lanes_op_stream_deferred_across_ops() {
    stream("two lanes, deferred across ops", |_| {}, 4000, true);
}

#[test]
fn crash_two_lanes_op_stream_without_parity() {
    stream("two lanes, no parity", |c| c.parity = false, 3000, false);
}

#[test]
fn crash_two_lanes_op_stream_one_lane_copy() {
    stream(
        "two lanes, one lane copy",
        |c| c.replicate_lanes = false,
        2000,
        false,
    );
}

/// Sets root word 0 to `v` on a lane other than this thread's usual one: a `Detached`
/// handle holds that lane meanwhile (and the thread's usual lane becomes the one used).
fn set_on_other_lane(pool: &Pool, root: Oid<[u64; 8]>, blocker: Oid<u64>, v: u64) {
    let held = pool.open_mut(blocker).expect("open_mut");
    pool.tx(|tx| {
        tx.open(root)?[0] = v;
        Ok(())
    })
    .expect("set tx");
    drop(held);
}

#[test]
fn retire_marks_found_at_open_are_made_durable() {
    // A process killed without a clean close leaves its last retire marks in the caches,
    // not on media: the next open finds the record retired and replays nothing, then a
    // commit of another lane changes the bytes it covers. A power failure then must not
    // let the record replay over them. (With parity on, clearing the dirty-zone bits at
    // open happens to flush the marks' lines too; without it nothing did.)
    for parity in [false, true] {
        let mut cfg = config(1);
        cfg.lanes = 2;
        cfg.parity = parity;
        let sim = pgl::CrashSim::new(cfg.max_size);
        let pool = Pool::create_sim(&sim, &cfg).unwrap();
        let root = pool.root::<[u64; 8]>().unwrap();
        let blocker = pool.tx(|tx| tx.alloc(0u64)).unwrap();
        // On the other lane, a commit that also allocates: it applies under its own fence
        // and writes its retire mark with no flush (one that only overwrote would leave
        // its record unretired until this thread's next fence).
        let held = pool.open_mut(blocker).expect("open_mut");
        pool.tx(|tx| {
            tx.open(root)?[0] = 1;
            tx.alloc(0u64)
        })
        .unwrap();
        drop(held);
        assert_eq!(pool.stats().deferred_applies, 0);
        // Killed: no `Drop`, nothing flushed; the caches (the volatile image) survive.
        std::mem::forget(pool);
        // SAFETY: the leaked pool had no clone or handle left, and is never used again.
        unsafe { sim.end_lease_of_leaked() };
        let pool = Pool::open_sim_with(&sim, &cfg).unwrap();
        assert_eq!(pool.get(root).unwrap()[0], 1);
        assert_eq!(pool.stats().records_replayed, 0);
        set_on_other_lane(&pool, root, blocker, 2);
        // The next record of that lane replaces the one that set 2, and covers other
        // bytes. (This thread's usual lane is the first one now; a handle holds it, and
        // the other lane's deferred record is settled first.)
        let held = pool.open_mut(blocker).expect("open_mut");
        pool.tx(|tx| {
            tx.open(root)?.write_at(8, &9u64);
            Ok(())
        })
        .unwrap();
        drop(held);
        // Power fails: only what reached media is left.
        let dev = pgl::CrashSim::from_image(&sim.persisted_image(), sim.len(), sim.capacity());
        let again = Pool::open_sim_with(&dev, &cfg).unwrap();
        assert_eq!(
            again.get(root).unwrap()[0],
            2,
            "parity {parity}: an acknowledged commit was rolled back by a retired record"
        );
        drop(again);
        drop(pool);
    }
}

/// The state of a pool opened on a copy of `image` (as after a crash that kept it).
fn state_of(image: &[u64], sim: &pgl::CrashSim) -> State {
    let dev = pgl::CrashSim::from_image(image, sim.len(), sim.capacity());
    let pool = Pool::open_sim(&dev, LAYOUT).expect("open a crash image");
    snapshot(&pool)
}

#[test]
fn a_deferred_record_whose_object_another_lane_freed_never_voids_its_owners_reuse() {
    // Worker 0 overwrites part of a large object: a deferred record, its retire mark left
    // to worker 0's next fence. Worker 1 frees the object: its commit writes only zone
    // metadata (the chunk table and the root), in other chunks than the deferred record's,
    // so it need not settle that record. Worker 0 then allocates a large object in the
    // freed chunks through a logged commit. Replaying the older deferred record (its mark
    // not yet durable) over the new object after a crash makes recovery discard the newer
    // record once its fence completed, leaving whatever of its apply step reached media:
    // neither the state before that commit nor the one after.
    const BIG: usize = 65536;
    let mut checked = 0;
    for seed in 0..4u64 {
        let mut rng = Rng::new(seed);
        let mut cfg = config(1);
        cfg.lanes = 2;
        let sim = pgl::CrashSim::new(cfg.max_size);
        let pool = Pool::create_sim(&sim, &cfg).expect("create");
        let root = pool.root::<Root>().expect("root");
        let data = rng.bytes(BIG);
        let x = pool
            .tx(|tx| {
                let o = tx_alloc(tx, &data)?;
                tx_set_slot(tx, root, 0, o, false)?;
                Ok(o)
            })
            .expect("setup alloc");
        let workers = [Worker::new(&pool), Worker::new(&pool)];
        let at = rng.range(BIG / 2, BIG - 64);
        let patch = rng.bytes(64);
        let deferred = pool.stats().deferred_applies;
        workers[0].run(move |pool| {
            pool.tx(|tx| tx_write(tx, x, BIG, at, &patch))
                .expect("write tx")
        });
        assert_eq!(
            pool.stats().deferred_applies,
            deferred + 1,
            "a deferred record"
        );
        workers[1].run(move |pool| {
            pool.tx(|tx| {
                tx_free(tx, x, BIG)?;
                tx_set_slot(tx, root, 0, 0, false)
            })
            .expect("free tx")
        });
        let before = state_of(&sim.volatile_image(), &sim);
        let fresh = rng.bytes(BIG);
        let (got, points) = crash_points_of(&sim, || {
            workers[0].run(move |pool| {
                pool.tx(|tx| {
                    let o = tx_alloc(tx, &fresh)?;
                    tx_set_slot(tx, root, 1, o, false)?;
                    Ok(o)
                })
                .expect("alloc tx")
            })
        });
        assert_eq!(got, x, "the new object reuses the freed chunks");
        let after = state_of(&sim.volatile_image(), &sim);
        for cp in &points {
            let n = cp.pending();
            for _ in 0..200 {
                let mask: Vec<bool> = (0..n).map(|_| rng.chance(500)).collect();
                let dev = cp.device(sim.capacity(), |i| mask[i]);
                let pool = Pool::open_sim(&dev, LAYOUT).expect("open a crash image");
                let st = snapshot(&pool);
                assert!(
                    st == before || st == after,
                    "seed {seed}, fence {}: a crash left neither the state before the \
                     allocation nor the one after:\n{}",
                    cp.fence(),
                    diff(&after, &st)
                );
                checked += 1;
            }
        }
        drop(workers);
    }
    assert!(checked > 0);
}

#[test]
fn a_large_object_over_many_empty_runs_beside_another_lanes_pending_records() {
    // Worker 0 allocates a large object over many empty runs: its commit first sets their
    // chunks free by a record of its own, then commits its own. Worker 1's lane holds,
    // meanwhile, either a record over the same chunk table and checksums whose retire mark
    // is not durable (a large object freed), or a deferred overwrite. Every crash image
    // must open clean, with worker 1's commits in it, and the large object whole or absent.
    const CHUNKS: usize = 30;
    type Wide = [u8; CHUNKS * (64 << 10)];
    type Mid = [u8; 2 * (64 << 10)];
    let mut checked = 0;
    for variant in 0..2u64 {
        let mut rng = Rng::new(variant);
        let mut cfg = pgl::Config::small(LAYOUT);
        cfg.chunks_per_row = 16;
        cfg.lane_size = 8 << 10;
        cfg.lanes = 2;
        cfg.size = cfg.geometry().pool_size(1);
        cfg.max_size = cfg.size;
        let sim = pgl::CrashSim::new(cfg.max_size);
        let pool = Pool::create_sim(&sim, &cfg).expect("create");
        let root = pool.root::<[u64; 4]>().expect("root");
        let y: Oid<[u64; 8]> = pool.tx(|tx| tx.alloc([1u64; 8])).unwrap();
        support::churn_smallest_runs(&pool);
        drop(pool);
        let pool = Pool::open_sim(&sim, LAYOUT).unwrap();
        let workers = [Worker::new(&pool), Worker::new(&pool)];
        workers[1].run(move |pool| {
            let m = pool.tx(|tx| tx.alloc_zeroed::<Mid>()).expect("mid");
            if variant == 0 {
                pool.tx(|tx| {
                    tx.open(y)?[0] = 2;
                    Ok(())
                })
                .expect("y");
                pool.tx(|tx| tx.free(m)).expect("free mid");
            } else {
                pool.tx(|tx| tx.free(m)).expect("free mid");
                pool.tx(|tx| {
                    tx.open(y)?[0] = 2;
                    Ok(())
                })
                .expect("y");
            }
        });
        let free = pool.free_bytes();
        let (wide, points) = crash_points_of(&sim, || {
            workers[0].run(move |pool| {
                pool.tx(|tx| {
                    let o = tx.alloc_zeroed::<Wide>()?;
                    tx.open(o)?[..8].copy_from_slice(&[0xa5; 8]);
                    tx.open(root)?[1] = o.raw();
                    Ok(o)
                })
                .expect("a large object over many empty runs")
            })
        });
        assert!(points.len() >= 4, "two records: {}", points.len());
        for cp in &points {
            let n = cp.pending();
            for _ in 0..60 {
                let mask: Vec<bool> = (0..n).map(|_| rng.chance(500)).collect();
                let dev = cp.device(sim.capacity(), |i| mask[i]);
                let pool = Pool::open_sim(&dev, LAYOUT).expect("open a crash image");
                let at = cp.fence();
                let listing = pool.objects_with_damage().unwrap();
                assert_eq!(listing.damaged_words(), Vec::<u64>::new(), "fence {at}");
                assert_eq!(
                    pool.verify_objects(|_, _| {}).unwrap().len(),
                    0,
                    "fence {at}"
                );
                assert_eq!(
                    pool.get(y).unwrap()[0],
                    2,
                    "fence {at}: worker 1's overwrite"
                );
                let r = pool.get(root).unwrap()[1];
                if r != 0 {
                    assert_eq!(r, wide.raw());
                    let got = pool.get(Oid::<Wide>::from_raw(r)).unwrap();
                    assert_eq!(got[..8], [0xa5; 8]);
                    assert!(got[8..].iter().all(|&b| b == 0), "fence {at}: whole");
                } else {
                    assert_eq!(pool.free_bytes(), free, "fence {at}");
                    let o = pool.tx(|tx| tx.alloc_zeroed::<Wide>());
                    assert!(o.is_ok(), "fence {at}: {o:?}");
                }
                checked += 1;
            }
        }
        drop(workers);
    }
    assert!(checked > 0);
}

/// An overwrite of `[at, at + data.len())` of the `size`-byte object `oid`, alone (a
/// deferred record) or with an allocation of `orphan` stored nowhere (a logged commit that
/// applies and retires under its own fences). Returns the orphan's oid.
fn overwrite(
    pool: &Pool,
    oid: u64,
    size: usize,
    at: usize,
    data: &[u8],
    orphan: Option<&[u8]>,
) -> Option<u64> {
    pool.tx(|tx| {
        tx_write(tx, oid, size, at, data)?;
        orphan.map(|o| tx_alloc(tx, o)).transpose()
    })
    .expect("overwrite tx")
}

/// One thread in the steady state of deferred overwrites on two lanes while another commits
/// over the same objects: the scenarios of a commit sealing a lane whose retire marks its
/// thread owes (dropped, `deferred.rs` `flush_owed_sealing`), and of that lane counted
/// flushed once the seal is durable (`fence_with_retire_marks_near`).
///
/// Worker 0 mostly overwrites one of a few small objects: each commit is deferred and
/// leaves its lane pending, so its next transaction takes the other lane and seals it,
/// dropping the retire mark its previous fence's settle wrote there. Now and then its
/// overwrite also allocates: a record applied and retired at once, after the mark of the
/// record its fence settled. Worker 1 overwrites the same objects (settling worker 0's
/// pending lane with that lane skipped, or taking a pending lane, settling it in
/// `Tx::begin` and then sealing it), allocates and frees objects of the same run through
/// logged commits (root slots) and direct ones (a lone bitmap word, no record, right after
/// a logged commit's mark on the same word). Every op is crashed at each fence and after it
/// returns; from each crash point `SUBSETS` images (none, all, and random subsets of the
/// pending words at several densities) are recovered, and each must hold exactly the
/// committed state before or after the op: an acknowledged commit lost, an older record
/// replayed over newer bytes, or a retired record brought back, is a mismatch. States are
/// observed on copies of the volatile image, so that deferred records stay pending from one
/// op into the next. Returns the number of crash images checked.
fn alternating_lanes_beside_another_thread(tune: impl Fn(&mut pgl::Config), seeds: u64) -> u64 {
    const OPS: usize = 40;
    const SUBSETS: usize = 24;
    const OBJECTS: usize = 3;
    let mut checked = 0u64;
    let mut deferred = 0u64;
    for seed in 0..seeds {
        let mut rng = Rng::new(0x5ea1_0000 + seed);
        let mut cfg = config(1);
        cfg.lanes = 2;
        tune(&mut cfg);
        let sim = pgl::CrashSim::new(cfg.max_size);
        let pool = Pool::create_sim(&sim, &cfg).expect("create");
        let root = pool.root::<Root>().expect("root");
        let mut m = Model::default();
        fill_slots(&pool, root, &mut m, &mut rng, &[64, 64, 256]);
        let workers = [Worker::new(&pool), Worker::new(&pool)];
        let mut orphans: Vec<(u64, Vec<u8>)> = Vec::new();
        let deferred_before = pool.stats().deferred_applies;
        let mut before = state_of(&sim.volatile_image(), &sim);
        for i in 0..OPS {
            let pick = rng.below(100);
            let (label, points) = if pick < 70 {
                // Mostly the first words of one object: consecutive records overlap, so a
                // replay of an older one over a newer one's bytes shows.
                let slot = if rng.chance(700) {
                    0
                } else {
                    rng.below(OBJECTS)
                };
                let size = m.size(slot);
                let at = rng.below(if slot == 0 { 16 } else { size });
                let end = rng.range(at + 1, size.min(at + 48));
                let data = rng.bytes(end - at);
                let orphan = rng.chance(250).then(|| rng.bytes(64));
                let oid = slot_oid(&pool, root, slot);
                let (d, o) = (data.clone(), orphan.clone());
                let (got, points) = crash_points_of(&sim, || {
                    workers[0].run(move |pool| overwrite(pool, oid, size, at, &d, o.as_deref()))
                });
                m.write(slot, at, &data);
                if let (Some(oid), Some(bytes)) = (got, orphan.clone()) {
                    m.orphans.push(bytes.clone());
                    orphans.push((oid, bytes));
                }
                let also = if orphan.is_some() {
                    " and allocates"
                } else {
                    ""
                };
                (
                    format!("op {i}: worker 0 writes slot {slot} [{at}, {end}){also}"),
                    points,
                )
            } else if pick < 82 {
                let slot = rng.below(OBJECTS);
                let size = m.size(slot);
                let at = rng.below(size);
                let end = rng.range(at + 1, size.min(at + 64));
                let data = rng.bytes(end - at);
                let oid = slot_oid(&pool, root, slot);
                let d = data.clone();
                let (_, points) = crash_points_of(&sim, || {
                    workers[1].run(move |pool| overwrite(pool, oid, size, at, &d, None))
                });
                m.write(slot, at, &data);
                (
                    format!("op {i}: worker 1 writes slot {slot} [{at}, {end})"),
                    points,
                )
            } else if pick < 88 {
                // A logged allocation into a root slot, or the free of one.
                let extra: Vec<usize> = m.used().into_iter().filter(|&s| s >= OBJECTS).collect();
                if extra.len() < 3 && (extra.is_empty() || rng.chance(600)) {
                    let slot = m.free_slot();
                    let data = rng.bytes(64);
                    let d = data.clone();
                    let (_, points) = crash_points_of(&sim, || {
                        workers[1].run(move |pool| {
                            pool.tx(|tx| {
                                let o = tx_alloc(tx, &d)?;
                                tx_set_slot(tx, root, slot, o, false)
                            })
                            .expect("alloc tx")
                        })
                    });
                    m.put(slot, data);
                    (format!("op {i}: worker 1 allocates slot {slot}"), points)
                } else {
                    let slot = rng.pick(&extra);
                    let oid = slot_oid(&pool, root, slot);
                    let (_, points) = crash_points_of(&sim, || {
                        workers[1].run(move |pool| {
                            pool.tx(|tx| {
                                tx_free(tx, oid, 64)?;
                                tx_set_slot(tx, root, slot, 0, false)
                            })
                            .expect("free tx")
                        })
                    });
                    m.take(slot);
                    (format!("op {i}: worker 1 frees slot {slot}"), points)
                }
            } else if orphans.len() < 4 && (orphans.is_empty() || rng.chance(500)) {
                // An allocation from the objects' run stored nowhere: a direct commit.
                let data = rng.bytes(64);
                let d = data.clone();
                let (oid, points) = crash_points_of(&sim, || {
                    workers[1].run(move |pool| pool.tx(|tx| tx_alloc(tx, &d)).expect("orphan"))
                });
                m.orphans.push(data.clone());
                orphans.push((oid, data));
                (
                    format!("op {i}: worker 1 allocates an orphan (direct)"),
                    points,
                )
            } else {
                let (oid, data) = orphans.swap_remove(rng.below(orphans.len()));
                let (_, points) = crash_points_of(&sim, || {
                    workers[1].run(move |pool| pool.tx(|tx| tx_free(tx, oid, 64)).expect("free"))
                });
                let k = m.orphans.iter().position(|o| *o == data).expect("orphan");
                m.orphans.swap_remove(k);
                (format!("op {i}: worker 1 frees an orphan (direct)"), points)
            };
            let mut points = points;
            points.push(sim.crash_point());
            let after = state_of(&sim.volatile_image(), &sim);
            if let Err(e) = check_model(&after, &m) {
                panic!("seed {seed}, {label}: the pool disagrees with the model: {e}");
            }
            for (k, cp) in points.iter().enumerate() {
                let n = cp.pending();
                for s in 0..SUBSETS {
                    let density = [0, 1000, 500, 500, 500, 200, 800, 50, 950][s % 9];
                    let mask: Vec<bool> = (0..n).map(|_| rng.chance(density)).collect();
                    let dev = cp.device(sim.capacity(), |j| mask[j]);
                    let pool = Pool::open_sim(&dev, LAYOUT).unwrap_or_else(|e| {
                        panic!("seed {seed}, {label}, crash point {k}: recovery failed: {e}")
                    });
                    let st = snapshot(&pool);
                    assert!(
                        st == before || st == after,
                        "seed {seed}, {label}, crash point {k} of {} (fence {}): the \
                         recovered pool holds neither the committed state before the op nor \
                         the one after (a commit lost, or an older record replayed over \
                         newer bytes):\n--- vs after:\n{}--- vs before:\n{}",
                        points.len(),
                        cp.fence(),
                        diff(&after, &st),
                        diff(&before, &st)
                    );
                    checked += 1;
                }
            }
            before = after;
        }
        deferred += pool.stats().deferred_applies - deferred_before;
        drop(workers);
    }
    assert!(
        deferred >= seeds * OPS as u64 / 2,
        "the steady state of deferred overwrites: only {deferred} deferred applies"
    );
    checked
}

#[test]
fn crash_alternating_lanes_beside_another_thread() {
    let states = alternating_lanes_beside_another_thread(|_| {}, 8);
    eprintln!("alternating lanes: {states} crash images checked");
}

#[test]
fn crash_alternating_lanes_beside_another_thread_one_lane_copy() {
    let states = alternating_lanes_beside_another_thread(|c| c.replicate_lanes = false, 8);
    eprintln!("alternating lanes, one lane copy: {states} crash images checked");
}
