//! The on-media format of a log file: two superline copies and a circular record area.
//!
//! Invariant: every integer is little-endian and fixed-width; a superline copy or a record
//! is accepted only if its checksum (CRC-32, [`crate::checksum::strong`]) verifies, so no
//! torn or scribbled byte is ever taken for data.
//!
//! # File
//!
//! ```text
//! offset              bytes      what
//! 0                   4096       superline copy A (128 bytes used, rest zero)
//! 4096                capacity   record area (circular; capacity is a multiple of 64)
//! 4096 + capacity     4096       superline copy B (128 bytes used, rest zero)
//! ```
//!
//! The copies sit at both ends of the file, so one damaged page never takes both.
//!
//! # Superline copy (128 bytes)
//!
//! ```text
//! offset  size  field       meaning
//! 0       8     magic       b"PGLLOG\0\x01"
//! 8       4     version     FORMAT version (1)
//! 12      4     policy      force policy: 0 Sync, 1 GroupCommit, 2 Frequency
//! 16      8     policy_n    its parameter (window or frequency; 0 for Sync)
//! 24      8     capacity    bytes of the record area
//! 32      8     seq         incremented on every superline write: the valid copy is the
//!                           verified one with the larger seq
//! 40      8     start_lsn   LSN of the first live record (1 in a new log)
//! 48      8     start_voff  its virtual offset (see below)
//! 56      8     epoch_lsn   first LSN written in the current epoch
//! 64      4     epoch       the current epoch: bumped by every open
//! 68      4     start_epoch the epoch of the record at start_lsn (if it is not written
//!                           yet: the epoch current when the start was set)
//! 72      52    reserved    zero
//! 124     4     crc         CRC-32 of bytes 0..124
//! ```
//!
//! No tail pointer is stored: the end of the log is found by scanning records. The copies
//! alternate: a superline write always goes to the copy that is *not* the valid one, so a
//! torn write leaves the other, still valid, copy in place. The same line (same `seq`) then
//! goes into the other copy too, so that both name the current epoch and start and the
//! loss of either never brings back an older one. Every superline update raises
//! `seq`, and with it `start_lsn` (a reclaim) or `epoch` (an open): the valid copy is the one
//! with the newest start LSN in its epoch.
//!
//! # Records
//!
//! A record's *virtual offset* (`voff`) counts bytes appended since the log was created;
//! its place in the area is `voff % capacity`. A record never wraps around the end of the
//! area: one that does not fit in the bytes left before the end goes to offset 0, and the
//! bytes it skipped belong to no record.
//!
//! ```text
//! offset  size  field    meaning
//! 0       8     lsn      log sequence number: consecutive from 1
//! 8       4     len      payload bytes; bit 31 set: an aborted record (skipped by readers)
//! 12      4     epoch    the epoch the record was written in
//! 16      4     magic    0x4C52_4543 ("CERL" little-endian)
//! 20      4     crc      CRC-32 of bytes 0..20, the record's area offset (u64), the payload
//! 24      len   payload
//! ...           padding  to the next multiple of 64 (not covered, any value)
//! ```
//!
//! A record is valid where the scan expects LSN `L` only if its `lsn` is `L` (the header is
//! validated by LSN), its `crc` verifies (covering its place, so a misdirected write fails)
//! and its epoch fits the chain: never below the epoch of the record before it (of the
//! first record: `start_epoch`), never above the current epoch, equal to it from
//! `epoch_lsn` on and below it before. LSNs only grow along the chain and a generation only
//! hands out LSNs above those that survived the last crash, so epochs never decrease along
//! the true chain; a record left over from before a crash (beyond the cut where recovery
//! stopped) was written in an older generation than the record now before it, so it can
//! never pass for a new one — not even where a newer record skipped its place to wrap.

use crate::checksum::Strong;

