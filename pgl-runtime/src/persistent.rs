//! The [`Persistent`] trait: types whose bytes may live in a pool file, and [`Oid`], the
//! typed offset of a persistent object.
//!
//! Invariant: a `Persistent` type is valid for every bit pattern of its size, has no
//! padding, holds no pointers, and is aligned to at most [`MAX_ALIGN`] bytes, so a pool
//! file's bytes can be viewed as one without any validation beyond the object checksum.

use core::fmt;
use core::hash::{Hash, Hasher};
use core::marker::PhantomData;

/// The largest alignment a persistent type may have: object payloads start 16 bytes
/// after a 16-byte aligned block.
pub const MAX_ALIGN: usize = 16;

/// A type whose values can be stored in a pool.
///
/// Implement it with `#[derive(Persistent)]`; the derive proves every requirement below at
/// compile time.
///
/// # Safety
///
/// An implementor guarantees that:
/// - every bit pattern of `size_of::<Self>()` bytes is a valid value of `Self` (the file may
///   hold anything);
/// - `Self` has no padding bytes and no interior mutability;
/// - `Self` holds no references or pointers (only [`Oid`]s);
/// - `align_of::<Self>() <= MAX_ALIGN` and `size_of::<Self>() > 0`;
/// - `TYPE_ID` and `LAYOUT` are the same in every build of the same definition.
pub unsafe trait Persistent: Send + Sync + Sized + 'static {
    /// Stable identifier of the type, stored in each object's header.
    const TYPE_ID: u32;
    /// Fingerprint of the layout (field names, types, offsets, sizes).
    const LAYOUT: u64;
    /// The type's name as written in the source, for messages.
    const TYPE_NAME: &'static str;
    /// Whether an object of this type owns a *tail*: its last 8 bytes are the offset
    /// (u64 LE, 0 = none) of another object that ends with such a link in turn, and so on
    /// (an `#[extendible]` base and its extension groups). `Tx::free` frees the tail too.
    #[doc(hidden)]
    const __OWNS_TAIL: bool = false;
    /// Whether this is an extension group of an `#[extendible]` struct (its hidden
    /// struct, `#[pgl(__group_of(..))]`): its bytes change only through its owner, in a
    /// transaction holding the owner's write lock (see `tx::GroupScope`), so `tx.open`
    /// (outside the generated glue), `tx.free` and `pool.open_mut` refuse it. (An
    /// allocation of one is allowed: a group no owner links changes no one's reads.)
    #[doc(hidden)]
    const __GROUP: bool = false;
    /// Bytes an object of this type keeps after its value for extension groups stored
    /// inline (`#[extendible(reserve = N)]`): the object's payload is the value, then
    /// these bytes, which only pgl reads and writes (see `leds::inline`). 0 for every other
    /// type.
    #[doc(hidden)]
    const __RESERVE: usize = 0;
}

/// Payload bytes of an object of type `T`: its value, then its reserve.
#[inline]
pub(crate) const fn object_size<T: Persistent>() -> usize {
    size_of::<T>() + T::__RESERVE
}

/// The bytes of a persistent value (its in-pool representation).
pub(crate) fn bytes_of<T: Persistent>(value: &T) -> &[u8] {
    // A generic `#[derive(Persistent)]` struct proves it has no padding with its type
    // arguments only where its `LAYOUT` is evaluated: evaluate it for every type whose bytes
    // are read (`write_at` reads a value of a type the pool may never have checked).
    let _: u64 = const { T::LAYOUT };
    // SAFETY: a `Persistent` type has no padding (trait contract), so all
    // `size_of::<T>()` bytes behind a valid reference are initialised; the slice borrows
    // `value` and lives no longer.
    unsafe { core::slice::from_raw_parts(value as *const T as *const u8, size_of::<T>()) }
}

