//! `Ext` and `ExtMut`: handles of an `#[extendible]` object with every extension group
//! this build knows, obtained from `tx.ext` / `tx.ext_mut` (which upgrade the object
//! first when it lacks groups).
//!
//! Invariant: a view holds a handle of the base and one of each separate group (read
//! handles or micro-buffers; an inline group is read and written through the base's), so
//! every byte it shows is covered by the transaction's locks and borrow flags like any
//! other handle (a separate group's by its own lock and its owner's: see
//! `tx::GroupScope`); it has no `DerefMut`, so the links cannot be overwritten through it.

use super::extendible::{ExtGroups, ExtPlaces, Extendible};
use super::inline::ObjImage;
use crate::persistent::Oid;
use crate::persistent::{object_size, Persistent};
use crate::tx::{AsPlace, Mut, Place, Read};
use core::cell::Cell;
use core::ops::Deref;
use core::ptr::NonNull;

/// A read view of an `#[extendible]` object and all its extension groups, inside a
/// transaction (`tx.ext(oid)`).
///
/// Derefs to the base struct; the field accessors `#[extendible]` generates
/// (`<Struct>Fields` for base fields, `<Struct>ExtFields` for extension fields and for
/// fields replaced by one) read every field, old and new.
pub struct Ext<'tx, T: Extendible> {
    base: Read<'tx, T>,
    groups: T::Reads<'tx>,
    oid: Oid<T>,
    /// The copy of the object `base` reads, upgraded in DRAM, if the view owns it
    /// (`upgrade = on_write`: see `Tx::ext`). Declared after `base`, so dropped after it.
    _image: Option<OwnedImage>,
}

/// A DRAM copy of an object that a view owns and reads through `Read::over`'s pointer.
/// Held as a raw pointer, not a `Box`: moving a `Box` asserts unique access to its bytes,
/// which would invalidate the pointer the view reads them through.
struct OwnedImage(NonNull<ObjImage>);

impl Drop for OwnedImage {
    fn drop(&mut self) {
        // SAFETY: the pointer comes from `Box::leak` (`Ext::of_image`) and only this value
        // holds it, dropped once.
        give_back(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

std::thread_local! {
    /// The image a view of this thread freed last, kept for the next view that needs one.
    /// Allocating one per read of an object shown upgraded in DRAM, and freeing it, was
    /// about two thirds of what `tx.ext` cost more than `tx.ext_with` on such reads.
    static SPARE: Cell<Option<Box<ObjImage>>> = const { Cell::new(None) };
}

/// An image of a `T` for a view to own: this thread's spare if it has one (its bytes are
/// left for `ObjImage::fill_with` to overwrite), else a new one.
pub(crate) fn image_of<T: Persistent>() -> Box<ObjImage> {
    match SPARE.try_with(Cell::take).ok().flatten() {
        Some(mut image) => {
            image.reuse_for::<T>();
            image
        }
        None => Box::new(ObjImage::of::<T>()),
    }
}

/// Keeps `image` as this thread's spare (freeing the one it replaces), unless its heap
/// storage is over `SPARE_MAX` bytes (a thread does not hold on to the copy of the
/// largest object it ever viewed) or the thread is exiting: then it is freed.
pub(crate) fn give_back(image: Box<ObjImage>) {
    if image.heap_bytes() <= SPARE_MAX {
        let _ = SPARE.try_with(|spare| spare.set(Some(image)));
    }
}

/// The most heap storage a thread's spare image keeps.
const SPARE_MAX: usize = 4096;

impl<'tx, T: Extendible> Ext<'tx, T> {
    pub(crate) fn new(oid: Oid<T>, base: Read<'tx, T>, groups: T::Reads<'tx>) -> Self {
        Ext {
            base,
            groups,
            oid,
            _image: None,
        }
    }

    /// The view of an object whose value and groups are read from `image` (all its groups
    /// kept in its reserve: no group handle), which it owns, holding `base`'s borrow of the
    /// object.
    pub(crate) fn of_image(oid: Oid<T>, base: Read<'tx, T>, image: Box<ObjImage>) -> Self {
        assert_eq!(
            image.bytes().len(),
            object_size::<T>(),
            "an image of a `{}`",
            T::TYPE_NAME
        );
        let image = NonNull::from(Box::leak(image));
        // SAFETY: an image of a `T` (asserted) on the heap, which stays where it is and
        // unchanged until `OwnedImage` gives it back (`give_back`): the view holds that,
        // and drops it after `base`.
        let mut view = unsafe { Ext::over_image(oid, base, image.as_ref()) };
        view._image = Some(OwnedImage(image));
        view
    }

    /// The view of an object whose value and groups are read from `image` (all its groups
    /// kept in its reserve: no group handle), holding `base`'s borrow of the object.
    ///
    /// # Safety
    /// `image` is an image of a `T` (`ObjImage::of::<T>`), and the view is dropped before
    /// it is changed, moved or dropped.
    pub(crate) unsafe fn over_image(oid: Oid<T>, base: Read<'tx, T>, image: &ObjImage) -> Self {
        // SAFETY: the image holds a `T`'s value and reserve, aligned as payloads are
        // (`ObjImage`'s storage is `u128`s), and the caller keeps it in place, unchanged,
        // while the view lives.
        let base = unsafe { base.over(image.bytes_of::<T>().as_ptr().cast()) };
        Ext::new(oid, base, Default::default())
    }

    /// The object's oid.
    pub fn oid(&self) -> Oid<T> {
        self.oid
    }

    /// Runs `f` on the view, then drops the view here, field by field (the base before
    /// the image it may read, as their declaration order drops them): how `tx.ext_with`
    /// uses every view it makes. Dropped whole, the view went through drop glue the
    /// compiler kept out of line. If `f` panics, unwinding drops the view whole.
    #[inline(always)]
    pub(crate) fn run<R>(self, f: impl FnOnce(&Self) -> R) -> R {
        let r = f(&self);
        let Ext {
            base,
            groups,
            oid: _,
            _image,
        } = self;
        drop(base);
        drop(groups);
        drop(_image);
        r
    }
}

impl<T: Extendible> Deref for Ext<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.base
    }
}

impl<T: Extendible> ExtGroups<T> for Ext<'_, T> {
    fn __groups(&self) -> T::Refs<'_> {
        T::__refs_of_reads(&self.base, &self.groups)
    }
}

