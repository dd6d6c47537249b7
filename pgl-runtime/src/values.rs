//! Persistent stand-ins for values Rust's own types cannot keep in a pool file: [`PBool`] for
//! `bool`, [`PStr`] for `String`/`str`, [`PBytes`] for `Vec<u8>`.
//!
//! Invariant: each wrapper is valid for every bit pattern (alignment 1, no padding, no
//! pointers), and its accessors never panic or expose invalid data whatever bytes the file
//! holds: any non-zero `PBool` byte is true, a stored length is clamped to the capacity, and
//! a `PStr` shows only the longest valid UTF-8 prefix of its bytes. Setters keep the bytes
//! after the length zero, so equal values written by pgl have equal bytes and checksums.

use core::cmp::Ordering;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::mem::{align_of, size_of};
use core::ops::Deref;

use crate::error::{Error, Result};
use crate::persistent::{fnv1a64, fold_type_id, mix64, Persistent};

/// A `bool` that may live in a pool: one byte, where `0` is false and any other value true.
///
/// Rust's `bool` allows only the bytes 0 and 1, but a pool file may hold anything, so the
/// derive refuses `bool` fields and points here. Equality and hashing compare the truth
/// value, not the byte: a `PBool` read as `0x02` equals [`PBool::TRUE`].
///
/// ```
/// use pgl_runtime::PBool;
///
/// let done = PBool::new(true);
/// assert!(done.get());
/// assert_eq!(done, PBool::TRUE);
/// assert_eq!(bool::from(PBool::default()), false);
/// assert_eq!(PBool::from(false).to_string(), "false");
/// ```
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub struct PBool(u8);

const _: () = assert!(size_of::<PBool>() == 1 && align_of::<PBool>() == 1);

impl PBool {
    /// True, stored as `1`.
    pub const TRUE: Self = Self(1);
    /// False, stored as `0`.
    pub const FALSE: Self = Self(0);

    /// `b` as a `PBool` (stored as `1` or `0`).
    pub const fn new(b: bool) -> Self {
        Self(b as u8)
    }

    /// The truth value: `false` for the byte `0`, `true` for any other byte (not only `1`).
    pub const fn get(self) -> bool {
        self.0 != 0
    }

    /// Stores `b` (as `1` or `0`).
    pub fn set(&mut self, b: bool) {
        *self = Self::new(b);
    }
}

impl From<bool> for PBool {
    fn from(b: bool) -> Self {
        Self::new(b)
    }
}

impl From<PBool> for bool {
    fn from(b: PBool) -> Self {
        b.get()
    }
}

impl PartialEq for PBool {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for PBool {}

impl Hash for PBool {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.get().hash(state)
    }
}

impl fmt::Debug for PBool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
    }
}

impl fmt::Display for PBool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.get(), f)
    }
}

// SAFETY: `PBool` is a transparent `u8`: valid for every bit pattern (every byte has a
// meaning, see `get`), 1 byte with no padding, align 1 <= MAX_ALIGN, no pointers and no
// interior mutability (so it is Send + Sync). TYPE_ID and LAYOUT are constants of the name.
unsafe impl Persistent for PBool {
    const TYPE_ID: u32 = fold_type_id(fnv1a64(b"pgl::PBool", 0));
    const LAYOUT: u64 = mix64(fnv1a64(b"pgl::PBool{u8}", 0), size_of::<Self>() as u64);
    const TYPE_NAME: &'static str = "PBool";
}

/// Offset of the length in [`Inline`]: a `u32`, little-endian.
const LEN_OFFSET: usize = 0;
/// Offset of the first content byte in [`Inline`].
const BYTES_OFFSET: usize = LEN_OFFSET + size_of::<u32>();

/// The layout shared by [`PStr`] and [`PBytes`]: a length, then `N` bytes of capacity.
///
/// ```text
/// offset  size  field
/// 0       4     len    u32 little-endian; any value, read clamped to N
/// 4       N     bytes  the content in bytes[..len], zero after it when pgl wrote it
/// ```
#[derive(Clone, Copy)]
#[repr(C)]
struct Inline<const N: usize> {
    len: [u8; 4],
    bytes: [u8; N],
}

