use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 5000000000)]
pub struct Record {
    value: u64,
}

fn main() {}
