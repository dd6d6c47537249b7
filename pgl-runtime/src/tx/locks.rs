//! Lock tables: striped reader/writer locks on objects (held by a transaction from open to
//! retire; never waited for inside a transaction, so no deadlock) and striped mutexes on
//! heap metadata words (held only during a commit, taken in ascending stripe order).
//!
//! Invariant: a transaction never blocks on an object lock (conflicts abort and retry the
//! closure), and metadata locks are only taken by commits that hold all their object locks
//! already, in one global order; so no cycle of waiting can form.

use parking_lot::lock_api::RawMutex as _;
use parking_lot::RawMutex;
use std::sync::atomic::{AtomicU64, Ordering};

const WRITER: u64 = 1 << 63;

/// Bits of an object lock stripe's index.
const STRIPE_BITS: u32 = 14;
/// Number of object lock stripes.
pub(crate) const OBJECT_STRIPES: usize = 1 << STRIPE_BITS;
/// Object stripes are laid out in order over regions of `1 << REGION_SHIFT` bytes (256
/// KiB): as many 16-byte units as there are stripes.
const REGION_SHIFT: u32 = STRIPE_BITS + 4;
/// Number of metadata lock stripes.
pub(crate) const META_STRIPES: usize = 1 << 10;
const _: () = assert!(META_STRIPES.is_power_of_two());

/// A striped table of reader/writer locks keyed by object offset.
pub(crate) struct ObjectLocks {
    stripes: Box<[AtomicU64]>,
}

/// How a transaction holds a stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    Read,
    Write,
}

