//! The volatile allocator over the persistent heap metadata.
//!
//! Persistent state: each zone's chunk table and each run's bitmap. Volatile state, rebuilt
//! from them on open: a mirror of the chunk kinds, one `Run` per run chunk with its bitmap
//! plus reservations, per-class pools of runs with free blocks, and per-lane arenas holding
//! the run each lane allocates from. `locate` validates an oid from the kinds, a run's
//! bitmap and a bind count per chunk without taking any lock (see `Zone`).
//!
//! Invariant: a block or chunk is handed out to at most one transaction at a time: it is
//! reserved in the volatile state before its metadata change is logged, and released only
//! after that change is applied (free) or abandoned (abort). The persistent bitmap of a run
//! equals its volatile one minus in-flight reservations plus in-flight frees. A reservation
//! is made only once the allocating transaction holds the new object's write lock (`claim`
//! in `alloc`), so a transaction holding an object's lock in any mode never sees its block
//! reserved by another: `locate` under that lock finds only committed objects (or its own
//! reservations), and their blocks stay allocated, and their runs bound, until it lets go.
//!
//! A block freed by a committed transaction, and taken again within the life of its run
//! (this `Heap`), is handed out *sealed*: its header and payload are still what the freed
//! object's last commit wrote (nothing writes a free block; a fault that does is a fault
//! like any other), so its header's checksum is that of its payload. An unfilled
//! allocation derives its new checksum from it without reading the payload (`tx`), while
//! parity could repair damage to the block (`Engine::seals_trusted`).

use super::class::{ClassTable, SizeClasses};
use super::layout::*;
use super::meta::MetaOps;
use super::run::{block_at, make_checked_runs, take_bit, Run, RunShape, RunState};
use crate::geometry::{FastDiv, Geometry, ZoneMap, ZonePos};
use crate::persist::Media;
use crate::{Error, Result};
use parking_lot::Mutex;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;

/// The error for the checked bitmap word `word` at `off`, which does not verify.
pub(crate) fn bitmap_mismatch(off: u64, word: u64) -> Error {
    Error::BitmapMismatch {
        offset: off,
        stored: (word >> 32) as u32,
        computed: bitmap_check(off, word as u32),
        pool_file: None,
    }
}

/// The volatile state of one zone, per chunk.
///
/// Invariant (what lets `Heap::locate` run without locks): a chunk's runs share one bitmap
/// slab, made when the chunk first holds a run and kept while the heap lives, so a reader
/// never meets a freed bitmap. Binding a run to a chunk bumps `binds` before the run's kind
/// entry is published and before any of its bits is set. A reader that finds the same bind
/// count and kind entry before and after reading a bit read it from the run that entry
/// describes (a seqlock whose writers are the run bindings; retiring a run changes the kind
/// entry, and the bind count tells apart two runs of one class bound in turn). So a bit
/// found set under that check names a block of that run, which the reader's object lock
/// then keeps from being freed, and so keeps the run from being retired.
struct Zone {
    kinds: Box<[AtomicU64]>,
    runs: Box<[Mutex<Option<Arc<Run>>>]>,
    binds: Box<[AtomicU64]>,
    slabs: Box<[OnceLock<Arc<[AtomicU64]>>]>,
}

impl Zone {
    fn new(kinds: Box<[AtomicU64]>, runs: Vec<Option<Arc<Run>>>) -> Zone {
        Zone {
            slabs: runs
                .iter()
                .map(|r| {
                    r.as_ref()
                        .map_or_else(OnceLock::new, |r| r.bits.clone().into())
                })
                .collect(),
            binds: runs.iter().map(|_| AtomicU64::new(0)).collect(),
            kinds,
            runs: runs.into_iter().map(Mutex::new).collect(),
        }
    }
}

/// Zones per segment of a [`ZoneTable`].
const ZONE_SEGMENT: u64 = 1024;

/// `ZONE_SEGMENT` zone slots.
type ZoneSegment = Box<[OnceLock<Zone>]>;

/// The volatile state of every zone a pool has or may grow to, indexed by zone without a
/// lock. Segments of `ZONE_SEGMENT` slots are allocated when a zone in them is loaded, so
/// the table costs memory for the zones a pool has, not for every zone its mapping could
/// hold (a pool of tiny zones opened with the default 1 TiB `max_size` could hold 22
/// million: a 1.6 GB table for an 80 KB file, found by a crafted pool).
///
/// Invariant: slot `z` is set at most once and never cleared, so a `&Zone` lives as long
/// as the table.
struct ZoneTable {
    segments: Box<[OnceLock<ZoneSegment>]>,
    /// Zones the table has room for.
    len: u64,
}

impl ZoneTable {
    /// A table with room for `len` zones (at most `MAX_ZONES`) and no segment yet.
    fn new(len: u64) -> ZoneTable {
        let len = len.min(crate::geometry::MAX_ZONES);
        ZoneTable {
            segments: (0..len.div_ceil(ZONE_SEGMENT))
                .map(|_| OnceLock::new())
                .collect(),
            len,
        }
    }

    fn get(&self, z: u64) -> Option<&Zone> {
        let seg = self.segments.get((z / ZONE_SEGMENT) as usize)?.get()?;
        seg.get((z % ZONE_SEGMENT) as usize)?.get()
    }

    /// Sets zone `z` (below `len`); `false` if it was set already.
    fn set(&self, z: u64, zone: Zone) -> bool {
        let Some(seg) = self.segments.get((z / ZONE_SEGMENT) as usize) else {
            return false;
        };
        let seg = seg.get_or_init(|| (0..ZONE_SEGMENT).map(|_| OnceLock::new()).collect());
        seg[(z % ZONE_SEGMENT) as usize].set(zone).is_ok()
    }
}

/// The run a lane allocates from, per class.
#[derive(Default)]
pub(crate) struct Arena {
    current: Vec<Option<Arc<Run>>>,
}

/// Where an object lives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ObjPlace {
    /// Offset of the object header.
    pub hdr: u64,
    /// Bytes available for the payload.
    pub capacity: u64,
}

thread_local! {
    /// Allocations in a row on this thread that found the pool full but for blocks locked
    /// by others (`Heap::alloc_small`), reported as conflicts (retried) up to
    /// `FULL_BUT_LOCKED_RETRIES` times, then as a full pool.
    static FULL_BUT_LOCKED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}
/// About 0.1 s of `tx::run`'s backoff.
const FULL_BUT_LOCKED_RETRIES: u32 = 64;

/// A block `Heap::alloc_elsewhere` took: its run, its index, whether it was sealed.
type Taken = (Arc<Run>, u32, bool);

/// What `Heap::alloc` reserved.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reserved {
    /// Where the new object goes.
    pub place: ObjPlace,
    /// Whether the block is sealed (see the module docs): its header and payload are those
    /// a committed transaction last wrote there.
    pub sealed: bool,
}

/// What to undo if the transaction aborts.
pub(crate) enum HeapUndo {
    Block(Arc<Run>, u32),
    NewRun(Arc<Run>),
    Chunks { zone: u64, first: u64, n: u64 },
}

/// A free to finish in the volatile state once its transaction has applied.
pub(crate) enum PendingFree {
    /// A block of a run; sealed when released if the flag is set.
    Block(Arc<Run>, u32, bool),
    Chunks {
        zone: u64,
        first: u64,
        n: u64,
    },
}

/// The allocator of one pool.
pub(crate) struct Heap {
    geo: Geometry,
    map: ZoneMap,
    classes: SizeClasses,
    zones: ZoneTable,
    grow_lock: Mutex<()>,
    zone_count: AtomicU64,
    /// Guards chunk claims; holds a stack of chunks believed free (checked when popped).
    chunk_lock: Mutex<Vec<(u64, u64)>>,
    /// Where a new run's scan for an empty run to take over starts (`claim_run_chunk`):
    /// just past the chunk the last such scan took, `zone << 32 | chunk`. Read and
    /// written under `chunk_lock`.
    run_cursor: AtomicU64,
    /// Where a large allocation's scan for free chunks starts (`claim_large`), `zone << 32
    /// | chunk`: just past the range the last one took, or lower, at the first chunk freed
    /// since (`free_chunk`). A hint only: a scan from it that finds nothing scans again
    /// from the first chunk. Read and written under `chunk_lock`; volatile (a reopened
    /// pool starts at its first chunk).
    large_cursor: AtomicU64,
    pools: Vec<Mutex<Vec<Arc<Run>>>>,
    /// Per class, `[plain, checked]` run layouts (`locate`).
    shapes: Box<[[RunShape; 2]]>,
    /// Words of a chunk's bitmap slab: enough for the run of any class, either format.
    slab_words: usize,
    /// Runs taken out of service for bitmap damage nothing could rebuild (when the pool
    /// opened, or since).
    quarantined: AtomicU64,
}

impl Heap {
    /// Rebuilds the volatile state from the persistent metadata of `zones` zones, whose runs
    /// are cut to the classes of `table` (the pool header's).
    pub(crate) fn open(
        media: &Media,
        geo: Geometry,
        zones: u64,
        table: ClassTable,
    ) -> Result<Heap> {
        let classes = SizeClasses::new(geo.chunk_size, table);
        let shapes: Box<[[RunShape; 2]]> = (0..classes.len() as u16)
            .map(|c| {
                [false, true].map(|checked| RunShape {
                    block: classes.block(c),
                    per_block: FastDiv::new(classes.block(c)),
                    header: classes.header_in(c, checked),
                    nblocks: classes.nblocks_in(c, checked),
                })
            })
            .collect();
        let slab_words = shapes
            .iter()
            .flatten()
            .map(|s| s.nblocks.div_ceil(64) as usize)
            .max()
            .unwrap_or(0);
        let heap = Heap {
            geo,
            map: ZoneMap::new(&geo),
            pools: (0..classes.len()).map(|_| Mutex::new(Vec::new())).collect(),
            shapes,
            slab_words,
            classes,
            zones: ZoneTable::new(geo.zones_for(media.reserve()).max(zones)),
            grow_lock: Mutex::new(()),
            zone_count: AtomicU64::new(0),
            chunk_lock: Mutex::new(Vec::new()),
            run_cursor: AtomicU64::new(1),
            large_cursor: AtomicU64::new(1),
            quarantined: AtomicU64::new(0),
        };
        heap.add_zones(media, zones)?;
        Ok(heap)
    }

    /// Runs taken out of service for bitmap damage nothing could rebuild.
    pub(crate) fn quarantined(&self) -> u64 {
        self.quarantined.load(Ordering::Relaxed)
    }

    /// The size classes.
    pub(crate) fn classes(&self) -> &SizeClasses {
        &self.classes
    }

    /// Zones in use.
    pub(crate) fn zone_count(&self) -> u64 {
        self.zone_count.load(Ordering::Acquire)
    }

