// `#[extendible]` below `#[derive(Persistent)]`: the derive saw the struct before the
// attribute rewrote it. One error from each, both saying to swap them; no others.
use pgl::{extendible, Persistent};

#[derive(Persistent)]
#[extendible]
#[repr(C)]
pub struct Node {
    pub key: u64,
    #[extension(1, init = 0)]
    pub wide: u64,
}

fn main() {
    let _ = <Node as Persistent>::TYPE_ID;
}