const _: () = {
    assert!(core::mem::offset_of!(Inline<0>, len) == LEN_OFFSET);
    assert!(core::mem::offset_of!(Inline<0>, bytes) == BYTES_OFFSET);
    assert!(core::mem::offset_of!(Inline<7>, bytes) == BYTES_OFFSET);
    assert!(size_of::<Inline<0>>() == BYTES_OFFSET && align_of::<Inline<0>>() == 1);
    assert!(size_of::<Inline<7>>() == BYTES_OFFSET + 7 && align_of::<Inline<7>>() == 1);
};

impl<const N: usize> Inline<N> {
    const EMPTY: Self = Self {
        len: [0; 4],
        bytes: [0; N],
    };

    /// Checked wherever a length is written or a type id computed: a length must fit the
    /// `u32` field, so the capacity must too.
    const CAPACITY_FITS: () = assert!(
        N <= u32::MAX as usize,
        "the capacity of a PStr or PBytes must fit in a u32"
    );

    /// The stored length, clamped to the capacity.
    fn len(&self) -> usize {
        let len = u32::from_le_bytes(self.len);
        usize::try_from(len).map_or(N, |len| len.min(N))
    }

    /// The content bytes, `bytes[..len]` with the length clamped.
    fn content(&self) -> &[u8] {
        &self.bytes[..self.len()]
    }

    /// `bytes` as an `Inline`, or `TooLong` naming `what`.
    fn from_bytes(what: &'static str, bytes: &[u8]) -> Result<Self> {
        let mut v = Self::EMPTY;
        v.store(what, bytes)?;
        Ok(v)
    }

    /// Stores `bytes` and zeroes the rest; leaves `self` unchanged when they do not fit.
    fn store(&mut self, what: &'static str, bytes: &[u8]) -> Result<()> {
        if bytes.len() > N {
            return Err(Error::TooLong {
                what,
                len: bytes.len(),
                capacity: N,
            });
        }
        self.write(bytes);
        Ok(())
    }

    /// Stores `bytes` and zeroes the rest; the caller has checked `bytes.len() <= N`.
    fn write(&mut self, bytes: &[u8]) {
        let () = Self::CAPACITY_FITS;
        let (head, tail) = self.bytes.split_at_mut(bytes.len());
        head.copy_from_slice(bytes);
        tail.fill(0);
        // Fits: `bytes.len() <= N <= u32::MAX` (CAPACITY_FITS).
        self.len = (bytes.len() as u32).to_le_bytes();
    }

    /// LAYOUT of a wrapper named `name` over this layout.
    const fn layout(name: &[u8]) -> u64 {
        let () = Self::CAPACITY_FITS;
        assert!(size_of::<Self>() == BYTES_OFFSET + N && align_of::<Self>() == 1);
        mix64(
            fnv1a64(name, fnv1a64(b"{len:u32le,bytes:[u8;N]}", 0)),
            N as u64,
        )
    }
}

/// A UTF-8 string of at most `N` bytes, stored inline: `N + 4` bytes in the pool.
///
/// The layout is a `u32` little-endian length followed by `N` bytes. Since the file may hold
/// any bytes, reading never trusts them: the length is clamped to `N`, and [`as_str`]
/// returns the longest valid UTF-8 prefix of the content, so it never panics. Values written
/// through `PStr`'s own methods always read back whole.
///
/// `PStr` dereferences to `str`, and compares, orders and hashes by its [`as_str`].
///
/// ```
/// use pgl_runtime::PStr;
///
/// let mut name = PStr::<16>::new("Ada")?;
/// assert_eq!(name, "Ada");
/// assert_eq!(name.len(), 3);
/// assert!(name.starts_with('A')); // any `str` method, through `Deref`
///
/// assert!(name.set("a name far longer than sixteen bytes").is_err());
/// assert_eq!(name, "Ada"); // unchanged by the failed set
///
/// let cut = PStr::<3>::truncating("naïve"); // 'ï' is bytes 2..4: it does not fit
/// assert_eq!(cut, "na");
/// # Ok::<(), pgl_runtime::Error>(())
/// ```
///
/// [`as_str`]: PStr::as_str
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct PStr<const N: usize> {
    inner: Inline<N>,
}

