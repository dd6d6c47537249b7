//! The state every transaction of one pool shares: media, heap, lock tables, lanes and the
//! global commit sequence.

use super::lane::{LaneMask, Lanes, Touched};
use super::locks::{MetaLocks, ObjectLocks};
use super::record::RETIRED_OFFSET;
use crate::geometry::{Geometry, ZoneMap};
use crate::heap::Heap;
use crate::persist::Media;
use std::sync::atomic::{AtomicU64, Ordering};

/// Engine ids: unique for the process lifetime (a pool reopened is a new engine, with a new
/// id), which thread-local state keyed by id relies on (`deferred.rs`).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// How objects are verified on access. Chosen each time the pool is opened
/// (`Config::verify`, given to `Pool::create` or `Pool::open_with`), never stored in the
/// file: `Pool::open` runs with `Default`, whatever the pool was made with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyPolicy {
    /// Verify an object's checksum when it is copied into a micro-buffer.
    #[default]
    Default,
    /// Also verify on every `get`.
    Conservative,
    /// As `Default`, plus a background thread (`pgl-scrub`) that scrubs the whole pool
    /// (verifies every object and all parity, repairing what it can; see `Pool::scrub`)
    /// each time `every_n_tx` more transactions (read-only ones included; at least 1) have
    /// committed. It looks every 20 ms, so a burst of commits between two looks makes one
    /// scrub. It stops when the last `Pool` handle is dropped (which waits for a scrub
    /// under way). `stats()` counts its passes (`scrubs`, `scrubs_unclean`) and what they
    /// repaired.
    Scrub {
        /// Transactions between scrubs.
        every_n_tx: u64,
    },
}

/// The global commit sequence, alone on its cache lines (two: the adjacent-line
/// prefetcher moves lines in pairs). Every logged commit increments it, and a field beside
/// it that every transaction reads (the geometry, the media, the heap's) would miss in the
/// other cores' caches after each increment: with two threads allocating, that cost 10-20 %
/// of an allocation and ~20 % of a free.
#[repr(align(128))]
pub(crate) struct CommitSeq(AtomicU64);

impl CommitSeq {
    /// The next sequence number.
    #[inline]
    pub(crate) fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Shared state of one open pool.
pub(crate) struct Engine {
    pub media: Media,
    pub geo: Geometry,
    /// The commit path's offset arithmetic over `geo`.
    pub map: ZoneMap,
    pub heap: Heap,
    pub objects: ObjectLocks,
    pub meta: MetaLocks,
    pub lanes: Lanes,
    pub seq: CommitSeq,
    pub id: u64,
    pub canary: u128,
    pub verify: VerifyPolicy,
    /// Verified types, and the right to register new ones.
    pub types: super::TypeCache,
    /// Zone parity upkeep.
    pub parity: crate::integrity::Parity,
    /// Lane copies commits write (2, or 1 without lane replication).
    lane_copies: u64,
    /// Whether commits keep object checksums and reads verify them (`Config::checksums`).
    pub checksums: bool,
    /// What online repair did.
    pub repairs: super::RepairCounters,
    /// The types a Manual migration converts, while it runs.
    pub migrating: super::migrating::Migrating,
    /// The pool's root object as the committed root word names it (0: none yet): set at
    /// open, and by every commit that changes the word (`pool.root` creating the root, a
    /// migration moving it) before that commit unlocks its objects. `Tx::free` reads it to
    /// refuse the root without taking the word's lock: an object that became the root
    /// can reach a freeing transaction only through that commit's objects or the root
    /// word, both after this is set.
    pub root: AtomicU64,
    /// The media-error handler's view of this pool, once armed (`arm_fault_handler`).
    pub fault: std::sync::OnceLock<Box<crate::integrity::handler::FaultCtx>>,
    fault_slot: std::sync::atomic::AtomicUsize,
}

/// The protections a pool runs with (from its `Config` and header).
pub(crate) struct Options {
    /// When objects are verified.
    pub verify: VerifyPolicy,
    /// Whether commits keep zone parity.
    pub parity: bool,
    /// Parity updates up to this many bytes take the shared atomic path.
    pub parity_atomic_max: usize,
    /// Whether commits write both copies of their redo lane.
    pub replicate_lanes: bool,
    /// Whether commits keep object checksums (and reads verify them).
    pub checksums: bool,
}

impl Engine {
    pub(crate) fn new(
        media: Media,
        geo: Geometry,
        heap: Heap,
        next_seq: u64,
        opts: Options,
    ) -> Engine {
        let Options {
            verify,
            parity,
            parity_atomic_max,
            replicate_lanes,
            checksums,
        } = opts;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // SAFETY: zone 0's root word lies inside the pool, 8-byte aligned; nothing else runs
        // while the pool opens.
        let root = unsafe { media.read_u64(Self::root_word_of(&geo)) };
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let eng = Engine {
            lanes: Lanes::new(geo.lanes as usize),
            media,
            geo,
            heap,
            objects: ObjectLocks::new(),
            meta: MetaLocks::new(),
            seq: CommitSeq(AtomicU64::new(next_seq)),
            id,
            canary: 0x5a5a_c3c3_0f0f_9696_a5a5_3c3c_f0f0_6969 ^ t ^ ((id as u128) << 64),
            verify,
            types: super::TypeCache::new(),
            parity: crate::integrity::Parity::new(parity, parity_atomic_max, &geo),
            lane_copies: if replicate_lanes { 2 } else { 1 },
            checksums,
            map: ZoneMap::new(&geo),
            repairs: Default::default(),
            migrating: Default::default(),
            root: AtomicU64::new(root),
            fault: std::sync::OnceLock::new(),
            fault_slot: std::sync::atomic::AtomicUsize::new(usize::MAX),
        };
        super::deferred::opened(id);
        eng
    }

