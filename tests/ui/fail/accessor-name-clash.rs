// Two fields whose generated accessors would share a name: `a` has a setter `set_a`.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Clash {
    pub a: u64,
    pub set_a: u64,
}

fn main() {}
