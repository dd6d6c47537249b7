use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(__extendible)]
pub struct Node {
    pub key: u64,
    pub next: u64,
}

fn main() {}
