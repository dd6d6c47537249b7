//! `Media`: one pool's bytes — a file mapping or a [`CrashSim`] — and the flush and fence
//! operations that make stores durable.
//!
//! The mapping reserves `reserve` bytes of address space once; the file may be shorter and
//! grows under it, so the base address never moves and no pointer into the pool is ever
//! invalidated by `grow`.
//!
//! Invariant: every persistent store pgl makes is followed by `flush` of its bytes and a
//! `fence` before anything that depends on it being durable.

use super::extents::DataExtents;
use super::flush::{flush_lines, sfence, stream_copy, FlushMode};
use super::new_file::NewFile;
use super::sim::CrashSim;
use crate::{Error, Result};
use memmap2::{MmapMut, MmapOptions, MmapRaw};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

/// Copies at least this long use streaming stores in `write_durable`. Measured here (fig3,
/// 1 thread): for new objects streaming helps little below 2 KiB; for ranges whose lines
/// are cached (applying an update) it is 1.5x slower, so `apply` never streams. Redo
/// records stream from a shorter length (`Media::write_durable_from`, see `commit.rs`).
pub(crate) const STREAM_MIN: usize = 2048;

enum Backing {
    File {
        file: File,
        path: PathBuf,
        _map: Mapping,
    },
    Sim(SimLease),
}

/// A [`CrashSim`] leased by one `Media` (see [`CrashSim::lease`]), given back on drop.
struct SimLease(Arc<CrashSim>);

impl std::ops::Deref for SimLease {
    type Target = CrashSim;
    fn deref(&self) -> &CrashSim {
        &self.0
    }
}

impl Drop for SimLease {
    fn drop(&mut self) {
        self.0.end_lease();
    }
}

/// A file's mapping: memmap2's, one made with `MAP_SYNC`, which memmap2 cannot make, or
/// a private (copy-on-write) one of a file opened read-only, whose stores never reach the
/// file (`Media::open_private`).
enum Mapping {
    Plain(MmapRaw),
    Sync(SyncMap),
    Private {
        /// Held for its `Drop` (the unmap).
        _map: MmapMut,
        /// Its first byte, taken from `&mut` when it was made.
        ptr: *mut u8,
    },
}

impl Mapping {
    fn as_mut_ptr(&self) -> *mut u8 {
        match self {
            Mapping::Plain(m) => m.as_mut_ptr(),
            Mapping::Sync(m) => m.ptr,
            Mapping::Private { ptr, .. } => *ptr,
        }
    }
}

/// A shared mapping made with `MAP_SYNC` (on a DAX file system): a write fault makes the
/// file's metadata for the page (its block allocation, an unwritten extent converted)
/// durable before the store can land, so cache-line write-backs alone make stores
/// durable. Without it, data written into a block the file system allocated on that fault
/// could be lost with the allocation at a power failure. Unmapped on drop.
struct SyncMap {
    ptr: *mut u8,
    len: usize,
}

impl SyncMap {
    /// Maps `len` bytes of `file` shared, read-write, with `MAP_SYNC`; the OS error if
    /// the system refuses.
    fn new(file: &File, len: usize) -> std::io::Result<SyncMap> {
        use std::os::fd::AsRawFd;
        // SAFETY: a new mapping at an address the kernel picks, of a descriptor `file`
        // owns; no Rust reference to the mapped bytes exists yet, and `SyncMap` unmaps it
        // exactly once.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SyncMap { ptr: p.cast(), len })
    }
}

impl Drop for SyncMap {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made, unmapped once; the `Media` that held it is gone,
        // and with it every pointer into the pool.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// What a file opened with [`Media::open_file`] is meant to be, for its errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileKind {
    /// A pool (`Pool::open`).
    Pool,
    /// A log (`Log::open`, `Inspection::open`).
    Log,
}

impl FileKind {
    /// The `op` of an `Error::Io` from opening it (its advice depends on it).
    fn open_op(self) -> &'static str {
        match self {
            FileKind::Pool => "open",
            FileKind::Log => "open log",
        }
    }

    /// The error for `path` when it names something other than a regular file.
    fn not_regular(self, path: &Path) -> Error {
        let reason = "not a regular file".to_owned();
        let path = path.to_owned();
        match self {
            FileKind::Pool => Error::NotAPool { path, reason },
            FileKind::Log => Error::NotALog { path, reason },
        }
    }
}

/// The bytes of one pool and how to make them durable.
pub struct Media {
    base: *mut u8,
    len: AtomicU64,
    reserve: u64,
    mode: FlushMode,
    backing: Backing,
    /// The OS error of the first failed write-back (0: none). Once set, nothing written
    /// since the last good fence is known durable, and commits are refused (see `check`).
    failed: AtomicI32,
    /// For a private mapping (`open_private`): the ranges flushed so far, which hold bytes
    /// of this process where the file may have holes (see `data_extents`). `None` for
    /// every other media.
    written: Option<parking_lot::Mutex<Vec<(u64, u64)>>>,
}

