//! The Arcadia log: a concurrent, crash-consistent, corruption-detecting persistent log of
//! records in a circular area, with reserve/copy/complete/force, three force policies and
//! recovery by scanning self-validating records. Stands on `persist` and `checksum` alone.

mod config;
pub mod format;
mod inspect;
mod iter;
#[allow(clippy::module_inception)]
mod log;
mod policy;
mod recovery;
mod reservation;

pub use config::LogConfig;
pub use inspect::{Inspection, RecordInfo};
pub use iter::{Iter, Record};
pub use log::{Log, Lsn};
pub use policy::{ForcePolicy, LogStats, MAX_POLICY_N, WINDOW_BUCKETS};
pub use recovery::{RecoveryReport, TornRecord};
pub use reservation::Reservation;
