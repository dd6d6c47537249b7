//! The Reset retention model of LEDS (discard the pool when its types changed), for
//! comparison with `#[extendible]`; the Manual model is in `migrate`.

use super::Extendible;
use crate::persistent::Persistent;
use crate::pool::{Config, Pool};
use crate::{Error, Result};
use std::path::Path;

impl Pool {
    /// The Reset model: removes the pool file at `path` (if any) and creates a new, empty
    /// pool there. Every object is lost; use it when the data can be rebuilt. A pool that
    /// is open (in another process, or as a `Pool` of this one) is refused with
    /// `Error::AlreadyOpen`, and left alone: its owner would go on committing to a file no
    /// longer there. A file that is not a pool (no pool header magic) is refused with
    /// `Error::NotAPool` and left alone too, as is anything that is not a regular file (a
    /// FIFO, a device). An invalid `config` is refused (`Error::InvalidConfig`) before
    /// anything is removed. A symbolic link is followed: the pool it names is reset, and
    /// the link keeps naming it.
    pub fn reset(path: impl AsRef<Path>, config: &Config) -> Result<Pool> {
        // The old pool goes only once the new one can be made.
        config.validate()?;
        let path = &resolve_links(path.as_ref())?;
        // Hold the old file's lock while it is removed, so no one opens it meanwhile.
        let _old = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
        {
            Ok(f) => {
                if !f.metadata().is_ok_and(|m| m.is_file()) {
                    return Err(Error::NotAPool {
                        path: path.to_owned(),
                        reason: "not a regular file: reset removes only pool files, and left \
                                 this one alone"
                            .into(),
                    });
                }
                if !crate::persist::try_lock_file(&f) {
                    return Err(Error::AlreadyOpen {
                        path: path.to_owned(),
                        what: "pool",
                        instead: "drop every `Pool` of it before resetting it",
                    });
                }
                if !crate::pool::may_be_pool(&f).map_err(|e| Error::Io {
                    op: "reset (read the old pool's header)",
                    path: path.to_owned(),
                    source: e,
                })? {
                    return Err(Error::NotAPool {
                        path: path.to_owned(),
                        reason: "no pgl pool header in either copy: reset removes only pool \
                                 files, and left this one alone"
                            .into(),
                    });
                }
                Some(f)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(Error::Io {
                    op: "reset (open the old pool)",
                    path: path.to_owned(),
                    source: e,
                })
            }
        };
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
    /// [`type_key`] gives, or [`type_keys`] for an `#[extendible]` struct and its
    /// extension groups) with another layout than this build's, resets it instead.
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
}

/// `path` with the symbolic links it names followed (a dangling one too: its target is
/// where the new pool goes), so that a reset replaces the pool a link names and keeps the
/// link, rather than the link with a file beside the old pool.
fn resolve_links(path: &Path) -> Result<std::path::PathBuf> {
    // Linux's own limit on links followed in one lookup.
    const MAX_LINKS: usize = 40;
    let mut p = path.to_owned();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&p).map_err(|e| Error::Io {
                    op: "reset (read the symbolic link)",
                    path: p.clone(),
                    source: e,
                })?;
                p = match p.parent() {
                    Some(dir) => dir.join(target),
                    None => target,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(Error::Io {
        op: "reset (follow the symbolic links of)",
        path: path.to_owned(),
        source: std::io::Error::from_raw_os_error(libc::ELOOP),
    })
}

/// `(TYPE_ID, LAYOUT)` of `T`, for [`Pool::open_or_reset`]. For an `#[extendible]`
/// struct this is its base only: [`type_keys`] adds its extension groups.
pub fn type_key<T: Persistent>() -> (u32, u64) {
    (T::TYPE_ID, T::LAYOUT)
}

/// `(TYPE_ID, LAYOUT)` of an `#[extendible]` struct and of each of its extension groups,
/// for [`Pool::open_or_reset`]: a group whose fields changed since the pool stored it
/// then resets the pool too. Types that `T` reaches through its `Oid` fields are not
/// included: list their keys too.
pub fn type_keys<T: Extendible>() -> Vec<(u32, u64)> {
    std::iter::once(type_key::<T>())
        .chain(T::GROUP_KEYS.iter().copied())
        .collect()
}
