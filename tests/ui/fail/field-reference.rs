use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Borrowing {
    value: u64,
    name: &'static u8,
}

fn main() {}
