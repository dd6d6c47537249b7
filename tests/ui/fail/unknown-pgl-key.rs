use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 12, version = 2)]
pub struct Record {
    value: u64,
}

fn main() {}
