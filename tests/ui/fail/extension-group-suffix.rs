// A suffix on the group number is a typo, not part of the number.
use pgl::{extendible, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    #[extension(1x, init = 0)]
    pub added: u64,
}

fn main() {}
