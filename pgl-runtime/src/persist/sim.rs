//! `CrashSim`: a media back-end for crash testing.
//!
//! It keeps two images of the pool: the *volatile* one that the program loads and stores
//! (what the CPU caches hold), and the *persisted* one (what media holds). A flush marks
//! lines; a fence copies the marked lines from the volatile into the persisted image. A crash
//! at any moment leaves the persisted image plus ANY subset of the 8-byte words that differ
//! between the two images — flushed or not, since a cache may evict a dirty line at any time.
//! [`CrashPoint`] captures exactly that set, and can build every such image.
//!
//! Invariant: the persisted image only ever changes at a fence, and only by lines that the
//! fencing thread flushed since its previous fence.
//!
//! The device's memory is mapped twice: the *pool view* that a `Pool` or `Log` loads and
//! stores, whose pages an emulated media error makes unreadable (`mprotect`), and a
//! *shadow* view of the same memory that is never protected, through which the device
//! itself reads (fences, crash points, images). Its reads therefore never fault: a fault
//! taken under the persisted image's lock would have the media-error handler repair the
//! page there, and the repair may wait for a commit's pending new objects, which that
//! commit releases only after its next fence, which waits for the lock (or, in a fence
//! hook, is the very fence the hook runs in). A lost page reads as the bytes it holds,
//! which its repair would rewrite unchanged.
//!
//! Concurrency: a crash point, and a fence copying its lines, read words that other threads
//! may be storing to at that moment, as a real crash interrupts them. The reads are
//! volatile, aligned and word-sized, so on the x86-64 machines pgl targets each returns the
//! old or the new value, which the crash model allows either way. The Rust memory model
//! still calls a non-atomic read beside a concurrent non-atomic store a data race, and Miri
//! reports it when several threads share one `CrashSim` (`.ci/miri` leaves this module
//! out). Tests that drive a `CrashSim` from one thread have no such race. Making it
//! race-free would take atomic stores for every write the pool makes on this back-end.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

type Hook = Box<dyn FnMut(&CrashSim) + Send>;

/// What to do instead of opening a device that a `Pool` or `Log` has open (the `instead` of
/// its `Error::AlreadyOpen`): a crash test that reopens it means to simulate a crash.
pub(crate) const SIM_ALREADY_OPEN: &str =
    "drop the one that has it open first; to test recovery from a crash, open a crash image \
     instead (a device of its own: `sim.crash_point().device(0, pick)`), or, to simulate \
     the death of the process that has it open, `std::mem::forget` that one and call \
     `CrashSim::end_lease_of_leaked`";

/// A simulated persistent-memory device for crash tests: of your own structures as of
/// pgl's (the book's chapter "Testing your own code against crashes" shows the whole loop).
///
/// It keeps two images of a pool: the *volatile* one that the program loads and stores
/// (what the CPU caches hold), and the *persisted* one (what media holds). A flush marks
/// cache lines; a fence copies the lines its thread flushed into the persisted image. A
/// crash may leave the persisted image plus ANY subset of the 8-byte words that differ
/// from the volatile one, flushed or not, since a cache may evict a dirty line at any time.
///
/// - [`Pool::create_sim`](crate::Pool::create_sim) creates a pool on an empty device,
///   [`Pool::open_sim`](crate::Pool::open_sim) opens (and recovers) the pool a device
///   holds; one `Pool` (or `Log`) has a device open at a time.
/// - [`crash_point`](Self::crash_point) captures the crash state of an instant; called from
///   a [fence hook](Self::set_fence_hook), before every fence, it covers every state a
///   crash can leave (plus one point after the operation under test returns).
/// - [`CrashPoint::device`] builds one crash image as a fresh device, to open as after a
///   reboot.
///
/// Every crash point copies the device, and every image is a device of its own: use a
/// small pool (`Config::small`).
pub struct CrashSim {
    /// The pool view (see the module docs).
    mem: *mut u64,
    /// The shadow view of the same memory, never protected: every read of the device's own.
    shadow: *mut u64,
    cap: usize,
    len: AtomicU64,
    /// The persisted image, as long as the device's length rounded up to a page (see
    /// `persisted_words`): a device's capacity may be far more than its pool ever uses.
    persisted: Mutex<Vec<u64>>,
    /// Lines flushed and not yet fenced, with the thread that flushed each.
    pending: Mutex<Vec<(std::thread::ThreadId, u32)>>,
    hook: Mutex<Option<Hook>>,
    /// Bumped, under `hook`'s lock, by every `set_fence_hook` and `clear_fence_hook`: a
    /// fence puts back the hook it took out to run only if neither came meanwhile.
    hook_gen: AtomicU64,
    in_hook: AtomicBool,
    fences: AtomicU64,
    /// Whether a `Pool` or `Log` has the device open (see `lease`).
    leased: AtomicBool,
}

