use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 0)]
pub struct Record {
    value: u64,
}

fn main() {}
