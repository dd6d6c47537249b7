//! `pgl log`: inspect and check Arcadia log files.

use crate::progress::slow;
use crate::units::bytes;
use pgl::log::Inspection;
use pgl::{Error, Result};
use std::fmt::Write as _;
use std::path::Path;

/// One superline copy, for `pgl log info`.
pub(crate) fn copy_line(c: &std::result::Result<pgl::log::format::Superline, String>) -> String {
    match c {
        Ok(s) => format!(
            "seq {}, start LSN {}, epoch {} from LSN {}",
            s.seq, s.start_lsn, s.epoch, s.epoch_lsn
        ),
        Err(e) => format!("INVALID: {e}"),
    }
}

/// The damage `pgl log info` and `pgl log check` report, one line each.
pub(crate) fn log_problems(i: &Inspection) -> Vec<String> {
    let mut v = Vec::new();
    for (k, c) in i.copies.iter().enumerate() {
        if let Err(e) = c {
            v.push(format!(
                "superline copy {} is invalid ({e}); opening the log rewrites it",
                ["A", "B"][k]
            ));
        }
    }
    if let Some(t) = &i.report.torn {
        v.push(format!(
            "record LSN {} at {:#x} is torn or damaged ({}); opening the log drops it and \
             {} record(s) after it",
            t.lsn,
            t.offset,
            t.reason,
            i.report.dropped - 1
        ));
    }
    v
}

pub(crate) fn log_info(file: &Path) -> Result<String> {
    let i = slow("reading the log", || Inspection::open(file))?;
    let r = &i.report;
    let s = &i.superline;
    let mut out = String::new();
    let _ = writeln!(out, "log       {}", file.display());
    let _ = writeln!(out, "format    version {}", pgl::log::format::VERSION);
    let _ = writeln!(out, "area      {}", bytes(i.capacity));
    let _ = writeln!(out, "policy    {}", i.policy);
    let _ = writeln!(
        out,
        "epoch     {} (from LSN {}), superline seq {}",
        s.epoch, s.epoch_lsn, s.seq
    );
    let _ = writeln!(
        out,
        "superline copy {} in use",
        ["A", "B"][r.superline_copy]
    );
    let _ = writeln!(out, "  copy A  {}", copy_line(&i.copies[0]));
    let _ = writeln!(out, "  copy B  {}", copy_line(&i.copies[1]));
    let _ = writeln!(out, "records   {}", r.records);
    if r.records > 0 {
        let _ = writeln!(out, "  LSNs    {} to {}", r.start_lsn, r.next_lsn - 1);
    }
    let _ = writeln!(
        out,
        "  bytes   {} ({:.1}% of the area)",
        bytes(r.bytes),
        r.bytes as f64 * 100.0 / i.capacity as f64
    );
    let aborted = i.aborted;
    let _ = writeln!(out, "  aborted {aborted}");
    let _ = writeln!(out, "next LSN  {}", r.next_lsn);
    let problems = log_problems(&i);
    if problems.is_empty() {
        let _ = writeln!(out, "damage    none");
    }
    for p in problems {
        let _ = writeln!(out, "damage    {p}");
    }
    Ok(out)
}

pub(crate) fn log_dump(file: &Path, from: Option<u64>, max: Option<usize>) -> Result<String> {
    let i = slow("reading the log", || Inspection::open(file))?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>10}  {:>10}  {:>8}  {:>5}  first bytes",
        "LSN", "offset", "length", "epoch"
    );
    let asked = from;
    let from = from.unwrap_or(0);
    let r = &i.report;
    if asked.is_some() && from >= r.next_lsn && r.records > 0 {
        let _ = writeln!(
            out,
            "(no records from LSN {from}: the log's live records are LSNs {} to {})",
            r.start_lsn,
            r.next_lsn - 1
        );
    }
    // Only the first 16 bytes of a payload are shown (and kept: a record may be 2 GiB).
    for (shown, rec) in i.record_heads_from(from, 16).enumerate() {
        let rec = rec?;
        if max.is_some_and(|m| shown >= m) {
            let _ = writeln!(out, "(more records not shown)");
            break;
        }
        let head: Vec<String> = rec
            .payload
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect();
        let text: String = rec
            .payload
            .iter()
            .take(16)
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "{:>10}  {:>#10x}  {:>8}  {:>5}  {}{} |{text}|{}",
            rec.lsn,
            rec.offset,
            rec.len,
            rec.epoch,
            head.join(" "),
            "   ".repeat(16 - head.len()),
            if rec.aborted { " (aborted)" } else { "" }
        );
    }
    if let Some(t) = &i.report.torn {
        let _ = writeln!(
            out,
            "{:>10}  {:>#10x}  torn or damaged: {}",
            t.lsn, t.offset, t.reason
        );
    }
    Ok(out)
}

/// Whether the file at `path` bears a pgl log's magic where a superline copy would be:
/// a log, damaged, rather than some other file. `Error::NotALog` covers both.
fn has_log_magic(path: &Path) -> bool {
    use pgl::log::format::{file_len, super_offset, MAGIC};
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let mut magic_at = |off: u64| {
        let mut m = [0u8; 8];
        off + 8 <= len
            && f.seek(SeekFrom::Start(off)).is_ok()
            && f.read_exact(&mut m).is_ok()
            && m == MAGIC
    };
    magic_at(0) || (len >= file_len(0) && magic_at(super_offset(1, len - file_len(0))))
}

/// `pgl log check`, with the exit statuses of `pgl check`: problems found (1) for a log that
/// is damaged, even too damaged to open; an error (2) for a file it cannot check at all: a
/// missing or unreadable file, or one that is not a pgl log.
pub(crate) fn log_check(file: &Path) -> Result<(String, bool)> {
    let mut out = String::new();
    let _ = writeln!(out, "checking {}", file.display());
    let i = match slow("reading the log", || Inspection::open(file)) {
        Ok(i) => i,
        Err(e @ Error::NotALog { .. }) if has_log_magic(file) => {
            let _ = writeln!(out, "  open      FAILED: {e}");
            let _ = writeln!(out, "result: 1 problem: the log cannot be opened");
            return Ok((out, true));
        }
        Err(e) => return Err(e),
    };
    let r = &i.report;
    let in_use = ["A", "B"][r.superline_copy];
    if r.other_copy_invalid.is_none() {
        let _ = writeln!(out, "  superline both copies valid (copy {in_use} in use)");
    } else {
        let _ = writeln!(out, "  superline copy {in_use} valid (in use)");
    }
    let _ = writeln!(
        out,
        "  records   {} verified (LSNs {} to {}, {})",
        r.records,
        r.start_lsn,
        r.next_lsn.saturating_sub(1),
        bytes(r.bytes)
    );
    let problems = log_problems(&i);
    for p in &problems {
        let _ = writeln!(out, "  problem   {p}");
    }
    if problems.is_empty() {
        let _ = writeln!(out, "result: clean");
    } else {
        let _ = writeln!(out, "result: {} problem(s)", problems.len());
    }
    Ok((out, !problems.is_empty()))
}
