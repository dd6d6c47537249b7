use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Named {
    id: u64,
    name: str,
}

fn main() {}
