//! Zone metadata replicas: every zone's metadata (root word, chunk table, type registry)
//! is kept as two copies in chunk 0, A at its start and B at its middle (other page
//! columns), each with a checksum word (`heap::layout`). Commits write both copies and
//! patch both checksums in the same redo record (`tx::commit`); opening a pool verifies
//! them here and rewrites a damaged copy from the other.
//!
//! The stored checksum is the Adler-32 of the copy with its checksum word read as zero,
//! XOR the Adler-32 of as many zero bytes: a zeroed copy (a new zone) is valid as it is.
//!
//! Invariant: outside a commit's apply step the two copies are equal and each verifies,
//! unless damaged; a copy is only ever rewritten with the other's bytes, which parity
//! already accounts for (damage never updated parity), so a repair changes no parity.

use crate::checksum::{adler32, adler32_continue, adler32_patch};
use crate::geometry::Geometry;
use crate::heap::layout::{meta_copy_offset, meta_len, META_SUM_OFFSET};
use crate::persist::Media;
use crate::{Error, Result};

/// The Adler-32 of `len` zero bytes.
const fn zero_sum(len: usize) -> u32 {
    (((len % 65_521) as u32) << 16) | 1
}

/// The checksum word a copy with bytes `copy` should hold.
pub(crate) fn stored_sum(copy: &[u8]) -> u64 {
    let at = META_SUM_OFFSET as usize;
    let real = adler32_continue(
        adler32_continue(adler32(&copy[..at]), &[0u8; 8]),
        &copy[at + 8..],
    );
    u64::from(real ^ zero_sum(copy.len()))
}

/// The checksum word of a copy of `len` bytes whose checksum word was `stored`, after the
/// word at `pos` changed from `old` to `new` (garbage in, garbage out: a damaged
/// checksum stays wrong).
pub(crate) fn patch(stored: u64, len: usize, pos: usize, old: u64, new: u64) -> u64 {
    let z = zero_sum(len);
    let real = (stored as u32) ^ z;
    let real = adler32_patch(real, len, pos, &old.to_le_bytes(), &new.to_le_bytes());
    // A damaged word's high half stays: the result then never verifies.
    (stored & !0xffff_ffff) | u64::from(real ^ z)
}

/// Whether `copy` holds the checksum it should.
pub(crate) fn verifies(copy: &[u8]) -> bool {
    let at = META_SUM_OFFSET as usize;
    let word = u64::from_le_bytes(copy[at..at + 8].try_into().expect("8 bytes"));
    word == stored_sum(copy)
}

/// The zone base (chunk 0's offset) whose metadata copy A holds the word at `off`, and
/// the copy's length, if any.
pub(crate) fn zone_of_meta(geo: &Geometry, off: u64) -> Option<(u64, usize)> {
    let rel = off.checked_sub(geo.zones_offset())?;
    let (zone, within) = (rel / geo.zone_size(), rel % geo.zone_size());
    let len = meta_len(geo, zone);
    (within < len).then(|| (off - within, len as usize))
}

/// The state of one zone's metadata copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Copies {
    /// Both verify and agree.
    Sound,
    /// One was damaged; `fixed` if it was rewritten from the other.
    OneBad { fixed: bool },
    /// Neither verified; both were rebuilt from parity.
    BothRebuilt,
    /// Neither verifies (nor, when repairing, could be rebuilt).
    BothBad,
}

/// Verifies both metadata copies of zone `z`; with `repair`, rewrites a damaged one from
/// the other (flushed; durable at the caller's next fence). When both are damaged and
/// `parity` says the zone's parity can be trusted, each copy is rebuilt from parity (the
/// copies lie in other page columns) and the first that verifies is written to both. A
/// rewrite changes no parity: the good bytes are the ones parity accounts for (damage
/// never updated it).
///
/// # Safety
/// Zone `z` lies in the pool, and nothing else reads or writes it meanwhile (the pool
/// opens, or is frozen with every metadata lock held).
pub(crate) unsafe fn check_zone(
    media: &Media,
    geo: &Geometry,
    z: u64,
    repair: bool,
    parity: bool,
) -> Copies {
    let len = meta_len(geo, z) as usize;
    let a_off = geo.chunk_offset(z, 0);
    let b_off = a_off + meta_copy_offset(geo);
    // SAFETY: both copies lie in zone `z`'s metadata chunk (caller); nothing writes.
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(media.ptr(a_off) as *const u8, len),
            std::slice::from_raw_parts(media.ptr(b_off) as *const u8, len),
        )
    };
    let (to, from) = match (verifies(a), verifies(b)) {
        (true, true) if a == b => return Copies::Sound,
        // Both verify but differ. A zeroed copy verifies by design (a new zone's copies
        // are zeros), so one that is all zeros beside a different valid one is the
        // damaged one (a lost page zeroed); never copied over the other.
        (true, true) if a.iter().all(|&x| x == 0) => (a_off, b.to_vec()),
        // Equal checksums over different bytes: not one of our states; A is the copy the
        // heap reads.
        (true, _) => (b_off, a.to_vec()),
        (false, true) => (a_off, b.to_vec()),
        (false, false) => {
            if !(repair && parity) {
                return Copies::BothBad;
            }
            let rebuilt = [a_off, b_off].into_iter().find_map(|off| {
                // SAFETY: the copy lies in zone `z`'s data row 0; nothing writes (caller).
                unsafe { super::rebuild_range(media, geo, off, len as u64) }
                    .filter(|bytes| verifies(bytes))
            });
            let Some(good) = rebuilt else {
                return Copies::BothBad;
            };
            for off in [a_off, b_off] {
                // SAFETY: the zone's metadata copies; nothing else uses them (caller).
                unsafe { media.write(off, &good) };
                media.flush(off, len as u64);
            }
            return Copies::BothRebuilt;
        }
    };
    if repair {
        // SAFETY: the damaged copy's bytes, in the pool; nothing else uses them (caller).
        unsafe { media.write(to, &from) };
        media.flush(to, len as u64);
    }
    Copies::OneBad { fixed: repair }
}

