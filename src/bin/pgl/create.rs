//! `pgl create`.

use crate::args::CreateArgs;
use crate::progress::slow;
use crate::units::bytes;
use pgl::{Config, Pool, Result};
use std::fmt::Write as _;

pub(crate) fn create(a: &CreateArgs) -> Result<String> {
    let mut config = Config::new(a.layout.as_str());
    config.size = a.size;
    let set = |field: &mut u64, v: Option<u64>| {
        if let Some(v) = v {
            *field = v;
        }
    };
    set(&mut config.chunk_size, a.chunk_size);
    set(&mut config.chunks_per_row, a.chunks_per_row);
    set(&mut config.rows, a.rows);
    set(&mut config.lanes, a.lanes);
    set(&mut config.lane_size, a.lane_size);
    config.preallocate = a.preallocate;
    let pool = slow("creating the pool", || Pool::create(&a.file, &config))?;
    let info = pool.info();
    let mut out = String::new();
    let _ = writeln!(out, "created {}", a.file.display());
    let _ = writeln!(out, "  layout  {:?}", info.header.layout);
    let _ = writeln!(
        out,
        "  size    {}, {} zone(s)",
        bytes(info.size),
        info.header.zones
    );
    let _ = writeln!(out, "  heap    {} for objects", bytes(info.heap_capacity));
    Ok(out)
}
