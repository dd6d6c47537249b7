//! `reclaim` racing appends and readers around the log's wrap point, for each force
//! policy. A small area wraps many times; a reclaimer frees everything up to the
//! completed LSN (an empty log, so the start sits right at the tail and at the wrap point
//! now and then) or just behind it; writers append, force their own LSN and read it back
//! with `iter_from`; a reader iterates from the start. Checked:
//!
//! - no thread waits forever (a watchdog fails the test if the run stalls);
//! - every forced LSN reads back with its own payload, unless it was reclaimed, and then
//!   `iter_from` says so (`LsnOutOfRange`) rather than returning another record;
//! - an `iter_from` iterator yields consecutive LSNs (no record after a hole), each with
//!   the payload appended at that LSN, and ends at a reclaimed record with `LsnOutOfRange`;
//! - `iter` yields increasing LSNs with their own payloads;
//! - after the run, the counters agree with what was appended, and the reopened log holds
//!   exactly the records from its start on.
//!
//! `PGL_LOG_RECLAIM_RACE_OPS` sets the appends per writer (default 1,500).

mod support;

use pgl::log::{ForcePolicy, Log, LogConfig, Lsn};
use pgl::{CrashSim, Error};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

const WRITERS: u64 = 3;

fn ops() -> u64 {
    std::env::var("PGL_LOG_RECLAIM_RACE_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

/// Writer `t`'s `i`-th payload: its key, then bytes that depend on it (length varies, so
/// records straddle the wrap point at every offset).
fn payload(t: u64, i: u64) -> Vec<u8> {
    let key = t << 32 | i;
    let len = 8 + (key.wrapping_mul(0x9e37_79b9) % 300) as usize;
    let mut v: Vec<u8> = (0..len)
        .map(|j| (key.wrapping_mul(31) as usize + j * 7) as u8)
        .collect();
    v[..8].copy_from_slice(&key.to_le_bytes());
    v
}

/// The key a payload starts with, checking that the rest is what `payload` makes of it.
fn key_of(p: &[u8]) -> u64 {
    let key = u64::from_le_bytes(p[..8].try_into().unwrap());
    assert_eq!(p, payload(key >> 32, key & 0xffff_ffff), "torn payload");
    key
}

fn run(policy: ForcePolicy) {
    let ops = ops();
    let sim = CrashSim::new(256 << 10);
    let log = Log::create_sim(&sim, LogConfig::new(16 << 10).policy(policy)).unwrap();
    let stop = AtomicBool::new(false);
    // LSN -> key of what was appended there.
    let appended: Mutex<HashMap<Lsn, u64>> = Mutex::new(HashMap::new());
    // (LSN, key) pairs that readers saw.
    let read: Mutex<Vec<(Lsn, u64)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let (log, stop, appended, read) = (&log, &stop, &appended, &read);
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                s.spawn(move || {
                    let mut i = 0;
                    while i < ops {
                        let p = payload(t, i);
                        let lsn = match log.append(&p) {
                            Ok(l) => l,
                            Err(Error::LogFull { .. }) => {
                                std::thread::yield_now();
                                continue;
                            }
                            Err(e) => panic!("append: {e}"),
                        };
                        appended.lock().unwrap().insert(lsn, t << 32 | i);
                        i += 1;
                        if i % 7 != 0 {
                            continue;
                        }
                        log.force(lsn).unwrap();
                        assert!(log.durable_lsn() >= lsn, "force({lsn}) returned early");
                        match log.iter_from(lsn) {
                            Ok(mut it) => match it.next() {
                                Some(Ok(r)) => {
                                    assert_eq!(r.lsn, lsn);
                                    assert_eq!(r.payload, p, "LSN {lsn} read back wrong");
                                }
                                Some(Err(Error::LsnOutOfRange { .. })) => {
                                    assert!(log.start_lsn() > lsn)
                                }
                                other => panic!("iter_from({lsn}) gave {other:?}"),
                            },
                            Err(Error::LsnOutOfRange { first, .. }) => {
                                assert!(first > lsn, "LSN {lsn} live but refused")
                            }
                            Err(e) => panic!("iter_from({lsn}): {e}"),
                        }
                    }
                })
            })
            .collect();
        // The reclaimer: everything completed, or all but a few records.
        s.spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let c = log.completed_lsn();
                let upto = if n % 2 == 0 { c } else { c.saturating_sub(3) };
                n += 1;
                if upto >= log.start_lsn() {
                    log.reclaim(upto).unwrap();
                    assert!(log.start_lsn() > upto);
                    assert!(
                        matches!(log.iter_from(upto), Err(Error::LsnOutOfRange { .. })),
                        "LSN {upto} still readable after reclaim({upto})"
                    );
                }
                std::thread::yield_now();
            }
        });
        // A reader from the start (following it) and one from a fixed LSN (never skipping).
        s.spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let mut prev = 0;
                for r in log.iter() {
                    let r = r.unwrap();
                    assert!(r.lsn > prev, "iter went from {prev} to {}", r.lsn);
                    prev = r.lsn;
                    seen.push((r.lsn, key_of(&r.payload)));
                }
                let from = log.start_lsn();
                let Ok(it) = log.iter_from(from) else {
                    continue;
                };
                let mut want = from;
                for r in it {
                    match r {
                        Ok(r) => {
                            assert_eq!(r.lsn, want, "iter_from({from}) skipped");
                            want += 1;
                            seen.push((r.lsn, key_of(&r.payload)));
                        }
                        Err(Error::LsnOutOfRange { .. }) => {
                            assert!(log.start_lsn() > want);
                            break;
                        }
                        Err(e) => panic!("iter_from({from}): {e}"),
                    }
                }
            }
            read.lock().unwrap().extend(seen);
        });
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let appended = appended.into_inner().unwrap();
    let total = WRITERS * ops;
    assert_eq!(appended.len() as u64, total);
    assert_eq!(log.next_lsn(), total + 1);
    for (lsn, key) in read.into_inner().unwrap() {
        assert_eq!(appended[&lsn], key, "LSN {lsn} read as another record");
    }
    let st = log.stats();
    assert_eq!(st.completed, total, "{st:?}");
    assert!(st.forced_records <= st.completed, "{st:?}");
    log.force(total).unwrap();
    assert_eq!(log.durable_lsn(), total);
    assert_eq!(log.completed_lsn(), total);
    let start = log.start_lsn();
    drop(log);
    let log = Log::open_sim(&sim).unwrap();
    assert_eq!(log.start_lsn(), start);
    let lsns: Vec<Lsn> = log
        .iter()
        .map(|r| {
            let r = r.unwrap();
            assert_eq!(appended[&r.lsn], key_of(&r.payload));
            r.lsn
        })
        .collect();
    assert_eq!(lsns, (start..=total).collect::<Vec<_>>());
}

#[test]
fn reclaim_races_appends_and_readers_under_sync() {
    support::within("reclaiming beside appends and readers", 120, || {
        run(ForcePolicy::Sync)
    });
}

#[test]
fn reclaim_races_appends_and_readers_under_group_commit() {
    support::within("reclaiming beside appends and readers", 120, || {
        run(ForcePolicy::GroupCommit(8))
    });
}

#[test]
fn reclaim_races_appends_and_readers_under_frequency() {
    support::within("reclaiming beside appends and readers", 120, || {
        run(ForcePolicy::Frequency(8))
    });
}
