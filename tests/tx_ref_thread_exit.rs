//! A `Ref` may live in a thread-local and be dropped when its thread exits, after pgl's own
//! thread-locals are gone: it must still release its read lock, not panic (a panic in a
//! thread-local's destructor aborts the process). Its own binary: an abort takes the
//! whole test binary down.

mod support;

use pgl::{Config, Pool, Ref};
use std::cell::RefCell;

thread_local! {
    static KEPT: RefCell<Option<Ref<'static, u64>>> = const { RefCell::new(None) };
}

#[test]
fn a_ref_dropped_at_thread_exit_releases_its_lock() {
    let path = support::test_dir().join(format!("pgl-ref-exit-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool: &'static Pool = Box::leak(Box::new(
        Pool::create(&path, &Config::small("ref-exit")).unwrap(),
    ));
    let oid = pool.tx(|tx| tx.alloc(5u64)).unwrap();
    // `KEPT` is touched before `pool.get` registers pgl's thread-local of held `Ref`s, so
    // it is destroyed after that one.
    std::thread::spawn(move || {
        KEPT.with(|k| *k.borrow_mut() = Some(pool.get(oid).unwrap()));
    })
    .join()
    .unwrap();
    pool.tx(|tx| {
        *tx.open(oid)? = 6;
        Ok(())
    })
    .unwrap();
    assert_eq!(*pool.get(oid).unwrap(), 6);
    std::fs::remove_file(&path).unwrap();
}
