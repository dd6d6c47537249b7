//! A transaction that reads an object again skips finding it in the heap (the runtime
//! remembers which objects it vetted under the locks it holds). These tests pin that the
//! shortcut never outlives what it relies on: the object must still be live, of the type
//! asked for, and read under this transaction's lock.

mod support;

use pgl::{Config, Error, Oid, Pool};

fn pool(name: &str) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-rereads-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (Pool::create(&path, &Config::small(name)).unwrap(), path)
}

#[test]
fn reads_again_see_the_object_and_this_transactions_changes() {
    let (pool, path) = pool("see");
    let o = pool.tx(|tx| tx.alloc([1u64, 2])).unwrap();
    pool.tx(|tx| {
        assert_eq!(*tx.get(o)?, [1, 2]);
        assert_eq!(*tx.get(o)?, [1, 2], "read again");
        tx.open(o)?[1] = 20;
        assert_eq!(*tx.get(o)?, [1, 20], "the buffer, not the pool");
        Ok(())
    })
    .unwrap();
    assert_eq!(*pool.get(o).unwrap(), [1, 20]);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_read_after_this_transaction_freed_the_object_fails() {
    let (pool, path) = pool("freed");
    let o = pool.tx(|tx| tx.alloc(7u64)).unwrap();
    let r = pool.tx(|tx| {
        assert_eq!(*tx.get(o)?, 7);
        tx.free(o)?;
        tx.get(o).map(|v| *v)
    });
    assert!(matches!(r, Err(Error::UseAfterFree { .. })), "{r:?}");
    assert_eq!(
        *pool.get(o).unwrap(),
        7,
        "the failed transaction freed nothing"
    );
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_read_as_another_type_is_refused_after_a_read_as_the_right_one() {
    let (pool, path) = pool("type");
    let o = pool.tx(|tx| tx.alloc(7u64)).unwrap();
    let other: Oid<[u64; 2]> = o.cast();
    let r = pool.tx(|tx| {
        assert_eq!(*tx.get(o)?, 7);
        tx.get(other).map(|v| *v)
    });
    assert!(matches!(r, Err(Error::TypeMismatch { .. })), "{r:?}");
    let r = pool.tx(|tx| {
        assert_eq!(*tx.get(o)?, 7);
        tx.open(other).map(|v| *v)
    });
    assert!(matches!(r, Err(Error::TypeMismatch { .. })), "{r:?}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn what_one_transaction_vetted_is_not_trusted_by_the_next() {
    let (pool, path) = pool("next");
    let o = pool.tx(|tx| tx.alloc(7u64)).unwrap();
    assert_eq!(pool.tx(|tx| Ok(*tx.get(o)?)).unwrap(), 7);
    // Another transaction on the same thread (the same lane) frees it.
    pool.tx(|tx| tx.free(o)).unwrap();
    let r = pool.tx(|tx| tx.get(o).map(|v| *v));
    assert!(matches!(r, Err(Error::InvalidOid { .. })), "{r:?}");
    // An aborted transaction's reads are forgotten too.
    let p = pool.tx(|tx| tx.alloc(8u64)).unwrap();
    let r: pgl::Result<()> = pool.tx(|tx| {
        tx.get(p)?;
        Err(Error::Aborted {
            reason: "test".into(),
        })
    });
    assert!(r.is_err());
    pool.tx(|tx| tx.free(p)).unwrap();
    let r = pool.tx(|tx| tx.get(p).map(|v| *v));
    assert!(matches!(r, Err(Error::InvalidOid { .. })), "{r:?}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn many_objects_read_twice_each_in_one_transaction() {
    let (pool, path) = pool("many");
    // More objects than the shortcut remembers, read in two interleaved passes.
    let oids: Vec<Oid<u64>> = pool
        .tx(|tx| (0..200u64).map(|i| tx.alloc(i * 3)).collect())
        .unwrap();
    let sum = pool
        .tx(|tx| {
            let mut sum = 0;
            for pass in 0..2 {
                for (i, &o) in oids.iter().enumerate() {
                    if i % 2 == pass {
                        sum += *tx.get(o)?;
                        sum += *tx.get(o)?;
                    }
                }
            }
            for &o in oids.iter().step_by(7) {
                *tx.open(o)? += 1;
                sum += *tx.get(o)?;
            }
            Ok(sum)
        })
        .unwrap();
    let opened: u64 = oids.iter().step_by(7).count() as u64;
    let expect = 2 * (0..200u64).map(|i| i * 3).sum::<u64>()
        + (0..200u64).step_by(7).map(|i| i * 3 + 1).sum::<u64>();
    assert_eq!(sum, expect, "{opened} objects opened");
    std::fs::remove_file(path).unwrap();
}
