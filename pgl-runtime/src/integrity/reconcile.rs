//! After a crash: make a zone's parity agree with its rows again without losing the damage
//! parity could still repair.
//!
//! A crash may leave any subset of the last commits' data and parity lines on media, so a
//! page column of a zone a lane marked dirty may disagree with its parity. Recomputing the
//! parity of every such zone (what a first version did) would also bake any latent damage
//! (a scribble or media error not yet found) into parity, making it unrepairable. Instead,
//! column by column: a column that agrees is left alone; in one that disagrees, every object
//! overlapping it is verified, and one that fails is rebuilt from parity — the bytes an
//! interrupted commit left stale lie elsewhere in the page (parity works byte by byte), so
//! the rebuild is right unless both hit the same bytes, which the object's checksum then
//! tells — and written back; then the column's parity is recomputed from the rows.
//!
//! Invariant: when it returns (after the caller's fence), every page column of the zone
//! agrees with its parity, and no object that verified before was changed.

use super::parity::{parity_page, xor_of_data, zone_extents};
use super::rebuild::rebuild_range;
use crate::geometry::{Geometry, PAGE};
use crate::heap::layout::{object_checksum, ObjectHeader, HEADER_SIZE};
use crate::persist::Media;

/// What reconciling found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reconciled {
    /// Page columns whose parity was recomputed.
    pub columns: u64,
    /// Damaged objects rebuilt from parity and written back (their oids: payload
    /// offsets), in the order they were rebuilt.
    pub rebuilt: Vec<u64>,
    /// Pool pages whose bytes those repairs changed.
    pub pages: u64,
    /// Damaged objects parity could not rebuild (left as they are; reads report them).
    pub unrecoverable: u64,
    /// Those objects, as online repair knows them (`RepairCounters::beyond_repair`), so
    /// that reads and scrubs of the open pool do not count them again.
    pub beyond: Vec<(u64, [u8; 16])>,
}

/// Whether the block at `hdr` (header offset; `capacity` payload bytes) holds a sane header
/// and a payload matching its checksum, in `bytes` (the block's bytes).
pub(crate) fn block_verifies(hdr: u64, capacity: u64, bytes: &[u8]) -> bool {
    let h = ObjectHeader::from_bytes(bytes[..16].try_into().expect("16 bytes"));
    h.size <= capacity
        && object_checksum(
            hdr + HEADER_SIZE,
            h.type_id,
            &bytes[16..16 + h.size as usize],
        ) == h.checksum
}

/// How many pool pages hold a byte that differs between `now` and `rebuilt`, two versions
/// of the bytes at pool offset `start`: the pages a repair writing `rebuilt` changes.
pub(crate) fn changed_pages(start: u64, now: &[u8], rebuilt: &[u8]) -> u64 {
    let mut pages = 0;
    let mut last = None;
    for (i, _) in now
        .iter()
        .zip(rebuilt)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
    {
        let page = (start + i as u64) / PAGE;
        if last != Some(page) {
            pages += 1;
            last = Some(page);
        }
    }
    pages
}

/// Pages of a block whose rebuilt bytes differ from the current ones, up to which
/// `mix_pages` tries every mix (2^this candidates at most).
const MIX_MAX_PAGES: usize = 8;

/// The block at `hdr` (`capacity` payload bytes) with some of its pages taken from
/// `rebuilt` (its bytes rebuilt from parity, which do not verify) and the others from
/// `now` (its bytes in place), the first such mix that verifies; `None` if none does.
///
/// A page column that disagrees with its parity has one damaged page (within what parity
/// rebuilds), which may lie in another row: then this block's page in the column is right
/// as it is, and its rebuild carries the other row's damage. So a block damaged in one
/// column and spanning another damaged elsewhere verifies only with its own damaged pages
/// rebuilt and the others kept.
pub(crate) fn mix_pages(hdr: u64, capacity: u64, now: &[u8], rebuilt: &[u8]) -> Option<Vec<u8>> {
    // The block's pieces in each pool page where the two differ.
    let mut differ = Vec::new();
    let mut from = 0usize;
    while from < now.len() {
        let to = now
            .len()
            .min(from + (PAGE - (hdr + from as u64) % PAGE) as usize);
        if now[from..to] != rebuilt[from..to] {
            differ.push((from, to));
        }
        from = to;
    }
    // Neither nothing nor everything rebuilt: both are known not to verify.
    if differ.len() < 2 || differ.len() > MIX_MAX_PAGES {
        return None;
    }
    let mut mix = now.to_vec();
    (1u32..(1 << differ.len()) - 1).find_map(|mask| {
        for (i, &(a, z)) in differ.iter().enumerate() {
            let src = if mask & (1 << i) != 0 { rebuilt } else { now };
            mix[a..z].copy_from_slice(&src[a..z]);
        }
        block_verifies(hdr, capacity, &mix).then(|| mix.clone())
    })
}

