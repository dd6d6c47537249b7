//! Micro-buffers: the DRAM copy of an object a transaction changes, guarded by a canary
//! on each side, with the modified byte ranges tracked for logging and checksum patching.
//!
//! ```text
//! [canary u128][payload, padded with zeros to 16 bytes][canary u128]
//! ```
//!
//! Invariant: NVMM is changed only from a buffer whose canaries and padding are intact.

// Payloads start one `u128` into the storage, so their alignment is `u128`'s, which must
// cover every persistent type.
const _: () = assert!(core::mem::align_of::<u128>() >= crate::persistent::MAX_ALIGN);

/// What a buffer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BufKind {
    /// An existing object opened for update.
    Open,
    /// An object allocated by this transaction.
    New,
    /// An object freed by this transaction.
    Freed,
}

/// A new object allocated unfilled whose payload is still only in the pool (its block's
/// bytes): the transaction copies it in when the object is first accessed, and a commit
/// before that writes only the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingRead {
    /// The object's checksum over those bytes, when known without reading them (a sealed
    /// block, see `heap::alloc`).
    pub sum: Option<u32>,
}

/// One micro-buffer.
pub(crate) struct Buffer {
    /// Payload offset in the pool.
    pub off: u64,
    /// Payload bytes: `new` and `reset` size `storage` for them (see `words`); never
    /// raised after that.
    pub size: usize,
    /// Type id of the object.
    pub type_id: u32,
    /// Checksum of the object as found in NVMM when opened.
    pub checksum: u32,
    /// What it is for.
    pub kind: BufKind,
    /// Shared borrows (> 0) or an exclusive one (-1) by live handles.
    pub borrow: isize,
    /// Set while the payload is not copied in yet (new objects only; no handle exists).
    pub pending_read: Option<PendingRead>,
    /// The link that ends the payload of an object that owns a tail (an `#[extendible]`
    /// struct), as pgl last set it: the program's handles may write over those bytes, and
    /// dropping the handle puts this value back (`tail::keep_link`).
    pub link: Option<u64>,
    /// Bytes of the payload after the value that ends with that link: the reserve of an
    /// `#[extendible(reserve = N)]` object (see `leds::inline`), 0 for every other.
    pub reserve: usize,
    /// `[canary][payload words][canary]` (see `words`), then (in a buffer reused for a
    /// smaller object) words a larger object used, left as they are.
    storage: Vec<u128>,
    canary: u128,
    dirty: Vec<(u32, u32)>,
    /// Whether the whole payload was marked by a borrow of the whole value (`DerefMut`),
    /// which says nothing of what changed: the commit may narrow it (`narrow`).
    whole_borrow: bool,
    /// Set while only the marked ranges of an opened object are in the payload (a ranged
    /// write, `Tx::write_bytes`): the other bytes, its *holes*, are still only in the pool
    /// (`fill_holes`).
    holes: bool,
    /// Set for a buffer made with holes, and kept once they are filled: its bytes may have
    /// been copied from the pool after the object was verified, so the commit patches its
    /// checksum over the changed ranges and never sums the payload (see `tx::ranged`).
    patched: bool,
}

impl Buffer {
    /// A zeroed buffer for a payload of `size` bytes.
    pub(crate) fn new(off: u64, size: usize, type_id: u32, canary: u128, kind: BufKind) -> Self {
        let words = size.div_ceil(16);
        let mut storage = vec![0u128; words + 2];
        let c = canary ^ (off as u128).rotate_left(17);
        storage[0] = c;
        storage[words + 1] = c;
        Buffer {
            off,
            size,
            type_id,
            checksum: 0,
            kind,
            borrow: 0,
            pending_read: None,
            link: None,
            reserve: 0,
            storage,
            canary: c,
            dirty: Vec::new(),
            whole_borrow: false,
            holes: false,
            patched: false,
        }
    }

