//! A read-only look at a log file, for tools (`pgl log info|dump|check`): both superline
//! copies, the records recovery would keep, and what it would drop.
//!
//! Invariant: nothing here writes to the file (unlike `Log::open`, which starts a new
//! epoch), so inspecting a log never changes what a later recovery finds; the file is read
//! through `pread` in pieces of at most `PIECE` bytes, so an inspection's memory does not
//! grow with the log (up to 128 TiB), and nothing is mapped: a live log appending and
//! reclaiming meanwhile (in this process or another) changes no bytes an inspection hands
//! out. Every record handed out is one read and verified when it is handed out; one a live
//! log has since reclaimed and written over is reported as such, never shown changed.

use super::format::{
    check_crc, check_header, locate_by, record_size, EpochRule, Invalid, RecordCrc, RecordHeader,
    Superline, AREA_OFFSET, HEADER_LEN,
};
use super::policy::ForcePolicy;
use super::recovery::{self, RecoveryReport};
use crate::{Error, Result};
use std::cell::RefCell;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The most bytes an inspection reads at once (and keeps, but for a payload handed out).
const PIECE: usize = 1 << 20;

/// One record found by an inspection.
#[derive(Clone, Debug)]
pub struct RecordInfo {
    /// Its LSN.
    pub lsn: u64,
    /// Its file offset.
    pub offset: u64,
    /// The epoch it was written in.
    pub epoch: u32,
    /// Whether it was aborted (dropped before `complete`; readers skip it).
    pub aborted: bool,
    /// Its payload, as read (and verified) when the record was handed out: all of it, or
    /// its first bytes ([`Inspection::record_heads_from`]).
    pub payload: Vec<u8>,
    /// Bytes of its payload (`payload` may hold fewer).
    pub len: u64,
}

/// What a log file holds, read without changing it.
pub struct Inspection {
    /// The file, read again for each record handed out.
    file: File,
    path: PathBuf,
    /// Bytes of the record area.
    pub capacity: u64,
    /// The valid superline.
    pub superline: Superline,
    /// The force policy it names.
    pub policy: ForcePolicy,
    /// Each copy decoded, or why it does not verify (copy A, copy B).
    pub copies: [std::result::Result<Superline, String>; 2],
    /// What recovery would find (the same scan `Log::open` runs).
    pub report: RecoveryReport,
    /// Aborted records among the valid ones.
    pub aborted: u64,
}

impl std::fmt::Debug for Inspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspection")
            .field("path", &self.path)
            .field("superline", &self.superline)
            .field("report", &self.report)
            .finish()
    }
}

impl Inspection {
    /// Reads the log at `path`, in pieces (a log open elsewhere may go on appending; the
    /// inspection shows the file as its scan read it, which may end in a record being
    /// written then, reported as recovery would report it).
    pub fn open(path: impl AsRef<Path>) -> Result<Inspection> {
        let path = path.as_ref().to_owned();
        let (file, len) = open_file(&path)?;
        let reader = Reader {
            file: &file,
            path: &path,
            failed: RefCell::new(None),
        };
        let lines = recovery::superlines_by(
            len,
            |off, buf| {
                reader.read(off, buf);
                reader.failure()
            },
            &path,
        )?;
        let cap = lines.capacity;
        let scan = recovery::scan_by(
            cap,
            |voff, lsn, rule| reader.locate(cap, voff, lsn, rule),
            |p| reader.header(cap, p),
            &lines.line,
            AREA_OFFSET,
            false,
        );
        reader.failure()?;
        let scan = lines.named(scan);
        let recovery::Superlines {
            line,
            capacity,
            policy,
            raw: [a, b],
            ..
        } = lines;
        Ok(Inspection {
            copies: [Superline::decode(&a), Superline::decode(&b)],
            file,
            path,
            capacity,
            superline: line,
            policy,
            report: scan.report,
            aborted: scan.aborted,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The valid records, oldest first (aborted ones included, marked), each read from the
    /// file as it is handed out. `Err` for an I/O error, or for a record that a live log
    /// has reclaimed and written over since the inspection's scan (inspect it again); the
    /// records stop after an `Err`.
    pub fn records(&self) -> impl Iterator<Item = Result<RecordInfo>> + '_ {
        self.records_from(0)
    }

    /// [`records`](Self::records) from LSN `from` on (all of them if `from` is the first
    /// or before it). The records before `from` are stepped over by their headers alone:
    /// their payloads are neither read nor checksummed again (the scan `open` ran verified
    /// them), so starting far into a large log costs a header read per record skipped.
    pub fn records_from(&self, from: u64) -> impl Iterator<Item = Result<RecordInfo>> + '_ {
        self.records_keeping(from, usize::MAX)
    }

    /// [`records_from`](Self::records_from), each payload cut to its first `keep` bytes
    /// (its length in [`RecordInfo::len`]): every payload is still read and verified
    /// whole, but in pieces, so that memory does not grow with a record's size (up to
    /// 2 GiB each). For tools that show records (`pgl log dump`).
    pub fn record_heads_from(
        &self,
        from: u64,
        keep: usize,
    ) -> impl Iterator<Item = Result<RecordInfo>> + '_ {
        self.records_keeping(from, keep)
    }

