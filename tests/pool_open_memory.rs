//! Opening and reading a pool takes memory in proportion to what its file holds, never to
//! what its mapping could hold or to a size or count a crafted field claims: a small
//! hostile file must not make `Pool::open` (or a read of what it holds) allocate gigabytes (with overcommit that is an OOM kill later; under a
//! memory limit, an abort on allocation failure, not a typed error). Its own binary: it
//! counts, with a global allocator, the bytes each thread has allocated and not freed, and
//! refuses any single allocation over `ALLOC_CAP` (as a memory limit would: the process
//! aborts), so that a test that would allocate gigabytes dies without touching them.

mod support;

use pgl::geometry::Geometry;
use pgl::{Header, Pool};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Counts, per thread, the bytes allocated and not yet freed, and their peak.
struct Counting;

/// The largest single allocation this binary grants.
const ALLOC_CAP: usize = 1 << 30;

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
        if l.size() > ALLOC_CAP {
            return std::ptr::null_mut();
        }
        count(l.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.size() > ALLOC_CAP {
            return std::ptr::null_mut();
        }
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
        if new > ALLOC_CAP {
            return std::ptr::null_mut();
        }
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
fn craft(path: &Path, geo: Geometry, zones: u64) -> std::fs::File {
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
    f
}

/// Bytes of zone `z`'s metadata copies in a pool of `geo` (`heap::layout::meta_len`):
/// root word, checksum, chunk table, and in zone 0 the type registry's room.
fn meta_len(geo: &Geometry, z: u64) -> usize {
    let table_end = 1024 + geo.rows * geo.chunks_per_row * 8;
    let registry = table_end.div_ceil(64) * 64;
    if z > 0 {
        return registry as usize;
    }
    let room = ((geo.chunk_size / 2 - registry - 64) / 64).min(1024);
    (registry + 64 * (1 + room)) as usize
}

/// Sets chunk-table entry `chunk` of zone `z` (otherwise empty) to `entry` in both
/// metadata copies, each with the checksum that makes it verify
/// (`integrity::replica::stored_sum`).
fn set_entry(f: &mut std::fs::File, geo: &Geometry, z: u64, chunk: u64, entry: u64) {
    let len = meta_len(geo, z);
    let mut copy = vec![0u8; len];
    let at = 1024 + 8 * chunk as usize;
    copy[at..at + 8].copy_from_slice(&entry.to_le_bytes());
    let zero_sum = (((len % 65_521) as u32) << 16) | 1;
    let sum = u64::from(pgl::checksum::adler32(&copy) ^ zero_sum);
    copy[8..16].copy_from_slice(&sum.to_le_bytes());
    for off in [0, geo.chunk_size / 2] {
        f.seek(SeekFrom::Start(geo.zone_offset(z) + off)).unwrap();
        f.write_all(&copy).unwrap();
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

/// A chunk-table entry claiming a large object of more chunks than the largest object
/// (`u32::MAX` bytes) takes: the pool opened, and the object's capacity, 4.4 GiB of a
/// sparse file, went whole into a buffer when it was read (`pgl dump`, `read_object`),
/// repaired or reconciled after a crash (a table entry of a zone of terabytes asks for
/// terabytes: an abort). The entry is refused when the heap loads.
#[test]
fn a_large_object_beyond_the_largest_allocation_is_corrupt() {
    let p = TmpPath::new("huge-large");
    // 64 MiB chunks, 80 data rows: a 5 GiB zone. No allocation takes more than 65 chunks.
    let geo = Geometry {
        chunk_size: 64 << 20,
        rows: 80,
        ..tiny_zones()
    };
    let mut f = craft(&p, geo, 1);
    let chunks = 70u64;
    set_entry(&mut f, &geo, 0, 1, 2 | chunks << 32);
    // The object's header claims all of it.
    let hdr = geo.chunk_offset(0, 1);
    let size = chunks * geo.chunk_size - 16;
    f.seek(SeekFrom::Start(hdr)).unwrap();
    f.write_all(&size.to_le_bytes()).unwrap();
    drop(f);
    let r = Pool::open_any(&*p).and_then(|pool| pool.read_object(hdr + 16).map(|(h, _)| h));
    match r {
        Err(e @ pgl::Error::Corrupt { what, offset, .. }) => {
            assert_eq!(what, "chunk table entry");
            assert_eq!(offset, geo.zone_offset(0) + 1024 + 8);
            let msg = e.to_string();
            assert!(
                msg.contains(&*p.to_string_lossy()) && msg.contains("70 chunks"),
                "{msg}"
            );
        }
        other => panic!("expected the entry to be refused, got {other:?}"),
    }
}

/// A sealed redo record naming a new object of 1.5 GiB (a forged one: no allocation makes
/// an object of a chunk's run overlap a write of the same record) with a write inside
/// it: recovery checked the object as the record leaves it on a copy of all of it, so the
/// size a record claims (up to 4 GiB; of the whole pool in a format-5 verify entry) went
/// into one allocation.
#[test]
fn a_new_object_a_record_names_is_checked_without_copying_it() {
    let p = TmpPath::new("record-new");
    let geo = Geometry {
        chunk_size: 64 << 20,
        rows: 80,
        ..tiny_zones()
    };
    let mut f = craft(&p, geo, 1);
    let hdr = geo.chunk_offset(0, 1);
    let size: u32 = 3 << 29;
    let mut new = [0u8; 8];
    new[..4].copy_from_slice(&size.to_le_bytes());
    let mut lane = vec![0u8; geo.lane_size as usize];
    assert!(support::forge_record(
        &mut lane,
        9,
        &[(hdr + 64, 0, &[1u8; 8]), (hdr, 3, &new)]
    ));
    f.seek(SeekFrom::Start(geo.lane_offset(0, 0))).unwrap();
    f.write_all(&lane).unwrap();
    drop(f);
    let (peak, pool) = peak_during(|| Pool::open_any(&*p));
    // The object's crc does not match: the record was never committed.
    let pool = pool.expect("the pool opens");
    assert_eq!(pool.stats().records_replayed, 0);
    drop(pool);
    assert!(
        peak < 16 << 20,
        "recovery allocated {peak} bytes at once for a record's new object"
    );
}

#[derive(pgl::Persistent, Clone, Copy)]
#[pgl(id = 0x0e3a_0001)]
#[repr(C)]
struct Item {
    value: u64,
}

#[derive(pgl::Persistent, Clone, Copy)]
#[pgl(id = 0x0e3a_0002)]
#[repr(C)]
struct ItemWide {
    value: u64,
    extra: u64,
}

/// Sets word `word` of the object whose payload is at `payload` in the pool file at `path`
/// to `value`, and its header's checksum to match (`heap::layout::object_checksum`).
fn set_object_word(path: &Path, payload: u64, word: usize, value: u64) {
    let mut b = std::fs::read(path).unwrap();
    let hdr = (payload - 16) as usize;
    let size = u64::from_le_bytes(b[hdr..hdr + 8].try_into().unwrap());
    let type_id = u32::from_le_bytes(b[hdr + 8..hdr + 12].try_into().unwrap());
    let at = payload as usize + 8 * word;
    b[at..at + 8].copy_from_slice(&value.to_le_bytes());
    let mut prefix = [0u8; 20];
    prefix[..8].copy_from_slice(&payload.to_le_bytes());
    prefix[8..16].copy_from_slice(&size.to_le_bytes());
    prefix[16..].copy_from_slice(&type_id.to_le_bytes());
    let body = &b[payload as usize..payload as usize + size as usize];
    let sum = pgl::checksum::adler32_continue(pgl::checksum::adler32(&prefix), body);
    b[hdr + 12..hdr + 16].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(path, b).unwrap();
}

/// The journal of an interrupted Manual migration whose pair page names itself as the
/// next, and whose head claims 2^40 pairs: reading it (`pending_migration`, `pgl info`,
/// the next `Migration::run`) followed the loop, 255 more pairs in memory each time
/// round, until it had them all (16 TiB) or the allocation failed.
#[test]
fn a_migration_journal_whose_pages_loop_is_corrupt() {
    let p = TmpPath::new("journal-loop");
    let mut cfg = pgl::Config::small("journal");
    cfg.max_size = cfg.size;
    let pool = Pool::create(&*p, &cfg).unwrap();
    let root = pool.root::<[u64; 8]>().unwrap();
    pool.tx(|tx| {
        for i in 0..8 {
            tx.open(root)?[i] = tx.alloc(Item { value: i as u64 })?.raw();
        }
        Ok(())
    })
    .unwrap();
    // Interrupted after its first batch: the converter fails on the third object.
    let mut calls = 0;
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.migration()
            .batch(2)
            .convert(|i: &Item, _| {
                calls += 1;
                assert!(calls < 3, "interrupted");
                ItemWide {
                    value: i.value,
                    extra: 0,
                }
            })
            .run()
    }));
    assert!(run.is_err());
    assert!(pool.pending_migration().unwrap().is_some());
    drop(pool);
    let geo = cfg.geometry();
    let head = support::file_word(&p, geo.chunk_offset(0, 0) + 16);
    let page = support::file_word(&p, head + 8 * 4);
    assert_ne!(page, 0, "the journal has a pair page");
    set_object_word(&p, page, 0, page);
    set_object_word(&p, head, 2, 1 << 40);

    let pool = Pool::open(&*p, "journal").unwrap();
    let (peak, r) = peak_during(|| pool.pending_migration());
    match r {
        Err(e @ pgl::Error::Corrupt { .. }) => {
            assert!(e.to_string().contains("loop"), "{e}");
        }
        other => panic!("expected the journal to be corrupt, got {other:?}"),
    }
    assert!(
        peak < 64 << 20,
        "reading the journal allocated {peak} bytes"
    );
}

