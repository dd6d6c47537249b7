//! A read-only look at a log file, for tools (`pgl log info|dump|check`): both superline
//! copies, the records recovery would keep, and what it would drop.
//!
//! Invariant: nothing here writes to the file (unlike `Log::open`, which starts a new
//! epoch), so inspecting a log never changes what a later recovery finds.

use super::format::{RecordHeader, Superline, AREA_OFFSET, HEADER_LEN};
use super::policy::ForcePolicy;
use super::recovery::{self, RecoveryReport};
use crate::persist::Media;
use crate::Result;
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
    media: Media,
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
    /// Reads the log at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Inspection> {
        let path = path.as_ref().to_owned();
        let media = Media::open_file(
            &path,
            crate::persist::FileKind::Log,
            0,
            Some(crate::FlushMode::None),
        )?;
        let lines = recovery::read_superlines(&media, &path)?;
        let scan = lines.scan(&media);
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
            media,
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
            // SAFETY: the scan validated this record inside the area; nothing writes it.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    self.media.ptr(AREA_OFFSET + off) as *const u8,
                    (self.capacity - off) as usize,
                )
            };
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