    /// The records from LSN `from` on, keeping the first `keep` bytes of each payload.
    fn records_keeping(
        &self,
        from: u64,
        keep: usize,
    ) -> impl Iterator<Item = Result<RecordInfo>> + '_ {
        let sb = &self.superline;
        let cap = self.capacity;
        let mut rule = EpochRule {
            epoch_lsn: sb.epoch_lsn,
            epoch: sb.epoch,
            min_epoch: sb.start_epoch,
        };
        let (mut voff, mut lsn) = (sb.start_voff, sb.start_lsn);
        let end = sb.start_lsn + self.report.records;
        let mut done = false;
        std::iter::from_fn(move || {
            if done || lsn >= end {
                return None;
            }
            let reader = Reader {
                file: &self.file,
                path: &self.path,
                failed: RefCell::new(None),
            };
            let gone = |lsn| Error::LsnOutOfRange {
                path: self.path.clone(),
                op: "inspect",
                lsn,
                first: self.report.start_lsn,
                next: self.report.next_lsn,
            };
            while lsn < from.min(end) {
                match reader.locate_header(cap, voff, lsn, rule) {
                    Ok((at, h)) => {
                        rule = rule.after(h.epoch);
                        voff = at + record_size(h.len());
                        lsn += 1;
                    }
                    Err(_) => {
                        done = true;
                        return Some(reader.failure().and(Err(gone(lsn))));
                    }
                }
            }
            if lsn >= end {
                return None;
            }
            let got = reader
                .locate(cap, voff, lsn, rule)
                .ok()
                .and_then(|(at, h)| {
                    reader
                        .record(cap, at, h, keep)
                        .map(|payload| (at, h, payload))
                });
            let step = match (reader.failure(), got) {
                (Err(e), _) => Err(e),
                (Ok(()), None) => Err(gone(lsn)),
                (Ok(()), Some((at, h, payload))) => {
                    rule = rule.after(h.epoch);
                    voff = at + record_size(h.len());
                    Ok(RecordInfo {
                        lsn,
                        offset: AREA_OFFSET + at % cap,
                        epoch: h.epoch,
                        aborted: h.aborted(),
                        payload,
                        len: h.len(),
                    })
                }
            };
            lsn += 1;
            done = step.is_err();
            Some(step)
        })
    }
}

/// Reads of the log file for one scan or record; the first I/O error is kept (the scan
/// goes on as if the bytes were absent, and its caller reports the error).
struct Reader<'f> {
    file: &'f File,
    path: &'f Path,
    failed: RefCell<Option<std::io::Error>>,
}

