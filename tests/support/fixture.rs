//! The pool fixtures of older formats (`tests/fixtures/pool-v<N>.bin`, see `make.sh`).

use std::path::{Path, PathBuf};

/// Writes the fixture `name` out as a pool file in the test directory, at a path of its
/// own for `tag` (tests run in parallel threads of one process); its path.
pub fn unpack(name: &str, tag: &str) -> PathBuf {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let bytes = std::fs::read(&fixture).unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
    assert_eq!(&bytes[..8], b"PGLFIXT1", "{name}: not a fixture");
    let len = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let mut file = vec![0u8; len as usize];
    let mut at = 16;
    while at < bytes.len() {
        let off = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
        let n = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        file[off..off + n].copy_from_slice(&bytes[at + 12..at + 12 + n]);
        at += 12 + n;
    }
    let path = super::test_dir().join(format!("pgl-compat-{tag}{name}-{}", std::process::id()));
    std::fs::write(&path, file).unwrap();
    path
}
