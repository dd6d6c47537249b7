//! Reads outside a transaction: `pool.get`, and the type check of `pool.root`.

use super::engine::{Engine, VerifyPolicy};
use super::handle::Ref;
use super::locks::{Held, ObjectLocks};
use super::run::{try_repair, MAX_REPAIRS};
use super::thread::{active, any_detached, held_by_this_thread, in_tx};
use super::tx::{verify_in_place, Tx};
use crate::heap::layout::{ObjectHeader, HEADER_SIZE};
use crate::persistent::{Oid, Persistent};
use crate::{Error, Result};

/// `pool.get`: a read view outside any transaction. Damage it finds is repaired when no
/// transaction of this thread is open (inside one, the transaction's retry repairs it).
pub(crate) fn get<'p, T: Persistent>(eng: &'p Engine, oid: Oid<T>) -> Result<Ref<'p, T>> {
    let mut repairs = 0;
    loop {
        match get_once(eng, oid) {
            Err(e) if repairs < MAX_REPAIRS && !in_tx(eng) && try_repair(eng, &e) => {
                repairs += 1;
            }
            r => return r.map_err(|e| eng.damage_behind(e)),
        }
    }
}

/// Checks that the object at `oid` is a `T` (`pool.root`): through this thread's open
/// transaction or `Detached` if one holds its lock already (where `pool.get` is refused
/// with `LockedByThisThread`), else as `pool.get` does. Never fails the transaction but on
/// a conflict, as `pool.get` inside it.
pub(crate) fn check_is<T: Persistent>(eng: &Engine, oid: Oid<T>) -> Result<()> {
    let stripe = stripe_of(oid.raw());
    let holds = |tx: &Tx<'_>| {
        tx.st
            .try_borrow()
            .is_ok_and(|st| st.lane.scratch.held.contains(stripe))
    };
    if let Some(p) = active(eng.id) {
        // SAFETY: registered by `run` on this thread; that Tx is alive on its frame.
        let tx = unsafe { &*(p as *const Tx<'_>) };
        if holds(tx) {
            return tx.check_held::<T>(oid.raw());
        }
    }
    let mut checked = None;
    any_detached(eng.id, |tx| {
        if holds(tx) {
            checked = Some(tx.check_held::<T>(oid.raw()));
        }
        checked.is_some()
    });
    if let Some(r) = checked {
        return r;
    }
    get(eng, oid).map(|_| ())
}

/// Takes the read lock of the object at `off` for a reader that is no transaction
/// (`pool.get`, `pool.read_object`, the object walks); returns its stripe, which the caller
/// releases. Waits for another thread's writer up to the repair `WAIT` (then `Conflict`:
/// a writer that never lets go must not hang readers, or a pool's last drop waiting for
/// its scrubber). Never waits for this thread itself: `LockedByThisThread` if this thread's
/// transaction or `Detached` holds the stripe. Inside a transaction a wait could close a
/// cycle with another transaction: a conflict instead fails it, which re-runs the closure.
pub(crate) fn read_lock(eng: &Engine, off: u64) -> Result<u32> {
    let stripe = ObjectLocks::stripe(off);
    if held_by_this_thread(eng, stripe) {
        return Err(Error::locked_by_this_thread(off));
    }
    if let Some(p) = active(eng.id) {
        if !eng.objects.try_read(stripe) {
            // SAFETY: registered by `run` on this thread; that Tx is alive on its frame.
            let tx = unsafe { &*(p as *const Tx<'_>) };
            let e = Error::Conflict { offset: off };
            tx.poison(&e);
            return Err(e);
        }
    } else if !eng.objects.read_for(stripe, super::repair::WAIT) {
        // Its writer never let go in all that time: give up rather than hang.
        return Err(Error::Conflict { offset: off });
    }
    Ok(stripe)
}

/// `Error::Conflict` at `offset` for an operation this thread's open transaction of `eng`
/// must not wait for (its holder may need a lane, and this thread holds one): the
/// transaction is poisoned, so that `run` runs the closure again, its lane released
/// meanwhile.
pub(crate) fn conflict_in_tx(eng: &Engine, offset: u64) -> Error {
    let e = Error::Conflict { offset };
    if let Some(p) = active(eng.id) {
        // SAFETY: registered by `run` on this thread; that Tx is alive on its frame.
        unsafe { &*(p as *const Tx<'_>) }.poison(&e);
    }
    e
}

fn get_once<'p, T: Persistent>(eng: &'p Engine, oid: Oid<T>) -> Result<Ref<'p, T>> {
    if !eng.types.knows::<T>() {
        super::registry::check_outside::<T>(eng)?;
    }
    let off = oid.raw();
    let stripe = read_lock(eng, off)?;
    let guard = ReleaseOnErr {
        eng,
        stripe,
        armed: true,
    };
    let place = eng.heap.locate(off)?;
    let mut h = [0u8; 16];
    // SAFETY: located live object; the read lock excludes writers.
    unsafe { eng.media.read(off - HEADER_SIZE, &mut h) };
    let h = ObjectHeader::from_bytes(&h);
    Tx::check_type::<T>(off, &h, place.capacity)?;
    if eng.verify == VerifyPolicy::Conservative {
        verify_in_place(eng, off, &h)?;
    }
    let mut guard = guard;
    guard.armed = false;
    // SAFETY: we hold the stripe's read lock (released by Ref's drop); the object is a T.
    Ok(unsafe { Ref::new(eng.media.ptr(off) as *const T, eng, stripe) })
}

struct ReleaseOnErr<'a> {
    eng: &'a Engine,
    stripe: u32,
    armed: bool,
}
impl Drop for ReleaseOnErr<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.eng.objects.release(self.stripe, Held::Read);
        }
    }
}

/// The object lock stripe of an offset (for readers outside a transaction).
pub(crate) fn stripe_of(off: u64) -> u32 {
    ObjectLocks::stripe(off)
}
