//! Redo lanes: one per concurrent transaction, each kept as two copies. A transaction owns
//! its lane from begin to retire.
//!
//! Invariant (retire ordering): once a commit's log fence completes, the retire mark of every
//! record applied before that commit began *that touched a chunk this commit touches* is
//! durable (or, for its own lane, the record is replaced by the new seal). A deferred record
//! (`deferred.rs`) counts as applied once it is settled; until then only its own thread's
//! commits pass it unsettled (their fence settles it; a direct commit over its chunks
//! settles it first), and its retire mark is durable before theirs. A replay can only
//! clobber bytes a later commit wrote if the two wrote the same bytes, hence the same chunk
//! (a block reused for another object, even of another size class, is still in its chunk).
//! Each lane publishes the set of chunks its latest applied record touched (`Touched`, a
//! 256-bit superset) before its retire generation moves; every commit flushes, under its own
//! log fence, the retire lines of the other lanes whose latest mark may not be durable
//! (`retire_gen > flushed_gen`) and whose set meets its own; a direct commit also checks its
//! own lane's. A session starts with no mark pending: recovery made every mark it found
//! durable. Before that fence completes an older record
//! may still replay: recovery replays in sequence order, so the newer record's logged bytes
//! win, and it checks a record's unlogged new objects only after the older records ran, so a
//! newer record whose object an older replay overwrote is discarded (its fence never
//! completed, or the older mark would have been durable).
//!
//! Finding those lanes reads no other lane's state unless they may share a chunk: a
//! directory keeps, for each of the 256 chunk bits, the lanes (a bit each) whose published
//! retire set, and those whose published deferred set, hold that bit. The lane's holder
//! sets a set's bits before publishing the set and clears the bits the set lost only after
//! the new set is published. So every set published before a commit began (the ones the
//! invariant above is about: published, then ordered before the commit by the locks of the
//! bytes both touch) has its bits in the rows when the commit reads them, or was replaced
//! by a newer set of its lane, whose record's seal made the old record unreplayable. A lane
//! publishing while the rows are read may be missed: its record was not ordered before the
//! commit, so the two wrote different bytes. Scanners read only their own bits' rows:
//! threads working in different chunks never read each other's lane state (each of those
//! reads was a cache miss on every commit).

use super::buffer::Buffer;
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
    pub held: super::held::HeldStripes,
    pub meta: MetaOps,
    pub undo: Vec<HeapUndo>,
    pub frees: Vec<PendingFree>,
    /// How many of the transaction's buffers keep each extension link (`Buffer::link`),
    /// so that `Tx::__alloc_linked` asks whether a link is owned in one lookup instead of
    /// a pass over every buffer (which made a transaction allocating k extendible
    /// objects quadratic in k).
    pub links: SmallMap<u64, u32>,
    /// The allocations of a transaction's `InPlaceReads` (lent to it while it runs).
    pub reads: Option<Box<super::handle::LiveReads>>,
    /// Objects found live in place, by type (`vetted`).
    pub vetted: super::vetted::Vetted,
}

impl Scratch {
    /// Whether the transaction holds a buffer of the object at `off` (an entry of
    /// `usize::MAX` is a forgotten one: see `Tx::open`).
    pub(crate) fn buffers(&self, off: u64) -> bool {
        matches!(self.index.get(&off), Some(&i) if i != usize::MAX)
    }
}

/// Reusable buffers of a logged commit: its record and its apply step.
#[derive(Default)]
pub(crate) struct RecordScratch {
    /// The record under construction (DRAM), one lane copy long.
    pub stage: Vec<u64>,
    /// The ranges the apply step flushes, whole lines (`commit::merge_lines`); before
    /// the fence, the new objects' write-backs (`write_new_objects`). A deferred record's
    /// write-backs stay here until the lane is settled (`deferred.rs`), which happens
    /// before its next transaction begins.
    pub flushes: Vec<(u64, u64)>,
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
    /// The dirty-zone bits this lane has written to its lane copies since the pool was
    /// opened (durable once the fence that follows them completed; see
    /// `Tx::mark_dirty_zones`).
    pub dirty: super::record::DirtyZones,
    /// A logged commit's record and apply-step buffers.
    pub record: RecordScratch,
    /// Headers of the new objects of a commit.
    pub hdrs: Vec<[u8; 16]>,

