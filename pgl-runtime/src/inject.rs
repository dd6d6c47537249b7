//! Fault injection: public API, so that users can test that their own programs survive the
//! damage pgl is built to survive (`Pool::inject`).
//!
//! Every fault resolves to a byte range of the pool file and new bytes for it (random, or
//! the old ones with bits flipped). They are written behind pgl's back, as a stray store or
//! a media error would: parity, checksums and replicas are not told. The write is made
//! durable, so the damage survives reopening the pool.
//!
//! Invariant: an injection never races a transaction or a reader of the bytes it damages:
//! it holds every object lock and every lane while it writes.

use crate::geometry::{Geometry, PAGE};
use crate::{Error, Result};

/// A fault to inject with [`Pool::inject`](crate::Pool::inject).
///
/// Random bytes come from `seed` (the same seed damages the same way), and are never equal
/// to the bytes they replace.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Random bytes over `[offset, offset + len)` of the pool file: a stray write.
    Scribble {
        /// First pool byte.
        offset: u64,
        /// Bytes.
        len: u64,
        /// Seed of the random bytes.
        seed: u64,
    },
    /// Flips `bits` distinct random bits of the 8-byte word at `offset` (rounded down to a
    /// multiple of 8): an uncorrected media error.
    BitFlips {
        /// A pool byte; the word holding it is damaged.
        offset: u64,
        /// Bits to flip, 1 to 64.
        bits: u32,
        /// Seed of the choice of bits.
        seed: u64,
    },
    /// Random bytes over bytes `[at, at + len)` of an object, counted from the start of its
    /// 16-byte header (so `at = 0` hits the header, `at = 16` the first payload byte).
    ObjectScribble {
        /// The object (`Oid::raw()`).
        oid: u64,
        /// First damaged byte, from the header's start.
        at: u64,
        /// Bytes.
        len: u64,
        /// Seed of the random bytes.
        seed: u64,
    },
    /// Random bytes over `[at, at + len)` of zone `zone`'s metadata chunk (root word, chunk
    /// table, type registry).
    MetadataScribble {
        /// The zone.
        zone: u64,
        /// First damaged byte within the chunk.
        at: u64,
        /// Bytes.
        len: u64,
        /// Seed of the random bytes.
        seed: u64,
    },
    /// Random bytes over `[at, at + len)` of copy `copy` (0 or 1) of redo lane `lane`.
    LaneScribble {
        /// The lane.
        lane: u64,
        /// Which copy.
        copy: u64,
        /// First damaged byte within the lane copy.
        at: u64,
        /// Bytes.
        len: u64,
        /// Seed of the random bytes.
        seed: u64,
    },
    /// A media error: the page holding `offset` loses its contents and any access to it
    /// faults (emulated with `mprotect`, as a poisoned page of real persistent memory
    /// raises `SIGBUS`). The next load from it is caught by pgl's handler, which rebuilds
    /// the page from parity (a parity page from its column's data rows), and the load
    /// completes as if nothing happened. A page no load has met when the pool closes is
    /// rebuilt then, as a load would have rebuilt it (or lost for good, and its column's
    /// parity recomputed, if another page of its column was lost too). Only pages of the
    /// zones' rows, data or parity.
    MediaError {
        /// A byte of the page.
        offset: u64,
    },
    /// A page whose bytes were destroyed while the pool was closed: the page holding
    /// `offset` holds random bytes, durably, and parity still holds its old ones. Nothing
    /// marks the page lost (a real media error's poison would fault on the next load): the
    /// next session meets it as damage, found only where a check covers it. Checksums find
    /// the objects on it damaged and parity rebuilds each (only their bytes: a repairing
    /// scrub makes the page's column agree with its parity again), and the open rebuilds
    /// checked run bitmap words; a parity page is found by a parity check
    /// (`pool.verify_parity`, a scrub, `pgl check`; a repairing scrub recomputes it).
    /// This is how `pgl inject media` damages a pool, which its own process closes before
    /// any program reads it. Only pages of the zones' rows, data or parity, and only where
    /// a check would find the loss: a page holding a plain (unchecked) run bitmap's words,
    /// or objects of a pool without checksums, is refused (its random bytes would be taken
    /// as data: live blocks allocated again, objects read wrong, nothing reported).
    LostPage {
        /// A byte of the page.
        offset: u64,
        /// Seed of the random bytes.
        seed: u64,
    },
    /// Overwrites a guard word (canary) of the micro-buffer of object `oid` in the current
    /// transaction, as a buffer overrun in the program would: the commit then fails with
    /// `Error::CanaryMismatch` and the pool is unchanged. Injected with `tx.inject`, after
    /// `tx.open(oid)` in the same transaction (and with no handle to it alive).
    SmashCanary {
        /// The object (`Oid::raw()`).
        oid: u64,
    },
    /// Random bytes over `[at, at + len)` of copy `copy` (0 or 1) of the pool header page.
    HeaderScribble {
        /// Which copy.
        copy: u64,
        /// First damaged byte within the header page.
        at: u64,
        /// Bytes.
        len: u64,
        /// Seed of the random bytes.
        seed: u64,
    },
}

