use pgl::{Oid, Persistent};

#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    key: u64,
    next: Option<Oid<Node>>,
}

fn main() {}
