//! Pool geometry: where the headers, redo lanes and zones of a pool lie, and the arithmetic
//! that maps a pool offset to its zone, row, chunk and page column. Pure; no I/O.
//!
//! ```text
//! offset 0                 header copy A (one page)
//! PAGE                     lane copies A: lanes × lane_size
//! PAGE + L·S               lane copies B: lanes × lane_size
//! PAGE + 2·L·S             header copy B (one page)
//! zones_offset             zone 0, zone 1, …   (zones_offset is chunk aligned)
//!
//! zone = rows data rows, then one parity row; a row = chunks_per_row chunks.
//! chunk 0 of every zone holds the zone's metadata (root word, chunk table).
//! ```
//!
//! Invariant: every value here is derived from the six numbers in the pool header
//! (chunk_size, chunks_per_row, rows, lanes, lane_size, zone_count); nothing else.

/// Bytes in a page, the unit of page columns and protection.
pub const PAGE: u64 = 4096;
/// Bytes in a cache line, the unit of flushing.
pub const LINE: u64 = 64;

/// The fixed shape of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per chunk (a power of two).
    pub chunk_size: u64,
    /// Chunks in one row.
    pub chunks_per_row: u64,
    /// Data rows per zone (one more row holds parity).
    pub rows: u64,
    /// Redo lanes.
    pub lanes: u64,
    /// Bytes of one copy of one lane.
    pub lane_size: u64,
}

/// Where a chunk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPos {
    /// Zone index.
    pub zone: u64,
    /// Chunk index within the zone's data rows.
    pub chunk: u64,
    /// Offset within the chunk.
    pub within: u64,
}

impl Geometry {
    /// Bytes of one row.
    pub const fn row_size(&self) -> u64 {
        self.chunk_size * self.chunks_per_row
    }
    /// Data chunks per zone (chunk 0 is metadata).
    pub const fn chunks_per_zone(&self) -> u64 {
        self.rows * self.chunks_per_row
    }
    /// Bytes of one zone, parity row included.
    pub const fn zone_size(&self) -> u64 {
        (self.rows + 1) * self.row_size()
    }
    /// Offset of lane `lane`, copy `copy` (0 or 1).
    pub const fn lane_offset(&self, lane: u64, copy: u64) -> u64 {
        PAGE + (copy * self.lanes + lane) * self.lane_size
    }
    /// Offset of header copy `copy` (0 or 1).
    pub const fn header_offset(&self, copy: u64) -> u64 {
        if copy == 0 {
            0
        } else {
            PAGE + 2 * self.lanes * self.lane_size
        }
    }
    /// Offset of zone 0.
    pub const fn zones_offset(&self) -> u64 {
        let end = self.header_offset(1) + PAGE;
        end.div_ceil(self.chunk_size) * self.chunk_size
    }
    /// Offset of zone `z`.
    pub const fn zone_offset(&self, z: u64) -> u64 {
        self.zones_offset() + z * self.zone_size()
    }
    /// Offset of chunk `c` of zone `z`.
    pub const fn chunk_offset(&self, z: u64, c: u64) -> u64 {
        self.zone_offset(z) + c * self.chunk_size
    }
    /// Offset of the parity row of zone `z`.
    pub const fn parity_offset(&self, z: u64) -> u64 {
        self.zone_offset(z) + self.rows * self.row_size()
    }
    /// File size of a pool of `zones` zones.
    pub const fn pool_size(&self, zones: u64) -> u64 {
        self.zone_offset(zones)
    }
    /// Zones that fit in `size` bytes.
    pub const fn zones_for(&self, size: u64) -> u64 {
        if size <= self.zones_offset() {
            0
        } else {
            (size - self.zones_offset()) / self.zone_size()
        }
    }
    /// The chunk holding `off`, if `off` lies in the data rows of one of `zones` zones.
    pub const fn locate(&self, off: u64, zones: u64) -> Option<ChunkPos> {
        if off < self.zones_offset() {
            return None;
        }
        let rel = off - self.zones_offset();
        let zone = rel / self.zone_size();
        if zone >= zones {
            return None;
        }
        let in_zone = rel % self.zone_size();
        let chunk = in_zone / self.chunk_size;
        if chunk >= self.chunks_per_zone() {
            return None; // parity row
        }
        Some(ChunkPos {
            zone,
            chunk,
            within: in_zone % self.chunk_size,
        })
    }
    /// Page column of `off` within its zone's rows (the unit parity protects), if in a zone.
    pub const fn page_column(&self, off: u64) -> Option<u64> {
        if off < self.zones_offset() {
            return None;
        }
        let in_zone = (off - self.zones_offset()) % self.zone_size();
        Some((in_zone % self.row_size()) / PAGE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry {
            chunk_size: 64 << 10,
            chunks_per_row: 2,
            rows: 10,
            lanes: 4,
            lane_size: 64 << 10,
        }
    }

    #[test]
    fn regions_do_not_overlap() {
        let g = geo();
        assert_eq!(g.header_offset(0), 0);
        assert_eq!(g.lane_offset(0, 0), PAGE);
        assert!(g.lane_offset(3, 1) + g.lane_size <= g.header_offset(1));
        assert!(g.header_offset(1) + PAGE <= g.zones_offset());
        assert_eq!(g.zones_offset() % g.chunk_size, 0);
        assert_eq!(g.zone_size(), 11 * 2 * (64 << 10));
        assert_eq!(g.parity_offset(0) + g.row_size(), g.zone_offset(1));
    }

    #[test]
    fn locate_round_trips() {
        let g = geo();
        for z in 0..3 {
            for c in 0..g.chunks_per_zone() {
                let off = g.chunk_offset(z, c) + 100;
                let p = g.locate(off, 3).unwrap();
                assert_eq!((p.zone, p.chunk, p.within), (z, c, 100));
            }
            assert_eq!(g.locate(g.parity_offset(z), 3), None);
        }
        assert_eq!(g.locate(g.zone_offset(3), 3), None);
        assert_eq!(g.locate(5, 3), None);
    }

    #[test]
    fn zones_for_inverts_pool_size() {
        let g = geo();
        for z in 0..5 {
            assert_eq!(g.zones_for(g.pool_size(z)), z);
            assert_eq!(g.zones_for(g.pool_size(z) + g.zone_size() - 1), z);
        }
    }

    #[test]
    fn page_columns_repeat_per_row() {
        let g = geo();
        let a = g.page_column(g.chunk_offset(0, 0) + 3 * PAGE).unwrap();
        let b = g.page_column(g.chunk_offset(0, 2) + 3 * PAGE).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, 3);
    }
}
