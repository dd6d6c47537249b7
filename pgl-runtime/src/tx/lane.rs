//! Redo lanes: one per concurrent transaction, each kept as two copies. A transaction owns
//! its lane from begin to retire.
//!
//! Invariant (retire ordering): once a commit's log fence completes, the retire mark of every
//! record applied before that commit began is durable (or, for its own lane, the record is
//! replaced by the new seal). Every commit flushes, under its own log fence, the retire lines
//! of all other lanes whose latest mark may not be durable (`retire_gen > flushed_gen`); a
//! direct commit also flushes its own lane's. Before that fence completes an older record
//! may still replay: recovery replays in sequence order, so the newer record's logged bytes
//! win, and it checks a record's unlogged new objects only after the older records ran, so a
//! newer record whose object an older replay overwrote is discarded (its fence never
//! completed, or the older mark would have been durable).

use super::buffer::Buffer;
use super::locks::Held;
use crate::heap::{Arena, HeapUndo, MetaOps, PendingFree};
use crate::smallmap::SmallMap;
use crate::stats::LaneCounters;
use parking_lot::{Mutex, MutexGuard};
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Containers a transaction uses, kept by the lane between transactions so their
/// allocations are reused. Always empty while no transaction holds the lane.
#[derive(Default)]
pub(crate) struct Scratch {
    pub bufs: Vec<NonNull<Buffer>>,
    pub index: SmallMap<u64, usize>,
    pub held: SmallMap<u32, Held>,
    pub meta: MetaOps,
    pub undo: Vec<HeapUndo>,
    pub frees: Vec<PendingFree>,
}

/// Per-lane state owned by the transaction that holds the lane.
#[derive(Default)]
pub(crate) struct LaneState {
    /// The runs this lane allocates from.
    pub arena: Arena,
    /// Reusable transaction containers.
    pub scratch: Scratch,
    /// Spare micro-buffers (boxed: a transaction leaks each into a stable pointer).
    #[allow(clippy::vec_box)]
    pub spare: Vec<Box<Buffer>>,
    /// Reusable commit scratch: ranges to log, checksum bytes, new objects.
    pub items: Vec<super::commit::Item>,
    pub sums: Vec<[u8; 4]>,
    pub news: Vec<NonNull<Buffer>>,
    /// The record under construction (DRAM), one lane copy long.
    pub stage: Vec<u64>,
    /// Headers of the new objects of a commit.
    pub hdrs: Vec<[u8; 16]>,

    /// Reusable scratch: metadata (offset, value) pairs of a commit.
    pub meta_vals: Vec<(u64, u64)>,
    /// Reusable scratch: metadata lock stripes held by a commit.
    pub meta_held: Vec<u32>,
}

// SAFETY: the only non-Send parts are the buffer pointers in `scratch.bufs`, `items` and
// `news`, which hold no live pointer whenever the lane is not held (they are cleared or only
// read after being refilled by the next holder); while held, the pointers are used only by the transaction
// (one thread) that holds the lane's mutex.
unsafe impl Send for LaneState {}

#[repr(align(128))]
struct Gen {
    retire: AtomicU64,
    flushed: AtomicU64,
}

/// One lane.
pub(crate) struct Lane {
    pub idx: usize,
    pub state: Mutex<LaneState>,
    gen: Gen,
    pub counters: LaneCounters,
}

/// All lanes of a pool.
pub(crate) struct Lanes {
    lanes: Vec<Lane>,
}

static NEXT_HINT: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static HINT: Cell<usize> = Cell::new(NEXT_HINT.fetch_add(1, Ordering::Relaxed));
}

impl Lanes {
    pub(crate) fn new(n: usize) -> Self {
        Lanes {
            lanes: (0..n)
                .map(|idx| Lane {
                    idx,
                    state: Mutex::new(LaneState::default()),
                    gen: Gen {
                        retire: AtomicU64::new(0),
                        flushed: AtomicU64::new(0),
                    },
                    counters: LaneCounters::default(),
                })
                .collect(),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Lane> {
        self.lanes.iter()
    }

    /// Takes a lane: this thread's usual one if free, else any free one, else waits for the
    /// usual one.
    pub(crate) fn acquire(&self) -> (&Lane, MutexGuard<'_, LaneState>) {
        let n = self.lanes.len();
        let hint = HINT.with(|h| h.get()) % n;
        for i in 0..n {
            let l = &self.lanes[(hint + i) % n];
            if let Some(g) = l.state.try_lock() {
                if i != 0 {
                    HINT.with(|h| h.set(l.idx));
                }
                return (l, g);
            }
        }
        let l = &self.lanes[hint];
        (l, l.state.lock())
    }

    /// Calls `f(lane, generation)` for each lane whose retire mark may not be durable.
    pub(crate) fn for_pending_retires(&self, mut f: impl FnMut(usize, u64)) {
        for l in &self.lanes {
            let r = l.gen.retire.load(Ordering::Acquire);
            if r > l.gen.flushed.load(Ordering::Relaxed) {
                f(l.idx, r);
            }
        }
    }

    /// Records that lane `i`'s retire marks up to generation `g` are durable.
    pub(crate) fn mark_flushed(&self, i: usize, g: u64) {
        self.lanes[i].gen.flushed.fetch_max(g, Ordering::AcqRel);
    }

    /// Records that lane `i` wrote a new retire mark (not yet flushed).
    pub(crate) fn retired(&self, i: usize) {
        self.lanes[i].gen.retire.fetch_add(1, Ordering::AcqRel);
    }
}
