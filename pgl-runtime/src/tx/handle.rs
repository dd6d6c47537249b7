//! Typed handles: `Mut` (a micro-buffer a transaction may change), `Read` (a read view
//! inside a transaction) and `Ref` (a read view outside any transaction, holding the
//! object's read lock).
//!
//! Invariant: a handle's reference is valid for its lifetime: a `Mut` holds its buffer's
//! exclusive borrow, a `Read` a shared borrow (of a buffer, or of the object in place,
//! counted in [`InPlaceReads`], under the transaction's read lock), a `Ref` the stripe's
//! read lock; no writer can change those bytes meanwhile, and the transaction makes no
//! second, diverging view of them (it refuses to open or free an object borrowed so).

use super::buffer::Buffer;
use super::engine::Engine;
use super::locks::Held;
use super::place::Place;
use crate::persistent::{Oid, Persistent};
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use std::cell::RefCell;

/// A micro-buffer handle: the transaction's private copy of one object.
///
/// Reading derefs to `&T`; `DerefMut` marks the whole object modified (the commit logs an
/// object of more than 64 bytes from the first byte it finds changed to the last); the
/// `write_*` methods (and the field setters `#[derive(Persistent)]` generates) mark only
/// what they change, so commit logs and checksums only that.
pub struct Mut<'tx, T: Persistent> {
    buf: NonNull<Buffer>,
    _tx: PhantomData<&'tx ()>,
    _t: PhantomData<*mut T>,
}

impl<'tx, T: Persistent> Mut<'tx, T> {
    /// # Safety
    /// `buf` must point to a live buffer of a `T` whose borrow flag the caller just set to
    /// exclusive (-1), and stay live for `'tx`.
    pub(crate) unsafe fn new(buf: NonNull<Buffer>) -> Self {
        Mut {
            buf,
            _tx: PhantomData,
            _t: PhantomData,
        }
    }

    fn buf(&self) -> &Buffer {
        // SAFETY: live for 'tx and exclusively borrowed by this handle (see `new`).
        unsafe { self.buf.as_ref() }
    }

    pub(crate) fn buf_mut(&mut self) -> &mut Buffer {
        // SAFETY: as above; `&mut self` makes this the only access.
        unsafe { self.buf.as_mut() }
    }

    /// The object's oid.
    pub fn oid(&self) -> Oid<T> {
        Oid::from_raw(self.buf().off)
    }

    /// The place of the whole object: [`Place::set`], [`Place::project`] and the field
    /// setters `#[derive(Persistent)]` generates change it marking only what they write.
    pub fn place(&mut self) -> Place<'_, T> {
        // SAFETY: the buffer is live and exclusively borrowed by this handle for 'tx (see
        // `new`); the place borrows the handle; offset 0 holds the `T`, 16-byte aligned.
        unsafe { Place::new(self.buf, 0) }
    }

    /// Writes `value` at byte `offset` of the object and marks those bytes modified.
    ///
    /// # Panics
    /// If the value does not fit inside the object (a bug in the caller, like an index out
    /// of bounds).
    pub fn write_at<F: Persistent>(&mut self, offset: usize, value: &F) {
        self.write_bytes(offset, crate::persistent::bytes_of(value));
    }

    /// Writes `bytes` at byte `offset` of the object and marks them modified.
    ///
    /// # Panics
    /// If the range does not lie inside the object.
    pub fn write_bytes(&mut self, offset: usize, bytes: &[u8]) {
        let end = write_end::<T>(offset, bytes.len());
        let buf = self.buf_mut();
        buf.payload_mut()[offset..end].copy_from_slice(bytes);
        buf.mark(offset, end);
    }

    /// The object's whole payload: its value, then its reserve (if it has one).
    pub(crate) fn payload(&self) -> &[u8] {
        self.buf().payload()
    }

    /// The object's bytes (its value: not the reserve of an `#[extendible(reserve = N)]`
    /// object, which is pgl's).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf().payload()[..core::mem::size_of::<T>()]
    }

    /// The buffer, for a view of part of it that takes over this handle's borrow
    /// (`leds::GroupPlace`).
    pub(crate) fn buf_ptr(&mut self) -> NonNull<Buffer> {
        self.buf
    }
}

