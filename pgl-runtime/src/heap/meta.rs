//! Word-granular changes to heap metadata, gathered by a transaction and computed at commit
//! under the metadata locks (so concurrent changes to other bits of the same word compose).
//!
//! Invariant: a change is a function of the word's committed value: `new = (base.unwrap_or(cur)
//! & and) | or`, re-sealed with its check when the word is a checked bitmap word (see
//! `layout::bitmap_word`); the result is logged and applied like any other range. A
//! checked word's committed value is used only once it verifies, so a scribbled word is
//! never re-sealed as valid.

use super::layout::{bitmap_bits, bitmap_word};
use crate::smallmap::SmallMap;

/// One word's pending change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WordChange {
    base: Option<u64>,
    and: u64,
    or: u64,
    /// A checked bitmap word: bits 0..32 change, the check follows them.
    checked: bool,
}

impl WordChange {
    /// The new value of the word at `off` given its committed value `cur`; `None` if the
    /// change depends on `cur` and `cur` is a checked word that does not verify (damage:
    /// the commit must not build on it).
    pub(crate) fn apply(&self, off: u64, cur: u64) -> Option<u64> {
        let base = match self.base {
            Some(b) => b,
            None if self.checked => u64::from(bitmap_bits(off, cur)?),
            None => cur,
        };
        let v = (base & self.and) | self.or;
        Some(if self.checked {
            bitmap_word(off, v as u32)
        } else {
            v
        })
    }
}

impl Default for WordChange {
    fn default() -> Self {
        WordChange {
            base: None,
            and: !0,
            or: 0,
            checked: false,
        }
    }
}

/// The metadata changes of one transaction, by word offset.
#[derive(Default)]
pub(crate) struct MetaOps {
    words: SmallMap<u64, WordChange>,
    /// Ranges `(off, len)` set to zero whole (new plain runs' bitmaps): their words' old
    /// bytes are nobody's, and the commit zeroes those that are not zero with one record
    /// entry instead of logging each.
    zeroed: Vec<(u64, u64)>,
    sorted: bool,
}

impl MetaOps {
    /// Whether no word changes.
    pub(crate) fn is_empty(&self) -> bool {
        self.words.is_empty() && self.zeroed.is_empty()
    }

    /// Sets every word of `[off, off + len)` to zero (`off` and `len` multiples of 8): the
    /// words a plain run's bitmap takes in a chunk this transaction claimed. Later changes
    /// to those words build on zero, not on their committed values.
    pub(crate) fn zero(&mut self, off: u64, len: u64) {
        debug_assert!(!self.sorted);
        debug_assert!(off % 8 == 0 && len % 8 == 0);
        self.zeroed.push((off, len));
    }

    /// The ranges set to zero (see `zero`).
    #[inline]
    pub(crate) fn zeroed(&self) -> &[(u64, u64)] {
        &self.zeroed
    }

    /// Whether the word at `off` lies in a range set to zero.
    #[inline]
    pub(crate) fn is_zeroed(&self, off: u64) -> bool {
        in_ranges(&self.zeroed, off)
    }

    /// The change of the word at `off`, created as "no change" if there is none yet.
    #[inline]
    fn entry(&mut self, off: u64) -> &mut WordChange {
        if self.zeroed.is_empty() {
            // The common case, kept as lean as it was before zeroed ranges.
            return self.words.entry_or_insert_with(off, WordChange::default);
        }
        let zeroed = &self.zeroed;
        self.words.entry_or_insert_with(off, || WordChange {
            base: in_ranges(zeroed, off).then_some(0),
            ..WordChange::default()
        })
    }

