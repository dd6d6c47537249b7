//! The commit protocol (DESIGN.md, "Transactions"): canaries, checksums, ONE fence for the
//! redo record (both lane copies, new objects, pending retire marks), ONE fence for applying
//! it in place (with its parity), then a retire mark with no fence of its own. A commit
//! that only overwrites objects leaves its apply step's fence, and its retire mark, to a
//! later fence (`deferred.rs`). A commit that only frees a small object (one run-bitmap word)
//! takes one fence and writes no record; one that only allocates from a run it uses takes
//! two and writes none. A change to a zone's metadata (chunk table, root, registry) always
//! goes through the record: it is written to both copies with both checksums. The first
//! commit of a lane to write a zone after the pool was opened takes one more fence, for the
//! zone's dirty mark. A commit whose new objects take over many empty runs' chunks first
//! sets those chunks free on media with a record of its own (`free_guarded_chunks`), which
//! changes no object and no free space: an empty run is as free as a free chunk.
//!
//! Invariant: when the log fence completes the transaction is committed (its sealed record
//! replays after a crash); before it, NVMM holds nothing a recovery would act on.

use super::buffer::{BufKind, Buffer};
use super::deferred::FenceFor;
use super::engine::Engine;
use super::lane::{LaneState, RecordScratch, Touched};
use super::record::{self, RecordWriter, ENTRIES_OFFSET, RETIRED_OFFSET, SEAL_OFFSET};
use super::tx::{Tx, TxState};
use crate::checksum::adler32_patch;
use crate::geometry::LINE;
use crate::heap::layout::{
    meta_copy_offset, object_checksum, ObjectHeader, CHECKSUM_PREFIX, HDR_CHECKSUM_OFFSET,
    HEADER_SIZE, META_SUM_OFFSET,
};
use crate::integrity::replica;
use crate::persist::Media;
use crate::stats::Counter;
use crate::{Error, Result};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

/// Ranges of a buffer this many bytes apart or less are logged as one (`Buffer::ranges`).
const MERGE_GAP: usize = 32;

/// Values up to this size are committed whole after a whole-value borrow; larger ones
/// only from their first changed byte to their last (`Buffer::narrow`).
const NARROW_MIN: usize = 64;

/// What a logged commit writes: object changes, zeroed ranges, metadata words (in this
/// order, in the record as in place), and new objects.
struct Writes<'a> {
    items: &'a [Item],
    fills: &'a [(u64, u64)],
    news: &'a [NonNull<Buffer>],
    vals: &'a [(u64, u64)],
}

pub(crate) struct Item {
    off: u64,
    /// The bytes: for an object's range, a pointer into its buffer made from the whole
    /// payload's, so that `joined_sum`'s piece may read the bytes before the range too.
    src: *const u8,
    len: usize,
    /// An object's new checksum (4 bytes), right after the object's changed ranges (never
    /// without one): the record carries it in the entry of the item before
    /// (`KIND_WRITE_SUM`).
    sum: bool,
}

/// The parts of a lane's state `Tx::free_guarded_chunks` uses (borrowed while the
/// commit holds the lane's other containers).
struct GuardedFree<'a> {
    meta: &'a crate::heap::MetaOps,
    dirty: &'a mut super::record::DirtyZones,
    record: &'a mut RecordScratch,
    deferred: &'a mut Option<super::deferred::Deferred>,
    hdrs: &'a mut Vec<[u8; 16]>,
}

/// A commit logs the guarded bytes of its new objects (see `Guard`) while they take at most
/// this fraction of a lane; beyond, their chunks are set free on media first
/// (`Tx::free_guarded_chunks`).
const GUARDED_LOG_DIVISOR: u64 = 8;

/// Zeros for the apply step of zero entries.
static ZEROS: [u8; 4096] = [0; 4096];

/// Calls `f(offset, len)` for every range a commit writes in place: logged items, zeroed
/// ranges, metadata words, and new objects (header and whole payload: the ranges a commit
/// orders and marks dirty cover the object even where its unchanged bytes are not
/// rewritten).
fn for_each_write(
    items: &[Item],
    fills: &[(u64, u64)],
    vals: &[(u64, u64)],
    news: &[NonNull<Buffer>],
    mut f: impl FnMut(u64, u64),
) {
    let mut k = 0;
    while k < items.len() {
        let it = &items[k];
        // An object's checksum word, with its range as the apply step writes them
        // (`joined_sum`), as one range: the same chunks, and the same zones (both pieces
        // lie in one object, and an object in one zone's chunks).
        if let Some((sum, gap)) = joined_sum(it, items.get(k + 1)) {
            f(sum.off, (sum.len + gap + it.len) as u64);
            k += 2;
            continue;
        }
        f(it.off, it.len as u64);
        k += 1;
    }
    for &(off, len) in fills {
        f(off, len);
    }
    for &(off, _) in vals {
        f(off, 8);
    }
    for b in news {
        // SAFETY: buffers live until release.
        let buf = unsafe { b.as_ref() };
        f(buf.off - HEADER_SIZE, HEADER_SIZE + buf.size as u64);
    }
}

/// The checksum item `next` and the bytes between it and `it`, if the commit writes them
/// in place as one piece from the word to the end of `it`: `next` is the checksum word of
/// `it`'s object (a checksum item directly follows its object's last range, and only
/// that: `commit_inner`; the word is the header's last bytes, so `it` starts `gap` bytes
/// into the payload) and `gap <= MERGE_GAP`. Then `it` is the object's only range
/// (`Buffer::ranges` makes one of ranges `MERGE_GAP` bytes apart or less), and the gap's
/// bytes are the object's as they are (the transaction's write lock has kept them, and
/// every write to a buffer marks what it changes): stored again unchanged, with a parity
/// delta of zero, as the unchanged bytes between two ranges `MERGE_GAP` joins are. One
/// piece takes one stripe hold and one parity update where two took ~500 instructions
/// more (a write to a field near a small object's start, as a list or tree node's link).
/// The record logs the range and the word as before, not the gap.
fn joined_sum<'a>(it: &Item, next: Option<&'a Item>) -> Option<(&'a Item, usize)> {
    // The word ends where the payload starts (what makes `gap` the range's offset in it).
    const _: () = assert!(HDR_CHECKSUM_OFFSET + 4 == HEADER_SIZE);
    let sum = next.filter(|s| s.sum)?;
    let gap = it.off.checked_sub(sum.off + sum.len as u64)?;
    (gap <= MERGE_GAP as u64).then_some((sum, gap as usize))
}

