use pgl::{extendible, Persistent};

// Group 1 (a `u64`) fits the 8-byte reserve; group 2 does not, so it would be an object
// of its own, which a read could not make without writing.
#[extendible(reserve = 8, upgrade = on_write)]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u32,
    pub value: u32,
    #[extension(1, init = 0)]
    pub wide: u64,
    #[extension(2, init = 0)]
    pub tag: u32,
}

fn main() {}
