use pgl::{extendible, Persistent};

// Without a reserve no group could ever be kept where a read's copy has room for it.
#[extendible(upgrade = on_write)]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
}

fn main() {}