    /// Reusable scratch: metadata (offset, value) pairs of a commit.
    pub meta_vals: Vec<(u64, u64)>,
    /// Reusable scratch: metadata lock stripes held by a commit.
    pub meta_held: Vec<u32>,
    /// This lane's latest record while its apply step's write-backs are not yet known to
    /// be durable (`deferred.rs`); their ranges are `record.flushes`.
    pub deferred: Option<super::deferred::Deferred>,
}

// SAFETY: the only non-Send parts are the buffer pointers in `scratch.bufs`, `items` and
// `news`, which hold no live pointer whenever the lane is not held (they are cleared or only
// read after being refilled by the next holder); while held, the pointers are used only by the transaction
// (one thread) that holds the lane's mutex.
unsafe impl Send for LaneState {}

/// A superset of the chunks a commit touches: one bit per chunk id, hashed into 256 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Touched(pub [u64; 4]);

impl Touched {
    /// Every chunk: for a range too long to list.
    pub(crate) const ALL: Touched = Touched([u64::MAX; 4]);

    /// Adds the chunks of `[off, off + len)`, with chunks of `1 << chunk_shift` bytes.
    pub(crate) fn add(&mut self, off: u64, len: u64, chunk_shift: u32) {
        let first = off >> chunk_shift;
        let last = (off + len.max(1) - 1) >> chunk_shift;
        if last - first >= 256 {
            *self = Touched::ALL;
            return;
        }
        for c in first..=last {
            let bit = (c.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize;
            self.0[bit / 64] |= 1 << (bit % 64);
        }
    }

    /// Whether the two sets may share a chunk.
    pub(crate) fn meets(&self, other: &Touched) -> bool {
        (0..4).any(|i| self.0[i] & other.0[i] != 0)
    }

    /// The set published in `slots` (read `Relaxed`: after the word that orders it).
    fn load(slots: &[AtomicU64; 4]) -> Touched {
        Touched(std::array::from_fn(|w| slots[w].load(Ordering::Relaxed)))
    }

    /// The bits of this set that `other` lacks.
    fn minus(&self, other: &Touched) -> Touched {
        Touched(std::array::from_fn(|i| self.0[i] & !other.0[i]))
    }

    /// Calls `f` with each bit of the set.
    #[inline]
    fn for_each(&self, mut f: impl FnMut(usize)) {
        self.each_while(|bit| {
            f(bit);
            true
        });
    }

    /// Calls `f` with each bit of the set, in order, until it returns false; whether it
    /// saw them all.
    #[inline]
    fn each_while(&self, mut f: impl FnMut(usize) -> bool) -> bool {
        for (i, &word) in self.0.iter().enumerate() {
            let mut w = word;
            while w != 0 {
                if !f(i * 64 + w.trailing_zeros() as usize) {
                    return false;
                }
                w &= w - 1;
            }
        }
        true
    }
}

/// Which of a lane's published sets a directory entry is about.
#[derive(Clone, Copy)]
enum Set {
    /// The chunks of its latest retired record.
    Retired = 0,
    /// The chunks of its deferred record.
    Deferred = 1,
}

/// One chunk bit's row of the directory (module docs): for each kind of set, the lanes
/// (a bit each) whose published set holds the chunk bit. A row has a cache line of its
/// own: threads writing in different chunks write different lines.
#[repr(align(64))]
struct DirRow([AtomicU64; 2]);

#[repr(align(128))]
struct Gen {
    retire: AtomicU64,
    flushed: AtomicU64,
    /// The chunks the record behind `retire` touched (written before `retire` moves).
    touched: [AtomicU64; 4],
    /// The thread token of the owner of the lane's deferred record, 0 if none
    /// (`deferred.rs`).
    owner: AtomicU64,
    /// The chunks the deferred record touched (written before `owner`).
    deferred: [AtomicU64; 4],
}

/// One lane.
pub(crate) struct Lane {
    pub idx: usize,
    pub state: Mutex<LaneState>,
    gen: Gen,
    pub counters: LaneCounters,
}

impl Lane {
    /// Whether the lane holds a deferred record (a hint: read without its lock).
    #[inline]
    pub(crate) fn pending(&self) -> bool {
        self.deferred_owner() != 0
    }

    /// The owner of the lane's deferred record (0: none). It may be stale by the time the
    /// caller looks: `deferred.rs` re-checks under the lock.
    #[inline]
    pub(crate) fn deferred_owner(&self) -> u64 {
        self.gen.owner.load(Ordering::Acquire)
    }

