//! `pgl scrub` and `pgl inject`: repair damage, and cause it on purpose.

use crate::args::FaultArg;
use crate::check::damaged_object;
use crate::progress::{slow, Bar, OPENING};
use pgl::{Pool, Result};
use std::fmt::Write as _;
use std::path::Path;

/// `pgl scrub`: the report, and whether damage remains.
pub(crate) fn scrub(file: &Path, repair: bool) -> Result<(String, bool)> {
    let pool = slow(OPENING, || Pool::open_any(file))?;
    let mut bar = Bar::new("scrubbing {wide_bar} {pos}/{len} objects, {eta} left");
    let r = pool.scrub(repair, |done, total| bar.update(done, total));
    drop(bar);
    let r = r?;
    let mut out = String::new();
    let _ = writeln!(out, "scrubbing {}", file.display());
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
    let clean = r.is_clean();
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

/// `pgl inject`.
pub(crate) fn inject(file: &Path, fault: &FaultArg, seed: u64) -> Result<String> {
    let pool = slow(OPENING, || Pool::open_any(file))?;
    let f = fault.fault(seed);
    pool.inject(&f)?;
    Ok(format!("injected {f} into {}\n", file.display()))
}
