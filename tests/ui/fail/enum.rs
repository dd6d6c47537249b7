use pgl::Persistent;

#[derive(Persistent)]
#[repr(u8)]
pub enum State {
    Idle,
    Busy,
}

fn main() {}
