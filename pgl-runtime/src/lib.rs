//! The runtime of pgl: media layer, pool, heap, transactions. Use it through the `pgl` crate.
//!
//! Layers, bottom to top (no module imports one above it): `checksum`, `geometry`,
//! `smallmap`, `thread_token` → `persist` → `heap` → `integrity` → `tx` → `inject` → `pool` → `leds`;
//! `log` stands on `persist`, `checksum` and `thread_token` alone.
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod checksum;
mod error;
pub mod fault;
pub mod geometry;
mod heap;
mod inject;
pub mod integrity;
mod leds;
pub mod log;
pub mod persist;
pub mod persistent;
mod pool;
mod smallmap;
mod stats;
mod thread_token;
mod tx;
mod values;

/// Test-only: `normal`, or `miri` under Miri, which interprets a test about a million
/// times slower than it runs natively: a few hundred bytes of input still take every path
/// (and every unsafe access) of the pure modules' code.
#[cfg(test)]
pub(crate) const fn miri_or(normal: usize, miri: usize) -> usize {
    if cfg!(miri) {
        miri
    } else {
        normal
    }
}

/// A fresh path for a unit test's pool file: on tmpfs where there is one (a disk-backed
/// file system would have every commit msync).
#[cfg(test)]
pub(crate) fn scratch_pool(name: &str) -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("pgl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

pub use error::{Error, Result};
pub use heap::layout::ObjectHeader;
pub use heap::{ClassTable, SizeClasses};
pub use inject::Fault;
pub use leds::{
    type_key, type_keys, Ext, ExtLink, ExtMut, Extendible, ExtendibleData, Migration,
    PendingMigration, Remap, MAX_GROUPS, UPGRADE_BATCH,
};
pub use log::{ForcePolicy, Log, LogConfig, LogStats, Lsn, RecoveryReport, Reservation};
pub use persist::{CrashPoint, CrashSim, FlushMode};
pub use persistent::{Oid, Persistent};
pub use pool::{
    Config, Detached, Header, ObjectListing, Pool, PoolInfo, ScrubReport, FORMAT_VERSION,
};
pub use stats::Stats;
pub use tx::{AsPlace, Mut, Place, Read, Ref, Tx, TypeInfo, VerifyPolicy};
pub use values::{PBool, PBytes, PStr};

/// Items the code `#[extendible]` generates names (through the facade). Not an API.
#[doc(hidden)]
pub mod __leds {
    pub use crate::leds::{
        all_inline, inline_places, run_init, zeroed, ExtGroups, ExtPlaces, GroupPlace, GroupRef,
        ObjImage,
    };
}

/// The items most programs need.
pub mod prelude {
    pub use crate::{
        AsPlace, Config, Error, Oid, PBool, PBytes, PStr, Persistent, Pool, Result, Tx,
    };
}
