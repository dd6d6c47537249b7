//! `Log`: the Arcadia log — reserve, copy, complete, force.
//!
//! Invariants:
//! - Only `reserve` (the LSN and the bytes of a record) and `force` (one thread flushes and
//!   fences at a time) serialise; copying into a reservation and completing it run
//!   concurrently in any number of threads.
//! - `done` is the largest LSN up to which every record is complete; `durable` the largest
//!   up to which every record has been flushed and fenced. `durable <= done < next`.
//! - A record's bytes are written only through its reservation, until `complete`; after
//!   that they are only read, until `reclaim` frees them. Freed space is reused only once
//!   the superline naming the new start is durable.
//! - LSNs `lsn` and `lsn + RING` never both have a slot in use: a record is reserved only
//!   while `lsn < durable + RING`.
//! - Every LSN handed out is below 2^62 and every record ends at a virtual offset of at
//!   most 2^62 (`format::MAX_LSN`), so that every superline written decodes.
//! - A record marked own was flushed and fenced by its writer before it was completed:
//!   `force` flushes only the others.
//! - A thread never waits for a record it reserved itself and has not completed (it would
//!   wait forever): each slot names the thread that reserved its LSN, and a force that
//!   would wait first looks for the caller's own open reservations. Reservations are not
//!   `Send`, so the thread that reserved a record is the one that completes it.

use super::config::LogConfig;
use super::format::{
    self, record_size, seal, EpochRule, RecordHeader, Superline, AREA_OFFSET, HEADER_LEN,
    MAX_PAYLOAD, SUPER_LEN,
};
use super::policy::{bucket, ForcePolicy, LogStats, WINDOW_BUCKETS};
use super::recovery::{self, RecoveryReport};
use super::reservation::Reservation;
use crate::persist::{CrashSim, FileKind, FlushMode, Media, SIM_ALREADY_OPEN};
use crate::thread_token::thread_token;
use crate::{Error, Result};
use parking_lot::{Mutex, RwLock};
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A log sequence number: records are numbered 1, 2, 3, … in reservation order.
pub type Lsn = u64;

/// Completion slots: how far reservations may run ahead of the durable LSN.
const RING: u64 = 1 << 14;

/// The reserve side: where the next record goes and which records are live.
pub(super) struct Tail {
    pub(super) next: Lsn,
    pub(super) vtail: u64,
    pub(super) head_lsn: Lsn,
    head_voff: u64,
    /// Virtual offset of each live record, `head_lsn` first.
    pub(super) index: VecDeque<u64>,
    /// Records ending at most here need no closer look: `min(head_voff + capacity,
    /// bound)`, one comparison for both "full" and "numbered out".
    limit: u64,
    /// Records ending at most here are numbered below 2^62 and end by 2^62 (see
    /// [`number_bound`]).
    bound: u64,
}

impl Tail {
    /// Sets where the first live record (or the next one, if none is live) starts.
    fn set_head_voff(&mut self, voff: u64, cap: u64) {
        self.head_voff = voff;
        self.limit = (voff + cap).min(self.bound);
    }
}

/// The virtual offset up to which records appended after LSN `next - 1` ending at `vtail`
/// surely stay within the numbering (LSNs below 2^62, ends at most 2^62): a record takes at
/// least a line, so the `k`-th record from here ends at `vtail + k * LINE` or later.
fn number_bound(next: Lsn, vtail: u64) -> u64 {
    let lsns_left = format::MAX_LSN.saturating_sub(next);
    vtail
        .saturating_add(lsns_left.saturating_mul(format::LINE))
        .min(format::MAX_LSN)
}

/// The force side: what the last force made durable, and its counters.
struct Forcer {
    /// The LSN this lock last made durable, and where its record ends (virtual offset).
    end_lsn: Lsn,
    end_voff: u64,
    forces: u64,
    forced: u64,
    window_max: u64,
    histogram: [u64; WINDOW_BUCKETS],
}

/// The superline as last written, and which copy holds it.
struct Super {
    line: Superline,
    copy: usize,
}

/// What to do instead of opening a log that is open already (`Error::AlreadyOpen`).
const ALREADY_OPEN: &str = "share one `Log` between threads (by reference or in an `Arc`) \
                            instead of opening the file twice, or close the other first; \
                            `pgl log info|dump|check` read a live log without opening it";

/// A concurrent, crash-consistent persistent log of self-validating records in a circular
/// area of one file (the book's chapter "The log" walks through it).
///
/// `reserve` hands out an LSN and the record's bytes in place, `complete` seals the
/// record, `force(lsn)` returns once every record up to `lsn` is complete and durable;
/// `append` does all of that. Only `reserve` and `force` serialise. Dropping the `Log`
/// forces every record completed by then (whatever the policy). Opening a log recovers
/// it: every forced record comes back, nothing after a hole does.
///
/// ```
/// use pgl_runtime::log::{ForcePolicy, Log, LogConfig};
///
/// let path = std::env::temp_dir().join(format!("pgl-doc-log-{}", std::process::id()));
/// # let _ = std::fs::remove_file(&path);
/// let log = Log::create(&path, LogConfig::new(1 << 20).policy(ForcePolicy::Frequency(8)))?;
/// let mut res = log.reserve(5)?;
/// res.copy_from_slice(b"hello");
/// let lsn = log.complete(res)?;
/// log.force(lsn)?;
/// drop(log);
/// let log = Log::open(&path)?;
/// assert_eq!(log.iter().next().unwrap()?.payload, b"hello");
/// # std::fs::remove_file(&path).unwrap();
/// # Ok::<(), pgl_runtime::Error>(())
/// ```
pub struct Log {
    pub(super) media: Media,
    pub(super) cap: u64,
    policy: ForcePolicy,
    pub(super) rule: EpochRule,
    recovery: RecoveryReport,
    base: Lsn,
    pub(super) tail: Mutex<Tail>,
    next: AtomicU64,
    head: AtomicU64,
    /// Payload bytes reserved since open; written only under the `tail` lock.
    bytes: AtomicU64,
    ends: Box<[AtomicU64]>,
    slots: Box<[Slot]>,
    /// `own[slot(lsn)] == lsn`: record `lsn` was made durable by its writer (flushed and
    /// fenced by the thread that wrote it, before it was completed), so `force` need not
    /// flush it. Only `Sync` appends do that: empty under the other policies.
    own: Box<[AtomicU64]>,
    done: Padded,
    durable: Padded,
    window: Padded,
    force: Mutex<Forcer>,
    sb: Mutex<Super>,
    /// Held shared while a record is read, exclusively while reclaim frees space.
    pub(super) gate: RwLock<()>,
}

