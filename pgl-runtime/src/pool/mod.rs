//! The pool: a file holding a replicated header, redo lanes and zones; creation, opening
//! (with header repair and crash recovery), the root object, growth.

mod checksums;
mod config;
mod header;
mod open;
#[allow(clippy::module_inception)]
mod pool;
mod run_classes;
mod scrub;

pub use config::Config;
pub(crate) use header::{may_be_pool, MAGIC};
pub use header::{Header, FORMAT_VERSION, LAYOUT_MAX};
pub use pool::{Detached, ObjectListing, Pool, PoolInfo};
pub use scrub::ScrubReport;
