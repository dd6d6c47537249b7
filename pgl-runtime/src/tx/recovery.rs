//! Crash recovery: replay every committed, unretired redo record in global sequence order,
//! then retire them.
//!
//! Invariant: replay is physical (offset, bytes), hence idempotent: a crash during recovery
//! is recovered by running it again.

use super::record::{self, RETIRED_OFFSET};
use crate::geometry::Geometry;
use crate::persist::Media;
use crate::{Error, Result};

/// What recovery found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// Records replayed.
    pub replayed: u64,
    /// Sealed records discarded because a new object they created had not reached media
    /// (the transaction's commit fence never completed, so it was never acknowledged).
    pub discarded: u64,
    /// The highest sequence number seen anywhere (the next commit uses a larger one).
    pub max_seq: u64,
}

/// Replays the lanes of the pool on `media` whose data area is `[zones_offset, pool_len)`.
pub(crate) fn recover(media: &Media, geo: &Geometry, pool_len: u64) -> Result<Recovered> {
    let mut out = Recovered::default();
    let mut todo = Vec::new();
    for lane in 0..geo.lanes {
        let mut best: Option<(record::Record, u64)> = None; // (record, copy)
        let mut retired = 0;
        for copy in 0..2 {
            let bytes = lane_bytes(media, geo, lane, copy);
            retired = retired.max(record::retired(bytes));
            if let Some(r) = record::decode(bytes) {
                out.max_seq = out.max_seq.max(r.seq);
                if best.is_none_or(|(b, _)| r.seq > b.seq) {
                    best = Some((r, copy));
                }
            }
        }
        out.max_seq = out.max_seq.max(retired);
        if let Some((rec, copy)) = best {
            if rec.seq > retired {
                todo.push((rec.seq, lane, copy, rec));
            }
        }
    }
    todo.sort_unstable_by_key(|t| t.0);
    // Every candidate is retired at the end, replayed or not: a discarded record must never
    // verify later, when a new object with the same bytes may stand where its own did not.
    for &(_, lane, copy, rec) in &todo {
        let off = geo.lane_offset(lane, copy);
        let bytes = lane_bytes(media, geo, lane, copy);
        // Checked only now, after every older record was replayed: an older record whose
        // retire mark did not reach media may have overwritten this record's new object (its
        // chunk was reused), which means this record's own fence never completed.
        if !new_objects_verify(media, geo, pool_len, bytes, &rec) {
            out.discarded += 1;
            continue;
        }
        for e in record::entries(bytes, &rec) {
            let e = e.ok_or(Error::Corrupt {
                what: "redo record",
                offset: off,
                detail: "malformed entry".into(),
                pool_file: None,
            })?;
            let (dst, data, sum) = match e.op() {
                record::Op::Write {
                    off: dst,
                    data,
                    sum,
                } => (dst, data, sum),
                record::Op::Zero { off: dst, len } => {
                    check_target(geo, pool_len, off, dst, len)?;
                    // SAFETY: the target range lies inside the heap (checked above);
                    // recovery runs alone.
                    unsafe { media.write_zeros(dst, len) };
                    media.flush(dst, len);
                    continue;
                }
                record::Op::New { .. } => continue,
            };
            let sum = sum.as_ref().map(|(at, bytes)| (*at, &bytes[..]));
            for (dst, data) in std::iter::once((dst, data)).chain(sum) {
                check_target(geo, pool_len, off, dst, data.len() as u64)?;
                // SAFETY: the target range lies inside the heap (checked above); recovery
                // runs alone.
                unsafe { media.write(dst, data) };
                media.flush(dst, data.len() as u64);
            }
        }
        out.replayed += 1;
    }
    if !todo.is_empty() {
        media.fence();
        // Retiring a record whose replay did not reach media would lose it for good.
        media.check()?;
        for &(seq, lane, _, _) in &todo {
            for copy in 0..2 {
                let off = geo.lane_offset(lane, copy) + RETIRED_OFFSET as u64;
                // SAFETY: the retire mark of a lane inside the pool; recovery runs alone.
                unsafe { media.write(off, &record::retire_mark(seq)) };
                media.flush(off, 16);
            }
        }
        media.fence();
    }
    Ok(out)
}

/// Checks that a replayed entry of the record in the lane at `lane` targets `[dst, dst +
/// len)` inside the heap.
fn check_target(geo: &Geometry, pool_len: u64, lane: u64, dst: u64, len: u64) -> Result<()> {
    let end = dst.checked_add(len);
    if dst < geo.zones_offset() || end.is_none_or(|e| e > pool_len) {
        return Err(Error::Corrupt {
            what: "redo record",
            offset: lane,
            detail: format!(
                "entry targets {dst:#x}+{len}, outside the heap; the record verifies, so this \
                 is a bug or a deliberate forgery"
            ),
            pool_file: None,
        });
    }
    Ok(())
}

