//! The two other retention models of LEDS, for comparison with `#[extendible]`: Reset
//! (discard the pool when its types changed) and Manual (rewrite every object of an old
//! type as a new type).
//!
//! Invariant: a manual migration is one transaction — new objects allocated, converted,
//! references remapped, old objects freed, the root moved — so a crash leaves the pool
//! wholly before or wholly after it; its size is bounded by what one transaction may log
//! (`Error::TxTooLarge` otherwise, with nothing changed).

use crate::persistent::{Oid, Persistent};
use crate::pool::{Config, Pool};
use crate::{Error, Result};
use std::collections::HashMap;
use std::path::Path;

/// The old-to-new oid map of a manual migration: converters use it to remap the oids an
/// old object holds (`remap.oid(old.next)`).
#[derive(Debug, Default)]
pub struct Remap {
    map: HashMap<u64, u64>,
}

impl Remap {
    /// The new oid of a migrated object, or `oid` itself (cast) if it was not migrated
    /// (null, or an object of another type).
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

impl Pool {
    /// The Reset model: removes the pool file at `path` (if any) and creates a new, empty
    /// pool there. Every object is lost; use it when the data can be rebuilt.
    pub fn reset(path: impl AsRef<Path>, config: &Config) -> Result<Pool> {
        let path = path.as_ref();
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::Io {
                    op: "reset (remove the old pool)",
                    path: path.to_owned(),
                    source: e,
                })
            }
        }
        Pool::create(path, config)
    }

    /// The Reset model on mismatch: opens the pool at `path`, or creates it if there is
    /// none; if the pool stores a type of `types` (`(type id, layout)`, as
    /// [`type_key`] gives) with another layout than this build's, resets it instead.
    /// Returns the pool and whether it was reset.
    pub fn open_or_reset(
        path: impl AsRef<Path>,
        config: &Config,
        types: &[(u32, u64)],
    ) -> Result<(Pool, bool)> {
        let path = path.as_ref();
        if !path.exists() {
            return Pool::create(path, config).map(|p| (p, false));
        }
        let pool = Pool::open_with(path, config)?;
        let stale = pool.types()?.iter().any(|t| {
            types
                .iter()
                .any(|&(id, layout)| id == t.type_id && layout != t.layout)
        });
        if !stale {
            return Ok((pool, false));
        }
        drop(pool);
        Pool::reset(path, config).map(|p| (p, true))
    }

    /// The Manual model: rewrites every object of type `Old` as a `New` computed by
    /// `convert` (which gets the old-to-new [`Remap`] to translate the oids it holds),
    /// frees the old objects, and moves the root if it was one of them — all in one
    /// transaction (holding the pool's root lock, so `pool.root` waits for it). Oids of
    /// old objects held by objects of other types are the caller's to remap (with the
    /// returned map, in a transaction of its own). `Old` must be
    /// the definition the pool stored (same type id and layout); `New` needs another type
    /// id. Returns the map.
    pub fn migrate<Old: Persistent, New: Persistent>(
        &self,
        mut convert: impl FnMut(&Old, &Remap) -> New,
    ) -> Result<Remap> {
        if Old::TYPE_ID == New::TYPE_ID {
            return Err(Error::config(format!(
                "migrating `{}` to `{}`: both have type id {:#010x}; give the new definition \
                 another name or `#[pgl(id = N)]`",
                Old::TYPE_NAME,
                New::TYPE_NAME,
                Old::TYPE_ID
            )));
        }
        let size = core::mem::size_of::<Old>() as u64;
        let old: Vec<u64> = self
            .objects()?
            .into_iter()
            .filter(|(_, h)| h.type_id == Old::TYPE_ID && h.size == size)
            .map(|(off, _)| off)
            .collect();
        self.with_root_word(|root_word, root| {
            self.tx(|tx| {
                let mut remap = Remap::default();
                for &off in &old {
                    let new = tx.alloc_zeroed::<New>()?;
                    remap.map.insert(off, new.raw());
                }
                for &off in &old {
                    let value = convert(&*tx.get(Oid::<Old>::from_raw(off))?, &remap);
                    let new: Oid<New> = remap.oid(Oid::<Old>::from_raw(off));
                    *tx.open(new)? = value;
                }
                for &off in &old {
                    tx.free(Oid::<Old>::from_raw(off))?;
                }
                if let Some(&new) = remap.map.get(&root) {
                    tx.set_meta_word(root_word, new);
                }
                Ok(remap)
            })
        })
    }
}

/// `(TYPE_ID, LAYOUT)` of `T`, for [`Pool::open_or_reset`].
pub fn type_key<T: Persistent>() -> (u32, u64) {
    (T::TYPE_ID, T::LAYOUT)
}