/// A micro-buffer view of an `#[extendible]` object and all its extension groups, inside
/// a transaction (`tx.ext_mut(oid)`): the generated setters change any field, old or new,
/// marking only the bytes they write.
pub struct ExtMut<'tx, T: Extendible> {
    base: Mut<'tx, T>,
    groups: T::Muts<'tx>,
}

impl<'tx, T: Extendible> ExtMut<'tx, T> {
    pub(crate) fn new(base: Mut<'tx, T>, groups: T::Muts<'tx>) -> Self {
        ExtMut { base, groups }
    }

    /// The object's oid.
    pub fn oid(&self) -> Oid<T> {
        self.base.oid()
    }
}

impl<T: Extendible> Deref for ExtMut<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.base
    }
}

impl<T: Extendible> AsPlace<T> for ExtMut<'_, T> {
    fn place(&mut self) -> Place<'_, T> {
        self.base.place()
    }
}

impl<T: Extendible> ExtGroups<T> for ExtMut<'_, T> {
    fn __groups(&self) -> T::Refs<'_> {
        T::__refs_of_muts(&self.base, &self.groups)
    }
}

impl<T: Extendible> ExtPlaces<T> for ExtMut<'_, T> {
    fn __places(&mut self) -> T::Places<'_> {
        T::__places(&mut self.base, &mut self.groups)
    }
}

impl<T: Extendible + core::fmt::Debug> core::fmt::Debug for Ext<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ext")
            .field("oid", &self.oid)
            .field("base", &*self.base)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread's next view takes the image its last one gave back, unless that image held
    /// more heap storage than a spare keeps.
    #[test]
    fn a_spare_image_is_reused_unless_it_is_large() {
        let small = image_of::<[u64; 4]>();
        let at = &*small as *const ObjImage;
        give_back(small);
        let again = image_of::<[u64; 8]>();
        assert_eq!(&*again as *const ObjImage, at, "the spare, made over");
        assert_eq!(again.bytes().len(), 64);
        give_back(again);
        let mut big = image_of::<[u64; 600]>();
        assert!(big.heap_bytes() > SPARE_MAX);
        big.reuse_for::<u64>();
        give_back(big);
        let next = image_of::<u64>();
        assert_eq!(next.heap_bytes(), 0, "the large image was freed, not kept");
    }
}
