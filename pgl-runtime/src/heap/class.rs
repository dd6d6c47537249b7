//! Size classes: the block sizes small objects are rounded up to, and how many blocks of
//! each fit in a run chunk. Derived from the chunk size and the pool's class table alone
//! (fixed when the pool is made, named by its header), so every build agrees.
//!
//! Invariant: block sizes are multiples of 16, strictly increasing; every run's bitmap
//! header plus its blocks fit in one chunk, in either bitmap format. A table's classes are
//! numbered in that order, and a run's chunk-table entry names its class by number: a
//! pool is read with the table it was made with.

use super::layout::{bits_per_word, entry_arg, entry_checked, entry_class};

/// Which list of block sizes a pool's runs are cut to. Fixed when the pool is created
/// (its header says which, `Header::class_table`); a pool keeps its table for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassTable {
    /// 16-byte steps to 256 B, then eight steps per doubling, up to a quarter chunk: the
    /// table of pools made before format 8.
    Steps,
    /// `Steps` and, for every power of two p from 1 KiB, a block of p + 64 bytes: a
    /// power-of-two payload with its 16-byte header in whole cache lines (pools made since
    /// format 8). With `Steps` alone such an object takes the next step, 1/8 of p larger
    /// (a 4 KiB payload a 4,608-byte block): 10 % of the space wasted, and objects spaced
    /// so far apart that reading one cold costs up to three times as much on the
    /// project's machine (the hardware prefetcher no longer runs ahead into the next).
    /// Whole lines: blocks of p + 16 bytes would put one object's last line and the
    /// next object's header in one cache line, whose write-backs then wait on each other.
    StepsAndPowers,
}

impl ClassTable {
    /// The other table.
    #[must_use]
    pub fn other(self) -> ClassTable {
        match self {
            ClassTable::Steps => ClassTable::StepsAndPowers,
            ClassTable::StepsAndPowers => ClassTable::Steps,
        }
    }
}

/// How `pgl info` and error messages name the table.
impl std::fmt::Display for ClassTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClassTable::Steps => "eighth steps",
            ClassTable::StepsAndPowers => "eighth steps, and whole-line fits of powers of two",
        })
    }
}

/// The size classes of a heap.
#[derive(Clone, Debug)]
pub struct SizeClasses {
    blocks: Vec<u64>,
    /// Blocks and bitmap bytes of a run: `[plain, checked]` (see `layout`: a checked
    /// bitmap word holds 32 blocks' bits, a plain one 64).
    nblocks: [Vec<u32>; 2],
    headers: [Vec<u64>; 2],
}

impl SizeClasses {
    /// Classes for chunks of `chunk_size` bytes, of table `table`: up to a quarter chunk
    /// (larger objects take whole chunks).
    pub fn new(chunk_size: u64, table: ClassTable) -> SizeClasses {
        let max = chunk_size / 4;
        let mut blocks = Vec::new();
        let mut b = 32;
        while b <= max {
            blocks.push(b);
            b += if b < 256 {
                16
            } else {
                (1u64 << (63 - b.leading_zeros())) / 8
            };
        }
        if table == ClassTable::StepsAndPowers {
            let mut p = 1024u64;
            while p + 64 <= max {
                blocks.push(p + 64);
                p *= 2;
            }
            blocks.sort_unstable();
            blocks.dedup();
        }
        let mut nblocks: [Vec<u32>; 2] = Default::default();
        let mut headers: [Vec<u64>; 2] = Default::default();
        for (f, per_word) in [false, true].map(bits_per_word).into_iter().enumerate() {
            for &bs in &blocks {
                let mut n = chunk_size / bs;
                while n > 0 && Self::header_for(n, per_word) + n * bs > chunk_size {
                    n -= 1;
                }
                nblocks[f].push(n as u32);
                headers[f].push(Self::header_for(n, per_word));
            }
        }
        SizeClasses {
            blocks,
            nblocks,
            headers,
        }
    }

    fn header_for(n: u64, per_word: u32) -> u64 {
        (n.div_ceil(u64::from(per_word)) * 8).div_ceil(64) * 64
    }

    /// Number of classes.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether there are no classes (never, for valid chunk sizes).
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The class whose blocks hold `bytes` (header included), if any is small enough.
    pub fn class_for(&self, bytes: u64) -> Option<u16> {
        let i = self.blocks.partition_point(|&b| b < bytes);
        (i < self.blocks.len()).then_some(i as u16)
    }

    /// Block size of class `c`.
    pub fn block(&self, c: u16) -> u64 {
        self.blocks[c as usize]
    }

    /// Blocks in one run of class `c` (a checked run, as pgl makes them).
    pub fn nblocks(&self, c: u16) -> u32 {
        self.nblocks_in(c, true)
    }

    /// Bytes of the bitmap header of a run of class `c` (a checked run; a multiple of 64).
    pub fn header(&self, c: u16) -> u64 {
        self.header_in(c, true)
    }

