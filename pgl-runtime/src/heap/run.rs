//! Runs: chunks cut into blocks of one size class, with an allocation bitmap (the
//! persistent one in the chunk, and its volatile mirror `Run::bits`).
//!
//! Invariant: a run's volatile bitmap has a bit set for every block allocated or reserved;
//! `take_bit` sets one only once the caller's `claim` took the block's object lock.

use super::layout::*;
use crate::geometry::FastDiv;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Whether new runs get checked bitmaps: always, except in tests that make runs as
/// builds before format 5 did (`PLAIN_RUNS`), to prove such runs keep working.
pub(super) fn make_checked_runs() -> bool {
    #[cfg(test)]
    if PLAIN_RUNS.with(|p| p.get()) {
        return false;
    }
    true
}

#[cfg(test)]
thread_local! {
    /// Test-only: runs this thread makes get plain bitmaps.
    pub(crate) static PLAIN_RUNS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// One run chunk.
pub(crate) struct Run {
    pub(super) off: u64,
    pub(super) zone: u64,
    pub(super) chunk: u64,
    pub(super) class: u16,
    pub(super) block: u64,
    /// Divides by `block` without a division instruction (`Heap::locate` runs on every
    /// first access to an object in a transaction).
    pub(super) per_block: FastDiv,
    pub(super) nblocks: u32,
    pub(super) header: u64,
    /// Whether the persistent bitmap is checked (32 blocks a word, sealed with a check; see
    /// `layout`) or plain (64 a word: runs of pools made before format 5).
    pub(super) checked: bool,
    /// One bit per block, set while the block is allocated or reserved (64 blocks a word,
    /// whatever the persistent format): the first `nblocks / 64` words (rounded up) of
    /// the chunk's slab (`Zone::slabs`). Written under `st`'s lock; read without it by
    /// `Heap::locate` (a reader holding an object's lock sees every change to that
    /// object's bit made before the lock was taken).
    pub(super) bits: Arc<[AtomicU64]>,
    pub(super) st: Mutex<RunState>,
}

pub(crate) struct RunState {
    pub(super) used: u32,
    pub(super) owned: bool,
    pub(super) pooled: bool,
    pub(super) dead: bool,
    /// Taken out of service for a bitmap word that neither verifies nor can be rebuilt
    /// (`dead` too); counted once in `Heap::quarantined`.
    pub(super) quarantined: bool,
    /// Gave up its chunk (which may hold another run now, sharing this run's slab).
    pub(super) retired: bool,
    /// Made by a transaction that has not committed yet: its blocks are that
    /// transaction's alone (if it aborts, the run goes), never another lane's (see
    /// `Heap::alloc_elsewhere`).
    pub(super) provisional: bool,
    pub(super) hint: usize,
    /// One bit per block (64 a word; empty until the first sealed free): set while the
    /// block is free and sealed (see the module docs).
    pub(super) sealed: Vec<u64>,
}

impl RunState {
    /// Whether the run's chunk may be taken for another use: no block in use or reserved,
    /// not already retired, and no lane allocating from it — or, with `owned_too`, a lane
    /// may (it drops the run once it finds it dead), if it is committed.
    pub(super) fn reclaimable(&self, owned_too: bool) -> bool {
        self.used == 0 && !self.dead && (!self.owned || owned_too && !self.provisional)
    }
}

impl Run {
    /// The run's bitmap words.
    pub(super) fn bits(&self) -> &[AtomicU64] {
        &self.bits[..self.nblocks.div_ceil(64) as usize]
    }

    /// The block whose payload starts `within` bytes into the run's chunk, if one could
    /// (not checked against `nblocks`).
    #[inline]
    pub(super) fn block_at(&self, within: u64) -> Option<u32> {
        block_at(self.header, self.block, self.per_block, within)
    }

    pub(super) fn block_offset(&self, idx: u32) -> u64 {
        self.off + self.header + idx as u64 * self.block
    }
    /// The persistent bitmap word of block `idx` and the block's bit in it.
    pub(super) fn word_of(&self, idx: u32) -> (u64, u64) {
        let per = bits_per_word(self.checked);
        (self.off + u64::from(idx / per) * 8, 1 << (idx % per))
    }
}

/// The block of a run laid out as `header`, `block`, `per_block` whose payload starts
/// `within` bytes into the chunk, if one could (not checked against the run's block count).
#[inline]
pub(super) fn block_at(header: u64, block: u64, per_block: FastDiv, within: u64) -> Option<u32> {
    let rel = within.checked_sub(header + HEADER_SIZE)?;
    let idx = per_block.div(rel);
    (idx * block == rel).then_some(idx as u32)
}

/// How the runs of one class are laid out, in one bitmap format: what `locate` reads off a
/// chunk's kind entry instead of its `Run`.
#[derive(Clone, Copy)]
pub(crate) struct RunShape {
    pub(super) block: u64,
    pub(super) per_block: FastDiv,
    pub(super) header: u64,
    pub(super) nblocks: u32,
}

/// Reserves a free block of a run (`bits`, `st` its state, locked by the caller) that
/// `claim` accepts (it takes the block's object lock before the bit is set). Returns it
/// and whether it was sealed (it is not any more).
pub(super) fn take_bit(
    bits: &[AtomicU64],
    st: &mut RunState,
    nblocks: u32,
    mut claim: impl FnMut(u32) -> bool,
) -> Option<(u32, bool)> {
    if st.used >= nblocks {
        return None;
    }
    let words = bits.len();
    for i in 0..words {
        let w = (st.hint + i) % words;
        let word = bits[w].load(Ordering::Relaxed);
        let mut free = !word;
        while free != 0 {
            let bit = free.trailing_zeros();
            let idx = w as u32 * 64 + bit;
            if idx >= nblocks {
                break;
            }
            if claim(idx) {
                bits[w].store(word | 1 << bit, Ordering::Release);
                st.used += 1;
                st.hint = w;
                let sealed = st.sealed.get(w).is_some_and(|s| s & 1 << bit != 0);
                if sealed {
                    st.sealed[w] &= !(1 << bit);
                }
                return Some((idx, sealed));
            }
            free &= free - 1;
        }
    }
    None
}
