//! A log at the limits of its numbering: LSNs, virtual offsets and superline sequence
//! numbers stay within 2^62 (`format::MAX_LSN`), the most a superline decodes and an open
//! accepts. Reaching one takes a forged file (or centuries of appends); whatever the log
//! then refuses, it refuses with a typed error, and it never writes a record or superline
//! that a later open cannot read.

use pgl::log::format::{self, Superline};
use pgl::log::{Log, LogConfig};
use pgl::{Error, FlushMode};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

struct TempLog(PathBuf);

impl TempLog {
    fn new(name: &str) -> TempLog {
        let p = std::env::temp_dir().join(format!("pgl-logl-{}-{name}.log", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempLog(p)
    }
}

impl Drop for TempLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

const CAP: u64 = 8192;

fn open(f: &TempLog) -> pgl::Result<Log> {
    Log::open_with(&f.0, Some(FlushMode::None))
}

/// A closed log with `appended` records of 40 bytes (64 in the area), whose superline
/// copies are then both rewritten by `forge` (as only a forged file could be).
fn forged(name: &str, appended: u64, forge: impl Fn(&mut Superline)) -> TempLog {
    let f = TempLog::new(name);
    {
        let log = Log::create(&f.0, LogConfig::new(CAP).flush(FlushMode::None)).unwrap();
        assert_eq!(log.capacity(), CAP);
        for i in 0..appended {
            log.append(&[i as u8; 40]).unwrap();
        }
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f.0)
        .unwrap();
    for copy in 0..2 {
        let at = format::super_offset(copy, CAP);
        let mut bytes = vec![0u8; format::SUPER_LEN];
        file.seek(SeekFrom::Start(at)).unwrap();
        file.read_exact(&mut bytes).unwrap();
        let mut line = Superline::decode(&bytes).expect("both copies valid after an open");
        forge(&mut line);
        file.seek(SeekFrom::Start(at)).unwrap();
        file.write_all(&line.encode()).unwrap();
    }
    f
}

fn expect_exhausted<T>(r: pgl::Result<T>, what: &str) {
    match r {
        Err(e @ Error::LogExhausted { .. }) => {
            let m = e.to_string();
            assert!(m.contains(what) && m.contains("2^62"), "{m}");
        }
        Err(e) => panic!("expected LogExhausted ({what}), got {e}"),
        Ok(_) => panic!("expected LogExhausted ({what}), got Ok"),
    }
}

/// The last LSN a log hands out is 2^62 - 1: the open after it finds the next LSN at
/// 2^62, which it accepts. Reserving 2^62 would leave a log no open accepts.
#[test]
fn reserve_refuses_an_lsn_past_the_limit() {
    let first = format::MAX_LSN - 2;
    let f = forged("lsn", 0, |l| {
        l.start_lsn = first;
        l.epoch_lsn = first;
    });
    {
        let log = open(&f).unwrap();
        assert_eq!(log.next_lsn(), first);
        assert_eq!(log.append(b"one").unwrap(), first);
        // Larger than a line: the log's quick bound assumes a line a record; the exact
        // numbering still admits it.
        assert_eq!(log.append(&[2; 100]).unwrap(), first + 1);
        expect_exhausted(log.append(b"three"), "LSN");
        expect_exhausted(log.reserve(0), "LSN");
        assert_eq!(
            log.next_lsn(),
            format::MAX_LSN,
            "a refused reserve takes no LSN"
        );
    }
    let log = open(&f).expect("the log reopens after reaching the limit");
    let got: Vec<_> = log.iter().map(|r| r.unwrap()).collect();
    assert_eq!(got.len(), 2);
    assert_eq!(
        (
            got[0].lsn,
            &got[0].payload[..],
            got[1].lsn,
            &got[1].payload[..]
        ),
        (first, &b"one"[..], first + 1, &[2; 100][..])
    );
    expect_exhausted(log.append(b"three"), "LSN");
}

/// Virtual offsets stop at 2^62 too: a record may end there, not past it, or a reclaim
/// behind it would write a start offset no superline decodes, losing both copies.
#[test]
fn reserve_refuses_a_virtual_offset_past_the_limit() {
    let f = forged("voff", 0, |l| l.start_voff = format::MAX_LSN - 128);
    {
        let log = open(&f).unwrap();
        let a = log.append(&[1; 40]).unwrap();
        let b = log.append(&[2; 40]).unwrap();
        expect_exhausted(log.append(&[3; 40]), "offset");
        log.reclaim(a).unwrap();
        log.reclaim(b).unwrap();
    }
    let log = open(&f).expect("the log reopens after its space reached the limit");
    assert_eq!(log.iter().count(), 0);
    expect_exhausted(log.append(&[3; 40]), "offset");
}

/// A forged start offset at 2^62 with records after it: open refuses it (its reclaims
/// would have to write offsets past 2^62), and leaves the file as it was.
#[test]
fn open_refuses_records_past_the_offset_limit() {
    // 2^62 is a multiple of the capacity: the records at area offset 0 sit there.
    assert_eq!(format::MAX_LSN % CAP, 0);
    let f = forged("openvoff", 3, |l| l.start_voff = format::MAX_LSN);
    let before = std::fs::read(&f.0).unwrap();
    match open(&f) {
        Err(Error::NotALog { reason, .. }) => assert!(reason.contains("2^62"), "{reason}"),
        other => panic!("expected NotALog, got {:?}", other.map(|_| ())),
    }
    assert!(
        std::fs::read(&f.0).unwrap() == before,
        "the refused open wrote"
    );
}

/// A superline sequence number one below the limit: the open writes the limit (which the
/// next open refuses, cleanly); a reclaim must not write past it, which no superline
/// decodes.
#[test]
fn reclaim_refuses_a_sequence_number_past_the_limit() {
    let f = forged("seq", 2, |l| l.seq = format::MAX_LSN - 1);
    {
        let log = open(&f).unwrap();
        expect_exhausted(log.reclaim(1), "sequence");
        assert_eq!(log.start_lsn(), 1, "a refused reclaim frees nothing");
        assert_eq!(log.iter().count(), 2);
    }
    match open(&f) {
        Err(Error::NotALog { reason, .. }) => assert!(reason.contains("2^62"), "{reason}"),
        other => panic!("expected NotALog, got {:?}", other.map(|_| ())),
    }
}
