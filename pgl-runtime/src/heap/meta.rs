//! Word-granular changes to heap metadata, gathered by a transaction and computed at commit
//! under the metadata locks (so concurrent changes to other bits of the same word compose).
//!
//! Invariant: a change is a function of the word's committed value: `new = (base.unwrap_or(cur)
//! & and) | or`; the result is logged and applied like any other range.

use std::collections::BTreeMap;

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
#[derive(Debug, Default)]
pub(crate) struct MetaOps {
    words: BTreeMap<u64, WordChange>,
}

impl MetaOps {
    /// Sets the word at `off` to `value`.
    pub(crate) fn set(&mut self, off: u64, value: u64) {
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
        let w = self.words.entry(off).or_default();
        w.or |= mask;
        w.and |= mask;
    }
    /// Clears the bits of `mask` in the word at `off`.
    pub(crate) fn clear_bits(&mut self, off: u64, mask: u64) {
        let w = self.words.entry(off).or_default();
        w.and &= !mask;
        w.or &= !mask;
    }
    /// Changes in ascending offset order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &WordChange)> {
        self.words.iter().map(|(k, v)| (*k, v))
    }
    /// Number of words changed.
    pub(crate) fn len(&self) -> usize {
        self.words.len()
    }
    /// Whether nothing changes.
    pub(crate) fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
    /// Forgets everything.
    pub(crate) fn clear(&mut self) {
        self.words.clear();
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
        let (_, w) = m.iter().nth(1).unwrap();
        assert_eq!(w.apply(u64::MAX), 4);
        assert_eq!(m.len(), 2);
    }
}
