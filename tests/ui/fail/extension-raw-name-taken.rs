// `r#key` is the field `key`: taken already.
use pgl::{extendible, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    #[extension(1, init = 0)]
    pub r#key: u64,
}

fn main() {}
