use pgl::Persistent;

#[derive(Persistent)]
#[repr(C)]
pub struct Outcome {
    id: u64,
    result: Result<u64, u64>,
}

fn main() {}
