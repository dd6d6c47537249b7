//! Size classes: the block sizes small objects are rounded up to, and how many blocks of
//! each fit in a run chunk. Derived from the chunk size alone, so every build agrees.
//!
//! Invariant: block sizes are multiples of 16, strictly increasing; every run's bitmap
//! header plus its blocks fit in one chunk, in either bitmap format.

use super::layout::bits_per_word;

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
    /// Classes for chunks of `chunk_size` bytes: 16-byte steps to 256 B, then eight steps per
    /// doubling, up to a quarter chunk. Larger objects take whole chunks.
    pub fn new(chunk_size: u64) -> SizeClasses {
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

    /// The largest block size.
    pub fn max_block(&self) -> u64 {
        self.blocks.last().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_fit_and_increase() {
        for cs in [16u64 << 10, 64 << 10, 256 << 10, 4 << 20] {
            let c = SizeClasses::new(cs);
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

    #[test]
    fn fig3_sizes_waste_little() {
        let c = SizeClasses::new(256 << 10);
        for payload in [64u64, 256, 1024, 4096] {
            let b = c.block(c.class_for(payload + 16).unwrap());
            assert!(b >= payload + 16);
            assert!(b as f64 <= (payload + 16) as f64 * 1.13, "{payload} -> {b}");
        }
        assert_eq!(c.class_for(c.max_block() + 1), None);
    }
}