/// An atomic alone on its cache lines (the frontiers are read by every thread).
#[repr(align(128))]
struct Padded(AtomicU64);

/// The completion slot of an LSN (`slot(lsn)`), between its reservation and its force.
struct Slot {
    /// `lsn` once record `lsn` is complete (an older LSN of the slot before).
    done: AtomicU64,
    /// The `thread_token` of the thread that reserved the slot's newest LSN: written before
    /// the LSN is handed out, so whoever sees the LSN reserved sees its maker.
    maker: AtomicU64,
}

/// Closing a log forces what was completed: a program that appends under a batch policy
/// and exits cleanly loses nothing to a crash that comes after.
impl Drop for Log {
    fn drop(&mut self) {
        // Every reservation borrows the log, so none is open now: the completed records are
        // all there will be, and forcing them waits for no one. An error (the device failed
        // a flush) cannot be returned from here: `force` before the drop reports it.
        let done = self.completed_lsn();
        if done > self.durable_lsn() {
            let _ = self.force(done);
        }
    }
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("path", &self.media.path())
            .field("capacity", &self.cap)
            .field("policy", &self.policy)
            .field("next_lsn", &self.next_lsn())
            .field("durable_lsn", &self.durable_lsn())
            .finish()
    }
}

impl Log {
    /// Creates a log file at `path` (it must not exist) and opens it. The log is written
    /// under a hidden temporary name beside `path` and renamed into place once whole, so
    /// that a crash while creating never leaves a half-made file at `path`. If writing the
    /// new log fails (an I/O error of the device), the file it created is removed again,
    /// so that the same call can be retried.
    pub fn create(path: impl AsRef<Path>, config: LogConfig) -> Result<Log> {
        let path = path.as_ref();
        let cap = config.area()?;
        let len = format::file_len(cap);
        let (media, mut made) =
            Media::create_file(path, len, len, config.flush, config.preallocate)?;
        // Locked before it is formatted: then only this call may remove it (see `NewFile`).
        media.lock_exclusive("log", ALREADY_OPEN)?;
        // At `path` only once whole: a crash before leaves no half-made log there.
        if let Err(e) = Self::format(&media, cap, config.policy).and_then(|()| made.publish()) {
            return Err(made.abandon(FileKind::Log, e));
        }
        Self::from_media(media).map_err(|e| made.abandon(FileKind::Log, e))
    }

    /// Opens the log at `path`, recovering it: the valid superline copy is chosen, records
    /// are scanned from its start to the first invalid one, and the torn tail is cut off
    /// (see [`Log::recovery`] for what was dropped).
    pub fn open(path: impl AsRef<Path>) -> Result<Log> {
        Self::open_with(path, None)
    }

    /// As [`Log::open`], with a flush mode other than the one chosen for the file.
    pub fn open_with(path: impl AsRef<Path>, flush: Option<FlushMode>) -> Result<Log> {
        let media = Media::open_file(path.as_ref(), crate::persist::FileKind::Log, 0, flush)?;
        Self::from_media(media)
    }

    /// Creates a log on a crash-simulation device (tests).
    pub fn create_sim(sim: &Arc<CrashSim>, config: LogConfig) -> Result<Log> {
        let cap = config.area()?;
        let len = format::file_len(cap);
        if len > sim.capacity() {
            return Err(Error::config(format!(
                "the CrashSim device holds {} bytes, the log needs {len}",
                sim.capacity()
            )));
        }
        let media = Media::sim_new(sim.clone(), "log", SIM_ALREADY_OPEN)?;
        media.grow(len)?;
        Self::format(&media, cap, config.policy)?;
        Self::from_media(media)
    }

    /// Opens the log on a crash-simulation device (after a simulated crash), recovering it
    /// exactly as [`Log::open`] does.
    pub fn open_sim(sim: &Arc<CrashSim>) -> Result<Log> {
        Self::from_media(Media::sim(sim.clone(), "log", SIM_ALREADY_OPEN)?)
    }

    /// Writes superline copy A of a new log (copy B and the area are zeros), durably.
    fn format(media: &Media, cap: u64, policy: ForcePolicy) -> Result<()> {
        let (code, n) = policy.encode();
        let line = Superline {
            policy: code,
            policy_n: n,
            capacity: cap,
            seq: 1,
            start_lsn: 1,
            start_voff: 0,
            epoch_lsn: 1,
            epoch: 1,
            start_epoch: 1,
        };
        // SAFETY: a new file nobody else has mapped; the superline lies inside it.
        unsafe { media.write(0, &line.encode()) };
        media.flush(0, SUPER_LEN as u64);
        media.fence();
        media.check()
    }