    /// Reuses this buffer's allocation for another object. The payload's contents are
    /// unspecified (the caller fills all of it, or marks it as having holes: `set_holes`);
    /// the padding after it is zeroed. Storage is only ever grown, never shortened: a
    /// buffer that held a larger object is reused without writing its payload's words
    /// first (an open copies the object over them; zeroing them too cost as much again,
    /// for an object of tens of KiB).
    pub(crate) fn reset(
        &mut self,
        off: u64,
        size: usize,
        type_id: u32,
        canary: u128,
        kind: BufKind,
    ) {
        let words = size.div_ceil(16);
        if self.storage.len() < words + 2 {
            self.storage.resize(words + 2, 0);
        }
        if words > 0 {
            self.storage[words] = 0;
        }
        let c = canary ^ (off as u128).rotate_left(17);
        self.storage[0] = c;
        self.storage[words + 1] = c;
        self.off = off;
        self.size = size;
        self.type_id = type_id;
        self.checksum = 0;
        self.kind = kind;
        self.borrow = 0;
        self.pending_read = None;
        self.link = None;
        self.reserve = 0;
        self.canary = c;
        self.dirty.clear();
        self.whole_borrow = false;
        self.holes = false;
        self.patched = false;
    }

    /// Words of the payload (its bytes rounded up to 16): the trailing canary's index is
    /// `words + 1`, as `new` and `reset` placed it for `size`.
    fn words(&self) -> usize {
        self.size.div_ceil(16)
    }

    /// Bytes of storage held.
    pub(crate) fn capacity(&self) -> usize {
        self.storage.capacity() * 16
    }

    /// Pointer to the payload (16-byte aligned).
    pub(crate) fn payload_ptr(&mut self) -> *mut u8 {
        // SAFETY: storage has at least two elements; index 1 is in bounds (or one past the
        // payload when size is 0, which is never dereferenced).
        unsafe { (self.storage.as_mut_ptr() as *mut u8).add(16) }
    }

    /// The payload.
    pub(crate) fn payload(&self) -> &[u8] {
        // SAFETY: `size` bytes from offset 16 lie within `storage` (words*16 >= size).
        unsafe {
            std::slice::from_raw_parts((self.storage.as_ptr() as *const u8).add(16), self.size)
        }
    }

    /// The payload, mutably (not marked dirty).
    pub(crate) fn payload_mut(&mut self) -> &mut [u8] {
        let size = self.size;
        // SAFETY: as in `payload`, with exclusive access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.payload_ptr(), size) }
    }

    /// Marks `[start, end)` of the payload modified.
    pub(crate) fn mark(&mut self, start: usize, end: usize) {
        debug_assert!(start <= end && end <= self.size);
        if start < end {
            if let Some(last) = self.dirty.last_mut() {
                if last.0 as usize <= start && start <= last.1 as usize {
                    last.1 = last.1.max(end as u32);
                    return;
                }
            }
            self.dirty.push((start as u32, end as u32));
        }
    }

    /// Marks the whole payload modified.
    pub(crate) fn mark_all(&mut self) {
        self.dirty.clear();
        self.dirty.push((0, self.size as u32));
        self.whole_borrow = false;
    }

    /// Marks the whole payload modified for a borrow of the whole value (`DerefMut`),
    /// which may have changed any of it, or nothing: see `narrow`.
    pub(crate) fn mark_whole_borrow(&mut self) {
        self.mark_all();
        self.whole_borrow = true;
    }

    /// Whether the marks are a whole-value borrow's (`mark_whole_borrow`), which `narrow`
    /// can make exact.
    pub(crate) fn whole_borrow(&self) -> bool {
        self.whole_borrow
    }

    /// Whether the payload differs from `old` (the object's bytes as the buffer was filled
    /// from them).
    pub(crate) fn differs_from(&self, old: &[u8]) -> bool {
        changed_span(old, self.payload()).is_some()
    }

    /// Replaces the marks with the span where the payload differs from `old` (the
    /// object's bytes as the buffer was filled from them), from its first to its last
    /// differing byte: none if nothing changed.
    pub(crate) fn narrow(&mut self, old: &[u8]) {
        let span = changed_span(old, self.payload());
        self.dirty.clear();
        if let Some((start, end)) = span {
            self.dirty.push((start as u32, end as u32));
        }
        self.whole_borrow = false;
    }

