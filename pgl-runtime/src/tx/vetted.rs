//! Objects a transaction has found live in place, and of which type: a second `get` (or an
//! `open` after a `get`) of one skips `Heap::locate` and the header check, a third to a
//! half of a cached read. A tree walk reads a node's key and then its child link; a
//! read-modify-write reads an object, then opens it.
//!
//! An entry is made once the transaction holds the object's lock and has checked that a
//! live `T` lies there, and the transaction keeps that lock until it ends, when the entries
//! go: no other transaction can free the object or put another in its place meanwhile.
//! This transaction's own changes are found first, in its buffers (an `open` or a `free`
//! makes one), so an entry is never consulted for an object the transaction freed or
//! changed. Direct-mapped and small: a miss costs what no entry would, and a transaction
//! reading thousands of objects keeps only the latest few.
//!
//! An entry may also say that the object's checksum verified while the transaction held
//! its lock (`note_vouched`): its bytes, the extension link that ends them included, are
//! then pgl's until the transaction ends (see `Tx::vouch`).

use crate::persistent::{object_size, Persistent};

/// Slots: a power of two.
const SLOTS: usize = 32;

/// See the module docs.
#[derive(Default)]
pub(crate) struct Vetted {
    /// `(offset, type key)` of each slot, meaningful where `valid` has its bit.
    slots: [(u64, u64); SLOTS],
    valid: u32,
    /// The slots whose object's checksum verified too (`note_vouched`): a subset of
    /// `valid`.
    vouched: u32,
}

/// What an entry was vetted as: a `T`, by its type id and object size (a `T` of another
/// build with the same id differs in size).
#[inline]
pub(crate) fn key<T: Persistent>() -> u64 {
    type_key(T::TYPE_ID, object_size::<T>())
}

#[inline]
fn type_key(type_id: u32, size: usize) -> u64 {
    u64::from(type_id) | (size as u64) << 32
}

#[inline]
fn slot(off: u64) -> usize {
    // Payloads are 16-byte aligned, and neighbours in a tree or list are often a block
    // apart: the low bits above the alignment spread them.
    (off >> 4) as usize % SLOTS
}

impl Vetted {
    /// Whether the object at `off` was vetted as `key` in this transaction.
    #[inline]
    pub(crate) fn holds(&self, off: u64, key: u64) -> bool {
        let i = slot(off);
        self.valid & (1 << i) != 0 && self.slots[i] == (off, key)
    }

    /// Whether the object at `off` was vetted as `key` and its checksum verified in this
    /// transaction (`note_vouched`).
    #[inline]
    pub(crate) fn vouched(&self, off: u64, key: u64) -> bool {
        let i = slot(off);
        self.vouched & (1 << i) != 0 && self.slots[i] == (off, key)
    }

    /// Records that the object at `off`, vetted as `key`, verified against its checksum
    /// (replacing the slot's entry).
    #[inline]
    pub(crate) fn note_vouched(&mut self, off: u64, key: u64) {
        self.note(off, key);
        self.vouched |= 1 << slot(off);
    }

    /// Records that the object at `off` was vetted as `key` (replacing the slot's entry).
    #[inline]
    pub(crate) fn note(&mut self, off: u64, key: u64) {
        let i = slot(off);
        self.slots[i] = (off, key);
        self.valid |= 1 << i;
        self.vouched &= !(1 << i);
    }

    /// Forgets every entry (the transaction ends and releases its locks).
    #[inline]
    pub(crate) fn clear(&mut self) {
        self.valid = 0;
        self.vouched = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::{type_key, Vetted, SLOTS};

    #[test]
    fn holds_what_was_noted_until_cleared_or_replaced() {
        let mut v = Vetted::default();
        let (a, b) = (0x1_0010, 0x1_0010 + 16 * SLOTS as u64); // the same slot
        let k = type_key(7, 32);
        assert!(!v.holds(a, k));
        v.note(a, k);
        assert!(v.holds(a, k));
        assert!(!v.holds(a, type_key(7, 40)), "another size");
        assert!(!v.holds(a, type_key(8, 32)), "another type");
        v.note(b, k);
        assert!(v.holds(b, k) && !v.holds(a, k), "b replaced a");
        v.note(a + 16, k);
        assert!(v.holds(a + 16, k) && v.holds(b, k));
        v.clear();
        assert!(!v.holds(b, k) && !v.holds(a + 16, k));
    }

    #[test]
    fn a_vouched_entry_is_vetted_too_and_a_vetted_one_is_not_vouched() {
        let mut v = Vetted::default();
        let (a, k) = (0x2_0000, type_key(9, 48));
        v.note(a, k);
        assert!(v.holds(a, k) && !v.vouched(a, k), "vetted, not verified");
        v.note_vouched(a, k);
        assert!(v.holds(a, k) && v.vouched(a, k));
        assert!(!v.vouched(a, type_key(9, 56)) && !v.holds(a, type_key(9, 56)));
        v.note(a, k);
        assert!(!v.vouched(a, k), "a plain note replaces the vouched entry");
        v.note_vouched(a, k);
        let b = a + 16 * SLOTS as u64; // the same slot
        v.note(b, k);
        assert!(
            !v.vouched(b, k) && !v.vouched(a, k),
            "b took a's slot, unverified"
        );
        v.note_vouched(a, k);
        v.clear();
        assert!(!v.holds(a, k) && !v.vouched(a, k));
        // A key of any size: an object of 2 GiB or more is vetted, not vouched, as any.
        let huge = type_key(9, 3 << 31);
        v.note(a, huge);
        assert!(v.holds(a, huge) && !v.vouched(a, huge));
    }
}
