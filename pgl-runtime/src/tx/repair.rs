//! Online repair: an object that fails verification is rebuilt from zone parity while the
//! pool is frozen, checked against its own checksum, and written back through a redo
//! record (the "under repair" record), so that a crash in the middle resumes on open.
//!
//! Freezing takes every redo lane: a transaction holds its lane from begin to retire, so
//! once the repairer holds them all, no commit is in flight (parity and data agree, which
//! the rebuild needs) and new transactions wait. The object's own write lock keeps stray
//! readers (`Ref`s) off the bytes being rewritten.
//!
//! Invariant: a repair writes an object's bytes only if the rebuilt object verifies (its
//! header is sane and its checksum matches), and it never changes parity: the rebuilt
//! bytes are the ones parity already accounts for.

use super::engine::Engine;
use super::lane::{LaneState, Touched};
use super::locks::Held;
use super::record::{self, RecordWriter, RETIRED_OFFSET, SEAL_OFFSET};
use crate::heap::layout::bitmap_bits;
use crate::heap::layout::{ObjectHeader, HEADER_SIZE};
use crate::integrity::{block_verifies, mix_pages};
use crate::integrity::{rebuild_range, rewrite_bitmap_word};
use crate::{Error, Result};
use parking_lot::MutexGuard;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a repairer waits for in-flight transactions (or a reader of the object) before
/// it gives up and reports the damage instead (10 s: long enough for a loaded machine): a thread that keeps a `Detached` or a `Ref`
/// open must not hang the repair forever.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// Repair counters of one pool (rare events: shared atomics).
#[derive(Default)]
pub(crate) struct RepairCounters {
    /// Objects rebuilt and written back.
    pub repaired: AtomicU64,
    /// Pages whose bytes a repair changed.
    pub pages: AtomicU64,
    /// Objects found damaged that parity could not rebuild, each counted once (see
    /// `beyond`).
    pub unrecoverable: AtomicU64,
    /// The objects counted in `unrecoverable`, by payload offset and header bytes as found:
    /// every scrub and every read meets such an object again, and must not count it again.
    /// The header tells a new object at the same offset (freed and allocated again) from
    /// the damaged one.
    beyond: parking_lot::Mutex<std::collections::HashSet<(u64, [u8; 16])>>,
    /// Allocation bitmap words rebuilt from parity.
    pub bitmap_words: AtomicU64,
    /// Zone metadata copies a scrub rewrote (from the other copy, or from parity).
    pub metadata_copies: AtomicU64,
    /// Set once free space may hold damage parity will not repair: a scrub recomputed
    /// parity over damaged free space, or the pool opened with objects beyond repair.
    /// Sealed blocks are no longer trusted then (`Engine::seals_trusted`).
    pub free_space_suspect: std::sync::atomic::AtomicBool,
}

impl RepairCounters {
    /// Counts the object at `payload`, its header `h` as found, beyond repair, unless it
    /// was counted already.
    pub(crate) fn beyond_repair(&self, payload: u64, h: [u8; 16]) {
        if self.beyond.lock().insert((payload, h)) {
            self.unrecoverable.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What a repair attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The object was rebuilt and written back; `pages` of its pages changed.
    Repaired { pages: u64 },
    /// Parity agrees with the bytes in place and the object verifies: nothing to rebuild
    /// (another thread repaired it meanwhile, or it was never damaged). With the header
    /// found, so a caller can tell which.
    Intact { type_id: u32, size: u64 },
    /// Parity agrees with the bytes in place but the object does not verify: damaged in a
    /// way parity cannot see.
    Consistent,
    /// Parity cannot rebuild it: the pool keeps no parity, or the rebuilt bytes do not
    /// verify (more than one damaged page in a page column).
    Unrecoverable,
    /// The pool could not be frozen in time (a transaction or reader stayed open).
    Busy,
}

/// Every lane of the pool, held: no transaction is in flight.
pub(crate) struct Frozen<'e> {
    lanes: Vec<MutexGuard<'e, LaneState>>,
}

impl Engine {
    /// Freezes the pool (see the module docs); `None` if some lane stayed busy for `WAIT`,
    /// or at once if this thread holds a `Detached` handle, whose lane it would wait for.
    pub(crate) fn freeze(&self) -> Option<Frozen<'_>> {
        if super::thread::detached_held(self.id) {
            return None;
        }
        let deadline = Instant::now() + WAIT;
        let mut lanes = Vec::with_capacity(self.geo.lanes as usize);
        for lane in self.lanes.iter() {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut st = lane.state.try_lock_for(left)?;
            // At once, not once every lane is held: a commit meeting its record may be
            // waiting for it to be settled (`deferred.rs`).
            self.settle(lane, &mut st);
            lanes.push(st);
        }
        Some(Frozen { lanes })
    }

