use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = "record")]
pub struct Record {
    value: u64,
}

fn main() {}
