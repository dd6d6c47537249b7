//! Extension groups kept inline: `#[extendible(reserve = N)]` gives every object of a
//! struct `N` bytes after its value, and the groups that fit there live in them instead of
//! in objects of their own. An inline group is part of its owner: read with it (no second
//! lock, lookup or header check), checksummed with it, upgraded by writing the owner alone
//! (no allocation), freed and copied with it.
//!
//! ```text
//! payload: [ value ........ | link ][ reserve: group 1 | pad | group 2 ....... | (free) ]
//!                                     ^ at[0]              ^ at[1]
//! group k: [ fields | link ]   the last group in the reserve may end without its link
//! ```
//!
//! Invariant: where each group goes depends only on the sizes and alignments of the value
//! and of the groups before it, and the reserve's size ([`inline_places`]), all of which
//! are frozen with the layouts the pool records: every build that knows group `k` puts it
//! at the same offset. Each group starts where the one before it ends, link included,
//! aligned; a group goes inline if its fields fit, so only the last inline group can end
//! without its link (the one after it would start past the reserve). An inline group's
//! link is never read or written: the base's link says where the separate groups start.
//! Inline groups are a prefix, groups `1..=n`, with `n` kept in the
//! low bits of the base's link (`link::inline_count`); the groups after them are separate
//! objects, linked from the base as before. The reserve belongs to pgl: the program's
//! handles of the value (`Mut`, `Place`, `write_bytes`) cover only the value, so only the
//! generated glue writes it, through `tx.ext_mut` and the upgrade (`GroupPlace`).
//!
//! Pools of format 8 and older kept a group inline only if its link fit too: the groups
//! they placed lie where this rule places them, and a group they kept separate that now
//! fits stays separate in those objects (the base's link counts their inline groups).

use super::group::{fields_len, GroupRef};
use super::link::{inline_count, LINK_SIZE, MAX_INLINE};
use crate::persistent::{object_size, Persistent};
use crate::{Error, Result};

/// Where the groups of a struct go: for each group `k` (`groups[k - 1]`, its size and
/// alignment, link included) its payload offset inside the reserve, or `usize::MAX` if it
/// is kept in a separate object. The value takes `value_size` bytes and the reserve the
/// `reserve` after it; groups are laid in order, each aligned where the one before it
/// ends, until one's fields (all of it but its link) do not fit (it and all after it are
/// separate), at most `MAX_INLINE` (15: the inline count's room in the link) of them.
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
        if start + size.saturating_sub(LINK_SIZE) > end {
            break;
        }
        out[k] = start;
        at = start + size;
        k += 1;
    }
    out
}

