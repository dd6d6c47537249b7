// A field that some builds leave out would change the layout the pool stores.
use pgl::{extendible, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    #[cfg(debug_assertions)]
    pub checked: u64,
    #[cfg(any())]
    #[extension(1, init = 0)]
    pub debug_only: u64,
}

fn main() {}
