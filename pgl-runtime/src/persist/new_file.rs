//! `NewFile`: the file `Media::create_file` made for a new pool or log. It is made under a
//! temporary name beside the path asked for (`temp_path`), formatted there, and only then
//! published at its path (`publish`: a rename that never replaces, or a link), so that a
//! crash while creating — a kill, a power loss — never leaves a half-made file at the
//! path (which no `open` would take and every `create` would refuse), at most a hidden
//! temporary file beside it, which the next create of the same path removes
//! (`remove_stale_temps`, once its creator is gone). If writing the pool or log into it
//! fails, it is removed again, so that the same create can be retried.
//!
//! Invariant: only the file the create made is ever removed — the one still at its
//! current name with the same device and inode — and only while this process holds a
//! descriptor of it, and so the lock its creator took (`Media::lock_exclusive`) before
//! formatting it: no other `Pool` or `Log` can have opened it meanwhile. A file that was at
//! either name before is never touched (both the temporary file's creation and the
//! publication refuse an existing file). The one exception is a stale temporary file:
//! named as this module names them for the same path, made by a process that no longer
//! exists, and unlocked.

use super::media::FileKind;
use crate::Error;
use std::fs::File;
use std::path::{Path, PathBuf};

/// A file a create made; see the module docs.
pub(crate) struct NewFile {
    /// Where the file is now: its temporary name until published, then `target`.
    path: PathBuf,
    /// The path the create was asked for.
    target: PathBuf,
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
    /// The file `file` just created at `temp`, for `target`.
    pub(super) fn new(file: &File, temp: &Path, target: &Path) -> NewFile {
        NewFile {
            path: temp.to_owned(),
            target: target.to_owned(),
            _held: file.try_clone().ok(),
            id: file.metadata().ok().map(|m| id_of(&m)),
        }
    }