// SAFETY: `mem` and `shadow` are two mappings of private memory owned by this value; all
// access to them goes through raw pointers whose synchronisation is the pool's job, exactly
// as for a shared file mapping. The other fields are Sync.
unsafe impl Send for CrashSim {}
// SAFETY: as above.
unsafe impl Sync for CrashSim {}

impl std::fmt::Debug for CrashSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashSim")
            .field("capacity", &self.cap)
            .field("len", &self.len())
            .field("fences", &self.fences())
            .finish()
    }
}

/// Words of the persisted image of a device of length `len` and capacity `cap`: whole
/// pages (whole lines, which fences copy), never past the capacity.
fn persisted_words(len: u64, cap: usize) -> usize {
    len.checked_next_multiple_of(4096)
        .and_then(|bytes| usize::try_from(bytes / 8).ok())
        .map_or(cap / 8, |w| w.min(cap / 8))
}

/// Memory of `cap` bytes (a multiple of the page size), zeros, to be mapped twice.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn backing(cap: usize) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: a NUL-terminated name; memfd_create has no other preconditions.
    let fd = unsafe { libc::memfd_create(c"pgl-crash-sim".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened, owned by nothing else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.set_len(cap as u64)?;
    Ok(file)
}

/// Memory of `cap` bytes, zeros, to be mapped twice: an unlinked temporary file.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn backing(cap: usize) -> std::io::Result<std::fs::File> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "pgl-crash-sim-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    file.set_len(cap as u64)?;
    Ok(file)
}

/// A shared read-write mapping of the first `cap` bytes of `file`.
fn map(file: &std::fs::File, cap: usize) -> std::io::Result<*mut u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: a new mapping chosen by the kernel, of a file at least `cap` bytes long;
    // it aliases nothing Rust owns.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            cap,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    match p {
        libc::MAP_FAILED => Err(std::io::Error::last_os_error()),
        p => Ok(p as *mut u64),
    }
}

/// The pool view and the shadow view of `cap` new bytes of zeros (see the module docs).
fn map_twice(cap: usize) -> std::io::Result<(*mut u64, *mut u64)> {
    let file = backing(cap)?;
    let mem = map(&file, cap)?;
    match map(&file, cap) {
        Ok(shadow) => Ok((mem, shadow)),
        Err(e) => {
            // SAFETY: the mapping just made, used by nothing.
            unsafe { libc::munmap(mem as *mut libc::c_void, cap) };
            Err(e)
        }
    }
}

/// The views of a dropped device, kept for the next device of the same capacity: a crash
/// test makes a device for every crash image, and new mappings of new memory cost a page
/// fault for every page the pool touches (measured: a crash suite 57 % slower, most of it
/// system time, than when the memory was reused). `dirty` bytes from the start may be
/// non-zero (the device's persisted image never grew past them); the rest are zeros.
struct Spare {
    cap: usize,
    mem: usize,
    shadow: usize,
    dirty: usize,
}

