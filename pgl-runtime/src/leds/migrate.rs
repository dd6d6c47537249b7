//! The Manual retention model of LEDS, for comparison with `#[extendible]`: every object
//! of an old type is rewritten as a new type, oids between them remapped, the old ones
//! freed and the root moved.
//!
//! A migration runs in as many transactions as its size needs, recorded in a journal
//! (`leds::journal`): new objects are allocated, then converted, while nothing reachable
//! points to them; one transaction moves the root and marks the journal "freeing"; the old
//! objects are then freed. Invariant: after a crash the pool's reachable data is wholly
//! old (before the switch) or wholly new (after it), and the next `run` of the migration
//! first rolls the interrupted one back (freeing its new objects) or finishes it (freeing
//! the old ones), so no object is leaked and no object of a new type ever holds the oid
//! of a freed old one.

use super::journal::{Journal, State};
use super::settle::{finish, resume, roll_back_unswitched};
use super::{Ext, Extendible};
use crate::persistent::{Oid, Persistent};
use crate::pool::Pool;
use crate::tx::{Tx, TypeInfo};
use crate::{Error, Result};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::Range;

/// The old-to-new oid map of a migration: converters use it to remap the oids an old
/// object holds (`remap.oid(old.next)`), whichever of the migration's types they point to.
#[derive(Debug, Default)]
pub struct Remap {
    pub(super) map: HashMap<u64, u64>,
    /// Old objects left as they are (`not_freed`).
    pub(super) left: Vec<(u64, Error)>,
}

impl Remap {
    /// The new oid of a migrated object, or `oid` itself (cast) if it was not migrated
    /// (null, or an object of a type the migration leaves alone).
    pub fn oid<T, U>(&self, oid: Oid<T>) -> Oid<U> {
        Oid::from_raw(self.map.get(&oid.raw()).copied().unwrap_or(oid.raw()))
    }

    /// Objects migrated.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing was migrated.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Old objects the migration could not free after its switch, each with the error
    /// freeing it met: damaged beyond repair (a header or extension link that cannot say
    /// what the block holds, so it is not freed blindly), or no longer the object the
    /// migration listed. Their data is in the new objects (the map has their pairs);
    /// each block is left as it is, unreachable, for `pool.scrub` and `pgl check` to
    /// report. Empty when every old object was freed.
    pub fn not_freed(&self) -> &[(u64, Error)] {
        &self.left
    }

    /// The map of (old, new) pairs.
    pub(crate) fn from_pairs(pairs: impl IntoIterator<Item = (u64, u64)>) -> Remap {
        Remap {
            map: pairs.into_iter().collect(),
            left: Vec::new(),
        }
    }
}