/// Whether every object the record created is on media as the record describes it.
fn new_objects_verify(
    media: &Media,
    geo: &Geometry,
    pool_len: u64,
    lane: &[u8],
    rec: &record::Record,
) -> bool {
    for e in record::entries(lane, rec) {
        let Some(e) = e else { return false };
        let record::Op::New {
            hdr,
            size,
            crc,
            header,
        } = e.op()
        else {
            continue;
        };
        let end = hdr.checked_add(16).and_then(|v| v.checked_add(size));
        if hdr < geo.zones_offset() || end.is_none_or(|v| v > pool_len) {
            return false;
        }
        // SAFETY: the object's range lies inside the heap (checked above); recovery runs
        // alone.
        let found =
            unsafe { std::slice::from_raw_parts(media.ptr(hdr) as *const u8, 16 + size as usize) };
        if header.is_some_and(|h| found[..16] != h) || crate::checksum::strong(found) != crc {
            return false;
        }
    }
    true
}

/// Makes the two copies of every lane equal again, rewriting a copy that differs (a
/// scribble, a media error, a write a crash tore) from the better one: the one whose record
/// verifies with the newer sequence number, else the one with the newer valid retire mark,
/// else copy A. Returns the number of copies rewritten (flushed; durable at the caller's
/// next fence). Run it after `recover`, which reads the best of both copies anyway.
pub(crate) fn repair_lanes(media: &Media, geo: &Geometry) -> u64 {
    let mut fixed = 0;
    for lane in 0..geo.lanes {
        let (a, b) = (
            lane_bytes(media, geo, lane, 0),
            lane_bytes(media, geo, lane, 1),
        );
        if a == b {
            continue;
        }
        let key = |bytes: &[u8]| {
            (
                record::decode(bytes).map_or(0, |r| r.seq),
                record::retired(bytes),
            )
        };
        let (good, bad) = if key(b) > key(a) { (1, 0) } else { (0, 1) };
        let src = lane_bytes(media, geo, lane, good).to_vec();
        let off = geo.lane_offset(lane, bad);
        // SAFETY: lane copy `bad` lies inside the pool; nothing else writes lanes while the
        // pool opens.
        unsafe { media.write(off, &src) };
        media.flush(off, geo.lane_size);
        fixed += 1;
    }
    fixed
}

/// The bytes of one lane copy.
fn lane_bytes<'a>(media: &'a Media, geo: &Geometry, lane: u64, copy: u64) -> &'a [u8] {
    let off = geo.lane_offset(lane, copy);
    // SAFETY: the lane lies inside the pool (checked against the file size when the header
    // was validated), and nothing writes lanes while recovery runs: replay targets only the
    // heap, whose offsets start past every lane.
    unsafe { std::slice::from_raw_parts(media.ptr(off) as *const u8, geo.lane_size as usize) }
}

/// The zones some lane marked dirty (wrote in place) since the pool was last opened, as
/// `zone % DIRTY_BITS` bits: the union over every lane and both copies, so a torn copy
/// only adds zones.
pub(crate) fn dirty_zones(media: &Media, geo: &Geometry) -> record::DirtyZones {
    let mut bits = record::DirtyZones::default();
    for lane in 0..geo.lanes {
        for copy in 0..2 {
            let b = &lane_bytes(media, geo, lane, copy)[record::DIRTY_OFFSET..];
            for (i, w) in bits.iter_mut().enumerate() {
                let mut a = [0u8; 8];
                a.copy_from_slice(&b[i * 8..i * 8 + 8]);
                *w |= u64::from_le_bytes(a);
            }
        }
    }
    bits
}

/// Whether zone `z` is among `bits` (see `dirty_zones`).
pub(crate) fn zone_is_dirty(bits: &record::DirtyZones, z: u64) -> bool {
    let (word, mask) = record::dirty_bit(z);
    bits[word] & mask != 0
}

/// Clears every lane's dirty-zone bits (flushed; durable at the caller's next fence).
pub(crate) fn clear_dirty_zones(media: &Media, geo: &Geometry) {
    for lane in 0..geo.lanes {
        for copy in 0..2 {
            let off = geo.lane_offset(lane, copy) + record::DIRTY_OFFSET as u64;
            // SAFETY: the lane's first line lies inside the pool; nothing else writes lanes
            // while the pool opens or closes.
            unsafe { media.write(off, &[0u8; record::DIRTY_BYTES]) };
            media.flush(off, record::DIRTY_BYTES as u64);
        }
    }
}
