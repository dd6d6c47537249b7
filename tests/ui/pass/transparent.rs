// `#[repr(transparent)]` wrappers, named and tuple, with a zero-sized field of alignment 1
// before or after the wrapped one (rustc places it where it likes, at no cost in bytes).
use pgl::{Oid, Persistent};

#[derive(Persistent)]
#[repr(transparent)]
pub struct Meters(pub f64);

#[derive(Persistent)]
#[repr(transparent)]
pub struct Handle {
    pub target: Oid<Meters>,
}

#[derive(Persistent)]
#[repr(transparent)]
pub struct Tagged {
    pub tag: [u8; 0],
    pub value: u32,
}

#[derive(Persistent)]
#[repr(transparent)]
pub struct Wrapped<T: Persistent>([u8; 0], T);

const _: u64 = Meters::LAYOUT;
const _: u64 = Handle::LAYOUT;
const _: u64 = Tagged::LAYOUT;
const _: u64 = <Wrapped<u64> as Persistent>::LAYOUT;

fn main() {
    assert_eq!(core::mem::size_of::<Handle>(), 8);
    assert_eq!(core::mem::size_of::<Tagged>(), 4);
}