    /// The chunks the lane's deferred record touched, read after `deferred_owner` returned
    /// its owner (they belong to that record or to a later one of the lane).
    #[inline]
    pub(crate) fn deferred_touched(&self) -> Touched {
        Touched::load(&self.gen.deferred)
    }
}

/// A set of lanes, a bit each (`Lanes::meeting`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaneMask(u64);

/// All lanes of a pool.
pub(crate) struct Lanes {
    lanes: Vec<Lane>,
    /// For each chunk bit, which lanes' published sets hold it (module docs).
    dir: Box<[DirRow]>,
}

static NEXT_HINT: AtomicUsize = AtomicUsize::new(0);

/// How long a thread waiting for a lane stays parked on one busy lane before it looks at
/// the others again and parks on the next (`Lanes::wait_for_any`). Longer than the
/// lock's fairness interval (parking_lot hands a mutex to a parked thread at least every
/// millisecond or so): parked for less, a waiter would keep losing each lane to the
/// thread that just released it and starve.
const LANE_WAIT: std::time::Duration = std::time::Duration::from_millis(3);
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
                        touched: Default::default(),
                        owner: AtomicU64::new(0),
                        deferred: Default::default(),
                    },
                    counters: LaneCounters::default(),
                })
                .collect(),
            dir: (0..256)
                .map(|_| DirRow([AtomicU64::new(0), AtomicU64::new(0)]))
                .collect(),
        }
    }

    /// Enters lane `i` in the `set` rows of the bits of `bits`. Called by the lane's holder
    /// right after a fence (no write-back pending for the locked instruction to wait for).
    #[inline]
    fn dir_set(&self, i: usize, bits: &Touched, set: Set) {
        bits.for_each(|k| {
            self.dir[k].0[set as usize].fetch_or(1 << i, Ordering::Release);
        });
    }

    /// Takes lane `i` out of the `set` rows of the bits of `bits` (as `dir_set`). Release:
    /// a scanner that reads the cleared bit sees the set published before.
    #[inline]
    fn dir_clear(&self, i: usize, bits: &Touched, set: Set) {
        bits.for_each(|k| {
            self.dir[k].0[set as usize].fetch_and(!(1 << i), Ordering::Release);
        });
    }

    /// The lanes (a bit each) whose published retire or deferred set may hold a chunk of
    /// `mine`: among them, every lane whose set published before the caller's commit began
    /// meets `mine` (module docs). Both kinds of set in one mask: see `fence_with_retires`.
    #[inline]
    pub(crate) fn meeting(&self, mine: &Touched) -> LaneMask {
        // Its bits first, at most 16: past that (a large commit), reading its rows would
        // cost more than reading every lane. One walk lists and counts them (no
        // `count_ones`: without the popcnt instruction it is a dozen per word).
        let mut rows = [0u8; 16];
        let mut n = 0;
        let few = mine.each_while(|bit| {
            if n == rows.len() {
                return false;
            }
            rows[n] = bit as u8; // a set has 256 bits
            n += 1;
            true
        });
        if !few {
            return LaneMask(u64::MAX >> (64 - self.lanes.len()));
        }
        let mut mask = 0u64;
        for &k in &rows[..n] {
            let row = &self.dir[k as usize].0;
            mask |= row[0].load(Ordering::Acquire) | row[1].load(Ordering::Acquire);
        }
        LaneMask(mask)
    }

    /// The lanes of `mask`.
    pub(crate) fn of(&self, mask: LaneMask) -> impl Iterator<Item = &Lane> {
        let mut mask = mask.0;
        std::iter::from_fn(move || {
            (mask != 0).then(|| {
                let i = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                &self.lanes[i]
            })
        })
    }

    /// Publishes that `lane` holds a deferred record of thread `owner` that touched
    /// `touched`, or (`owner` 0) no longer holds one. Call it holding the lane's lock.
    ///
    /// The set stays published (and in the directory) after the record is settled: a
    /// scanner reads the owner first and skips a lane without one. So a lane whose records
    /// keep to the same chunks changes no directory row: no locked instruction per commit.
    pub(crate) fn publish_deferred(&self, lane: &Lane, owner: u64, touched: &Touched) {
        if owner == 0 {
            // A plain store (see below).
            lane.gen.owner.store(0, Ordering::Release);
            return;
        }
        let g = &lane.gen;
        self.republish(lane.idx, Set::Deferred, &g.deferred, touched, || {
            // Release: a reader that sees the owner sees the set. A plain store on x86, not
            // a locked instruction (which would wait for pending write-backs).
            g.owner.store(owner, Ordering::Release);
        });
    }

    /// Publishes `new` as lane `i`'s `set` (stored in `slots`), `publish` making it count,
    /// with the directory entered before and the bits it lost removed after (module docs).
    /// Call it holding the lane's lock.
    fn republish(
        &self,
        i: usize,
        set: Set,
        slots: &[AtomicU64; 4],
        new: &Touched,
        publish: impl FnOnce(),
    ) {
        let old = Touched::load(slots);
        if old == *new {
            // The rows hold the set already (a lane whose records keep to the same chunks):
            // nothing to enter or remove, and the slots hold its bits.
            publish();
            return;
        }
        self.dir_set(i, &new.minus(&old), set);
        for (slot, &bits) in slots.iter().zip(&new.0) {
            slot.store(bits, Ordering::Relaxed);
        }
        publish();
        self.dir_clear(i, &old.minus(new), set);
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Lane> {
        self.lanes.iter()
    }

    /// Lane `i`.
    pub(crate) fn get(&self, i: usize) -> &Lane {
        &self.lanes[i]
    }

    /// Takes a lane: this thread's home lane if free and not pending; else another free
    /// one that is not pending, searched from half-way round (where other threads' homes
    /// are least likely), which becomes home only if home was taken by another thread;
    /// else any free one; else waits for whichever lane comes free first (`wait_for_any`)
    /// — or, if `mine` says this thread holds one itself (a `Detached` handle, released
    /// only when this thread gets on), for one it does not hold. `None` if this thread
    /// holds every lane, or if it holds one and no other was free within `wait`.
    ///
    /// A pending lane (one whose deferred record is not settled, `deferred.rs`) costs its
    /// taker a fence: after a deferred commit, a thread's next transaction takes another
    /// lane, whose fence settles home for free, and the one after is home again.
    #[inline]
    pub(crate) fn acquire(
        &self,
        mine: impl Fn(usize) -> bool,
        wait: std::time::Duration,
    ) -> Option<(&Lane, MutexGuard<'_, LaneState>)> {
        let n = self.lanes.len();
        let hint = HINT.with(|h| h.get()) % n;
        let home = &self.lanes[hint];
        let home_pending = home.pending();
        if !home_pending {
            if let Some(g) = home.state.try_lock() {
                return Some((home, g));
            }
        }
        let from = if home_pending { hint + n / 2 } else { hint };
        for pending_too in [false, true] {
            for i in 0..n {
                let l = &self.lanes[(from + i) % n];
                if !pending_too && l.pending() {
                    continue;
                }
                if let Some(g) = l.state.try_lock() {
                    if !home_pending && l.idx != hint {
                        HINT.with(|h| h.set(l.idx));
                    }
                    return Some((l, g));
                }
            }
        }
        let l = (0..n)
            .map(|i| &self.lanes[(hint + i) % n])
            .find(|l| !mine(l.idx))?;
        if !(0..n).any(&mine) {
            return Some(self.wait_for_any(l.idx));
        }
        // This thread holds lanes itself, released only when it gets on: so may the
        // threads holding the others, waiting for this thread's (two `Detached` holders
        // starting transactions). The wait is bounded: `None` once `wait` has passed.
        let deadline = std::time::Instant::now() + wait;
        loop {
            for l in &self.lanes {
                if !mine(l.idx) {
                    if let Some(g) = l.state.try_lock() {
                        return Some((l, g));
                    }
                }
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }

    /// Waits for whichever lane comes free first, parked on one lane at a time (from
    /// `first` round) for at most `LANE_WAIT`, looking at every lane in between.
    /// Parked on one lane for good, a thread waited out the whole of a long transaction
    /// holding that lane while the other lanes served everyone else (with 8 threads on
    /// 4 lanes and one 300 ms transaction, half the threads waited 300 ms).
    fn wait_for_any(&self, first: usize) -> (&Lane, MutexGuard<'_, LaneState>) {
        let n = self.lanes.len();
        let mut at = first;
        loop {
            let l = &self.lanes[at % n];
            if let Some(g) = l.state.try_lock_for(LANE_WAIT) {
                return (l, g);
            }
            for l in &self.lanes {
                if let Some(g) = l.state.try_lock() {
                    return (l, g);
                }
            }
            at += 1;
        }
    }

    /// Calls `f(lane, generation)` for each lane whose retire mark may not be durable and
    /// whose latest record touched a chunk in `mine`.
    ///
    /// `near` is `self.meeting(mine)`, taken after the caller's commit began.
    pub(crate) fn for_pending_retires(
        &self,
        mine: &Touched,
        near: LaneMask,
        mut f: impl FnMut(usize, u64),
    ) {
        for l in self.of(near) {
            // Generation first: the set read after it belongs to that record or to a later
            // one of the same lane, whose seal has then replaced it (see the module docs).
            let r = l.gen.retire.load(Ordering::Acquire);
            if r > l.gen.flushed.load(Ordering::Relaxed) {
                let theirs = Touched::load(&l.gen.touched);
                if theirs.meets(mine) {
                    f(l.idx, r);
                }
            }
        }
    }

    /// Records that lane `i`'s retire marks up to generation `g` are durable.
    pub(crate) fn mark_flushed(&self, i: usize, g: u64) {
        self.lanes[i].gen.flushed.fetch_max(g, Ordering::AcqRel);
    }

    /// Records that lane `i` wrote a new retire mark (not yet flushed) for a record that
    /// touched `touched`. Call it holding lane `i`'s lock.
    pub(crate) fn retired(&self, i: usize, touched: &Touched) {
        let g = &self.lanes[i].gen;
        self.republish(i, Set::Retired, &g.touched, touched, || {
            // Release: a reader that sees the new generation sees the set.
            g.retire.fetch_add(1, Ordering::AcqRel);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{LaneMask, Lanes, Touched};

    fn chunks(cs: &[u64]) -> Touched {
        let mut t = Touched::default();
        for &c in cs {
            t.add(c << 18, 1, 18);
        }
        t
    }

    fn lanes_of(m: LaneMask) -> Vec<usize> {
        (0..64).filter(|i| m.0 & (1 << i) != 0).collect()
    }

    #[test]
    fn the_directory_names_the_lanes_whose_published_sets_meet_a_commit() {
        let lanes = Lanes::new(8);
        let (a, b, c) = (chunks(&[3]), chunks(&[70]), chunks(&[200]));
        assert!(
            !a.meets(&b) && !a.meets(&c) && !b.meets(&c),
            "distinct bits"
        );
        assert!(lanes_of(lanes.meeting(&a)).is_empty());
        lanes.retired(2, &a);
        lanes.retired(5, &a);
        assert_eq!(lanes_of(lanes.meeting(&a)), [2, 5]);
        assert!(lanes_of(lanes.meeting(&b)).is_empty());
        // A lane's next retired set replaces its last: the bits it lost leave the rows.
        lanes.retired(2, &b);
        assert_eq!(lanes_of(lanes.meeting(&a)), [5]);
        assert_eq!(lanes_of(lanes.meeting(&b)), [2]);
        // A deferred set enters its rows; it stays there once settled (the owner says
        // whether it counts), until the lane's next deferred set replaces it.
        let lane = lanes.get(7);
        lanes.publish_deferred(lane, 42, &c);
        assert_eq!(lanes_of(lanes.meeting(&c)), [7]);
        lanes.publish_deferred(lane, 0, &Touched::default());
        assert_eq!(lane.deferred_owner(), 0);
        assert_eq!(lanes_of(lanes.meeting(&c)), [7]);
        lanes.publish_deferred(lane, 42, &a);
        assert!(lanes_of(lanes.meeting(&c)).is_empty());
        assert_eq!(lanes_of(lanes.meeting(&a)), [5, 7]);
        // A commit of many chunks reads no rows: every lane.
        let big = chunks(&(0..40).collect::<Vec<_>>());
        assert_eq!(lanes_of(lanes.meeting(&big)), (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn ranges_meet_when_they_share_a_chunk() {
        let shift = 18;
        let chunk = 1 << shift;
        let mut a = Touched::default();
        a.add(3 * chunk + 100, 8, shift);
        let mut b = Touched::default();
        b.add(3 * chunk + 5000, 4096, shift);
        assert!(a.meets(&b), "same chunk");
        let mut d = Touched::default();
        d.add(3 * chunk - 1, 2, shift); // crosses from chunk 2 into chunk 3
        assert!(d.meets(&a));
        assert!(Touched::ALL.meets(&a));
        let mut big = Touched::default();
        big.add(0, 1000 * chunk, shift);
        assert_eq!(big, Touched::ALL);
        assert!(!Touched::default().meets(&a));
        // Disjoint chunks meet only through a hash collision: most of 64 do not.
        let apart = (10..74u64)
            .filter(|c| {
                let mut x = Touched::default();
                x.add(c * chunk, 1, shift);
                !x.meets(&a)
            })
            .count();
        assert!(apart >= 56, "{apart} of 64 distinct chunks kept apart");
    }
}
