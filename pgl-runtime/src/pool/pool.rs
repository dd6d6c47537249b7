//! `Pool`: create, open (header repair + recovery + heap rebuild), transactions, root, grow.
//!
//! Invariant: a `Pool` value exists only for a pool whose header verified, whose committed
//! redo records were replayed, and whose heap metadata loaded without inconsistency.

use super::config::Config;
use super::header::{Header, FLAG_OPEN};
use crate::geometry::PAGE;
use crate::heap::layout::{ObjectHeader, HEADER_SIZE, ROOT_OFFSET};
use crate::persist::{CrashSim, FileKind, FlushMode, Media, SIM_ALREADY_OPEN};
use crate::persistent::{Oid, Persistent};
use crate::stats::Stats;
use crate::tx::{self, Engine, Mut, Ref, Tx, TypeInfo};
use crate::{Error, Result};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A persistent memory pool: one file of typed, checksummed objects.
///
/// `Pool` is `Send + Sync` and cheap to clone (clones share the open pool); the file is
/// unmapped when the last clone is dropped. Everything committed is already durable;
/// dropping the last clone also records a clean close in the header, so that the next open
/// need not recompute parity.
#[derive(Clone)]
pub struct Pool {
    pub(super) inner: Arc<Inner>,
    /// The background scrubber (`VerifyPolicy::Scrub`), held by the program's handles
    /// only: dropping the last of them stops the thread and waits for it, so that the
    /// scrubber never keeps the pool open (or closes it) after the program let it go.
    #[allow(dead_code)] // held for its `Drop` only
    pub(super) scrubber: Option<Arc<super::scrub::Scrubber>>,
}

pub(super) struct Inner {
    pub(super) eng: Engine,
    pub(super) header: Mutex<Header>,
    pub(super) root_lock: Mutex<()>,
    pub(super) grow_lock: Mutex<()>,
    pub(super) replayed: u64,
    pub(super) header_repairs: u64,
    pub(super) header_updates_completed: u64,
    pub(super) lane_repairs: u64,
    pub(super) lane_copies_damaged: u64,
    /// Zone metadata copies rewritten from the other copy while opening.
    pub(super) metadata_repairs: u64,
    /// Allocation bitmap words rebuilt from parity while opening.
    pub(super) bitmap_repairs: u64,
    /// What reconciling parity found when the pool was opened.
    pub(super) reconciled: crate::integrity::Reconciled,
    /// Scrubs the background scrubber completed.
    pub(super) scrubs: std::sync::atomic::AtomicU64,
    /// Of those, the ones whose report was not clean.
    pub(super) scrubs_unclean: std::sync::atomic::AtomicU64,
    /// Passes of the background scrubber that failed.
    pub(super) scrubs_failed: std::sync::atomic::AtomicU64,
}

impl Drop for Inner {
    /// A clean close: the OPEN flag is cleared, so the next open skips the parity
    /// recomputation a crash needs. Not after a failed write-back, whose consequences the
    /// next open must repair.
    fn drop(&mut self) {
        let media = &self.eng.media;
        // A read-only open closes as it opened: its repairs were in its private copy.
        if media.check().is_err() || media.is_private() {
            return;
        }
        // Deferred records are settled; the last retire mark of each lane was written
        // without a flush: make them durable before the header says the pool was closed
        // cleanly (an open that finds OPEN clear skips the parity recomputation a replay
        // would need).
        self.eng.settle_all();
        for i in 0..self.eng.geo.lanes as usize {
            self.eng.flush_retire(i);
        }
        media.fence();
        if media.check().is_err() {
            return;
        }
        // Opening left both copies valid, and every header update since wrote both whole:
        // a copy that no longer decodes was damaged behind pgl's back (a stray write, or
        // `Pool::inject`). Then the header is left as it is, OPEN set: writing the damaged
        // copy would hide the damage from the next open (and from `pgl check`), which
        // reports it and rewrites it from the other; rewriting the good copy alone in
        // place, a crash tearing it would leave no copy that opens. The lanes are retired
        // and parity agrees with the rows (durable above), as a clean close says: the
        // dirty-zone marks go, so that the next open, recovering as after a crash, still
        // trusts the zones' parity to rebuild damage.
        let offs = [0, self.eng.geo.header_offset(1)];
        if offs.iter().any(|&off| !header_decodes(media, off)) {
            if self.eng.parity.enabled() {
                tx::clear_dirty_zones(media, &self.eng.geo);
                media.fence();
            }
            return;
        }
        let mut h = self.header.lock().clone();
        h.flags &= !FLAG_OPEN;
        h.generation += 1;
        for off in offs {
            Pool::write_header_copy(media, off, &h);
        }
    }
}

/// Whether the header copy at `off` decodes. Only while the caller is the one writer of
/// the header pages (the grow lock, or the pool closing).
fn header_decodes(media: &Media, off: u64) -> bool {
    let mut page = vec![0u8; PAGE as usize];
    // SAFETY: a header page inside the pool, which only the caller writes.
    unsafe { media.read(off, &mut page) };
    Header::decode(&page).is_ok()
}

/// A summary of a pool for `pgl info`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PoolInfo {
    /// The file.
    pub path: PathBuf,
    /// The decoded header.
    pub header: Header,
    /// Bytes of the pool.
    pub size: u64,
    /// Bytes of all data chunks.
    pub heap_capacity: u64,
    /// Bytes free for allocation.
    pub free: u64,
    /// The durability back-end in use (`read-only` for a pool opened with
    /// [`Pool::open_read_only`]).
    pub flush: &'static str,
    /// Whether the pool was opened with [`Pool::open_read_only`]: what opening and reading
    /// it repaired (see [`Pool::stats`]) was repaired in memory only, not in the file.
    pub read_only: bool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("path", &self.inner.eng.media.path())
            .field("size", &self.size())
            .finish()
    }
}

/// How long `pool.root` inside a transaction waits for the root lock before it fails the
/// transaction with `Error::Conflict`: long enough for a holder that only reads the root
/// word, short next to a transaction's retry backoff.
const ROOT_IN_TX_WAIT: std::time::Duration = std::time::Duration::from_micros(200);

/// What to do instead of opening a pool that is open already (`Error::AlreadyOpen`).
pub(super) const ALREADY_OPEN: &str =
    "within one program, share one `Pool` (clone it) instead of opening the file twice; if \
     another program (or a `pgl` command inspecting it) has it open, wait for it to close \
     the pool, or stop it";