impl<T: Persistent> Deref for Mut<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: aligned, initialised, valid for any bytes; no `&mut` exists meanwhile
        // because `&self` borrows this exclusive handle.
        unsafe { &*(self.buf().payload().as_ptr() as *const T) }
    }
}

impl<T: Persistent> DerefMut for Mut<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // Any byte may change, or none: the commit compares (`Buffer::narrow`).
        self.buf_mut().mark_whole_borrow();
        let p = self.buf_mut().payload_ptr() as *mut T;
        // SAFETY: the payload is 16-byte aligned, holds `size_of::<T>()` initialised bytes,
        // any bytes are a valid `T`, and the exclusive borrow makes this the only reference.
        unsafe { &mut *p }
    }
}

impl<T: Persistent> Drop for Mut<'_, T> {
    /// Ends the borrow, first putting back the extension link of an `#[extendible]`
    /// object if the handle wrote over it (the link is pgl's: see `tx::tail`).
    fn drop(&mut self) {
        let buf = self.buf_mut();
        if T::__OWNS_TAIL {
            super::tail::keep_link(buf);
        }
        buf.borrow = 0;
    }
}

impl<T: Persistent + core::fmt::Debug> core::fmt::Debug for Mut<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}

pub(crate) enum ReadSource<'tx> {
    /// A buffer of this transaction, shared-borrowed.
    Buffer(NonNull<Buffer>),
    /// NVMM, under a lock the transaction holds until it ends: the object at this offset,
    /// borrowed in the transaction's [`InPlaceReads`] until the handle is dropped.
    InPlace(&'tx InPlaceReads, u64),
}

/// The objects a transaction reads in place (`tx.get` of an object it has no buffer of),
/// with how many live `Read`s borrow each: such an object cannot be opened for update
/// (the copy would diverge from what those handles show) or freed until they are
/// dropped, as a buffered object cannot while a `Read` borrows its buffer.
///
/// The counts ([`LiveReads`]) are taken from the lane at the transaction's first in-place
/// read and given back at its end (`Scratch::reads`): a transaction that reads nothing in
/// place, the usual writer, pays nothing for them, and the transaction itself stays small
/// (it is moved as it starts).
///
/// Invariant: a count is raised when an in-place `Read` is made and lowered when it is
/// dropped (an entry goes at 0); a forgotten `Read` keeps its object borrowed until the
/// transaction ends. The borrows of the inner cell never call out, so they never overlap.
#[derive(Default)]
pub(crate) struct InPlaceReads(RefCell<Option<Box<LiveReads>>>);

/// Objects borrowed inline: enough for the `Read`s a transaction usually holds at once.
const INLINE: usize = 8;

/// Live in-place `Read`s by object offset. A transaction usually holds a few at once (a
/// tree walk holds one or two), so the first `INLINE` objects are kept in an array,
/// searched linearly; more spill into a map.
///
/// Invariant: `inline[..n]` holds offsets with counts above 0; an object is in the inline
/// part or in the map, never both.
#[derive(Default)]
pub(crate) struct LiveReads {
    inline: [(u64, u32); INLINE],
    n: usize,
    spill: ReadCounts,
}

/// Live in-place `Read`s by object offset, past the inline ones.
type ReadCounts = crate::smallmap::SmallMap<u64, u32>;

impl LiveReads {
    #[inline]
    fn position(&self, off: u64) -> Option<usize> {
        self.inline[..self.n].iter().position(|&(o, _)| o == off)
    }

