//! Reading a live log: `Log::iter` and `Log::iter_from`.
//!
//! Invariant: a record is read only while it is complete (its LSN is at most the
//! completed LSN when the iterator was made) and live (the gate is held shared, so reclaim
//! cannot free its space meanwhile), and only within the bytes between its start and the
//! next record's, which nobody writes.

use super::format::{self, Invalid, AREA_OFFSET, HEADER_LEN};
use super::log::{Log, Lsn};
use crate::{Error, Result};

impl Log {
    /// The live, complete records from the start, oldest first (aborted records skipped).
    ///
    /// The iterator follows the log's start: records another thread reclaims before it
    /// reaches them are skipped, never reported as an error (see [`Iter`]).
    pub fn iter(&self) -> Iter<'_> {
        let head = self.start_lsn();
        self.iter_at(head, true)
    }

    /// The live, complete records from `lsn` on; `Err(LsnOutOfRange)` (op `"iter_from"`)
    /// if `lsn` was reclaimed or not reserved yet.
    ///
    /// The iterator never skips a record: if its next one is reclaimed before it gets
    /// there, it yields `Err(LsnOutOfRange)` (op `"iter"`) and ends (see [`Iter`]).
    pub fn iter_from(&self, lsn: Lsn) -> Result<Iter<'_>> {
        let t = self.tail.lock();
        if lsn < t.head_lsn || lsn > t.next {
            return Err(Error::LsnOutOfRange {
                path: self.media.path(),
                op: "iter_from",
                lsn,
                first: t.head_lsn,
                next: t.next,
            });
        }
        drop(t);
        Ok(self.iter_at(lsn, false))
    }

    fn iter_at(&self, lsn: Lsn, follow: bool) -> Iter<'_> {
        Iter {
            log: self,
            lsn,
            last: self.completed_lsn(),
            follow,
            failed: false,
        }
    }

    /// The bytes readable from virtual offset `v` up to `limit` (and the end of the area).
    ///
    /// # Safety
    /// `[v, limit)` must hold only complete records or skipped space, and the caller must
    /// hold `gate` shared for as long as the slice is used.
    unsafe fn view(&self, v: u64, limit: u64) -> &[u8] {
        let p = v % self.cap;
        let n = limit.saturating_sub(v).min(self.cap - p);
        // SAFETY: inside the area; nobody writes these bytes (the caller's contract).
        unsafe {
            std::slice::from_raw_parts(self.media.ptr(AREA_OFFSET + p) as *const u8, n as usize)
        }
    }
}

/// One record read back from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its LSN.
    pub lsn: Lsn,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// The records of a log, oldest first: `Ok` for each valid record, then, if a record fails
/// validation (damaged since it was written), one `Err(Error::LogRecordCorrupt)` and the
/// end. Records completed after the iterator was made are not included; those it includes
/// are complete, not necessarily durable yet (`Log::durable_lsn` says which are).
///
/// Other threads may append and reclaim meanwhile: an iterator never returns a record
/// after a hole nor a torn one. What it does when its next record is reclaimed before it
/// gets there depends on how it was made:
///
/// - [`Log::iter`] ("whatever is live") skips ahead to the log's new start: the LSNs it
///   yields jump over the reclaimed records (compare [`Record::lsn`] to see it). A reclaim
///   never makes it fail, even one that comes between `iter()` and the first `next()`.
/// - [`Log::iter_from`] ("from this LSN, without a gap") yields one
///   `Err(Error::LsnOutOfRange { op: "iter", lsn, first, .. })` and ends: `lsn` is the
///   record it could not read, `first` the first live one. Resume with
///   `log.iter_from(first)` if the gap is acceptable, or treat it as lost data.
///
/// ```
/// use pgl_runtime::log::{Log, LogConfig};
/// use pgl_runtime::Error;
///
/// let path = std::env::temp_dir().join(format!("pgl-doc-iter-{}", std::process::id()));
/// # let _ = std::fs::remove_file(&path);
/// let log = Log::create(&path, LogConfig::new(1 << 16))?;
/// for i in 1..=4u8 {
///     log.append(&[i])?;
/// }
/// let mut all = log.iter();
/// let mut exact = log.iter_from(1)?;
/// log.reclaim(2)?; // another thread could do this at any time
/// assert_eq!(all.next().unwrap()?.lsn, 3); // skipped ahead to the new start
/// match exact.next() {
///     Some(Err(Error::LsnOutOfRange { op: "iter", lsn: 1, first, .. })) => {
///         assert_eq!(log.iter_from(first)?.next().unwrap()?.lsn, 3);
///     }
///     other => panic!("{other:?}"),
/// }
/// # drop(log); std::fs::remove_file(&path).unwrap();
/// # Ok::<(), Error>(())
/// ```
pub struct Iter<'a> {
    log: &'a Log,
    lsn: Lsn,
    last: Lsn,
    /// Made by `Log::iter`: skip to the log's start when the next record was reclaimed.
    follow: bool,
    failed: bool,
}

impl std::fmt::Debug for Iter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter")
            .field("lsn", &self.lsn)
            .field("last", &self.last)
            .finish()
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        let log = self.log;
        while !self.failed && self.lsn <= self.last {
            let _g = log.gate.read();
            // Where the record starts and where the next one does: between them lie only
            // its bytes (and space skipped to wrap), complete since `lsn <= last`.
            let (voff, limit) = {
                let t = log.tail.lock();
                if self.lsn < t.head_lsn && self.follow {
                    self.lsn = t.head_lsn;
                    if self.lsn > self.last {
                        return None;
                    }
                }
                if self.lsn < t.head_lsn {
                    self.failed = true;
                    return Some(Err(Error::LsnOutOfRange {
                        path: log.media.path(),
                        op: "iter",
                        lsn: self.lsn,
                        first: t.head_lsn,
                        next: t.next,
                    }));
                }
                let i = (self.lsn - t.head_lsn) as usize;
                let end = t.index.get(i + 1).copied().unwrap_or(t.vtail);
                (t.index[i], end)
            };
            // SAFETY: `[voff, limit)` holds only this complete record (or skipped space),
            // not reclaimed while we hold the gate.
            let bytes = unsafe { log.view(voff, limit) };
            // The place is exact, so only the LSN, checksum and epoch remain to check.
            let rule = log.rule;
            match format::check_at(bytes, voff % log.cap, self.lsn, rule) {
                Ok(h) => {
                    let lsn = self.lsn;
                    self.lsn += 1;
                    if h.aborted() {
                        continue;
                    }
                    let p = HEADER_LEN as usize;
                    let payload = bytes[p..p + h.len() as usize].to_vec();
                    return Some(Ok(Record { lsn, payload }));
                }
                Err(why) => {
                    self.failed = true;
                    let detail = match why {
                        Invalid::Damaged(d) => d,
                        Invalid::Absent => {
                            "its header no longer holds its LSN (damaged after it was written)"
                                .into()
                        }
                    };
                    return Some(Err(Error::LogRecordCorrupt {
                        path: log.media.path(),
                        lsn: self.lsn,
                        offset: AREA_OFFSET + voff % log.cap,
                        detail,
                    }));
                }
            }
        }
        None
    }
}