// SAFETY: `base` points into a mapping (or CrashSim allocation) owned by `backing`, which
// lives as long as `self`. Media itself hands out raw pointers only; the layers above
// synchronise access to the bytes (object locks, lane ownership), as with any shared mapping.
unsafe impl Send for Media {}
// SAFETY: as above.
unsafe impl Sync for Media {}

impl std::fmt::Debug for Media {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Media")
            .field("len", &self.len())
            .field("mode", &self.mode_name())
            .finish()
    }
}

/// Maps `file` with `reserve` bytes of address space; where the system refuses that much
/// (a `ulimit -v`, valgrind), retries with less, down to `min` bytes. With `sync` (a file
/// system that takes `MAP_SYNC`) the mapping is a `SyncMap` if the system makes one.
/// Returns the mapping and the reserve obtained.
fn map(file: &File, path: &Path, reserve: u64, min: u64, sync: bool) -> Result<(Mapping, u64)> {
    let mut want = reserve.max(min);
    let mut sync = sync;
    loop {
        let len = usize::try_from(want).map_err(|_| Error::config("max_size overflows usize"))?;
        if sync {
            match SyncMap::new(file, len) {
                Ok(m) => return Ok((Mapping::Sync(m), want)),
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) && want > min => {
                    want = (want / 4).max(min).div_ceil(4096) * 4096;
                    continue;
                }
                // Refused for another reason: a plain mapping (the caller then flushes
                // with msync).
                Err(_) => sync = false,
            }
        }
        match MmapOptions::new().len(len).map_raw(file) {
            Ok(m) => return Ok((Mapping::Plain(m), want)),
            Err(e) if want > min => {
                let _ = e;
                want = (want / 4).max(min).div_ceil(4096) * 4096;
            }
            Err(e) => return Err(Error::io("map", path, e)),
        }
    }
}

/// Gives `file` real blocks for its bytes `from..to` (`Config::preallocate`), as PMDK does
/// when it creates a pool. A full file system then fails here with `ENOSPC`, as a typed
/// error, instead of raising `SIGBUS` at some later store into a hole of the mapping, in
/// the middle of a commit. A file system (or sandbox) without `fallocate` (`EOPNOTSUPP`,
/// `ENOSYS`) keeps the sparse file: Linux's `fallocate(2)` is used rather than `posix_fallocate(3)`, whose
/// fallback writes every block.
fn allocate(file: &File, path: &Path, from: u64, to: u64) -> Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(off), Ok(len)) = (
            libc::off_t::try_from(from),
            libc::off_t::try_from(to.saturating_sub(from)),
        ) else {
            return Err(Error::config(format!(
                "a pool of {to} bytes is beyond this system's file offsets"
            )));
        };
        if len == 0 {
            return Ok(());
        }
        loop {
            // SAFETY: fallocate takes a file descriptor and two integers and touches no
            // memory of ours; the descriptor is open for writing and owned by `file`, which
            // outlives the call.
            let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, off, len) };
            if rc == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EOPNOTSUPP | libc::ENOSYS) => return Ok(()),
                _ => return Err(Error::io("allocate space for", path, e)),
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, path, from, to);
        Ok(())
    }
}

/// Whether `file` has blocks for all of its length (not sparse).
fn fully_allocated(file: &File) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        file.metadata()
            .is_ok_and(|m| m.blocks().saturating_mul(512) >= m.len())
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        false
    }
}

