//! Many threads on one log at once, every way a record can end: `append`, reserve + fill +
//! complete, up to three reservations held at once (completed in LSN order, after a
//! yield now and then, so later LSNs complete first), reservations dropped (aborted), a
//! panic while filling one, forces of their own and of others' LSNs, and readers
//! iterating. Two shapes: a small area wrapped dozens of times behind a reclaimer, and a
//! large one without reclaim where mostly-aborted reservations run a whole completion ring
//! ahead of the durable LSN under group commit, so that `reserve` forces. Checked, for
//! each force policy:
//!
//! - no thread waits forever (a watchdog fails the test if the run stalls);
//! - every LSN is handed out once, and the LSNs handed out are consecutive;
//! - no LSN is reserved a completion ring or more ahead of the durable LSN;
//! - the moment `force(lsn)` returns, every crash image (the persisted words plus any
//!   subset of the pending ones) recovers a log holding every record up to `lsn` that was
//!   not reclaimed — each completed one with its bytes, no aborted one, in LSN order, none
//!   twice;
//! - after the run, the reopened log holds exactly the completed records from its start.
//!
//! `PGL_LOG_STRESS_OPS` sets the operations per thread of the wrapping runs (default 5,000).

mod support;
use support::Rng;

use pgl::log::{ForcePolicy, Log, LogConfig, Lsn};
use pgl::CrashSim;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

const THREADS: u32 = 6;
/// The log's completion slots: reservations run at most this far ahead of the durable LSN.
const RING: u64 = 1 << 14;

/// What a run looks like.
#[derive(Clone, Copy)]
struct Shape {
    /// Bytes of the simulated device.
    device: u64,
    /// Bytes of the log's record area.
    area: u64,
    /// Operations per thread.
    ops: u32,
    /// Crash images taken per thread (each a copy of the device and a recovery).
    probes: u64,
    /// Whether a thread reclaims behind the writers, and the writers force now and then.
    reclaim: bool,
    /// Of 12 operations, how many reserve up to three records and hold them.
    hold: u64,
    /// Of 5 held reservations, how many are dropped (aborted).
    drop: u64,
    /// Payloads are shorter than this (one in 16 up to ten times as long).
    len: u64,
}

/// A small area, wrapped dozens of times behind a reclaimer.
fn wrapping() -> Shape {
    let ops = std::env::var("PGL_LOG_STRESS_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    Shape {
        device: 256 << 10,
        area: 48 << 10,
        ops,
        probes: 12,
        reclaim: true,
        hold: 3,
        drop: 1,
        len: 200,
    }
}

/// No reclaim, no forces but the policy's and reserve's own, every held reservation
/// aborted (appends alone complete, about one LSN in twelve): group commit counts
/// completions only, so its forces are rare, reservations run a completion ring ahead of
/// the durable LSN and `reserve` itself forces, in several threads at once (`Frequency`
/// forces at its LSNs however they are sealed: a run of many forces, not of the ring). (With four held
/// reservations in five aborted, a quarter of the LSNs completed: every policy force at
/// 4,096 LSNs, and a run whose windows all stayed near two of them never filled the ring.)
fn ring_bound() -> Shape {
    Shape {
        device: 4608 << 10,
        area: 4 << 20,
        ops: 4000,
        probes: 1,
        reclaim: false,
        hold: 10,
        drop: 5,
        len: 16,
    }
}

/// What became of an LSN.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fate {
    Completed(Vec<u8>),
    Aborted,
}

/// The payload of thread `t`'s `i`-th record: its key, then bytes that depend on it.
fn payload(t: u32, i: u32, len: usize) -> Vec<u8> {
    let key = u64::from(t) << 32 | u64::from(i);
    let mut v: Vec<u8> = (0..len.max(8))
        .map(|j| (key.wrapping_mul(0x9e37_79b9) as usize + j * 13) as u8)
        .collect();
    v[..8].copy_from_slice(&key.to_le_bytes());
    v
}

/// A crash image captured once `force(forced)` returned, to check after the run.
struct Probe {
    forced: Lsn,
    images: Vec<Arc<CrashSim>>,
}

