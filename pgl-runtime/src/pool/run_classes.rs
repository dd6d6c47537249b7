//! Whether the runs of a pool's chunk tables are cut to a given size-class table: the
//! header's flag `POWER_CLASSES` names the table, and nothing else does, so the flag is
//! checked against the runs before anything walks the heap with it.
//!
//! A run's chunk-table entry names its class by number and carries its block size, so a
//! run cut to another table shows: from the first power-of-two fit on (1,088-byte blocks)
//! the two tables number their classes differently. A pool with no run of those classes
//! reads the same with either table.

use crate::geometry::Geometry;
use crate::heap::layout::{
    entry_arg, entry_class, entry_kind, max_large_chunks, CHUNK_TABLE_OFFSET, KIND_LARGE, KIND_RUN,
};
use crate::heap::{ClassTable, SizeClasses};
use crate::persist::Media;

/// A run entry that a class table does not describe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Misfit {
    /// Offset of the chunk-table entry (copy A of the zone's metadata).
    pub offset: u64,
    /// The class number it names.
    pub class: u16,
    /// The block size it carries.
    pub block: u64,
}

/// The first run entry of the pool's `zones` (those whose entries lie below `len`) whose
/// class `table` lacks, or has with another block size; `None` if every run fits.
///
/// # Safety
/// Nothing else writes the pool's metadata meanwhile (it is opening, under its lock).
pub(super) unsafe fn misfit(
    media: &Media,
    geo: &Geometry,
    zones: u64,
    table: ClassTable,
    len: u64,
) -> Option<Misfit> {
    let classes = SizeClasses::new(geo.chunk_size, table);
    let n = geo.chunks_per_zone();
    for z in 0..zones {
        let entries = geo.chunk_offset(z, 0) + CHUNK_TABLE_OFFSET;
        let mut c = 1;
        while c < n {
            let offset = entries + c * 8;
            if offset + 8 > len {
                return None;
            }
            // SAFETY: inside the file (checked above); nothing else writes it (caller).
            let e = unsafe { media.read_u64(offset) };
            match entry_kind(e) {
                KIND_RUN => {
                    let (class, block) = (entry_class(e), entry_arg(e));
                    if !classes.has(class, block) {
                        return Some(Misfit {
                            offset,
                            class,
                            block,
                        });
                    }
                }
                KIND_LARGE => {
                    // As the walks step over a large object (a damaged length is the
                    // heap's to refuse, not evidence of a table).
                    let chunks = entry_arg(e).max(1);
                    if chunks <= n - c && chunks <= max_large_chunks(geo) {
                        c += chunks;
                        continue;
                    }
                }
                _ => {}
            }
            c += 1;
        }
    }
    None
}
