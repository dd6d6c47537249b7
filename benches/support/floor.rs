//! Floors: the least any implementation of a protocol can cost on this machine, measured
//! by doing its memory work alone — the same copies, checksums, bytes made durable and
//! ordering points, and nothing else (no allocator, no locks, no bookkeeping). A bench
//! prints each floor beside pgl's figure and the peer's, so that one run shows how much of
//! a gap is the protocol's and how much pgl's own code.
//!
//! Every ordering point here is an `sfence` followed by one locked instruction: a store
//! fence does not stall the CPU, the next locked instruction waits for the write-backs
//! (pgl's locks and counters, pmemlog's lock, pmemobj's), so every real commit pays it.
//!
//! The copies, checksums and XOR are pgl's own kernels (its streaming copy, Adler-32, seal
//! checksum and fused parity update), so a floor tracks what they cost.
//!
//! x86-64 only (`clwb`): elsewhere the floors are not measured.

#![allow(dead_code)] // each bench uses one of the floors

use pgl::integrity::xor::xor_delta_store;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A scratch file of `len` bytes in `dir`, mapped, every page allocated and touched, removed
/// when dropped.
struct Ring {
    path: String,
    map: memmap2::MmapMut,
}

impl Ring {
    fn new(dir: &str, name: &str, len: usize) -> Ring {
        let path = format!("{dir}/pgl_bench_floor_{}_{name}", std::process::id());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create floor file");
        file.set_len(len as u64).expect("size floor file");
        // SAFETY: a file this process just created, mapped once; nothing else maps it.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.expect("map floor file");
        map.fill(0);
        Ring { path, map }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The locked instruction that waits for each ordering point (module docs).
static WAIT: AtomicU64 = AtomicU64::new(0);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// Median of `runs` timed passes of `pass` (ns per operation), after one untimed pass.
fn timed(runs: usize, n: usize, mut pass: impl FnMut()) -> f64 {
    pass();
    median(
        (0..runs.max(1))
            .map(|_| {
                let t0 = Instant::now();
                pass();
                t0.elapsed().as_nanos() as f64 / n as f64
            })
            .collect(),
    )
}

/// The floor of a `Sync` log append of `size` payload bytes: the record (a 24-byte header
/// and the payload, in whole 64-byte lines, as pgl lays it out) streamed from a prepared,
/// cached buffer into the next lines of a ring the size of the bench's log, then one
/// ordering point. No checksum, no reservation, no completion.
pub fn log_append(dir: &str, size: usize, n: usize, runs: usize) -> Option<f64> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let line = (24 + size).div_ceil(64) * 64;
    let cap = (n * (size + 64 + 63)).clamp(1 << 20, 256 << 20);
    let mut ring = Ring::new(dir, &format!("log_{size}"), cap);
    let src = vec![0x5au8; line];
    let per_ring = cap / line;
    let base = ring.map.as_mut_ptr();
    Some(timed(runs, n, || {
        for i in 0..n {
            let at = (i % per_ring) * line;
            // SAFETY: `at + line <= per_ring * line <= cap`: inside the mapping, which is
            // page-aligned, so `base + at` is 64-byte aligned; `src` holds `line` bytes.
            unsafe { pgl::persist::stream_copy(base.add(at), &src) };
            ordering_point();
        }
    }))
}

/// The floor of a fully protected overwrite of a whole `size`-byte object (pgl's `MLPC`
/// commit, DESIGN.md "Transactions"), objects taken in turn as the fig3 bench does, on
/// `threads` threads at once, in ns per operation over all of them, as fig3 reports. Each
/// thread works on a file of its own and shares only the counter its ordering points
/// increment, as commits share the global commit sequence: what memory bandwidth and the
/// ordering points allow, with no lock to wait for. Each thread, for each object:
/// - open: copy the object (cold) into a buffer and verify its Adler-32;
/// - the new value into the buffer, its new Adler-32;
/// - the redo record (a 64-byte header line and the data, in whole lines) sealed with the
///   strong checksum and streamed to two lane copies, straight from the buffer (no
///   staging copy);
/// - the previous commit's object and parity lines written back (deferred, as pgl does);
/// - one ordering point (the commit point);
/// - apply: old XOR new into the parity bytes, the new bytes into the object.
///
/// No lock, no allocator lookup, no record bookkeeping: the bytes, checksums and the one
/// fence alone.
pub fn overwrite(dir: &str, size: usize, n: usize, runs: usize, threads: usize) -> Option<f64> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let threads = threads.max(1);
    let mut files: Vec<OverwriteFile> = (0..threads)
        .map(|t| OverwriteFile::new(dir, size, n, t))
        .collect();
    Some(timed(runs, n * threads, || {
        std::thread::scope(|s| {
            for f in &mut files {
                s.spawn(move || f.pass(n));
            }
        });
    }))
}