impl Media {
    /// Creates a new file of `len` bytes for `path`, sparse or with its blocks allocated
    /// (see [`allocate`]), and maps it; with it, the [`NewFile`] to publish at `path` once
    /// formatted, or to remove if writing the pool or log into it fails (lock the media
    /// first: see `NewFile`). Until published the file lies under a temporary name beside
    /// `path`; errors name `path`.
    pub(crate) fn create_file(
        path: &Path,
        len: u64,
        reserve: u64,
        mode: Option<FlushMode>,
        preallocate: bool,
    ) -> Result<(Media, NewFile)> {
        // Refused at once if the path is taken (publishing refuses it again, atomically).
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(Error::AlreadyExists {
                path: path.to_owned(),
                directory: path.is_dir(),
            });
        }
        // What creates of this path killed before publishing left: not for ever.
        super::new_file::remove_stale_temps(path);
        let temp = super::new_file::temp_path(path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| Error::io("create", path, e))?;
        let new_file = NewFile::new(&file, &temp, path);
        let made = (|| {
            file.set_len(len).map_err(|e| Error::io("size", path, e))?;
            if preallocate {
                allocate(&file, path, 0, len)?;
            }
            map(
                &file,
                path,
                reserve,
                len,
                super::flush::fs::supports_map_sync(&file),
            )
        })();
        let (map, reserve) = match made {
            Ok(m) => m,
            Err(e) => {
                let _ = new_file.remove();
                return Err(e);
            }
        };
        Ok((Self::of_file(file, path, map, reserve, len, mode), new_file))
    }

    /// Media over `file`, mapped as `map` (`reserve` bytes of address space), holding
    /// `len` bytes; flushed as `mode` says if this CPU has it, else as suits the file
    /// (`usable`, `mode_for`).
    fn of_file(
        file: File,
        path: &Path,
        map: Mapping,
        reserve: u64,
        len: u64,
        mode: Option<FlushMode>,
    ) -> Media {
        let mode = Self::usable(mode).unwrap_or_else(|| Self::mode_for(&file, &map));
        Media {
            base: map.as_mut_ptr(),
            len: AtomicU64::new(len),
            reserve,
            mode,
            backing: Backing::File {
                file,
                path: path.to_owned(),
                _map: map,
            },
            failed: AtomicI32::new(0),
            written: None,
        }
    }

    /// `mode` if this CPU has it, else none (the file's own is chosen): a mode asked for
    /// by `Config::flush`, `LogConfig::flush` or `Log::open_with` reaches the flush
    /// instructions only through here, and an instruction the CPU lacks would kill the
    /// process (or, on another architecture, flush nothing).
    fn usable(mode: Option<FlushMode>) -> Option<FlushMode> {
        mode.filter(|m| m.supported())
    }

    /// The flush mode for `file` mapped as `map` ([`FlushMode::for_file`]), but `msync`
    /// where the file system takes `MAP_SYNC` and `map` was made without it: cache-line
    /// write-backs would not make the file's block allocations durable.
    fn mode_for(file: &File, map: &Mapping) -> FlushMode {
        if matches!(map, Mapping::Plain(_)) && super::flush::fs::supports_map_sync(file) {
            FlushMode::Msync
        } else {
            FlushMode::for_file(file)
        }
    }

    /// Opens and maps an existing file, the `kind` of file a caller expects there (its
    /// errors name it); its current length is `len()`.
    pub(crate) fn open_file(
        path: &Path,
        kind: FileKind,
        reserve: u64,
        mode: Option<FlushMode>,
    ) -> Result<Media> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io(kind.open_op(), path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat", path, e))?
            .len();
        if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
            return Err(kind.not_regular(path));
        }
        let min = len.div_ceil(4096) * 4096;
        let sync = super::flush::fs::supports_map_sync(&file);
        let (map, reserve) = map(&file, path, reserve, min, sync)?;
        Ok(Self::of_file(file, path, map, reserve, len, mode))
    }

    /// Opens the existing file at `path` read-only and maps it privately (copy-on-write,
    /// `MAP_PRIVATE`), for a read-only open of a pool: every store pgl makes (crash
    /// recovery, repairs) lands in this process's copy of the page and never reaches the
    /// file, whatever the code above does; flushes and fences do nothing but remember
    /// what was written (see `data_extents`). The file cannot grow (`grow` fails), and is
    /// locked shared (`lock_shared`), not exclusive. Its errors name the file as a `kind`.
    pub(crate) fn open_private(path: &Path, kind: FileKind) -> Result<Media> {
        // Non-blocking: opened for reading only, a FIFO would wait for a writer for ever
        // before the check below could refuse it. (On a regular file the flag changes
        // nothing: its reads never block, and the pool is read through the mapping.)
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| Error::io("open read-only", path, e))?;
        let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
        if meta.is_dir() {
            // Opened for reading, a directory opens: say what a writable open would.
            let e = std::io::Error::from_raw_os_error(libc::EISDIR);
            return Err(Error::io("open read-only", path, e));
        }
        if !meta.is_file() {
            return Err(kind.not_regular(path));
        }
        let len = meta.len();
        let reserve = len.div_ceil(4096).max(1) * 4096;
        let map_len =
            usize::try_from(reserve).map_err(|_| Error::config("the file overflows usize"))?;
        // SAFETY: a private mapping: no store through it reaches the file, so nothing this
        // process does changes the file under another mapping of it. Another process may
        // still change the file (the shared lock the caller takes keeps pgl writers from
        // it); the bytes are only ever accessed through raw pointers, as for every other
        // mapping of a pool, never as Rust references that assume them unchanging.
        // `no_reserve_swap`: a copy-on-write mapping of a large sparse pool would
        // otherwise charge its whole length against the commit limit.
        let mut map = unsafe {
            MmapOptions::new()
                .len(map_len)
                .no_reserve_swap()
                .map_copy(&file)
        }
        .map_err(|e| Error::io("map", path, e))?;
        let ptr = map.as_mut_ptr();
        Ok(Media {
            base: ptr,
            len: AtomicU64::new(len),
            reserve,
            mode: FlushMode::None,
            backing: Backing::File {
                file,
                path: path.to_owned(),
                _map: Mapping::Private { _map: map, ptr },
            },
            failed: AtomicI32::new(0),
            written: Some(parking_lot::Mutex::new(Vec::new())),
        })
    }

    /// Whether this media is a private mapping of a file opened read-only
    /// (`open_private`): nothing written to it reaches the file.
    pub(crate) fn is_private(&self) -> bool {
        self.written.is_some()
    }

    /// Takes a shared lock (`flock`) on the file for as long as this `Media` lives: any
    /// number of read-only opens (`open_private`) hold it together, and none while a
    /// `Pool` (or `Log`) that may write the file holds its exclusive lock, nor the other
    /// way round. A read-only open must not run beside a writer: its mapping, private as
    /// it is, shows the writer's stores in the pages it has not written itself, so it
    /// would read commits half made, take the pool for crashed and report damage that is
    /// not there. `AlreadyOpen` (after `LOCK_GRACE`) says what to do (`instead`). As for
    /// `lock_exclusive`, a file system without locks leaves the file unlocked, and
    /// simulated media is not locked.
    pub(crate) fn lock_shared(&self, what: &'static str, instead: &'static str) -> Result<()> {
        let Backing::File { file, path, .. } = &self.backing else {
            return Ok(());
        };
        let deadline = std::time::Instant::now() + LOCK_GRACE;
        loop {
            if lock_file(file, false) {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(Error::AlreadyOpen {
                    path: path.clone(),
                    what,
                    instead,
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Takes an exclusive lock (`flock`) on the file for as long as this `Media` lives, so
    /// that no other `Pool` (or `Log`: `what` names the kind) maps it meanwhile: not one
    /// in another process (`pgl check` on a pool a program has open would take it for
    /// crashed, replay its lanes and recompute its parity under the program's commits; a
    /// second `Log::open` would start a new epoch and cut records under the first one's
    /// appends), nor a second one in this process (its own locks and lanes would let two
    /// commits race on the same bytes). A lock belongs to one open of the file, so two
    /// handles of one process conflict too; `AlreadyOpen` says what to do (`instead`).
    /// A file system without locks (`ENOLCK`, `EOPNOTSUPP`) leaves the file unlocked.
    /// Simulated media is not locked.
    ///
    /// A lock held by someone else is waited for up to `LOCK_GRACE` before it is reported:
    /// a child process another thread of this program is starting holds a copy of every
    /// descriptor from its fork until its exec closes them (they are close-on-exec), so a
    /// pool or log this process closed a moment ago can still look open.
    pub(crate) fn lock_exclusive(&self, what: &'static str, instead: &'static str) -> Result<()> {
        let Backing::File { file, path, .. } = &self.backing else {
            return Ok(());
        };
        if try_lock_file(file) {
            return Ok(());
        }
        let deadline = std::time::Instant::now() + LOCK_GRACE;
        while std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
            if try_lock_file(file) {
                return Ok(());
            }
        }
        Err(Error::AlreadyOpen {
            path: path.clone(),
            what,
            instead,
        })
    }

    /// Media over a crash-simulation device, which it holds (as `lock_exclusive` holds a
    /// file) until dropped: `AlreadyOpen`, naming the `what` and what to do (`instead`),
    /// while another `Media` holds it. Taken before anything is read or written, so that
    /// two pools or logs created on one device at once never format it both.
    pub(crate) fn sim(
        sim: Arc<CrashSim>,
        what: &'static str,
        instead: &'static str,
    ) -> Result<Media> {
        if !sim.lease() {
            return Err(Error::AlreadyOpen {
                path: PathBuf::from("<crash-sim>"),
                what,
                instead,
            });
        }
        let sim = SimLease(sim);
        if sim.len() > sim.capacity() {
            // `CrashSim` keeps its length within its allocation; every read below trusts it.
            return Err(Error::config(format!(
                "the CrashSim device says it holds {} bytes but has room for {}",
                sim.len(),
                sim.capacity()
            )));
        }
        Ok(Media {
            base: sim.base(),
            len: AtomicU64::new(sim.len()),
            reserve: sim.capacity(),
            mode: FlushMode::None,
            backing: Backing::Sim(sim),
            failed: AtomicI32::new(0),
            written: None,
        })
    }

    /// Media over a new crash-simulation device, leased as `sim` leases it:
    /// `AlreadyExists` if the device holds anything, checked again once it is held (a pool
    /// or log created on it at the same time made it non-empty first, or finds it so).
    pub(crate) fn sim_new(
        sim: Arc<CrashSim>,
        what: &'static str,
        instead: &'static str,
    ) -> Result<Media> {
        let exists = || Error::AlreadyExists {
            directory: false,
            path: PathBuf::from("<crash-sim>"),
        };
        if !sim.is_empty() {
            return Err(exists());
        }
        let media = Media::sim(sim.clone(), what, instead)?;
        if !sim.is_empty() {
            return Err(exists());
        }
        Ok(media)
    }

    /// Current length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// The data extents of `[from, to)` now (see [`DataExtents`]): a pass that would read
    /// every page of the range skips the holes, which read as zeros (a load from one would
    /// allocate it on tmpfs). Simulated media is all data.
    pub(crate) fn data_extents(&self, from: u64, to: u64) -> DataExtents {
        match &self.backing {
            Backing::File { file, .. } => {
                let mut data = DataExtents::of_file(file, from, to);
                // A private mapping holds what was written to it where the file may have
                // holes (a replayed record's bytes, a rebuilt page): data too.
                if let Some(written) = &self.written {
                    let written = written.lock();
                    let inside = written
                        .iter()
                        .filter(|&&(s, e)| s < to && e > from)
                        .map(|&(s, e)| (s.max(from), e.min(to)));
                    data.add_all(inside);
                }
                data
            }
            Backing::Sim(_) => DataExtents::everything(),
        }
    }

    /// Bytes of address space reserved (the largest the pool can grow to).
    pub(crate) fn reserve(&self) -> u64 {
        self.reserve
    }

    /// The file path, for messages (`<crash-sim>` for simulated media).
    pub(crate) fn path(&self) -> PathBuf {
        match &self.backing {
            Backing::File { path, .. } => path.clone(),
            Backing::Sim(_) => PathBuf::from("<crash-sim>"),
        }
    }

    /// The flush mode's name (`sim` for simulated media).
    pub(crate) fn mode_name(&self) -> &'static str {
        match self.backing {
            Backing::Sim(_) => "sim",
            Backing::File { .. } if self.is_private() => "read-only",
            Backing::File { .. } => self.mode.name(),
        }
    }

    /// Grows the pool to `new_len` bytes.
    pub(crate) fn grow(&self, new_len: u64) -> Result<()> {
        self.grow_from(self.len(), new_len)
    }

    /// Grows the pool, whose content ends at `end`, to `new_len` bytes of which those past
    /// `end` are zeros: a file longer than `end` (a grow whose header never became durable
    /// leaves one, and opening accepts it) is first cut back to `end`, so that no byte it
    /// held past the pool is taken for part of a new zone.
    pub(crate) fn grow_from(&self, end: u64, new_len: u64) -> Result<()> {
        if self.is_private() {
            return Err(Error::ReadOnly {
                path: self.path(),
                what: "growing it",
            });
        }
        if new_len > self.reserve {
            return Err(Error::config(format!(
                "cannot grow to {new_len} bytes: the mapping reserves {} bytes (raise Config::max_size)",
                self.reserve
            )));
        }
        match &self.backing {
            Backing::File { file, path, .. } => {
                // A preallocated file stays so (whoever created it; a sparse file has
                // fewer blocks than its length, a preallocated one at least as many).
                let preallocated = fully_allocated(file);
                // The injected fault hits where a full file system fails: the new length
                // of a sparse file, the new blocks of a preallocated one.
                let no_space = || std::io::Error::from_raw_os_error(libc::ENOSPC);
                let extended = if crate::fault::fail_grow_extend() && !preallocated {
                    Err(no_space())
                } else {
                    // Nothing maps the bytes past `end` into the pool: no load or store
                    // meets the pages the cut takes away before they are back (zeros).
                    file.set_len(end).and_then(|()| file.set_len(new_len))
                };
                extended.map_err(|e| Error::io("grow", path, e))?;
                if preallocated {
                    let allocated = if crate::fault::fail_grow_extend() {
                        Err(Error::io("allocate space for", path, no_space()))
                    } else {
                        allocate(file, path, end, new_len)
                    };
                    if let Err(e) = allocated {
                        // Nothing refers to the new bytes yet: give them back.
                        let _ = file.set_len(end);
                        return Err(e);
                    }
                }
                // The new size must be durable before a header can say the zones exist.
                if self.mode != FlushMode::None {
                    let synced = if crate::fault::fail_grow_fsync() {
                        Err(std::io::Error::from_raw_os_error(libc::EIO))
                    } else {
                        file.sync_all()
                    };
                    if let Err(e) = synced {
                        // fsync reports, once to this open file, a failed write-back of
                        // any of its pages since the last report: perhaps of a commit's,
                        // whose own msync then sees nothing. As after a failed msync,
                        // nothing written is known durable: commits are refused (`check`).
                        self.record_failure(e.raw_os_error());
                        return Err(Error::io("fsync", path, e));
                    }
                }
            }
            Backing::Sim(sim) => sim.cut_and_set_len(end, new_len),
        }
        self.len.store(new_len, Ordering::Release);
        Ok(())
    }

    /// A pointer to pool offset `off`.
    #[inline(always)]
    pub(crate) fn ptr(&self, off: u64) -> *mut u8 {
        debug_assert!(off <= self.reserve);
        // SAFETY: `off` is within the reserved mapping (callers check offsets against the
        // pool length before using them), so the result stays in the same allocation.
        unsafe { self.base.add(off as usize) }
    }

    /// The `len` bytes of the pool at `off`, in place.
    ///
    /// # Safety
    /// They lie inside the pool, and nothing writes them while the slice lives (the caller
    /// holds their object's lock, or reserved its block).
    #[inline(always)]
    pub(crate) unsafe fn bytes(&self, off: u64, len: usize) -> &[u8] {
        // SAFETY: the caller's contract; `ptr` is the mapping's address of `off`.
        unsafe { std::slice::from_raw_parts(self.ptr(off) as *const u8, len) }
    }

    /// Asks the CPU to bring `[off, off + len)` into its cache without waiting (a hint for
    /// bytes about to be read; nothing happens to ranges outside the pool).
    #[inline]
    pub(crate) fn prefetch(&self, off: u64, len: u64) {
        if off.saturating_add(len) <= self.len() {
            super::flush::prefetch_lines(self.ptr(off), len as usize);
        }
    }

    /// Writes back `[off, off + len)` towards media (durable after the next `fence`).
    #[inline]
    pub(crate) fn flush(&self, off: u64, len: u64) {
        match &self.backing {
            Backing::Sim(sim) => sim.flush(off, len),
            Backing::File { .. } => match self.mode {
                FlushMode::Clwb | FlushMode::Clflushopt | FlushMode::Clflush => {
                    // SAFETY: `[off, off + len)` lies in the mapping (see `ptr`).
                    unsafe { flush_lines(self.mode, self.ptr(off), len as usize) }
                }
                FlushMode::Msync => {
                    if len == 0 {
                        return;
                    }
                    // msync takes whole system pages (16 or 64 KiB on some systems).
                    let page = system_page();
                    let start = off / page * page;
                    let end = (off + len).div_ceil(page) * page;
                    // SAFETY: the page range lies in our mapping; msync does not touch memory
                    // contents.
                    let rc = unsafe {
                        libc::msync(
                            self.ptr(start) as *mut libc::c_void,
                            (end - start) as usize,
                            libc::MS_SYNC,
                        )
                    };
                    let rc = if crate::fault::fail_msync() { -1 } else { rc };
                    if rc != 0 {
                        // The data may not be durable. Remember it: the commit that issued
                        // this flush, and every later one, fails (`check`).
                        self.record_failure(std::io::Error::last_os_error().raw_os_error());
                    }
                }
                FlushMode::None => {
                    if let Some(written) = &self.written {
                        record_written(&mut written.lock(), off, len);
                    }
                }
            },
        }
    }

    /// `flush` then `fence` of `[off, off + len)`, for the media-error handler: it runs in
    /// the middle of whatever load faulted, so on simulated media it takes no lock that
    /// load's frame may hold and runs no fence hook (see `CrashSim::persist_from_handler`).
    pub(crate) fn persist_from_handler(&self, off: u64, len: u64) {
        match &self.backing {
            Backing::Sim(sim) => sim.persist_from_handler(off, len),
            // A private mapping (a read-only pool): nothing reaches the file, and recording
            // the range (`flush`) would lock and allocate in a signal handler, which must do
            // neither (`integrity::handler`). Nor is it needed: a page that faulted on media
            // is not a hole of the file, which is all the recording is for.
            Backing::File { .. } if self.is_private() => {}
            Backing::File { .. } => {
                self.flush(off, len);
                self.fence();
            }
        }
    }

    /// Records a failed write-back (OS error `code`, `EIO` if none): from now on `check`
    /// fails. The first failure is kept.
    fn record_failure(&self, code: Option<i32>) {
        let code = code.filter(|&c| c != 0).unwrap_or(libc::EIO);
        let _ = self
            .failed
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
    }

    /// `Err` once a write-back has failed: what was written since may not be durable, so
    /// the pool takes no more commits; reopening it runs recovery, which replays every
    /// record that reached media.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        match self.failed.load(Ordering::Acquire) {
            0 => Ok(()),
            code => Err(self.failed_write_back(code)),
        }
    }

    /// The error `check` reports after write-back failure `code` (out of line: a commit
    /// checks several times, and nearly always passes).
    #[cold]
    #[inline(never)]
    fn failed_write_back(&self, code: i32) -> Error {
        Error::io(
            "write-back failed earlier, so the pool refuses further commits (reopen it: \
             recovery replays what reached media); the failed write-back",
            self.path(),
            std::io::Error::from_raw_os_error(code),
        )
    }

    /// An ordering point: every earlier flush of this thread is durable before any later store.
    #[inline]
    pub(crate) fn fence(&self) {
        match &self.backing {
            Backing::Sim(sim) => sim.fence(),
            Backing::File { .. } => {
                if self.mode != FlushMode::Msync && self.mode != FlushMode::None {
                    sfence();
                }
            }
        }
    }

    /// Copies `dst.len()` bytes at `off` into `dst`.
    ///
    /// # Safety
    /// `[off, off + dst.len())` must be inside the pool, and no other thread may be writing it.
    #[inline]
    pub(crate) unsafe fn read(&self, off: u64, dst: &mut [u8]) {
        // SAFETY: the caller guarantees bounds and the absence of concurrent writers.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(off), dst.as_mut_ptr(), dst.len()) }
    }

    /// Stores `src` at `off` (not yet durable: flush and fence).
    ///
    /// # Safety
    /// `[off, off + src.len())` must be inside the pool, and the caller must own those bytes
    /// (no other thread reads or writes them meanwhile).
    #[inline]
    pub(crate) unsafe fn write(&self, off: u64, src: &[u8]) {
        // SAFETY: the caller guarantees bounds and exclusive ownership of the range.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr(off), src.len()) }
    }

    /// Stores `len` zero bytes at `off` (not yet durable: flush and fence).
    ///
    /// # Safety
    /// As for [`Media::write`], for `[off, off + len)`.
    #[inline]
    pub(crate) unsafe fn write_zeros(&self, off: u64, len: u64) {
        // SAFETY: the caller guarantees bounds and exclusive ownership of the range.
        unsafe { std::ptr::write_bytes(self.ptr(off), 0, len as usize) }
    }

    /// Stores `src` at `off` so that it is durable after the next `fence`: with streaming
    /// (non-temporal) stores for copies of at least `STREAM_MIN` bytes on cache-flush
    /// back-ends (no flush needed, and the lines do not linger in the cache), else a plain
    /// copy followed by `flush`.
    ///
    /// # Safety
    /// As for [`Media::write`].
    #[inline]
    pub(crate) unsafe fn write_durable(&self, off: u64, src: &[u8]) {
        // SAFETY: the caller's contract.
        unsafe { self.write_durable_from(off, src, STREAM_MIN) }
    }

    /// [`Media::write_durable`], but the write-back of bytes it stores through the cache is
    /// left to the caller: `owe(off, len)` is called for them (streamed bytes need none).
    /// For writers of several pieces that share lines, which can then write each line
    /// back once.
    ///
    /// # Safety
    /// As for [`Media::write`].
    #[inline]
    pub(crate) unsafe fn write_durable_owing(
        &self,
        off: u64,
        src: &[u8],
        owe: impl FnMut(u64, u64),
    ) {
        // SAFETY: the caller's contract.
        unsafe { self.write_durable_with(off, src, STREAM_MIN, owe) }
    }

    /// [`Media::write_durable`] streaming at any length: for bytes nothing will read back
    /// soon, into lines probably not cached (streaming skips reading them in first). Pieces
    /// of 16-byte granules that `src` only partly covers are stored and flushed instead.
    ///
    /// # Safety
    /// As for [`Media::write`].
    #[inline]
    pub(crate) unsafe fn write_streamed(&self, off: u64, src: &[u8]) {
        // SAFETY: the caller's contract.
        unsafe { self.write_durable_from(off, src, 0) }
    }

    /// `write_durable`, streaming copies of at least `min` bytes.
    ///
    /// # Safety
    /// As for [`Media::write`].
    #[inline]
    pub(crate) unsafe fn write_durable_from(&self, off: u64, src: &[u8], min: usize) {
        // SAFETY: the caller's contract.
        unsafe { self.write_durable_with(off, src, min, |a, n| self.flush(a, n)) }
    }

    /// The one mechanism of the `write_durable*` family: streams copies of at least `min`
    /// bytes on back-ends flushed by instructions (the partial granules are stored and
    /// flushed), else stores `src` through the cache and calls `owe(off, len)` for its
    /// write-back.
    ///
    /// # Safety
    /// As for [`Media::write`].
    #[inline]
    unsafe fn write_durable_with(
        &self,
        off: u64,
        src: &[u8],
        min: usize,
        mut owe: impl FnMut(u64, u64),
    ) {
        let streams = matches!(self.backing, Backing::File { .. })
            && matches!(
                self.mode,
                FlushMode::Clwb | FlushMode::Clflushopt | FlushMode::Clflush
            );
        if streams && src.len() >= min {
            // SAFETY: bounds and ownership are the caller's contract.
            let parts = unsafe { stream_copy(self.ptr(off), src) };
            for (p, n) in parts {
                // SAFETY: the partial pieces lie inside the range just written.
                unsafe { flush_lines(self.mode, p, n) };
            }
        } else {
            // SAFETY: as above.
            unsafe { self.write(off, src) };
            owe(off, src.len() as u64);
        }
    }

    /// Reads the little-endian u64 at `off`.
    ///
    /// # Safety
    /// As for [`Media::read`]; `off` must be 8-byte aligned.
    #[inline]
    pub(crate) unsafe fn read_u64(&self, off: u64) -> u64 {
        // SAFETY: aligned, in bounds, no concurrent writer (caller's contract).
        u64::from_le(unsafe { (self.ptr(off) as *const u64).read() })
    }
}

