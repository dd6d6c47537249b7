use pgl::{extendible, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u32,
    pub value: u32,
    #[extension(1, replaces = key, init = |old| old.key())]
    pub key64: u64,
    #[extension(1, init = 1.5)]
    pub count: u64,
}

fn main() {}
