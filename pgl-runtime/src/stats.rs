//! Counters a user can read with `pool.stats()`: the figures benchmarks and the book print.
//!
//! Invariant: counters only grow; each lane has its own cache line of counters, so counting
//! costs no cross-thread traffic.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a pool's counters since it was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Transactions committed (read-only ones included).
    pub commits: u64,
    /// Transactions aborted (errors, conflicts, canary mismatches).
    pub aborts: u64,
    /// Closure re-runs after a conflict.
    pub retries: u64,
    /// Ordering points (fences) issued by commits.
    pub fences: u64,
    /// Commits that needed no redo record (a single metadata word).
    pub direct_commits: u64,
    /// Commits that only overwrote objects and left their apply step's write-backs to the
    /// next ordering point (one fence instead of two; the record stays until then).
    pub deferred_applies: u64,
    /// Bytes written to redo records (both copies).
    pub bytes_logged: u64,
    /// Bytes written in place to objects and metadata.
    pub bytes_written: u64,
    /// Objects allocated.
    pub allocs: u64,
    /// Objects freed.
    pub frees: u64,
    /// Redo records replayed by recovery when the pool was opened.
    pub records_replayed: u64,
    /// Damaged header copies repaired when the pool was opened.
    pub header_repairs: u64,
    /// Header copies brought up to date when the pool was opened because a crash had
    /// interrupted a header update (between the writes of the two copies, or within one):
    /// the older copy was legitimate, not damaged, and is not counted in `header_repairs`.
    pub header_updates_completed: u64,
    /// Redo-lane copies rewritten from the other copy when the pool was opened. Not all
    /// were damaged: without `Config::replicate_lanes` copy B is expected to differ from
    /// copy A, and a crash may leave a commit's record in one copy only.
    pub lane_repairs: u64,
    /// Of `lane_repairs`, the copies that were damaged (a retire mark or a record seal no
    /// commit leaves), in a pool that was closed cleanly: after a crash a torn copy cannot
    /// be told from a damaged one, and none is counted. `pgl check` reports them.
    pub lane_copies_damaged: u64,
    /// Zone metadata copies rewritten (from the other copy, or from parity) when the pool
    /// was opened or by a scrub.
    pub metadata_repairs: u64,
    /// Words of run allocation bitmaps that did not verify and were rebuilt from zone
    /// parity (when the pool was opened, by a commit that found one, or by a scrub).
    pub bitmap_repairs: u64,
    /// Runs taken out of service because a word of their allocation bitmap neither
    /// verified nor could be rebuilt: the pool keeps no parity, the word's page column was
    /// damaged twice, or a crash left the word's zone with parity that may be stale.
    /// Nothing is allocated from them (and they are never reclaimed) while the pool is
    /// open; their objects stay readable. Scrubs, `pool.verify_objects` and `pgl check`
    /// report the words.
    pub runs_quarantined: u64,
    /// Damaged objects rebuilt from zone parity and written back (online repair, a
    /// scrub's, or while the pool opened after a crash).
    pub objects_repaired: u64,
    /// Pool pages (4 KiB) whose bytes those repairs changed: an object damaged on two of
    /// its pages counts two.
    pub pages_rebuilt: u64,
    /// Damaged objects parity could not rebuild (reported to the caller as errors), each
    /// counted once however many reads and scrubs meet it (a new object at its offset
    /// counts anew).
    pub objects_unrecoverable: u64,
    /// Page columns whose parity was recomputed when the pool was opened: after a crash,
    /// the columns the last commits left disagreeing with their parity; after a session
    /// without parity (`Config::parity` off), every column its writes changed.
    pub parity_columns_recomputed: u64,
    /// Pages lost to media errors that the fault handler rebuilt from parity (the loads
    /// that hit them completed normally).
    pub media_errors_repaired: u64,
    /// Pages lost to media errors that could not be rebuilt (zero-filled; checksums
    /// report the objects on them).
    pub media_errors_lost: u64,
    /// Scrubs the background scrubber (`VerifyPolicy::Scrub`) completed.
    pub scrubs: u64,
    /// Of those, the ones that left damage they could not repair (their report was not
    /// `is_clean`): run `pool.scrub(false, ..)` for the list. Every later scrub counts the
    /// same damage again until it is gone.
    pub scrubs_unclean: u64,
    /// Passes of the background scrubber that failed before completing: the pool stayed
    /// busy for long (a `Ref` or `Detached` held for over ten seconds by another thread)
    /// or a write-back failed. A failed pass is tried again soon (after 20 ms, doubling up
    /// to a second while it keeps failing), not only after `every_n_tx` more transactions.
    pub scrubs_failed: u64,
    /// Objects of `#[extendible]` structs upgraded lazily (extension groups allocated,
    /// initialised and linked) by committed transactions.
    pub upgrades: u64,
}

/// Counter slots, in `Stats` field order.
#[derive(Clone, Copy)]
#[repr(usize)]
pub(crate) enum Counter {
    Commits,
    Aborts,
    Retries,
    Fences,
    DirectCommits,
    DeferredApplies,
    BytesLogged,
    BytesWritten,
    Allocs,
    Frees,
    Upgrades,
}
const N: usize = 11;

/// One lane's counters, alone on their cache lines.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct LaneCounters {
    c: [AtomicU64; N],
}

impl LaneCounters {
    #[inline]
    pub(crate) fn add(&self, c: Counter, v: u64) {
        // Only the lane's owner writes; a load + store avoids a locked instruction.
        let a = &self.c[c as usize];
        a.store(a.load(Ordering::Relaxed) + v, Ordering::Relaxed);
    }

    pub(crate) fn get(&self, c: Counter) -> u64 {
        self.c[c as usize].load(Ordering::Relaxed)
    }

    pub(crate) fn add_to(&self, s: &mut Stats) {
        let g = |c: Counter| self.c[c as usize].load(Ordering::Relaxed);
        s.commits += g(Counter::Commits);
        s.aborts += g(Counter::Aborts);
        s.retries += g(Counter::Retries);
        s.fences += g(Counter::Fences);
        s.direct_commits += g(Counter::DirectCommits);
        s.deferred_applies += g(Counter::DeferredApplies);
        s.bytes_logged += g(Counter::BytesLogged);
        s.bytes_written += g(Counter::BytesWritten);
        s.allocs += g(Counter::Allocs);
        s.frees += g(Counter::Frees);
        s.upgrades += g(Counter::Upgrades);
    }
}
