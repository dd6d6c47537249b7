//! `pgl check`: verify a pool without writing it. The pool is opened read-only
//! (`Pool::open_read_only`): what opening it repairs (a header or lane copy, zone metadata,
//! bitmap words, objects a crash left in disagreement with parity) is repaired in memory
//! only, and reported as damage found, which the file still holds.

use crate::info::migration_line;
use crate::progress::{slow, Bar, OPENING};
use pgl::checksum::{adler32, adler32_continue};
use pgl::{Error, ObjectHeader, Pool, Result};
use std::fmt::Write as _;
use std::path::Path;

/// Errors of `Pool::open` that mean the pool is damaged, not that it cannot be read at all.
pub(crate) fn is_damage(e: &Error) -> bool {
    matches!(
        e,
        Error::HeaderCorrupt { .. }
            | Error::Corrupt { .. }
            | Error::Truncated { .. }
            | Error::ChecksumMismatch { .. }
            | Error::BitmapMismatch { .. }
    )
}

/// `pgl check`: the report, and whether it found problems.
pub(crate) fn check(file: &Path) -> Result<(String, bool)> {
    let mut out = String::new();
    let _ = writeln!(out, "checking {}", file.display());
    let pool = match slow(OPENING, || Pool::open_read_only(file)) {
        Ok(p) => p,
        Err(e) if is_damage(&e) => {
            let _ = writeln!(out, "  open      FAILED: {e}");
            let _ = writeln!(out, "result: 1 problem: the pool cannot be opened");
            return Ok((out, true));
        }
        Err(e) => return Err(e),
    };
    let mut problems = 0u64;
    let s = pool.stats();
    if s.header_repairs == 0 && s.header_updates_completed > 0 {
        // Not a problem: the older copy was legitimate.
        let _ = writeln!(
            out,
            "  header    a header update a crash interrupted left one copy older (not \
             damage: a program's next open completes it)"
        );
    } else if s.header_repairs == 0 {
        let _ = writeln!(out, "  header    both copies valid");
    } else {
        problems += 1;
        let _ = writeln!(
            out,
            "  header    one copy is damaged, the other valid (a program's next open \
             rewrites it from the valid one)"
        );
    }
    if s.lane_copies_damaged > 0 {
        // A program's next open rewrites them (`pgl scrub` does not touch lanes).
        problems += s.lane_copies_damaged;
        let _ = writeln!(
            out,
            "  lanes     {} damaged lane cop{}, the other valid (a program's next open \
             rewrites {} from the other; the pool is consistent)",
            s.lane_copies_damaged,
            if s.lane_copies_damaged == 1 {
                "y"
            } else {
                "ies"
            },
            if s.lane_copies_damaged == 1 {
                "it"
            } else {
                "them"
            }
        );
    }
    if s.records_replayed > 0 {
        // Not damage: a crash interrupted the program that had the pool open.
        let _ = writeln!(
            out,
            "  lanes     valid; {} committed record(s) a crash left to replay (checked as \
             replayed; a program's next open replays them)",
            s.records_replayed
        );
    } else if s.lane_copies_damaged == 0 {
        let _ = writeln!(out, "  lanes     valid; 0 committed record(s) replayed");
    }
    if s.metadata_repairs == 0 {
        let _ = writeln!(out, "  metadata  both copies valid in every zone");
    } else {
        problems += s.metadata_repairs;
        let _ = writeln!(
            out,
            "  metadata  {} damaged zone metadata cop(ies) (a program's next open rewrites \
             them from the other)",
            s.metadata_repairs
        );
    }
    if s.bitmap_repairs == 0 && s.runs_quarantined == 0 {
        let _ = writeln!(out, "  bitmaps   every allocation bitmap word valid");
    }
    if s.bitmap_repairs > 0 {
        problems += s.bitmap_repairs;
        let _ = writeln!(
            out,
            "  bitmaps   {} damaged allocation bitmap word(s) that parity rebuilds (a \
             program's next open does)",
            s.bitmap_repairs
        );
    }
    if s.runs_quarantined > 0 {
        // The words themselves are counted below, where the objects are verified.
        let _ = writeln!(
            out,
            "  bitmaps   {} run(s) out of service: an allocation bitmap word neither \
             verifies nor could be rebuilt (their objects stay readable; nothing is \
             allocated there)",
            s.runs_quarantined
        );
    }
    if s.objects_repaired > 0 {
        // Damage in the zones a crash left to reconcile with parity: rebuilt as the pool
        // opened (in memory), so the objects verify below; the file still holds it.
        problems += s.objects_repaired;
        let _ = writeln!(
            out,
            "  objects   {} damaged object(s) in zones a crash interrupted, which parity \
             rebuilds (a program's next open does)",
            s.objects_repaired
        );
        for oid in pool.objects_rebuilt_opening() {
            let _ = writeln!(out, "    {oid:#x}: rebuilt from parity as the pool opened");
        }
    }
    if let Some(line) = migration_line(&pool)? {
        let _ = writeln!(out, "  migration {line}");
    }
    match pool.types() {
        Ok(t) => {
            let _ = writeln!(out, "  types     {} registered, all entries valid", t.len());
        }
        Err(e) if is_damage(&e) => {
            problems += 1;
            let _ = writeln!(out, "  types     FAILED: {e}");
        }
        Err(e) => return Err(e),
    }

    // The parity line is written where it belongs once the objects are verified: a page
    // that disagrees because an object in its column was damaged is that object's problem,
    // not a second one.
    let parity_at = out.len();
    let bad_pages = match pool.verify_parity() {
        Ok(bad) => Some(bad),
        Err(Error::InvalidConfig { .. }) => None,
        Err(e) => return Err(e),
    };
    let parity_kept = bad_pages.is_some();
    let parity_line = |damaged: &[(u64, Error)]| -> (String, u64) {
        let Some(bad) = &bad_pages else {
            return ("  parity    not kept by this pool\n".into(), 0);
        };
        if bad.is_empty() {
            return ("  parity    consistent in every zone\n".into(), 0);
        }
        let info = pool.info();
        let explained: Vec<u64> = damaged
            .iter()
            .flat_map(|(off, e)| {
                let len = match e {
                    Error::ChecksumMismatch { size, .. } => *size,
                    _ => 8,
                };
                columns_parity(&info.header.geo, info.header.zones, *off, len)
            })
            .collect();
        let alone = bad.iter().filter(|p| !explained.contains(p)).count() as u64;
        let pages = bad
            .iter()
            .map(|o| format!("{o:#x}"))
            .collect::<Vec<_>>()
            .join(", ");
        let why = match alone {
            0 => " (the page columns of the damaged objects below)".to_string(),
            n if n == bad.len() as u64 => String::new(),
            n => format!(" ({n} of them not explained by the damaged objects below)"),
        };
        (
            format!(
                "  parity    {} page(s) disagree with their rows: {pages}{why}\n",
                bad.len()
            ),
            alone,
        )
    };
    // Damage that stops the walk over the heap: the report ends here.
    let heap_failed = |mut out: String, e: &Error| {
        let (line, n) = parity_line(&[]);
        out.insert_str(parity_at, &line);
        let _ = writeln!(out, "  heap      FAILED: {e}");
        let _ = writeln!(out, "result: {} problem(s)", problems + n + 1);
        out
    };
    // Bitmap words beyond repair are reported by verify_objects, which verifies the rest.
    let (total, hidden) = match pool.objects_with_damage() {
        Ok(l) => (l.objects.len() as u64, l.damaged_words().len() as u64),
        Err(e) if is_damage(&e) => return Ok((heap_failed(out, &e), true)),
        Err(e) => return Err(e),
    };
    let mut bar = Bar::new("verifying {wide_bar} {pos}/{len} objects, {eta} left");
    let bad = pool.verify_objects(|done, _| bar.update(done, total));
    drop(bar);
    let bad = match bad {
        Ok(b) => b,
        Err(Error::InvalidConfig { .. }) => {
            let _ = writeln!(
                out,
                "  objects   {total}; checksums not kept by this pool: none verified"
            );
            // Without checksums nothing else reports the bitmap words.
            let (line, n) = parity_line(&[]);
            out.insert_str(parity_at, &line);
            problems += hidden + n;
            let verdict = if problems == 0 {
                "result: clean (as far as parity tells)".to_string()
            } else {
                format!("result: {problems} problem(s)")
            };
            let _ = writeln!(out, "{verdict}");
            return Ok((out, problems > 0));
        }
        Err(e) if is_damage(&e) => return Ok((heap_failed(out, &e), true)),
        Err(e) => return Err(e),
    };
    let (line, n) = parity_line(&bad);
    out.insert_str(parity_at, &line);
    problems += n;
    // Bitmap words that hide their blocks are not among the objects checked.
    let (words, objects): (Vec<_>, Vec<_>) = bad
        .iter()
        .partition(|(_, e)| matches!(e, Error::BitmapMismatch { .. }));
    for (off, e) in &words {
        let _ = writeln!(out, "  bitmaps   {off:#x}: {e}");
    }
    let _ = writeln!(out, "  objects   {total} checked, {} bad", objects.len());
    for (off, e) in &objects {
        let _ = writeln!(out, "    {}", damaged_object(*off, e));
    }
    problems += bad.len() as u64;
    if problems == 0 {
        let _ = writeln!(out, "result: clean");
    } else if !objects.is_empty() && parity_kept {
        let _ = writeln!(
            out,
            "result: {problems} problem(s); `pgl scrub --repair` rebuilds from parity what \
             it can"
        );
    } else {
        let _ = writeln!(out, "result: {problems} problem(s)");
    }
    Ok((out, problems > 0))
}

