use pgl::{extendible, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    #[extension(1, init = 0)]
    pub a: u64,
    #[extension(2, init = 0)]
    pub b: u64,
    #[extension(1, init = 0)]
    pub c: u64,
}

fn main() {}
