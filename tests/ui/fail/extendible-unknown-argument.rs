use pgl::{extendible, Persistent};

#[extendible(version = 2)]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
}

fn main() {}
