use pgl::{extendible, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u32,
    pub value: u32,
    #[extension(1, replaces = kee, init = |old| old.key() as u64)]
    pub key64: u64,
}

fn main() {}
