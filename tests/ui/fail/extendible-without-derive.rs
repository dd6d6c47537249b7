use pgl::extendible;

#[extendible]
#[repr(C)]
pub struct Node {
    pub key: u64,
}

fn main() {}