impl<const N: usize> PStr<N> {
    /// `s` as a `PStr`, or [`Error::TooLong`] when it is longer than `N` bytes.
    pub fn new(s: &str) -> Result<Self> {
        Inline::from_bytes("PStr", s.as_bytes()).map(|inner| Self { inner })
    }

    /// The longest prefix of `s` that fits in `N` bytes and ends at a character boundary.
    pub fn truncating(s: &str) -> Self {
        let mut end = s.len().min(N);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut v = Self::default();
        v.inner.write(&s.as_bytes()[..end]);
        v
    }

    /// Replaces the content with `s`; on [`Error::TooLong`] the content is unchanged.
    pub fn set(&mut self, s: &str) -> Result<()> {
        self.inner.store("PStr", s.as_bytes())
    }

    /// The string: the stored length clamped to `N`, then the longest valid UTF-8 prefix of
    /// those bytes. Never panics, whatever the pool file holds.
    pub fn as_str(&self) -> &str {
        let content = self.inner.content();
        match core::str::from_utf8(content) {
            Ok(s) => s,
            // The prefix up to `valid_up_to` is valid UTF-8, so the default is never used.
            Err(e) => core::str::from_utf8(&content[..e.valid_up_to()]).unwrap_or_default(),
        }
    }

    /// The bytes of [`as_str`](Self::as_str) (so always valid UTF-8).
    pub fn as_bytes(&self) -> &[u8] {
        self.as_str().as_bytes()
    }

    /// The length of [`as_str`](Self::as_str) in bytes.
    pub fn len(&self) -> usize {
        self.as_str().len()
    }

    /// Whether [`as_str`](Self::as_str) is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity in bytes, `N`.
    pub const fn capacity() -> usize {
        N
    }

    /// Empties the string (and zeroes its bytes).
    pub fn clear(&mut self) {
        self.inner = Inline::EMPTY;
    }
}

impl<const N: usize> Default for PStr<N> {
    /// The empty string.
    fn default() -> Self {
        Self {
            inner: Inline::EMPTY,
        }
    }
}

impl<const N: usize> TryFrom<&str> for PStr<N> {
    type Error = Error;

