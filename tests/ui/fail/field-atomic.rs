use pgl::Persistent;
use std::sync::atomic::AtomicU64;

#[derive(Persistent)]
#[repr(C)]
pub struct Counter {
    hits: AtomicU64,
}

fn main() {}
