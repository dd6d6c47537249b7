//! The types a Manual migration (`leds::migrate`) converts, guarded while it runs: a
//! transaction of another thread that would change, free or create an object of one of
//! them fails with `Error::Migrating`, since the migration would lose the change (it has
//! copied the object already, or will free it).
//!
//! Invariant: the guard is set, then the pool drained (every lane taken once, so every
//! transaction that began before has ended), before the migration lists its objects; a
//! transaction that begins later takes a lane the drain released, so it sees the guard.
//! So no transaction but the migration's changes an old object between the listing and
//! the end of the migration. Unguarded, the check is one relaxed load.

use super::engine::Engine;
use crate::{Error, Result};
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ThreadId;

/// The guard of one pool (`Engine::migrating`).
#[derive(Default)]
pub(crate) struct Migrating {
    /// Whether a migration runs (`types` says which, and on which thread).
    on: AtomicBool,
    types: RwLock<Option<(ThreadId, Vec<u32>)>>,
    /// Held by the migration that runs: one at a time.
    running: Mutex<()>,
}

impl Migrating {
    /// Refuses to `what` ("change", "free", "create") an object of type `type_id` at
    /// `offset` (0 for a new one) if a migration on another thread converts that type.
    #[inline]
    pub(crate) fn check(&self, what: &'static str, type_id: u32, offset: u64) -> Result<()> {
        if !self.on.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.check_types(what, type_id, offset)
    }

    #[cold]
    fn check_types(&self, what: &'static str, type_id: u32, offset: u64) -> Result<()> {
        match &*self.types.read() {
            Some((thread, types))
                if *thread != std::thread::current().id() && types.contains(&type_id) =>
            {
                Err(Error::Migrating {
                    what,
                    type_id,
                    offset,
                })
            }
            _ => Ok(()),
        }
    }
}

/// Old types guarded for the migration of this thread, until it drops.
pub(crate) struct MigrationGuard<'e> {
    eng: &'e Engine,
    _running: MutexGuard<'e, ()>,
}

impl Drop for MigrationGuard<'_> {
    fn drop(&mut self) {
        let m = &self.eng.migrating;
        m.on.store(false, Ordering::Relaxed);
        *m.types.write() = None;
    }
}

impl Engine {
    /// Guards `types` (see the module docs) for a migration on this thread, once every
    /// transaction that began before has ended. Call it outside transactions; it waits
    /// for a migration another thread runs. `Error::Conflict` if a transaction or a
    /// `pool.open_mut` handle of another thread stayed open for `repair::WAIT`.
    pub(crate) fn guard_migration(&self, types: Vec<u32>) -> Result<MigrationGuard<'_>> {
        if super::thread::detached_held(self.id) {
            return Err(Error::InTransaction {
                what: "Migration::run",
                instead: "commit or drop this thread's pool.open_mut handles first: the \
                          migration waits for every transaction of the pool to end",
            });
        }
        let m = &self.migrating;
        let guard = MigrationGuard {
            eng: self,
            _running: m.running.lock(),
        };
        *m.types.write() = Some((std::thread::current().id(), types));
        m.on.store(true, Ordering::Relaxed);
        // The drain: a lane's release after the store above orders it before every later
        // transaction on that lane.
        if self.freeze().is_none() {
            return Err(Error::Conflict { offset: 0 });
        }
        Ok(guard)
    }
}
