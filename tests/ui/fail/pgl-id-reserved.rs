// An explicit type id in the range pgl keeps for its own use.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 0xffff_ff01)]
pub struct Reserved {
    value: u64,
}

fn main() {}
