//! Recovery: choose the valid superline copy, then scan the records from its start LSN to
//! the first one that is not valid. That record and everything after it are the torn tail:
//! the next epoch makes them permanently invalid (see `format`), and the report says what
//! was dropped.
//!
//! Invariant: the scan is a pure function of the bytes; whatever they are it returns (never
//! panics, never reads outside the slices it is given) and never accepts more than one
//! capacity's worth of records.

use super::format::{
    self, locate, record_size, EpochRule, Invalid, RecordHeader, Superline, SUPER_LEN,
};

/// Where the scan stopped at a record that claimed the expected LSN but failed validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornRecord {
    /// The LSN the record claimed (the first one dropped).
    pub lsn: u64,
    /// Its offset in the file.
    pub offset: u64,
    /// What failed.
    pub reason: String,
}

/// What recovery found when a log was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// The superline copy used (0: A at the start of the file, 1: B at its end).
    pub superline_copy: usize,
    /// Why the other copy was not used, when it does not verify (a torn write or damage;
    /// a new log's copy B is `all zero`).
    pub other_copy_invalid: Option<String>,
    /// LSN of the first live record.
    pub start_lsn: u64,
    /// LSN the next record gets: the valid records are `start_lsn..next_lsn`.
    pub next_lsn: u64,
    /// Valid records found.
    pub records: u64,
    /// Bytes of the area those records occupy.
    pub bytes: u64,
    /// The record the scan stopped at, if it claimed the next LSN but was torn or damaged.
    pub torn: Option<TornRecord>,
    /// Records dropped: the torn one and the valid-looking records chained after it
    /// (records after a hole are never returned).
    pub dropped: u64,
}

/// The result of a scan: the report and the virtual offset of every valid record.
#[derive(Debug)]
pub(crate) struct Scan {
    pub report: RecoveryReport,
    /// Virtual offset of each valid record, in LSN order (empty unless asked for).
    pub index: Vec<u64>,
    /// Virtual offset just past the last valid record (the tail).
    pub end_voff: u64,
    /// Aborted records among the valid ones.
    pub aborted: u64,
}

/// Decodes both copies and picks the valid one. `Err` holds both reasons.
pub(crate) fn choose(
    a: &[u8],
    b: &[u8],
) -> Result<(Superline, usize, Option<String>), (String, String)> {
    let da = Superline::decode(&a[..a.len().min(SUPER_LEN)]);
    let db = Superline::decode(&b[..b.len().min(SUPER_LEN)]);
    match format::pick(&da, &db) {
        Some(0) => Ok((da.expect("picked"), 0, db.err())),
        Some(_) => Ok((db.expect("picked"), 1, da.err())),
        None => Err((da.unwrap_err(), db.unwrap_err())),
    }
}

/// Scans `area` (the whole record area) from the superline's start. `area_offset` is the
/// area's file offset (for reports); `want_index` asks for every record's virtual offset.
pub(crate) fn scan(area: &[u8], sb: &Superline, area_offset: u64, want_index: bool) -> Scan {
    let cap = area.len() as u64;
    scan_by(
        cap,
        |voff, lsn, rule| locate(area, voff, lsn, rule),
        |p| {
            let head = area.get(p as usize..)?.get(..format::HEADER_LEN as usize)?;
            Some(format::RecordHeader::decode(head))
        },
        sb,
        area_offset,
        want_index,
    )
}

/// [`scan`] of a `cap`-byte area read through `locate` (as [`locate`] finds a record) and
/// `header_at(p)` (the header bytes at area offset `p`, if they lie in the area): the one
/// walk `Log::open` runs over its mapping and `Inspection` over reads of the file.
pub(crate) fn scan_by(
    cap: u64,
    mut locate: impl FnMut(u64, u64, EpochRule) -> Result<(u64, RecordHeader), (u64, Invalid)>,
    mut header_at: impl FnMut(u64) -> Option<RecordHeader>,
    sb: &Superline,
    area_offset: u64,
    want_index: bool,
) -> Scan {
    let mut rule = EpochRule {
        epoch_lsn: sb.epoch_lsn,
        epoch: sb.epoch,
        min_epoch: sb.start_epoch,
    };
    let mut index = Vec::new();
    let mut aborted = 0;
    let (mut voff, mut lsn) = (sb.start_voff, sb.start_lsn);
    let mut report = RecoveryReport {
        start_lsn: sb.start_lsn,
        ..RecoveryReport::default()
    };
    let mut limit = sb.start_voff.saturating_add(cap);
    // Where the first record is (past the start offset if it wrapped).
    let mut first = sb.start_voff;
    loop {
        match locate(voff, lsn, rule) {
            Ok((at, h)) => {
                if lsn == sb.start_lsn {
                    // The first record may have wrapped past the start offset: the bytes it
                    // skipped hold nothing live, the lap starts at the record.
                    limit = at.saturating_add(cap);
                    first = at;
                }
                let end = at + record_size(h.len());
                if end > limit {
                    // More than a capacity of records: the rest must be stale.
                    break;
                }
                if want_index {
                    index.push(at);
                }
                report.records += 1;
                aborted += u64::from(h.aborted());
                rule = rule.after(h.epoch);
                voff = end;
                lsn += 1;
            }
            Err((at, Invalid::Damaged(reason))) => {
                report.torn = Some(TornRecord {
                    lsn,
                    offset: area_offset + at % cap,
                    reason,
                });
                report.dropped =
                    1 + count_after(cap, &mut locate, &mut header_at, at, lsn, rule, limit);
                break;
            }
            Err((_, Invalid::Absent)) => break,
        }
    }
    report.next_lsn = lsn;
    report.bytes = voff - first;
    Scan {
        report,
        index,
        end_voff: voff,
        aborted,
    }
}

