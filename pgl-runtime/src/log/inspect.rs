//! A read-only look at a log file, for tools (`pgl log info|dump|check`): both superline
//! copies, the records recovery would keep, and what it would drop.
//!
//! Invariant: nothing here writes to the file (unlike `Log::open`, which starts a new
//! epoch), so inspecting a log never changes what a later recovery finds; and what an
//! inspection hands out is a copy of the file taken once, which a live log appending and
//! reclaiming meanwhile (in this process or another) does not change under it.

use super::format::{RecordHeader, Superline, AREA_OFFSET, HEADER_LEN};
use super::policy::ForcePolicy;
use super::recovery::{self, RecoveryReport};
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// One record found by an inspection.
#[derive(Clone, Copy, Debug)]
pub struct RecordInfo<'a> {
    /// Its LSN.
    pub lsn: u64,
    /// Its file offset.
    pub offset: u64,
    /// The epoch it was written in.
    pub epoch: u32,
    /// Whether it was aborted (dropped before `complete`; readers skip it).
    pub aborted: bool,
    /// Its payload.
    pub payload: &'a [u8],
}

/// What a log file holds, read without changing it.
pub struct Inspection {
    /// The file's bytes, as read once at `open`.
    bytes: Vec<u8>,
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
    index: Vec<u64>,
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
    /// Reads the log at `path`: the whole file, once (a log open elsewhere may go on
    /// appending; the inspection shows the file as it was read, which may end in a record
    /// being written then, reported as recovery would report it).
    pub fn open(path: impl AsRef<Path>) -> Result<Inspection> {
        let path = path.as_ref().to_owned();
        let bytes = read_file(&path)?;
        let lines = recovery::superlines_in(&bytes, &path)?;
        let scan = lines.scan_in(&bytes);
        let report = scan.report;
        let recovery::Superlines {
            line,
            capacity: cap,
            policy,
            raw: [a, b],
            ..
        } = lines;
        Ok(Inspection {
            copies: [Superline::decode(&a), Superline::decode(&b)],
            bytes,
            path,
            capacity: cap,
            superline: line,
            policy,
            report,
            index: scan.index,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The valid records, oldest first (aborted ones included, marked).
    pub fn records(&self) -> impl Iterator<Item = RecordInfo<'_>> + '_ {
        self.index.iter().map(move |&voff| {
            let off = voff % self.capacity;
            // The scan validated this record inside the area of these very bytes.
            let at = (AREA_OFFSET + off) as usize;
            let bytes = &self.bytes[at..at + (self.capacity - off) as usize];
            let h = RecordHeader::decode(bytes);
            let p = HEADER_LEN as usize;
            RecordInfo {
                lsn: h.lsn,
                offset: AREA_OFFSET + off,
                epoch: h.epoch,
                aborted: h.aborted(),
                payload: &bytes[p..p + h.len() as usize],
            }
        })
    }
}

/// The bytes of the log file at `path`, read through the file (a copy nobody else
/// writes), not mapped.
fn read_file(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let op = "open log";
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(op, path, e))?;
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
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes)
        .map_err(|e| Error::io("read log", path, e))?;
    Ok(bytes)
}
