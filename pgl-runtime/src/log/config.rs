//! `LogConfig`: how a new log is made.
//!
//! Invariant: a config that `area` accepts describes a valid log: a policy in range and a
//! record area of whole lines, at least `MIN_CAPACITY` and at most `MAX_CAPACITY` bytes.

use super::format::{LINE, MAX_CAPACITY, MIN_CAPACITY};
use super::policy::ForcePolicy;
use crate::persist::FlushMode;
use crate::{Error, Result};

/// How a new log is made.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// Bytes of the record area (rounded up to a multiple of 64; at least 4 KiB, at most
    /// 128 TiB).
    pub capacity: u64,
    /// When `complete` forces (stored in the log; `Log::open` uses it).
    pub policy: ForcePolicy,
    /// How stores are made durable; `None` picks one for the file (as for pools).
    pub flush: Option<FlushMode>,
    /// Whether `Log::create` gives the file all its blocks up front, as `pmemlog_create`
    /// does (default `false`: sparse). See `Config::preallocate` for what it buys.
    pub preallocate: bool,
}

impl LogConfig {
    /// A log whose record area holds `capacity` bytes, with the `Sync` policy.
    pub fn new(capacity: u64) -> LogConfig {
        LogConfig {
            capacity,
            policy: ForcePolicy::Sync,
            flush: None,
            preallocate: false,
        }
    }

    /// The same with force policy `policy`.
    pub fn policy(mut self, policy: ForcePolicy) -> LogConfig {
        self.policy = policy;
        self
    }

    /// The same with the file's blocks allocated at create (see
    /// [`LogConfig::preallocate`](LogConfig#structfield.preallocate)).
    pub fn preallocate(mut self, on: bool) -> LogConfig {
        self.preallocate = on;
        self
    }

    /// The same with flush mode `mode` (ignored, as by the pool, if this CPU does not have
    /// it: the file's own mode is used then).
    pub fn flush(mut self, mode: FlushMode) -> LogConfig {
        self.flush = Some(mode);
        self
    }

    /// The record area's size, rounded up to whole lines; `Err` if the config is invalid.
    pub(super) fn area(&self) -> Result<u64> {
        self.policy.validate()?;
        // Checked before rounding up: near `u64::MAX` the rounding overflows.
        if self.capacity > MAX_CAPACITY {
            return Err(Error::config(format!(
                "log capacity {} bytes: a log holds at most {MAX_CAPACITY} (128 TiB); create \
                 a smaller log",
                self.capacity
            )));
        }
        let cap = self.capacity.div_ceil(LINE) * LINE;
        if cap < MIN_CAPACITY {
            return Err(Error::config(format!(
                "log capacity {} bytes: a log needs at least {MIN_CAPACITY}",
                self.capacity
            )));
        }
        Ok(cap)
    }
}
