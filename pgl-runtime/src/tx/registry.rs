//! The type registry: for each type id a pool has stored, the layout fingerprint and the
//! name it was stored with, so that a build whose struct changed cannot read old objects
//! as the new layout (`Error::LayoutMismatch`).
//!
//! ```text
//! registry page (an object of type REGISTRY_TYPE_ID, 4096 bytes; the metadata word at
//! REGISTRY_OFFSET of zone 0 holds the first page's oid, written once, when the pool is
//! created or first opened by a pgl that has the registry):
//!   0    next     u64   oid of the next page (0 = the last page)
//!   8    count    u64   entries in use
//!   16   (zero)   48 bytes
//!   64   entries  ENTRIES_PER_PAGE × 64 bytes
//! entry:
//!   0    type_id  u32
//!   4    name_len u32   bytes of `name` in use
//!   8    layout   u64   the type's `Persistent::LAYOUT`
//!   16   name     48 bytes of UTF-8: the end of `core::any::type_name`
//! ```
//!
//! Invariant: an entry is added by the transaction that first stores or opens its type,
//! and is never changed or removed; the volatile cache of verified `(type id, layout)`
//! pairs therefore only grows, and holds a pair only once its entry is committed.

use super::tx::Tx;
use super::Engine;
use crate::error::{Error, Result};
use crate::persistent::{fnv1a64, mix64, Oid, Persistent, RESERVED_TYPE_IDS};
use std::sync::atomic::{AtomicU64, Ordering};

/// Type id of registry pages.
pub(crate) const REGISTRY_TYPE_ID: u32 = RESERVED_TYPE_IDS + 1;
/// Type id of a registry entry (never an object of its own; named for `Place`s).
const ENTRY_TYPE_ID: u32 = RESERVED_TYPE_IDS + 2;
/// Entries in one page.
pub(crate) const ENTRIES_PER_PAGE: usize = 63;
/// Bytes of an entry's name.
const NAME_BYTES: usize = 48;

/// One registered type.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    type_id: u32,
    name_len: u32,
    layout: u64,
    name: [u8; NAME_BYTES],
}

/// One page of the registry.
#[repr(C)]
pub(crate) struct Page {
    next: Oid<Page>,
    count: u64,
    zero: [u8; 48],
    entries: [Entry; ENTRIES_PER_PAGE],
}

const _: () = assert!(core::mem::size_of::<Entry>() == 64);
const _: () = assert!(core::mem::size_of::<Page>() == 4096);

// SAFETY: `Entry` is `repr(C)` of integers and a byte array with no padding (4+4+8+48 = 64,
// align 8), valid for every bit pattern, without pointers; its ids are fixed constants.
unsafe impl Persistent for Entry {
    const TYPE_ID: u32 = ENTRY_TYPE_ID;
    const LAYOUT: u64 = fnv1a64(b"pgl::registry::Entry v1", 64);
    const TYPE_NAME: &'static str = "pgl registry entry";
}

// SAFETY: `Page` is `repr(C)` of an `Oid`, integers, bytes and entries with no padding
// (8+8+48+63*64 = 4096, align 8), valid for every bit pattern, without pointers.
unsafe impl Persistent for Page {
    const TYPE_ID: u32 = REGISTRY_TYPE_ID;
    const LAYOUT: u64 = fnv1a64(b"pgl::registry::Page v1", 4096);
    const TYPE_NAME: &'static str = "pgl type registry";
}

/// A registered type, as `pool.types()` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeInfo {
    /// The type id.
    pub type_id: u32,
    /// The layout fingerprint the pool stored it with.
    pub layout: u64,
    /// Its name when it was registered (the end of `core::any::type_name`).
    pub name: String,
}

impl Entry {
    fn of<T: Persistent>() -> Entry {
        let full = core::any::type_name::<T>();
        let mut start = full.len().saturating_sub(NAME_BYTES);
        while !full.is_char_boundary(start) {
            start += 1;
        }
        let tail = &full.as_bytes()[start..];
        let mut name = [0u8; NAME_BYTES];
        name[..tail.len()].copy_from_slice(tail);
        Entry {
            type_id: T::TYPE_ID,
            name_len: tail.len() as u32,
            layout: T::LAYOUT,
            name,
        }
    }

