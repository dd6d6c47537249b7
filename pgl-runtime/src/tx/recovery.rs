//! Crash recovery: replay every committed, unretired redo record in global sequence order,
//! then retire them.
//!
//! Invariant: replay is physical (offset, bytes), hence idempotent: a crash during recovery
//! is recovered by running it again. When it returns, every retire mark it went by is
//! durable: the session that follows starts with no lane's mark pending (`Lanes`), so none
//! is flushed again before commits of other lanes overwrite the bytes its record covers.

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
            // A process killed without a clean close leaves its last marks in the caches,
            // where this open reads them, not on media (see the module docs).
            media.flush(geo.lane_offset(lane, copy) + RETIRED_OFFSET as u64, 16);
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
                    // A commit zeroes a new run's bitmap, inside its chunk. The record's
                    // own size does not bound this entry's: one naming a whole sparse pool
                    // would have it all written (allocated) before the pool opened.
                    if dst % geo.chunk_size + len > geo.chunk_size {
                        return Err(Error::Corrupt {
                            what: "redo record",
                            offset: off,
                            detail: format!(
                                "an entry zeroes {dst:#x}+{len}, across a chunk boundary (a \
                                 commit zeroes only a run's bitmap, inside its chunk); the \
                                 record verifies, so this is a bug or a deliberate forgery"
                            ),
                            pool_file: None,
                        });
                    }
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
    // The marks read above and the replayed bytes.
    media.fence();
    if !todo.is_empty() {
        // Retiring a record whose replay did not reach media would lose it for good.
        media.check()?;
        // Oldest first, each record's marks durable before the next one's: a crash here
        // must leave the retired records a prefix of `todo` in sequence order. Were a newer
        // record retired and an older one not, the next open would replay the older one
        // alone, over the bytes the newer one wrote after it.
        for &(seq, lane, _, _) in &todo {
            for copy in 0..2 {
                let off = geo.lane_offset(lane, copy) + RETIRED_OFFSET as u64;
                // SAFETY: the retire mark of a lane inside the pool; recovery runs alone.
                unsafe { media.write(off, &record::retire_mark(seq)) };
                media.flush(off, 16);
            }
            media.fence();
        }
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
///
/// In time and memory linear in the record (whatever its entries say, short of the bytes
/// of the objects themselves, which are hashed in place, never copied): the writes that
/// land in new objects are gathered once (`Overlay`), and new objects must be disjoint, as
/// the blocks a commit allocates are, so each byte of the pool is hashed at most once. A
/// record whose new objects overlap or leave the heap is no commit's: it does not verify.
fn new_objects_verify(
    media: &Media,
    geo: &Geometry,
    pool_len: u64,
    lane: &[u8],
    rec: &record::Record,
) -> bool {
    // (header offset, end, crc, header copy of a format-5 verify entry)
    let mut news = Vec::new();
    for e in record::entries(lane, rec) {
        let Some(e) = e else { return false };
        if let record::Op::New {
            hdr,
            size,
            crc,
            header,
        } = e.op()
        {
            let end = hdr.checked_add(16).and_then(|v| v.checked_add(size));
            match end {
                Some(end) if hdr >= geo.zones_offset() && end <= pool_len => {
                    news.push((hdr, end, crc, header))
                }
                _ => return false,
            }
        }
    }
    if news.is_empty() {
        return true;
    }
    news.sort_unstable_by_key(|n| n.0);
    if news.windows(2).any(|w| w[0].1 > w[1].0) {
        return false;
    }
    // The record's writes, in entry order (a later one wins), where they land in a new
    // object: bytes of its space that were not free on media before the commit (an empty
    // run's bitmap, see `commit::Guard`) are in the record's writes, not yet applied.
    let mut overlay = Overlay::default();
    for w in record::entries(lane, rec) {
        let Some(record::Op::Write { off, data, .. }) = w.map(|w| w.op()) else {
            continue;
        };
        // Saturating: only a forged record that still verifies could end past 2^64.
        let end = off.saturating_add(data.len() as u64);
        // The new objects it meets: those ending past `off`, from the first on, while
        // they start before `end`.
        let from = news.partition_point(|n| n.1 <= off);
        for &(hdr, obj_end, ..) in news[from..].iter().take_while(|n| n.0 < end) {
            let (a, z) = (off.max(hdr), end.min(obj_end));
            overlay.put(a, &data[(a - off) as usize..(z - off) as usize]);
        }
    }
    for &(hdr, end, crc, header) in &news {
        // SAFETY: the object's range lies inside the heap (checked above); recovery runs
        // alone.
        let on_media = unsafe {
            std::slice::from_raw_parts(media.ptr(hdr) as *const u8, (end - hdr) as usize)
        };
        let mut sum = crate::checksum::Strong::new();
        let mut first = [0u8; 16];
        let mut at = hdr;
        overlay.read(hdr, on_media, |piece| {
            if at < hdr + 16 {
                let n = piece.len().min((hdr + 16 - at) as usize);
                let i = (at - hdr) as usize;
                first[i..i + n].copy_from_slice(&piece[..n]);
            }
            at += piece.len() as u64;
            sum.update(piece);
        });
        if header.is_some_and(|h| first != h) || sum.finish() != crc {
            return false;
        }
    }
    true
}

/// Bytes written over the pool, as disjoint pieces by start offset: a piece put later
/// wins where it overlaps earlier ones. Each `put` adds at most three pieces and removes
/// those it covers, so `n` puts take `O(n log n)` time and `O(n)` pieces.
#[derive(Default)]
struct Overlay<'a> {
    pieces: std::collections::BTreeMap<u64, &'a [u8]>,
}

