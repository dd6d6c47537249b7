//! The redo record codec: the bytes of one lane copy. Pure; no I/O.
//!
//! ```text
//! 0    retired seq  u64    the seq of the last record known applied (its own cache line)
//! 8    retired chk  u64    seq ^ RETIRE_KEY (a mark whose check fails counts as none)
//! 16   dirty zones  48 B   bit z % 384 set: this lane wrote zone z in place since the pool
//!                          was opened (its parity may need recomputing after a crash)
//! 64   seal:
//!        64  crc    u32    strong checksum of bytes 68..128 + len (seal and entries)
//!        68  magic  u32    RECORD_MAGIC
//!        72  count  u32    number of entries
//!        76  (zero) u32
//!        80  seq    u64    global commit sequence number
//!        88  len    u64    bytes of entries
//!        96  (zero to 128)
//! 128  entries, each: off u64 | len u32 | kind u32 | data (`len` bytes), padded to 8 bytes
//!        kind 0 (write):      store `data` at pool offset `off`
//!        kind 2 (write+sum):  `data` = back u32 ++ sum u32 ++ bytes: store `bytes` at `off`
//!                             and `sum` at `off - back` (back >= 4): a change to an object
//!                             with its new checksum, in one entry (format 6 on)
//!        kind 3 (new):        `off` is the header of an object this transaction created,
//!                             written in place, not logged; `data` = payload size u32 ++
//!                             crc u32 of the 16-byte header and the payload (format 6 on).
//!                             The record counts as committed only if every such object
//!                             verifies (its words, flushed under the same fence as the
//!                             record, may not all have reached media)
//!        kind 4 (zero):       `data` = count u64: store `count` zero bytes at `off` (a new
//!                             run's bitmap over a chunk whose old bytes are not zero;
//!                             format 7 on)
//!        kind 1 (verify):     what kind 3 says, as records of format 5 and older wrote it:
//!                             `data` = the 16-byte header ++ crc u32 ++ 0 u32 (still read,
//!                             so that a crashed older pool's record replays)
//! ```
//!
//! Invariant: a record is valid only if its seal verifies; the seal covers the sequence
//! number and every entry byte, so a torn or stale mix of two records never verifies
//! (short of a checksum collision). No separate commit mark exists.

use crate::checksum::strong;

/// Offset of the retired-seq word.
pub(crate) const RETIRED_OFFSET: usize = 0;
/// Offset of the lane's dirty-zone bits (see `integrity::parity`).
pub(crate) const DIRTY_OFFSET: usize = RETIRED_OFFSET + 16;
/// Bytes of dirty-zone bits.
pub(crate) const DIRTY_BYTES: usize = 48;
/// Number of dirty-zone bits: zone `z` is bit `z % DIRTY_BITS`.
pub(crate) const DIRTY_BITS: u64 = DIRTY_BYTES as u64 * 8;
/// Offset of the seal.
pub(crate) const SEAL_OFFSET: usize = 64;
const _: () = assert!(DIRTY_OFFSET + DIRTY_BYTES <= SEAL_OFFSET);

/// A lane's dirty-zone bits, as words.
pub(crate) type DirtyZones = [u64; DIRTY_BYTES / 8];

/// The word and mask of zone `zone`'s dirty bit.
pub(crate) const fn dirty_bit(zone: u64) -> (usize, u64) {
    let bit = zone % DIRTY_BITS;
    ((bit / 64) as usize, 1 << (bit % 64))
}
const CRC_OFFSET: usize = SEAL_OFFSET;
const MAGIC_OFFSET: usize = CRC_OFFSET + 4;
const COUNT_OFFSET: usize = MAGIC_OFFSET + 4;
const SEQ_OFFSET: usize = COUNT_OFFSET + 8;
const LEN_OFFSET: usize = SEQ_OFFSET + 8;
const SEAL_END: usize = LEN_OFFSET + 8;
/// Offset of the first entry.
pub(crate) const ENTRIES_OFFSET: usize = 128;
/// Bytes of an entry header.
pub(crate) const ENTRY_HEADER: usize = 16;
/// Seal magic ("PGLR").
pub(crate) const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"PGLR");

