//! Extension groups kept inline: `#[extendible(reserve = N)]` gives every object of a
//! struct `N` bytes after its value, and the groups that fit there live in them instead of
//! in objects of their own. An inline group is part of its owner: read with it (no second
//! lock, lookup or header check), checksummed with it, upgraded by writing the owner alone
//! (no allocation), freed and copied with it.
//!
//! ```text
//! payload: [ value ........ | link ][ reserve: group 1 | pad | group 2 | (free) ]
//!                                     ^ at[0]              ^ at[1]
//! ```
//!
//! Invariant: where each group goes depends only on the sizes and alignments of the value
//! and of the groups before it, and the reserve's size ([`inline_places`]), all of which
//! are frozen with the layouts the pool records: every build that knows group `k` puts it
//! at the same offset. Inline groups are a prefix, groups `1..=n`, with `n` kept in the
//! low bits of the base's link (`link::inline_count`); the groups after them are separate
//! objects, linked from the base as before. The reserve belongs to pgl: the program's
//! handles of the value (`Mut`, `Place`, `write_bytes`) cover only the value, so only the
//! generated glue writes it, through `tx.ext_mut` and the upgrade.

use super::link::{inline_count, LINK_SIZE, MAX_INLINE};
use crate::persistent::{object_size, Persistent};
use crate::{Error, Result};

/// Where the groups of a struct go: for each group `k` (`groups[k - 1]`, its size and
/// alignment) its payload offset inside the reserve, or `usize::MAX` if it is kept in a
/// separate object. The value takes `value_size` bytes and the reserve the `reserve`
/// after it; groups are laid in order, each aligned, until one does not fit (it and all
/// after it are separate), at most [`MAX_INLINE`] of them.
#[must_use]
pub const fn inline_places<const G: usize>(
    value_size: usize,
    reserve: usize,
    groups: [(usize, usize); G],
) -> [usize; G] {
    let mut out = [usize::MAX; G];
    let end = value_size + reserve;
    let mut at = value_size;
    let mut k = 0;
    while k < G && k < MAX_INLINE {
        let (size, align) = groups[k];
        let start = at.next_multiple_of(align);
        if start + size > end {
            break;
        }
        out[k] = start;
        at = start + size;
        k += 1;
    }
    out
}

/// The most extension groups a reserve of `reserve` bytes can hold inline: every group
/// ends with its 8-byte link, so at most one per 8 bytes (and at most [`MAX_INLINE`]),
/// whatever groups later builds add. A base link counting more is damaged.
#[must_use]
pub(crate) const fn max_inline(reserve: usize) -> usize {
    let n = reserve / LINK_SIZE;
    if n < MAX_INLINE {
        n
    } else {
        MAX_INLINE
    }
}

/// `Error::Corrupt` if the base link `link` of the `type_name` object at `owner`, whose
/// reserve has `reserve` bytes, counts more inline groups than [`max_inline`] allows.
/// Inlined (every `tx.ext` checks it), the error built out of line.
#[inline]
pub(crate) fn check_inline_count(
    owner: u64,
    type_name: &str,
    link: u64,
    reserve: usize,
) -> Result<()> {
    let (n, max) = (inline_count(link), max_inline(reserve));
    if n <= max {
        return Ok(());
    }
    Err(too_many_inline(owner, type_name, n, reserve, max))
}

#[cold]
#[inline(never)]
fn too_many_inline(owner: u64, type_name: &str, n: usize, reserve: usize, max: usize) -> Error {
    let room = match reserve {
        0 => format!("`{type_name}` has no reserve"),
        r => format!("its {r}-byte reserve holds at most {max} (each ends with an 8-byte link)"),
    };
    Error::Corrupt {
        what: "extension link",
        offset: owner,
        detail: format!(
            "the `{type_name}` object's link counts {n} extension group(s) kept inline, but \
             {room}: the link is damaged; nothing was read, freed or copied through it; \
             `pgl check` verifies the objects"
        ),
        pool_file: None,
    }
}

/// Payloads up to this size are imaged without a heap allocation (an upgrade makes one
/// image per object).
const SMALL: usize = 128;

/// A copy of an object's payload (its value, then its reserve), aligned as the pool
/// aligns payloads: what an upgrade builds inline groups in before writing them, and what
/// a new object's inline groups are built in.
pub struct ObjImage {
    small: [u128; SMALL / 16],
    large: Vec<u128>,
    len: usize,
}

impl ObjImage {
    /// A zero-filled image of a `T` object (value and reserve).
    #[must_use]
    pub fn of<T: Persistent>() -> ObjImage {
        ObjImage::zeroed(object_size::<T>())
    }

    fn zeroed(len: usize) -> ObjImage {
        let large = if len > SMALL {
            vec![0; len.div_ceil(16)]
        } else {
            Vec::new()
        };
        ObjImage {
            small: [0; SMALL / 16],
            large,
            len,
        }
    }

    /// The storage the bytes live in (16-byte aligned, at least `len` bytes).
    fn words(&self) -> &[u128] {
        if self.len > SMALL {
            &self.large
        } else {
            &self.small
        }
    }

    fn words_mut(&mut self) -> &mut [u128] {
        if self.len > SMALL {
            &mut self.large
        } else {
            &mut self.small
        }
    }

    /// An image holding `bytes`.
    pub(crate) fn from_bytes(bytes: &[u8]) -> ObjImage {
        let mut img = ObjImage::zeroed(bytes.len());
        img.bytes_mut().copy_from_slice(bytes);
        img
    }

