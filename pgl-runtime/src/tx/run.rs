//! `run`: a closure as a transaction — joining this thread's open one, retrying after
//! conflicts with backoff, and after damage parity can repair.

use super::backoff::backoff;
use super::engine::Engine;
use super::thread::{active, Active};
use super::tx::Tx;
use crate::stats::Counter;
use crate::{Error, Result};

/// Most closure re-runs after conflicts before `Error::Conflict` is returned.
const MAX_ATTEMPTS: u32 = 100_000;

/// Runs `f` as a transaction of `eng` (joining this thread's open one, if any).
pub(crate) fn run<'p, R>(eng: &'p Engine, mut f: impl FnMut(&Tx<'p>) -> Result<R>) -> Result<R> {
    if let Some(p) = active(eng.id) {
        // SAFETY: registered by an enclosing `run` of the same engine on this thread; that Tx
        // lives on the enclosing frame for the whole of this call, and is only used through
        // `&self` methods (interior mutability), so sharing it is sound.
        let outer: &Tx<'p> = unsafe { &*(p as *const Tx<'p>) };
        // A panic out of the nested closure fails the outer transaction too, as an error
        // does: caught by the outer closure, it must not commit half the nested changes.
        let guard = PoisonOnUnwind(outer);
        let r = f(outer).inspect_err(|e| outer.poison(e));
        core::mem::forget(guard);
        return r;
    }
    let mut attempt = 0u32;
    let mut repairs = 0u32;
    loop {
        let tx = Tx::begin(eng, "pool.tx")?;
        let r = {
            let _a = Active::enter(eng.id, &tx);
            f(&tx)
        };
        let out = match r {
            Ok(v) => tx.commit().map(|()| v),
            Err(e) => Err(e),
        };
        match out {
            Err(Error::Conflict { offset }) => {
                tx.abort();
                tx.lane.counters.add(Counter::Retries, 1);
                drop(tx);
                attempt += 1;
                if attempt >= MAX_ATTEMPTS {
                    return Err(Error::Conflict { offset });
                }
                backoff(attempt);
            }
            Err(e) => {
                tx.abort();
                drop(tx);
                // Damage found on the way: rebuild the object from parity (outside the
                // transaction: the repair freezes every lane) and run the closure again.
                if repairs < MAX_REPAIRS && try_repair(eng, &e) {
                    repairs += 1;
                    continue;
                }
                return Err(eng.damage_behind(e));
            }
            ok => return ok,
        }
    }
}

/// Poisons a joined transaction when dropped: by the unwinding of a panic out of a nested
/// closure (forgotten when the closure returns).
struct PoisonOnUnwind<'a, 'p>(&'a Tx<'p>);

impl Drop for PoisonOnUnwind<'_, '_> {
    fn drop(&mut self) {
        // `try_borrow_mut`: a second panic while unwinding would abort the process (the
        // state is not borrowed here: the borrows of the panicking frames are gone).
        if let Ok(mut st) = self.0.st.try_borrow_mut() {
            st.poison.get_or_insert(Error::Aborted {
                reason: "a nested pool.tx panicked".into(),
            });
        }
    }
}

/// Repairs per `run` or `get` before the damage is reported as it is.
pub(super) const MAX_REPAIRS: u32 = 3;

/// If `e` reports damage to an object, tries to repair it; whether it was repaired (so the
/// operation that failed is worth retrying). Call it outside transactions.
pub(crate) fn try_repair(eng: &Engine, e: &Error) -> bool {
    if let Error::BitmapMismatch { offset, .. } = *e {
        return match eng.repair_bitmap_word(offset) {
            Some(true) => true,
            Some(false) => {
                // Beyond repair: out of service, so that allocations of its class go to
                // other runs.
                eng.heap.quarantine_run_of(offset);
                false
            }
            // The pool could not be frozen (a long transaction elsewhere): reported as it
            // is, and tried again by the next commit that meets the word.
            None => false,
        };
    }
    super::repairable(e).is_some_and(|off| match eng.repair_object(off) {
        Ok(super::Outcome::Repaired { .. }) => true,
        // Repaired by another thread since this one read it: worth reading again. (A
        // type mismatch with the header the object really has is the caller's mistake.)
        Ok(super::Outcome::Intact { type_id, size }) => match *e {
            Error::ChecksumMismatch { .. } => true,
            Error::TypeMismatch {
                found, found_size, ..
            } => (found, found_size) != (type_id, size),
            _ => false,
        },
        _ => false,
    })
}
