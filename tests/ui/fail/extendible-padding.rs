// Trailing padding of an `#[extendible]` base or group is reported after the last field of
// the user's, which the fix goes after: the hidden link (alignment 1) follows it directly.
use pgl::{extendible, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    pub flag: u8,
    #[extension(1, init = 0)]
    pub wide: u64,
    #[extension(1, init = 0)]
    pub small: u8,
}

fn main() {}