/// Valid-looking records chained after a damaged one at `at` (if its length word can be
/// trusted enough to find the next): what recovery drops beyond the damaged record.
fn count_after(
    cap: u64,
    locate: &mut impl FnMut(u64, u64, EpochRule) -> Result<(u64, RecordHeader), (u64, Invalid)>,
    header_at: &mut impl FnMut(u64) -> Option<RecordHeader>,
    at: u64,
    lsn: u64,
    mut rule: EpochRule,
    limit: u64,
) -> u64 {
    let Some(h) = header_at(at % cap) else {
        return 0;
    };
    let mut voff = at + record_size(h.len());
    let mut n = 0;
    let mut lsn = lsn + 1;
    while voff < limit {
        match locate(voff, lsn, rule) {
            Ok((v, h)) => {
                n += 1;
                rule = rule.after(h.epoch);
                lsn += 1;
                voff = v + record_size(h.len());
            }
            Err(_) => break,
        }
    }
    n
}

/// What the superline copies of a log file say.
pub(crate) struct Superlines {
    /// The valid, newer copy.
    pub line: Superline,
    /// Its index (0 or 1).
    pub copy: usize,
    /// Why the other copy is invalid, if it is.
    pub other: Option<String>,
    /// Bytes of the record area.
    pub capacity: u64,
    /// The force policy the log was created with.
    pub policy: super::policy::ForcePolicy,
    /// The raw bytes of both copies.
    pub raw: [[u8; SUPER_LEN]; 2],
}

/// Reads and validates both superline copies of the log on `media` (named `path` in
/// errors), which the caller has to itself (`Log::open` holds its lock).
pub(crate) fn read_superlines(
    media: &crate::persist::Media,
    path: &std::path::Path,
) -> crate::Result<Superlines> {
    superlines_in(file_bytes(media), path)
}

/// The whole file on `media`, which the caller has to itself.
fn file_bytes(media: &crate::persist::Media) -> &[u8] {
    // SAFETY: the file is mapped whole (`Media::open_file` maps at least its length), and
    // nobody writes it while the caller, who has it to itself, reads the slice.
    unsafe { std::slice::from_raw_parts(media.ptr(0) as *const u8, media.len() as usize) }
}

/// Reads and validates both superline copies of the log file whose bytes are `file`
/// (named `path` in errors): the one place `Log::open` and `Inspection::open` learn a
/// log's shape.
pub(crate) fn superlines_in(file: &[u8], path: &std::path::Path) -> crate::Result<Superlines> {
    superlines_by(
        file.len() as u64,
        |off, buf| {
            // Both copies lie inside the file (`superlines_by` checked its length).
            buf.copy_from_slice(&file[off as usize..][..SUPER_LEN]);
            Ok(())
        },
        path,
    )
}

/// [`superlines_in`] of a file of `len` bytes whose bytes at `off` `read(off, buf)` reads.
pub(crate) fn superlines_by(
    len: u64,
    mut read: impl FnMut(u64, &mut [u8; SUPER_LEN]) -> crate::Result<()>,
    path: &std::path::Path,
) -> crate::Result<Superlines> {
    let not_a_log = |reason: String| crate::Error::NotALog {
        path: path.to_owned(),
        reason,
    };
    if len < format::file_len(format::MIN_CAPACITY) {
        return Err(not_a_log(format!(
            "{len} bytes, shorter than the smallest log ({} bytes)",
            format::file_len(format::MIN_CAPACITY)
        )));
    }
    let cap = len - format::file_len(0);
    let mut raw = [[0u8; SUPER_LEN]; 2];
    // Both copies lie inside the file (len >= file_len(MIN_CAPACITY)).
    read(0, &mut raw[0])?;
    read(format::super_offset(1, cap), &mut raw[1])?;
    let (line, copy, other) = choose(&raw[0], &raw[1]).map_err(|(ea, eb)| {
        if raw[0][..8] == crate::pool::MAGIC {
            return not_a_log("it is a pgl pool: inspect it with `pgl info` or `pgl check`".into());
        }
        not_a_log(format!(
            "no valid superline: copy A at 0: {ea}; copy B at {:#x}: {eb}",
            format::super_offset(1, cap)
        ))
    })?;
    if line.capacity != cap {
        return Err(not_a_log(format!(
            "the superline describes a {}-byte record area, the file holds {cap} bytes of \
             area (truncated or extended); restore the file from a backup",
            line.capacity
        )));
    }
    let policy =
        super::policy::ForcePolicy::decode(line.policy, line.policy_n).ok_or_else(|| {
            not_a_log(format!(
                "unknown force policy {} ({})",
                line.policy, line.policy_n
            ))
        })?;
    Ok(Superlines {
        line,
        copy,
        other,
        capacity: cap,
        policy,
        raw,
    })
}

