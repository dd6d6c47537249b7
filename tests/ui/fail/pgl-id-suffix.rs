// A type id is a `u32`: a literal with another suffix is a mistake.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 42u64)]
pub struct Record {
    id: u64,
}

fn main() {}