/// Devices' views kept for reuse (see `Spare`); a few, so that a test holding several
/// devices at once still finds one.
static SPARES: std::sync::Mutex<Vec<Spare>> = std::sync::Mutex::new(Vec::new());
const SPARES_MAX: usize = 4;

/// The two views of `cap` bytes (see the module docs), and how many bytes from their start
/// may be non-zero: a spare's, else new ones (all zeros).
fn views(cap: usize) -> std::io::Result<(*mut u64, *mut u64, usize)> {
    let spare = {
        let mut spares = SPARES.lock().unwrap_or_else(|e| e.into_inner());
        let i = spares.iter().position(|s| s.cap == cap);
        i.map(|i| spares.swap_remove(i))
    };
    match spare {
        Some(s) => Ok((s.mem as *mut u64, s.shadow as *mut u64, s.dirty)),
        None => map_twice(cap).map(|(mem, shadow)| (mem, shadow, 0)),
    }
}

impl CrashSim {
    /// A zeroed device that can hold up to `capacity` bytes (rounded up to a page): at least
    /// the pool's `Config::size`, or its `Config::max_size` if the test grows it. The
    /// capacity costs address space only: memory goes to the bytes the pool on it uses. Its
    /// current length starts at 0 and is set by the pool that is created on it.
    ///
    /// # Panics
    /// As [`from_image`](Self::from_image).
    pub fn new(capacity: u64) -> Arc<CrashSim> {
        CrashSim::from_image(&[], 0, capacity)
    }

    /// A device whose volatile and persisted images both equal `image` (a crash image, as
    /// after a reboot), with capacity `capacity` (at least the image's length, and `len`).
    ///
    /// # Panics
    /// If that capacity, rounded up to a page, does not fit the address space (as
    /// `Vec::with_capacity` panics), or the memory cannot be allocated or mapped.
    pub fn from_image(image: &[u64], len: u64, capacity: u64) -> Arc<CrashSim> {
        // A pool reads all `len` bytes of its device: they must all be allocated (past the
        // image they are zeros, as in a file extended by a hole). Checked: a capacity that
        // wrapped would leave `len` pointing past the allocation.
        let cap = (image.len() as u64)
            .checked_mul(8)
            .map(|bytes| capacity.max(bytes).max(len))
            .and_then(|c| c.checked_next_multiple_of(4096))
            .and_then(|c| usize::try_from(c).ok())
            .filter(|&c| c <= isize::MAX as usize)
            .map(|c| c.max(4096))
            .unwrap_or_else(|| {
                panic!(
                    "CrashSim: a device of {len} bytes (capacity {capacity}) does not fit the \
                     address space"
                )
            });
        let words = cap / 8;
        let n = image.len().min(words);
        let (mem, shadow, dirty) = views(cap)
            .unwrap_or_else(|e| panic!("CrashSim: cannot map a device of {cap} bytes twice: {e}"));
        // SAFETY: the mapping holds `words >= n` words, zeros past its first `dirty` bytes
        // (`dirty <= cap`); the image fills the first n, and the words after it up to
        // `dirty` are zeroed: the device starts as the image and zeros.
        unsafe {
            std::ptr::copy_nonoverlapping(image.as_ptr(), shadow, n);
            let dirty_words = dirty / 8;
            if dirty_words > n {
                std::ptr::write_bytes(shadow.add(n), 0, dirty_words - n);
            }
        }
        let mut persisted = image[..n].to_vec();
        persisted.resize(persisted_words(len, cap).max(n), 0);
        Arc::new(CrashSim {
            mem,
            shadow,
            cap,
            len: AtomicU64::new(len),
            persisted: Mutex::new(persisted),
            pending: Mutex::new(Vec::new()),
            hook: Mutex::new(None),
            hook_gen: AtomicU64::new(0),
            in_hook: AtomicBool::new(false),
            fences: AtomicU64::new(0),
            leased: AtomicBool::new(false),
        })
    }

    /// Bytes the device can hold.
    pub fn capacity(&self) -> u64 {
        self.cap as u64
    }

