// A trait object is unsized and carries a vtable pointer.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Handler {
    id: u64,
    callback: dyn Fn(u64),
}

fn main() {}