/// The most extension groups a reserve of `reserve` bytes can hold inline, whatever
/// groups later builds add: every group has a field, and every group but the last ends
/// with its 8-byte link, so `n` groups take at least `9 (n - 1) + 1` bytes (and at most
/// [`MAX_INLINE`] are kept). A base link counting more is damaged.
#[must_use]
pub(crate) const fn max_inline(reserve: usize) -> usize {
    let n = if reserve == 0 {
        0
    } else {
        1 + (reserve - 1) / (LINK_SIZE + 1)
    };
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
        r => format!(
            "its {r}-byte reserve holds at most {max} (each has a field, and all but the last \
             end with an 8-byte link)"
        ),
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

/// Payloads up to this size are imaged in the image's own storage (an upgrade makes one
/// image per object); larger ones on the heap.
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

    /// Makes this image one of a `T` (the size [`ObjImage::of`] gives it), keeping its
    /// storage: its bytes are what they were, for [`fill_with`](Self::fill_with) to
    /// overwrite.
    pub(crate) fn reuse_for<T: Persistent>(&mut self) {
        let len = object_size::<T>();
        if len > SMALL && self.large.len() < len.div_ceil(16) {
            self.large.resize(len.div_ceil(16), 0);
        }
        self.len = len;
    }

    /// Bytes of heap storage the image holds (for payloads over `SMALL` bytes, or kept
    /// from one it was made over from).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.large.capacity() * 16
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

    /// Overwrites the image of a `T` (made by [`ObjImage::of`], or made over by
    /// [`reuse_for`](Self::reuse_for)) with the `T` object's payload at `payload`.
    ///
    /// # Safety
    /// `payload` points to `object_size::<T>()` initialised bytes, none of them in the
    /// image.
    pub(crate) unsafe fn fill_with<T: Persistent>(&mut self, payload: *const u8) {
        let len = const { object_size::<T>() };
        let words = self.words_of_mut::<T>();
        // SAFETY: `words` has room for `len` bytes (`words_of_mut`); the caller vouches
        // for the source, which cannot overlap the image. The length is a constant, so
        // the copy is inlined.
        unsafe { core::ptr::copy_nonoverlapping(payload, words.as_mut_ptr().cast(), len) };
    }

    /// Overwrites this image of a `T` with `payload`, a `T` object's value and reserve
    /// (asserted by their length): [`fill_with`](Self::fill_with) for a caller that holds
    /// them as a slice.
    #[inline]
    pub(crate) fn fill_from<T: Persistent>(&mut self, payload: &[u8]) {
        assert_eq!(
            payload.len(),
            object_size::<T>(),
            "the payload of a `{}`",
            T::TYPE_NAME
        );
        // SAFETY: `payload` holds `object_size::<T>()` initialised bytes (asserted), and a
        // shared borrow of them cannot overlap `self`, borrowed mutably.
        unsafe { self.fill_with::<T>(payload.as_ptr()) };
    }

    /// Whether this image, which has a `T`'s size (asserted), keeps its bytes on the heap:
    /// what `words` tests at run time, fixed by the type (every view of an
    /// `upgrade = on_write` object not upgraded yet reads its image through the typed
    /// accessors).
    #[inline(always)]
    fn on_heap<T: Persistent>(&self) -> bool {
        assert_eq!(
            self.len,
            object_size::<T>(),
            "an image of a `{}`",
            T::TYPE_NAME
        );
        const { object_size::<T>() > SMALL }
    }

    /// `words_mut` of this image of a `T`'s size, picked by `on_heap`: at least
    /// `object_size::<T>()` bytes (asserted).
    #[inline(always)]
    fn words_of_mut<T: Persistent>(&mut self) -> &mut [u128] {
        let words: &mut [u128] = if self.on_heap::<T>() {
            &mut self.large
        } else {
            &mut self.small
        };
        assert!(
            words.len() * 16 >= object_size::<T>(),
            "an image's storage holds its bytes"
        );
        words
    }

    /// [`bytes`](Self::bytes) of this image of a `T`'s size, its storage picked by
    /// `on_heap`.
    #[inline(always)]
    pub(crate) fn bytes_of<T: Persistent>(&self) -> &[u8] {
        let len = const { object_size::<T>() };
        let words: &[u128] = if self.on_heap::<T>() {
            &self.large
        } else {
            &self.small
        };
        assert!(
            words.len() * 16 >= len,
            "an image's storage holds its bytes"
        );
        // SAFETY: `words` holds at least `len` bytes (asserted), all initialised: the
        // inline array always is, and the heap words are a `Vec`'s elements (made and
        // grown with zeros, then written); borrowed for as long as `self`.
        unsafe { core::slice::from_raw_parts(words.as_ptr() as *const u8, len) }
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

    /// Sets the link that ends the value of this image, which has a `T`'s size (asserted;
    /// a base's link: see `leds::link`).
    #[inline(always)]
    pub(crate) fn set_link_of<T: Persistent>(&mut self, link: u64) {
        let end = const { size_of::<T>() };
        let words = self.words_of_mut::<T>();
        // SAFETY: `words` holds at least `object_size::<T>() >= size_of::<T>()`
        // initialised bytes (`words_of_mut`), exclusively borrowed.
        let bytes = unsafe { core::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), end) };
        super::ExtLink::set_at_end_of(bytes, link);
    }

    /// `Error::Corrupt` unless `len` bytes fit at `at`, aligned for `G` (whose `what`
    /// they are).
    #[inline]
    fn check<G: Persistent>(&self, at: usize, len: usize, what: &str) -> Result<()> {
        let fits = at.checked_add(len).is_some_and(|end| end <= self.len);
        if fits && at % align_of::<G>() == 0 {
            return Ok(());
        }
        Err(misfit(what, len, G::TYPE_NAME, at, self.len))
    }

    /// The value the payload starts with.
    ///
    /// # Errors
    /// `Error::Corrupt` if the image is shorter than a `T`.
    pub fn value<T: Persistent>(&self) -> Result<&T> {
        self.check::<T>(0, size_of::<T>(), "the value")?;
        // SAFETY: a `T` fits at offset 0 (checked), which is 16-byte aligned (`u128`
        // storage, `align_of::<T>() <= MAX_ALIGN`); every bit pattern is a valid `T`; the
        // reference borrows `self`.
        Ok(unsafe { &*(self.words().as_ptr() as *const T) })
    }

    /// The fields of the group stored inline at payload offset `at`.
    ///
    /// # Errors
    /// `Error::Corrupt` if they do not fit there, aligned.
    pub fn group<G: Persistent>(&self, at: usize) -> Result<GroupRef<'_, G>> {
        self.check::<G>(at, fields_len::<G>(), "the fields of a group")?;
        let ptr = core::ptr::NonNull::from(&self.bytes()[at..]).cast::<u8>();
        // SAFETY: the group's fields lie at `at`, aligned for `G` (checked; the storage is
        // 16-byte aligned and `align_of::<G>() <= MAX_ALIGN`), initialised, and borrowed
        // with `self`, which nothing changes meanwhile.
        Ok(unsafe { GroupRef::new(ptr) })
    }

    /// Stores the fields of `group` (all of it but its link, which an inline group does
    /// not keep) inline at payload offset `at`.
    ///
    /// # Errors
    /// `Error::Corrupt` if they do not fit there, aligned.
    pub fn put_group<G: Persistent>(&mut self, at: usize, group: &G) -> Result<()> {
        let len = fields_len::<G>();
        self.check::<G>(at, len, "the fields of a group")?;
        self.bytes_mut()[at..at + len].copy_from_slice(&crate::persistent::bytes_of(group)[..len]);
        Ok(())
    }
}

