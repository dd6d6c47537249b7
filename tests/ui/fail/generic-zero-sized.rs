// A generic struct that is zero-sized with some arguments.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Buf<const N: usize> {
    bytes: [u8; N],
}

const _: u64 = <Buf<4> as Persistent>::LAYOUT;
const _: u64 = <Buf<0> as Persistent>::LAYOUT;

fn main() {}
