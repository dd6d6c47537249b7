// A field of a user's enum type: not visible in the syntax, rejected by the type check.
use pgl::Persistent;

pub enum Color {
    Red,
    Green,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Pixel {
    x: u8,
    color: Color,
}

fn main() {}