    /// The offset of the root word (in zone 0's metadata).
    pub(crate) fn root_word_of(geo: &Geometry) -> u64 {
        geo.chunk_offset(0, 0) + crate::heap::layout::ROOT_OFFSET
    }

    /// Registers this pool with the media-error handler. Call it once the engine is at its
    /// final address (inside the pool's `Arc`): the handler keeps pointers to its media and
    /// parity until `Drop` unregisters them. Not where the handler cannot work (system
    /// pages other than `PAGE`): the pool then has no handler (see `inject_media_error`).
    pub(crate) fn arm_fault_handler(&self) {
        use crate::integrity::handler;
        if handler::unsupported_page_size().is_some() {
            return;
        }
        let ctx = self
            .fault
            .get_or_init(|| handler::FaultCtx::new(&self.media, &self.parity, self.geo));
        if let Some(slot) = handler::register(self.media.ptr(0), self.media.reserve(), ctx) {
            self.fault_slot.store(slot, Ordering::Release);
        }
    }

    /// Whether a sealed block's header may be trusted to hold the checksum of its bytes
    /// (see `heap::alloc`). Damage to a free block is then repaired from parity when the
    /// new object is first verified. Not without parity (nothing could repair it), nor
    /// once something made free-space damage permanent since the pool opened: a scrub
    /// recomputed parity over it, a lost page was zero-filled, or an object was found
    /// beyond repair (it may have been freed since, with its damage).
    pub(crate) fn seals_trusted(&self) -> bool {
        self.checksums
            && self.parity.enabled()
            && !self.repairs.free_space_suspect.load(Ordering::Relaxed)
            && self.repairs.unrecoverable.load(Ordering::Relaxed) == 0
            && self
                .fault_ctx()
                .is_none_or(|c| c.lost.load(Ordering::Relaxed) == 0)
    }

    /// Completes an error about this pool's contents as it leaves the pool's API: the pool
    /// file, and the registered name of a stored type it gives by id. The registry is read
    /// only outside this thread's transactions of the pool (where the error would wait for
    /// nothing of its own); inside one the name is left for the outer boundary.
    pub(crate) fn named(&self, e: crate::Error) -> crate::Error {
        let outside = !super::in_tx(self);
        e.in_pool(&self.media.path(), |id| {
            if !outside {
                return None;
            }
            let types = super::list_types(self).ok()?;
            types.into_iter().find(|t| t.type_id == id).map(|t| t.name)
        })
    }

    /// The data extents of zone `z` for a parity pass (`integrity::zone_extents`), the pages
    /// the media-error handler holds as lost counted as data: reading one is what repairs
    /// it. Take them with the pool frozen (`exclusive`), in the pass's frozen section.
    pub(crate) fn zone_extents(&self, z: u64) -> crate::persist::DataExtents {
        let mut data = crate::integrity::zone_extents(&self.media, &self.geo, z);
        for page in self
            .fault_ctx()
            .into_iter()
            .flat_map(|c| c.poisoned_pages())
        {
            data.add(page, crate::geometry::PAGE);
        }
        data
    }

