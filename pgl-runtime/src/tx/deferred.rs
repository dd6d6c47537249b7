//! Deferred apply: a commit that only overwrites objects (no metadata word, no new object,
//! no zeroed range) applies its record in place but issues none of the write-backs: its
//! thread issues them just before its next fence, with that fence's own. The commit point
//! is unchanged (its record's fence); what goes is the apply step's ordering point. On this
//! machine the wait for write-backs falls on the first locked instruction after they are
//! issued (a lock, a counter), so write-backs left in flight between two commits cost as
//! much as a fence: they are kept *owed* (a list per thread) instead, not issued.
//!
//! While its write-backs are not known to be durable the record is *deferred*: the lane is
//! *pending* (`Lane::pending`), its retire mark is not written, and its record must stay
//! intact, since a crash replays it. It is *settled* — write-backs durable, then its retire
//! mark written, and flushed before the settler's next fence — by exactly one of:
//!
//! 1. its owner, right after its next fence (`fence_with_retires`), which issued the owed
//!    write-backs first: free. (An exiting thread, whose list is gone, defers nothing.)
//! 2. any other thread's commit whose chunks meet the record's, before that commit's own
//!    fence (`settle`: the write-backs issued from the lane's own list, then one fence of
//!    its own), so that the retire ordering of `lane.rs` holds for it as if the record had
//!    been retired at its commit; likewise the owner's direct commits (a bitmap word, no
//!    record) whose chunks meet it, and any of its commits if it owes none of the
//!    record's write-backs.
//! 3. whoever takes the lane (`Tx::begin`, `freeze`), before writing anything to it, and
//!    the pool's close (`settle_all`).
//!
//! Invariant: a deferred record is replayed, or retired only once its write-backs are
//! durable. Replaying it after a crash is harmless whatever came after: a later record of
//! its owner replays after it (sequence order), and none of the owner's records created an
//! object over bytes it wrote (those bytes were a live object's when it committed, and
//! only another thread's commit, which settled it first, or the owner's own commit, which
//! comes after its next fence, can free them: a free's commit counts the freed object's
//! chunks as touched, though it writes only their metadata). A later record's retirement (its retire
//! mark, or its record overwritten) never becomes durable before the deferred record's
//! mark: the owner issues that mark's write-back before its next fence, which comes before
//! it retires anything later, and a lane it leaves pending is settled by whoever takes it,
//! who first flushes the unflushed marks its record's chunks meet
//! (`fence_with_retire_marks`), as does every other settler.

use super::engine::Engine;
use super::lane::{Lane, LaneState, Touched};
use super::record::{self, RETIRED_OFFSET};
use crate::stats::Counter;
use crate::thread_token::thread_token;
use std::cell::RefCell;

/// A lane's deferred record (its write-back ranges are the lane's `record.flushes`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deferred {
    /// Its sequence number (the retire mark to write).
    pub seq: u64,
    /// The chunks it wrote.
    pub touched: Touched,
    /// The thread that committed it (`thread_token`).
    pub owner: u64,
}

thread_local! {
    /// Write-backs this thread owes, issued before its next fence on their pool.
    static OWED: RefCell<Vec<Owed>> = const { RefCell::new(Vec::new()) };
}

/// A byte range this thread must write back before its next fence on pool `eng`: part of
/// its deferred record `seq` on lane `lane`, or (`lane == NO_LANE`) a retire mark.
#[derive(Clone, Copy, Debug)]
struct Owed {
    eng: u64,
    lane: usize,
    seq: u64,
    range: (u64, u64),
}

const NO_LANE: usize = usize::MAX;

/// Past this many entries, a thread's retire-mark entries for other pools than the one it
/// commits to are dropped (their lanes' generations make other commits flush those marks
/// where it matters; the owner's own later commits still flush them, see
/// `fence_with_retires`). A deferred record's entries are never dropped: at most one
/// record per pool is owed at a time.
const OWED_MAX: usize = 1024;

