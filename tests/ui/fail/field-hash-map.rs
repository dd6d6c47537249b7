// A standard collection keeps its entries in the process heap.
use std::collections::HashMap;

use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Index {
    entries: HashMap<u64, u64>,
}

fn main() {}
