// Without `#[repr(C)]` the compiler may reorder fields between builds.
use pgl::Persistent;

#[derive(Persistent)]
pub struct Point {
    x: u64,
    y: u64,
}

fn main() {}