/// A damaged object as `check` and `scrub` list it: `0x340110: checksum mismatch (...)`.
/// The error's own text is for a program, and says what to run (`pgl check`, `pgl scrub
/// --repair`); the commands say what was found, and what to do in their result line.
pub(crate) fn damaged_object(off: u64, e: &Error) -> String {
    match e {
        Error::ChecksumMismatch {
            type_id,
            type_name,
            size,
            stored,
            computed,
            ..
        } => {
            let named = match type_name {
                Some(n) => format!("`{n}`, "),
                None => String::new(),
            };
            format!(
                "{off:#x}: checksum mismatch ({named}type id {type_id:#010x}, {size} bytes): \
                 stored {stored:#010x}, computed {computed:#010x}; changed outside a \
                 transaction (a scribble or a media error)"
            )
        }
        e => format!("{off:#x}: {e}"),
    }
}

/// The parity pages of the page columns that the `len` bytes at `off` lie in (an object's
/// header included, or a bitmap word): where damage to them makes parity disagree.
pub(crate) fn columns_parity(
    geo: &pgl::geometry::Geometry,
    zones: u64,
    off: u64,
    len: u64,
) -> Vec<u64> {
    let page = pgl::geometry::PAGE;
    let (from, to) = (off.saturating_sub(16), off.saturating_add(len));
    let mut out = Vec::new();
    for at in (from / page * page..to).step_by(page as usize) {
        let at = at.max(from);
        let (Some(pos), Some(col)) = (geo.locate(at, zones), geo.page_column(at)) else {
            continue;
        };
        out.push(geo.parity_offset(pos.zone) + col * page);
    }
    out
}