    fn try_from(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

impl<const N: usize> Deref for PStr<N> {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> AsRef<str> for PStr<N> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> PartialEq for PStr<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl<const N: usize> Eq for PStr<N> {}

impl<const N: usize> PartialEq<str> for PStr<N> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl<const N: usize> PartialEq<&str> for PStr<N> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl<const N: usize> PartialOrd for PStr<N> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<const N: usize> Ord for PStr<N> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl<const N: usize> Hash for PStr<N> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that a `Borrow<str>` impl would stay consistent.
        self.as_str().hash(state)
    }
}

impl<const N: usize> fmt::Debug for PStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> fmt::Display for PStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

// SAFETY: `PStr<N>` is a transparent `Inline<N>`, a `#[repr(C)]` struct of `[u8; 4]` and
// `[u8; N]`: valid for every bit pattern (any length is clamped and any bytes are cut to
// valid UTF-8 when read), align 1 <= MAX_ALIGN so no padding (`layout` asserts the size is
// N + 4), size >= 4 > 0 even for N = 0, no pointers and no interior mutability (so Send +
// Sync). TYPE_ID and LAYOUT are constants of the name and N, and TYPE_ID reads no LAYOUT.
unsafe impl<const N: usize> Persistent for PStr<N> {
    const TYPE_ID: u32 = {
        let () = Inline::<N>::CAPACITY_FITS;
        fold_type_id(mix64(fnv1a64(b"pgl::PStr", 0), N as u64))
    };
    const LAYOUT: u64 = Inline::<N>::layout(b"pgl::PStr");
    const TYPE_NAME: &'static str = "PStr";
}

/// At most `N` bytes stored inline: `N + 4` bytes in the pool.
///
/// The layout is a `u32` little-endian length followed by `N` bytes. Since the file may hold
/// any bytes, the length is clamped to `N` when read, so [`as_slice`](PBytes::as_slice)
/// never panics.
///
/// `PBytes` dereferences to `[u8]`, and compares, orders and hashes as that slice.
///
/// ```
/// use pgl_runtime::PBytes;
///
/// let mut key = PBytes::<8>::new(&[1, 2, 3])?;
/// assert_eq!(key.as_slice(), &[1, 2, 3]);
/// assert_eq!(key.len(), 3);
/// assert_eq!(key.first(), Some(&1)); // any slice method, through `Deref`
///
/// assert!(key.set(&[0; 9]).is_err());
/// key.clear();
/// assert!(key.is_empty());
/// # Ok::<(), pgl_runtime::Error>(())
/// ```
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct PBytes<const N: usize> {
    inner: Inline<N>,
}

impl<const N: usize> PBytes<N> {
    /// `bytes` as a `PBytes`, or [`Error::TooLong`] when there are more than `N`.
    pub fn new(bytes: &[u8]) -> Result<Self> {
        Inline::from_bytes("PBytes", bytes).map(|inner| Self { inner })
    }

    /// Replaces the content with `bytes`; on [`Error::TooLong`] the content is unchanged.
    pub fn set(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.store("PBytes", bytes)
    }

    /// The content: as many bytes as the stored length says, clamped to `N`.
    pub fn as_slice(&self) -> &[u8] {
        self.inner.content()
    }

    /// The length of [`as_slice`](Self::as_slice).
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether [`as_slice`](Self::as_slice) is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity in bytes, `N`.
    pub const fn capacity() -> usize {
        N
    }

    /// Empties the content (and zeroes its bytes).
    pub fn clear(&mut self) {
        self.inner = Inline::EMPTY;
    }
}

impl<const N: usize> Default for PBytes<N> {
    /// No bytes.
    fn default() -> Self {
        Self {
            inner: Inline::EMPTY,
        }
    }
}

impl<const N: usize> TryFrom<&[u8]> for PBytes<N> {
    type Error = Error;

    fn try_from(bytes: &[u8]) -> Result<Self> {
        Self::new(bytes)
    }
}

impl<const N: usize> Deref for PBytes<N> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl<const N: usize> AsRef<[u8]> for PBytes<N> {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl<const N: usize> PartialEq for PBytes<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<const N: usize> Eq for PBytes<N> {}

impl<const N: usize> PartialEq<[u8]> for PBytes<N> {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl<const N: usize> PartialEq<&[u8]> for PBytes<N> {
    fn eq(&self, other: &&[u8]) -> bool {
        self.as_slice() == *other
    }
}

impl<const N: usize> PartialOrd for PBytes<N> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<const N: usize> Ord for PBytes<N> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl<const N: usize> Hash for PBytes<N> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl<const N: usize> fmt::Debug for PBytes<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

// SAFETY: `PBytes<N>` is a transparent `Inline<N>`, a `#[repr(C)]` struct of `[u8; 4]` and
// `[u8; N]`: valid for every bit pattern (any length is clamped when read), align 1 <=
// MAX_ALIGN so no padding (`layout` asserts the size is N + 4), size >= 4 > 0 even for
// N = 0, no pointers and no interior mutability (so Send + Sync). TYPE_ID and LAYOUT are
// constants of the name and N, and TYPE_ID reads no LAYOUT.
unsafe impl<const N: usize> Persistent for PBytes<N> {
    const TYPE_ID: u32 = {
        let () = Inline::<N>::CAPACITY_FITS;
        fold_type_id(mix64(fnv1a64(b"pgl::PBytes", 0), N as u64))
    };
    const LAYOUT: u64 = Inline::<N>::layout(b"pgl::PBytes");
    const TYPE_NAME: &'static str = "PBytes";
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of(v: &impl Hash) -> u64 {
        let mut h = DefaultHasher::new();
        v.hash(&mut h);
        h.finish()
    }