/// Everything one thread learnt.
#[derive(Default)]
struct Seen {
    fates: Vec<(Lsn, Fate)>,
    probes: Vec<Probe>,
    /// (LSN, payload) read by iterating the live log.
    read: Vec<(Lsn, Vec<u8>)>,
    /// How far a reservation ran ahead of the durable LSN, at most.
    ahead: u64,
}

/// One writer's run. With `last_probe`, every writer waits there for the others before its
/// last probe (whose force makes all earlier LSNs durable).
fn writer(
    log: &Log,
    sim: &CrashSim,
    t: u32,
    shape: Shape,
    seed: u64,
    last_probe: Option<&Barrier>,
) -> Seen {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut seen = Seen::default();
    let ops = shape.ops;
    let probe_every = (u64::from(ops) / shape.probes).max(1);
    let mut i = 0u32;
    while i < ops {
        let len = if rng.below(16) == 0 {
            rng.below(shape.len * 10)
        } else {
            rng.below(shape.len)
        };
        let p = payload(t, i, len as usize);
        let op = rng.below(12);
        let last = match op {
            // Reserve up to three, fill them, complete them in LSN order, dropping some.
            _ if op < shape.hold => {
                let n = 1 + rng.below(3) as usize;
                let mut held = Vec::new();
                for k in 0..n {
                    match log.reserve(p.len()) {
                        Ok(mut r) => {
                            let ahead = r.lsn() - log.durable_lsn();
                            assert!(ahead < RING, "LSN {} reserved {ahead} ahead", r.lsn());
                            seen.ahead = seen.ahead.max(ahead);
                            r.copy_from_slice(&p);
                            r[..4].copy_from_slice(&(k as u32).to_le_bytes());
                            held.push(r);
                        }
                        Err(pgl::Error::LogFull { .. }) => break,
                        Err(e) => panic!("reserve: {e}"),
                    }
                }
                // Hold them a while: later LSNs complete meanwhile, out of order.
                if rng.below(3) == 0 {
                    std::thread::yield_now();
                }
                let mut last = None;
                for r in held {
                    let lsn = r.lsn();
                    if rng.below(5) < shape.drop {
                        drop(r);
                        seen.fates.push((lsn, Fate::Aborted));
                    } else {
                        let bytes = r.to_vec();
                        assert_eq!(log.complete(r).unwrap(), lsn);
                        seen.fates.push((lsn, Fate::Completed(bytes)));
                    }
                    last = Some(lsn);
                }
                last
            }
            // A panic while filling a reservation: its drop seals it as aborted.
            _ if op == shape.hold && rng.below(8) == 0 => {
                let mut lsn = None;
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut res = match log.reserve(p.len()) {
                        Ok(r) => r,
                        Err(pgl::Error::LogFull { .. }) => return,
                        Err(e) => panic!("reserve: {e}"),
                    };
                    lsn = Some(res.lsn());
                    let half = res.len() / 2;
                    res[..half].copy_from_slice(&p[..half]);
                    panic!("{PROVOKED} LSN {}", res.lsn());
                }));
                if let Some(lsn) = lsn {
                    assert!(r.is_err());
                    seen.fates.push((lsn, Fate::Aborted));
                }
                lsn
            }
            _ => match log.append(&p) {
                Ok(lsn) => {
                    seen.fates.push((lsn, Fate::Completed(p)));
                    Some(lsn)
                }
                Err(pgl::Error::LogFull { .. }) => None,
                Err(e) => panic!("append: {e}"),
            },
        };
        let Some(last) = last else {
            // Full: the reclaimer frees space once what is there is forced.
            let _ = log.force(log.completed_lsn());
            std::thread::yield_now();
            continue;
        };
        i += 1;
        // Force an LSN of ours or one of another thread's, now and then.
        if shape.reclaim && rng.below(7) == 0 {
            let lsn = if rng.below(2) == 0 {
                last
            } else {
                1 + rng.below(log.next_lsn() - 1)
            };
            log.force(lsn).unwrap();
            let (d, c) = (log.durable_lsn(), log.completed_lsn());
            assert!(
                lsn <= d && d <= c,
                "force({lsn}): durable {d}, completed {c}"
            );
        }
        if u64::from(i) % probe_every == 0 {
            if let Some(b) = last_probe.filter(|_| i == ops) {
                b.wait();
            }
            log.force(last).unwrap();
            let point = sim.crash_point();
            let n = point.pending();
            let dev = shape.device;
            let mut images = vec![point.device(dev, |_| false), point.device(dev, |_| true)];
            let mut r = Rng(rng.next() | 1);
            images.push(point.device(dev, |_| r.below(2) == 0));
            if n > 0 {
                let cut = r.below(n as u64) as usize;
                images.push(point.device(dev, |w| w < cut));
            }
            seen.probes.push(Probe {
                forced: last,
                images,
            });
        }
    }
    seen
}