    /// The modified ranges as marked (sorted and merged after `ranges`).
    pub(crate) fn dirty(&self) -> &[(u32, u32)] {
        &self.dirty
    }

    /// Whether anything was marked.
    pub(crate) fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// The modified ranges, sorted and merged (ranges closer than `gap` bytes coalesce).
    pub(crate) fn ranges(&mut self, gap: usize) -> &[(u32, u32)] {
        if self.dirty.len() > 1 {
            self.dirty.sort_unstable();
            let mut w = 0;
            for r in 1..self.dirty.len() {
                let (s, e) = self.dirty[r];
                if s as usize <= self.dirty[w].1 as usize + gap {
                    self.dirty[w].1 = self.dirty[w].1.max(e);
                } else {
                    w += 1;
                    self.dirty[w] = (s, e);
                }
            }
            self.dirty.truncate(w + 1);
        }
        &self.dirty
    }

    /// Marks the payload as holding only the ranges marked from now on (`holes`): for a
    /// buffer made without copying the object in.
    pub(crate) fn set_holes(&mut self) {
        debug_assert!(!self.is_dirty(), "holes are set before anything is written");
        self.holes = true;
        self.patched = true;
    }

    /// Whether some of the payload is still only in the pool (`holes`).
    pub(crate) fn has_holes(&self) -> bool {
        self.holes
    }

    /// Whether the commit must patch the checksum rather than sum the payload (`patched`).
    pub(crate) fn patched(&self) -> bool {
        self.patched
    }

    /// Copies from `pool` (the object's payload in the pool, which the transaction's write
    /// lock has kept as it was) every hole of at most `max` bytes: the spans before, between
    /// and after the marked ranges. With `max` at least the payload's size, every hole, and
    /// the payload is whole again. Normalises the marked ranges (`ranges(0)`: sorted, and
    /// merged where they touch), which still cover exactly the bytes written.
    pub(crate) fn fill_holes(&mut self, pool: &[u8], max: usize) {
        debug_assert_eq!(pool.len(), self.size);
        self.ranges(0);
        let mut at = 0;
        for i in 0..=self.dirty.len() {
            let (end, next) = match self.dirty.get(i) {
                Some(&(s, e)) => (s as usize, e as usize),
                None => (self.size, self.size),
            };
            if end > at && end - at <= max {
                self.payload_mut()[at..end].copy_from_slice(&pool[at..end]);
            }
            at = next;
        }
        if max >= self.size {
            self.holes = false;
        }
    }

    /// Whether both canaries and the padding after the payload are intact.
    pub(crate) fn canaries_ok(&self) -> bool {
        let words = self.words();
        if self.storage[0] != self.canary || self.storage[words + 1] != self.canary {
            return false;
        }
        // SAFETY: bytes size..words*16 after offset 16 lie within `storage`.
        let pad = unsafe {
            std::slice::from_raw_parts(
                (self.storage.as_ptr() as *const u8).add(16 + self.size),
                words * 16 - self.size,
            )
        };
        pad.iter().all(|&b| b == 0)
    }

    /// Overwrites a canary (error injection: `Fault::SmashCanary`).
    pub(crate) fn smash_canary(&mut self) {
        let trailing = self.words() + 1;
        self.storage[trailing] ^= 0xdead;
    }
}