/// Entry kind: store the data.
pub(crate) const KIND_WRITE: u32 = 0;
/// Entry kind: verify a new object, as format 5 and older wrote it (see the module docs).
pub(crate) const KIND_VERIFY: u32 = 1;
/// Bytes of a verify entry's data.
pub(crate) const VERIFY_LEN: usize = 24;
/// Entry kind: store the data and an object's new checksum.
pub(crate) const KIND_WRITE_SUM: u32 = 2;
/// Bytes in front of a write+sum entry's data: `back` and the checksum.
pub(crate) const WRITE_SUM_PREFIX: usize = 8;
/// Entry kind: verify a new object.
pub(crate) const KIND_NEW: u32 = 3;
/// Bytes of a new-object entry's data.
pub(crate) const NEW_LEN: usize = 8;
/// Entry kind: store zeros.
pub(crate) const KIND_ZERO: u32 = 4;
/// Bytes of a zero entry's data.
pub(crate) const ZERO_LEN: usize = 8;

/// One entry of a record, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry<'a> {
    /// Pool offset.
    pub off: u64,
    /// One of the `KIND_*`.
    pub kind: u32,
    /// The bytes.
    pub data: &'a [u8],
}

/// What an entry asks of recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op<'a> {
    /// Store `data` at `off`, and `sum` at `sum_off` if there is one (an object's checksum).
    Write {
        off: u64,
        data: &'a [u8],
        sum: Option<(u64, [u8; 4])>,
    },
    /// A new object whose header is at `hdr`: committed only if the header and `size`
    /// payload bytes on media have crc `crc` (and, in older records, equal `header`).
    New {
        hdr: u64,
        size: u64,
        crc: u32,
        header: Option<[u8; 16]>,
    },
    /// Store `len` zero bytes at `off`.
    Zero { off: u64, len: u64 },
}

impl<'a> Entry<'a> {
    /// What the entry asks (its shape was checked by `entries`).
    pub(crate) fn op(&self) -> Op<'a> {
        let d = self.data;
        match self.kind {
            KIND_WRITE_SUM => Op::Write {
                off: self.off,
                data: &d[WRITE_SUM_PREFIX..],
                sum: Some((self.off - u64::from(u32_at(d, 0)), [d[4], d[5], d[6], d[7]])),
            },
            KIND_NEW => Op::New {
                hdr: self.off,
                size: u64::from(u32_at(d, 0)),
                crc: u32_at(d, 4),
                header: None,
            },
            KIND_ZERO => Op::Zero {
                off: self.off,
                len: u64_at(d, 0),
            },
            KIND_VERIFY => {
                let mut header = [0u8; 16];
                header.copy_from_slice(&d[..16]);
                Op::New {
                    hdr: self.off,
                    size: crate::heap::layout::ObjectHeader::from_bytes(&header).size,
                    crc: u32_at(d, 16),
                    header: Some(header),
                }
            }
            _ => Op::Write {
                off: self.off,
                data: d,
                sum: None,
            },
        }
    }

    /// Whether an entry of this shape can be read.
    fn well_formed(off: u64, kind: u32, data: &[u8]) -> bool {
        match kind {
            KIND_WRITE => true,
            KIND_VERIFY => data.len() == VERIFY_LEN,
            KIND_NEW => data.len() == NEW_LEN,
            KIND_ZERO => data.len() == ZERO_LEN && off.checked_add(u64_at(data, 0)).is_some(),
            KIND_WRITE_SUM => {
                data.len() >= WRITE_SUM_PREFIX && {
                    let back = u64::from(u32_at(data, 0));
                    back >= 4 && back <= off
                }
            }
            _ => false,
        }
    }
}

/// Bytes an entry of `len` data bytes takes.
pub(crate) const fn entry_size(len: usize) -> usize {
    ENTRY_HEADER + len.div_ceil(8) * 8
}