fn reader(log: &Log, stop: &AtomicBool) -> Seen {
    let mut seen = Seen::default();
    while !stop.load(Ordering::Relaxed) {
        let mut prev = 0;
        for r in log.iter() {
            match r {
                Ok(r) => {
                    assert!(r.lsn > prev, "iter: LSN {} after {prev}", r.lsn);
                    prev = r.lsn;
                    if seen.read.len() < 20_000 {
                        seen.read.push((r.lsn, r.payload));
                    }
                }
                Err(e) => panic!("iter: {e}"),
            }
        }
        std::thread::yield_now();
    }
    seen
}

fn reclaimer(log: &Log, stop: &AtomicBool) {
    let mut rng = Rng(0x5eed);
    while !stop.load(Ordering::Relaxed) {
        let c = log.completed_lsn();
        let keep = rng.below(64);
        if c > log.start_lsn() + keep {
            log.reclaim(c - keep).unwrap();
        }
        std::thread::yield_now();
    }
}

/// Checks a recovered log against the fates: from its start to its end every LSN was
/// handed out, each completed one is there with its bytes, no aborted one is, in order.
/// (Past its end a crash image may hold a torn record, which recovery dropped.)
fn check_recovered(log: &Log, fates: &BTreeMap<Lsn, Fate>, what: &str) {
    let r = log.recovery();
    let (start, next) = (r.start_lsn, r.next_lsn);
    let mut expect = fates
        .range(start..next)
        .filter_map(|(&l, f)| match f {
            Fate::Completed(b) => Some((l, b)),
            Fate::Aborted => None,
        })
        .peekable();
    for rec in log.iter() {
        let rec = rec.unwrap_or_else(|e| panic!("{what}: {e}"));
        let (l, b) = expect
            .next()
            .unwrap_or_else(|| panic!("{what}: LSN {} read, not expected", rec.lsn));
        assert_eq!(rec.lsn, l, "{what}: LSN {l} missing (or out of order)");
        assert!(rec.payload == *b, "{what}: LSN {l} has other bytes");
    }
    assert!(
        expect.peek().is_none(),
        "{what}: LSN {} missing",
        expect.peek().unwrap().0
    );
}

/// The panic message the writers provoke.
const PROVOKED: &str = "stress: a panic while filling";

/// Keeps the provoked panics out of the output; the others are reported as usual.
fn quiet_provoked_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .unwrap_or("");
            if !msg.starts_with(PROVOKED) {
                default(info);
            }
        }));
    });
}

