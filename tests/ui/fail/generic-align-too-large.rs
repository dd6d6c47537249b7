// A generic struct aligned above `MAX_ALIGN` by its type argument. (No derived type can be
// such an argument, each is checked itself; a hand-written impl that breaks the contract
// is caught here too.)
use pgl::Persistent;

#[repr(C, align(32))]
pub struct Wide([u8; 32]);

// SAFETY: none: this impl breaks the `align_of <= MAX_ALIGN` rule on purpose, to show
// that a generic struct over it is refused.
unsafe impl Persistent for Wide {
    const TYPE_ID: u32 = 1;
    const LAYOUT: u64 = 1;
    const TYPE_NAME: &'static str = "Wide";
}

#[derive(Persistent)]
#[repr(C)]
pub struct Wrap<T: Persistent> {
    inner: T,
}

const _: u64 = <Wrap<u64> as Persistent>::LAYOUT;
const _: u64 = <Wrap<Wide> as Persistent>::LAYOUT;

fn main() {}