/// Bytes per cache line: the alignment of every record.
pub const LINE: u64 = 64;
/// Bytes reserved for each superline copy (a page).
pub const SUPER_PAGE: u64 = 4096;
/// Bytes of a superline copy that are used.
pub const SUPER_LEN: usize = 128;
/// Offset of the record area in the file.
pub const AREA_OFFSET: u64 = SUPER_PAGE;
/// The superline magic.
pub const MAGIC: [u8; 8] = *b"PGLLOG\0\x01";
/// The format version this build reads and writes.
pub const VERSION: u32 = 1;
/// The record header magic.
pub const RECORD_MAGIC: u32 = 0x4C52_4543;
/// Bytes of a record header.
pub const HEADER_LEN: u64 = 24;
/// Bit of `len` marking an aborted record.
pub const ABORTED: u32 = 1 << 31;
/// The largest payload a record can hold, whatever the capacity.
pub const MAX_PAYLOAD: u64 = (ABORTED - 1) as u64;
/// LSNs and virtual offsets stay below this (2^62): no arithmetic on them can overflow.
pub const MAX_LSN: u64 = 1 << 62;
/// The smallest record area.
pub const MIN_CAPACITY: u64 = 4096;
/// The largest record area a new log gets (128 TiB, the user address space of x86-64): the
/// whole file is mapped, and its size arithmetic stays far from overflow.
pub const MAX_CAPACITY: u64 = 1 << 47;

// Superline fields, chained.
const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const POLICY_OFFSET: usize = VERSION_OFFSET + 4;
const POLICY_N_OFFSET: usize = POLICY_OFFSET + 4;
const CAPACITY_OFFSET: usize = POLICY_N_OFFSET + 8;
const SEQ_OFFSET: usize = CAPACITY_OFFSET + 8;
const START_LSN_OFFSET: usize = SEQ_OFFSET + 8;
const START_VOFF_OFFSET: usize = START_LSN_OFFSET + 8;
const EPOCH_LSN_OFFSET: usize = START_VOFF_OFFSET + 8;
const EPOCH_OFFSET: usize = EPOCH_LSN_OFFSET + 8;
const START_EPOCH_OFFSET: usize = EPOCH_OFFSET + 4;
const RESERVED_OFFSET: usize = START_EPOCH_OFFSET + 4;
const SUPER_CRC_OFFSET: usize = SUPER_LEN - 4;

// Record header fields, chained.
const LSN_OFFSET: usize = 0;
const LEN_OFFSET: usize = LSN_OFFSET + 8;
const REPOCH_OFFSET: usize = LEN_OFFSET + 4;
const RMAGIC_OFFSET: usize = REPOCH_OFFSET + 4;
const RCRC_OFFSET: usize = RMAGIC_OFFSET + 4;
const _: () = assert!(RCRC_OFFSET + 4 == HEADER_LEN as usize);
const _: () = assert!(RESERVED_OFFSET <= SUPER_CRC_OFFSET);

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// The file offset of superline copy `copy` (0 or 1) in a file with this record area.
pub fn super_offset(copy: usize, capacity: u64) -> u64 {
    if copy == 0 {
        0
    } else {
        AREA_OFFSET + capacity
    }
}

/// The file length of a log with this record area.
pub fn file_len(capacity: u64) -> u64 {
    AREA_OFFSET + capacity + SUPER_PAGE
}

/// Bytes a record with `len` payload bytes occupies in the area (header and padding).
pub fn record_size(len: u64) -> u64 {
    (HEADER_LEN + len).div_ceil(LINE) * LINE
}

/// One superline copy, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superline {
    /// Force policy code (0 Sync, 1 GroupCommit, 2 Frequency).
    pub policy: u32,
    /// The policy's parameter.
    pub policy_n: u64,
    /// Bytes of the record area.
    pub capacity: u64,
    /// Write sequence number: the larger valid one wins.
    pub seq: u64,
    /// LSN of the first live record.
    pub start_lsn: u64,
    /// Virtual offset of the first live record.
    pub start_voff: u64,
    /// First LSN of the current epoch.
    pub epoch_lsn: u64,
    /// The current epoch.
    pub epoch: u32,
    /// The epoch of the record at `start_lsn` (or the epoch current when the start was
    /// set, if that record is not written yet).
    pub start_epoch: u32,
}