/// One thread's objects, their parity and its two lane copies, for `overwrite`.
struct OverwriteFile {
    file: Ring,
    size: usize,
    stride: usize,
    parity: usize,
    lanes: [usize; 2],
    buf: Vec<u8>,
    fill: Vec<u8>,
}

impl OverwriteFile {
    fn new(dir: &str, size: usize, n: usize, t: usize) -> OverwriteFile {
        let stride = 16 + size; // header + payload, as objects lie in a run
        let data = n * stride + 64;
        let record = 64 + size.div_ceil(64) * 64;
        let lane = record.next_multiple_of(4096);
        OverwriteFile {
            file: Ring::new(dir, &format!("overwrite_{size}_{t}"), 2 * data + 2 * lane),
            size,
            stride,
            parity: data, // a parity byte per data byte, as one parity row
            lanes: [2 * data, 2 * data + lane],
            buf: vec![0u8; size],
            fill: vec![7u8; size],
        }
    }

    /// Overwrites objects `0..n` in turn.
    fn pass(&mut self, n: usize) {
        let (size, parity, lanes) = (self.size, self.parity, self.lanes);
        let stride = self.stride;
        let obj = |i: usize| 16 + i * stride;
        let base = self.file.map.as_mut_ptr();
        let head = [0x5au8; 64]; // the record's header line
        let mut prev: Option<usize> = None;
        for i in 0..n {
            let o = obj(i);
            let buf = &mut self.buf;
            // SAFETY (whole block): every range below lies inside the mapping: objects
            // `[o, o + size)` with `o + size <= data` (`data = parity`), their parity at
            // `parity + o` (`< 2 * data`), the lanes `[lanes[c], lanes[c] + record)` with
            // `record <= lane`; lane offsets are 4096-aligned; `buf`, `head` and `fill`
            // hold what is read from them, and `buf` is not in the mapping (the fused
            // kernel's contract). The bench's sizes are multiples of 16: whole granules are
            // streamed, nothing is left for a cache-line flush.
            unsafe {
                std::ptr::copy_nonoverlapping(base.add(o), buf.as_mut_ptr(), size);
                std::hint::black_box(pgl::checksum::adler32(buf));
                buf.copy_from_slice(&self.fill);
                std::hint::black_box(pgl::checksum::adler32(buf));
                let mut seal = pgl::checksum::Strong::new();
                seal.update(&head);
                seal.update(buf);
                std::hint::black_box(seal.finish());
                for l in lanes {
                    pgl::persist::stream_copy(base.add(l), &head);
                    pgl::persist::stream_copy(base.add(l + 64), buf);
                }
                if let Some(p) = prev {
                    for off in [obj(p), parity + obj(p)] {
                        cpu::write_back(base.add(off), size);
                    }
                }
                ordering_point();
                xor_delta_store(base.add(parity + o), base.add(o), buf);
            }
            prev = Some(i);
        }
    }
}

/// One ordering point: `sfence`, then a locked instruction that waits for it.
fn ordering_point() {
    cpu::sfence();
    WAIT.fetch_add(1, Ordering::SeqCst);
}

#[cfg(target_arch = "x86_64")]
mod cpu {
    use std::arch::x86_64::_mm_sfence;

    /// `clwb` of every line of `[p, p + len)`.
    ///
    /// # Safety
    /// The range is mapped memory.
    pub unsafe fn write_back(p: *const u8, len: usize) {
        let first = p as usize & !63;
        for line in (first..p as usize + len).step_by(64) {
            // SAFETY: a line of the mapped range (caller); `clwb` reads no memory the
            // program sees and exists on every CPU this bench targets (it reports
            // nothing meaningful elsewhere; see PERF-NOTES.md).
            unsafe {
                std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
            };
        }
    }

    pub fn sfence() {
        // SAFETY: `sfence` has no preconditions.
        unsafe { _mm_sfence() }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod cpu {
    pub unsafe fn write_back(_: *const u8, _: usize) {}
    pub fn sfence() {}
}
