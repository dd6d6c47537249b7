//! The log's API on files and simulated devices, one thread: append and read back, build in
//! place, aborted reservations, wrap-around with reclaim against a model, reopen, errors.

use pgl::log::{ForcePolicy, Log, LogConfig, Record};
use pgl::{CrashSim, Error, FlushMode};
use std::collections::VecDeque;
use std::path::PathBuf;

/// A log path removed when the test ends.
struct TempLog(PathBuf);

impl TempLog {
    fn new(name: &str) -> TempLog {
        let p = std::env::temp_dir().join(format!("pgl-log-{}-{name}.log", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempLog(p)
    }
}

impl Drop for TempLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn payload(lsn: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (lsn.wrapping_mul(31) as usize + i * 7) as u8)
        .collect()
}

fn all(log: &Log) -> Vec<Record> {
    log.iter()
        .collect::<pgl::Result<Vec<_>>>()
        .expect("valid log")
}

#[test]
fn appended_records_read_back_after_reopen() {
    let f = TempLog::new("reopen");
    let lens = [0usize, 1, 40, 41, 64, 100, 1000, 4096];
    {
        let log = Log::create(&f.0, LogConfig::new(1 << 20).flush(FlushMode::None)).unwrap();
        assert_eq!(log.next_lsn(), 1);
        for (i, &len) in lens.iter().enumerate() {
            let lsn = log.append(&payload(i as u64 + 1, len)).unwrap();
            assert_eq!(lsn, i as u64 + 1);
            assert_eq!(log.durable_lsn(), lsn, "Sync forces every record");
        }
        let got = all(&log);
        assert_eq!(got.len(), lens.len());
    }
    let log = Log::open_with(&f.0, Some(FlushMode::None)).unwrap();
    let r = log.recovery();
    assert_eq!((r.start_lsn, r.next_lsn, r.records), (1, 9, 8));
    assert_eq!((r.torn.clone(), r.dropped), (None, 0));
    for (i, rec) in all(&log).iter().enumerate() {
        assert_eq!(rec.lsn, i as u64 + 1);
        assert_eq!(rec.payload, payload(rec.lsn, lens[i]));
    }
    assert_eq!(log.append(b"more").unwrap(), 9);
    let from: Vec<u64> = log.iter_from(7).unwrap().map(|r| r.unwrap().lsn).collect();
    assert_eq!(from, vec![7, 8, 9]);
    assert!(matches!(
        log.iter_from(11),
        Err(Error::LsnOutOfRange { .. })
    ));
}

/// A second `Log` over a file that is open would recover it under the first one's appends
/// (a new epoch, a cut tail): it is refused, and the file is left as it was.
#[test]
fn a_log_open_already_is_not_opened_again() {
    let f = TempLog::new("twice");
    let log = Log::create(&f.0, LogConfig::new(1 << 20).flush(FlushMode::None)).unwrap();
    log.append(b"first").unwrap();
    let before = std::fs::read(&f.0).unwrap();
    match Log::open_with(&f.0, Some(FlushMode::None)) {
        Err(Error::AlreadyOpen {
            ref path,
            what: "log",
            ..
        }) if path == &f.0 => {}
        other => panic!("a second open of an open log: {:?}", other.map(|_| ())),
    }
    assert!(
        std::fs::read(&f.0).unwrap() == before,
        "the refused open changed the file"
    );
    // Inspecting a live log is read-only and allowed.
    let seen = pgl::log::Inspection::open(&f.0).unwrap();
    assert_eq!(seen.records().filter(|r| r.is_ok()).count(), 1);
    drop(seen);
    assert_eq!(log.append(b"second").unwrap(), 2, "the first log goes on");
    drop(log);
    let log = Log::open_with(&f.0, Some(FlushMode::None)).unwrap();
    assert_eq!(all(&log).len(), 2, "once closed, the file opens again");
}

#[test]
fn records_are_built_in_place_and_dropped_reservations_are_skipped() {
    let sim = CrashSim::new(1 << 20);
    let log = Log::create_sim(
        &sim,
        LogConfig::new(64 << 10).policy(ForcePolicy::GroupCommit(1000)),
    )
    .unwrap();
    let mut a = log.reserve(16).unwrap();
    let mut b = log.reserve(8).unwrap();
    assert_eq!((a.lsn(), b.lsn()), (1, 2));
    b.copy_from_slice(b"second!!");
    a[..8].copy_from_slice(&7u64.to_le_bytes());
    a[8..].copy_from_slice(&9u64.to_le_bytes());
    // Completed out of order: the later one is not complete-up-to until the earlier is.
    assert_eq!(log.complete(b).unwrap(), 2);
    assert_eq!(log.completed_lsn(), 0);
    let c = log.reserve(5).unwrap();
    assert_eq!(log.complete(a).unwrap(), 1);
    assert_eq!(log.completed_lsn(), 2);
    log.force(2).unwrap();
    assert_eq!(log.durable_lsn(), 2);
    drop(c); // never completed: an aborted record
    assert_eq!(log.append(b"after").unwrap(), 4);
    log.force(4).unwrap();
    assert_eq!(log.durable_lsn(), 4);
    let got = all(&log);
    let lsns: Vec<u64> = got.iter().map(|r| r.lsn).collect();
    assert_eq!(lsns, vec![1, 2, 4]);
    assert_eq!(&got[1].payload, b"second!!");
    drop(log);
    let log = Log::open_sim(&sim).unwrap();
    assert_eq!(log.recovery().next_lsn, 5);
    assert_eq!(all(&log).len(), 3);
}

#[test]
fn wraps_around_with_reclaim_like_a_queue() {
    // A small area, random sizes, reclaim as the model's queue grows, reopen now and then.
    let sim = CrashSim::new(1 << 20);
    let mut log =
        Log::create_sim(&sim, LogConfig::new(8192).policy(ForcePolicy::Frequency(4))).unwrap();
    let mut model: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut x = 0x1234_5678_u64;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut wrapped_bytes = 0u64;
    for step in 0..3000u64 {
        let len = rnd(700) as usize;
        let p = payload(step, len);
        match log.append(&p) {
            Ok(lsn) => {
                model.push_back((lsn, p));
                wrapped_bytes += len as u64;
            }
            Err(Error::LogFull { .. }) => {
                // Free about half of what is live.
                let upto = model[model.len() / 2].0;
                log.reclaim(upto).unwrap();
                while model.front().is_some_and(|(l, _)| *l <= upto) {
                    model.pop_front();
                }
                assert_eq!(log.start_lsn(), upto + 1);
            }
            Err(e) => panic!("append: {e}"),
        }
        if step % 97 == 0 {
            log.force(log.next_lsn() - 1).unwrap();
            drop(log);
            log = Log::open_sim(&sim).unwrap();
            assert_eq!(log.recovery().torn, None);
        }
        if step % 31 == 0 {
            let got: Vec<(u64, Vec<u8>)> =
                all(&log).into_iter().map(|r| (r.lsn, r.payload)).collect();
            assert_eq!(got, Vec::from(model.clone()), "step {step}");
        }
    }
    assert!(wrapped_bytes > 20 * 8192, "the area wrapped many times");
}

#[test]
fn errors_say_what_went_wrong() {
    let sim = CrashSim::new(1 << 20);
    let log = Log::create_sim(&sim, LogConfig::new(4096)).unwrap();
    assert_eq!(log.max_record(), 4096 - 24);
    match log.reserve(5000) {
        Err(e @ Error::LogRecordTooLarge { .. }) => {
            assert!(e.to_string().contains("5000"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    log.append(&[1; 2500]).unwrap();
    match log.append(&[2; 2000]) {
        Err(
            e @ Error::LogFull {
                needed: 2048,
                free: 1536,
                largest: 1536,
                capacity: 4096,
                ..
            },
        ) => {
            let m = e.to_string();
            assert!(m.contains("reclaim") && m.contains("<crash-sim>"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    // Free space split by the end of the area: 3 records of 1000 bytes (1024 in the
    // area), the first reclaimed: 2048 bytes are free, 1024 before the end and 1024 at
    // the start, and a record of 1500 fits neither.
    let split = Log::create_sim(&CrashSim::new(1 << 20), LogConfig::new(4096)).unwrap();
    for i in 0..3 {
        split.append(&[i; 1000]).unwrap();
    }
    split.reclaim(1).unwrap();
    match split.append(&[9; 1500]) {
        Err(e @ Error::LogFull { free, largest, .. }) => {
            assert_eq!((free, largest), (2048, 1024), "{e}");
            assert!(
                e.to_string().contains("at most 1024 of them in one piece"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        log.force(2),
        Err(Error::LsnOutOfRange { op: "force", .. })
    ));
    assert!(matches!(
        log.reclaim(5),
        Err(Error::LsnOutOfRange { op: "reclaim", .. })
    ));
    log.reclaim(1).unwrap();
    log.append(&[2; 2000]).unwrap();
    assert!(matches!(
        Log::create_sim(&sim, LogConfig::new(4096)),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        Log::create_sim(&CrashSim::new(1 << 20), LogConfig::new(100)),
        Err(Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        Log::create_sim(
            &CrashSim::new(1 << 20),
            LogConfig::new(4096).policy(ForcePolicy::Frequency(0))
        ),
        Err(Error::InvalidConfig { .. })
    ));
}

#[test]
fn the_policy_is_stored_and_counted() {
    let f = TempLog::new("policy");
    let log = Log::create(
        &f.0,
        LogConfig::new(1 << 20)
            .policy(ForcePolicy::Frequency(8))
            .flush(FlushMode::None),
    )
    .unwrap();
    for i in 0..20u64 {
        log.append(&i.to_le_bytes()).unwrap();
    }
    let s = log.stats();
    assert_eq!(s.completed, 20);
    assert_eq!(s.forces, 2, "LSNs 8 and 16 forced");
    assert_eq!(s.forced_records, 16);
    assert_eq!(s.window_now, 4);
    assert_eq!(s.window_max, 8);
    assert_eq!(s.window_histogram[3], 2);
    assert_eq!(log.durable_lsn(), 16);
    drop(log);
    let log = Log::open_with(&f.0, Some(FlushMode::None)).unwrap();
    assert_eq!(log.policy(), ForcePolicy::Frequency(8));

    let g = TempLog::new("group");
    let log = Log::create(
        &g.0,
        LogConfig::new(1 << 20)
            .policy(ForcePolicy::GroupCommit(5))
            .flush(FlushMode::None),
    )
    .unwrap();
    for i in 0..12u64 {
        log.append(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(log.durable_lsn(), 10);
    assert_eq!(log.stats().forces, 2);

    // Sync: each append a force of its own record (its appender makes it durable and
    // moves the frontier without the force lock: still counted).
    let h = TempLog::new("sync");
    let log = Log::create(&h.0, LogConfig::new(1 << 20).flush(FlushMode::None)).unwrap();
    for i in 0..20u64 {
        log.append(&i.to_le_bytes()).unwrap();
    }
    let s = log.stats();
    assert_eq!((s.forces, s.forced_records), (20, 20));
    assert_eq!((s.window_now, s.window_max), (0, 1));
    assert_eq!(s.window_histogram[0], 20);
    assert_eq!(log.durable_lsn(), 20);
}

#[test]
fn not_a_log_is_a_typed_error() {
    let f = TempLog::new("notalog");
    std::fs::write(&f.0, vec![7u8; 20000]).unwrap();
    match Log::open(&f.0) {
        Err(e @ Error::NotALog { .. }) => {
            let m = e.to_string();
            assert!(m.contains("copy A") && m.contains("copy B"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(&f.0, b"short").unwrap();
    assert!(matches!(Log::open(&f.0), Err(Error::NotALog { .. })));
}

#[test]
fn log_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Log>();
}

#[test]
fn an_empty_log_takes_a_record_of_max_record_bytes_wherever_its_tail_is() {
    let sim = CrashSim::new(1 << 20);
    let log = Log::create_sim(&sim, LogConfig::new(4096)).unwrap();
    let first = log.append(&[1u8; 100]).unwrap();
    log.reclaim(first).unwrap();
    // Nothing is live, yet the tail is at 128: the record must wrap to offset 0.
    let big = payload(2, log.max_record() as usize);
    let lsn = log.append(&big).unwrap(); // was LogFull { needed: 4096, free: 4096 }
    assert_eq!(
        all(&log),
        vec![Record {
            lsn,
            payload: big.clone()
        }]
    );
    drop(log);
    let log = Log::open_sim(&sim).unwrap();
    assert_eq!(log.recovery().next_lsn, lsn + 1);
    // The record fills the area: not the area and the bytes it skipped (review).
    assert_eq!(log.recovery().bytes, log.capacity());
    assert_eq!(all(&log), vec![Record { lsn, payload: big }]);
    log.reclaim(lsn).unwrap();
    assert_eq!(log.append(b"after").unwrap(), lsn + 1);
}

/// A capacity no file or address space holds is a typed config error naming the limit,
/// whatever the number: the size arithmetic (rounding up to lines, adding the superline
/// pages) overflowed near `u64::MAX` and panicked, and past 2^63 the file was refused with
/// a bare `TryFromIntError`.
#[test]
fn a_capacity_too_large_for_any_log_is_refused_with_the_limit() {
    let f = TempLog::new("huge");
    for cap in [u64::MAX, u64::MAX - 63, u64::MAX - 8192, 1 << 63, 1 << 62] {
        let sim = CrashSim::new(1 << 20);
        for made in [
            Log::create_sim(&sim, LogConfig::new(cap)),
            Log::create(&f.0, LogConfig::new(cap)),
        ] {
            match made {
                Err(e @ Error::InvalidConfig { .. }) => {
                    let m = e.to_string();
                    assert!(m.contains(&cap.to_string()) && m.contains("at most"), "{m}");
                }
                other => panic!("capacity {cap}: {other:?}"),
            }
        }
        assert!(!f.0.exists(), "a refused create left a file");
    }
}

/// An inspection of a live log never hands out bytes that change, nor panics: the log goes
/// on appending and wrapping over the records the inspection found, and what it handed out
/// before stays as it read it; a record written over since its scan is reported, not shown
/// changed. (It borrowed the live mapping: a payload changed under its `&[u8]`, and a
/// length word overwritten since the scan sliced past the area and panicked. It then read
/// the whole file into memory, which a log of up to 128 TiB cannot afford; it now reads
/// each record when it hands it out, and verifies it again.)
#[test]
fn an_inspection_of_a_live_log_never_shows_a_record_the_log_changed() {
    let f = TempLog::new("inspect-live");
    let log = Log::create(&f.0, LogConfig::new(4096).flush(FlushMode::None)).unwrap();
    for i in 1..=3u8 {
        log.append(&[i; 40]).unwrap(); // 64 bytes each, at area offsets 0, 64 and 128
    }
    let seen = pgl::log::Inspection::open(&f.0).unwrap();
    let before: Vec<(u64, Vec<u8>)> = seen
        .records()
        .map(|r| r.map(|r| (r.lsn, r.payload)).unwrap())
        .collect();
    let expected = (1..=3u8)
        .map(|i| (u64::from(i), vec![i; 40]))
        .collect::<Vec<_>>();
    assert_eq!(before, expected);
    log.reclaim(3).unwrap();
    // A record too long for the space left before the end wraps to offset 0; its payload
    // lies where records 1 and 2 were, with a length word of 2^30 where 2's header was.
    let mut big = vec![0xee; 3900];
    big[64 - 24 + 8..64 - 24 + 12].copy_from_slice(&(1u32 << 30).to_le_bytes());
    log.append(&big).unwrap();
    assert_eq!(before, expected, "what was handed out changed");
    assert_eq!((seen.report.records, seen.report.next_lsn), (3, 4));
    let after: Vec<_> = seen.records().collect();
    match &after[..] {
        [Err(e @ Error::LsnOutOfRange { lsn: 1, .. })] => {
            let m = e.to_string();
            assert!(m.contains("inspect the log again"), "{m}");
            assert!(m.contains(&*f.0.to_string_lossy()), "{m}");
        }
        other => panic!("records written over since the scan: {other:?}"),
    }
}

/// An LSN or a size the log cannot take is reported with the file, the LSN and what to
/// do, whichever call met it (the messages named neither the file nor a remedy, and an
/// iterator's said `iter(1)`, a call that does not exist).
#[test]
fn lsn_and_size_errors_name_the_file_and_say_what_to_do() {
    let f = TempLog::new("lsn-errors");
    let log = Log::create(&f.0, LogConfig::new(4096).flush(FlushMode::None)).unwrap();
    let file = f.0.display().to_string();
    let stale = log.iter();
    for i in 0..3u8 {
        log.append(&[i; 8]).unwrap();
    }
    let mut old = log.iter_from(1).unwrap();
    log.reclaim(2).unwrap();
    let msg = |e: Error| e.to_string();
    let cases = [
        (
            msg(log.force(7).unwrap_err()),
            "LSN 7",
            "not been reserved yet",
        ),
        (
            msg(log.reclaim(4).unwrap_err()),
            "LSN 4",
            "not been reserved yet",
        ),
        (msg(log.iter_from(1).unwrap_err()), "LSN 1", "reclaimed"),
        (
            msg(old.next().unwrap().unwrap_err()),
            "LSN 1",
            "Log::iter_from at",
        ),
        (
            msg(log.reserve(5000).unwrap_err()),
            "5000",
            "split the record",
        ),
    ];
    for (m, what, todo) in cases {
        assert!(
            m.contains(&file) && m.contains(what) && m.contains(todo),
            "{m}"
        );
    }
    assert_eq!(stale.count(), 0, "made before any record was complete");
}

/// A reclaim by another thread meets an iterator between its records. `Log::iter` (the
/// live records, whatever the start) skips ahead to the new start, even before its first
/// record, and never fails for it (it failed at once with `LsnOutOfRange`); `Log::iter_from`
/// (from an LSN, no gap) yields one typed error naming the first live LSN, to resume from.
#[test]
fn iterators_meet_a_reclaim_as_their_contract_says() {
    let f = TempLog::new("iter-reclaim");
    let log = Log::create(&f.0, LogConfig::new(4096).flush(FlushMode::None)).unwrap();
    for i in 1..=6u8 {
        log.append(&[i; 8]).unwrap();
    }
    let lsns = |it: pgl::log::Iter<'_>| -> Vec<u64> { it.map(|r| r.unwrap().lsn).collect() };

    // Reclaimed between `iter()` and its first `next()`.
    let all = log.iter();
    let mut exact = log.iter_from(1).unwrap();
    log.reclaim(2).unwrap();
    assert_eq!(lsns(all), [3, 4, 5, 6]);
    match exact.next() {
        Some(Err(Error::LsnOutOfRange {
            op: "iter",
            lsn: 1,
            first: 3,
            ..
        })) => {}
        other => panic!("iter_from must not skip: {other:?}"),
    }
    assert!(exact.next().is_none(), "it ends after the error");
    assert_eq!(lsns(log.iter_from(3).unwrap()), [3, 4, 5, 6], "resumed");

    // Reclaimed in the middle: the LSNs jump.
    let mut all = log.iter();
    assert_eq!(all.next().unwrap().unwrap().lsn, 3);
    log.reclaim(4).unwrap();
    assert_eq!(lsns(all), [5, 6]);

    // Everything the iterator was to read reclaimed: it ends, without an error.
    let all = log.iter();
    log.append(&[7; 8]).unwrap();
    log.reclaim(6).unwrap();
    assert_eq!(
        lsns(all),
        Vec::<u64>::new(),
        "7 came after the iterator was made"
    );
    assert_eq!(lsns(log.iter()), [7]);
}

/// Under `Frequency(f)` the window stays within about `f` records for one thread even when
/// the records at multiples of `f` are dropped, not completed: the batch force rides on
/// the LSN, whichever way it is sealed. (A dropped reservation forced nothing, so with
/// every `f`-th record aborted nothing was ever made durable.)
#[test]
fn frequency_forces_at_its_lsns_even_when_those_records_are_dropped() {
    let sim = CrashSim::new(1 << 20);
    let log = Log::create_sim(
        &sim,
        LogConfig::new(1 << 16).policy(ForcePolicy::Frequency(4)),
    )
    .unwrap();
    for _ in 0..40 {
        if log.next_lsn() % 4 == 0 {
            drop(log.reserve(8).unwrap());
        } else {
            log.append(b"kept").unwrap();
        }
        assert!(log.stats().window_now <= 4, "{:?}", log.stats());
    }
    assert_eq!(log.durable_lsn(), 40);
}

#[test]
fn an_inspection_from_an_lsn_hands_out_what_the_whole_one_does_from_there() {
    // A log whose live records start mid-area and wrap around its end.
    let f = TempLog::new("inspect-from");
    let cfg = LogConfig::new(8192)
        .flush(FlushMode::None)
        .policy(ForcePolicy::GroupCommit(4));
    let log = Log::create(&f.0, cfg).unwrap();
    let mut lsn = 0;
    for step in 0..200u64 {
        let p = payload(step, (step as usize * 37) % 300);
        match log.append(&p) {
            Ok(l) => lsn = l,
            Err(Error::LogFull { .. }) => {
                log.reclaim(lsn - 8).unwrap();
                lsn = log.append(&p).unwrap();
            }
            Err(e) => panic!("append: {e}"),
        }
    }
    log.force(lsn).unwrap();
    let (first, next) = (log.start_lsn(), log.next_lsn());
    assert!(first > 1, "reclaimed: the live records start mid-area");
    drop(log);

    let seen = pgl::log::Inspection::open(&f.0).unwrap();
    let whole: Vec<(u64, Vec<u8>)> = seen
        .records()
        .map(|r| r.map(|r| (r.lsn, r.payload)))
        .collect::<pgl::Result<_>>()
        .unwrap();
    assert_eq!(whole.len() as u64, next - first);
    for from in [
        0,
        first - 1,
        first,
        first + 1,
        (first + next) / 2,
        next - 1,
        next,
        next + 5,
    ] {
        let got: Vec<(u64, Vec<u8>)> = seen
            .records_from(from)
            .map(|r| r.map(|r| (r.lsn, r.payload)))
            .collect::<pgl::Result<_>>()
            .unwrap();
        let want: Vec<(u64, Vec<u8>)> = whole.iter().filter(|(l, _)| *l >= from).cloned().collect();
        assert_eq!(got, want, "from LSN {from} (live {first}..{next})");
    }
}