impl Superlines {
    /// Scans the record area of the log on `media`, which the caller has to itself, from
    /// this superline (what recovery finds).
    pub(crate) fn scan(&self, media: &crate::persist::Media) -> Scan {
        // The area lies inside the file: its length was checked against the capacity.
        let area = &file_bytes(media)[format::AREA_OFFSET as usize..][..self.capacity as usize];
        self.named(scan(area, &self.line, format::AREA_OFFSET, true))
    }

    /// `s`, a scan from this superline, its report naming which copy was used and why the
    /// other was not.
    pub(crate) fn named(&self, mut s: Scan) -> Scan {
        s.report.superline_copy = self.copy;
        s.report.other_copy_invalid = self.other.clone();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::format::seal;

    fn sb(cap: u64) -> Superline {
        Superline {
            policy: 0,
            policy_n: 0,
            capacity: cap,
            seq: 1,
            start_lsn: 1,
            start_voff: 0,
            epoch_lsn: 1,
            epoch: 1,
            start_epoch: 1,
        }
    }

    fn put(area: &mut [u8], voff: u64, lsn: u64, len: usize) -> u64 {
        let cap = area.len() as u64;
        let size = record_size(len as u64);
        let mut v = voff;
        if cap - v % cap < size {
            v += cap - v % cap;
        }
        let off = v % cap;
        let payload = vec![lsn as u8; len];
        let h = seal(RecordHeader::new(lsn, len as u32, false, 1), off, &payload);
        let o = off as usize;
        area[o..o + 24].copy_from_slice(&h.encode());
        area[o + 24..o + 24 + len].copy_from_slice(&payload);
        v + size
    }

    #[test]
    fn scans_to_the_end_and_across_the_wrap() {
        let mut area = vec![0u8; 4096];
        let mut s = sb(4096);
        s.start_voff = 4096 * 2 + 3000 / 64 * 64;
        s.start_lsn = 10;
        let mut v = s.start_voff;
        for (i, len) in [100, 500, 300, 40].iter().enumerate() {
            v = put(&mut area, v, 10 + i as u64, *len);
        }
        let r = scan(&area, &s, 4096, true);
        assert_eq!(r.report.records, 4);
        assert_eq!(r.report.next_lsn, 14);
        assert_eq!(r.end_voff, v);
        assert_eq!(r.index.len(), 4);
        assert_eq!(r.report.torn, None);
        assert_eq!(r.report.dropped, 0);
    }

    #[test]
    fn stops_at_a_torn_record_and_counts_what_follows() {
        let mut area = vec![0u8; 8192];
        let s = sb(8192);
        let mut v = 0;
        let mut at = vec![];
        for lsn in 1..=6 {
            at.push(v);
            v = put(&mut area, v, lsn, 70);
        }
        area[at[2] as usize + 30] ^= 1;
        let r = scan(&area, &s, 4096, false);
        assert_eq!(r.report.next_lsn, 3);
        assert_eq!(r.end_voff, at[2]);
        let torn = r.report.torn.unwrap();
        assert_eq!((torn.lsn, torn.offset), (3, 4096 + at[2]));
        assert_eq!(r.report.dropped, 4);
    }

    #[test]
    fn choose_reports_the_bad_copy() {
        let a = sb(4096).encode();
        let mut b = sb(4096);
        b.seq = 2;
        let b = b.encode();
        let (s, copy, other) = choose(&a, &b).unwrap();
        assert_eq!((s.seq, copy, other), (2, 1, None));
        let mut bad = b;
        bad[40] ^= 4;
        let (s, copy, other) = choose(&a, &bad).unwrap();
        assert_eq!((s.seq, copy), (1, 0));
        assert!(other.unwrap().contains("checksum"));
        assert!(choose(&[0u8; 128], &[1u8; 128]).is_err());
    }
}