    /// Moves the formatted file from its temporary name to the path the create was asked
    /// for, atomically and never over another file (`AlreadyExists` if one took the path
    /// meanwhile: the temporary file is then left for `abandon`), and syncs the directory.
    pub(crate) fn publish(&mut self) -> Result<(), Error> {
        if self.path == self.target {
            return Ok(());
        }
        match rename_noreplace(&self.path, &self.target) {
            Ok(()) => {
                self.path = self.target.clone();
                // The new name durable too: a create that returned survives a power loss.
                let dir = self
                    .target
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| Error::io("sync the directory of", &self.target, e))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Error::AlreadyExists {
                path: self.target.clone(),
                directory: self.target.is_dir(),
            }),
            Err(e) => Err(Error::io("publish (rename into place)", &self.target, e)),
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

/// The temporary name a new file for `target` is made under: hidden, in the same
/// directory (so that publishing it is a rename within one file system), unique to this
/// process and call.
pub(super) fn temp_path(target: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = N.fetch_add(1, Ordering::Relaxed);
    target.with_file_name(format!(".{name}.pgl-new-{}-{n}", std::process::id()))
}

/// Removes the temporary files that earlier creates of `target` left beside it when their
/// process died before publishing (a kill, a power loss): files named exactly as
/// [`temp_path`] names them for `target`, whose creating process is provably gone (its pid
/// answers `ESRCH`) and whose `flock` nobody holds. Anything else is kept: a file of this
/// process (another create may be writing it), of a live pid (possibly a reused one: kept
/// all the same), one whose pid cannot be asked about, or one locked. Best effort: a file
/// that cannot be removed stays, and the create goes on.
pub(super) fn remove_stale_temps(target: &Path) {
    let Some(name) = target.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let prefix = format!(".{name}.pgl-new-");
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(creator_pid)
        else {
            continue;
        };
        if pid != std::process::id() && process_is_gone(pid) {
            remove_if_unlocked(&entry.path());
        }
    }
}

/// The creator's pid in the tail `<pid>-<n>` of a temporary name (after its prefix);
/// `None` for any other tail.
fn creator_pid(tail: &str) -> Option<u32> {
    let (pid, n) = tail.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(n) {
        return None;
    }
    pid.parse().ok()
}

/// Whether no process has the pid `pid` (only a definite "no such process" counts).
fn process_is_gone(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        if pid <= 0 {
            return false;
        }
        // SAFETY: signal 0 sends nothing: kill only checks that the process exists (and
        // that we may signal it); it touches no memory of ours.
        let rc = unsafe { libc::kill(pid, 0) };
        rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// Removes the file at `path` if nobody holds its `flock` (a live creator locks the file
/// it formats: `Media::lock_exclusive`), and if it is still the file that was locked.
fn remove_if_unlocked(path: &Path) {
    let Ok(file) = std::fs::OpenOptions::new().read(true).open(path) else {
        return;
    };
    if !super::media::try_lock_file(&file) {
        return;
    }
    let same = match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => id_of(&a) == id_of(&b),
        _ => false,
    };
    if same {
        let _ = std::fs::remove_file(path);
    }
}

/// Renames `from` to `to` unless `to` exists (`AlreadyExists` then), atomically:
/// `renameat2(RENAME_NOREPLACE)` on Linux; where the file system or system lacks it, a hard
/// link (which refuses an existing name too) and the removal of the old name.
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
        };
        let (f, t) = (c(from)?, c(to)?);
        // SAFETY: two NUL-terminated paths that live across the call; renameat2 reads
        // them and touches no memory of ours.
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                f.as_ptr(),
                libc::AT_FDCWD,
                t.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => {}
            _ => return Err(e),
        }
    }
    std::fs::hard_link(from, to)?;
    // The file is at `to` now; the temporary name is only a second link to it.
    let _ = std::fs::remove_file(from);
    Ok(())
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

    /// The files beside `path` whose names start with `path`'s hidden temporary prefix.
    fn temporaries(path: &Path) -> Vec<PathBuf> {
        let prefix = format!(".{}.pgl-new-", path.file_name().unwrap().to_string_lossy());
        std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
            })
            .collect()
    }

    #[test]
    fn a_new_file_reaches_its_path_only_when_published() {
        // Found by review: a create killed while formatting left a full-size file with no
        // header at the path, which every open then refused and every create too.
        let path = crate::scratch_pool("new-file-published");
        let (media, mut made) =
            Media::create_file(&path, 1 << 16, 1 << 16, Some(FlushMode::None), false)
                .expect("create");
        assert!(
            !path.exists(),
            "the path holds the file before it is published"
        );
        assert_eq!(temporaries(&path).len(), 1, "made under one temporary name");
        made.publish().expect("publish");
        assert!(path.exists());
        assert!(temporaries(&path).is_empty(), "the temporary name stayed");
        drop(media);
        std::fs::remove_file(&path).expect("remove");
    }

    #[test]
    fn publishing_never_replaces_a_file_that_took_the_path() {
        let path = crate::scratch_pool("new-file-raced");
        let (media, mut made) =
            Media::create_file(&path, 1 << 16, 1 << 16, Some(FlushMode::None), false)
                .expect("create");
        std::fs::write(&path, b"someone else's").expect("write");
        let e = made.publish().expect_err("published over another file");
        assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
        drop(media);
        let _ = made.abandon(FileKind::Pool, e);
        assert_eq!(std::fs::read(&path).expect("read"), b"someone else's");
        assert!(temporaries(&path).is_empty(), "the temporary file stayed");
        std::fs::remove_file(&path).expect("remove");
    }

    #[test]
    fn the_file_made_is_removed_and_the_error_says_so() {
        let path = crate::scratch_pool("new-file-removed");
        let (media, mut made) =
            Media::create_file(&path, 1 << 16, 1 << 16, Some(FlushMode::None), false)
                .expect("create");
        made.publish().expect("publish");
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
        let (media, mut made) =
            Media::create_file(&path, 1 << 16, 1 << 16, Some(FlushMode::None), false)
                .expect("create");
        made.publish().expect("publish");
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