/// The span of `new` that differs from `old` (of the same length): from its first
/// differing byte to its last, or `None` if they are equal. Scanned a word at a time from
/// each end, so it reads only the bytes that did not change before the first and after the
/// last change: a value overwritten whole costs two words.
pub(super) fn changed_span(old: &[u8], new: &[u8]) -> Option<(usize, usize)> {
    debug_assert_eq!(old.len(), new.len());
    let n = old.len().min(new.len());
    // The word at `at` of each (little-endian, so byte k is bits 8k..), XORed.
    let diff = |at: usize| {
        let word = |s: &[u8]| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
        word(old) ^ word(new)
    };
    let mut at = 0;
    let first = loop {
        if at + 8 <= n {
            let x = diff(at);
            if x != 0 {
                break at + (x.trailing_zeros() / 8) as usize;
            }
            at += 8;
        } else if at < n {
            if old[at] != new[at] {
                break at;
            }
            at += 1;
        } else {
            return None;
        }
    };
    let mut end = n;
    while end >= first + 8 {
        let x = diff(end - 8);
        if x != 0 {
            return Some((first, end - (x.leading_zeros() / 8) as usize));
        }
        end -= 8;
    }
    while old[end - 1] == new[end - 1] {
        end -= 1;
    }
    Some((first, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of a buffer with holes, after `fill_holes(pool, max)`, against a model:
    /// a written byte keeps what was written, a byte of a hole of at most `max` bytes
    /// holds the pool's, any other byte what the payload held before (here 0xee).
    #[test]
    fn filling_holes_copies_exactly_the_short_holes_from_the_pool() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let reps = if cfg!(miri) { 12 } else { 400 };
        for _ in 0..reps {
            let size = 1 + (next() % 200) as usize;
            let pool: Vec<u8> = (0..size).map(|_| next() as u8 | 1).collect();
            let mut b = Buffer::new(4096, size, 1, 7, BufKind::Open);
            b.payload_mut().fill(0xee);
            b.set_holes();
            let mut written = vec![None; size];
            for _ in 0..next() % 5 {
                let s = (next() % size as u64) as usize;
                let e = s + (next() % (size - s) as u64) as usize + 1;
                for (i, w) in written.iter_mut().enumerate().take(e).skip(s) {
                    let v = (i as u8).wrapping_mul(3) & 0xfe; // even: never a pool byte
                    b.payload_mut()[i] = v;
                    *w = Some(v);
                }
                b.mark(s, e);
            }
            let max = [0, 1, 7, 32, usize::MAX][(next() % 5) as usize];
            b.fill_holes(&pool, max);
            let mut i = 0;
            while i < size {
                let run = written[i..]
                    .iter()
                    .take_while(|w| w.is_some() == written[i].is_some());
                let n = run.count();
                for k in i..i + n {
                    let want = match written[k] {
                        Some(v) => v,
                        None if n <= max => pool[k],
                        None => 0xee,
                    };
                    assert_eq!(b.payload()[k], want, "byte {k} of {size}, max {max}");
                }
                i += n;
            }
            assert_eq!(
                b.has_holes(),
                max < size,
                "whole only once every hole is filled"
            );
            assert!(b.canaries_ok(), "the padding is left as it was");
            let marked: usize = b.dirty().iter().map(|r| (r.1 - r.0) as usize).sum();
            assert_eq!(marked, written.iter().flatten().count(), "marks as written");
        }
    }

    #[test]
    fn ranges_merge() {
        let mut b = Buffer::new(4096, 256, 1, 7, BufKind::Open);
        b.mark(100, 110);
        b.mark(0, 8);
        b.mark(112, 120);
        b.mark(200, 256);
        assert_eq!(b.ranges(4), &[(0, 8), (100, 120), (200, 256)]);
        b.mark_all();
        assert_eq!(b.ranges(0), &[(0, 256)]);
    }

    #[test]
    fn the_changed_span_runs_from_the_first_to_the_last_differing_byte() {
        let old: Vec<u8> = (0..40).collect();
        let mut new = old.clone();
        assert_eq!(changed_span(&old, &new), None, "nothing changed");
        new[3] = 0xff;
        new[5] = 0xff;
        assert_eq!(changed_span(&old, &new), Some((3, 6)), "within one word");
        new[28] = 0xff;
        assert_eq!(
            changed_span(&old, &new),
            Some((3, 29)),
            "equal words between"
        );
        new[39] = 0xff;
        assert_eq!(changed_span(&old, &new), Some((3, 40)), "the last byte");
        // A length that is no multiple of the word: the tail compared bytewise.
        let (old, mut new) = (vec![1u8; 19], vec![1u8; 19]);
        new[18] = 2;
        assert_eq!(changed_span(&old, &new), Some((18, 19)));
        new[0] = 2;
        assert_eq!(changed_span(&old, &new), Some((0, 19)));
        assert_eq!(changed_span(&[], &[]), None);
        assert_eq!(changed_span(&[1], &[2]), Some((0, 1)));
    }

    #[test]
    fn the_changed_span_agrees_with_a_bytewise_comparison() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Under Miri, a sample: its interpreter is thousands of times slower.
        let (lens, reps) = if cfg!(miri) { (20, 2) } else { (70, 30) };
        for len in 0..lens {
            for _ in 0..reps {
                let old: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let mut new = old.clone();
                for _ in 0..next() % 4 {
                    if len > 0 {
                        new[(next() % len as u64) as usize] ^= 1 + (next() % 255) as u8;
                    }
                }
                let first = (0..len).find(|&i| old[i] != new[i]);
                let last = (0..len).rev().find(|&i| old[i] != new[i]);
                let want = first.zip(last).map(|(f, l)| (f, l + 1));
                assert_eq!(changed_span(&old, &new), want, "len {len}");
            }
        }
    }

    #[test]
    fn narrowing_a_whole_borrow_keeps_only_what_changed() {
        let mut b = Buffer::new(4096, 32, 1, 7, BufKind::Open);
        let old = vec![0u8; 32];
        b.mark_whole_borrow();
        assert!(b.whole_borrow());
        b.payload_mut()[17] = 5;
        b.payload_mut()[20] = 5;
        b.narrow(&old);
        assert!(!b.whole_borrow());
        assert_eq!(b.dirty(), &[(17, 21)]);
        b.payload_mut()[17] = 0;
        b.payload_mut()[20] = 0;
        b.narrow(&old);
        assert!(
            !b.is_dirty(),
            "written back to what it was: nothing to commit"
        );
        b.mark_whole_borrow();
        b.mark_all();
        assert!(!b.whole_borrow(), "an explicit whole mark stays whole");
    }

    #[test]
    fn canaries_detect_overruns() {
        let mut b = Buffer::new(4096, 20, 1, 99, BufKind::Open);
        assert!(b.canaries_ok());
        b.payload_mut().fill(0xff);
        assert!(b.canaries_ok());
        // SAFETY: test: writes one byte past the payload, inside the padding.
        unsafe { *b.payload_ptr().add(20) = 1 };
        assert!(!b.canaries_ok());
        let mut b = Buffer::new(4096, 32, 1, 99, BufKind::Open);
        // SAFETY: test: writes the first byte of the trailing canary (inside storage).
        unsafe { *b.payload_ptr().add(32) ^= 1 };
        assert!(!b.canaries_ok());
        let mut b = Buffer::new(4096, 32, 1, 99, BufKind::Open);
        b.smash_canary();
        assert!(!b.canaries_ok());
    }

    #[test]
    fn a_reused_buffer_guards_the_size_it_holds_now() {
        let mut b = Buffer::new(4096, 100, 1, 99, BufKind::Open);
        b.payload_mut().fill(0xee);
        // Smaller: the old payload's words stay behind, the padding is zeroed.
        b.reset(8192, 20, 2, 99, BufKind::Open);
        assert!(b.canaries_ok());
        b.payload_mut().fill(0xff);
        assert!(b.canaries_ok());
        // SAFETY: test: one byte past the payload, inside the padding.
        unsafe { *b.payload_ptr().add(20) = 1 };
        assert!(!b.canaries_ok(), "an overrun of the smaller payload");
        b.reset(8192, 32, 2, 99, BufKind::Open);
        // SAFETY: test: the first byte after a 32-byte payload is its trailing canary.
        unsafe { *b.payload_ptr().add(32) ^= 1 };
        assert!(!b.canaries_ok(), "its trailing canary, not the old one");
        // Larger again: room, canaries where the new size puts them.
        b.reset(4096, 100, 1, 99, BufKind::Open);
        b.payload_mut().fill(0xaa);
        assert!(b.canaries_ok());
        b.smash_canary();
        assert!(!b.canaries_ok());
        b.reset(4096, 200, 1, 99, BufKind::Open);
        assert_eq!(b.payload().len(), 200);
        b.payload_mut().fill(0xaa);
        assert!(b.canaries_ok());
    }
}
