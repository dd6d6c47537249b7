use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Pair {
    id: u64,
    pair: (u32, u32),
}

fn main() {}
