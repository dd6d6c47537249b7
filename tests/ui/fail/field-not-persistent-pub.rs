// A public field of a type that is not persistent: one error, none from its accessors.
use pgl::Persistent;

#[repr(C)]
pub struct Plain {
    pub x: u64,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Outer {
    pub id: u64,
    pub inner: Plain,
}

fn main() {}
