//! A thread never waits for a log record it holds open itself. Records are made durable in
//! LSN order, so a force past a reservation its own caller has not completed could only
//! wait forever: `force`, a `Sync` append or completion, `reclaim` and a `reserve` whose
//! slots ran out return `Error::LogReservationHeld` instead, and a batch force of
//! `GroupCommit` or `Frequency` stops short of the held record. Waits for other threads'
//! records are unchanged.
//!
//! Every test body runs under a watchdog: before the fix each of them hung.

mod support;

use pgl::log::{ForcePolicy, Log, LogConfig, Lsn};
use pgl::{CrashSim, Error};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

fn sim_log(policy: ForcePolicy) -> (Arc<CrashSim>, Log) {
    let sim = CrashSim::new(8 << 20);
    let log = Log::create_sim(&sim, LogConfig::new(4 << 20).policy(policy)).unwrap();
    (sim, log)
}

/// The payloads a log recovered from `sim`'s persisted words alone holds.
fn recovered(sim: &CrashSim) -> Vec<(Lsn, Vec<u8>)> {
    let dev = sim.crash_point().device(sim.capacity(), |_| false);
    let log = Log::open_sim(&dev).unwrap();
    log.iter()
        .map(|r| r.map(|r| (r.lsn, r.payload.to_vec())))
        .collect::<pgl::Result<_>>()
        .unwrap()
}

/// `(op, lsn, held, completed)` of a `LogReservationHeld`, or a panic naming what came.
fn held<T: std::fmt::Debug>(r: pgl::Result<T>) -> (&'static str, Lsn, Lsn, Option<Lsn>) {
    match r {
        Err(Error::LogReservationHeld {
            op,
            lsn,
            held,
            completed,
            ..
        }) => (op, lsn, held, completed),
        other => panic!("expected LogReservationHeld, got {other:?}"),
    }
}

#[test]
fn a_sync_append_behind_a_held_reservation_errors_and_is_forced_with_it() {
    support::within("a log with a reservation held", 60, || {
        let (sim, log) = sim_log(ForcePolicy::Sync);
        let first = log.append(b"first").unwrap();
        let mut res = log.reserve(4).unwrap();
        let r = res.lsn();

        let err = log.append(b"behind").unwrap_err();
        let m = err.to_string();
        let (op, lsn, h, completed) = held(Err::<(), _>(err));
        assert_eq!((op, lsn, h, completed), ("append", r + 1, r, Some(r + 1)));
        assert!(m.contains("complete or drop"), "{m}");
        assert!(m.contains(&format!("record {} is complete", r + 1)), "{m}");
        assert!(m.contains("do not append it again"), "{m}");
        assert_eq!(
            log.durable_lsn(),
            first,
            "nothing past the held record is durable"
        );
        assert_eq!(log.completed_lsn(), first);

        res.copy_from_slice(b"held");
        assert_eq!(log.complete(res).unwrap(), r);
        assert_eq!(
            log.durable_lsn(),
            r + 1,
            "the held record's force covers the one after"
        );
        assert_eq!(
            recovered(&sim),
            vec![
                (first, b"first".to_vec()),
                (r, b"held".to_vec()),
                (r + 1, b"behind".to_vec())
            ]
        );
    });
}

#[test]
fn a_sync_completion_behind_a_held_reservation_errors_and_a_drop_unblocks_it() {
    support::within("a log with a reservation held", 60, || {
        let (sim, log) = sim_log(ForcePolicy::Sync);
        let older = log.reserve(4).unwrap();
        let mut newer = log.reserve(5).unwrap();
        let (o, n) = (older.lsn(), newer.lsn());
        newer.copy_from_slice(b"newer");
        assert_eq!(held(log.complete(newer)), ("complete", n, o, Some(n)));
        drop(older); // aborted: readers skip it, and later records may be forced
        log.force(n).unwrap();
        assert_eq!(recovered(&sim), vec![(n, b"newer".to_vec())]);
    });
}

#[test]
fn force_and_reclaim_past_a_held_reservation_error_and_force_nothing() {
    support::within("a log with a reservation held", 60, || {
        let (_sim, log) = sim_log(ForcePolicy::GroupCommit(1000));
        let a = log.append(b"a").unwrap();
        let res = log.reserve(1).unwrap();
        let r = res.lsn();
        let b = log.append(b"b").unwrap();
        assert_eq!(log.durable_lsn(), 0);

        assert_eq!(held(log.force(b)), ("force", b, r, None));
        assert_eq!(held(log.force(r)), ("force", r, r, None));
        assert_eq!(held(log.reclaim(b)), ("reclaim", b, r, None));
        assert_eq!(log.durable_lsn(), 0, "a refused force forces nothing");
        assert_eq!(log.start_lsn(), a, "a refused reclaim frees nothing");

        log.force(a).unwrap(); // before the held record: fine
        assert_eq!(log.durable_lsn(), a);
        log.complete(res).unwrap();
        log.reclaim(b).unwrap();
        assert_eq!(log.durable_lsn(), b);
        assert_eq!(log.start_lsn(), b + 1);
    });
}

#[test]
fn batch_forces_stop_short_of_the_callers_held_record() {
    for policy in [ForcePolicy::GroupCommit(2), ForcePolicy::Frequency(2)] {
        support::within("a log with a reservation held", 60, move || {
            let (sim, log) = sim_log(policy);
            let first = log.append(b"0").unwrap();
            let res = log.reserve(1).unwrap();
            let r = res.lsn();
            let mut last = r;
            for i in 1..=6u8 {
                last = log.append(&[i]).unwrap(); // the batch forces stop short; no error
            }
            assert!(log.stats().forces >= 1, "{policy}: a batch force ran");
            assert_eq!(
                log.durable_lsn(),
                first,
                "{policy}: forced up to the held record"
            );
            assert_eq!(log.completed_lsn(), first);

            log.complete(res).unwrap();
            log.force(last).unwrap();
            let got: Vec<Lsn> = recovered(&sim).iter().map(|r| r.0).collect();
            assert_eq!(got, (first..=last).collect::<Vec<_>>(), "{policy}");
        });
    }
}