    /// The current length (the "file size").
    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// Whether the length is zero (nothing created on it yet).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sets the length (at most the capacity), the persisted image growing with it.
    pub(crate) fn set_len(&self, len: u64) {
        let words = persisted_words(len, self.cap);
        let mut persisted = self.persisted.lock();
        if persisted.len() < words {
            persisted.resize(words, 0);
        }
        self.len.store(len, Ordering::Release);
    }

    /// Cuts the device back to `end` bytes (the words past it, up to its length, become
    /// zeros in both images, as a truncated file's bytes do), then sets its length to
    /// `len`. The caller owns the bytes past `end`: nothing loads or stores them meanwhile.
    pub(crate) fn cut_and_set_len(&self, end: u64, len: u64) {
        let (from, to) = (end.div_ceil(8) as usize, (self.len() as usize).div_ceil(8));
        if from < to {
            let mut persisted = self.persisted.lock();
            persisted[from..to].fill(0);
            // SAFETY: `to <= cap / 8` (the length never passes the capacity), so the
            // words `from..to` lie inside the mapping; the caller owns them.
            unsafe { std::ptr::write_bytes(self.shadow.add(from), 0, to - from) };
        }
        self.set_len(len);
    }

    /// Takes the device for one open `Pool` or `Log` until `end_lease`; false if one has
    /// it already. It is a file's `flock`: two over the same bytes would each trust their
    /// own locks and lanes, and one's commit could rewrite bytes the other lends out.
    pub(crate) fn lease(&self) -> bool {
        !self.leased.swap(true, Ordering::AcqRel)
    }

    /// Gives the device back (the `Pool` or `Log` that leased it is gone).
    pub(crate) fn end_lease(&self) {
        self.leased.store(false, Ordering::Release);
    }

    /// Simulates the death of the process that had the device open: takes back the lease
    /// of a `Pool` or `Log` the test leaked (`mem::forget`: no `Drop`, nothing flushed), so
    /// that the device can be opened again with the caches (the volatile image) as that
    /// process left them.
    ///
    /// # Safety
    /// The leaked `Pool` or `Log`, and every clone of it and every handle from it, is never
    /// used again: a second one over the same bytes would trust its own locks and lanes,
    /// and its commits could rewrite bytes the other lends out.
    pub unsafe fn end_lease_of_leaked(&self) {
        self.end_lease();
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.mem as *mut u8
    }

    /// Fences executed so far.
    pub fn fences(&self) -> u64 {
        self.fences.load(Ordering::Relaxed)
    }

    /// Installs a hook called at every fence, before the fence takes effect: the moment a
    /// crash test captures a [`CrashPoint`]. The hook must not run pool operations, nor
    /// panic: the panic would unwind out of the commit that fenced, midway, leaving the
    /// pool's object, metadata and parity locks held (later operations on it wait forever).
    ///
    /// The hook may replace or clear itself (a one-shot hook); one fence at a time runs
    /// it: a fence of another thread meanwhile goes on without it (and so without a crash
    /// point), so drive the operation under test from one thread.
    pub fn set_fence_hook(&self, hook: impl FnMut(&CrashSim) + Send + 'static) {
        self.replace_hook(Some(Box::new(hook)));
    }

    /// Removes the fence hook.
    pub fn clear_fence_hook(&self) {
        self.replace_hook(None);
    }

