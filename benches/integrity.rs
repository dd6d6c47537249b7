//! What fault tolerance costs beyond commits: page-repair latency, scrub throughput, and
//! the space parity and replicas take.
//!
//! ```text
//! cargo bench --bench integrity
//! ```
//!
//! - **repair**: a pool with 100 data rows per zone, filled with 4000-byte objects; each
//!   round injects a media error (`Fault::MediaError`: the page is destroyed and
//!   protected) under a random object and times the next load from it, which faults, is
//!   rebuilt from the 99 other rows and the parity row by pgl's handler, and completes.
//!   CSV `repair,page,pgl,rows100,4096,1,N,ns` (mean) and the median on stderr.
//! - **scrub**: `pool.scrub(false, ..)` over the same objects: every checksum verified and
//!   every zone's parity compared with its rows. CSV `scrub,objects,pgl,MLPC,4000,1,N,ns`
//!   (per object) and MB/s on stderr.
//! - **space**: the parity rows, the second copies of the header and the redo lanes, and
//!   the zone metadata chunks (which hold both copies of each zone's metadata) of a 1 GiB
//!   pool with the default geometry, as a share of the file; the file is created to check
//!   the arithmetic against its real size.
//!
//! Environment: `PGL_BENCH_DIR` (default /dev/shm), `PGL_BENCH_N` (repairs, default 400),
//! `PGL_BENCH_RUNS` (scrubs, median; default 5).

use pgl::geometry::PAGE;
use pgl::{Config, Fault, Oid, Pool};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

type Obj = [u8; 4000];

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

fn repair_and_scrub(dir: &std::path::Path) -> pgl::Result<()> {
    let n = env_num("PGL_BENCH_N", 400).max(1);
    let runs = env_num("PGL_BENCH_RUNS", 5).max(1);
    let path = dir.join(format!("pgl-bench-integrity-{}.pool", std::process::id()));
    let config = Config::new("bench-integrity").size(128 << 20);
    assert_eq!(config.rows, 100, "the default geometry keeps 100 data rows");
    let pool = Pool::reset(&path, &config)?;
    // Fill most of the first zone's data rows, so that every page column rebuilt has data
    // in every row.
    let objects = (config.geometry().zone_size() * 9 / 10) / (4000 + 16);
    let oids: Vec<Oid<Obj>> = (0..objects)
        .map(|i| pool.tx(|tx| tx.alloc([(i % 251) as u8; 4000])))
        .collect::<pgl::Result<_>>()?;

    // Repair latency.
    let mut rng = Rng(0x4e9a);
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let k = rng.below(oids.len() as u64) as usize;
        let at = 16 + rng.below(3900) as usize;
        pool.inject(&Fault::MediaError {
            offset: oids[k].raw() + at as u64,
        })?;
        // Timed from the get: it may be the first load from the page (its header's).
        let t = Instant::now();
        let obj = pool.get(oids[k])?;
        let byte = black_box(obj[at]);
        times.push(t.elapsed());
        drop(obj);
        assert_eq!(byte, (k % 251) as u8, "object {k} rebuilt byte-exact");
    }
    let s = pool.stats();
    assert_eq!(
        (s.media_errors_repaired, s.media_errors_lost),
        (n as u64, 0),
        "every media error repaired"
    );
    let mean = times.iter().sum::<Duration>() / n as u32;
    times.sort();
    let median = times[n / 2];
    println!("repair,page,pgl,rows100,{PAGE},1,{n},{}", mean.as_nanos());
    eprintln!(
        "repair: {n} media errors, each page rebuilt from 100 rows at the faulting load: \
         mean {:.1} us, median {:.1} us, max {:.1} us (target <= 60 us)",
        mean.as_secs_f64() * 1e6,
        median.as_secs_f64() * 1e6,
        times[n - 1].as_secs_f64() * 1e6
    );

    // Scrub throughput.
    let mut scrubs = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let report = pool.scrub(false, |_, _| {})?;
        scrubs.push(t.elapsed());
        assert!(report.is_clean(), "nothing to find: {report:?}");
        assert!(report.objects_checked >= objects);
    }
    scrubs.sort();
    let scrub = scrubs[runs / 2];
    let bytes = objects * 4000;
    println!(
        "scrub,objects,pgl,MLPC,4000,1,{objects},{}",
        scrub.as_nanos() / u128::from(objects)
    );
    eprintln!(
        "scrub: {objects} objects ({:.0} MiB) and the zones' parity in {:.1} ms: {:.0} MB/s",
        bytes as f64 / (1 << 20) as f64,
        scrub.as_secs_f64() * 1e3,
        bytes as f64 / scrub.as_secs_f64() / 1e6
    );
    drop(pool);
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// Bytes of a default 1 GiB pool by what they hold.
fn space(dir: &std::path::Path) -> pgl::Result<()> {
    let config = Config::new("bench-space").size(1 << 30);
    let geo = config.geometry();
    let zones = geo.zones_for(config.size);
    let file = geo.pool_size(zones);
    let parity = zones * geo.row_size();
    let replicas = PAGE + geo.lanes * geo.lane_size; // header copy B, lane copies B
    let metadata = zones * geo.chunk_size; // chunk 0 of each zone
    let data = zones * geo.rows * geo.row_size() - metadata;
    let path = dir.join(format!("pgl-bench-space-{}.pool", std::process::id()));
    let pool = Pool::reset(&path, &config)?;
    let real = std::fs::metadata(&path)
        .map_err(|source| pgl::Error::Io {
            op: "stat the 1 GiB pool",
            path: path.clone(),
            source,
        })?
        .len();
    drop(pool);
    let _ = std::fs::remove_file(&path);
    assert_eq!(real, file, "the geometry's arithmetic is the file's size");
    let pct = |b: u64| 100.0 * b as f64 / file as f64;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "space: 1 GiB pool ({zones} zones of {} data rows): parity {:.1} MiB ({:.2} %), \
         replicas {:.1} MiB ({:.2} %), together {:.2} %; zone metadata {:.1} MiB ({:.2} %); \
         data {:.1} MiB ({:.2} %)",
        geo.rows,
        mib(parity),
        pct(parity),
        mib(replicas),
        pct(replicas),
        pct(parity + replicas),
        mib(metadata),
        pct(metadata),
        mib(data),
        pct(data)
    );
    println!(
        "# space,1GiB,pgl,parity={parity},replicas={replicas},metadata={metadata},data={data},file={file}"
    );
    Ok(())
}

fn main() {
    let dir = PathBuf::from(std::env::var("PGL_BENCH_DIR").unwrap_or_else(|_| "/dev/shm".into()));
    let dir = if dir.is_dir() {
        dir
    } else {
        std::env::temp_dir()
    };
    println!("suite,bench,system,config,size,threads,n,ns_per_op");
    if let Err(e) = repair_and_scrub(&dir).and_then(|()| space(&dir)) {
        eprintln!("integrity bench: {e}");
        std::process::exit(1);
    }
}