/// FNV-1a over bytes; `const` so that type ids of built-in types are computed at compile time.
#[doc(hidden)]
pub const fn fnv1a64(bytes: &[u8], seed: u64) -> u64 {
    let mut h = seed ^ 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

/// Mixes two 64-bit values (for composite fingerprints).
#[doc(hidden)]
pub const fn mix64(a: u64, b: u64) -> u64 {
    let mut x = a ^ b.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The first type id kept for pgl's own use (objects of its own, in later formats); user types never
/// have one (`#[pgl(id)]` rejects them, hashed ids are folded below it).
pub const RESERVED_TYPE_IDS: u32 = 0xffff_ff00;

/// Folds a 64-bit hash into a 32-bit type id (never 0, which marks "no type", and never a
/// reserved id).
#[doc(hidden)]
pub const fn fold_type_id(h: u64) -> u32 {
    let v = (h ^ (h >> 32)) as u32;
    if v == 0 {
        1
    } else if v >= RESERVED_TYPE_IDS {
        v & 0x7fff_ffff
    } else {
        v
    }
}

/// The type id of extension group `k` (1, 2, ...) of the `#[extendible]` struct whose id is
/// `base`: what `#[extendible]` gives the group's hidden struct, and how the runtime tells
/// which part of a struct a layout mismatch is about.
#[doc(hidden)]
pub const fn group_type_id(base: u32, k: u64) -> u32 {
    fold_type_id(mix64(base as u64, 0x1ed5_0000 + k))
}

macro_rules! primitive {
    ($($t:ty),*) => {$(
        // SAFETY: fixed-width integers and floats are valid for every bit pattern, have no
        // padding and no pointers, and align to at most 8 bytes.
        unsafe impl Persistent for $t {
            const TYPE_ID: u32 = fold_type_id(fnv1a64(stringify!($t).as_bytes(), 0));
            const LAYOUT: u64 = fnv1a64(stringify!($t).as_bytes(), core::mem::size_of::<$t>() as u64);
            const TYPE_NAME: &'static str = stringify!($t);
        }
    )*};
}
primitive!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64);

// SAFETY: an array of a persistent type has no padding between elements (size is a multiple
// of alignment), is valid for every bit pattern when its element is, and holds no pointers.
// `N > 0` is required by the zero-size rule and checked where objects are allocated.
unsafe impl<T: Persistent, const N: usize> Persistent for [T; N] {
    // A TYPE_ID never reads a LAYOUT: `Oid<Self>` fields would make the constants cyclic.
    const TYPE_ID: u32 = fold_type_id(mix64(T::TYPE_ID as u64 ^ 0x000a_11a7, N as u64));
    const LAYOUT: u64 = mix64(T::LAYOUT, N as u64 ^ 0x5eed);
    const TYPE_NAME: &'static str = "array";
}

/// A typed reference to a persistent object: the pool offset of its payload.
///
/// 8 bytes on media, little-endian; `0` is the null `Oid`. An `Oid` is only a number: every
/// access checks that it points at a live object of type `T` in the pool it is used with.
#[repr(transparent)]
pub struct Oid<T> {
    off: u64,
    _type: PhantomData<fn() -> T>,
}

impl<T> Oid<T> {
    /// The null oid (offset 0, never a valid object).
    pub const NULL: Self = Self::from_raw(0);

    /// An oid from a raw pool offset. Any value is allowed: it is checked on use.
    pub const fn from_raw(off: u64) -> Self {
        Self {
            off: u64::from_le(off),
            _type: PhantomData,
        }
    }

    /// The pool offset of the object's payload.
    pub const fn raw(self) -> u64 {
        u64::from_le(self.off)
    }

    /// Whether this is the null oid.
    pub const fn is_null(self) -> bool {
        self.off == 0
    }

    /// The same offset viewed as an oid of another type (checked again on use).
    pub const fn cast<U>(self) -> Oid<U> {
        Oid::from_raw(self.raw())
    }
}

impl<T> Clone for Oid<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Oid<T> {}
impl<T> PartialEq for Oid<T> {
    fn eq(&self, other: &Self) -> bool {
        self.off == other.off
    }
}
impl<T> Eq for Oid<T> {}
impl<T> PartialOrd for Oid<T> {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Oid<T> {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.raw().cmp(&other.raw())
    }
}
impl<T> Hash for Oid<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.off.hash(state)
    }
}
impl<T> Default for Oid<T> {
    fn default() -> Self {
        Self::NULL
    }
}
impl<T> fmt::Debug for Oid<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_null() {
            write!(f, "Oid(null)")
        } else {
            write!(f, "Oid({:#x})", self.raw())
        }
    }
}

// SAFETY: `Oid<T>` is a transparent `u64` (valid for every bit pattern, no padding, align 8);
// the PhantomData is zero-sized and `fn() -> T` keeps it Send + Sync for any T.
unsafe impl<T: Persistent> Persistent for Oid<T> {
    // Reads only the target's TYPE_ID, so self-referential structs (`next: Oid<Node>`) work.
    const TYPE_ID: u32 = fold_type_id(mix64(T::TYPE_ID as u64, 0x001d));
    const LAYOUT: u64 = mix64(T::TYPE_ID as u64, 0x0001_d01d);
    const TYPE_NAME: &'static str = "Oid";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_differ_and_are_nonzero() {
        let ids = [
            u8::TYPE_ID,
            u16::TYPE_ID,
            u32::TYPE_ID,
            u64::TYPE_ID,
            i64::TYPE_ID,
            f64::TYPE_ID,
            <[u8; 64]>::TYPE_ID,
            <[u8; 65]>::TYPE_ID,
            <Oid<u64>>::TYPE_ID,
        ];
        for (i, a) in ids.iter().enumerate() {
            assert_ne!(*a, 0);
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn oid_roundtrip() {
        let o: Oid<u64> = Oid::from_raw(0x1234);
        assert_eq!(o.raw(), 0x1234);
        assert!(!o.is_null());
        assert!(Oid::<u64>::NULL.is_null());
        assert_eq!(format!("{o:?}"), "Oid(0x1234)");
        assert_eq!(core::mem::size_of::<Oid<u64>>(), 8);
    }
}
