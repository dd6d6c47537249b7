//! The pgl book, compiled: each chapter's Markdown is this crate's documentation, so
//! `cargo test --workspace` (or `cargo test -p pgl-book --doc`) compiles and runs every
//! Rust snippet in it. `mdbook build book` renders the same files.
#![deny(missing_docs)]

use std::path::{Path, PathBuf};

#[doc = include_str!("introduction.md")]
pub mod introduction {}

#[doc = include_str!("getting-started.md")]
pub mod getting_started {}

#[doc = include_str!("persistent-types.md")]
pub mod persistent_types {}

#[doc = include_str!("transactions.md")]
pub mod transactions {}

#[doc = include_str!("evolving.md")]
pub mod evolving {}

#[doc = include_str!("fault-tolerance.md")]
pub mod fault_tolerance {}

#[doc = include_str!("testing.md")]
pub mod testing {}

#[doc = include_str!("pool-file.md")]
pub mod pool_file {}

#[doc = include_str!("log.md")]
pub mod log {}

#[doc = include_str!("performance.md")]
pub mod performance {}

#[doc = include_str!("cli.md")]
pub mod cli {}

/// The repository's README, so that its example compiles too.
#[doc = include_str!("../../README.md")]
#[doc(hidden)]
pub mod readme {}

/// A pool path in the temporary directory, unique to this process, whose file is removed
/// when the value is dropped (snippets use it in their hidden set-up lines).
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh path named after `name`; any file left there earlier is removed.
    pub fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("pgl-book-{}-{name}.pool", std::process::id()));
        let _ = std::fs::remove_file(&p);
        Scratch(p)
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
