//! The arguments the commands take, and their parsers.

use clap::Subcommand;
use pgl::Fault;
use std::path::PathBuf;

/// The faults `pgl inject` can inject (see `pgl::Fault`). Offsets and oids are hex
/// (`0x1e00010`) or decimal; lengths take K/M/G suffixes; `pgl info` shows the geometry
/// (zones, lanes) and `pgl info --objects` the oids.
#[derive(Subcommand)]
pub(crate) enum FaultArg {
    /// Random bytes over LEN bytes at pool offset OFFSET.
    Scribble {
        /// The first pool byte to damage (hex or decimal).
        #[arg(value_parser = parse_oid)]
        offset: u64,
        /// How many bytes to damage (1 or more; K/M/G suffixes allowed).
        #[arg(value_parser = parse_size)]
        len: u64,
    },
    /// Flip BITS random bits of the 8-byte word holding pool offset OFFSET.
    Bitflip {
        /// A pool byte (hex or decimal); the 8-byte word holding it is damaged.
        #[arg(value_parser = parse_oid)]
        offset: u64,
        /// How many distinct bits of the word to flip, 1 to 64.
        #[arg(default_value_t = 1)]
        bits: u32,
    },
    /// Random bytes over LEN bytes of an object, AT bytes from its header's start.
    Object {
        /// The object's oid, as `pgl info --objects` lists it (hex or decimal).
        #[arg(value_parser = parse_oid)]
        oid: u64,
        /// The first byte to damage, from the start of the object's 16-byte header (16 is
        /// the first payload byte).
        #[arg(value_parser = parse_oid)]
        at: u64,
        /// How many bytes to damage (1 or more).
        #[arg(value_parser = parse_size)]
        len: u64,
    },
    /// Random bytes over LEN bytes of zone ZONE's metadata chunk, from byte AT.
    Metadata {
        /// The zone, from 0 (`pgl info` shows how many the pool has).
        zone: u64,
        /// The first byte to damage within the zone's metadata chunk.
        #[arg(value_parser = parse_oid)]
        at: u64,
        /// How many bytes to damage (1 or more).
        #[arg(value_parser = parse_size)]
        len: u64,
    },
    /// Random bytes over LEN bytes of copy COPY of redo lane LANE, from byte AT.
    Lane {
        /// The lane, from 0 (`pgl info` shows how many the pool has).
        lane: u64,
        /// Which copy of the lane: 0 or 1.
        copy: u64,
        /// The first byte to damage within the lane copy.
        #[arg(value_parser = parse_oid)]
        at: u64,
        /// How many bytes to damage (1 or more).
        #[arg(value_parser = parse_size)]
        len: u64,
    },
    /// Random bytes over LEN bytes of copy COPY of the pool header, from byte AT.
    Header {
        /// Which copy of the header: 0 or 1.
        copy: u64,
        /// The first byte to damage within the 4096-byte header page.
        #[arg(value_parser = parse_oid)]
        at: u64,
        /// How many bytes to damage (1 or more).
        #[arg(value_parser = parse_size)]
        len: u64,
    },
    /// A media error as damage the next program to open the pool finds: the page holding
    /// OFFSET loses its contents (random bytes; parity keeps the old ones). Refused where
    /// no check would find it (a plain run bitmap; objects of a pool without checksums).
    Media {
        /// A pool byte in a zone's rows (hex or decimal, e.g. an oid); its 4096-byte page
        /// is lost.
        #[arg(value_parser = parse_oid)]
        offset: u64,
    },
}

impl FaultArg {
    pub(crate) fn fault(&self, seed: u64) -> Fault {
        match *self {
            FaultArg::Scribble { offset, len } => Fault::Scribble { offset, len, seed },
            FaultArg::Bitflip { offset, bits } => Fault::BitFlips { offset, bits, seed },
            FaultArg::Object { oid, at, len } => Fault::ObjectScribble { oid, at, len, seed },
            FaultArg::Metadata { zone, at, len } => Fault::MetadataScribble {
                zone,
                at,
                len,
                seed,
            },
            FaultArg::Lane {
                lane,
                copy,
                at,
                len,
            } => Fault::LaneScribble {
                lane,
                copy,
                at,
                len,
                seed,
            },
            FaultArg::Header { copy, at, len } => Fault::HeaderScribble {
                copy,
                at,
                len,
                seed,
            },
            // Not `MediaError`: this process closes the pool next, and a close rebuilds
            // the pages a media error left unread.
            FaultArg::Media { offset } => Fault::LostPage { offset, seed },
        }
    }
}

/// Arguments of `pgl create`. Unset values take `pgl::Config`'s defaults.
#[derive(clap::Args)]
pub(crate) struct CreateArgs {
    /// The file to create; it must not exist.
    pub(crate) file: PathBuf,
    /// The layout name programs open the pool with (1 to 63 bytes).
    #[arg(long, default_value = "pgl")]
    pub(crate) layout: String,
    /// Initial size, rounded down to whole zones (K/M/G suffixes: 64M, 1G).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub(crate) size: u64,
    /// Bytes per chunk: a power of two from 16K to 64M [default: 256K].
    #[arg(long, value_parser = parse_size)]
    pub(crate) chunk_size: Option<u64>,
    /// Chunks per row [default: 1].
    #[arg(long)]
    pub(crate) chunks_per_row: Option<u64>,
    /// Data rows per zone; one more row holds parity [default: 100].
    #[arg(long)]
    pub(crate) rows: Option<u64>,
    /// Redo lanes: how many transactions can commit at once [default: 8].
    #[arg(long)]
    pub(crate) lanes: Option<u64>,
    /// Bytes of one lane copy: the largest redo record [default: 256K].
    #[arg(long, value_parser = parse_size)]
    pub(crate) lane_size: Option<u64>,
    /// Give the file all its blocks now, as PMDK does: a full file system fails here
    /// instead of killing a program with SIGBUS when it first writes a page.
    #[arg(long)]
    pub(crate) preallocate: bool,
}

/// Parses a byte count: a decimal number with an optional K, M, G or T suffix (powers of
/// 1024; `KiB`, `KB` and `k` are accepted too).
pub(crate) fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let bad = || format!("{s:?} is not a size: use bytes or a number with K, M, G or T (e.g. 64M)");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Parses an oid: `0x`-prefixed hex or decimal.
pub(crate) fn parse_oid(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => t.replace('_', "").parse(),
    };
    r.map_err(|_| format!("{s:?} is not an oid: use hex (0x1e00010) or decimal"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("256k"), Ok(256 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn oids() {
        assert_eq!(parse_oid("0x1e00010"), Ok(0x1e0_0010));
        assert_eq!(parse_oid("4096"), Ok(4096));
        assert!(parse_oid("0xzz").is_err());
    }
}
