//! Zone parity: for every byte offset `i` of a row, the parity row holds
//! `P[i] = XOR over the data rows r of row_r[i]`, so any one lost page of a page column can
//! be rebuilt from the others.
//!
//! Kept at run time by `write` and `update_new`, called for every in-place write to the
//! rows (applied redo entries, new objects, direct metadata stores): they XOR `old ^ new`
//! into the parity bytes under the parity page's stripe lock; the commit then `flush`es
//! them with its data, so they become durable under the same ordering point. Ranges of up to
//! `Config::parity_atomic_max` bytes take the lock shared and XOR with atomic 8-byte
//! `fetch_xor`s, so commits writing other rows of the column go on at once; longer ones
//! take it exclusive and use the vectorised kernel (the crossover `benches/parity.rs`
//! measures). Before a lane first writes a zone in place after the pool was opened, it
//! makes a dirty mark for the zone durable in its lane (one fence, once per lane and
//! zone); after a crash the pool recomputes the parity of the marked zones
//! (`recompute_zone`): XOR is not idempotent, recomputation is, and a crash may have left
//! any subset of a commit's data and parity lines on media.
//!
//! Invariant: outside a commit's apply step, and when no crash intervened since the last
//! recomputation, every zone's parity row equals the XOR of its data rows.

use super::stripe::StripeLock;
use super::xor::{xor_delta_atomic, xor_delta_into, xor_delta_store, xor_into};
use crate::geometry::{Geometry, ZoneMap, PAGE};
use crate::persist::{DataExtents, Media};
use std::sync::atomic::{AtomicU32, Ordering};

/// Lock stripes over parity pages.
const STRIPES: usize = 1024;

/// A stripe of parity pages: its lock, and its new objects in flight.
#[derive(Default)]
pub(crate) struct Stripe {
    /// Shared for small updates (atomic XORs), exclusive for large ones and rebuilds.
    lock: StripeLock,
    /// New objects whose parity is updated but whose bytes are not yet written: until it
    /// is back to 0, rebuilding a page of this stripe's columns would read them half done.
    pending: AtomicU32,
}

impl Stripe {
    /// Takes the stripe exclusive (async-signal-safe: atomics, spinning, `sched_yield`).
    pub(crate) fn lock(&self) {
        self.lock.lock();
    }

    pub(crate) fn unlock(&self) {
        self.lock.unlock();
    }

    /// New objects in flight in this stripe's columns.
    pub(crate) fn pending(&self) -> u32 {
        self.pending.load(Ordering::Acquire)
    }
}

/// The parity engine of one pool: locks that order concurrent updates of the same parity
/// bytes (different rows, same page column).
///
/// Invariant (column quiet): while a thread holds a stripe and its `pending` count is 0,
/// every page column of the stripe agrees with its parity: in-place writes change parity
/// and data under the stripe (`write`), new objects count as pending from their parity
/// update until their bytes are written (`update_new` .. `new_written`).
pub(crate) struct Parity {
    stripes: Box<[Stripe]>,
    /// Whether this pool keeps parity (`Config::parity`); when not, updates do nothing.
    enabled: bool,
    /// Ranges up to this many bytes take the shared path (`Config::parity_atomic_max`).
    atomic_max: usize,
    /// Where each data byte's parity lies.
    map: ZoneMap,
}

impl Parity {
    pub(crate) fn new(enabled: bool, atomic_max: usize, geo: &Geometry) -> Self {
        Parity {
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
            enabled,
            atomic_max,
            map: ZoneMap::new(geo),
        }
    }

    /// Whether parity is kept.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The stripe guarding the parity of parity offset `parity`.
    pub(crate) fn stripe_of(&self, parity: u64) -> &Stripe {
        &self.stripes[(parity / PAGE) as usize % STRIPES]
    }

    /// The offset arithmetic parity uses.
    pub(crate) fn map(&self) -> &ZoneMap {
        &self.map
    }

    /// Writes `new` at `off` in place with its parity update (`old ^ new` XORed into the
    /// parity bytes), both under the stripe, so that the column is never seen half changed
    /// (see the type's invariant). The caller flushes both (`flush`) before its fence.
    /// Without parity, only writes.
    ///
    /// Call it before issuing the commit's flushes: its lock is a locked instruction, which
    /// waits for every earlier flush of this thread to complete, as a fence would.
    ///
    /// # Safety
    /// The range lies inside the pool, and the caller holds what excludes other writers of
    /// it (the object's or metadata word's lock). `new` is the caller's bytes, not the
    /// pool's.
    pub(crate) unsafe fn write(&self, media: &Media, off: u64, new: &[u8]) {
        // SAFETY: the caller's contract.
        unsafe { self.apply(media, off, [&[], new], Then::Write, |_, _| {}) }
    }

