// `#[repr(transparent)]` wrappers, named and tuple.
use pgl::{Oid, Persistent};

#[derive(Persistent)]
#[repr(transparent)]
pub struct Meters(pub f64);

#[derive(Persistent)]
#[repr(transparent)]
pub struct Handle {
    pub target: Oid<Meters>,
}

const _: u64 = Meters::LAYOUT;
const _: u64 = Handle::LAYOUT;

fn main() {
    assert_eq!(core::mem::size_of::<Handle>(), 8);
}