/// The Adler-32 an object with this header and payload should carry (see
/// `heap/layout.rs`: it covers the payload offset, size and type id, then the payload).
pub(crate) fn expected_checksum(off: u64, h: &ObjectHeader, payload: &[u8]) -> u32 {
    let mut prefix = [0u8; 20];
    prefix[0..8].copy_from_slice(&off.to_le_bytes());
    prefix[8..16].copy_from_slice(&h.size.to_le_bytes());
    prefix[16..20].copy_from_slice(&h.type_id.to_le_bytes());
    adler32_continue(adler32(&prefix), payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgl::Config;

    #[test]
    fn damage_is_traced_to_the_parity_pages_of_its_columns() {
        let geo = Config::small("cols").geometry();
        let (page, row) = (pgl::geometry::PAGE, geo.row_size());
        let zone1 = geo.zone_offset(1);
        // An object whose header and first 8 bytes lie in page 2 of row 1 of zone 1.
        let off = zone1 + row + 2 * page + 64;
        assert_eq!(
            columns_parity(&geo, 2, off, 8),
            vec![geo.parity_offset(1) + 2 * page]
        );
        // One that straddles a page boundary: both columns.
        let off = zone1 + 3 * page - 8;
        assert_eq!(
            columns_parity(&geo, 2, off, 100),
            vec![
                geo.parity_offset(1) + 2 * page,
                geo.parity_offset(1) + 3 * page
            ]
        );
        // Outside the zones' data rows: no column.
        assert!(columns_parity(&geo, 1, zone1 + 64, 8).is_empty());
    }
}
