use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub union Bits {
    int: u32,
    float: f32,
}

fn main() {}