/// A pool of 4096 zones whose runs say every block is allocated, opened after a crash
/// with zone 0 marked dirty: recovery listed the objects of every zone (16 bytes each)
/// to reconcile the parity of the few zones a crash may have left stale. A pool of small
/// objects, hostile or not, needed memory in proportion to all its objects.
#[test]
fn reconciling_after_a_crash_lists_the_objects_of_the_dirty_zones_only() {
    let p = TmpPath::new("reconcile");
    let geo = tiny_zones();
    let zones = 4096;
    let mut f = craft(&p, geo, zones);
    // Chunk 1 of every zone: a run of 32-byte blocks with a plain bitmap (format 4 and
    // older: not checked), all 510 blocks allocated.
    let run = 1 | 32 << 32;
    for z in 0..zones {
        set_entry(&mut f, &geo, z, 1, run);
        f.seek(SeekFrom::Start(geo.chunk_offset(z, 1))).unwrap();
        f.write_all(&[0xff; 64]).unwrap();
    }
    // Opened when the process died (OPEN set), lane 0 marking zone 0 dirty.
    let mut h = Header::decode(&std::fs::read(&*p).unwrap()[..4096]).unwrap();
    h.flags |= 1;
    let enc = h.encode();
    for copy in 0..2 {
        f.seek(SeekFrom::Start(geo.header_offset(copy))).unwrap();
        f.write_all(&enc).unwrap();
    }
    f.seek(SeekFrom::Start(geo.lane_offset(0, 0) + 16)).unwrap();
    f.write_all(&[1]).unwrap();
    drop(f);
    let (peak, pool) = peak_during(|| Pool::open_any(&*p));
    let pool = pool.expect("the pool opens");
    drop(pool);
    assert!(
        peak < 8 << 20,
        "opening after a crash allocated {peak} bytes at once"
    );
}

