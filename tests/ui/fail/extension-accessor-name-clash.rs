// Accessor names of extension fields clash like those of base fields: within
// `NodeExtFields`, and between it and `NodeFields` (an ambiguity at every call).
use pgl::{extendible, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub b: u64,
    #[extension(1, init = 0)]
    pub a: u64,
    #[extension(1, init = 0)]
    pub set_a: u64,
    #[extension(2, init = 0)]
    pub set_b: u64,
}

fn main() {}
