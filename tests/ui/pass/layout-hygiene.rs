// The code that computes `TYPE_ID` and `LAYOUT` compiles whatever constants the user's
// scope holds and however the struct's const parameters are named: a `let` in the
// generated code would resolve to a constant `h` (or a const parameter `h`) and stop
// being a binding.
#![allow(non_upper_case_globals)]

use pgl::{Oid, Persistent};

const h: u64 = 7;

#[derive(Persistent)]
#[repr(C)]
pub struct Plain {
    pub a: u64,
    pub next: Oid<Plain>,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Generic<T: Persistent> {
    pub a: [T; 2],
}

mod param {
    use pgl::Persistent;

    /// A const parameter named like the generated local.
    #[derive(Persistent)]
    #[repr(C)]
    pub struct Sized<const h: usize> {
        pub bytes: [u8; h],
    }
}

fn main() {
    let _ = h;
    assert_ne!(Plain::LAYOUT, 0);
    assert_ne!(<Generic<u32> as Persistent>::TYPE_ID, <Generic<u64> as Persistent>::TYPE_ID);
    // Each instantiation still has its own id and layout: the const argument is mixed in.
    assert_ne!(
        <param::Sized<8> as Persistent>::TYPE_ID,
        <param::Sized<16> as Persistent>::TYPE_ID
    );
    assert_ne!(
        <param::Sized<8> as Persistent>::LAYOUT,
        <param::Sized<16> as Persistent>::LAYOUT
    );
}