    /// `write` of `head` then `data`, one after the other from `off` (an object's checksum
    /// word and the changed range of its payload that starts where the word ends: one
    /// stripe hold for both, where two writes would take it twice). Calls
    /// `parity_range(offset, len)` for each range of parity bytes it updated, for the
    /// caller's flushes.
    ///
    /// # Safety
    /// As `write`, for `[off, off + head.len() + data.len())`.
    pub(crate) unsafe fn write_parts(
        &self,
        media: &Media,
        off: u64,
        head: &[u8],
        data: &[u8],
        parity_range: impl FnMut(u64, u64),
    ) {
        // SAFETY: the caller's contract.
        unsafe { self.apply(media, off, [head, data], Then::Write, parity_range) }
    }

    /// The parity update of a new object's bytes `new`, to be written at `off` later (by
    /// streaming stores, after the commit's other work): counts them as pending in their
    /// stripes until `new_written` says they are written.
    ///
    /// # Safety
    /// The range lies inside the pool, in a block reserved for the caller's transaction.
    pub(crate) unsafe fn update_new(&self, media: &Media, off: u64, new: &[u8]) {
        // SAFETY: the caller's contract.
        unsafe { self.apply(media, off, [&[], new], Then::Pending, |_, _| {}) }
    }

    /// Loads a byte of every page of `[off, off + len)` that parity covers, and of its
    /// parity page, so that a page lost to a media error is rebuilt now. A commit calls it on all its new objects
    /// before the first `update_new`: once one piece counts as pending in a stripe, a fault
    /// on a later piece of the same stripe (the same column one row on, in an object longer
    /// than a row or another new object) would have the handler wait for this very
    /// thread's pending bytes, forever.
    ///
    /// # Safety
    /// The range lies inside the pool.
    pub(crate) unsafe fn touch(&self, media: &Media, off: u64, len: u64) {
        if !self.enabled {
            return;
        }
        // Each piece lies in one data page (see `apply`).
        self.each_page(off, len, |parity, at, n| {
            if let Some(parity) = parity {
                // SAFETY: `at..at + n` lies in the pool (caller), and so does its parity.
                unsafe { touch_lines_of(media, at, parity, n) };
            }
        });
    }

    /// The bytes of `[off, off + len)` announced by `update_new` are written.
    pub(crate) fn new_written(&self, off: u64, len: u64) {
        self.each_parity_range(off, len, |parity, _| {
            let before = self
                .stripe_of(parity)
                .pending
                .fetch_sub(1, Ordering::Release);
            debug_assert!(before > 0, "a new object's bytes announced written twice");
        });
    }

    /// Whether no stripe counts a new object in flight (true whenever no commit runs:
    /// every `update_new` was matched by its `new_written`).
    pub(crate) fn quiet(&self) -> bool {
        self.stripes.iter().all(|s| s.pending() == 0)
    }

    /// Calls `f(parity offset, bytes)` for each piece of `[off, off + len)` that parity
    /// covers (see `each_page`); nothing without parity.
    pub(crate) fn each_parity_range(&self, off: u64, len: u64, mut f: impl FnMut(u64, u64)) {
        if !self.enabled {
            return;
        }
        self.each_page(off, len, |parity, _, n| {
            if let Some(parity) = parity {
                f(parity, n);
            }
        });
    }

    /// Calls `f(parity offset, data offset, bytes)` for each piece of `[off, off + len)`
    /// that lies in one data row and whose parity lies in one page, and
    /// `f(None, data offset, bytes)` for the pieces outside the data rows.
    fn each_page(&self, off: u64, len: u64, mut f: impl FnMut(Option<u64>, u64, u64)) {
        let mut done = 0u64;
        while done < len {
            let at = off + done;
            let Some((parity, room)) = self.map.parity_of(at) else {
                // Not in a data row: as far as the next row (or the end), no parity.
                let n = self.map.room_to_next_row(at).min(len - done).max(1);
                f(None, at, n);
                done += n;
                continue;
            };
            let n = (len - done).min(room).min(PAGE - parity % PAGE);
            f(Some(parity), at, n);
            done += n;
        }
    }