/// A pool of one zone of 64 MiB chunks whose chunk table's `rows - 1` entries each
/// declare a run of 32-byte blocks with a checked bitmap, over chunks that are holes:
/// 65,536 bitmap words a run, all zero, none of which verifies; the header's flags are
/// `flags`.
fn runs_over_holes(path: &Path, rows: u64, flags: u32) -> Geometry {
    let geo = Geometry {
        chunk_size: 64 << 20,
        rows,
        ..tiny_zones()
    };
    let mut f = craft(path, geo, 1);
    let len = meta_len(&geo, 0);
    let mut copy = vec![0u8; len];
    for c in 1..rows as usize {
        // Class 0 (32-byte blocks), checked bitmap (bit 24).
        let run = 1u64 | 1 << 24 | 32 << 32;
        copy[1024 + 8 * c..1024 + 8 * c + 8].copy_from_slice(&run.to_le_bytes());
    }
    let zero_sum = (((len % 65_521) as u32) << 16) | 1;
    let sum = u64::from(pgl::checksum::adler32(&copy) ^ zero_sum);
    copy[8..16].copy_from_slice(&sum.to_le_bytes());
    for off in [0, geo.chunk_size / 2] {
        f.seek(SeekFrom::Start(geo.zone_offset(0) + off)).unwrap();
        f.write_all(&copy).unwrap();
    }
    let mut page = [0u8; 4096];
    std::io::Read::read_exact(&mut std::fs::File::open(path).unwrap(), &mut page).unwrap();
    let mut h = Header::decode(&page).unwrap();
    h.flags = flags;
    let enc = h.encode();
    for copy in 0..2 {
        f.seek(SeekFrom::Start(geo.header_offset(copy))).unwrap();
        f.write_all(&enc).unwrap();
    }
    geo
}

