//! Transactions: micro-buffers, redo lanes, lock tables, commit, recovery.

mod backoff;
mod buffer;
mod commit;
mod deferred;
mod engine;
mod handle;
mod held;
mod lane;
mod locks;
mod migrating;
mod place;
mod ranged;
mod read;
mod record;
mod recovery;
mod registry;
mod repair;
mod run;
mod tail;
mod thread;
#[allow(clippy::module_inception)]
mod tx;
mod vetted;

pub(crate) use buffer::Buffer;
pub use engine::VerifyPolicy;
pub(crate) use engine::{Engine, Options};
pub use handle::{Mut, Read, Ref};
pub(crate) use locks::Held;
pub(crate) use migrating::MigrationGuard;
pub use place::{AsPlace, Place};
pub(crate) use read::{check_is, conflict_in_tx, get, read_lock, stripe_of};
pub(crate) use recovery::{clear_dirty_zones, dirty_zones, recover, repair_lanes, zone_is_dirty};
pub use registry::TypeInfo;
pub(crate) use registry::{list as list_types, TypeCache};
pub(crate) use repair::{repairable, Outcome, RepairCounters, WAIT};
pub(crate) use run::{run, try_repair};
pub(crate) use tail::{link_at_end, TAIL_LINK};
pub(crate) use thread::{detached_held, enter_detached, in_tx, leave_detached};
pub use tx::Tx;
pub(crate) use tx::{verify_block, GroupScope};