#[test]
fn reserve_refuses_once_a_held_record_has_used_up_the_completion_slots() {
    support::within("a log with a reservation held", 60, || {
        let (_sim, log) = sim_log(ForcePolicy::Frequency(64));
        let res = log.reserve(1).unwrap();
        let r = res.lsn();
        let mut appended = 0u64;
        let err = loop {
            match log.append(&[1]) {
                Ok(_) => appended += 1,
                Err(e) => break e,
            }
            assert!(appended < 1 << 20, "reserve never refused");
        };
        let (op, _, h, completed) = held(Err::<(), _>(err));
        assert_eq!((op, h, completed), ("reserve", r, None));
        assert!(appended > 8192, "refused after only {appended} records");
        assert_eq!(log.durable_lsn(), r - 1);

        drop(res);
        let more = log.append(&[2]).unwrap();
        log.force(more).unwrap();
        assert_eq!(log.durable_lsn(), more);
    });
}

#[test]
fn a_thread_waits_for_other_threads_reservations_and_never_for_its_own() {
    support::within("a log with a reservation held", 60, || {
        let (_sim, log) = sim_log(ForcePolicy::GroupCommit(1000));
        let log = &log;
        let mine = log.reserve(1).unwrap();
        let m = mine.lsn();
        let forced = &AtomicBool::new(false);
        std::thread::scope(|s| {
            let (started_tx, started) = mpsc::channel();
            let waiter = s.spawn(move || {
                // Another thread's record: this force waits until it is completed.
                started_tx.send(()).unwrap();
                log.force(m).unwrap();
                forced.store(true, Ordering::SeqCst);
            });
            started.recv().unwrap();
            // The owner's own force refuses at once, however long the other waits.
            assert_eq!(held(log.force(m)), ("force", m, m, None));
            std::thread::sleep(Duration::from_millis(50));
            assert!(
                !forced.load(Ordering::SeqCst),
                "forced before the record was completed"
            );
            log.complete(mine).unwrap();
            waiter.join().unwrap();
        });
        assert!(forced.load(Ordering::SeqCst));
        assert_eq!(log.durable_lsn(), m);
    });
}

#[test]
fn two_threads_each_holding_a_record_the_other_needs_both_refuse() {
    support::within("a log with a reservation held", 60, || {
        let (_sim, log) = sim_log(ForcePolicy::GroupCommit(1000));
        let log = &log;
        let a = log.reserve(1).unwrap();
        let (to_b, b_rx) = mpsc::channel::<Lsn>();
        let (to_a, a_rx) = mpsc::channel::<Lsn>();
        std::thread::scope(|s| {
            s.spawn(move || {
                let b = log.reserve(1).unwrap();
                to_a.send(b.lsn()).unwrap();
                let _ = b_rx.recv().unwrap();
                // B needs its own record (after A's): it refuses rather than wait.
                assert_eq!(held(log.force(b.lsn())), ("force", b.lsn(), b.lsn(), None));
                log.complete(b).unwrap();
            });
            let b = a_rx.recv().unwrap();
            // A needs B's record and its own, which comes first: it refuses too.
            assert_eq!(held(log.force(b)), ("force", b, a.lsn(), None));
            to_b.send(b).unwrap();
            log.complete(a).unwrap();
            log.force(b).unwrap();
        });
        assert_eq!(log.durable_lsn(), 2);
    });
}

#[test]
fn reserve_forces_up_to_the_held_record_before_refusing() {
    // Records before the held one were never forced (aborted records trigger no policy
    // force), so the completion slots are full well before 16,384 records follow the held
    // one. Forcing up to the held record (what a batch force does) frees them: reserve
    // must not refuse while that makes room.
    support::within("a log with a reservation held", 60, || {
        let (_sim, log) = sim_log(ForcePolicy::GroupCommit(4096));
        for _ in 0..5000 {
            drop(log.reserve(1).unwrap());
        }
        assert_eq!(log.durable_lsn(), 0);
        let res = log.reserve(1).unwrap();
        let r = res.lsn();
        for i in 0..12_000u64 {
            match log.reserve(1) {
                Ok(x) => drop(x),
                Err(e) => panic!("refused after {i} records past held LSN {r}, with room: {e}"),
            }
        }
        assert_eq!(log.durable_lsn(), r - 1, "forced up to the held record");
        drop(res);
    });
}

/// The behaviour `Reservation`'s docs promise for a leaked reservation: it stays open for
/// good, this thread's forces past it keep erroring, and the log recovered after it ends
/// before it.
#[test]
fn a_leaked_reservation_stays_open_and_the_recovered_log_ends_before_it() {
    support::within("a log with a reservation held", 60, || {
        let (sim, log) = sim_log(ForcePolicy::Sync);
        let first = log.append(b"first").unwrap();
        let res = log.reserve(4).unwrap();
        let r = res.lsn();
        std::mem::forget(res);
        for _ in 0..3 {
            let (op, _, h, _) = held(log.append(b"behind"));
            assert_eq!((op, h), ("append", r));
        }
        assert_eq!(log.durable_lsn(), first);
        log.force(first).unwrap(); // forces up to the open record still work
        drop(log);
        assert_eq!(recovered(&sim), vec![(first, b"first".to_vec())]);
    });
}