/// One old-type-to-new-type conversion of a migration.
pub(super) trait Step {
    /// The old type's id and payload size, which pick its objects out of the heap.
    fn old(&self) -> (u32, u64);
    /// Whether the old type is the definition the pool registered (`types`): a stale one
    /// would pick no object, or the wrong ones, out of the heap.
    fn check_old(&self, types: &[TypeInfo]) -> Result<()>;
    /// The new type's id.
    fn new_id(&self) -> u32;
    /// Payload bytes of a new object (what converting one logs).
    fn new_size(&self) -> u64;
    fn alloc_new(&self, tx: &Tx<'_>) -> Result<u64>;
    fn convert(&mut self, tx: &Tx<'_>, remap: &Remap, old: u64, new: u64) -> Result<()>;
    /// Whether the object at `old` is of the old type (a damaged header is repaired from
    /// parity on the way, as any read's).
    fn is_old(&self, tx: &Tx<'_>, old: u64) -> Result<()>;
    fn free_old(&self, tx: &Tx<'_>, old: u64) -> Result<()>;
}

/// How a step computes the new value of an old object.
trait Converter<Old, New> {
    fn call(&mut self, tx: &Tx<'_>, old: Oid<Old>, remap: &Remap) -> Result<New>;
}

/// A converter of the old object itself (`Migration::convert`).
struct Plain<F>(F);

impl<Old: Persistent, New, F: FnMut(&Old, &Remap) -> New> Converter<Old, New> for Plain<F> {
    fn call(&mut self, tx: &Tx<'_>, old: Oid<Old>, remap: &Remap) -> Result<New> {
        Ok((self.0)(&*tx.get(old)?, remap))
    }
}

/// A converter of an `#[extendible]` old object with its extension groups
/// (`Migration::convert_ext`).
struct WithGroups<F>(F);

impl<Old: Extendible, New, F: FnMut(&Ext<'_, Old>, &Remap) -> New> Converter<Old, New>
    for WithGroups<F>
{
    fn call(&mut self, tx: &Tx<'_>, old: Oid<Old>, remap: &Remap) -> Result<New> {
        // The groups are copied into the new object as the base is, so they are verified
        // as it is (`Conversion::convert`), whatever the verify policy: `tail` verifies
        // each object of the chain (a mismatch is repaired from parity and the batch run
        // again) and checks that it is the base's next group. The base's link is followed
        // only once its checksum vouches for it, which `convert` checked.
        let link = tx.get(old)?.__link();
        if link != 0 {
            tx.tail::<Old>(old.raw(), link)?;
        }
        Ok((self.0)(&tx.ext(old)?, remap))
    }
}

struct Conversion<Old, New, C> {
    convert: C,
    types: PhantomData<fn(&Old) -> New>,
}

impl<Old: Persistent, New: Persistent, C: Converter<Old, New>> Step for Conversion<Old, New, C> {
    fn old(&self) -> (u32, u64) {
        (Old::TYPE_ID, crate::persistent::object_size::<Old>() as u64)
    }

    fn check_old(&self, types: &[TypeInfo]) -> Result<()> {
        match types.iter().find(|t| t.type_id == Old::TYPE_ID) {
            Some(t) if t.layout != Old::LAYOUT => Err(Error::LayoutMismatch {
                pool_file: None,
                type_name: core::any::type_name::<Old>().to_owned(),
                stored_name: t.name.clone(),
                type_id: Old::TYPE_ID,
                stored: t.layout,
                compiled: Old::LAYOUT,
                group: None,
            }),
            _ => Ok(()),
        }
    }

    fn new_id(&self) -> u32 {
        New::TYPE_ID
    }

    fn new_size(&self) -> u64 {
        crate::persistent::object_size::<New>() as u64
    }

    fn alloc_new(&self, tx: &Tx<'_>) -> Result<u64> {
        // Every byte is written by `convert` before anything points to it.
        tx.alloc_unzeroed::<New>().map(Oid::raw)
    }

    fn convert(&mut self, tx: &Tx<'_>, remap: &Remap, old: u64, new: u64) -> Result<()> {
        // Checked whatever the verify policy (a mismatch is repaired from parity and the
        // batch run again): the new object gets a fresh checksum, so damage the converter
        // copied would be beyond detection and repair from then on. `get` takes the lock
        // the check needs (held until the batch ends) and checks the type.
        tx.get(Oid::<Old>::from_raw(old))?;
        tx.verify_link_holder(old)?;
        let value = self.convert.call(tx, Oid::from_raw(old), remap)?;
        // An `#[extendible]` `New` keeps the null link `alloc_new` gave it whatever link
        // the converter copied (the handle's drop puts it back, see `tx::tail`): the new
        // object starts without extension groups, made on first access.
        *tx.open(Oid::<New>::from_raw(new))? = value;
        Ok(())
    }

    fn is_old(&self, tx: &Tx<'_>, old: u64) -> Result<()> {
        tx.get(Oid::<Old>::from_raw(old)).map(drop)
    }

    fn free_old(&self, tx: &Tx<'_>, old: u64) -> Result<()> {
        tx.free(Oid::<Old>::from_raw(old))
    }
}

/// A Manual-model migration under construction: [`Pool::migration`], one
/// [`convert`](Migration::convert) per type that changes, then [`run`](Migration::run).
/// Converting several types in one migration lets each remap oids of the others (a root
/// holding nodes, nodes holding nodes), all made reachable by one crash-atomic switch.
#[must_use = "a migration does nothing until `run`"]
pub struct Migration<'a> {
    pool: &'a Pool,
    steps: Vec<Box<dyn Step + 'a>>,
    error: Option<Error>,
    batch: Option<usize>,
}

impl<'a> Migration<'a> {
    /// Adds the conversion of every object of type `Old` to a `New` computed by `convert`
    /// (which gets the old-to-new [`Remap`] of the whole migration to translate the oids
    /// it holds). `Old` must be the definition the pool stored (same type id and layout:
    /// `run` refuses another with [`Error::LayoutMismatch`], changing nothing);
    /// `New` needs another type id. An `#[extendible]` `New` object starts without
    /// extension groups: they are created, from their `init`s, on first access. An
    /// `#[extendible]` `Old` shows only its base here: convert it with
    /// [`convert_ext`](Self::convert_ext) to keep its extension fields.
    pub fn convert<Old: Persistent, New: Persistent>(
        self,
        convert: impl FnMut(&Old, &Remap) -> New + 'a,
    ) -> Self {
        self.step::<Old, New>(Plain(convert))
    }

    /// [`convert`](Self::convert) for an `#[extendible]` `Old`: the converter sees every
    /// field, extension fields included, through an [`Ext`] view. An old object that
    /// lacks groups this build knows is upgraded first, in the converting transaction
    /// (its groups are freed with it). Its groups are verified as the base is: damage is
    /// repaired from parity, or fails the migration (rolled back). As with `convert`, an `#[extendible]` `New` starts
    /// without groups, whose fields come from their `init`s on first access: what must
    /// survive the conversion goes into `New`'s base fields.
    pub fn convert_ext<Old: Extendible, New: Persistent>(
        self,
        convert: impl FnMut(&Ext<'_, Old>, &Remap) -> New + 'a,
    ) -> Self {
        self.step::<Old, New>(WithGroups(convert))
    }

    fn step<Old: Persistent, New: Persistent>(
        mut self,
        convert: impl Converter<Old, New> + 'a,
    ) -> Self {
        // Each type is either converted or produced, once: a chain (A to B, B to C) would
        // convert the new B objects again and hand B-typed oids C objects.
        let (old, new) = (Old::TYPE_ID, New::TYPE_ID);
        let clash = if old == new {
            Some(("both have type id", old))
        } else if self.steps.iter().any(|s| s.old().0 == old) {
            Some(("this migration already converts type id", old))
        } else if self.steps.iter().any(|s| s.new_id() == old) {
            Some(("this migration produces objects of type id", old))
        } else if self
            .steps
            .iter()
            .any(|s| s.old().0 == new || s.new_id() == new)
        {
            Some(("this migration already converts to or from type id", new))
        } else {
            None
        };
        if let Some((why, id)) = clash {
            self.error.get_or_insert(Error::config(format!(
                "migrating `{}` to `{}`: {why} {id:#010x}; give the new definition another \
                 name or `#[pgl(id = N)]`, and convert each old type once, to a type no \
                 other step converts",
                Old::TYPE_NAME,
                New::TYPE_NAME,
            )));
        }
        self.steps.push(Box::new(Conversion {
            convert,
            types: PhantomData::<fn(&Old) -> New>,
        }));
        self
    }

    /// Converts at most `n` objects per transaction (default: as many as half a lane
    /// holds). Smaller batches log less per commit; any size is crash-safe.
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = Some(n.max(1));
        self
    }

    /// Runs the migration, holding the pool's root lock (so `pool.root` waits for it):
    /// allocates a new object for every old one, converts them, moves the root if it was
    /// one of them, frees the old ones. It takes as many transactions as its size needs
    /// (see [`batch`](Self::batch)); a crash anywhere leaves the pool's reachable data
    /// wholly old or wholly new. The next `run` first deals with the interrupted
    /// migration: before its switch, any migration rolls it back (frees its new
    /// objects); after it, a migration with its conversions finishes it (frees the old
    /// objects; its pairs are in the map returned), and one without them is refused with
    /// [`Error::InvalidConfig`], changing nothing. Then it converts whatever is still old
    /// (objects of types only this run converts).
    /// An error before the switch (a full pool, an old object that cannot be read) is
    /// returned after rolling the migration back, so the pool is as it was. After the
    /// switch the old objects are unreachable: one that cannot be freed (damaged beyond
    /// repair) is left as it is and listed by [`Remap::not_freed`], and the migration
    /// finishes; another error (an I/O error) is returned, and the next `run` frees the
    /// rest of the old objects.
    /// Oids of old objects held by objects of types it does not convert are the caller's
    /// to remap (with the returned map); convert those types too to keep them consistent.
    ///
    /// Other threads may run transactions meanwhile, but not on the old objects: it first
    /// waits for the transactions under way to end, then, until it returns, refuses with
    /// [`Error::Migrating`] every transaction of another thread that would change, free or
    /// create an object of a type it converts (a change to an object already converted
    /// would be lost at the switch; one created after the listing would stay old). Reads
    /// go on; a thread retries its change on the new objects once `run` is done (`pool.root`
    /// waits for it). A `pool.open_mut` handle held on another thread past 10 s makes it
    /// fail with [`Error::Conflict`], changing nothing.
    pub fn run(self) -> Result<Remap> {
        let Migration {
            pool,
            mut steps,
            error,
            batch,
        } = self;
        if let Some(e) = error {
            return Err(e);
        }
        // It commits transactions of its own, as many as its size needs.
        if pool.in_tx() {
            return Err(Error::InTransaction {
                what: "pool.migrate (or Migration::run)",
                instead: "run the migration outside transactions, before the program's own",
            });
        }
        let types = pool.types()?;
        for step in &steps {
            step.check_old(&types).map_err(|e| pool.named(e))?;
        }
        // Other threads' transactions that would change, free or create old objects are
        // refused from here on (a change to a converted object would be lost): set before
        // the root lock, whose waiters may hold lanes the guard waits for. (Without
        // conversions, it can only roll back new objects nothing points to.)
        let _guard = (!steps.is_empty())
            .then(|| pool.guard_migration(steps.iter().map(|s| s.old().0).collect()))
            .transpose()?;
        let lane = pool.lane_capacity();
        let anchor = pool.journal_word_offset();
        pool.with_root_word(|root_word, _| {
            // The pairs of an interrupted migration this run finished, if any: what is
            // still old is converted below all the same, remapping through them too.
            let done = resume(pool, &steps, anchor, batch, lane)?;
            let objects = pool.objects()?;
            let olds: Vec<Vec<u64>> = steps
                .iter()
                .map(|s| {
                    let (id, size) = s.old();
                    objects
                        .iter()
                        .filter(|(_, h)| h.type_id == id && h.size == size)
                        .map(|&(off, _)| off)
                        .collect()
                })
                .collect();
            if olds.iter().all(Vec::is_empty) {
                return Ok(done);
            }
            let built = build_and_switch(pool, &mut steps, &olds, anchor, batch, root_word, done);
            let (journal, remap) = match built {
                Ok(built) => built,
                Err(e) => {
                    // Before the switch: what was built is freed again now, not left
                    // to hold the pool's space until a next run. If that fails too,
                    // the journal stays for the next run, and `e` is the news.
                    let _ = roll_back_unswitched(pool, anchor, batch, lane);
                    return Err(e);
                }
            };
            let by_old: HashMap<u64, usize> = olds
                .iter()
                .enumerate()
                .flat_map(|(k, olds)| olds.iter().map(move |&o| (o, k)))
                .collect();
            let mut remap = remap;
            let left = finish(
                pool,
                &steps,
                &journal,
                0,
                &[],
                &by_old,
                HashMap::new(),
                batch,
                lane,
                anchor,
            )?;
            remap.left.extend(left);
            Ok(remap)
        })
    }
}

/// Allocates a new object for each of `olds` (recording each pair in a new journal),
/// converts them, and moves the root to the new objects in the switch. Returns the
/// journal and the map: `done`'s pairs (of a migration finished before this one) and
/// this one's.
fn build_and_switch(
    pool: &Pool,
    steps: &mut [Box<dyn Step + '_>],
    olds: &[Vec<u64>],
    anchor: u64,
    batch: Option<usize>,
    root_word: u64,
    done: Remap,
) -> Result<(Journal, Remap)> {
    let lane = pool.lane_capacity();
    let root = pool.meta_word(root_word);
    // New objects, recorded as they are made: nothing reachable points to them.
    let mut journal = pool.tx(|tx| Journal::create(tx, anchor))?;
    for (step, olds) in steps.iter().zip(olds) {
        let n = batch.unwrap_or_else(|| fit(lane, 96));
        let before = journal.len();
        in_batches(pool, 0..olds.len(), n, |tx, r| {
            // What an aborted attempt recorded in DRAM is forgotten.
            journal.truncate(before + r.start);
            for &old in &olds[r] {
                let new = step.alloc_new(tx)?;
                journal.push(tx, old, new)?;
            }
            Ok(())
        })?;
    }
    let pairs = pool.tx(|tx| journal.pairs(tx, 0, journal.len()))?;
    // This migration's pairs last: an offset in both is an old object of this one, whose
    // block held an old object of the finished one.
    let remap = Remap {
        map: done.map.into_iter().chain(pairs).collect(),
        left: done.left,
    };
    // Converted, with every oid of the migration remapped.
    for (step, olds) in steps.iter_mut().zip(olds) {
        let n = batch.unwrap_or_else(|| fit(lane, 2 * step.new_size() + 128));
        in_batches(pool, 0..olds.len(), n, |tx, r| {
            for &old in &olds[r] {
                step.convert(tx, &remap, old, remap.map[&old])?;
            }
            Ok(())
        })?;
    }
    // The switch: the new objects become the reachable ones.
    pool.tx(|tx| {
        journal.switch(tx)?;
        if let Some(&new) = remap.map.get(&root) {
            tx.set_meta_word(root_word, new);
        }
        Ok(())
    })?;
    Ok((journal, remap))
}

/// Objects per transaction when each logs about `per_object` bytes: half a lane's worth.
pub(super) fn fit(lane: u64, per_object: u64) -> usize {
    (lane / 2 / per_object.max(1)).clamp(1, 4096) as usize
}

/// Runs `f` over the index range `todo` in transactions of up to `n` indices; a batch too
/// large for a lane is split (its transaction aborted, nothing of it done). `f` may run more
/// than once for a batch (a split, or a conflict retried): it starts from the same state.
pub(super) fn in_batches(
    pool: &Pool,
    todo: Range<usize>,
    n: usize,
    f: impl FnMut(&Tx<'_>, Range<usize>) -> Result<()>,
) -> Result<()> {
    batches_until(pool, todo, n, f).map_err(|(_, e)| e)
}

/// `in_batches`, whose error also says where the batch that failed starts (the indices
/// before it are done).
pub(super) fn batches_until(
    pool: &Pool,
    todo: Range<usize>,
    mut n: usize,
    mut f: impl FnMut(&Tx<'_>, Range<usize>) -> Result<()>,
) -> Result<(), (usize, Error)> {
    let mut at = todo.start;
    while at < todo.end {
        let k = n.min(todo.end - at);
        match pool.tx(|tx| f(tx, at..at + k)) {
            Ok(()) => at += k,
            Err(Error::TxTooLarge { .. }) if k > 1 => n = k / 2,
            Err(e) => return Err((at, e)),
        }
    }
    Ok(())
}

/// A Manual migration a crash interrupted, as [`Pool::pending_migration`] finds it: the
/// next [`Migration::run`] deals with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingMigration {
    /// Whether it had switched (made its new objects the reachable ones): then a
    /// migration with its conversions finishes it; else any migration rolls it back.
    pub switched: bool,
    /// Objects it converts (old/new pairs recorded).
    pub objects: u64,
    /// Before the switch: new objects still to free when rolling back. After: old
    /// objects still to free when finishing (those an earlier run left as they are,
    /// damaged, included: the next run tries them again).
    pub to_free: u64,
}

impl Pool {
    /// The Manual migration a crash interrupted, if any (its journal is in the pool).
    /// Reading it changes nothing.
    pub fn pending_migration(&self) -> Result<Option<PendingMigration>> {
        let anchor = self.journal_word_offset();
        self.with_root_word(|_, _| {
            let head = self.meta_word(anchor);
            if head == 0 {
                return Ok(None);
            }
            let l = self.tx(|tx| Journal::load(tx, head))?;
            let switched = l.state == State::Freeing;
            let to_free = if switched {
                l.pairs.len() - l.freed + l.left.len()
            } else {
                l.pairs.iter().filter(|p| p.1 != 0).count()
            };
            Ok(Some(PendingMigration {
                switched,
                objects: l.pairs.len() as u64,
                to_free: to_free as u64,
            }))
        })
    }

    /// Starts a Manual-model migration: add a [`Migration::convert`] per changed type,
    /// then [`Migration::run`] it.
    pub fn migration(&self) -> Migration<'_> {
        Migration {
            pool: self,
            steps: Vec::new(),
            error: None,
            batch: None,
        }
    }

    /// The Manual model for one type: rewrites every object of type `Old` as a `New`
    /// computed by `convert`; see [`Migration`]. Returns the map.
    pub fn migrate<Old: Persistent, New: Persistent>(
        &self,
        convert: impl FnMut(&Old, &Remap) -> New,
    ) -> Result<Remap> {
        self.migration().convert(convert).run()
    }
}
