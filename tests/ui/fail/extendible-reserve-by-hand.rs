use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
#[pgl(__reserve = 16)]
pub struct Node {
    pub key: u64,
}

fn main() {}
