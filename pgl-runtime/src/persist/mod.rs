//! The media layer: the mapping of a pool file and the only way pgl makes bytes durable
//! (flush + fence). Nothing here knows about objects or transactions.

mod extents;
mod flush;
mod media;
mod new_file;
mod sim;

pub(crate) use extents::DataExtents;
/// pgl's streaming copy, public for the floor benchmarks (`benches/support/floor.rs`),
/// which stream records as pgl does.
#[doc(hidden)]
pub use flush::stream_copy;
pub use flush::FlushMode;
pub(crate) use media::try_lock_file;
pub(crate) use media::FileKind;
pub use media::Media;
pub(crate) use sim::SIM_ALREADY_OPEN;
pub use sim::{CrashPoint, CrashSim};
