//! `Tx`: a transaction — micro-buffers, locks, allocations and frees. `run` (in `run.rs`)
//! runs a closure as one; `commit.rs` commits it.
//!
//! Invariant: until commit, a transaction changes nothing in NVMM that a recovery or another
//! transaction could see (new objects are written only into space still free on media).

use super::buffer::{BufKind, Buffer, PendingRead};
use super::engine::{Engine, VerifyPolicy};
use super::handle::{InPlaceReads, Mut, Read, ReadSource};
use super::held::HeldStripes;
use super::lane::{Lane, LaneState};
use super::locks::{Held, ObjectLocks};
use super::thread::{detached_holds, detached_lane, ref_held};
use super::vetted;
use crate::checksum::adler32_patch;
use crate::heap::layout::{
    object_checksum, ObjectHeader, CHECKSUM_PREFIX, HEADER_SIZE, PREFIX_TYPE_OFFSET,
};
use crate::persistent::{object_size, Oid, Persistent};
use crate::smallmap::SmallMap;
use crate::stats::Counter;
use crate::{Error, Result};
use parking_lot::MutexGuard;
use std::cell::{Cell, RefCell};
use std::ptr::NonNull;
use std::sync::Arc;

/// Where [`Tx::read_raw`] found an object, in one word: its address in the mapping (read
/// in place), or the address of this transaction's buffer of it with the low bit set
/// (payloads are 16-byte aligned, buffers 8-byte aligned).
///
/// One word because of what a wider value costs here: a `Read` returned by an out-of-line
/// function is stored a word at a time and then copied on by 16-byte loads, and each such
/// load waits until the stores it overlaps have landed (a failed store-to-load forward).
/// `Tx::get` is inlined around `read_raw` and makes its handle from this word where it is
/// used (`Tx::ext` and `Tx::ext_with` are inlined too, for their views): a read of an
/// extension field kept inline went from 50 ns to 39 with `ext`, 32 with `ext_with`.
#[derive(Clone, Copy)]
struct ReadAt(usize);

impl ReadAt {
    fn in_place<T>(p: *const T) -> ReadAt {
        debug_assert!(p as usize & 1 == 0);
        ReadAt(p as usize)
    }

    fn buffer(b: NonNull<Buffer>) -> ReadAt {
        debug_assert!(b.as_ptr() as usize & 1 == 0);
        ReadAt(b.as_ptr() as usize | 1)
    }
}

pub(crate) struct TxState<'p> {
    /// The lane, with the transaction's containers (`lane.scratch`, kept there: a
    /// transaction reuses its lane's allocations and moves nothing).
    pub lane: MutexGuard<'p, LaneState>,
    pub poison: Option<Error>,
    pub allocs: u64,
    /// Extendible objects this transaction upgraded (`leds`), counted at commit.
    pub upgrades: u64,
    /// Types this transaction added to the type registry: (id, layout, name).
    pub registered: Vec<(u32, u64, &'static str)>,
    /// Whether it holds the right to add registry entries.
    pub owns_registry: bool,
    /// Whether it made a buffer of an extension group (opened, allocated, copied with
    /// `copy_ext` or freed with its owner): group reads then look for their buffer (see
    /// [`GroupScope::Read`]).
    pub group_bufs: bool,
}

/// What `#[extendible]`'s generated glue may do with extension groups (types with
/// `Persistent::__GROUP`) at the moment: `leds::chain` sets it around its calls into the
/// glue (`Tx::with_groups`), so the glue's plain `tx.get`/`tx.open` calls are the only
/// way to a group.
///
/// Invariant: a group's bytes change only in a transaction that holds its owner's write
/// lock (`open` refuses a group outside [`GroupScope::Write`], which only holders of that
/// lock enter; `free` always refuses one: a group goes with its owner's `free`), in a
/// repair (the pool frozen: no transaction in flight), and in recovery. A transaction
/// that holds the owner's lock, read or write, and made no buffer of a group, reads the
/// group in place.
///
/// Such a read takes the group's own read lock too, unless the link that names it was
/// verified: one owner per group is pgl's rule (a link is pgl's: `tail`), but damage that
/// made an owner's link name another owner's group of the same type, and that no checksum
/// caught (reads do not verify under the default policy; a pool may keep no checksums),
/// would otherwise let the read overlap that other owner's writer, whose commit changes
/// bytes under the reader's `&` references: a data race. An owner whose checksum this
/// transaction verified (`Tx::vouch`) names its own group, which its lock covers: that
/// group is read without a lock of its own (`group_in_place`). The paths that act on a
/// link (free, copy, upgrade) verify its holder first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroupScope {
    /// Not inside the glue: groups are refused as [`Tx::open`] says.
    Outside,
    /// Following the chain of an owner this transaction holds locked (`Tx::ext`).
    Read,
    /// Reading, creating or changing the chain of an owner this transaction holds
    /// write-locked (`Tx::ext_mut`, the upgrade, `Tx::alloc_ext`). Only the glue runs in
    /// it, never the program's code: that could open any group there.
    Write,
    /// Running the `init`s of an upgrade (the program's code, which may reach the pool:
    /// a captured `Pool`'s `pool.tx` joins the transaction): groups are refused as
    /// [`GroupScope::Outside`] refuses them, and so is an upgrade (`leds::chain`).
    Init,
    /// Running the `init`s of a view upgraded in DRAM (`upgrade = on_write`): as `Init`;
    /// the groups they make are not stored, so their layouts are checked against the
    /// registry, not registered.
    View,
}

impl GroupScope {
    /// Whether the program's `init`s are running (`Init` or `View`).
    pub(crate) fn runs_inits(self) -> bool {
        matches!(self, GroupScope::Init | GroupScope::View)
    }
}

/// Puts a cell's previous value back when dropped, even if the glue panics: the
/// [`GroupScope`], or the vouched group (`Tx::with_vouched`).
struct ScopeGuard<'a, T: Copy>(&'a Cell<T>, T);

impl<T: Copy> Drop for ScopeGuard<'_, T> {
    fn drop(&mut self) {
        self.0.set(self.1);
    }
}

/// A transaction. Obtained from `pool.tx(|tx| ...)`; every change made through it becomes
/// durable atomically when the closure returns `Ok`, and is discarded when it returns `Err`.
pub struct Tx<'p> {
    pub(crate) eng: &'p Engine,
    pub(crate) lane: &'p Lane,
    pub(crate) st: RefCell<TxState<'p>>,
    pub(crate) done: Cell<bool>,
    groups: Cell<GroupScope>,
    /// The registry key of the extension group whose layout this transaction last found
    /// right for a view made in DRAM (`__inline_layout`), with the number of registrations
    /// committed when it did; key 0 if none. The views of one transaction, which read many
    /// objects of one type, check it once, and again after another transaction registers
    /// types (it may have stored that group in another layout).
    view_layout: Cell<(u64, u64)>,
    /// The objects live `Read`s of this transaction borrow in place.
    reads: InPlaceReads,
    /// The extension group whose link holder this transaction verified (`vouch`), while
    /// `leds` reads the chain it begins (`with_vouched`); 0: none. `group_in_place` reads
    /// it without a lock of its own.
    vouched: Cell<u64>,
}

