//! On-media layout of the heap: object headers, zone metadata, chunk-table entries and run
//! headers. All integers little-endian.
//!
//! ```text
//! object header (16 bytes, at the start of a block; the payload follows):
//!   0  size      u64   payload bytes
//!   8  type_id   u32
//!  12  checksum  u32   Adler-32 of [payload offset u64][size u64][type_id u32] ++ payload
//!
//! zone metadata (chunk 0 of every zone), two copies: A at the chunk's start, B at its
//! middle (other page columns), each `meta_len` bytes (zone 0's include the registry):
//!   0     root oid   u64   (zone 0 only; 0 = no root yet)
//!   8     checksum   u64   Adler-32 of the copy with this word read as zero, XOR the
//!                          Adler-32 of as many zero bytes (so a zeroed copy is valid)
//!   16    journal    u64   (zone 0 only) the Manual migration under way (`leds::journal`);
//!                          0 = none
//!   1024  chunk table: one u64 entry per chunk of the zone (entry 0 unused)
//!   R     type registry (zone 0 only): R = the end of the chunk table, rounded up to a
//!         line; its first line holds the entry count (u64), entries follow, 64 bytes each,
//!         up to the middle of the chunk or REGISTRY_MAX_TYPES (see `tx::registry`)
//!
//! chunk-table entry:
//!   bits 0..8   kind: 0 free, 1 run, 2 large head, 3 large continuation
//!   run:        bits 8..24 class index, bit 24 checked bitmap (format 5 on),
//!               bits 32..64 block size
//!   large head: bits 32..64 number of chunks
//!
//! run chunk:
//!   0  allocation bitmap (1 = allocated), padded to 64 bytes:
//!        checked (bit 24 of the entry; every run made since format 5): each u64 holds
//!          32 blocks' bits in bits 0..32 and in bits 32..64 a check of the word's pool
//!          offset and those bits (`bitmap_check`), so a scribbled, zeroed or misdirected
//!          word does not verify
//!        plain (runs of older pools): 64 blocks' bits per u64, unchecked
//!   …  blocks of the class's size
//! ```
//!
//! Invariant: an object's checksum covers its own offset, so a misdirected copy of a valid
//! object does not verify at another place.

/// Bytes of an object header.
pub const HEADER_SIZE: u64 = 16;
/// Offset of `size` in the object header.
pub const HDR_SIZE_OFFSET: u64 = 0;
/// Offset of `type_id` in the object header.
pub const HDR_TYPE_OFFSET: u64 = HDR_SIZE_OFFSET + 8;
/// Offset of `checksum` in the object header.
pub const HDR_CHECKSUM_OFFSET: u64 = HDR_TYPE_OFFSET + 4;
/// Bytes of the checksummed prefix (payload offset, size, type id).
pub const CHECKSUM_PREFIX: usize = 20;

/// Offset of the root oid in zone 0's metadata chunk.
pub const ROOT_OFFSET: u64 = 0;
/// Offset of a zone metadata copy's checksum word.
pub const META_SUM_OFFSET: u64 = 8;
/// Offset of the migration-journal word in zone 0's metadata chunk (0 in pools that never
/// ran a migration in several transactions, as in older pools).
pub const JOURNAL_OFFSET: u64 = 16;
/// Bytes of one type-registry entry (and of the registry's count line).
pub const REGISTRY_ENTRY: u64 = 64;
/// The most types one pool registers.
pub const REGISTRY_MAX_TYPES: u64 = 1024;
/// The fewest types a geometry must leave room for.
pub const REGISTRY_MIN_TYPES: u64 = 32;

/// Offset of the type registry within zone 0's metadata chunk: after the chunk table,
/// line aligned.
pub const fn registry_offset(geo: &crate::geometry::Geometry) -> u64 {
    let table_end = CHUNK_TABLE_OFFSET + geo.rows * geo.chunks_per_row * 8;
    table_end.div_ceil(REGISTRY_ENTRY) * REGISTRY_ENTRY
}

/// Offset of zone metadata copy B within the metadata chunk: its middle.
pub const fn meta_copy_offset(geo: &crate::geometry::Geometry) -> u64 {
    geo.chunk_size / 2
}

/// Bytes of one zone metadata copy of zone `zone`: root word, checksum, chunk table, and
/// in zone 0 the registry's room.
pub const fn meta_len(geo: &crate::geometry::Geometry, zone: u64) -> u64 {
    if zone == 0 {
        registry_offset(geo) + REGISTRY_ENTRY * (1 + registry_capacity(geo))
    } else {
        registry_offset(geo)
    }
}

/// Entries the type registry of a pool of this geometry holds (within copy A, which
/// ends where copy B starts).
pub const fn registry_capacity(geo: &crate::geometry::Geometry) -> u64 {
    let start = registry_offset(geo);
    let half = meta_copy_offset(geo);
    let room = if half > start + REGISTRY_ENTRY {
        (half - start - REGISTRY_ENTRY) / REGISTRY_ENTRY
    } else {
        0
    };
    if room < REGISTRY_MAX_TYPES {
        room
    } else {
        REGISTRY_MAX_TYPES
    }
}
/// The largest payload one object can have in a pool of this geometry: what one zone's
/// data chunks hold, and at most `u32::MAX` bytes (micro-buffers track modified ranges
/// with 32-bit offsets).
pub const fn max_object(geo: &crate::geometry::Geometry) -> u64 {
    let zone = (geo.chunks_per_zone() - 1) * geo.chunk_size - HEADER_SIZE;
    if zone < u32::MAX as u64 {
        zone
    } else {
        u32::MAX as u64
    }
}

