//! The Manual retention model of LEDS, for comparison with `#[extendible]`: every object
//! of an old type is rewritten as a new type, oids between them remapped, the old ones
//! freed and the root moved.
//!
//! Invariant: a migration is one transaction, however many types it converts: new objects
//! allocated, converted, references remapped, old objects freed, the root moved. A crash
//! leaves the pool wholly before or wholly after it, so no object of a new type ever holds
//! the oid of a freed old one. Its size is bounded by what one transaction may log
//! (`Error::TxTooLarge` otherwise, with nothing changed).

use crate::persistent::{Oid, Persistent};
use crate::pool::Pool;
use crate::tx::Tx;
use crate::{Error, Result};
use std::collections::HashMap;
use std::marker::PhantomData;

/// The old-to-new oid map of a migration: converters use it to remap the oids an old
/// object holds (`remap.oid(old.next)`), whichever of the migration's types they point to.
#[derive(Debug, Default)]
pub struct Remap {
    map: HashMap<u64, u64>,
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
}

/// One old-type-to-new-type conversion of a migration.
trait Step {
    /// The old type's id and payload size, which pick its objects out of the heap.
    fn old(&self) -> (u32, u64);
    /// The new type's id.
    fn new_id(&self) -> u32;
    fn alloc_new(&self, tx: &Tx<'_>) -> Result<u64>;
    fn convert(&mut self, tx: &Tx<'_>, remap: &Remap, old: u64, new: u64) -> Result<()>;
    fn free_old(&self, tx: &Tx<'_>, old: u64) -> Result<()>;
}

struct Conversion<Old, New, F> {
    convert: F,
    types: PhantomData<fn(&Old) -> New>,
}

impl<Old: Persistent, New: Persistent, F: FnMut(&Old, &Remap) -> New> Step
    for Conversion<Old, New, F>
{
    fn old(&self) -> (u32, u64) {
        (Old::TYPE_ID, core::mem::size_of::<Old>() as u64)
    }

    fn new_id(&self) -> u32 {
        New::TYPE_ID
    }

    fn alloc_new(&self, tx: &Tx<'_>) -> Result<u64> {
        tx.alloc_zeroed::<New>().map(Oid::raw)
    }

    fn convert(&mut self, tx: &Tx<'_>, remap: &Remap, old: u64, new: u64) -> Result<()> {
        let value = (self.convert)(&*tx.get(Oid::<Old>::from_raw(old))?, remap);
        *tx.open(Oid::<New>::from_raw(new))? = value;
        Ok(())
    }

    fn free_old(&self, tx: &Tx<'_>, old: u64) -> Result<()> {
        tx.free(Oid::<Old>::from_raw(old))
    }
}

/// A Manual-model migration under construction: [`Pool::migration`], one
/// [`convert`](Migration::convert) per type that changes, then [`run`](Migration::run).
/// Converting several types in one migration lets each remap oids of the others (a root
/// holding nodes, nodes holding nodes) in the same crash-atomic transaction.
#[must_use = "a migration does nothing until `run`"]
pub struct Migration<'a> {
    pool: &'a Pool,
    steps: Vec<Box<dyn Step + 'a>>,
    error: Option<Error>,
}

impl<'a> Migration<'a> {
    /// Adds the conversion of every object of type `Old` to a `New` computed by `convert`
    /// (which gets the old-to-new [`Remap`] of the whole migration to translate the oids
    /// it holds). `Old` must be the definition the pool stored (same type id and layout);
    /// `New` needs another type id.
    pub fn convert<Old: Persistent, New: Persistent>(
        mut self,
        convert: impl FnMut(&Old, &Remap) -> New + 'a,
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

    /// Runs the migration in one transaction (holding the pool's root lock, so
    /// `pool.root` waits for it): allocates a new object for every old one, converts
    /// them, frees the old ones and moves the root if it was one of them. Oids of old
    /// objects held by objects of types it does not convert are the caller's to remap
    /// (with the returned map); convert those types too to keep it one transaction.
    ///
    /// The old objects are listed before the transaction starts: run it while no other
    /// thread creates or frees objects of the old types (as a program upgrading its data
    /// at start-up does).
    pub fn run(self) -> Result<Remap> {
        let Migration {
            pool,
            mut steps,
            error,
        } = self;
        if let Some(e) = error {
            return Err(e);
        }
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
        pool.with_root_word(|root_word, root| {
            pool.tx(|tx| {
                let mut remap = Remap::default();
                for (step, olds) in steps.iter().zip(&olds) {
                    for &off in olds {
                        remap.map.insert(off, step.alloc_new(tx)?);
                    }
                }
                for (step, olds) in steps.iter_mut().zip(&olds) {
                    for &off in olds {
                        step.convert(tx, &remap, off, remap.map[&off])?;
                    }
                }
                for (step, olds) in steps.iter().zip(&olds) {
                    for &off in olds {
                        step.free_old(tx, off)?;
                    }
                }
                if let Some(&new) = remap.map.get(&root) {
                    tx.set_meta_word(root_word, new);
                }
                Ok(remap)
            })
        })
    }
}

impl Pool {
    /// Starts a Manual-model migration: add a [`Migration::convert`] per changed type,
    /// then [`Migration::run`] it.
    pub fn migration(&self) -> Migration<'_> {
        Migration {
            pool: self,
            steps: Vec::new(),
            error: None,
        }
    }

    /// The Manual model for one type: rewrites every object of type `Old` as a `New`
    /// computed by `convert`, in one transaction; see [`Migration`]. Returns the map.
    pub fn migrate<Old: Persistent, New: Persistent>(
        &self,
        convert: impl FnMut(&Old, &Remap) -> New,
    ) -> Result<Remap> {
        self.migration().convert(convert).run()
    }
}