    fn enter(&mut self, off: u64) {
        if let Some(i) = self.position(off) {
            self.inline[i].1 += 1;
        } else if self.n < INLINE && (self.spill.is_empty() || self.spill.get(&off).is_none()) {
            self.inline[self.n] = (off, 1);
            self.n += 1;
        } else {
            *self.spill.entry_or_insert_with(off, || 0) += 1;
        }
    }

    fn leave(&mut self, off: u64) {
        // Only live borrows are kept: a transaction that reads many objects in turn holds
        // an entry for each of the few it reads at once, not for all of them.
        if let Some(i) = self.position(off) {
            self.inline[i].1 -= 1;
            if self.inline[i].1 == 0 {
                self.n -= 1;
                self.inline[i] = self.inline[self.n];
            }
        } else {
            self.spill.update_or_remove(&off, |n| {
                *n = n.saturating_sub(1);
                *n == 0
            });
        }
    }

    fn borrowed(&self, off: u64) -> bool {
        self.position(off).is_some() || self.spill.get(&off).is_some_and(|&n| n > 0)
    }
}

impl InPlaceReads {
    /// Gives the counts back (emptied) for the lane's next transaction, if this one took
    /// them.
    pub(crate) fn take(&self) -> Option<Box<LiveReads>> {
        let mut live = self.0.borrow_mut().take()?;
        live.n = 0;
        live.spill.clear();
        Some(live)
    }

    /// Counts one more live in-place `Read` of the object at `off`; the first one takes
    /// the lane's counts (`spare`), or new ones.
    #[inline]
    pub(crate) fn enter(&self, off: u64, spare: &mut Option<Box<LiveReads>>) {
        let mut cell = self.0.borrow_mut();
        cell.get_or_insert_with(|| spare.take().unwrap_or_default())
            .enter(off);
    }

    /// Counts one `Read` of the object at `off` fewer.
    #[inline]
    fn leave(&self, off: u64) {
        if let Some(live) = self.0.borrow_mut().as_mut() {
            live.leave(off);
        }
    }

    /// Whether a live in-place `Read` borrows the object at `off`.
    pub(crate) fn borrowed(&self, off: u64) -> bool {
        self.0
            .borrow()
            .as_ref()
            .is_some_and(|live| live.borrowed(off))
    }
}

/// A read view of an object inside a transaction.
pub struct Read<'tx, T: Persistent> {
    ptr: *const T,
    src: ReadSource<'tx>,
}

impl<'tx, T: Persistent> Read<'tx, T> {
    /// # Safety
    /// `ptr` must point to a valid `T`, followed by its `T::__RESERVE` bytes of reserve,
    /// that no one changes for `'tx`: a buffer shared-borrowed by this handle, or NVMM
    /// under the transaction's lock. For `InPlace`, the caller has counted this handle's
    /// borrow in the transaction's `InPlaceReads` (`enter`).
    pub(crate) unsafe fn new(ptr: *const T, src: ReadSource<'tx>) -> Self {
        Read { ptr, src }
    }

    /// Where the object's payload starts: its value, then its `T::__RESERVE` bytes of
    /// reserve, valid and unchanged for as long as this handle is borrowed (see `new`).
    #[inline]
    pub(crate) fn payload_ptr(&self) -> *const u8 {
        self.ptr as *const u8
    }

    /// A handle of the same object, holding this one's borrow, that reads the value and
    /// reserve at `ptr` instead: a copy of them (the view of an `upgrade = on_write`
    /// object, its missing groups built in DRAM: `leds::chain`). The borrow still keeps the
    /// object from being opened for update or freed while the copy is shown.
    ///
    /// # Safety
    /// `ptr` must point to a valid `T`, followed by its `T::__RESERVE` bytes, aligned as
    /// the pool aligns payloads, that nothing changes or frees while the returned handle
    /// lives.
    pub(crate) unsafe fn over(self, ptr: *const T) -> Read<'tx, T> {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the borrow its source counts is moved, not
        // duplicated: the returned handle gives it back once, when dropped.
        let src = unsafe { core::ptr::read(&this.src) };
        Read { ptr, src }
    }
}

