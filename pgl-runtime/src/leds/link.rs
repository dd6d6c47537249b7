//! `ExtLink`: the hidden pointer that ends an `#[extendible]` struct and each of its
//! extension groups.
//!
//! ```text
//! ExtLink (8 bytes, alignment 1):
//!   0  value   u64 LE   in a base: the payload offset of its first extension group kept
//!                       in a separate object (a multiple of 16; 0 = none), plus in the low
//!                       4 bits how many groups its reserve holds inline (groups 1 to n;
//!                       see `leds::inline`); in a group: the next group's offset (0 = none)
//! ```
//!
//! A base without a reserve always has 0 in the low bits, so its link reads as the plain
//! offset it was before reserves existed.
//! Invariant: its alignment is 1, so appending it to a struct without padding adds no
//! padding before it; it is always the last 8 bytes of the object (the derive rejects
//! trailing padding), so a chain can be walked from raw bytes even through groups this
//! build does not know. Its layout fingerprint never depends on what it points to, so a
//! base keeps its fingerprint as groups are added.

use crate::persistent::{fnv1a64, fold_type_id, Persistent};
use core::fmt;

/// Bytes of an [`ExtLink`]: it is the link of an object's tail (`tx::tail`).
pub const LINK_SIZE: usize = crate::tx::TAIL_LINK;

/// The link from an `#[extendible]` object (or one of its extension groups) to its next
/// extension group: a pool offset, null until the object is upgraded.
///
/// It is pgl's bookkeeping, not the program's data: every link compares equal to every
/// other, orders equal and hashes to nothing, so that `PartialEq`, `Eq`, `PartialOrd`,
/// `Ord` and `Hash` derived on an `#[extendible]` struct compare, order and hash its fields
/// alone (two objects holding the same values are equal, wherever their groups lie).
#[repr(transparent)]
#[derive(Clone, Copy, Default)]
pub struct ExtLink([u8; LINK_SIZE]);

impl PartialEq for ExtLink {
    fn eq(&self, _: &ExtLink) -> bool {
        true
    }
}

impl Eq for ExtLink {}

impl PartialOrd for ExtLink {
    fn partial_cmp(&self, other: &ExtLink) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ExtLink {
    fn cmp(&self, _: &ExtLink) -> core::cmp::Ordering {
        core::cmp::Ordering::Equal
    }
}

impl core::hash::Hash for ExtLink {
    fn hash<H: core::hash::Hasher>(&self, _: &mut H) {}
}

/// The low bits of a base's link that count its inline groups.
const INLINE_BITS: u64 = 0xf;

/// The most extension groups one object's reserve may hold inline.
pub const MAX_INLINE: usize = INLINE_BITS as usize;

/// The offset of a base's first separate extension group, from its link's value.
#[inline]
pub(crate) const fn separate(link: u64) -> u64 {
    link & !INLINE_BITS
}

/// How many extension groups a base's reserve holds inline, from its link's value.
#[inline]
pub(crate) const fn inline_count(link: u64) -> usize {
    (link & INLINE_BITS) as usize
}

/// The value of a base's link: `separate` (a group's payload offset, a multiple of 16,
/// or 0) with `inline` groups held in its reserve (at most [`MAX_INLINE`]).
#[inline]
pub(crate) fn base_link(separate: u64, inline: usize) -> u64 {
    debug_assert!(separate & INLINE_BITS == 0 && inline <= MAX_INLINE);
    separate | inline as u64
}

impl ExtLink {
    /// No next group.
    pub const NULL: ExtLink = ExtLink([0; LINK_SIZE]);

    /// A link to the group whose payload is at `offset`.
    pub const fn new(offset: u64) -> ExtLink {
        ExtLink(offset.to_le_bytes())
    }

    /// The link of a base whose first separate group is at `separate` (0: none), with
    /// its first `inline` groups in its reserve: for `#[extendible]`'s generated code.
    #[doc(hidden)]
    #[must_use]
    pub fn __base(separate: u64, inline: usize) -> ExtLink {
        ExtLink::new(base_link(separate, inline))
    }

    /// The link's value: the offset of the next group's payload (0: none), and in a base
    /// also the count of its inline groups (see the module docs).
    pub const fn get(self) -> u64 {
        u64::from_le_bytes(self.0)
    }

    /// Sets the link that ends `bytes` (an object's value).
    pub(crate) fn set_at_end_of(bytes: &mut [u8], value: u64) {
        let start = bytes.len() - LINK_SIZE;
        bytes[start..].copy_from_slice(&value.to_le_bytes());
    }
}

impl fmt::Debug for ExtLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.get() {
            0 => write!(f, "ExtLink(null)"),
            off => write!(f, "ExtLink({off:#x})"),
        }
    }
}

// SAFETY: a transparent `[u8; 8]`: valid for every bit pattern, no padding, no pointers
// (an offset, checked on use like an `Oid`), alignment 1, size 8.
unsafe impl Persistent for ExtLink {
    const TYPE_ID: u32 = fold_type_id(fnv1a64(b"pgl::ExtLink", 0));
    const LAYOUT: u64 = fnv1a64(b"pgl::ExtLink", LINK_SIZE as u64);
    const TYPE_NAME: &'static str = "ExtLink";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_little_endian_and_reads_from_the_end() {
        let l = ExtLink::new(0x1122_3344_5566_7788);
        assert_eq!(l.get(), 0x1122_3344_5566_7788);
        assert_eq!(l.0[0], 0x88, "little-endian on media");
        let mut obj = [0u8; 20];
        ExtLink::set_at_end_of(&mut obj, 0x40);
        assert_eq!(obj[12..], 0x40u64.to_le_bytes());
        assert_eq!(core::mem::align_of::<ExtLink>(), 1);
        assert_eq!(format!("{:?}", ExtLink::NULL), "ExtLink(null)");
    }

    #[test]
    fn links_compare_order_and_hash_as_nothing() {
        use std::hash::{BuildHasher, RandomState};
        let (a, b) = (ExtLink::new(0x40), ExtLink::new(0x1230 | 2));
        assert_eq!(a, b);
        assert_eq!(a.cmp(&b), core::cmp::Ordering::Equal);
        let s = RandomState::new();
        assert_eq!(s.hash_one(a), s.hash_one(ExtLink::NULL));
        assert_ne!(a.get(), b.get(), "the values still differ");
    }

    #[test]
    fn a_base_link_holds_a_separate_offset_and_an_inline_count() {
        let v = base_link(0x1230, 3);
        assert_eq!((separate(v), inline_count(v)), (0x1230, 3));
        assert_eq!(
            (separate(0x40), inline_count(0x40)),
            (0x40, 0),
            "pre-reserve links"
        );
        let v = base_link(0, MAX_INLINE);
        assert_eq!((separate(v), inline_count(v)), (0, MAX_INLINE));
    }
}
