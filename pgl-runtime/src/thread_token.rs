//! `thread_token`: a number naming the calling thread, for telling "this thread" apart
//! from "another thread" in shared state (a deferred record's owner, a log reservation's
//! maker) with one plain load and compare.
//!
//! Invariant: while a thread runs, its token is nonzero and no other thread of the process
//! has it (tokens count up from 1 and are never reused). Once the thread's thread-locals
//! are being destroyed (it exits), it gets 0, which names no thread: callers treat 0 as
//! "unknown" and fall back to what is right for any thread.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static TOKEN: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's token (see the module docs): nonzero and its own, or 0 while its
/// thread-locals are being destroyed.
#[inline]
pub(crate) fn thread_token() -> u64 {
    TOKEN
        .try_with(|t| {
            let v = t.get();
            if v != 0 {
                return v;
            }
            let v = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
            t.set(v);
            v
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::thread_token;

    #[test]
    fn a_thread_keeps_its_token_and_no_other_thread_has_it() {
        let mine = thread_token();
        assert_ne!(mine, 0);
        assert_eq!(thread_token(), mine);
        let theirs = std::thread::spawn(thread_token).join().unwrap();
        assert_ne!(theirs, 0);
        assert_ne!(theirs, mine);
    }
}
