// Fields that exist but occupy no bytes.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Empty {
    nothing: [u64; 0],
}

fn main() {}
