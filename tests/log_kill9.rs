//! kill -9 of a process appending to a log: a child (this test binary, re-run with
//! `PGL_LOG_KILL9_CHILD=<log path>`) runs two threads that reserve records, fill them in
//! place with bytes derived from their LSN and complete them under `Sync`, reporting each
//! LSN on stdout once `complete` returned; one of them reclaims old records when the log
//! fills, reporting the reclaim before and after. The parent kills the child with SIGKILL at
//! random moments, reopens the log (recovery) and checks it:
//!
//! - every reported LSN that no reclaim may have freed is there, with its bytes;
//! - every record the log holds has exactly the bytes its LSN and length give (no torn or
//!   stale record is taken for a complete one);
//! - the log starts no later than the last reclaim begun allows, and no earlier than the
//!   last reclaim that returned;
//! - the next child appends after all of it.
//!
//! `PGL_LOG_KILL9_RUNS` sets the number of kills (default 100), `PGL_LOG_KILL9_SEED` the seed.

mod support;

use pgl::log::{ForcePolicy, Log, LogConfig, Lsn};
use pgl::FlushMode;
use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const CHILD_ENV: &str = "PGL_LOG_KILL9_CHILD";
const MARK: &str = "PGL-LOG-KILL9";

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The payload length of record `lsn`: 1 to 700 bytes, so records span one to a dozen
/// lines and some wrap the area's end.
fn len_of(lsn: Lsn) -> usize {
    1 + (mix(lsn) % 700) as usize
}

/// The bytes of record `lsn`.
fn bytes_of(lsn: Lsn, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| mix(lsn ^ ((i as u64) << 32)) as u8)
        .collect()
}

/// The child: appends until it is killed.
fn child(path: &Path) {
    let log = if path.exists() {
        Log::open(path).expect("child: reopen")
    } else {
        Log::create(
            path,
            LogConfig::new(64 << 10)
                .policy(ForcePolicy::Sync)
                .flush(FlushMode::detect()),
        )
        .expect("child: create")
    };
    let out = std::sync::Mutex::new(std::io::stdout());
    let say = |s: String| {
        let mut o = out.lock().unwrap();
        let _ = writeln!(o, "{MARK} {s}");
        let _ = o.flush();
    };
    say(format!("START {}", log.next_lsn()));
    std::thread::scope(|s| {
        for t in 0..2 {
            let (log, say) = (&log, &say);
            s.spawn(move || loop {
                let lsn = log.next_lsn(); // a guess: the real LSN comes with the reservation
                let mut res = match log.reserve(len_of(lsn)) {
                    Ok(r) => r,
                    Err(pgl::Error::LogFull { .. }) if t == 0 => {
                        let upto = log.durable_lsn().saturating_sub(8);
                        if upto >= log.start_lsn() {
                            say(format!("RECLAIMING {upto}"));
                            log.reclaim(upto).expect("child: reclaim");
                            say(format!("RECLAIMED {upto}"));
                        }
                        continue;
                    }
                    Err(pgl::Error::LogFull { .. }) => {
                        std::thread::yield_now();
                        continue;
                    }
                    Err(e) => panic!("child: reserve: {e}"),
                };
                // The length was chosen for a guessed LSN: the record's own LSN decides
                // its bytes, over whatever length it got.
                let lsn = res.lsn();
                let len = res.len(); // the payload's bytes (`Deref` to them)
                res.copy_from_slice(&bytes_of(lsn, len));
                let done = log.complete(res).expect("child: complete");
                assert_eq!(done, lsn);
                say(format!("C {lsn} {len}"));
            });
        }
    });
}

#[test]
fn log_kill9_child_entry() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(Path::new(&path));
    }
}

#[test]
fn kill_9_during_concurrent_appends_and_reclaims_loses_nothing_completed() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let runs: u64 = std::env::var("PGL_LOG_KILL9_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let seed: u64 = std::env::var("PGL_LOG_KILL9_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x10c_4111);
    let path = support::test_dir().join(format!("pgl-log-kill9-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let exe = std::env::current_exe().unwrap();

    // What the parent knows: every LSN reported completed (with its length), the largest
    // reclaim begun and the largest that returned.
    let mut completed: BTreeSet<(Lsn, usize)> = BTreeSet::new();
    let (mut begun, mut returned) = (0u64, 0u64);
    let (mut kills, mut records_checked, mut reclaims) = (0u64, 0u64, 0u64);
    let mut rng = seed;
    for run in 0..runs {
        rng = mix(rng);
        let delay = Duration::from_micros(200 + rng % 30_000);
        let (mut child, reports) = support::Reports::spawn(
            Command::new(&exe)
                .args(["log_kill9_child_entry", "--exact", "--nocapture"])
                .env(CHILD_ENV, &path),
            MARK,
        );
        // Killed once it has started (reopened the log), after a random delay.
        let first = reports.lines.recv_timeout(Duration::from_secs(20));
        std::thread::sleep(delay);
        child.kill().unwrap();
        let status = child.wait().unwrap();
        let (rest, stderr) = reports.finish();
        let first = first.unwrap_or_else(|_| panic!("run {run}: no report in 20 s:\n{stderr}"));
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                status.signal(),
                Some(libc::SIGKILL),
                "run {run}: the child ended before the kill ({status}); stderr:\n{stderr}"
            );
        }
        kills += 1;
        for l in std::iter::once(first).chain(rest) {
            let w: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| w[i].parse::<u64>().unwrap();
            match w[0] {
                "START" => {
                    let max = completed.iter().map(|c| c.0).max().unwrap_or(0);
                    assert!(
                        n(1) > max,
                        "run {run}: the child starts at LSN {} after {max}",
                        n(1)
                    );
                }
                "C" => {
                    completed.insert((n(1), n(2) as usize));
                }
                "RECLAIMING" => begun = begun.max(n(1)),
                "RECLAIMED" => {
                    returned = returned.max(n(1));
                    reclaims += 1;
                }
                _ => panic!("run {run}: unparsable report {l:?}"),
            }
        }

        let log = Log::open_with(&path, Some(FlushMode::detect()))
            .unwrap_or_else(|e| panic!("run {run}: reopen after kill -9 failed: {e}"));
        let start = log.start_lsn();
        assert!(
            start > returned && start <= begun.max(returned) + 1,
            "run {run}: the log starts at {start}; reclaims returned up to {returned}, begun up \
             to {begun}"
        );
        let mut held = std::collections::BTreeMap::new();
        for r in log.iter() {
            let r = r.unwrap_or_else(|e| panic!("run {run}: a recovered record fails: {e}"));
            assert_eq!(
                r.payload,
                bytes_of(r.lsn, r.payload.len()),
                "run {run}: record {} holds other bytes than it was completed with",
                r.lsn
            );
            held.insert(r.lsn, r.payload.len());
        }
        for &(lsn, len) in completed.range((start, 0)..) {
            assert_eq!(
                held.get(&lsn),
                Some(&len),
                "run {run}: completed record {lsn} ({len} bytes) is missing after kill -9"
            );
            records_checked += 1;
        }
        completed = completed.split_off(&(start, 0));
    }
    println!(
        "log kill -9: {kills} kills, {records_checked} checks of completed records (all intact), \
         {reclaims} reclaims"
    );
    assert!(reclaims > 0, "no reclaim ran: raise the runs");
    let _ = std::fs::remove_file(&path);
}
