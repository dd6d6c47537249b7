//! Damage to a log: a corrupt record is detected (iteration stops there with a typed error,
//! recovery reports what it dropped), a corrupt superline copy is replaced by the other, a
//! record left behind a hole never comes back, and mutated log files never make pgl panic.
//!
//! `PGL_LOG_FUZZ` sets the number of mutated images (default 3,000).

mod support;
use support::Rng;

use pgl::log::format::{self, Superline, AREA_OFFSET};
use pgl::log::{ForcePolicy, Log, LogConfig};
use pgl::{CrashSim, Error, FlushMode};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::Arc;

struct TempLog(PathBuf);

impl TempLog {
    fn new(name: &str) -> TempLog {
        let p = std::env::temp_dir().join(format!("pgl-logf-{}-{name}.log", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempLog(p)
    }
}

impl Drop for TempLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Records of 100 bytes take 128 in the area: record `lsn` starts here in a new log.
fn record_offset(lsn: u64) -> u64 {
    AREA_OFFSET + (lsn - 1) * 128
}

fn filled(lsn: u64) -> Vec<u8> {
    vec![lsn as u8; 100]
}

#[test]
fn a_corrupt_record_stops_iteration_with_a_typed_error() {
    let f = TempLog::new("record");
    let cfg = LogConfig::new(64 << 10).flush(FlushMode::None);
    let log = Log::create(&f.0, cfg).unwrap();
    for lsn in 1..=10 {
        log.append(&filled(lsn)).unwrap();
    }
    // A scribble on record 5's payload, through the file (the mapping is shared).
    support::file_flip(&f.0, record_offset(5) + 24 + 50);
    let mut it = log.iter();
    for lsn in 1..=4 {
        assert_eq!(it.next().unwrap().unwrap().lsn, lsn);
    }
    match it.next() {
        Some(Err(e @ Error::LogRecordCorrupt { lsn: 5, offset, .. })) => {
            assert_eq!(offset, record_offset(5));
            let m = e.to_string();
            assert!(
                m.contains("checksum mismatch") && m.contains("LSN 5"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(it.next().is_none(), "iteration stops at the damage");
    drop(log);

    // Recovery cuts the log there and says what it dropped.
    let log = Log::open_with(&f.0, Some(FlushMode::None)).unwrap();
    let r = log.recovery();
    assert_eq!(r.next_lsn, 5);
    let torn = r.torn.clone().expect("reported");
    assert_eq!((torn.lsn, torn.offset), (5, record_offset(5)));
    assert!(torn.reason.contains("checksum"), "{}", torn.reason);
    assert_eq!(r.dropped, 6, "record 5 and the five after it");
    assert_eq!(log.iter().count(), 4);
    drop(log);

    // Reported once: the next open finds the cut log whole, and so does an inspection.
    let log = Log::open_with(&f.0, Some(FlushMode::None)).unwrap();
    let r = log.recovery();
    assert_eq!((r.torn.clone(), r.dropped, r.next_lsn), (None, 0, 5));
    assert_eq!(log.iter().count(), 4);
    drop(log);
    let seen = pgl::log::Inspection::open(&f.0).unwrap();
    assert_eq!((seen.report.torn.clone(), seen.report.dropped), (None, 0));
}

#[test]
fn a_corrupt_superline_copy_is_replaced_by_the_other() {
    for (copy, name) in [(0usize, "A"), (1, "B")] {
        let f = TempLog::new(&format!("super{name}"));
        let cfg = LogConfig::new(64 << 10)
            .flush(FlushMode::None)
            .policy(ForcePolicy::GroupCommit(4));
        let cap = {
            let log = Log::create(&f.0, cfg).unwrap();
            for lsn in 1..=8 {
                log.append(&filled(lsn)).unwrap();
            }
            log.reclaim(3).unwrap();
            log.capacity()
        };
        // Damage one copy: the log opens from the other, records intact.
        support::file_flip(&f.0, format::super_offset(copy, cap) + 33);
        let log = Log::open_with(&f.0, Some(FlushMode::None)).unwrap();
        let r = log.recovery();
        assert_eq!(r.superline_copy, 1 - copy, "copy {name} damaged");
        let why = r
            .other_copy_invalid
            .clone()
            .expect("the damage is reported");
        assert!(why.contains("checksum"), "{why}");
        // The reclaim wrote both copies: either one holds it.
        let start = 4;
        assert_eq!((r.start_lsn, r.next_lsn), (start, 9));
        assert_eq!(log.policy(), ForcePolicy::GroupCommit(4));
        drop(log);
        // Opening rewrote the damaged copy (an open writes both).
        let log = Log::open_with(&f.0, Some(FlushMode::None)).unwrap();
        assert_eq!(log.recovery().other_copy_invalid, None);
        assert_eq!(log.iter().count() as u64, 9 - start);
    }
}

/// A superline whose sequence number is at the 2^62 limit (only a forged file has one):
/// opening would write one past it, which no later open could read. It is refused, and
/// the file left as it was.
#[test]
fn a_log_at_the_sequence_limit_is_refused_not_left_unreadable() {
    let f = TempLog::new("seqmax");
    let cap = {
        let log = Log::create(&f.0, LogConfig::new(8192).flush(FlushMode::None)).unwrap();
        log.append(b"one").unwrap();
        log.capacity()
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f.0)
        .unwrap();
    for copy in 0..2 {
        let at = format::super_offset(copy, cap);
        let mut bytes = vec![0u8; format::SUPER_LEN];
        file.seek(SeekFrom::Start(at)).unwrap();
        file.read_exact(&mut bytes).unwrap();
        let mut line = Superline::decode(&bytes).expect("both copies valid after a create");
        line.seq = format::MAX_LSN;
        file.seek(SeekFrom::Start(at)).unwrap();
        file.write_all(&line.encode()).unwrap();
    }
    drop(file);
    let before = std::fs::read(&f.0).unwrap();
    for _ in 0..2 {
        match Log::open_with(&f.0, Some(FlushMode::None)) {
            Err(Error::NotALog { reason, .. }) => assert!(reason.contains("2^62"), "{reason}"),
            other => panic!("expected NotALog, got {:?}", other.map(|_| ())),
        }
    }
    assert!(
        std::fs::read(&f.0).unwrap() == before,
        "the refused open wrote"
    );
}

#[test]
fn both_superline_copies_bad_is_not_a_log() {
    let f = TempLog::new("superboth");
    let cap = Log::create(&f.0, LogConfig::new(8192).flush(FlushMode::None))
        .unwrap()
        .capacity();
    support::file_flip(&f.0, format::super_offset(0, cap) + 40);
    support::file_flip(&f.0, format::super_offset(1, cap) + 40);
    match Log::open(&f.0) {
        Err(e @ Error::NotALog { .. }) => {
            let m = e.to_string();
            assert!(m.contains("copy A at 0: checksum mismatch"), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

/// The persisted image of `sim` with bit 0 of byte `off` flipped, on a new device.
fn damaged(sim: &Arc<CrashSim>, off: u64) -> Arc<CrashSim> {
    let mut img = sim.persisted_image();
    img[(off / 8) as usize] ^= 1 << ((off % 8) * 8);
    CrashSim::from_image(&img, sim.len(), sim.capacity())
}

#[test]
fn a_record_left_behind_a_hole_never_comes_back() {
    let sim = CrashSim::new(1 << 20);
    let log = Log::create_sim(&sim, LogConfig::new(64 << 10)).unwrap();
    for lsn in 1..=5 {
        log.append(&filled(lsn)).unwrap();
    }
    drop(log);
    // Record 4 torn: recovery stops there, record 5 is dropped though it is intact.
    let dev = damaged(&sim, record_offset(4) + 30);
    let log = Log::open_sim(&dev).unwrap();
    assert_eq!(log.recovery().next_lsn, 4);
    assert_eq!(log.recovery().dropped, 2);
    // A new record 4 of the same size: old record 5 now sits exactly where record 5 is
    // due, with a valid checksum, from the previous epoch.
    assert_eq!(log.append(&[0xAB; 100]).unwrap(), 4);
    drop(log);
    let log = Log::open_sim(&dev).unwrap();
    assert_eq!(
        log.recovery().next_lsn,
        5,
        "the old record 5 must not be revived"
    );
    let got: Vec<_> = log.iter().map(|r| r.unwrap()).collect();
    assert_eq!(got.len(), 4);
    assert_eq!(got[3].payload, vec![0xAB; 100]);
}

#[test]
fn fuzzed_log_images_never_panic() {
    let rounds: u64 = std::env::var("PGL_LOG_FUZZ")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(3_000);
    // A log that wrapped, with reclaims, and records of many sizes.
    let sim = CrashSim::new(1 << 20);
    let cap = 8192u64;
    {
        let log =
            Log::create_sim(&sim, LogConfig::new(cap).policy(ForcePolicy::Frequency(3))).unwrap();
        for i in 0..200u64 {
            let len = (i * 37 % 500) as usize;
            if let Err(Error::LogFull { .. }) = log.append(&vec![i as u8; len]) {
                log.reclaim(log.durable_lsn().saturating_sub(2)).unwrap();
            }
        }
        log.force(log.completed_lsn()).unwrap();
    }
    let base = sim.persisted_image();
    let len = sim.len();
    let words = base.len() as u64;
    let mut rng = Rng(0x5eed);
    let (mut opened, mut refused) = (0u64, 0u64);
    for round in 0..rounds {
        let mut img = base.clone();
        match round % 4 {
            // Random bit flips anywhere.
            0 => {
                for _ in 0..1 + rng.below(8) {
                    let w = rng.below(words) as usize;
                    img[w] ^= 1 << rng.below(64);
                }
            }
            // Random words in the area near the live records.
            1 => {
                for _ in 0..1 + rng.below(4) {
                    let w = (AREA_OFFSET / 8 + rng.below(cap / 8)) as usize;
                    img[w] = rng.next();
                }
            }
            // A superline copy with a valid checksum but wild fields.
            _ => {
                let copy = rng.below(2) as usize;
                let off = (format::super_offset(copy, cap) / 8) as usize;
                let bytes: Vec<u8> = img[off..off + 16]
                    .iter()
                    .flat_map(|w| w.to_le_bytes())
                    .collect();
                let mut s = Superline::decode(&bytes).unwrap_or(Superline {
                    policy: 0,
                    policy_n: 0,
                    capacity: cap,
                    seq: 1,
                    start_lsn: 1,
                    start_voff: 0,
                    epoch_lsn: 1,
                    epoch: 1,
                    start_epoch: 1,
                });
                let wild = |r: &mut Rng, v: u64| match r.below(5) {
                    0 => r.next(),
                    1 => v.wrapping_add(r.below(5)),
                    2 => v.wrapping_sub(r.below(5)),
                    3 => r.below(1 << 20) * 64,
                    _ => v,
                };
                s.seq = wild(&mut rng, s.seq).max(u64::from(round % 3 == 0) * u64::MAX);
                s.start_lsn = wild(&mut rng, s.start_lsn);
                s.start_voff = wild(&mut rng, s.start_voff);
                s.epoch_lsn = wild(&mut rng, s.epoch_lsn);
                s.epoch = wild(&mut rng, u64::from(s.epoch)) as u32;
                s.start_epoch = wild(&mut rng, u64::from(s.start_epoch)) as u32;
                s.capacity = if rng.below(8) == 0 {
                    wild(&mut rng, s.capacity)
                } else {
                    cap
                };
                s.policy = rng.below(4) as u32;
                s.policy_n = wild(&mut rng, s.policy_n);
                let enc = s.encode();
                for (k, w) in enc.chunks(8).enumerate() {
                    img[off + k] = u64::from_le_bytes(w.try_into().unwrap());
                }
            }
        }
        let dev = CrashSim::from_image(&img, len, 1 << 20);
        match Log::open_sim(&dev) {
            Ok(log) => {
                opened += 1;
                for r in log.iter() {
                    if r.is_err() {
                        break;
                    }
                }
                let _ = log.append(b"after the fuzz");
                let _ = log.reclaim(log.durable_lsn());
                let _ = format!("{:?} {:?}", log.recovery(), log.stats());
                drop(log);
                // What opened once opens again: opening and the work after it never write
                // a log that no later open can read.
                if let Err(e) = Log::open_sim(&dev) {
                    panic!("round {round}: opened, then refused: {e}");
                }
            }
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty());
            }
        }
    }
    assert!(
        opened > 0 && refused > 0,
        "opened {opened}, refused {refused}"
    );
}

#[test]
fn damage_to_the_superline_copy_in_use_loses_no_record_and_revives_none() {
    // No reclaim since the log was opened: only the opening (copy B) named the epoch its
    // records carry; copy A is the one `format` wrote.
    let f = TempLog::new("super-in-use");
    let cfg = LogConfig::new(64 << 10).flush(FlushMode::None);
    let cap = {
        let log = Log::create(&f.0, cfg).unwrap();
        for lsn in 1..=8 {
            log.append(&filled(lsn)).unwrap();
        }
        log.capacity()
    };
    support::file_flip(&f.0, format::super_offset(1, cap) + 33);
    let mut expect: Vec<(u64, Vec<u8>)>;
    {
        let log = Log::open_with(&f.0, Some(FlushMode::None)).unwrap();
        expect = log
            .iter()
            .map(|r| r.unwrap())
            .map(|r| (r.lsn, r.payload))
            .collect();
        let lsn = log.append(&[0xAB; 100]).unwrap();
        expect.push((lsn, vec![0xAB; 100]));
    }
    let log = Log::open_with(&f.0, Some(FlushMode::None)).unwrap();
    let got: Vec<_> = log
        .iter()
        .map(|r| r.unwrap())
        .map(|r| (r.lsn, r.payload))
        .collect();
    assert_eq!(
        got.iter().map(|r| r.0).collect::<Vec<_>>(),
        expect.iter().map(|r| r.0).collect::<Vec<_>>(),
        "records the last recovery dropped came back"
    );
    assert_eq!(got, expect);
    assert_eq!(
        got.len(),
        9,
        "the eight forced records survive one damaged copy"
    );
}

#[test]
fn damage_to_the_superline_copy_a_reclaim_wrote_keeps_the_reclaim() {
    // A reclaim, then enough appends to reuse the reclaimed space: were the copy holding
    // the reclaim lost, an older start would point into space newer records now fill.
    for copy in [0usize, 1] {
        let f = TempLog::new(&format!("super-reclaim-{copy}"));
        let cfg = LogConfig::new(64 << 10).flush(FlushMode::None);
        let (cap, per_lap) = {
            let log = Log::create(&f.0, cfg).unwrap();
            let per_lap = log.capacity() / 128;
            for lsn in 1..=per_lap / 2 {
                log.append(&filled(lsn)).unwrap();
            }
            log.reclaim(per_lap / 2 - 1).unwrap();
            // Around the end and over the reclaimed records' space.
            for lsn in per_lap / 2 + 1..per_lap + per_lap / 4 {
                log.append(&filled(lsn)).unwrap();
            }
            (log.capacity(), per_lap)
        };
        let last = per_lap + per_lap / 4 - 1;
        support::file_flip(&f.0, format::super_offset(copy, cap) + 33);
        let log = Log::open_with(&f.0, Some(FlushMode::None)).unwrap();
        let r = log.recovery();
        assert_eq!(
            (r.start_lsn, r.next_lsn),
            (per_lap / 2, last + 1),
            "copy {copy} damaged: the reclaim or the records after it were lost"
        );
        let got: Vec<u64> = log.iter().map(|r| r.unwrap().lsn).collect();
        assert_eq!(got, (per_lap / 2..=last).collect::<Vec<_>>());
    }
}