/// `ObjImage::check`'s error, out of the glue's way.
#[cold]
#[inline(never)]
fn misfit(what: &str, len: usize, type_name: &str, at: usize, size: usize) -> Error {
    Error::Corrupt {
        what: "inline extension group",
        offset: at as u64,
        detail: format!(
            "{what} ({len} bytes) of `{type_name}` does not fit at byte {at} of a {size}-byte \
             object: the struct's reserve cannot hold it"
        ),
        pool_file: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_laid_in_order_aligned_until_ones_fields_do_not_fit() {
        // A 20-byte value and 40 bytes of reserve (to 60): a 12-byte group (align 4) at 20,
        // a 16-byte group (align 8) at 32, then a 24-byte group at 48 whose 16 bytes of
        // fields would end at 64 > 60.
        let at = inline_places(20, 40, [(12, 4), (16, 8), (24, 8), (4, 4)]);
        assert_eq!(
            at,
            [20, 32, usize::MAX, usize::MAX],
            "the 4-byte group would fit, but groups after a separate one are separate"
        );
        assert_eq!(inline_places(24, 0, [(16, 8)]), [usize::MAX], "no reserve");
        assert_eq!(inline_places(24, 16, [(16, 8)]), [24], "whole");
        assert_eq!(
            inline_places(24, 8, [(16, 8), (16, 8)]),
            [24, usize::MAX],
            "the last group kept ends without its link; the next would start past the reserve"
        );
        assert_eq!(
            inline_places(24, 7, [(16, 8)]),
            [usize::MAX],
            "one byte short"
        );
        assert_eq!(
            inline_places(24, 24, [(16, 8), (16, 8)]),
            [24, 40],
            "the first whole, the second without its link"
        );
        let many = inline_places(8, 1024, [(9, 1); 20]);
        assert_eq!(
            many.iter().filter(|&&a| a != usize::MAX).count(),
            MAX_INLINE
        );
    }

    #[test]
    fn a_reserve_holds_at_most_one_group_per_field_and_link() {
        assert_eq!(max_inline(0), 0);
        assert_eq!(max_inline(1), 1);
        assert_eq!(max_inline(9), 1);
        assert_eq!(max_inline(10), 2);
        assert_eq!(max_inline(16), 2);
        assert_eq!(max_inline(4096), MAX_INLINE);
        // The bound holds for the densest groups `inline_places` lays: one byte of field
        // each, at alignment 1.
        for r in 0..200 {
            let n = inline_places(8, r, [(9, 1); 40])
                .iter()
                .filter(|&&a| a != usize::MAX)
                .count();
            assert_eq!(n, max_inline(r), "reserve {r}");
        }
        assert!(check_inline_count(0x40, "N", 0x1232, 16).is_ok());
        assert!(check_inline_count(0x40, "N", 0x1233, 16).is_err());
        assert!(check_inline_count(0x40, "N", 0x1230, 0).is_ok());
        assert!(check_inline_count(0x40, "N", 0x1231, 0).is_err());
    }

    /// A group of one `u64` field, then its link.
    type Wide = [u64; 2];

    /// An image made over for another type has room for that type's bytes, on the heap
    /// past the inline storage and back within it.
    #[test]
    fn an_image_reused_for_another_type_holds_its_bytes() {
        let mut img = ObjImage::of::<[u64; 5]>();
        for (big, size) in [
            (false, 40),
            (true, 240),
            (true, 480),
            (false, 8),
            (true, 240),
        ] {
            match size {
                8 => img.reuse_for::<u64>(),
                40 => img.reuse_for::<[u64; 5]>(),
                240 => img.reuse_for::<[u64; 30]>(),
                _ => img.reuse_for::<[u64; 60]>(),
            }
            assert_eq!(size > SMALL, big);
            let src: Vec<u8> = (0..size).map(|i| i as u8 ^ 0x5a).collect();
            match size {
                8 => fill_and_link::<u64>(&mut img, &src),
                40 => fill_and_link::<[u64; 5]>(&mut img, &src),
                240 => fill_and_link::<[u64; 30]>(&mut img, &src),
                _ => fill_and_link::<[u64; 60]>(&mut img, &src),
            }
        }
    }

    /// Fills `img`, an image of a `T`, with `src` (`fill_from`, on `fill_with`) and checks
    /// what the typed accessors (whose storage the type picks) and the untyped ones (by
    /// the image's length) see.
    fn fill_and_link<T: Persistent>(img: &mut ObjImage, src: &[u8]) {
        let size = src.len();
        img.fill_from::<T>(src);
        assert_eq!(img.bytes(), src, "size {size}");
        assert_eq!(img.bytes_of::<T>(), src, "size {size}");
        img.set_link_of::<T>(0x0123_4567_89ab_cdef);
        assert_eq!(
            img.bytes()[size - 8..],
            0x0123_4567_89ab_cdef_u64.to_le_bytes(),
            "the link ends the value (size {size})"
        );
        assert_eq!(img.bytes()[..size - 8], src[..size - 8], "size {size}");
    }

    /// The typed accessors pick their storage by the type: asked of an image of another
    /// size, they stop rather than read the wrong storage.
    #[test]
    #[should_panic(expected = "an image of a")]
    fn an_image_read_as_another_type_is_refused() {
        let img = ObjImage::of::<[u64; 30]>();
        let _ = img.bytes_of::<[u64; 5]>();
    }

    #[test]
    fn an_image_reads_and_writes_group_fields_where_they_fit() {
        let mut img = ObjImage::zeroed(40);
        img.put_group::<Wide>(24, &[0x1122_3344_5566_7788, 0x99])
            .unwrap();
        assert_eq!(
            *img.group::<Wide>(24).unwrap().field::<u64>(0),
            0x1122_3344_5566_7788
        );
        assert_eq!(img.bytes()[24], 0x88);
        img.put_group::<Wide>(32, &[5, 0x99]).unwrap();
        assert_eq!(
            img.bytes()[32..40],
            5u64.to_le_bytes(),
            "fields only: the link is not stored, and not needed to fit"
        );
        assert!(img.group::<Wide>(36).is_err(), "past the end");
        assert!(img.group::<Wide>(20).is_err(), "misaligned");
        assert!(
            img.put_group::<Wide>(usize::MAX - 2, &[1, 0]).is_err(),
            "overflowing offset"
        );
        assert_eq!(*img.value::<[u64; 3]>().unwrap(), [0; 3]);
        assert!(img.value::<[u64; 6]>().is_err());
        let copy = ObjImage::from_bytes(img.bytes());
        assert_eq!(copy.bytes(), img.bytes());
        // Past the inline storage: on the heap, the same.
        let mut big = ObjImage::zeroed(SMALL + 24);
        big.put_group::<Wide>(SMALL + 16, &[7, 0]).unwrap();
        assert_eq!(
            *ObjImage::from_bytes(big.bytes())
                .group::<Wide>(SMALL + 16)
                .unwrap()
                .field::<u64>(0),
            7
        );
    }
}
