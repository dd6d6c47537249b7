use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Flags {
    dirty: bool,
    id: u64,
}

fn main() {}