impl Reader<'_> {
    /// Fills `buf` from file offset `off` (zeros past the end of the file).
    fn read(&self, off: u64, buf: &mut [u8]) {
        use std::os::unix::fs::FileExt;
        buf.fill(0);
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], off + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed.borrow_mut().get_or_insert(e);
                    break;
                }
            }
        }
    }

    /// The first I/O error, as pgl reports it.
    fn failure(&self) -> Result<()> {
        match self.failed.borrow_mut().take() {
            None => Ok(()),
            Some(e) => Err(Error::io("read log", self.path, e)),
        }
    }

    /// The header bytes at area offset `p` of a `cap`-byte area, if they lie in it.
    fn header(&self, cap: u64, p: u64) -> Option<RecordHeader> {
        if cap.checked_sub(p)? < HEADER_LEN {
            return None;
        }
        let mut head = [0u8; HEADER_LEN as usize];
        self.read(AREA_OFFSET + p, &mut head);
        Some(RecordHeader::decode(&head))
    }

    /// `format::check_at` of the record at area offset `p`, its payload read and
    /// checksummed piece by piece.
    fn check(&self, cap: u64, p: u64, lsn: u64, rule: EpochRule) -> Result<RecordHeader, Invalid> {
        let Some(avail) = cap.checked_sub(p) else {
            return Err(Invalid::Absent);
        };
        let mut head = [0u8; HEADER_LEN as usize];
        if avail >= HEADER_LEN {
            self.read(AREA_OFFSET + p, &mut head);
        }
        let h = check_header(&head, avail, p, lsn, rule)?;
        let mut crc = RecordCrc::new(&h, p);
        let mut piece = vec![0u8; (h.len() as usize).min(PIECE)];
        let (mut at, end) = (
            AREA_OFFSET + p + HEADER_LEN,
            AREA_OFFSET + p + HEADER_LEN + h.len(),
        );
        while at < end {
            let n = ((end - at) as usize).min(PIECE);
            self.read(at, &mut piece[..n]);
            crc.update(&piece[..n]);
            at += n as u64;
        }
        check_crc(h, crc.finish())
    }

    /// `format::locate` over the file.
    fn locate(
        &self,
        cap: u64,
        voff: u64,
        lsn: u64,
        rule: EpochRule,
    ) -> Result<(u64, RecordHeader), (u64, Invalid)> {
        locate_by(cap, |v| self.check(cap, v % cap, lsn, rule), voff)
    }

    /// `locate` by the header alone (its fields, not the payload's checksum): for stepping
    /// over records a scan verified already.
    fn locate_header(
        &self,
        cap: u64,
        voff: u64,
        lsn: u64,
        rule: EpochRule,
    ) -> Result<(u64, RecordHeader), (u64, Invalid)> {
        locate_by(
            cap,
            |v| {
                let p = v % cap;
                let mut head = [0u8; HEADER_LEN as usize];
                self.read(AREA_OFFSET + p, &mut head);
                check_header(&head, cap.saturating_sub(p), p, lsn, rule)
            },
            voff,
        )
    }

    /// The first `keep` bytes of the payload of record `h` at virtual offset `at`, if the
    /// record still verifies (a live log may have written over it since `locate` checked
    /// it): its payload is read in pieces, then its header again, which must still be `h`.
    fn record(&self, cap: u64, at: u64, h: RecordHeader, keep: usize) -> Option<Vec<u8>> {
        let p = at % cap;
        let len = h.len() as usize;
        let mut crc = RecordCrc::new(&h, p);
        let mut kept = Vec::with_capacity(len.min(keep));
        let mut piece = vec![0u8; len.min(PIECE)];
        let (mut off, end) = (
            AREA_OFFSET + p + HEADER_LEN,
            AREA_OFFSET + p + HEADER_LEN + h.len(),
        );
        while off < end {
            let n = ((end - off) as usize).min(PIECE);
            self.read(off, &mut piece[..n]);
            crc.update(&piece[..n]);
            let k = n.min(keep - kept.len());
            kept.extend_from_slice(&piece[..k]);
            off += n as u64;
        }
        let mut head = [0u8; HEADER_LEN as usize];
        self.read(AREA_OFFSET + p, &mut head);
        let now = RecordHeader::decode(&head);
        (now == h && check_crc(h, crc.finish()).is_ok()).then_some(kept)
    }
}

