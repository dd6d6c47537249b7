//! Crash consistency of the log on `CrashSim`: two threads append (building records in
//! place, so a record's bytes are a function of its LSN, or, every other record of one
//! thread, with `append` and a tag naming them) while one of them also reclaims;
//! a crash point is captured at every fence of either thread. From each point the suite
//! builds crash images (nothing pending reached media, everything did, random subsets of
//! the pending 8-byte words), recovers each with `Log::open_sim` and requires:
//!
//! - recovery succeeds: the two superline copies are never both bad;
//! - every record whose force had returned when the point was captured survives (under
//!   Sync, every record whose append or complete had returned);
//! - no reclaim that had returned is undone, none that had not started is seen;
//! - the records read back are exactly `start..next` with the bytes written for each LSN:
//!   no record after a hole, no stale record taken for a new one;
//! - the recovered log takes a new record and recovers it again.
//!
//! One image per point is also opened with a fence hook: crashes *during* recovery (its
//! superline write) are explored the same way.
//!
//! Runs under Sync, GroupCommit(3) and Frequency(4). `PGL_LOG_CRASH_STATES` raises the
//! number of crash images (default 20,000 per policy).

mod support;
use support::Rng;

use pgl::log::{ForcePolicy, Log, LogConfig, Lsn};
use pgl::{CrashPoint, CrashSim};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const DEFAULT_STATES: u64 = 20_000;
const AREA: u64 = 16 << 10;
const DEVICE: u64 = 64 << 10;

fn target_states() -> u64 {
    match std::env::var("PGL_LOG_CRASH_STATES") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("PGL_LOG_CRASH_STATES={v:?} is not a number")),
        Err(_) => DEFAULT_STATES,
    }
}

/// Payload lengths the workload uses (a record is small or spans many lines).
fn len_of(k: u64) -> usize {
    [8usize, 40, 100, 300, 700][(k % 5) as usize]
}

/// The bytes of record `lsn`: its LSN first, so a record can never pass for another.
fn fill(lsn: Lsn, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (lsn as usize).wrapping_mul(13).wrapping_add(i) as u8;
    }
    buf[..8].copy_from_slice(&lsn.to_le_bytes());
}

/// Marks the first word of a record written with `append` (its LSN is not known before).
const TAGGED: u64 = 1 << 63;

/// The bytes of the `i`-th record thread `t` appends with `append`: a tag naming them
/// first, so a stale one is caught by its order among its thread's tags.
fn tagged(t: u64, i: u64, len: usize) -> Vec<u8> {
    let tag = TAGGED | t << 32 | i;
    let mut buf = vec![0; len];
    fill(tag, &mut buf);
    buf
}

/// What had been acknowledged when a point was captured.
#[derive(Clone, Copy, Debug)]
struct Acked {
    /// Every record up to this LSN was forced.
    forced: Lsn,
    /// A reclaim up to `reclaimed - 1` had returned: the start is at least this.
    reclaimed: Lsn,
    /// The largest start any reclaim had begun to write.
    reclaiming: Lsn,
}

#[derive(Default)]
struct Progress {
    forced: AtomicU64,
    reclaimed: AtomicU64,
    reclaiming: AtomicU64,
}

impl Progress {
    fn snapshot(&self) -> Acked {
        Acked {
            forced: self.forced.load(Ordering::SeqCst),
            reclaimed: self.reclaimed.load(Ordering::SeqCst).max(1),
            reclaiming: self.reclaiming.load(Ordering::SeqCst).max(1),
        }
    }
}

/// Checks a recovered log against what was acknowledged.
fn check(log: &Log, a: Acked) -> Result<(), String> {
    let r = log.recovery();
    if r.next_lsn <= a.forced {
        return Err(format!(
            "force({}) had returned, but only LSNs {}..{} survive ({:?})",
            a.forced, r.start_lsn, r.next_lsn, r.torn
        ));
    }
    if r.start_lsn < a.reclaimed || r.start_lsn > a.reclaiming {
        return Err(format!(
            "start LSN {} outside the reclaims acknowledged ({}) and begun ({})",
            r.start_lsn, a.reclaimed, a.reclaiming
        ));
    }
    let mut want = r.start_lsn;
    let mut last_tag = [None::<u64>; 2];
    for rec in log.iter() {
        let rec = rec.map_err(|e| format!("iter: {e}"))?;
        if rec.lsn != want {
            return Err(format!("LSN {} read where {want} was due", rec.lsn));
        }
        let first = u64::from_le_bytes(rec.payload[..8].try_into().expect("8 bytes"));
        // Built in place from its LSN, or appended with a tag.
        let key = if first & TAGGED != 0 { first } else { rec.lsn };
        let mut bytes = vec![0; rec.payload.len()];
        fill(key, &mut bytes);
        if rec.payload != bytes {
            return Err(format!("LSN {}: wrong bytes (a stale record?)", rec.lsn));
        }
        if first & TAGGED != 0 {
            let t = ((first >> 32) & 1) as usize;
            let i = first & 0xffff_ffff;
            if last_tag[t].is_some_and(|l| l >= i) {
                return Err(format!(
                    "LSN {}: thread {t}'s append {i} after its append {:?} (a stale record?)",
                    rec.lsn, last_tag[t]
                ));
            }
            last_tag[t] = Some(i);
        }
        want += 1;
    }
    if want != r.next_lsn {
        return Err(format!("read up to {want}, recovery said {}", r.next_lsn));
    }
    Ok(())
}

