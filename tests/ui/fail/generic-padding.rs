// A generic struct's padding depends on its arguments: it is reported for the
// instantiation that has it, when its layout is computed.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Tagged<T: Persistent> {
    tag: u8,
    value: T,
}

const _: u64 = <Tagged<u8> as Persistent>::LAYOUT;
const _: u64 = <Tagged<u64> as Persistent>::LAYOUT;

fn main() {}