/// Sorts the half-open byte ranges `r` and merges those that overlap or touch, in place.
fn merge_ranges(r: &mut Vec<(u64, u64)>) {
    r.sort_unstable_by_key(|x| x.0);
    let mut n = 0;
    for i in 0..r.len() {
        if n > 0 && r[i].0 <= r[n - 1].1 {
            r[n - 1].1 = r[n - 1].1.max(r[i].1);
        } else {
            r[n] = r[i];
            n += 1;
        }
    }
    r.truncate(n);
}

/// Rounds the byte ranges `r` out to whole cache lines and merges them (`merge_ranges`), so
/// that each line is written back once. A partial write's range and its object's checksum
/// word usually share a line without touching: flushed as two ranges, the line was
/// written back twice, and the second write-back waits for the first (a 64-byte object's
/// lazy upgrade, which writes 16 bytes and the word, measured ~150 ns slower than one
/// marking the whole object, which flushes the line once).
fn merge_lines(r: &mut Vec<(u64, u64)>) {
    for x in r.iter_mut() {
        x.0 -= x.0 % LINE;
        x.1 = x.1.next_multiple_of(LINE);
    }
    merge_ranges(r);
}

/// Calls `f(offset, bytes)` for the pieces of new object `buf` a commit writes: its header
/// `hdr` and the payload ranges marked (all of it when allocated with a value or zeroed;
/// only what was changed when allocated unfilled, whose other bytes already hold its
/// contents). Call it after `Buffer::ranges`.
fn new_pieces(buf: &Buffer, hdr: &[u8; 16], guards: &[Guard], mut f: impl FnMut(u64, &[u8])) {
    let mut piece = |off: u64, bytes: &[u8]| outside_guards(guards, off, bytes, &mut f);
    piece(buf.off - HEADER_SIZE, hdr);
    let payload = buf.payload();
    for &(a, z) in buf.dirty() {
        piece(buf.off + a as u64, &payload[a as usize..z as usize]);
    }
}

/// A range of a new object's space that is not free on media until its commit: it holds
/// the live bitmap of the run its chunk's table entry still names (an empty run whose
/// chunk the heap took back in DRAM only, `heap::alloc`'s `claim_one`). Writing the object
/// there before the commit point would destroy that bitmap if the commit never completes:
/// the commit logs those bytes instead, and applies them after its fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Guard {
    /// Index of the new object in the commit's `news`.
    news_idx: usize,
    off: u64,
    len: u64,
}

/// Calls `f` on the parts of `bytes` (at `off`) outside every guard.
fn outside_guards(guards: &[Guard], off: u64, bytes: &[u8], f: &mut impl FnMut(u64, &[u8])) {
    if guards.is_empty() {
        // Nearly every commit: nothing guarded.
        f(off, bytes);
        return;
    }
    let end = off + bytes.len() as u64;
    let mut at = off;
    let mut inside: Vec<(u64, u64)> = guards
        .iter()
        .map(|g| (g.off.max(off), (g.off + g.len).min(end)))
        .filter(|(a, z)| a < z)
        .collect();
    inside.sort_unstable();
    for (a, z) in inside {
        if a > at {
            f(at, &bytes[(at - off) as usize..(a - off) as usize]);
        }
        at = at.max(z);
    }
    if at < end {
        f(at, &bytes[(at - off) as usize..]);
    }
}

/// The payload of new object `buf`: its buffer's, or the pool's bytes while its read is
/// pending (see `PendingRead`).
fn new_payload<'a>(media: &'a Media, buf: &'a Buffer) -> &'a [u8] {
    if buf.pending_read.is_some() {
        // SAFETY: the payload lies inside the pool, in a block reserved for this
        // transaction and write-locked by it: nothing writes it while the slice lives
        // (this commit writes only the header of an object whose read is pending).
        unsafe { media.bytes(buf.off, buf.size) }
    } else {
        buf.payload()
    }
}

/// The headers of the new objects `news`, in order, into `hdrs` (checksum 0 without
/// `checksums`: the pool's header says they are not kept).
fn new_headers(media: &Media, news: &[NonNull<Buffer>], hdrs: &mut Vec<[u8; 16]>, checksums: bool) {
    hdrs.clear();
    hdrs.extend(news.iter().map(|b| {
        // SAFETY: buffers live until release.
        let buf = unsafe { b.as_ref() };
        let known = buf.pending_read.and_then(|r| r.sum);
        ObjectHeader {
            size: buf.size as u64,
            type_id: buf.type_id,
            checksum: match known {
                _ if !checksums => 0,
                Some(sum) => sum,
                None => object_checksum(buf.off, buf.type_id, new_payload(media, buf)),
            },
        }
        .to_bytes()
    }));
}