    /// A `PStr<N>` holding exactly `raw` (`N + 4` bytes), as a pool file could.
    fn pstr_from_raw<const N: usize>(raw: &[u8]) -> PStr<N> {
        let mut v = PStr::<N>::default();
        v.inner.len.copy_from_slice(&raw[..BYTES_OFFSET]);
        v.inner.bytes.copy_from_slice(&raw[BYTES_OFFSET..]);
        v
    }

    fn pstr_with<const N: usize>(len: u32, bytes: [u8; N]) -> PStr<N> {
        PStr {
            inner: Inline {
                len: len.to_le_bytes(),
                bytes,
            },
        }
    }

    fn pbytes_with<const N: usize>(len: u32, bytes: [u8; N]) -> PBytes<N> {
        PBytes {
            inner: Inline {
                len: len.to_le_bytes(),
                bytes,
            },
        }
    }

    #[test]
    fn pbool_every_byte_value_reads_without_panic() {
        for byte in 0..=u8::MAX {
            let b = PBool(byte);
            assert_eq!(b.get(), byte != 0, "byte {byte:#04x}");
            assert_eq!(bool::from(b), byte != 0);
            let expected = if byte == 0 { PBool::FALSE } else { PBool::TRUE };
            assert_eq!(b, expected, "byte {byte:#04x}");
            assert_eq!(hash_of(&b), hash_of(&expected), "byte {byte:#04x}");
            assert_eq!(format!("{b:?}"), format!("{}", byte != 0));
            assert_eq!(b.to_string(), format!("{}", byte != 0));
        }
    }

    #[test]
    fn pbool_constructors_store_zero_or_one() {
        assert_eq!(PBool::new(true).0, 1);
        assert_eq!(PBool::new(false).0, 0);
        assert_eq!(PBool::from(true).0, 1);
        assert_eq!(PBool::default().0, 0);
        let mut b = PBool(0x80);
        b.set(false);
        assert_eq!(b.0, 0);
        b.set(true);
        assert_eq!(b.0, 1);
        assert_ne!(PBool::TRUE, PBool::FALSE);
    }

    #[test]
    fn pstr_roundtrips_and_zeroes_unused_bytes() {
        let mut s = PStr::<8>::new("héllo").unwrap();
        assert_eq!(s, "héllo");
        assert_eq!(s.len(), 6);
        assert_eq!(s.inner.len, 6u32.to_le_bytes());
        assert_eq!(&s.inner.bytes[6..], &[0, 0]);
        s.set("ab").unwrap();
        assert_eq!(s.as_str(), "ab");
        assert_eq!(s.inner.bytes, *b"ab\0\0\0\0\0\0", "the old tail was zeroed");
        s.clear();
        assert!(s.is_empty());
        assert_eq!(s.inner.bytes, [0; 8]);
        assert_eq!(s.inner.len, [0; 4]);
        assert_eq!(PStr::<8>::capacity(), 8);
        assert_eq!(PStr::<8>::new("12345678").unwrap(), "12345678");
    }

    #[test]
    fn pstr_too_long_is_an_error_and_leaves_the_value_unchanged() {
        match PStr::<4>::new("hello") {
            Err(Error::TooLong {
                what: "PStr",
                len: 5,
                capacity: 4,
            }) => {}
            other => panic!("{other:?}"),
        }
        let mut s = PStr::<4>::try_from("abc").unwrap();
        let err = s.set("hello").unwrap_err();
        assert_eq!(s, "abc");
        assert_eq!(s.inner.bytes, *b"abc\0");
        let msg = err.to_string();
        assert!(msg.contains("5 bytes do not fit in a PStr<4>"), "{msg}");
        assert!(PStr::<0>::new("").unwrap().is_empty());
        assert!(PStr::<0>::new("x").is_err());
    }

