//! The Pangolin Figure 3 micro-benchmark: latency per transaction of alloc, overwrite of the
//! whole object, and free, for 64, 256, 1024 and 4096-byte objects, on 1 and 2 threads.
//!
//! `alloc` is `tx.alloc_unzeroed` (the payload keeps the block's bytes, as with the peer's
//! `pmemobj_tx_alloc`). A fourth phase, `zalloc`, times `tx.alloc_zeroed` into the space the
//! free phase released (the peer kit has no such row); its objects are freed untimed.
//!
//! Prints CSV (`suite,bench,system,config,size,threads,n,ns_per_op`, the columns of
//! `../shared/peers/pmdk/run.sh`) on stdout, then a markdown table on stderr. With T threads,
//! n is ops per thread and ns_per_op = phase wall time / (n·T).
//!
//! Environment: `PGL_BENCH_DIR` (default /dev/shm), `PGL_BENCH_N` (default 100000),
//! `PGL_BENCH_RUNS` (timed runs after one warm-up, median; default 5), `PGL_BENCH_SIZES`,
//! `PGL_BENCH_THREADS`, `PGL_BENCH_CONFIGS` (default `MLPC`): the Pangolin paper's
//! protection configurations, and `MLC` (the core issue's: "checksums and replicated lanes
//! on", before zone parity), each printed in the config column:
//!
//! | config | lane replication | zone parity | object checksums |
//! |---|---|---|---|
//! | `pangolin` | no | no | no (micro-buffering only) |
//! | `ML` | yes | no | no |
//! | `MLP` | yes | yes | no |
//! | `MLC` | yes | no | yes |
//! | `MLPC` | yes | yes | yes (`Config::new`, the default) |
//!
//! (The pool header and each zone's metadata are kept twice in every configuration.)
//!
//! It also prints `system=floor` for overwrite, on as many threads: the memory work alone
//! of a fully protected commit of the same objects (copies, checksums, durable bytes, one
//! ordering point; `support/floor.rs`), each thread on a file of its own, what no
//! implementation of the protocol can beat (with two threads, what the machine's memory
//! bandwidth leaves, with no lock to wait for).
//!
//! Pools are created preallocated (`Config::preallocate`), as PMDK's `pmemobj_create`
//! allocates its file: no timed transaction faults a page in from the file system.

#[path = "support/floor.rs"]
mod floor;

use pgl::{Config, Oid, Persistent, Pool};
use std::sync::{Arc, Barrier};
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

struct Phases {
    alloc: f64,
    overwrite: f64,
    free: f64,
    zalloc: f64,
}