    fn name(&self) -> String {
        let n = (self.name_len as usize).min(NAME_BYTES);
        String::from_utf8_lossy(&self.name[..n]).into_owned()
    }

    fn info(&self) -> TypeInfo {
        TypeInfo {
            type_id: self.type_id,
            layout: self.layout,
            name: self.name(),
        }
    }
}

/// Verified `(type id, layout)` pairs: an insert-only open-addressing set of atomics, so
/// the check on every `open`/`alloc`/`get` is a few loads and no lock.
pub(crate) struct TypeCache {
    slots: Box<[AtomicU64]>,
    /// Oid of the first registry page (0 until the pool has one).
    head: AtomicU64,
}

/// Slots probed per lookup; a full neighbourhood only means the slow path runs again.
const PROBES: usize = 16;

impl TypeCache {
    pub(crate) fn new(head: u64) -> Self {
        TypeCache {
            slots: (0..1024).map(|_| AtomicU64::new(0)).collect(),
            head: AtomicU64::new(head),
        }
    }

    pub(crate) fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    pub(crate) fn set_head(&self, head: u64) {
        self.head.store(head, Ordering::Release);
    }

    fn key(type_id: u32, layout: u64) -> u64 {
        mix64(type_id as u64, layout) | 1
    }

    #[inline]
    pub(crate) fn contains(&self, type_id: u32, layout: u64) -> bool {
        let k = Self::key(type_id, layout);
        let n = self.slots.len();
        for i in 0..PROBES {
            match self.slots[(k as usize + i) % n].load(Ordering::Relaxed) {
                0 => return false,
                v if v == k => return true,
                _ => {}
            }
        }
        false
    }

    fn insert(&self, type_id: u32, layout: u64) {
        let k = Self::key(type_id, layout);
        let n = self.slots.len();
        for i in 0..PROBES {
            let slot = &self.slots[(k as usize + i) % n];
            match slot.compare_exchange(0, k, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(v) if v == k => return,
                Err(_) => {}
            }
        }
    }
}

/// Bounds a walk of the page chain, so that a damaged `next` that closes a loop is an
/// error, not a hang.
struct Chain {
    left: u64,
}

impl Chain {
    fn new(eng: &Engine) -> Self {
        Chain {
            left: eng.geo.pool_size(eng.heap.zone_count()) / 4096,
        }
    }

    fn step(&mut self, next: u64) -> Result<()> {
        if self.left == 0 {
            return Err(Error::Corrupt {
                what: "type registry",
                offset: next,
                detail: "its chain of pages is longer than the pool could hold: a `next` \
                         link was damaged and closes a loop"
                    .into(),
            });
        }
        self.left -= 1;
        Ok(())
    }
}

fn mismatch<T: Persistent>(e: &Entry) -> Error {
    Error::LayoutMismatch {
        type_name: core::any::type_name::<T>().to_owned(),
        stored_name: e.name(),
        type_id: T::TYPE_ID,
        stored: e.layout,
        compiled: T::LAYOUT,
    }
}

/// Checks `T` against the registry inside a transaction, registering it in that
/// transaction if the pool has not stored it yet.
pub(crate) fn check_in_tx<T: Persistent>(tx: &Tx<'_>) -> Result<()> {
    let eng = tx.eng;
    let head = eng.types.head();
    if head == 0 {
        return Ok(());
    }
    let mut page = Oid::<Page>::from_raw(head);
    let mut pages = Chain::new(eng);
    // Whether every page read is committed state (none changed by this transaction), so
    // that a match may be cached.
    let mut committed = true;
    loop {
        committed &= !tx.has_buffer(page.raw());
        let p = tx.get(page)?;
        let n = (p.count as usize).min(ENTRIES_PER_PAGE);
        if let Some(e) = p.entries[..n].iter().find(|e| e.type_id == T::TYPE_ID) {
            if e.layout != T::LAYOUT {
                return Err(mismatch::<T>(e));
            }
            if committed {
                eng.types.insert(T::TYPE_ID, T::LAYOUT);
            }
            return Ok(());
        }
        if p.next.is_null() {
            break;
        }
        page = p.next;
        pages.step(page.raw())?;
    }
    // Not registered: add it to the last page, or to a new one linked after it.
    let entry = Entry::of::<T>();
    let mut last = tx.open(page)?;
    let n = last.count as usize;
    if n < ENTRIES_PER_PAGE {
        last.place().project(|p| &p.entries).set_at(n, entry);
        last.place().project(|p| &p.count).set(n as u64 + 1);
    } else {
        drop(last);
        let new = tx.alloc_zeroed::<Page>()?;
        let mut p = tx.open(new)?;
        p.place().project(|p| &p.entries).set_at(0, entry);
        p.place().project(|p| &p.count).set(1);
        drop(p);
        tx.open(page)?.place().project(|p| &p.next).set(new);
    }
    Ok(())
}