/// Adds `ranges` to this thread's owed write-backs; false if the list is gone (the thread
/// is exiting, its thread-locals being destroyed), when nothing was added.
fn owe(eng: u64, lane: usize, seq: u64, ranges: impl Iterator<Item = (u64, u64)>) -> bool {
    OWED.try_with(|o| {
        let mut o = o.borrow_mut();
        if o.len() > OWED_MAX {
            o.retain(|e| e.eng == eng || e.lane != NO_LANE);
        }
        o.extend(ranges.map(|range| Owed {
            eng,
            lane,
            seq,
            range,
        }));
    })
    .is_ok()
}

/// The deferred record this thread owes write-backs of on pool `eng` (lane, seq).
fn owed_record(eng: u64) -> Option<(usize, u64)> {
    OWED.try_with(|o| {
        o.borrow()
            .iter()
            .find(|e| e.eng == eng && e.lane != NO_LANE)
            .map(|e| (e.lane, e.seq))
    })
    .ok()
    .flatten()
}

/// What kind of commit fences (see the module docs, cases 1 and 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FenceFor {
    /// A logged commit on lane `.0`: its record orders after every deferred one.
    Record(usize),
    /// A commit that writes no record.
    Direct,
}

impl Engine {
    /// Makes `lane` (held by the caller; `slot` is its state's `deferred`) a deferred
    /// record's: `seq`, touching `touched`, whose write-backs `ranges` (its state's
    /// `record.flushes`, which other settlers read) this thread now owes. Call it after
    /// the apply step's stores. False if this thread can owe nothing any more (it is
    /// exiting): the caller applies the record the usual way instead.
    pub(crate) fn defer(
        &self,
        lane: &Lane,
        slot: &mut Option<Deferred>,
        seq: u64,
        touched: &Touched,
        ranges: &[(u64, u64)],
    ) -> bool {
        let owner = thread_token();
        if owner == 0 || !owe(self.id, lane.idx, seq, ranges.iter().copied()) {
            return false;
        }
        *slot = Some(Deferred {
            seq,
            touched: *touched,
            owner,
        });
        self.lanes.publish_deferred(lane, owner, touched);
        true
    }

    /// Settles `lane`'s deferred record, if any (`st` is its state, held by the caller):
    /// its write-backs issued again and fenced together with the unflushed retire marks
    /// its chunks meet, then its own retire mark written (and owed: written back before this
    /// thread's next fence). After a failed write-back the record is left unretired, so
    /// that reopening replays it.
    pub(crate) fn settle(&self, lane: &Lane, st: &mut LaneState) {
        let Some(d) = st.deferred.take() else {
            return;
        };
        for &(a, z) in &st.record.flushes {
            self.media.flush(a, z - a);
        }
        self.fence_with_retire_marks(Some(lane.idx), &d.touched);
        lane.counters.add(Counter::Fences, 1);
        if self.media.check().is_ok() {
            self.retire(lane, &d);
            self.owe_retire(lane.idx);
        }
        self.lanes.publish_deferred(lane, 0, &Touched::default());
    }

    /// Writes the retire mark of `d`, `lane`'s deferred record, whose write-backs are
    /// durable, and publishes it as unflushed (`Lanes::retired`).
    fn retire(&self, lane: &Lane, d: &Deferred) {
        for c in 0..2 {
            let off = self.lane_off(lane.idx, c) + RETIRED_OFFSET as u64;
            // SAFETY: the retired word of a lane whose lock the caller holds.
            unsafe { self.media.write(off, &record::retire_mark(d.seq)) };
        }
        self.lanes.retired(lane.idx, &d.touched);
    }

    /// Owes the write-back of `lane`'s retire marks (issued before this thread's next
    /// fence on this pool).
    fn owe_retire(&self, lane: usize) {
        let marks = (0..2).map(|c| {
            let off = self.lane_off(lane, c) + RETIRED_OFFSET as u64;
            (off, off + 16)
        });
        if !owe(self.id, NO_LANE, 0, marks) {
            // Exiting: written back now instead.
            self.flush_retire(lane);
        }
    }

