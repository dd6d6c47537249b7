//! Ending a Manual migration (`leds::migrate`): rolling back one that had not switched
//! (freeing its new objects), finishing one that had (freeing its old objects), and
//! resuming either after a crash, from its journal.
//!
//! Invariant: nothing is freed on a guess. A new object is freed only while nothing
//! reachable points to it (before the switch); an old one only once the switch made it
//! unreachable and only as the type it was converted from: an old object that cannot be
//! read as that type (damaged beyond repair, or no longer allocated) is left as it is,
//! marked in the journal and reported, and does not hold up the rest.

use super::journal::{Journal, Loaded, State};
use super::migrate::{batches_until, fit, in_batches, Remap, Step};
use crate::pool::Pool;
use crate::tx::Tx;
use crate::{Error, Result};
use std::collections::HashMap;

/// Rolls back the migration the journal in the pool records, if it has not switched
/// (read back from the pool, so a switch whose commit reported an error is never undone):
/// frees its new objects and the journal.
pub(super) fn roll_back_unswitched(
    pool: &Pool,
    anchor: u64,
    batch: Option<usize>,
    lane: u64,
) -> Result<()> {
    let head = pool.meta_word(anchor);
    if head == 0 {
        return Ok(());
    }
    let loaded = pool.tx(|tx| Journal::load(tx, head))?;
    match loaded.state {
        State::Building => roll_back(pool, &loaded, anchor, batch, lane),
        State::Freeing => Ok(()),
    }
}

/// Rolls back an unswitched migration, `loaded` from its journal: frees its new objects,
/// recording each in the journal, then the journal.
fn roll_back(
    pool: &Pool,
    loaded: &Loaded,
    anchor: u64,
    batch: Option<usize>,
    lane: u64,
) -> Result<()> {
    let Loaded { journal, pairs, .. } = loaded;
    // The new objects own no tail (an unfilled allocation starts without one and a
    // conversion clears any it copies), so each is freed alone, whatever its type,
    // without reading it: a conversions-agnostic roll-back.
    let todo: Vec<usize> = (0..pairs.len()).filter(|&i| pairs[i].1 != 0).collect();
    let n = batch.unwrap_or_else(|| fit(lane, 64));
    in_batches(pool, 0..todo.len(), n, |tx, r| {
        for &i in &todo[r] {
            tx.free_raw(pairs[i].1)?;
            journal.clear_new(tx, i)?;
        }
        Ok(())
    })?;
    pool.tx(|tx| journal.delete(tx, anchor))
}

