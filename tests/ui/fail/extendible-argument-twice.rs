use pgl::{extendible, Persistent};

#[extendible(reserve = 8, upgrade = on_write, upgrade = on_read)]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
}

fn main() {}
