// A rejected type is found inside arrays, and the span points at it.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Flags {
    id: u64,
    bits: [[bool; 8]; 8],
}

fn main() {}
