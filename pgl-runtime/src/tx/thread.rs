//! What this thread holds, per engine: the transactions it is inside (nested `run`s), the
//! read locks of its `Ref`s, and its `Detached` handles. Lock attempts consult it to tell
//! a conflict another thread will end (retry) from one only this thread can end
//! (`Error::LockedByThisThread`).
//!
//! Invariant: an entry names a `Tx` alive on this thread: `run` registers its `Tx` for the
//! closure's duration (`Active`), and a `Detached` handle from `enter_detached` until
//! `leave_detached`, which it calls before freeing its `Tx`.

use super::engine::Engine;
use super::tx::Tx;
use std::cell::RefCell;

thread_local! {
    static ACTIVE: RefCell<Vec<(u64, usize)>> = const { RefCell::new(Vec::new()) };
    /// Read locks held by this thread's `Ref`s: (engine id, stripe, count).
    static REFS: RefCell<Vec<(u64, u32, u32)>> = const { RefCell::new(Vec::new()) };
}

/// Records that this thread took (`+1`) or released (`-1`) a `Ref` on `stripe`.
/// `try_with`: a `Ref` kept in a thread-local may be dropped after `REFS` is destroyed,
/// while its thread exits and holds nothing else; a panic there would abort the process.
pub(crate) fn note_ref(id: u64, stripe: u32, delta: i32) {
    let _ = REFS.try_with(|r| {
        let mut r = r.borrow_mut();
        match r.iter().position(|&(i, s, _)| i == id && s == stripe) {
            Some(k) if delta < 0 => {
                r[k].2 -= 1;
                if r[k].2 == 0 {
                    r.swap_remove(k);
                }
            }
            Some(k) => r[k].2 += 1,
            None if delta > 0 => r.push((id, stripe, 1)),
            None => {}
        }
    });
}

/// Whether this thread holds any `Ref` of engine `id` (none once `REFS` is destroyed).
pub(crate) fn any_ref_held(id: u64) -> bool {
    REFS.try_with(|r| r.borrow().iter().any(|&(i, _, _)| i == id))
        .unwrap_or(false)
}

pub(crate) fn ref_held(id: u64, stripe: u32) -> bool {
    REFS.try_with(|r| r.borrow().iter().any(|&(i, s, _)| i == id && s == stripe))
        .unwrap_or(false)
}

/// `run`'s registration of its `Tx` (`None`: not registered, see `enter`).
pub(super) struct Active(Option<u64>);
impl Active {
    /// Registers `tx` as this thread's open transaction of engine `id`. A thread whose
    /// thread-locals are being destroyed (a commit from another thread-local's destructor)
    /// cannot: its transaction runs unregistered, so a `pool.tx` nested in it starts a
    /// transaction of its own (which conflicts with it on shared objects) instead of
    /// joining it, and a `pool.get` of an object it holds waits and fails with `Conflict`
    /// instead of `LockedByThisThread`. A panic there would abort the process.
    pub(super) fn enter(id: u64, tx: &Tx<'_>) -> Active {
        let p = tx as *const Tx<'_> as usize;
        Active(
            ACTIVE
                .try_with(|a| a.borrow_mut().push((id, p)))
                .ok()
                .map(|()| id),
        )
    }
}
impl Drop for Active {
    fn drop(&mut self) {
        let Some(id) = self.0 else { return };
        let _ = ACTIVE.try_with(|a| {
            let mut a = a.borrow_mut();
            if let Some(i) = a.iter().rposition(|(i, _)| *i == id) {
                a.remove(i);
            }
        });
    }
}

/// Whether this thread is inside a transaction of `eng`.
pub(crate) fn in_tx(eng: &Engine) -> bool {
    active(eng.id).is_some()
}

/// This thread's open transaction of engine `id`, if registered (none once `ACTIVE` is
/// destroyed: see `Active::enter`).
pub(super) fn active(id: u64) -> Option<usize> {
    ACTIVE
        .try_with(|a| {
            a.borrow()
                .iter()
                .rev()
                .find(|(i, _)| *i == id)
                .map(|(_, p)| *p)
        })
        .ok()
        .flatten()
}

/// Whether this thread is inside a transaction of `eng` that holds `stripe`, or holds a
/// `Detached` handle of `eng` that does.
pub(super) fn held_by_this_thread(eng: &Engine, stripe: u32) -> bool {
    detached_holds(eng.id, stripe)
        || match active(eng.id) {
            // SAFETY: registered by `run` on this thread; that Tx is alive on its stack frame.
            Some(p) => unsafe { &*(p as *const Tx<'_>) }
                .st
                .try_borrow()
                .map(|st| st.lane.scratch.held.contains(stripe))
                .unwrap_or(true),
            None => false,
        }
}

thread_local! {
    /// This thread's `Detached` handles: (engine id, address of their `Tx`). Each holds a
    /// lane and an object's write lock while the thread runs other code, which must never
    /// wait for them: they are released only when this thread gets on.
    static DETACHED: RefCell<Vec<(u64, usize)>> = const { RefCell::new(Vec::new()) };
}

/// Records that `tx`, a `Detached` handle's transaction of engine `id` on this thread,
/// holds its lane and lock from now on until `leave_detached`.
/// (Unregistered once `DETACHED` is destroyed, as `Active::enter` is.)
pub(crate) fn enter_detached(id: u64, tx: &Tx<'_>) {
    let _ = DETACHED.try_with(|d| d.borrow_mut().push((id, tx as *const Tx<'_> as usize)));
}

/// Records that the `Detached` transaction `tx` is about to end (before it is freed).
pub(crate) fn leave_detached(tx: &Tx<'_>) {
    let p = tx as *const Tx<'_> as usize;
    // `try_with`: a `Detached` kept in a thread-local may be dropped after this one.
    let _ = DETACHED.try_with(|d| d.borrow_mut().retain(|&(_, q)| q != p));
}

/// Calls `f` on each `Detached` transaction of engine `id` this thread holds, until it
/// returns true; whether one did.
pub(super) fn any_detached(id: u64, mut f: impl FnMut(&Tx<'_>) -> bool) -> bool {
    DETACHED
        .try_with(|d| {
            d.borrow().iter().any(|&(i, p)| {
                // SAFETY: registered by `enter_detached` and removed by `leave_detached`
                // before the `Detached` frees its boxed Tx; a `Detached` is not `Send`, so
                // that Tx lives on this thread, which is running this code instead of
                // changing it.
                i == id && f(unsafe { &*(p as *const Tx<'_>) })
            })
        })
        .unwrap_or(false)
}

/// Whether this thread holds a `Detached` handle of engine `id`.
pub(crate) fn detached_held(id: u64) -> bool {
    any_detached(id, |_| true)
}

/// Whether a `Detached` handle of engine `id` held by this thread locks `stripe`.
pub(super) fn detached_holds(id: u64, stripe: u32) -> bool {
    any_detached(id, |tx| {
        tx.st
            .try_borrow()
            .is_ok_and(|st| st.lane.scratch.held.contains(stripe))
    })
}

/// Whether a `Detached` handle of engine `id` held by this thread holds lane `idx`.
pub(super) fn detached_lane(id: u64, idx: usize) -> bool {
    any_detached(id, |tx| tx.lane.idx == idx)
}