    /// Loads zones `zone_count()..total` from media (on open, and after `grow`). A run
    /// with a checked bitmap word that does not verify is loaded out of service (see
    /// `load_run`; the pool's open rebuilds what parity can before).
    pub(crate) fn add_zones(&self, media: &Media, total: u64) -> Result<()> {
        let _g = self.grow_lock.lock();
        if total > self.zones.len {
            return Err(Error::config(format!(
                "{total} zones exceed the {} the mapping can hold (raise Config::max_size)",
                self.zones.len
            )));
        }
        let n = self.geo.chunks_per_zone();
        for z in self.zone_count()..total {
            let kinds: Box<[AtomicU64]> = (0..n).map(|_| AtomicU64::new(KIND_FREE)).collect();
            let mut runs: Vec<Option<Arc<Run>>> = vec![None; n as usize];
            let table = self.geo.chunk_offset(z, 0) + CHUNK_TABLE_OFFSET;
            let mut c = 1;
            while c < n {
                // SAFETY: the chunk table lies in this zone's metadata chunk, inside the pool;
                // the pool is not shared yet (open) or the zone is new (grow, under the lock).
                let e = unsafe { media.read_u64(table + c * 8) };
                let corrupt = |detail: String| Error::Corrupt {
                    what: "chunk table entry",
                    offset: table + c * 8,
                    detail,
                    pool_file: None,
                };
                match entry_kind(e) {
                    KIND_FREE => {}
                    KIND_RUN => {
                        let Some((class, checked)) = self.classes.run_of_entry(e) else {
                            let class = entry_class(e);
                            return Err(corrupt(format!("run of unknown class {class}")));
                        };
                        let run = self.load_run(media, z, c, class, checked)?;
                        kinds[c as usize].store(e, Ordering::Relaxed);
                        let free = run.st.lock().used < run.nblocks;
                        if free {
                            run.st.lock().pooled = true;
                            self.pools[class as usize].lock().push(run.clone());
                        }
                        runs[c as usize] = Some(run);
                    }
                    KIND_LARGE => {
                        let len = entry_arg(e);
                        if len == 0 || c + len > n {
                            return Err(corrupt(format!("large object of {len} chunks")));
                        }
                        let max = max_large_chunks(&self.geo);
                        if len > max {
                            return Err(corrupt(format!(
                                "large object of {len} chunks, but the largest object takes \
                                 {max}"
                            )));
                        }
                        kinds[c as usize].store(e, Ordering::Relaxed);
                        for k in c + 1..c + len {
                            kinds[k as usize].store(cont_entry(), Ordering::Relaxed);
                        }
                        c += len;
                        continue;
                    }
                    // A continuation outside a large object: the large object was freed
                    // without clearing it, which pgl never does.
                    _ => return Err(corrupt(format!("unknown entry {e:#x}"))),
                }
                c += 1;
            }
            {
                let mut free = self.chunk_lock.lock();
                for c in (1..n).rev() {
                    if entry_kind(kinds[c as usize].load(Ordering::Relaxed)) == KIND_FREE {
                        free.push((z, c));
                    }
                }
            }
            let zone = Zone::new(kinds, runs);
            if !self.zones.set(z, zone) {
                return Err(Error::config("zone loaded twice"));
            }
        }
        self.zone_count.store(total, Ordering::Release);
        Ok(())
    }

    /// Loads the run of chunk `chunk` of zone `zone`. A checked bitmap word that does not
    /// verify leaves the run out of service (quarantined): the pool still opens, its other
    /// runs serve allocations, and the damage is counted in `quarantined` (and reported by
    /// `pgl check` and scrubs, which verify every word).
    fn load_run(
        &self,
        media: &Media,
        zone: u64,
        chunk: u64,
        class: u16,
        checked: bool,
    ) -> Result<Arc<Run>> {
        let off = self.geo.chunk_offset(zone, chunk);
        let nblocks = self.classes.nblocks_in(class, checked);
        let per = bits_per_word(checked);
        let words = nblocks.div_ceil(64) as usize;
        let mut bits = vec![0u64; self.slab_words];
        let mut damaged = false;
        for w in 0..self.classes.bitmap_words(class, checked) {
            let at = off + u64::from(w) * 8;
            // SAFETY: the bitmap lies at the start of this run chunk, inside the pool.
            let word = unsafe { media.read_u64(at) };
            // A word that does not verify hides which of its blocks are allocated: all of
            // them count as allocated (none is handed out again, and the objects among them
            // stay readable through their oids, whose headers and checksums vet them).
            let value = word_bits(at, word, checked).unwrap_or_else(|| {
                damaged = true;
                u64::MAX >> (64 - per)
            });
            let first = w * per;
            bits[first as usize / 64] |= value << (first % 64);
        }
        if nblocks % 64 != 0 {
            if let Some(last) = bits.get_mut(words - 1) {
                *last &= (1u64 << (nblocks % 64)) - 1;
            }
        }
        let used = bits.iter().map(|w| w.count_ones()).sum();
        let run = Arc::new(Run {
            off,
            zone,
            chunk,
            class,
            block: self.classes.block(class),
            per_block: FastDiv::new(self.classes.block(class)),
            nblocks,
            header: self.classes.header_in(class, checked),
            checked,
            bits: bits.into_iter().map(AtomicU64::new).collect(),
            st: Mutex::new(RunState {
                used,
                owned: false,
                pooled: false,
                dead: false,
                quarantined: false,
                retired: false,
                provisional: false,
                hint: 0,
                sealed: Vec::new(),
            }),
        });
        if damaged {
            self.quarantine(&run);
        }
        Ok(run)
    }

    fn zone(&self, z: u64) -> Option<&Zone> {
        if z >= self.zone_count() {
            return None;
        }
        self.zones.get(z)
    }

    /// The largest payload one object can have (`layout::max_object`).
    pub(crate) fn max_object(&self) -> u64 {
        max_object(&self.geo)
    }

    /// Whether `off` is a word of the persistent bitmap of a checked run, as the volatile
    /// chunk kinds say (a walk that read the chunk table before the chunk changed hands
    /// may take other bytes for one).
    pub(crate) fn is_checked_bitmap_word(&self, off: u64) -> bool {
        self.run_bitmap_at(off)
            .is_some_and(|(checked, within, words)| {
                checked && within % 8 == 0 && within / 8 < words
            })
    }

    /// Whether the page at `page` holds words of a plain run's bitmap, as the volatile
    /// chunk kinds say: no check guards them, so damage to them goes unnoticed (a zeroed
    /// or random word frees live blocks).
    pub(crate) fn holds_plain_bitmap(&self, page: u64) -> bool {
        self.run_bitmap_at(page)
            .is_some_and(|(checked, within, words)| !checked && within < words * 8)
    }

    /// For `off` in a chunk the volatile chunk kinds say is a run of a known class:
    /// whether the run's bitmap is checked, `off`'s offset in the chunk, and how many
    /// words the bitmap has (it starts the chunk).
    fn run_bitmap_at(&self, off: u64) -> Option<(bool, u64, u64)> {
        let pos = self.place_of(off)?;
        let zone = self.zone(pos.zone)?;
        let e = zone.kinds[pos.chunk as usize].load(Ordering::Acquire);
        let (class, checked) = (entry_class(e), entry_checked(e));
        (entry_kind(e) == KIND_RUN && (class as usize) < self.classes.len()).then(|| {
            let words = u64::from(self.classes.bitmap_words(class, checked));
            (checked, pos.within, words)
        })
    }

    /// Takes the run whose bitmap holds the word at `off` out of service: a word that
    /// neither verifies nor can be rebuilt would make every allocation that picks one of
    /// its blocks fail. Its live objects stay readable; nothing is allocated from it.
    pub(crate) fn quarantine_run_of(&self, off: u64) {
        let Some(pos) = self.place_of(off) else {
            return;
        };
        let Some(zone) = self.zone(pos.zone) else {
            return;
        };
        if let Some(run) = &*zone.runs[pos.chunk as usize].lock() {
            self.quarantine(run);
        }
    }

