use core::marker::PhantomData;
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Typed<T: Persistent> {
    raw: u64,
    marker: PhantomData<T>,
}

fn main() {}