/// How far below a write at `off` a checksum at `sum_off` lies, if one write+sum entry can
/// carry both (the checksum's 4 bytes end at or before `off`, at most `u32::MAX` away).
pub(crate) fn sum_back(off: u64, sum_off: u64) -> Option<u32> {
    off.checked_sub(sum_off)
        .filter(|&b| b >= 4)
        .and_then(|b| u32::try_from(b).ok())
}

/// Writes a record's entries into a lane copy, then seals it.
pub(crate) struct RecordWriter<'a> {
    lane: &'a mut [u8],
    pos: usize,
    count: u32,
}

impl<'a> RecordWriter<'a> {
    /// Starts a record in `lane` (the whole lane copy).
    pub(crate) fn new(lane: &'a mut [u8]) -> Self {
        RecordWriter {
            lane,
            pos: ENTRIES_OFFSET,
            count: 0,
        }
    }

    /// Entry bytes still free.
    pub(crate) fn remaining(&self) -> usize {
        self.lane.len() - self.pos
    }

    /// Appends an entry writing `data` at pool offset `off`; returns false if it does not fit.
    pub(crate) fn push(&mut self, off: u64, data: &[u8]) -> bool {
        self.push_entry(off, KIND_WRITE, None, data)
    }

    /// Appends an entry writing `data` at `off` and `sum` at `sum_off` (an object's checksum
    /// field, at least 4 bytes below `off` and at most `u32::MAX` below); returns false if
    /// it does not fit or the distance does not.
    pub(crate) fn push_write_sum(
        &mut self,
        off: u64,
        data: &[u8],
        sum_off: u64,
        sum: [u8; 4],
    ) -> bool {
        let Some(back) = sum_back(off, sum_off) else {
            return false;
        };
        let word = u64::from(back) | u64::from(u32::from_le_bytes(sum)) << 32;
        self.push_entry(off, KIND_WRITE_SUM, Some(word), data)
    }

    /// Appends the entry of a new object whose header is at `hdr`: its payload size and
    /// the crc of its header and payload.
    pub(crate) fn push_new(&mut self, hdr: u64, size: u32, crc: u32) -> bool {
        self.push_entry(
            hdr,
            KIND_NEW,
            Some(u64::from(size) | u64::from(crc) << 32),
            &[],
        )
    }

    /// Appends an entry storing `len` zero bytes at `off`; returns false if it does not fit.
    pub(crate) fn push_zero(&mut self, off: u64, len: u64) -> bool {
        self.push_entry(off, KIND_ZERO, Some(len), &[])
    }

    /// Appends an entry of kind `kind`.
    #[cfg(test)]
    pub(crate) fn push_kind(&mut self, off: u64, kind: u32, data: &[u8]) -> bool {
        self.push_entry(off, kind, None, data)
    }

