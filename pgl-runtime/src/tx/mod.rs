//! Transactions: micro-buffers, redo lanes, lock tables, commit, recovery.

mod buffer;
mod commit;
mod engine;
mod handle;
mod held;
mod lane;
mod locks;
mod place;
mod record;
mod recovery;
mod registry;
mod repair;
mod tail;
#[allow(clippy::module_inception)]
mod tx;

pub use engine::VerifyPolicy;
pub(crate) use engine::{Engine, Options};
pub use handle::{Mut, Read, Ref};
pub(crate) use locks::Held;
pub use place::{AsPlace, Place};
pub(crate) use recovery::{clear_dirty_zones, dirty_zones, recover, repair_lanes, zone_is_dirty};
pub use registry::TypeInfo;
pub(crate) use registry::{list as list_types, TypeCache};
pub(crate) use repair::{repairable, Outcome, RepairCounters};
pub(crate) use tail::{link_at_end, TAIL_LINK};
pub use tx::Tx;
pub(crate) use tx::{
    check_is, enter_detached, get, in_tx, leave_detached, read_lock, run, stripe_of, try_repair,
    verify_in_place,
};