    /// The media-error handler's view of this pool, if it is registered with the handler.
    pub(crate) fn fault_ctx(&self) -> Option<&crate::integrity::handler::FaultCtx> {
        if self.fault_slot.load(Ordering::Acquire) == usize::MAX {
            return None;
        }
        self.fault.get().map(|b| &**b)
    }

    /// Offset of lane `i`, copy `c`.
    pub(crate) fn lane_off(&self, i: usize, c: u64) -> u64 {
        self.geo.lane_offset(i as u64, c)
    }

    /// The lane copies commits write their records to: both (`Config::replicate_lanes`),
    /// or copy A alone. Retire marks always go to both: recovery takes the newer of the
    /// two, so a damaged mark in A must not fall back to an older one in B (which would
    /// replay A's retired record over newer data).
    pub(crate) fn lane_copies(&self) -> std::ops::Range<u64> {
        0..self.lane_copies
    }

    /// Flushes the retire-mark lines of both copies of lane `i`.
    pub(crate) fn flush_retire(&self, i: usize) {
        for c in 0..2 {
            self.media
                .flush(self.lane_off(i, c) + RETIRED_OFFSET as u64, 16);
        }
    }

    /// Flushes the retire marks that may not be durable yet of the records that touched a
    /// chunk in `mine` (the retire ordering of `lane.rs`), then fences (commits call it
    /// through `fence_with_retires`, which settles deferred records too). A logged commit
    /// passes its own lane as `skip`: its new seal replaces that lane's previous record, so
    /// the old retire mark no longer matters once this fence completes (and before it, this
    /// transaction is not committed); after the fence the lane's marks count as durable, so
    /// that later commits do not write back a line its next settle rewrites (`clwb` evicts
    /// the line it writes back on this machine: the rewrite would wait for a read of it from
    /// memory). A direct commit writes no record, so it skips nothing.
    pub(crate) fn fence_with_retire_marks(&self, skip: Option<usize>, mine: &Touched) {
        self.fence_with_retire_marks_near(skip, mine, self.lanes.meeting(mine));
    }

    /// `fence_with_retire_marks` given `near`, the lanes `Lanes::meeting(mine)` returned
    /// after the caller's commit began.
    pub(crate) fn fence_with_retire_marks_near(
        &self,
        skip: Option<usize>,
        mine: &Touched,
        near: LaneMask,
    ) {
        let eng = self;
        // Lanes are at most 64: a bit mask says which were flushed; their generations are
        // re-read from `gens` (not zero-initialised: only entries named by `mask` are read).
        let mut mask = 0u64;
        let mut gens = [std::mem::MaybeUninit::<u64>::uninit(); 64];
        let mut sealing = None;
        eng.lanes.for_pending_retires(mine, near, |i, g| {
            if Some(i) == skip {
                sealing = Some((i, g));
                return;
            }
            eng.flush_retire(i);
            gens[i].write(g);
            mask |= 1 << i;
        });
        eng.media.fence();
        // Counted durable only if no write-back failed (then they all stay pending). The
        // skipped lane's marks retire a record its seal replaced, durable now.
        if eng.media.check().is_err() {
            return;
        }
        if let Some((i, g)) = sealing {
            eng.lanes.mark_flushed(i, g);
        }
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            // SAFETY: bit i of `mask` is set only right after `gens[i]` was written.
            eng.lanes.mark_flushed(i, unsafe { gens[i].assume_init() });
        }
    }
}

impl Drop for Engine {
    /// Leaves the live engines (`deferred::closed`). Unregisters from the media-error
    /// handler before the media and parity it points at go away, and gives back access to
    /// pages still lost to emulated media errors (rebuilt from parity where their column
    /// allows, zeroed otherwise: `FaultCtx::unprotect_all`), so that the
    /// memory can be unmapped or reused.
    fn drop(&mut self) {
        super::deferred::closed(self.id);
        let slot = self.fault_slot.load(Ordering::Acquire);
        if slot != usize::MAX {
            crate::integrity::handler::unregister(slot);
        }
        if let Some(ctx) = self.fault.get() {
            ctx.unprotect_all(&self.media);
        }
    }
}
