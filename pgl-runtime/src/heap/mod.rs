//! The heap: zones of chunks, size classes in runs with bitmaps, large objects spanning
//! chunks, and the 16-byte object header. The heap never writes its metadata itself: it
//! returns word changes that the transaction logs and applies.

mod alloc;
mod class;
pub(crate) mod layout;
mod meta;
mod run;
mod walk;

pub(crate) use alloc::{bitmap_mismatch, Arena, Heap, HeapUndo, PendingFree};
pub use class::{ClassTable, SizeClasses};
pub(crate) use meta::MetaOps;
pub(crate) use walk::{walk_blocks, walk_each, walk_objects as walk};
