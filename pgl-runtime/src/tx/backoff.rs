//! `backoff`: how long a transaction waits after a conflict before it runs its closure
//! again. The waits grow with the attempt (spins, then yields, then sleeps of up to 2 ms),
//! each scaled by a random factor of this thread's own (`jitter`): two threads that
//! conflict on the same object would otherwise wait alike and meet again, attempt after
//! attempt.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One wait before a re-run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Delay {
    /// Spin this many times.
    Spin(u32),
    /// Spin this many times, then yield the CPU.
    Yield(u32),
    /// Sleep this long.
    Sleep(Duration),
}

/// Waits before re-run `attempt` (1 for the first re-run).
pub(super) fn backoff(attempt: u32) {
    match delay(attempt, jitter()) {
        Delay::Spin(n) => spin(n),
        Delay::Yield(n) => {
            spin(n);
            std::thread::yield_now();
        }
        Delay::Sleep(d) => std::thread::sleep(d),
    }
}

fn spin(n: u32) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

/// The wait before re-run `attempt`, given the random word `r`: for the first attempts
/// 32 spins doubling with each, then yields (after up to 255 spins), then sleeps of 1 µs
/// doubling every second attempt up to 2 ms; spins and sleeps scaled by a factor in
/// [1/2, 3/2) that `r` picks, so that their mean is the unjittered wait.
pub(super) fn delay(attempt: u32, r: u64) -> Delay {
    // `base` scaled by `r`: `base / 2 + r mod base`.
    let scaled = |base: u64| base / 2 + r % base.max(1);
    if attempt < 4 {
        Delay::Spin(scaled((1u64 << attempt) * 32) as u32)
    } else if attempt < 16 {
        Delay::Yield((r & 0xff) as u32)
    } else {
        let us = (1u64 << (attempt.min(26) / 2)).min(2000);
        Delay::Sleep(Duration::from_micros(scaled(us)))
    }
}

/// The next word of this thread's random sequence (xorshift64*, seeded apart for every
/// thread).
pub(super) fn jitter() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0) };
    }
    // (A thread whose thread-locals are gone, running a transaction from a destructor,
    // takes a fresh seed each time.)
    STATE
        .try_with(|s| {
            let mut x = s.get();
            if x == 0 {
                x = seed();
            }
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            s.set(x);
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        })
        .unwrap_or_else(|_| seed())
}

/// A nonzero seed, another for every call: splitmix64 of a process-wide counter.
fn seed() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut z = NEXT
        .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The waits a thread would take for re-runs 1 to 24.
    fn waits() -> Vec<Delay> {
        (1..25).map(|a| delay(a, jitter())).collect()
    }

    #[test]
    fn two_threads_back_off_differently() {
        // Found by a user review: two threads that read then write the same object backed
        // off in lockstep (the wait was a function of the attempt alone), and met again.
        let a = std::thread::spawn(waits).join().unwrap();
        let b = std::thread::spawn(waits).join().unwrap();
        assert_ne!(a, b, "two threads drew the same waits");
        let spins = |w: &[Delay]| -> Vec<Delay> {
            w.iter()
                .copied()
                .filter(|d| matches!(d, Delay::Spin(_)))
                .collect()
        };
        assert_ne!(spins(&a), spins(&b), "the first re-runs spin alike");
    }

    #[test]
    fn a_wait_stays_within_half_and_one_and_a_half_times_its_base() {
        for r in [0, 1, 31, 32, 63, 64, u64::MAX, 0x1234_5678_9abc_def0] {
            for attempt in 1..4 {
                let base = (1u32 << attempt) * 32;
                let Delay::Spin(n) = delay(attempt, r) else {
                    panic!("attempt {attempt} does not spin");
                };
                assert!(base / 2 <= n && n < base * 3 / 2, "{attempt} {r}: {n}");
            }
            for attempt in 4..16 {
                assert!(matches!(delay(attempt, r), Delay::Yield(n) if n < 256));
            }
            for attempt in 16..40 {
                let base = (1u64 << (attempt.min(26) / 2)).min(2000);
                let Delay::Sleep(d) = delay(attempt, r) else {
                    panic!("attempt {attempt} does not sleep");
                };
                let us = d.as_micros() as u64;
                assert!(base / 2 <= us && us < base * 3 / 2, "{attempt} {r}: {us}");
            }
        }
    }
}