    /// The payload's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialised bytes, borrowed for as long as
        // `self`.
        unsafe { core::slice::from_raw_parts(self.words().as_ptr() as *const u8, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        // SAFETY: as in `bytes`, exclusively through `&mut self`.
        unsafe { core::slice::from_raw_parts_mut(self.words_mut().as_mut_ptr() as *mut u8, len) }
    }

    /// `Error::Corrupt` unless a `G` fits at `at`, aligned.
    fn check<G: Persistent>(&self, at: usize) -> Result<()> {
        let fits = at
            .checked_add(size_of::<G>())
            .is_some_and(|end| end <= self.len);
        if fits && at % align_of::<G>() == 0 {
            return Ok(());
        }
        Err(Error::Corrupt {
            what: "inline extension group",
            offset: at as u64,
            detail: format!(
                "a {}-byte `{}` does not fit at byte {at} of a {}-byte object: the struct's \
                 reserve cannot hold it",
                size_of::<G>(),
                G::TYPE_NAME,
                self.len
            ),
            pool_file: None,
        })
    }

    /// The value the payload starts with.
    ///
    /// # Errors
    /// `Error::Corrupt` if the image is shorter than a `T`.
    pub fn value<T: Persistent>(&self) -> Result<&T> {
        self.check::<T>(0)?;
        // SAFETY: a `T` fits at offset 0 (checked), which is 16-byte aligned (`u128`
        // storage, `align_of::<T>() <= MAX_ALIGN`); every bit pattern is a valid `T`; the
        // reference borrows `self`.
        Ok(unsafe { &*(self.words().as_ptr() as *const T) })
    }

    /// The group stored inline at payload offset `at`.
    ///
    /// # Errors
    /// `Error::Corrupt` if a `G` does not fit there, aligned.
    pub fn group<G: Persistent>(&self, at: usize) -> Result<&G> {
        self.check::<G>(at)?;
        // SAFETY: a `G` fits at `at`, aligned (checked; the storage is 16-byte aligned and
        // `align_of::<G>() <= MAX_ALIGN`); any bytes are a valid `G`; borrows `self`.
        Ok(unsafe { &*((self.words().as_ptr() as *const u8).add(at) as *const G) })
    }

    /// Stores `value` inline at payload offset `at`.
    ///
    /// # Errors
    /// `Error::Corrupt` if a `G` does not fit there, aligned.
    pub fn put<G: Persistent>(&mut self, at: usize, value: &G) -> Result<()> {
        self.check::<G>(at)?;
        self.bytes_mut()[at..at + size_of::<G>()]
            .copy_from_slice(crate::persistent::bytes_of(value));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_laid_in_order_aligned_until_one_does_not_fit() {
        // A 20-byte value and 40 bytes of reserve: a 12-byte group (align 4) at 20, a
        // 16-byte group (align 8) at 32, then a 16-byte group that would end at 64 > 60.
        let at = inline_places(20, 40, [(12, 4), (16, 8), (16, 8), (4, 4)]);
        assert_eq!(
            at,
            [20, 32, usize::MAX, usize::MAX],
            "the 4-byte group would fit, but groups after a separate one are separate"
        );
        assert_eq!(inline_places(24, 0, [(8, 8)]), [usize::MAX], "no reserve");
        assert_eq!(inline_places(24, 16, [(16, 8)]), [24], "exact fit");
        let many = inline_places(8, 1024, [(8, 8); 20]);
        assert_eq!(
            many.iter().filter(|&&a| a != usize::MAX).count(),
            MAX_INLINE
        );
    }

    #[test]
    fn a_reserve_holds_at_most_one_group_per_link() {
        assert_eq!(max_inline(0), 0);
        assert_eq!(max_inline(15), 1);
        assert_eq!(max_inline(16), 2);
        assert_eq!(max_inline(4096), MAX_INLINE);
        assert!(check_inline_count(0x40, "N", 0x1232, 16).is_ok());
        assert!(check_inline_count(0x40, "N", 0x1233, 16).is_err());
        assert!(check_inline_count(0x40, "N", 0x1230, 0).is_ok());
        assert!(check_inline_count(0x40, "N", 0x1231, 0).is_err());
    }

    #[test]
    fn an_image_reads_and_writes_groups_where_they_fit() {
        let mut img = ObjImage::zeroed(40);
        img.put(24, &0x1122_3344_5566_7788u64).unwrap();
        assert_eq!(*img.group::<u64>(24).unwrap(), 0x1122_3344_5566_7788);
        assert_eq!(img.bytes()[24], 0x88);
        assert!(img.group::<u64>(36).is_err(), "past the end");
        assert!(img.group::<u64>(20).is_err(), "misaligned");
        assert!(
            img.put(usize::MAX - 2, &1u64).is_err(),
            "overflowing offset"
        );
        assert_eq!(*img.value::<[u64; 3]>().unwrap(), [0; 3]);
        assert!(img.value::<[u64; 6]>().is_err());
        let copy = ObjImage::from_bytes(img.bytes());
        assert_eq!(copy.bytes(), img.bytes());
        // Past the inline storage: on the heap, the same.
        let mut big = ObjImage::zeroed(SMALL + 24);
        big.put(SMALL + 16, &7u64).unwrap();
        assert_eq!(
            *ObjImage::from_bytes(big.bytes())
                .group::<u64>(SMALL + 16)
                .unwrap(),
            7
        );
    }
}
