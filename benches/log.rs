//! The log benchmarks of issue 6 (Arcadia's evaluation, local mode):
//!
//! - `append`: latency of one `append` under `Sync`, by record size, one thread — the row
//!   `../shared/peers/pmdk/run.sh` measures for pmemlog (`PEER_SUITES=log`);
//! - `throughput`: records per second as ns per record (wall time / total records) for the
//!   policies `sync`, `group-128`, `freq-8`, `group-256`, `freq-16` on 1, 2 and 4 threads;
//! - `append-floor` (system `floor`): the same appends' bytes streamed into a ring file
//!   with one `sfence` each and nothing else: what no log with one ordering point per
//!   append can beat on this machine (`support/floor.rs`);
//! - `recovery`: `Log::open` plus a pass over every record of a full log, by log size
//!   (`size` is the log's bytes, `n` 1, `ns_per_op` the whole recovery; the table on stderr
//!   gives GB/s of verified records).
//!
//! Logs are created preallocated (`LogConfig::preallocate`), as PMDK's `pmemlog_create`
//! allocates its file, and the warm-up appends around the whole ring once: no timed append
//! faults a page in (a first store to a page of the mapping costs ~2 µs here), as none of
//! pmemlog's does (it rewinds to the same pages every run).
//!
//! Prints CSV (`suite,bench,system,config,size,threads,n,ns_per_op`, suite=log) on stdout,
//! a markdown table on stderr. `benches/compare-log.sh` prints pmemlog beside it.
//!
//! Environment: `PGL_BENCH_DIR` (default /dev/shm), `PGL_BENCH_N` (appends per thread,
//! default 100000), `PGL_BENCH_RUNS` (timed runs after a warm-up, median; default 5),
//! `PGL_BENCH_SIZES` (append sizes, default "64 256 1024 4096"), `PGL_BENCH_THREADS`
//! (default "1 2 4"), `PGL_BENCH_LOG_SIZE` (throughput record size, default 64),
//! `PGL_BENCH_LOG_MIB` (recovery log sizes in MiB, default "16 64 256"),
//! `PGL_BENCH_LOG_BENCHES` (default "append throughput recovery").

#[path = "support/floor.rs"]
mod floor;

use pgl::log::{ForcePolicy, Log, LogConfig};
use std::sync::Barrier;
use std::time::Instant;

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.split_whitespace()
                .filter_map(|s| s.parse().ok())
                .collect()
        })
        .unwrap_or_else(|| default.to_vec())
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// A log file in `dir`, removed when dropped.
struct Scratch(String);