/// One round of the four phases; `round` numbers the rounds on one pool, so that each
/// round's overwrites store bytes its objects do not hold yet (they reuse the space the
/// round before freed, contents and all): a commit stores only bytes that changed.
fn run_once<const S: usize>(pool: &Pool, n: usize, threads: usize, round: usize) -> Phases
where
    [u8; S]: Persistent,
{
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let pool = pool.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut oids: Vec<Oid<[u8; S]>> = Vec::with_capacity(n);
                let fill = [(1 + (round * threads + t) % 255) as u8; S];
                barrier.wait();
                for _ in 0..n {
                    // pmemobj_tx_alloc leaves the payload as it was; so does alloc_unzeroed.
                    oids.push(pool.tx(|tx| tx.alloc_unzeroed::<[u8; S]>()).expect("alloc"));
                }
                barrier.wait();
                barrier.wait();
                for &o in &oids {
                    pool.tx(|tx| {
                        let mut h = tx.open(o)?;
                        h.copy_from_slice(&fill);
                        Ok(())
                    })
                    .expect("overwrite");
                }
                barrier.wait();
                barrier.wait();
                for &o in oids.iter() {
                    pool.tx(|tx| tx.free(o)).expect("free");
                }
                barrier.wait();
                // zalloc: allocations that zero their payload (pmemobj_tx_zalloc), into the
                // space the free phase just released; freed again untimed.
                oids.clear();
                barrier.wait();
                for _ in 0..n {
                    oids.push(pool.tx(|tx| tx.alloc_zeroed::<[u8; S]>()).expect("zalloc"));
                }
                barrier.wait();
                for &o in oids.iter() {
                    pool.tx(|tx| tx.free(o)).expect("free after zalloc");
                }
                barrier.wait();
            })
        })
        .collect();
    let phase = || {
        barrier.wait();
        let t0 = Instant::now();
        barrier.wait();
        t0.elapsed().as_nanos() as f64 / (n * threads) as f64
    };
    let alloc = phase();
    let overwrite = phase();
    let free = phase();
    let zalloc = phase();
    barrier.wait(); // the untimed frees after zalloc
    for h in handles {
        h.join().expect("bench thread");
    }
    Phases {
        alloc,
        overwrite,
        free,
        zalloc,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// The pool configuration named `name` (see the module docs), if it is one.
fn protection(name: &str, cfg: Config) -> Option<Config> {
    let (lanes, parity, checksums) = match name {
        "pangolin" => (false, false, false),
        "ML" => (true, false, false),
        "MLP" => (true, true, false),
        "MLC" => (true, false, true),
        "MLPC" => (true, true, true),
        _ => return None,
    };
    let mut cfg = cfg.parity(parity);
    cfg.replicate_lanes = lanes;
    cfg.checksums = checksums;
    Some(cfg)
}

fn bench_size<const S: usize>(
    dir: &str,
    config: &str,
    n: usize,
    runs: usize,
    threads: usize,
) -> Phases
where
    [u8; S]: Persistent,
{
    let path = format!("{dir}/pgl_bench_{}_{S}_{threads}", std::process::id());
    let _ = std::fs::remove_file(&path);
    let need = (n * threads * (S + 64)) as u64 * 2 + (256 << 20);
    // Preallocated, as pmemobj_create's file is (posix_fallocate).
    let cfg = Config::new("fig3").size(need).preallocate(true);
    let cfg = protection(config, cfg).expect("a known config");
    let pool = Pool::create(&path, &cfg).expect("create bench pool");
    run_once::<S>(&pool, n.min(10_000), threads, 0); // warm-up
    let mut a = Vec::new();
    let mut o = Vec::new();
    let mut f = Vec::new();
    let mut z = Vec::new();
    for round in 1..=runs {
        let p = run_once::<S>(&pool, n, threads, round);
        a.push(p.alloc);
        o.push(p.overwrite);
        f.push(p.free);
        z.push(p.zalloc);
    }
    drop(pool);
    let _ = std::fs::remove_file(&path);
    Phases {
        alloc: median(a),
        overwrite: median(o),
        free: median(f),
        zalloc: median(z),
    }
}

fn main() {
    let dir = std::env::var("PGL_BENCH_DIR").unwrap_or_else(|_| "/dev/shm".into());
    let n = env_num("PGL_BENCH_N", 100_000);
    let runs = env_num("PGL_BENCH_RUNS", 5).max(1);
    let sizes = env_list("PGL_BENCH_SIZES", &[64, 256, 1024, 4096]);
    let threads = env_list("PGL_BENCH_THREADS", &[1, 2]);
    let configs: Vec<String> = std::env::var("PGL_BENCH_CONFIGS")
        .unwrap_or_else(|_| "MLPC".into())
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if let Some(bad) = configs
        .iter()
        .find(|c| protection(c, Config::new("x")).is_none())
    {
        eprintln!("unknown config {bad:?} in PGL_BENCH_CONFIGS (pangolin ML MLP MLC MLPC)");
        std::process::exit(2);
    }
    println!("suite,bench,system,config,size,threads,n,ns_per_op");
    let mut rows = Vec::new();
    // Configurations innermost: the ones compared with each other run next to each other
    // in time (the machine's state drifts over a long run).
    for &s in &sizes {
        for &t in &threads {
            for config in &configs {
                let p = match s {
                    64 => bench_size::<64>(&dir, config, n, runs, t),
                    256 => bench_size::<256>(&dir, config, n, runs, t),
                    1024 => bench_size::<1024>(&dir, config, n, runs, t),
                    4096 => bench_size::<4096>(&dir, config, n, runs, t),
                    other => {
                        eprintln!("unsupported size {other} (64 256 1024 4096)");
                        continue;
                    }
                };
                for (bench, v) in [
                    ("alloc", p.alloc),
                    ("overwrite", p.overwrite),
                    ("free", p.free),
                    ("zalloc", p.zalloc),
                ] {
                    println!("fig3,{bench},pgl,{config},{s},{t},{n},{v:.0}");
                    rows.push((bench, config.clone(), s, t, v));
                }
            }
            // The protocol's floor (`support/floor.rs`), on as many threads.
            if [64, 256, 1024, 4096].contains(&s) {
                if let Some(v) = floor::overwrite(&dir, s, n, runs, t) {
                    println!("fig3,overwrite,floor,MLPC,{s},{t},{n},{v:.0}");
                    rows.push(("overwrite", "floor".into(), s, t, v));
                }
            }
        }
    }
    eprintln!("\n| bench | config | size | threads | pgl ns/op |\n|---|---|---|---|---|");
    for (b, c, s, t, v) in rows {
        eprintln!("| {b} | {c} | {s} | {t} | {v:.0} |");
    }
}
