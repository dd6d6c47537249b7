// `isize` has no fixed width.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Delta {
    by: isize,
}

fn main() {}
