use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Buffer {
    len: u64,
    bytes: [u8],
}

fn main() {}
