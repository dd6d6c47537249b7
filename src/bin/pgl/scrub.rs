//! `pgl scrub` and `pgl inject`: repair damage, and cause it on purpose.

use crate::args::FaultArg;
use crate::progress::{slow, OPENING};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pgl::{Pool, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// `pgl scrub`: the report, and whether damage remains.
pub(crate) fn scrub(file: &Path, repair: bool) -> Result<(String, bool)> {
    let pool = slow(OPENING, || Pool::open_any(file))?;
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template("scrubbing {wide_bar} {pos}/{len} objects, {eta} left")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let mut shown = false;
    let r = pool.scrub(repair, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
        if !shown && start.elapsed() > Duration::from_secs(1) {
            shown = true;
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(Duration::from_millis(200));
        }
    });
    bar.finish_and_clear();
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
        let _ = writeln!(out, "    {off:#x}: {e}");
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
            (false, true) => "damage remains that parity cannot rebuild",
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
