// `repr(align(N))` up to `MAX_ALIGN`, when the fields fill the struct exactly.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C, align(16))]
pub struct Line {
    pub words: [u64; 2],
}

#[derive(Persistent)]
#[repr(C)]
#[repr(align(8))]
pub struct Word {
    pub a: u32,
    pub b: u32,
}

const _: u64 = Line::LAYOUT;
const _: u64 = Word::LAYOUT;

fn main() {
    assert_eq!(core::mem::align_of::<Line>(), 16);
}
