use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 1)]
#[pgl(id = 2)]
pub struct Record {
    value: u64,
}

fn main() {}
