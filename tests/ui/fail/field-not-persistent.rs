// A field of a struct that does not derive `Persistent`.
use pgl::Persistent;

#[repr(C)]
pub struct Plain {
    x: u64,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Outer {
    id: u64,
    inner: Plain,
}

fn main() {}
