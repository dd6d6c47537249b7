//! A failed write-back (msync returning an error) while `Pool::create` formats the new pool
//! (its header, zone metadata and lanes): the call returns a typed I/O error saying the
//! pool was not created, and removes the half-made file it created, so that the same
//! `Pool::create` succeeds once the device works again. A file that was there before is
//! never removed. One test per binary: the injected fault is process-wide.

mod support;

use pgl::{fault, Config, Error, FlushMode, Pool};

#[test]
fn a_failed_write_back_while_formatting_removes_the_file_create_made() {
    let path = support::test_dir().join(format!("pgl-pool-create-iofail-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = || Config::small("createfail").flush(FlushMode::Msync);

    fault::set_fail_msync(true);
    let made = Pool::create(&path, &cfg());
    fault::set_fail_msync(false);
    match made {
        Err(e @ Error::Io { .. }) => {
            let m = e.to_string();
            assert!(m.contains(&*path.to_string_lossy()), "{m}");
            assert!(
                m.contains("the pool was not created")
                    && m.contains("removed")
                    && m.contains("retry"),
                "{m}"
            );
            assert!(!m.contains("reopen"), "there is no pool to reopen: {m}");
        }
        Err(e) => panic!("the create that saw the failure: {e}"),
        Ok(_) => panic!("the create that saw the failure succeeded"),
    }
    assert!(
        !path.exists(),
        "the half-made pool was left behind: a retry would fail with AlreadyExists"
    );
    let pool = Pool::create(&path, &cfg()).expect("a retry once the device works");
    let root = pool.root::<u64>().unwrap();
    pool.tx(|tx| {
        *tx.open(root)? = 7;
        Ok(())
    })
    .unwrap();
    drop(pool);

    // A file that was there before is never removed, even if creating fails.
    fault::set_fail_msync(true);
    let again = Pool::create(&path, &cfg());
    fault::set_fail_msync(false);
    assert!(
        matches!(again, Err(Error::AlreadyExists { .. })),
        "{:?}",
        again.err()
    );
    let pool = Pool::open(&path, "createfail").unwrap();
    let root = pool.root::<u64>().unwrap();
    assert_eq!(*pool.get(root).unwrap(), 7);
    drop(pool);
    let _ = std::fs::remove_file(&path);
}
