//! `StripeLock`: the reader/writer spin lock over a stripe of parity pages.
//!
//! Small parity updates take it shared and XOR their delta in with atomic 8-byte
//! `fetch_xor`s, so commits writing different rows of one page column proceed together;
//! large updates take it exclusive and use the vectorised kernel on plain memory, and so
//! do page rebuilds, which need the column quiet. Public (hidden from the docs) so that
//! `benches/parity.rs` measures the crossover with this very lock.
//!
//! ```text
//! state u32:  bit 31 WRITER (held exclusive) | bit 30 WAITING (a writer waits: no new
//!             readers) | bits 0..30 readers
//! ```
//!
//! Invariant: while WRITER is set the reader count is 0, and while readers hold it every
//! access to the stripe's parity bytes is atomic; so plain and atomic accesses to the
//! same bytes never overlap. Spinning, never parking: critical sections are a few hundred
//! nanoseconds at most, and the media-error handler must be able to take it (a signal
//! handler may not park; `sched_yield` is async-signal-safe).

use std::sync::atomic::{AtomicU32, Ordering};

const WRITER: u32 = 1 << 31;
const WAITING: u32 = 1 << 30;
const READERS: u32 = WAITING - 1;

/// A reader/writer spin lock (see the module docs).
#[derive(Default, Debug)]
pub struct StripeLock {
    state: AtomicU32,
}

fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl StripeLock {
    /// Takes it exclusive if no one holds it.
    pub fn try_lock(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s & !WAITING == 0
            && self
                .state
                .compare_exchange(s, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Takes it exclusive, waiting for the holders to leave; new readers wait meanwhile.
    pub fn lock(&self) {
        let mut spins = 0;
        while !self.try_lock() {
            self.state.fetch_or(WAITING, Ordering::Relaxed);
            backoff(&mut spins);
        }
    }

    /// Releases an exclusive hold.
    pub fn unlock(&self) {
        self.state.store(0, Ordering::Release);
    }

    /// Takes it shared, waiting while a writer holds it or waits for it.
    pub fn lock_shared(&self) {
        let mut spins = 0;
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s & (WRITER | WAITING) == 0
                && s & READERS < READERS
                && self
                    .state
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            backoff(&mut spins);
        }
    }

    /// Releases a shared hold.
    pub fn unlock_shared(&self) {
        self.state.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn readers_share_writers_exclude() {
        let l = StripeLock::default();
        l.lock_shared();
        l.lock_shared();
        assert!(!l.try_lock(), "readers hold it");
        l.unlock_shared();
        l.unlock_shared();
        assert!(l.try_lock());
        assert_eq!(l.state.load(Ordering::Relaxed), WRITER);
        l.unlock();
        assert_eq!(l.state.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_waiting_writer_stops_new_readers_and_gets_the_lock() {
        let l = StripeLock::default();
        l.lock_shared();
        l.state.fetch_or(WAITING, Ordering::Relaxed);
        // A new reader would wait now; the writer gets in once the reader leaves.
        l.unlock_shared();
        assert!(l.try_lock(), "WAITING alone does not keep the writer out");
        l.unlock();
    }

    #[test]
    fn shared_atomic_and_exclusive_plain_updates_never_mix() {
        // Two threads add to a counter: one with atomics under the shared lock, one with
        // a plain read-modify-write under the exclusive lock. Lost updates would show.
        let l = StripeLock::default();
        let v = AtomicU64::new(0);
        let n = if cfg!(miri) { 50 } else { 20_000 };
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..n {
                    l.lock_shared();
                    v.fetch_add(1, Ordering::Relaxed);
                    l.unlock_shared();
                }
            });
            s.spawn(|| {
                for _ in 0..n {
                    l.lock();
                    let x = v.load(Ordering::Relaxed);
                    v.store(x + 1, Ordering::Relaxed);
                    l.unlock();
                }
            });
        });
        assert_eq!(v.load(Ordering::Relaxed), 2 * n);
    }
}
