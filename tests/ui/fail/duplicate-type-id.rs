// Two structs of one module with the same explicit type id.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 77)]
pub struct First {
    value: u64,
}

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 77)]
pub struct Second {
    value: u32,
}

fn main() {}