/// Recovers the image, checks it, and (when `reuse`) appends to it and recovers again.
fn verify(dev: &Arc<CrashSim>, a: Acked, reuse: bool) -> Result<(), String> {
    let log = Log::open_sim(dev).map_err(|e| format!("recovery failed: {e}"))?;
    check(&log, a)?;
    if reuse {
        let next = log.next_lsn();
        let mut after = Acked { forced: next, ..a };
        let mut res = match log.reserve(len_of(next)) {
            Ok(r) => r,
            Err(pgl::Error::LogFull { .. }) if next > 1 => {
                // Full of recovered records: free them all, as a program would.
                log.reclaim(next - 1)
                    .map_err(|e| format!("reclaim after recovery: {e}"))?;
                after.reclaimed = next;
                after.reclaiming = next;
                log.reserve(len_of(next))
                    .map_err(|e| format!("reserve after reclaim: {e}"))?
            }
            Err(e) => return Err(format!("reserve after recovery: {e}")),
        };
        fill(next, &mut res);
        log.complete(res).map_err(|e| e.to_string())?;
        log.force(next).map_err(|e| e.to_string())?;
        drop(log);
        let again = Log::open_sim(dev).map_err(|e| format!("second recovery: {e}"))?;
        if again.recovery().next_lsn != next + 1 {
            return Err(format!(
                "the record appended after recovery (LSN {next}) is lost"
            ));
        }
        check(&again, after)?;
    }
    Ok(())
}

/// Reclaims up to `upto` (if that frees anything), recording it in `p`.
fn reclaim(log: &Log, p: &Progress, upto: Lsn) {
    if upto >= log.start_lsn() {
        p.reclaiming.fetch_max(upto + 1, Ordering::SeqCst);
        log.reclaim(upto).unwrap();
        p.reclaimed.fetch_max(upto + 1, Ordering::SeqCst);
    }
}

