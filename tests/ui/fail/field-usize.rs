use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Counter {
    count: usize,
}

fn main() {}
