//! Ranged writes: a transaction changes some bytes of an object without copying the rest
//! of it into a micro-buffer.
//!
//! `Tx::open` copies the whole object into a buffer and verifies its checksum: the handle
//! it returns shows all of it. To change 8 bytes of a 32 KiB object (a bucket of a hash
//! table's array) that copy is most of the transaction's work. `Tx::write_bytes` makes a
//! buffer *with holes* instead: the object is verified in place, as `open` would verify
//! its copy, and only the written bytes go into the buffer. The commit logs, applies and
//! patches the checksum over the written ranges, as for any buffer: it reads nothing of
//! the holes but those of up to `MERGE_GAP` bytes that it writes back unchanged between
//! two ranges (or before the first, with the checksum word), which it fills from the pool
//! first (`Buffer::fill_holes`).
//!
//! Invariant: a buffer's holes are read from the pool only while this transaction holds
//! the object's write lock, so no commit but its own changes them. Every access to the
//! buffer but a ranged write or a free (`Tx::buffered`: a read, an `open`) verifies the
//! object in the pool again and fills every hole: the buffer then holds verified bytes, as
//! `open`'s does. The short holes the commit fills are not verified again: a stray write
//! that reached one since the buffer was made is copied in. So the commit patches such a
//! buffer's checksum from the verified one over the changed ranges and never sums its
//! payload (`Buffer::patched`): stray bytes are not sealed under the new checksum, still
//! fail verification, and are repaired from parity, as they would be had the object been
//! opened whole.

use super::buffer::{BufKind, Buffer};
use super::tx::{verify_in_place, Tx};
use crate::persistent::{bytes_of, object_size, Oid, Persistent};
use crate::{Error, Result};

/// Objects of fewer payload bytes are opened whole for a ranged write: at 512 bytes, an
/// 8-byte change cost the same either way (2026-12-08; from 1 KiB up the ranged write was
/// faster), and below, copying the object can only cost less.
pub(crate) const RANGED_MIN: usize = 512;

impl<'p> Tx<'p> {
    /// Writes `value` at byte `offset` of the object, as [`Mut::write_at`] on
    /// `tx.open(oid)?` would, without copying the rest of the object: the cheap way to
    /// change a few bytes of a large object (an element of an array, a bucket of a
    /// table). The change reaches NVMM atomically at commit, with the transaction's
    /// others.
    ///
    /// The object is verified as `open` verifies it (under [`VerifyPolicy::Default`],
    /// its checksum), in place. Reads and opens of it later in the transaction see the
    /// write, and cost what `open` would have: the object is verified again and copied
    /// in whole. Objects under 512 bytes and types that own a tail (`#[extendible]`
    /// structs) are opened whole from the start.
    ///
    /// # Errors
    /// As [`Tx::open`]: the object is borrowed by a live handle of this transaction
    /// (`Error::AlreadyBorrowed`), locked by another transaction (`Error::Conflict`, which
    /// `pool.tx` retries), not a `T`, or damaged (repaired and retried by `pool.tx` where
    /// parity allows).
    ///
    /// # Panics
    /// If the value does not fit inside the object's `T` (a bug in the caller, like an
    /// index out of bounds).
    ///
    /// [`Mut::write_at`]: crate::Mut::write_at
    /// [`VerifyPolicy::Default`]: crate::VerifyPolicy::Default
    pub fn write_at<T: Persistent, F: Persistent>(
        &self,
        oid: Oid<T>,
        offset: usize,
        value: &F,
    ) -> Result<()> {
        self.write_bytes(oid, offset, bytes_of(value))
    }

    /// Writes `bytes` at byte `offset` of the object without copying the rest of it: see
    /// [`Tx::write_at`].
    ///
    /// # Errors
    /// As [`Tx::write_at`].
    ///
    /// # Panics
    /// If the range does not lie inside the object's `T`.
    pub fn write_bytes<T: Persistent>(
        &self,
        oid: Oid<T>,
        offset: usize,
        bytes: &[u8],
    ) -> Result<()> {
        let end = super::handle::write_end::<T>(offset, bytes.len());
        // An object that owns a tail keeps pgl's link in its last bytes (`tail`), which
        // the commit reads from the buffer: such objects, and small ones, are opened whole.
        // An extension group is opened whole too: its owner's chain code opens them.
        if T::__OWNS_TAIL || T::__GROUP || object_size::<T>() < RANGED_MIN {
            self.open(oid)?.write_bytes(offset, bytes);
            return Ok(());
        }
        self.check_layout::<T>(false)?;
        let off = oid.raw();
        let mut st = self.st.borrow_mut();
        let mut b = match self.buffer_of_with_holes::<T>(&st, off)? {
            Some(b) => b,
            None => {
                let h = self.lock_for_update::<T>(&mut st, off)?;
                // Verified where it lies: what `open` checks of its copy. Failing, the object
                // is refused for the rest of the transaction, as `open` refuses it.
                if let Err(e) = verify_in_place(self.eng, off, &h) {
                    st.lane.scratch.index.insert(off, usize::MAX);
                    return Err(e);
                }
                let mut p =
                    self.new_buffer(&mut st, off, h.size as usize, h.type_id, BufKind::Open);
                // SAFETY: just created; no handle to it exists yet.
                let buf = unsafe { p.as_mut() };
                buf.checksum = h.checksum;
                buf.set_holes();
                p
            }
        };
        // SAFETY: buffers live until the transaction ends; `borrow` guards aliasing, and
        // no handle borrows it (checked first).
        let buf: &mut Buffer = unsafe { b.as_mut() };
        if buf.borrow != 0 {
            return Err(Error::already_borrowed(off));
        }
        buf.payload_mut()[offset..end].copy_from_slice(bytes);
        buf.mark(offset, end);
        Ok(())
    }
}
