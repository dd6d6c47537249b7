//! The parity-update crossover: for a changed range of `size` bytes, XOR `old ^ new` into
//! parity either with one atomic `fetch_xor` per 8-byte word (no lock: writers of other rows
//! in the same page column proceed at once) or under an exclusive lock with the vectorised
//! kernel. Measured with 1 thread and with 2 threads updating the same parity bytes (two rows
//! of one column), as commits of two transactions do.
//!
//! ```text
//! cargo bench --bench parity
//! ```
//!
//! Prints CSV `suite,bench,system,config,size,threads,n,ns_per_op` (suite=parity,
//! bench=xor_atomic or xor_locked_simd) and, per thread count, the crossover: the smallest
//! size from which the locked kernel is no slower. `PGL_BENCH_N` sets updates per thread.

use parking_lot::Mutex;
use pgl::integrity::xor::{kernel_name, xor_delta_into};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

const SIZES: [usize; 10] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/// One page of parity, shared by the threads.
struct Parity {
    words: Vec<AtomicU64>,
    lock: Mutex<()>,
}

fn atomic_update(p: &Parity, at: usize, old: &[u8], new: &[u8]) {
    for (i, (o, n)) in old.chunks_exact(8).zip(new.chunks_exact(8)).enumerate() {
        let d = u64::from_ne_bytes(o.try_into().expect("8 bytes"))
            ^ u64::from_ne_bytes(n.try_into().expect("8 bytes"));
        p.words[at / 8 + i].fetch_xor(d, Ordering::Relaxed);
    }
}

fn locked_update(p: &Parity, at: usize, old: &[u8], new: &[u8]) {
    let _g = p.lock.lock();
    // SAFETY: the lock excludes every other writer of these words (all updates of this
    // bench take it), and AtomicU64 has the layout of u64; the bytes are viewed as plain
    // memory only while the lock is held.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(p.words.as_ptr().add(at / 8) as *mut u8, old.len())
    };
    xor_delta_into(bytes, old, new);
}

fn run(threads: usize, size: usize, n: usize, locked: bool) -> f64 {
    let parity = Parity {
        words: (0..512).map(|_| AtomicU64::new(0)).collect(),
        lock: Mutex::new(()),
    };
    let barrier = Barrier::new(threads + 1);
    let mut elapsed = 0.0;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (parity, barrier) = (&parity, &barrier);
            s.spawn(move || {
                let old = vec![t as u8; size];
                let new: Vec<u8> = (0..size).map(|i| (i + t) as u8).collect();
                barrier.wait();
                for _ in 0..n {
                    if locked {
                        locked_update(parity, 0, &old, &new);
                    } else {
                        atomic_update(parity, 0, &old, &new);
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
    for threads in [1, 2] {
        let mut crossover = None;
        for size in SIZES {
            let a = median((0..5).map(|_| run(threads, size, n, false)).collect());
            let l = median((0..5).map(|_| run(threads, size, n, true)).collect());
            println!("parity,xor_atomic,pgl,default,{size},{threads},{n},{a:.1}");
            println!(
                "parity,xor_locked_simd,pgl,{},{size},{threads},{n},{l:.1}",
                kernel_name()
            );
            if crossover.is_none() && l <= a {
                crossover = Some(size);
            }
        }
        summary.push((threads, crossover));
    }
    for (threads, c) in summary {
        match c {
            Some(s) => eprintln!(
                "crossover with {threads} thread(s): the locked {} kernel is no slower from \
                 {s} bytes",
                kernel_name()
            ),
            None => eprintln!("crossover with {threads} thread(s): atomics win at every size"),
        }
    }
}
