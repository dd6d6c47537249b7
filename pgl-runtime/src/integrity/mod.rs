//! Integrity: zone parity and its XOR kernels; verification, repair and the fault handler
//! build on them.

pub(crate) mod handler;
pub(crate) mod parity;
pub(crate) mod rebuild;
pub(crate) mod reconcile;
pub(crate) mod replica;
#[doc(hidden)]
pub mod stripe;
pub mod xor;

pub(crate) use parity::{recompute_zone, verify_zone, zone_extents, Parity};
pub(crate) use rebuild::{parity_column_of, rebuild_range, rewrite_bitmap_word};
pub(crate) use reconcile::{block_verifies, changed_pages, mix_pages, reconcile_zone, Reconciled};

/// The default of `Config::parity_atomic_max`: parity updates of changed ranges up to this
/// many bytes take their stripe lock shared and XOR with one atomic 8-byte `fetch_xor` per
/// word; longer ones take it exclusive and use the vectorised kernel. Measured by
/// `cargo bench --bench parity` on the project's machine (2 vCPU Zen 5), with the stripe
/// lock included: the locked AVX2 kernel is no slower from 8 bytes, with one thread
/// (11.8 ns against 14.1 for one word), two threads on the same parity bytes (87 against
/// 134) and two threads 2 KiB apart in one parity page (27 against 51): an atomic XOR
/// costs ~8 ns a word here, and the shared lock two locked instructions more than the
/// exclusive one. So by default every update is exclusive; raise it on machines where
/// atomics are cheap (the Pangolin paper measured its crossover at 8 KiB on Optane).
pub const ATOMIC_XOR_MAX_BYTES: usize = 0;