    #[test]
    fn pstr_truncating_cuts_at_a_char_boundary() {
        // "aé€😀": a (1 byte), é (2), € (3), 😀 (4): boundaries at 0, 1, 3, 6, 10.
        let s = "aé€😀";
        let expect = [
            "",
            "a",
            "a",
            "aé",
            "aé",
            "aé",
            "aé€",
            "aé€",
            "aé€",
            "aé€",
            "aé€😀",
        ];
        assert_eq!(PStr::<0>::truncating(s), expect[0]);
        assert_eq!(PStr::<1>::truncating(s), expect[1]);
        assert_eq!(PStr::<2>::truncating(s), expect[2]);
        assert_eq!(PStr::<3>::truncating(s), expect[3]);
        assert_eq!(PStr::<4>::truncating(s), expect[4]);
        assert_eq!(PStr::<5>::truncating(s), expect[5]);
        assert_eq!(PStr::<6>::truncating(s), expect[6]);
        assert_eq!(PStr::<9>::truncating(s), expect[9]);
        assert_eq!(PStr::<10>::truncating(s), expect[10]);
        assert_eq!(PStr::<64>::truncating(s), s);
        let t = PStr::<5>::truncating(s);
        assert_eq!(t.inner.bytes[3..], [0, 0], "unused bytes stay zero");
    }

    #[test]
    fn pstr_garbage_length_is_clamped() {
        let s = pstr_with(u32::MAX, *b"abcd");
        assert_eq!(s.as_str(), "abcd");
        assert_eq!(s.len(), 4);
        let s = pstr_with(5, *b"abcd");
        assert_eq!(s.as_str(), "abcd");
        let s = pstr_with(u32::MAX, [0xff; 0]);
        assert_eq!(s.as_str(), "");
    }

    #[test]
    fn pstr_invalid_utf8_reads_as_the_longest_valid_prefix() {
        // A lone continuation byte.
        let s = pstr_with(u32::MAX, *b"ab\x80cd");
        assert_eq!(s.as_str(), "ab");
        assert_eq!(s.as_bytes(), b"ab");
        assert_eq!(s.len(), 2);
        // A multi-byte char cut by the length.
        let s = pstr_with(1, *b"\xc3\xa9x");
        assert_eq!(s.as_str(), "");
        assert!(s.is_empty());
        let s = pstr_with(3, *b"a\xe2\x82\xacz");
        assert_eq!(s.as_str(), "a");
        // All 0xff: nothing valid.
        let s = pstr_with(u32::MAX, [0xff; 16]);
        assert_eq!(s.as_str(), "");
        assert_eq!(format!("{s:?}"), "\"\"");
    }

    #[test]
    fn pstr_equality_compares_the_visible_string() {
        let a = PStr::<8>::new("abc").unwrap();
        // Same string, garbage after the length: equal, same hash.
        let b = pstr_with(3, *b"abcXYZ\xff\x00");
        assert_eq!(a, b);
        assert_eq!(hash_of(&a), hash_of(&b));
        assert_eq!(hash_of(&a), hash_of(&"abc"));
        // A length clamped to N or cut at invalid UTF-8 is compared as it reads.
        let c = pstr_with(u32::MAX, *b"abc\xff\xff\xff\xff\xff");
        assert_eq!(a, c);
        // Every content byte and the length count.
        assert_ne!(a, PStr::<8>::new("abd").unwrap());
        assert_ne!(a, PStr::<8>::new("ab").unwrap());
        assert_ne!(a, PStr::<8>::new("abc\0").unwrap());
        assert_ne!(a, PStr::<8>::new("").unwrap());
        assert_eq!(a, "abc");
        assert_eq!(a, *"abc");
        assert!(a < PStr::<8>::new("abd").unwrap());
        assert!(PStr::<8>::new("ab").unwrap() < a);
        assert_eq!(a.cmp(&b), Ordering::Equal);
    }

