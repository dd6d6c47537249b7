//! The media-error handler: a load from a lost page of a pool is caught, the page rebuilt
//! from zone parity in place, and the load retried — transparently to the program.
//!
//! Real media errors arrive as `SIGBUS` with `BUS_MCEERR_AR` (the kernel found the line
//! poisoned); emulated ones (`Fault::MediaError`: the page is made unreadable with
//! `mprotect(PROT_NONE)`) as `SIGSEGV` with `SEGV_ACCERR`. Any other fault, or one outside
//! every pool, goes to the handler installed before ours (Rust's stack-overflow handler, or
//! the default action), so a real crash still crashes.
//!
//! Async-signal safety. The handler runs on the faulting thread, at any load of pool
//! memory, possibly on the thread's alternate signal stack (`SA_ONSTACK`; Rust gives each
//! thread it spawns one). It therefore:
//! - allocates nothing: it rebuilds into a per-pool static page buffer, guarded by the
//!   pool's `repairing` word (one repair at a time per pool; another thread faulting on the
//!   same page waits for it, on another page waits its turn);
//! - takes no lock another frame of the same thread may hold: the only lock is the parity
//!   stripe of the page's column, a spin lock (no parking, no tables), and a thread never
//!   loads pool memory while holding a stripe that it did not load just before taking it
//!   (`Parity::apply` first touches every line it will read);
//! - waits only for other threads' progress: for the stripe (held for a bounded XOR), and
//!   for the stripe's pending new objects (their bytes are written before their
//!   transaction's next fence, with no pool load in between);
//! - uses only async-signal-safe system calls (`mprotect`, `sched_yield`, `msync` through
//!   the media layer) and never unwinds (nothing in it panics: indices are checked);
//!   on simulated media it makes the page durable without the device's image lock, which
//!   the faulting frame may hold (`Media::persist_from_handler`).
//!
//! A lost parity page is rebuilt from its column's data rows, under its own stripe. What it
//! cannot rebuild (no parity, the page outside the zones' rows, a second lost page in the
//! column) it zero-fills and counts as lost; checksums then report the objects on it as
//! damaged, so nothing is lost silently. While the pool is open, `lost_pages` keeps its
//! column from being rebuilt from the parity that no longer agrees with it; when the pool
//! closes, that parity is recomputed (`unprotect_all`). A page still lost (unread) when the
//! pool closes is rebuilt then, as a load would have rebuilt it, if its column has no other
//! loss (a lost parity page is recomputed from its data rows); otherwise it is lost for
//! good like the handler's zero-filled pages. Once `lost_pages` is full, a loss it cannot record
//! sets `lost_overflow`: from then on every column may hold an unrecorded zero-filled page,
//! so the handler rebuilds nothing more (each lost page is reported lost) and the close
//! recomputes the parity of every zone (pages still lost then are lost for good too).
//!
//! A page `mprotect` cannot make accessible again is left lost and untouched, and the fault
//! goes to the previous handler, with a line on stderr: writing the page would fault again
//! with the signal blocked, which kills the process past every handler, and returning would
//! only fault again. (Injection reports its own `mprotect` failure as an error.)
//!
//! The handler works in `PAGE` (4 KiB) pages, and `mprotect` takes whole system pages: on
//! a system whose pages are larger (16 or 64 KiB), pools are not registered (a real media
//! error gets the previous action, as without pgl) and injection is refused
//! (`unsupported_page_size`).
//!
//! A fault is delivered, and its handler runs, some time after the load that raised it:
//! meanwhile another thread's fault on the same page may have repaired it. Such a late
//! fault (`SEGV_ACCERR` on a page no longer poisoned) is told from a foreign one by the
//! pool's record of every page pgl made unreadable (`protected`, recorded before the
//! page is poisoned and never forgotten while the pool is registered), not by a window of
//! recent repairs, which any number of repairs in between could outrun; it just retries
//! its load. A page is unpoisoned only once it is accessible again, so "poisoned" is what
//! the handler checks, before it waits its turn to repair and again once it has it, so
//! that no page is rebuilt twice for one loss.
//!
//! The registry of pools is a fixed array of slots, each read by the handler as a
//! seqlock: a slot's context, start and end count only if its sequence word read the same
//! even value before and after them, so a handler never pairs one pool's context with
//! another's range (a pool closing while another opens in the same slot) nor with a range
//! torn half-way through a registration. A slot in the middle of a registration or an
//! unregistration is skipped: no thread can be using that pool (not yet handed out, or
//! already dropped by every owner). The handler counts itself among the slot's readers
//! before its first read and stays counted while it uses the pool, and `unregister` waits
//! until the count is zero: the pool's context is never freed under a handler. The handler
//! itself never waits for a slot.
//!
//! Invariant: a registered pool's media, geometry and parity outlive its registration
//! (`Engine` unregisters before they drop, and `unregister` returns only once no handler
//! uses them).

use super::parity::Parity;
use super::rebuild::{column_of, parity_column_of, rebuild_page_into, rebuild_parity_page_into};
use crate::geometry::{Geometry, PAGE};
use crate::persist::Media;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Linux's `si_code` for an access to a page without the needed protection.
const SEGV_ACCERR: libc::c_int = 2;
/// Pools that can be registered at once.
const SLOTS: usize = 64;
/// Emulated media errors a pool can have outstanding at once.
pub(crate) const POISON_MAX: usize = 64;

/// What the handler needs of one pool.
pub(crate) struct FaultCtx {
    media: *const Media,
    parity: *const Parity,
    geo: Geometry,
    /// Offsets + 1 of pages with an emulated media error (0: free slot).
    poisoned: [AtomicU64; POISON_MAX],
    /// Offsets + 1 of pages the handler could not rebuild: their column's parity no longer
    /// rebuilds anything else in it either.
    lost_pages: [AtomicU64; POISON_MAX],
    /// Set when a lost page did not fit in `lost_pages`: any column may then hold an
    /// unrecorded zero-filled page, so no column's parity is trusted to rebuild a page.
    lost_overflow: AtomicBool,
    /// Every page given an emulated media error while the pool is registered, recorded
    /// before it is made unreadable and kept until the context goes: a thread whose fault
    /// on one is delivered after another thread's repair finds it here (and no longer
    /// poisoned) and just retries its load, however many repairs came in between.
    protected: History,
    /// Offset + 1 of the page being repaired (0: none).
    repairing: AtomicU64,
    /// Pages rebuilt by the handler.
    pub repaired: AtomicU64,
    /// Pages it could not rebuild (zero-filled).
    pub lost: AtomicU64,
    /// The rebuild buffer, used only by the thread that set `repairing`.
    buf: UnsafeCell<[u8; PAGE as usize]>,
}

// SAFETY: the raw pointers point at the engine's media and parity, which are Sync and
// outlive the context (module invariant); `buf` is used only by the holder of `repairing`.
unsafe impl Send for FaultCtx {}
// SAFETY: as above.
unsafe impl Sync for FaultCtx {}