    /// Blocks in one run of class `c`, checked or plain (runs of pools made before
    /// format 5).
    pub fn nblocks_in(&self, c: u16, checked: bool) -> u32 {
        self.nblocks[checked as usize][c as usize]
    }

    /// Bytes of the bitmap header of a run of class `c`, checked or plain.
    pub fn header_in(&self, c: u16, checked: bool) -> u64 {
        self.headers[checked as usize][c as usize]
    }

    /// Words of the bitmap of a run of class `c`, checked or plain.
    pub fn bitmap_words(&self, c: u16, checked: bool) -> u32 {
        self.nblocks_in(c, checked).div_ceil(bits_per_word(checked))
    }

    /// The class and bitmap kind (checked or plain) of the run chunk-table entry `e` (kind
    /// already known to be a run), if it is one pgl writes for these classes: a known
    /// class, that class's block size, no reserved bit set. Any other run entry is damage,
    /// and nothing under it is trusted to be an object.
    pub(crate) fn run_of_entry(&self, e: u64) -> Option<(u16, bool)> {
        let class = entry_class(e);
        let fits = self.has(class, entry_arg(e)) && (e >> 25) & 0x7f == 0;
        fits.then_some((class, entry_checked(e)))
    }

    /// Whether these classes have a class `class` of blocks of `block` bytes (what a run
    /// entry cut to them names).
    pub(crate) fn has(&self, class: u16, block: u64) -> bool {
        (class as usize) < self.len() && self.block(class) == block
    }

    /// The largest block size.
    pub fn max_block(&self) -> u64 {
        self.blocks.last().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLES: [ClassTable; 2] = [ClassTable::Steps, ClassTable::StepsAndPowers];

    #[test]
    fn classes_fit_and_increase() {
        for table in TABLES {
            for cs in [16u64 << 10, 64 << 10, 256 << 10, 4 << 20] {
                let c = SizeClasses::new(cs, table);
                assert!(!c.is_empty());
                for i in 0..c.len() as u16 {
                    assert_eq!(c.block(i) % 16, 0);
                    if i > 0 {
                        assert!(c.block(i) > c.block(i - 1));
                    }
                    for (checked, per_word) in [(false, 64), (true, 32)] {
                        let (n, h) = (c.nblocks_in(i, checked) as u64, c.header_in(i, checked));
                        assert!(n >= 1);
                        assert!(h + n * c.block(i) <= cs);
                        assert!(h / 8 * per_word >= n, "room for every block's bit");
                    }
                }
                assert!(c.max_block() <= cs / 4);
            }
        }
    }

    #[test]
    fn the_steps_table_is_the_one_older_pools_were_made_with() {
        // Pools made before format 8 name their runs' classes by number in this table:
        // any change to it misreads them.
        let c = SizeClasses::new(256 << 10, ClassTable::Steps);
        assert_eq!(c.len(), 79);
        let at = |b: u64| c.class_for(b).map(|i| (i, c.block(i)));
        assert_eq!(at(32), Some((0, 32)));
        assert_eq!(at(256), Some((14, 256)));
        assert_eq!(at(1040), Some((31, 1152)));
        assert_eq!(at(4112), Some((47, 4608)));
        assert_eq!(c.max_block(), 64 << 10);
    }

    #[test]
    fn powers_add_whole_line_blocks_for_power_of_two_payloads() {
        for cs in [64u64 << 10, 256 << 10, 4 << 20] {
            let steps = SizeClasses::new(cs, ClassTable::Steps);
            let powers = SizeClasses::new(cs, ClassTable::StepsAndPowers);
            let blocks =
                |c: &SizeClasses| (0..c.len() as u16).map(|i| c.block(i)).collect::<Vec<_>>();
            let (old, new) = (blocks(&steps), blocks(&powers));
            assert!(old.iter().all(|b| new.contains(b)), "every step is kept");
            let mut p = 1024;
            while p + 64 <= cs / 4 {
                let b = powers.block(powers.class_for(p + 16).unwrap());
                assert_eq!(b, p + 64, "a {p}-byte payload");
                assert!(new.contains(&(p + 64)) && !old.contains(&(p + 64)));
                p *= 2;
            }
            assert_eq!(new.len() - old.len(), (p.trailing_zeros() - 10) as usize);
        }
    }

    #[test]
    fn fig3_sizes_waste_little() {
        for table in TABLES {
            let c = SizeClasses::new(256 << 10, table);
            for payload in [64u64, 256, 1024, 4096] {
                let b = c.block(c.class_for(payload + 16).unwrap());
                assert!(b >= payload + 16);
                assert!(b as f64 <= (payload + 16) as f64 * 1.13, "{payload} -> {b}");
                if table == ClassTable::StepsAndPowers && payload >= 1024 {
                    assert_eq!(b, payload + 64, "{payload}: whole lines, no more");
                }
            }
            assert_eq!(c.class_for(c.max_block() + 1), None);
        }
    }
}
