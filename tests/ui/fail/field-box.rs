use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Boxed {
    value: u64,
    child: Box<u64>,
}

fn main() {}