    fn replace_hook(&self, hook: Option<Hook>) {
        let mut slot = self.hook.lock();
        *slot = hook;
        self.hook_gen.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn flush(&self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let first = off / 64;
        let last = (off + len - 1) / 64;
        let me = std::thread::current().id();
        let mut p = self.pending.lock();
        for line in first..=last {
            p.push((me, line as u32));
        }
    }

    /// The lines written back and not yet fenced, in the order their write-backs were
    /// issued (a line issued twice is listed twice), of every thread.
    #[cfg(test)]
    pub(crate) fn pending_lines(&self) -> Vec<u32> {
        self.pending.lock().iter().map(|&(_, l)| l).collect()
    }

    pub(crate) fn fence(&self) {
        if !self.in_hook.swap(true, Ordering::AcqRel) {
            // Taken out of its lock while it runs, so that it may set or clear the hook.
            let (gen, taken) = {
                let mut slot = self.hook.lock();
                (self.hook_gen.load(Ordering::Relaxed), slot.take())
            };
            if let Some(mut h) = taken {
                h(self);
                let mut slot = self.hook.lock();
                if self.hook_gen.load(Ordering::Relaxed) == gen {
                    *slot = Some(h);
                }
            }
            self.in_hook.store(false, Ordering::Release);
        }
        let me = std::thread::current().id();
        let lines: Vec<u32> = {
            let mut p = self.pending.lock();
            let mut mine = Vec::new();
            p.retain(|&(t, l)| {
                if t == me {
                    mine.push(l);
                }
                t != me
            });
            mine
        };
        let mut persisted = self.persisted.lock();
        for line in lines {
            self.persist_line(&mut persisted, line as u64);
        }
        self.fences.fetch_add(1, Ordering::Relaxed);
    }

    /// Copies line `line` of the volatile image into `persisted` (nothing past its end).
    fn persist_line(&self, persisted: &mut [u64], line: u64) {
        let w = line as usize * 8;
        if w + 8 > persisted.len() {
            return;
        }
        for (i, word) in persisted[w..w + 8].iter_mut().enumerate() {
            // SAFETY: `w + i < persisted.len() <= cap / 8`, inside the mapping, whose
            // shadow view is never protected; a volatile read because another thread may
            // store to it (the crash model tolerates either value).
            *word = unsafe { std::ptr::read_volatile(self.shadow.add(w + i)) };
        }
    }

    /// `flush` and `fence` of `[off, off + len)` for the media-error handler, which must
    /// not wait for the persisted image's lock (another thread's fence or crash point may
    /// hold it, and a signal handler may not park): the lines are persisted at once if that
    /// lock is free, else only flushed
    /// (persisted at this thread's next fence; a crash meanwhile keeps either version, as
    /// for any flushed line). It never waits for a lock the interrupted frame may hold
    /// (`pending` is never held across a load of the device), runs no fence hook and
    /// counts no fence.
    pub(crate) fn persist_from_handler(&self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        match self.persisted.try_lock() {
            Some(mut persisted) => {
                for line in off / 64..=(off + len - 1) / 64 {
                    self.persist_line(&mut persisted, line);
                }
            }
            None => self.flush(off, len),
        }
    }

    /// The persisted image now (what survives a crash with no pending word written).
    pub fn persisted_image(&self) -> Vec<u64> {
        let len = (self.len() as usize).div_ceil(8);
        self.persisted.lock()[..len].to_vec()
    }

    /// The volatile image now.
    pub fn volatile_image(&self) -> Vec<u64> {
        let len = (self.len() as usize).div_ceil(8);
        (0..len)
            // SAFETY: `i < len <= cap / 8`, inside the mapping, whose shadow view is never
            // protected. Another thread may be storing to the word (see the module docs on
            // concurrency).
            .map(|i| unsafe { std::ptr::read_volatile(self.shadow.add(i)) })
            .collect()
    }

    /// Captures the crash state of this instant: the persisted image and every word that
    /// differs from the volatile image.
    ///
    /// Both are read under the persisted image's lock, which every fence takes to persist
    /// its lines: a fence of another thread cannot complete between the two reads (it
    /// would leave a persisted image newer than the volatile one read before it, a state
    /// no crash can produce). Plain stores of other threads may still land meanwhile:
    /// they are pending words, as the crash model has them.
    pub fn crash_point(&self) -> CrashPoint {
        let persisted = self.persisted.lock();
        let len = (self.len() as usize).div_ceil(8);
        let vol = self.volatile_image();
        let base = persisted[..len].to_vec();
        drop(persisted);
        let diffs = base
            .iter()
            .zip(&vol)
            .enumerate()
            .filter(|(_, (p, v))| p != v)
            .map(|(i, (_, v))| (i as u32, *v))
            .collect();
        CrashPoint {
            base,
            diffs,
            len: self.len(),
            fence: self.fences(),
        }
    }
}

impl Drop for CrashSim {
    fn drop(&mut self) {
        // Kept for the next device of this capacity (`Spare`), with every page of the pool
        // view readable and writable again (an emulated media error may have left one
        // protected); unmapped if it cannot be, or enough are kept.
        let dirty = self.persisted.get_mut().len() * 8;
        // SAFETY: the pool view, `cap` bytes mapped in `from_image`, which nothing uses any
        // more (pools and logs hold the device); mprotect only changes its protection.
        let readable = unsafe {
            libc::mprotect(
                self.mem as *mut libc::c_void,
                self.cap,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        } == 0;
        if readable {
            let mut spares = SPARES.lock().unwrap_or_else(|e| e.into_inner());
            if spares.len() < SPARES_MAX {
                spares.push(Spare {
                    cap: self.cap,
                    mem: self.mem as usize,
                    shadow: self.shadow as usize,
                    dirty: dirty.min(self.cap),
                });
                return;
            }
        }
        for view in [self.mem, self.shadow] {
            // SAFETY: a mapping of `cap` bytes made in `from_image`, unmapped once; the
            // pools and logs that used it hold the device (an `Arc`), so none is left.
            unsafe { libc::munmap(view as *mut libc::c_void, self.cap) };
        }
    }
}

/// The set of images a crash could leave at one instant ([`CrashSim::crash_point`]): the
/// persisted image plus any subset of the [`pending`](Self::pending) words. A point with `n`
/// pending words stands for 2<sup>n</sup> images: test them all while `n` is small, else a
/// sample (none, all, random subsets).
#[derive(Clone, Debug)]
pub struct CrashPoint {
    base: Vec<u64>,
    diffs: Vec<(u32, u64)>,
    len: u64,
    fence: u64,
}

impl CrashPoint {
    /// Number of words that may or may not have reached media.
    pub fn pending(&self) -> usize {
        self.diffs.len()
    }

