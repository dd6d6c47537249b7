// A type parameter bounded by a trait of one's own that is also named `Persistent`: the
// derive takes the name for pgl's, and its impl requires pgl's `Persistent` of the
// parameter itself, so the struct is persistent exactly where its fields are (before, the
// impl failed with errors about `'static`, `Send` and the field's type).
mod mine {
    pub trait Persistent {}
    impl Persistent for u64 {}
}

#[derive(pgl::Persistent)]
#[repr(C)]
pub struct Slot<T: mine::Persistent> {
    pub value: pgl::Oid<T>,
}

fn main() {
    assert_ne!(<Slot<u64> as pgl::Persistent>::TYPE_ID, 0);
    assert_ne!(<Slot<u64> as pgl::Persistent>::LAYOUT, 0);
}
