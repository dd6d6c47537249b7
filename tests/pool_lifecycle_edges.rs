//! A pool's life cycle at the edges a production user meets: a pool a newer pgl wrote,
//! `Pool::reset` given a bad configuration, a symlink or something that is not a file,
//! an inspection of a FIFO. Each gives a typed `pgl::Error` that says what to do, and
//! leaves the file as it was.

mod support;

use pgl::{Config, Error, Header, Pool};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const PAGE: usize = 4096;
const LAYOUT: &str = "lifecycle";

/// A directory of its own for one test, removed (with what it holds) when dropped.
struct TmpDir(PathBuf);

impl TmpDir {
    fn new(name: &str) -> TmpDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p =
            support::test_dir().join(format!("pgl-lifecycle-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p).unwrap();
        TmpDir(p)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config() -> Config {
    let mut cfg = Config::small(LAYOUT);
    cfg.rows = 8;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.geometry().pool_size(2);
    cfg
}

/// A closed pool at `path` whose root holds `value`.
fn pool_holding(path: &Path, value: u64) {
    let pool = Pool::create(path, &config()).unwrap();
    let root = pool.root::<[u64; 4]>().unwrap();
    pool.tx(|tx| {
        tx.open(root)?[0] = value;
        Ok(())
    })
    .unwrap();
}

fn root_value(path: &Path) -> u64 {
    let pool = Pool::open(path, LAYOUT).unwrap();
    let root = pool.root::<[u64; 4]>().unwrap();
    let v = pool.get(root).unwrap()[0];
    v
}

/// Writes header copy `copy` (0: A, 1: B) of the pool at `path` as `good` (the file's
/// bytes as this pgl left them) has it, but claiming format version `version`, with a
/// valid checksum: what a newer pgl would write.
fn claim_version(path: &Path, good: &[u8], copy: u64, version: u32) {
    let mut h = Header::decode(&good[..PAGE]).unwrap();
    let off = h.geo.header_offset(copy);
    h.version = version;
    support::file_write(path, off, &h.encode());
}

/// A pool whose header a newer pgl wrote (in one copy, its open stopped before it wrote
/// the other; or in both) is refused with `Error::Version`, which says to upgrade pgl, and
/// neither copy is rewritten: taking the older copy would hand the newer pgl's pool back
/// to a build that misreads it.
#[test]
fn a_pool_a_newer_pgl_wrote_is_refused_and_left_as_it_is() {
    let dir = TmpDir::new("newer");
    let path = dir.join("p.pool");
    pool_holding(&path, 7);
    let good = std::fs::read(&path).unwrap();
    for copies in [&[0u64][..], &[1], &[0, 1]] {
        std::fs::write(&path, &good).unwrap();
        for &c in copies {
            claim_version(&path, &good, c, 99);
        }
        let before = std::fs::read(&path).unwrap();
        for read_only in [false, true] {
            let r = if read_only {
                Pool::open_read_only(&path)
            } else {
                Pool::open(&path, LAYOUT)
            };
            match r {
                Err(e @ Error::Version { found: 99, .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("newer pgl") && msg.contains("upgrade pgl"),
                        "copies {copies:?}: {msg}"
                    );
                    assert!(msg.contains("p.pool"), "{msg}");
                }
                Err(e) => panic!("copies {copies:?}, read-only {read_only}: {e}"),
                Ok(_) => panic!("copies {copies:?}, read-only {read_only}: opened"),
            }
            assert!(
                std::fs::read(&path).unwrap() == before,
                "copies {copies:?}: the file changed"
            );
        }
    }
    // The copies back as this pgl wrote them: the pool opens with its data.
    std::fs::write(&path, &good).unwrap();
    assert_eq!(root_value(&path), 7);
}

/// `Pool::reset` with a configuration `Pool::create` refuses removes nothing: the old
/// pool stays, byte for byte, and the error says what is wrong with the configuration.
#[test]
fn reset_with_an_invalid_config_keeps_the_old_pool() {
    let dir = TmpDir::new("reset-config");
    let path = dir.join("p.pool");
    pool_holding(&path, 7);
    let before = std::fs::read(&path).unwrap();
    let mut bad = config();
    bad.size = 1;
    match Pool::reset(&path, &bad) {
        Err(Error::InvalidConfig { reason }) => assert!(reason.contains("size 1"), "{reason}"),
        Err(e) => panic!("expected InvalidConfig, got {e}"),
        Ok(_) => panic!("reset with size 1 made a pool"),
    }
    assert!(
        std::fs::read(&path).unwrap() == before,
        "the old pool changed"
    );
    assert_eq!(root_value(&path), 7);
}

/// `Pool::reset` of a symbolic link resets the pool it names, and the link keeps naming
/// it: not the link replaced by a new pool beside (perhaps on another file system than)
/// the old one, which would stay.
#[test]
fn reset_through_a_symlink_resets_the_pool_it_names() {
    let dir = TmpDir::new("reset-link");
    let real = dir.join("real.pool");
    let link = dir.join("link.pool");
    pool_holding(&real, 7);
    std::os::unix::fs::symlink("real.pool", &link).unwrap();
    drop(Pool::reset(&link, &config()).unwrap());
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_symlink(), "the link was replaced");
    assert_eq!(
        root_value(&link),
        0,
        "the pool the link names was not reset"
    );
    let mut names: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["link.pool", "real.pool"]);
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// `Pool::reset` of something that is not a regular file (a FIFO here; a device is the
/// same) refuses with `Error::NotAPool` and leaves it there.
#[test]
fn reset_leaves_a_fifo_alone() {
    let dir = TmpDir::new("reset-fifo");
    let fifo = dir.join("fifo.pool");
    mkfifo(&fifo);
    match Pool::reset(&fifo, &config()) {
        Err(e @ Error::NotAPool { .. }) => {
            assert!(e.to_string().contains("left this one alone"), "{e}")
        }
        Err(e) => panic!("expected NotAPool, got {e}"),
        Ok(_) => panic!("reset replaced a FIFO with a pool"),
    }
    let meta = std::fs::symlink_metadata(&fifo).unwrap();
    use std::os::unix::fs::FileTypeExt as _;
    assert!(meta.file_type().is_fifo(), "the FIFO was replaced");
}

/// `Pool::open_read_only` (`pgl info`, `check`, `dump`) of a FIFO says it is not a pool,
/// at once: it does not wait for a writer to open the FIFO.
#[test]
fn a_read_only_open_of_a_fifo_is_not_a_pool_and_does_not_wait() {
    let dir = TmpDir::new("fifo-read-only");
    let fifo = dir.join("fifo.pool");
    mkfifo(&fifo);
    let r = support::within("open_read_only of a FIFO", 10, {
        let fifo = fifo.clone();
        move || Pool::open_read_only(&fifo).map(|_| ())
    });
    match r {
        Err(e @ Error::NotAPool { .. }) => {
            assert!(e.to_string().contains("not a regular file"), "{e}")
        }
        other => panic!("expected NotAPool, got {other:?}"),
    }
    // A writable open (O_RDWR) of a FIFO never waited; it says the same.
    let r = Pool::open(&fifo, LAYOUT).map(|_| ());
    assert!(matches!(r, Err(Error::NotAPool { .. })), "{r:?}");
}
