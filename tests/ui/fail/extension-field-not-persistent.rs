use pgl::{extendible, Persistent};

pub struct Plain(u64);

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    #[extension(1, init = Plain(0))]
    pub extra: Plain,
}

fn main() {}