    fn from_media(media: Media) -> Result<Log> {
        // Before anything is read: another `Log` on this file could be appending to it,
        // and recovery writes a new epoch.
        media.lock_exclusive("log", ALREADY_OPEN)?;
        let path = media.path();
        let not_a_log = |reason: String| Error::NotALog {
            path: path.clone(),
            reason,
        };
        let lines = recovery::read_superlines(&media, &path)?;
        // Opening starts the next epoch, which the open after it must be able to start too.
        if lines.line.epoch >= u32::MAX - 1 {
            return Err(not_a_log("epoch counter exhausted".into()));
        }
        let scan = lines.scan(&media);
        let report = scan.report;
        let recovery::Superlines {
            line,
            copy,
            capacity: cap,
            policy,
            ..
        } = lines;
        let next = report.next_lsn;
        // The new superline, and any a reclaim writes, must decode at the next open: its
        // LSNs, offsets and sequence number stay within 2^62 (only a forged file gets near
        // that many records).
        if next > format::MAX_LSN || scan.end_voff > format::MAX_LSN || line.seq >= format::MAX_LSN
        {
            return Err(not_a_log(format!(
                "its records reach LSN {next} and offset {} (sequence {}): past the 2^62 a \
                 log holds",
                scan.end_voff, line.seq
            )));
        }

        // A new epoch: every LSN from `next` on must now carry it, so nothing left behind
        // the cut can ever be taken for a record again.
        let new_line = Superline {
            seq: line.seq + 1,
            epoch: line.epoch + 1,
            epoch_lsn: next,
            ..line.clone()
        };
        // Both copies name the new epoch before any record carries it: were the newer
        // copy lost later, the other must not lead recovery (and the next open) to an
        // older epoch, which would reject this generation's records and then hand their
        // epoch out again, reviving them.
        let new_copy = 1 - copy;
        write_superlines(&media, cap, new_copy, &new_line)?;
        if let Some(torn) = &report.torn {
            // The torn record's header, left as it is, would be found and reported again by
            // every later open (and `pgl log check`) until its LSN is written again: zeroed,
            // it reads as no record. Only once both superline copies name the new epoch:
            // were this write lost, the old epoch it carries still rejects it. It is no live
            // record's header (it claims the LSN after the last one kept).
            // SAFETY: the header lies inside the record area (the scan read it there); the
            // log is not shared yet, and nothing reads those bytes meanwhile.
            unsafe { media.write_zeros(torn.offset, HEADER_LEN) };
            media.flush(torn.offset, HEADER_LEN);
            media.fence();
            media.check()?;
        }

        let slots: Box<[Slot]> = (0..RING)
            .map(|_| Slot {
                done: AtomicU64::new(0),
                maker: AtomicU64::new(0),
            })
            .collect();
        let ends: Box<[AtomicU64]> = (0..RING).map(|_| AtomicU64::new(0)).collect();
        let own_slots = if policy == ForcePolicy::Sync { RING } else { 0 };
        let own: Box<[AtomicU64]> = (0..own_slots).map(|_| AtomicU64::new(0)).collect();
        Ok(Log {
            cap,
            policy,
            rule: EpochRule {
                epoch_lsn: new_line.epoch_lsn,
                epoch: new_line.epoch,
                min_epoch: 1,
            },
            base: next,
            tail: Mutex::new({
                let mut t = Tail {
                    next,
                    vtail: scan.end_voff,
                    head_lsn: line.start_lsn,
                    head_voff: 0,
                    index: scan.index.into(),
                    limit: 0,
                    bound: number_bound(next, scan.end_voff),
                };
                // Where the first live record is (past the superline's start if it wrapped).
                t.set_head_voff(t.index.front().copied().unwrap_or(line.start_voff), cap);
                t
            }),
            next: AtomicU64::new(next),
            head: AtomicU64::new(line.start_lsn),
            bytes: AtomicU64::new(0),
            ends,
            slots,
            own,
            done: Padded(AtomicU64::new(next - 1)),
            durable: Padded(AtomicU64::new(next - 1)),
            window: Padded(AtomicU64::new(0)),
            force: Mutex::new(Forcer {
                end_lsn: next - 1,
                end_voff: scan.end_voff,
                forces: 0,
                forced: 0,
                window_max: 0,
                histogram: [0; WINDOW_BUCKETS],
            }),
            sb: Mutex::new(Super {
                line: new_line,
                copy: new_copy,
            }),
            gate: RwLock::new(()),
            recovery: report,
            media,
        })
    }

    /// What recovery found when this log was opened.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The force policy `complete` applies.
    pub fn policy(&self) -> ForcePolicy {
        self.policy
    }

    /// Bytes of the record area.
    pub fn capacity(&self) -> u64 {
        self.cap
    }

    /// The largest payload one record can hold in this log.
    pub fn max_record(&self) -> u64 {
        (self.cap - HEADER_LEN).min(MAX_PAYLOAD)
    }

    /// The LSN the next reservation gets.
    pub fn next_lsn(&self) -> Lsn {
        self.next.load(Ordering::Acquire)
    }

    /// The first live LSN (records before it were reclaimed).
    pub fn start_lsn(&self) -> Lsn {
        self.head.load(Ordering::Acquire)
    }