/// `runs_over_holes`: opening listed every damaged word (16 bytes each, then 8 again)
/// before rebuilding any from parity: 56 bytes of chunk table asked for 12 MB, and a
/// terabyte of holes would ask for 24 GB. The words are rebuilt as the walk finds them.
#[test]
fn damaged_bitmap_words_are_rebuilt_as_found_not_listed() {
    open_seven_runs_over_holes("bitmap-holes", 2, |p| Pool::open_any(p));
}

/// `runs_over_holes` in a pool that ran without object checksums: opening it with them
/// recomputes every object's, and listed the damaged words on the way (it does not use
/// them).
#[test]
fn recomputing_checksums_does_not_list_damaged_bitmap_words() {
    open_seven_runs_over_holes("bitmap-holes-sums", 2 | 4, |p| Pool::open(p, "hostile"));
}

/// Opens (with `open`) a pool of `runs_over_holes` with 8 rows (7 runs) and header flags
/// `flags`: its runs go out of service, and opening never holds more than a few MB at once.
fn open_seven_runs_over_holes(
    name: &str,
    flags: u32,
    open: impl FnOnce(&Path) -> pgl::Result<Pool>,
) {
    let p = TmpPath::new(name);
    runs_over_holes(&p, 8, flags);
    let (peak, pool) = peak_during(|| open(&p));
    let pool = pool.expect("the pool opens, its runs out of service");
    assert_eq!(pool.stats().runs_quarantined, 7);
    drop(pool);
    // The heap keeps a 256 KiB bitmap slab per run: 1.8 MB for these 7.
    assert!(
        peak < 6 << 20,
        "opening allocated {peak} bytes at once for a 56-byte chunk table"
    );
}

/// `runs_over_holes` with 79 runs (5 GiB of holes): opening tried to rebuild each of the
/// 5 million damaged words from parity, reading the word of every row (80 page faults
/// and an allocation each): two minutes for 632 bytes of chunk table (in a debug build;
/// 20 s now, walking the runs' 160 million blocks). A word whose page column is holes in
/// every row and in parity rebuilds as zero, which never verifies: it is not read.
#[test]
fn bitmap_words_over_holes_are_not_rebuilt_word_by_word() {
    let p = TmpPath::new("bitmap-holes-time");
    runs_over_holes(&p, 80, 2);
    let (tx, rx) = std::sync::mpsc::channel();
    let path = p.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(Pool::open_any(&path).map(|pool| pool.stats().runs_quarantined));
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(r) => assert_eq!(r.expect("the pool opens"), 79),
        Err(_) => panic!("opening a pool of 79 runs over holes took over a minute"),
    }
}
