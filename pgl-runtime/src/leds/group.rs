//! `GroupRef` and `GroupPlace`: an extension group's fields, wherever the group lies, as
//! the accessors `#[extendible]` generates read and write them.
//!
//! A group is a persistent struct whose last 8 bytes are the link to the next group
//! (`leds::link`). A group kept in an object of its own is whole; the last group a
//! reserve holds may end without its link (`leds::inline`: an inline group's link is
//! never read, as the base's link says where the separate groups start), so its bytes past
//! the fields may lie past the object. A `&G` of it could not be made; these views cover
//! only the fields, and give each one by its offset in `G`.
//!
//! Invariant: a view starts at the first byte of a `G`, aligned for `G`, and its first
//! [`fields_len::<G>()`](fields_len) bytes lie inside one object's payload (a buffer's, or
//! the pool's under the transaction's lock), valid and borrowed as the handle it was made
//! from borrows them.

use super::link::LINK_SIZE;
use crate::persistent::{object_size, Persistent};
use crate::tx::{Buffer, Mut, Place, Read};
use core::marker::PhantomData;
use core::ptr::NonNull;

/// Bytes of a group's fields: all of the group but the link that ends it.
#[must_use]
pub const fn fields_len<G: Persistent>() -> usize {
    size_of::<G>().saturating_sub(LINK_SIZE)
}

/// Panics unless a `U` lies at byte `at` of a `G`'s fields, aligned for it, given a `G`
/// aligned for `G`. Constant for constant `at`, as the generated accessors give.
#[inline(always)]
fn assert_field<G: Persistent, U: Persistent>(at: usize) {
    let inside = at <= fields_len::<G>() && fields_len::<G>() - at >= size_of::<U>();
    let aligned = align_of::<U>() <= align_of::<G>() && at % align_of::<U>() == 0;
    assert!(
        inside && aligned,
        "no {}-byte `{}` field at byte {at} of the extension group `{}`",
        size_of::<U>(),
        U::TYPE_NAME,
        G::TYPE_NAME
    );
}

/// Panics unless a `G`'s fields lie at payload offset `at` of a `T` object, inside its
/// reserve, aligned (`payload` is where the payload starts).
#[inline(always)]
fn assert_in_reserve<T: Persistent, G: Persistent>(payload: *const u8, at: usize) {
    let fits = at >= size_of::<T>()
        && at <= object_size::<T>()
        && object_size::<T>() - at >= fields_len::<G>()
        && (payload as usize).wrapping_add(at) % align_of::<G>() == 0;
    assert!(
        fits,
        "an extension group `{}` does not fit at byte {at} of the reserve of a `{}`",
        G::TYPE_NAME,
        T::TYPE_NAME
    );
}

/// The fields of an extension group `G`, read in place (`#[extendible]`'s glue).
pub struct GroupRef<'a, G: Persistent> {
    ptr: NonNull<u8>,
    _p: PhantomData<&'a G>,
}

impl<G: Persistent> Clone for GroupRef<'_, G> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<G: Persistent> Copy for GroupRef<'_, G> {}

impl<'a, G: Persistent> GroupRef<'a, G> {
    /// The fields of a whole group (one kept in an object of its own).
    #[inline]
    pub fn of(group: &'a G) -> Self {
        GroupRef {
            ptr: NonNull::from(group).cast(),
            _p: PhantomData,
        }
    }

    /// The fields of the group kept at payload offset `at` of `base`'s reserve.
    ///
    /// # Panics
    /// Unless its fields lie there, inside the reserve, aligned.
    #[inline]
    pub fn inline<T: Persistent>(base: &'a Read<'_, T>, at: usize) -> Self {
        let payload = base.payload_ptr();
        assert_in_reserve::<T, G>(payload, at);
        GroupRef {
            // SAFETY: `at` lies inside the payload (asserted), which is not null.
            ptr: unsafe { NonNull::new_unchecked(payload.add(at) as *mut u8) },
            _p: PhantomData,
        }
    }

