use pgl::{extendible, Persistent};

// Field names beginning with `__pgl` belong to the links `#[extendible]` adds.
#[derive(Persistent)]
#[repr(C)]
pub struct Twin {
    pub key: u64,
    pub __pgl_ext: u64,
}

// Reported once, as reserved, not also as a clash with the accessors' own `__pgl_view`.
#[derive(Persistent)]
#[repr(C)]
pub struct Viewer {
    pub __pgl_view: u64,
}

// The fields of an `#[extendible]` struct, base and extension groups, are checked too.
#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    pub __pgl_view: u64,
    #[extension(1, init = 0)]
    pub __pgl_next: u64,
}

fn main() {}