/// Checks `T` against the registry outside a transaction (`pool.get`): only what is
/// committed is visible, and nothing is registered.
pub(crate) fn check_outside<T: Persistent>(eng: &Engine) -> Result<()> {
    let mut page = Oid::<Page>::from_raw(eng.types.head());
    let mut pages = Chain::new(eng);
    while !page.is_null() {
        let p = super::tx::get(eng, page)?;
        let n = (p.count as usize).min(ENTRIES_PER_PAGE);
        if let Some(e) = p.entries[..n].iter().find(|e| e.type_id == T::TYPE_ID) {
            if e.layout != T::LAYOUT {
                return Err(mismatch::<T>(e));
            }
            eng.types.insert(T::TYPE_ID, T::LAYOUT);
            return Ok(());
        }
        page = p.next;
        pages.step(page.raw())?;
    }
    Ok(())
}

/// Every registered type, in registration order (outside transactions).
pub(crate) fn list(eng: &Engine) -> Result<Vec<TypeInfo>> {
    let mut out = Vec::new();
    let mut page = Oid::<Page>::from_raw(eng.types.head());
    let mut pages = Chain::new(eng);
    while !page.is_null() {
        let p = super::tx::get(eng, page)?;
        let n = (p.count as usize).min(ENTRIES_PER_PAGE);
        out.extend(p.entries[..n].iter().map(Entry::info));
        page = p.next;
        pages.step(page.raw())?;
    }
    Ok(out)
}

/// Creates the registry's first page in a transaction of its own and returns its oid
/// (the caller writes it into the metadata word `word` in the same transaction).
pub(crate) fn create(tx: &Tx<'_>, word: u64) -> Result<u64> {
    let first = tx.alloc_zeroed::<Page>()?;
    tx.set_meta_word(word, first.raw());
    Ok(first.raw())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_the_end_of_long_type_names_at_a_char_boundary() {
        #[allow(dead_code)]
        struct AVeryLongTypeNameThatDoesNotFitInFortyEightBytesÄÖÜ;
        // SAFETY: test only: the type is never stored, only named.
        unsafe impl Persistent for AVeryLongTypeNameThatDoesNotFitInFortyEightBytesÄÖÜ {
            const TYPE_ID: u32 = 7;
            const LAYOUT: u64 = 8;
            const TYPE_NAME: &'static str = "x";
        }
        let e = Entry::of::<AVeryLongTypeNameThatDoesNotFitInFortyEightBytesÄÖÜ>();
        let name = e.name();
        assert!(name.len() <= NAME_BYTES && !name.is_empty());
        assert!(name.ends_with("BytesÄÖÜ"), "{name}");
        assert_eq!(Entry::of::<u64>().name(), "u64");
    }

    #[test]
    fn the_cache_holds_exactly_what_was_inserted() {
        let c = TypeCache::new(0);
        assert!(!c.contains(5, 6));
        c.insert(5, 6);
        assert!(c.contains(5, 6));
        assert!(
            !c.contains(5, 7),
            "another layout of the same id is not verified"
        );
        for id in 0..5000 {
            c.insert(id, 1);
        }
        assert!(c.contains(5, 6));
    }
}