    /// The fence number this point was captured at.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The image with exactly the pending words `i` for which `pick(i)` is true applied
    /// (`i` indexes the pending words in address order).
    pub fn image(&self, mut pick: impl FnMut(usize) -> bool) -> Vec<u64> {
        let mut img = self.base.clone();
        for (i, &(w, v)) in self.diffs.iter().enumerate() {
            if pick(i) {
                img[w as usize] = v;
            }
        }
        img
    }

    /// A fresh device holding the image selected by `pick` (as [`image`](Self::image)), as
    /// after a reboot: open it with `Pool::open_sim`, which runs recovery. `capacity` is
    /// the most the pool on it may grow to; 0 (or anything smaller) gives the image's length.
    pub fn device(&self, capacity: u64, pick: impl FnMut(usize) -> bool) -> Arc<CrashSim> {
        CrashSim::from_image(&self.image(pick), self.len, capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(sim: &CrashSim, word: usize, v: u64) {
        // SAFETY: test-only single-threaded store inside the allocation.
        unsafe { sim.mem.add(word).write(v) };
    }

    #[test]
    fn a_crash_point_never_holds_a_persisted_word_newer_than_its_pending_value() {
        // One thread writes an increasing counter to two lines, fencing after each write;
        // the other captures crash points meanwhile. A word pending in a point must be at
        // least as new as the persisted one: a persisted image read after the volatile one
        // (a fence completing in between) would hand a crash an older value than media
        // already holds.
        // A large image, so that reading it takes long enough for fences to interleave.
        const SIZE: u64 = 4 << 20;
        let sim = CrashSim::new(SIZE);
        sim.set_len(SIZE);
        let done = std::sync::atomic::AtomicBool::new(false);
        let mut bad = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0u64;
                while !done.load(Ordering::Acquire) {
                    i += 1;
                    for w in [0, (SIZE / 8 - 8) as usize] {
                        // SAFETY: inside the allocation; the other thread only reads these
                        // words (volatile), as a crash point does.
                        unsafe { std::ptr::write_volatile(sim.mem.add(w), i) };
                    }
                    sim.flush(0, 64);
                    sim.flush(SIZE - 64, 64);
                    sim.fence();
                }
            });
            for _ in 0..40 {
                let cp = sim.crash_point();
                for &(w, v) in &cp.diffs {
                    if v < cp.base[w as usize] {
                        bad += 1;
                    }
                }
            }
            done.store(true, Ordering::Release);
        });
        assert_eq!(bad, 0, "pending words older than their persisted value");
    }