/// What the fault does and where, offsets and oids in hex as `pgl info` and errors print
/// them: `8 random bytes at byte 20 of object 0x340150 (from its header; seed 3)`.
impl core::fmt::Display for Fault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Fault::Scribble { offset, len, seed } => {
                write!(
                    f,
                    "{len} random bytes at pool offset {offset:#x} (seed {seed})"
                )
            }
            Fault::BitFlips { offset, bits, seed } => write!(
                f,
                "{bits} flipped bits in the word at pool offset {:#x} (seed {seed})",
                offset / 8 * 8
            ),
            Fault::ObjectScribble { oid, at, len, seed } => write!(
                f,
                "{len} random bytes at byte {at} of object {oid:#x} (from its header; seed \
                 {seed})"
            ),
            Fault::MetadataScribble {
                zone,
                at,
                len,
                seed,
            } => write!(
                f,
                "{len} random bytes at byte {at} of zone {zone}'s metadata (seed {seed})"
            ),
            Fault::LaneScribble {
                lane,
                copy,
                at,
                len,
                seed,
            } => write!(
                f,
                "{len} random bytes at byte {at} of copy {copy} of redo lane {lane} (seed \
                 {seed})"
            ),
            Fault::MediaError { offset } => write!(
                f,
                "a media error on the page at pool offset {:#x}",
                offset / crate::geometry::PAGE * crate::geometry::PAGE
            ),
            Fault::LostPage { offset, seed } => write!(
                f,
                "a lost page (random bytes, parity kept; seed {seed}) at pool offset {:#x}",
                offset / crate::geometry::PAGE * crate::geometry::PAGE
            ),
            Fault::SmashCanary { oid } => {
                write!(f, "a smashed canary of object {oid:#x}'s micro-buffer")
            }
            Fault::HeaderScribble {
                copy,
                at,
                len,
                seed,
            } => write!(
                f,
                "{len} random bytes at byte {at} of copy {copy} of the pool header (seed \
                 {seed})"
            ),
        }
    }
}

/// A splitmix64 step: the random bytes of faults.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Bytes of the same length as `old` that differ from it in every position.
pub(crate) fn scramble(old: &[u8], seed: u64) -> Vec<u8> {
    let mut s = seed;
    old.iter()
        .map(|&b| b ^ ((next(&mut s) % 255) as u8 + 1))
        .collect()
}

/// `old` (8 bytes) with `bits` distinct bits flipped.
pub(crate) fn flip(old: &[u8], bits: u32, seed: u64) -> Vec<u8> {
    let mut w = u64::from_le_bytes(old.try_into().expect("one word"));
    let mut s = seed;
    let mut mask = 0u64;
    while mask.count_ones() < bits.min(64) {
        mask |= 1 << (next(&mut s) % 64);
    }
    w ^= mask;
    w.to_le_bytes().to_vec()
}

/// What a fault damages: a byte range, and how to compute the new bytes.
pub(crate) struct Target {
    /// First pool byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// Random bytes (`seed`), or `bits` flipped in one word.
    pub how: How,
}

/// How the bytes are damaged.
pub(crate) enum How {
    Random(u64),
    Flip(u32, u64),
}