/// Entries per chunk of a `History`.
const HISTORY_CHUNK: usize = 64;

/// A set of pages (offsets + 1) that only grows: a chunk filled in order (0: free, and
/// so is every entry after it), then the next chunk, allocated once this one is full.
/// Adding may allocate (not in the handler); looking up only loads (in the handler). A
/// chunk is freed only with the first, when the context goes, after its unregistration.
struct History {
    pages: [AtomicU64; HISTORY_CHUNK],
    next: AtomicPtr<History>,
}

impl History {
    fn new() -> History {
        History {
            pages: std::array::from_fn(|_| AtomicU64::new(0)),
            next: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Whether `page` was added. Async-signal-safe: loads only, no waiting.
    fn holds(&self, page: u64) -> bool {
        let mut chunk = self;
        loop {
            for p in &chunk.pages {
                match p.load(Ordering::Acquire) {
                    0 => return false,
                    v if v == page + 1 => return true,
                    _ => {}
                }
            }
            let next = chunk.next.load(Ordering::Acquire);
            if next.is_null() {
                return false;
            }
            // SAFETY: a chunk `add` leaked into the chain, freed only when the first
            // chunk drops, which `&self` outlives.
            chunk = unsafe { &*next };
        }
    }

    /// Adds `page` (once). Allocates a chunk when the last is full: not for the handler.
    fn add(&self, page: u64) {
        let mut chunk = self;
        loop {
            for p in &chunk.pages {
                match p.compare_exchange(0, page + 1, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return,
                    Err(v) if v == page + 1 => return,
                    Err(_) => {}
                }
            }
            let mut next = chunk.next.load(Ordering::Acquire);
            if next.is_null() {
                let new = Box::into_raw(Box::new(History::new()));
                next = match chunk.next.compare_exchange(
                    std::ptr::null_mut(),
                    new,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => new,
                    Err(theirs) => {
                        // SAFETY: `new` came from `Box::into_raw` above and was never
                        // published (the exchange failed).
                        drop(unsafe { Box::from_raw(new) });
                        theirs
                    }
                };
            }
            // SAFETY: as in `holds`.
            chunk = unsafe { &*next };
        }
    }
}

impl Drop for History {
    /// Frees the chain one chunk at a time (a recursive drop could overflow the stack).
    fn drop(&mut self) {
        let mut next = std::mem::replace(self.next.get_mut(), std::ptr::null_mut());
        while !next.is_null() {
            // SAFETY: every chunk after the first came from `Box::into_raw` in `add` and
            // is owned by the chain alone; `&mut self` means no one else uses it.
            let mut chunk = unsafe { Box::from_raw(next) };
            next = std::mem::replace(chunk.next.get_mut(), std::ptr::null_mut());
        }
    }
}

/// One registered pool, or none. `register` and `unregister` write its fields one by one,
/// so a reader takes them as a unit only between two equal, even reads of `seq`, and holds
/// `readers` while it looks, and while it uses the context: `unregister` waits until no
/// reader is left before the pool may go (see `lookup`).
struct Slot {
    /// Taken by the `register` that fills the slot, given back by `unregister` (after the
    /// slot's readers are gone).
    taken: AtomicBool,
    /// Even while the fields below stay as they are, odd while `register` or `unregister`
    /// writes them; each write bumps it twice, so no two registrations read the same.
    seq: AtomicU64,
    /// Handlers looking at the slot or using its pool's context right now.
    readers: AtomicUsize,
    base: AtomicUsize,
    end: AtomicUsize,
    ctx: AtomicPtr<FaultCtx>,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    taken: AtomicBool::new(false),
    seq: AtomicU64::new(0),
    readers: AtomicUsize::new(0),
    base: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    ctx: AtomicPtr::new(std::ptr::null_mut()),
};
static REGISTRY: [Slot; SLOTS] = [EMPTY; SLOTS];

/// The actions installed before ours, for chaining.
struct Previous {
    segv: libc::sigaction,
    bus: libc::sigaction,
}
// SAFETY: plain C data, written once before the handler is installed, read-only after.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

impl FaultCtx {
    /// The context of a pool whose `media` and `parity` will outlive it.
    pub(crate) fn new(media: &Media, parity: &Parity, geo: Geometry) -> Box<FaultCtx> {
        Box::new(FaultCtx {
            media,
            parity,
            geo,
            poisoned: std::array::from_fn(|_| AtomicU64::new(0)),
            lost_pages: std::array::from_fn(|_| AtomicU64::new(0)),
            lost_overflow: AtomicBool::new(false),
            protected: History::new(),
            repairing: AtomicU64::new(0),
            repaired: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            buf: UnsafeCell::new([0; PAGE as usize]),
        })
    }

    fn media(&self) -> &Media {
        // SAFETY: module invariant.
        unsafe { &*self.media }
    }

    fn parity(&self) -> &Parity {
        // SAFETY: module invariant.
        unsafe { &*self.parity }
    }

    fn is_poisoned(&self, page: u64) -> bool {
        self.poisoned
            .iter()
            .any(|p| p.load(Ordering::Acquire) == page + 1)
    }

    /// The pages with an emulated media error not yet repaired (a parity pass reads them
    /// even where the file system holds a hole: that read is what repairs them).
    pub(crate) fn poisoned_pages(&self) -> impl Iterator<Item = u64> + '_ {
        self.poisoned
            .iter()
            .map(|p| p.load(Ordering::Acquire))
            .filter(|&v| v != 0)
            .map(|v| v - 1)
    }

    /// Records that `page` has an emulated media error; false if too many are outstanding.
    pub(crate) fn poison(&self, page: u64) -> bool {
        self.is_poisoned(page)
            || self.poisoned.iter().any(|p| {
                p.compare_exchange(0, page + 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
    }

    /// Makes every page still marked lost accessible again. A data page whose column has no
    /// other loss is rebuilt from parity, as a load would have rebuilt it. The others are
    /// zeroed: a parity page still lost is recomputed from its data rows (below), and a data
    /// page whose column lost another page is gone for good with the pages the handler
    /// zero-filled. For those, the parity page of each of their columns is recomputed from
    /// the rows as they are, since once the pool is closed nothing remembers which pages
    /// were zeroed, and a later lost page of such a column would be "rebuilt" from parity
    /// that still holds the zeroed pages' old bytes. If the handler zero-filled more pages
    /// than it could record, the parity of every zone is recomputed. Called with the pool
    /// closing (and unregistered), so that nothing else accesses it.
    ///
    /// Why a page its column can rebuild is rebuilt here, not zeroed for the next session:
    /// that session repairs objects, not pages (checksums find each object on the page as
    /// it is read, and parity rebuilds its bytes alone), so the page's free blocks and the
    /// objects not read yet would keep their zeros, its column would disagree with its
    /// parity, and a second page lost in that column could not be rebuilt.
    pub(crate) fn unprotect_all(&self, media: &Media) {
        // First, while every lost page still counts as lost in its column.
        let parity = self.parity();
        let mut buf = Box::new([0u8; PAGE as usize]);
        let mut rebuilt = Vec::new();
        for page in self.poisoned_pages() {
            if !parity.enabled() || self.column_has_other_loss(page) {
                continue;
            }
            // SAFETY: a page-aligned page of the mapping, protected by `destroy`; the pool
            // is closing, so nothing else accesses it.
            if unsafe { set_access(media, page, true) }.is_err() {
                continue;
            }
            // SAFETY: the page lies in a zone of the pool; no other page of its column is
            // lost (so none is protected), and nothing writes them (the pool is closing).
            if unsafe { rebuild_page_into(media, &self.geo, page, &mut buf) } {
                // SAFETY: the page is accessible again (above), and nobody else's.
                unsafe { media.write(page, &buf[..]) };
                media.flush(page, PAGE);
                rebuilt.push(page);
            }
        }
        for page in rebuilt {
            self.unpoison(page);
        }
        let mut zeroed: Vec<u64> = self
            .lost_pages
            .iter()
            .map(|p| p.load(Ordering::Acquire))
            .filter(|&v| v != 0)
            .map(|v| v - 1)
            .collect();
        // Pages that stay unreadable (mprotect failed): their bytes, never zeroed, still
        // agree with parity, but nothing may read them, so their zones are left as they are.
        let mut stuck: Vec<u64> = Vec::new();
        for p in &self.poisoned {
            let v = p.swap(0, Ordering::AcqRel);
            if v == 0 {
                continue;
            }
            // SAFETY: a page-aligned page of the mapping, protected by `destroy`; the pool
            // is closing, so nothing else accesses it.
            if unsafe { set_access(media, v - 1, true) }.is_err() {
                stuck.push(v - 1);
                continue;
            }
            // SAFETY: as above; the page is accessible again.
            unsafe { media.write(v - 1, &[0u8; PAGE as usize]) };
            media.flush(v - 1, PAGE);
            // Lost for good, its column's parity recomputed from the rows as they are
            // (below). A parity page: no checksum would ever find it zeroed, and the next
            // session would rebuild its column's lost pages from the zeroes. A data page
            // (its column lost another page too, or it could not be rebuilt above): its
            // column's parity still holds its old bytes, from which a later lost page of
            // the column would be "rebuilt" wrong and counted repaired.
            zeroed.push(v - 1);
        }
        // `None` before the zones: a page there that a machine check zero-filled (the
        // header, the lanes) has no parity to recompute.
        let zone_of = |page: u64| {
            page.checked_sub(self.geo.zones_offset())
                .map(|rel| rel / self.geo.zone_size())
        };
        let readable = |zone: u64| stuck.iter().all(|&p| zone_of(p) != Some(zone));
        // A column's parity is recomputed from its pages alone: only a page left
        // unreadable in that column keeps it as it is (`None`: no column, no parity).
        zeroed.retain(|&p| {
            let col = self.column_key(p);
            col.is_some() && stuck.iter().all(|&s| self.column_key(s) != col)
        });
        if parity.enabled() && self.lost_overflow.load(Ordering::Acquire) {
            for z in (0..self.geo.zones_for(media.len())).filter(|&z| readable(z)) {
                let data = super::parity::zone_extents(media, &self.geo, z);
                // SAFETY: a zone inside the pool's length; every page is accessible again
                // (above), and the pool is closing, so nothing writes the zone meanwhile.
                unsafe { super::parity::recompute_zone(media, &self.geo, z, &data) };
            }
        } else if parity.enabled() {
            for page in zeroed {
                let column_parity = match parity_column_of(&self.geo, page) {
                    Some(_) => Some(page),
                    None => parity.map().parity_of(page).map(|(p, _)| p),
                };
                let Some(at) = column_parity else { continue };
                // SAFETY: a parity page of a zone (checked against the pool's length by
                // the call); every page of its column is accessible again (above), and the
                // pool is closing, so nothing writes the zone meanwhile.
                if unsafe { rebuild_parity_page_into(media, &self.geo, at, &mut buf) } {
                    // SAFETY: as above.
                    unsafe { media.write(at, &buf[..]) };
                    media.flush(at, PAGE);
                }
            }
        }
        media.fence();
    }

    /// Makes `page` lost, as a media error would: every access to it faults from now on.
    /// Its bytes stay in place, unreadable, until the handler writes what parity rebuilds
    /// over them (or the pool closes first, which rebuilds them where their column allows
    /// and zeroes them otherwise: `unprotect_all`): a thread that reads the page in the
    /// moment between the handler's `mprotect` and its write sees those bytes, never a
    /// destroyed page, just as no thread can read a poisoned line of real persistent
    /// memory before it is rewritten. `Ok(false)` if too many emulated errors are
    /// outstanding; the OS error if the page could not be protected (nothing changed).
    ///
    /// # Safety
    /// `page` is a page-aligned offset inside the pool, and nothing else accesses the pool
    /// meanwhile (the caller holds it exclusively).
    pub(crate) unsafe fn destroy(&self, page: u64) -> std::io::Result<bool> {
        let media = self.media();
        if self.is_poisoned(page) {
            return Ok(true); // already lost
        }
        // Before the page is poisoned: whoever sees it poisoned finds it here too.
        self.protected.add(page);
        if !self.poison(page) {
            return Ok(false);
        }
        // SAFETY: the caller's contract.
        if let Err(e) = unsafe { set_access(media, page, false) } {
            // Still accessible: the handler must not take a fault on it for ours.
            self.unpoison(page);
            return Err(e);
        }
        Ok(true)
    }

    fn unpoison(&self, page: u64) {
        for p in &self.poisoned {
            let _ = p.compare_exchange(page + 1, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// The zone and in-row offset of `page`'s column (a data or a parity page); `None`
    /// outside the zones' rows.
    fn column_key(&self, page: u64) -> Option<(u64, u64)> {
        let g = &self.geo;
        match (column_of(g, page), parity_column_of(g, page)) {
            (Some((zone, _, col)), _) | (None, Some((zone, col))) => Some((zone, col)),
            (None, None) => None,
        }
    }

    /// Whether another page of `page`'s column in its zone (data rows and parity row) is
    /// lost too, or may be (an unrecorded loss).
    fn column_has_other_loss(&self, page: u64) -> bool {
        if self.lost_overflow.load(Ordering::Acquire) {
            return true;
        }
        let g = &self.geo;
        let Some((zone, col)) = self.column_key(page) else {
            return true;
        };
        let lost = |other: u64| {
            other != page
                && (self.is_poisoned(other)
                    || self
                        .lost_pages
                        .iter()
                        .any(|p| p.load(Ordering::Acquire) == other + 1))
        };
        lost(g.parity_offset(zone) + col)
            || (0..g.rows).any(|r| lost(g.zone_offset(zone) + r * g.row_size() + col))
    }

    /// Rebuilds `page` (see the module docs); called from the handler. `Err(errno)` if
    /// the page cannot be made accessible again (`mprotect` failed): it is left lost and
    /// untouched, since writing it would fault with this signal blocked, and the fault must
    /// go elsewhere (the load would only fault again).
    ///
    /// `emulated`: the fault is an emulated error's (`SEGV_ACCERR` on a page pgl made
    /// unreadable). Only then may a page no longer poisoned be taken as repaired since the
    /// fault was raised (a page is unpoisoned only once it is accessible again): a machine
    /// check on it is new damage (the load would only fault again).
    fn repair(&self, page: u64, emulated: bool) -> Result<(), i32> {
        if emulated && !self.is_poisoned(page) {
            return Ok(()); // repaired by another thread after this fault was raised
        }
        loop {
            match self
                .repairing
                .compare_exchange(0, page + 1, Ordering::Acquire, Ordering::Acquire)
            {
                // Repaired by another thread between the check above and this one (its
                // unpoison comes before its release of `repairing`, which this acquired).
                Ok(_) if emulated && !self.is_poisoned(page) => {
                    self.repairing.store(0, Ordering::Release);
                    return Ok(());
                }
                Ok(_) => break,
                Err(cur) if cur == page + 1 => {
                    // Another thread repairs this very page: wait until it is done.
                    while self.repairing.load(Ordering::Acquire) == page + 1 {
                        yield_now();
                    }
                    return Ok(()); // the load retries (and faults into here again if it failed)
                }
                Err(_) => yield_now(),
            }
        }
        let media = self.media();
        let parity = self.parity();
        // A data page's column is guarded by its parity page's stripe; a parity page is
        // rebuilt from the data rows under its own.
        let in_parity_row = parity_column_of(&self.geo, page).is_some();
        let stripe = parity
            .enabled()
            .then(|| match in_parity_row {
                true => Some(page),
                false => parity.map().parity_of(page).map(|(p, _)| p),
            })
            .flatten()
            .map(|p| (p, parity.stripe_of(p)));
        if let Some((_, s)) = stripe {
            // Async-signal-safe: atomics, spinning and `sched_yield` (see `StripeLock`).
            // Not holding the stripe while its pending objects drain: the commit that
            // counts them may need the stripe again for its next new piece before it can
            // write them (and so wait for us while we wait for it).
            loop {
                s.lock();
                if s.pending() == 0 {
                    break;
                }
                s.unlock();
                yield_now();
            }
        }
        // SAFETY: only the holder of `repairing` uses the buffer.
        let buf = unsafe { &mut *self.buf.get() };
        let rebuilt = stripe.is_some()
            && !self.column_has_other_loss(page)
            // SAFETY: `page` lies in a zone of the pool; its column is quiet (stripe held,
            // nothing pending); the buffer is the one preallocated for repairs.
            && unsafe {
                match in_parity_row {
                    true => rebuild_parity_page_into(media, &self.geo, page, buf),
                    false => rebuild_page_into(media, &self.geo, page, buf),
                }
            };
        if !rebuilt {
            buf.fill(0);
        }
        // SAFETY: the page is page-aligned and inside the mapping; making it accessible
        // again is what the emulated error took away.
        if let Err(e) = unsafe { set_access(media, page, true) } {
            if let Some((_, s)) = stripe {
                s.unlock();
            }
            self.repairing.store(0, Ordering::Release);
            return Err(e.raw_os_error().unwrap_or(0));
        }
        // SAFETY: the page is ours to rewrite: every access to it faults into this handler,
        // which is serialised by `repairing`.
        unsafe { media.write(page, &buf[..]) };
        media.persist_from_handler(page, PAGE);
        if let Some((_, s)) = stripe {
            s.unlock();
        }
        if rebuilt {
            self.repaired.fetch_add(1, Ordering::Relaxed);
        } else {
            self.lost.fetch_add(1, Ordering::Relaxed);
            let recorded = self.lost_pages.iter().any(|p| {
                p.compare_exchange(0, page + 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            });
            if !recorded {
                // Published before `repairing` is released: the next repair sees it.
                self.lost_overflow.store(true, Ordering::Release);
            }
        }
        self.unpoison(page);
        self.repairing.store(0, Ordering::Release);
        Ok(())
    }
}

/// Makes pool page `page` accessible or not (`mprotect`, async-signal-safe); the OS error
/// if `mprotect` failed (its protection is then unchanged).
///
/// # Safety
/// `page` is a page-aligned offset inside `media`'s mapping.
unsafe fn set_access(media: &Media, page: u64, on: bool) -> std::io::Result<()> {
    let prot = if on {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_NONE
    };
    if crate::fault::fail_mprotect() {
        return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
    }
    // SAFETY: the caller's contract; mprotect only changes the page's protection.
    let rc = unsafe { libc::mprotect(media.ptr(page) as *mut libc::c_void, PAGE as usize, prot) };
    match rc {
        0 => Ok(()),
        // Reads errno: no allocation.
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn yield_now() {
    // SAFETY: sched_yield is async-signal-safe and has no preconditions.
    unsafe { libc::sched_yield() };
}

/// The system's page size, if it is not `PAGE`: then the handler cannot work (it rounds
/// fault addresses to, protects and rebuilds `PAGE`-sized pages, and `mprotect` would
/// refuse a range that is not a whole system page, or protect its neighbours too). Not
/// for the handler itself (`sysconf` is not async-signal-safe).
pub(crate) fn unsupported_page_size() -> Option<u64> {
    let size = if crate::fault::fake_large_pages() {
        16 << 10
    } else {
        // SAFETY: sysconf has no preconditions.
        unsafe { libc::sysconf(libc::_SC_PAGESIZE) }
    };
    // A failed sysconf (-1) is unknown, so unsupported too.
    (size != PAGE as libc::c_long).then_some(size.max(0) as u64)
}

/// Registers a pool's mapping `[base, base + len)`; the handler is installed on first use.
/// Returns the slot, for `unregister`, or `None` if every slot is taken.
pub(crate) fn register(base: *const u8, len: u64, ctx: &FaultCtx) -> Option<usize> {
    install();
    // The kernels are chosen lazily; choose them now, not in the handler.
    let _ = super::xor::kernel_name();
    register_in(&REGISTRY, base as usize, len as usize, ctx)
}

/// Forgets slot `i`; returns once no handler uses its pool any more.
pub(crate) fn unregister(i: usize) {
    unregister_in(&REGISTRY, i);
}

/// `register`'s work on `registry`.
fn register_in(registry: &[Slot], base: usize, len: usize, ctx: &FaultCtx) -> Option<usize> {
    let (i, s) = registry.iter().enumerate().find(|(_, s)| {
        s.taken
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    })?;
    s.seq.fetch_add(1, Ordering::SeqCst);
    // Release: a reader that sees one of these sees the odd `seq` before them too.
    s.ctx
        .store(ctx as *const FaultCtx as *mut FaultCtx, Ordering::Release);
    s.base.store(base, Ordering::Release);
    s.end.store(base + len, Ordering::Release);
    s.seq.fetch_add(1, Ordering::SeqCst);
    Some(i)
}

/// `unregister`'s work on `registry`. Returns once no handler looks at the slot or uses
/// its context any more: the pool may then go.
fn unregister_in(registry: &[Slot], i: usize) {
    let s = &registry[i];
    s.seq.fetch_add(1, Ordering::SeqCst);
    s.ctx.store(std::ptr::null_mut(), Ordering::Release);
    s.base.store(0, Ordering::Release);
    s.end.store(0, Ordering::Release);
    s.seq.fetch_add(1, Ordering::SeqCst);
    // A reader counted after this load read `seq` after the bumps above (all four are
    // SeqCst), so it finds the slot empty or someone else's; one counted before it is
    // waited for. Handlers never wait for this thread (it is closing the pool, which
    // nothing accesses any more), so the wait ends.
    while s.readers.load(Ordering::SeqCst) != 0 {
        yield_now();
    }
    s.taken.store(false, Ordering::Release);
}

/// The registered pool whose mapping holds an address, as `lookup` found it: its slot
/// stays counted as read until this is dropped, so the pool's context stays alive.
struct Found<'r> {
    slot: &'r Slot,
    ctx: *const FaultCtx,
    base: usize,
}

impl Found<'_> {
    /// The pool's context.
    fn ctx(&self) -> *const FaultCtx {
        self.ctx
    }
}

impl Drop for Found<'_> {
    fn drop(&mut self) {
        self.slot.readers.fetch_sub(1, Ordering::Release);
    }
}

/// The slot of `registry` whose range holds `addr`. `mid(i)` runs after slot `i`'s
/// context and start are read, before its end is (a no-op but in tests, which change the
/// slot there).
///
/// Async-signal-safe: atomics only, no waiting. A slot's fields are taken as one
/// registration's only if `seq` reads the same even value before and after them (a
/// seqlock: a field store seen by a read here implies the odd `seq` before it is seen by
/// the second read of `seq`), so no context is paired with another pool's range, nor with
/// a range torn half-way through a registration. And the slot is counted in `readers`
/// before `seq` is first read: `unregister` either sees the count and waits for the
/// returned `Found` to drop, or bumped `seq` before this read it, so that the slot reads
/// empty or as another pool's. A context `lookup` returns is therefore never freed while
/// it is in use.
fn lookup(registry: &[Slot], addr: usize, mid: impl Fn(usize)) -> Option<Found<'_>> {
    for (i, s) in registry.iter().enumerate() {
        s.readers.fetch_add(1, Ordering::SeqCst);
        let seq = s.seq.load(Ordering::SeqCst);
        let ctx = s.ctx.load(Ordering::Acquire);
        let base = s.base.load(Ordering::Acquire);
        mid(i);
        let end = s.end.load(Ordering::Acquire);
        // After the field reads (they are Acquire loads).
        let unchanged = s.seq.load(Ordering::SeqCst) == seq;
        if seq % 2 == 0 && unchanged && !ctx.is_null() && (base..end).contains(&addr) {
            return Some(Found { slot: s, ctx, base });
        }
        s.readers.fetch_sub(1, Ordering::Release);
    }
    None
}

fn install() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: sigaction with a zeroed old-action buffer and a fully initialised new
        // action; the handler is an `extern "C"` function of the SA_SIGINFO signature.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_fault as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            // Both signals blocked while either is handled: a nested fault would find the
            // `repairing` word held by its own outer frame and wait for ever. Blocked, a
            // queued one waits for the handler to return, and a synchronous one (a fault
            // inside the handler) gets the default action: a crash, never a hang.
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaddset(&mut act.sa_mask, libc::SIGSEGV);
            libc::sigaddset(&mut act.sa_mask, libc::SIGBUS);
            let mut segv: libc::sigaction = std::mem::zeroed();
            let mut bus: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut segv);
            libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut bus);
            let prev = Previous { segv, bus };
            libc::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut());
            libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
            prev
        }
    });
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    if !handle(&REGISTRY, sig, code, addr) {
        chain(sig, info, uctx);
    }
}