    #[test]
    fn pstr_formats_like_a_str() {
        let s = PStr::<8>::new("a\"b").unwrap();
        assert_eq!(format!("{s:?}"), "\"a\\\"b\"");
        assert_eq!(format!("{s}"), "a\"b");
        assert_eq!(format!("{s:>5}"), "  a\"b");
        let r: &str = s.as_ref();
        assert_eq!(r, "a\"b");
        assert_eq!(PStr::<8>::default(), "");
    }

    #[test]
    fn pbytes_roundtrips_clamps_and_compares_by_slice() {
        let mut b = PBytes::<4>::new(&[1, 2, 3]).unwrap();
        assert_eq!(b.as_slice(), &[1, 2, 3]);
        assert_eq!(b.len(), 3);
        assert_eq!(b.inner.bytes, [1, 2, 3, 0]);
        assert!(b.set(&[9; 5]).is_err());
        assert_eq!(b.as_slice(), &[1, 2, 3], "unchanged by the failed set");
        b.set(&[7]).unwrap();
        assert_eq!(b.inner.bytes, [7, 0, 0, 0], "the old tail was zeroed");
        b.clear();
        assert!(b.is_empty());
        assert_eq!(PBytes::<4>::capacity(), 4);
        match PBytes::<4>::try_from(&[0u8; 6][..]) {
            Err(Error::TooLong {
                what: "PBytes",
                len: 6,
                capacity: 4,
            }) => {}
            other => panic!("{other:?}"),
        }

        let garbage = pbytes_with(u32::MAX, [5, 6, 7, 8]);
        assert_eq!(garbage.as_slice(), &[5, 6, 7, 8]);
        let short = pbytes_with(2, [5, 6, 7, 8]);
        assert_eq!(short, PBytes::<4>::new(&[5, 6]).unwrap());
        assert_eq!(
            hash_of(&short),
            hash_of(&PBytes::<4>::new(&[5, 6]).unwrap())
        );
        assert_eq!(hash_of(&short), hash_of(&&[5u8, 6][..]));
        assert_ne!(short, PBytes::<4>::new(&[5, 6, 0]).unwrap());
        assert_ne!(short, PBytes::<4>::new(&[5, 7]).unwrap());
        assert!(short < garbage);
        assert_eq!(short, &[5u8, 6][..]);
        assert_eq!(format!("{short:?}"), "[5, 6]");
        assert_eq!(PBytes::<0>::new(&[]).unwrap().len(), 0);
    }

    #[test]
    fn layouts_are_packed_bytes() {
        assert_eq!(size_of::<PBool>(), 1);
        assert_eq!(size_of::<PStr<0>>(), 4);
        assert_eq!(size_of::<PStr<24>>(), 28);
        assert_eq!(size_of::<PBytes<16>>(), 20);
        assert_eq!(align_of::<PStr<24>>(), 1);
        assert_eq!(align_of::<PBytes<16>>(), 1);
    }

    #[test]
    fn type_ids_and_layouts_differ_per_wrapper_and_capacity() {
        let ids = [
            PBool::TYPE_ID,
            PStr::<0>::TYPE_ID,
            PStr::<1>::TYPE_ID,
            PStr::<24>::TYPE_ID,
            PBytes::<0>::TYPE_ID,
            PBytes::<1>::TYPE_ID,
            PBytes::<24>::TYPE_ID,
            u8::TYPE_ID,
            <[u8; 28]>::TYPE_ID,
        ];
        let layouts = [
            PBool::LAYOUT,
            PStr::<0>::LAYOUT,
            PStr::<1>::LAYOUT,
            PStr::<24>::LAYOUT,
            PBytes::<0>::LAYOUT,
            PBytes::<1>::LAYOUT,
            PBytes::<24>::LAYOUT,
            u8::LAYOUT,
            <[u8; 28]>::LAYOUT,
        ];
        for (i, a) in ids.iter().enumerate() {
            assert_ne!(*a, 0);
            for (j, b) in ids.iter().enumerate().skip(i + 1) {
                assert_ne!(a, b, "type ids {i} and {j}");
                assert_ne!(layouts[i], layouts[j], "layouts {i} and {j}");
            }
        }
        assert_eq!(PStr::<3>::TYPE_NAME, "PStr");
        assert_eq!(PBytes::<3>::TYPE_NAME, "PBytes");
        assert_eq!(PBool::TYPE_NAME, "PBool");
    }

