// A generic packed struct whose field is misaligned with some arguments.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C, packed)]
pub struct Wire<T: Persistent> {
    kind: [u8; 4],
    value: T,
}

const _: u64 = <Wire<u32> as Persistent>::LAYOUT;
const _: u64 = <Wire<u64> as Persistent>::LAYOUT;

fn main() {}