impl Fault {
    /// The range it damages in the pool `path` of geometry `geo`, `size` bytes long; the
    /// object variant's range comes from `object_block` (header offset and block bytes of
    /// a live object). A fault that does not fit is `Error::InvalidFault`.
    pub(crate) fn target(
        &self,
        path: &std::path::Path,
        geo: &Geometry,
        size: u64,
        object_block: impl FnOnce(u64) -> Result<(u64, u64)>,
    ) -> Result<Target> {
        let bad = |reason: String| self.refused(path, reason);
        let within = |what: &str, base: u64, room: u64, at: u64, len: u64| {
            if len == 0 {
                return Err(bad(
                    "the length is 0: a fault damages at least one byte".into()
                ));
            }
            if at.checked_add(len).is_none_or(|e| e > room) {
                return Err(bad(format!(
                    "bytes {at}..{} are not all within the {room} bytes of the {what} \
                     (`pgl info` shows the pool's size and geometry)",
                    u128::from(at) + u128::from(len)
                )));
            }
            Ok(base + at)
        };
        let (offset, len, how) = match *self {
            Fault::Scribble { offset, len, seed } => (
                within("pool", 0, size, offset, len)?,
                len,
                How::Random(seed),
            ),
            Fault::BitFlips { offset, bits, seed } => {
                if !(1..=64).contains(&bits) {
                    return Err(bad(format!(
                        "a bit flip flips 1 to 64 bits of one word, not {bits}"
                    )));
                }
                let word = offset / 8 * 8;
                (within("pool", 0, size, word, 8)?, 8, How::Flip(bits, seed))
            }
            Fault::ObjectScribble { oid, at, len, seed } => {
                let (hdr, block) = object_block(oid)?;
                (
                    within("object's block", hdr, block, at, len)?,
                    len,
                    How::Random(seed),
                )
            }
            Fault::MetadataScribble {
                zone,
                at,
                len,
                seed,
            } => {
                // Checked before any offset is computed from it: a large enough zone
                // number overflows the arithmetic (and, wrapping, lands in the pool).
                let zones = geo.zones_for(size);
                if zone >= zones {
                    return Err(bad(format!(
                        "zone {zone} is not in the pool, whose zones are 0 to {}",
                        zones.saturating_sub(1)
                    )));
                }
                let base = geo.chunk_offset(zone, 0);
                (
                    within("zone metadata chunk", base, geo.chunk_size, at, len)?,
                    len,
                    How::Random(seed),
                )
            }
            Fault::LaneScribble {
                lane,
                copy,
                at,
                len,
                seed,
            } => {
                if lane >= geo.lanes || copy > 1 {
                    return Err(bad(format!(
                        "copy {copy} of lane {lane} does not exist: the pool has lanes 0 to \
                         {}, copies 0 and 1",
                        geo.lanes - 1
                    )));
                }
                let base = geo.lane_offset(lane, copy);
                (
                    within("lane copy", base, geo.lane_size, at, len)?,
                    len,
                    How::Random(seed),
                )
            }
            Fault::SmashCanary { .. } => {
                return Err(bad(
                    "a canary guards a transaction's micro-buffer: inject SmashCanary with \
                     tx.inject inside the transaction that opened the object"
                        .into(),
                ))
            }
            Fault::MediaError { offset } => (
                within("pool", 0, size, offset / PAGE * PAGE, PAGE)?,
                PAGE,
                How::Random(0),
            ),
            Fault::LostPage { offset, seed } => (
                within("pool", 0, size, offset / PAGE * PAGE, PAGE)?,
                PAGE,
                How::Random(seed),
            ),
            Fault::HeaderScribble {
                copy,
                at,
                len,
                seed,
            } => {
                if copy > 1 {
                    return Err(bad(format!(
                        "header copy {copy} does not exist: the pool has copies 0 and 1"
                    )));
                }
                (
                    within("header page", geo.header_offset(copy), PAGE, at, len)?,
                    len,
                    How::Random(seed),
                )
            }
        };
        Ok(Target { offset, len, how })
    }

    /// `Error::InvalidFault` for this fault on the pool `path`.
    pub(crate) fn refused(&self, path: &std::path::Path, reason: String) -> Error {
        Error::InvalidFault {
            path: path.to_owned(),
            fault: self.to_string(),
            reason,
        }
    }
}

impl Target {
    /// The damaged version of `old` (the bytes the range holds now).
    pub(crate) fn damage(&self, old: &[u8]) -> Vec<u8> {
        match self.how {
            How::Random(seed) => scramble(old, seed),
            How::Flip(bits, seed) => flip(old, bits, seed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_always_changes_every_byte_or_the_asked_bits() {
        for seed in 0..200 {
            let old: Vec<u8> = (0..64).map(|i| (i * 7 + seed as usize) as u8).collect();
            let new = scramble(&old, seed);
            assert!(old.iter().zip(&new).all(|(a, b)| a != b));
            for bits in [1, 2, 3, 64] {
                let f = flip(&old[..8], bits, seed);
                let a = u64::from_le_bytes(old[..8].try_into().unwrap());
                let b = u64::from_le_bytes(f[..].try_into().unwrap());
                assert_eq!((a ^ b).count_ones(), bits);
            }
        }
        assert_eq!(scramble(&[1, 2, 3], 9), scramble(&[1, 2, 3], 9), "seeded");
    }
}
