//! The pool header, kept as two copies (page 0 and the page after the lanes), each with its
//! own checksum. The valid copy with the higher generation wins (of two naming different
//! size-class tables, the one the runs fit: `run_classes`); a bad copy is rewritten from
//! the good one on open. An update writes copy A, makes it durable, then copy B: a
//! crash between (or within) the two leaves one copy a generation behind, or torn in the
//! words an update writes. Opening tells that apart from damage (`open::interrupted_update`)
//! and completes the update without counting a repair.
//!
//! ```text
//!    0  magic           [u8; 8]  "PGLPOOL\0"
//!    8  version         u32
//!   12  flags           u32      bit 0 OPEN: a process has it open (set at open, cleared
//!                                at a clean close); bit 1 PARITY: zone parity is maintained;
//!                                bit 2 NO_CHECKSUMS: object checksums were not maintained
//!                                (some may be stale) since they were last recomputed;
//!                                bit 3 POWER_CLASSES: the runs are cut to the
//!                                `StepsAndPowers` size classes (set when the pool is
//!                                made, from format 8 on; never changed)
//!   16  generation      u64      bumped by every header update
//!   24  uuid            [u8; 16]
//!   40  layout          [u8; 64] NUL-padded UTF-8
//!  104  chunk_size      u64
//!  112  chunks_per_row  u64
//!  120  rows            u64
//!  128  lanes           u64
//!  136  lane_size       u64
//!  144  zones           u64
//!  152  created         u64      seconds since the Unix epoch
//!  160  (zero)
//! 4092  checksum        u32      strong checksum of bytes 0..4092
//! ```
//!
//! Invariant: a header is accepted only if its checksum verifies and its geometry is sane
//! (every region fits, no arithmetic overflows).

use crate::checksum::strong;
use crate::geometry::{Geometry, MAX_ZONES, PAGE};
use crate::heap::ClassTable;

/// Header magic.
pub const MAGIC: [u8; 8] = *b"PGLPOOL\0";
/// The on-media format version this build writes. Version 2 added the header flags and
/// zone parity; a version-1 pool is read as one whose parity was never kept (recomputed,
/// then kept, on open) and is written back as version 2, which older builds refuse, so
/// that none can change it without keeping parity. Version 3 added NO_CHECKSUMS (a pool
/// may run without object checksums); older pools always kept them, and older builds
/// refuse version 3, which they would read as checksum damage. Version 4 keeps every
/// zone's metadata twice, with checksums (`integrity::replica`); older pools get their
/// copies on open. Version 5 seals every run's allocation bitmap words with a check
/// (`heap::layout::bitmap_word`, 32 blocks a word, marked by a bit of the run's chunk-table
/// entry): runs made by older builds keep their plain bitmaps, runs made since are
/// checked, and older builds refuse version 5, which they would misread. Version 6 writes
/// redo records with two shorter entry kinds (`tx::record`: a change carrying its object's
/// new checksum, and a new object's verify entry without a copy of its header): records of
/// older pools still replay, and older builds refuse version 6, whose records they would
/// discard as malformed. Version 7 adds a redo entry that zeroes a range (`tx::record`:
/// a new run's bitmap over a chunk whose old bytes are not zero); older builds refuse
/// version 7, whose records they would discard as malformed. Version 8 adds size classes
/// for power-of-two payloads (`heap::ClassTable::StepsAndPowers`, header flag
/// POWER_CLASSES): pools made since are cut to them, older pools keep the classes they were
/// made with (their runs name classes by number), and older builds refuse version 8, whose
/// class numbers they would misread. Version 9 lets the last extension group an
/// `#[extendible(reserve = N)]` object keeps inline end without its unused link
/// (`leds::inline`): groups older builds placed stay where they are, and older builds
/// refuse version 9, whose objects they would read as having a damaged link.
pub const FORMAT_VERSION: u32 = 9;
/// The oldest format version this build reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;
/// Header flag: a process has the pool open; still set after a crash.
pub const FLAG_OPEN: u32 = 1;
/// Header flag: zone parity has been maintained since it was last recomputed.
pub const FLAG_PARITY: u32 = 2;
/// Header flag: object checksums were not maintained at some time since they were last
/// recomputed, so they cannot be trusted until they are recomputed.
pub const FLAG_NO_CHECKSUMS: u32 = 4;
/// Header flag: the pool's runs are cut to `ClassTable::StepsAndPowers` (format 8 on; set
/// when the pool is made and kept for good: its runs name their classes by number in that
/// table).
pub const FLAG_POWER_CLASSES: u32 = 8;
/// Longest layout name, in bytes.
pub const LAYOUT_MAX: usize = 63;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const FLAGS_OFFSET: usize = VERSION_OFFSET + 4;
const GENERATION_OFFSET: usize = FLAGS_OFFSET + 4;
const UUID_OFFSET: usize = GENERATION_OFFSET + 8;
const LAYOUT_OFFSET: usize = UUID_OFFSET + 16;
const CHUNK_SIZE_OFFSET: usize = LAYOUT_OFFSET + 64;
const CHUNKS_PER_ROW_OFFSET: usize = CHUNK_SIZE_OFFSET + 8;
const ROWS_OFFSET: usize = CHUNKS_PER_ROW_OFFSET + 8;
const LANES_OFFSET: usize = ROWS_OFFSET + 8;
const LANE_SIZE_OFFSET: usize = LANES_OFFSET + 8;
const ZONES_OFFSET: usize = LANE_SIZE_OFFSET + 8;
const CREATED_OFFSET: usize = ZONES_OFFSET + 8;
const CHECKSUM_OFFSET: usize = PAGE as usize - 4;