impl Tx<'_> {
    /// Adds to `vals` (sorted by offset) what keeps the zone metadata replicas equal: for
    /// every word of a zone's copy A, the same word of copy B, and both copies' checksums
    /// patched, each from its own copy's old bytes (so damage to one copy stays visible in
    /// its checksum instead of being blessed). Call it under the metadata locks of `vals`
    /// and of the zones' checksum words.
    fn replicate_meta(&self, vals: &mut Vec<(u64, u64)>) {
        let eng = self.eng;
        let geo = &eng.geo;
        let half = meta_copy_offset(geo);
        let n = vals.len();
        let mut i = 0;
        while i < n {
            let Some((base, len)) = replica::zone_of_meta(geo, vals[i].0) else {
                i += 1;
                continue;
            };
            // SAFETY: the checksum words of the zone's two copies, in the pool, under the
            // metadata lock of copy A's.
            let (mut sum_a, mut sum_b) = unsafe {
                (
                    eng.media.read_u64(base + META_SUM_OFFSET),
                    eng.media.read_u64(base + half + META_SUM_OFFSET),
                )
            };
            while i < n && replica::zone_of_meta(geo, vals[i].0) == Some((base, len)) {
                let (off, new) = vals[i];
                let pos = (off - base) as usize;
                // SAFETY: the word in both copies, under its metadata lock (copy B's word
                // is written only by commits holding copy A's).
                let (old_a, old_b) =
                    unsafe { (eng.media.read_u64(off), eng.media.read_u64(off + half)) };
                sum_a = replica::patch(sum_a, len, pos, old_a, new);
                sum_b = replica::patch(sum_b, len, pos, old_b, new);
                vals.push((off + half, new));
                i += 1;
            }
            vals.push((base + META_SUM_OFFSET, sum_a));
            vals.push((base + half + META_SUM_OFFSET, sum_b));
        }
    }

    /// Commits the transaction (see the module docs). On error, everything is discarded.
    pub(crate) fn commit(&self) -> Result<()> {
        let r = {
            let mut guard = self.st.borrow_mut();
            self.commit_inner(&mut guard)
        };
        match r {
            Ok(()) => {
                self.done.set(true);
                let mut st = self.st.borrow_mut();
                // Its registry entries are committed: their types need no lookup again,
                // and types found missing before may be among them.
                for &(type_id, layout, _) in &st.registered {
                    self.eng.types.insert(type_id, layout);
                }
                if !st.registered.is_empty() {
                    self.eng.types.registered();
                }
                self.release(&mut st);
                Ok(())
            }
            Err(e) => {
                self.abort();
                Err(e)
            }
        }
    }

    fn commit_inner(&self, st: &mut TxState<'_>) -> Result<()> {
        let eng = self.eng;
        if let Some(e) = st.poison.take() {
            return Err(e);
        }
        // A failed write-back earlier: nothing can be promised durable any more.
        eng.media.check()?;
        if st.lane.scratch.bufs.is_empty() && st.lane.scratch.meta.is_empty() {
            // Read-only: nothing to write, no fence.
            self.lane.counters.add(Counter::Commits, 1);
            return Ok(());
        }
        if eng.media.is_private() {
            // `Pool::open_read_only`: a change would stay in memory and be lost. Objects
            // opened (verified, repaired from parity if damaged) and left unchanged are
            // a read: nothing to write, and so is a whole-value borrow that changed no
            // byte (compared as the commit would). A free is in `frees` (its buffer is
            // `Freed`, as is the forgotten buffer of an object that failed verification
            // when opened, which changes nothing).
            let changes = !st.lane.scratch.meta.is_empty()
                || !st.lane.scratch.frees.is_empty()
                || st.lane.scratch.bufs.iter().any(|b| {
                    // SAFETY: as above.
                    let buf = unsafe { b.as_ref() };
                    match buf.kind {
                        BufKind::New => true,
                        BufKind::Open if buf.whole_borrow() => {
                            // SAFETY: the object's payload, inside the pool, which our
                            // write lock keeps as it was copied.
                            buf.differs_from(unsafe { eng.media.bytes(buf.off, buf.size) })
                        }
                        BufKind::Open => buf.is_dirty(),
                        BufKind::Freed => false,
                    }
                });
            if changes {
                return Err(Error::ReadOnly {
                    path: eng.media.path(),
                    what: "a transaction that changes the pool",
                });
            }
            self.lane.counters.add(Counter::Commits, 1);
            return Ok(());
        }
        // 1. canaries
        for b in &st.lane.scratch.bufs {
            // SAFETY: buffers live until release; no handle is alive during commit.
            let buf = unsafe { b.as_ref() };
            if buf.kind != BufKind::Freed && !buf.canaries_ok() {
                return Err(Error::CanaryMismatch { offset: buf.off });
            }
        }
        // 2. modified ranges and checksums
        // The lane's containers, borrowed field by field (not moved out and back: each
        // move back dropped the empty vector it replaced).
        let LaneState {
            scratch,
            items,
            sums,
            news,
            dirty,
            record,
            hdrs,
            meta_vals: vals,
            meta_held: held,
            deferred,
            ..
        } = &mut *st.lane;
        items.clear();
        sums.clear();
        news.clear();
        sums.reserve(scratch.bufs.len());
        for b in &scratch.bufs {
            // SAFETY: as above.
            let buf = unsafe { &mut *b.as_ptr() };
            // A handle's drop puts back the extension link pgl set; a handle leaked with
            // `mem::forget` never dropped: the link is put back here too (see `tail`).
            if buf.kind != BufKind::Freed {
                super::tail::keep_link(buf);
            }
            match buf.kind {
                BufKind::New => {
                    buf.ranges(MERGE_GAP);
                    news.push(*b);
                }
                BufKind::Freed => {}
                BufKind::Open if !buf.is_dirty() => {}
                BufKind::Open => {
                    let off = buf.off;
                    let size = buf.size;
                    let type_id = buf.type_id;
                    let old_sum = buf.checksum;
                    // A borrow of the whole value marked all of it: what changed is found
                    // by comparing with the object (our write lock has kept it as it was
                    // copied), from each end up to the first change, for values larger
                    // than a line (within one, a second piece to log, write and update
                    // parity for costs more than the bytes it spares). The checksum is
                    // then patched over that span, as for ranges a handle marked.
                    if buf.whole_borrow() && size > NARROW_MIN {
                        // SAFETY: the object's payload, inside the pool; our write lock
                        // keeps every commit but ours from changing it.
                        buf.narrow(unsafe { eng.media.bytes(off, size) });
                        if !buf.is_dirty() {
                            continue;
                        }
                    }
                    if buf.has_holes() {
                        // A ranged write's buffer: the holes the steps below read are
                        // those `ranges` merges into a range (and `joined_sum` into the
                        // checksum word's piece), written back as they are.
                        // SAFETY: the object's payload, inside the pool, which our write
                        // lock keeps as it was.
                        buf.fill_holes(unsafe { eng.media.bytes(off, size) }, MERGE_GAP);
                    }
                    buf.ranges(MERGE_GAP);
                    let buf = &*buf;
                    let ranges = buf.dirty();
                    let dirty: usize = ranges.iter().map(|r| (r.1 - r.0) as usize).sum();
                    let payload = buf.payload();
                    let sum = if !eng.checksums {
                        old_sum
                    } else if dirty * 2 >= size && !buf.patched() {
                        object_checksum(off, type_id, payload)
                    } else {
                        let mut s = old_sum;
                        for &(a, z) in ranges {
                            let (a, z) = (a as usize, z as usize);
                            // SAFETY: inside the object, which our write lock protects.
                            let old = unsafe { eng.media.bytes(off + a as u64, z - a) };
                            s = adler32_patch(
                                s,
                                CHECKSUM_PREFIX + size,
                                CHECKSUM_PREFIX + a,
                                old,
                                &payload[a..z],
                            );
                        }
                        s
                    };
                    for &(a, z) in ranges {
                        items.push(Item {
                            off: off + a as u64,
                            // From the whole payload's pointer, which may read all
                            // of it (`joined_sum` reads the bytes before the range).
                            src: payload.as_ptr().wrapping_add(a as usize),
                            len: (z - a) as usize,
                            sum: false,
                        });
                    }
                    if sum != old_sum {
                        // After the object's last range (`joined_sum` pairs them).
                        debug_assert!(!ranges.is_empty(), "a checksum item with no range");
                        sums.push(sum.to_le_bytes());
                        let s = sums.last().expect("just pushed");
                        items.push(Item {
                            off: off - HEADER_SIZE + HDR_CHECKSUM_OFFSET,
                            src: s.as_ptr(),
                            len: 4,
                            sum: true,
                        });
                    }
                }
            }
        }
        // The parity the apply step reads (a 4 KiB object's is 64 lines nobody has read
        // lately), fetched as soon as the ranges are known: while the metadata, the record
        // and its CRC are built and streamed. (Issued after the record's streaming stores
        // instead, it waited behind them: 1 KiB MLPC overwrite 8 % slower, 4 KiB 3 %, in
        // paired rounds.) Not a checksum word's: it shares its line with the object's first
        // bytes, whose parity the object's first range fetches when it starts there, and
        // costs one miss at most when not.
        for it in items.iter().filter(|it| !it.sum) {
            eng.parity.prefetch(&eng.media, it.off, it.len as u64);
        }
        // metadata, under the metadata locks (ascending stripes)
        vals.clear();
        scratch.meta.sort();
        // A zone's metadata checksums change with any of its words: copy A's checksum word
        // is locked too (it guards copy B's as well).
        let meta_sums = scratch
            .meta
            .iter()
            .filter_map(|(o, _)| replica::zone_of_meta(&eng.geo, o))
            .map(|(base, _)| base + META_SUM_OFFSET);
        eng.meta
            .lock(scratch.meta.iter().map(|(o, _)| o).chain(meta_sums), held);
        // Everything between taking the metadata locks and releasing them, in one block
        // that every outcome leaves through the unlock below.
        // The words of ranges set to zero that are not zero yet, as ranges to zero (from
        // the first such word to the last).
        let mut fills: Vec<(u64, u64)> = Vec::new();
        for &(a, len) in scratch.meta.zeroed() {
            // SAFETY: words of a chunk this transaction claimed for a new run: inside the
            // pool, and nothing else writes them.
            let nonzero = |w: u64| unsafe { eng.media.read_u64(a + w * 8) } != 0;
            let words = len / 8;
            if let Some(first) = (0..words).find(|&w| nonzero(w)) {
                let last = (first..words).rev().find(|&w| nonzero(w)).unwrap_or(first);
                fills.push((a + first * 8, (last + 1 - first) * 8));
            }
        }
        let r: Result<()> = 'locked: {
            // Before any word's new value is computed from its current one: a separate
            // record may change chunk-table words first (`free_guarded_chunks`).
            // (No new object, no guard: nearly every overwrite.)
            let mut guards = if news.is_empty() {
                Vec::new()
            } else {
                self.guards(news)
            };
            let guarded: u64 = guards.iter().map(|g| g.len).sum();
            if guarded > eng.geo.lane_size / GUARDED_LOG_DIVISOR {
                let lane = GuardedFree {
                    meta: &scratch.meta,
                    dirty,
                    record,
                    deferred,
                    hdrs,
                };
                if let Err(e) = self.free_guarded_chunks(lane, &guards) {
                    break 'locked Err(e);
                }
                guards = self.guards(news);
            }
            for (off, ch) in scratch.meta.iter() {
                // SAFETY: heap metadata word inside the pool, protected by its metadata lock.
                let cur = unsafe { eng.media.read_u64(off) };
                // A word of a range set to zero holds zero once `fills` are applied (and
                // already does if there are none).
                let cur = if !fills.is_empty() && scratch.meta.is_zeroed(off) {
                    0
                } else {
                    cur
                };
                match ch.apply(off, cur) {
                    Some(new) if new != cur => vals.push((off, new)),
                    Some(_) => {}
                    // A bitmap word that does not verify: nothing is written; the
                    // transaction aborts and `run` has the word rebuilt from parity.
                    None => break 'locked Err(crate::heap::bitmap_mismatch(off, cur)),
                }
            }
            if !vals.is_empty() {
                self.replicate_meta(vals);
            }
            // One walk over what this commit writes in place: the chunks (whose older,
            // unretired records it must order) and the zones (whose parity a crash may
            // leave stale, so that lanes mark them dirty first).
            let map = &eng.map;
            let mut touched = Touched::default();
            let mut zones = *dirty;
            for_each_write(items, &fills, vals, news, |off, len| {
                touched.add(off, len, map.chunk_shift());
                for at in [off, off + len.max(1) - 1] {
                    if let Some(zone) = map.zone_of(at) {
                        let (word, mask) = record::dirty_bit(zone);
                        zones[word] |= mask;
                    }
                }
            });
            // The chunks of a freed large object, which its commit does not write (only the
            // chunk table, in other chunks): a deferred record of another lane over its
            // bytes is settled before they can be reused (`deferred.rs`). Its owner's later
            // commit creating an object there would pass it unsettled, and a replay of it
            // after that commit's fence would void the newer record. (A block of a run
            // shares its chunk with the bitmap word its free writes.)
            for f in &scratch.frees {
                if let crate::heap::PendingFree::Chunks { zone, first, n } = *f {
                    let geo = &eng.geo;
                    touched.add(
                        geo.chunk_offset(zone, first),
                        n * geo.chunk_size,
                        map.chunk_shift(),
                    );
                }
            }
            if eng.parity.enabled() && zones != *dirty {
                if let Err(e) = self.mark_dirty_zones(dirty, zones) {
                    break 'locked Err(e);
                }
            }
            if items.is_empty() && fills.is_empty() && news.is_empty() && vals.len() <= 1 {
                self.commit_direct(vals, &touched)
            } else if items.is_empty() && fills.is_empty() && vals.len() == 1 && guards.is_empty() {
                self.commit_new_direct(hdrs, &mut record.flushes, news, vals[0], &touched)
            } else {
                self.commit_logged(
                    record,
                    deferred,
                    hdrs,
                    Writes {
                        items,
                        fills: &fills,
                        news,
                        vals,
                    },
                    &touched,
                    &guards,
                )
            }
        };
        eng.meta.unlock(held);
        r?;
        // A changed root word, for `Tx::free` (before this transaction unlocks its objects).
        let root_word = Engine::root_word_of(&eng.geo);
        if let Some(&(_, v)) = st.lane.meta_vals.iter().find(|&&(o, _)| o == root_word) {
            eng.root.store(v, Ordering::Release);
        }
        // the volatile heap follows
        eng.heap.committed(&st.lane.scratch.undo);
        st.lane.scratch.undo.clear();
        self.lane
            .counters
            .add(Counter::Frees, st.lane.scratch.frees.len() as u64);
        for f in st.lane.scratch.frees.drain(..) {
            eng.heap.finish_free(f);
        }
        let c = &self.lane.counters;
        c.add(Counter::Commits, 1);
        c.add(Counter::Allocs, st.allocs);
        c.add(Counter::Upgrades, st.upgrades);
        Ok(())
    }

    /// The guards of the new objects `news` (see `Guard`): where an object's space meets
    /// the bitmap of the run its chunk's table entry names on media, and is not a block of
    /// that run (whose bitmap ends before its first block).
    fn guards(&self, news: &[NonNull<Buffer>]) -> Vec<Guard> {
        use crate::heap::layout::{
            entry_checked, entry_class, entry_kind, CHUNK_TABLE_OFFSET, KIND_RUN,
        };
        let eng = self.eng;
        let geo = &eng.geo;
        let zones = eng.heap.zone_count();
        let mut out = Vec::new();
        for (news_idx, b) in news.iter().enumerate() {
            // SAFETY: buffers live until release.
            let buf = unsafe { b.as_ref() };
            let (start, end) = (buf.off - HEADER_SIZE, buf.off + buf.size as u64);
            let mut at = start;
            while at < end {
                let Some(pos) = geo.locate(at, zones) else {
                    break;
                };
                let chunk = geo.chunk_offset(pos.zone, pos.chunk);
                let entry = geo.chunk_offset(pos.zone, 0) + CHUNK_TABLE_OFFSET + pos.chunk * 8;
                // SAFETY: a chunk table word of a zone of the pool; the chunk is reserved
                // for this transaction, so no other commit changes its entry meanwhile.
                let e = unsafe { eng.media.read_u64(entry) };
                if entry_kind(e) == KIND_RUN {
                    let class = entry_class(e);
                    let classes = eng.heap.classes();
                    if (class as usize) < classes.len() {
                        let bitmap = u64::from(classes.bitmap_words(class, entry_checked(e))) * 8;
                        let (a, z) = (start.max(chunk), end.min(chunk + bitmap));
                        if a < z {
                            out.push(Guard {
                                news_idx,
                                off: a,
                                len: z - a,
                            });
                        }
                    }
                }
                at = chunk + geo.chunk_size;
            }
        }
        out
    }

    /// Sets free on media, by a record of its own committed before this commit's, the
    /// chunk-table entries of the chunks `guards` lie in: entries that still name the
    /// empty runs whose chunks the heap took back in DRAM only (`Guard`). Their bitmaps
    /// then guard nothing, and the new objects over them are written like any other
    /// instead of logged: however many empty runs a large object takes over, its record
    /// stays as small as in a pool where those chunks were never runs. A crash after this
    /// record and before the commit's leaves those chunks free, as the heap saw them.
    ///
    /// Call it under the metadata locks of the commit, before computing any word's new
    /// value: it changes the entries and their zones' checksums. Only entries the commit
    /// changes too are set (its new objects' chunks, this transaction's).
    fn free_guarded_chunks(&self, lane: GuardedFree<'_>, guards: &[Guard]) -> Result<()> {
        use crate::heap::layout::CHUNK_TABLE_OFFSET;
        let eng = self.eng;
        let geo = &eng.geo;
        let zones = eng.heap.zone_count();
        let mut vals: Vec<(u64, u64)> = guards
            .iter()
            .filter_map(|g| geo.locate(g.off, zones))
            .map(|p| {
                (
                    geo.chunk_offset(p.zone, 0) + CHUNK_TABLE_OFFSET + p.chunk * 8,
                    0,
                )
            })
            .collect();
        vals.sort_unstable();
        vals.dedup();
        // Only entries this commit changes too, whose chunks are this transaction's (a
        // guard elsewhere stays logged).
        vals.retain(|&(off, _)| lane.meta.iter().any(|(o, _)| o == off));
        if vals.is_empty() {
            return Ok(());
        }
        self.replicate_meta(&mut vals);
        let map = &eng.map;
        let mut touched = Touched::default();
        let mut dirty = *lane.dirty;
        for &(off, _) in &vals {
            touched.add(off, 8, map.chunk_shift());
            if let Some(zone) = map.zone_of(off) {
                let (word, mask) = record::dirty_bit(zone);
                dirty[word] |= mask;
            }
        }
        if eng.parity.enabled() && dirty != *lane.dirty {
            self.mark_dirty_zones(lane.dirty, dirty)?;
        }
        self.commit_logged(
            lane.record,
            lane.deferred,
            lane.hdrs,
            Writes {
                items: &[],
                fills: &[],
                news: &[],
                vals: &vals,
            },
            &touched,
            &[],
        )
    }

    /// A commit with at most one 8-byte metadata word and no object changes: the word is
    /// failure-atomic on its own, so it is stored in place under one fence, no record.
    fn commit_direct(&self, vals: &[(u64, u64)], touched: &Touched) -> Result<()> {
        let eng = self.eng;
        let Some(&(off, v)) = vals.first() else {
            return Ok(()); // read-only
        };
        self.store_word(off, v);
        self.eng.fence_with_retires(FenceFor::Direct, touched);
        let c = &self.lane.counters;
        c.add(Counter::Fences, 1);
        c.add(Counter::DirectCommits, 1);
        c.add(Counter::BytesWritten, 8);
        // Whether the word is durable is unknown after a failed write-back: report it (the
        // pool takes no more commits; reopening tells which way it went).
        eng.media.check()
    }

    /// A commit that only creates objects and changes one metadata word (an allocation
    /// from an existing run: one bitmap word): the objects are written into their
    /// still-free blocks and made durable under the first fence, then the word is stored in
    /// place under the second. A crash before the second fence leaves the blocks free (their
    /// bytes are nobody's), after it the objects allocated; no record is needed for that,
    /// and none is written.
    fn commit_new_direct(
        &self,
        hdrs: &mut Vec<[u8; 16]>,
        flushes: &mut Vec<(u64, u64)>,
        news: &[NonNull<Buffer>],
        val: (u64, u64),
        touched: &Touched,
    ) -> Result<()> {
        let eng = self.eng;
        let media = &eng.media;
        new_headers(media, news, hdrs, eng.checksums);
        self.new_objects_parity(news, hdrs, &[]);
        let written = 8 + self.write_new_objects(news, hdrs, &[], flushes);
        // The word may be covered by another lane's record that is not yet retired: that
        // retire mark must be durable before the word is (see `fence_with_retires`).
        self.eng.fence_with_retires(FenceFor::Direct, touched);
        self.new_objects_written(news, hdrs, &[]);
        // The objects (and the retire marks the word must follow) may not be durable after
        // a failed write-back: the word must not be stored then.
        eng.media.check()?;
        // After the fence no flush is pending, so the parity lock waits for nothing.
        self.store_word(val.0, val.1);
        eng.flush_owed();
        media.fence(); // ---- committed ----
        let c = &self.lane.counters;
        c.add(Counter::Fences, 2);
        c.add(Counter::DirectCommits, 1);
        c.add(Counter::BytesWritten, written);
        eng.media.check()
    }

    /// Stores metadata word `off` in place with its parity update, both flushed (durable
    /// at the caller's next fence). Issued with no flush pending: the parity lock is a
    /// locked instruction.
    fn store_word(&self, off: u64, v: u64) {
        let eng = self.eng;
        // SAFETY: a heap metadata word, protected by its metadata lock (held by the caller).
        unsafe { eng.parity.write(&eng.media, off, &v.to_le_bytes()) };
        if !crate::fault::drop_apply_flush() {
            eng.media.flush(off, 8);
        }
        eng.parity.flush(&eng.media, off, 8);
    }

    /// Makes durable, before this commit writes anything in place, that this lane writes
    /// the zones it is about to write (the lane's dirty-zone bits, in both copies): after a
    /// crash, recovery recomputes the parity of exactly those zones. Costs a fence only the
    /// first time a lane writes a zone after the pool was opened.
    fn mark_dirty_zones(
        &self,
        dirty: &mut record::DirtyZones,
        want: record::DirtyZones,
    ) -> Result<()> {
        let eng = self.eng;
        *dirty = want;
        let mut bytes = [0u8; record::DIRTY_BYTES];
        for (chunk, w) in bytes.chunks_exact_mut(8).zip(want) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        for copy in 0..2 {
            let off = eng.lane_off(self.lane.idx, copy) + record::DIRTY_OFFSET as u64;
            // SAFETY: this transaction owns its lane; the bits lie in its first line, which
            // no record or retire mark overlaps.
            unsafe { eng.media.write(off, &bytes) };
            eng.media.flush(off, record::DIRTY_BYTES as u64);
        }
        eng.media.fence();
        self.lane.counters.add(Counter::Fences, 1);
        eng.media.check()
    }

    /// XORs the new objects' bytes (headers `hdrs`, payloads) into parity. Call it before
    /// the commit issues any flush: the parity locks are locked instructions, which would
    /// each wait for pending write-backs like a fence.
    fn new_objects_parity(&self, news: &[NonNull<Buffer>], hdrs: &[[u8; 16]], guards: &[Guard]) {
        let eng = self.eng;
        // Every page first, before any piece counts as pending (see `Parity::touch`), and
        // every page of the write-backs this thread owes, which its fence issues.
        if !news.is_empty() {
            eng.touch_owed();
        }
        for (b, h) in news.iter().zip(hdrs) {
            // SAFETY: buffers live until release.
            let buf = unsafe { b.as_ref() };
            new_pieces(buf, h, guards, |off, bytes| {
                // SAFETY: the block lies inside the pool.
                unsafe { eng.parity.touch(&eng.media, off, bytes.len() as u64) };
            });
        }
        for (b, h) in news.iter().zip(hdrs) {
            // SAFETY: buffers live until release.
            let buf = unsafe { b.as_ref() };
            new_pieces(buf, h, guards, |off, bytes| {
                // SAFETY: the block was reserved for this transaction by the heap (no one
                // else uses it) and lies inside the pool.
                unsafe { eng.parity.update_new(&eng.media, off, bytes) };
            });
        }
    }

    /// Tells parity that the new objects of `new_objects_parity` are written (their
    /// columns may be rebuilt again). Call it after the fence that follows their writes:
    /// it is a locked instruction.
    fn new_objects_written(&self, news: &[NonNull<Buffer>], hdrs: &[[u8; 16]], guards: &[Guard]) {
        for (b, h) in news.iter().zip(hdrs) {
            // SAFETY: buffers live until release.
            let buf = unsafe { b.as_ref() };
            new_pieces(buf, h, guards, |off, bytes| {
                self.eng.parity.new_written(off, bytes.len() as u64);
            });
        }
    }

    /// Writes the new objects into their still-free blocks and flushes them and their
    /// parity, each line once (`merge_lines`: an object's header and payload are two
    /// pieces, which share a line and a parity line); returns the bytes written.
    /// `flushes`: scratch.
    fn write_new_objects(
        &self,
        news: &[NonNull<Buffer>],
        hdrs: &[[u8; 16]],
        guards: &[Guard],
        flushes: &mut Vec<(u64, u64)>,
    ) -> u64 {
        let eng = self.eng;
        let mut written = 0;
        flushes.clear();
        for (b, h) in news.iter().zip(hdrs) {
            // SAFETY: buffers live until release.
            let buf = unsafe { b.as_ref() };
            new_pieces(buf, h, guards, |off, bytes| {
                let len = bytes.len() as u64;
                // SAFETY: as in `new_objects_parity`.
                unsafe {
                    eng.media
                        .write_durable_owing(off, bytes, |a, n| flushes.push((a, a + n)))
                };
                eng.parity
                    .each_parity_range(off, len, |p, n| flushes.push((p, p + n)));
                written += len;
            });
        }
        merge_lines(flushes);
        for &(a, z) in flushes.iter() {
            eng.media.flush(a, z - a);
        }
        written
    }

    fn commit_logged(
        &self,
        record: &mut RecordScratch,
        deferred: &mut Option<super::deferred::Deferred>,
        hdrs: &mut Vec<[u8; 16]>,
        writes: Writes<'_>,
        touched: &Touched,
        guards: &[Guard],
    ) -> Result<()> {
        let Writes {
            items,
            fills,
            news,
            vals,
        } = writes;
        let eng = self.eng;
        let media = &eng.media;
        let lane_size = eng.geo.lane_size as usize;
        let RecordScratch { stage, flushes } = record;
        // 3a. the record, built in DRAM (cache-hot for the checksum and the apply step)
        if stage.len() * 8 < lane_size {
            stage.resize(lane_size / 8, 0);
        }
        // SAFETY: a u64 vector viewed as bytes: same allocation, alignment 8 >= 1, and any
        // byte values are valid for both types.
        let bytes: &mut [u8] =
            unsafe { std::slice::from_raw_parts_mut(stage.as_mut_ptr() as *mut u8, lane_size) };
        let mut w = RecordWriter::new(bytes);
        let mut needed = ENTRIES_OFFSET;
        let mut fits = true;
        let mut k = 0;
        while k < items.len() {
            let it = &items[k];
            // SAFETY: `src` points into a live buffer or `sums`, `len` bytes long.
            let data = unsafe { std::slice::from_raw_parts(it.src, it.len) };
            // An object's checksum rides in the entry of its last changed range.
            let sum = items
                .get(k + 1)
                .filter(|n| n.sum && record::sum_back(it.off, n.off).is_some());
            if let Some(sum) = sum {
                // SAFETY: a checksum item is 4 bytes of `sums`.
                let bytes = unsafe { *(sum.src as *const [u8; 4]) };
                needed += record::entry_size(record::WRITE_SUM_PREFIX + it.len);
                fits = fits && w.push_write_sum(it.off, data, sum.off, bytes);
                k += 2;
                continue;
            }
            needed += record::entry_size(it.len);
            fits = fits && w.push(it.off, data);
            k += 1;
        }
        // Ranges set to zero, before the words that may change within them.
        for &(off, len) in fills {
            needed += record::entry_size(record::ZERO_LEN);
            fits = fits && w.push_zero(off, len);
        }
        // Metadata words, neighbours in one entry (a new run's bitmap is hundreds of
        // words: one entry header for them all, not one each).
        let mut i = 0;
        while i < vals.len() {
            let mut j = i + 1;
            while j < vals.len() && vals[j].0 == vals[j - 1].0 + 8 {
                j += 1;
            }
            let (off, n) = (vals[i].0, j - i);
            needed += record::entry_size(8 * n);
            fits = fits
                && if n == 1 {
                    w.push(off, &vals[i].1.to_le_bytes())
                } else {
                    let bytes: Vec<u8> = vals[i..j]
                        .iter()
                        .flat_map(|&(_, v)| v.to_le_bytes())
                        .collect();
                    w.push(off, &bytes)
                };
            i = j;
        }
        // None of the new objects' steps runs for a commit without any (their calls,
        // each finding nothing to do, cost ~175 instructions an overwrite, with the guards
        // and metadata replicas looked for in `commit_inner`).
        let fresh = !news.is_empty();
        if fresh {
            new_headers(media, news, hdrs, eng.checksums);
        }
        // The new objects' guarded bytes, logged as writes (applied after the fence).
        let guarded: Vec<(u64, Vec<u8>)> = guards
            .iter()
            .map(|g| {
                // SAFETY: buffers live until release.
                let buf = unsafe { news[g.news_idx].as_ref() };
                // The object's bytes are its header, then its payload.
                let bytes = hdrs[g.news_idx]
                    .iter()
                    .chain(new_payload(media, buf))
                    .skip((g.off - (buf.off - HEADER_SIZE)) as usize)
                    .take(g.len as usize)
                    .copied()
                    .collect();
                (g.off, bytes)
            })
            .collect();
        for (off, bytes) in &guarded {
            needed += record::entry_size(bytes.len());
            fits = fits && w.push(*off, bytes);
        }
        for (b, h) in news.iter().zip(hdrs.iter()) {
            // SAFETY: buffers live until release.
            let buf = unsafe { b.as_ref() };
            let mut crc = crate::checksum::Strong::new();
            crc.update(h);
            crc.update(new_payload(media, buf));
            needed += record::entry_size(record::NEW_LEN);
            // Payloads are at most `u32::MAX` bytes (`Heap::max_object`).
            let size = u32::try_from(buf.size).map_err(|_| Error::ObjectTooLarge {
                requested: buf.size as u64,
                max: u64::from(u32::MAX),
            })?;
            fits = fits && w.push_new(buf.off - HEADER_SIZE, size, crc.finish());
        }
        if !fits {
            return Err(Error::TxTooLarge {
                needed: needed as u64,
                capacity: lane_size as u64,
            });
        }
        let seq = eng.seq.next();
        let n = w.seal(seq);
        // Parity of the new objects before any write-back is issued: its locks are locked
        // instructions, which would each wait for pending flushes like a fence.
        if fresh {
            self.new_objects_parity(news, hdrs, guards);
        }
        // 3b. the lane copies, in whole lines (`record::stream_len`), with streaming stores
        // whatever their length. A lane's lines are written again by its next commit, and a
        // cached store to a line that `clwb` wrote back costs a read of it first. Measured in
        // paired builds (fig3 overwrite, 1 thread): on the AMD EPYC host (2026-12-06,
        // records then streamed to a partial last line), streaming from 512 B took 18-19 %
        // off a 1 KiB overwrite and 5-7 % off 512 B, and from 0 B made 64 B 2-5 % slower; on
        // the Intel Xeon host (2026-12-08, whole lines), streaming from 0 B instead of 512 B
        // took 64 B from 570-576 to 506-544 ns and 256 B from 711-733 to 579-620, and
        // caching 1 KiB records took 975-987 to 1,400-1,430.
        let sealed = &bytes[SEAL_OFFSET..SEAL_OFFSET + record::stream_len(n, lane_size)];
        for off in eng.lane_copies().map(|c| eng.lane_off(self.lane.idx, c)) {
            // SAFETY: this transaction owns its lane (the lane mutex); its copies lie inside
            // the pool, and the record fits the lane (checked by the writer).
            unsafe { media.write_streamed(off + SEAL_OFFSET as u64, sealed) };
        }
        // 3c. new objects, straight into their still-free space
        let mut written = if fresh {
            self.write_new_objects(news, hdrs, guards, flushes)
        } else {
            0
        };
        // 3d. retire marks that may not be durable yet, and the ordering point
        self.eng
            .fence_with_retires(FenceFor::Record(self.lane.idx), touched);
        if fresh {
            self.new_objects_written(news, hdrs, guards);
        }
        // ---- committed ---- unless the record's write-back failed: then it may not be
        // durable, and applying it in place would leave changes no record protects.
        eng.media.check()?;
        // 4. apply, from the transaction's buffers (the bytes the record holds: its write
        // entries are `items`, `fills` then `vals`). Parity and stores first, all flushes
        // after: the parity locks are locked instructions, which would each wait for
        // pending flushes like a fence. Each range's write-backs (its bytes, and the parity
        // bytes its update changed) are listed as it is applied; each byte range once: a
        // checked object's checksum word ends where its payload starts, and a second
        // write-back of a line already on its way seems to wait for the first (not
        // flushing the word at all saved ~120 ns a 64-byte overwrite).
        flushes.clear();
        let drop_flush = crate::fault::drop_apply_flush();
        let mut apply = |dst: u64, head: &[u8], data: &[u8], data_flush: bool| {
            // SAFETY: each target is an object range locked by this transaction or a metadata
            // word under its metadata lock; all inside the pool. The bytes are the
            // transaction's own (its buffers, `sums`, `guarded`, zeros, a value), never the
            // pool's. Cached stores: the object's lines are in the cache (it was just read),
            // where streaming stores measured 1.5x slower; at 4 KiB, 25 % slower (the
            // streamed lines must drain before the stripe is released, where written-back
            // ones drain under the next commit's fence).
            unsafe {
                eng.parity
                    .write_parts(media, dst, head, data, |p, n| flushes.push((p, p + n)))
            };
            let len = (head.len() + data.len()) as u64;
            if data_flush {
                flushes.push((dst, dst + len));
            }
            len
        };
        let mut k = 0;
        while k < items.len() {
            let it = &items[k];
            // An object's checksum word, applied with its range as one piece
            // (`joined_sum`): one stripe hold and parity update for both. The gap's bytes
            // are stored again unchanged, and not counted as written.
            let joined = joined_sum(it, items.get(k + 1));
            let gap = joined.map_or(0, |(_, gap)| gap);
            // SAFETY: `src` points into a live buffer or `sums`, `len` bytes long. Joined,
            // the word ends where the object's payload starts, so the range starts `gap`
            // bytes into the payload, and its `src` (made from the whole payload's
            // pointer, `Item::src`) as far into the buffer's copy of it: the `gap + len`
            // bytes from the copy's start are in that live buffer.
            let data = unsafe { std::slice::from_raw_parts(it.src.sub(gap), gap + it.len) };
            let (dst, head): (u64, &[u8]) = match joined {
                // SAFETY: a checksum item's `src` points into `sums`, `len` (4) bytes long.
                Some((sum, _)) => (sum.off, unsafe {
                    std::slice::from_raw_parts(sum.src, sum.len)
                }),
                None => (it.off, &[]),
            };
            written += apply(dst, head, data, !drop_flush) - gap as u64;
            k += if joined.is_some() { 2 } else { 1 };
        }
        for (off, bytes) in &guarded {
            written += apply(*off, &[], bytes, true);
        }
        for &(off, len) in fills {
            for at in (off..off + len).step_by(ZEROS.len()) {
                let n = (off + len - at).min(ZEROS.len() as u64);
                written += apply(at, &[], &ZEROS[..n as usize], !drop_flush);
            }
        }
        for &(off, v) in vals {
            written += apply(off, &[], &v.to_le_bytes(), !drop_flush);
        }
        merge_lines(flushes);
        let c = &self.lane.counters;
        c.add(Counter::BytesLogged, eng.lane_copies().end * n as u64);
        c.add(Counter::BytesWritten, written);
        // A commit that only overwrites objects leaves its write-backs to this thread's
        // next fence (`deferred.rs`): nothing else in place depends on them.
        if fills.is_empty()
            && vals.is_empty()
            && news.is_empty()
            && eng.defer(self.lane, deferred, seq, touched, flushes)
        {
            c.add(Counter::Fences, 1);
            c.add(Counter::DeferredApplies, 1);
            return Ok(());
        }
        for &(a, z) in flushes.iter() {
            media.flush(a, z - a);
        }
        eng.flush_owed();
        media.fence();
        // A failed write-back of the applied bytes: the record must stay unretired, so that
        // reopening the pool replays it.
        eng.media.check()?;
        // 5. retire, in both copies whatever `lane_copies` (no fence: see lane.rs)
        for off in [0, 1].map(|c| eng.lane_off(self.lane.idx, c)) {
            // SAFETY: the retired word of our own lane.
            unsafe { media.write(off + RETIRED_OFFSET as u64, &record::retire_mark(seq)) };
        }
        eng.lanes.retired(self.lane.idx, touched);
        c.add(Counter::Fences, 2);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{merge_lines, merge_ranges, outside_guards, Guard};

    #[test]
    fn merged_lines_cover_each_touched_line_once() {
        let lines = |mut r: Vec<(u64, u64)>| {
            merge_lines(&mut r);
            r
        };
        // A range and a checksum word apart in one line: one line.
        assert_eq!(lines(vec![(40, 56), (8, 12)]), vec![(0, 64)]);
        // Across a boundary, and touching the next line's start.
        assert_eq!(lines(vec![(60, 70)]), vec![(0, 128)]);
        assert_eq!(lines(vec![(0, 64), (64, 65)]), vec![(0, 128)]);
        // Lines apart stay apart; aligned ranges are kept as they are.
        assert_eq!(
            lines(vec![(130, 131), (0, 1), (256, 320)]),
            vec![(0, 64), (128, 192), (256, 320)]
        );
        assert!(lines(Vec::new()).is_empty());
    }

    #[test]
    fn pieces_outside_guards_cover_exactly_the_unguarded_bytes() {
        let bytes: Vec<u8> = (0..64).collect();
        let g = |off, len| Guard {
            news_idx: 0,
            off,
            len,
        };
        let pieces = |guards: &[Guard]| {
            let mut out = Vec::new();
            outside_guards(guards, 100, &bytes, &mut |off, b: &[u8]| {
                out.push((off, b.to_vec()))
            });
            out
        };
        assert_eq!(pieces(&[]), vec![(100, bytes.clone())]);
        // A guard over the start, one inside, one past the end, one elsewhere.
        let got = pieces(&[g(90, 18), g(130, 4), g(160, 100), g(500, 8)]);
        assert_eq!(
            got,
            vec![(108, bytes[8..30].to_vec()), (134, bytes[34..60].to_vec())]
        );
        // Everything guarded: nothing written early.
        assert!(pieces(&[g(0, 1000)]).is_empty());
    }

    #[test]
    fn ranges_that_overlap_or_touch_merge_and_others_stay_apart() {
        let mut r = vec![
            (100, 164),
            (96, 100),
            (300, 310),
            (150, 170),
            (200, 200),
            (305, 306),
        ];
        merge_ranges(&mut r);
        assert_eq!(r, vec![(96, 170), (200, 200), (300, 310)]);
        let mut e: Vec<(u64, u64)> = Vec::new();
        merge_ranges(&mut e);
        assert!(e.is_empty());
    }

    #[test]
    fn merged_ranges_cover_exactly_the_bytes_of_the_input() {
        // Every byte of the input in exactly one output range, and no other byte.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..crate::miri_or(500, 20) {
            let mut r = Vec::new();
            for _ in 0..8 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let a = (seed >> 33) % 200;
                let n = (seed >> 20) % 24;
                r.push((a, a + n));
            }
            let mut want = [false; 256];
            for &(a, z) in &r {
                want[a as usize..z as usize].fill(true);
            }
            merge_ranges(&mut r);
            let mut got = [0u8; 256];
            for w in r.windows(2) {
                assert!(w[0].1 < w[1].0, "{r:?}: sorted, apart");
            }
            for &(a, z) in &r {
                for b in &mut got[a as usize..z as usize] {
                    *b += 1;
                }
            }
            for i in 0..256 {
                assert_eq!(got[i], u8::from(want[i]), "byte {i} of {r:?}");
            }
        }
    }
}
