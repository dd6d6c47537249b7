// `repr(packed)` is accepted when every field still sits at a multiple of its alignment.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C, packed)]
pub struct Wire {
    pub tag: u32,
    pub len: u16,
    pub kind: u8,
}

#[derive(Persistent)]
#[repr(C, packed(2))]
pub struct Pair {
    pub a: u16,
    pub b: [u8; 2],
    pub c: u16,
}

const _: u64 = Wire::LAYOUT;
const _: u64 = Pair::LAYOUT;

fn main() {
    assert_eq!(core::mem::size_of::<Wire>(), 7);
}