/// A decoded pool header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Format version.
    pub version: u32,
    /// Generation (bumped on every header update).
    pub generation: u64,
    /// The pool's UUID.
    pub uuid: [u8; 16],
    /// Layout name.
    pub layout: String,
    /// Geometry.
    pub geo: Geometry,
    /// Zones in use.
    pub zones: u64,
    /// Creation time, seconds since the Unix epoch.
    pub created: u64,
    /// `FLAG_OPEN`, `FLAG_PARITY`, `FLAG_NO_CHECKSUMS` and `FLAG_POWER_CLASSES` (other bits
    /// are zero).
    pub flags: u32,
}

/// Why a header copy was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderFault {
    /// No magic: not a pgl pool (or wiped).
    NoMagic,
    /// The checksum does not match.
    Checksum,
    /// Another format version.
    Version(u32),
    /// The geometry is impossible.
    Geometry(String),
}

impl std::fmt::Display for HeaderFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderFault::NoMagic => write!(f, "no pool magic"),
            HeaderFault::Checksum => write!(f, "checksum mismatch"),
            HeaderFault::Version(v) => write!(f, "format version {v}"),
            HeaderFault::Geometry(g) => write!(f, "impossible geometry: {g}"),
        }
    }
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}

impl Header {
    /// Encodes into one page.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; PAGE as usize];
        b[MAGIC_OFFSET..MAGIC_OFFSET + 8].copy_from_slice(&MAGIC);
        b[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&self.version.to_le_bytes());
        b[FLAGS_OFFSET..FLAGS_OFFSET + 4].copy_from_slice(&self.flags.to_le_bytes());
        b[GENERATION_OFFSET..GENERATION_OFFSET + 8].copy_from_slice(&self.generation.to_le_bytes());
        b[UUID_OFFSET..UUID_OFFSET + 16].copy_from_slice(&self.uuid);
        let l = self.layout.as_bytes();
        let n = l.len().min(LAYOUT_MAX);
        b[LAYOUT_OFFSET..LAYOUT_OFFSET + n].copy_from_slice(&l[..n]);
        let g = &self.geo;
        for (o, v) in [
            (CHUNK_SIZE_OFFSET, g.chunk_size),
            (CHUNKS_PER_ROW_OFFSET, g.chunks_per_row),
            (ROWS_OFFSET, g.rows),
            (LANES_OFFSET, g.lanes),
            (LANE_SIZE_OFFSET, g.lane_size),
            (ZONES_OFFSET, self.zones),
            (CREATED_OFFSET, self.created),
        ] {
            b[o..o + 8].copy_from_slice(&v.to_le_bytes());
        }
        let c = strong(&b[..CHECKSUM_OFFSET]);
        b[CHECKSUM_OFFSET..].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes and validates one page.
    pub fn decode(b: &[u8]) -> Result<Header, HeaderFault> {
        if b.len() < PAGE as usize || b[..8] != MAGIC {
            return Err(HeaderFault::NoMagic);
        }
        if strong(&b[..CHECKSUM_OFFSET]) != u32_at(b, CHECKSUM_OFFSET) {
            return Err(HeaderFault::Checksum);
        }
        let version = u32_at(b, VERSION_OFFSET);
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(HeaderFault::Version(version));
        }
        let raw = &b[LAYOUT_OFFSET..LAYOUT_OFFSET + 64];
        let end = raw.iter().position(|&c| c == 0).unwrap_or(64);
        let layout = String::from_utf8_lossy(&raw[..end]).into_owned();
        let geo = Geometry {
            chunk_size: u64_at(b, CHUNK_SIZE_OFFSET),
            chunks_per_row: u64_at(b, CHUNKS_PER_ROW_OFFSET),
            rows: u64_at(b, ROWS_OFFSET),
            lanes: u64_at(b, LANES_OFFSET),
            lane_size: u64_at(b, LANE_SIZE_OFFSET),
        };
        let zones = u64_at(b, ZONES_OFFSET);
        check_geometry_of(&geo, zones, version >= 4).map_err(HeaderFault::Geometry)?;
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[UUID_OFFSET..UUID_OFFSET + 16]);
        Ok(Header {
            version,
            generation: u64_at(b, GENERATION_OFFSET),
            uuid,
            layout,
            geo,
            zones,
            created: u64_at(b, CREATED_OFFSET),
            // Version 1 had no flags: its parity was never kept. Before version 8 no pool
            // was cut to the power classes, whatever bit 3 says.
            flags: if version < 2 {
                0
            } else if version < 8 {
                u32_at(b, FLAGS_OFFSET) & (FLAG_OPEN | FLAG_PARITY | FLAG_NO_CHECKSUMS)
            } else {
                u32_at(b, FLAGS_OFFSET)
                    & (FLAG_OPEN | FLAG_PARITY | FLAG_NO_CHECKSUMS | FLAG_POWER_CLASSES)
            },
        })
    }

    /// The size classes the pool's runs are cut to (see `FLAG_POWER_CLASSES`).
    pub fn class_table(&self) -> ClassTable {
        if self.flags & FLAG_POWER_CLASSES != 0 {
            ClassTable::StepsAndPowers
        } else {
            ClassTable::Steps
        }
    }

    /// The pool's size in bytes.
    pub fn pool_size(&self) -> u64 {
        self.geo.pool_size(self.zones)
    }

    /// The UUID as text.
    pub fn uuid_string(&self) -> String {
        let h: String = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// Header copy B must start below this offset, so that opening a pool whose copy A is
/// damaged can find it by looking at a bounded number of pages.
pub(crate) const HEADER_B_LIMIT: u64 = 4 << 30;

/// Whether `file` may be a pgl pool: empty (a creation that never finished), or a pool
/// header's magic where copy A or some geometry's copy B would be. Damage to the rest of
/// a header does not matter here: `Pool::reset` asks it before it removes a file.
pub(crate) fn may_be_pool(mut file: &std::fs::File) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(true);
    }
    let mut magic_at = |off: u64| -> std::io::Result<bool> {
        let mut m = [0u8; 8];
        Ok(off + 8 <= len && {
            file.seek(SeekFrom::Start(off))?;
            file.read_exact(&mut m)?;
            m == MAGIC
        })
    };
    if magic_at(0)? {
        return Ok(true);
    }
    // Copy B: an odd page below HEADER_B_LIMIT (see `Pool::open`).
    let last = (len / PAGE).min(HEADER_B_LIMIT / PAGE);
    for p in (1..last).step_by(2) {
        if magic_at(p * PAGE)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Limits that keep every offset computation far from overflow.
pub(crate) fn check_geometry(g: &Geometry, zones: u64) -> Result<(), String> {
    check_geometry_of(g, zones, true)
}

/// `check_geometry` as a pool of a format with (`replicated`) or without two copies of
/// zone metadata needs it: before version 4 the registry could use the whole chunk.
fn check_geometry_of(g: &Geometry, zones: u64, replicated: bool) -> Result<(), String> {
    let pow2 = |v: u64| v.is_power_of_two();
    if !pow2(g.chunk_size) || !(16 << 10..=64 << 20).contains(&g.chunk_size) {
        return Err(format!(
            "chunk_size {} must be a power of two from 16 KiB to 64 MiB",
            g.chunk_size
        ));
    }
    if !(1..=4096).contains(&g.chunks_per_row) {
        return Err(format!(
            "chunks_per_row {} must be 1..=4096",
            g.chunks_per_row
        ));
    }
    if !(2..=10_000).contains(&g.rows) {
        return Err(format!("rows {} must be 2..=10000", g.rows));
    }
    let table = crate::heap::layout::CHUNK_TABLE_OFFSET + g.rows * g.chunks_per_row * 8;
    let types = if replicated {
        crate::heap::layout::registry_capacity(g)
    } else {
        let start = crate::heap::layout::registry_offset(g);
        let entry = crate::heap::layout::REGISTRY_ENTRY;
        (g.chunk_size.saturating_sub(start + entry) / entry)
            .min(crate::heap::layout::REGISTRY_MAX_TYPES)
    };
    if table > g.chunk_size || types < crate::heap::layout::REGISTRY_MIN_TYPES {
        return Err(format!(
            "a zone of {} chunks needs a {table}-byte chunk table, which leaves too little of \
             one {}-byte metadata chunk for the type registry ({types} types, at least {} \
             needed); use fewer rows or chunks per row, or bigger chunks",
            g.rows * g.chunks_per_row,
            g.chunk_size,
            crate::heap::layout::REGISTRY_MIN_TYPES
        ));
    }
    if !(1..=64).contains(&g.lanes) {
        return Err(format!("lanes {} must be 1..=64", g.lanes));
    }
    if g.lane_size % PAGE != 0 || !(2 * PAGE..=1 << 30).contains(&g.lane_size) {
        return Err(format!(
            "lane_size {} must be a multiple of 4096 from 8 KiB to 1 GiB",
            g.lane_size
        ));
    }
    if g.header_offset(1) + PAGE > HEADER_B_LIMIT {
        return Err(format!(
            "{} lanes of {} bytes (2 copies each) exceed 4 GiB; the header's second copy \
             must lie within the first 4 GiB: use fewer or smaller lanes",
            g.lanes, g.lane_size
        ));
    }
    // Zone 0 holds the root word and the type registry: a pool always has it, and a header
    // naming no zone would send every access to them past the end of the pool.
    if !(1..=MAX_ZONES).contains(&zones) {
        return Err(format!("{zones} zones: a pool has 1 to 2^20"));
    }
    if zones.checked_mul(g.zone_size()).is_none_or(|v| v > 1 << 50) {
        return Err("pool larger than 1 PiB".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            version: FORMAT_VERSION,
            generation: 3,
            uuid: [7; 16],
            layout: "demo".into(),
            geo: Geometry {
                chunk_size: 256 << 10,
                chunks_per_row: 1,
                rows: 100,
                lanes: 8,
                lane_size: 256 << 10,
            },
            zones: 4,
            created: 1_700_000_000,
            flags: FLAG_PARITY,
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let powers = Header {
            flags: FLAG_PARITY | FLAG_POWER_CLASSES,
            ..sample()
        };
        let back = Header::decode(&powers.encode()).unwrap();
        assert_eq!(back, powers);
        assert_eq!(back.class_table(), ClassTable::StepsAndPowers);
        assert_eq!(sample().class_table(), ClassTable::Steps);
    }

    #[test]
    fn no_pool_before_format_8_has_the_power_classes() {
        // Bit 3 in an older header is damage or a forgery: its runs were cut to the steps.
        let old = Header {
            version: 7,
            flags: FLAG_PARITY | FLAG_POWER_CLASSES,
            ..sample()
        };
        let back = Header::decode(&old.encode()).unwrap();
        assert_eq!(back.flags, FLAG_PARITY);
        assert_eq!(back.class_table(), ClassTable::Steps);
    }

    #[test]
    fn every_bit_flip_is_rejected() {
        let b = sample().encode();
        for byte in (0..160).chain(4000..4096) {
            let mut c = b.clone();
            c[byte] ^= 0x10;
            assert!(Header::decode(&c).is_err(), "byte {byte}");
        }
    }

    #[test]
    fn bad_geometry_is_rejected_even_with_a_valid_checksum() {
        let mut h = sample();
        h.geo.chunk_size = 1000;
        assert!(matches!(
            Header::decode(&h.encode()),
            Err(HeaderFault::Geometry(_))
        ));
        let mut h = sample();
        h.zones = 0;
        assert!(matches!(
            Header::decode(&h.encode()),
            Err(HeaderFault::Geometry(_))
        ));
        let mut h = sample();
        h.zones = u64::MAX;
        assert!(matches!(
            Header::decode(&h.encode()),
            Err(HeaderFault::Geometry(_))
        ));
    }
}