fn open_file(path: &Path) -> Result<(File, u64)> {
    let op = "open log";
    let file = File::open(path).map_err(|e| Error::io(op, path, e))?;
    let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
    if meta.is_dir() {
        // As `Log::open` reports it (opening a directory to write fails).
        let e = std::io::Error::from_raw_os_error(libc::EISDIR);
        return Err(Error::io(op, path, e));
    }
    if !meta.is_file() {
        return Err(Error::NotALog {
            path: path.to_owned(),
            reason: "not a regular file".into(),
        });
    }
    Ok((file, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{Log, LogConfig};
    use crate::FlushMode;

    /// What the inspection found, as the whole file read into memory and scanned as one
    /// slice (`Log::open`'s walk, and how inspections were made before they read in
    /// pieces) finds it: report, aborted records, and each record's offset and payload.
    fn same_as_a_scan_of_the_whole_file(path: &Path) {
        let seen = Inspection::open(path).expect("inspect");
        let bytes = std::fs::read(path).expect("read");
        let lines = recovery::superlines_in(&bytes, path).expect("superlines");
        let area = &bytes[AREA_OFFSET as usize..][..lines.capacity as usize];
        let scan = lines.named(recovery::scan(area, &lines.line, AREA_OFFSET, true));
        assert_eq!(seen.report, scan.report);
        assert_eq!(seen.aborted, scan.aborted);
        let want: Vec<(u64, u64, bool, Vec<u8>)> = scan
            .index
            .iter()
            .zip(scan.report.start_lsn..)
            .map(|(&voff, lsn)| {
                let p = (voff % lines.capacity) as usize;
                let h = RecordHeader::decode(&area[p..]);
                let at = p + HEADER_LEN as usize;
                let payload = area[at..at + h.len() as usize].to_vec();
                (lsn, AREA_OFFSET + p as u64, h.aborted(), payload)
            })
            .collect();
        let got: Vec<(u64, u64, bool, Vec<u8>)> = seen
            .records()
            .map(|r| {
                let r = r.expect("record");
                (r.lsn, r.offset, r.aborted, r.payload)
            })
            .collect();
        assert_eq!(got, want);
        // The same records with their payloads cut, their lengths told.
        let heads: Vec<(u64, u64, bool, Vec<u8>, u64)> = seen
            .record_heads_from(0, 5)
            .map(|r| {
                let r = r.expect("record");
                (r.lsn, r.offset, r.aborted, r.payload, r.len)
            })
            .collect();
        let cut: Vec<(u64, u64, bool, Vec<u8>, u64)> = want
            .into_iter()
            .map(|(lsn, off, aborted, p)| {
                (
                    lsn,
                    off,
                    aborted,
                    p[..p.len().min(5)].to_vec(),
                    p.len() as u64,
                )
            })
            .collect();
        assert_eq!(heads, cut);
    }

    #[test]
    fn inspecting_in_pieces_finds_what_a_scan_of_the_whole_file_finds() {
        for (round, damage) in [(0u64, false), (1, false), (2, true), (3, true)] {
            let path = crate::scratch_pool(&format!("inspect-pieces-{round}"));
            let cfg = LogConfig::new(4096).flush(FlushMode::None);
            let log = Log::create(&path, cfg).expect("create");
            // Several laps of the area, with aborted records and ones that wrap to 0.
            let mut lsn = 0;
            for i in 0..200u64 {
                let len = ((i * 37 + round * 11) % 700) as usize;
                if i % 9 == 4 {
                    drop(log.reserve(len).expect("reserve"));
                    lsn += 1;
                } else {
                    lsn = log.append(&vec![i as u8; len]).expect("append");
                }
                if lsn > 4 {
                    log.reclaim(lsn - 4).expect("reclaim");
                }
            }
            drop(log);
            if damage {
                // A byte of a live record's payload: torn there, the rest dropped.
                let seen = Inspection::open(&path).expect("inspect");
                let second = seen.records().nth(1).expect("two records").expect("ok");
                let mut bytes = std::fs::read(&path).expect("read");
                bytes[(second.offset + HEADER_LEN) as usize] ^= 0x40;
                std::fs::write(&path, &bytes).expect("write");
            }
            same_as_a_scan_of_the_whole_file(&path);
            if damage {
                let seen = Inspection::open(&path).expect("inspect");
                assert!(seen.report.torn.is_some() && seen.report.dropped > 0);
            }
            std::fs::remove_file(&path).expect("remove");
        }
    }

    #[test]
    fn a_record_longer_than_a_piece_is_checksummed_across_pieces() {
        let path = crate::scratch_pool("inspect-long-record");
        let log =
            Log::create(&path, LogConfig::new(8 << 20).flush(FlushMode::None)).expect("create");
        let long: Vec<u8> = (0..5 * PIECE / 2)
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        log.append(b"short").expect("append");
        log.append(&long).expect("append");
        log.append(b"after").expect("append");
        drop(log);
        same_as_a_scan_of_the_whole_file(&path);
        let seen = Inspection::open(&path).expect("inspect");
        assert_eq!(seen.report.records, 3);
        // Damage in its last piece is found.
        let at = seen.records().nth(1).expect("second").expect("ok").offset;
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[(at + HEADER_LEN) as usize + long.len() - 1] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        same_as_a_scan_of_the_whole_file(&path);
        let seen = Inspection::open(&path).expect("inspect");
        assert_eq!((seen.report.records, seen.report.dropped), (1, 2));
        std::fs::remove_file(&path).expect("remove");
    }
}
