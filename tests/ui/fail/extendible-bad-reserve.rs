use pgl::{extendible, Persistent};

#[extendible(reserve = 0)]
#[derive(Persistent)]
#[repr(C)]
pub struct Empty {
    pub key: u64,
}

#[extendible(reserve = 5000)]
#[derive(Persistent)]
#[repr(C)]
pub struct Huge {
    pub key: u64,
}

#[extendible(reserve = 16u8)]
#[derive(Persistent)]
#[repr(C)]
pub struct Suffixed {
    pub key: u64,
}

fn main() {}
