// `#[extendible]` on an enum: one error, and the enum's uses cause none.
use pgl::extendible;

#[extendible]
pub enum Kind {
    A,
    B,
}

fn main() {
    let _ = Kind::A;
}