impl Superline {
    /// The 128 bytes of this copy, checksum included.
    pub fn encode(&self) -> [u8; SUPER_LEN] {
        let mut b = [0u8; SUPER_LEN];
        b[MAGIC_OFFSET..MAGIC_OFFSET + 8].copy_from_slice(&MAGIC);
        b[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&VERSION.to_le_bytes());
        b[POLICY_OFFSET..POLICY_OFFSET + 4].copy_from_slice(&self.policy.to_le_bytes());
        b[POLICY_N_OFFSET..POLICY_N_OFFSET + 8].copy_from_slice(&self.policy_n.to_le_bytes());
        b[CAPACITY_OFFSET..CAPACITY_OFFSET + 8].copy_from_slice(&self.capacity.to_le_bytes());
        b[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&self.seq.to_le_bytes());
        b[START_LSN_OFFSET..START_LSN_OFFSET + 8].copy_from_slice(&self.start_lsn.to_le_bytes());
        b[START_VOFF_OFFSET..START_VOFF_OFFSET + 8].copy_from_slice(&self.start_voff.to_le_bytes());
        b[EPOCH_LSN_OFFSET..EPOCH_LSN_OFFSET + 8].copy_from_slice(&self.epoch_lsn.to_le_bytes());
        b[EPOCH_OFFSET..EPOCH_OFFSET + 4].copy_from_slice(&self.epoch.to_le_bytes());
        b[START_EPOCH_OFFSET..START_EPOCH_OFFSET + 4]
            .copy_from_slice(&self.start_epoch.to_le_bytes());
        let crc = crate::checksum::strong(&b[..SUPER_CRC_OFFSET]);
        b[SUPER_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a copy; `Err` says why it is not a valid superline.
    pub fn decode(b: &[u8]) -> Result<Superline, String> {
        if b.len() < SUPER_LEN {
            return Err(format!("only {} bytes", b.len()));
        }
        let b = &b[..SUPER_LEN];
        if b[..8] != MAGIC {
            return if b.iter().all(|&x| x == 0) {
                Err("all zero".into())
            } else {
                Err("no log magic".into())
            };
        }
        let stored = u32_at(b, SUPER_CRC_OFFSET);
        let computed = crate::checksum::strong(&b[..SUPER_CRC_OFFSET]);
        if stored != computed {
            return Err(format!(
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        let version = u32_at(b, VERSION_OFFSET);
        if version != VERSION {
            return Err(format!(
                "format version {version}, this pgl reads version {VERSION}"
            ));
        }
        let s = Superline {
            policy: u32_at(b, POLICY_OFFSET),
            policy_n: u64_at(b, POLICY_N_OFFSET),
            capacity: u64_at(b, CAPACITY_OFFSET),
            seq: u64_at(b, SEQ_OFFSET),
            start_lsn: u64_at(b, START_LSN_OFFSET),
            start_voff: u64_at(b, START_VOFF_OFFSET),
            epoch_lsn: u64_at(b, EPOCH_LSN_OFFSET),
            epoch: u32_at(b, EPOCH_OFFSET),
            start_epoch: u32_at(b, START_EPOCH_OFFSET),
        };
        if s.capacity < MIN_CAPACITY || s.capacity % LINE != 0 {
            return Err(format!(
                "record area of {} bytes (must be a multiple of {LINE}, at least {MIN_CAPACITY})",
                s.capacity
            ));
        }
        if s.start_epoch == 0 || s.start_epoch > s.epoch {
            return Err(format!(
                "start epoch {} outside 1..={} (the current epoch)",
                s.start_epoch, s.epoch
            ));
        }
        if s.start_lsn == 0 || s.epoch_lsn == 0 || s.epoch == 0 {
            return Err(format!(
                "start LSN {}, epoch {} from LSN {}: LSNs and epochs start at 1",
                s.start_lsn, s.epoch, s.epoch_lsn
            ));
        }
        if [s.seq, s.start_lsn, s.epoch_lsn, s.start_voff]
            .iter()
            .any(|&v| v > MAX_LSN)
        {
            return Err(format!(
                "sequence {}, start LSN {}, epoch LSN {} or start offset {} beyond 2^62",
                s.seq, s.start_lsn, s.epoch_lsn, s.start_voff
            ));
        }
        if s.start_voff % LINE != 0 {
            return Err(format!("start offset {} is not line-aligned", s.start_voff));
        }
        Ok(s)
    }
}

/// Picks the valid copy of two decoded superline copies: the verified one with the larger
/// `seq`. `None` when neither verifies.
pub fn pick(a: &Result<Superline, String>, b: &Result<Superline, String>) -> Option<usize> {
    match (a, b) {
        (Ok(x), Ok(y)) => Some(if y.seq > x.seq { 1 } else { 0 }),
        (Ok(_), Err(_)) => Some(0),
        (Err(_), Ok(_)) => Some(1),
        (Err(_), Err(_)) => None,
    }
}

/// A record header, decoded (not yet validated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Its LSN.
    pub lsn: u64,
    /// The `len` word: payload length, with bit 31 marking an aborted record.
    pub len_word: u32,
    /// The epoch it was written in.
    pub epoch: u32,
    /// The header magic.
    pub magic: u32,
    /// The stored checksum.
    pub crc: u32,
}

impl RecordHeader {
    /// A header for a record about to be completed (its crc is filled by [`seal`]).
    pub fn new(lsn: u64, len: u32, aborted: bool, epoch: u32) -> RecordHeader {
        RecordHeader {
            lsn,
            len_word: len | if aborted { ABORTED } else { 0 },
            epoch,
            magic: RECORD_MAGIC,
            crc: 0,
        }
    }

    /// Payload bytes.
    pub fn len(&self) -> u64 {
        u64::from(self.len_word & !ABORTED)
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the record was aborted (its reservation dropped without `complete`).
    pub fn aborted(&self) -> bool {
        self.len_word & ABORTED != 0
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        b[LSN_OFFSET..LSN_OFFSET + 8].copy_from_slice(&self.lsn.to_le_bytes());
        b[LEN_OFFSET..LEN_OFFSET + 4].copy_from_slice(&self.len_word.to_le_bytes());
        b[REPOCH_OFFSET..REPOCH_OFFSET + 4].copy_from_slice(&self.epoch.to_le_bytes());
        b[RMAGIC_OFFSET..RMAGIC_OFFSET + 4].copy_from_slice(&self.magic.to_le_bytes());
        b[RCRC_OFFSET..RCRC_OFFSET + 4].copy_from_slice(&self.crc.to_le_bytes());
        b
    }

    /// Decodes the first [`HEADER_LEN`] bytes of `b` (which must hold that many).
    pub fn decode(b: &[u8]) -> RecordHeader {
        RecordHeader {
            lsn: u64_at(b, LSN_OFFSET),
            len_word: u32_at(b, LEN_OFFSET),
            epoch: u32_at(b, REPOCH_OFFSET),
            magic: u32_at(b, RMAGIC_OFFSET),
            crc: u32_at(b, RCRC_OFFSET),
        }
    }
}

/// The checksum of a record: its header fields before `crc`, its area offset, its payload.
pub fn record_crc(h: &RecordHeader, area_off: u64, payload: &[u8]) -> u32 {
    // Bytes fed in one piece when short: each piece costs the CRC a setup that a small
    // record would pay three times (measured: 64 B appends ~8 % faster).
    const SHORT: usize = 256;
    const PREFIX: usize = RCRC_OFFSET + 8;
    let hb = h.encode();
    let mut s = Strong::new();
    if payload.len() <= SHORT - PREFIX {
        let mut buf = [0u8; SHORT];
        buf[..RCRC_OFFSET].copy_from_slice(&hb[..RCRC_OFFSET]);
        buf[RCRC_OFFSET..PREFIX].copy_from_slice(&area_off.to_le_bytes());
        buf[PREFIX..PREFIX + payload.len()].copy_from_slice(payload);
        s.update(&buf[..PREFIX + payload.len()]);
    } else {
        s.update(&hb[..RCRC_OFFSET]);
        s.update(&area_off.to_le_bytes());
        s.update(payload);
    }
    s.finish()
}

/// [`record_crc`] fed the payload piece by piece: the same checksum, whatever the pieces.
pub(crate) struct RecordCrc(Strong);

impl RecordCrc {
    /// The checksum of the record `h` at `area_off`, before any payload.
    pub(crate) fn new(h: &RecordHeader, area_off: u64) -> RecordCrc {
        let mut s = Strong::new();
        s.update(&h.encode()[..RCRC_OFFSET]);
        s.update(&area_off.to_le_bytes());
        RecordCrc(s)
    }

    /// Feeds the next bytes of the payload.
    pub(crate) fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }

    /// The checksum.
    pub(crate) fn finish(self) -> u32 {
        self.0.finish()
    }
}

/// `h` with its crc computed over `payload` at `area_off`.
pub fn seal(mut h: RecordHeader, area_off: u64, payload: &[u8]) -> RecordHeader {
    h.crc = record_crc(&h, area_off, payload);
    h
}

/// Which epochs a record may carry: at least `min_epoch` (the epoch of the record before
/// it in the chain), the current `epoch` from `epoch_lsn` on, an earlier one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochRule {
    /// First LSN of the current epoch.
    pub epoch_lsn: u64,
    /// The current epoch.
    pub epoch: u32,
    /// The smallest epoch the record may carry.
    pub min_epoch: u32,
}

impl EpochRule {
    /// Whether a record with LSN `lsn` may carry `epoch`.
    pub fn allows(&self, lsn: u64, epoch: u32) -> bool {
        epoch >= self.min_epoch
            && if lsn >= self.epoch_lsn {
                epoch == self.epoch
            } else {
                epoch < self.epoch
            }
    }

    /// The rule for the record after one of epoch `epoch`.
    pub fn after(self, epoch: u32) -> EpochRule {
        EpochRule {
            min_epoch: epoch,
            ..self
        }
    }
}

/// Why a place in the area holds no valid record with the expected LSN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The header does not claim the expected LSN: no record was written here (the end of
    /// the log, in a scan).
    Absent,
    /// The header claims the expected LSN but the record fails validation: torn or damaged.
    Damaged(String),
}

/// Validates the record at area offset `off`, whose bytes from `off` on are `bytes` (as
/// many as may be read there), as the record with LSN `lsn`; on success returns its header.
/// Reads only inside `bytes`, whatever they are.
pub fn check_at(
    bytes: &[u8],
    off: u64,
    lsn: u64,
    rule: EpochRule,
) -> Result<RecordHeader, Invalid> {
    let Some(head) = bytes.get(..HEADER_LEN as usize) else {
        return Err(Invalid::Absent);
    };
    let h = check_header(head, bytes.len() as u64, off, lsn, rule)?;
    let p = HEADER_LEN as usize;
    let payload = &bytes[p..p + h.len() as usize];
    check_crc(h, record_crc(&h, off, payload))
}

/// Everything [`check_at`] checks but the checksum, from the record's header bytes
/// `head` alone: `avail` is how many bytes the area has from area offset `off` on. A
/// record that passes has `HEADER_LEN + len() <= avail`.
pub(crate) fn check_header(
    head: &[u8],
    avail: u64,
    off: u64,
    lsn: u64,
    rule: EpochRule,
) -> Result<RecordHeader, Invalid> {
    if off % LINE != 0 || avail < HEADER_LEN || head.len() < HEADER_LEN as usize {
        return Err(Invalid::Absent);
    }
    let h = RecordHeader::decode(&head[..HEADER_LEN as usize]);
    if h.lsn != lsn {
        return Err(Invalid::Absent);
    }
    if h.magic != RECORD_MAGIC {
        return Err(Invalid::Damaged(format!(
            "header magic {:#010x}, expected {RECORD_MAGIC:#010x}",
            h.magic
        )));
    }
    if h.len() > avail - HEADER_LEN {
        return Err(Invalid::Damaged(format!(
            "length {} runs past the end of the record area",
            h.len()
        )));
    }
    if !rule.allows(lsn, h.epoch) {
        return Err(Invalid::Damaged(format!(
            "epoch {} does not fit (at least {}; LSNs from {} are epoch {})",
            h.epoch, rule.min_epoch, rule.epoch_lsn, rule.epoch
        )));
    }
    Ok(h)
}

/// `h` if `crc`, computed over its bytes, is the one it stores.
pub(crate) fn check_crc(h: RecordHeader, crc: u32) -> Result<RecordHeader, Invalid> {
    if crc != h.crc {
        return Err(Invalid::Damaged(format!(
            "checksum mismatch (stored {:#010x}, computed {crc:#010x})",
            h.crc
        )));
    }
    Ok(h)
}

/// [`check_at`] over a whole area.
pub fn check_record(
    area: &[u8],
    off: u64,
    lsn: u64,
    rule: EpochRule,
) -> Result<RecordHeader, Invalid> {
    match area.get(off as usize..) {
        Some(bytes) => check_at(bytes, off, lsn, rule),
        None => Err(Invalid::Absent),
    }
}

/// Finds the record with LSN `lsn` that starts at virtual offset `voff` or, had it not fit
/// before the end of a `cap`-byte area, at the next multiple of `cap`. `read(v)` gives the
/// bytes that may be read from virtual offset `v` on (up to the end of the area at most).
/// Returns the record's virtual offset and header, or where and why there is none (damage
/// found at either place wins over absence; an empty area holds none).
pub fn locate_in<'a>(
    cap: u64,
    read: impl Fn(u64) -> &'a [u8],
    voff: u64,
    lsn: u64,
    rule: EpochRule,
) -> Result<(u64, RecordHeader), (u64, Invalid)> {
    locate_by(cap, |v| check_at(read(v), v % cap, lsn, rule), voff)
}

/// [`locate_in`] with `check(v)` checking the record expected at virtual offset `v`.
pub(crate) fn locate_by(
    cap: u64,
    check: impl Fn(u64) -> Result<RecordHeader, Invalid>,
    voff: u64,
) -> Result<(u64, RecordHeader), (u64, Invalid)> {
    if cap == 0 {
        return Err((voff, Invalid::Absent));
    }
    let p = voff % cap;
    let here = match check(voff) {
        Ok(h) => return Ok((voff, h)),
        Err(e) => e,
    };
    if p != 0 {
        let skip = cap - p;
        match check(voff + skip) {
            // A record at 0 is this one only if it could not have fit at `p`.
            Ok(h) if record_size(h.len()) > skip => return Ok((voff + skip, h)),
            Ok(_) => {}
            Err(Invalid::Damaged(why)) if here == Invalid::Absent => {
                return Err((voff + skip, Invalid::Damaged(why)))
            }
            Err(_) => {}
        }
    }
    Err((voff, here))
}

/// [`locate_in`] over a whole area.
pub fn locate(
    area: &[u8],
    voff: u64,
    lsn: u64,
    rule: EpochRule,
) -> Result<(u64, RecordHeader), (u64, Invalid)> {
    let cap = area.len() as u64;
    locate_in(cap, |v| &area[(v % cap) as usize..], voff, lsn, rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_crc_is_the_crc_of_header_fields_offset_and_payload_at_any_length() {
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 31 + 7) as u8).collect();
        let h = RecordHeader::new(42, 0, false, 3);
        // Around the length where the bytes stop being fed in one piece, and far past it.
        for len in [0, 1, 63, 227, 228, 229, 255, 256, 1000] {
            let mut all = h.encode()[..RCRC_OFFSET].to_vec();
            all.extend_from_slice(&0x1_2340u64.to_le_bytes());
            all.extend_from_slice(&payload[..len]);
            // The oracle: the CRC of the whole concatenation, fed at once.
            let mut oracle = crc32fast::Hasher::new_with_initial(0);
            oracle.update(&all);
            assert_eq!(
                record_crc(&h, 0x1_2340, &payload[..len]),
                oracle.finalize(),
                "len {len}"
            );
        }
    }

