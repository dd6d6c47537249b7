use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Glyph {
    code: char,
    width: u32,
}

fn main() {}
