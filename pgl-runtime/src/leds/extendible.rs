//! The [`Extendible`] trait: what `#[extendible]` tells the runtime about a struct and its
//! extension groups, so that `leds::chain` can walk, upgrade, create, copy and free chains
//! generically.
//!
//! Invariant (kept by the attribute): the struct's last field is the [`ExtLink`] to group
//! 1; group `k` is a persistent struct whose last field is the link to group `k + 1`; the
//! `__*` functions reach group `k` only through typed transaction calls (`tx.get`,
//! `tx.open`, `tx.alloc`), so every group is type- and layout-checked like any object.
//!
//! [`ExtLink`]: super::ExtLink

use crate::persistent::{Oid, Persistent};
use crate::tx::Tx;
use crate::Result;

/// The most extension groups one struct may have.
pub const MAX_GROUPS: usize = 32;

/// A struct made `#[extendible]`: a frozen base and numbered extension groups, each a
/// separate object linked from the one before, created lazily when a program that knows
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
///   invariant);
/// - `__muts` opens only the groups of the chain that starts at `first`, `__set_next`
///   only group `k` at `off`, `__alloc` only the groups it allocates itself, and
///   `__upgrade` opens no group: none of them changes a group of an owner the caller
///   does not hold write-locked;
/// - `__upgrade` returns the offset of the group it allocated (the caller links it to the
///   object: any other offset would give that group a second owner).
///
/// A hand-written impl could open another owner's group there and change it under that
/// owner's readers, whose references into the pool would see it change.
pub unsafe trait Extendible: Persistent {
    /// Every field of the struct as this build defines it (the base fields, replaced ones
    /// excepted, and every extension field): what [`Tx::alloc_ext`] takes.
    type Data: ExtendibleData<Struct = Self>;
    /// The read handles of groups 1 to `GROUPS`.
    #[doc(hidden)]
    type Reads<'tx>;
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
    /// `(TYPE_ID, LAYOUT)` of groups 1 to `GROUPS`, as this build defines them.
    #[doc(hidden)]
    const GROUP_KEYS: &'static [(u32, u64)];

    /// The link to group 1 stored in the base.
    #[doc(hidden)]
    fn __link(&self) -> u64;
    /// The link stored in group `k` (1-based), read as the group's type.
    #[doc(hidden)]
    fn __next(tx: &Tx<'_>, k: usize, off: u64) -> Result<u64>;
    /// Allocates group `k` with its fields initialised from `base` and the groups before
    /// it (`groups[i]` is the offset of group `i + 1`), its link null; its offset.
    #[doc(hidden)]
    fn __upgrade(tx: &Tx<'_>, k: usize, base: &Self, groups: &[u64]) -> Result<u64>;
    /// Sets the link of group `k` (at `off`) to `next`.
    #[doc(hidden)]
    fn __set_next(tx: &Tx<'_>, k: usize, off: u64, next: u64) -> Result<()>;
    /// Allocates a new object and all its groups from `data`.
    #[doc(hidden)]
    fn __alloc(tx: &Tx<'_>, data: Self::Data) -> Result<Oid<Self>>;
    /// Read handles of groups 1 to `GROUPS`, found by following the links from `first`
    /// (the base's link); `None` if the chain ends before group `GROUPS`.
    #[doc(hidden)]
    fn __reads<'tx>(tx: &'tx Tx<'_>, first: u64) -> Result<Option<Self::Reads<'tx>>>;
    /// Micro-buffer handles of groups 1 to `GROUPS`, found as [`Extendible::__reads`]
    /// finds them.
    #[doc(hidden)]
    fn __muts<'tx>(tx: &'tx Tx<'_>, first: u64) -> Result<Option<Self::Muts<'tx>>>;
    /// References through read handles.
    #[doc(hidden)]
    fn __refs_of_reads<'a>(reads: &'a Self::Reads<'_>) -> Self::Refs<'a>;
    /// References through micro-buffer handles.
    #[doc(hidden)]
    fn __refs_of_muts<'a>(muts: &'a Self::Muts<'_>) -> Self::Refs<'a>;
    /// Places through micro-buffer handles.
    #[doc(hidden)]
    fn __places<'a>(muts: &'a mut Self::Muts<'_>) -> Self::Places<'a>;
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