/// Reconciles zone `z` (see the module docs). `objects` lists the allocated blocks of the
/// zone as `(header offset, payload capacity)`, sorted by offset. Issues flushes and one
/// fence per column where it repaired an object; the caller fences at the end.
///
/// # Safety
/// Zone `z` lies in the pool and nothing else reads or writes it meanwhile (the pool is
/// opening).
pub(crate) unsafe fn reconcile_zone(
    media: &Media,
    geo: &Geometry,
    z: u64,
    objects: &[(u64, u64)],
) -> Reconciled {
    let mut out = Reconciled::default();
    let parity_at = geo.parity_offset(z);
    let mut checked = std::collections::HashSet::new();
    // Holes are not read (see `zone_extents`); taken again after each repair, which may
    // have written one.
    let mut data = zone_extents(media, geo, z);
    for col in (0..geo.row_size()).step_by(PAGE as usize) {
        let mut want = xor_of_data(media, geo, z, col, &data);
        // SAFETY: the parity page lies in zone `z` (caller), which nothing else writes; the
        // slice is dropped at once.
        if want[..] == *unsafe { parity_page(media, parity_at + col, &data) } {
            continue;
        }
        let mut fixed = false;
        for r in 0..geo.rows {
            let page = geo.zone_offset(z) + r * geo.row_size() + col;
            // Objects overlapping [page, page + PAGE): blocks do not overlap, so sorted by
            // start they are sorted by end too, and the overlapping ones are the last of
            // those starting before the page's end, back to the first that ends before it.
            let end = objects.partition_point(|&(h, _)| h < page + PAGE);
            for &(hdr, cap) in objects[..end].iter().rev() {
                if hdr + HEADER_SIZE + cap <= page {
                    break;
                }
                if !checked.insert(hdr) {
                    continue;
                }
                let len = HEADER_SIZE + cap;
                let mut now = vec![0u8; len as usize];
                // SAFETY: an allocated block of zone `z` (caller's list).
                unsafe { media.read(hdr, &mut now) };
                if block_verifies(hdr, cap, &now) {
                    continue;
                }
                // SAFETY: as above; reads only.
                let rebuilt = unsafe { rebuild_range(media, geo, hdr, len) }.and_then(|new| {
                    if block_verifies(hdr, cap, &new) {
                        Some(new)
                    } else {
                        mix_pages(hdr, cap, &now, &new)
                    }
                });
                match rebuilt {
                    Some(new) => {
                        for (i, chunk) in new.chunks(PAGE as usize).enumerate() {
                            let at = hdr + (i as u64) * PAGE;
                            let old = &now[i * PAGE as usize..][..chunk.len()];
                            if old != chunk {
                                // SAFETY: the block's bytes; nothing else runs.
                                unsafe { media.write(at, chunk) };
                                media.flush(at, chunk.len() as u64);
                            }
                        }
                        out.rebuilt.push(hdr + HEADER_SIZE);
                        out.pages += changed_pages(hdr, &now, &new);
                        fixed = true;
                    }
                    _ => {
                        out.unrecoverable += 1;
                        let h = now[..16].try_into().expect("16 bytes");
                        out.beyond.push((hdr + HEADER_SIZE, h));
                    }
                }
            }
        }
        if fixed {
            // The repaired bytes are durable before the parity they are recomputed into.
            media.fence();
            data = zone_extents(media, geo, z);
            want = xor_of_data(media, geo, z, col, &data);
        }
        // SAFETY: as above.
        if want[..] != *unsafe { parity_page(media, parity_at + col, &data) } {
            // SAFETY: the parity page of zone `z`; nothing else runs.
            unsafe { media.write(parity_at + col, &want) };
            media.flush(parity_at + col, PAGE);
            out.columns += 1;
        }
    }
    out
}
