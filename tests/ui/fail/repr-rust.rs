// An explicit `repr(Rust)` is as unstable as none.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(Rust)]
pub struct Point {
    x: u64,
    y: u64,
}

fn main() {}
