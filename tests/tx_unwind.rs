//! Safe misuse of handles never breaks the pool: a panic with handles, a nested
//! transaction or a `Detached` alive discards everything and releases every lock; a
//! leaked (`mem::forget`) `Ref` or `Mut` keeps its lock or borrow, refused with a typed
//! error, never aliased; a `Ref` blocks this thread's own frees and updates.

mod support;

use pgl::{Config, Error, Pool};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn tmp(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-unwind-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn panics_leave_the_pool_usable() {
    let path = tmp("unwind");
    let pool = Pool::create(&path, &Config::small("u")).unwrap();
    let a = pool.tx(|tx| tx.alloc([1u64; 4])).unwrap();
    let b = pool.tx(|tx| tx.alloc([2u64; 4])).unwrap();
    // Panic with a Mut, a Read, and a nested tx alive.
    let r = catch_unwind(AssertUnwindSafe(|| {
        pool.tx(|tx| {
            let mut m = tx.open(a)?;
            m[0] = 99;
            let _r = tx.get(b)?;
            let n = tx.alloc([3u64; 4])?;
            pool.tx(|tx2| {
                let mut mm = tx2.open(n)?;
                mm[1] = 4;
                panic!("boom");
                #[allow(unreachable_code)]
                Ok(())
            })
        })
    }));
    assert!(r.is_err());
    assert_eq!(pool.get(a).unwrap()[0], 1);
    pool.tx(|tx| {
        tx.open(a)?[0] = 5;
        tx.open(b)?[0] = 6;
        Ok(())
    })
    .unwrap();
    // Panic with a Detached alive.
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut d = pool.open_mut(a).unwrap();
        d[0] = 77;
        let _g = pool.get(b).unwrap();
        panic!("boom2");
    }));
    assert!(r.is_err());
    assert_eq!(pool.get(a).unwrap()[0], 5);
    // Ref forgotten: its lock stays, reported, never UB.
    let g = pool.get(b).unwrap();
    std::mem::forget(g);
    let e = pool.tx(|tx| {
        tx.open(b)?[0] = 1;
        Ok(())
    });
    assert!(matches!(e, Err(Error::LockedByThisThread { .. })), "{e:?}");
    // Mut forgotten, then other ops in the same tx.
    pool.tx(|tx| {
        let m = tx.open(a)?;
        std::mem::forget(m);
        assert!(matches!(tx.open(a), Err(Error::AlreadyBorrowed { .. })));
        assert!(matches!(tx.get(a), Err(Error::AlreadyBorrowed { .. })));
        assert!(matches!(tx.free(a), Err(Error::AlreadyBorrowed { .. })));
        Ok(())
    })
    .unwrap();
    drop(pool);
    let pool = Pool::open(&path, "u").unwrap();
    assert!(pool.verify_parity().unwrap().is_empty());
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_ref_blocks_frees_by_this_thread() {
    let path = tmp("reffree");
    let pool = Pool::create(&path, &Config::small("u")).unwrap();
    let a = pool.tx(|tx| tx.alloc([1u64; 4])).unwrap();
    let r = pool.get(a).unwrap();
    let e = pool.tx(|tx| tx.free(a));
    assert!(matches!(e, Err(Error::LockedByThisThread { .. })), "{e:?}");
    let e = pool.open_mut(a).map(|_| ());
    assert!(matches!(e, Err(Error::LockedByThisThread { .. })), "{e:?}");
    assert_eq!(r[0], 1);
    // A Ref returned out of a transaction closure.
    let r2 = pool.tx(|_tx| pool.get(a)).unwrap();
    assert_eq!(r2[0], 1);
    drop((r, r2));
    // A Detached holds the object's lock against this thread's reads and frees.
    let d = pool.open_mut(a).unwrap();
    assert!(matches!(pool.get(a), Err(Error::LockedByThisThread { .. })));
    assert!(matches!(
        pool.tx(|tx| tx.free(a)),
        Err(Error::LockedByThisThread { .. })
    ));
    drop(d);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_nested_transaction_that_panics_aborts_the_outer_one_even_if_caught() {
    // A nested `pool.tx` joins the outer transaction; if it panics, what it changed before
    // the panic must not commit with the outer one, even when the outer closure catches
    // the panic and returns `Ok` (as an inner error aborts the outer).
    let path = tmp("nestedpanic");
    let pool = Pool::create(&path, &Config::small("np")).unwrap();
    let root = pool.root::<[u64; 4]>().unwrap();
    let r = pool.tx(|tx| {
        tx.open(root)?.write_at(0, &1u64);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            pool.tx(|tx| {
                tx.open(root)?.write_at(8, &2u64);
                panic!("inner transaction panics halfway");
                #[allow(unreachable_code)]
                Ok(())
            })
        }));
        assert!(caught.is_err());
        Ok(())
    });
    assert!(matches!(r, Err(Error::Aborted { .. })), "{r:?}");
    assert_eq!(
        *pool.get(root).unwrap(),
        [0; 4],
        "nothing of either committed"
    );
    // The pool is usable afterwards.
    pool.tx(|tx| {
        tx.open(root)?.write_at(0, &3u64);
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.get(root).unwrap()[0], 3);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
