// The generated accessors compile warning-free under strict lints, whatever names the
// user's scope holds, and with `Self` in the struct's where clause.
#![deny(warnings, unused_lifetimes, unused_qualifications, missing_docs)]
//! A crate with strict lints.

use pgl::{Oid, Persistent};

/// Names the generated bodies use internally, defined by the user.
#[allow(non_upper_case_globals)]
const value: u8 = 3;
#[allow(non_camel_case_types, dead_code)]
struct s;
#[allow(non_upper_case_globals)]
const i: usize = 9;

/// A generic struct whose where clause names `Self`.
#[derive(Persistent)]
#[repr(C)]
pub struct Cell<T: Persistent>
where
    Self: Sized,
{
    /// Fields named like the bodies' locals.
    pub value: [T; 2],
    /// Another.
    pub s: u64,
    /// A link.
    pub next: Oid<Cell<T>>,
}

fn main() {
    let _ = (value, i);
}
