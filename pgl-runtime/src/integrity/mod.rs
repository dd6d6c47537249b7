//! Integrity: zone parity and its XOR kernels; verification, repair and the fault handler
//! build on them.

pub(crate) mod handler;
pub(crate) mod parity;
pub(crate) mod rebuild;
pub(crate) mod reconcile;
pub mod xor;

pub(crate) use parity::{recompute_zone, verify_zone, Parity};
pub(crate) use rebuild::rebuild_range;
pub(crate) use reconcile::{block_verifies, reconcile_zone, Reconciled};

/// Parity updates of changed ranges up to this many bytes use one atomic 8-byte XOR per
/// word; longer ones take the column's lock and the vectorised kernel. Measured by
/// `cargo bench --bench parity` on the project's machine (2 vCPU Zen 5): the locked AVX2
/// kernel is no slower from 32 bytes with one thread and from 16 bytes with two threads
/// updating the same parity line (an atomic XOR costs 2.6 ns per word alone, 6-40 ns
/// contended; the lock plus kernel 9-11 ns up to 64 bytes). Far below the 8 KiB the
/// Pangolin paper measured on Optane: on this machine only single words stay atomic.
pub const ATOMIC_XOR_MAX_BYTES: usize = 16;
