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
//!    the pool's close (`settle_all`). Other threads' owed entries of a closed pool are
//!    dropped at their next fence (`Owing::drop_closed`).
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
//! it retires anything later (a fence whose commit seals a new record in the mark's lane
//! drops it instead: that seal retires the marked record by replacing it, under the same
//! fence), and a lane it leaves pending is settled by whoever takes it,
//! who first flushes the unflushed marks its record's chunks meet
//! (`fence_with_retire_marks`), as does every other settler.

use super::engine::Engine;
use super::lane::{Lane, LaneState, Touched};
use super::record::{self, RETIRED_OFFSET};
use crate::stats::Counter;
use crate::thread_token::thread_token;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
    static OWED: RefCell<Owing> = const {
        RefCell::new(Owing {
            entries: Vec::new(),
            closed_seen: 0,
        })
    };
}

/// A thread's owed write-backs.
struct Owing {
    entries: Vec<Owed>,
    /// `CLOSED` when the entries were last cleared of closed pools' (`drop_closed`).
    closed_seen: u64,
}

/// A write-back this thread must issue before its next fence on pool `eng`.
#[derive(Clone, Copy, Debug)]
struct Owed {
    eng: u64,
    of: Owes,
}

/// What an owed write-back is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owes {
    /// The byte range `range` (start, end) of this thread's deferred record `seq` on lane
    /// `lane`.
    Record {
        lane: usize,
        seq: u64,
        range: (u64, u64),
    },
    /// Lane `lane`'s retire marks (both copies' lines, one entry).
    Mark { lane: usize },
}

/// Past this many entries, a thread's retire-mark entries for other pools than the one it
/// commits to are dropped (their lanes' generations make other commits flush those marks
/// where it matters; the owner's own later commits still flush them, see
/// `fence_with_retires`). A deferred record's entries are never dropped here: at most one
/// record per open pool is owed at a time (a closed pool's go at the next fence, see
/// `Owing::drop_closed`).
const OWED_MAX: usize = 1024;

/// The ids of the engines alive (open pools). Ids are never reused (`engine::NEXT_ID`; a
/// pool reopened is a new engine), so an id gone from here never returns: an entry of a
/// closed pool can never pass for a live pool's.
static LIVE: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

/// How many engines have been dropped: a thread looks for its entries of closed pools only
/// when this moved since it last looked.
static CLOSED: AtomicU64 = AtomicU64::new(0);

/// Enters engine `id` among the live ones (the end of `Engine::new`).
pub(crate) fn opened(id: u64) {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
}

/// Takes engine `id` out of the live ones (`Engine::drop`): other threads' entries of its
/// pool are dropped at their next fence (`Owing::drop_closed`).
pub(crate) fn closed(id: u64) {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    // Release, after the removal: a thread that reads the new count finds the id gone.
    CLOSED.fetch_add(1, Ordering::Release);
}

impl Owing {
    /// Drops the entries of pools closed since this thread last looked. Without it, a
    /// thread whose pools are closed by other threads (a worker of a server that opens a
    /// pool per tenant) would keep their entries, one deferred record each, for its
    /// lifetime, and walk them at every fence.
    ///
    /// What such an entry describes is durable already, or replayed. The engine is dropped
    /// only once the pool's last handle is gone (no transaction runs, no thread adds to its
    /// entries), after its close (`pool::Inner::drop`) settled every deferred record
    /// (`settle_all`): a record entry's lane is still pending, and `settle` issues the
    /// record's write-backs from the lane's own `record.flushes` and fences before writing
    /// its mark, or it was settled earlier by a thread that did the same. Then the close
    /// writes back every lane's retire marks and fences (a retire-mark entry). A close that
    /// finds a failed write-back does neither and leaves the pool marked open; so does an
    /// engine dropped without a clean close (an open that failed): the next open replays
    /// every unretired record, which is harmless (module docs). And no one could issue
    /// these entries any more: `flush_owed` issues only its own engine's.
    #[cold]
    #[inline(never)]
    fn drop_closed(&mut self) {
        // Read before the registry: a close after this reading is looked for again.
        let closed = CLOSED.load(Ordering::Acquire);
        if closed == self.closed_seen {
            return;
        }
        let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        self.entries.retain(|e| live.contains(&e.eng));
        self.closed_seen = closed;
    }
}

