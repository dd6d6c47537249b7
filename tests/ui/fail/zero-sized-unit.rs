use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Marker;

fn main() {}
