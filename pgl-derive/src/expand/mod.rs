//! Code generation, one file per derive.

pub(crate) mod extendible;
pub(crate) mod handle;
pub(crate) mod persistent;