/// The error of a zone whose metadata copies are both damaged.
pub(crate) fn both_bad(geo: &Geometry, z: u64) -> Error {
    let a = geo.chunk_offset(z, 0);
    let b = a + meta_copy_offset(geo);
    Error::Corrupt {
        what: "zone metadata",
        offset: a,
        detail: format!(
            "both copies of zone {z}'s metadata (at {a:#x} and {b:#x}) fail their \
             checksums: the chunk table cannot be trusted; restore the pool from a backup"
        ),
        pool_file: None,
    }
}

/// Verifies both metadata copies of every zone and rewrites a damaged one from the other
/// (flushed; durable at the caller's next fence); returns the zones it rewrote a copy in
/// and how many copies it rewrote (two where both were rebuilt from parity). Their parity
/// is the caller's to reconcile: a commit over a damaged word computed its parity update
/// from the damaged bytes. `Error::Corrupt` if both copies of a zone are damaged.
///
/// # Safety
/// The zones lie in the pool and nothing else reads or writes it meanwhile (it opens).
pub(crate) unsafe fn check_zones(
    media: &Media,
    geo: &Geometry,
    zones: u64,
    parity: bool,
) -> Result<(Vec<u64>, u64)> {
    let (mut repaired, mut copies) = (Vec::new(), 0);
    for z in 0..zones {
        // SAFETY: the caller's contract.
        copies += match unsafe { check_zone(media, geo, z, true, parity) } {
            Copies::Sound => continue,
            Copies::OneBad { .. } => 1,
            Copies::BothRebuilt => 2,
            Copies::BothBad => return Err(both_bad(geo, z)),
        };
        repaired.push(z);
    }
    Ok((repaired, copies))
}

/// Makes copy B of every zone a copy of A and writes both checksums (a pool of a format
/// without replicas; damage copy A had then is copied too). Parity is not updated: the
/// caller has made durable that the pool's parity is not kept, so that it is recomputed
/// (a delta XORed in would not survive a crash halfway: the rerun would apply it twice).
/// Flushed; durable at the caller's next fence. Idempotent.
///
/// # Safety
/// As for `check_zones`.
pub(crate) unsafe fn create_replicas(media: &Media, geo: &Geometry, zones: u64) {
    let sum_at = META_SUM_OFFSET as usize;
    for z in 0..zones {
        let len = meta_len(geo, z) as usize;
        let a_off = geo.chunk_offset(z, 0);
        let b_off = a_off + meta_copy_offset(geo);
        // SAFETY: copy A lies in zone `z`'s metadata chunk; nothing writes meanwhile.
        let mut copy =
            unsafe { std::slice::from_raw_parts(media.ptr(a_off) as *const u8, len) }.to_vec();
        let sum = stored_sum(&copy);
        copy[sum_at..sum_at + 8].copy_from_slice(&sum.to_le_bytes());
        for off in [a_off, b_off] {
            // SAFETY: a metadata copy of zone `z`; nothing else runs.
            unsafe { media.write(off, &copy) };
            media.flush(off, len as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zeroed_copy_verifies_and_patches_track_full_recomputation() {
        let mut copy = vec![0u8; 3000];
        assert!(verifies(&copy), "a new zone needs no initialisation");
        let mut sum = 0u64;
        for (i, pos) in [0usize, 1024, 1032, 2992, 16].into_iter().enumerate() {
            let new = 0x0101_0101_0101_0101u64.wrapping_mul(i as u64 + 3);
            let old = u64::from_le_bytes(copy[pos..pos + 8].try_into().unwrap());
            sum = patch(sum, copy.len(), pos, old, new);
            copy[pos..pos + 8].copy_from_slice(&new.to_le_bytes());
            copy[8..16].copy_from_slice(&sum.to_le_bytes());
            assert_eq!(sum, stored_sum(&copy), "after changing the word at {pos}");
            assert!(verifies(&copy));
        }
        copy[2000] ^= 1;
        assert!(!verifies(&copy), "a flipped bit is caught");
        copy[2000] ^= 1;
        copy[12] = 1;
        assert!(
            !verifies(&copy),
            "so is damage to the checksum word's high half"
        );
    }
}