impl<'a> Overlay<'a> {
    /// Lays `data` over the pool at `off`.
    fn put(&mut self, off: u64, data: &'a [u8]) {
        if data.is_empty() {
            return;
        }
        let end = off + data.len() as u64;
        // A piece starting before `off` keeps its bytes before `off` (and after `end`).
        if let Some((&s, &d)) = self.pieces.range(..off).next_back() {
            let e = s + d.len() as u64;
            if e > off {
                self.pieces.insert(s, &d[..(off - s) as usize]);
                if e > end {
                    self.pieces.insert(end, &d[(end - s) as usize..]);
                }
            }
        }
        // Pieces starting within `[off, end)` keep only their bytes after `end`.
        while let Some((&s, &d)) = self.pieces.range(off..end).next() {
            self.pieces.remove(&s);
            let e = s + d.len() as u64;
            if e > end {
                self.pieces.insert(end, &d[(end - s) as usize..]);
            }
        }
        self.pieces.insert(off, data);
    }

    /// Hands `f` the bytes of `[at, at + under.len())` in order, as pieces: those laid
    /// over, else `under`'s.
    fn read(&self, at: u64, under: &[u8], mut f: impl FnMut(&[u8])) {
        let end = at + under.len() as u64;
        let mut pos = at;
        let before = self.pieces.range(..at).next_back();
        for (&s, &d) in before.into_iter().chain(self.pieces.range(at..end)) {
            let e = s + d.len() as u64;
            if e <= pos {
                continue;
            }
            if s > pos {
                f(&under[(pos - at) as usize..(s - at) as usize]);
                pos = s;
            }
            let z = e.min(end);
            f(&d[(pos - s) as usize..(z - s) as usize]);
            pos = z;
        }
        if pos < end {
            f(&under[(pos - at) as usize..]);
        }
    }
}