/// Handles the fault `sig`/`code` at `addr` for the pools of `registry`: true if it was a
/// pool's media error, now repaired (the faulting load runs again), false if it goes to
/// the previous handler.
fn handle(registry: &[Slot], sig: libc::c_int, code: libc::c_int, addr: usize) -> bool {
    let Some(found) = lookup(registry, addr, |_| {}) else {
        return false;
    };
    // SAFETY: `found` holds its slot's reader count, so the pool cannot finish
    // unregistering, and its context stays alive (module invariant), until `found` drops
    // at the end of this function; `lookup` returns a context with its own pool's range.
    let ctx = unsafe { &*found.ctx() };
    let page = (addr - found.base) as u64 / PAGE * PAGE;
    let emulated = sig == libc::SIGSEGV
        && code == SEGV_ACCERR
        && (ctx.is_poisoned(page) || ctx.protected.holds(page));
    let real = sig == libc::SIGBUS && code == libc::BUS_MCEERR_AR;
    if emulated || real {
        match ctx.repair(page, emulated) {
            Ok(()) => return true,
            Err(errno) => say_unrepairable(page, errno),
        }
    }
    false
}

/// Tells stderr that the lost page at pool offset `page` cannot be made accessible again,
/// with `write(2)` alone (async-signal-safe: no formatting machinery, no allocation).
fn say_unrepairable(page: u64, errno: i32) {
    let mut buf = [0u8; 200];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        for &b in bytes {
            if n < buf.len() {
                buf[n] = b;
                n += 1;
            }
        }
    };
    put(b"pgl: the lost page at pool offset 0x");
    let digits = (64 - page.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        put(&[b"0123456789abcdef"[(page >> (4 * i) & 0xf) as usize]]);
    }
    put(b" cannot be made accessible again (mprotect failed, errno ");
    let e = errno.unsigned_abs();
    let mut dec = [0u8; 10];
    let mut len = 0;
    let mut v = e;
    loop {
        dec[len] = b'0' + (v % 10) as u8;
        len += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in (0..len).rev() {
        put(&[dec[i]]);
    }
    put(b"), so it cannot be rebuilt; the fault goes to the previous handler\n");
    // SAFETY: write is async-signal-safe; `buf[..n]` is initialised.
    unsafe { libc::write(2, buf.as_ptr() as *const libc::c_void, n) };
}

