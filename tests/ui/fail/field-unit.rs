// `()` stores nothing.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Record {
    id: u64,
    nothing: (),
}

fn main() {}