    /// The bytes of `parts`, one after the other from `off`, updated into parity and then
    /// written or counted pending (`then`); `parity_range` is told each parity range
    /// updated.
    ///
    /// # Safety
    /// As `write` / `update_new`, for `[off, off + parts[0].len() + parts[1].len())`; the
    /// parts are the caller's bytes, never the pool's.
    unsafe fn apply(
        &self,
        media: &Media,
        off: u64,
        parts: [&[u8]; 2],
        then: Then,
        mut parity_range: impl FnMut(u64, u64),
    ) {
        let len = (parts[0].len() + parts[1].len()) as u64;
        if !self.enabled {
            if let Then::Write = then {
                pieces(parts, 0, len as usize, |k, bytes| {
                    // SAFETY: the caller's contract.
                    unsafe { media.write(off + k as u64, bytes) }
                });
            }
            return;
        }
        self.each_page(off, len, |parity, at, n| {
            let from = (at - off) as usize;
            let Some(parity) = parity else {
                if let Then::Write = then {
                    pieces(parts, from, n as usize, |k, bytes| {
                        // SAFETY: the caller's contract (no parity covers these bytes).
                        unsafe { media.write(at + k as u64, bytes) }
                    });
                }
                return;
            };
            // Touch every line of the old bytes and of the parity before taking the stripe:
            // a page lost to a media error faults here, where the handler may take the
            // stripe, not under it. Every line, not a byte per page: a real machine check
            // is raised by the first load of the poisoned line itself, not of its page.
            // SAFETY: `at..at + n` lies in the pool (caller), and so does its parity.
            unsafe { touch_lines_of(media, at, parity, n) };
            let stripe = self.stripe_of(parity);
            let small = n as usize <= self.atomic_max;
            if small {
                stripe.lock.lock_shared();
            } else {
                stripe.lock.lock();
            }
            pieces(parts, from, n as usize, |k, bytes| {
                let (at, parity, n) = (at + k as u64, parity + k as u64, bytes.len());
                // SAFETY: `at..at + n` lies in the pool (caller) and in one data row, whose
                // parity `parity..parity + n` lies in the same zone's parity row (a parity
                // page, which holds every word overlapping it). Shared, every access to the
                // stripe's parity bytes is an atomic XOR (exclusive holders are kept out);
                // exclusive, none but ours. The caller excludes writers of the data bytes.
                // The two ranges do not overlap, and `bytes` is the caller's, not the
                // pool's.
                unsafe {
                    match then {
                        Then::Write if !small => {
                            xor_delta_store(media.ptr(parity), media.ptr(at), bytes);
                        }
                        Then::Write => {
                            let old = std::slice::from_raw_parts(media.ptr(at) as *const u8, n);
                            xor_delta_atomic(media.ptr(parity), old, bytes);
                            media.write(at, bytes);
                        }
                        Then::Pending => {
                            let old = std::slice::from_raw_parts(media.ptr(at) as *const u8, n);
                            if small {
                                xor_delta_atomic(media.ptr(parity), old, bytes);
                            } else {
                                let p = std::slice::from_raw_parts_mut(media.ptr(parity), n);
                                xor_delta_into(p, old, bytes);
                            }
                        }
                    }
                }
            });
            if let Then::Pending = then {
                stripe.pending.fetch_add(1, Ordering::Relaxed);
            }
            if small {
                stripe.lock.unlock_shared();
            } else {
                stripe.lock.unlock();
            }
            parity_range(parity, n);
        });
    }

    /// Prefetches the parity bytes of `[off, off + len)`: issued while a commit's log
    /// record drains, so that `write` finds them cached after the fence.
    pub(crate) fn prefetch(&self, media: &Media, off: u64, len: u64) {
        self.each_parity_range(off, len, |parity, n| media.prefetch(parity, n));
    }

    /// Flushes the parity bytes of `[off, off + len)` (updated by `write` or `update_new`).
    pub(crate) fn flush(&self, media: &Media, off: u64, len: u64) {
        self.each_parity_range(off, len, |parity, n| media.flush(parity, n));
    }
}

/// Calls `f(k, bytes)` for the bytes at `from..from + n` of the concatenation of `parts`:
/// one slice or two, `k` bytes into that range.
#[inline(always)]
fn pieces(parts: [&[u8]; 2], from: usize, n: usize, mut f: impl FnMut(usize, &[u8])) {
    let [head, data] = parts;
    let h = head.len();
    if from < h {
        f(0, &head[from..(from + n).min(h)]);
    }
    if from + n > h {
        let start = from.max(h);
        f(start - from, &data[start - h..from + n - h]);
    }
}

