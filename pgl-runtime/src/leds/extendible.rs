//! The [`Extendible`] trait: what `#[extendible]` tells the runtime about a struct and its
//! extension groups, so that `leds::chain` can walk, upgrade, create, copy and free chains
//! generically.
//!
//! Invariant (kept by the attribute): the struct's last field is the [`ExtLink`] to group
//! 1; group `k` is a persistent struct whose last field is the link to group `k + 1`; the
//! `__*` functions reach group `k` only through typed transaction calls (`tx.get`,
//! `tx.open`, `tx.alloc`), so every group is type- and layout-checked like any object; an
//! inline group, which has no header, has its layout checked (and registered when stored)
//! by `tx.__inline_layout` before it is read or written.
//!
//! [`ExtLink`]: super::ExtLink

use super::inline::ObjImage;
use crate::persistent::{Oid, Persistent};
use crate::tx::{Mut, Read, Tx};
use crate::Result;

/// The most extension groups one struct may have.
pub const MAX_GROUPS: usize = 32;

/// A struct made `#[extendible]`: a frozen base and numbered extension groups, the first
/// ones kept inline in the object's reserve if it has one (`leds::inline`), the others
/// separate objects linked from the one before, created lazily when a program that knows
/// the group first uses an object written by one that did not.
///
/// Implemented by `#[extendible]`; the `__` items are its generated glue, not an API.
///
/// # Safety
///
/// `leds::chain` runs the glue in the group scope `tx::GroupScope::Write`, where
/// `Tx::open` accepts an extension group (`Persistent::__GROUP`) under its owner's write
/// lock alone, and groups are read in place by holders of that lock (see `GroupScope`).
/// An implementor guarantees that:
/// - the struct's last field is the [`ExtLink`](super::ExtLink) to group 1, which
///   `__link` reads, and each group ends with the link to the next (the module's
///   invariant; the link of a group kept inline is never read, and the last inline
///   group's may lie past the object: inline groups are reached only as
///   [`GroupRef`](super::GroupRef) and [`GroupPlace`](super::GroupPlace), which cover
///   their fields alone);
/// - `__muts` opens only the groups of the chain that starts at `first`, `__set_next`
///   only group `k` at `off`, `__alloc` only the groups it allocates itself, and
///   `__upgrade` opens no group: none of them changes a group of an owner the caller
///   does not hold write-locked;
/// - `__upgrade` returns the offset of the group it allocated (the caller links it to the
///   object: any other offset would give that group a second owner), or 0 when asked to
///   put the group inline;
/// - every entry of `__INLINE_AT` other than `usize::MAX` is what
///   [`inline_places`](super::inline_places) gives for the value's size, `__RESERVE`
///   and the groups' sizes and alignments (so group `k` lies inside the reserve, aligned,
///   apart from the other groups), and `__refs_of_reads`, `__refs_of_muts` and `__places`
///   make references and places of inline group `k` only there, from the base handle
///   they are given.
/// - `Reads::default()` holds no group handle: it is what `__reads` gives for an object
///   whose groups all lie in its reserve (`Tx::ext` makes it without calling `__reads`
///   when this process has checked their layouts).
///
/// A hand-written impl could open another owner's group there and change it under that
/// owner's readers, whose references into the pool would see it change.
pub unsafe trait Extendible: Persistent {
    /// Every field of the struct as this build defines it (the base fields, replaced ones
    /// excepted, and every extension field): what [`Tx::alloc_ext`] takes.
    type Data: ExtendibleData<Struct = Self>;
    /// The read handles of groups 1 to `GROUPS`.
    #[doc(hidden)]
    type Reads<'tx>: Default;
    /// The micro-buffer handles of groups 1 to `GROUPS`.
    #[doc(hidden)]
    type Muts<'tx>;
    /// References to groups 1 to `GROUPS`.
    #[doc(hidden)]
    type Refs<'a>;
    /// Places of groups 1 to `GROUPS`.
    #[doc(hidden)]
    type Places<'a>;

    /// The number of extension groups this build knows.
    const GROUPS: usize;
    /// `#[extendible(upgrade = on_write)]`: an object that lacks groups is read through a
    /// view of it upgraded in DRAM, and upgraded in the pool only when it is written
    /// through `tx.ext_mut` (or `tx.upgrade`, `pool.upgrade_all`). Only with every group
    /// kept in the reserve (the attribute checks it when it compiles).
    #[doc(hidden)]
    const __UPGRADE_ON_WRITE: bool = false;
    /// The payload offset of each group kept inline (`__INLINE_AT[k - 1]` for group `k`),
    /// `usize::MAX` for groups kept in separate objects: see `leds::inline`.
    #[doc(hidden)]
    const __INLINE_AT: &'static [usize];
    /// `(TYPE_ID, LAYOUT)` of groups 1 to `GROUPS`, as this build defines them.
    #[doc(hidden)]
    const GROUP_KEYS: &'static [(u32, u64)];

