//! A failed write-back (msync returning an error) while `Log::create` writes the new log's
//! superline: the call returns a typed I/O error and removes the half-made file it
//! created, so that the same `Log::create` succeeds once the device works again. One test
//! per binary: the injected fault is process-wide.

mod support;

use pgl::log::{Log, LogConfig};
use pgl::{fault, Error, FlushMode};

#[test]
fn a_failed_superline_write_removes_the_file_create_made() {
    let path = support::test_dir().join(format!("pgl-log-create-iofail-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = || LogConfig::new(64 << 10).flush(FlushMode::Msync);

    fault::set_fail_msync(true);
    let made = Log::create(&path, cfg());
    fault::set_fail_msync(false);
    match made {
        Err(e @ Error::Io { .. }) => {
            let m = e.to_string();
            assert!(m.contains(&*path.to_string_lossy()), "{m}");
            assert!(m.contains("was not created") && m.contains("retry"), "{m}");
        }
        other => panic!("the create that saw the failure: {other:?}"),
    }
    assert!(
        !path.exists(),
        "the half-made log was left behind: a retry would fail with AlreadyExists"
    );
    let log = Log::create(&path, cfg()).expect("a retry once the device works");
    log.append(b"one").unwrap();
    drop(log);

    // A file that was there before is never removed, even if creating fails.
    fault::set_fail_msync(true);
    let again = Log::create(&path, cfg());
    fault::set_fail_msync(false);
    assert!(
        matches!(again, Err(Error::AlreadyExists { .. })),
        "{again:?}"
    );
    let log = Log::open(&path).unwrap();
    assert_eq!(log.iter().next().unwrap().unwrap().payload, b"one");
    drop(log);
    let _ = std::fs::remove_file(&path);
}
