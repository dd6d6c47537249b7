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
/// The most zones a pool has: a header naming more is refused, and no pool grows past it.
pub const MAX_ZONES: u64 = 1 << 20;

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

/// `n / d` by one multiplication instead of a division, for the chunk indices of pool
/// arithmetic (below 2^32); larger numerators or divisors fall back to the division.
///
/// Exact: with `m = floor(2^64 / d) + 1` we have `m·d = 2^64 + e`, `0 < e <= d`, so for
/// `n = a·d + b` (`b < d`), `n·m / 2^64 = a + b/d + n·e/(d·2^64)`; when `n, d <= 2^32` the last
/// term is below `1/d`, and `b/d <= (d-1)/d`, so the floor is `a`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FastDiv {
    d: u64,
    m: u128,
    /// Numerators below this take the multiplication (0 if `d` is too large for it).
    limit: u64,
}

impl FastDiv {
    pub(crate) const fn new(d: u64) -> Self {
        assert!(d > 0, "division by zero");
        FastDiv {
            d,
            m: (1u128 << 64) / d as u128 + 1,
            limit: if d <= 1 << 32 { 1 << 32 } else { 0 },
        }
    }

    #[inline]
    pub(crate) const fn div(self, n: u64) -> u64 {
        if n < self.limit {
            ((n as u128 * self.m) >> 64) as u64
        } else {
            n / self.d
        }
    }
}

/// Where an offset in the zone area lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ZonePos {
    /// Zone index.
    pub zone: u64,
    /// Chunk index within the zone, parity row included (data chunks first).
    pub chunk: u64,
    /// Offset within the chunk.
    pub within: u64,
}

/// The offset arithmetic of the commit path (zone, chunk, parity column of an offset), with
/// every constant of [`Geometry`] precomputed and no division: the commit path asks it
/// several times per write.
///
/// Invariant: every answer equals the one `Geometry`'s own methods give (tested).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ZoneMap {
    base: u64,
    chunk_shift: u32,
    chunk_size: u64,
    row_size: u64,
    zone_size: u64,
    /// Chunks of the data rows of one zone.
    data_chunks: u64,
    /// Divides a global chunk index by the chunks of a zone (parity row included).
    zone_chunks: FastDiv,
    /// Divides a chunk index within a zone by the chunks of a row.
    row_chunks: FastDiv,
}

impl ZoneMap {
    /// The map of `g` (whose chunk size is a power of two).
    pub(crate) fn new(g: &Geometry) -> Self {
        debug_assert!(g.chunk_size.is_power_of_two());
        ZoneMap {
            base: g.zones_offset(),
            chunk_shift: g.chunk_size.trailing_zeros(),
            chunk_size: g.chunk_size,
            row_size: g.row_size(),
            zone_size: g.zone_size(),
            data_chunks: g.chunks_per_zone(),
            zone_chunks: FastDiv::new((g.rows + 1) * g.chunks_per_row),
            row_chunks: FastDiv::new(g.chunks_per_row),
        }
    }

    /// `log2(chunk_size)`.
    #[inline]
    pub(crate) fn chunk_shift(&self) -> u32 {
        self.chunk_shift
    }

    /// Where `off` lies, if at or past the start of the zones.
    #[inline]
    pub(crate) fn split(&self, off: u64) -> Option<ZonePos> {
        let rel = off.checked_sub(self.base)?;
        let global = rel >> self.chunk_shift;
        let zone = self.zone_chunks.div(global);
        Some(ZonePos {
            zone,
            chunk: global - zone * self.zone_chunks.d,
            within: rel & (self.chunk_size - 1),
        })
    }

    /// The zone of `off`, if at or past the start of the zones.
    #[inline]
    pub(crate) fn zone_of(&self, off: u64) -> Option<u64> {
        self.split(off).map(|p| p.zone)
    }