/// Adds `owed` to this thread's owed write-backs on pool `eng`; false if the list is gone
/// (the thread is exiting, its thread-locals being destroyed), when nothing was added.
fn owe(eng: u64, owed: impl Iterator<Item = Owes>) -> bool {
    OWED.try_with(|o| {
        let o = &mut o.borrow_mut().entries;
        if o.len() > OWED_MAX {
            o.retain(|e| e.eng == eng || matches!(e.of, Owes::Record { .. }));
        }
        o.extend(owed.map(|of| Owed { eng, of }));
    })
    .is_ok()
}

/// The deferred record this thread owes write-backs of on pool `eng` (lane, seq).
fn owed_record(eng: u64) -> Option<(usize, u64)> {
    OWED.try_with(|o| {
        o.borrow().entries.iter().find_map(|e| match e.of {
            Owes::Record { lane, seq, .. } if e.eng == eng => Some((lane, seq)),
            _ => None,
        })
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
        let owed = ranges.iter().map(|&range| Owes::Record {
            lane: lane.idx,
            seq,
            range,
        });
        if owner == 0 || !owe(self.id, owed) {
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
        if !owe(self.id, std::iter::once(Owes::Mark { lane })) {
            // Exiting: written back now instead.
            self.flush_retire(lane);
        }
    }

    /// Issues the write-backs this thread owes on this pool; returns the deferred record
    /// they complete, if any (lane, seq).
    #[inline]
    pub(crate) fn flush_owed(&self) -> Option<(usize, u64)> {
        self.flush_owed_sealing(None)
    }

    /// `flush_owed` before the fence of a logged commit whose record goes to lane
    /// `sealing`: the retire marks owed for that lane are dropped, not written back. They
    /// retire the record the new seal replaces, so once the fence completes they no longer
    /// matter, and before it this commit is not committed (the retire ordering of
    /// `lane.rs`, for a commit's own lane). Writing them back would evict their line just
    /// before the settle that follows rewrites it (`retire`), which then waits for the
    /// line to be read back from memory.
    pub(crate) fn flush_owed_sealing(&self, sealing: Option<usize>) -> Option<(usize, u64)> {
        // An exiting thread owes nothing: it could not add to the list (`owe`).
        OWED.try_with(|o| {
            let mut o = o.borrow_mut();
            let mut record = None;
            if o.entries.is_empty() {
                return None;
            }
            let mut others = false;
            for e in &o.entries {
                if e.eng != self.id {
                    others = true;
                    continue;
                }
                match e.of {
                    Owes::Mark { lane } if Some(lane) == sealing => {}
                    Owes::Mark { lane } => self.flush_retire(lane),
                    Owes::Record { lane, seq, range } => {
                        record = Some((lane, seq));
                        self.media.flush(range.0, range.1 - range.0);
                    }
                }
            }
            if others {
                o.entries.retain(|e| e.eng != self.id);
                // Other pools' entries: a thread that commits to one pool has none here.
                o.drop_closed();
            } else {
                o.entries.clear();
            }
            record
        })
        .ok()
        .flatten()
    }

    /// Loads a byte of every line of the deferred-record write-backs this thread owes on
    /// this pool (see `Parity::touch`). A commit calls it before it counts new objects
    /// pending: the owed write-backs are issued at its fence (`flush_owed`), and one of a
    /// page lost since (an injection's freeze settled the record, then the page was lost)
    /// faults there like a load (clwb; the simulated device reads the line), where the
    /// handler would wait for this thread's own pending bytes, forever. Faulting here, the
    /// page is rebuilt first.
    pub(crate) fn touch_owed(&self) {
        let _ = OWED.try_with(|o| {
            let o = o.borrow();
            for e in o.entries.iter().filter(|e| e.eng == self.id) {
                if let Owes::Record { range, .. } = e.of {
                    // SAFETY: bytes of the pool its record wrote in place.
                    unsafe { self.parity.touch(&self.media, range.0, range.1 - range.0) };
                }
            }
        });
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
        let skip = match for_ {
            FenceFor::Record(i) => Some(i),
            FenceFor::Direct => None,
        };
        let own = self.flush_owed_sealing(skip);
        self.fence_with_retire_marks_near(skip, mine, near);
        if let Some((lane, seq)) = own {
            self.settle_owned(self.lanes.get(lane), seq);
        }
    }
}

#[cfg(test)]
fn owed_entries() -> Vec<u64> {
    OWED.with(|o| o.borrow().entries.iter().map(|e| e.eng).collect())
}

#[cfg(test)]
mod tests {
    use crate::{Config, CrashSim, Oid, Pool};
    use std::sync::Arc;

    type Root = [u64; 32];

    /// A pool and its root, on a `CrashSim` of its own.
    fn pool(name: &str) -> (Arc<CrashSim>, Config, Pool, Oid<Root>) {
        let small = Config::small(name);
        let max = small.max_size;
        let cfg = small.size(max);
        let sim = CrashSim::new(cfg.max_size);
        let pool = Pool::create_sim(&sim, &cfg).unwrap();
        let root = pool.root::<Root>().unwrap();
        (sim, cfg, pool, root)
    }

    fn set(pool: &Pool, root: Oid<Root>, v: u64) {
        pool.tx(|tx| {
            tx.open(root)?.write_at(8, &v);
            Ok(())
        })
        .unwrap();
    }

    /// Commits overwrites to `pool` until this thread owes a deferred record's write-backs.
    fn owe_a_record(pool: &Pool, root: Oid<Root>) {
        set(pool, root, 1); // the lanes' first commits mark their zones dirty
        set(pool, root, 2);
        let before = pool.stats().deferred_applies;
        set(pool, root, 3);
        assert_eq!(pool.stats().deferred_applies, before + 1);
        assert!(super::owed_entries().contains(&pool.engine().id));
    }

    /// A write-back of a line still on its way makes the next one wait for it: a commit
    /// writes each line back once. Here a partial write, whose range shares its line with
    /// the object's checksum word without touching it, and new objects, whose header and
    /// payload are two pieces sharing a line and a parity line, are seen at the fences
    /// after them.
    #[test]
    fn a_commit_writes_each_line_back_once() {
        let (sim, _cfg, pool, root) = pool("pgl-deferred-once-per-line");
        owe_a_record(&pool, root);
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        sim.set_fence_hook(move |sim| log.lock().unwrap().push(sim.pending_lines()));
        for v in 4..8 {
            set(&pool, root, v);
            pool.tx(|tx| tx.alloc([v; 4]).map(drop)).unwrap();
        }
        sim.clear_fence_hook();
        let seen = seen.lock().unwrap();
        assert!(
            seen.iter().any(|lines| !lines.is_empty()),
            "no write-back seen"
        );
        for lines in seen.iter() {
            let mut once = lines.clone();
            once.sort_unstable();
            once.dedup();
            assert_eq!(
                once.len(),
                lines.len(),
                "a line written back twice: {lines:?}"
            );
        }
    }

    fn close_on_another_thread(pool: Pool) {
        std::thread::scope(|s| {
            s.spawn(move || drop(pool));
        });
    }

    #[test]
    fn entries_of_a_pool_another_thread_closed_are_dropped_at_the_next_fence() {
        // A worker that commits to one pool after another, each closed by another thread
        // while the worker still owes its last record's write-backs (a server opening a
        // pool per tenant). Found by review: the entries stayed for the thread's lifetime,
        // and every fence walked them.
        for i in 0..64 {
            let (_sim, _cfg, pool, root) = pool(&format!("owed-closed-{i}"));
            owe_a_record(&pool, root);
            // The previous pool's entries went at this pool's fences.
            let id = pool.engine().id;
            let owed = super::owed_entries();
            assert!(
                owed.iter().all(|&e| e == id),
                "pool {i}: {} entries of closed pools still owed",
                owed.iter().filter(|&&e| e != id).count()
            );
            close_on_another_thread(pool);
        }
    }

    /// The lanes whose retire-mark words differ between `sim`'s volatile and persisted
    /// images (written, not yet written back).
    fn lanes_with_unwritten_marks(sim: &CrashSim, pool: &Pool) -> Vec<u64> {
        let (vol, per) = (sim.volatile_image(), sim.persisted_image());
        let geo = &pool.engine().geo;
        (0..geo.lanes)
            .filter(|&l| {
                (0..2).any(|c| {
                    let w = (geo.lane_offset(l, c) + super::RETIRED_OFFSET as u64) as usize / 8;
                    vol[w..w + 2] != per[w..w + 2]
                })
            })
            .collect()
    }

    #[test]
    fn a_commit_sealing_a_lane_leaves_that_lanes_retire_marks_alone() {
        // Found measuring fig3 overwrites: each commit wrote back the retire marks of the
        // lane it was sealing (owed by the settle of the record before, or still counted
        // unflushed), marks its seal makes moot. `clwb` evicts what it writes back here,
        // so the settle after the fence, which rewrites that line, read it from memory
        // first (perf put ~100 ns of a 1 KiB overwrite on the wait).
        let (sim, _cfg, pool, root) = pool("moot-marks");
        owe_a_record(&pool, root);
        // Steady state: one thread's overwrites alternate between its home lane and
        // another (the home lane is pending while its deferred record is), and each
        // commit seals the lane whose mark the previous settle wrote.
        for v in 10..20 {
            set(&pool, root, v);
        }
        // The last commit's settle wrote one lane's marks after its fence (unflushed, as
        // always); the other lane's, written by the settle before, were not written back
        // by the last commit, which sealed that lane.
        let unwritten = lanes_with_unwritten_marks(&sim, &pool);
        assert_eq!(
            unwritten.len(),
            2,
            "lanes with marks not written back: {unwritten:?}"
        );
        // Nor does the directory count the sealed lane's marks as pending: a later commit
        // over the same chunk would write them back.
        let eng = pool.engine();
        let mut mine = super::Touched::default();
        mine.add(root.raw(), 8, eng.map.chunk_shift());
        let mut pending = Vec::new();
        eng.lanes
            .for_pending_retires(&mine, eng.lanes.meeting(&mine), |i, _| pending.push(i));
        assert_eq!(
            pending.len(),
            1,
            "lanes whose marks count as pending: {pending:?}"
        );
    }

    #[test]
    fn a_reopened_pool_never_takes_a_closed_ones_entries_for_its_own() {
        // Reopening is a new engine with a new id: the closed engine's entries are not
        // issued against the new one's media (nor kept as its own), but dropped.
        let (sim, cfg, pool, root) = pool("owed-reopened");
        let (_sim2, _cfg2, other, root2) = self::pool("owed-reopened-2");
        owe_a_record(&other, root2);
        owe_a_record(&pool, root);
        let old = pool.engine().id;
        close_on_another_thread(pool);
        let again = Pool::open_sim_with(&sim, &cfg).unwrap();
        assert_ne!(again.engine().id, old);
        set(&again, root, 4);
        let owed = super::owed_entries();
        assert!(
            !owed.contains(&old),
            "a closed pool's entries survived its reopening"
        );
        assert!(
            owed.contains(&other.engine().id),
            "an open pool's entries were dropped"
        );
        drop(again);
        drop(other);
    }
}
