//! Code generation, one file per derive.

pub(crate) mod persistent;