    const CAP: usize = 16;

    /// The longest valid UTF-8 prefix of `b`, by the standard library's chunking.
    fn valid_prefix(b: &[u8]) -> &str {
        b.utf8_chunks().next().map_or("", |c| c.valid())
    }

    fn check_pstr(raw: &[u8]) -> std::result::Result<(), TestCaseError> {
        let s = pstr_from_raw::<CAP>(raw);
        let text = s.as_str();
        let stored_len = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize;
        let clamped = &raw[BYTES_OFFSET..BYTES_OFFSET + stored_len.min(CAP)];
        prop_assert!(text.len() <= CAP);
        prop_assert!(core::str::from_utf8(text.as_bytes()).is_ok());
        prop_assert!(clamped.starts_with(text.as_bytes()));
        prop_assert_eq!(text, valid_prefix(clamped));
        prop_assert_eq!(s.len(), text.len());
        prop_assert_eq!(s.as_bytes(), text.as_bytes());
        prop_assert_eq!(&*s, text);
        // Storing what was read gives the same value with canonical bytes.
        let again = PStr::<CAP>::new(text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(again, s);
        prop_assert!(again.inner.bytes[text.len()..].iter().all(|&b| b == 0));
        Ok(())
    }

    /// `N + 4` bytes where the length is often within the capacity and the content often
    /// mostly valid UTF-8, so that every reading path is reached.
    fn plausible_raw() -> impl Strategy<Value = Vec<u8>> {
        (
            0u32..=CAP as u32 + 2,
            "\\PC{0,8}",
            vec(any::<u8>(), CAP),
            0..CAP,
        )
            .prop_map(|(len, text, mut bytes, corrupt)| {
                let n = text.len().min(CAP);
                bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
                if corrupt % 3 == 0 {
                    bytes[corrupt] |= 0x80;
                }
                let mut raw = len.to_le_bytes().to_vec();
                raw.extend_from_slice(&bytes);
                raw
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::miri_or(512, 2) as u32))]

        #[test]
        fn pstr_any_bytes_read_as_a_valid_prefix(raw in vec(any::<u8>(), CAP + BYTES_OFFSET)) {
            check_pstr(&raw)?;
        }

        #[test]
        fn pstr_plausible_bytes_read_as_a_valid_prefix(raw in plausible_raw()) {
            check_pstr(&raw)?;
        }

        #[test]
        fn pstr_truncating_keeps_the_longest_fitting_prefix(text in "\\PC{0,12}") {
            let s = PStr::<CAP>::truncating(&text);
            prop_assert!(text.starts_with(s.as_str()));
            prop_assert!(s.len() <= CAP);
            if s.len() < text.len() {
                let next = text[s.len()..].chars().next().map_or(0, char::len_utf8);
                prop_assert!(s.len() + next > CAP, "a longer prefix would have fit");
            }
        }

        #[test]
        fn pbytes_any_bytes_read_clamped(raw in vec(any::<u8>(), CAP + BYTES_OFFSET)) {
            let mut b = PBytes::<CAP>::default();
            b.inner.len.copy_from_slice(&raw[..BYTES_OFFSET]);
            b.inner.bytes.copy_from_slice(&raw[BYTES_OFFSET..]);
            let stored_len = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize;
            prop_assert_eq!(b.as_slice(), &raw[BYTES_OFFSET..BYTES_OFFSET + stored_len.min(CAP)]);
        }
    }
}
