//! `Reservation`: a record's LSN and its bytes in the log, between `reserve` and
//! `complete`.
//!
//! Invariant: the payload bytes belong to the reservation alone until it is completed or
//! dropped (reserve hands each range out once; readers stop before incomplete records), and
//! every reservation ends sealed — completed, or aborted by `Drop` — so later LSNs can be
//! forced.

use super::format::{AREA_OFFSET, HEADER_LEN};
use super::log::{Log, Lsn};
use std::marker::PhantomData;

/// A reserved record: its LSN and its payload bytes in the log, to fill in place
/// (`Reservation` dereferences to `[u8]`), then pass to [`Log::complete`].
///
/// A reservation stays on the thread that made it (it is not `Send`; it is `Sync`): the
/// log knows which thread holds each open record, so a thread's force never waits for a
/// record it holds itself (see [`Log::reserve`]). Copy into it from any data you like;
/// hand the data, not the reservation, to other threads.
///
/// Never leak one (`std::mem::forget`, a reference cycle): like a forgotten `MutexGuard`,
/// a leaked reservation stays open for good. Records are made durable in LSN order, so
/// from then on this thread's forces past it return [`Error::LogReservationHeld`] and other
/// threads' forces past it wait forever. Reopening the log ends it before the open record
/// (no force reported a later record durable).
///
/// [`Error::LogReservationHeld`]: crate::Error::LogReservationHeld
///
/// ```compile_fail
/// # use pgl_runtime::log::{Log, LogConfig};
/// # let path = std::env::temp_dir().join("pgl-doc-reservation-not-send");
/// let log = Log::create(&path, LogConfig::new(1 << 20))?;
/// let log = &log;
/// let res = log.reserve(8)?;
/// std::thread::scope(|s| {
///     s.spawn(move || log.complete(res)); // a reservation is not Send
/// });
/// # Ok::<(), pgl_runtime::Error>(())
/// ```
pub struct Reservation<'a> {
    pub(super) log: &'a Log,
    pub(super) lsn: Lsn,
    /// Area offset of the record (its header).
    pub(super) off: u64,
    pub(super) len: usize,
    /// Not yet completed: dropping it seals an aborted record.
    pub(super) open: bool,
    /// Not `Send`: the thread that reserved the record completes it.
    pub(super) _on_its_thread: PhantomData<*const ()>,
}

impl Reservation<'_> {
    /// The record's LSN.
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }
}

// Not `Send` (its marker): the log's force finds the caller's own open records by the
// thread that reserved them. `Sync` is kept: a shared `&Reservation` reads the LSN and the
// payload, as a `&[u8]` would.
// SAFETY: through `&Reservation` only `lsn` and `deref` (a `&[u8]` of the payload, which
// belongs to the reservation alone until it is completed) are reachable, and both are safe
// to use from several threads at once; `complete` and `Drop` need the reservation by value.
unsafe impl Sync for Reservation<'_> {}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("lsn", &self.lsn)
            .field("len", &self.len)
            .finish()
    }
}

impl std::ops::Deref for Reservation<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the payload bytes belong to this reservation alone until it is completed
        // (reserve hands each range out once; readers stop before incomplete records).
        unsafe {
            std::slice::from_raw_parts(
                self.log.media.ptr(AREA_OFFSET + self.off + HEADER_LEN) as *const u8,
                self.len,
            )
        }
    }
}

impl std::ops::DerefMut for Reservation<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`; `&mut self` makes this the only borrow of the range.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.log.media.ptr(AREA_OFFSET + self.off + HEADER_LEN),
                self.len,
            )
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.open {
            // Never completed (an error or a panic while filling it): seal it as aborted so
            // that later records can still be forced.
            self.log.abort(self.lsn, self.off, self.len);
        }
    }
}
