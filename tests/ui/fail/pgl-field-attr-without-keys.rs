// `#[pgl]` on a field, without a list of keys.
use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Record {
    #[pgl]
    id: u64,
}

fn main() {}