impl ObjectLocks {
    pub(crate) fn new() -> Self {
        ObjectLocks {
            stripes: (0..OBJECT_STRIPES).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The stripe of the object at `off`: its 16-byte unit within its region of the pool
    /// (`REGION_SHIFT`), plus an offset per region (a multiplicative hash of its index).
    ///
    /// Within a region, objects never share a stripe, and neighbours use neighbouring
    /// stripes, so the stripes of one run lie in a few cache lines of the table: threads
    /// working in different runs (each lane allocates from its own) rarely write the same
    /// line. A hash of each object's offset spread every thread's objects over the whole
    /// table, where two threads wrote the same lines all the time (eight stripes a line):
    /// a two-thread allocation loop on one pool cost each thread 80-100 ns an operation
    /// more than on a pool of its own; with this mapping, about the same. The offset per
    /// region keeps what lies at the same place in many regions (large objects at chunk
    /// starts, runs' first blocks) out of one stripe.
    pub(crate) fn stripe(off: u64) -> u32 {
        let region =
            (off >> REGION_SHIFT).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - STRIPE_BITS);
        ((off >> 4).wrapping_add(region) & (OBJECT_STRIPES as u64 - 1)) as u32
    }

    /// Tries to take `stripe` for writing, given how this transaction already holds it.
    pub(crate) fn try_write(&self, stripe: u32, held: Option<Held>) -> bool {
        let s = &self.stripes[stripe as usize];
        match held {
            Some(Held::Write) => true,
            Some(Held::Read) => s
                .compare_exchange(1, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok(),
            None => s
                .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok(),
        }
    }

    /// Tries to take `stripe` for reading.
    pub(crate) fn try_read(&self, stripe: u32) -> bool {
        let s = &self.stripes[stripe as usize];
        let mut cur = s.load(Ordering::Relaxed);
        loop {
            if cur & WRITER != 0 {
                return false;
            }
            match s.compare_exchange_weak(cur, cur + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(v) => cur = v,
            }
        }
    }

    /// Takes `stripe` for reading, waiting up to `wait` for a writer to finish; false,
    /// holding nothing, if it did not (a writer that never lets go: a `Detached` leaked
    /// with `mem::forget`). The clock is read only once the wait gets long. Only for
    /// callers that hold no other object lock of a transaction.
    pub(crate) fn read_for(&self, stripe: u32, wait: std::time::Duration) -> bool {
        let mut spins = 0u32;
        let mut deadline = None;
        while !self.try_read(stripe) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else if spins < 256 {
                std::thread::yield_now();
            } else if *deadline.get_or_insert_with(|| std::time::Instant::now() + wait)
                <= std::time::Instant::now()
            {
                return false;
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        }
        true
    }

    /// Takes every stripe for writing, waiting until `deadline`; false, holding none, if a
    /// reader or writer kept one that long. A stripe still busy after `HOLD_WHILE_WAITING`
    /// makes it let go of the ones it took and start over after a pause: a reader may keep
    /// its `Ref` for seconds, and the stripes taken meanwhile would stop every transaction
    /// on their objects for as long (in-flight transactions, short, are waited for).
    pub(crate) fn write_all(&self, deadline: std::time::Instant) -> bool {
        const HOLD_WHILE_WAITING: std::time::Duration = std::time::Duration::from_millis(2);
        let mut pause = std::time::Duration::from_micros(200);
        'again: loop {
            for (i, s) in self.stripes.iter().enumerate() {
                let mut waited_since = None;
                while s
                    .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    let now = std::time::Instant::now();
                    let since = *waited_since.get_or_insert(now);
                    if now >= deadline || now - since >= HOLD_WHILE_WAITING {
                        for s in &self.stripes[..i] {
                            s.store(0, Ordering::Release);
                        }
                        if now >= deadline {
                            return false;
                        }
                        std::thread::sleep(pause.min(deadline - now));
                        pause = (pause * 2).min(std::time::Duration::from_millis(20));
                        continue 'again;
                    }
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
            return true;
        }
    }

    /// Releases every stripe taken by `write_all`.
    pub(crate) fn release_all(&self) {
        for s in self.stripes.iter() {
            s.store(0, Ordering::Release);
        }
    }

    /// Releases a stripe held as `held`.
    pub(crate) fn release(&self, stripe: u32, held: Held) {
        let s = &self.stripes[stripe as usize];
        match held {
            Held::Write => s.store(0, Ordering::Release),
            Held::Read => {
                s.fetch_sub(1, Ordering::Release);
            }
        }
    }
}

/// A striped table of mutexes keyed by metadata word offset.
pub(crate) struct MetaLocks {
    stripes: Box<[RawMutex]>,
}

impl MetaLocks {
    pub(crate) fn new() -> Self {
        MetaLocks {
            stripes: (0..META_STRIPES).map(|_| RawMutex::INIT).collect(),
        }
    }

    /// The stripe of the word at `off`: a multiplicative hash of the word's index, because
    /// the words transactions change most (the first bitmap word of each run chunk) lie a
    /// chunk apart, a power of two that a plain modulus would put in one stripe.
    pub(crate) fn stripe(off: u64) -> u32 {
        let h = (off >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - META_STRIPES.trailing_zeros())) as u32
    }

    /// Locks the stripes of `offsets`; returns them sorted and deduplicated for `unlock`.
    pub(crate) fn lock(&self, offsets: impl Iterator<Item = u64>, out: &mut Vec<u32>) {
        out.clear();
        out.extend(offsets.map(Self::stripe));
        out.sort_unstable();
        out.dedup();
        for &s in out.iter() {
            self.stripes[s as usize].lock();
        }
    }

    /// Runs `f` holding the stripe of the word at `off` (for readers outside commits).
    pub(crate) fn with_word<R>(&self, off: u64, f: impl FnOnce() -> R) -> R {
        let s = Self::stripe(off) as usize;
        self.stripes[s].lock();
        let r = f();
        // SAFETY: locked just above by this thread.
        unsafe { self.stripes[s].unlock() };
        r
    }

    /// Runs `f` holding every stripe (in ascending order, as `lock` takes them): no
    /// metadata word is read or written meanwhile.
    pub(crate) fn with_all<R>(&self, f: impl FnOnce() -> R) -> R {
        for s in self.stripes.iter() {
            s.lock();
        }
        let r = f();
        for s in self.stripes.iter() {
            // SAFETY: locked just above by this thread.
            unsafe { s.unlock() };
        }
        r
    }

    /// Unlocks stripes taken by `lock`.
    pub(crate) fn unlock(&self, stripes: &[u32]) {
        for &s in stripes {
            // SAFETY: `stripes` is exactly the set locked by this thread in `lock`, each once.
            unsafe { self.stripes[s as usize].unlock() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gives_up_on_a_writer_that_never_lets_go() {
        use std::time::{Duration, Instant};
        let l = ObjectLocks::new();
        assert!(l.try_write(9, None));
        let t = Instant::now();
        assert!(
            !l.read_for(9, Duration::from_millis(30)),
            "held by a writer"
        );
        assert!(
            t.elapsed() >= Duration::from_millis(30),
            "it waited up to the deadline"
        );
        assert!(!l.try_read(9), "and took nothing");
        l.release(9, Held::Write);
        assert!(l.read_for(9, Duration::ZERO), "free: taken at once");
        l.release(9, Held::Read);
    }

    #[test]
    fn writer_excludes_readers_and_upgrade_works() {
        let l = ObjectLocks::new();
        assert!(l.try_read(5));
        assert!(l.try_read(5));
        assert!(!l.try_write(5, None));
        assert!(!l.try_write(5, Some(Held::Read)), "two readers: no upgrade");
        l.release(5, Held::Read);
        assert!(l.try_write(5, Some(Held::Read)), "sole reader upgrades");
        assert!(!l.try_read(5));
        l.release(5, Held::Write);
        assert!(l.try_write(5, None));
        l.release(5, Held::Write);
    }

    #[test]
    fn objects_of_one_region_never_share_a_stripe_and_neighbours_share_lines() {
        let region = 1u64 << REGION_SHIFT;
        for base in [0, 1 << 30, 7 * region] {
            let stripes: std::collections::BTreeSet<u32> = (0..region / 16)
                .map(|u| ObjectLocks::stripe(base + u * 16))
                .collect();
            assert_eq!(stripes.len(), OBJECT_STRIPES, "one stripe per 16-byte unit");
        }
        // 64-byte blocks of one run: eight stripes (one cache line of the table) hold two
        // blocks' locks at least, where a hash would give every block a line of its own.
        let lines: std::collections::BTreeSet<u32> = (0..64u64)
            .map(|b| ObjectLocks::stripe((1 << 30) + 4096 + b * 64) / 8)
            .collect();
        assert!(lines.len() <= 33, "{} lines for 64 neighbours", lines.len());
    }

    #[test]
    fn objects_at_one_place_of_many_regions_spread_over_the_stripes() {
        let region = 1u64 << REGION_SHIFT;
        for at in [16, 4096 + 16] {
            let stripes: std::collections::BTreeSet<u32> = (0..64u64)
                .map(|r| ObjectLocks::stripe((1 << 30) + r * region + at))
                .collect();
            assert!(
                stripes.len() > 60,
                "{} stripes for 64 regions",
                stripes.len()
            );
        }
    }

    #[test]
    fn meta_locks_dedupe() {
        let m = MetaLocks::new();
        let mut held = Vec::new();
        m.lock([8u64, 16, 8, 16].into_iter(), &mut held);
        let distinct = if MetaLocks::stripe(8) == MetaLocks::stripe(16) {
            1
        } else {
            2
        };
        assert_eq!(held.len(), distinct);
        assert!(
            held.windows(2).all(|w| w[0] < w[1]),
            "ascending, for lock order"
        );
        m.unlock(&held);
    }

    #[test]
    fn run_bitmaps_a_chunk_apart_spread_over_meta_stripes() {
        let stripes: std::collections::BTreeSet<u32> = (0..64u64)
            .map(|chunk| MetaLocks::stripe((1 << 30) + chunk * (256 << 10)))
            .collect();
        assert!(
            stripes.len() > 48,
            "{} stripes for 64 chunks",
            stripes.len()
        );
        assert!((0..1 << 20).all(|w| (MetaLocks::stripe(w * 8) as usize) < META_STRIPES));
    }
}