    /// Sets the word at `off` to `value` (a checked bitmap word: its sealed value).
    pub(crate) fn set(&mut self, off: u64, value: u64) {
        debug_assert!(!self.sorted);
        self.words.insert(
            off,
            WordChange {
                base: Some(value),
                and: !0,
                or: 0,
                checked: false,
            },
        );
    }
    /// Sets the bits of `mask` in the word at `off` (a checked bitmap word if `checked`:
    /// `mask` within bits 0..32).
    #[inline]
    pub(crate) fn set_bits(&mut self, off: u64, mask: u64, checked: bool) {
        debug_assert!(!self.sorted);
        debug_assert!(!checked || mask >> 32 == 0);
        let w = self.entry(off);
        w.or |= mask;
        w.and |= mask;
        w.checked |= checked;
    }
    /// Clears the bits of `mask` in the word at `off` (see `set_bits`).
    #[inline]
    pub(crate) fn clear_bits(&mut self, off: u64, mask: u64, checked: bool) {
        debug_assert!(!self.sorted);
        debug_assert!(!checked || mask >> 32 == 0);
        let w = self.entry(off);
        w.and &= !mask;
        w.or &= !mask;
        w.checked |= checked;
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
        self.zeroed.clear();
        self.sorted = false;
    }
}

/// Whether `off` lies in one of the ranges `(off, len)` of `ranges`.
#[inline]
fn in_ranges(ranges: &[(u64, u64)], off: u64) -> bool {
    ranges.iter().any(|&(a, n)| off >= a && off - a < n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_compose() {
        let mut m = MetaOps::default();
        m.set_bits(8, 0b1010, false);
        m.clear_bits(8, 0b0010, false);
        m.set_bits(8, 0b0001, false);
        let (_, w) = m.iter().next().unwrap();
        assert_eq!(w.apply(8, 0b0110_0000), Some(0b0110_1001));
        m.set(16, 0);
        m.set_bits(16, 4, false);
        m.set_bits(0, 1, false);
        m.sort();
        assert_eq!(m.iter().map(|(o, _)| o).collect::<Vec<_>>(), vec![0, 8, 16]);
        let (_, w) = m.iter().nth(2).unwrap();
        assert_eq!(w.apply(16, u64::MAX), Some(4));
        assert_eq!(m.iter().count(), 3);
    }

    #[test]
    fn checked_words_are_resealed_and_damage_is_refused() {
        let off = 4096;
        let mut m = MetaOps::default();
        m.set_bits(off, 0b100, true);
        m.clear_bits(off, 0b001, true);
        let (_, w) = m.iter().next().unwrap();
        let cur = bitmap_word(off, 0b011);
        assert_eq!(w.apply(off, cur), Some(bitmap_word(off, 0b110)));
        // A committed word that does not verify is not built on.
        assert_eq!(w.apply(off, cur ^ 1 << 40), None);
        assert_eq!(w.apply(off, cur ^ 1 << 3), None);
        // A word set whole (a new run's) and then changed needs no committed value.
        let mut m = MetaOps::default();
        m.set(off, bitmap_word(off, 0));
        m.set_bits(off, 1, true);
        let (_, w) = m.iter().next().unwrap();
        assert_eq!(w.apply(off, 0xdead), Some(bitmap_word(off, 1)));
    }

    #[test]
    fn words_of_a_zeroed_range_build_on_zero() {
        let mut m = MetaOps::default();
        assert!(m.is_empty());
        m.zero(4096, 64);
        assert!(!m.is_empty(), "a zeroed range is a change");
        m.set_bits(4096 + 8, 0b101, false);
        m.clear_bits(4096 + 56, 1, false);
        m.set_bits(4096 + 64, 0b10, false);
        assert!(m.is_zeroed(4096) && m.is_zeroed(4096 + 56));
        assert!(!m.is_zeroed(4096 + 64) && !m.is_zeroed(4088));
        m.sort();
        let got: Vec<_> = m.iter().map(|(o, w)| (o, w.apply(o, u64::MAX))).collect();
        assert_eq!(
            got,
            vec![
                (4096 + 8, Some(0b101)),
                (4096 + 56, Some(0)),
                // outside the range: built on the committed value
                (4096 + 64, Some(u64::MAX)),
            ]
        );
        assert_eq!(m.zeroed(), &[(4096, 64)]);
        m.clear();
        assert!(m.is_empty() && m.zeroed().is_empty());
    }
}