    /// Every record up to this LSN is complete and durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.durable.0.load(Ordering::Acquire)
    }

    /// Every record up to this LSN is complete (not necessarily durable).
    pub fn completed_lsn(&self) -> Lsn {
        self.done.0.load(Ordering::Acquire)
    }

    /// The file (`<crash-sim>` for a simulated device).
    pub fn path(&self) -> PathBuf {
        self.media.path()
    }

    /// The log's counters since it was opened, with the vulnerability window: records
    /// completed but not yet durable.
    pub fn stats(&self) -> LogStats {
        let f = self.force.lock();
        let done = self.completed_lsn();
        let durable = self.durable_lsn();
        // Every record made durable since the open was forced once, by the force lock or
        // by a `Sync` append on its own (`durable_own`, a window of one): the rest.
        let own = (durable + 1 - self.base).saturating_sub(f.forced);
        let mut histogram = f.histogram;
        histogram[bucket(1)] += own;
        LogStats {
            completed: done + 1 - self.base,
            bytes: self.bytes.load(Ordering::Relaxed),
            forces: f.forces + own,
            forced_records: f.forced + own,
            window_now: done.saturating_sub(durable),
            window_max: f.window_max.max(u64::from(own > 0)),
            window_histogram: histogram,
        }
    }

    /// Reserves a record of `len` payload bytes: its LSN and its bytes in the log, to be
    /// filled in place and then passed to [`Log::complete`]. A reservation dropped without
    /// `complete` becomes an aborted record, which readers skip.
    ///
    /// Later LSNs cannot be forced until this one is completed or dropped. A reservation
    /// stays on the thread that made it (it is not `Send`), and that thread's forces stop
    /// short of it: an `append` or a `force` that needs it durable returns
    /// `Err(LogReservationHeld)` rather than wait for a thread that is waiting. (Only
    /// within one log: a thread holding a record open in one log while it forces another
    /// can still wait forever for a thread doing the opposite.)
    ///
    /// `Err(LogRecordTooLarge)` if no log this size holds `len` bytes, `Err(LogFull)` if
    /// the free space does not (reclaim, then retry), `Err(LogExhausted)` once the log has
    /// numbered 2^62 LSNs or bytes, `Err(LogReservationHeld)` once the completion slots
    /// (16,384 LSNs past the durable one) run out behind a record this thread still holds
    /// open, even after everything before that record was forced.
    pub fn reserve(&self, len: usize) -> Result<Reservation<'_>> {
        let len64 = len as u64;
        if len64 > self.max_record() {
            return Err(Error::LogRecordTooLarge {
                path: self.media.path(),
                len: len64,
                max: self.max_record(),
            });
        }
        let size = record_size(len64);
        loop {
            // Keep reservations within RING of the durable LSN (their completion slots).
            let next = self.next.load(Ordering::Acquire);
            if next >= self.durable_lsn() + RING {
                let upto = next - RING / 2;
                if let Some(held) = self.force_short_of_own(upto)? {
                    // Refuse only if forcing what lies before it freed no slot.
                    if next >= self.durable_lsn() + RING {
                        return Err(self.held_error("reserve", upto, held, None));
                    }
                }
                continue;
            }
            let mut t = self.tail.lock();
            if t.next >= self.durable_lsn() + RING {
                continue;
            }
            let left = self.cap - t.vtail % self.cap;
            let start = if left < size { t.vtail + left } else { t.vtail };
            let end = start + size;
            // With no live record, the bytes a wrapping record skips hold nothing: the log
            // starts where the record does (recovery measures its lap from the first record
            // it finds, not from a start offset that record skipped).
            if t.index.is_empty() {
                t.set_head_voff(start, self.cap);
            }
            if end > t.limit {
                self.refuse(&t, size, left, end)?;
            }
            let lsn = t.next;
            t.next += 1;
            t.vtail = end;
            t.index.push_back(start);
            self.ends[(lsn % RING) as usize].store(end, Ordering::Release);
            self.slots[slot(lsn)]
                .maker
                .store(thread_token(), Ordering::Relaxed);
            self.next.store(lsn + 1, Ordering::Release);
            // Written only under the tail lock: a load and a store, not a locked
            // instruction.
            let bytes = self.bytes.load(Ordering::Relaxed);
            self.bytes.store(bytes + len64, Ordering::Relaxed);
            drop(t);
            return Ok(Reservation {
                log: self,
                lsn,
                off: start % self.cap,
                len,
                open: true,
                _on_its_thread: PhantomData,
            });
        }
    }

    /// Whether the next record, of `size` bytes ending at virtual offset `end` (`left`
    /// bytes were left before the end of the area), may be reserved after all, once it
    /// ends past `t.limit`: `Err` if the area has no room for it, or if past 2^62 no
    /// superline could name its LSN or offset (a later open, or a reclaim, would have to
    /// write one). `Ok` if only the conservative bound was passed.
    #[cold]
    fn refuse(&self, t: &Tail, size: u64, left: u64, end: u64) -> Result<()> {
        if end - t.head_voff > self.cap {
            // The free bytes run from the tail to the head, perhaps around the end.
            let free = self.cap - (t.vtail - t.head_voff);
            let before_end = free.min(left);
            return Err(Error::LogFull {
                path: self.media.path(),
                needed: size,
                free,
                largest: before_end.max(free - before_end),
                capacity: self.cap,
            });
        }
        let (what, at) = if t.next >= format::MAX_LSN {
            ("LSN", t.next)
        } else if end > format::MAX_LSN {
            ("byte offset", end)
        } else {
            return Ok(());
        };
        Err(Error::LogExhausted {
            path: self.media.path(),
            what,
            at,
        })
    }

    /// Seals a reservation's record (header and checksum) and marks it complete; then
    /// applies the force policy. Returns its LSN.
    /// (A reservation always completes in the log that made it.)
    ///
    /// When the policy forces (always, under `Sync`), this waits for every earlier LSN to
    /// be completed by the threads holding them. It never waits for an earlier reservation
    /// of the calling thread itself: under `Sync` that is
    /// `Err(LogReservationHeld { completed: Some(lsn), .. })` (the record is complete, and
    /// becomes durable with the next force once the held one is completed), under the other
    /// policies the batch force stops short of the held record and the call succeeds (the
    /// records after it wait for the next batch).
    pub fn complete(&self, mut res: Reservation<'_>) -> Result<Lsn> {
        res.open = false;
        let (log, lsn) = (res.log, res.lsn);
        log.finish(lsn, res.off, res.len, false);
        log.apply_policy(lsn)?;
        Ok(lsn)
    }

    /// Forces what the policy asks of a just-completed `lsn` (see [`Log::complete`]).
    fn apply_policy(&self, lsn: Lsn) -> Result<()> {
        let batch = match self.policy {
            ForcePolicy::Sync => return self.force_for("complete", lsn, Some(lsn)),
            ForcePolicy::GroupCommit(n) => {
                (self.window.0.fetch_add(1, Ordering::AcqRel) + 1) % u64::from(n) == 0
            }
            ForcePolicy::Frequency(f) => lsn % u64::from(f) == 0,
        };
        if batch {
            // Short of the caller's own open record, if any: the rest waits for the next
            // batch.
            self.force_short_of_own(lsn)?;
        }
        Ok(())
    }

    /// Appends `payload` as one record: reserve, copy, complete (and the policy's force).
    ///
    /// Under `Sync` the appender makes its own record durable before completing it (the
    /// checksum taken from `payload`, streaming stores, one fence), so the force that
    /// follows has nothing left to flush. Measured on the project's machine (the book's
    /// chapter "Performance") against ordinary stores and a flush: 4 KiB appends
    /// 1,030 → 600 ns, 1 KiB 410 → 320 ns.
    pub fn append(&self, payload: &[u8]) -> Result<Lsn> {
        let mut res = self.reserve(payload.len())?;
        if self.policy != ForcePolicy::Sync {
            res.copy_from_slice(payload);
            return self.complete(res);
        }
        res.open = false;
        let (lsn, off) = (res.lsn, res.off);
        drop(res);
        self.write_own(lsn, off, payload);
        self.own[slot(lsn)].store(lsn, Ordering::Release);
        self.publish(lsn);
        // A failed write-back (the fence's) leaves the frontier where it was.
        self.media.check()?;
        if self.durable_own(lsn) {
            return Ok(lsn);
        }
        self.force_for("append", lsn, Some(lsn)).map(|()| lsn)
    }

    /// Makes record `lsn`, which its appender made durable itself, durable in order if
    /// every record before it is: one compare-and-swap of the frontier (and, if the
    /// completer of the record before it has not yet, a move of `done` over it), without
    /// the force lock (`stats` counts these forces from the frontier). Measured here, 1 thread: 5 to
    /// 12 ns an append at 64 B–1 KiB. False if an earlier record is not durable yet: the
    /// caller forces.
    fn durable_own(&self, lsn: Lsn) -> bool {
        if self.durable_lsn() != lsn - 1 {
            return false;
        }
        // Every record before `lsn` is durable, so complete, and `lsn` is published; but
        // the thread completing `lsn - 1` may not have moved `done` over `lsn` yet. Moved
        // here, before the frontier: `durable <= done` holds at every moment (else an
        // `iter` could stop short of a record `append` already returned as durable).
        if self.done.0.load(Ordering::SeqCst) < lsn {
            self.done.0.fetch_max(lsn, Ordering::SeqCst);
        }
        self.durable
            .0
            .compare_exchange(lsn - 1, lsn, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Writes record `lsn` (header and `payload`) at area offset `off` and makes it durable
    /// from this thread, with streaming stores (the log's lines are rarely cached:
    /// streaming skips reading them in) and one fence. The lines after the first go out
    /// first and drain while the checksum is taken from `payload` (cache-hot); then the
    /// first line (header and the payload's start) and the fence. Measured here against
    /// checksum first (1 thread, paired runs): 4 KiB appends 410–446 → 360–410 ns, 1 KiB
    /// unchanged within noise, 64 B 5–10 ns slower (a branch choosing the order by size
    /// lost the 4 KiB gain: codegen, not understood).
    ///
    /// Whole lines only, the last one padded with zeros: a streamed line left partial is
    /// written back on its own, slowly. With the last line streamed in 16-byte granules, a
    /// 1-thread `Sync` append took 450-480 ns at 64 B, 465-495 at 256 B and 520-560 at
    /// 1 KiB; in whole lines 310-340, 360-370 and 370-410 (paired builds, 2026-12-08).
    fn write_own(&self, lsn: Lsn, off: u64, payload: &[u8]) {
        const LINE: usize = format::LINE as usize;
        let at = AREA_OFFSET + off;
        debug_assert_eq!(at % format::LINE, 0, "records start on a line");
        let head = HEADER_LEN as usize;
        let first = payload.len().min(LINE - head);
        let rest = &payload[first..];
        let body = rest.len() / LINE * LINE;
        let mut tail = [0u8; LINE];
        tail[..rest.len() - body].copy_from_slice(&rest[body..]);
        // SAFETY: the reservation of `lsn` owned `[off, off + record_size(len))` of the area
        // (whole lines: the first line and the padded last line lie inside it) and is
        // being completed by this thread; no other thread writes or reads those bytes until
        // `publish`.
        unsafe {
            self.media.write_streamed(at + format::LINE, &rest[..body]);
            if body < rest.len() {
                self.media
                    .write_streamed(at + format::LINE + body as u64, &tail);
            }
        }
        let h = seal(
            RecordHeader::new(lsn, payload.len() as u32, false, self.rule.epoch),
            off,
            payload,
        );
        let mut line = [0u8; format::LINE as usize];
        line[..head].copy_from_slice(&h.encode());
        line[head..head + first].copy_from_slice(&payload[..first]);
        // SAFETY: as above: the record's first line.
        unsafe { self.media.write_streamed(at, &line) };
        self.media.fence();
    }

    /// Writes the header of record `lsn` at area offset `off` and marks it complete.
    pub(super) fn finish(&self, lsn: Lsn, off: u64, len: usize, aborted: bool) {
        let at = AREA_OFFSET + off;
        // SAFETY: the reservation owns `[off, off + 24 + len)` of the area until it is
        // completed, which is now; no other thread writes or reads those bytes meanwhile.
        let payload = unsafe {
            std::slice::from_raw_parts(self.media.ptr(at + HEADER_LEN) as *const u8, len)
        };
        let h = seal(
            RecordHeader::new(lsn, len as u32, aborted, self.rule.epoch),
            off,
            payload,
        );
        // SAFETY: as above.
        unsafe { self.media.write(at, &h.encode()) };
        self.publish(lsn);
    }

    /// Seals record `lsn` (a reservation dropped without `complete`) as aborted, and
    /// forces if its LSN is one `Frequency` forces at: the batch rides on the LSN, however
    /// it is sealed, or records completed before it would wait for the next batch (were
    /// every `f`-th record dropped, for reserve's own force a completion ring later). A
    /// failed force is not lost: the media remembers it and fails the next call that
    /// checks it.
    pub(super) fn abort(&self, lsn: Lsn, off: u64, len: usize) {
        self.finish(lsn, off, len, true);
        if let ForcePolicy::Frequency(f) = self.policy {
            if lsn % u64::from(f) == 0 {
                let _ = self.force_short_of_own(lsn);
            }
        }
    }

    /// Marks record `lsn` complete and advances `done` over every consecutive completed
    /// LSN.
    fn publish(&self, lsn: Lsn) {
        self.slots[slot(lsn)].done.store(lsn, Ordering::SeqCst);
        // Advance `done` over every consecutive completed LSN. Whoever completes the last
        // missing one sees the others' slots (SeqCst on both sides).
        loop {
            let d = self.done.0.load(Ordering::SeqCst);
            let n = d + 1;
            if self.slots[slot(n)].done.load(Ordering::SeqCst) != n {
                break;
            }
            let _ = self
                .done
                .0
                .compare_exchange(d, n, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// Returns once every record up to `lsn` is complete and durable. One force flushes
    /// every record completed so far (whichever thread wrote it) under one fence.
    ///
    /// `Err(LogReservationHeld)` if a record up to `lsn` is one the calling thread
    /// reserved and has not completed (nothing is forced then: complete or drop it
    /// first); `Err(LsnOutOfRange)` if `lsn` was not reserved yet.
    pub fn force(&self, lsn: Lsn) -> Result<()> {
        self.force_for("force", lsn, None)
    }

    /// `force(lsn)` for the call `op`, which completed `completed` (if any): the caller's
    /// own open record in the way is `Err(LogReservationHeld)`.
    fn force_for(&self, op: &'static str, lsn: Lsn, completed: Option<Lsn>) -> Result<()> {
        match self.force_upto(lsn)? {
            None => Ok(()),
            Some(held) => Err(self.held_error(op, lsn, held, completed)),
        }
    }

    /// `force(lsn)`, or, if the caller holds a record up to `lsn` open, a force of what
    /// lies before the oldest one (other threads complete theirs), whose LSN it returns.
    fn force_short_of_own(&self, lsn: Lsn) -> Result<Option<Lsn>> {
        let held = self.force_upto(lsn)?;
        if let Some(h) = held {
            let below = self.force_upto(h - 1)?;
            debug_assert!(below.is_none(), "`held` is the caller's oldest open record");
        }
        Ok(held)
    }

    /// The error for an `op` that needed `lsn` durable and found the caller's own open
    /// reservation in the way (`completed`: the record the call completed, if it did).
    #[cold]
    fn held_error(&self, op: &'static str, lsn: Lsn, held: Lsn, completed: Option<Lsn>) -> Error {
        Error::LogReservationHeld {
            path: self.media.path(),
            op,
            lsn,
            held,
            completed,
        }
    }

    /// The oldest record up to `lsn` that the calling thread reserved and has not
    /// completed, if any. Looks only at incomplete LSNs past `completed_lsn`.
    #[cold]
    fn held_by_caller(&self, lsn: Lsn) -> Option<Lsn> {
        let me = thread_token();
        if me == 0 {
            // An exiting thread's token names nobody; it holds no reservation either (its
            // reservations were dropped with its stack).
            return None;
        }
        (self.completed_lsn() + 1..=lsn).find(|&l| {
            let s = &self.slots[slot(l)];
            // `l` is reserved (`lsn < next`), so its maker is the one stored for `l`
            // (before `next` passed it), not one of an LSN RING earlier. A record this
            // thread completed shows as done to this thread.
            s.done.load(Ordering::Acquire) != l && s.maker.load(Ordering::Relaxed) == me
        })
    }

    /// `force(lsn)`, or `Ok(Some(held))` without forcing anything if that would wait for
    /// `held`, a record the caller itself holds open.
    fn force_upto(&self, lsn: Lsn) -> Result<Option<Lsn>> {
        if self.durable_lsn() >= lsn {
            return self.media.check().map(|()| None);
        }
        let next = self.next_lsn();
        if lsn >= next {
            return Err(Error::LsnOutOfRange {
                path: self.media.path(),
                op: "force",
                lsn,
                first: self.start_lsn(),
                next,
            });
        }
        if self.completed_lsn() < lsn {
            // Waiting: for other threads' records only. The caller's own open ones do not
            // change while it is here.
            if let Some(h) = self.held_by_caller(lsn) {
                return Ok(Some(h));
            }
            let mut spins = 0u32;
            while self.completed_lsn() < lsn {
                backoff(&mut spins);
            }
        }
        let mut f = self.force.lock();
        let durable = self.durable_lsn();
        if durable >= lsn {
            return self.media.check().map(|()| None);
        }
        let target = self.completed_lsn();
        let end = self.ends[(target % RING) as usize].load(Ordering::Acquire);
        // Where record `durable` ends: remembered if this lock made it durable, else (a
        // `Sync` append did, `durable_own`) in its slot of `ends`, which no reservation
        // reuses while it lies within a ring of the next LSN.
        let from = if durable == f.end_lsn {
            f.end_voff
        } else {
            self.ends[(durable % RING) as usize].load(Ordering::Acquire)
        };
        if self.flush_others(durable, target, from, end) {
            self.media.fence();
        }
        self.media.check()?;
        f.end_lsn = target;
        f.end_voff = end;
        // `durable_own` may have moved the frontier meanwhile, even past `target`: it only
        // ever moves forward, and the records it passed are counted as its own.
        let before = self.durable.0.fetch_max(target, Ordering::AcqRel);
        let w = target.saturating_sub(before);
        if w > 0 {
            f.forces += 1;
            f.forced += w;
            f.window_max = f.window_max.max(w);
            f.histogram[bucket(w)] += 1;
        }
        Ok(None)
    }

    /// Flushes the records `durable + 1 ..= target` (complete; they span virtual offsets
    /// `from..end`) that their writers did not make durable themselves, in runs of
    /// neighbours; returns whether it flushed any.
    fn flush_others(&self, durable: Lsn, target: Lsn, from: u64, end: u64) -> bool {
        if self.own.is_empty() {
            // Only Sync appends make their own records durable: flush everything.
            self.flush_virtual(from, end);
            return true;
        }
        let mut flushed = false;
        let mut run: Option<u64> = None; // virtual start of the run being gathered
        let mut prev = from;
        for l in durable + 1..=target {
            let next = self.ends[(l % RING) as usize].load(Ordering::Acquire);
            if self.own[slot(l)].load(Ordering::Acquire) == l {
                if let Some(s) = run.take() {
                    self.flush_virtual(s, prev);
                    flushed = true;
                }
            } else if run.is_none() {
                run = Some(prev);
            }
            prev = next;
        }
        if let Some(s) = run {
            self.flush_virtual(s, prev);
            flushed = true;
        }
        flushed
    }

    /// Flushes the area bytes of virtual range `[from, to)` (at most one capacity).
    fn flush_virtual(&self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        let len = (to - from).min(self.cap);
        let p = from % self.cap;
        let first = len.min(self.cap - p);
        self.media.flush(AREA_OFFSET + p, first);
        if len > first {
            self.media.flush(AREA_OFFSET, len - first);
        }
    }

    /// Frees the records up to `upto` (inclusive): forces them, makes the superline name
    /// `upto + 1` as the start, and only then lets their space be reused.
    pub fn reclaim(&self, upto: Lsn) -> Result<()> {
        let next = self.next_lsn();
        if upto >= next {
            return Err(Error::LsnOutOfRange {
                path: self.media.path(),
                op: "reclaim",
                lsn: upto,
                first: self.start_lsn(),
                next,
            });
        }
        self.force_for("reclaim", upto, None)?;
        let mut sb = self.sb.lock();
        if upto < sb.line.start_lsn {
            return Ok(());
        }
        // A sequence number past 2^62 decodes in neither copy: the log would be lost.
        if sb.line.seq >= format::MAX_LSN {
            return Err(Error::LogExhausted {
                path: self.media.path(),
                what: "superline sequence number",
                at: sb.line.seq + 1,
            });
        }
        let start = upto + 1;
        let (voff, start_epoch) = {
            let t = self.tail.lock();
            let i = (start - t.head_lsn) as usize;
            match t.index.get(i) {
                // A record recovered at open: its epoch is in its header (complete, and
                // nobody writes it while it is live).
                Some(&v) if start < self.rule.epoch_lsn => {
                    let mut h = [0u8; HEADER_LEN as usize];
                    // SAFETY: the header lies inside the area and is only read.
                    unsafe { self.media.read(AREA_OFFSET + v % self.cap, &mut h) };
                    (v, RecordHeader::decode(&h).epoch)
                }
                // Written (or to be written) in this epoch.
                Some(&v) => (v, self.rule.epoch),
                None => (t.vtail, self.rule.epoch),
            }
        };
        let line = Superline {
            seq: sb.line.seq + 1,
            start_lsn: start,
            start_voff: voff,
            start_epoch,
            ..sb.line.clone()
        };
        // Both copies hold the new start before its space is reused: were the copy
        // holding it lost later, an older start would point into space that newer records
        // fill, and recovery would find no log there, losing every record.
        let copy = 1 - sb.copy;
        write_superlines(&self.media, self.cap, copy, &line)?;
        *sb = Super { line, copy };
        // The new start is durable: the space before it may be reused, once no reader is
        // inside it.
        let _g = self.gate.write();
        let mut t = self.tail.lock();
        let n = ((upto + 1 - t.head_lsn) as usize).min(t.index.len());
        t.index.drain(..n);
        t.head_lsn = upto + 1;
        t.set_head_voff(voff, self.cap);
        self.head.store(upto + 1, Ordering::Release);
        Ok(())
    }
}

/// The completion slot of `lsn`: a bijection of `lsn % RING` that puts consecutive LSNs on
/// different cache lines (eight slots a line), so threads completing neighbouring records
/// do not write the same line.
fn slot(lsn: Lsn) -> usize {
    let i = lsn % RING;
    ((i % 8) * (RING / 8) + i / 8) as usize
}

/// Spins a little, then yields, then sleeps: waits are usually short (another thread
/// finishing a copy, or descheduled meanwhile), but a reservation may stay open for as long
/// as its holder likes (filling it from a socket), and a waiter must not burn a CPU
/// meanwhile. Sleeps double from 16 µs up to 1 ms: a long wait ends at most ~1 ms late.
fn backoff(spins: &mut u32) {
    const SPINS: u32 = 64;
    const YIELDS: u32 = 256;
    *spins = spins.saturating_add(1);
    if *spins < SPINS {
        std::hint::spin_loop();
    } else if *spins < SPINS + YIELDS {
        std::thread::yield_now();
    } else {
        let doublings = (*spins - SPINS - YIELDS).min(6);
        std::thread::sleep(std::time::Duration::from_micros(16 << doublings));
    }
}

/// Writes `line` durably into superline copy `first` (the one not valid now), then into
/// the other: a torn write of either leaves a valid copy holding the newest state or the
/// one before, and once both are written the loss of either loses nothing.
fn write_superlines(media: &Media, cap: u64, first: usize, line: &Superline) -> Result<()> {
    write_superline(media, cap, first, line)?;
    write_superline(media, cap, 1 - first, line)
}

/// Writes superline copy `copy`, durably.
fn write_superline(media: &Media, cap: u64, copy: usize, line: &Superline) -> Result<()> {
    let off = format::super_offset(copy, cap);
    // SAFETY: the copy lies inside the file; only the holder of the superline lock (or
    // `open`, before the log is shared) writes superlines, and nothing reads them meanwhile.
    unsafe { media.write(off, &line.encode()) };
    media.flush(off, SUPER_LEN as u64);
    media.fence();
    media.check()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_a_permutation_that_spreads_neighbours() {
        let mut seen = vec![false; RING as usize];
        for lsn in 0..RING {
            let s = slot(lsn);
            assert!(!seen[s], "slot {s} used twice");
            seen[s] = true;
            assert_eq!(slot(lsn + RING), s, "lsn and lsn + RING share a slot");
            if lsn > 0 {
                assert_ne!(slot(lsn) / 8, slot(lsn - 1) / 8, "same cache line");
            }
        }
    }

    /// A Sync append that makes its record durable itself, while the thread completing
    /// the record before it has marked that record done but not yet moved `done` over the
    /// append's: the frontier never passes the completed LSN (`durable <= done`).
    #[test]
    fn a_sync_append_never_leaves_the_durable_lsn_past_the_completed_one() {
        let sim = crate::persist::CrashSim::new(1 << 20);
        let log = Log::create_sim(&sim, crate::log::LogConfig::new(64 << 10)).unwrap();
        assert_eq!(log.policy(), ForcePolicy::Sync);
        let first = log.reserve(8).unwrap();
        let mut own = log.reserve(8).unwrap();
        let (a, b) = (first.lsn, own.lsn);
        assert_eq!(b, a + 1);
        // The appender of `b` writes it durably and publishes it (`append`'s steps): `done`
        // stays short of it, `a` being incomplete.
        own.open = false;
        let off = own.off;
        drop(own);
        log.write_own(b, off, &[7; 8]);
        log.own[slot(b)].store(b, Ordering::Release);
        log.publish(b);
        assert_eq!(log.completed_lsn(), a - 1);
        // The completer of `a`: its slot marked and `done` moved onto it, then preempted
        // before its next step would move `done` over `b`.
        log.slots[slot(a)].done.store(a, Ordering::SeqCst);
        log.done.0.store(a, Ordering::SeqCst);
        // Someone forces what is complete.
        log.force(a).unwrap();
        assert_eq!(log.durable_lsn(), a);
        // The appender's own step.
        assert!(log.durable_own(b));
        assert_eq!(log.durable_lsn(), b);
        assert!(
            log.completed_lsn() >= log.durable_lsn(),
            "durable {} past completed {}",
            log.durable_lsn(),
            log.completed_lsn()
        );
        // `first` is dropped unsealed: sealed as aborted, as any dropped reservation.
        drop(first);
    }

    #[test]
    fn the_number_bound_allows_a_line_per_lsn_left() {
        let max = format::MAX_LSN;
        assert_eq!(number_bound(max - 2, 0), 2 * format::LINE);
        assert_eq!(number_bound(max, 640), 640);
        assert_eq!(
            number_bound(1, 0),
            max,
            "far from the limit: offsets bound it"
        );
        assert_eq!(number_bound(1, max - 64), max);
    }
}
