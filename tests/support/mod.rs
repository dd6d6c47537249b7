//! Helpers shared by integration tests. Each test binary uses a subset of them.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod crashed;
pub mod fixture;

/// Where test pools live: tmpfs where there is one. On a disk-backed file system pgl
/// (correctly) msyncs every commit, which would make the tests slow without testing more.
pub fn test_dir() -> PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// SplitMix64: a small, seeded, reproducible generator for test workloads.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// A number in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo))
    }
}

/// The 8-byte little-endian word at `off` of the file at `path`.
pub fn file_word(path: &std::path::Path, off: u64) -> u64 {
    let file = std::fs::read(path).unwrap();
    u64::from_le_bytes(file[off as usize..off as usize + 8].try_into().unwrap())
}

/// Writes `bytes` at `off` of the file at `path` (a stray write parity never hears of).
pub fn file_write(path: &std::path::Path, off: u64, bytes: &[u8]) {
    use std::io::{Seek, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(std::io::SeekFrom::Start(off)).unwrap();
    f.write_all(bytes).unwrap();
}

/// `n` objects `make(i)`, for i = 0, 1, ..., whose first pages share one page column, each
/// in another row of one zone (the objects allocated on the way stay allocated); with
/// `data_only`, on pages past their chunk's first (which holds a run's bitmap).
pub fn same_column<T: pgl::Persistent>(
    pool: &pgl::Pool,
    geo: &pgl::geometry::Geometry,
    n: usize,
    data_only: bool,
    make: impl Fn(u64) -> T,
) -> Vec<pgl::Oid<T>> {
    // (zone, page column) -> (row, object) found there
    let mut seen = std::collections::HashMap::<_, Vec<(u64, pgl::Oid<T>)>>::new();
    for i in 0..20_000u64 {
        let o = pool.tx(|tx| tx.alloc(make(i))).unwrap();
        let rel = o.raw() - geo.zones_offset();
        if data_only && rel % geo.chunk_size < 4096 {
            continue;
        }
        let key = (rel / geo.zone_size(), rel % geo.row_size() / 4096);
        let row = rel % geo.zone_size() / geo.row_size();
        let found = seen.entry(key).or_default();
        if found.iter().all(|&(r, _)| r != row) {
            found.push((row, o));
            if found.len() == n {
                return found.iter().map(|&(_, o)| o).collect();
            }
        }
    }
    panic!("no {n} objects share a page column");
}

/// Loses the pages of `objs` to media errors, then opens each in a transaction: with two
/// of them in one page column, neither can be rebuilt, and each loss must be reported.
pub fn lose_for_good<T: pgl::Persistent + Copy>(pool: &pgl::Pool, objs: &[pgl::Oid<T>]) {
    for o in objs {
        pool.inject(&pgl::Fault::MediaError { offset: o.raw() })
            .unwrap();
    }
    for &o in objs {
        assert!(
            pool.tx(|tx| Ok(*tx.open(o)?)).is_err(),
            "the loss of {:#x} is reported",
            o.raw()
        );
    }
}

/// Loses the page of `o` to a media error and reads `o`: its bytes must come back as
/// `want`, rebuilt from its column's parity.
pub fn assert_rebuilt<T: pgl::Persistent + PartialEq>(pool: &pgl::Pool, o: pgl::Oid<T>, want: &T) {
    pool.inject(&pgl::Fault::MediaError { offset: o.raw() })
        .unwrap();
    assert!(
        *pool.get(o).unwrap() == *want,
        "{:#x} rebuilt from its column's parity",
        o.raw()
    );
}

/// Flips bit 0 of the byte at `off` of the file at `path`.
pub fn file_flip(path: &std::path::Path, off: u64) {
    let mut b = [0u8];
    {
        use std::io::{Read, Seek};
        let mut f = std::fs::File::open(path).unwrap();
        f.seek(std::io::SeekFrom::Start(off)).unwrap();
        f.read_exact(&mut b).unwrap();
    }
    file_write(path, off, &[b[0] ^ 1]);
}

/// The object lock stripe of the object at `off` (`ObjectLocks::stripe`, copied: tests
/// need objects that share one; a copy that no longer matches picks objects that do not,
/// and the tests that rely on their conflict fail).
pub fn lock_stripe(off: u64) -> u64 {
    let region = (off >> 18).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - 14);
    (off >> 4).wrapping_add(region) & ((1 << 14) - 1)
}

/// Small objects, allocated for the search, whose lock stripe is `want` and not `avoid`.
/// Within a 256 KiB region consecutive blocks take every other stripe or fewer (blocks of
/// 32 bytes or more), each region from its own start: it allocates region after region
/// until some match.
pub fn stripe_mates(pool: &pgl::Pool, want: u64, avoid: u64) -> Vec<pgl::Oid<[u64; 2]>> {
    for _ in 0..1000 {
        let found: Vec<_> = pool
            .tx(|tx| {
                (0..1000)
                    .map(|i| tx.alloc([i, i]))
                    .collect::<pgl::Result<Vec<_>>>()
            })
            .unwrap()
            .into_iter()
            .filter(|x| lock_stripe(x.raw()) == want && lock_stripe(x.raw()) != avoid)
            .collect();
        if !found.is_empty() {
            return found;
        }
    }
    panic!("no object on lock stripe {want} in a million");
}

/// Where zone parity keeps byte `off` of the zones of `pool`.
pub fn parity_of(pool: &pgl::Pool, off: u64) -> u64 {
    let g = pool.info().header.geo;
    let rel = off - g.zones_offset();
    g.parity_offset(rel / g.zone_size()) + rel % g.zone_size() % g.row_size()
}

