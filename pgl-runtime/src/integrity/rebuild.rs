//! Rebuilding lost bytes from zone parity: a data page equals its parity page XOR the same
//! page column of every other data row of its zone (see `parity`). Reads only; what to do
//! with the result (verify it, write it back durably) is the repairer's business.
//!
//! Invariant: when the zone's parity is consistent except for damage confined to one data
//! page per page column, `rebuild_range` returns exactly the bytes the range held before
//! the damage.

use super::xor::xor_into;
use crate::geometry::{Geometry, PAGE};
use crate::persist::Media;

/// The bytes `[off, off + len)` should hold according to parity: each page of the range
/// rebuilt from its parity page and the same column of the zone's other rows. `None` if
/// any part of the range lies outside the zones' data rows (no parity covers it).
///
/// # Safety
/// The zones the range lies in are inside the pool, and nothing writes their data or
/// parity meanwhile (the caller froze commits); stray readers are harmless.
pub(crate) unsafe fn rebuild_range(
    media: &Media,
    geo: &Geometry,
    off: u64,
    len: u64,
) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(len as usize);
    let end = off.checked_add(len)?;
    let mut page = off / PAGE * PAGE;
    while page < end {
        // SAFETY: the caller's contract, page by page.
        let rebuilt = unsafe { rebuild_page(media, geo, page)? };
        let from = off.max(page) - page;
        let to = end.min(page + PAGE) - page;
        out.extend_from_slice(&rebuilt[from as usize..to as usize]);
        page += PAGE;
    }
    Some(out)
}

/// The zone, row and in-row offset of data page `page`, if it lies in a zone's data rows.
pub(crate) fn column_of(geo: &Geometry, page: u64) -> Option<(u64, u64, u64)> {
    let pos = geo.locate(page, u64::MAX)?;
    let row = pos.chunk / geo.chunks_per_row;
    let col = (pos.chunk % geo.chunks_per_row) * geo.chunk_size + pos.within;
    Some((pos.zone, row, col))
}

/// The zone and in-row offset of parity page `page`, if it lies in a zone's parity row.
pub(crate) fn parity_column_of(geo: &Geometry, page: u64) -> Option<(u64, u64)> {
    let rel = page.checked_sub(geo.zones_offset())?;
    let (zone, in_zone) = (rel / geo.zone_size(), rel % geo.zone_size());
    let row = geo.rows * geo.row_size();
    (in_zone >= row).then(|| (zone, in_zone - row))
}

/// Parity page `page` (page aligned, in a zone's parity row) rebuilt from the zone's data
/// rows into `out`, allocating nothing (the media-error handler uses it); false outside
/// the parity rows.
///
/// # Safety
/// As `rebuild_range`.
pub(crate) unsafe fn rebuild_parity_page_into(
    media: &Media,
    geo: &Geometry,
    page: u64,
    out: &mut [u8; PAGE as usize],
) -> bool {
    let Some((zone, col)) = parity_column_of(geo, page) else {
        return false;
    };
    if page + PAGE > media.len() {
        return false;
    }
    // The zone's parity row, its last bytes, lies in the pool (checked just above).
    super::parity::xor_column_into(media, geo, zone, col, out);
    true
}

/// The page at `page` (page aligned, in a zone's data rows) rebuilt from parity; `None`
/// outside the data rows.
///
/// # Safety
/// As `rebuild_range`.
pub(crate) unsafe fn rebuild_page(
    media: &Media,
    geo: &Geometry,
    page: u64,
) -> Option<Box<[u8; PAGE as usize]>> {
    let mut out = Box::new([0u8; PAGE as usize]);
    // SAFETY: the caller's contract.
    unsafe { rebuild_page_into(media, geo, page, &mut out) }.then_some(out)
}

/// `rebuild_page` into `out`, allocating nothing (the media-error handler uses it); false
/// outside the data rows.
///
/// # Safety
/// As `rebuild_range`.
pub(crate) unsafe fn rebuild_page_into(
    media: &Media,
    geo: &Geometry,
    page: u64,
    out: &mut [u8; PAGE as usize],
) -> bool {
    let Some((zone, row, col)) = column_of(geo, page) else {
        return false;
    };
    let parity = geo.parity_offset(zone) + col;
    if parity + PAGE > media.len() {
        return false;
    }
    let read = |at: u64| {
        // SAFETY: a page of `zone`, which lies in the pool (caller; checked for its parity
        // row, the zone's last bytes, just above).
        unsafe { std::slice::from_raw_parts(media.ptr(at) as *const u8, PAGE as usize) }
    };
    out.copy_from_slice(read(parity));
    for r in (0..geo.rows).filter(|&r| r != row) {
        xor_into(
            &mut out[..],
            read(geo.zone_offset(zone) + r * geo.row_size() + col),
        );
    }
    true
}

/// Rebuilds the checked allocation-bitmap word at `at` from parity and, if the rebuilt
/// word verifies (see `heap::layout::bitmap_word`), writes and flushes it (the caller
/// fences); whether it did. One aligned 8-byte store: it lands whole or not at all, and
/// parity already accounts for the rebuilt bytes, so it stays as it is.
///
/// # Safety
/// As for [`rebuild_range`]; besides, nothing reads the word meanwhile relying on its
/// damaged value.
pub(crate) unsafe fn rewrite_bitmap_word(media: &Media, geo: &Geometry, at: u64) -> bool {
    // SAFETY: the caller's.
    let Some(bytes) = (unsafe { rebuild_range(media, geo, at, 8) }) else {
        return false;
    };
    let Ok(word) = <[u8; 8]>::try_from(bytes.as_slice()) else {
        return false;
    };
    if crate::heap::layout::bitmap_bits(at, u64::from_le_bytes(word)).is_none() {
        return false;
    }
    // SAFETY: the caller's; an aligned word inside the pool.
    unsafe { media.write(at, &word) };
    media.flush(at, 8);
    true
}
