//! `pgl scrub` and `pgl inject`: repair damage, and cause it on purpose. A scrub without
//! `--repair` only reports: it opens the pool read-only (`Pool::open_read_only`), as
//! `check` does, so the file keeps every byte, and what opening repaired in memory is
//! reported as damage found.

use crate::args::FaultArg;
use crate::check::damaged_object;
use crate::progress::{slow, Bar, OPENING};
use pgl::{Pool, Result};
use std::fmt::Write as _;
use std::path::Path;

/// `pgl scrub`: the report, and whether damage remains.
pub(crate) fn scrub(file: &Path, repair: bool) -> Result<(String, bool)> {
    let pool = if repair {
        slow(OPENING, || Pool::open_any(file))?
    } else {
        slow(OPENING, || Pool::open_read_only(file))?
    };
    // What opening repaired: in the file with `--repair`, in memory only without.
    let opening = opening_repairs(&pool);
    let mut bar = Bar::new("scrubbing {wide_bar} {pos}/{len} objects, {eta} left");
    let r = pool.scrub(repair, |done, total| bar.update(done, total));
    drop(bar);
    let r = r?;
    let mut out = String::new();
    let _ = writeln!(out, "scrubbing {}", file.display());
    for line in &opening {
        let done = if repair {
            "repaired as the pool opened"
        } else {
            "opening repairs it (in memory here: the file keeps it until --repair or a \
             program's open)"
        };
        let _ = writeln!(out, "  opening   {line}; {done}");
    }
    let _ = writeln!(
        out,
        "  objects   {} checked, {} repaired, {} damaged",
        r.objects_checked,
        r.objects_repaired,
        r.damaged.len()
    );
    for (off, e) in &r.damaged {
        let _ = writeln!(out, "    {}", damaged_object(*off, e));
    }
    let _ = writeln!(
        out,
        "  parity    {} page column(s) disagreed, {} recomputed",
        r.parity_columns_bad, r.parity_columns_fixed
    );
    let _ = writeln!(
        out,
        "  metadata  {} zone metadata cop(ies) damaged, {} rewritten from the other",
        r.metadata_copies_bad, r.metadata_copies_fixed
    );
    let _ = writeln!(
        out,
        "  bitmaps   {} allocation bitmap word(s) damaged, {} rebuilt from parity",
        r.bitmap_words_bad, r.bitmap_words_fixed
    );
    let clean = r.is_clean() && (repair || opening.is_empty());
    let _ = writeln!(
        out,
        "result: {}",
        match (clean, repair) {
            (true, _) => "clean",
            (false, false) => "damaged (run with --repair to rebuild what parity can)",
            (false, true) => {
                "damage remains that parity cannot rebuild: restore the pool from a backup, \
                 or have the program that owns the objects listed above rewrite or free them"
            }
        }
    );
    Ok((out, !clean))
}

/// The damage opening `pool` repaired (a header, lane or metadata copy, bitmap words,
/// objects a crash left in disagreement with parity), one line each; none if it found none.
fn opening_repairs(pool: &Pool) -> Vec<String> {
    let s = pool.stats();
    let mut v = Vec::new();
    if s.header_repairs > 0 {
        v.push(format!("{} damaged header cop(ies)", s.header_repairs));
    }
    if s.lane_copies_damaged > 0 {
        v.push(format!("{} damaged lane cop(ies)", s.lane_copies_damaged));
    }
    if s.metadata_repairs > 0 {
        v.push(format!(
            "{} damaged zone metadata cop(ies)",
            s.metadata_repairs
        ));
    }
    if s.bitmap_repairs > 0 {
        v.push(format!(
            "{} damaged allocation bitmap word(s)",
            s.bitmap_repairs
        ));
    }
    for oid in pool.objects_rebuilt_opening() {
        v.push(format!(
            "object {oid:#x} damaged in a zone a crash interrupted"
        ));
    }
    v
}

/// `pgl inject`.
pub(crate) fn inject(file: &Path, fault: &FaultArg, seed: u64) -> Result<String> {
    let pool = slow(OPENING, || Pool::open_any(file))?;
    let f = fault.fault(seed);
    pool.inject(&f)?;
    Ok(format!("injected {f} into {}\n", file.display()))
}
