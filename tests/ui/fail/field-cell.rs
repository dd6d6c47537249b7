// Interior mutability: a persistent object changes only inside a transaction.
use core::cell::{RefCell, UnsafeCell};

use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Counter {
    hits: UnsafeCell<u64>,
    misses: RefCell<u64>,
}

fn main() {}