    /// The link stored in the base: its first separate group and its inline count (see
    /// `leds::link`).
    #[doc(hidden)]
    fn __link(&self) -> u64;
    /// The link stored in separate group `k` (1-based), read as the group's type.
    #[doc(hidden)]
    fn __next(tx: &Tx<'_>, k: usize, off: u64) -> Result<u64>;
    /// Makes group `k` with its fields initialised from the version before it: the value
    /// and inline groups in `image` (the object's payload), separate groups at
    /// `groups[i]` for group `i + 1` (0 where it is inline). With `inline`, stores it in
    /// `image` at `__INLINE_AT[k - 1]` and returns 0; else allocates it, its link null, and
    /// returns its offset.
    #[doc(hidden)]
    fn __upgrade(
        tx: &Tx<'_>,
        k: usize,
        image: &mut ObjImage,
        groups: &[u64],
        inline: bool,
    ) -> Result<u64>;
    /// Sets the link of separate group `k` (at `off`) to `next`.
    #[doc(hidden)]
    fn __set_next(tx: &Tx<'_>, k: usize, off: u64, next: u64) -> Result<()>;
    /// Allocates a new object and all its groups from `data`.
    #[doc(hidden)]
    fn __alloc(tx: &Tx<'_>, data: Self::Data) -> Result<Oid<Self>>;
    /// Read handles of groups 1 to `GROUPS`: none for the first `inline` (they are read
    /// from the base), the rest found by following the links from `first` (the base's
    /// first separate group); `None` if the chain ends before group `GROUPS`.
    #[doc(hidden)]
    fn __reads<'tx>(tx: &'tx Tx<'_>, first: u64, inline: usize)
        -> Result<Option<Self::Reads<'tx>>>;
    /// Micro-buffer handles of groups 1 to `GROUPS`, found as [`Extendible::__reads`]
    /// finds them.
    #[doc(hidden)]
    fn __muts<'tx>(tx: &'tx Tx<'_>, first: u64, inline: usize) -> Result<Option<Self::Muts<'tx>>>;
    /// References to the groups, inline ones in `base`'s reserve.
    #[doc(hidden)]
    fn __refs_of_reads<'a>(base: &'a Read<'_, Self>, reads: &'a Self::Reads<'_>) -> Self::Refs<'a>;
    /// References to the groups, inline ones in `base`'s reserve.
    #[doc(hidden)]
    fn __refs_of_muts<'a>(base: &'a Mut<'_, Self>, muts: &'a Self::Muts<'_>) -> Self::Refs<'a>;
    /// Places of the groups, inline ones in `base`'s reserve.
    #[doc(hidden)]
    fn __places<'a>(base: &'a mut Mut<'_, Self>, muts: &'a mut Self::Muts<'_>) -> Self::Places<'a>;
}

/// The `<Struct>Data` of an `#[extendible]` struct: every field of it, for
/// [`Tx::alloc_ext`].
pub trait ExtendibleData {
    /// The struct.
    type Struct: Extendible<Data = Self>;
}

/// Handles that show every group of an extendible `T` ([`Ext`](super::Ext),
/// [`ExtMut`](super::ExtMut)); the getters `#[extendible]` generates require it.
#[doc(hidden)]
pub trait ExtGroups<T: Extendible> {
    /// References to the groups.
    fn __groups(&self) -> T::Refs<'_>;
}

/// Handles that may change every group of an extendible `T` ([`ExtMut`](super::ExtMut));
/// the setters `#[extendible]` generates require it.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is a read-only view of a `{T}`",
    label = "this handle cannot change the object",
    note = "open it for update with `tx.ext_mut(oid)`"
)]
pub trait ExtPlaces<T: Extendible> {
    /// Places of the groups.
    fn __places(&mut self) -> T::Places<'_>;
}

/// Runs an `init = |old| ...` closure on the view of the older version; its signature
/// fixes the closure's argument type for inference.
#[doc(hidden)]
#[inline]
pub fn run_init<O, R>(old: &O, init: impl FnOnce(&O) -> R) -> R {
    init(old)
}

/// A zero-filled `T` (the value of a replaced base field in objects created after the
/// replacement).
#[doc(hidden)]
#[inline]
pub fn zeroed<T: Persistent>() -> T {
    // SAFETY: a `Persistent` type is valid for every bit pattern, zeros included.
    unsafe { core::mem::zeroed() }
}