/// What to do instead of opening read-only a pool a writer has open (`Error::AlreadyOpen`).
pub(super) const ALREADY_OPEN_READ_ONLY: &str =
    "a pool is inspected only while no program has it open to write (its commits would \
     change the bytes under the inspection): wait for the program that has it open to close \
     it, or stop that program, then inspect it again";

pub(super) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(super) fn new_uuid() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut out = [0u8; 16];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(now_secs() ^ i as u64);
        h.write_u128(std::time::Instant::now().elapsed().as_nanos());
        h.write_u32(std::process::id());
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out[6] = (out[6] & 0x0f) | 0x40;
    out[8] = (out[8] & 0x3f) | 0x80;
    out
}

impl Pool {
    /// Creates a new pool file at `path`. Fails with `Error::AlreadyExists` if a file is
    /// there. The file is sparse unless `config.preallocate`: a 1 GiB pool is created
    /// without writing 1 GiB. The pool is written under a hidden temporary name beside
    /// `path` and renamed into place once whole, so that a crash while creating never
    /// leaves a half-made file at `path` (at most the temporary file, which may be
    /// deleted). If writing the new pool fails (an I/O error of the device), the file it
    /// created is removed again, so that the same call can be retried.
    pub fn create(path: impl AsRef<Path>, config: &Config) -> Result<Pool> {
        let path = path.as_ref();
        let (geo, zones) = config.validate()?;
        let (media, mut made) = Media::create_file(
            path,
            geo.pool_size(zones),
            config.max_size,
            config.flush_mode(),
            config.preallocate,
        )?;
        // Locked before it is formatted: then only this call may remove it (see `NewFile`).
        media.lock_exclusive("pool", ALREADY_OPEN)?;
        // At `path` only once whole: a crash before leaves no half-made pool there.
        if let Err(e) = Self::format(&media, &geo, zones, &config.layout, config.parity)
            .and_then(|()| made.publish())
        {
            return Err(made.abandon(FileKind::Pool, e));
        }
        Self::from_media(media, Some(&config.layout), config, false)
            .map_err(|e| made.abandon(FileKind::Pool, e))
    }

    /// Opens the pool at `path`, checking that it holds layout `layout`. Repairs a damaged
    /// header copy and replays committed transactions a crash interrupted.
    pub fn open(path: impl AsRef<Path>, layout: &str) -> Result<Pool> {
        Self::open_with(path, &Config::new(layout))
    }

    /// Opens the pool at `path` with the layout, flush mode, verify policy and `max_size` of
    /// `config` (its geometry is read from the pool).
    pub fn open_with(path: impl AsRef<Path>, config: &Config) -> Result<Pool> {
        let media = Self::pool_media(path.as_ref(), config)?;
        Self::from_media(media, Some(&config.layout), config, false)
    }

    /// The mapping of the pool file at `path`, as `config` says to map it.
    fn pool_media(path: &Path, config: &Config) -> Result<Media> {
        Media::open_file(
            path,
            crate::persist::FileKind::Pool,
            config.max_size,
            config.flush_mode(),
        )
    }

    /// Opens the pool at `path` whatever its layout (for tools such as `pgl info`), keeping
    /// parity and object checksums as the pool has them.
    pub fn open_any(path: impl AsRef<Path>) -> Result<Pool> {
        let config = Config::new("any");
        let media = Self::pool_media(path.as_ref(), &config)?;
        Self::from_media(media, None, &config, true)
    }

