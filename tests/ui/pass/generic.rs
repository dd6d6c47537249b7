// Generic structs whose type parameters are bounded by `Persistent` (inline or in a where
// clause), with const parameters; each instantiation has its own type id and layout.
use pgl::{Oid, Persistent};

#[derive(Persistent)]
#[repr(C)]
pub struct Slot<K: Persistent, V, const N: usize>
where
    V: pgl::Persistent,
{
    pub keys: [K; N],
    pub value: Oid<V>,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Pair<T: Persistent>(pub T, pub T);

const _: u64 = <Slot<u64, u8, 4> as Persistent>::LAYOUT;
const _: u64 = <Pair<Pair<u16>> as Persistent>::LAYOUT;

fn main() {
    assert_ne!(
        <Slot<u64, u8, 4> as Persistent>::TYPE_ID,
        <Slot<u64, u8, 8> as Persistent>::TYPE_ID
    );
    assert_ne!(
        <Slot<u64, u8, 4> as Persistent>::TYPE_ID,
        <Slot<u32, u8, 4> as Persistent>::TYPE_ID
    );
    assert_ne!(
        <Pair<u32> as Persistent>::LAYOUT,
        <Pair<f32> as Persistent>::LAYOUT
    );
    assert_eq!(<Pair<u8> as Persistent>::TYPE_NAME, "Pair");
}