/// The most chunks a large object spans: those of the largest object. A chunk-table entry
/// claiming more is damage (or forged): its capacity could be a whole zone, terabytes of
/// a sparse file, which whoever reads the object whole would allocate.
pub const fn max_large_chunks(geo: &crate::geometry::Geometry) -> u64 {
    (max_object(geo) + HEADER_SIZE).div_ceil(geo.chunk_size)
}

/// Offset of the chunk table in a zone's metadata chunk.
pub const CHUNK_TABLE_OFFSET: u64 = 1024;

/// Chunk kind: free.
pub const KIND_FREE: u64 = 0;
/// Chunk kind: a run of small blocks.
pub const KIND_RUN: u64 = 1;
/// Chunk kind: first chunk of a large object.
pub const KIND_LARGE: u64 = 2;
/// Chunk kind: later chunk of a large object.
pub const KIND_CONT: u64 = 3;
/// Volatile-only kind: reserved by a transaction in flight.
pub const KIND_RESERVED: u64 = 0xff;

/// Run entry flag: the run's bitmap words are checked (`bitmap_word`).
pub const ENTRY_CHECKED: u64 = 1 << 24;

/// Entry of a run chunk, with a checked bitmap or a plain one.
pub const fn run_entry(class: u16, block: u64, checked: bool) -> u64 {
    KIND_RUN | (class as u64) << 8 | if checked { ENTRY_CHECKED } else { 0 } | block << 32
}
/// Whether a run entry's bitmap is checked.
pub const fn entry_checked(e: u64) -> bool {
    e & ENTRY_CHECKED != 0
}

/// Blocks per bitmap word of a checked run, or of a plain one.
pub const fn bits_per_word(checked: bool) -> u32 {
    if checked {
        32
    } else {
        64
    }
}

/// The check of a checked bitmap word at pool offset `off` holding `bits`: the high half
/// of `mix(mix(off) ^ bits)`, with `mix` the SplitMix64 finaliser (a bijection of `u64`).
///
/// Not a CRC: the words are logged in redo records sealed with CRC-32, and the XOR of two
/// words sealed with a CRC is itself a codeword of that CRC, so a record torn between an
/// old and a new value of such a word would pass the seal (the crash suite found exactly
/// that). A non-linear check has no such relation with the seal.
pub fn bitmap_check(off: u64, bits: u32) -> u32 {
    const fn mix(mut x: u64) -> u64 {
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
    (mix(mix(off ^ 0x9e37_79b9_7f4a_7c15) ^ u64::from(bits)) >> 32) as u32
}
/// The checked bitmap word at `off` holding `bits`.
pub fn bitmap_word(off: u64, bits: u32) -> u64 {
    u64::from(bits) | u64::from(bitmap_check(off, bits)) << 32
}
/// The bits of the checked bitmap word `word` at `off`, if it verifies.
pub fn bitmap_bits(off: u64, word: u64) -> Option<u32> {
    let bits = word as u32;
    (bitmap_check(off, bits) == (word >> 32) as u32).then_some(bits)
}
/// The block bits of the bitmap word `word` at `off` of a checked or plain run; `None` for
/// a checked word that does not verify.
pub fn word_bits(off: u64, word: u64, checked: bool) -> Option<u64> {
    if checked {
        bitmap_bits(off, word).map(u64::from)
    } else {
        Some(word)
    }
}
/// Entry of the head chunk of a large object of `n` chunks.
pub const fn large_entry(n: u64) -> u64 {
    KIND_LARGE | n << 32
}
/// Entry of a continuation chunk.
pub const fn cont_entry() -> u64 {
    KIND_CONT
}
/// Kind of an entry.
pub const fn entry_kind(e: u64) -> u64 {
    e & 0xff
}
/// Class of a run entry.
pub const fn entry_class(e: u64) -> u16 {
    ((e >> 8) & 0xffff) as u16
}
/// Upper 32 bits: block size of a run, chunk count of a large head.
pub const fn entry_arg(e: u64) -> u64 {
    e >> 32
}

/// Where the type id lies in an object's checksummed prefix.
pub const PREFIX_TYPE_OFFSET: usize = 16;

/// The checksummed prefix of an object, as bytes (`object_checksum` sums it as the words
/// it is made of; the tests hold the two to the same checksum).
#[cfg(test)]
pub fn checksum_prefix(payload_off: u64, size: u64, type_id: u32) -> [u8; CHECKSUM_PREFIX] {
    let mut p = [0u8; CHECKSUM_PREFIX];
    p[0..8].copy_from_slice(&payload_off.to_le_bytes());
    p[8..16].copy_from_slice(&size.to_le_bytes());
    p[PREFIX_TYPE_OFFSET..].copy_from_slice(&type_id.to_le_bytes());
    p
}

/// Adler-32 of an object (prefix + payload).
pub fn object_checksum(payload_off: u64, type_id: u32, payload: &[u8]) -> u32 {
    // The prefix's bytes (`checksum_prefix`), summed as the words they are made of.
    let prefix = crate::checksum::adler32_le_words([payload_off, payload.len() as u64], type_id);
    crate::checksum::adler32_continue(prefix, payload)
}

/// An object header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectHeader {
    /// Payload bytes.
    pub size: u64,
    /// Type id.
    pub type_id: u32,
    /// Adler-32 of the object.
    pub checksum: u32,
}

