//! Word-granular changes to heap metadata, gathered by a transaction and computed at commit
//! under the metadata locks (so concurrent changes to other bits of the same word compose).
//!
//! Invariant: a change is a function of the word's committed value: `new = (base.unwrap_or(cur)
//! & and) | or`; the result is logged and applied like any other range.

use crate::smallmap::SmallMap;

/// One word's pending change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WordChange {
    base: Option<u64>,
    and: u64,
    or: u64,
}

impl WordChange {
    /// The new value given the committed value `cur`.
    pub(crate) fn apply(&self, cur: u64) -> u64 {
        (self.base.unwrap_or(cur) & self.and) | self.or
    }
}

impl Default for WordChange {
    fn default() -> Self {
        WordChange {
            base: None,
            and: !0,
            or: 0,
        }
    }
}

/// The metadata changes of one transaction, by word offset.
#[derive(Default)]
pub(crate) struct MetaOps {
    words: SmallMap<u64, WordChange>,
    sorted: bool,
}

impl MetaOps {
    /// Whether no word changes.
    pub(crate) fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Sets the word at `off` to `value`.
    pub(crate) fn set(&mut self, off: u64, value: u64) {
        debug_assert!(!self.sorted);
        self.words.insert(
            off,
            WordChange {
                base: Some(value),
                and: !0,
                or: 0,
            },
        );
    }
    /// Sets the bits of `mask` in the word at `off`.
    pub(crate) fn set_bits(&mut self, off: u64, mask: u64) {
        debug_assert!(!self.sorted);
        let w = self.words.entry_or_insert_with(off, WordChange::default);
        w.or |= mask;
        w.and |= mask;
    }
    /// Clears the bits of `mask` in the word at `off`.
    pub(crate) fn clear_bits(&mut self, off: u64, mask: u64) {
        debug_assert!(!self.sorted);
        let w = self.words.entry_or_insert_with(off, WordChange::default);
        w.and &= !mask;
        w.or &= !mask;
    }
    /// Sorts the changes by offset; no change may be added afterwards (until `clear`).
    pub(crate) fn sort(&mut self) {
        self.words.items_mut().sort_unstable_by_key(|(k, _)| *k);
        self.sorted = true;
    }
    /// The changes (in ascending offset order after `sort`).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &WordChange)> {
        self.words.iter().map(|(k, v)| (*k, v))
    }
    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.words.clear();
        self.sorted = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_compose() {
        let mut m = MetaOps::default();
        m.set_bits(8, 0b1010);
        m.clear_bits(8, 0b0010);
        m.set_bits(8, 0b0001);
        let (_, w) = m.iter().next().unwrap();
        assert_eq!(w.apply(0b0110_0000), 0b0110_1001);
        m.set(16, 0);
        m.set_bits(16, 4);
        m.set_bits(0, 1);
        m.sort();
        assert_eq!(m.iter().map(|(o, _)| o).collect::<Vec<_>>(), vec![0, 8, 16]);
        let (_, w) = m.iter().nth(2).unwrap();
        assert_eq!(w.apply(u64::MAX), 4);
        assert_eq!(m.iter().count(), 3);
    }
}
