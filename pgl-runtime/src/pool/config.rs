//! Pool configuration: geometry, durability back-end and verify policy.

use crate::geometry::Geometry;
use crate::persist::FlushMode;
use crate::tx::VerifyPolicy;
use crate::{Error, Result};

/// How to create (or open) a pool. Start from `Config::new(layout)` and adjust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The layout name: which application's data the pool holds (at most 63 bytes).
    pub layout: String,
    /// Initial size in bytes (rounded down to whole zones; at least one zone).
    pub size: u64,
    /// Bytes per chunk: a power of two from 16 KiB to 64 MiB. Default 256 KiB.
    pub chunk_size: u64,
    /// Chunks per row. Default 1.
    pub chunks_per_row: u64,
    /// Data rows per zone; one more row holds parity. Default 100 (~1 % parity).
    pub rows: u64,
    /// Redo lanes: how many transactions can commit at once. Default 8.
    pub lanes: u64,
    /// Bytes of one copy of one lane: the largest redo record. Default 256 KiB.
    pub lane_size: u64,
    /// Address space reserved for the mapping: the largest size `grow` can reach.
    /// Default 1 TiB (address space only; nothing is allocated).
    pub max_size: u64,
    /// Durability back-end. `None` (the default) picks by the file system: cache-line
    /// flushes (the best the CPU has) on persistent memory (DAX, mapped with `MAP_SYNC`
    /// so that the file system's block allocations are durable before a store lands) and
    /// tmpfs, `msync` on ordinary files, where cache-line flushes would not reach the disk
    /// (and on DAX if the system refuses the `MAP_SYNC` mapping). `PGL_FLUSH` overrides
    /// the choice.
    pub flush: Option<FlushMode>,
    /// When objects are verified.
    pub verify: VerifyPolicy,
    /// Whether every commit keeps zone parity (the XOR of a zone's rows, which rebuilds a
    /// lost page). Default `true`. A pool opened with `false` stops keeping it; opening it
    /// with `true` again recomputes it.
    pub parity: bool,
    /// Parity updates of changed ranges up to this many bytes XOR with atomic 8-byte
    /// operations under their stripe lock held shared, so that commits to other rows of
    /// the same page column proceed at once; longer ones hold it exclusive and use the
    /// vectorised kernel. Default [`ATOMIC_XOR_MAX_BYTES`](crate::integrity::ATOMIC_XOR_MAX_BYTES),
    /// the crossover measured on the project's machine (0: atomics never paid there).
    pub parity_atomic_max: usize,
    /// Whether commits write their redo record to both copies of their lane (default
    /// `true`), so that a damaged copy is rebuilt from the other when the pool opens.
    /// Without it a commit writes the record to copy A alone (retire marks still go to
    /// both): one fewer record write, and a lane damaged between a commit and its
    /// retirement loses that transaction. Opening with it again re-copies B from A.
    pub replicate_lanes: bool,
    /// Whether commits keep each object's Adler-32 checksum (default `true`), which is what
    /// detects damage (scribbles, bit flips) for repair from parity. Without it nothing is
    /// verified and damage goes unnoticed; opening the pool with it again recomputes every
    /// object's checksum (over the bytes as they are then).
    pub checksums: bool,
    /// Whether `Pool::create` gives the file all its blocks up front, as PMDK does
    /// (default `false`: a sparse file, created in O(1)); `grow` then keeps a file that has
    /// all its blocks so. On a file system without `fallocate` the file stays sparse. A sparse pool takes blocks
    /// from the file system as pages are first written; if the file system is full then,
    /// the store raises `SIGBUS` and the process dies in the middle of a commit (the pool
    /// recovers on reopen). Preallocated, a full file system is an `Error::Io` from
    /// `create` or `grow` instead, and no page fault allocates (on tmpfs each one would
    /// also zero a page). Costs the allocation at create: on tmpfs, zeroing the pool's
    /// memory.
    pub preallocate: bool,
}

