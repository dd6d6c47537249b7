use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Callback {
    id: u64,
    call: fn(u64) -> u64,
}

fn main() {}
