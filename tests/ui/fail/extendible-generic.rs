use pgl::{extendible, Persistent};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node<T: Persistent> {
    pub key: T,
}

fn main() {}
