//! `NewFile`: the file `Media::create_file` made for a new pool or log, removed again if
//! writing the pool or log into it fails, so that the same create can be retried.
//!
//! Invariant: only the file the create made is ever removed — the one still at its path
//! with the same device and inode — and only while this process holds a descriptor of it,
//! and so the lock its creator took (`Media::lock_exclusive`) before formatting it: no
//! other `Pool` or `Log` can have opened it meanwhile. A file that was at the path before
//! is never touched (`create_new` refused it).

use super::media::FileKind;
use crate::Error;
use std::fs::File;
use std::path::{Path, PathBuf};

/// A file a create made; see the module docs.
pub(crate) struct NewFile {
    path: PathBuf,
    /// A second descriptor of the created file's open file description: its `flock` (held
    /// by the description) outlives the `Media` until the removal is done. `None` if the
    /// descriptor could not be duplicated.
    _held: Option<File>,
    /// The device and inode of the file made (`None` if they could not be read: then it
    /// is never removed).
    id: Option<(u64, u64)>,
}

/// What [`NewFile::remove`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Removal {
    /// The file is gone.
    Removed,
    /// Another file is at the path now (or it could not be told): left alone.
    NotOurs,
    /// Removing it failed.
    Failed,
}

impl NewFile {
    /// The file `file` just created at `path`.
    pub(super) fn new(file: &File, path: &Path) -> NewFile {
        NewFile {
            path: path.to_owned(),
            _held: file.try_clone().ok(),
            id: file.metadata().ok().map(|m| id_of(&m)),
        }
    }

    /// Removes the file, if it is still the one made at its path.
    pub(crate) fn remove(self) -> Removal {
        let now = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| id_of(&m));
        if self.id.is_none() || now != self.id {
            return Removal::NotOurs;
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Removal::Removed,
            Err(_) => Removal::Failed,
        }
    }

    /// `e`, the error that stopped the new pool or log (`kind`) being written, once the
    /// file is removed: an I/O error then says the pool or log was not created and what
    /// became of its file (not "reopen it": there is nothing to reopen).
    pub(crate) fn abandon(self, kind: FileKind, e: Error) -> Error {
        let removal = self.remove();
        let Error::Io { path, source, .. } = e else {
            return e;
        };
        // The wording for each removal, with the kind named: `Error::Io` takes a static
        // text, so the two kinds are spelled out by the macro.
        macro_rules! not_created {
            ($what:literal) => {
                match removal {
                    Removal::Removed => concat!(
                        "the ", $what, " was not created (its half-made file was removed; \
                         retry once the device works): writing it to"
                    ),
                    Removal::NotOurs => concat!(
                        "the ", $what, " was not created (the file now at its path is not \
                         the one this call made, and was left alone; retry once the device \
                         works): writing it to"
                    ),
                    Removal::Failed => concat!(
                        "the ", $what, " was not created, and its half-made file could not be \
                         removed (delete it, then retry once the device works): writing it to"
                    ),
                }
            };
        }
        let op = match kind {
            FileKind::Pool => not_created!("pool"),
            FileKind::Log => not_created!("log"),
        };
        Error::io(op, path, source)
    }
}

/// The device and inode of a file.
fn id_of(m: &std::fs::Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (m.dev(), m.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = m;
        (0, 0)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::persist::{FlushMode, Media};

    fn failure(path: &Path) -> Error {
        Error::io("msync", path, std::io::Error::from_raw_os_error(libc::EIO))
    }

    #[test]
    fn the_file_made_is_removed_and_the_error_says_so() {
        let path = crate::scratch_pool("new-file-removed");
        let (media, made) =
            Media::create_file(&path, 1 << 16, 1 << 16, Some(FlushMode::None), false)
                .expect("create");
        drop(media);
        let m = made.abandon(FileKind::Pool, failure(&path)).to_string();
        assert!(!path.exists(), "{m}");
        assert!(
            m.contains("the pool was not created") && m.contains("retry"),
            "{m}"
        );
    }

    #[test]
    fn a_file_that_took_the_path_since_is_left_alone() {
        let path = crate::scratch_pool("new-file-replaced");
        let (media, made) =
            Media::create_file(&path, 1 << 16, 1 << 16, Some(FlushMode::None), false)
                .expect("create");
        drop(media);
        // (The made file's inode cannot be reused meanwhile: `made` holds it open.)
        std::fs::remove_file(&path).expect("remove");
        std::fs::write(&path, b"someone else's").expect("write");
        let m = made.abandon(FileKind::Log, failure(&path)).to_string();
        assert_eq!(
            std::fs::read(&path).expect("read"),
            b"someone else's",
            "{m}"
        );
        assert!(
            m.contains("the log was not created") && m.contains("left alone"),
            "{m}"
        );
        std::fs::remove_file(&path).expect("remove");
    }
}