    /// `Error::HeldByThisThread` for `what` (an operation that runs through
    /// [`exclusive`](Self::exclusive)) if this thread holds a `Ref` or a `Detached` of the
    /// pool, which `exclusive` would wait for: so that the caller says what blocks it
    /// instead of reporting the `None` as another thread's conflict.
    pub(crate) fn refuse_held_here(&self, what: &'static str) -> Result<()> {
        if super::thread::any_ref_held(self.id) || super::thread::detached_held(self.id) {
            return Err(Error::HeldByThisThread {
                pool_file: None,
                what,
            });
        }
        Ok(())
    }

    /// Runs `f` with the pool to itself: every object lock and every lane held, so no
    /// transaction is in flight and no reader looks. `None` if that took longer than `WAIT`
    /// (or this thread holds a `Ref` or a `Detached`, which would never be released
    /// meanwhile). Call it outside transactions.
    pub(crate) fn exclusive<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        if super::thread::any_ref_held(self.id) || super::thread::detached_held(self.id) {
            return None;
        }
        if !self.objects.write_all(Instant::now() + WAIT) {
            return None;
        }
        let out = self.freeze().map(|_frozen| f());
        self.objects.release_all();
        out
    }

    /// Tries to repair the object whose payload starts at `payload`. Call it with no lane
    /// and no lock of this pool held by this thread (outside transactions).
    pub(crate) fn repair_object(&self, payload: u64) -> Result<Outcome> {
        let stripe = super::stripe_of(payload);
        if !self.parity.enabled() {
            // Nothing can rebuild it; counted (once) if its block can be read, under a read
            // lock (a `Detached` of this thread may hold the object's write lock), and does
            // not verify: a type mismatch on an intact object is the caller's mistake.
            let mut out = Outcome::Unrecoverable;
            let found = (!super::thread::detached_held(self.id))
                .then(|| self.verify_read_locked(payload, stripe))
                .flatten();
            if let Some((h, verdict)) = found {
                if verdict.is_ok() || !self.checksums {
                    out = Outcome::Intact {
                        type_id: h.type_id,
                        size: h.size,
                    };
                } else {
                    self.repairs.beyond_repair(payload, h.to_bytes());
                }
            }
            return Ok(out);
        }
        if super::thread::ref_held(self.id, stripe) || super::thread::detached_held(self.id) {
            // This thread reads the object (or one sharing its lock): it cannot be rewritten
            // under that reference. Or it holds a `Detached`, whose lane `freeze` would
            // need (and perhaps this object's lock).
            return Ok(Outcome::Busy);
        }
        if let Some(intact) = self.verifies_now(payload, stripe) {
            // Nothing to rebuild: a read with the wrong type of an intact object, or one
            // another thread repaired meanwhile. Told without freezing the pool, which
            // would wait for every transaction in flight.
            return Ok(intact);
        }
        if !self.lock_object(stripe) {
            return Ok(Outcome::Busy);
        }
        let out = match self.freeze() {
            Some(mut frozen) => self.repair_frozen(&mut frozen, payload),
            None => Ok(Outcome::Busy),
        };
        // Damage parity agrees with (the same change in two rows of a column, or in a row
        // and its parity page) is beyond repair too: parity cannot tell which row is wrong.
        if let Ok(Outcome::Unrecoverable | Outcome::Consistent) = out {
            if let Ok(place) = self.heap.locate(payload) {
                let mut h = [0u8; 16];
                // SAFETY: a located block's header inside the pool; its write lock is ours.
                unsafe { self.media.read(place.hdr, &mut h) };
                self.repairs.beyond_repair(payload, h);
            }
        }
        self.objects.release(stripe, Held::Write);
        out.map(|o| self.count(o))
    }

    /// `Outcome::Intact` if the object at `payload` verifies now against its checksum (read
    /// under its read lock, `stripe`); `None` if it does not, if the pool keeps no
    /// checksums (then nothing tells an intact object from a damaged one), or if the lock
    /// could not be taken within `WAIT`.
    fn verifies_now(&self, payload: u64, stripe: u32) -> Option<Outcome> {
        if !self.checksums {
            return None;
        }
        match self.verify_read_locked(payload, stripe)? {
            (h, Ok(())) => Some(Outcome::Intact {
                type_id: h.type_id,
                size: h.size,
            }),
            _ => None,
        }
    }

    /// `verify_located` under the object's read lock (`stripe`), taken for the call; `None`
    /// if the lock could not be taken within `WAIT` or the object could not be located.
    fn verify_read_locked(&self, payload: u64, stripe: u32) -> Option<(ObjectHeader, Result<()>)> {
        if !self.objects.read_for(stripe, WAIT) {
            return None;
        }
        let found = self.verify_located(payload);
        self.objects.release(stripe, Held::Read);
        found.ok()
    }

    /// Tries to rebuild the checked allocation-bitmap word at `off` from parity, with the
    /// pool frozen (no commit in flight: the word and its parity are stable): `Some`
    /// whether the word verifies now (or is no bitmap word any more); `None` if the pool
    /// could not be frozen in time (a long transaction: nothing was tried). Call it with
    /// no lane and no lock of this pool held by this thread (outside transactions).
    ///
    /// The rebuilt word is written with one aligned 8-byte store (it lands whole or not
    /// at all) and made durable before the pool thaws; parity already accounts for it.
    pub(crate) fn repair_bitmap_word(&self, off: u64) -> Option<bool> {
        if !self.parity.enabled() && self.heap.is_checked_bitmap_word(off) {
            // Nothing could rebuild it: no reason to stop the pool to find that out (or to
            // wait for a long transaction first). Whether it verifies now (a walk that
            // raced a commit may have read other bytes for it):
            let now = self.meta.with_word(off, || {
                // SAFETY: inside the pool (a checked run's bitmap word as the chunk kinds
                // say), read under its metadata lock as the walks that report it read it.
                unsafe { self.media.read_u64(off) }
            });
            return Some(bitmap_bits(off, now).is_some());
        }
        let _frozen = self.freeze()?;
        if !self.heap.is_checked_bitmap_word(off) {
            // Not (or no longer) a bitmap word: the caller read it through a chunk table
            // entry that has changed since; what it does next (walk again) sees the truth.
            return Some(true);
        }
        // SAFETY: a heap metadata word inside the pool (the commit or scrub that found it
        // read it there); the pool is frozen, so no commit writes it or its parity.
        let now = unsafe { self.media.read_u64(off) };
        if bitmap_bits(off, now).is_some() {
            return Some(true); // repaired by another thread meanwhile
        }
        // SAFETY: as above; no reader relies on the old (damaged) value.
        if !self.parity.enabled() || !unsafe { rewrite_bitmap_word(&self.media, &self.geo, off) } {
            return Some(false);
        }
        self.media.fence();
        self.repairs.bitmap_words.fetch_add(1, Ordering::Relaxed);
        Some(true)
    }

    fn count(&self, o: Outcome) -> Outcome {
        let c = &self.repairs;
        match o {
            Outcome::Repaired { pages } => {
                c.repaired.fetch_add(1, Ordering::Relaxed);
                c.pages.fetch_add(pages, Ordering::Relaxed);
            }
            // Counted by `repair_object`, once per object.
            Outcome::Unrecoverable
            | Outcome::Intact { .. }
            | Outcome::Consistent
            | Outcome::Busy => {}
        }
        o
    }

    /// Takes the write lock of `stripe`, waiting for readers up to `WAIT`.
    fn lock_object(&self, stripe: u32) -> bool {
        let deadline = Instant::now() + WAIT;
        let mut spins = 0u32;
        while !self.objects.try_write(stripe, None) {
            if Instant::now() >= deadline {
                return false;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        true
    }

    fn repair_frozen(&self, frozen: &mut Frozen<'_>, payload: u64) -> Result<Outcome> {
        // The block, from the allocator's metadata (damaged metadata is the scrubber's).
        let place = self.heap.locate(payload)?;
        let start = place.hdr;
        let len = HEADER_SIZE + place.capacity;
        // SAFETY: the block lies in a zone of the pool; the pool is frozen (no commit
        // writes data or parity) and we hold the object's write lock.
        let Some(rebuilt) = (unsafe { rebuild_range(&self.media, &self.geo, start, len) }) else {
            return Ok(Outcome::Unrecoverable);
        };
        let mut now = vec![0u8; len as usize];
        // SAFETY: as above; reads only.
        unsafe { self.media.read(start, &mut now) };
        if rebuilt == now {
            let h = ObjectHeader::from_bytes(now[..16].try_into().expect("16 bytes"));
            return Ok(if block_verifies(start, place.capacity, &now) {
                Outcome::Intact {
                    type_id: h.type_id,
                    size: h.size,
                }
            } else {
                Outcome::Consistent
            });
        }
        if block_verifies(start, place.capacity, &now) {
            // Intact (repaired by another thread meanwhile), though a column it spans
            // disagrees with parity: the damage there lies in another row.
            let h = ObjectHeader::from_bytes(now[..16].try_into().expect("16 bytes"));
            return Ok(Outcome::Intact {
                type_id: h.type_id,
                size: h.size,
            });
        }
        let rebuilt = if block_verifies(start, place.capacity, &rebuilt) {
            rebuilt
        } else {
            match mix_pages(start, place.capacity, &now, &rebuilt) {
                Some(mix) => mix,
                None => return Ok(Outcome::Unrecoverable),
            }
        };
        // The bytes that differ, as runs (merged across small gaps).
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (i, _) in now
            .iter()
            .zip(&rebuilt)
            .enumerate()
            .filter(|(_, (a, b))| a != b)
        {
            match runs.last_mut() {
                Some(r) if i <= r.1 + 32 => r.1 = i + 1,
                _ => runs.push((i, i + 1)),
            }
        }
        let pages = crate::integrity::changed_pages(start, &now, &rebuilt);
        self.write_back(frozen, start, &rebuilt, &runs)?;
        Ok(Outcome::Repaired { pages })
    }

    /// Writes `bytes[a..z]` at `start + a` for every run, through sealed redo records in
    /// lane 0 (as many as it takes): record, fence, in place, fence, retire.
    fn write_back(
        &self,
        frozen: &mut Frozen<'_>,
        start: u64,
        bytes: &[u8],
        runs: &[(usize, usize)],
    ) -> Result<()> {
        let lane = &mut *frozen.lanes[0];
        let lane_size = self.geo.lane_size as usize;
        let max_entry = lane_size - record::ENTRIES_OFFSET - record::ENTRY_HEADER - 8;
        // Split runs longer than a record can hold.
        let mut pieces = runs
            .iter()
            .flat_map(|&(a, z)| {
                (a..z)
                    .step_by(max_entry)
                    .map(move |p| (p, z.min(p + max_entry)))
            })
            .peekable();
        while pieces.peek().is_some() {
            if lane.record.stage.len() * 8 < lane_size {
                lane.record.stage.resize(lane_size / 8, 0);
            }
            // SAFETY: a u64 vector viewed as bytes (alignment 8 >= 1; any bytes are valid).
            let stage: &mut [u8] = unsafe {
                std::slice::from_raw_parts_mut(lane.record.stage.as_mut_ptr() as *mut u8, lane_size)
            };
            let mut w = RecordWriter::new(stage);
            let mut batch = Vec::new();
            while let Some(&(a, z)) = pieces.peek() {
                if !w.push(start + a as u64, &bytes[a..z]) {
                    break;
                }
                batch.push((a, z));
                pieces.next();
            }
            let seq = self.seq.next();
            let n = w.seal(seq);
            let sealed = &stage[SEAL_OFFSET..SEAL_OFFSET + record::stream_len(n, stage.len())];
            let mut touched = Touched::default();
            for &(a, z) in &batch {
                touched.add(start + a as u64, (z - a) as u64, self.map.chunk_shift());
            }
            for copy in self.lane_copies() {
                let off = self.lane_off(0, copy) + SEAL_OFFSET as u64;
                // SAFETY: lane 0 is ours (frozen); the record fits its copy.
                unsafe { self.media.write_durable(off, sealed) };
            }
            self.fence_with_retire_marks(Some(0), &touched);
            self.media.check()?;
            for &(a, z) in &batch {
                let at = start + a as u64;
                // SAFETY: bytes of the damaged object's block: its write lock is ours and
                // the pool is frozen. No parity update: parity already holds these bytes.
                unsafe { self.media.write(at, &bytes[a..z]) };
                self.media.flush(at, (z - a) as u64);
            }
            self.media.fence();
            self.media.check()?;
            for copy in 0..2 {
                let off = self.lane_off(0, copy) + RETIRED_OFFSET as u64;
                // SAFETY: lane 0's retired word; the lane is ours.
                unsafe { self.media.write(off, &record::retire_mark(seq)) };
            }
            self.lanes.retired(0, &touched);
        }
        Ok(())
    }
}

impl Engine {
    /// `e` as a reader outside transactions reports it once repair has failed: a type
    /// mismatch whose object does not verify is the damage to its header (a scribble or a
    /// media error parity could not rebuild), not a wrong oid, and is reported as the
    /// verification error (`ChecksumMismatch`, or `Corrupt` for a size past the block).
    pub(crate) fn damage_behind(&self, e: Error) -> Error {
        let Error::TypeMismatch { offset, .. } = e else {
            return e;
        };
        if !self.checksums || super::in_tx(self) {
            return e;
        }
        let Ok(stripe) = super::read_lock(self, offset) else {
            return e;
        };
        let found = self.verify_located(offset);
        self.objects.release(stripe, Held::Read);
        match found {
            Ok((_, Err(damage))) => damage,
            _ => e,
        }
    }

    /// The header of the object at `payload`, located, and whether its block verifies
    /// (`verify_block`, in place; always without checksums). Call it under the object's
    /// read lock.
    fn verify_located(&self, payload: u64) -> Result<(ObjectHeader, Result<()>)> {
        let place = self.heap.locate(payload)?;
        let mut h = [0u8; 16];
        // SAFETY: a located block's header inside the pool, under the object's read lock
        // (the caller's: no writer).
        unsafe { self.media.read(place.hdr, &mut h) };
        let h = ObjectHeader::from_bytes(&h);
        let verdict = super::verify_block(self, payload, &h, place.capacity);
        Ok((h, verdict))
    }
}

/// Whether `e` is damage a repair may fix: a checksum mismatch, or an object header that
/// makes no sense (a type mismatch, or a size past its block, as verification reports it);
/// the object's payload offset.
pub(crate) fn repairable(e: &Error) -> Option<u64> {
    match e {
        Error::ChecksumMismatch { offset, .. } | Error::TypeMismatch { offset, .. } => {
            Some(*offset)
        }
        Error::Corrupt {
            what: super::tx::OBJECT_HEADER,
            offset,
            ..
        } => Some(offset + HEADER_SIZE),
        _ => None,
    }
}
