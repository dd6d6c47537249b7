//! Helpers shared by integration tests that create file pools.

use std::path::PathBuf;

/// Where test pools live: tmpfs where there is one. On a disk-backed file system pgl
/// (correctly) msyncs every commit, which would make the tests slow without testing more.
pub fn test_dir() -> PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}