    /// Takes `run` out of service (no allocation from it, never reclaimed), counting it
    /// once however often it is met.
    fn quarantine(&self, run: &Run) {
        let mut st = run.st.lock();
        st.dead = true;
        if !std::mem::replace(&mut st.quarantined, true) {
            self.quarantined.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The zone position of `off` if it lies in the data rows of a zone in use.
    fn place_of(&self, off: u64) -> Option<ZonePos> {
        self.map
            .split(off)
            .filter(|p| p.zone < self.zone_count() && p.chunk < self.geo.chunks_per_zone())
    }

    /// Finds the live object whose payload starts at `payload`.
    pub(crate) fn locate(&self, payload: u64) -> Result<ObjPlace> {
        let bad = |why: &str| Err(Error::invalid_oid(payload, why));
        if payload == 0 {
            return bad("null oid");
        }
        let Some(pos) = self.place_of(payload) else {
            return bad("outside the pool's zones");
        };
        if pos.chunk == 0 {
            return bad("inside zone metadata");
        }
        let Some(zone) = self.zone(pos.zone) else {
            return bad("outside the pool's zones");
        };
        let c = pos.chunk as usize;
        // No lock: the bind count and kind entry read before and after the bitmap tell
        // whether the bits belong to the run the entry describes (see `Zone`).
        let binds = zone.binds[c].load(Ordering::Acquire);
        let e = zone.kinds[c].load(Ordering::Acquire);
        match entry_kind(e) {
            KIND_RUN => {
                let Some(shape) = self
                    .shapes
                    .get(entry_class(e) as usize)
                    .map(|s| s[entry_checked(e) as usize])
                else {
                    return bad("run of unknown class");
                };
                let Some(idx) = block_at(shape.header, shape.block, shape.per_block, pos.within)
                else {
                    return bad("not the start of an object");
                };
                if idx >= shape.nblocks {
                    return bad("past the last block of its run");
                }
                let Some(slab) = zone.slabs[c].get() else {
                    return bad("run not loaded");
                };
                let word = slab[idx as usize / 64].load(Ordering::Acquire);
                fence(Ordering::Acquire);
                if zone.binds[c].load(Ordering::Relaxed) != binds
                    || zone.kinds[c].load(Ordering::Relaxed) != e
                {
                    return bad("its chunk changed hands while it was located");
                }
                if word & (1 << (idx % 64)) == 0 {
                    return bad("not allocated (freed, or never allocated)");
                }
                Ok(ObjPlace {
                    hdr: payload - HEADER_SIZE,
                    capacity: shape.block - HEADER_SIZE,
                })
            }
            KIND_LARGE if pos.within == HEADER_SIZE => Ok(ObjPlace {
                hdr: payload - HEADER_SIZE,
                capacity: entry_arg(e) * self.geo.chunk_size - HEADER_SIZE,
            }),
            KIND_LARGE => bad("not the start of an object"),
            _ => bad("not allocated (freed, or never allocated)"),
        }
    }

    /// Reserves room for a payload of `size` bytes; returns the header offset and capacity.
    /// The metadata changes go to `meta`, the undo steps to `undo`.
    ///
    /// `claim(payload)` takes the write lock of the object a block or chunk would hold (see
    /// the module invariant); a block or chunk range whose claim fails is passed over.
    /// `Error::Conflict` if none could be claimed: every free block of a run this
    /// transaction made (and of the runs passed over before it), or the first few ranges
    /// of chunks free for a large object.
    pub(crate) fn alloc(
        &self,
        arena: &mut Arena,
        size: u64,
        meta: &mut MetaOps,
        undo: &mut Vec<HeapUndo>,
        claim: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Reserved> {
        if size > self.max_object() {
            return Err(Error::ObjectTooLarge {
                requested: size,
                max: self.max_object(),
            });
        }
        match self.classes.class_for(size + HEADER_SIZE) {
            Some(class) => self.alloc_small(arena, class, size, meta, undo, claim),
            None => self
                .alloc_large(size, meta, undo, claim)
                .map(|place| Reserved {
                    place,
                    sealed: false,
                }),
        }
    }

    /// The lane's run, else a pooled one, else a new one, until a block is claimed. A run
    /// whose free blocks all fail their claims (their stripes held by other transactions,
    /// or by this thread's `Ref`s) is passed over for this allocation, then pooled again at
    /// the bottom, behind the runs not yet tried; after `PASS_OVER_LIMIT` of them, a new
    /// run. A run this transaction made is never passed over (it is not committed: no
    /// other transaction may use it, and it must not look reclaimable): no block of it to
    /// claim is a conflict.
    fn alloc_small(
        &self,
        arena: &mut Arena,
        class: u16,
        size: u64,
        meta: &mut MetaOps,
        undo: &mut Vec<HeapUndo>,
        claim: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Reserved> {
        /// Runs one allocation passes over before it makes a new run.
        const PASS_OVER_LIMIT: usize = 4;
        if arena.current.len() < self.classes.len() {
            arena.current.resize(self.classes.len(), None);
        }
        let mut passed: Vec<Arc<Run>> = Vec::new();
        let r = 'take: loop {
            // Borrowed, not cloned: an `Arc` clone and drop are two locked instructions
            // on every allocation.
            if let Some(run) = arena.current[class as usize].as_ref() {
                let mut st = run.st.lock();
                if st.dead {
                    drop(st);
                    arena.current[class as usize] = None;
                    continue;
                }
                let payload = |idx| run.block_offset(idx) + HEADER_SIZE;
                let taken = take_bit(run.bits(), &mut st, run.nblocks, |idx| claim(payload(idx)));
                if let Some((idx, sealed)) = taken {
                    drop(st);
                    break 'take Ok(reserve_block(run.clone(), idx, sealed, meta, undo));
                }
                let free_blocks = st.used < run.nblocks;
                if free_blocks && made_by(undo, run) {
                    break 'take Err(Error::Conflict {
                        offset: run.block_offset(0) + HEADER_SIZE,
                    });
                }
                st.owned = false;
                drop(st);
                let run = arena.current[class as usize].take();
                if free_blocks {
                    passed.extend(run);
                }
            }
            // Next: a pooled run with free blocks (unless enough were passed over), else a
            // new run.
            let next = if passed.len() >= PASS_OVER_LIMIT {
                None
            } else {
                let mut pool = self.pools[class as usize].lock();
                let mut found = None;
                while let Some(r) = pool.pop() {
                    let mut st = r.st.lock();
                    st.pooled = false;
                    if !st.dead && !st.owned && st.used < r.nblocks {
                        st.owned = true;
                        drop(st);
                        found = Some(r);
                        break;
                    }
                }
                found
            };
            let run = match next {
                Some(r) => r,
                None => match self.new_run(class, size, meta, undo) {
                    Ok(r) => r,
                    Err(e @ Error::PoolFull { .. }) => {
                        // No chunk for a run of this lane's own: a block of a run other
                        // lanes allocate from, if one is free.
                        let (taken, locked_at) = self.alloc_elsewhere(class, claim);
                        if let Some((run, idx, sealed)) = taken {
                            break 'take Ok(reserve_block(run, idx, sealed, meta, undo));
                        }
                        // None, but runs passed over, or other lanes' runs, have free
                        // blocks: they are only locked for now, so this is a conflict
                        // (retried), not a full pool. (A few times in a row on this
                        // thread: a lock held for long, by a long transaction or a `Ref`
                        // kept, must not turn a full pool into minutes of retries.)
                        let locked_at = passed
                            .first()
                            .map(|r| r.block_offset(0) + HEADER_SIZE)
                            .or(locked_at);
                        let locked = locked_at.filter(|_| {
                            FULL_BUT_LOCKED.with(|n| {
                                n.set(n.get() + 1);
                                n.get() <= FULL_BUT_LOCKED_RETRIES
                            })
                        });
                        break 'take Err(match locked {
                            Some(offset) => Error::Conflict { offset },
                            None => e,
                        });
                    }
                    Err(e) => break 'take Err(e),
                },
            };
            arena.current[class as usize] = Some(run);
        };
        if !matches!(r, Err(Error::Conflict { .. })) {
            FULL_BUT_LOCKED.with(|n| n.set(0));
        }
        for run in passed {
            let mut st = run.st.lock();
            if !st.owned && !st.pooled && !st.dead {
                st.pooled = true;
                drop(st);
                self.pools[class as usize].lock().insert(0, run);
            }
        }
        r
    }

    /// A block of class `class` from any committed run with one free and claimable
    /// (`claim`), other lanes' current runs included: for when the pool has no chunk left
    /// for a new run. A lane's run is its own only by preference (every allocation from a
    /// run holds the run's lock); a run made by a transaction that has not committed is
    /// that transaction's alone (`RunState::provisional`). Scans every chunk: a full
    /// pool's path, not a hot one. With none taken, also where a run with free blocks
    /// whose claims all failed, or that another transaction made and has not committed,
    /// lies (locked for now: a conflict, not a full pool).
    fn alloc_elsewhere(
        &self,
        class: u16,
        claim: &mut dyn FnMut(u64) -> bool,
    ) -> (Option<Taken>, Option<u64>) {
        let mut locked_at = None;
        for zi in 0..self.zone_count() {
            let Some(zone) = self.zone(zi) else { continue };
            for c in 1..self.geo.chunks_per_zone() as usize {
                if entry_kind(zone.kinds[c].load(Ordering::Acquire)) != KIND_RUN {
                    continue;
                }
                let Some(run) = zone.runs[c].lock().clone() else {
                    continue;
                };
                if run.class != class {
                    continue;
                }
                let mut st = run.st.lock();
                if st.dead || st.retired || st.used >= run.nblocks {
                    continue;
                }
                if st.provisional {
                    // Another transaction's until it commits (this one's own runs are its
                    // lane's current ones, tried first): its free blocks are only locked
                    // for now.
                    locked_at.get_or_insert(run.block_offset(0) + HEADER_SIZE);
                    continue;
                }
                let payload = |idx| run.block_offset(idx) + HEADER_SIZE;
                let taken = take_bit(run.bits(), &mut st, run.nblocks, |idx| claim(payload(idx)));
                drop(st);
                match taken {
                    Some((idx, sealed)) => return (Some((run, idx, sealed)), None),
                    None => {
                        locked_at.get_or_insert(run.block_offset(0) + HEADER_SIZE);
                    }
                }
            }
        }
        (None, locked_at)
    }

    /// The transaction whose heap changes `undo` holds committed: the runs it made are
    /// every lane's to allocate from now.
    pub(crate) fn committed(&self, undo: &[HeapUndo]) {
        for u in undo {
            if let HeapUndo::NewRun(run) = u {
                run.st.lock().provisional = false;
            }
        }
    }

    fn new_run(
        &self,
        class: u16,
        size: u64,
        meta: &mut MetaOps,
        undo: &mut Vec<HeapUndo>,
    ) -> Result<Arc<Run>> {
        let mut free = self.chunk_lock.lock();
        let Some((zone_idx, chunk)) = self
            .pop_free(&mut free)
            .or_else(|| self.claim_run_chunk())
            .or_else(|| self.claim_chunks(1, (0, 1), true))
        else {
            return Err(self.full(size));
        };
        drop(free);
        let zone = self.zone(zone_idx).expect("claimed zone exists");
        // A checked run's first commit logs every word of its bitmap (sealed empty words
        // are not zero): a run whose bitmap would take more than half a lane's record is
        // made plain instead (only geometries with lanes far smaller than chunks).
        let checked_bytes = u64::from(self.classes.bitmap_words(class, true)) * 8;
        let checked =
            make_checked_runs() && checked_bytes <= (self.geo.lane_size / 2).saturating_sub(1024);
        let nblocks = self.classes.nblocks_in(class, checked);
        let block = self.classes.block(class);
        let run = Arc::new(Run {
            off: self.geo.chunk_offset(zone_idx, chunk),
            zone: zone_idx,
            chunk,
            class,
            block,
            per_block: FastDiv::new(block),
            nblocks,
            header: self.classes.header_in(class, checked),
            checked,
            bits: self.bind_slab(zone, chunk),
            st: Mutex::new(RunState {
                used: 0,
                owned: true,
                pooled: false,
                dead: false,
                quarantined: false,
                retired: false,
                provisional: true,
                hint: 0,
                sealed: Vec::new(),
            }),
        });
        let entry = run_entry(class, block, checked);
        meta.set(self.table_entry(zone_idx, chunk), entry);
        let words = u64::from(self.classes.bitmap_words(class, checked));
        if checked {
            // Sealed empty words are not zero: each is logged (they fit, see above).
            for w in 0..words {
                let at = run.off + w * 8;
                meta.set(at, bitmap_word(at, 0));
            }
        } else {
            // A chunk a large object used holds its old bytes: one record entry zeroes
            // them, however many there are.
            meta.zero(run.off, words * 8);
        }
        *zone.runs[chunk as usize].lock() = Some(run.clone());
        zone.kinds[chunk as usize].store(entry, Ordering::Release);
        undo.push(HeapUndo::NewRun(run.clone()));
        Ok(run)
    }

    /// The bitmap slab of `chunk` for a run about to be bound to it (the chunk is claimed,
    /// its kind entry not yet the run's); bumps the chunk's bind count (see `Zone`).
    fn bind_slab(&self, zone: &Zone, chunk: u64) -> Arc<[AtomicU64]> {
        let c = chunk as usize;
        let slab = zone.slabs[c]
            .get_or_init(|| (0..self.slab_words).map(|_| AtomicU64::new(0)).collect())
            .clone();
        zone.binds[c].fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        // A run is retired only once empty (`RunState::reclaimable`; quarantined runs never
        // are), and a dead run's bits are never set again, so the slab comes back clear.
        debug_assert!(slab.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        slab
    }

    fn table_entry(&self, zone: u64, chunk: u64) -> u64 {
        self.geo.chunk_offset(zone, 0) + CHUNK_TABLE_OFFSET + chunk * 8
    }

    fn full(&self, requested: u64) -> Error {
        Error::PoolFull {
            requested,
            free: self.free_bytes(),
            pool_file: None,
        }
    }

    /// Puts free chunk `c` of zone `z` on the free stack: on top, or (`bottom`) under all
    /// the others. Entries go stale when their chunk is taken by a scan instead
    /// (`claim_chunks`: large objects, a pool without stacked chunks), and a chunk freed
    /// again is pushed again: once the entries could outnumber the pool's chunks twice
    /// over, the stale and repeated ones are dropped (each chunk keeps its topmost entry),
    /// so the stack stays within about twice the chunk count (amortised O(1) a push).
    /// Every chunk made free comes here: it also moves the scan start of large allocations
    /// (`large_cursor`) back to the chunk if it lies behind, so that a range freed there is
    /// found without a scan from the first chunk.
    fn push_free(&self, free: &mut Vec<(u64, u64)>, z: u64, c: u64, bottom: bool) {
        self.large_cursor.fetch_min(z << 32 | c, Ordering::Relaxed);
        if bottom {
            free.insert(0, (z, c));
        } else {
            free.push((z, c));
        }
        let per = self.geo.chunks_per_zone();
        // Read once: `add_zones` may publish more zones meanwhile (it does not take this lock
        // to do so), and `seen` covers only these.
        let loaded = self.zone_count();
        let chunks = loaded * per;
        if free.len() as u64 > 2 * chunks + 64 {
            let mut seen = vec![false; chunks as usize];
            let mut kept: Vec<(u64, u64)> = free
                .iter()
                .rev()
                .filter(|&&(z, c)| {
                    if z >= loaded {
                        // A zone `add_zones` is loading: its chunks are pushed before its
                        // count is published. Kept (`pop_free` checks them).
                        return true;
                    }
                    let Some(zone) = self.zone(z).filter(|_| c < per) else {
                        return false;
                    };
                    let first = !std::mem::replace(&mut seen[(z * per + c) as usize], true);
                    first && entry_kind(zone.kinds[c as usize].load(Ordering::Relaxed)) == KIND_FREE
                })
                .copied()
                .collect();
            kept.reverse();
            *free = kept;
        }
    }

    /// Pops a chunk that is still free from the free stack and reserves it. Entries of a
    /// zone `add_zones` is loading (pushed before its count is published) are kept, as
    /// `push_free`'s compaction keeps them: that zone's chunks are free.
    fn pop_free(&self, free: &mut Vec<(u64, u64)>) -> Option<(u64, u64)> {
        let mut loading = Vec::new();
        let mut found = None;
        while let Some((z, c)) = free.pop() {
            let Some(zone) = self.zone(z) else {
                loading.push((z, c));
                continue;
            };
            let k = &zone.kinds[c as usize];
            if k.compare_exchange(
                KIND_FREE,
                KIND_RESERVED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
            {
                found = Some((z, c));
                break;
            }
        }
        free.extend(loading.into_iter().rev());
        found
    }

    /// Finds and reserves a chunk for a new run once the free stack is empty: an empty run
    /// no lane allocates from. The scan starts where the last one ended and wraps around
    /// once: a pool whose objects of one size were all freed hands its empty runs to
    /// another size one after the other, and scanning each time from the first chunk made
    /// that quadratic in the pool's chunks (256 MiB of 16 KiB chunks, refilled: 32 µs an
    /// allocation instead of 4.6 µs at 16 MiB). Caller holds `chunk_lock`.
    fn claim_run_chunk(&self) -> Option<(u64, u64)> {
        let at = self.run_cursor.load(Ordering::Relaxed);
        let from = (at >> 32, at & u64::from(u32::MAX));
        let found = self
            .claim_chunks(1, from, false)
            .or_else(|| self.claim_chunks(1, (0, 1), false))?;
        self.run_cursor
            .store(found.0 << 32 | (found.1 + 1), Ordering::Relaxed);
        Some(found)
    }

    /// Finds and reserves `n` contiguous chunks that are free or empty, unowned runs (with
    /// `owned_too`, also empty runs lanes allocate from: for when nothing else is left), at
    /// or after chunk `from.1` of zone `from.0`. Caller holds `chunk_lock`.
    fn claim_chunks(&self, n: u64, from: (u64, u64), owned_too: bool) -> Option<(u64, u64)> {
        let per = self.geo.chunks_per_zone();
        for zi in from.0..self.zone_count() {
            let Some(zone) = self.zone(zi) else { continue };
            let mut start = if zi == from.0 { from.1.max(1) } else { 1 };
            while start + n <= per {
                #[cfg(test)]
                tests::SCANNED.with(|s| s.set(s.get() + 1));
                if let Some(busy) =
                    (start..start + n).find(|&c| !self.chunk_available(zone, c, owned_too))
                {
                    start = busy + 1;
                    continue;
                }
                // Claim; an empty run may have been taken meanwhile, then roll back and go on.
                let mut claimed = Vec::new();
                let mut all = true;
                for c in start..start + n {
                    if self.claim_one(zone, c, owned_too) {
                        claimed.push(c);
                    } else {
                        all = false;
                        break;
                    }
                }
                if all {
                    return Some((zi, start));
                }
                for c in claimed {
                    zone.kinds[c as usize].store(KIND_FREE, Ordering::Release);
                }
                start += 1;
            }
        }
        None
    }

    fn chunk_available(&self, zone: &Zone, c: u64, owned_too: bool) -> bool {
        let e = zone.kinds[c as usize].load(Ordering::Acquire);
        match entry_kind(e) {
            KIND_FREE => true,
            KIND_RUN => match &*zone.runs[c as usize].lock() {
                Some(r) => r.st.lock().reclaimable(owned_too),
                None => false,
            },
            _ => false,
        }
    }

    fn claim_one(&self, zone: &Zone, c: u64, owned_too: bool) -> bool {
        let e = zone.kinds[c as usize].load(Ordering::Acquire);
        match entry_kind(e) {
            KIND_FREE => {
                zone.kinds[c as usize].store(KIND_RESERVED, Ordering::Release);
                true
            }
            KIND_RUN => {
                let mut slot = zone.runs[c as usize].lock();
                let Some(r) = slot.clone() else {
                    return false;
                };
                let mut st = r.st.lock();
                if st.reclaimable(owned_too) {
                    // Retire the empty run: its chunk is reused; the run leaves its pool, and
                    // the lane that allocates from it drops it, lazily (both check `dead`).
                    st.dead = true;
                    st.retired = true;
                    drop(st);
                    *slot = None;
                    zone.kinds[c as usize].store(KIND_RESERVED, Ordering::Release);
                    true
                } else {
                    false
                }
            }
            _ => false,
        }
    }

    /// Finds and reserves `n` contiguous chunks for a large object: free chunks and empty,
    /// unowned runs from `large_cursor` on; failing that, the same from the first chunk
    /// (runs emptied behind the cursor are found only here: chunks freed behind it moved
    /// it back, see `push_free`); failing that, empty runs lanes allocate from too. Scanning
    /// from the first chunk every time walked every full chunk before the free ones again:
    /// with the first half of a pool full of small objects, ~1 ms a large allocation at
    /// 64 GB. Caller holds `chunk_lock`.
    fn claim_large(&self, n: u64) -> Option<(u64, u64)> {
        let at = self.large_cursor.load(Ordering::Relaxed);
        let from = (at >> 32, at & u64::from(u32::MAX));
        self.claim_chunks(n, from, false)
            .or_else(|| {
                (from != (0, 1))
                    .then(|| self.claim_chunks(n, (0, 1), false))
                    .flatten()
            })
            .or_else(|| self.claim_chunks(n, (0, 1), true))
    }

    fn alloc_large(
        &self,
        size: u64,
        meta: &mut MetaOps,
        undo: &mut Vec<HeapUndo>,
        claim: &mut dyn FnMut(u64) -> bool,
    ) -> Result<ObjPlace> {
        /// Ranges of free chunks one large allocation tries to claim.
        const CLAIM_TRIES: usize = 8;
        let n = (size + HEADER_SIZE).div_ceil(self.geo.chunk_size);
        let mut free = self.chunk_lock.lock();
        // Where the scan goes on after a range whose object lock was taken.
        let mut from = (0, 1);
        let mut tries = 0;
        let (zone_idx, first) = loop {
            let claimed = if tries == 0 {
                self.claim_large(n)
            } else {
                self.claim_chunks(n, from, false)
                    .or_else(|| self.claim_chunks(n, from, true))
            };
            let Some((z, first)) = claimed else {
                return Err(if tries == 0 {
                    self.full(size)
                } else {
                    Error::Conflict {
                        offset: self.geo.chunk_offset(from.0, from.1) + HEADER_SIZE,
                    }
                });
            };
            let payload = self.geo.chunk_offset(z, first) + HEADER_SIZE;
            if claim(payload) {
                if tries == 0 {
                    // Otherwise the cursor stays at the first range given back below.
                    self.large_cursor
                        .store(z << 32 | (first + n), Ordering::Relaxed);
                }
                break (z, first);
            }
            // Reserved chunks, not yet a large object: back to free; try further on.
            let zone = self.zone(z).expect("claimed zone exists");
            for c in (first..first + n).rev() {
                zone.kinds[c as usize].store(KIND_FREE, Ordering::Release);
                self.push_free(&mut free, z, c, false);
            }
            tries += 1;
            if tries == CLAIM_TRIES {
                return Err(Error::Conflict { offset: payload });
            }
            from = (z, first + 1);
        };
        let zone = self.zone(zone_idx).expect("claimed zone exists");
        meta.set(self.table_entry(zone_idx, first), large_entry(n));
        zone.kinds[first as usize].store(large_entry(n), Ordering::Release);
        for c in first + 1..first + n {
            meta.set(self.table_entry(zone_idx, c), cont_entry());
            zone.kinds[c as usize].store(cont_entry(), Ordering::Release);
        }
        undo.push(HeapUndo::Chunks {
            zone: zone_idx,
            first,
            n,
        });
        Ok(ObjPlace {
            hdr: self.geo.chunk_offset(zone_idx, first),
            capacity: n * self.geo.chunk_size - HEADER_SIZE,
        })
    }

    /// Prepares the free of the object whose payload is at `payload` (already located, by
    /// `locate` or when its buffer was made, and locked by the caller): records the metadata
    /// change and what to finish after commit. `committed`: the object was committed before
    /// this transaction, whose changes to it are dropped, so its block is released sealed.
    pub(crate) fn free(
        &self,
        payload: u64,
        meta: &mut MetaOps,
        committed: bool,
    ) -> Result<PendingFree> {
        let pos = self
            .place_of(payload)
            .ok_or_else(|| Error::invalid_oid(payload, "outside the pool's zones"))?;
        let zone = self
            .zone(pos.zone)
            .ok_or_else(|| Error::invalid_oid(payload, "outside the pool's zones"))?;
        let e = zone.kinds[pos.chunk as usize].load(Ordering::Acquire);
        match entry_kind(e) {
            KIND_RUN => {
                let run = zone.runs[pos.chunk as usize]
                    .lock()
                    .clone()
                    .ok_or_else(|| Error::invalid_oid(payload, "run not loaded"))?;
                let idx = run
                    .block_at(pos.within)
                    .ok_or_else(|| Error::invalid_oid(payload, "not the start of an object"))?;
                let (word, bit) = run.word_of(idx);
                meta.clear_bits(word, bit, run.checked);
                Ok(PendingFree::Block(run, idx, committed))
            }
            KIND_LARGE => {
                let n = entry_arg(e);
                for c in pos.chunk..pos.chunk + n {
                    meta.set(self.table_entry(pos.zone, c), 0);
                }
                Ok(PendingFree::Chunks {
                    zone: pos.zone,
                    first: pos.chunk,
                    n,
                })
            }
            _ => Err(Error::invalid_oid(payload, "not allocated")),
        }
    }

    /// Releases what a committed transaction freed.
    pub(crate) fn finish_free(&self, f: PendingFree) {
        match f {
            PendingFree::Block(run, idx, sealed) => self.release_block(&run, idx, sealed),
            PendingFree::Chunks { zone, first, n } => self.release_chunks(zone, first, n),
        }
    }

    /// First step of rolling back: marks a run the transaction created dead, so that no
    /// block released by the rest of the rollback puts it in a pool.
    pub(crate) fn kill_new_run(&self, u: &HeapUndo) {
        if let HeapUndo::NewRun(run) = u {
            run.st.lock().dead = true;
        }
    }

    /// Rolls back an aborted transaction's reservations.
    pub(crate) fn undo(&self, u: HeapUndo) {
        match u {
            HeapUndo::Block(run, idx) => self.release_block(&run, idx, false),
            HeapUndo::NewRun(run) => {
                let mut free = self.chunk_lock.lock();
                if let Some(zone) = self.zone(run.zone) {
                    let mut st = run.st.lock();
                    st.dead = true;
                    st.retired = true;
                    drop(st);
                    let mut slot = zone.runs[run.chunk as usize].lock();
                    if slot.as_ref().is_some_and(|r| Arc::ptr_eq(r, &run)) {
                        *slot = None;
                        zone.kinds[run.chunk as usize].store(KIND_FREE, Ordering::Release);
                        // At the bottom of the free stack: a transaction that retries
                        // after a conflict on this run's blocks gets another chunk.
                        self.push_free(&mut free, run.zone, run.chunk, true);
                    }
                }
            }
            HeapUndo::Chunks { zone, first, n } => self.release_chunks(zone, first, n),
        }
    }

    /// Releases a reserved or allocated block; `sealed`: it is free after a committed
    /// free of a committed object (see the module docs).
    fn release_block(&self, run: &Arc<Run>, idx: u32, sealed: bool) {
        let mut st = run.st.lock();
        // A retired run holds no block (it was empty, and reservations need the object's
        // lock, see the module docs): its slab may be another run's by now.
        debug_assert!(!st.retired, "a block released in a retired run");
        if st.retired {
            return;
        }
        let w = idx as usize / 64;
        let word = run.bits()[w].load(Ordering::Relaxed);
        if word & (1 << (idx % 64)) != 0 {
            run.bits()[w].store(word & !(1 << (idx % 64)), Ordering::Release);
            st.used -= 1;
            st.hint = st.hint.min(w);
            if sealed {
                if st.sealed.is_empty() {
                    st.sealed = vec![0; run.bits().len()];
                }
                st.sealed[w] |= 1 << (idx % 64);
            }
        }
        if !st.owned && !st.pooled && !st.dead {
            st.pooled = true;
            drop(st);
            self.pools[run.class as usize].lock().push(run.clone());
        }
    }

    fn release_chunks(&self, zone: u64, first: u64, n: u64) {
        let mut free = self.chunk_lock.lock();
        if let Some(z) = self.zone(zone) {
            for c in (first..first + n).rev() {
                z.kinds[c as usize].store(KIND_FREE, Ordering::Release);
                self.push_free(&mut free, zone, c, false);
            }
        }
    }

    /// Bytes available for allocation: free chunks and empty runs count whole; other runs
    /// count their free blocks (none for runs out of service).
    pub(crate) fn free_bytes(&self) -> u64 {
        let mut free = 0;
        for zi in 0..self.zone_count() {
            let Some(zone) = self.zone(zi) else { continue };
            for c in 1..self.geo.chunks_per_zone() as usize {
                let e = zone.kinds[c].load(Ordering::Acquire);
                match entry_kind(e) {
                    KIND_FREE => free += self.geo.chunk_size,
                    KIND_RUN => {
                        if let Some(r) = &*zone.runs[c].lock() {
                            let st = r.st.lock();
                            if st.quarantined {
                                // Out of service: none of it is available.
                            } else if st.used == 0 {
                                free += self.geo.chunk_size;
                            } else {
                                free += (r.nblocks - st.used) as u64 * r.block;
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        free
    }

    /// Bytes of all data chunks (the heap's capacity).
    pub(crate) fn capacity_bytes(&self) -> u64 {
        self.zone_count() * (self.geo.chunks_per_zone() - 1) * self.geo.chunk_size
    }
}

/// Block `idx` of `run`, taken for this transaction (its bit set under the run's lock):
/// its bitmap bit logged, its release on abort noted.
fn reserve_block(
    run: Arc<Run>,
    idx: u32,
    sealed: bool,
    meta: &mut MetaOps,
    undo: &mut Vec<HeapUndo>,
) -> Reserved {
    let (word, bit) = run.word_of(idx);
    meta.set_bits(word, bit, run.checked);
    let place = ObjPlace {
        hdr: run.block_offset(idx),
        capacity: run.block - HEADER_SIZE,
    };
    undo.push(HeapUndo::Block(run, idx));
    Reserved { place, sealed }
}

/// Whether `undo` holds the creation of `run`: the transaction made it and has not
/// committed.
fn made_by(undo: &[HeapUndo], run: &Arc<Run>) -> bool {
    undo.iter()
        .any(|u| matches!(u, HeapUndo::NewRun(r) if Arc::ptr_eq(r, run)))
}

#[cfg(test)]
mod tests {
    use crate::heap::layout::*;
    use crate::heap::run::PLAIN_RUNS;
    use crate::{Config, Oid, Pool};
    use std::sync::mpsc;

    type Obj = [u64; 8];

    thread_local! {
        /// Start positions `claim_chunks` tried on this thread.
        pub(super) static SCANNED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// A pool of `zones` zones of `rows` rows of four 16 KiB chunks, all of it made at once
    /// (it cannot grow): many chunks in a small file.
    fn pool_of_16k_chunks(name: &str, rows: u64, zones: u64) -> (std::path::PathBuf, Pool) {
        let path = crate::scratch_pool(name);
        let mut c = Config::small(name);
        c.chunk_size = 16 << 10;
        c.rows = rows;
        c.chunks_per_row = 4;
        c.size = c.geometry().pool_size(zones);
        c.max_size = c.size;
        let pool = Pool::create(&path, &c).unwrap();
        (path, pool)
    }

    /// Allocates `T`s, `batch` a transaction, until the pool is full.
    fn fill_with<T: crate::Persistent>(pool: &Pool, batch: usize) -> Vec<Oid<T>> {
        let mut objs = Vec::new();
        loop {
            let r = pool.tx(|tx| {
                (0..batch)
                    .map(|_| tx.alloc_zeroed::<T>())
                    .collect::<crate::Result<Vec<_>>>()
            });
            match r {
                Ok(v) => objs.extend(v),
                Err(crate::Error::PoolFull { .. }) => return objs,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// A pool filled with objects of one size, all freed, then filled with objects of
    /// another size: each new run takes over an empty run of the first size. Finding them
    /// costs a bounded number of chunk visits each, not a scan from the pool's first
    /// chunk (which made refilling quadratic in the pool's chunks).
    #[test]
    fn refilling_with_another_size_visits_each_chunk_a_bounded_number_of_times() {
        let (path, pool) = pool_of_16k_chunks("refill-other-size", 64, 2);
        let chunks = 2 * pool.engine().heap.geo.chunks_per_zone();
        let big = fill_with::<[u64; 500]>(&pool, 16);
        assert!(big.len() as u64 > chunks, "the pool filled: {}", big.len());
        for batch in big.chunks(64) {
            pool.tx(|tx| batch.iter().try_for_each(|&o| tx.free(o)))
                .unwrap();
        }
        SCANNED.with(|s| s.set(0));
        let small = fill_with::<[u64; 250]>(&pool, 16);
        let scanned = SCANNED.with(|s| s.get());
        assert!(small.len() as u64 > 2 * chunks, "refilled: {}", small.len());
        // One visit per chunk taken over, plus the scans that find the pool full.
        assert!(
            scanned <= 8 * chunks,
            "{scanned} chunk visits to refill a pool of {chunks} chunks"
        );
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    /// A two-chunk object of `Config::small` geometry (64 KiB chunks).
    type TwoChunks = [u8; 64 << 10];

    /// A pool whose first half is full of small objects: a large allocation after the
    /// first one visits a bounded number of chunks, not every full chunk before the free
    /// ones again (which cost ~1 ms an allocation at 64 GB).
    #[test]
    fn large_allocations_do_not_rescan_the_full_chunks_before_them() {
        let (path, pool) = pool_of_16k_chunks("large-past-full", 128, 1);
        let heap = &pool.engine().heap;
        let half = heap.capacity_bytes() / 2;
        while pool.free_bytes() > half {
            pool.tx(|tx| (0..64).try_for_each(|_| tx.alloc_zeroed::<[u64; 64]>().map(drop)))
                .unwrap();
        }
        // Two chunks with its header.
        type Big = [u8; 16 << 10];
        let first = pool.tx(|tx| tx.alloc_unzeroed::<Big>()).unwrap();
        let full = first.raw() / heap.geo.chunk_size;
        assert!(
            full >= heap.geo.chunks_per_zone() / 2 - 1,
            "the first large object lies past the full chunks: chunk {full}"
        );
        SCANNED.with(|s| s.set(0));
        let k = 32;
        for _ in 0..k {
            pool.tx(|tx| tx.alloc_unzeroed::<Big>()).unwrap();
        }
        let scanned = SCANNED.with(|s| s.get());
        assert!(
            scanned <= 4 * k,
            "{scanned} chunk visits for {k} large allocations past {full} full chunks"
        );
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    /// Wherever the scan of large allocations starts, every fitting free range is found:
    /// one freed behind it (in either zone), one made of runs emptied behind it (no chunk
    /// freed), one in a zone added by `grow`; and `free_bytes` counts each exactly.
    #[test]
    fn a_large_allocation_finds_the_one_fitting_range_wherever_it_lies() {
        let path = crate::scratch_pool("large-one-range");
        let mut c = Config::small("large-one-range");
        c.rows = 16;
        c.lanes = 1;
        c.size = c.geometry().pool_size(2);
        c.max_size = c.geometry().pool_size(3);
        let pool = Pool::create(&path, &c).unwrap();
        let chunk = pool.engine().heap.geo.chunk_size;
        let alloc = || pool.tx(|tx| tx.alloc_unzeroed::<TwoChunks>());
        let free = |o| pool.tx(|tx| tx.free(o)).unwrap();
        let bigs = fill_with::<TwoChunks>(&pool, 1);
        assert!(bigs.len() > 8, "{} large objects", bigs.len());
        let full = pool.free_bytes();
        // At most the odd chunk at the end of each zone.
        assert!(full <= 2 * chunk, "{full} bytes free in a full pool");
        // Freed behind the scan start, in the first zone and in the second.
        for &o in [bigs[0], bigs[1], bigs[bigs.len() / 2], bigs[bigs.len() - 2]].iter() {
            free(o);
            assert_eq!(pool.free_bytes(), full + 2 * chunk);
            assert_eq!(alloc().unwrap(), o, "the one free range is found again");
            assert_eq!(pool.free_bytes(), full);
            assert!(matches!(alloc(), Err(crate::Error::PoolFull { .. })));
        }
        // Runs emptied behind the scan start: their chunks were never freed as chunks.
        free(bigs[0]);
        let smalls = fill_until_full(&pool, 7);
        assert!(!smalls.is_empty());
        pool.tx(|tx| smalls.iter().try_for_each(|&o| tx.free(o)))
            .unwrap();
        let last = *bigs.last().unwrap();
        free(last);
        // Whichever is taken first (`last` moves a scan start past every other range),
        // the other is found too.
        let mut two = [alloc().unwrap(), alloc().unwrap()];
        two.sort();
        assert_eq!(two, [bigs[0], last], "the emptied runs are taken over");
        assert_eq!(pool.free_bytes(), full);
        assert!(matches!(alloc(), Err(crate::Error::PoolFull { .. })));
        // A zone added by `grow`.
        let geo = pool.engine().heap.geo;
        pool.grow(geo.pool_size(3)).unwrap();
        let grown = fill_with::<TwoChunks>(&pool, 1);
        assert_eq!(grown.len(), bigs.len() / 2, "the new zone holds as many");
        // Reopened: the scan starts afresh and still finds the one range.
        let mid = bigs[bigs.len() / 2];
        free(mid);
        drop(pool);
        let pool = Pool::open(&path, "large-one-range").unwrap();
        let again = pool.tx(|tx| tx.alloc_unzeroed::<TwoChunks>()).unwrap();
        assert_eq!(again, mid);
        drop(pool);
        let _ = std::fs::remove_file(path);
    }

    /// A pool of `Config::small` geometry at a scratch path named `name`, with `lanes`
    /// lanes and `zones` zones.
    fn small_pool(name: &str, lanes: u64, zones: u64) -> (std::path::PathBuf, Pool) {
        let path = crate::scratch_pool(name);
        let mut c = Config::small(name);
        c.lanes = lanes;
        c.size = c.geometry().pool_size(zones);
        let pool = Pool::create(&path, &c).unwrap();
        (path, pool)
    }

    /// Allocates objects `[v; 8]` until the pool is full.
    fn fill_until_full(pool: &Pool, v: u64) -> Vec<Oid<Obj>> {
        let mut objs = Vec::new();
        loop {
            match pool.tx(|tx| tx.alloc([v; 8])) {
                Ok(o) => objs.push(o),
                Err(crate::Error::PoolFull { .. }) => return objs,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// A transaction held open on another thread (see `hold_on_another_thread`).
    struct Holder<T> {
        thread: std::thread::JoinHandle<T>,
        /// Lets the transaction end.
        go: mpsc::Sender<()>,
        /// Sent once it has ended.
        gone: mpsc::Receiver<()>,
    }

    /// Runs `before` on another thread, then a transaction of that thread that runs
    /// `during` (given `before`'s value) and holds its lane, and whatever `during` locked,
    /// until `go` is sent. Returns once the transaction holds them; the thread ends with
    /// `before`'s value.
    fn hold_on_another_thread<T: Send + 'static>(
        pool: &Pool,
        before: impl FnOnce(&Pool) -> T + Send + 'static,
        during: impl Fn(&crate::Tx<'_>, &T) -> crate::Result<()> + Send + 'static,
    ) -> Holder<T> {
        let (held_tx, held_rx) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let (gone_tx, gone) = mpsc::channel::<()>();
        let pool = pool.clone();
        let thread = std::thread::spawn(move || {
            let value = before(&pool);
            pool.tx(|tx| {
                during(tx, &value)?;
                held_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                Ok(())
            })
            .unwrap();
            let _ = gone_tx.send(());
            value
        });
        held_rx.recv().unwrap();
        Holder { thread, go, gone }
    }

    fn word(file: &[u8], off: u64) -> u64 {
        u64::from_le_bytes(file[off as usize..off as usize + 8].try_into().unwrap())
    }

    /// A pool whose zones hold more than 4 GiB still holds no object of 4 GiB: the error
    /// says so, instead of sending the user to make the zones larger still.
    #[test]
    fn an_object_past_the_4_gib_bound_is_not_sent_to_larger_zones() {
        let path = crate::scratch_pool("too-large-4g");
        let mut c = Config::small("too-large");
        c.chunk_size = 64 << 20;
        c.rows = 66;
        c.size = c.geometry().pool_size(1);
        c.max_size = c.size;
        // A sparse file: nothing of its zone is written.
        let pool = Pool::create(&path, &c).unwrap();
        let max = pool.engine().heap.max_object();
        assert_eq!(max, u64::from(u32::MAX), "a zone's data area past 4 GiB");
        let e = pool
            .tx(|tx| tx.alloc_raw(max as usize + 1, 1, |_| unreachable!()))
            .unwrap_err();
        assert!(matches!(e, crate::Error::ObjectTooLarge { .. }), "{e}");
        let msg = e.to_string();
        assert!(!msg.contains("larger zones"), "{msg}");
        assert!(msg.contains("4 GiB - 1"), "{msg}");
        // Below the bound, larger zones are the way out.
        let small = crate::Error::ObjectTooLarge {
            requested: 1 << 20,
            max: 1 << 19,
        };
        assert!(small.to_string().contains("larger zones"));
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    /// Chunks freed again and again (large objects, which take their chunks by scanning,
    /// not from the free stack) do not pile up on the free stack: it stays within about
    /// twice the pool's chunk count, and still yields every free chunk.
    #[test]
    fn the_free_stack_stays_bounded_under_large_object_churn() {
        let (path, pool) = small_pool("free-stack-churn", 2, 1);
        let heap = &pool.engine().heap;
        let chunks = heap.zone_count() * heap.geo.chunks_per_zone();
        // A chunk's worth of payload: two chunks with its header.
        type Big = [u8; 64 << 10];
        assert_eq!(heap.geo.chunk_size, 64 << 10);
        for i in 0..2_000u32 {
            let o = pool.tx(|tx| tx.alloc_unzeroed::<Big>()).unwrap();
            pool.tx(|tx| tx.free(o)).unwrap();
            let len = heap.chunk_lock.lock().len() as u64;
            assert!(len <= 2 * chunks + 64, "{len} entries after {i} rounds");
        }
        // Every chunk is free again, and small runs still find them all.
        let before = pool.free_bytes();
        let objs: Vec<Oid<Obj>> = (0..2_000)
            .map(|i| pool.tx(|tx| tx.alloc([i; 8])).unwrap())
            .collect();
        for o in objs {
            pool.tx(|tx| tx.free(o)).unwrap();
        }
        assert_eq!(pool.free_bytes(), before);
        drop(pool);
        let _ = std::fs::remove_file(path);
    }

    /// Runs made by builds before format 5 (plain bitmaps, 64 blocks a word, no entry bit)
    /// keep working beside checked ones: their objects are found, freed and allocated
    /// across reopens, and their words stay plain.
    #[test]
    fn plain_runs_of_older_pools_keep_working() {
        let path = crate::scratch_pool("plain-runs");
        let pool = Pool::create(&path, &Config::small("plain")).unwrap();
        PLAIN_RUNS.with(|p| p.set(true));
        let mut objs: Vec<(Oid<Obj>, Obj)> = (0..100u64)
            .map(|i| (pool.tx(|tx| tx.alloc([i; 8])).unwrap(), [i; 8]))
            .collect();
        PLAIN_RUNS.with(|p| p.set(false));
        let info = pool.info();
        let (geo, zones) = (info.header.geo, info.header.zones);
        let pos = geo.locate(objs[0].0.raw(), zones).unwrap();
        let run = geo.chunk_offset(pos.zone, pos.chunk);
        let table = geo.chunk_offset(pos.zone, 0) + CHUNK_TABLE_OFFSET + 8 * pos.chunk;
        drop(pool);
        let file = std::fs::read(&path).unwrap();
        assert!(!entry_checked(word(&file, table)), "a plain run");
        assert_eq!(word(&file, run), u64::MAX, "blocks 0..64 in one plain word");

        for round in 0..2 {
            let pool = Pool::open(&path, "plain").unwrap();
            for (o, v) in &objs {
                assert_eq!(*pool.get(*o).unwrap(), *v, "round {round}");
            }
            let listed = pool.objects().unwrap();
            for (o, _) in &objs {
                assert!(listed.iter().any(|(l, _)| *l == o.raw()), "{o:?} listed");
            }
            // Free ten, allocate ten: the plain run has room, so they land in it.
            for (o, _) in objs.drain(..10) {
                pool.tx(|tx| tx.free(o)).unwrap();
            }
            for i in 0..10u64 {
                let v = [1000 * (round + 1) + i; 8];
                let o = pool.tx(|tx| tx.alloc(v)).unwrap();
                assert_eq!(geo.locate(o.raw(), zones).unwrap().chunk, pos.chunk);
                objs.push((o, v));
            }
            // A new run (another class) is checked.
            let big = pool.tx(|tx| tx.alloc([round; 100])).unwrap();
            let bpos = geo.locate(big.raw(), zones).unwrap();
            let btable = geo.chunk_offset(bpos.zone, 0) + CHUNK_TABLE_OFFSET + 8 * bpos.chunk;
            let r = pool.scrub(true, |_, _| {}).unwrap();
            assert!(r.is_clean(), "{r:?}");
            drop(pool);
            let file = std::fs::read(&path).unwrap();
            assert!(entry_checked(word(&file, btable)));
            assert!(
                !entry_checked(word(&file, table)),
                "the plain run stays plain"
            );
            // The plain words hold exactly the live blocks, densely.
            let classes = crate::heap::SizeClasses::new(geo.chunk_size, info.header.class_table());
            let class = classes.class_for(16 + 64).unwrap();
            let (header, block) = (classes.header_in(class, false), classes.block(class));
            let mut want = [0u64; 2];
            for (o, _) in &objs {
                let i = (o.raw() - 16 - run - header) / block;
                want[i as usize / 64] |= 1 << (i % 64);
            }
            assert_eq!(
                [word(&file, run), word(&file, run + 8)],
                want,
                "round {round}"
            );
        }
        std::fs::remove_file(&path).unwrap();
    }

    /// A chunk whose run empties is taken by a run of another class: `locate` reads the
    /// new run's layout and bits (the chunk's slab, shared by its runs), so the old run's
    /// oids stop resolving and the new run's free blocks read as free.
    #[test]
    fn a_chunk_that_changes_class_forgets_its_old_run() {
        let (path, pool) = small_pool("chunk-changes-class", 1, 1);
        let c = Config::small("rebind");
        // Every free chunk but one goes to a large object.
        let whole = c.chunk_size - HEADER_SIZE;
        let mut large = Vec::new();
        type Whole = [u8; (64 << 10) - HEADER_SIZE as usize];
        assert_eq!(core::mem::size_of::<Whole>() as u64, whole);
        while let Ok(o) = pool.tx(|tx| tx.alloc_zeroed::<Whole>()) {
            large.push(o);
        }
        pool.tx(|tx| tx.free(large.pop().unwrap())).unwrap();
        // The last chunk: a run of 80-byte blocks, filled until the pool is full.
        let small = fill_until_full(&pool, 7);
        assert!(small.len() > 100, "{} small objects", small.len());
        for &o in &small {
            pool.tx(|tx| tx.free(o)).unwrap();
        }
        // The empty run's chunk is taken by a run of 192-byte blocks.
        type Big = [u64; 22];
        let big: Oid<Big> = pool.tx(|tx| tx.alloc([9u64; 22])).unwrap();
        assert_eq!(*pool.get(big).unwrap(), [9u64; 22]);
        let (geo, zones) = (pool.info().header.geo, pool.info().header.zones);
        let chunk = |o: u64| geo.locate(o, zones).unwrap();
        assert_eq!(
            (chunk(big.raw()).zone, chunk(big.raw()).chunk),
            (chunk(small[0].raw()).zone, chunk(small[0].raw()).chunk),
            "the new run took the old one's chunk"
        );
        let not_an_object = |r: crate::Result<()>| match r {
            Err(crate::Error::InvalidOid { .. }) => true,
            Ok(()) => false,
            Err(e) => panic!("{e}"),
        };
        for &o in small.iter().filter(|o| o.raw() != big.raw()) {
            let r = pool.get(o).map(drop);
            // An old oid is either no block start of the new run or a free block of it.
            assert!(not_an_object(r), "{o:?} still resolves");
        }
        // The new run's second block: free, though the old run's bits covered it.
        let second = Oid::<Big>::from_raw(big.raw() + 192);
        assert!(not_an_object(pool.get(second).map(drop)));
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    /// A block is reserved only once its object lock is held: a transaction holding the
    /// lock of a freed object's oid (a failed read keeps it) makes an allocation pass the
    /// block over, so the oid never resolves and cannot be freed under the new owner.
    #[test]
    fn a_block_whose_lock_is_held_is_passed_over() {
        use std::time::Duration;
        let path = crate::scratch_pool("passed-over");
        let pool = Pool::create(&path, &Config::small("passed-over")).unwrap();
        let (geo, zones) = (pool.info().header.geo, pool.info().header.zones);
        let chunk = |o: Oid<Obj>| {
            let p = geo.locate(o.raw(), zones).unwrap();
            (p.zone, p.chunk)
        };
        // This thread's lane fills a run and moves on to the next one.
        let mut objs: Vec<Oid<Obj>> = vec![pool.tx(|tx| tx.alloc([0u64; 8])).unwrap()];
        loop {
            let o = pool.tx(|tx| tx.alloc([1u64; 8])).unwrap();
            if chunk(o) != chunk(objs[0]) {
                break;
            }
            objs.push(o);
        }
        // Freeing x gives its full run one free block; the run goes to its class's pool.
        let x = objs[0];
        pool.tx(|tx| tx.free(x)).unwrap();
        let (held, go) = mpsc::channel();
        let (done, allocated) = mpsc::channel();
        let pool_ref = &pool;
        std::thread::scope(|s| {
            let pool = pool_ref;
            // Another thread, so another lane: it finds x's run in the pool.
            s.spawn(move || {
                go.recv().unwrap();
                let o = pool.tx(|tx| tx.alloc([5u64; 8])).unwrap();
                done.send(()).unwrap();
                assert_ne!(o, x, "a block whose lock another transaction held");
            });
            let mut runs = 0;
            pool.tx(|tx| {
                runs += 1;
                assert!(tx.get(x).is_err(), "x is free");
                // This transaction holds x's stripe now.
                held.send(()).unwrap();
                // An allocation that reserved x before taking its lock would conflict, and
                // retry until this transaction ends.
                allocated
                    .recv_timeout(Duration::from_secs(10))
                    .expect("the allocation finished while x's lock was held");
                match tx.free(x) {
                    Err(crate::Error::InvalidOid { .. }) => Ok(()),
                    other => panic!("the stale oid freed something: {other:?}"),
                }
            })
            .unwrap();
            assert_eq!(runs, 1);
        });
        // x's run was pooled again: once this lane's run is full, x's block is reused.
        let reused = (0..2 * objs.len()).any(|_| pool.tx(|tx| tx.alloc([6u64; 8])).unwrap() == x);
        assert!(reused, "x's run went back to its pool");
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    /// Readers of a freed object's oid never find it live while other transactions keep
    /// allocating its block and aborting: a reserved block is not an object.
    #[test]
    fn an_uncommitted_reservation_is_never_located() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let (path, pool) = small_pool("reserved-not-live", 1, 1);
        let objs: Vec<Oid<Obj>> = (0..10u64)
            .map(|i| pool.tx(|tx| tx.alloc([i; 8])).unwrap())
            .collect();
        let x = objs[0];
        pool.tx(|tx| tx.free(x)).unwrap();
        let (stop, hits, took_x) = (AtomicBool::new(false), AtomicU64::new(0), AtomicU64::new(0));
        let reads = AtomicU64::new(0);
        let tries = crate::miri_or(20_000, 10);
        // Past `tries` until x's block was reserved and read meanwhile: a reader descheduled
        // while it holds x's lock (under load, for longer than the tries take) makes every
        // reservation pass x over. The deadline only bounds a run that never gets there.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut done = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                let unmet =
                    || took_x.load(Ordering::Relaxed) == 0 || reads.load(Ordering::Relaxed) == 0;
                while done < tries || (unmet() && std::time::Instant::now() < deadline) {
                    done += 1;
                    let r: crate::Result<()> = pool.tx(|tx| {
                        if tx.alloc([99u64; 8])? == x {
                            took_x.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(crate::Error::config("never commits"))
                    });
                    assert!(
                        matches!(r, Err(crate::Error::InvalidConfig { .. })),
                        "{r:?}"
                    );
                }
                stop.store(true, Ordering::Relaxed);
            });
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    if pool.get(x).is_ok() {
                        hits.fetch_add(1, Ordering::Relaxed);
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        });
        let (h, t) = (hits.load(Ordering::Relaxed), took_x.load(Ordering::Relaxed));
        drop(pool);
        std::fs::remove_file(&path).unwrap();
        assert!(t > 0, "the allocations reserved x's block ({t} of {done})");
        assert_eq!(h, 0, "a never-committed block read as live ({h} times)");
    }

    /// Five pooled runs whose free blocks all lie under locks a long reader holds: an
    /// allocation of the class passes over a few of them, then makes a new run (it does
    /// not conflict until the reader ends). (From a review.)
    #[test]
    fn runs_passed_over_do_not_starve_their_class() {
        let (path, pool) = small_pool("stuck-runs", 3, 4);
        const BIG: usize = 16384 - 16;
        // Six full runs of 3 blocks.
        let objs: Vec<u64> = (0..18)
            .map(|_| {
                pool.tx(|tx| tx.alloc_raw(BIG, 0xabcd, |p| p.fill(1)))
                    .unwrap()
            })
            .collect();
        // One free block in each of the first five.
        let freed: Vec<u64> = (0..5).map(|r| objs[3 * r + 1]).collect();
        for &o in &freed {
            pool.tx(|tx| tx.free_raw(o)).unwrap();
        }
        let free_before = pool.free_bytes();
        let (geo, zones) = (pool.info().header.geo, pool.info().header.zones);
        let runs: Vec<u64> = objs
            .iter()
            .map(|&o| geo.locate(o, zones).unwrap().chunk)
            .collect();
        eprintln!("chunks of the objects: {runs:?}");
        let (held, held_rx) = mpsc::channel::<()>();
        let (done, done_rx) = mpsc::channel::<()>();
        let pool = &pool;
        let freed = &freed;
        std::thread::scope(|s| {
            s.spawn(move || {
                pool.tx(|tx| {
                    for &o in freed {
                        assert!(tx.object_bytes(o).is_err());
                    }
                    held.send(()).unwrap();
                    done_rx.recv().unwrap();
                    Ok(())
                })
                .unwrap();
            });
            held_rx.recv().unwrap();
            let r = s
                .spawn(|| {
                    let mut calls = 0;
                    let r = pool.tx(|tx| {
                        calls += 1;
                        if calls > 200 {
                            return Err(crate::Error::config("still conflicting"));
                        }
                        tx.alloc_raw(BIG, 0xabcd, |p| p.fill(2))
                    });
                    (r, calls)
                })
                .join()
                .unwrap();
            eprintln!("allocation while the reader runs: {r:?} (free before: {free_before:?})");
            done.send(()).unwrap();
            assert!(
                r.0.is_ok(),
                "a lane with free chunks available livelocked: {r:?}"
            );
        });
        std::fs::remove_file(&path).unwrap();
    }

    /// A run this transaction makes may have none of its blocks claimable. It must not be
    /// passed over: empty and unowned, it would be reclaimable, another transaction's
    /// large object could take its chunk, and the creator's commit would write the run's
    /// table entry and bitmap over that object. The allocation conflicts instead, and its
    /// retry gets another chunk. (From a review.)
    #[test]
    fn a_new_run_without_a_claimable_block_stays_its_creators() {
        let (path, pool) = small_pool("new-run-kept", 3, 1);
        let (geo, zones) = (pool.info().header.geo, pool.info().header.zones);
        let chunk = move |o: u64| {
            let p = geo.locate(o, zones).unwrap();
            (p.zone, p.chunk)
        };
        const BIG: usize = 16384 - 16;
        const WHOLE: usize = (64 << 10) - 16;
        // Where the next new run goes (an aborted run's chunk goes back on top).
        let mut x = 0;
        let _ = pool.tx(|tx| {
            x = tx.alloc_raw(BIG, 0xabcd, |p| p.fill(0))?;
            Err::<(), _>(crate::Error::config("probe"))
        });
        let (held, held_rx) = mpsc::channel::<()>();
        let (b_go, b_go_rx) = mpsc::channel::<()>();
        let (d_go, d_go_rx) = mpsc::channel::<()>();
        let (d_done, d_done_rx) = mpsc::channel::<u64>();
        let pool = &pool;
        let d_obj = std::thread::scope(|s| {
            s.spawn(move || {
                pool.tx(|tx| {
                    for k in 0..3 {
                        assert!(tx.object_bytes(x + k * 16384).is_err());
                    }
                    held.send(()).unwrap();
                    b_go_rx.recv().unwrap();
                    Ok(())
                })
                .unwrap();
            });
            s.spawn(move || {
                d_go_rx.recv().unwrap();
                let d = pool
                    .tx(|tx| tx.alloc_raw(WHOLE, 0xd0d0, |p| p.fill(0x5a)))
                    .unwrap();
                d_done.send(d).unwrap();
            });
            held_rx.recv().unwrap();
            let mut d = 0;
            let y = pool
                .tx(|tx| {
                    let y = tx.alloc_raw(BIG, 0xabcd, |p| p.fill(2))?;
                    d_go.send(()).unwrap();
                    d = d_done_rx.recv().unwrap();
                    Ok(y)
                })
                .unwrap();
            b_go.send(()).unwrap();
            eprintln!(
                "x {x:#x} {:?}, y {y:#x} {:?}, d {d:#x} {:?}",
                chunk(x),
                chunk(y),
                chunk(d)
            );
            d
        });
        let r = pool.tx(|tx| tx.object_bytes(d_obj).map(|(t, b)| (t, b[0], b[WHOLE - 1])));
        eprintln!("D's large object after T committed: {r:?}");
        assert!(matches!(r, Ok((0xd0d0, 0x5a, 0x5a))), "{r:?}");
        std::fs::remove_file(&path).unwrap();
    }

    /// Fills a pool of `Config::small` geometry, frees one object `x` and runs
    /// `f(pool, x, release)` while another thread's transaction holds `x`'s lock (reading
    /// it: it is free) until `release()` is called, or for 60 s. `release()` returns once
    /// that transaction has ended: the lock is let go by then, however slow its thread.
    fn with_a_locked_free_block<R>(
        name: &str,
        f: impl FnOnce(&Pool, Oid<Obj>, &dyn Fn()) -> R,
    ) -> R {
        let (path, pool) = small_pool(name, 2, 1);
        let objs = fill_until_full(&pool, 3);
        let x = objs[objs.len() / 2];
        pool.tx(|tx| tx.free(x)).unwrap();
        let (held, held_rx) = mpsc::channel::<()>();
        let (done, done_rx) = mpsc::channel::<()>();
        let (gone, gone_rx) = mpsc::channel::<()>();
        let pool = &pool;
        let r = std::thread::scope(|s| {
            s.spawn(move || {
                pool.tx(|tx| {
                    assert!(tx.get(x).is_err(), "x is free");
                    held.send(()).unwrap();
                    let _ = done_rx.recv_timeout(std::time::Duration::from_secs(60));
                    Ok(())
                })
                .unwrap();
                let _ = gone.send(());
            });
            held_rx.recv().unwrap();
            let released = std::cell::Cell::new(false);
            let release = || {
                if !released.replace(true) {
                    let _ = done.send(());
                    let _ = gone_rx.recv_timeout(std::time::Duration::from_secs(60));
                }
            };
            let r = f(pool, x, &release);
            release();
            r
        });
        std::fs::remove_file(&path).unwrap();
        r
    }

    /// A full pool whose one free block lies under a lock another transaction holds: an
    /// allocation passes the block over and finds no chunk for a new run. That is a
    /// conflict (the block is free; the retry takes it once the lock is let go), not a
    /// full pool.
    #[test]
    fn a_full_pool_with_a_locked_free_block_conflicts_instead_of_being_full() {
        let (r, x) = with_a_locked_free_block("full-locked-block", |pool, x, release| {
            let mut calls = 0;
            let r = pool.tx(|tx| {
                calls += 1;
                if calls == 3 {
                    // Conflicted twice: let the reader go; the retry finds the block free.
                    release();
                }
                tx.alloc([4u64; 8])
            });
            (r, x)
        });
        assert_eq!(r.unwrap(), x, "the free block, once its lock was let go");
    }

    /// A `Ref` this thread holds, on the stripe of the chunk a large allocation would
    /// pick: the allocation takes other chunks at once instead of retrying the same ones.
    /// (From a review.)
    #[test]
    fn a_large_object_passes_over_chunks_this_threads_ref_blocks() {
        let path = crate::scratch_pool("own-ref-large");
        let pool = Pool::create(&path, &Config::new("passing")).unwrap();
        const LARGE: usize = 100_000;
        let stripe = crate::tx::stripe_of;
        let mut smalls: Vec<u64> = Vec::new();
        let (o, l) = loop {
            for _ in 0..4 {
                pool.tx(|tx| {
                    for _ in 0..1000 {
                        smalls.push(tx.alloc([1u64, 2])?.raw());
                    }
                    Ok(())
                })
                .unwrap();
            }
            let mut l = 0;
            let _ = pool.tx(|tx| {
                l = tx.alloc_raw(LARGE, 0x1a1a, |p| p.fill(0))?;
                Err::<(), _>(crate::Error::config("probe"))
            });
            if let Some(&o) = smalls.iter().find(|&&o| stripe(o) == stripe(l)) {
                break (o, l);
            }
            assert!(smalls.len() < 400_000);
        };
        eprintln!(
            "{} small objects; {o:#x} shares a stripe with {l:#x}",
            smalls.len()
        );
        let r = pool.get(crate::Oid::<[u64; 2]>::from_raw(o)).unwrap();
        let mut calls = 0;
        let t = std::time::Instant::now();
        let res = pool.tx(|tx| {
            calls += 1;
            if calls > 30 {
                return Err(crate::Error::config("still conflicting"));
            }
            tx.alloc_raw(LARGE, 0x1a1a, |p| p.fill(2))
        });
        eprintln!(
            "with this thread's Ref held: {res:?} after {calls} runs, {:?}",
            t.elapsed()
        );
        drop(r);
        assert!(calls <= 1, "{res:?} after {calls} runs");
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    /// A reader that keeps the one free block's lock for long (a long transaction here; a
    /// `Ref` another thread keeps is the same): the allocation reports a full pool after a
    /// few retries, instead of re-running for as long as the lock is held (up to 100,000
    /// attempts, minutes, and then a `Conflict`). (Review.)
    #[test]
    fn a_full_pool_whose_free_block_a_long_reader_holds_is_reported_full() {
        // Counted in closure runs, not time: a descheduled thread takes long for a few.
        let (r, runs, took) = with_a_locked_free_block("full-long-reader", |pool, _, _| {
            let (mut runs, t) = (0, std::time::Instant::now());
            let r = pool.tx(|tx| {
                runs += 1;
                tx.alloc([4u64; 8])
            });
            (r, runs, t.elapsed())
        });
        assert!(
            matches!(r, Err(crate::Error::PoolFull { .. })),
            "{r:?} after {runs} runs, {took:?}"
        );
        assert!(
            runs <= super::FULL_BUT_LOCKED_RETRIES + 1,
            "{runs} runs ({took:?}) before the pool was reported full"
        );
    }

    /// Pushes zone 1's free chunks on the free stack of a pool of one zone, as `add_zones`
    /// does before it publishes the new zone count.
    fn push_a_zone_being_added(heap: &super::Heap, free: &mut Vec<(u64, u64)>) {
        assert_eq!(heap.zone_count(), 1);
        for c in (1..heap.geo.chunks_per_zone()).rev() {
            free.push((1, c));
        }
    }

    /// Checks that the free stack (its lock held: `free`, released here) still holds an
    /// entry for every free chunk of zone 1 pushed by `push_a_zone_being_added`.
    fn assert_zone_being_added_kept(
        heap: &super::Heap,
        free: parking_lot::MutexGuard<'_, Vec<(u64, u64)>>,
    ) {
        let zone1 = free.iter().filter(|e| e.0 == 1).count() as u64;
        drop(free);
        assert_eq!(
            zone1,
            heap.geo.chunks_per_zone() - 1,
            "entries of the zone being added were dropped"
        );
    }

    /// `add_zones` pushes a new zone's free chunks on the stack before it publishes the
    /// zone count: a `new_run` in between pops them. It must keep them (it dropped them as
    /// entries of no zone: every free chunk of the grown zone left the stack, and each new
    /// run after the stack ran dry scanned the chunk tables under the chunk lock).
    /// Simulated as above: zone 1's entries are pushed while the pool has one zone.
    /// (Review.)
    #[test]
    fn a_pop_keeps_the_entries_of_a_zone_being_added() {
        let (path, pool) = small_pool("free-stack-grow-pop", 2, 1);
        let heap = &pool.engine().heap;
        let mut free = heap.chunk_lock.lock();
        push_a_zone_being_added(heap, &mut free);
        let got = heap.pop_free(&mut free);
        assert!(
            matches!(got, Some((0, _))),
            "a free chunk of zone 0: {got:?}"
        );
        // Give the chunk back as `undo` would.
        let (z, c) = got.unwrap();
        heap.zone(z).unwrap().kinds[c as usize]
            .store(KIND_FREE, std::sync::atomic::Ordering::Release);
        assert_zone_being_added_kept(heap, free);
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    /// `add_zones` pushes a new zone's free chunks on the stack before it publishes the
    /// zone count: a compaction in between must keep them (it dropped them as entries of
    /// no zone; and had the count been published between the compaction's two reads of
    /// it, its `seen` table would be indexed out of bounds). Simulated here: zone 1's
    /// entries are pushed while the pool has one zone. (Review.)
    #[test]
    fn a_compaction_keeps_the_entries_of_a_zone_being_added() {
        let (path, pool) = small_pool("free-stack-grow", 2, 1);
        let heap = &pool.engine().heap;
        let per = heap.geo.chunks_per_zone();
        let mut free = heap.chunk_lock.lock();
        push_a_zone_being_added(heap, &mut free);
        // Pushes of a free chunk of zone 0 until the stack is compacted.
        let (z0, c0) = *free
            .iter()
            .find(|e| e.0 == 0)
            .expect("a free chunk in zone 0");
        for _ in 0..2 * per + 65 {
            heap.push_free(&mut free, z0, c0, false);
        }
        assert_zone_being_added_kept(heap, free);
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    /// A pool is full only when no block of the class is free anywhere: not while another
    /// lane's run, the one it allocates from, still has free blocks. (Review: with 8 lanes
    /// and 256 KiB chunks, up to 2 MiB a size class stayed out of reach.)
    #[test]
    fn a_full_pool_takes_the_free_blocks_of_another_lanes_run() {
        let (path, pool) = small_pool("full-other-lanes-run", 2, 1);
        // Another thread allocates one object (from its lane's run, committed), then
        // keeps that lane busy with a transaction that waits, so this thread fills the
        // pool from the other lane.
        let other = hold_on_another_thread(
            &pool,
            |pool| pool.tx(|tx| tx.alloc([1u64; 8])).unwrap(),
            |_, _| Ok(()),
        );
        let free_before = pool.free_bytes();
        let objs = fill_until_full(&pool, 2);
        let left = pool.free_bytes();
        other.go.send(()).unwrap();
        let first = other.thread.join().unwrap();
        let block = (std::mem::size_of::<Obj>() as u64 + HEADER_SIZE).next_power_of_two();
        assert!(
            left < block,
            "pool full with {left} bytes free ({free_before} before filling, {} objects \
             allocated): the other lane's run kept its free blocks",
            objs.len()
        );
        assert_eq!(*pool.get(first).unwrap(), [1u64; 8]);
        drop(pool);
        let _ = std::fs::remove_file(path);
    }

    /// Nor while another lane's run is empty: its chunk goes to whoever needs one, once
    /// no chunk is free. (Its lane made it and committed it, then freed every block; it
    /// stays that lane's current run, which used to keep the chunk out of reach of
    /// every other class and of large objects.)
    #[test]
    fn a_full_pool_takes_the_chunk_of_another_lanes_empty_run() {
        let (path, pool) = small_pool("full-other-lanes-empty-run", 2, 1);
        let other = hold_on_another_thread(
            &pool,
            |pool| {
                let o = pool.tx(|tx| tx.alloc([1u64; 8])).unwrap();
                pool.tx(|tx| tx.free(o)).unwrap();
            },
            |_, _| Ok(()),
        );
        // Objects of another class fill the pool.
        let mut big = Vec::new();
        loop {
            match pool.tx(|tx| tx.alloc([3u64; 64])) {
                Ok(o) => big.push(o),
                Err(crate::Error::PoolFull { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let left = pool.free_bytes();
        other.go.send(()).unwrap();
        other.thread.join().unwrap();
        let chunk = pool.engine().geo.chunk_size;
        assert!(
            left < chunk,
            "pool full with {left} bytes free ({} objects allocated): the other lane's \
             empty run kept its chunk",
            big.len()
        );
        drop(pool);
        let _ = std::fs::remove_file(path);
    }

    /// An allocation of an `Obj` whose way is cleared once it has been retried: its closure's
    /// second run (the first ended in a conflict, retried) sends `go` and waits for `gone`,
    /// what stood in its way let go of, before allocating. Keyed on the retry, not on a
    /// clock: the retries a conflict over a full pool gets are few (`FULL_BUT_LOCKED_RETRIES`),
    /// and a release that came after them would find the pool reported full. If the first
    /// run ends otherwise, `go` is sent after it, so that the other side finishes either way.
    /// Returns the result and how many times the closure ran.
    fn alloc_released_on_retry(
        pool: &Pool,
        go: mpsc::Sender<()>,
        gone: mpsc::Receiver<()>,
    ) -> (crate::Result<Oid<Obj>>, u32) {
        let mut runs = 0;
        let mut go = Some(go);
        let r = pool.tx(|tx| {
            runs += 1;
            if runs > 1 {
                if let Some(go) = go.take() {
                    go.send(()).unwrap();
                    gone.recv_timeout(std::time::Duration::from_secs(60))
                        .expect("the other transaction let go");
                }
            }
            tx.alloc([3u64; 8])
        });
        if let Some(go) = go.take() {
            go.send(()).unwrap();
        }
        (r, runs)
    }

    /// Nor while the only free blocks left are in another lane's run and locked for now
    /// (their stripe held by another transaction): that is a conflict, retried, as for
    /// the runs an allocation passes over, not a full pool.
    #[test]
    fn a_free_block_of_another_lanes_run_locked_for_now_is_a_conflict_not_a_full_pool() {
        let (path, pool) = small_pool("full-other-lanes-run-locked", 2, 1);
        let other = hold_on_another_thread(
            &pool,
            |pool| {
                let first = pool.tx(|tx| tx.alloc([1u64; 8])).unwrap();
                let second = pool.tx(|tx| tx.alloc([2u64; 8])).unwrap();
                pool.tx(|tx| tx.free(second)).unwrap();
                (first, second)
            },
            // The freed block's stripe, held (a read of the freed oid fails, its lock
            // stays) until told.
            |tx, &(_, second)| {
                assert!(tx.get(second).is_err());
                Ok(())
            },
        );
        let objs = fill_until_full(&pool, 2);
        assert!(!objs.is_empty());
        // The lock goes once the next allocation has been retried.
        let (r, runs) = alloc_released_on_retry(&pool, other.go, other.gone);
        let (first, _) = other.thread.join().unwrap();
        assert!(
            r.is_ok(),
            "{r:?} (closure run {runs} time(s)): a free block, locked for a moment, made \
             the pool full"
        );
        assert_eq!(*pool.get(first).unwrap(), [1u64; 8]);
        drop(pool);
        let _ = std::fs::remove_file(path);
    }

    /// Nor while the only free blocks left are in a run another transaction made and has
    /// not committed yet: they are every lane's once it commits (its chunk is free again if
    /// it aborts), so that is a conflict, retried, not a full pool.
    #[test]
    fn a_free_block_of_another_transactions_new_run_is_a_conflict_not_a_full_pool() {
        let (path, pool) = small_pool("full-other-tx-new-run", 2, 1);
        let (began_tx, began_rx) = mpsc::channel();
        let (registered_tx, registered_rx) = mpsc::channel::<()>();
        let (held_tx, held_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (gone_tx, gone_rx) = mpsc::channel::<()>();
        let other = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                // Its lane's first run of the class, made by this transaction, which waits.
                // It holds its lane before this thread registers the type, which makes a
                // run of the class in the lane it uses: the other one. (Which lane a thread
                // tries first depends on how many threads took one before it, in every
                // test of the process: the same as this thread's, half the time.)
                let mut runs = 0;
                let first = pool
                    .tx(|tx| {
                        runs += 1;
                        assert_eq!(runs, 1, "retried: the transaction may have changed lanes");
                        began_tx.send(()).unwrap();
                        registered_rx.recv().unwrap();
                        let o = tx.alloc([1u64; 8])?;
                        held_tx.send(()).unwrap();
                        go_rx.recv().unwrap();
                        Ok(o)
                    })
                    .unwrap();
                let _ = gone_tx.send(());
                first
            })
        };
        began_rx.recv().unwrap();
        // The type registered (committed), so that the other transaction holds no
        // registry entry this thread needs.
        let o = pool.tx(|tx| tx.alloc([0u64; 8])).unwrap();
        pool.tx(|tx| tx.free(o)).unwrap();
        registered_tx.send(()).unwrap();
        held_rx.recv().unwrap();
        let objs = fill_until_full(&pool, 2);
        assert!(!objs.is_empty());
        // The run is committed once the next allocation has been retried.
        let (r, runs) = alloc_released_on_retry(&pool, go_tx, gone_rx);
        let first = other.join().unwrap();
        assert!(
            r.is_ok(),
            "{r:?} (closure run {runs} time(s)): an uncommitted run's free blocks made the \
             pool full"
        );
        assert_eq!(*pool.get(first).unwrap(), [1u64; 8]);
        drop(pool);
        let _ = std::fs::remove_file(path);
    }
}
