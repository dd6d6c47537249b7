// An alignment above what the pool guarantees (`MAX_ALIGN`).
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C, align(64))]
pub struct CacheLine {
    bytes: [u8; 64],
}

fn main() {}