    #[test]
    fn a_device_holds_its_whole_length() {
        // A length past the capacity asked for: the pool on it reads every byte up to it.
        let sim = CrashSim::from_image(&[1, 2], 3 * 4096, 4096);
        assert!(sim.capacity() >= 3 * 4096);
        let img = sim.persisted_image();
        assert_eq!(img.len(), 3 * 512);
        assert_eq!((img[0], img[1], img[2], img[3 * 512 - 1]), (1, 2, 0, 0));
        assert_eq!(sim.volatile_image(), img);
    }

    #[test]
    fn only_flushed_lines_persist_at_a_fence() {
        let sim = CrashSim::new(8192);
        sim.set_len(8192);
        store(&sim, 0, 1);
        store(&sim, 8, 2); // next line
        sim.flush(0, 8);
        sim.fence();
        let p = sim.persisted_image();
        assert_eq!(p[0], 1);
        assert_eq!(p[8], 0, "unflushed line must not persist");
        let cp = sim.crash_point();
        assert_eq!(cp.pending(), 1);
        assert_eq!(cp.image(|_| true)[8], 2);
        assert_eq!(cp.image(|_| false)[8], 0);
    }

    #[test]
    fn a_fence_persists_only_its_own_threads_flushes() {
        let sim = CrashSim::new(8192);
        sim.set_len(8192);
        store(&sim, 0, 7);
        std::thread::scope(|s| {
            s.spawn(|| sim.flush(0, 8)); // another thread's write-back, never fenced
        });
        sim.fence();
        assert_eq!(
            sim.persisted_image()[0],
            0,
            "not ordered by this thread's fence"
        );
        sim.flush(0, 8);
        sim.fence();
        assert_eq!(sim.persisted_image()[0], 7);
    }

    #[test]
    fn a_hook_may_clear_or_replace_itself() {
        // A one-shot hook clears itself, or installs the next one, at the fence it runs in.
        let sim = CrashSim::new(4096);
        sim.set_len(4096);
        let calls = Arc::new(Mutex::new(Vec::new()));
        let c = calls.clone();
        sim.set_fence_hook(move |s| {
            c.lock().push("first");
            let c = c.clone();
            s.set_fence_hook(move |s| {
                c.lock().push("second");
                s.clear_fence_hook();
            });
        });
        let (done, wait) = std::sync::mpsc::channel();
        let s2 = sim.clone();
        std::thread::spawn(move || {
            for _ in 0..4 {
                s2.fence();
            }
            let _ = done.send(());
        });
        let finished = wait.recv_timeout(std::time::Duration::from_secs(30));
        assert!(
            finished.is_ok(),
            "a hook that changed the hook hung its fence"
        );
        assert_eq!(*calls.lock(), ["first", "second"]);
        assert_eq!(sim.fences(), 4);
    }

    #[test]
    fn hook_sees_state_before_fence() {
        let sim = CrashSim::new(4096);
        sim.set_len(4096);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        sim.set_fence_hook(move |s| s2.lock().push(s.crash_point().pending()));
        store(&sim, 3, 9);
        sim.flush(24, 8);
        sim.fence();
        sim.fence();
        assert_eq!(*seen.lock(), vec![1, 0]);
    }
}