    fn sample() -> Superline {
        Superline {
            policy: 2,
            policy_n: 8,
            capacity: 1 << 20,
            seq: 7,
            start_lsn: 42,
            start_voff: 64 * 100,
            epoch_lsn: 50,
            epoch: 3,
            start_epoch: 2,
        }
    }

    #[test]
    fn superline_round_trips_and_pins_its_layout() {
        let s = sample();
        let b = s.encode();
        assert_eq!(&b[0..8], b"PGLLOG\0\x01");
        assert_eq!(u32_at(&b, 8), VERSION);
        assert_eq!(u32_at(&b, 12), 2);
        assert_eq!(u64_at(&b, 16), 8);
        assert_eq!(u64_at(&b, 24), 1 << 20);
        assert_eq!(u64_at(&b, 32), 7);
        assert_eq!(u64_at(&b, 40), 42);
        assert_eq!(u64_at(&b, 48), 6400);
        assert_eq!(u64_at(&b, 56), 50);
        assert_eq!(u32_at(&b, 64), 3);
        assert_eq!(u32_at(&b, 68), 2);
        assert!(b[72..124].iter().all(|&x| x == 0));
        assert_eq!(Superline::decode(&b), Ok(s));
    }

    #[test]
    fn superline_rejects_every_single_bit_flip() {
        let b = sample().encode();
        for bit in (0..SUPER_LEN * 8).step_by(crate::miri_or(1, 7)) {
            let mut c = b;
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(Superline::decode(&c).is_err(), "bit {bit} flip accepted");
        }
        assert_eq!(Superline::decode(&[0u8; 128]), Err("all zero".into()));
        assert!(Superline::decode(&b[..100]).is_err());
    }

