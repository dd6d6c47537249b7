// Padding between two fields: the error names the field it follows and the byte count.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Record {
    flag: u8,
    value: u64,
}

fn main() {}