    /// Opens the pool at `path` whatever its layout for inspection, without ever writing
    /// the file: `pgl info`, `dump` and `check` open pools so. The file is opened
    /// read-only and mapped privately (copy-on-write), so it may be a read-only file (mode
    /// 0444, a mounted backup, an evidence copy). Opening runs everything [`Pool::open`]
    /// runs (a damaged header copy rewritten from the other, committed transactions a
    /// crash interrupted replayed, zone metadata, allocation bitmaps and parity repaired,
    /// and reads that find damage rebuild the object from parity), but in this process's
    /// private copy of the bytes: the caller sees the pool as the next writable open will
    /// make it, while the file keeps its damage. [`Pool::stats`] says what was done that
    /// way (`header_repairs`, `records_replayed`, `lane_copies_damaged`,
    /// `metadata_repairs`, `bitmap_repairs`, `objects_repaired`, ...), and
    /// [`PoolInfo::read_only`] says the pool is open so.
    ///
    /// Reading works as on any pool (`get`, `read_object`, `objects`, `types`,
    /// `verify_objects`, `verify_parity`, `scrub(false, ..)`, and transactions that only
    /// read, `tx.open` included, which verifies the object and rebuilds it from parity
    /// if damaged); everything that would change the pool fails with [`Error::ReadOnly`]
    /// and changes nothing: a transaction that changes, creates or frees an object
    /// (creating the root, or upgrading an `#[extendible]` object through `tx.ext`,
    /// included), [`Pool::grow`], [`Pool::inject`], `scrub(true, ..)`.
    ///
    /// Any number of read-only opens may share a file, but none while a writable `Pool`
    /// has it open (in this process or another), nor a writable open while one of them
    /// has it: `Error::AlreadyOpen`. An inspection beside a writer would see its commits
    /// half made and report damage that is not there.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Pool> {
        let config = Config::new("any");
        let media = Media::open_private(path.as_ref(), FileKind::Pool)?;
        Self::from_media(media, None, &config, true)
    }

    /// The objects (their oids, as [`Oid::raw`] gives them) that opening the pool
    /// found damaged in the zones a crash left to reconcile with their parity, and rebuilt
    /// from it: [`Stats::objects_repaired`] counts them among others. On a pool opened with
    /// [`Pool::open_read_only`] they were rebuilt in memory only, and the file still holds
    /// the damage (`pgl check` lists them so).
    pub fn objects_rebuilt_opening(&self) -> &[u64] {
        &self.inner.reconciled.rebuilt
    }

    /// Whether this pool was opened with [`Pool::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.eng.media.is_private()
    }

    /// `Err(Error::ReadOnly)` naming `what` if the pool was opened read-only.
    pub(crate) fn refuse_read_only(&self, what: &'static str) -> Result<()> {
        let media = &self.inner.eng.media;
        if media.is_private() {
            return Err(Error::ReadOnly {
                path: media.path(),
                what,
            });
        }
        Ok(())
    }

    /// Creates a pool on a crash-simulation device (for crash tests: see [`CrashSim`]),
    /// which must be empty and hold at least `config.size` bytes
    /// (`CrashSim::new(config.size)`; `config.max_size` if the test grows the pool).
    pub fn create_sim(sim: &Arc<CrashSim>, config: &Config) -> Result<Pool> {
        let (geo, zones) = config.validate()?;
        let size = geo.pool_size(zones);
        if size > sim.capacity() {
            return Err(Error::config(format!(
                "the CrashSim device holds {} bytes, the pool needs {size}: make the device \
                 with `CrashSim::new(config.size)` (`config.max_size` if the test grows the \
                 pool)",
                sim.capacity()
            )));
        }
        let media = Media::sim_new(sim.clone(), "pool", SIM_ALREADY_OPEN)?;
        media.grow(size)?;
        Self::format(&media, &geo, zones, &config.layout, config.parity)?;
        Self::from_media(media, Some(&config.layout), config, false)
    }

    /// Opens the pool on a crash-simulation device (after a simulated crash: a crash
    /// image from [`CrashPoint::device`](crate::CrashPoint::device)), running recovery
    /// exactly as for a file.
    pub fn open_sim(sim: &Arc<CrashSim>, layout: &str) -> Result<Pool> {
        Self::from_media(
            Media::sim(sim.clone(), "pool", SIM_ALREADY_OPEN)?,
            Some(layout),
            &Config::new(layout),
            true,
        )
    }

    /// [`Pool::open_sim`] with `config`'s run-time settings (verify policy, scrubbing,
    /// flush mode); the pool keeps the parity and checksum modes it was created with.
    pub fn open_sim_with(sim: &Arc<CrashSim>, config: &Config) -> Result<Pool> {
        let media = Media::sim(sim.clone(), "pool", SIM_ALREADY_OPEN)?;
        Self::from_media(media, Some(&config.layout), config, true)
    }

    /// Runs `f` as one transaction: every change it makes through `tx` becomes durable
    /// atomically when it returns `Ok`, and none does when it returns `Err` (the error is
    /// returned). To abort with an error `e` of your own, return `Err(Error::abort(e))`
    /// ([`Error::abort`]): `pool.tx` returns it, and [`Error::downcast_ref`] gives `e` back. A conflict with another thread's transaction
    /// re-runs `f`, so `f` may run more than once and should have no other side effects.
    /// Inside `f`, `pool.tx` joins the same transaction.
    pub fn tx<R>(&self, f: impl FnMut(&Tx<'_>) -> Result<R>) -> Result<R> {
        tx::run(&self.inner.eng, f).map_err(|e| self.inner.eng.named(e))
    }

    /// Reads an object directly from the pool, without a micro-buffer (Pangolin's
    /// `pgl_get`). The `Ref` holds the object's read lock: transactions that change it wait.
    pub fn get<T: Persistent>(&self, oid: Oid<T>) -> Result<Ref<'_, T>> {
        tx::get(&self.inner.eng, oid).map_err(|e| self.inner.eng.named(e))
    }

    /// Opens one object for an atomic update outside a closure (Pangolin's
    /// `pgl_open`/`pgl_commit`): change it through the handle, then `.commit()`; dropping the
    /// handle without committing discards the changes. Until then the handle holds the
    /// object's lock and a redo lane: on this thread, reading or opening the object fails
    /// with `Error::LockedByThisThread` instead of waiting for the handle.
    pub fn open_mut<T: Persistent>(&self, oid: Oid<T>) -> Result<Detached<'_, T>> {
        // A second transaction on this thread could wait forever for the lane or the object
        // its own outer transaction holds.
        if tx::in_tx(&self.inner.eng) {
            return Err(Error::InTransaction {
                what: "pool.open_mut",
                instead: "use tx.open in the transaction",
            });
        }
        let mut repairs = 0;
        loop {
            let tx = Tx::begin(&self.inner.eng, "pool.open_mut")?;
            let tx = std::ptr::NonNull::from(Box::leak(Box::new(tx)));
            let detached = |handle| {
                // SAFETY: as below: the leaked Tx lives until the `Detached` drops it.
                tx::enter_detached(self.inner.eng.id, unsafe { tx.as_ref() });
                Detached {
                    handle: Some(handle),
                    tx,
                }
            };
            // SAFETY: the Tx was just leaked into a stable heap allocation; the returned
            // `Detached` owns it and frees it only after dropping the handle.
            let txr: &Tx<'_> = unsafe { tx.as_ref() };
            let mut attempt = 0;
            let e = loop {
                match txr.open(oid) {
                    Ok(h) => return Ok(detached(h)),
                    Err(Error::Conflict { .. }) if attempt < 10_000 => {
                        txr.st.borrow_mut().poison = None;
                        attempt += 1;
                        std::thread::sleep(std::time::Duration::from_micros(10));
                    }
                    Err(e) => break e,
                }
            };
            // SAFETY: no handle exists; reclaim the leaked box (which releases the lane,
            // so that a repair can freeze the pool).
            drop(unsafe { Box::from_raw(tx.as_ptr()) });
            if repairs < 3 && tx::try_repair(&self.inner.eng, &e) {
                repairs += 1;
                continue;
            }
            let e = self.inner.eng.damage_behind(e);
            return Err(self.inner.eng.named(e));
        }
    }

    /// The root object of type `T`, created zero-filled on the first call (which must not
    /// be inside a transaction: call `root` once before starting them).
    ///
    /// Inside a transaction it does not wait long for another thread that is creating the
    /// root or moving it (a Manual migration), which may need this thread's lane: after
    /// a short wait it fails with `Error::Conflict`, and `pool.tx` runs the closure again.
    pub fn root<T: Persistent>(&self) -> Result<Oid<T>> {
        let eng = &self.inner.eng;
        let word = self.root_word_offset();
        // The word changes only while `root_lock` is held (creation), so it is read under it;
        // the type check below runs without it, so a root held by a transaction elsewhere
        // never makes a second caller wait while holding the lock.
        let cur = {
            let g = self.lock_root()?;
            // SAFETY: the root word lies in zone 0's metadata; it changes only under root_lock.
            let cur = unsafe { eng.media.read_u64(word) };
            if cur == 0 {
                if tx::in_tx(eng) {
                    return Err(Error::InTransaction {
                        what: "pool.root (creating the root)",
                        instead: "call pool.root once before starting transactions",
                    });
                }
                let oid = self.tx(|tx| {
                    let oid = tx.alloc_zeroed::<T>()?;
                    tx.set_meta_word(word, oid.raw());
                    Ok(oid)
                })?;
                drop(g);
                return Ok(oid);
            }
            cur
        };
        let oid = Oid::<T>::from_raw(cur);
        // Through this thread's transaction if that holds the root already (`pool.get`
        // would be refused).
        let e = match tx::check_is(eng, oid) {
            Ok(()) => return Ok(oid),
            Err(Error::TypeMismatch {
                found, found_size, ..
            }) => Error::RootType {
                // The path, as the registry names the type found: the two may share a name.
                type_name: core::any::type_name::<T>(),
                found,
                found_size,
                found_name: None,
                pool_file: None,
            },
            Err(e) => e,
        };
        Err(eng.named(e))
    }

    /// The pool offset of the root word (in zone 0's metadata).
    fn root_word_offset(&self) -> u64 {
        self.inner.eng.geo.chunk_offset(0, 0) + ROOT_OFFSET
    }

    /// Offset of zone 0's migration-journal word (see `leds::journal`).
    pub(crate) fn journal_word_offset(&self) -> u64 {
        self.inner.eng.geo.chunk_offset(0, 0) + crate::heap::layout::JOURNAL_OFFSET
    }

    /// The zone metadata word at `off` (the root or journal word), read in place. Call it
    /// under `root_lock` (`with_root_word`), where those words change.
    pub(crate) fn meta_word(&self, off: u64) -> u64 {
        // SAFETY: callers pass a metadata word of zone 0 (inside the pool, 8-byte aligned);
        // it changes only under root_lock, which they hold.
        unsafe { self.inner.eng.media.read_u64(off) }
    }

    /// Bytes one transaction's redo record may hold.
    pub(crate) fn lane_capacity(&self) -> u64 {
        self.inner.eng.geo.lane_size
    }

    /// `e` naming this pool's file, for an error made outside its API (as `leds` makes).
    pub(crate) fn named(&self, e: Error) -> Error {
        self.inner.eng.named(e)
    }

    /// Whether this thread runs a transaction of this pool.
    pub(crate) fn in_tx(&self) -> bool {
        tx::in_tx(&self.inner.eng)
    }

    /// Guards the old `types` of a Manual migration on this thread while the guard lives
    /// (see `tx::MigrationGuard`). Call it outside transactions and before `with_root_word`
    /// (it waits for every transaction to end).
    pub(crate) fn guard_migration(&self, types: Vec<u32>) -> Result<tx::MigrationGuard<'_>> {
        let eng = &self.inner.eng;
        eng.guard_migration(types).map_err(|e| eng.named(e))
    }

    /// Runs `f` with the root word's offset and the root oid it holds, under `root_lock`:
    /// the root changes only there, so `f`'s transaction may move it (`leds`'s migration
    /// moves the root with the objects it converts), as `root` does when creating it.
    pub(crate) fn with_root_word<R>(&self, f: impl FnOnce(u64, u64) -> Result<R>) -> Result<R> {
        let word = self.root_word_offset();
        let _g = self.lock_root()?;
        // SAFETY: the root word lies in zone 0's metadata; it changes only under root_lock.
        let cur = unsafe { self.inner.eng.media.read_u64(word) };
        f(word, cur)
    }

    /// Takes `root_lock`. Its holder may be creating (or migrating) the root, in
    /// transactions that need a lane: a thread holding a lane never waits for it for good.
    /// Inside a transaction only `ROOT_IN_TX_WAIT`, then `Error::Conflict`, which runs the
    /// closure again with the lane released meanwhile; with a `Detached` handle held, up
    /// to the repair `WAIT`.
    fn lock_root(&self) -> Result<parking_lot::MutexGuard<'_, ()>> {
        let eng = &self.inner.eng;
        let word = self.root_word_offset();
        let g = if tx::in_tx(eng) {
            // Briefly: most holders only read the word.
            self.inner.root_lock.try_lock_for(ROOT_IN_TX_WAIT)
        } else if tx::detached_held(eng.id) {
            self.inner.root_lock.try_lock_for(tx::WAIT)
        } else {
            return Ok(self.inner.root_lock.lock());
        };
        g.ok_or_else(|| eng.named(tx::conflict_in_tx(eng, word)))
    }

    /// Grows the pool to at least `new_size` bytes: whole zones are added, as many as it
    /// takes (the size is rounded up to a zone boundary). `Error::InvalidConfig` if the
    /// pool is that big already, or `new_size` is beyond `Config::max_size`.
    pub fn grow(&self, new_size: u64) -> Result<()> {
        self.refuse_read_only("pool.grow")?;
        let _g = self.inner.grow_lock.lock();
        let eng = &self.inner.eng;
        let mut header = self.inner.header.lock().clone();
        if new_size <= header.pool_size() {
            return Err(Error::config(format!(
                "cannot grow to {new_size} bytes: the pool is already {} bytes",
                header.pool_size()
            )));
        }
        // Rounded up (`zones_for` rounds down); past u64::MAX it stays short of
        // `new_size`, and far beyond any mapping, which `Media::grow` refuses.
        let zones = eng
            .geo
            .zones_for(new_size.saturating_add(eng.geo.zone_size() - 1));
        super::header::check_geometry(&eng.geo, zones).map_err(Error::config)?;
        eng.media.check()?;
        // New zones start as zeros (empty chunk tables, valid metadata copies, parity
        // that agrees with the rows), whatever the file held past the pool's end.
        eng.media
            .grow_from(header.pool_size(), eng.geo.pool_size(zones))?;
        header.zones = zones;
        header.generation += 1;
        // A copy damaged since the pool opened is written first: a crash tearing the
        // write of the other, the one good copy, would leave no copy that opens.
        let mut offs = [0, eng.geo.header_offset(1)];
        offs.sort_by_key(|&off| header_decodes(&eng.media, off));
        for off in offs {
            Self::write_header_copy(&eng.media, off, &header);
        }
        // The new zones are usable only if the headers that name them are durable.
        eng.media.check()?;
        eng.heap
            .add_zones(&eng.media, zones)
            .map_err(|e| eng.named(e))?;
        *self.inner.header.lock() = header;
        Ok(())
    }

    /// The pool's size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.header.lock().pool_size()
    }

    /// Bytes available for new objects.
    pub fn free_bytes(&self) -> u64 {
        self.inner.eng.heap.free_bytes()
    }

    /// Counters since the pool was opened.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for l in self.inner.eng.lanes.iter() {
            l.counters.add_to(&mut s);
        }
        s.records_replayed = self.inner.replayed;
        s.header_repairs = self.inner.header_repairs;
        s.header_updates_completed = self.inner.header_updates_completed;
        s.lane_repairs = self.inner.lane_repairs;
        s.lane_copies_damaged = self.inner.lane_copies_damaged;
        let r = &self.inner.eng.repairs;
        s.metadata_repairs =
            self.inner.metadata_repairs + r.metadata_copies.load(Ordering::Relaxed);
        s.bitmap_repairs = self.inner.bitmap_repairs + r.bitmap_words.load(Ordering::Relaxed);
        s.runs_quarantined = self.inner.eng.heap.quarantined();
        let opened = &self.inner.reconciled;
        s.objects_repaired = r.repaired.load(Ordering::Relaxed) + opened.rebuilt.len() as u64;
        s.pages_rebuilt = r.pages.load(Ordering::Relaxed) + opened.pages;
        // (Those found opening are in it: `open` counts them there, once.)
        s.objects_unrecoverable = r.unrecoverable.load(Ordering::Relaxed);
        s.parity_columns_recomputed = opened.columns;
        s.scrubs = self.inner.scrubs.load(Ordering::Relaxed);
        s.scrubs_unclean = self.inner.scrubs_unclean.load(Ordering::Relaxed);
        s.scrubs_failed = self.inner.scrubs_failed.load(Ordering::Relaxed);
        if let Some(ctx) = self.inner.eng.fault_ctx() {
            s.media_errors_repaired = ctx.repaired.load(Ordering::Relaxed);
            s.media_errors_lost = ctx.lost.load(Ordering::Relaxed);
        }
        s
    }

    /// A summary of the pool.
    pub fn info(&self) -> PoolInfo {
        let eng = &self.inner.eng;
        let header = self.inner.header.lock().clone();
        PoolInfo {
            path: eng.media.path(),
            size: header.pool_size(),
            header,
            heap_capacity: eng.heap.capacity_bytes(),
            free: eng.heap.free_bytes(),
            flush: eng.media.mode_name(),
            read_only: eng.media.is_private(),
        }
    }

    /// The flush mode in use (`None` for crash-simulated media, and for a pool opened with
    /// [`Pool::open_read_only`], which flushes nothing).
    pub fn flush_mode(&self) -> Option<FlushMode> {
        match self.inner.eng.media.mode_name() {
            "sim" => None,
            n => n.parse().ok(),
        }
    }

    /// The type registry: every type the pool has stored, with the layout fingerprint and
    /// name it was first stored with (`pgl info` prints it). Not inside a transaction.
    pub fn types(&self) -> Result<Vec<TypeInfo>> {
        if tx::in_tx(&self.inner.eng) {
            return Err(Error::InTransaction {
                what: "pool.types",
                instead: "call it outside transactions",
            });
        }
        tx::list_types(&self.inner.eng).map_err(|e| self.inner.eng.named(e))
    }

    /// Damages the pool on purpose (see [`Fault`](crate::Fault)), to test that a program
    /// survives what pgl is built to survive: the bytes are changed behind pgl's back and
    /// made durable, and nothing is told. Waits (up to 10 s) until no transaction is in
    /// flight and no `Ref` is held; fails with `Error::Conflict` if one stays open that
    /// long, with `Error::InTransaction` inside a transaction, with
    /// `Error::HeldByThisThread` if this thread holds a `Ref` or a `Detached` of the pool,
    /// and with `Error::InvalidFault` for a fault that does not fit the pool.
    ///
    /// ```
    /// # use pgl_runtime::{Config, Fault, Pool};
    /// # let dir = std::env::temp_dir().join(format!("pgl-doc-inject-{}", std::process::id()));
    /// # let _ = std::fs::remove_file(&dir);
    /// let pool = Pool::create(&dir, &Config::new("doc"))?;
    /// let oid = pool.tx(|tx| tx.alloc(42u64))?;
    /// // Three random bytes over the object's payload (its header is the first 16 bytes).
    /// pool.inject(&Fault::ObjectScribble { oid: oid.raw(), at: 16, len: 3, seed: 7 })?;
    /// // The transaction finds the damage, parity rebuilds the object, the closure re-runs.
    /// assert_eq!(pool.tx(|tx| Ok(*tx.open(oid)?))?, 42);
    /// assert_eq!(pool.stats().objects_repaired, 1);
    /// # drop(pool); std::fs::remove_file(&dir).unwrap();
    /// # Ok::<(), pgl_runtime::Error>(())
    /// ```
    pub fn inject(&self, fault: &crate::Fault) -> Result<()> {
        self.refuse_read_only("pool.inject")?;
        let eng = &self.inner.eng;
        if tx::in_tx(eng) {
            return Err(Error::InTransaction {
                what: "pool.inject",
                instead: "inject faults between transactions",
            });
        }
        eng.refuse_held_here("pool.inject")
            .map_err(|e| eng.named(e))?;
        match *fault {
            crate::Fault::MediaError { offset } => return self.inject_media_error(offset),
            crate::Fault::LostPage { offset, .. } => self.refuse_unnoticed_loss(fault, offset)?,
            _ => {}
        }
        let target = || {
            fault.target(&eng.media.path(), &eng.geo, eng.media.len(), |oid| {
                let p = eng.heap.locate(oid)?;
                Ok((p.hdr, HEADER_SIZE + p.capacity))
            })
        };
        // Checked first, so that a bad fault is reported without freezing the pool; then
        // found again with the pool frozen, where no commit can free or move the object.
        let first = target().map_err(|e| eng.named(e))?;
        eng.exclusive(|| {
            let target = target()?;
            let mut old = vec![0u8; target.len as usize];
            // SAFETY: the range lies in the pool (checked by `target`); we hold every lock
            // and lane, so nothing else reads or writes it.
            unsafe { eng.media.read(target.offset, &mut old) };
            let new = target.damage(&old);
            // SAFETY: as above.
            unsafe { eng.media.write(target.offset, &new) };
            eng.media.flush(target.offset, target.len);
            eng.media.fence();
            eng.media.check()
        })
        .unwrap_or(Err(Error::Conflict {
            offset: first.offset,
        }))
        .map_err(|e| eng.named(e))
    }

    /// `Error::InvalidFault` for `fault`, a media error at `offset`, unless its page lies in
    /// the zones' rows (data or parity), where parity can rebuild it.
    fn refuse_outside_rows(&self, fault: &crate::Fault, offset: u64) -> Result<()> {
        let eng = &self.inner.eng;
        let page = offset / PAGE * PAGE;
        if page
            .checked_add(PAGE)
            .is_none_or(|end| end > eng.media.len())
            || (eng.map.parity_of(page).is_none()
                && crate::integrity::parity_column_of(&eng.geo, page).is_none())
        {
            return Err(eng.named(
                fault.refused(
                    &eng.media.path(),
                    "a media error can be injected only into the zones' rows (data rows, \
                     where objects and allocator metadata live, and parity rows; `pgl info \
                     --objects` lists objects' offsets)"
                        .into(),
                ),
            ));
        }
        Ok(())
    }

    /// `Error::InvalidFault` for `fault`, a page lost while the pool was closed, unless a
    /// check would find the loss: its page must lie in the zones' rows, and hold neither
    /// a plain run bitmap's words nor, in a pool without checksums, objects. Nothing marks
    /// such a page lost, so the next session would take its random bytes as data: live
    /// blocks freed, objects read wrong, with nothing reported. (A real media error
    /// faults on the next load instead: `Fault::MediaError`.)
    fn refuse_unnoticed_loss(&self, fault: &crate::Fault, offset: u64) -> Result<()> {
        self.refuse_outside_rows(fault, offset)?;
        let eng = &self.inner.eng;
        let page = offset / PAGE * PAGE;
        let unnoticed = if eng.heap.holds_plain_bitmap(page) {
            "the page holds words of a plain (unchecked) allocation bitmap"
        } else if !eng.checksums && eng.map.parity_of(page).is_some() {
            "the pool keeps no object checksums"
        } else {
            return Ok(());
        };
        Err(eng.named(fault.refused(
            &eng.media.path(),
            format!(
                "{unnoticed}, so nothing would find the page's bytes damaged until a parity \
                 check (live blocks may be allocated again, objects read wrong, meanwhile); \
                 inject Fault::MediaError from a program instead: the page is rebuilt from \
                 parity on its next load"
            ),
        )))
    }

    fn inject_media_error(&self, offset: u64) -> Result<()> {
        let eng = &self.inner.eng;
        let page = offset / PAGE * PAGE;
        self.refuse_outside_rows(&crate::Fault::MediaError { offset }, offset)?;
        if let Some(size) = crate::integrity::handler::unsupported_page_size() {
            return Err(Error::FaultInjection {
                path: eng.media.path(),
                offset,
                reason: format!(
                    "this system's pages are {size} bytes, but pgl emulates (and repairs) \
                     media errors in {PAGE}-byte pages only; test media errors on a system \
                     with {PAGE}-byte pages"
                ),
                source: None,
            });
        }
        let Some(ctx) = eng.fault_ctx() else {
            return Err(Error::config(
                "the media-error handler could not take this pool (too many pools open at \
                 once): close some pools first",
            ));
        };
        match eng.exclusive(|| {
            // SAFETY: a page of the zones' rows (checked above), held exclusively.
            unsafe { ctx.destroy(page) }
        }) {
            Some(Ok(true)) => eng.media.check(),
            Some(Err(e)) => Err(Error::FaultInjection {
                path: eng.media.path(),
                offset,
                reason: format!(
                    "the page at {page:#x} could not be made unreadable (mprotect(PROT_NONE) \
                     failed: {e}); {}",
                    match e.raw_os_error() {
                        Some(libc::ENOMEM) =>
                            "each protected page costs the kernel a mapping \
                             (vm.max_map_count): let the program read the lost pages, or \
                             close other pools, then retry",
                        _ => "retry, or test media errors on another system",
                    }
                ),
                source: Some(e),
            }),
            Some(Ok(false)) => Err(Error::config(format!(
                "too many emulated media errors outstanding (at most {}); let the program \
                 read the lost pages first",
                crate::integrity::handler::POISON_MAX
            ))),
            None => Err(Error::Conflict { offset: page }),
        }
    }

    /// The parity pages that disagree with their zone's rows (pool offsets): empty when
    /// every zone's parity is consistent. `Error::InvalidConfig` if the pool does not keep
    /// parity. Each zone is compared with the pool briefly frozen (transactions wait), so
    /// it may run beside them; not inside one (`Error::InTransaction`), nor while this
    /// thread holds a `Ref` or a `Detached` (`Error::HeldByThisThread`).
    pub fn verify_parity(&self) -> Result<Vec<u64>> {
        let eng = &self.inner.eng;
        if tx::in_tx(eng) {
            return Err(Error::InTransaction {
                what: "pool.verify_parity",
                instead: "call it outside transactions",
            });
        }
        eng.refuse_held_here("pool.verify_parity")
            .map_err(|e| eng.named(e))?;
        if !eng.parity.enabled() {
            return Err(Error::config(
                "this pool does not keep parity (it was opened with Config::parity(false)); \
                 open it with parity on, which recomputes it",
            ));
        }
        let zones = self.inner.header.lock().zones;
        let mut bad = Vec::new();
        for z in 0..zones {
            // Each zone with the pool briefly frozen: a commit's rows and parity are never
            // read half updated (nor raced with its atomic parity updates).
            let found = eng.exclusive(|| {
                debug_assert!(
                    eng.parity.quiet(),
                    "no commit runs, yet a stripe counts new objects in flight"
                );
                let data = eng.zone_extents(z);
                // SAFETY: zone `z` lies in the pool; reads only, with no commit running.
                unsafe { crate::integrity::verify_zone(&eng.media, &eng.geo, z, &data) }
            });
            let Some(found) = found else {
                return Err(Error::Conflict {
                    offset: eng.geo.zone_offset(z),
                });
            };
            bad.extend(found);
        }
        Ok(bad)
    }

    /// Every allocated object, as read from the persistent heap metadata:
    /// `(payload offset, header)`. Reads each metadata word and header under its lock, so it
    /// may run beside transactions (it then sees some state between them); it must not run
    /// inside one. A damaged allocation-bitmap word is rebuilt from parity on the way (as
    /// any access repairs what it finds), or reported as `Error::BitmapMismatch`.
    pub fn objects(&self) -> Result<Vec<(u64, ObjectHeader)>> {
        let eng = &self.inner.eng;
        let l = self.list_objects(true).map_err(|e| eng.named(e))?;
        match l.words.first() {
            Some(&(off, word)) => Err(eng.named(crate::heap::bitmap_mismatch(off, word))),
            None => Ok(l.objects),
        }
    }

    /// `objects`, for tools that report damage rather than stop at it: the objects the
    /// heap metadata can list, and the allocation-bitmap words that do not verify and
    /// were not rebuilt from parity (it could not, or the pool could not be frozen for it
    /// while a long transaction ran: a later call tries again). The blocks under those
    /// words are left out: which of them hold objects is unknown.
    pub fn objects_with_damage(&self) -> Result<ObjectListing> {
        self.list_objects(true).map_err(|e| self.inner.eng.named(e))
    }

    /// The objects `objects` lists, and the checked bitmap words that do not verify: the
    /// blocks of those are left out. With `repair`, each such word is first rebuilt from
    /// parity where it can be (the words returned are the ones that could not).
    fn list_objects(&self, repair: bool) -> Result<ObjectListing> {
        let eng = &self.inner.eng;
        if tx::in_tx(eng) {
            return Err(Error::InTransaction {
                what: "pool.objects",
                instead: "call it outside transactions",
            });
        }
        let read_word = |off| {
            eng.meta.with_word(off, || {
                // SAFETY: a heap metadata word inside the pool, read under its metadata
                // lock, which every commit that changes it holds.
                unsafe { eng.media.read_u64(off) }
            })
        };
        let mut hdrs = Vec::new();
        let walk = |hdrs: &mut Vec<u64>| {
            hdrs.clear();
            crate::heap::walk_blocks(
                &eng.geo,
                eng.heap.classes(),
                0..eng.heap.zone_count(),
                read_word,
                |hdr, _| hdrs.push(hdr),
                |_, _| {},
            )
        };
        // A bitmap word that does not verify hides which of its blocks are objects: it is
        // rebuilt from parity and the walk taken again, or it is returned.
        let mut damaged = walk(&mut hdrs);
        if !damaged.is_empty() && repair {
            let mut rebuilt = false;
            for &(off, _) in &damaged {
                rebuilt |= eng.repair_bitmap_word(off) == Some(true);
            }
            if rebuilt {
                damaged = walk(&mut hdrs);
            }
        }
        let mut out = Vec::with_capacity(hdrs.len());
        for hdr in hdrs {
            let payload = hdr + HEADER_SIZE;
            let stripe = tx::read_lock(eng, payload)?;
            let mut h = [0u8; 16];
            // SAFETY: an allocated block's header inside the pool, under the object's read
            // lock (commits that change it hold the write lock).
            unsafe { eng.media.read(hdr, &mut h) };
            eng.objects.release(stripe, crate::tx::Held::Read);
            out.push((payload, ObjectHeader::from_bytes(&h)));
        }
        Ok(ObjectListing {
            objects: out,
            words: damaged,
        })
    }

    /// The header and bytes of the object at payload offset `offset`, whatever its type.
    /// Like `get`, it fails with `Error::LockedByThisThread` if this thread's transaction or
    /// `Detached` holds the object, and inside a transaction with `Error::Conflict` if
    /// another one does.
    pub fn read_object(&self, offset: u64) -> Result<(ObjectHeader, Vec<u8>)> {
        let eng = &self.inner.eng;
        // Locked before it is located: only the lock keeps the object, and so its run's
        // layout, from changing between the two.
        let stripe = tx::read_lock(eng, offset).map_err(|e| eng.named(e))?;
        let place = match eng.heap.locate(offset) {
            Ok(p) => p,
            Err(e) => {
                eng.objects.release(stripe, crate::tx::Held::Read);
                return Err(eng.named(e));
            }
        };
        let mut h = [0u8; 16];
        // SAFETY: a located object, under its read lock.
        unsafe { eng.media.read(offset - HEADER_SIZE, &mut h) };
        let h = ObjectHeader::from_bytes(&h);
        let n = h.size.min(place.capacity) as usize;
        let mut data = vec![0u8; n];
        // SAFETY: as above; n is bounded by the block's capacity.
        unsafe { eng.media.read(offset, &mut data) };
        eng.objects.release(stripe, crate::tx::Held::Read);
        Ok((h, data))
    }

    /// Verifies the checksum of every allocated object; returns the problems found, each as
    /// `(offset, error)`. Each object is verified under its read lock; not inside a
    /// transaction. An allocation-bitmap word that does not verify and was not rebuilt
    /// from parity (as in `objects_with_damage`) is one of the problems
    /// (`Error::BitmapMismatch` at the word): the objects it covers cannot be told apart
    /// from free blocks and are not verified.
    /// `Error::InvalidConfig` if the pool does not keep checksums (`Config::checksums`).
    pub fn verify_objects(&self, progress: impl FnMut(u64, u64)) -> Result<Vec<(u64, Error)>> {
        let eng = &self.inner.eng;
        let (mut bad, damaged) = self
            .verify_listed(true, progress)
            .map_err(|e| eng.named(e))?;
        let words = damaged
            .into_iter()
            .map(|(off, word)| (off, crate::heap::bitmap_mismatch(off, word)));
        bad.splice(0..0, words);
        Ok(bad
            .into_iter()
            .map(|(off, e)| (off, eng.named(e)))
            .collect())
    }

    /// Verifies the objects `list_objects(repair)` lists; the problems found, and the
    /// bitmap words (offset, value) whose blocks were left out.
    pub(super) fn verify_listed(
        &self,
        repair: bool,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<(Problems, Vec<(u64, u64)>)> {
        if !self.inner.eng.checksums {
            return Err(Error::config(
                "this pool does not keep object checksums (it was opened with \
                 Config::checksums false): nothing can be verified; open it with checksums \
                 on, which recomputes them",
            ));
        }
        let ObjectListing {
            objects: objs,
            words: damaged,
            ..
        } = self.list_objects(repair)?;
        let total = objs.len() as u64;
        let mut bad = Vec::new();
        for (i, (off, h)) in objs.into_iter().enumerate() {
            let eng = &self.inner.eng;
            // Locked before it is located: only the lock keeps the object, and so its
            // run's layout, from changing between the two.
            let stripe = tx::read_lock(eng, off)?;
            let r = self.verify_locked(off, &h);
            eng.objects.release(stripe, crate::tx::Held::Read);
            if let Err(e) = r {
                bad.push((off, e));
            }
            progress(i as u64 + 1, total);
        }
        Ok((bad, damaged))
    }
}