    #[test]
    fn pick_takes_the_newer_valid_copy() {
        let a = sample();
        let mut b = sample();
        b.seq = 8;
        assert_eq!(pick(&Ok(a.clone()), &Ok(b.clone())), Some(1));
        assert_eq!(pick(&Ok(b.clone()), &Ok(a.clone())), Some(0));
        assert_eq!(pick(&Err("x".into()), &Ok(a.clone())), Some(1));
        assert_eq!(pick(&Ok(a), &Err("x".into())), Some(0));
        assert_eq!(pick(&Err("x".into()), &Err("y".into())), None);
    }

    fn put(area: &mut [u8], off: u64, lsn: u64, payload: &[u8], epoch: u32) {
        let h = seal(
            RecordHeader::new(lsn, payload.len() as u32, false, epoch),
            off,
            payload,
        );
        let o = off as usize;
        area[o..o + 24].copy_from_slice(&h.encode());
        area[o + 24..o + 24 + payload.len()].copy_from_slice(payload);
    }

    const RULE: EpochRule = EpochRule {
        epoch_lsn: 1,
        epoch: 1,
        min_epoch: 1,
    };

    #[test]
    fn record_header_layout() {
        let h = RecordHeader::new(0x0102_0304_0506_0708, 5, true, 9);
        let b = h.encode();
        assert_eq!(u64_at(&b, 0), 0x0102_0304_0506_0708);
        assert_eq!(u32_at(&b, 8), 5 | ABORTED);
        assert_eq!(u32_at(&b, 12), 9);
        assert_eq!(u32_at(&b, 16), RECORD_MAGIC);
        assert_eq!(RecordHeader::decode(&b), h);
        assert!(h.aborted());
        assert_eq!(h.len(), 5);
        assert_eq!(record_size(0), 64);
        assert_eq!(record_size(40), 64);
        assert_eq!(record_size(41), 128);
        assert_eq!(record_size(4096), 4160);
    }