impl<'p> Tx<'p> {
    /// Begins a transaction on a free lane (waiting for one). `what` names the caller for
    /// the error returned when this thread's `Detached` handles hold every lane: waiting
    /// would never end.
    #[inline(always)]
    pub(crate) fn begin(eng: &'p Engine, what: &'static str) -> Result<Tx<'p>> {
        // Built here, inlined into the caller, not in `take_lane`: the transaction is
        // written where the caller keeps it, not copied there out of a `Result` (~35
        // instructions a transaction, with the stores of the `Result` itself).
        let (lane, guard) = Self::take_lane(eng, what)?;
        Ok(Tx {
            eng,
            lane,
            st: RefCell::new(TxState {
                lane: guard,
                poison: None,
                allocs: 0,
                upgrades: 0,
                registered: Vec::new(),
                owns_registry: false,
                group_bufs: false,
            }),
            done: Cell::new(false),
            groups: Cell::new(GroupScope::Outside),
            view_layout: Cell::new((0, 0)),
            reads: InPlaceReads::default(),
            vouched: Cell::new(0),
        })
    }

    /// A free lane (waiting for one), its deferred record settled, for `begin`.
    #[inline]
    fn take_lane(
        eng: &'p Engine,
        what: &'static str,
    ) -> Result<(&'p Lane, MutexGuard<'p, LaneState>)> {
        let mine = |i| detached_lane(eng.id, i);
        let Some((lane, mut guard)) = eng.lanes.acquire(mine, super::repair::WAIT) else {
            if (0..eng.geo.lanes as usize).all(mine) {
                return Err(Error::InTransaction {
                    what,
                    instead: "this thread's pool.open_mut handles hold every lane of the \
                              pool: commit or drop one first",
                });
            }
            return Err(Error::InTransaction {
                what,
                instead: "this thread's pool.open_mut handles hold lanes of the pool, and \
                          the others stayed busy (perhaps held by other threads' handles, \
                          waiting for this thread's): commit or drop them first",
            });
        };
        if lane.pending() {
            // Its record must stay intact until settled (`deferred.rs`).
            eng.settle(lane, &mut guard);
        }
        Ok((lane, guard))
    }

    /// The group scope now (see [`GroupScope`]).
    pub(crate) fn group_scope(&self) -> GroupScope {
        self.groups.get()
    }

    /// Runs `f` (calls into `#[extendible]`'s glue) in group scope `scope`; see
    /// [`GroupScope`] for what the caller must hold.
    pub(crate) fn with_groups<R>(&self, scope: GroupScope, f: impl FnOnce() -> R) -> R {
        let _back = ScopeGuard(&self.groups, self.groups.replace(scope));
        f()
    }

    /// Runs `f` (which reads a chain in [`GroupScope::Read`]) with `group` as the group
    /// whose link holder `vouch` verified (0: none), then puts the previous one back,
    /// even if `f` panics.
    pub(crate) fn with_vouched<R>(&self, group: u64, f: impl FnOnce() -> R) -> R {
        let _back = ScopeGuard(&self.vouched, self.vouched.replace(group));
        f()
    }

    /// Whether the `T` at `off`, which this transaction holds locked and read as a `T`
    /// (`get`), vouches for the extension link that ends it: its checksum verifies (now,
    /// or earlier in this transaction), or this transaction's buffer of it holds it (its
    /// checksum verified when it was opened, and its link is pgl's: `tail::keep_link`).
    /// Its bytes are then pgl's until the transaction ends, and so is the link: it names
    /// the owner's own group, which changes only under the owner's write lock (see
    /// [`GroupScope`]), so a read of it needs no lock of its own (`group_in_place`).
    ///
    /// Not for a pool without checksums, nor under the conservative policy (whose reads
    /// verify every object anyway), nor for an owner larger than `VOUCH_MAX` bytes, whose
    /// checksum costs more than the lock it spares. An owner that does not verify is left
    /// to the locked read, as before (its damage is the scrub's, or the next write's, to
    /// find).
    pub(crate) fn vouch<T: Persistent>(&self, off: u64) -> bool {
        if !self.eng.checksums
            || self.eng.verify == VerifyPolicy::Conservative
            || object_size::<T>() > VOUCH_MAX
        {
            return false;
        }
        let key = vetted::key::<T>();
        let mut st = self.st.borrow_mut();
        let sc = &mut st.lane.scratch;
        if sc.vetted.vouched(off, key) || sc.buffers(off) {
            return true;
        }
        if verify_in_place(self.eng, off, &self.header(off)).is_err() {
            return false;
        }
        sc.vetted.note_vouched(off, key);
        true
    }

    /// Notes a buffer of a `T` made in this transaction, if `T` is an extension group.
    #[inline]
    fn note_buffer<T: Persistent>(&self) {
        if T::__GROUP {
            self.st.borrow_mut().group_bufs = true;
        }
    }

    #[inline]
    fn lock(&self, st: &mut TxState<'p>, off: u64, want: Held) -> Result<()> {
        match take_stripe(self.eng, &mut st.lane.scratch.held, off, want) {
            Ok(()) => Ok(()),
            Err(busy) => Err(Self::lock_failed(st, off, busy)),
        }
    }

    /// The error of a lock `take_stripe` could not take; a conflict poisons the
    /// transaction (it must retry).
    #[cold]
    #[inline(never)]
    fn lock_failed(st: &mut TxState<'p>, off: u64, busy: Busy) -> Error {
        match busy {
            Busy::Conflict => {
                st.poison.get_or_insert(Error::Conflict { offset: off });
                Error::Conflict { offset: off }
            }
            Busy::ThisThread => Error::locked_by_this_thread(off),
        }
    }

    /// Checks `T`'s layout against the pool's type registry; when `storing` (an
    /// allocation) and the pool has never stored `T`, registers it in this transaction
    /// (see `registry`). Reads and opens never register: the type of an existing object
    /// was registered when it was stored. Inlined: every `get`, `open` and `alloc` checks
    /// it, and a known type is one load; the registry is read out of line.
    #[inline]
    pub(super) fn check_layout<T: Persistent>(&self, storing: bool) -> Result<()> {
        if self.eng.types.knows::<T>() {
            return Ok(());
        }
        self.check_unknown_layout::<T>(storing)
    }

    #[cold]
    #[inline(never)]
    fn check_unknown_layout<T: Persistent>(&self, storing: bool) -> Result<()> {
        if storing {
            super::registry::check_in_tx::<T>(self)
        } else {
            super::registry::check_outside::<T>(self.eng)
        }
    }

    /// Checks the layout of the extension group `G` kept inline in an object's reserve
    /// (`leds::inline`) against the pool's type registry, as `get` and `open` check a
    /// separate group's; with `storing` (an object is about to carry it) registers it if
    /// the pool has no entry for it yet, as `alloc` does. An inline group has no header
    /// and is never allocated: without this, a build whose group changed would read the
    /// reserve's bytes as the new fields. For `#[extendible]`'s glue, not an API.
    #[doc(hidden)]
    #[inline(never)]
    pub fn __inline_layout<G: Persistent>(&self, storing: bool) -> Result<()> {
        // A view upgraded in DRAM stores nothing: the group it makes is checked against
        // what the pool holds, not registered. Such views are made on every read of data
        // no program has upgraded yet: a transaction checks once for all of them, and
        // each view compares two words here. Out of line but small (the check itself is
        // `view_layout_checked`): inlined, it kept the glue's `__upgrade` from being
        // inlined into the view, which cost more than the call (callgrind, `ext_with-dram`).
        if self.groups.get() == GroupScope::View {
            let key = const { super::registry::TypeCache::key(G::TYPE_ID, G::LAYOUT) };
            // Read before the check: a registration committed during it is seen by the
            // next view.
            let seen = (key, self.eng.types.registrations());
            if self.view_layout.get() == seen {
                return Ok(());
            }
            return self.view_layout_checked::<G>(seen);
        }
        self.check_layout::<G>(storing)
    }

    /// `__inline_layout`'s check for a view, when the memo does not hold `seen`: checks
    /// the layout, and remembers `seen` if it is right.
    #[inline(never)]
    fn view_layout_checked<G: Persistent>(&self, seen: (u64, u64)) -> Result<()> {
        self.check_layout::<G>(false)?;
        self.view_layout.set(seen);
        Ok(())
    }

    fn header(&self, off: u64) -> ObjectHeader {
        let mut h = [0u8; 16];
        // SAFETY: `off` was located as a live object or reserved for this transaction, or
        // is the group a verified link names (`group_in_place`, which checked that its
        // header lies inside the mapping): its header lies inside the pool, and we hold
        // its lock, or its owner's, which keeps every writer of it out (`GroupScope`), so
        // no commit changes it meanwhile.
        unsafe { self.eng.media.read(off - HEADER_SIZE, &mut h) };
        ObjectHeader::from_bytes(&h)
    }

    pub(super) fn check_type<T: Persistent>(
        off: u64,
        h: &ObjectHeader,
        capacity: u64,
    ) -> Result<()> {
        let size = object_size::<T>() as u64;
        if h.type_id != T::TYPE_ID || h.size != size || h.size > capacity {
            return Err(Error::TypeMismatch {
                offset: off,
                type_name: T::TYPE_NAME,
                expected: T::TYPE_ID,
                expected_size: size,
                found: h.type_id,
                found_size: h.size,
                found_name: None,
                pool_file: None,
            });
        }
        Ok(())
    }

    /// This transaction's buffer of the object at `off`, whatever its type, if it has one
    /// (an error if the object failed verification or was freed in this transaction).
    fn buffered(&self, st: &TxState<'p>, off: u64) -> Result<Option<NonNull<Buffer>>> {
        let Some(b) = self.buffer_with_holes(st, off)? else {
            return Ok(None);
        };
        // SAFETY: as in `buffer_with_holes`.
        if unsafe { b.as_ref() }.has_holes() {
            // The object was verified when the ranged write made the buffer, and only a
            // stray write can have changed it since (this transaction holds its write
            // lock): verified again before its bytes are copied in, so that a buffer holds
            // verified bytes, as `open`'s does (and a conservative `get`, which reads the
            // buffer, reads none unverified).
            verify_in_place(self.eng, off, &self.header(off))?;
            // SAFETY: only ranged writes have reached a buffer with holes: no handle to it
            // has ever been made (each access but those comes through here).
            let buf = unsafe { &mut *b.as_ptr() };
            // SAFETY: the object's payload, inside the pool, write-locked by this
            // transaction (a ranged write took the lock).
            let pool = unsafe { self.eng.media.bytes(off, buf.size) };
            buf.fill_holes(pool, usize::MAX);
        }
        Ok(Some(b))
    }

    /// `buffered`, but a buffer made by a ranged write is returned with its holes, as they
    /// are (`tx::ranged`).
    pub(super) fn buffer_with_holes(
        &self,
        st: &TxState<'p>,
        off: u64,
    ) -> Result<Option<NonNull<Buffer>>> {
        let Some(&i) = st.lane.scratch.index.get(&off) else {
            return Ok(None);
        };
        if i == usize::MAX {
            return Err(Error::invalid_oid(
                off,
                "failed verification earlier in this transaction",
            ));
        }
        let b = st.lane.scratch.bufs[i];
        // SAFETY: buffers live until the transaction ends; only handles alias them, and
        // those are checked through `borrow` before any access.
        let buf = unsafe { b.as_ref() };
        if buf.kind == BufKind::Freed {
            return Err(Error::use_after_free(off));
        }
        if buf.pending_read.is_some() {
            // SAFETY: a buffer whose read is pending has never been handed out: no handle
            // aliases it.
            let buf = unsafe { &mut *b.as_ptr() };
            buf.pending_read = None;
            // SAFETY: the payload lies inside the pool, in a block reserved for this
            // transaction (no one else writes it) and write-locked by it.
            unsafe { self.eng.media.read(off, buf.payload_mut()) };
        }
        Ok(Some(b))
    }

    /// This transaction's buffer of the `T` at `off`, if it has one.
    fn buffer_of<T: Persistent>(
        &self,
        st: &TxState<'p>,
        off: u64,
    ) -> Result<Option<NonNull<Buffer>>> {
        let b = self.buffered(st, off)?;
        Self::of_type::<T>(off, b)
    }

    /// `buffer_of`, holes and all (`buffer_with_holes`).
    pub(super) fn buffer_of_with_holes<T: Persistent>(
        &self,
        st: &TxState<'p>,
        off: u64,
    ) -> Result<Option<NonNull<Buffer>>> {
        let b = self.buffer_with_holes(st, off)?;
        Self::of_type::<T>(off, b)
    }

    /// `b`, a buffer of the object at `off` if any, if it holds a `T`.
    fn of_type<T: Persistent>(
        off: u64,
        b: Option<NonNull<Buffer>>,
    ) -> Result<Option<NonNull<Buffer>>> {
        let Some(b) = b else {
            return Ok(None);
        };
        // SAFETY: as in `buffer_with_holes`; only the type id and size are read.
        let buf = unsafe { b.as_ref() };
        if buf.type_id != T::TYPE_ID || buf.size != object_size::<T>() {
            return Err(Error::TypeMismatch {
                offset: off,
                type_name: T::TYPE_NAME,
                expected: T::TYPE_ID,
                expected_size: object_size::<T>() as u64,
                found: buf.type_id,
                found_size: buf.size as u64,
                found_name: None,
                pool_file: None,
            });
        }
        Ok(Some(b))
    }

    /// A buffer for `size` payload bytes (reused from the lane when it has one spare).
    pub(super) fn new_buffer(
        &self,
        st: &mut TxState<'p>,
        off: u64,
        size: usize,
        type_id: u32,
        kind: BufKind,
    ) -> NonNull<Buffer> {
        let buf = match st.lane.spare.pop() {
            Some(mut b) => {
                b.reset(off, size, type_id, self.eng.canary, kind);
                b
            }
            None => Box::new(Buffer::new(off, size, type_id, self.eng.canary, kind)),
        };
        let p = NonNull::from(Box::leak(buf));
        let sc = &mut st.lane.scratch;
        sc.index.insert(off, sc.bufs.len());
        sc.bufs.push(p);
        p
    }

    /// For a buffer of the `T` at `off`, which this transaction has none of: refuses an
    /// object a live in-place `Read` of this transaction borrows (a buffer would diverge
    /// from what it shows), takes the write lock, vets the header (a `T`'s, not being
    /// migrated) and returns it. `open` and ranged writes make their buffers after it.
    pub(super) fn lock_for_update<T: Persistent>(
        &self,
        st: &mut TxState<'p>,
        off: u64,
    ) -> Result<ObjectHeader> {
        if self.reads.borrowed(off) {
            return Err(Error::already_borrowed(off));
        }
        self.lock(st, off, Held::Write)?;
        let vetted = st.lane.scratch.vetted.holds(off, vetted::key::<T>());
        let h = self.checked_header::<T>(off, vetted)?;
        self.eng.migrating.check("change", h.type_id, off)?;
        Ok(h)
    }

    /// Opens the object for update: copies it into a micro-buffer (verifying its checksum)
    /// and returns a handle to the copy. Changes reach NVMM atomically at commit.
    pub fn open<T: Persistent>(&self, oid: Oid<T>) -> Result<Mut<'_, T>> {
        if T::__GROUP && self.groups.get() != GroupScope::Write {
            return Err(group_refused::<T>(oid.raw(), "changed"));
        }
        self.check_layout::<T>(false)?;
        let mut st = self.st.borrow_mut();
        st.group_bufs |= T::__GROUP;
        let off = oid.raw();
        let mut b = match self.buffer_of::<T>(&st, off)? {
            Some(b) => b,
            None => {
                let h = self.lock_for_update::<T>(&mut st, off)?;
                let mut p =
                    self.new_buffer(&mut st, off, h.size as usize, h.type_id, BufKind::Open);
                // SAFETY: just created; no handle to it exists yet.
                let buf = unsafe { p.as_mut() };
                // SAFETY: the payload lies inside the pool (size <= capacity) and our write
                // lock excludes concurrent commits to it.
                unsafe { self.eng.media.read(off, buf.payload_mut()) };
                let sum = if self.eng.checksums {
                    object_checksum(off, h.type_id, buf.payload())
                } else {
                    h.checksum
                };
                if sum != h.checksum {
                    // Not ours to keep: forget the buffer so a retry re-reads NVMM.
                    buf.kind = BufKind::Freed;
                    buf.size = 0;
                    st.lane.scratch.index.insert(off, usize::MAX);
                    return Err(Error::ChecksumMismatch {
                        offset: off,
                        type_id: h.type_id,
                        size: h.size,
                        stored: h.checksum,
                        computed: sum,
                        pool_file: None,
                        type_name: None,
                    });
                }
                buf.checksum = h.checksum;
                if T::__OWNS_TAIL {
                    buf.reserve = T::__RESERVE;
                    if let Some(link) = super::tail::link_at_end(super::tail::value_of(buf)) {
                        count_link(&mut st.lane.scratch.links, None, link);
                        buf.link = Some(link);
                    }
                }
                p
            }
        };
        // SAFETY: buffers live until the transaction ends; `borrow` guards aliasing.
        let buf = unsafe { b.as_mut() };
        if buf.borrow != 0 {
            return Err(Error::already_borrowed(off));
        }
        buf.borrow = -1;
        // SAFETY: a live buffer of a T (type checked above), now exclusively borrowed.
        Ok(unsafe { Mut::new(b) })
    }

    /// Reads the object inside the transaction: from this transaction's buffer if it has
    /// one, else from NVMM under a read lock held until the transaction ends. Either way
    /// the handle borrows the object: opening or freeing it while the handle lives fails
    /// with `Error::AlreadyBorrowed`.
    // Always inlined, not left to the compiler (`ReadAt`): called out of line from
    // `ext_with`, whose slow path made it too large, it returned the handle through
    // memory, and the caller's wide load of it stalled (`ext_with` 1.18x `get`, now 1.09x;
    // `benches/leds.rs`).
    #[inline(always)]
    pub fn get<T: Persistent>(&self, oid: Oid<T>) -> Result<Read<'_, T>> {
        // The handle is made here, from the one word the out-of-line part returns (see
        // `ReadAt`).
        let at = self.read_raw(oid)?;
        let (p, src) = if at.0 & 1 == 0 {
            (
                at.0 as *const T,
                ReadSource::InPlace(&self.reads, oid.raw()),
            )
        } else {
            // SAFETY: the address of a buffer of this transaction (`read_raw`), which lives
            // until the transaction ends: not null.
            let b = unsafe { NonNull::new_unchecked((at.0 & !1) as *mut Buffer) };
            // SAFETY: as above; only its payload's address is read, and the buffer is not
            // exclusively borrowed (`read_raw` refused that).
            let p = unsafe { b.as_ref() }.payload().as_ptr() as *const T;
            (p, ReadSource::Buffer(b))
        };
        // SAFETY: `p` is a live `T` with its reserve, shared-borrowed (`read_raw`: a
        // buffer's borrow, or an in-place read under the lock this transaction holds, its
        // borrow entered in `self.reads`), and this handle is the only one made of it.
        Ok(unsafe { Read::new(p, src) })
    }

    /// [`Tx::get`]'s work, out of line: where the `T` lies (in place, or this
    /// transaction's buffer of it), with its borrow counted (the buffer's `borrow`, or the
    /// transaction's `InPlaceReads`). `get` makes the handle at once, whose drop gives the
    /// borrow back.
    fn read_raw<T: Persistent>(&self, oid: Oid<T>) -> Result<ReadAt> {
        if T::__GROUP && self.groups.get() == GroupScope::Read {
            if let Some(p) = self.group_in_place(oid)? {
                return Ok(ReadAt::in_place(p));
            }
        }
        self.check_layout::<T>(false)?;
        let mut st = self.st.borrow_mut();
        let off = oid.raw();
        if let Some(mut b) = self.buffer_of::<T>(&st, off)? {
            // SAFETY: see `open`.
            let buf = unsafe { b.as_mut() };
            if buf.borrow < 0 {
                return Err(Error::already_borrowed(off));
            }
            buf.borrow += 1;
            // A shared-borrowed buffer of a T.
            return Ok(ReadAt::buffer(b));
        }
        let p = self.read_lock_vetted::<T>(&mut st, off)?;
        self.reads.enter(off, &mut st.lane.scratch.reads);
        // A live object of type T (checked), 16-byte aligned in the mapping, under a lock
        // this transaction holds until it ends; its borrow is counted just above.
        Ok(ReadAt::in_place(p))
    }

    /// Takes the read lock of the object at `off` and vets it as a `T` (`vet_in_place`),
    /// unless this transaction did both before (`vetted`); where it lies in the mapping.
    #[inline]
    fn read_lock_vetted<T: Persistent>(&self, st: &mut TxState<'p>, off: u64) -> Result<*const T> {
        let key = vetted::key::<T>();
        if st.lane.scratch.vetted.holds(off, key) {
            return Ok(self.eng.media.ptr(off) as *const T);
        }
        self.lock(st, off, Held::Read)?;
        let p = self.vet_in_place::<T>(off)?;
        // The conservative policy verifies the object on every read: no shortcut.
        if self.eng.verify != VerifyPolicy::Conservative {
            st.lane.scratch.vetted.note(off, key);
        }
        Ok(p)
    }

    /// Checks that the object at `off` is a live `T` (verifying it too under the
    /// conservative policy) and returns where it lies in the mapping. The caller keeps
    /// writers off it (its lock, or its owner's: see [`GroupScope`]).
    fn vet_in_place<T: Persistent>(&self, off: u64) -> Result<*const T> {
        let h = self.checked_header::<T>(off, false)?;
        if self.eng.verify == VerifyPolicy::Conservative {
            verify_in_place(self.eng, off, &h)?;
        }
        Ok(self.eng.media.ptr(off) as *const T)
    }

    /// The header of the object at `off`, checked to be a live `T`'s; the caller holds
    /// its lock. The oid is located first, so that a header is read only once it is known
    /// to be an object's, unless this transaction `vetted` it as a `T` before, under the
    /// lock it still holds: then it is still one, in a block that holds it, and the
    /// header's type and size alone are checked again (damage since would make a buffer
    /// of it the wrong size).
    fn checked_header<T: Persistent>(&self, off: u64, vetted: bool) -> Result<ObjectHeader> {
        if vetted {
            let h = self.header(off);
            if h.type_id == T::TYPE_ID && h.size == object_size::<T>() as u64 {
                return Ok(h);
            }
        }
        let place = self.eng.heap.locate(off)?;
        let h = self.header(off);
        Self::check_type::<T>(off, &h, place.capacity)?;
        Ok(h)
    }

    /// An extension group read in place for `Tx::ext` (which holds the owner locked: see
    /// [`GroupScope`]): the one its owner's verified link names (`vouch`) under the
    /// owner's lock alone, any other under its own read lock too; `None` if this
    /// transaction made a buffer of a group, which `get` then looks for.
    fn group_in_place<T: Persistent>(&self, oid: Oid<T>) -> Result<Option<*const T>> {
        self.check_layout::<T>(false)?;
        let mut st = self.st.borrow_mut();
        if st.group_bufs {
            return Ok(None);
        }
        let off = oid.raw();
        // The owner's lock alone covers a group with one owner: the group its verified
        // link names (`vouch`) is read under it, once checked to be a `T`'s in place.
        if off == self.vouched.get()
            && off % 16 == 0
            && off >= HEADER_SIZE
            && off.saturating_add(object_size::<T>() as u64) <= self.eng.media.len()
        {
            let h = self.header(off);
            if h.type_id == T::TYPE_ID && h.size == object_size::<T>() as u64 {
                self.reads.enter(off, &mut st.lane.scratch.reads);
                // A live group of type T (the one its owner's verified link names; header
                // checked), 16-byte aligned inside the mapping, its borrow counted just
                // above. No commit changes it while this transaction lasts: only holders
                // of its owner's write lock change it (`GroupScope`), and this transaction
                // holds the owner's lock until it ends; a repair freezes the pool, which
                // waits for this transaction. It has no buffer of it (`group_bufs`).
                return Ok(Some(self.eng.media.ptr(off) as *const T));
            }
        }
        // Otherwise the owner's lock is not enough: a damaged link (unverified: reads in
        // place check no checksum) can name another owner's group, which that owner's
        // writer changes under the group's write lock alone.
        let p = self.read_lock_vetted::<T>(&mut st, off)?;
        self.reads.enter(off, &mut st.lane.scratch.reads);
        // A live object of type T (checked), 16-byte aligned in the mapping, its borrow
        // counted just above, under its read lock, which this transaction holds until it
        // ends: no commit changes it meanwhile (its writers take the write lock in `open`;
        // a repair freezes the pool, which waits for this transaction); this transaction
        // has no buffer of it to read instead (`group_bufs`).
        Ok(Some(p))
    }

    /// Checks that the object at `off`, whose lock this transaction holds, is a `T` (as
    /// `get` would, without borrowing it: a handle of this transaction may hold it).
    pub(super) fn check_held<T: Persistent>(&self, off: u64) -> Result<()> {
        self.check_layout::<T>(false)?;
        let st = self.st.borrow();
        if self.buffer_of::<T>(&st, off)?.is_some() {
            return Ok(());
        }
        let vetted = st.lane.scratch.vetted.holds(off, vetted::key::<T>());
        self.checked_header::<T>(off, vetted).map(drop)
    }

    /// Injects a fault that lives inside this transaction (see [`Fault::SmashCanary`]);
    /// other faults are injected with `pool.inject`, between transactions
    /// (`Error::InTransaction` here).
    ///
    /// [`Fault::SmashCanary`]: crate::Fault::SmashCanary
    pub fn inject(&self, fault: &crate::Fault) -> Result<()> {
        let crate::Fault::SmashCanary { oid } = *fault else {
            return Err(Error::InTransaction {
                what: "tx.inject of this fault",
                instead: "inject it with pool.inject between transactions",
            });
        };
        let st = self.st.borrow_mut();
        let buf = match st.lane.scratch.index.get(&oid) {
            Some(&i) if i != usize::MAX => st.lane.scratch.bufs[i],
            _ => {
                return Err(Error::invalid_oid(
                    oid,
                    "not opened in this transaction: open it with tx.open first",
                ))
            }
        };
        // SAFETY: buffers live until the transaction ends; no handle aliases it (checked).
        let buf = unsafe { &mut *buf.as_ptr() };
        if buf.borrow != 0 {
            return Err(Error::already_borrowed(oid));
        }
        buf.smash_canary();
        Ok(())
    }

    /// Allocates a new object holding `value`; it becomes durable (and its oid valid after a
    /// crash) only if the transaction commits. Store the oid somewhere reachable.
    ///
    /// The hidden extension link that ends an `#[extendible]` struct is pgl's: the new
    /// object gets a null one whatever `value` holds (it has no extension groups yet; use
    /// [`alloc_ext`](Self::alloc_ext) for a full chain), so a copy of another object never
    /// shares that object's groups.
    pub fn alloc<T: Persistent>(&self, value: T) -> Result<Oid<T>> {
        self.alloc_value(value, 0, &[])
    }

    /// `alloc` keeping `value`'s extension link, its reserve from `image` (the payload
    /// of a `T`, whose value part is ignored): for the chains `#[extendible]` builds (its
    /// generated `__alloc`), not an API. The link's separate part must be null or name the
    /// group after the inline ones, allocated by this transaction (a chain just built),
    /// never an existing object's.
    #[doc(hidden)]
    pub fn __alloc_linked<T: Persistent>(
        &self,
        value: T,
        image: &crate::leds::ObjImage,
    ) -> Result<Oid<T>> {
        let whole = super::tail::link_at_end(crate::persistent::bytes_of(&value)).unwrap_or(0);
        let link = crate::leds::separate(whole);
        let reserve = image
            .bytes()
            .get(core::mem::size_of::<T>()..)
            .filter(|r| r.len() == T::__RESERVE)
            .ok_or_else(|| {
                Error::config(format!(
                    "an image of {} bytes is not the payload of a `{}` ({} bytes)",
                    image.bytes().len(),
                    T::TYPE_NAME,
                    object_size::<T>()
                ))
            })?;
        if T::__OWNS_TAIL && link != 0 {
            let k = crate::leds::inline_count(whole) as u64 + 1;
            let group = crate::persistent::group_type_id(T::TYPE_ID, k);
            let st = self.st.borrow();
            let fresh = self.buffered(&st, link)?.is_some_and(|b| {
                // SAFETY: buffers live until the transaction ends; only the kind and type
                // id are read.
                let b = unsafe { b.as_ref() };
                b.kind == BufKind::New && b.type_id == group
            });
            // A group built in this transaction for another owner is that owner's: an
            // owner keeps the link pgl set in its buffer (`tail`).
            let owned = st.lane.scratch.links.get(&link).is_some_and(|&n| n > 0);
            if !fresh || owned {
                return Err(Error::invalid_oid(
                    link,
                    "an extension link may only name a group this transaction allocated for \
                     the new object: allocate with tx.alloc_ext, or tx.alloc (no groups yet)",
                ));
            }
        }
        self.alloc_value(value, whole, reserve)
    }

    /// Allocates a new object holding `value`, its extension link (if `T` owns a tail)
    /// set to `link`, its reserve (if it has one) to `reserve`.
    fn alloc_value<T: Persistent>(&self, value: T, link: u64, reserve: &[u8]) -> Result<Oid<T>> {
        refuse_zero_sized::<T>()?;
        self.check_layout::<T>(true)?;
        self.note_buffer::<T>();
        let bytes = crate::persistent::bytes_of(&value);
        let link = T::__OWNS_TAIL.then_some(link);
        let fill = |p: &mut [u8]| {
            let (v, r) = p.split_at_mut(bytes.len());
            v.copy_from_slice(bytes);
            match reserve.len() {
                0 => r.fill(0),
                _ => r.copy_from_slice(reserve),
            }
        };
        self.alloc_filled(object_size::<T>(), T::TYPE_ID, link, T::__RESERVE, fill)
            .map(Oid::from_raw)
    }

    /// Allocates a new zero-filled object (every `Persistent` type is valid when zeroed).
    pub fn alloc_zeroed<T: Persistent>(&self) -> Result<Oid<T>> {
        refuse_zero_sized::<T>()?;
        self.check_layout::<T>(true)?;
        self.note_buffer::<T>();
        let link = T::__OWNS_TAIL.then_some(0);
        self.alloc_filled(object_size::<T>(), T::TYPE_ID, link, T::__RESERVE, |p| {
            p.fill(0)
        })
        .map(Oid::from_raw)
    }

    /// Allocates a new object without filling it: its bytes are whatever its block holds
    /// (zeros in space never used, else bytes of an object freed earlier; every
    /// `Persistent` type is valid for any bytes). The commit writes the object's header and
    /// only the bytes changed through `tx.open`, so this is the cheapest way to allocate a
    /// large object that is filled in part or later. Its bytes are not even read until the
    /// object is first accessed: in a block freed earlier (while the pool keeps parity),
    /// the new checksum comes from the freed object's header. It is `pmemobj_tx_alloc` to
    /// [`alloc_zeroed`](Self::alloc_zeroed)'s `pmemobj_tx_zalloc`.
    ///
    /// The bytes may be another object's, freed earlier in this pool: allocate with
    /// `alloc`/`alloc_zeroed` when that matters, and set every [`Oid`] field before
    /// following it. The one exception is the hidden extension link of an `#[extendible]`
    /// struct, which the object owns (`tx.free` frees what it links): it is set to null,
    /// so the new object carries no extension groups yet (use `tx.alloc_ext` for a full
    /// chain).
    ///
    /// ```
    /// # use pgl_runtime::{Config, Pool};
    /// # let path = std::env::temp_dir().join(format!("pgl-doc-unzeroed-{}", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// let pool = Pool::create(&path, &Config::new("doc"))?;
    /// let page = pool.tx(|tx| {
    ///     let page = tx.alloc_unzeroed::<[u8; 4096]>()?;
    ///     tx.open(page)?.write_bytes(0, b"hello"); // only these 5 bytes are written
    ///     Ok(page)
    /// })?;
    /// assert_eq!(&pool.get(page)?[..5], b"hello");
    /// # drop(pool); std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), pgl_runtime::Error>(())
    /// ```
    pub fn alloc_unzeroed<T: Persistent>(&self) -> Result<Oid<T>> {
        refuse_zero_sized::<T>()?;
        self.check_layout::<T>(true)?;
        self.note_buffer::<T>();
        let size = object_size::<T>();
        let mut st = self.st.borrow_mut();
        let (off, mut p, sealed) = self.alloc_block(&mut st, size, T::TYPE_ID)?;
        // SAFETY: just created; no handle to it exists yet.
        let buf = unsafe { p.as_mut() };
        if T::__OWNS_TAIL {
            // SAFETY: the payload lies inside the pool, in a block the heap reserved for
            // this transaction (no one else writes it) and that it write-locked.
            unsafe { self.eng.media.read(off, buf.payload_mut()) };
            // A stale link would make the new object own a freed object's groups (or
            // whatever now lives in their blocks). Stale bytes in a reserve are no inline
            // groups: the null link counts none.
            keep_link(&mut st.lane.scratch.links, buf, 0, T::__RESERVE);
        } else {
            // The bytes stay in the pool until the object is first accessed (`buffered`).
            let sum = (sealed && self.eng.seals_trusted())
                .then(|| self.sealed_sum(off, size, T::TYPE_ID))
                .flatten();
            if sum.is_none() && self.eng.checksums {
                // The commit checksums these bytes (the block's old ones, usually not read
                // since their object was freed): fetched now, they arrive while the rest
                // of the transaction and of its commit runs. MLC fig3 alloc (no parity, so
                // no seal is trusted), paired rounds: 4 KiB 15 % faster, 1 KiB 5 %. Not
                // when the seal gives the sum: prefetching those bytes then measured
                // slower (MLPC 4 KiB, +19 %). At most `UNFILLED_PREFETCH_MAX` bytes: a
                // larger object's tail is left to the checksum's own reads.
                self.eng
                    .media
                    .prefetch(off, size.min(UNFILLED_PREFETCH_MAX) as u64);
            }
            buf.pending_read = Some(PendingRead { sum });
        }
        Ok(Oid::from_raw(off))
    }

    /// The checksum of the bytes of sealed block `off` (see `heap::alloc`) as an object of
    /// `size` bytes of type `type_id`, from the freed object's header, without reading
    /// them: the freed object's checksum with the type id in its prefix replaced (`None`
    /// if its size was another; the offset, the prefix's other field, is the same).
    fn sealed_sum(&self, off: u64, size: usize, type_id: u32) -> Option<u32> {
        let old = self.header(off);
        if old.size != size as u64 {
            return None;
        }
        if old.type_id == type_id {
            return Some(old.checksum);
        }
        Some(adler32_patch(
            old.checksum,
            CHECKSUM_PREFIX + size,
            PREFIX_TYPE_OFFSET,
            &old.type_id.to_le_bytes(),
            &type_id.to_le_bytes(),
        ))
    }

    /// Allocates `size` payload bytes of type `type_id`, filled by `fill` (a link at their
    /// end as `fill` leaves it, unkept: for extension groups, which no handle of the program
    /// opens; a base goes through `alloc_filled`).
    pub(crate) fn alloc_raw(
        &self,
        size: usize,
        type_id: u32,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<u64> {
        // A buffer of a group (`copy_ext`'s copies): group reads must look for it.
        self.st.borrow_mut().group_bufs = true;
        self.alloc_filled(size, type_id, None, 0, fill)
    }

    /// Allocates `size` payload bytes of type `type_id`, filled by `fill`, then with the
    /// extension link `link` kept at the end of the value (see `tail`) if there is one,
    /// the last `reserve` bytes being the reserve after it: `copy_ext` gives its copy of a
    /// base the copied chain's link this way.
    pub(crate) fn alloc_filled(
        &self,
        size: usize,
        type_id: u32,
        link: Option<u64>,
        reserve: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<u64> {
        let mut st = self.st.borrow_mut();
        let (off, mut p, _) = self.alloc_block(&mut st, size, type_id)?;
        // SAFETY: just created; no handle to it exists yet.
        let buf = unsafe { p.as_mut() };
        fill(buf.payload_mut());
        buf.mark_all();
        if let Some(link) = link {
            keep_link(&mut st.lane.scratch.links, buf, link, reserve);
        }
        Ok(off)
    }

    /// Sets the extension link of the `#[extendible]` object `m` holds to `link`, and its
    /// reserve to `reserve` if given (the inline groups an upgrade made), marking the link
    /// if it changes and the reserve from its start to its last changed byte: the one way
    /// `leds` relinks an owner (see `tail`).
    pub(crate) fn relink<T: Persistent>(
        &self,
        m: &mut Mut<'_, T>,
        link: u64,
        reserve: Option<&[u8]>,
    ) {
        debug_assert!(T::__OWNS_TAIL);
        // The link first: it ends where the reserve starts, so the two marks make one
        // range when the reserve's change is marked from its start.
        keep_link(
            &mut self.st.borrow_mut().lane.scratch.links,
            m.buf_mut(),
            link,
            T::__RESERVE,
        );
        if let Some(r) = reserve {
            let buf = m.buf_mut();
            let start = core::mem::size_of::<T>();
            let old = &buf.payload()[start..];
            debug_assert_eq!(old.len(), r.len(), "a reserve of another size");
            // Found a word at a time (`changed_span`, as a handle's changes are): 36
            // instructions fewer an upgrade than byte by byte, with a 24-byte reserve.
            if let Some((_, end)) = super::buffer::changed_span(old, r) {
                buf.payload_mut()[start..start + end].copy_from_slice(&r[..end]);
                buf.mark(start, start + end);
            }
        }
    }

    /// Reserves a block for `size` payload bytes of type `type_id`, write-locks it and
    /// gives it a new (unfilled, unmarked) buffer. Returns the payload's offset, the
    /// buffer, and whether the block is sealed (see `heap::alloc`).
    fn alloc_block(
        &self,
        st: &mut TxState<'p>,
        size: usize,
        type_id: u32,
    ) -> Result<(u64, NonNull<Buffer>, bool)> {
        if size == 0 {
            // The typed entry points refuse zero-sized types first, naming them.
            return Err(Error::ZeroSized {
                type_name: "zero-sized object",
            });
        }
        self.eng.migrating.check("create", type_id, 0)?;
        let lane = &mut *st.lane;
        let held = &mut lane.scratch.held;
        // The new object's write lock is taken before its block is reserved (see
        // `heap::alloc`); a block whose stripe another transaction holds is passed over.
        let mut own_ref = None;
        let mut claim = |off: u64| match take_stripe(self.eng, held, off, Held::Write) {
            Ok(()) => true,
            Err(Busy::ThisThread) => {
                own_ref = Some(off);
                false
            }
            Err(Busy::Conflict) => false,
        };
        let reserved = self.eng.heap.alloc(
            &mut lane.arena,
            size as u64,
            &mut lane.scratch.meta,
            &mut lane.scratch.undo,
            &mut claim,
        );
        let reserved = match (reserved, own_ref) {
            // Blocked by this thread's own `Ref`: no retry can succeed while it is held.
            (Err(Error::Conflict { .. }), Some(offset)) => {
                return Err(Error::locked_by_this_thread(offset));
            }
            (Err(Error::Conflict { offset }), None) => {
                st.poison.get_or_insert(Error::Conflict { offset });
                return Err(Error::Conflict { offset });
            }
            (p, _) => p?,
        };
        let off = reserved.place.hdr + HEADER_SIZE;
        let p = self.new_buffer(st, off, size, type_id, BufKind::New);
        st.allocs += 1;
        Ok((off, p, reserved.sealed))
    }

    /// Frees the object when the transaction commits (an `#[extendible]` object with its
    /// extension groups). The pool's root object lives as long as the pool:
    /// `Error::RootNotFreeable`.
    pub fn free<T: Persistent>(&self, oid: Oid<T>) -> Result<()> {
        let off = oid.raw();
        if T::__GROUP {
            return Err(group_refused::<T>(off, "freed"));
        }
        let vet = |h: &ObjectHeader, capacity| {
            Self::check_type::<T>(off, h, capacity).map(|()| T::TYPE_ID)
        };
        // The owner is vetted (and write-locked) first, its tail found next, and only then
        // is anything freed: an error never leaves an owner linking freed groups. One met
        // while freeing (a group's lock) fails the transaction: the owner must not go
        // without its groups (`whole`). A type without a tail has link 0.
        let (buffered, link) = {
            let mut guard = self.st.borrow_mut();
            let st = &mut *guard;
            // A type without a tail reads nothing of its buffer: one with holes (a ranged
            // write) is freed as it is.
            let buffer = if T::__OWNS_TAIL {
                self.buffer_of::<T>(st, off)?
            } else {
                self.buffer_of_with_holes::<T>(st, off)?
            };
            match buffer {
                Some(b) if T::__OWNS_TAIL => {
                    // SAFETY: see `buffered`; only the borrow flag and the payload (always
                    // loaded for a type that owns a tail) are read.
                    let buf = unsafe { b.as_ref() };
                    if buf.borrow != 0 {
                        return Err(Error::already_borrowed(off));
                    }
                    (
                        Some(b),
                        super::tail::link_at_end(super::tail::value_of(buf)).unwrap_or(0),
                    )
                }
                Some(b) => (Some(b), 0),
                None => {
                    self.vet_unbuffered(st, off, vet)?;
                    let link = if T::__OWNS_TAIL {
                        self.stored_link::<T>(off)
                    } else {
                        0
                    };
                    (None, link)
                }
            }
        };
        self.refuse_root(off)?;
        let free_owner = || {
            let mut guard = self.st.borrow_mut();
            let st = &mut *guard;
            match buffered {
                // SAFETY: see `open`.
                Some(mut b) => self.free_buffered(st, off, unsafe { b.as_mut() }),
                None => self.record_free(st, off, T::TYPE_ID),
            }
        };
        if link == 0 {
            // No group but the owner's own (any type without a tail, and an object no
            // upgrade reached): one step, which an error leaves undone (the heap refuses
            // before it changes anything), so it does not fail the transaction (`whole`
            // is for changes that can stop part way).
            return free_owner();
        }
        // The link says what else is freed: followed only once the owner's checksum
        // vouches for it, whatever the verify policy (a damaged link could name another
        // chain's group of the same type). That includes a link naming no separate group,
        // only inline ones: the same damage that clears a separate group's offset leaves
        // the inline count standing, and taken at its word it would free the owner and
        // leave that group allocated, linked from nothing.
        self.verify_link_holder(off)?;
        let tail = self.tail::<T>(off, link)?;
        self.whole(|| {
            free_owner()?;
            for (group, _, _) in tail {
                self.free_raw(group)?;
            }
            Ok(())
        })
    }

    /// The pool's root object as its committed root word names it (0: none yet: see
    /// `Engine::root`). The word changes only by a commit that creates the root or a
    /// migration's switch moving it, neither of which frees anything; a migration frees
    /// the old root once the word names the new one.
    fn root_offset(&self) -> u64 {
        self.eng.root.load(std::sync::atomic::Ordering::Acquire)
    }

    /// `Error::RootNotFreeable` if the object at `off`, vetted for a free, is the root.
    /// Checked after the other vetting, whose errors (a stale oid, another type, a
    /// migration converting it) say more.
    fn refuse_root(&self, off: u64) -> Result<()> {
        if off == self.root_offset() {
            return Err(Error::RootNotFreeable {
                pool_file: None,
                offset: off,
            });
        }
        Ok(())
    }

    /// The link that ends the stored `T` at `off` (a type that owns a tail), which this
    /// transaction has vetted and write-locked.
    fn stored_link<T: Persistent>(&self, off: u64) -> u64 {
        let Some(at) = core::mem::size_of::<T>().checked_sub(super::tail::TAIL_LINK) else {
            return 0;
        };
        let mut b = [0u8; super::tail::TAIL_LINK];
        // SAFETY: inside the payload of a located object of type T (its size checked), under
        // this transaction's write lock.
        unsafe { self.eng.media.read(off + at as u64, &mut b) };
        u64::from_le_bytes(b)
    }

    /// Frees the object at `off`, which this transaction has buffered as `buf`.
    fn free_buffered(&self, st: &mut TxState<'p>, off: u64, buf: &mut Buffer) -> Result<()> {
        if buf.borrow != 0 {
            return Err(Error::already_borrowed(off));
        }
        let committed = buf.kind != BufKind::New;
        let f = self
            .eng
            .heap
            .free(off, &mut st.lane.scratch.meta, committed)?;
        st.lane.scratch.frees.push(f);
        buf.kind = BufKind::Freed;
        Ok(())
    }

    /// Vets the object at `off`, which this transaction has not touched yet, for a free:
    /// takes its write lock and lets `check` vet its header (it returns the type id to
    /// record).
    fn vet_unbuffered(
        &self,
        st: &mut TxState<'p>,
        off: u64,
        check: impl FnOnce(&ObjectHeader, u64) -> Result<u32>,
    ) -> Result<u32> {
        if self.reads.borrowed(off) {
            return Err(Error::already_borrowed(off));
        }
        // The header is read after the lock and the allocation check: its line (often not
        // cached, a free being the object's last use) is on its way meanwhile.
        self.eng
            .media
            .prefetch(off.saturating_sub(HEADER_SIZE), HEADER_SIZE);
        self.lock(st, off, Held::Write)?;
        let place = self.eng.heap.locate(off)?;
        let type_id = check(&self.header(off), place.capacity)?;
        self.eng.migrating.check("free", type_id, off)?;
        Ok(type_id)
    }

    /// Records the free of the object at `off` of type `type_id`, vetted by
    /// `vet_unbuffered`, in a new buffer.
    fn record_free(&self, st: &mut TxState<'p>, off: u64, type_id: u32) -> Result<()> {
        let f = self.eng.heap.free(off, &mut st.lane.scratch.meta, true)?;
        st.lane.scratch.frees.push(f);
        self.new_buffer(st, off, 0, type_id, BufKind::Freed);
        Ok(())
    }

    /// Verifies the checksum of the object at `off`, which this transaction holds locked
    /// (read or written through it), before a link it holds is followed for a change,
    /// whatever the verify policy; an object this transaction buffers was verified when it
    /// was opened, or made by it. A mismatch is repaired from parity and the transaction
    /// run again, as for any read.
    pub(crate) fn verify_link_holder(&self, off: u64) -> Result<()> {
        if self.st.borrow().lane.scratch.buffers(off) {
            return Ok(());
        }
        verify_in_place(self.eng, off, &self.header(off))
    }

    /// The type id and bytes of the object at `off`, whatever its type: from this
    /// transaction's buffer if it has one, else from NVMM under a read lock held until the
    /// transaction ends (`leds` copies and frees extension chains with it, whose tail may
    /// hold groups this build does not know).
    pub(crate) fn object_bytes(&self, off: u64) -> Result<(u32, Vec<u8>)> {
        let mut st = self.st.borrow_mut();
        if let Some(b) = self.buffered(&st, off)? {
            // SAFETY: as in `buffered`; the borrow flag is checked before the payload is read.
            let buf = unsafe { b.as_ref() };
            if buf.borrow < 0 {
                return Err(Error::already_borrowed(off));
            }
            return Ok((buf.type_id, buf.payload().to_vec()));
        }
        self.lock(&mut st, off, Held::Read)?;
        let place = self.eng.heap.locate(off)?;
        let h = self.header(off);
        if h.size > place.capacity || h.size == 0 {
            return Err(Error::invalid_oid(
                off,
                "its header gives an impossible size",
            ));
        }
        verify_in_place(self.eng, off, &h)?;
        let mut bytes = vec![0u8; h.size as usize];
        // SAFETY: the payload lies inside the pool (size <= capacity) and our read lock
        // excludes concurrent commits to it.
        unsafe { self.eng.media.read(off, &mut bytes) };
        Ok((h.type_id, bytes))
    }

    /// Frees the object at `off` when the transaction commits, whatever its type (`leds`
    /// frees the groups of an extension chain this build may not know).
    pub(crate) fn free_raw(&self, off: u64) -> Result<()> {
        let mut guard = self.st.borrow_mut();
        let st = &mut *guard;
        // A freed-entry of a group (an owner's tail): group reads must meet it.
        st.group_bufs = true;
        match self.buffered(st, off)? {
            // SAFETY: see `open`.
            Some(mut b) => self.free_buffered(st, off, unsafe { b.as_mut() }),
            None => {
                let type_id = self.vet_unbuffered(st, off, |h, capacity| {
                    if h.size > capacity {
                        return Err(Error::invalid_oid(
                            off,
                            "its header gives an impossible size",
                        ));
                    }
                    Ok(h.type_id)
                })?;
                self.record_free(st, off, type_id)
            }
        }
    }

    /// Counts one object upgraded by `leds` (reported by `stats()` once this commits).
    pub(crate) fn note_upgrade(&self) {
        self.st.borrow_mut().upgrades += 1;
    }

    /// Sets a heap metadata word (the root oid) at commit.
    pub(crate) fn set_meta_word(&self, off: u64, value: u64) {
        self.st.borrow_mut().lane.scratch.meta.set(off, value);
    }

    /// Runs `f`, a change made of several steps (an upgrade, a free of an owner with its
    /// tail, the allocation of a chain); if it fails part way, the transaction fails with
    /// it (poisoned: it cannot commit), so that half of it (groups allocated and linked
    /// from nowhere, an owner freed without its groups) never becomes durable, even when
    /// the closure goes on after the error.
    pub(crate) fn whole<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        f().inspect_err(|e| self.poison(e))
    }

    /// Marks this transaction failed (by a nested transaction, or a change that failed
    /// part way: `whole`).
    pub(crate) fn poison(&self, e: &Error) {
        let mut st = self.st.borrow_mut();
        if st.poison.is_none() {
            st.poison = Some(match e {
                Error::Conflict { offset } => Error::Conflict { offset: *offset },
                // The caller's own error: the outer transaction fails with it, not a text.
                Error::Abort { error } => Error::Abort {
                    error: Arc::clone(error),
                },
                other => Error::Aborted {
                    reason: other.to_string(),
                },
            });
        }
    }

    /// Discards every change and releases everything (idempotent).
    pub(crate) fn abort(&self) {
        if self.done.replace(true) {
            return;
        }
        let mut st = self.st.borrow_mut();
        // Runs this transaction created die first, so releasing their blocks below cannot
        // publish them to other transactions.
        for u in &st.lane.scratch.undo {
            self.eng.heap.kill_new_run(u);
        }
        while let Some(u) = st.lane.scratch.undo.pop() {
            self.eng.heap.undo(u);
        }
        self.lane.counters.add(Counter::Aborts, 1);
        self.release(&mut st);
    }

    pub(crate) fn release(&self, st: &mut TxState<'p>) {
        if st.owns_registry {
            self.eng.types.disown();
            st.owns_registry = false;
        }
        st.registered.clear();
        let lane = &mut *st.lane;
        let sc = &mut lane.scratch;
        // What was vetted under the locks is not known once they go.
        sc.vetted.clear();
        let objects = &self.eng.objects;
        sc.held.release_all(|stripe, h| objects.release(stripe, h));
        for b in sc.bufs.drain(..) {
            // SAFETY: created by Box::leak in new_buffer, reclaimed once here; no handle is
            // alive (handles borrow the transaction, which is ending).
            let b = unsafe { Box::from_raw(b.as_ptr()) };
            if lane.spare.len() < 64 && b.capacity() <= 64 << 10 {
                lane.spare.push(b);
            }
        }
        sc.index.clear();
        // No handle is alive (see above): the set of in-place reads is done with.
        if let Some(map) = self.reads.take() {
            sc.reads = Some(map);
        }
        sc.meta.clear();
        sc.undo.clear();
        sc.frees.clear();
        sc.links.clear();
    }
}