fn stress(policy: ForcePolicy, shape: Shape, seed: u64) {
    quiet_provoked_panics();
    let sim = CrashSim::new(shape.device);
    let log = Arc::new(Log::create_sim(&sim, LogConfig::new(shape.area).policy(policy)).unwrap());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let run = {
        let (log, sim) = (log.clone(), sim.clone());
        std::thread::spawn(move || {
            let stop = AtomicBool::new(false);
            let seen: Mutex<Vec<Seen>> = Mutex::default();
            // Without reclaim, the writers' last probes wait for each other: the first
            // probe's force would otherwise end the run of reservations ahead of the
            // durable LSN early whenever one writer finished far ahead of the others (a
            // busy machine), before the completion ring ever filled.
            let last_probe = Barrier::new(THREADS as usize);
            std::thread::scope(|s| {
                let (log, sim, stop, seen) = (&*log, &*sim, &stop, &seen);
                let last_probe = (!shape.reclaim).then_some(&last_probe);
                let writers: Vec<_> = (0..THREADS)
                    .map(|t| {
                        s.spawn(move || {
                            let seed = seed * 16 + u64::from(t);
                            let mine = writer(log, sim, t, shape, seed, last_probe);
                            seen.lock().unwrap().push(mine);
                        })
                    })
                    .collect();
                if shape.reclaim {
                    s.spawn(move || reclaimer(log, stop));
                }
                s.spawn(move || {
                    let mine = reader(log, stop);
                    seen.lock().unwrap().push(mine);
                });
                for w in writers {
                    if w.join().is_err() {
                        stop.store(true, Ordering::Relaxed);
                        panic!("a writer failed");
                    }
                }
                stop.store(true, Ordering::Relaxed);
            });
            let _ = done_tx.send(());
            seen.into_inner().unwrap()
        })
    };
    // A thread waiting forever in force, complete or reserve shows up here, not as a hung
    // test run.
    match done_rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
            "{policy}: stalled: next {}, completed {}, durable {}",
            log.next_lsn(),
            log.completed_lsn(),
            log.durable_lsn()
        ),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
    }
    let seen = match run.join() {
        Ok(s) => s,
        Err(e) => std::panic::resume_unwind(e),
    };

    let mut fates = BTreeMap::new();
    for (lsn, f) in seen.iter().flat_map(|s| s.fates.iter().cloned()) {
        assert!(fates.insert(lsn, f).is_none(), "LSN {lsn} handed out twice");
    }
    let next = log.next_lsn();
    assert_eq!(
        fates.keys().copied().collect::<Vec<_>>(),
        (1..next).collect::<Vec<_>>(),
        "{policy}: the LSNs handed out are not 1..{next}"
    );
    assert!(
        next > RING,
        "{policy}: the completion ring did not turn over"
    );
    let ahead = seen.iter().map(|s| s.ahead).max().unwrap();
    // Group commit counts completions only, so mostly-aborted reservations run a ring
    // ahead; `Frequency` forces at every `f`-th LSN however it is sealed, so they do not.
    if !shape.reclaim && matches!(policy, ForcePolicy::GroupCommit(_)) {
        assert!(
            ahead >= RING / 2,
            "{policy}: reservations ran only {ahead} ahead of the durable LSN"
        );
    }
    for (lsn, p) in seen.iter().flat_map(|s| &s.read) {
        assert_eq!(
            fates.get(lsn),
            Some(&Fate::Completed(p.clone())),
            "{policy}: iter read LSN {lsn} with bytes it was not given"
        );
    }
    assert_eq!(
        log.completed_lsn(),
        next - 1,
        "{policy}: done stopped short"
    );

    let mut probes = 0;
    for p in seen.iter().flat_map(|s| &s.probes) {
        for (k, dev) in p.images.iter().enumerate() {
            let what = format!("{policy}: crash image {k} after force({})", p.forced);
            let log = Log::open_sim(dev).unwrap_or_else(|e| panic!("{what}: {e}"));
            let r = log.recovery();
            assert!(
                r.start_lsn > p.forced || r.next_lsn > p.forced,
                "{what}: recovers only up to {} (start {})",
                r.next_lsn - 1,
                r.start_lsn
            );
            check_recovered(&log, &fates, &what);
            probes += 1;
        }
    }
    assert!(
        probes >= shape.probes,
        "{policy}: only {probes} crash images"
    );

    log.force(next - 1).unwrap();
    let image = sim.persisted_image();
    let len = sim.len();
    drop(log);
    let dev = CrashSim::from_image(&image, len, shape.device);
    let log = Log::open_sim(&dev).unwrap();
    assert_eq!(
        log.recovery().next_lsn,
        next,
        "{policy}: forced records lost"
    );
    assert_eq!(
        log.recovery().torn,
        None,
        "{policy}: a torn record after the run"
    );
    check_recovered(&log, &fates, &format!("{policy}: after the run"));
}

#[test]
fn sync_wrapping() {
    stress(ForcePolicy::Sync, wrapping(), 1);
}

#[test]
fn group_commit_wrapping() {
    stress(ForcePolicy::GroupCommit(16), wrapping(), 2);
}

#[test]
fn frequency_wrapping() {
    stress(ForcePolicy::Frequency(8), wrapping(), 3);
}

#[test]
fn group_commit_ring_bound() {
    stress(ForcePolicy::GroupCommit(4096), ring_bound(), 4);
}

#[test]
fn frequency_ring_bound() {
    stress(ForcePolicy::Frequency(4096), ring_bound(), 5);
}