    #[test]
    fn records_validate_by_lsn_checksum_place_and_epoch() {
        let mut area = vec![0u8; 4096];
        put(&mut area, 128, 7, b"hello", 1);
        let h = check_record(&area, 128, 7, RULE).unwrap();
        assert_eq!(h.len(), 5);
        assert_eq!(check_record(&area, 128, 8, RULE), Err(Invalid::Absent));
        assert_eq!(check_record(&area, 0, 7, RULE), Err(Invalid::Absent));
        // A record copied elsewhere fails: the checksum covers its place.
        let copy: Vec<u8> = area[128..192].to_vec();
        area[256..320].copy_from_slice(&copy);
        assert!(matches!(
            check_record(&area, 256, 7, RULE),
            Err(Invalid::Damaged(_))
        ));
        // Every flipped bit of header or payload is caught.
        for bit in (0..(24 + 5) * 8).step_by(crate::miri_or(1, 5)) {
            let mut a = area.clone();
            a[128 + bit / 8] ^= 1 << (bit % 8);
            assert!(check_record(&a, 128, 7, RULE).is_err(), "bit {bit}");
        }
        // Epochs: from epoch_lsn on, only the current epoch.
        let rule = EpochRule {
            epoch_lsn: 7,
            epoch: 2,
            min_epoch: 1,
        };
        assert!(matches!(
            check_record(&area, 128, 7, rule),
            Err(Invalid::Damaged(_))
        ));
        let rule = EpochRule {
            epoch_lsn: 8,
            epoch: 2,
            min_epoch: 1,
        };
        assert!(check_record(&area, 128, 7, rule).is_ok());
        // Never below the epoch of the record before it.
        assert!(matches!(
            check_record(&area, 128, 7, rule.after(2)),
            Err(Invalid::Damaged(_))
        ));
    }

