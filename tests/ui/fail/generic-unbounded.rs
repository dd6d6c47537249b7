use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Boxed<T> {
    value: T,
}

fn main() {}
