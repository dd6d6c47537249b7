use pgl::{extendible, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    #[extension(1, init = 0)]
    pub a: u64,
    #[extension(3, init = 0)]
    pub b: u64,
}

fn main() {}