    #[test]
    fn a_length_past_the_area_is_damage_not_a_panic() {
        let mut area = vec![0u8; 4096];
        let h = RecordHeader::new(1, 5000, false, 1);
        area[4032..4056].copy_from_slice(&h.encode());
        assert!(matches!(
            check_record(&area, 4032, 1, RULE),
            Err(Invalid::Damaged(_))
        ));
    }

    #[test]
    fn an_empty_area_holds_no_record_rather_than_panicking() {
        // `cap % 0` panicked: a tool slicing the area of a file too short for one.
        assert_eq!(locate(&[], 4032, 9, RULE), Err((4032, Invalid::Absent)));
        assert_eq!(
            locate_in(0, |_| &[][..], 0, 1, RULE),
            Err((0, Invalid::Absent))
        );
    }

    #[test]
    fn locate_follows_a_record_that_wrapped() {
        let mut area = vec![0u8; 4096];
        // 100 payload bytes need 128; only 64 are left at 4032, so the record is at 0.
        put(&mut area, 0, 9, &[5u8; 100], 1);
        assert_eq!(locate(&area, 4096 * 3 + 4032, 9, RULE).unwrap().0, 4096 * 4);
        // A small record at 0 would have fit at 4032: it is not the one expected there.
        let mut area = vec![0u8; 4096];
        put(&mut area, 0, 9, &[5u8; 8], 1);
        assert_eq!(
            locate(&area, 4032, 9, RULE).unwrap_err(),
            (4032, Invalid::Absent)
        );
        assert_eq!(locate(&area, 0, 9, RULE).unwrap().0, 0);
    }
}