    /// The fields of the group kept at payload offset `at` of `base`'s reserve.
    ///
    /// # Panics
    /// As [`GroupRef::inline`].
    #[inline]
    pub fn inline_of_mut<T: Persistent>(base: &'a Mut<'_, T>, at: usize) -> Self {
        let payload = base.payload().as_ptr();
        assert_in_reserve::<T, G>(payload, at);
        GroupRef {
            // SAFETY: as in `inline`.
            ptr: unsafe { NonNull::new_unchecked(payload.add(at) as *mut u8) },
            _p: PhantomData,
        }
    }

    /// # Safety
    /// `ptr` is aligned for `G`, and `fields_len::<G>()` bytes from it are initialised and
    /// unchanged for `'a`.
    pub(crate) unsafe fn new(ptr: NonNull<u8>) -> Self {
        GroupRef {
            ptr,
            _p: PhantomData,
        }
    }

    /// The field of type `U` at byte `at` of the group (its `offset_of!`).
    ///
    /// # Panics
    /// Unless a `U` lies there, inside the fields, aligned (the glue's offsets always do).
    #[inline(always)]
    pub fn field<U: Persistent>(self, at: usize) -> &'a U {
        assert_field::<G, U>(at);
        // SAFETY: the view's bytes are valid and unchanged for 'a and `ptr` is aligned for
        // `G` (the module's invariant); a `U` lies inside them at `at`, aligned (asserted);
        // every bit pattern is a valid `U`.
        unsafe { &*(self.ptr.as_ptr().add(at) as *const U) }
    }
}

/// The fields of an extension group `G` in a micro-buffer, for writing
/// (`#[extendible]`'s glue): each field's [`Place`] marks only its own bytes modified.
pub struct GroupPlace<'a, G: Persistent> {
    buf: NonNull<Buffer>,
    base: usize,
    _p: PhantomData<(&'a mut Buffer, *mut G)>,
}

impl<'a, G: Persistent> GroupPlace<'a, G> {
    /// The fields of a whole group (one kept in an object of its own).
    #[inline]
    pub fn of(place: Place<'a, G>) -> Self {
        let (buf, base) = place.into_parts();
        GroupPlace {
            buf,
            base,
            _p: PhantomData,
        }
    }

    /// The fields of the group kept at payload offset `at` of `base`'s reserve.
    ///
    /// # Panics
    /// Unless its fields lie there, inside the reserve, aligned.
    ///
    /// # Safety
    /// The view does not outlive `base`, and no other place or reference of those bytes is
    /// used while it lives (the views the glue makes at once are of distinct groups, which
    /// `inline_places` lays apart).
    #[inline]
    pub unsafe fn inline<T: Persistent>(base: &mut Mut<'_, T>, at: usize) -> Self {
        assert_in_reserve::<T, G>(base.payload().as_ptr(), at);
        GroupPlace {
            buf: base.buf_ptr(),
            base: at,
            _p: PhantomData,
        }
    }

    /// The place of the field of type `U` at byte `at` of the group (its `offset_of!`).
    ///
    /// # Panics
    /// Unless a `U` lies there, inside the fields, aligned.
    #[inline(always)]
    pub fn field<U: Persistent>(self, at: usize) -> Place<'a, U> {
        assert_field::<G, U>(at);
        // SAFETY: the buffer is live and exclusively borrowed for 'a (taken over from the
        // place or handle this view was made from); `base` starts a `G` in its payload,
        // aligned, whose fields lie inside it (the invariant), and a `U` lies inside them at
        // `at`, aligned (asserted).
        unsafe { Place::new(self.buf, self.base + at) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_shows_its_fields_and_not_its_link() {
        // A group of one `u64` field: 8 bytes of fields, then the link.
        let group: [u64; 2] = [0x1122_3344_5566_7788, 0x40];
        let g = GroupRef::of(&group);
        assert_eq!(fields_len::<[u64; 2]>(), 8);
        assert_eq!(*g.field::<u64>(0), 0x1122_3344_5566_7788);
        assert_eq!(*g.field::<u32>(4), 0x1122_3344);
        let past = std::panic::catch_unwind(|| *g.field::<u64>(8));
        assert!(past.is_err(), "the link is not a field");
        let misaligned = std::panic::catch_unwind(|| *g.field::<u32>(2));
        assert!(misaligned.is_err());
        assert_eq!(fields_len::<[u8; 4]>(), 0, "shorter than a link: no fields");
    }
}
