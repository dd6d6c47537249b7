//! Deferred apply: a commit that only overwrites objects (no metadata word, no new object,
//! no zeroed range) applies its record in place and issues the write-backs, but leaves
//! them to a later fence instead of fencing them itself. The commit point is unchanged
//! (its record's fence); what moves is the apply step's ordering point, which costs as much
//! again (PERF-NOTES.md) and which the thread's next fence pays for nothing.
//!
//! While its write-backs are not known to be durable the record is *deferred*: the lane is
//! *pending* (`Lane::pending`), its retire mark is not written, and its record must stay
//! intact, since a crash replays it. It is *settled* — write-backs durable, then its retire
//! mark written and flushed, then the lane no longer pending — by exactly one of:
//!
//! 1. its owner's next fence (`fence_with_retires`), for free: a fence orders the
//!    write-backs its own thread issued before it. The retire mark is written after that
//!    fence, so it may be durable only after the fence that follows.
//! 2. any other thread's commit whose chunks meet the record's, before that commit's own
//!    fence (`settle`: the write-backs are issued again, since a fence orders only its own
//!    thread's, then one fence of its own), so that the retire ordering of `lane.rs` holds
//!    for it as if the record had been retired at its commit; likewise the owner's direct
//!    commits (a bitmap word, no record) whose chunks meet it.
//! 3. whoever takes the lane (`Tx::begin`, `freeze`), before writing anything to it, and
//!    the pool's close (`settle_all`).
//!
//! Invariant: a deferred record is replayed, or retired only once its write-backs are
//! durable. Replaying it after a crash is harmless whatever came after: a later record of
//! its owner replays after it (sequence order), and none of the owner's records created an
//! object over bytes it wrote (those bytes were a live object's when it committed, and
//! only another thread's commit, which settled it first, or the owner's own commit, which
//! comes after its next fence, can free them). A later record's retire mark never becomes
//! durable before its own: the owner flushes the deferred record's mark before its next
//! fence, which comes before its later marks are written; every other settler flushes the
//! unflushed marks its record's chunks meet (`fence_with_retire_marks`) before its fence.

use super::engine::Engine;
use super::lane::{Lane, LaneState, Touched};
use super::record::{self, RETIRED_OFFSET};
use crate::stats::Counter;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

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

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);
thread_local! {
    static TOKEN: Cell<u64> = const { Cell::new(0) };
}

/// This thread's token: a nonzero number no other thread of the process has.
#[inline]
pub(crate) fn thread_token() -> u64 {
    TOKEN.with(|t| {
        let v = t.get();
        if v != 0 {
            return v;
        }
        let v = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        t.set(v);
        v
    })
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
    /// record's: `seq`, touching `touched`, whose write-back ranges are in its state's
    /// `record.flushes`. Call it after the apply step's stores.
    pub(crate) fn defer(
        &self,
        lane: &Lane,
        slot: &mut Option<Deferred>,
        seq: u64,
        touched: &Touched,
    ) {
        let owner = thread_token();
        *slot = Some(Deferred {
            seq,
            touched: *touched,
            owner,
        });
        lane.publish_deferred(owner, touched);
    }

    /// Settles `lane`'s deferred record, if any (`st` is its state, held by the caller):
    /// its write-backs issued again and fenced together with the unflushed retire marks
    /// its chunks meet, then its own retire mark written and flushed (durable at the next
    /// fence that follows). After a failed write-back the record is left unretired, so
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
        }
        lane.publish_deferred(0, &Touched::default());
    }

    /// Writes and flushes the retire mark of `d`, `lane`'s deferred record, whose
    /// write-backs are durable, and publishes it as unflushed (`Lanes::retired`).
    fn retire(&self, lane: &Lane, d: &Deferred) {
        for c in 0..2 {
            let off = self.lane_off(lane.idx, c) + RETIRED_OFFSET as u64;
            // SAFETY: the retired word of a lane whose lock the caller holds.
            unsafe { self.media.write(off, &record::retire_mark(d.seq)) };
            self.media.flush(off, 16);
        }
        self.lanes.retired(lane.idx, &d.touched);
    }

    /// Settles every lane (at close: no transaction runs).
    pub(crate) fn settle_all(&self) {
        for lane in self.lanes.iter() {
            if lane.pending() {
                self.settle(lane, &mut lane.state.lock());
            }
        }
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

    /// After this thread's fence: retires `lane`'s deferred record if this thread still
    /// owns it (case 1). If another thread settles it meanwhile, waits until it has: that
    /// thread flushed the retire mark, but its fence does not order this thread's later
    /// writes (a record overwriting this thread's next one, or that one's retire mark),
    /// so the mark is flushed again here, to be durable at this thread's next fence.
    fn settle_owned(&self, lane: &Lane) {
        let me = thread_token();
        loop {
            if let Some(mut st) = lane.state.try_lock() {
                match st.deferred {
                    Some(d) if d.owner == me => {
                        st.deferred = None;
                        if self.media.check().is_ok() {
                            self.retire(lane, &d);
                        }
                        lane.publish_deferred(0, &Touched::default());
                    }
                    _ => self.flush_retire(lane.idx),
                }
                return;
            }
            if lane.deferred_hint().0 != me {
                self.flush_retire(lane.idx);
                return;
            }
            std::hint::spin_loop();
            std::thread::yield_now();
        }
    }

    /// The ordering point of a commit writing the chunks `mine` (see `for_`): settles the
    /// deferred records that must be settled first (module docs, case 2), flushes the
    /// retire marks `lane.rs` orders before it, fences, then settles this thread's own
    /// deferred records the fence made durable (case 1).
    pub(crate) fn fence_with_retires(&self, for_: FenceFor, mine: &Touched) {
        let me = thread_token();
        // Lanes are at most 64.
        let mut own = 0u64;
        for lane in self.lanes.iter() {
            let (owner, theirs) = lane.deferred_hint();
            if owner == 0 || for_ == FenceFor::Record(lane.idx) {
                continue;
            }
            let meets = theirs.meets(mine);
            if owner == me && (for_ != FenceFor::Direct || !meets) {
                own |= 1 << lane.idx;
            } else if meets {
                self.settle_other(lane);
            }
        }
        let skip = match for_ {
            FenceFor::Record(i) => Some(i),
            FenceFor::Direct => None,
        };
        self.fence_with_retire_marks(skip, mine);
        while own != 0 {
            let i = own.trailing_zeros() as usize;
            own &= own - 1;
            self.settle_owned(self.lanes.get(i));
        }
    }
}
