use core::num::NonZeroU64;
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Key {
    key: NonZeroU64,
}

fn main() {}
