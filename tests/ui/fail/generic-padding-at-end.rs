// A generic struct's trailing padding depends on its arguments.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Tagged<T: Persistent> {
    value: T,
    tag: u8,
}

const _: u64 = <Tagged<u8> as Persistent>::LAYOUT;
const _: u64 = <Tagged<u64> as Persistent>::LAYOUT;

fn main() {}