impl Config {
    /// Defaults for a pool of layout `layout`: 64 MiB, 256 KiB chunks, 100 rows, 8 lanes.
    pub fn new(layout: impl Into<String>) -> Config {
        Config {
            layout: layout.into(),
            size: 64 << 20,
            chunk_size: 256 << 10,
            chunks_per_row: 1,
            rows: 100,
            lanes: 8,
            lane_size: 256 << 10,
            max_size: 1 << 40,
            flush: None,
            verify: VerifyPolicy::Default,
            parity: true,
            parity_atomic_max: crate::integrity::ATOMIC_XOR_MAX_BYTES,
            replicate_lanes: true,
            checksums: true,
            preallocate: false,
        }
    }

    /// A small geometry for tests and crash simulation: 64 KiB chunks, 4 rows, 2 lanes of
    /// 160 KiB (a 64 KiB object fits one record), sized for one zone.
    pub fn small(layout: impl Into<String>) -> Config {
        let mut c = Config::new(layout);
        c.chunk_size = 64 << 10;
        c.rows = 4;
        c.lanes = 2;
        c.lane_size = 160 << 10;
        c.size = c.geometry().pool_size(1);
        c.max_size = c.geometry().pool_size(8);
        c
    }

    /// Sets the initial size.
    pub fn size(mut self, bytes: u64) -> Self {
        self.size = bytes;
        self
    }

    /// Sets the flush mode.
    pub fn flush(mut self, mode: FlushMode) -> Self {
        self.flush = Some(mode);
        self
    }

    /// Turns zone parity upkeep on or off (see [`Config::parity`](Config#structfield.parity)).
    pub fn parity(mut self, on: bool) -> Self {
        self.parity = on;
        self
    }

    /// Gives the file all its blocks at create (see
    /// [`Config::preallocate`](Config#structfield.preallocate)).
    pub fn preallocate(mut self, on: bool) -> Self {
        self.preallocate = on;
        self
    }

    /// Sets the verify policy.
    pub fn verify(mut self, policy: VerifyPolicy) -> Self {
        self.verify = policy;
        self
    }

    /// The geometry these settings describe.
    pub fn geometry(&self) -> Geometry {
        Geometry {
            chunk_size: self.chunk_size,
            chunks_per_row: self.chunks_per_row,
            rows: self.rows,
            lanes: self.lanes,
            lane_size: self.lane_size,
        }
    }

    /// Checks every value; returns the geometry and zone count.
    pub(crate) fn validate(&self) -> Result<(Geometry, u64)> {
        if self.layout.is_empty()
            || self.layout.len() > super::LAYOUT_MAX
            || self.layout.contains('\0')
        {
            return Err(Error::config(format!(
                "layout name {:?} must be 1 to {} bytes without NUL",
                self.layout,
                super::LAYOUT_MAX
            )));
        }
        let geo = self.geometry();
        super::header::check_geometry(&geo, 1).map_err(Error::config)?;
        let zones = geo.zones_for(self.size);
        if zones == 0 {
            return Err(Error::config(format!(
                "size {} is smaller than one zone: the smallest pool of this geometry is {} \
                 bytes; raise the size, or make zones smaller (fewer rows or smaller chunks: \
                 Config::rows and chunk_size, `pgl create --rows --chunk-size`)",
                self.size,
                geo.pool_size(1)
            )));
        }
        super::header::check_geometry(&geo, zones).map_err(Error::config)?;
        if self.max_size < geo.pool_size(zones) {
            return Err(Error::config(format!(
                "size {} is more than max_size {} (Config::max_size: the address space a \
                 pool reserves, the largest size it can grow to; 1 TiB unless set); create a \
                 smaller pool (`pgl create --size`), or raise Config::max_size",
                self.size, self.max_size
            )));
        }
        Ok((geo, zones))
    }

    /// The mode asked for (by the config, else by `PGL_FLUSH`), if any; `None` lets the
    /// media layer pick by the file system.
    pub(crate) fn flush_mode(&self) -> Option<FlushMode> {
        match self.flush {
            Some(m) if m.supported() => Some(m),
            _ => FlushMode::from_env(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::new("pgl")
    }
}