/// The step converting each old object of `offs`, by its type; and the old objects whose
/// type cannot be read (damaged beyond repair, or no longer allocated), with why: those
/// are left as they are. An object that verifies as a type no step converts is refused
/// (`Error::InvalidConfig`): this is not the migration that made the pairs.
fn steps_by_type(
    pool: &Pool,
    steps: &[Box<dyn Step + '_>],
    offs: impl Iterator<Item = u64>,
) -> Result<(HashMap<u64, usize>, HashMap<u64, Error>)> {
    let types: HashMap<u64, u32> = pool
        .objects()?
        .into_iter()
        .map(|(off, h)| (off, h.type_id))
        .collect();
    let (mut by_old, mut unknown) = (HashMap::new(), HashMap::new());
    for off in offs {
        let id = types.get(&off).copied();
        if let Some(k) = steps.iter().position(|s| Some(s.old().0) == id) {
            by_old.insert(off, k);
            continue;
        }
        // A damaged header may be one parity rebuilds: read as each old type (which
        // repairs it) before it is taken for another type's.
        if let Some(k) = (0..steps.len()).find(|&k| pool.tx(|tx| steps[k].is_old(tx, off)).is_ok())
        {
            by_old.insert(off, k);
            continue;
        }
        match pool.tx(|tx| tx.object_bytes(off)) {
            Err(e) if !steps.is_empty() && left_behind(&e) => {
                unknown.insert(off, e);
            }
            Err(e) if !left_behind(&e) => return Err(e),
            found => {
                let id = found.map(|(id, _)| id).ok().or(id);
                return Err(Error::config(format!(
                    "a migration a crash interrupted after its switch still has to free the \
                     old object at {off:#x} (type id {id:#x?}), which none of this \
                     migration's conversions converts; run the interrupted migration's \
                     conversions to finish it"
                )));
            }
        }
    }
    Ok((by_old, unknown))
}

/// Whether `e`, met freeing an old object after the switch (and after the repair attempts
/// of `pool.tx`), says the object is damaged beyond repair or is no longer the one listed:
/// then it is left as it is and reported, rather than holding up the migration.
fn left_behind(e: &Error) -> bool {
    matches!(
        e,
        Error::ChecksumMismatch { .. }
            | Error::TypeMismatch { .. }
            | Error::InvalidOid { .. }
            | Error::BitmapMismatch { .. }
            | Error::Corrupt { .. }
    )
}

/// Deals with a migration a crash interrupted: rolls it back if it had not switched,
/// finishes it if it had. Returns the pairs of the one it finished (else none).
pub(super) fn resume(
    pool: &Pool,
    steps: &[Box<dyn Step + '_>],
    anchor: u64,
    batch: Option<usize>,
    lane: u64,
) -> Result<Remap> {
    let head = pool.meta_word(anchor);
    if head == 0 {
        return Ok(Remap::default());
    }
    let loaded = pool.tx(|tx| Journal::load(tx, head))?;
    match loaded.state {
        State::Freeing => {
            let (pairs, freed) = (&loaded.pairs, loaded.freed);
            let mut remap = Remap::from_pairs(pairs.iter().copied());
            // Those an earlier run left are tried again: a repair since may let them go.
            let left: Vec<(usize, u64)> = loaded.left.iter().map(|&i| (i, pairs[i].0)).collect();
            let offs = pairs[freed..]
                .iter()
                .chain(left.iter().map(|&(i, _)| &pairs[i]));
            let (by_old, unknown) = steps_by_type(pool, steps, offs.map(|p| p.0))?;
            remap.left = finish(
                pool,
                steps,
                &loaded.journal,
                freed,
                &left,
                &by_old,
                unknown,
                batch,
                lane,
                anchor,
            )?;
            Ok(remap)
        }
        State::Building => {
            roll_back(pool, &loaded, anchor, batch, lane)?;
            Ok(Remap::default())
        }
    }
}

/// Frees the old objects of the journal's pairs from `from` on, and those of `left`
/// ((pair, old object) an earlier run left allocated), each by the step that converted it
/// (`by_old`), recording the progress in the journal, then deletes the journal. Returns
/// the old objects it left as they are, with why: those of `unknown` (whose type could
/// not be read) and those whose free failed with damage (`left_behind`), found by freeing
/// the objects of a failed batch one by one. Any other error is returned, the journal
/// kept for the next run.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    pool: &Pool,
    steps: &[Box<dyn Step + '_>],
    journal: &Journal,
    from: usize,
    left: &[(usize, u64)],
    by_old: &HashMap<u64, usize>,
    mut unknown: HashMap<u64, Error>,
    batch: Option<usize>,
    lane: u64,
    anchor: u64,
) -> Result<Vec<(u64, Error)>> {
    let free = |tx: &Tx<'_>, old: u64| match by_old.get(&old) {
        Some(&k) => steps[k].free_old(tx, old),
        None => Err(Error::invalid_oid(old, "its type cannot be read")),
    };
    let mut report = Vec::new();
    // Frees the old object of pair `i` alone (`mark`: it was left, and is no more), or
    // marks it left; `freed` advances past it either way.
    let mut one = |i: usize, old: u64, mark: bool| -> Result<()> {
        let freed = (i + 1).max(from);
        let r = pool.tx(|tx| {
            free(tx, old)?;
            if mark {
                journal.leave(tx, i, false)?;
            }
            journal.set_freed(tx, freed)
        });
        match r {
            Ok(()) => Ok(()),
            Err(e) if left_behind(&e) => {
                pool.tx(|tx| {
                    journal.leave(tx, i, true)?;
                    journal.set_freed(tx, freed)
                })?;
                report.push((old, unknown.remove(&old).unwrap_or(e)));
                Ok(())
            }
            Err(e) => Err(e),
        }
    };
    for &(i, old) in left {
        one(i, old, true)?;
    }
    let n = batch.unwrap_or_else(|| fit(lane, 64));
    let mut at = from;
    while at < journal.len() {
        let done = batches_until(pool, at..journal.len(), n, |tx, r| {
            for (old, _) in journal.pairs(tx, r.start, r.end)? {
                free(tx, old)?;
            }
            journal.set_freed(tx, r.end)
        });
        match done {
            Ok(()) => break,
            Err((stop, e)) if left_behind(&e) => {
                // An object of the batch from `stop` cannot be freed: each of the batch
                // alone, so that the others are.
                let end = (stop + n).min(journal.len());
                let pairs = pool.tx(|tx| journal.pairs(tx, stop, end))?;
                for (i, (old, _)) in (stop..end).zip(pairs) {
                    one(i, old, false)?;
                }
                at = end;
            }
            Err((_, e)) => return Err(e),
        }
    }
    pool.tx(|tx| journal.delete(tx, anchor))?;
    Ok(report)
}
