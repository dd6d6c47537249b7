use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Growing {
    len: u64,
    items: std::vec::Vec<u64>,
}

fn main() {}