impl Scratch {
    fn new(dir: &str, name: &str) -> Scratch {
        let p = format!("{dir}/pgl_bench_log_{}_{name}", std::process::id());
        let _ = std::fs::remove_file(&p);
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Appends `n` records of `size` bytes from each of `threads` threads; returns the wall
/// time in ns per record. A full log is reclaimed up to its durable LSN and the append
/// retried, as a program keeping a bounded log does.
fn run_once(log: &Log, size: usize, n: usize, threads: usize) -> f64 {
    let barrier = Barrier::new(threads + 1);
    let mut elapsed = 0.0;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (log, barrier) = (&log, &barrier);
            s.spawn(move || {
                let payload = vec![t as u8 + 1; size];
                barrier.wait();
                for _ in 0..n {
                    loop {
                        match log.append(&payload) {
                            Ok(_) => break,
                            Err(pgl::Error::LogFull { .. }) => {
                                let done = log.completed_lsn();
                                log.force(done).expect("force");
                                log.reclaim(done).expect("reclaim");
                            }
                            Err(e) => panic!("append: {e}"),
                        }
                    }
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let t0 = Instant::now();
        barrier.wait();
        elapsed = t0.elapsed().as_nanos() as f64;
    });
    elapsed / (n * threads) as f64
}

/// Median ns per record over `runs` timed runs on a fresh log.
fn bench(
    dir: &str,
    policy: ForcePolicy,
    size: usize,
    n: usize,
    runs: usize,
    threads: usize,
) -> f64 {
    let f = Scratch::new(dir, &format!("{policy}_{size}_{threads}"));
    let need = (n * threads * (size + 64 + 63)) as u64;
    let cap = need.clamp(1 << 20, 256 << 20);
    // Preallocated, as pmemlog_create's file is (posix_fallocate).
    let config = LogConfig::new(cap).policy(policy).preallocate(true);
    let log = Log::create(&f.0, config).expect("create bench log");
    // Warm-up: at least once around the ring, so that every page is mapped.
    let around = (log.capacity() as usize / size.max(1) + 1).div_ceil(threads);
    run_once(&log, size, around.max(n.min(10_000)), threads);
    let v = (0..runs)
        .map(|_| run_once(&log, size, n, threads))
        .collect();
    median(v)
}

/// Fills a log of `mib` MiB with 1 KiB records, then times open + a pass over them.
fn recovery(dir: &str, mib: usize, runs: usize) -> (f64, u64, u64) {
    let f = Scratch::new(dir, &format!("recovery_{mib}"));
    let cap = (mib as u64) << 20;
    let (records, bytes) = {
        let log = Log::create(&f.0, LogConfig::new(cap).policy(ForcePolicy::Frequency(64)))
            .expect("create");
        let payload = vec![0x5a; 1000];
        let mut n = 0u64;
        while log.append(&payload).is_ok() {
            n += 1;
        }
        log.force(log.completed_lsn()).expect("force");
        // 1000 payload bytes + the 24-byte header: 1024 bytes a record.
        (n, n * 1024)
    };
    let mut times = Vec::new();
    for _ in 0..runs.max(1) {
        let t0 = Instant::now();
        let log = Log::open(&f.0).expect("open");
        let mut seen = 0u64;
        for r in log.iter() {
            std::hint::black_box(&r.expect("valid").payload);
            seen += 1;
        }
        times.push(t0.elapsed().as_nanos() as f64);
        assert_eq!(seen, records, "every record recovered");
    }
    (median(times), records, bytes)
}

fn main() {
    let dir = std::env::var("PGL_BENCH_DIR").unwrap_or_else(|_| "/dev/shm".into());
    let n = env_num("PGL_BENCH_N", 100_000);
    let runs = env_num("PGL_BENCH_RUNS", 5).max(1);
    let sizes = env_list("PGL_BENCH_SIZES", &[64, 256, 1024, 4096]);
    let threads = env_list("PGL_BENCH_THREADS", &[1, 2, 4]);
    let tsize = env_num("PGL_BENCH_LOG_SIZE", 64);
    let mibs = env_list("PGL_BENCH_LOG_MIB", &[16, 64, 256]);
    let benches =
        std::env::var("PGL_BENCH_LOG_BENCHES").unwrap_or("append throughput recovery".into());
    let policies = [
        ForcePolicy::Sync,
        ForcePolicy::GroupCommit(128),
        ForcePolicy::Frequency(8),
        ForcePolicy::GroupCommit(256),
        ForcePolicy::Frequency(16),
    ];
    println!("suite,bench,system,config,size,threads,n,ns_per_op");
    let mut table = Vec::new();
    if benches.contains("append") {
        for &s in &sizes {
            let v = bench(&dir, ForcePolicy::Sync, s, n, runs, 1);
            println!("log,append,pgl,sync,{s},1,{n},{v:.0}");
            table.push(format!("| append | sync | {s} | 1 | {v:.0} ns |"));
            if let Some(v) = floor::log_append(&dir, s, n, runs) {
                println!("log,append-floor,floor,sync,{s},1,{n},{v:.0}");
                table.push(format!("| append-floor | sync | {s} | 1 | {v:.0} ns |"));
            }
        }
    }
    if benches.contains("throughput") {
        for p in policies {
            for &t in &threads {
                let v = bench(&dir, p, tsize, n, runs, t);
                println!("log,throughput,pgl,{p},{tsize},{t},{n},{v:.0}");
                table.push(format!(
                    "| throughput | {p} | {tsize} | {t} | {v:.0} ns ({:.2} M records/s) |",
                    1e3 / v
                ));
            }
        }
    }
    if benches.contains("recovery") {
        for &m in &mibs {
            let (ns, records, bytes) = recovery(&dir, m, runs);
            println!("log,recovery,pgl,sync,{},1,1,{ns:.0}", (m as u64) << 20);
            table.push(format!(
                "| recovery | {m} MiB | {records} records | 1 | {:.1} ms ({:.2} GB/s) |",
                ns / 1e6,
                bytes as f64 / ns
            ));
        }
    }
    eprintln!("\n| bench | config | size | threads | result |\n|---|---|---|---|---|");
    for row in table {
        eprintln!("{row}");
    }
}