impl Pool {
    /// Verifies the object at `off`, listed with header `h`, under its read lock (held by
    /// the caller).
    pub(super) fn verify_locked(&self, off: u64, h: &ObjectHeader) -> Result<()> {
        let eng = &self.inner.eng;
        let cap = match eng.heap.locate(off) {
            Ok(place) => place.capacity,
            // Listed, but no object starts there any more under its lock: freed (its
            // block bit cleared, or its chunk released) since the walk, not damaged.
            Err(Error::InvalidOid { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut now = [0u8; 16];
        // SAFETY: the object's header, under its read lock.
        unsafe { eng.media.read(off - HEADER_SIZE, &mut now) };
        // Freed or reallocated since the walk: nothing to report about it.
        if ObjectHeader::from_bytes(&now) != *h {
            return Ok(());
        }
        tx::verify_block(eng, off, h, cap)
    }
}

/// Problems a verification found: `(offset, error)`.
type Problems = Vec<(u64, Error)>;

/// What [`Pool::objects_with_damage`] finds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObjectListing {
    /// Every object the heap metadata lists: `(payload offset, header)`.
    pub objects: Vec<(u64, ObjectHeader)>,
    /// The damaged words, with the values read.
    words: Vec<(u64, u64)>,
}

impl ObjectListing {
    /// Allocation-bitmap words that do not verify and were not rebuilt (see
    /// [`Pool::objects_with_damage`]); the blocks they cover are not listed (which of them
    /// hold objects is unknown).
    pub fn damaged_words(&self) -> Vec<u64> {
        self.words.iter().map(|&(off, _)| off).collect()
    }
}

/// A single object opened for an atomic update outside a closure (`pool.open_mut`).
/// Derefs to the object (`DerefMut` marks it all modified; `write_at`/`write_bytes` mark
/// only what they change); `.commit()` makes the changes durable.
pub struct Detached<'p, T: Persistent> {
    handle: Option<Mut<'p, T>>,
    tx: std::ptr::NonNull<Tx<'p>>,
}

impl<'p, T: Persistent> Detached<'p, T> {
    /// Commits the changes atomically.
    pub fn commit(mut self) -> Result<()> {
        drop(self.handle.take());
        // SAFETY: the Tx is alive until Drop; no handle is alive any more.
        let tx = unsafe { self.tx.as_ref() };
        tx.commit().map_err(|e| tx.eng.named(e))
    }
}

impl<'p, T: Persistent> Detached<'p, T> {
    // The handle is never lent out as `&mut Mut`: swapping two detached handles' `Mut`s
    // would let one outlive the transaction that owns its buffer.
    fn handle(&self) -> &Mut<'p, T> {
        self.handle.as_ref().expect("handle present until commit")
    }
    fn handle_mut(&mut self) -> &mut Mut<'p, T> {
        self.handle.as_mut().expect("handle present until commit")
    }

    /// The object's oid.
    pub fn oid(&self) -> Oid<T> {
        self.handle().oid()
    }

    /// The place of the whole object (see [`Mut::place`]).
    pub fn place(&mut self) -> crate::Place<'_, T> {
        self.handle_mut().place()
    }

    /// Writes `value` at byte `offset` of the object (see [`Mut::write_at`]).
    pub fn write_at<F: Persistent>(&mut self, offset: usize, value: &F) {
        self.handle_mut().write_at(offset, value)
    }

    /// Writes `bytes` at byte `offset` of the object (see [`Mut::write_bytes`]).
    pub fn write_bytes(&mut self, offset: usize, bytes: &[u8]) {
        self.handle_mut().write_bytes(offset, bytes)
    }

    /// The object's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.handle().as_bytes()
    }
}