/// `touch_lines` of `[at, at + len)` and of its parity `[parity, parity + len)`. The two
/// usually start the same distance into a line (a column's parity sits at the same offset
/// into its chunk): then one walk loads a byte of each line pair.
///
/// # Safety
/// Both ranges lie inside the pool.
#[inline(always)]
unsafe fn touch_lines_of(media: &Media, at: u64, parity: u64, len: u64) {
    if len == 0 {
        return;
    }
    if at % LINE != parity % LINE {
        // SAFETY: the caller's contract.
        unsafe {
            touch_lines(media, at, len);
            touch_lines(media, parity, len);
        }
        return;
    }
    let (data, par) = (media.ptr(at) as *const u8, media.ptr(parity) as *const u8);
    for_each_line_probe(len, at % LINE, |i| {
        // SAFETY: `i < len`, so `data + i` and `par + i` lie in their ranges, inside the
        // pool (the caller's contract).
        unsafe {
            std::ptr::read_volatile(data.add(i as usize));
            std::ptr::read_volatile(par.add(i as usize));
        }
    });
}

/// Loads a byte of every cache line that `[off, off + len)` overlaps, so that a line lost
/// to a media error faults now rather than under a stripe (see `Parity::apply`).
///
/// # Safety
/// The range lies inside the pool.
unsafe fn touch_lines(media: &Media, off: u64, len: u64) {
    if len == 0 {
        return;
    }
    let base = media.ptr(off) as *const u8;
    for_each_line_probe(len, off % LINE, |i| {
        // SAFETY: `i < len`, so `base + i` lies in `[off, off + len)`, inside the pool (the
        // caller's contract).
        unsafe { std::ptr::read_volatile(base.add(i as usize)) };
    });
}

/// Cache line size.
const LINE: u64 = 64;

/// Calls `f(i)` with one index `i < len` in each 64-byte cache line that a range of `len`
/// bytes starting `lead` bytes into a line overlaps.
#[inline(always)]
fn for_each_line_probe(len: u64, lead: u64, mut f: impl FnMut(u64)) {
    f(0);
    let mut i = LINE - lead;
    while i < len {
        f(i);
        i += LINE;
    }
}

/// What `apply` does after the parity update, still under the stripe.
#[derive(Clone, Copy)]
enum Then {
    /// Writes the data.
    Write,
    /// Counts the range as pending (written later).
    Pending,
}

/// The data extents of zone `z` now (see `DataExtents`), for `recompute_zone` and
/// `verify_zone`. Take them where nothing writes the zone until the pass is done; a caller
/// that knows of lost pages adds them (reading one is what repairs it).
pub(crate) fn zone_extents(media: &Media, geo: &Geometry, z: u64) -> DataExtents {
    let at = geo.zone_offset(z);
    media.data_extents(at, at + geo.zone_size())
}

/// Recomputes zone `z`'s parity row from its data rows and flushes what changed (durable
/// at the caller's next fence); returns how many parity pages disagreed with their column
/// (the ones written). `data` holds the zone's data extents (`zone_extents`): holes are
/// not read, and a parity page that is a hole reads as the zeros it holds (writing zeros
/// would allocate it).
///
/// # Safety
/// Zone `z` lies in the pool, and nothing writes it meanwhile (since `data` was taken too).
pub(crate) unsafe fn recompute_zone(
    media: &Media,
    geo: &Geometry,
    z: u64,
    data: &DataExtents,
) -> u64 {
    let at = geo.parity_offset(z);
    let mut changed = 0;
    for col in (0..geo.row_size()).step_by(PAGE as usize) {
        let page = xor_of_data(media, geo, z, col, data);
        let agrees = if data.has_data(at + col, PAGE) {
            // SAFETY: the parity page lies in zone `z` (caller), which nothing writes.
            let have = unsafe {
                std::slice::from_raw_parts(media.ptr(at + col) as *const u8, PAGE as usize)
            };
            page[..] == *have
        } else {
            page == ZERO_PAGE
        };
        if agrees {
            continue;
        }
        // SAFETY: the parity page lies in zone `z` (caller); no one else writes it.
        unsafe { media.write(at + col, &page) };
        media.flush(at + col, PAGE);
        changed += 1;
    }
    changed
}

/// The parity pages of zone `z` that disagree with its data rows (pool offsets). `data`
/// holds the zone's data extents (`zone_extents`): holes are taken as the zeros they read
/// as, not read, so a column that is all holes agrees without a load.
///
/// # Safety
/// As `recompute_zone` (a concurrent commit could make a page disagree for a moment).
pub(crate) unsafe fn verify_zone(
    media: &Media,
    geo: &Geometry,
    z: u64,
    data: &DataExtents,
) -> Vec<u64> {
    let at = geo.parity_offset(z);
    (0..geo.row_size())
        .step_by(PAGE as usize)
        .filter(|&col| {
            let want = xor_of_data(media, geo, z, col, data);
            // SAFETY: the parity page lies in zone `z` (caller), which nothing writes.
            want[..] != *unsafe { parity_page(media, at + col, data) }
        })
        .map(|col| at + col)
        .collect()
}

