//! Force policies (when a completed record is made durable) and the log's counters.
//!
//! Invariant: a policy only decides *when* `complete` calls `force`; whatever it decides,
//! `force(lsn)` returns only once every record up to `lsn` is complete and durable, so
//! a policy trades freshness (the vulnerability window) for speed, never consistency.

use crate::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// When `complete` (and so `append`) forces the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForcePolicy {
    /// Every record is forced by the thread that completes it: nothing completed is ever
    /// lost, one ordering point per record.
    Sync,
    /// Group commit: a shared counter of completed records; the thread whose completion
    /// brings it to a multiple of `n` forces the batch.
    GroupCommit(u32),
    /// Frequency-based force (Arcadia): the thread completing an LSN divisible by `f`
    /// (or dropping its reservation) forces the batch. No shared counter: LSNs are consecutive, so every `f`-th record
    /// forces. At most about `f × threads` completed records are unforced (more while a
    /// thread holds a reservation open: a batch force stops short of it).
    Frequency(u32),
}

/// The largest window or frequency a policy may have.
pub const MAX_POLICY_N: u32 = 1 << 12;

impl ForcePolicy {
    /// The code and parameter stored in the superline.
    pub(crate) fn encode(self) -> (u32, u64) {
        match self {
            ForcePolicy::Sync => (0, 0),
            ForcePolicy::GroupCommit(n) => (1, u64::from(n)),
            ForcePolicy::Frequency(f) => (2, u64::from(f)),
        }
    }

    /// The policy a superline stores, if it names one.
    pub(crate) fn decode(code: u32, n: u64) -> Option<ForcePolicy> {
        let n = u32::try_from(n).ok();
        let p = match (code, n) {
            (0, _) => ForcePolicy::Sync,
            (1, Some(n)) => ForcePolicy::GroupCommit(n),
            (2, Some(f)) => ForcePolicy::Frequency(f),
            _ => return None,
        };
        p.validate().ok().map(|()| p)
    }

    /// `Err` if the window or frequency is 0 or above [`MAX_POLICY_N`].
    pub fn validate(self) -> Result<()> {
        match self {
            ForcePolicy::Sync => Ok(()),
            ForcePolicy::GroupCommit(n) | ForcePolicy::Frequency(n) => {
                if n == 0 || n > MAX_POLICY_N {
                    Err(Error::config(format!(
                        "force policy {self}: the window or frequency must be 1 to {MAX_POLICY_N}"
                    )))
                } else {
                    Ok(())
                }
            }
        }
    }
}

impl fmt::Display for ForcePolicy {
    /// The names benchmarks and the CLI use: `sync`, `group-128`, `freq-8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForcePolicy::Sync => f.write_str("sync"),
            ForcePolicy::GroupCommit(n) => write!(f, "group-{n}"),
            ForcePolicy::Frequency(n) => write!(f, "freq-{n}"),
        }
    }
}

impl FromStr for ForcePolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::config(format!(
                "unknown force policy {s:?}; use sync, group-N or freq-N (N from 1 to {MAX_POLICY_N})"
            ))
        };
        let p = match s.trim() {
            "sync" => ForcePolicy::Sync,
            t => {
                let (kind, n) = t.split_once('-').ok_or_else(bad)?;
                let n: u32 = n.parse().map_err(|_| bad())?;
                match kind {
                    "group" => ForcePolicy::GroupCommit(n),
                    "freq" => ForcePolicy::Frequency(n),
                    _ => return Err(bad()),
                }
            }
        };
        p.validate().map_err(|_| bad())?;
        Ok(p)
    }
}

/// Buckets of the vulnerability-window histogram: bucket `i` counts forces that found
/// `w` completed-but-unforced records with `2^(i-1) < w <= 2^i` (bucket 0: `w <= 1`).
pub const WINDOW_BUCKETS: usize = 16;

/// A snapshot of a log's counters since it was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogStats {
    /// Records completed since the log was opened (aborted ones included).
    pub completed: u64,
    /// Payload bytes reserved since the log was opened.
    pub bytes: u64,
    /// Forces that made records durable (one ordering point each).
    pub forces: u64,
    /// Records made durable by those forces.
    pub forced_records: u64,
    /// The vulnerability window now: records completed but not yet durable.
    pub window_now: u64,
    /// The largest window a force found.
    pub window_max: u64,
    /// Histogram of the window each force found (see [`WINDOW_BUCKETS`]).
    pub window_histogram: [u64; WINDOW_BUCKETS],
}

impl LogStats {
    /// Mean number of records a force made durable (the mean vulnerability window).
    pub fn window_mean(&self) -> f64 {
        if self.forces == 0 {
            0.0
        } else {
            self.forced_records as f64 / self.forces as f64
        }
    }
}

/// The histogram bucket of a window of `w` records.
pub(crate) fn bucket(w: u64) -> usize {
    if w <= 1 {
        0
    } else {
        ((64 - (w - 1).leading_zeros()) as usize).min(WINDOW_BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in [
            ForcePolicy::Sync,
            ForcePolicy::GroupCommit(128),
            ForcePolicy::Frequency(8),
            ForcePolicy::GroupCommit(256),
            ForcePolicy::Frequency(16),
        ] {
            assert_eq!(p.to_string().parse::<ForcePolicy>().unwrap(), p);
            let (c, n) = p.encode();
            assert_eq!(ForcePolicy::decode(c, n), Some(p));
        }
        assert_eq!(ForcePolicy::Frequency(8).to_string(), "freq-8");
        assert!("freq-0".parse::<ForcePolicy>().is_err());
        assert!("group-x".parse::<ForcePolicy>().is_err());
        assert!("fast".parse::<ForcePolicy>().is_err());
        assert_eq!(ForcePolicy::decode(9, 0), None);
        assert_eq!(ForcePolicy::decode(1, 0), None);
        assert_eq!(ForcePolicy::decode(2, u64::MAX), None);
    }

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(2), 1);
        assert_eq!(bucket(3), 2);
        assert_eq!(bucket(4), 2);
        assert_eq!(bucket(5), 3);
        assert_eq!(bucket(1 << 40), WINDOW_BUCKETS - 1);
    }
}
