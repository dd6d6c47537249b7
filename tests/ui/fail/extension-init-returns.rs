// An `init` is the value of the new field: control flow in it stays in it. Spliced into
// the generated upgrade, `return Ok(offset)` made the upgrade link any object's group
// (here another object's) as this object's new group; `?` left it with an error.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use pgl::{extendible, Persistent};

static VICTIM: AtomicU64 = AtomicU64::new(0);

fn lookup() -> pgl::Result<u64> {
    Ok(3)
}

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    #[extension(1, init = return Ok(VICTIM.load(Relaxed)))]
    pub wide: u64,
    #[extension(1, init = lookup()?)]
    pub other: u64,
}

fn main() {}
