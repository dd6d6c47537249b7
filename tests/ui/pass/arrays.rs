// Arrays of every kind of persistent element, nested arrays, and a struct of one array.
use pgl::{Oid, Persistent};

#[derive(Persistent)]
#[repr(C)]
pub struct Page {
    pub len: u32,
    pub crc: u32,
    pub bytes: [u8; 4088],
    pub grid: [[u16; 4]; 4],
    pub links: [Oid<Block>; 2],
}

#[derive(Persistent)]
#[repr(C)]
pub struct Block([u8; 512]);

const _: u64 = Page::LAYOUT;
const _: u64 = Block::LAYOUT;

fn main() {
    assert_eq!(core::mem::size_of::<Page>(), 4096 + 32 + 16);
}