    /// The parity offset of data byte `off`, and how many bytes from `off` stay in its row;
    /// `None` outside the zones' data rows.
    #[inline]
    pub(crate) fn parity_of(&self, off: u64) -> Option<(u64, u64)> {
        let p = self.split(off)?;
        if p.chunk >= self.data_chunks {
            return None; // the parity row itself
        }
        let row = self.row_chunks.div(p.chunk);
        let col = ((p.chunk - row * self.row_chunks.d) << self.chunk_shift) + p.within;
        let parity = self.base + p.zone * self.zone_size + self.data_chunks * self.chunk_size;
        Some((parity + col, self.row_size - col))
    }

    /// Bytes from `off` to the start of the next row (or of the zone area).
    #[inline]
    pub(crate) fn room_to_next_row(&self, off: u64) -> u64 {
        match self.split(off) {
            None => self.base - off,
            Some(p) => {
                let row = self.row_chunks.div(p.chunk);
                let col = ((p.chunk - row * self.row_chunks.d) << self.chunk_shift) + p.within;
                self.row_size - col
            }
        }
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

    #[test]
    fn fast_division_is_exact() {
        for d in [
            1u64,
            2,
            3,
            7,
            10,
            11,
            101,
            202,
            1000,
            65_537,
            u32::MAX as u64,
            1 << 32,
        ] {
            let f = FastDiv::new(d);
            for n in [
                0u64,
                1,
                d - 1,
                d,
                d + 1,
                12_345_678,
                u32::MAX as u64 - 1,
                u32::MAX as u64,
            ] {
                assert_eq!(f.div(n), n / d, "{n} / {d}");
            }
            // the largest multiple of d below 2^32, and its neighbours
            let top = (u32::MAX as u64 / d) * d;
            for n in [top.saturating_sub(1), top, top + d - 1] {
                assert_eq!(f.div(n), n / d, "{n} / {d}");
            }
        }
        let big = FastDiv::new((1 << 40) + 3);
        assert_eq!(big.div(u64::MAX), u64::MAX / ((1 << 40) + 3));
    }

    proptest::proptest! {
        #[test]
        fn zone_map_agrees_with_geometry(
            shift in 16u32..22,
            cpr in 1u64..5,
            rows in 1u64..130,
            lanes in 1u64..9,
            d in 1u64..300_000,
            off_frac in 0.0f64..1.0,
        ) {
            let g = Geometry {
                chunk_size: 1 << shift,
                chunks_per_row: cpr,
                rows,
                lanes,
                lane_size: 64 << 10,
            };
            let m = ZoneMap::new(&g);
            let zones = 3;
            let end = g.pool_size(zones) + 4096;
            for off in [(end as f64 * off_frac) as u64, g.zones_offset() + d, d] {
                let want_zone = (off >= g.zones_offset())
                    .then(|| (off - g.zones_offset()) / g.zone_size());
                proptest::prop_assert_eq!(m.zone_of(off), want_zone);
                if let Some(pos) = g.locate(off, zones) {
                    let got = m.split(off).unwrap();
                    proptest::prop_assert_eq!((got.zone, got.chunk, got.within),
                        (pos.zone, pos.chunk, pos.within));
                }
                let slow = (off >= g.zones_offset()).then(|| {
                    let in_zone = (off - g.zones_offset()) % g.zone_size();
                    let col = in_zone % g.row_size();
                    let z = (off - g.zones_offset()) / g.zone_size();
                    (in_zone < g.rows * g.row_size())
                        .then(|| (g.parity_offset(z) + col, g.row_size() - col))
                }).flatten();
                proptest::prop_assert_eq!(m.parity_of(off), slow);
                let room = if off < g.zones_offset() {
                    g.zones_offset() - off
                } else {
                    g.row_size() - (off - g.zones_offset()) % g.row_size()
                };
                proptest::prop_assert_eq!(m.room_to_next_row(off), room);
            }
        }
    }
}