impl ObjectHeader {
    /// Encodes to 16 bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..12].copy_from_slice(&self.type_id.to_le_bytes());
        b[12..16].copy_from_slice(&self.checksum.to_le_bytes());
        b
    }
    /// Decodes 16 bytes.
    pub fn from_bytes(b: &[u8; 16]) -> Self {
        ObjectHeader {
            size: u64::from_le_bytes(b[0..8].try_into().unwrap_or([0; 8])),
            type_id: u32::from_le_bytes(b[8..12].try_into().unwrap_or([0; 4])),
            checksum: u32::from_le_bytes(b[12..16].try_into().unwrap_or([0; 4])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let e = run_entry(17, 272, true);
        assert_eq!(entry_kind(e), KIND_RUN);
        assert_eq!(entry_class(e), 17);
        assert!(entry_checked(e));
        assert!(!entry_checked(run_entry(17, 272, false)));
        assert_eq!(entry_arg(e), 272);
        let l = large_entry(9);
        assert_eq!(entry_kind(l), KIND_LARGE);
        assert_eq!(entry_arg(l), 9);
        assert_eq!(entry_kind(cont_entry()), KIND_CONT);
    }

    #[test]
    fn bitmap_words_verify_and_catch_flips_zeroing_and_misdirection() {
        let off = 0x4_0000u64;
        for bits in [0u32, 1, 0x8000_0001, u32::MAX] {
            let w = bitmap_word(off, bits);
            assert_eq!(bitmap_bits(off, w), Some(bits));
            // Every 1-, 2- and 3-bit error of the 64-bit word is caught (a 32-bit check:
            // each escapes with odds of 2^-32; these 166,656 cases all are caught).
            // (Under Miri, every single flip and a sample of the rest.)
            let step = crate::miri_or(1, 13);
            for i in 0..64 {
                assert_eq!(bitmap_bits(off, w ^ 1 << i), None, "flip {i}");
                for j in (i + 1..64).step_by(step) {
                    assert_eq!(bitmap_bits(off, w ^ 1 << i ^ 1 << j), None);
                    for k in (j + 1..64).step_by(step) {
                        assert_eq!(bitmap_bits(off, w ^ 1 << i ^ 1 << j ^ 1 << k), None);
                    }
                }
            }
            // The same word at another offset does not verify.
            assert_eq!(bitmap_bits(off + 8, w), None);
        }
        // A zeroed word is not a valid empty word (zeroing scribbles are caught).
        assert_eq!(bitmap_bits(off, 0), None);
    }

    #[test]
    fn the_change_between_two_sealed_words_is_not_a_crc32_codeword() {
        // Redo records are sealed with CRC-32: a record whose copy holds an old value of a
        // word where the new one belongs must not verify. (With a CRC-32 check it would:
        // the XOR of two CRC-sealed words is a CRC codeword, invisible to the seal.)
        let off = 0xc_0000u64;
        let mut escaped = 0;
        for (a, b) in [(0u32, 1u32), (1, 2), (2, 4), (6, 4), (0xffff, 0xfffe)] {
            let mut rec = [0u8; 64];
            rec[16..24].copy_from_slice(&bitmap_word(off, b).to_le_bytes());
            let seal = crc32fast::hash(&rec);
            rec[16..24].copy_from_slice(&bitmap_word(off, a).to_le_bytes());
            escaped += u32::from(crc32fast::hash(&rec) == seal);
        }
        assert_eq!(escaped, 0);
    }

    #[test]
    fn header_round_trips_and_checksum_covers_offset() {
        let h = ObjectHeader {
            size: 300,
            type_id: 0xdead_beef,
            checksum: 0x1234_5678,
        };
        assert_eq!(ObjectHeader::from_bytes(&h.to_bytes()), h);
        let payload = [5u8; 64];
        assert_ne!(
            object_checksum(4096, 1, &payload),
            object_checksum(8192, 1, &payload)
        );
    }

    #[test]
    fn object_checksum_is_adler32_of_prefix_and_payload() {
        for (off, type_id, len) in [(4096, 1, 0), (0x1234_5678_9abc, u32::MAX, 300), (16, 7, 64)] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let mut all = checksum_prefix(off, len as u64, type_id).to_vec();
            all.extend_from_slice(&payload);
            assert_eq!(
                object_checksum(off, type_id, &payload),
                crate::checksum::adler32(&all)
            );
        }
    }
}
