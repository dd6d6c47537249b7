// Trailing padding, after the last field.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Record {
    value: u64,
    flag: u16,
}

fn main() {}
