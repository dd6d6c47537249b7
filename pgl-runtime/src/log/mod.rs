//! The Arcadia log: a concurrent, crash-consistent, corruption-detecting persistent log of
//! records in a circular area, with reserve/copy/complete/force, three force policies and
//! recovery by scanning self-validating records. Stands on `persist` and `checksum` alone.

pub mod format;
mod inspect;
#[allow(clippy::module_inception)]
mod log;
mod policy;
mod recovery;

pub use inspect::{Inspection, RecordInfo};
pub use log::{Iter, Log, LogConfig, Lsn, Record, Reservation};
pub use policy::{ForcePolicy, LogStats, MAX_POLICY_N, WINDOW_BUCKETS};
pub use recovery::{RecoveryReport, TornRecord};
