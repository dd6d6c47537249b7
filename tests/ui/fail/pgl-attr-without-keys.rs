// `#[pgl]` on the struct, without a list of keys.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl = 3]
pub struct Record {
    id: u64,
}

fn main() {}
