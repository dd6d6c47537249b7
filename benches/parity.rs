//! The parity-update crossover: for a changed range of `size` bytes, XOR `old ^ new` into
//! parity either with one atomic `fetch_xor` per 8-byte word under the stripe lock held
//! shared (writers of other rows in the same page column proceed at once) or under the
//! lock held exclusive with the vectorised kernel — pgl's own lock and kernels. Measured with 1 thread and with 2 threads updating the same parity bytes (two rows
//! of one column), as commits of two transactions do.
//!
//! ```text
//! cargo bench --bench parity
//! ```
//!
//! Prints CSV `suite,bench,system,config,size,threads,n,ns_per_op` (suite=parity,
//! bench=xor_atomic or xor_locked_simd) and, per thread count, the crossover: the smallest
//! size from which the locked kernel is no slower. `PGL_BENCH_N` sets updates per thread.

use pgl::integrity::stripe::StripeLock;
use pgl::integrity::xor::{kernel_name, xor_delta_atomic, xor_delta_into};
use std::sync::atomic::AtomicU64;
use std::sync::Barrier;
use std::time::Instant;

const SIZES: [usize; 10] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/// One page of parity, shared by the threads, with the lock pgl's parity engine uses.
struct Parity {
    words: Vec<AtomicU64>,
    lock: StripeLock,
}

/// pgl's small-range path: the stripe shared, one atomic XOR per word.
fn atomic_update(p: &Parity, at: usize, old: &[u8], new: &[u8]) {
    p.lock.lock_shared();
    // SAFETY: the words lie in `p.words`; under the shared lock every access to them is
    // atomic (exclusive holders are kept out).
    unsafe { xor_delta_atomic((p.words.as_ptr() as *mut u8).add(at), old, new) };
    p.lock.unlock_shared();
}

/// pgl's large-range path: the stripe exclusive, the vectorised kernel.
fn locked_update(p: &Parity, at: usize, old: &[u8], new: &[u8]) {
    p.lock.lock();
    // SAFETY: the exclusive lock keeps every other access to these words out (all
    // updates of this bench take the lock), and AtomicU64 has the layout of u64; the
    // bytes are viewed as plain memory only while the lock is held.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(p.words.as_ptr().add(at / 8) as *mut u8, old.len())
    };
    xor_delta_into(bytes, old, new);
    p.lock.unlock();
}

fn run(threads: usize, size: usize, n: usize, locked: bool, apart: bool) -> f64 {
    let parity = Parity {
        words: (0..512).map(|_| AtomicU64::new(0)).collect(),
        lock: StripeLock::default(),
    };
    let barrier = Barrier::new(threads + 1);
    let mut elapsed = 0.0;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (parity, barrier) = (&parity, &barrier);
            s.spawn(move || {
                let at = if apart { t * 2048 } else { 0 };
                let old = vec![t as u8; size];
                let new: Vec<u8> = (0..size).map(|i| (i + t) as u8).collect();
                barrier.wait();
                for _ in 0..n {
                    if locked {
                        locked_update(parity, at, &old, &new);
                    } else {
                        atomic_update(parity, at, &old, &new);
                    }
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let t0 = Instant::now();
        barrier.wait();
        elapsed = t0.elapsed().as_nanos() as f64;
    });
    elapsed / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn main() {
    let n: usize = std::env::var("PGL_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    println!("suite,bench,system,config,size,threads,n,ns_per_op");
    let mut summary = Vec::new();
    // (threads, apart): 2 threads on the same bytes, as commits to two rows' same offsets,
    // and 2 KiB apart in one parity page, as commits to other offsets of the column.
    for (threads, apart) in [(1, false), (2, false), (2, true)] {
        let mut crossover = None;
        for size in SIZES.into_iter().filter(|&s| !apart || s <= 2048) {
            let a = median(
                (0..5)
                    .map(|_| run(threads, size, n, false, apart))
                    .collect(),
            );
            let l = median((0..5).map(|_| run(threads, size, n, true, apart)).collect());
            let config = if apart { "apart" } else { "same" };
            println!("parity,xor_atomic,pgl,{config},{size},{threads},{n},{a:.1}");
            println!(
                "parity,xor_locked_simd,pgl,{config}-{},{size},{threads},{n},{l:.1}",
                kernel_name()
            );
            if crossover.is_none() && l <= a {
                crossover = Some(size);
            }
        }
        summary.push((threads, apart, crossover));
    }
    for (threads, apart, c) in summary {
        let how = if apart { ", 2 KiB apart" } else { "" };
        match c {
            Some(s) => eprintln!(
                "crossover with {threads} thread(s){how}: the locked {} kernel is no slower \
                 from {s} bytes",
                kernel_name()
            ),
            None => eprintln!("crossover with {threads} thread(s){how}: atomics win at every size"),
        }
    }
}
