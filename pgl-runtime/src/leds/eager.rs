//! Eager upgrades: every object of an `#[extendible]` struct upgraded ahead of use, so
//! that no later transaction pays for it (the lazy upgrade, run over the whole pool at a
//! time the program chooses).
//!
//! Invariant: each object is upgraded by `Tx::upgrade` inside a transaction of at most
//! [`UPGRADE_BATCH`] objects, so a crash leaves each object upgraded or as it was, and a
//! second pass finishes the work; objects are listed once, before the transactions, and
//! an object freed or reused for another type since is passed over, never upgraded as
//! what it is not.

use super::Extendible;
use crate::persistent::Oid;
use crate::pool::Pool;
use crate::{Error, Result};

/// Objects upgraded per transaction by [`Pool::upgrade_all`]: few enough that a batch
/// whose groups are separate objects stays far below a transaction's limits.
pub const UPGRADE_BATCH: usize = 128;

/// Whether `e`, met upgrading an object listed as a `T`, says the object is no longer
/// there as one: freed, or freed and its block reused for another type, by a transaction
/// that ran after the listing.
fn gone(e: &Error) -> bool {
    matches!(
        e,
        Error::InvalidOid { .. } | Error::TypeMismatch { .. } | Error::UseAfterFree { .. }
    )
}

impl Pool {
    /// Upgrades every `T` of the pool that lacks extension groups this build knows, as
    /// [`Tx::ext`](crate::Tx::ext) would on first access; returns how many it upgraded.
    ///
    /// For a program that would rather pay for its upgrades at a time it chooses (at
    /// start-up, or in a quiet period) than in the transactions that first read each old
    /// object. The objects are upgraded [`UPGRADE_BATCH`] to a transaction: a crash keeps
    /// every object either upgraded or as it was, and calling it again finishes the work.
    /// It may run beside other transactions: an object another one frees meanwhile is
    /// passed over, and one another one upgrades first is counted once, by whichever
    /// upgraded it.
    ///
    /// # Errors
    /// What [`Tx::upgrade`](crate::Tx::upgrade) reports for an object (a layout mismatch,
    /// damage, a full pool), after the batches before it committed; `Error::InTransaction`
    /// if called inside a transaction.
    pub fn upgrade_all<T: Extendible>(&self) -> Result<u64> {
        let listed: Vec<u64> = self
            .objects()?
            .into_iter()
            .filter(|(_, h)| h.type_id == T::TYPE_ID)
            .map(|(off, _)| off)
            .collect();
        let mut upgraded = 0;
        for batch in listed.chunks(UPGRADE_BATCH) {
            upgraded += self.tx(|tx| {
                let mut n = 0;
                for &off in batch {
                    match tx.upgrade(Oid::<T>::from_raw(off)) {
                        Ok(done) => n += u64::from(done),
                        Err(e) if gone(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(n)
            })?;
        }
        Ok(upgraded)
    }
}
