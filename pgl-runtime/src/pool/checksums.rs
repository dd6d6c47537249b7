//! Recomputing every object's checksum: what opening a pool with `Config::checksums` does
//! when the pool ran without them (header flag NO_CHECKSUMS), so that from then on every
//! checksum matches its object again.
//!
//! Invariant: it runs while the pool opens (nothing else reads or writes it), after
//! recovery; it changes only checksum fields (without parity updates), then recomputes
//! the parity of every zone when the pool keeps parity, all durable at the caller's next
//! fence. Every zone, not just the ones it changed: a crash before the header loses
//! NO_CHECKSUMS makes the next open run it again, which then finds the checksums right
//! and would leave the parity of the first run's changes stale.

use crate::geometry::Geometry;
use crate::heap::layout::{object_checksum, ObjectHeader, HDR_CHECKSUM_OFFSET, HEADER_SIZE};
use crate::heap::ClassTable;
use crate::persist::Media;

/// Recomputes the checksum of every allocated object of the pool's `zones`; returns how
/// many changed. Blocks under a bitmap word that does not verify (their run is out of
/// service) are recomputed too when they hold a plausible header: they may hold objects,
/// which would otherwise be left with checksums no read accepts, and a free block's bytes
/// are nobody's.
///
/// # Safety
/// The zones lie in the pool and nothing else reads or writes it meanwhile.
pub(super) unsafe fn recompute(
    media: &Media,
    geo: &Geometry,
    table: ClassTable,
    zones: u64,
    parity: bool,
) -> u64 {
    let changed = std::cell::Cell::new(0);
    let fix = |hdr: u64, cap: u64| {
        let mut h = [0u8; HEADER_SIZE as usize];
        // SAFETY: a block of a run or a large object inside the pool (the walk's); nothing
        // else runs.
        unsafe { media.read(hdr, &mut h) };
        let h = ObjectHeader::from_bytes(&h);
        if h.size == 0 || h.size > cap {
            // Not an object header (damage, or a block never used): its reads report it;
            // nothing to compute.
            return;
        }
        let off = hdr + HEADER_SIZE;
        // SAFETY: the payload lies in the block (size <= capacity).
        let payload =
            unsafe { std::slice::from_raw_parts(media.ptr(off) as *const u8, h.size as usize) };
        let sum = object_checksum(off, h.type_id, payload);
        if sum != h.checksum {
            let at = hdr + HDR_CHECKSUM_OFFSET;
            // SAFETY: the checksum field of this block's header; nothing else runs.
            unsafe { media.write(at, &sum.to_le_bytes()) };
            media.flush(at, 4);
            changed.set(changed.get() + 1);
        }
    };
    // The damaged words are not kept: their blocks are `fix`ed all the same, and a list
    // of them grows with the runs a chunk table declares (over holes, all their words).
    crate::heap::walk_each(
        geo,
        &crate::heap::SizeClasses::new(geo.chunk_size, table),
        0..zones,
        // SAFETY: heap metadata words inside the pool; nothing else runs (caller).
        |off| unsafe { media.read_u64(off) },
        fix,
        fix,
        |_, _| {},
    );
    if parity {
        for z in 0..zones {
            let data = crate::integrity::zone_extents(media, geo, z);
            // SAFETY: zone `z` lies in the pool; nothing else runs (caller).
            unsafe { crate::integrity::recompute_zone(media, geo, z, &data) };
        }
    }
    changed.get()
}
