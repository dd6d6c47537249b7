// `repr(packed)` that leaves a field at an offset that is not a multiple of its alignment.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C, packed)]
pub struct Wire {
    kind: u8,
    len: u32,
}

fn main() {}
