//! Zone parity: for every byte offset `i` of a row, the parity row holds
//! `P[i] = XOR over the data rows r of row_r[i]`, so any one lost page of a page column can
//! be rebuilt from the others.
//!
//! Kept at run time by `update`, called before every in-place write to the rows (applied
//! redo entries, new objects, direct metadata stores): it XORs `old ^ new` into the parity
//! bytes under the parity page's lock; the commit then `flush`es them with its data, so
//! they become durable under the same ordering point. Every update takes the lock, even
//! for one word: `ATOMIC_XOR_MAX_BYTES` records where atomics would pay (16 bytes), a
//! path not built yet. Before a lane first writes a zone in place after the
//! pool was opened, it makes a dirty mark for the zone durable in its lane (one fence, once
//! per lane and zone); after a crash the pool recomputes the parity of the marked zones
//! (`recompute_zone`): XOR is not idempotent, recomputation is, and a crash may have left
//! any subset of a commit's data and parity lines on media.
//!
//! Invariant: outside a commit's apply step, and when no crash intervened since the last
//! recomputation, every zone's parity row equals the XOR of its data rows.

use super::xor::{xor_delta_into, xor_into};
use crate::geometry::{Geometry, ZoneMap, PAGE};
use crate::persist::Media;
use parking_lot::lock_api::RawMutex as _;
use parking_lot::RawMutex;

/// Lock stripes over parity pages.
const STRIPES: usize = 1024;

/// The parity engine of one pool: locks that order concurrent updates of the same parity
/// bytes (different rows, same page column).
pub(crate) struct Parity {
    stripes: Box<[RawMutex]>,
    /// Whether this pool keeps parity (`Config::parity`); when not, updates do nothing.
    enabled: bool,
    /// Where each data byte's parity lies.
    map: ZoneMap,
}

impl Parity {
    pub(crate) fn new(enabled: bool, geo: &Geometry) -> Self {
        Parity {
            stripes: (0..STRIPES).map(|_| RawMutex::INIT).collect(),
            enabled,
            map: ZoneMap::new(geo),
        }
    }

    /// Whether parity is kept.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// XORs `old ^ new` into the parity of `[off, off + new.len())`, where `old` is what
    /// the pool holds there now; the caller then writes `new`, and flushes both (`flush`)
    /// before its fence. Ranges outside the zones' data rows have no parity and are skipped.
    ///
    /// Call it before issuing the commit's flushes: its lock is a locked instruction, which
    /// waits for every earlier flush of this thread to complete, as a fence would.
    ///
    /// # Safety
    /// The range lies inside the pool, and the caller holds what excludes other writers of
    /// it (the object's or metadata word's lock, or the block's reservation) until it has
    /// written `new`.
    pub(crate) unsafe fn update(&self, media: &Media, off: u64, new: &[u8]) {
        if !self.enabled {
            return;
        }
        let mut done = 0usize;
        while done < new.len() {
            let at = off + done as u64;
            let Some((parity, room)) = self.map.parity_of(at) else {
                // Not in a data row: as far as the next row (or the end), nothing to do.
                done += (self.map.room_to_next_row(at) as usize)
                    .min(new.len() - done)
                    .max(1);
                continue;
            };
            // One parity page at a time, each under its stripe.
            let in_page = (PAGE - parity % PAGE) as usize;
            let n = (new.len() - done).min(room as usize).min(in_page);
            let stripe = &self.stripes[(parity / PAGE) as usize % STRIPES];
            stripe.lock();
            // SAFETY: `at..at + n` lies in the pool (caller) and in one data row, whose
            // parity `parity..parity + n` lies in the same zone's parity row; the stripe
            // lock excludes every other updater of these parity bytes, and the caller
            // excludes writers of the data bytes. The two ranges do not overlap.
            unsafe {
                let p = std::slice::from_raw_parts_mut(media.ptr(parity), n);
                let old = std::slice::from_raw_parts(media.ptr(at) as *const u8, n);
                xor_delta_into(p, old, &new[done..done + n]);
            }
            // SAFETY: locked just above by this thread.
            unsafe { stripe.unlock() };
            done += n;
        }
    }

    /// Flushes the parity bytes of `[off, off + len)` (updated by `update`).
    pub(crate) fn flush(&self, media: &Media, off: u64, len: u64) {
        if !self.enabled {
            return;
        }
        let mut done = 0u64;
        while done < len {
            let at = off + done;
            match self.map.parity_of(at) {
                Some((parity, room)) => {
                    let n = (len - done).min(room);
                    media.flush(parity, n);
                    done += n;
                }
                None => done += self.map.room_to_next_row(at).min(len - done).max(1),
            }
        }
    }
}

/// Recomputes zone `z`'s parity row from its data rows and flushes it (durable at the
/// caller's next fence).
///
/// # Safety
/// Zone `z` lies in the pool, and nothing writes it meanwhile.
pub(crate) unsafe fn recompute_zone(media: &Media, geo: &Geometry, z: u64) {
    let at = geo.parity_offset(z);
    for col in (0..geo.row_size()).step_by(PAGE as usize) {
        let page = xor_of_column(media, geo, z, col);
        // SAFETY: the parity page lies in zone `z` (caller); no one else writes it.
        unsafe { media.write(at + col, &page) };
        media.flush(at + col, PAGE);
    }
}

/// The parity pages of zone `z` that disagree with its data rows (pool offsets).
///
/// # Safety
/// As `recompute_zone` (a concurrent commit could make a page disagree for a moment).
pub(crate) unsafe fn verify_zone(media: &Media, geo: &Geometry, z: u64) -> Vec<u64> {
    let at = geo.parity_offset(z);
    (0..geo.row_size())
        .step_by(PAGE as usize)
        .filter(|&col| {
            let want = xor_of_column(media, geo, z, col);
            // SAFETY: the parity page lies in zone `z` (caller).
            let have = unsafe {
                std::slice::from_raw_parts(media.ptr(at + col) as *const u8, PAGE as usize)
            };
            want[..] != *have
        })
        .map(|col| at + col)
        .collect()
}

/// The XOR of page column `col` (a byte offset within a row) over zone `z`'s data rows:
/// one page at a time, so that memory stays bounded whatever the geometry.
pub(super) fn xor_of_column(
    media: &Media,
    geo: &Geometry,
    z: u64,
    col: u64,
) -> [u8; PAGE as usize] {
    let mut page = [0u8; PAGE as usize];
    for r in 0..geo.rows {
        let off = geo.zone_offset(z) + r * geo.row_size() + col;
        // SAFETY: this page of row `r` of zone `z` lies in the pool (the caller's zone
        // does).
        let bytes =
            unsafe { std::slice::from_raw_parts(media.ptr(off) as *const u8, PAGE as usize) };
        xor_into(&mut page, bytes);
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

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
