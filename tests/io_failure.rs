//! A failed write-back (msync returning an error: a dying disk, a full thin volume) is
//! reported as a typed error, never a panic; the pool then refuses further commits, and
//! reopening it recovers a state with or without the transaction that saw the failure.
//! One test per binary: the injected fault is process-wide.

mod support;

use pgl::{fault, Config, Error, FlushMode, Pool};

#[test]
fn a_failed_msync_fails_the_commit_and_every_later_one_until_reopen() {
    let path = support::test_dir().join(format!("pgl-iofail-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = Config::small("iofail").flush(FlushMode::Msync);
    let pool = Pool::create(&path, &cfg).unwrap();
    let root = pool.root::<[u64; 4]>().unwrap();
    let block = pool.tx(|tx| tx.alloc(1u64)).unwrap();
    pool.tx(|tx| {
        tx.open(root)?[0] = 1;
        Ok(())
    })
    .unwrap();

    // Faults injected: every msync fails while the fault is on (the one commit below).
    fault::set_fail_msync(true);
    let logged = pool.tx(|tx| {
        tx.open(root)?[0] = 2;
        Ok(())
    });
    fault::set_fail_msync(false);
    let is_io = |r: &pgl::Result<()>| matches!(r, Err(Error::Io { .. }));
    assert!(
        is_io(&logged),
        "the commit that saw the failure: {logged:?}"
    );
    let msg = logged.unwrap_err().to_string();
    assert!(msg.contains("reopen"), "{msg}");

    // The pool is poisoned: a logged commit, a direct (free) commit and an allocation all
    // fail now, though write-back works again.
    let later = pool.tx(|tx| {
        tx.open(root)?[1] = 5;
        Ok(())
    });
    assert!(is_io(&later), "{later:?}");
    assert!(is_io(&pool.tx(|tx| tx.free(block))));
    assert!(is_io(&pool.tx(|tx| tx.alloc(3u32).map(|_| ()))));
    // Reads still work.
    assert!(matches!(pool.get(root).unwrap()[0], 1 | 2));
    drop(pool);

    // Reopening recovers: the failed transaction is either wholly there or wholly absent,
    // the later ones are absent, and the pool takes commits again.
    let pool = Pool::open_with(&path, &cfg).unwrap();
    let r = *pool.get(root).unwrap();
    assert!(r == [1, 0, 0, 0] || r == [2, 0, 0, 0], "{r:?}");
    assert_eq!(
        *pool.get(block).unwrap(),
        1,
        "the refused free changed nothing"
    );
    pool.tx(|tx| {
        tx.open(root)?[3] = 9;
        Ok(())
    })
    .unwrap();
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