/// Pool offset of the allocation-bitmap word that holds the block of `oid`, a small object
/// of `payload` bytes in a checked run (32 blocks a word).
pub fn bitmap_word_of(pool: &pgl::Pool, oid: u64, payload: u64) -> u64 {
    let info = pool.info();
    let g = info.header.geo;
    let pos = g.locate(oid, info.header.zones).expect("inside a zone");
    let classes = pgl::SizeClasses::new(g.chunk_size, info.header.class_table());
    let class = classes.class_for(payload + 16).expect("a small object");
    let run = g.chunk_offset(pos.zone, pos.chunk);
    let block = (oid - 16 - run - classes.header(class)) / classes.block(class);
    run + block / 32 * 8
}

/// What a child process (a test binary re-run as its own child) reports: the text after
/// `mark` on each line of its standard output, as it comes, and its standard error, whole.
pub struct Reports {
    /// The reports so far; more arrive while the child runs.
    pub lines: std::sync::mpsc::Receiver<String>,
    out: std::thread::JoinHandle<()>,
    err: std::thread::JoinHandle<String>,
}

impl Reports {
    /// Spawns `cmd` with its standard output and error piped, and reads them.
    pub fn spawn(
        cmd: &mut std::process::Command,
        mark: &'static str,
    ) -> (std::process::Child, Reports) {
        use std::process::Stdio;
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the child");
        let reports = Reports::of(&mut child, mark);
        (child, reports)
    }

    /// Starts reading the piped standard output and error of `child`.
    pub fn of(child: &mut std::process::Child, mark: &'static str) -> Reports {
        use std::io::{BufRead, Read};
        let stdout = child.stdout.take().expect("stdout piped");
        let mut stderr = child.stderr.take().expect("stderr piped");
        let (tx, lines) = std::sync::mpsc::channel();
        let out = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(i) = line.find(mark) {
                    let _ = tx.send(line[i + mark.len()..].trim().to_owned());
                }
            }
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Reports { lines, out, err }
    }

    /// Once the child has ended: the reports not yet taken from `lines`, and its standard
    /// error.
    pub fn finish(self) -> (Vec<String>, String) {
        self.out.join().expect("stdout reader");
        let rest = self.lines.try_iter().collect();
        (rest, self.err.join().expect("stderr reader"))
    }
}

/// Makes every chunk of `pool` a run of its smallest blocks (the largest bitmaps) by
/// allocating 16-byte objects until the pool is full, then frees them all: the chunks
/// stay empty runs on media. Returns how many objects it allocated.
pub fn churn_smallest_runs(pool: &pgl::Pool) -> usize {
    let mut tiny: Vec<pgl::Oid<[u64; 2]>> = Vec::new();
    loop {
        match pool.tx(|tx| {
            (0..100)
                .map(|i| tx.alloc([i; 2]))
                .collect::<pgl::Result<Vec<_>>>()
        }) {
            Ok(v) => tiny.extend(v),
            Err(pgl::Error::PoolFull { .. }) => break,
            Err(e) => panic!("filling the pool with 16-byte objects: {e}"),
        }
    }
    for batch in tiny.chunks(100) {
        pool.tx(|tx| batch.iter().try_for_each(|&o| tx.free(o)))
            .expect("freeing the 16-byte objects");
    }
    tiny.len()
}

/// Writes into `lane` (one whole lane copy) a redo record sealed with sequence number
/// `seq` (`tx::record`), whose entries are `(pool offset, kind, data)`: what a forger
/// who read the format can put in a pool file. Returns false if they do not fit.
pub fn forge_record(lane: &mut [u8], seq: u64, entries: &[(u64, u32, &[u8])]) -> bool {
    const ENTRIES: usize = 128;
    let mut pos = ENTRIES;
    for &(off, kind, data) in entries {
        let size = 16 + data.len().div_ceil(8) * 8;
        if pos + size > lane.len() {
            return false;
        }
        lane[pos..pos + 8].copy_from_slice(&off.to_le_bytes());
        lane[pos + 8..pos + 12].copy_from_slice(&(data.len() as u32).to_le_bytes());
        lane[pos + 12..pos + 16].copy_from_slice(&kind.to_le_bytes());
        lane[pos + 16..pos + 16 + data.len()].copy_from_slice(data);
        lane[pos + 16 + data.len()..pos + size].fill(0);
        pos += size;
    }
    let len = (pos - ENTRIES) as u64;
    lane[64..ENTRIES].fill(0);
    lane[68..72].copy_from_slice(b"PGLR");
    lane[72..76].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    lane[80..88].copy_from_slice(&seq.to_le_bytes());
    lane[88..96].copy_from_slice(&len.to_le_bytes());
    let crc = pgl::checksum::strong(&lane[68..pos]);
    lane[64..68].copy_from_slice(&crc.to_le_bytes());
    true
}

/// Runs `f` on a thread of its own and returns its result; fails the test, naming `what`,
/// if `f` has not returned within `secs` seconds (a hang: the thread is left behind). A
/// panic of `f` is the test's own.
pub fn within<R: Send + 'static>(
    what: &str,
    secs: u64,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let (send, recv) = channel();
    let body = std::thread::spawn(move || {
        let _ = send.send(f());
    });
    match recv.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(r) => r,
        Err(RecvTimeoutError::Disconnected) => std::panic::resume_unwind(
            body.join()
                .expect_err("the thread ended without sending its result"),
        ),
        Err(RecvTimeoutError::Timeout) => panic!("{what}: not done within {secs} s (a hang)"),
    }
}
