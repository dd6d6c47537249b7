//! # pgl — typed, crash-consistent, self-healing persistent memory for Rust
//!
//! Users annotate plain structs with `#[derive(Persistent)]` and store them in a pool file
//! whose objects survive crashes, media errors and stray writes.
//!
//! See the book in `book/` and `examples/quickstart.rs`.
#![deny(missing_docs)]

pub use pgl_runtime::*;

#[doc = include_str!("../pgl-derive/doc/persistent.md")]
pub use pgl_derive::Persistent;

#[doc = include_str!("../pgl-derive/doc/extendible.md")]
pub use pgl_derive::extendible;

/// The items most programs need: `use pgl::prelude::*;`.
pub mod prelude {
    pub use pgl_derive::{extendible, Persistent};
    pub use pgl_runtime::prelude::*;
}

/// Paths used by code that `pgl-derive` generates. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use pgl_runtime::__leds::{
        all_inline, inline_places, run_init, zeroed, ExtGroups, ExtPlaces, GroupPlace, GroupRef,
        ObjImage,
    };
    pub use pgl_runtime::persistent::{
        fnv1a64, fold_type_id, group_type_id, mix64, Persistent, MAX_ALIGN,
    };
    pub use pgl_runtime::{
        AsPlace, Error, Ext, ExtLink, ExtMut, Extendible, ExtendibleData, Mut, Oid, Place, Read,
        Result, Tx,
    };
}
