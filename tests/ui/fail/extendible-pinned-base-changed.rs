use pgl::{extendible, Persistent};

#[extendible(base = 0x1234)]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
}

fn main() {}
