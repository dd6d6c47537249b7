// `Oid<T>` fields, including self-referential ones (`Oid<Self>`, linked lists, also
// generic) and mutually recursive structs: the fingerprint of an `Oid<T>` must not read
// `T`'s fingerprint, or these would be cycles.
use pgl::{Oid, Persistent};

#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    pub next: Oid<Self>,
    pub children: [Oid<Node>; 2],
    pub owner: Oid<Tree>,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Tree {
    pub root: Oid<Node>,
    pub len: u64,
}

#[derive(Persistent)]
#[repr(C)]
pub struct List<T: Persistent> {
    pub item: T,
    pub next: Oid<Self>,
}

// An array of the struct itself behind an `Oid`: the type id of `[T; N]` must not read
// `T`'s fingerprint either.
#[derive(Persistent)]
#[repr(C)]
pub struct Forest {
    pub size: u64,
    pub groves: Oid<List<[Forest; 2]>>,
}

const _: u64 = Node::LAYOUT;
const _: u64 = Forest::LAYOUT;
const _: u64 = Tree::LAYOUT;
const _: u64 = <List<u64> as Persistent>::LAYOUT;

fn main() {
    assert_ne!(Node::LAYOUT, Tree::LAYOUT);
}
