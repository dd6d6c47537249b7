use pgl::Persistent;
use std::rc::Rc;

#[derive(Persistent)]
#[repr(C)]
pub struct Shared {
    id: u64,
    value: Rc<u64>,
}

fn main() {}