    /// Issues the write-backs this thread owes on this pool; returns the deferred record
    /// they complete, if any (lane, seq).
    pub(crate) fn flush_owed(&self) -> Option<(usize, u64)> {
        // An exiting thread owes nothing: it could not add to the list (`owe`).
        OWED.try_with(|o| {
            let mut o = o.borrow_mut();
            let mut record = None;
            if o.is_empty() {
                return None;
            }
            o.retain(|e| {
                if e.eng != self.id {
                    return true;
                }
                self.media.flush(e.range.0, e.range.1 - e.range.0);
                if e.lane != NO_LANE {
                    record = Some((e.lane, e.seq));
                }
                false
            });
            record
        })
        .ok()
        .flatten()
    }

    /// Settles every lane (at close: no transaction runs).
    pub(crate) fn settle_all(&self) {
        for lane in self.lanes.iter() {
            if lane.pending() {
                self.settle(lane, &mut lane.state.lock());
            }
        }
        self.flush_owed();
    }

    /// Settles `lane` for a commit of another lane (case 2): at once if its lock is free;
    /// if not, its holder took it and settles it before anything else (`Tx::begin`,
    /// `freeze`), or is settling it: wait until it is no longer pending.
    fn settle_other(&self, lane: &Lane) {
        while lane.pending() {
            if let Some(mut st) = lane.state.try_lock() {
                self.settle(lane, &mut st);
                return;
            }
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }

    /// After this thread's fence, which wrote back the write-backs of its deferred record
    /// `seq` on `lane`: retires it if this thread still owns it (case 1). If another
    /// thread settles it meanwhile, waits until it has: that thread's fence does not order
    /// this thread's later writes (a record overwriting this thread's next one, or that
    /// one's retire mark), so the mark is written back again by this thread. Either way
    /// the mark's write-back is owed, issued before this thread's next fence.
    fn settle_owned(&self, lane: &Lane, seq: u64) {
        let me = thread_token();
        loop {
            if let Some(mut st) = lane.state.try_lock() {
                if let Some(d) = st.deferred.filter(|d| d.owner == me && d.seq == seq) {
                    st.deferred = None;
                    if self.media.check().is_ok() {
                        self.retire(lane, &d);
                    }
                    self.lanes.publish_deferred(lane, 0, &Touched::default());
                }
                break;
            }
            if lane.deferred_owner() != me {
                break;
            }
            std::hint::spin_loop();
            std::thread::yield_now();
        }
        self.owe_retire(lane.idx);
    }

    /// The ordering point of a commit writing the chunks `mine` (see `FenceFor`): settles
    /// the deferred records that must be settled first (module docs, case 2), issues the
    /// write-backs this thread owes and the retire marks `lane.rs` orders before this
    /// commit, fences, then settles this thread's own deferred record (case 1).
    pub(crate) fn fence_with_retires(&self, for_: FenceFor, mine: &Touched) {
        // One reading of the directory for both scans: whatever was published before this
        // commit began is in it. A settle below (by this thread, or by another one while
        // `settle_other` waits) only adds a retire mark to a lane in `near` through its
        // deferred set: the second scan re-reads that lane's state, so the mask must hold
        // both kinds of set (`Lanes::meeting`).
        let near = self.lanes.meeting(mine);
        for lane in self.lanes.of(near) {
            let owner = lane.deferred_owner();
            if owner == 0
                || for_ == FenceFor::Record(lane.idx)
                || !lane.deferred_touched().meets(mine)
            {
                continue;
            }
            // This thread's own deferred record waits for this fence, which writes its
            // lines back, except under a direct commit; one it owes nothing of (it could
            // not owe) is settled like another thread's.
            let waits = owner == thread_token()
                && matches!(for_, FenceFor::Record(_))
                && owed_record(self.id).is_some_and(|(l, _)| l == lane.idx);
            if !waits {
                self.settle_other(lane);
            }
        }
        let own = self.flush_owed();
        let skip = match for_ {
            FenceFor::Record(i) => Some(i),
            FenceFor::Direct => None,
        };
        self.fence_with_retire_marks_near(skip, mine, near);
        if let Some((lane, seq)) = own {
            self.settle_owned(self.lanes.get(lane), seq);
        }
    }
}