/// Runs the workload under `policy` and explores its crash points; returns the states.
fn suite(policy: ForcePolicy, per_thread: u64) -> u64 {
    let sim = CrashSim::new(DEVICE);
    let log = Log::create_sim(&sim, LogConfig::new(AREA).policy(policy)).unwrap();
    let progress = Arc::new(Progress::default());
    let points: Arc<Mutex<Vec<(CrashPoint, Acked)>>> = Arc::default();
    {
        let (sink, p) = (points.clone(), progress.clone());
        sim.set_fence_hook(move |sim: &CrashSim| {
            // Acknowledgements first: whatever was acknowledged is durable in the image.
            let a = p.snapshot();
            let cp = sim.crash_point();
            // The reclaims begun are an upper bound: read after the image, which may hold
            // the stores of a reclaim the other thread began while it was captured.
            let begun = p.reclaiming.load(Ordering::SeqCst).max(1);
            sink.lock().unwrap().push((
                cp,
                Acked {
                    reclaiming: begun,
                    ..a
                },
            ));
        });
    }
    let sync = policy == ForcePolicy::Sync;
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (log, p) = (&log, &progress);
            s.spawn(move || {
                for i in 0..per_thread {
                    // Every other record of thread 1 goes through `append` (under Sync, the
                    // writer makes it durable itself); the rest are built in place.
                    let appends = t == 1 && i % 2 == 0;
                    let payload = tagged(t, i, len_of(t * 7 + i));
                    let lsn = loop {
                        let got = if appends {
                            log.append(&payload).map(Err)
                        } else {
                            log.reserve(len_of(t * 7 + i)).map(Ok)
                        };
                        // Build in place: the bytes depend on the LSN reserve hands out.
                        let mut res = match got {
                            Ok(Ok(r)) => r,
                            Ok(Err(lsn)) => break lsn,
                            Err(pgl::Error::LogFull { .. }) => {
                                // Full: force what is complete and free all but the last.
                                let done = log.completed_lsn();
                                if done > log.durable_lsn() {
                                    log.force(done).unwrap();
                                    p.forced.fetch_max(done, Ordering::SeqCst);
                                }
                                reclaim(log, p, log.durable_lsn().saturating_sub(1));
                                std::thread::yield_now();
                                continue;
                            }
                            Err(e) => panic!("{e}"),
                        };
                        fill(res.lsn(), &mut res);
                        break log.complete(res).unwrap();
                    };
                    if sync {
                        // Under Sync, append and complete return once the record and every
                        // earlier one are durable: a force that returned.
                        p.forced.fetch_max(lsn, Ordering::SeqCst);
                    }
                    // The policy's own forces: a Frequency leader returns with its record
                    // and every earlier one durable, and whatever `durable_lsn` says (a
                    // GroupCommit force by either thread included) must survive too.
                    let durable = log.durable_lsn();
                    if let ForcePolicy::Frequency(f) = policy {
                        if lsn % u64::from(f) == 0 {
                            assert!(durable >= lsn, "leader {lsn} returned at {durable}");
                        }
                    }
                    p.forced.fetch_max(durable, Ordering::SeqCst);
                    if i % 4 == 3 {
                        log.force(lsn).unwrap();
                        p.forced.fetch_max(lsn, Ordering::SeqCst);
                    }
                    if t == 0 && i % 6 == 5 {
                        reclaim(log, p, log.durable_lsn().saturating_sub(4));
                    }
                }
            });
        }
    });
    sim.clear_fence_hook();
    let end = progress.snapshot();
    assert!(
        log.start_lsn() > 1,
        "the workload must reclaim (start {})",
        log.start_lsn()
    );
    drop(log);
    let mut points = std::mem::take(&mut *points.lock().unwrap());
    points.push((sim.crash_point(), end));

    let target = target_states();
    let per_point = target.div_ceil(points.len() as u64).max(3);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut states, mut during_recovery) = (0u64, 0u64);
    let mut violations = Vec::new();
    for (k, (cp, a)) in points.iter().enumerate() {
        for j in 0..per_point {
            let dev = match j {
                0 => cp.device(DEVICE, |_| false),
                1 => cp.device(DEVICE, |_| true),
                _ => cp.device(DEVICE, |_| rng.next() % 2 == 0),
            };
            states += 1;
            if j == 2 {
                // Crash during recovery: capture the points of its own fences.
                let inner: Arc<Mutex<Vec<CrashPoint>>> = Arc::default();
                let sink = inner.clone();
                dev.set_fence_hook(move |s: &CrashSim| sink.lock().unwrap().push(s.crash_point()));
                let first = Log::open_sim(&dev).map(drop);
                dev.clear_fence_hook();
                if let Err(e) = first {
                    violations.push(format!("point {k} image {j}: recovery failed: {e}"));
                    continue;
                }
                for icp in inner.lock().unwrap().iter() {
                    for pick in 0..3 {
                        let d = icp.device(DEVICE, |_| match pick {
                            0 => false,
                            1 => true,
                            _ => rng.next() % 2 == 0,
                        });
                        during_recovery += 1;
                        if let Err(e) = verify(&d, *a, false) {
                            violations.push(format!(
                                "point {k} image {j}, crash during recovery ({pick}): {e}"
                            ));
                        }
                    }
                }
            }
            if let Err(e) = verify(&dev, *a, j % 16 == 1) {
                violations.push(format!(
                    "crash point {k} (fence {}, {} pending words), image {j}: {e}",
                    cp.fence(),
                    cp.pending()
                ));
            }
        }
    }
    let line = format!(
        "crash states explored: {} (log, {policy}: {} crash points, {states} images, \
         {during_recovery} crashed during recovery)\n",
        states + during_recovery,
        points.len()
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    assert!(
        violations.is_empty(),
        "{} violation(s), first: {:#?}",
        violations.len(),
        &violations[..violations.len().min(5)]
    );
    states + during_recovery
}

#[test]
fn crash_during_appends_and_reclaims_frequency() {
    assert!(suite(ForcePolicy::Frequency(4), 150) >= target_states().min(DEFAULT_STATES));
}

#[test]
fn crash_during_appends_and_reclaims_group_commit() {
    assert!(suite(ForcePolicy::GroupCommit(3), 120) >= target_states().min(DEFAULT_STATES));
}

#[test]
fn crash_during_appends_and_reclaims_sync() {
    assert!(suite(ForcePolicy::Sync, 80) >= target_states().min(DEFAULT_STATES));
}
