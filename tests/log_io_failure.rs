//! A failed write-back (msync returning an error) under a log: the force that saw it, and
//! every later one, returns a typed I/O error and the durable LSN does not move; reopening
//! recovers the records forced before the failure. One test per binary: the injected
//! fault is process-wide.

mod support;

use pgl::log::{ForcePolicy, Log, LogConfig};
use pgl::{fault, Error, FlushMode};

#[test]
fn a_failed_msync_fails_the_force_and_every_later_one() {
    let path = support::test_dir().join(format!("pgl-log-iofail-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = LogConfig::new(64 << 10)
        .policy(ForcePolicy::GroupCommit(2))
        .flush(FlushMode::Msync);
    let log = Log::create(&path, cfg).unwrap();
    log.append(b"one").unwrap();
    log.append(b"two").unwrap();
    assert_eq!(log.durable_lsn(), 2);

    fault::set_fail_msync(true);
    log.append(b"three").unwrap(); // completed, not forced (the window is 2)
    let forced = log.append(b"four");
    fault::set_fail_msync(false);
    match forced {
        Err(e @ Error::Io { .. }) => assert!(e.to_string().contains("reopen"), "{e}"),
        other => panic!("the force that saw the failure: {other:?}"),
    }
    assert_eq!(
        log.durable_lsn(),
        2,
        "nothing after the failure counts as durable"
    );
    // Poisoned: write-back works again, but nothing written since the failure is known
    // durable, so forces keep failing.
    assert!(matches!(log.force(4), Err(Error::Io { .. })));
    assert!(matches!(log.append(b"five"), Ok(5)));
    assert!(matches!(log.force(5), Err(Error::Io { .. })));
    drop(log);

    let log = Log::open_with(&path, Some(FlushMode::Msync)).unwrap();
    let got: Vec<Vec<u8>> = log.iter().map(|r| r.unwrap().payload).collect();
    assert!(got.len() >= 2, "the forced records survive: {got:?}");
    assert_eq!(&got[..2], &[b"one".to_vec(), b"two".to_vec()]);
    log.append(b"again").unwrap();
    drop(log);
    let _ = std::fs::remove_file(&path);
}