impl<T: Persistent> Deref for Read<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: see `new`.
        unsafe { &*self.ptr }
    }
}

impl<T: Persistent> Drop for Read<'_, T> {
    fn drop(&mut self) {
        match self.src {
            // SAFETY: the buffer lives as long as the transaction, which outlives 'tx.
            ReadSource::Buffer(mut b) => unsafe { b.as_mut().borrow -= 1 },
            ReadSource::InPlace(reads, off) => reads.leave(off),
        }
    }
}

/// A read view of an object outside any transaction (`pool.get`). Holds the object's read
/// lock: transactions that want to change it wait (retry) until the `Ref` is dropped.
pub struct Ref<'p, T: Persistent> {
    ptr: *const T,
    eng: &'p Engine,
    stripe: u32,
}

impl<'p, T: Persistent> Ref<'p, T> {
    /// # Safety
    /// The caller holds the read lock of `stripe`, which covers the valid `T` at `ptr`.
    pub(crate) unsafe fn new(ptr: *const T, eng: &'p Engine, stripe: u32) -> Self {
        super::thread::note_ref(eng.id, stripe, 1);
        Ref { ptr, eng, stripe }
    }
}

impl<T: Persistent> Deref for Ref<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the read lock held by this handle excludes writers; the bytes are a valid T.
        unsafe { &*self.ptr }
    }
}

impl<T: Persistent> Drop for Ref<'_, T> {
    fn drop(&mut self) {
        super::thread::note_ref(self.eng.id, self.stripe, -1);
        self.eng.objects.release(self.stripe, Held::Read);
    }
}

// A `Ref` is not `Send`: this thread's transactions must know which read locks the thread
// holds (to fail at once instead of retrying against themselves), so it is dropped where it
// was made, like a `MutexGuard`.
// SAFETY: shared access to `&T` where `T: Sync`.
unsafe impl<T: Persistent> Sync for Ref<'_, T> {}

/// The end of a write of `len` bytes at `offset` into a `T`'s value (not the reserve of an
/// `#[extendible(reserve = N)]` object, which is pgl's).
///
/// # Panics
/// If the range does not lie inside the value: a bug in the caller, like an index out of
/// bounds.
pub(super) fn write_end<T: Persistent>(offset: usize, len: usize) -> usize {
    let size = core::mem::size_of::<T>();
    offset
        .checked_add(len)
        .filter(|&e| e <= size)
        .unwrap_or_else(|| {
            panic!("write of {len} bytes at offset {offset} outside a {size}-byte object")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn in_place_reads_count_like_a_map_inline_and_spilled() {
        // Up to 20 objects borrowed at once (past the inline ones), counts up and down.
        let reads = InPlaceReads::default();
        let mut spare = None;
        let mut spilled = false;
        let mut model: HashMap<u64, u32> = HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let off = (x % 20) * 64;
            let live = model.get(&off).copied().unwrap_or(0);
            if x & (1 << 40) != 0 || live == 0 {
                reads.enter(off, &mut spare);
                *model.entry(off).or_default() += 1;
            } else {
                reads.leave(off);
                let n = model.get_mut(&off).unwrap();
                *n -= 1;
                if *n == 0 {
                    model.remove(&off);
                }
            }
            for k in 0..20 {
                assert_eq!(
                    reads.borrowed(k * 64),
                    model.contains_key(&(k * 64)),
                    "object {k} after step {step}"
                );
            }
            let cell = reads.0.borrow();
            let live = cell.as_ref().expect("taken at the first read");
            let inline = &live.inline[..live.n];
            assert!(inline
                .iter()
                .all(|&(o, n)| n > 0 && live.spill.get(&o).is_none()));
            spilled |= !live.spill.is_empty();
        }
        assert!(spilled, "more than INLINE were live at once");
        // The counts go back to the lane emptied.
        let live = reads.take().expect("taken at the first read");
        assert!(live.n == 0 && live.spill.is_empty());
    }
}