/// A page of zeros, what a hole reads as.
const ZERO_PAGE: [u8; PAGE as usize] = [0; PAGE as usize];

/// The parity page at `at` as it reads: the zeros of a hole, without a load (which would
/// allocate it on tmpfs), where `data` holds one.
///
/// # Safety
/// The page lies in the pool, and nothing writes it while the slice lives.
pub(super) unsafe fn parity_page<'a>(media: &'a Media, at: u64, data: &DataExtents) -> &'a [u8] {
    if !data.has_data(at, PAGE) {
        return &ZERO_PAGE;
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(media.ptr(at) as *const u8, PAGE as usize) }
}

/// The XOR of page column `col` (a byte offset within a row) over zone `z`'s data rows,
/// one page at a time (memory stays bounded whatever the geometry), reading only the pages
/// `data` holds as data: a hole reads as zeros, so it adds nothing, and a load from it
/// would allocate it on tmpfs.
pub(super) fn xor_of_data(
    media: &Media,
    geo: &Geometry,
    z: u64,
    col: u64,
    data: &DataExtents,
) -> [u8; PAGE as usize] {
    let mut out = ZERO_PAGE;
    for r in 0..geo.rows {
        let off = geo.zone_offset(z) + r * geo.row_size() + col;
        if !data.has_data(off, PAGE) {
            continue;
        }
        // SAFETY: this page of row `r` of zone `z` lies in the pool (the caller's zone
        // does).
        let bytes =
            unsafe { std::slice::from_raw_parts(media.ptr(off) as *const u8, PAGE as usize) };
        xor_into(&mut out[..], bytes);
    }
    out
}

/// The XOR of page column `col` over zone `z`'s data rows, every page read, into `out`,
/// allocating nothing and making no system call (the media-error handler rebuilds a lost
/// parity page with it, into its preallocated buffer).
pub(super) fn xor_column_into(
    media: &Media,
    geo: &Geometry,
    z: u64,
    col: u64,
    out: &mut [u8; PAGE as usize],
) {
    out.fill(0);
    for r in 0..geo.rows {
        let off = geo.zone_offset(z) + r * geo.row_size() + col;
        // SAFETY: this page of row `r` of zone `z` lies in the pool (the caller's zone
        // does).
        let bytes =
            unsafe { std::slice::from_raw_parts(media.ptr(off) as *const u8, PAGE as usize) };
        xor_into(&mut out[..], bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_lands_in_every_line_a_range_overlaps_once_and_inside_it() {
        for off in [0u64, 1, 63, 64, 100, 4095, 4096] {
            for len in [0u64, 1, 2, 63, 64, 65, 127, 128, 129, 4096, 5000] {
                let mut probes = Vec::new();
                if len > 0 {
                    for_each_line_probe(len, off % 64, |i| probes.push(off + i));
                }
                assert!(probes.iter().all(|&p| p >= off && p < off + len));
                let lines: Vec<u64> = probes.iter().map(|p| p / 64).collect();
                let want: Vec<u64> = if len == 0 {
                    Vec::new()
                } else {
                    (off / 64..=(off + len - 1) / 64).collect()
                };
                assert_eq!(lines, want, "off {off} len {len}");
            }
        }
    }

    fn geo() -> Geometry {
        Geometry {
            chunk_size: 16 << 10,
            chunks_per_row: 2,
            rows: 3,
            lanes: 1,
            lane_size: 8192,
        }
    }

    #[test]
    fn parity_of_maps_every_row_to_the_same_column() {
        let g = geo();
        let m = ZoneMap::new(&g);
        let parity_of = |_: &Geometry, off| m.parity_of(off);
        let z1 = g.zone_offset(1);
        let (p0, room0) = parity_of(&g, z1 + 100).unwrap();
        let (p2, room2) = parity_of(&g, z1 + 2 * g.row_size() + 100).unwrap();
        assert_eq!(p0, p2);
        assert_eq!(p0, g.parity_offset(1) + 100);
        assert_eq!(room0, g.row_size() - 100);
        assert_eq!(room0, room2);
        assert_eq!(
            parity_of(&g, g.parity_offset(1) + 5),
            None,
            "parity has no parity"
        );
        assert_eq!(parity_of(&g, 0), None, "the header has none");
    }
}