/// Hands the fault to the action installed before ours.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    let Some(prev) = PREVIOUS.get() else { return };
    let act = if sig == libc::SIGSEGV {
        &prev.segv
    } else {
        &prev.bus
    };
    let h = act.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // Restore it and return: the instruction faults again and gets the default action.
        // SAFETY: sigaction with a valid action.
        unsafe { libc::sigaction(sig, act, std::ptr::null_mut()) };
        // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
        if unsafe { (*info).si_code } <= 0 {
            // Sent by a process (`kill`, `raise`, `sigqueue`: SI_USER and below), not
            // raised by a fault: no instruction faults again, so raise it anew. It stays
            // pending (blocked while we run) and gets the restored action on return.
            // SAFETY: raise is async-signal-safe and has no preconditions.
            unsafe { libc::raise(sig) };
        }
    } else if act.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, uctx);
    } else {
        // SAFETY: the previous handler was installed with this signature.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::FlushMode;
    use std::time::Duration;

    /// The geometry of the handler tests' pools: one zone of three 16 KiB rows.
    const GEO: Geometry = Geometry {
        chunk_size: 16 << 10,
        chunks_per_row: 1,
        rows: 3,
        lanes: 1,
        lane_size: 8192,
    };

    /// A fresh scratch file of one `GEO` zone, mapped without flushes.
    fn scratch_media(name: &str) -> (std::path::PathBuf, Media) {
        let path = crate::scratch_pool(name);
        let len = GEO.pool_size(1);
        let (media, mut made) =
            Media::create_file(&path, len, len, Some(FlushMode::None), false).expect("create");
        made.publish().expect("publish");
        (path, media)
    }

    #[test]
    fn a_repair_waiting_for_pending_objects_lets_their_commit_take_the_stripe() {
        // A commit counts a new object's piece as pending in a stripe and then needs the
        // stripe again for its next piece (the same column, another row); meanwhile another
        // thread's fault in that column waits for the pending count to drain. The repair
        // must not hold the stripe while it waits.
        let geo = GEO;
        let (path, media) = scratch_media("handler-pending");
        let parity = Parity::new(true, 0, &geo);
        let ctx = FaultCtx::new(&media, &parity, geo);
        let row = |r: u64| geo.zone_offset(0) + r * geo.row_size() + PAGE;
        // SAFETY: pages of zone 0's data rows, inside the pool; nothing else writes them.
        unsafe { parity.update_new(&media, row(0), &[7; 8]) };
        // The page the fault is on: lost (nothing touches it until it is repaired).
        // SAFETY: as above.
        assert!(unsafe { ctx.destroy(row(2)) }.expect("mprotect works"));
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let (media, parity, ctx) = (&media, &parity, &ctx);
            s.spawn(move || ctx.repair(row(2), true).expect("mprotect works"));
            s.spawn(move || {
                // Give the repair time to start waiting.
                std::thread::sleep(Duration::from_millis(100));
                // SAFETY: as above.
                unsafe { parity.update_new(media, row(1), &[9; 8]) };
                done.send(()).expect("the test waits");
            });
            let finished = wait.recv_timeout(Duration::from_secs(20));
            // The commit's bytes are written: the repair may go on (even if it held up
            // the commit, so that the scope can end).
            // SAFETY: as above.
            unsafe {
                media.write(row(0), &[7; 8]);
            }
            parity.new_written(row(0), 8);
            if finished.is_ok() {
                // SAFETY: as above.
                unsafe { media.write(row(1), &[9; 8]) };
                parity.new_written(row(1), 8);
            }
            assert!(finished.is_ok(), "the commit waited for the repair");
        });
        assert_eq!(ctx.repaired.load(Ordering::Relaxed), 1);
        drop(media);
        std::fs::remove_file(&path).expect("remove");
    }

    #[test]
    fn a_machine_check_during_an_emulated_repair_does_not_hang_the_thread() {
        // A thread repairs an emulated media error (SIGSEGV) and, inside that handler, a
        // SIGBUS (machine check) arrives for another page of the same pool. The nested
        // handler must not spin for ever on the `repairing` word its own outer frame
        // holds. Only a process's main thread may queue a kernel-style siginfo, so the
        // scenario runs in a forked child, whose forking thread is its main thread.
        // Run alone in a process of its own: a fork of this one would inherit the other
        // tests' pools (their mappings hold their files' locks while the child lives).
        const CHILD: &str = "PGL_HANDLER_NESTED_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().expect("exe"))
                .args([
                    "integrity::handler::tests::\
                     a_machine_check_during_an_emulated_repair_does_not_hang_the_thread",
                    "--exact",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .output()
                .expect("run the test alone");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        // What the child would otherwise initialise once per process, done here.
        install();
        let _ = super::super::xor::kernel_name();
        // SAFETY: the child uses only what it creates itself and leaves with `_exit`.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
        if child == 0 {
            let code = std::panic::catch_unwind(nested_machine_check_child).unwrap_or(3);
            // SAFETY: _exit has no preconditions.
            unsafe { libc::_exit(code) };
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child.
            let rc = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
            if rc == child {
                break;
            }
            if std::time::Instant::now() > deadline {
                // SAFETY: our own child.
                unsafe { libc::kill(child, libc::SIGKILL) };
                // SAFETY: as above.
                unsafe { libc::waitpid(child, &mut status, 0) };
                panic!("the child hung");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child failed: status {status:#x} (exit 1: the faulting thread hung in a \
             nested handler)"
        );
    }

    #[test]
    fn closing_after_a_machine_check_outside_the_zones_does_not_panic() {
        // A real machine check (SIGBUS, BUS_MCEERR_AR) on a page before the zones (the
        // header, the lanes) cannot be rebuilt: the handler zero-fills it and records it
        // lost. The pool's close (`unprotect_all`) must cope with a lost page that lies in
        // no zone.
        let geo = GEO;
        let (path, media) = scratch_media("handler-outside");
        let parity = Parity::new(true, 0, &geo);
        let ctx = FaultCtx::new(&media, &parity, geo);
        let page = PAGE;
        assert!(page < geo.zones_offset());
        // What the handler does for a machine check on that page.
        ctx.repair(page, false).expect("mprotect works");
        assert_eq!(ctx.lost.load(Ordering::Relaxed), 1);
        let closed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.unprotect_all(&media)));
        drop(media);
        std::fs::remove_file(&path).expect("remove");
        assert!(closed.is_ok(), "the close panicked");
    }

    #[test]
    fn a_machine_check_on_a_page_repaired_earlier_is_repaired_again() {
        // A page repaired from an emulated error stays in `protected` (so that a thread
        // whose fault on it was delivered late just retries). A real machine check on it later
        // must not take that shortcut: the load would fault again, for ever.
        let geo = GEO;
        let (path, media) = scratch_media("handler-recent");
        let parity = Parity::new(true, 0, &geo);
        let ctx = FaultCtx::new(&media, &parity, geo);
        let slot = register(media.ptr(0), media.reserve(), &ctx).expect("a free slot");
        let p = geo.zone_offset(0) + geo.row_size() + PAGE;
        // SAFETY: a page of zone 0's data rows; nothing else uses the pool.
        assert!(unsafe { ctx.destroy(p) }.expect("mprotect works"));
        // SAFETY: a page of the pool, lost: the handler rebuilds it.
        let _ = unsafe { std::ptr::read_volatile(media.ptr(p)) };
        assert_eq!(ctx.repaired.load(Ordering::Relaxed), 1);
        // A machine check on it, as the kernel reports one (x86-64/aarch64 siginfo layout:
        // si_signo, si_errno, si_code, padding, si_addr), handed to the handler.
        let mut info = [0u64; 16];
        info[0] = libc::SIGBUS as u64;
        info[1] = libc::BUS_MCEERR_AR as u64;
        info[2] = media.ptr(p) as u64;
        on_fault(
            libc::SIGBUS,
            info.as_mut_ptr() as *mut libc::siginfo_t,
            std::ptr::null_mut(),
        );
        let repaired = ctx.repaired.load(Ordering::Relaxed);
        unregister(slot);
        drop(media);
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(
            repaired, 2,
            "the machine check was answered without a repair"
        );
    }

    /// Where the slot tests place their pools: made-up ranges (a lookup only compares
    /// addresses), B's below A's and C's, so that a range torn between a registration and
    /// an unregistration of slot 0 (a start of 0, or A's start with C's end) may hold B's
    /// pages.
    const RANGE: usize = 0x1000_0000;
    const B_BASE: usize = 0x3000_0000;
    const A_BASE: usize = 0x5000_0000;
    const C_BASE: usize = 0x7000_0000;

    #[test]
    fn a_lookup_beside_a_pool_closing_and_another_opening_in_its_slot_finds_the_right_pool() {
        // A page of pool B (slot 1) faults. While the handler looks at slot 0, another
        // thread closes pool A there and opens pool C, which takes the freed slot. The
        // handler must not pair what it read of A (its context, its start) with what it
        // reads of C (its end): a range from A's start to C's end holds B's page, and the
        // handler would repair B's page with A's context, freed by A's close.
        let (path, media) = scratch_media("handler-slot-reuse");
        let parity = Parity::new(true, 0, &GEO);
        let (a, b, c) = (
            FaultCtx::new(&media, &parity, GEO),
            FaultCtx::new(&media, &parity, GEO),
            FaultCtx::new(&media, &parity, GEO),
        );
        // A below B here, so that A's start and C's end span B.
        let registry = [EMPTY; 2];
        assert_eq!(register_in(&registry, B_BASE - RANGE, RANGE, &a), Some(0));
        assert_eq!(register_in(&registry, B_BASE, RANGE, &b), Some(1));
        let churned = AtomicBool::new(false);
        let (reg, c_ref, done) = (&registry, &*c, &churned);
        let found = std::thread::scope(|s| {
            let started = std::cell::Cell::new(false);
            lookup(reg, B_BASE + PAGE as usize, move |i| {
                if i != 0 || started.replace(true) {
                    return;
                }
                s.spawn(move || {
                    unregister_in(reg, 0);
                    assert_eq!(register_in(reg, C_BASE, RANGE, c_ref), Some(0));
                    done.store(true, Ordering::Release);
                });
                // Until the close and open are done, or long enough for them to be
                // waiting for this lookup.
                let deadline = std::time::Instant::now() + Duration::from_millis(500);
                while !done.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
                    std::thread::yield_now();
                }
            })
            .map(|f| f.ctx())
        });
        drop(media);
        std::fs::remove_file(&path).expect("remove");
        assert!(churned.load(Ordering::Acquire), "C was not registered");
        let name = |p: Option<*const FaultCtx>| match p {
            Some(p) if std::ptr::eq(p, &*a) => "A",
            Some(p) if std::ptr::eq(p, &*b) => "B",
            Some(p) if std::ptr::eq(p, &*c) => "C",
            Some(_) => "?",
            None => "none",
        };
        assert_eq!(name(found), "B", "B's page was taken for another pool's");
    }

    #[test]
    fn lookups_beside_pools_closing_and_opening_find_only_the_pool_that_holds_the_address() {
        // Stress: slot 0 is taken by A and C in turn, closed and opened as fast as one
        // thread can, while this one looks up a page of B (slot 1, always registered) and
        // a page of C. A lookup must find B for B's page, and C or nothing for C's page:
        // never a context paired with a range that is not its pool's.
        let (path, media) = scratch_media("handler-slot-stress");
        let parity = Parity::new(true, 0, &GEO);
        let (a, b, c) = (
            FaultCtx::new(&media, &parity, GEO),
            FaultCtx::new(&media, &parity, GEO),
            FaultCtx::new(&media, &parity, GEO),
        );
        let registry = [EMPTY; 2];
        assert_eq!(register_in(&registry, A_BASE, RANGE, &a), Some(0));
        assert_eq!(register_in(&registry, B_BASE, RANGE, &b), Some(1));
        let stop = AtomicBool::new(false);
        let (pa, pb, pc) = (
            &*a as *const FaultCtx,
            &*b as *const FaultCtx,
            &*c as *const FaultCtx,
        );
        let mut wrong = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    unregister_in(&registry, 0);
                    assert_eq!(register_in(&registry, C_BASE, RANGE, &c), Some(0));
                    unregister_in(&registry, 0);
                    assert_eq!(register_in(&registry, A_BASE, RANGE, &a), Some(0));
                }
            });
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            while wrong.is_empty() && std::time::Instant::now() < deadline {
                for _ in 0..1_000 {
                    let in_b = lookup(&registry, B_BASE + PAGE as usize, |_| {}).map(|f| f.ctx());
                    if in_b != Some(pb) {
                        wrong.push(("B's page", in_b));
                    }
                    let in_c = lookup(&registry, C_BASE + PAGE as usize, |_| {}).map(|f| f.ctx());
                    if in_c.is_some_and(|p| p != pc) {
                        wrong.push(("C's page", in_c));
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        drop(media);
        std::fs::remove_file(&path).expect("remove");
        let name = |p: Option<*const FaultCtx>| match p {
            Some(p) if p == pa => "A",
            Some(p) if p == pb => "B",
            Some(p) if p == pc => "C",
            Some(_) => "?",
            None => "none",
        };
        let wrong: Vec<_> = wrong
            .iter()
            .take(8)
            .map(|&(what, p)| (what, name(p)))
            .collect();
        assert!(wrong.is_empty(), "lookups found the wrong pool: {wrong:?}");
    }

    /// A pool of one `GEO` zone registered in a registry of its own, with page `p` lost
    /// and repaired (as one thread's fault on it does), then `POISON_MAX` more repairs of
    /// another page (other threads' faults): what a thread whose fault on `p` is
    /// delivered, or goes on, only now finds. `then` gets the registry, the context and
    /// `p`'s offset; the pool is gone when it returns.
    fn after_many_repairs_since_p<R>(
        name: &str,
        then: impl FnOnce(&[Slot], &FaultCtx, u64) -> R,
    ) -> R {
        let geo = GEO;
        let (path, media) = scratch_media(name);
        let parity = Parity::new(true, 0, &geo);
        let ctx = FaultCtx::new(&media, &parity, geo);
        let registry = [EMPTY; 1];
        let base = media.ptr(0) as usize;
        assert_eq!(
            register_in(&registry, base, media.reserve() as usize, &ctx),
            Some(0)
        );
        let row = |r: u64, col: u64| geo.zone_offset(0) + r * geo.row_size() + col;
        let (p, q) = (row(1, PAGE), row(0, 2 * PAGE));
        // SAFETY: a page of zone 0's data rows; nothing else uses the pool.
        assert!(unsafe { ctx.destroy(p) }.expect("mprotect works"));
        ctx.repair(p, true).expect("mprotect works");
        for _ in 0..POISON_MAX {
            // SAFETY: as above.
            assert!(unsafe { ctx.destroy(q) }.expect("mprotect works"));
            ctx.repair(q, true).expect("mprotect works");
        }
        assert_eq!(ctx.repaired.load(Ordering::Relaxed), 1 + POISON_MAX as u64);
        let out = then(&registry, &ctx, p);
        unregister_in(&registry, 0);
        drop(media);
        std::fs::remove_file(&path).expect("remove");
        out
    }

    #[test]
    fn a_fault_delivered_after_many_repairs_since_its_page_was_repaired_retries_the_load() {
        // One thread's load of lost page p faults; before its handler looks, another
        // thread's fault on p repairs it, and many more repairs follow. The late fault is
        // still an emulated media error, repaired already: the load must retry, not go to
        // the previous handler (which kills the process).
        let (retried, repaired) =
            after_many_repairs_since_p("handler-late-fault", |reg, ctx, p| {
                let addr = reg[0].base.load(Ordering::Relaxed) + p as usize;
                let retried = handle(reg, libc::SIGSEGV, SEGV_ACCERR, addr);
                (retried, ctx.repaired.load(Ordering::Relaxed))
            });
        assert!(retried, "the late fault went to the previous handler");
        assert_eq!(repaired, 1 + POISON_MAX as u64, "p was rebuilt again");
    }

    #[test]
    fn a_repair_that_finds_its_page_repaired_after_many_repairs_does_not_rebuild_it_again() {
        // One thread's fault on lost page p is taken for an emulated error while p is
        // still lost; before its repair starts, another thread's repairs p, and many more
        // repairs follow. The first thread must find p repaired and only retry: a second
        // rebuild counts one media error twice, and rewrites a page in use.
        let repaired = after_many_repairs_since_p("handler-late-repair", |_, ctx, p| {
            ctx.repair(p, true).expect("mprotect works");
            ctx.repaired.load(Ordering::Relaxed)
        });
        assert_eq!(repaired, 1 + POISON_MAX as u64, "p was rebuilt again");
    }

    #[test]
    fn a_history_holds_every_page_added_past_its_first_chunk_and_no_other() {
        let h = History::new();
        let pages: Vec<u64> = (0..3 * HISTORY_CHUNK as u64 + 5)
            .map(|i| i * PAGE)
            .collect();
        std::thread::scope(|s| {
            for half in pages.chunks(pages.len() / 2 + 1) {
                let h = &h;
                s.spawn(move || half.iter().for_each(|&p| h.add(p)));
            }
        });
        h.add(pages[7]); // again: kept once
        let missing: Vec<_> = pages.iter().filter(|&&p| !h.holds(p)).collect();
        assert!(missing.is_empty(), "pages added but not found: {missing:?}");
        let extra = pages.len() as u64 * PAGE;
        assert!(!h.holds(extra), "a page never added was found");
        let mut held = 0;
        let mut chunk = &h;
        loop {
            held += chunk
                .pages
                .iter()
                .filter(|p| p.load(Ordering::Relaxed) != 0)
                .count();
            let next = chunk.next.load(Ordering::Acquire);
            if next.is_null() {
                break;
            }
            // SAFETY: a chunk of `h`'s chain, alive as long as `h`.
            chunk = unsafe { &*next };
        }
        assert_eq!(
            held,
            pages.len(),
            "a page was recorded twice, or not at all"
        );
    }

    /// The forked child of the test above: 0 if both faults were handled.
    fn nested_machine_check_child() -> i32 {
        let geo = GEO;
        let (path, media) = scratch_media(&format!("handler-nested-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        // Leaked: a hung thread keeps using them.
        let media: &'static Media = Box::leak(Box::new(media));
        let parity: &'static Parity = Box::leak(Box::new(Parity::new(true, 0, &geo)));
        let ctx: &'static FaultCtx = Box::leak(FaultCtx::new(media, parity, geo));
        let slot = register(media.ptr(0), media.reserve(), ctx).expect("a free slot");
        let row = |r: u64, col: u64| geo.zone_offset(0) + r * geo.row_size() + col;
        let (p, q) = (row(2, PAGE), row(1, 2 * PAGE));
        // SAFETY: a page of zone 0's data rows; nothing else uses the pool yet.
        assert!(unsafe { ctx.destroy(p) }.expect("mprotect works"));
        // A new object pending in p's column keeps the repair waiting (as a commit would).
        // SAFETY: a page of zone 0's data rows, inside the pool.
        unsafe { parity.update_new(media, row(0, PAGE), &[7; 8]) };
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let pp = media.ptr(p) as usize;
        // The machine check is queued to the process: only the faulting thread may take
        // it, so the main thread blocks SIGBUS (and the other thread unblocks it).
        let bus = || {
            // SAFETY: a zeroed sigset, initialised by sigemptyset.
            let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: a valid sigset.
            unsafe {
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGBUS);
            }
            set
        };
        // SAFETY: a valid sigset; changes this thread's mask only.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &bus(), std::ptr::null_mut()) };
        std::thread::spawn(move || {
            // SAFETY: as above.
            unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &bus(), std::ptr::null_mut()) };
            // SAFETY: gettid has no preconditions.
            tid_tx
                .send(unsafe { libc::gettid() })
                .expect("the test waits");
            // SAFETY: a page of the pool, lost: the handler rebuilds it.
            let v = unsafe { std::ptr::read_volatile(pp as *const u8) };
            done_tx.send(v).expect("the test waits");
        });
        let _tid = tid_rx.recv().expect("the thread runs");
        // The thread is now in the handler, waiting for the pending object.
        std::thread::sleep(Duration::from_millis(200));
        // A machine check on q, as the kernel reports it: SIGBUS, BUS_MCEERR_AR, si_addr.
        // x86-64/aarch64 siginfo layout: si_signo, si_errno, si_code, padding, si_addr.
        let mut info = [0u64; 16];
        info[0] = libc::SIGBUS as u64;
        info[1] = libc::BUS_MCEERR_AR as u64;
        info[2] = media.ptr(q) as u64;
        // (Only a process's main thread may queue a kernel-style siginfo to it.)
        // SAFETY: a 128-byte siginfo buffer; this process.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_rt_sigqueueinfo,
                libc::getpid(),
                libc::SIGBUS,
                info.as_ptr(),
            )
        };
        if rc != 0 {
            return 2;
        }
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: as above.
        unsafe { media.write(row(0, PAGE), &[7; 8]) };
        parity.new_written(row(0, PAGE), 8);
        if done_rx.recv_timeout(Duration::from_secs(10)).is_err() {
            return 1;
        }
        if ctx.repaired.load(Ordering::Relaxed) != 2 {
            return 4;
        }
        unregister(slot);
        0
    }
}