/// How long opening a file waits for a lock someone else holds before it reports
/// `AlreadyOpen` (see `Media::lock_exclusive`): longer than a child process takes from its
/// fork to its exec, short beside anything a second open of a file in use would do.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// Adds `[off, off + len)` to the ranges a private mapping was written at, merged into
/// the last one when it touches it (stores come in runs: a record replayed, a zone's
/// parity recomputed page after page).
fn record_written(ranges: &mut Vec<(u64, u64)>, off: u64, len: u64) {
    if len == 0 {
        return;
    }
    let end = off.saturating_add(len);
    match ranges.last_mut() {
        Some(last) if off <= last.1 && end >= last.0 => {
            last.0 = last.0.min(off);
            last.1 = last.1.max(end);
        }
        _ => ranges.push((off, end)),
    }
}

/// Takes `file`'s exclusive `flock` without waiting, for as long as the descriptor stays
/// open; false if another open of the file holds it. A file system without locks
/// (`ENOLCK`, `EOPNOTSUPP`) leaves the file unlocked and counts as taken.
pub(crate) fn try_lock_file(file: &File) -> bool {
    lock_file(file, true)
}

/// Takes `file`'s `flock`, exclusive or shared, without waiting, as `try_lock_file` says.
fn lock_file(file: &File, exclusive: bool) -> bool {
    #[cfg(unix)]
    loop {
        use std::os::fd::AsRawFd;
        let how = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        // SAFETY: flock takes a descriptor and flags and touches no memory of ours; the
        // descriptor is owned by `file`, which outlives the call. The lock goes with the
        // descriptor: it is released when `file` is closed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) };
        if rc == 0 {
            return true;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return false,
            _ => return true,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, exclusive);
        true
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Bytes the file system has given `path` (not its length: a sparse file has fewer).
    fn allocated(path: &Path) -> u64 {
        std::fs::metadata(path).expect("stat").blocks() * 512
    }

    #[test]
    fn a_new_file_and_its_growth_own_their_blocks() {
        let path = crate::scratch_pool("media-allocate");
        let (media, mut made) =
            Media::create_file(&path, 1 << 20, 4 << 20, Some(FlushMode::None), true)
                .expect("create");
        made.publish().expect("publish");
        assert!(
            allocated(&path) >= 1 << 20,
            "created sparse: {} bytes allocated",
            allocated(&path)
        );
        media.grow(3 << 20).expect("grow");
        assert!(
            allocated(&path) >= 3 << 20,
            "grew sparse: {} bytes allocated",
            allocated(&path)
        );
        drop(media);
        std::fs::remove_file(&path).expect("remove");
    }

    #[test]
    fn a_sparse_file_grows_sparse() {
        let path = crate::scratch_pool("media-sparse");
        let (media, mut made) =
            Media::create_file(&path, 1 << 20, 4 << 20, Some(FlushMode::None), false)
                .expect("create");
        made.publish().expect("publish");
        media.grow(3 << 20).expect("grow");
        assert!(
            allocated(&path) < 1 << 20,
            "{} bytes allocated to an untouched sparse file",
            allocated(&path)
        );
        drop(media);
        std::fs::remove_file(&path).expect("remove");
    }

    #[test]
    fn a_private_mapping_never_writes_the_file_and_counts_what_it_wrote_as_data() {
        // Not on tmpfs, where a store to a private mapping's hole allocates the file's page
        // (zeros) before copying it: there the file itself would count it as data.
        let path = std::env::temp_dir().join(format!("pgl-media-private-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let (media, mut made) =
            Media::create_file(&path, 1 << 20, 4 << 20, Some(FlushMode::None), false)
                .expect("create");
        made.publish().expect("publish");
        // SAFETY: the first page of the 1 MiB pool, which nothing else uses.
        unsafe { media.write(0, &[1; 4096]) };
        media.flush(0, 4096);
        drop(media);
        let before = std::fs::read(&path).expect("read");

        let media = Media::open_private(&path, FileKind::Pool).expect("open");
        assert!(media.is_private());
        media.lock_shared("pool", "").expect("shared");
        let other = Media::open_private(&path, FileKind::Pool).expect("open again");
        other.lock_shared("pool", "").expect("shared locks share");
        // A page that is a hole of the file, written privately: data from now on.
        let hole = 64 * 4096;
        assert!(!media.data_extents(0, 1 << 20).has_data(hole, 4096));
        // SAFETY: a page inside the mapping, which nothing else uses.
        unsafe { media.write(hole + 8, &[2; 100]) };
        media.flush(hole + 8, 100);
        media.fence();
        assert!(media.data_extents(0, 1 << 20).has_data(hole, 4096));
        // The media-error handler's write-back records nothing (no lock, no allocation in
        // a signal handler): the list of written ranges keeps its length.
        let written = |m: &Media| m.written.as_ref().map(|w| w.lock().len());
        let ranges = written(&media);
        media.persist_from_handler(32 * 4096, 4096);
        assert_eq!(written(&media), ranges);
        // SAFETY: as above.
        assert_eq!(unsafe { media.read_u64(hole + 8) }, 0x0202_0202_0202_0202);
        assert!(matches!(media.grow(2 << 20), Err(Error::ReadOnly { .. })));
        drop((media, other));
        assert!(
            std::fs::read(&path).expect("read") == before,
            "the file changed"
        );
        std::fs::remove_file(&path).expect("remove");
    }

    #[test]
    fn a_file_system_without_map_sync_gets_a_plain_mapping_that_works() {
        // tmpfs (or the temp directory's file system) refuses MAP_SYNC: asking for it
        // falls back to a plain mapping, and the mode is the file system's.
        let path = crate::scratch_pool("media-sync");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("create");
        file.set_len(1 << 16).expect("size");
        assert!(SyncMap::new(&file, 1 << 16).is_err());
        let (m, reserve) = map(&file, &path, 1 << 20, 1 << 16, true).expect("map");
        assert!(matches!(m, Mapping::Plain(_)));
        assert_eq!(reserve, 1 << 20);
        // SAFETY: the first byte of the 64 KiB file, mapped by `m`, which nothing else uses.
        unsafe {
            m.as_mut_ptr().write(7);
            assert_eq!(m.as_mut_ptr().read(), 7);
        }
        assert_eq!(Media::mode_for(&file, &m), FlushMode::for_file(&file));
        drop(m);
        std::fs::remove_file(&path).expect("remove");
    }
}

/// The system's page size (4 KiB if the system does not say), asked once.
fn system_page() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(size)
            .ok()
            .filter(|s| s.is_power_of_two())
            .unwrap_or(4096)
    })
}