/// Makes the two copies of every lane equal again, rewriting a copy that differs (a
/// scribble, a media error, a write a crash tore) from the better one: the one whose record
/// verifies with the newer sequence number, else the one with the newer valid retire mark,
/// else the one whose seal is not junk (absent or valid), else copy A. The rewritten lane keeps the newer valid retire mark of the two copies and
/// the dirty-zone bits of both: a crash that tore one copy's mark may have left the record
/// whole in that copy only, and a record recovery found retired must stay retired.
///
/// Unless the lanes are `replicated` (`Config::replicate_lanes`), copy B is left with no
/// record: commits then write records to copy A alone but store retire marks in both
/// copies unflushed, so a crash can tear both marks at once, and a record kept in B, older
/// than everything written since, would replay over it.
///
/// Returns the copies rewritten (flushed; durable at the caller's next fence), and of
/// them the ones that were damaged (see `LaneRepairs`); `crashed`: the pool was not closed
/// cleanly. Run it after `recover`, which reads the best of both copies anyway.
pub(crate) fn repair_lanes(
    media: &Media,
    geo: &Geometry,
    replicated: bool,
    crashed: bool,
) -> LaneRepairs {
    let mut fixed = LaneRepairs::default();
    for lane in 0..geo.lanes {
        let (a, b) = (
            lane_bytes(media, geo, lane, 0),
            lane_bytes(media, geo, lane, 1),
        );
        if a == b && (replicated || record::decode(b).is_none()) {
            continue;
        }
        let key = |bytes: &[u8]| {
            (
                record::decode(bytes).map_or(0, |r| r.seq),
                record::retired(bytes),
            )
        };
        // On a tie, the copy whose words are not junk (a never-written lane scribbled
        // over must not have the junk copied into its other copy).
        let better_b = key(b) > key(a) || (key(b) == key(a) && !seal_ok(a) && seal_ok(b));
        let mut want = if better_b { b } else { a }.to_vec();
        let (ra, rb) = (record::retired(a), record::retired(b));
        let marked = if rb > ra || (rb == ra && !mark_ok(a) && mark_ok(b)) {
            b
        } else {
            a
        };
        let mark = RETIRED_OFFSET..RETIRED_OFFSET + 16;
        want[mark.clone()].copy_from_slice(&marked[mark]);
        let dirty = record::DIRTY_OFFSET..record::DIRTY_OFFSET + record::DIRTY_BYTES;
        let both = a[dirty.clone()].iter().zip(&b[dirty.clone()]);
        for (w, (x, y)) in want[dirty].iter_mut().zip(both) {
            *w = x | y;
        }
        for copy in 0..2 {
            if copy == 1 && !replicated {
                record::unseal(&mut want);
            }
            if *lane_bytes(media, geo, lane, copy) == want[..] {
                continue;
            }
            if !crashed && damaged(lane_bytes(media, geo, lane, copy)) {
                fixed.damaged += 1;
            }
            let off = geo.lane_offset(lane, copy);
            // SAFETY: lane copy `copy` lies inside the pool; nothing else writes lanes while
            // the pool opens. (A crash meanwhile leaves the copy whose mark is kept with its
            // mark words as they were.)
            unsafe { media.write(off, &want) };
            media.flush(off, geo.lane_size);
            fixed.rewritten += 1;
        }
    }
    fixed
}

/// What `repair_lanes` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LaneRepairs {
    /// Lane copies rewritten. Not all were damaged: without lane replication copy B is
    /// expected to differ from A, and after a crash a commit's record or retire mark may
    /// have reached one copy only, or part of it.
    pub rewritten: u64,
    /// Of those, the copies that were damaged: in a pool closed cleanly (after a crash a
    /// torn copy looks the same), a retire mark that does not check, or a seal that is
    /// neither absent nor valid (see `damaged`).
    pub damaged: u64,
}

/// Whether a lane copy of a pool closed cleanly holds bytes no commit, recovery or lane
/// repair leaves there: a retire mark that is neither zeros (never written) nor checks,
/// or a seal whose first word is neither zeros (no record: never written, or unsealed by
/// `repair_lanes`) nor a record that verifies. Damage elsewhere (entry bytes past the
/// record, dirty-zone bits) is harmless and not told apart from what a copy B without
/// lane replication legitimately holds.
fn damaged(copy: &[u8]) -> bool {
    !(mark_ok(copy) && seal_ok(copy))
}

/// Whether a lane copy's retire mark is zeros (never written) or checks.
fn mark_ok(copy: &[u8]) -> bool {
    let mark = &copy[RETIRED_OFFSET..RETIRED_OFFSET + 16];
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&mark[..8]);
    mark.iter().all(|&b| b == 0) || record::retire_mark(u64::from_le_bytes(seq)) == mark
}

