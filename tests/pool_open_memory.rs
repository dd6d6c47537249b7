//! Opening a pool takes memory in proportion to what its file holds and says, never to what
//! its mapping could hold or to a size a crafted field claims: a small hostile file must not
//! make `Pool::open` allocate gigabytes (with overcommit that is an OOM kill later; under a
//! memory limit, an abort on allocation failure, not a typed error). Its own binary: it
//! counts, with a global allocator, the bytes each thread has allocated and not freed.

mod support;

use pgl::geometry::Geometry;
use pgl::{Header, Pool};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Counts, per thread, the bytes allocated and not yet freed, and their peak.
struct Counting;

thread_local! {
    static LIVE: Cell<u64> = const { Cell::new(0) };
    static PEAK: Cell<u64> = const { Cell::new(0) };
}

fn count(delta: i64) {
    let _ = LIVE.try_with(|l| {
        let v = l.get().saturating_add_signed(delta);
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call is forwarded to `System` unchanged; the counters are plain
// thread-local cells with no destructor, which allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count(l.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count(-(l.size() as i64));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new as i64 - l.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The most bytes this thread had allocated at once while `f` ran, beyond what it had
/// before, and `f`'s result.
fn peak_during<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let r = f();
    (PEAK.with(Cell::get) - base, r)
}

/// A path in the test directory, removed when dropped.
struct TmpPath(PathBuf);

impl TmpPath {
    fn new(name: &str) -> TmpPath {
        let p = support::test_dir().join(format!("pgl-open-memory-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TmpPath(p)
    }
}

impl Drop for TmpPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl std::ops::Deref for TmpPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

/// The smallest zones a header may name: 16 KiB chunks, one per row, two data rows.
fn tiny_zones() -> Geometry {
    Geometry {
        chunk_size: 16 << 10,
        chunks_per_row: 1,
        rows: 2,
        lanes: 1,
        lane_size: 8 << 10,
    }
}

/// Writes at `path` a pool of `zones` zones of `geo`: both header copies (well
/// checksummed, parity kept, closed cleanly) in a sparse file of zeros, which is a valid
/// empty pool.
fn craft(path: &Path, geo: Geometry, zones: u64) {
    let h = Header {
        version: pgl::FORMAT_VERSION,
        generation: 1,
        uuid: [7; 16],
        layout: "hostile".into(),
        geo,
        zones,
        created: 1,
        flags: 2,
    };
    let enc = h.encode();
    let mut f = std::fs::File::create(path).unwrap();
    f.set_len(geo.pool_size(zones)).unwrap();
    for copy in 0..2 {
        f.seek(SeekFrom::Start(geo.header_offset(copy))).unwrap();
        f.write_all(&enc).unwrap();
    }
}

/// An 80 KiB pool of one tiny zone, opened with the default 1 TiB `max_size`: the heap
/// sized its zone table for every zone the mapping could hold, 22 million of them, and
/// allocated 1.6 GB for it.
#[test]
fn a_pool_of_tiny_zones_takes_memory_for_its_zones_not_its_mapping() {
    let p = TmpPath::new("tiny-zones");
    craft(&p, tiny_zones(), 1);
    let (peak, pool) = peak_during(|| Pool::open_any(&*p));
    let pool = pool.expect("an empty pool of one zone opens");
    assert_eq!(pool.size(), tiny_zones().pool_size(1));
    drop(pool);
    assert!(
        peak < 16 << 20,
        "opening an 80 KiB pool allocated {peak} bytes at once"
    );
}
