use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct View<'a> {
    id: u64,
    bytes: &'a [u8; 8],
}

fn main() {}