/// Counts in `links` that a buffer's kept extension link changes from `old` to `new`
/// (by the separate group each names: the inline count is the owner's own business). A
/// link that names no separate group is not counted: `links` is asked only about groups
/// (`alloc_linked`), and most owners' links (every one whose groups all live in its
/// reserve) name none.
#[inline]
fn count_link(links: &mut SmallMap<u64, u32>, old: Option<u64>, new: u64) {
    let (old, new) = (old.map(crate::leds::separate), crate::leds::separate(new));
    // Inlined for this test: an owner whose groups all live in its reserve, or that has
    // none, names no separate group before or after.
    if old == Some(new) || (old.unwrap_or(0) == 0 && new == 0) {
        return;
    }
    count_changed_link(links, old, new);
}

/// `count_link` past its test: `old` and `new` (separate groups' offsets, 0: none) differ.
fn count_changed_link(links: &mut SmallMap<u64, u32>, old: Option<u64>, new: u64) {
    if let Some(old) = old.filter(|&o| o != 0) {
        links.update_or_remove(&old, |n| {
            *n -= 1;
            *n == 0
        });
    }
    if new != 0 {
        *links.entry_or_insert_with(new, || 0) += 1;
    }
}

/// `tail::set_link`, counting the change in the transaction's `links`. `reserve`: the
/// bytes of the buffer's payload after the value the link ends.
fn keep_link(links: &mut SmallMap<u64, u32>, buf: &mut Buffer, link: u64, reserve: usize) {
    count_link(links, buf.link, link);
    super::tail::set_link(buf, link, reserve);
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Most bytes of an unfilled allocation's old contents fetched ahead of the checksum the
/// commit computes over them (see `Tx::alloc_unzeroed`).
const UNFILLED_PREFETCH_MAX: usize = 16 << 10;

/// Largest owner whose checksum `Tx::vouch` verifies to spare its group's read a lock.
/// On this project's machine, for 48-byte owners, the checksum (11 ns) in place of the
/// group's lock and heap lookup took 10 points off the tree's `loads%` in the LEDS
/// example; an Adler-32 of 512 bytes takes 19 ns, of 1 KiB about 30. Larger owners,
/// whose gain was not measured, keep the lock.
const VOUCH_MAX: usize = 512;

/// `Error::ZeroSized` for a zero-sized `T` (`[U; 0]`): checked before the type is
/// registered or anything reserved.
fn refuse_zero_sized<T: Persistent>() -> Result<()> {
    if core::mem::size_of::<T>() == 0 {
        return Err(Error::ZeroSized {
            type_name: core::any::type_name::<T>(),
        });
    }
    Ok(())
}

/// What `Error::Corrupt` names for an object header whose size is past its block.
pub(crate) const OBJECT_HEADER: &str = "object header";

/// `verify_in_place` for a block of `capacity` payload bytes, whose header `h` may be
/// damaged: a size past the block is `Error::Corrupt` (the payload is not read).
pub(crate) fn verify_block(eng: &Engine, off: u64, h: &ObjectHeader, capacity: u64) -> Result<()> {
    if h.size > capacity {
        return Err(Error::Corrupt {
            what: OBJECT_HEADER,
            offset: off - HEADER_SIZE,
            detail: format!("size {} exceeds its block of {capacity} bytes", h.size),
            pool_file: None,
        });
    }
    verify_in_place(eng, off, h)
}

/// Verifies an object's checksum in place (Conservative policy).
pub(crate) fn verify_in_place(eng: &Engine, off: u64, h: &ObjectHeader) -> Result<()> {
    if !eng.checksums {
        return Ok(());
    }
    // SAFETY: a located live object, read under a lock that excludes writers.
    let payload = unsafe { eng.media.bytes(off, h.size as usize) };
    let sum = object_checksum(off, h.type_id, payload);
    if sum != h.checksum {
        return Err(Error::ChecksumMismatch {
            offset: off,
            type_id: h.type_id,
            size: h.size,
            stored: h.checksum,
            computed: sum,
            pool_file: None,
            type_name: None,
        });
    }
    Ok(())
}

/// Takes the lock of the object at `off` as `want` for a transaction holding `held`,
/// without waiting: `Error::LockedByThisThread` if this thread's own `Ref` blocks a write
/// lock or its own `Detached` holds the object (no retry can succeed while the closure
/// runs), else `Error::Conflict`.
/// `tx.open`/`tx.free`/`pool.open_mut` of an extension group: groups change only
/// through their owner (see [`GroupScope`]).
pub(crate) fn group_refused<T: Persistent>(off: u64, what: &str) -> Error {
    Error::invalid_oid(
        off,
        format!(
            "`{}` is an extension group of an #[extendible] struct: it is {what} only \
             through its owner (tx.ext_mut, tx.free of the owner)",
            T::TYPE_NAME
        ),
    )
}

/// Why `take_stripe` could not take a lock: one byte, so that the common `Ok` comes back
/// in a register (a `Result<(), Error>` is returned through memory, which the caller
/// loaded and copied on every lock; the `Error` is made in `Tx::lock_failed`, cold).
#[derive(Clone, Copy, Debug)]
enum Busy {
    /// Another transaction holds it.
    Conflict,
    /// This thread holds it, outside this transaction (`Error::LockedByThisThread`).
    ThisThread,
}

fn take_stripe(
    eng: &Engine,
    held: &mut HeldStripes,
    off: u64,
    want: Held,
) -> core::result::Result<(), Busy> {
    let stripe = ObjectLocks::stripe(off);
    let ok = match (want, held.get(stripe)) {
        (_, Some(Held::Write)) | (Held::Read, Some(Held::Read)) => return Ok(()),
        (Held::Write, h) => eng.objects.try_write(stripe, h),
        (Held::Read, None) => eng.objects.try_read(stripe),
    };
    if ok {
        held.insert(stripe, want);
        Ok(())
    } else if (want == Held::Write && ref_held(eng.id, stripe)) || detached_holds(eng.id, stripe) {
        Err(Busy::ThisThread)
    } else {
        Err(Busy::Conflict)
    }
}
