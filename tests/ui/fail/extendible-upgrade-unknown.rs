use pgl::{extendible, Persistent};

#[extendible(reserve = 8, upgrade = never)]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
}

fn main() {}