/// Whether a lane copy's seal is absent (its first word zeros: never written, or unsealed
/// by `repair_lanes`) or verifies.
fn seal_ok(copy: &[u8]) -> bool {
    let first = &copy[record::SEAL_OFFSET..record::SEAL_OFFSET + 8];
    first.iter().all(|&b| b == 0) || record::decode(copy).is_some()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::CrashSim;

    /// Media holding the lanes and one zone of the small test geometry, all zero.
    fn media() -> (Media, Geometry, u64) {
        let geo = crate::Config::small("recovery").geometry();
        let len = geo.pool_size(1);
        let sim = CrashSim::new(len);
        sim.set_len(len);
        (Media::sim(sim, "pool", "").expect("a new device"), geo, len)
    }

    /// Writes `bytes` at offset `at` of lane `lane`, copy `copy`.
    fn put(media: &Media, geo: &Geometry, lane: u64, copy: u64, at: usize, bytes: &[u8]) {
        // SAFETY: inside the lane copy; the test owns the media.
        unsafe { media.write(geo.lane_offset(lane, copy) + at as u64, bytes) };
    }

    /// A lane copy holding a record with sequence number `seq` writing `v` at `off`.
    fn sealed(geo: &Geometry, seq: u64, off: u64, v: u64) -> Vec<u8> {
        let mut lane = vec![0u8; geo.lane_size as usize];
        let mut w = record::RecordWriter::new(&mut lane);
        assert!(w.push(off, &v.to_le_bytes()));
        w.seal(seq);
        lane
    }

    #[test]
    fn an_overlay_reads_as_its_puts_applied_in_order() {
        // Against a byte array the same puts are copied into, in the same order.
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % n
        };
        let src: Vec<u8> = (0..=255).collect();
        for round in 0..200 {
            let mut overlay = Overlay::default();
            let under = vec![0xeeu8; 96];
            let mut want = under.clone();
            for _ in 0..next(12) {
                let (off, len) = (next(100), next(40) as usize);
                let start = next(200) as usize;
                let data = &src[start..start + len];
                overlay.put(1000 + off, data);
                for (i, &b) in data.iter().enumerate() {
                    if let Some(w) = want.get_mut(off as usize + i) {
                        *w = b;
                    }
                }
            }
            let mut got = Vec::new();
            overlay.read(1000, &under, |piece| got.extend_from_slice(piece));
            assert_eq!(got, want, "round {round}");
            let mut tail = Vec::new();
            overlay.read(1040, &under[40..], |piece| tail.extend_from_slice(piece));
            assert_eq!(tail, want[40..], "round {round}, from the middle");
        }
    }

    #[test]
    fn repaired_lanes_keep_the_newest_retire_mark_and_every_dirty_bit() {
        // A crash while the lane's next record was written over copy B: B's record is torn
        // but its retire mark of record 5 reached media; copy A still holds record 5 whole
        // and its retire mark is torn (the seq word is new, the check word old).
        let (media, geo, len) = media();
        let target = geo.zones_offset() + 4096;
        let mut a = sealed(&geo, 5, target, 0xaaaa);
        a[..8].copy_from_slice(&5u64.to_le_bytes());
        a[8..16].copy_from_slice(&record::retire_mark(4)[8..]);
        a[record::DIRTY_OFFSET] = 0b01;
        let mut b = sealed(&geo, 6, target, 0xbbbb);
        b[record::ENTRIES_OFFSET] ^= 1;
        b[..16].copy_from_slice(&record::retire_mark(5));
        b[record::DIRTY_OFFSET] = 0b10;
        put(&media, &geo, 0, 0, 0, &a);
        put(&media, &geo, 0, 1, 0, &b);

        let rec = recover(&media, &geo, len).unwrap();
        assert_eq!((rec.replayed, rec.max_seq), (0, 5), "record 5 is retired");
        let fixed = repair_lanes(&media, &geo, true, true).rewritten;
        // SAFETY: the target word lies in the zone; the test owns the media.
        let word = || unsafe { media.read_u64(target) };
        for copy in 0..2 {
            let l = lane_bytes(&media, &geo, 0, copy);
            assert_eq!(record::retired(l), 5, "copy {copy} lost the retire mark");
            assert_eq!(record::decode(l).map(|r| r.seq), Some(5));
        }
        assert!(zone_is_dirty(&dirty_zones(&media, &geo), 0));
        assert!(zone_is_dirty(&dirty_zones(&media, &geo), 1));
        assert_eq!(fixed, 2, "both copies took the other's mark or dirty bits");
        // The next open replays nothing: record 5 must never run again over newer data.
        // SAFETY: as above.
        unsafe { media.write(target, &7u64.to_le_bytes()) };
        assert_eq!(recover(&media, &geo, len).unwrap().replayed, 0);
        assert_eq!(word(), 7);
    }

    #[test]
    fn a_crash_while_recovery_retires_never_replays_an_older_record_over_a_newer_one() {
        // Lane 0 holds record 5 (writes X), applied, its retire mark not durable; lane 1
        // holds record 6 (writes X and Y), sealed while its commit fence, which also
        // carried lane 0's mark, did not complete. Recovery replays 5 then 6 and retires
        // both under one fence. A crash at that fence may persist lane 1's marks and not
        // lane 0's: the next open must not replay 5 alone over 6 (X old, Y new).
        let geo = crate::Config::small("recovery").geometry();
        let len = geo.pool_size(1);
        let sim = CrashSim::new(len);
        sim.set_len(len);
        let media = Media::sim(sim.clone(), "pool", "").expect("a new device");
        let (x, y) = (geo.zones_offset() + 4096, geo.zones_offset() + 8192);
        let mut old = vec![0u8; geo.lane_size as usize];
        let mut w = record::RecordWriter::new(&mut old);
        assert!(w.push(x, &0x5555u64.to_le_bytes()));
        w.seal(5);
        let mut new = vec![0u8; geo.lane_size as usize];
        let mut w = record::RecordWriter::new(&mut new);
        assert!(w.push(x, &0x6666u64.to_le_bytes()));
        assert!(w.push(y, &0x6666u64.to_le_bytes()));
        w.seal(6);
        for copy in 0..2 {
            put(&media, &geo, 0, copy, 0, &old);
            put(&media, &geo, 1, copy, 0, &new);
            for lane in 0..2 {
                media.flush(geo.lane_offset(lane, copy), geo.lane_size);
            }
        }
        media.fence();
        let points = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = points.clone();
        sim.set_fence_hook(move |s: &CrashSim| sink.lock().unwrap().push(s.crash_point()));
        assert_eq!(recover(&media, &geo, len).unwrap().replayed, 2);
        sim.clear_fence_hook();
        drop(media);
        let points = std::mem::take(&mut *points.lock().unwrap());
        let in_lane = |word: u64, lane: u64| {
            (0..2).any(|c| {
                let off = geo.lane_offset(lane, c);
                (off..off + 16).contains(&(word * 8))
            })
        };
        let mut checked = 0;
        for cp in &points {
            let (lo, hi) = (cp.image(|_| false), cp.image(|_| true));
            let addrs: Vec<u64> = (0..lo.len() as u64)
                .filter(|&i| lo[i as usize] != hi[i as usize])
                .collect();
            if !addrs.iter().any(|&a| in_lane(a, 0)) {
                continue;
            }
            // Lane 1's retire marks reached media, lane 0's did not.
            let dev = cp.device(0, |i| !in_lane(addrs[i], 0));
            let media = Media::sim(dev, "pool", "").expect("the crashed device");
            recover(&media, &geo, len).expect("recovery");
            // SAFETY: the words lie in the zone; the test owns the media.
            let (gx, gy) = unsafe { (media.read_u64(x), media.read_u64(y)) };
            assert_eq!(
                (gx, gy),
                (0x6666, 0x6666),
                "record 5 replayed alone over record 6 after a crash during recovery"
            );
            checked += 1;
        }
        assert!(
            checked > 0,
            "no fence of recovery had lane 0's mark pending"
        );
    }

    #[test]
    fn without_lane_replication_copy_b_keeps_no_record() {
        // Commits write records to copy A alone, while retire marks go to both copies
        // unflushed: a crash can tear both marks at once, and a record left in copy B,
        // older than everything written since, must not be there to replay.
        let (media, geo, len) = media();
        let target = geo.zones_offset() + 4096;
        let mut a = sealed(&geo, 5, target, 0xaaaa);
        a[..16].copy_from_slice(&record::retire_mark(5));
        put(&media, &geo, 0, 0, 0, &a);
        put(&media, &geo, 0, 1, 0, &a);
        assert_eq!(recover(&media, &geo, len).unwrap().replayed, 0);
        let none = LaneRepairs::default();
        assert_eq!(
            repair_lanes(&media, &geo, true, false),
            none,
            "equal copies stay"
        );
        let unsealed = LaneRepairs {
            rewritten: 1,
            damaged: 0,
        };
        assert_eq!(
            repair_lanes(&media, &geo, false, false),
            unsealed,
            "copy B without replication differs, and is not damaged"
        );
        let (a, b) = (
            lane_bytes(&media, &geo, 0, 0),
            lane_bytes(&media, &geo, 0, 1),
        );
        assert_eq!(record::decode(a).map(|r| r.seq), Some(5));
        assert_eq!(record::decode(b), None);
        assert_eq!((record::retired(a), record::retired(b)), (5, 5));
        assert_eq!(
            repair_lanes(&media, &geo, false, false),
            none,
            "nothing left to do"
        );
        // Both marks torn and copy A's record torn (the next one half written over it):
        // nothing replays.
        for copy in 0..2 {
            put(&media, &geo, 0, copy, 0, &9u64.to_le_bytes());
        }
        put(&media, &geo, 0, 0, record::ENTRIES_OFFSET, &[0xff; 8]);
        assert_eq!(recover(&media, &geo, len).unwrap().replayed, 0);
    }
}
