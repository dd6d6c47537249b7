//! Inspecting a log (`pgl log info|dump|check`) takes memory that does not grow with the
//! log, which may be up to 128 TiB: a 4 GiB sparse log holding a few records is inspected
//! without the process's peak resident memory growing by anything near its size (it was
//! read whole into memory). Its own binary: it measures the process's peak RSS.

mod support;

use pgl::log::{Inspection, Log, LogConfig};
use pgl::FlushMode;

/// The process's peak resident set (`VmHWM`), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn inspecting_a_large_sparse_log_does_not_read_it_whole() {
    const CAP: u64 = 4 << 30;
    let Some(before) = peak_rss() else {
        println!("skipped: /proc/self/status has no VmHWM on this system");
        return;
    };
    let path = support::test_dir().join(format!("pgl-log-inspect-big-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let log = match Log::create(&path, LogConfig::new(CAP).flush(FlushMode::None)) {
        Ok(log) => log,
        Err(e) => {
            println!("skipped: the scratch file system refuses a 4 GiB sparse log: {e}");
            return;
        }
    };
    for i in 0..100u8 {
        log.append(&[i; 300]).unwrap();
    }
    drop(log);
    let meta = std::fs::metadata(&path).unwrap();
    {
        use std::os::unix::fs::MetadataExt;
        if meta.blocks() * 512 > CAP / 2 {
            let _ = std::fs::remove_file(&path);
            println!("skipped: the scratch file system does not keep the log sparse");
            return;
        }
    }
    let before = peak_rss().unwrap_or(before);

    let seen = Inspection::open(&path).unwrap();
    assert_eq!(
        (
            seen.report.records,
            seen.report.next_lsn,
            seen.report.torn.clone()
        ),
        (100, 101, None)
    );
    let records: Vec<_> = seen.records().map(|r| r.unwrap()).collect();
    assert_eq!(records.len(), 100);
    assert!(records
        .iter()
        .zip(0u8..)
        .all(|(r, i)| r.lsn == u64::from(i) + 1 && r.payload == [i; 300]));
    drop(seen);

    let grew = peak_rss().unwrap().saturating_sub(before);
    let _ = std::fs::remove_file(&path);
    assert!(
        grew < 64 << 20,
        "inspecting a {CAP}-byte log raised the peak resident memory by {grew} bytes"
    );
}
