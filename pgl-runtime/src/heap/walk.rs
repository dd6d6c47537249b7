//! Walks over the persistent heap metadata (not the allocator's volatile state): every
//! allocated object, and the blocks under bitmap words that do not verify.

use super::class::SizeClasses;
use super::layout::*;
use crate::geometry::Geometry;

/// Walks the persistent heap metadata (not the volatile state): calls `f(header_offset,
/// capacity)` for every allocated object; `read_word(off)` reads a metadata word (the caller
/// decides how it synchronises with commits). Returns the offsets of checked bitmap words
/// that do not verify, whose blocks it skipped (damage: no block of theirs is trusted to
/// be an object). For `pgl check`/`info`, `pool.objects`, scrubs and opening.
pub(crate) fn walk_objects(
    geo: &Geometry,
    classes: &SizeClasses,
    zones: std::ops::Range<u64>,
    read_word: impl Fn(u64) -> u64,
    f: impl FnMut(u64, u64),
) -> Vec<u64> {
    walk_blocks(geo, classes, zones, read_word, f, |_, _| {})
        .into_iter()
        .map(|(off, _)| off)
        .collect()
}

/// `walk_objects`, also calling `unknown(header_offset, capacity)` for every block under a
/// checked bitmap word that does not verify (it may hold an object or not); the damaged
/// words come back with the value read (for their error, without reading them again).
pub(crate) fn walk_blocks(
    geo: &Geometry,
    classes: &SizeClasses,
    zones: std::ops::Range<u64>,
    read_word: impl Fn(u64) -> u64,
    f: impl FnMut(u64, u64),
    unknown: impl FnMut(u64, u64),
) -> Vec<(u64, u64)> {
    let mut damaged = Vec::new();
    walk_each(geo, classes, zones, read_word, f, unknown, |at, word| {
        damaged.push((at, word))
    });
    damaged
}

/// `walk_blocks`, handing each damaged word to `damaged(offset, value)` as it is found
/// instead of listing them: a run's worth of words is a 1/256 of its chunk, and a chunk
/// table may declare runs over holes, whose words are all damage (zeros do not verify).
pub(crate) fn walk_each(
    geo: &Geometry,
    classes: &SizeClasses,
    zones: std::ops::Range<u64>,
    read_word: impl Fn(u64) -> u64,
    mut f: impl FnMut(u64, u64),
    mut unknown: impl FnMut(u64, u64),
    mut damaged: impl FnMut(u64, u64),
) {
    let n = geo.chunks_per_zone();
    for z in zones {
        let table = geo.chunk_offset(z, 0) + CHUNK_TABLE_OFFSET;
        let mut c = 1;
        while c < n {
            let e = read_word(table + c * 8);
            match entry_kind(e) {
                KIND_RUN => {
                    // An entry pgl does not write (a block size not its class's: damage
                    // since the pool opened) would lay blocks where there are none.
                    if let Some((class, checked)) = classes.run_of_entry(e) {
                        let off = geo.chunk_offset(z, c);
                        let nb = classes.nblocks_in(class, checked);
                        let header = classes.header_in(class, checked);
                        let per = bits_per_word(checked);
                        for w in 0..classes.bitmap_words(class, checked) {
                            let at = off + u64::from(w) * 8;
                            let word = read_word(at);
                            let bits = word_bits(at, word, checked);
                            if bits.is_none() {
                                damaged(at, word);
                            }
                            for i in w * per..((w + 1) * per).min(nb) {
                                let block = (
                                    off + header + u64::from(i) * classes.block(class),
                                    classes.block(class) - HEADER_SIZE,
                                );
                                match bits {
                                    Some(b) if b & (1 << (i % per)) != 0 => f(block.0, block.1),
                                    Some(_) => {}
                                    None => unknown(block.0, block.1),
                                }
                            }
                        }
                    }
                }
                KIND_LARGE => {
                    let len = entry_arg(e).max(1);
                    if len > n - c || len > max_large_chunks(geo) {
                        // Past the zone or longer than any object: not an entry pgl writes
                        // (damage in a pool too old to checksum its metadata; the heap's
                        // load refuses it). Nothing here is trusted to be an object.
                        c += 1;
                        continue;
                    }
                    f(geo.chunk_offset(z, c), len * geo.chunk_size - HEADER_SIZE);
                    c += len;
                    continue;
                }
                _ => {}
            }
            c += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::ClassTable;

    /// Objects the walk reports in a one-zone heap whose only run (chunk 1, class `class`,
    /// every block allocated) has the chunk-table entry `entry`.
    fn objects_under(entry: u64, class: u16) -> usize {
        let geo = crate::Config::new("walk").geometry();
        let classes = SizeClasses::new(geo.chunk_size, ClassTable::StepsAndPowers);
        let table = geo.chunk_offset(0, 0) + CHUNK_TABLE_OFFSET;
        let run = geo.chunk_offset(0, 1);
        let words = u64::from(classes.bitmap_words(class, true));
        let read_word = |off: u64| {
            if off == table + 8 {
                entry
            } else if (run..run + words * 8).contains(&off) {
                bitmap_word(off, u32::MAX)
            } else {
                0
            }
        };
        let mut objects = 0;
        let damaged = walk_objects(&geo, &classes, 0..1, read_word, |_, _| objects += 1);
        assert!(damaged.is_empty(), "every bitmap word verifies");
        objects
    }

    #[test]
    fn a_run_entry_with_another_block_size_than_its_class_is_not_walked() {
        let geo = crate::Config::new("walk").geometry();
        let classes = SizeClasses::new(geo.chunk_size, ClassTable::StepsAndPowers);
        let class = 5;
        let block = classes.block(class);
        // The entry as pgl writes it: every block is an object.
        let good = run_entry(class, block, true);
        assert_eq!(objects_under(good, class), classes.nblocks(class) as usize);
        // The same class with a damaged block size (the next class's, or 16 bytes more):
        // its blocks would lie where no object starts.
        for wrong in [classes.block(class + 1), block + 16, 0] {
            assert_eq!(objects_under(run_entry(class, wrong, true), class), 0);
        }
        // A reserved bit set.
        assert_eq!(objects_under(good | 1 << 27, class), 0);
    }
}
