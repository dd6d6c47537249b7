use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Pointing {
    value: u64,
    next: *mut Pointing,
}

fn main() {}
