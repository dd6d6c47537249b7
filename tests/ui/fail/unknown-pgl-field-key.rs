use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Record {
    #[pgl(skip)]
    value: u64,
}

fn main() {}