    /// Appends an entry of kind `kind` whose data is the little-endian bytes of `word`, if
    /// any, then `data`. Every piece but `data` is a fixed-size store: a general list of
    /// parts cost a `memcpy` call each, and a `memset` call for the padding (~70
    /// instructions an overwrite's entry).
    fn push_entry(&mut self, off: u64, kind: u32, word: Option<u64>, data: &[u8]) -> bool {
        let head = if word.is_some() { 8 } else { 0 };
        let len = head + data.len();
        let size = entry_size(len);
        if size > self.remaining() || len > u32::MAX as usize {
            return false;
        }
        let p = self.pos;
        let e = &mut self.lane[p..p + size];
        // The last word first: its bytes past the data are the entry's padding, zero; the
        // header or data stored next overwrites the others.
        e[size - 8..].copy_from_slice(&[0; 8]);
        e[..8].copy_from_slice(&off.to_le_bytes());
        e[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        e[12..16].copy_from_slice(&kind.to_le_bytes());
        if let Some(w) = word {
            e[16..24].copy_from_slice(&w.to_le_bytes());
        }
        e[16 + head..16 + len].copy_from_slice(data);
        self.pos += size;
        self.count += 1;
        true
    }

    /// Writes the seal; returns the number of bytes written from `SEAL_OFFSET` (the range to
    /// flush is `SEAL_OFFSET..SEAL_OFFSET + n`).
    pub(crate) fn seal(self, seq: u64) -> usize {
        let len = (self.pos - ENTRIES_OFFSET) as u64;
        self.lane[MAGIC_OFFSET..MAGIC_OFFSET + 4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        self.lane[COUNT_OFFSET..COUNT_OFFSET + 4].copy_from_slice(&self.count.to_le_bytes());
        self.lane[COUNT_OFFSET + 4..SEQ_OFFSET].fill(0);
        self.lane[SEAL_END..ENTRIES_OFFSET].fill(0);
        self.lane[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&seq.to_le_bytes());
        self.lane[LEN_OFFSET..LEN_OFFSET + 8].copy_from_slice(&len.to_le_bytes());
        let crc = seal_crc(self.lane, len as usize);
        self.lane[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        self.pos - SEAL_OFFSET
    }
}

/// The bytes from `SEAL_OFFSET` that a commit writes into a lane copy for a sealed record
/// of `n` bytes (`RecordWriter::seal`), in a lane of `lane_size` bytes: the record in whole
/// cache lines, up to the lane's end. The bytes past the record (whatever the staging
/// buffer holds there) are never read: the seal says where the record ends. A streamed
/// line left partial is written back on its own, slowly: two 1 KiB records streamed in
/// 16-byte granules, each ending 24 bytes into a line, made a 1 KiB overwrite ~70 ns
/// slower than in whole lines (~170 ns with no write-back or fence at all, 2026-12-08).
pub(crate) fn stream_len(n: usize, lane_size: usize) -> usize {
    n.next_multiple_of(64).min(lane_size - SEAL_OFFSET)
}

fn seal_crc(lane: &[u8], len: usize) -> u32 {
    strong(&lane[MAGIC_OFFSET..ENTRIES_OFFSET + len])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Makes the record of a lane copy, if any, invalid for good: its checksum and magic zero.
pub(crate) fn unseal(lane: &mut [u8]) {
    lane[CRC_OFFSET..MAGIC_OFFSET + 4].fill(0);
}

/// Mixed into the retire mark's check word.
const RETIRE_KEY: u64 = 0x5245_5449_5245_4421;

/// The 16 bytes of the retire mark for `seq`.
pub(crate) fn retire_mark(seq: u64) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[..8].copy_from_slice(&seq.to_le_bytes());
    m[8..].copy_from_slice(&(seq ^ RETIRE_KEY).to_le_bytes());
    m
}

/// The retired seq of a lane copy (0 if the mark does not check: torn, never written, or
/// scribbled; a record is then replayed, which is safe while no later record is durable).
pub(crate) fn retired(lane: &[u8]) -> u64 {
    let seq = u64_at(lane, RETIRED_OFFSET);
    if u64_at(lane, RETIRED_OFFSET + 8) == seq ^ RETIRE_KEY {
        seq
    } else {
        0
    }
}

/// A verified record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// Global commit sequence number.
    pub seq: u64,
    /// Number of entries.
    pub count: u32,
    /// Bytes of entries.
    pub len: usize,
}

/// Verifies the record in a lane copy; `None` if there is none or it is torn or corrupt.
pub(crate) fn decode(lane: &[u8]) -> Option<Record> {
    if lane.len() < ENTRIES_OFFSET || u32_at(lane, MAGIC_OFFSET) != RECORD_MAGIC {
        return None;
    }
    let len = u64_at(lane, LEN_OFFSET);
    if len > (lane.len() - ENTRIES_OFFSET) as u64 {
        return None;
    }
    let len = len as usize;
    if seal_crc(lane, len) != u32_at(lane, CRC_OFFSET) {
        return None;
    }
    let rec = Record {
        seq: u64_at(lane, SEQ_OFFSET),
        count: u32_at(lane, COUNT_OFFSET),
        len,
    };
    // The entries must parse exactly.
    let mut n = 0u32;
    for e in entries(lane, &rec) {
        e?;
        n += 1;
    }
    (n == rec.count).then_some(rec)
}

/// The entries of a verified record; a `None` item marks a malformed entry.
pub(crate) fn entries<'a>(
    lane: &'a [u8],
    rec: &Record,
) -> impl Iterator<Item = Option<Entry<'a>>> + 'a {
    let end = ENTRIES_OFFSET + rec.len;
    let mut pos = ENTRIES_OFFSET;
    let mut bad = false;
    std::iter::from_fn(move || {
        if bad || pos >= end {
            return None;
        }
        if pos + ENTRY_HEADER > end {
            bad = true;
            return Some(None);
        }
        let off = u64_at(lane, pos);
        let len = u32_at(lane, pos + 8) as usize;
        let kind = u32_at(lane, pos + 12);
        let size = entry_size(len);
        if pos + size > end {
            bad = true;
            return Some(None);
        }
        let data = &lane[pos + ENTRY_HEADER..pos + ENTRY_HEADER + len];
        if !Entry::well_formed(off, kind, data) {
            bad = true;
            return Some(None);
        }
        pos += size;
        Some(Some(Entry { off, kind, data }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(lane: &mut [u8], seq: u64, items: &[(u64, &[u8])]) -> usize {
        let mut w = RecordWriter::new(lane);
        for (o, d) in items {
            assert!(w.push(*o, d));
        }
        w.seal(seq)
    }

    #[test]
    fn round_trip() {
        let mut lane = vec![0u8; 1024];
        let items: [(u64, &[u8]); 3] = [(4096, b"hello"), (8192, &[1; 16]), (100, &[])];
        write(&mut lane, 42, &items);
        let r = decode(&lane).expect("valid");
        assert_eq!(r.seq, 42);
        assert_eq!(r.count, 3);
        let got: Vec<_> = entries(&lane, &r).map(|e| e.unwrap()).collect();
        assert_eq!(got.len(), 3);
        for (g, i) in got.iter().zip(items.iter()) {
            assert_eq!(g.off, i.0);
            assert_eq!(g.data, i.1);
            assert_eq!(g.kind, KIND_WRITE);
        }
    }

    #[test]
    fn a_record_is_streamed_in_whole_lines_within_its_lane() {
        let lane = 4096;
        for n in [
            ENTRIES_OFFSET - SEAL_OFFSET,
            100,
            1048,
            1088,
            lane - SEAL_OFFSET - 10,
        ] {
            let len = stream_len(n, lane);
            assert!(len >= n, "{n}: the whole record");
            assert_eq!((SEAL_OFFSET + len) % 64, 0, "{n}: ends on a line");
            assert!(SEAL_OFFSET + len <= lane, "{n}: inside the lane");
            assert!(len - n < 64, "{n}: at most the rest of its last line");
        }
        // A record streamed with the stale bytes after it still reads back as itself.
        let mut stage = vec![0xa5u8; lane];
        let n = write(&mut stage, 9, &[(4096, &[1, 2, 3])]);
        let mut copy = vec![0u8; lane];
        let len = stream_len(n, lane);
        copy[SEAL_OFFSET..SEAL_OFFSET + len]
            .copy_from_slice(&stage[SEAL_OFFSET..SEAL_OFFSET + len]);
        let r = decode(&copy).expect("the record");
        assert_eq!(r.seq, 9);
        let got: Vec<_> = entries(&copy, &r).map(|e| e.unwrap()).collect();
        assert_eq!(
            (got.len(), got[0].off, got[0].data),
            (1, 4096, &[1u8, 2, 3][..])
        );
    }

    #[test]
    fn empty_lane_has_no_record() {
        assert_eq!(decode(&[0u8; 512]), None);
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let mut lane = vec![0u8; 256];
        let n = write(&mut lane, 7, &[(64, &[0xab; 40])]);
        for byte in (SEAL_OFFSET..SEAL_OFFSET + n).step_by(crate::miri_or(1, 5)) {
            for bit in 0..8 {
                let mut l = lane.clone();
                l[byte] ^= 1 << bit;
                assert_eq!(decode(&l), None, "flip at byte {byte} bit {bit}");
            }
        }
    }

    #[test]
    fn torn_record_over_an_older_one_is_rejected() {
        let mut old = vec![0u8; 512];
        write(&mut old, 1, &[(64, &[1; 100])]);
        let mut new = old.clone();
        write(&mut new, 2, &[(64, &[2; 100])]);
        // every prefix of the new record's words over the old one (a torn write)
        let end = ENTRIES_OFFSET + entry_size(100);
        for cut in (SEAL_OFFSET..=end).step_by(8) {
            let mut l = old.clone();
            l[..cut].copy_from_slice(&new[..cut]);
            let seq = decode(&l).map(|r| r.seq);
            let want = if l == old {
                Some(1)
            } else if l[..end] == new[..end] {
                Some(2)
            } else {
                None
            };
            assert_eq!(seq, want, "cut at {cut}");
        }
    }

    #[test]
    fn verify_entries_round_trip_and_unknown_kinds_are_malformed() {
        let mut lane = vec![0u8; 512];
        let mut w = RecordWriter::new(&mut lane);
        assert!(w.push_kind(4096, KIND_VERIFY, &[7; VERIFY_LEN]));
        assert!(w.push(8, &[1; 8]));
        w.seal(3);
        let r = decode(&lane).unwrap();
        let kinds: Vec<u32> = entries(&lane, &r).map(|e| e.unwrap().kind).collect();
        assert_eq!(kinds, vec![KIND_VERIFY, KIND_WRITE]);
        let mut lane = vec![0u8; 512];
        let mut w = RecordWriter::new(&mut lane);
        assert!(w.push_kind(4096, 9, &[7; 8]));
        w.seal(3);
        assert_eq!(decode(&lane), None, "an unknown kind is a malformed record");
    }

    #[test]
    fn entries_are_laid_out_byte_for_byte_over_a_dirty_lane() {
        // Every entry as the module docs draw it, its padding zero whatever the lane held.
        let mut lane = vec![0xa5u8; 512];
        let mut w = RecordWriter::new(&mut lane);
        assert!(w.push_write_sum(4096 + 32, &[5; 5], 4096 - 4, [1, 2, 3, 4]));
        assert!(w.push(300, &[]));
        assert!(w.push(200, &[9, 8, 7]));
        assert!(w.push(208, &[6; 16]));
        assert!(w.push_new(8192 - 16, 40, 0xdead_beef));
        assert!(w.push_zero(16384, 2048));
        let n = w.seal(3);
        let mut want = Vec::new();
        let mut entry = |off: u64, kind: u32, data: &[u8]| {
            want.extend_from_slice(&off.to_le_bytes());
            want.extend_from_slice(&(data.len() as u32).to_le_bytes());
            want.extend_from_slice(&kind.to_le_bytes());
            want.extend_from_slice(data);
            want.resize(want.len().next_multiple_of(8), 0);
        };
        entry(
            4096 + 32,
            KIND_WRITE_SUM,
            &[36, 0, 0, 0, 1, 2, 3, 4, 5, 5, 5, 5, 5],
        );
        entry(300, KIND_WRITE, &[]);
        entry(200, KIND_WRITE, &[9, 8, 7]);
        entry(208, KIND_WRITE, &[6; 16]);
        let mut new = 40u32.to_le_bytes().to_vec();
        new.extend_from_slice(&0xdead_beef_u32.to_le_bytes());
        entry(8192 - 16, KIND_NEW, &new);
        entry(16384, KIND_ZERO, &2048u64.to_le_bytes());
        assert_eq!(n, ENTRIES_OFFSET - SEAL_OFFSET + want.len());
        assert_eq!(
            &lane[ENTRIES_OFFSET..ENTRIES_OFFSET + want.len()],
            &want[..]
        );
        assert!(decode(&lane).is_some());
    }

    #[test]
    fn write_sum_new_and_zero_entries_round_trip() {
        let mut lane = vec![0u8; 512];
        let mut w = RecordWriter::new(&mut lane);
        assert!(w.push_write_sum(4096 + 32, &[5; 8], 4096 - 4, [1, 2, 3, 4]));
        assert!(w.push_new(8192 - 16, 40, 0xdead_beef));
        assert!(w.push_zero(16384, 2048));
        assert!(
            !w.push_write_sum(100, &[5; 8], 98, [0; 4]),
            "sum overlaps the data"
        );
        assert!(
            !w.push_write_sum(100, &[5; 8], 200, [0; 4]),
            "sum above the data"
        );
        let n = w.seal(9);
        assert_eq!(
            n,
            ENTRIES_OFFSET - SEAL_OFFSET
                + entry_size(WRITE_SUM_PREFIX + 8)
                + entry_size(NEW_LEN)
                + entry_size(ZERO_LEN)
        );
        let r = decode(&lane).unwrap();
        let ops: Vec<Op<'_>> = entries(&lane, &r).map(|e| e.unwrap().op()).collect();
        assert_eq!(
            ops,
            vec![
                Op::Write {
                    off: 4096 + 32,
                    data: &[5; 8],
                    sum: Some((4096 - 4, [1, 2, 3, 4])),
                },
                Op::New {
                    hdr: 8192 - 16,
                    size: 40,
                    crc: 0xdead_beef,
                    header: None,
                },
                Op::Zero {
                    off: 16384,
                    len: 2048,
                },
            ]
        );
    }

    #[test]
    fn older_verify_entries_still_read() {
        let mut lane = vec![0u8; 512];
        let mut w = RecordWriter::new(&mut lane);
        let mut v = [0u8; VERIFY_LEN];
        v[..8].copy_from_slice(&48u64.to_le_bytes());
        v[8..12].copy_from_slice(&0x77u32.to_le_bytes());
        v[16..20].copy_from_slice(&0x1234_5678u32.to_le_bytes());
        assert!(w.push_kind(4096, KIND_VERIFY, &v));
        w.seal(3);
        let r = decode(&lane).unwrap();
        let e = entries(&lane, &r).next().unwrap().unwrap();
        let mut header = [0u8; 16];
        header.copy_from_slice(&v[..16]);
        assert_eq!(
            e.op(),
            Op::New {
                hdr: 4096,
                size: 48,
                crc: 0x1234_5678,
                header: Some(header),
            }
        );
    }

    #[test]
    fn misshapen_entries_make_the_record_malformed() {
        let bad: [(u64, u32, &[u8]); 7] = [
            (4096, KIND_VERIFY, &[0; 8]),
            (4096, KIND_NEW, &[0; 16]),
            (4096, KIND_ZERO, &[0; 4]),
            // a zero range past the end of the address space
            (u64::MAX - 8, KIND_ZERO, &[16, 0, 0, 0, 0, 0, 0, 0]),
            (4096, KIND_WRITE_SUM, &[0; 4]),
            // back = 2: the checksum would overlap the data
            (4096, KIND_WRITE_SUM, &[2, 0, 0, 0, 0, 0, 0, 0, 9]),
            // back beyond offset 0
            (8, KIND_WRITE_SUM, &[16, 0, 0, 0, 0, 0, 0, 0, 9]),
        ];
        for (off, kind, data) in bad {
            let mut lane = vec![0u8; 512];
            let mut w = RecordWriter::new(&mut lane);
            assert!(w.push_kind(off, kind, data));
            w.seal(3);
            assert_eq!(decode(&lane), None, "kind {kind}, {} bytes", data.len());
        }
    }

    #[test]
    fn retire_marks_check_themselves() {
        let mut lane = vec![0u8; 256];
        assert_eq!(retired(&lane), 0);
        lane[..16].copy_from_slice(&retire_mark(77));
        assert_eq!(retired(&lane), 77);
        lane[3] ^= 1;
        assert_eq!(retired(&lane), 0, "a scribbled mark is no mark");
        lane[..8].fill(0xff);
        assert_eq!(retired(&lane), 0);
    }

    #[test]
    fn full_lane_refuses_entries() {
        let mut lane = vec![0u8; 256];
        let mut w = RecordWriter::new(&mut lane);
        assert!(w.push(0, &[0; 100]));
        assert!(!w.push(0, &[0; 100]));
    }
}