impl<T: Persistent> crate::AsPlace<T> for Detached<'_, T> {
    fn place(&mut self) -> crate::Place<'_, T> {
        Detached::place(self)
    }
}

impl<T: Persistent> std::ops::Deref for Detached<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.handle()
    }
}

impl<T: Persistent> std::ops::DerefMut for Detached<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.handle_mut()
    }
}

impl<T: Persistent> Drop for Detached<'_, T> {
    fn drop(&mut self) {
        drop(self.handle.take());
        // SAFETY: leaked in `open_mut`, freed only below.
        tx::leave_detached(unsafe { self.tx.as_ref() });
        // SAFETY: leaked in `open_mut`, freed exactly once here after the handle is gone;
        // dropping the Tx aborts it unless it committed.
        drop(unsafe { Box::from_raw(self.tx.as_ptr()) });
    }
}

#[cfg(test)]
impl Pool {
    /// The engine: for unit tests of the layers below, which look at their volatile state.
    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.eng
    }
}

#[cfg(test)]
mod walk_race {
    use crate::heap::layout::*;
    use crate::{Config, Oid, Pool};

    /// A walk reads a chunk-table entry, then the run's bitmap words, each under its own
    /// metadata lock; a commit may reclaim an empty run's chunk for a large object in
    /// between, so the walk takes the object's bytes for damaged bitmap words. The repair
    /// must see that they are no bitmap words any more (not report damage on a healthy
    /// pool), and `pool.objects` must succeed. (The transaction runs inside the read
    /// callback, where the walk holds no lock: the interleaving, made deterministic.)
    #[test]
    fn a_walk_that_races_a_reclaimed_run_reports_no_damage() {
        let path = crate::scratch_pool("walk-race");
        let pool = Pool::create(&path, &Config::small("race")).unwrap();
        let objs: Vec<Oid<[u64; 8]>> = (0..10u64)
            .map(|i| pool.tx(|tx| tx.alloc([i; 8])).unwrap())
            .collect();
        drop(pool);
        // Reopened, the run is no lane's: freeing everything makes its chunk reclaimable.
        let pool = Pool::open(&path, "race").unwrap();
        for o in &objs {
            pool.tx(|tx| tx.free(*o)).unwrap();
        }
        let eng = &pool.inner.eng;
        let geo = eng.geo;
        let pos = geo.locate(objs[0].raw(), 1).unwrap();
        let entry_at = geo.chunk_offset(pos.zone, 0) + CHUNK_TABLE_OFFSET + 8 * pos.chunk;
        let fired = std::cell::Cell::new(false);
        let damaged = crate::heap::walk(
            &geo,
            eng.heap.classes(),
            0..eng.heap.zone_count(),
            |off| {
                // SAFETY: a heap metadata word inside the pool, under its metadata lock.
                let v = eng
                    .meta
                    .with_word(off, || unsafe { eng.media.read_u64(off) });
                if off == entry_at && !fired.replace(true) {
                    let big = pool.tx(|tx| tx.alloc([0x5555u64; 4096])).unwrap();
                    assert_eq!(geo.locate(big.raw(), 1).unwrap().chunk, pos.chunk);
                }
                v
            },
            |_, _| {},
        );
        assert!(fired.get());
        assert!(
            !damaged.is_empty(),
            "the race took object bytes for bitmap words"
        );
        for &off in &damaged {
            assert_eq!(
                eng.repair_bitmap_word(off),
                Some(true),
                "{off:#x} reported as damage"
            );
        }
        assert_eq!(pool.stats().bitmap_repairs, 0);
        pool.objects().unwrap();
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }
}
