//! Behaviour of the transaction API: nesting, abort, open_mut/commit, borrow rules, typed
//! errors for misuse.

mod support;

use pgl::{Config, Error, Oid, Pool};

fn pool(name: &str) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-txapi-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (Pool::create(&path, &Config::small(name)).unwrap(), path)
}

#[test]
fn err_from_the_closure_aborts_everything() {
    let (pool, path) = pool("abort");
    let root = pool.root::<[u64; 2]>().unwrap();
    let free0 = pool.free_bytes();
    let r: pgl::Result<()> = pool.tx(|tx| {
        tx.open(root)?[0] = 7;
        let o = tx.alloc(5u64)?;
        tx.open(root)?[1] = o.raw();
        Err(Error::Aborted {
            reason: "test".into(),
        })
    });
    assert!(matches!(r, Err(Error::Aborted { .. })));
    assert_eq!(*pool.get(root).unwrap(), [0, 0]);
    assert_eq!(pool.free_bytes(), free0, "the allocation was rolled back");
    assert_eq!(pool.objects().unwrap().len(), 1, "only the root exists");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn nested_transactions_join_and_an_inner_error_aborts_the_outer() {
    let (pool, path) = pool("nested");
    let root = pool.root::<[u64; 2]>().unwrap();
    pool.tx(|tx| {
        tx.open(root)?[0] = 1;
        pool.tx(|inner| {
            inner.open(root)?[1] = 2;
            Ok(())
        })
    })
    .unwrap();
    assert_eq!(*pool.get(root).unwrap(), [1, 2]);
    let r = pool.tx(|tx| {
        tx.open(root)?[0] = 10;
        // The inner error is swallowed by the outer closure, yet the whole transaction aborts.
        let _ = pool.tx(|inner| -> pgl::Result<()> {
            inner.open(root)?[1] = 20;
            Err(Error::Aborted {
                reason: "inner".into(),
            })
        });
        Ok(())
    });
    assert!(matches!(r, Err(Error::Aborted { .. })), "{r:?}");
    assert_eq!(*pool.get(root).unwrap(), [1, 2]);
    std::fs::remove_file(path).unwrap();
}

/// The caller's own error, to abort transactions with.
#[derive(Debug, PartialEq)]
struct Overdrawn {
    short: u64,
}

impl std::fmt::Display for Overdrawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "overdrawn by {}", self.short)
    }
}

impl std::error::Error for Overdrawn {}

#[test]
fn a_caller_error_aborts_the_transaction_and_comes_back_downcastable() {
    let (pool, path) = pool("user-abort");
    let root = pool.root::<[u64; 2]>().unwrap();
    let free0 = pool.free_bytes();
    let r: pgl::Result<()> = pool.tx(|tx| {
        tx.open(root)?[0] = 7;
        let o = tx.alloc(5u64)?;
        tx.open(root)?[1] = o.raw();
        Err(Error::abort(Overdrawn { short: 3 }))
    });
    let e = r.unwrap_err();
    assert_eq!(e.downcast_ref::<Overdrawn>(), Some(&Overdrawn { short: 3 }));
    assert!(e.downcast_ref::<std::io::Error>().is_none());
    match &e {
        Error::Abort { error } => assert_eq!(
            error.downcast_ref::<Overdrawn>(),
            Some(&Overdrawn { short: 3 })
        ),
        other => panic!("not an Abort: {other:?}"),
    }
    assert!(e.to_string().contains("overdrawn by 3"), "{e}");
    assert_eq!(*pool.get(root).unwrap(), [0, 0]);
    assert_eq!(pool.free_bytes(), free0, "the allocation was rolled back");
    // A plain message will do too.
    let r: pgl::Result<()> = pool.tx(|_| Err(Error::abort("changed my mind")));
    assert!(
        matches!(&r, Err(Error::Abort { error }) if error.to_string() == "changed my mind"),
        "{r:?}"
    );
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_nested_caller_error_is_the_outer_transactions_error_even_when_swallowed() {
    let (pool, path) = pool("user-abort-nested");
    let root = pool.root::<[u64; 2]>().unwrap();
    // Propagated with `?`.
    let r: pgl::Result<()> = pool.tx(|tx| {
        tx.open(root)?[0] = 10;
        pool.tx(|inner| -> pgl::Result<()> {
            inner.open(root)?[1] = 20;
            Err(Error::abort(Overdrawn { short: 1 }))
        })
    });
    let e = r.unwrap_err();
    assert_eq!(e.downcast_ref::<Overdrawn>(), Some(&Overdrawn { short: 1 }));
    assert_eq!(*pool.get(root).unwrap(), [0, 0]);
    // Swallowed by the outer closure: the outer transaction still aborts, with the
    // caller's error (not a text of it).
    let r: pgl::Result<()> = pool.tx(|tx| {
        tx.open(root)?[0] = 10;
        let inner = pool.tx(|inner| -> pgl::Result<()> {
            inner.open(root)?[1] = 20;
            Err(Error::abort(Overdrawn { short: 2 }))
        });
        assert!(inner.is_err());
        Ok(())
    });
    let e = r.unwrap_err();
    assert_eq!(
        e.downcast_ref::<Overdrawn>(),
        Some(&Overdrawn { short: 2 }),
        "{e:?}"
    );
    assert_eq!(*pool.get(root).unwrap(), [0, 0]);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn open_mut_commits_one_object_atomically_and_drop_discards() {
    let (pool, path) = pool("openmut");
    let root = pool.root::<[u8; 100]>().unwrap();
    {
        let mut h = pool.open_mut(root).unwrap();
        h.copy_from_slice(&[9u8; 100]);
        h.commit().unwrap();
    }
    assert_eq!(pool.get(root).unwrap()[99], 9);
    {
        let mut h = pool.open_mut(root).unwrap();
        h[0] = 1;
        // dropped without commit
    }
    assert_eq!(pool.get(root).unwrap()[0], 9);
    let r = pool.tx(|_| pool.open_mut(root).map(|_| ()));
    assert!(matches!(r, Err(Error::InTransaction { .. })), "{r:?}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn misuse_returns_typed_errors() {
    let (pool, path) = pool("misuse");
    let root = pool.root::<[u64; 4]>().unwrap();
    // Wrong type through a cast oid.
    let wrong: Oid<u32> = root.cast();
    assert!(matches!(pool.get(wrong), Err(Error::TypeMismatch { .. })));
    assert!(matches!(
        pool.tx(|tx| tx.open(wrong).map(|_| ())),
        Err(Error::TypeMismatch { .. })
    ));
    // Root asked for with another type.
    assert!(matches!(pool.root::<u64>(), Err(Error::RootType { .. })));
    // Garbage offsets.
    for off in [0u64, 1, 4096, 1 << 40, root.raw() + 8] {
        let o: Oid<[u64; 4]> = Oid::from_raw(off);
        assert!(
            matches!(pool.get(o), Err(Error::InvalidOid { .. })),
            "offset {off:#x}"
        );
    }
    // Two live handles to one object in one transaction.
    let r = pool.tx(|tx| {
        let _a = tx.open(root)?;
        tx.open(root).map(|_| ())
    });
    assert!(matches!(r, Err(Error::AlreadyBorrowed { .. })));
    names_the_pool(&r, &path);
    // Use after free inside a transaction, and a double free.
    let o = pool.tx(|tx| tx.alloc(1u64)).unwrap();
    let r = pool.tx(|tx| {
        tx.free(o)?;
        tx.open(o).map(|_| ())
    });
    assert!(matches!(r, Err(Error::UseAfterFree { .. })));
    names_the_pool(&r, &path);
    let msg = r.unwrap_err().to_string();
    assert!(msg.contains("free an object last"), "{msg}");
    pool.tx(|tx| tx.free(o)).unwrap();
    assert!(matches!(
        pool.tx(|tx| tx.free(o)),
        Err(Error::InvalidOid { .. })
    ));
    // pool.get of an object this thread's transaction holds.
    let r = pool.tx(|tx| {
        let _h = tx.open(root)?;
        pool.get(root).map(|_| ())
    });
    assert!(matches!(r, Err(Error::LockedByThisThread { .. })));
    names_the_pool(&r, &path);
    std::fs::remove_file(path).unwrap();
}

/// The error of a pool's transaction names the pool file, in `pool_file()` and in its
/// message.
fn names_the_pool<T>(r: &pgl::Result<T>, path: &std::path::Path) {
    let Err(e) = r else {
        panic!("expected an error");
    };
    assert_eq!(e.pool_file(), Some(path), "{e:?}");
    assert!(
        e.to_string().starts_with(&path.display().to_string()),
        "{e}"
    );
}

#[test]
fn smashed_canary_aborts_and_leaves_nvmm_unchanged() {
    let (pool, path) = pool("canary");
    let root = pool.root::<[u8; 64]>().unwrap();
    let r = pool.tx(|tx| {
        tx.open(root)?[0] = 42;
        tx.inject(&pgl::Fault::SmashCanary { oid: root.raw() })
    });
    assert!(matches!(r, Err(Error::CanaryMismatch { .. })), "{r:?}");
    assert_eq!(pool.get(root).unwrap()[0], 0);
    assert!(pool.stats().aborts >= 1);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn transaction_larger_than_a_lane_is_refused_cleanly() {
    let (pool, path) = pool("toolarge");
    let objs: Vec<Oid<[u8; 60000]>> = (0..3)
        .map(|_| pool.tx(|tx| tx.alloc_zeroed::<[u8; 60000]>()).unwrap())
        .collect();
    let r = pool.tx(|tx| {
        for o in &objs {
            tx.open(*o)?.fill(1);
        }
        Ok(())
    });
    assert!(matches!(r, Err(Error::TxTooLarge { .. })), "{r:?}");
    for o in &objs {
        assert!(pool.get(*o).unwrap().iter().all(|&b| b == 0));
    }
    std::fs::remove_file(path).unwrap();
}

#[test]
fn stats_count_the_fences_of_each_kind_of_commit() {
    let (pool, path) = pool("fences");
    let root = pool.root::<[u64; 8]>().unwrap();
    let before = pool.stats();
    pool.tx(|tx| {
        tx.open(root)?[3] = 3;
        tx.alloc(0u64)
    })
    .unwrap();
    let after = pool.stats();
    assert_eq!(after.fences - before.fences, 2, "logged: log + apply");
    let before = after;
    pool.tx(|tx| {
        tx.open(root)?[3] = 4;
        Ok(())
    })
    .unwrap();
    let after = pool.stats();
    assert_eq!(
        after.fences - before.fences,
        1,
        "overwrite: log (the apply completes under the next fence)"
    );
    assert_eq!(after.deferred_applies - before.deferred_applies, 1);
    let o = pool.tx(|tx| tx.alloc(1u64)).unwrap();
    let s1 = pool.stats();
    pool.tx(|tx| tx.free(o)).unwrap();
    let s2 = pool.stats();
    assert_eq!(
        s2.fences - s1.fences,
        1,
        "a free is one failure-atomic word"
    );
    assert_eq!(s2.direct_commits - s1.direct_commits, 1);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_tx_wanting_an_object_this_thread_holds_a_ref_to_fails_at_once() {
    let (pool, path) = pool("refheld");
    let root = pool.root::<u64>().unwrap();
    let r = pool.get(root).unwrap();
    let t = std::time::Instant::now();
    let res = pool.tx(|tx| {
        *tx.open(root)? = 1;
        Ok(())
    });
    assert!(
        matches!(res, Err(Error::LockedByThisThread { .. })),
        "{res:?}"
    );
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    drop(r);
    pool.tx(|tx| {
        *tx.open(root)? = 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(*pool.get(root).unwrap(), 1);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn creating_the_root_inside_a_transaction_is_refused_and_reading_it_is_fine() {
    let (pool, path) = pool("rootintx");
    let r = pool.tx(|_| pool.root::<u64>());
    assert!(matches!(r, Err(Error::InTransaction { .. })), "{r:?}");
    let root = pool.root::<u64>().unwrap();
    let again = pool.tx(|_| pool.root::<u64>()).unwrap();
    assert_eq!(root, again);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn pool_get_inside_transactions_cannot_deadlock_two_threads() {
    // Each thread opens one object for writing, then reads the other with pool.get: a wait
    // would be a deadlock; a conflict re-runs one closure and both finish.
    let (pool, path) = pool("getdeadlock");
    let (a, b) = pool
        .tx(|tx| Ok((tx.alloc(0u64)?, tx.alloc(0u64)?)))
        .unwrap();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let run = |mine: Oid<u64>, other: Oid<u64>| {
        let pool = pool.clone();
        let barrier = barrier.clone();
        std::thread::spawn(move || {
            let mut first = true;
            pool.tx(|tx| {
                *tx.open(mine)? += 1;
                if first {
                    first = false;
                    barrier.wait();
                }
                let seen = *pool.get(other)?;
                Ok(seen)
            })
            .unwrap()
        })
    };
    let t1 = run(a, b);
    let t2 = run(b, a);
    t1.join().unwrap();
    t2.join().unwrap();
    assert_eq!(*pool.get(a).unwrap(), 1);
    assert_eq!(*pool.get(b).unwrap(), 1);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn alloc_unzeroed_keeps_the_blocks_bytes_and_writes_only_what_changed() {
    let (pool, path) = pool("unzeroed");
    let root = pool.root::<[u64; 2]>().unwrap();
    // Space never used holds zeros.
    let a = pool
        .tx(|tx| {
            let a = tx.alloc_unzeroed::<[u8; 4096]>()?;
            tx.open(root)?[0] = a.raw();
            Ok(a)
        })
        .unwrap();
    assert_eq!(*pool.get(a).unwrap(), [0u8; 4096]);
    // Fill it, free it: the next unfilled allocation of its class lands on its block and
    // keeps its bytes, with only those written through the handle changed, under a right
    // checksum.
    pool.tx(|tx| {
        let mut h = tx.open(a)?;
        for (i, b) in h.iter_mut().enumerate() {
            *b = i as u8 ^ 0x5a;
        }
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| tx.free(a)).unwrap();
    let before = pool.stats();
    let b = pool
        .tx(|tx| {
            let b = tx.alloc_unzeroed::<[u8; 4096]>()?;
            let mut h = tx.open(b)?;
            h.write_bytes(100, b"hello");
            tx.open(root)?[1] = b.raw();
            Ok(b)
        })
        .unwrap();
    let written = pool.stats().bytes_written - before.bytes_written;
    assert!(
        written < 128,
        "an unfilled 4 KiB allocation writing 5 bytes wrote {written} bytes in place"
    );
    let got = *pool.get(b).unwrap();
    assert_eq!(&got[100..105], b"hello");
    assert_eq!(
        b.raw(),
        a.raw(),
        "the lane's next allocation of the class reuses the freed block (the test needs it)"
    );
    for (i, &v) in got
        .iter()
        .enumerate()
        .filter(|(i, _)| !(100..105).contains(i))
    {
        assert_eq!(v, i as u8 ^ 0x5a, "byte {i} of the reused block");
    }
    assert!(
        pool.verify_objects(|_, _| {}).unwrap().is_empty(),
        "checksums hold"
    );
    assert!(pool.verify_parity().unwrap().is_empty(), "parity holds");
    drop(pool);
    // And after reopening.
    let pool = Pool::open(&path, "unzeroed").unwrap();
    assert_eq!(&pool.get(b).unwrap()[100..105], b"hello");
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_unfilled_allocation_of_a_freed_block_inherits_the_committed_checksum() {
    use pgl::Fault;
    let (pool, path) = pool("sealed");
    let root = pool.root::<[u64; 4]>().unwrap();
    let pattern = |i: usize| (i as u8).wrapping_mul(7) ^ 0x3c;
    let a = pool
        .tx(|tx| {
            let a = tx.alloc_zeroed::<[u8; 4096]>()?;
            let mut h = tx.open(a)?;
            for (i, b) in h.iter_mut().enumerate() {
                *b = pattern(i);
            }
            Ok(a)
        })
        .unwrap();
    pool.tx(|tx| tx.free(a)).unwrap();
    // One fault: a scribble over the free block's payload. Reading the bytes to checksum
    // them would bless it; the checksum carried over from the freed object exposes it.
    pool.inject(&Fault::Scribble {
        offset: a.raw() + 1000,
        len: 24,
        seed: 11,
    })
    .unwrap();
    let before = pool.stats();
    // As another type of the same size, without touching it.
    let b = pool
        .tx(|tx| {
            let b = tx.alloc_unzeroed::<[u32; 1024]>()?;
            tx.open(root)?[0] = b.raw();
            Ok(b)
        })
        .unwrap();
    assert_eq!(
        b.raw(),
        a.raw(),
        "the freed block is reused (the test needs it)"
    );
    // `tx.open` verifies what it copies (a plain `get` does not, by default).
    let got = pool
        .tx(|tx| Ok(*tx.open(b)?))
        .expect("repaired from parity");
    let bytes: Vec<u8> = got.iter().flat_map(|w| w.to_le_bytes()).collect();
    for (i, &v) in bytes.iter().enumerate() {
        assert_eq!(v, pattern(i), "byte {i}: the committed bytes, repaired");
    }
    let after = pool.stats();
    assert!(
        after.objects_repaired > before.objects_repaired,
        "1 fault injected, 1 repaired: objects repaired {} -> {}",
        before.objects_repaired,
        after.objects_repaired
    );
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    assert!(pool.verify_parity().unwrap().is_empty());

    // A block allocated and freed by one transaction, and one whose object had another
    // size, are allocated unfilled again: both objects get checksums of their bytes as
    // they are.
    let c = pool
        .tx(|tx| {
            let c = tx.alloc_unzeroed::<[u8; 4096]>()?;
            tx.free(c)?;
            Ok(c)
        })
        .unwrap();
    let d = pool
        .tx(|tx| {
            let d = tx.alloc_unzeroed::<[u8; 4096]>()?;
            tx.open(root)?[1] = d.raw();
            Ok(d)
        })
        .unwrap();
    assert_eq!(
        d.raw(),
        c.raw(),
        "the freed block is reused (the test needs it)"
    );
    let e = pool
        .tx(|tx| {
            let e = tx.alloc_zeroed::<[u8; 4000]>()?;
            tx.open(root)?[2] = e.raw();
            Ok(e)
        })
        .unwrap();
    pool.tx(|tx| tx.free(e)).unwrap();
    let f = pool
        .tx(|tx| {
            let f = tx.alloc_unzeroed::<[u8; 4008]>()?;
            tx.open(root)?[3] = f.raw();
            Ok(f)
        })
        .unwrap();
    assert_eq!(
        f.raw(),
        e.raw(),
        "the freed block is reused (the test needs it)"
    );
    pool.get(d).unwrap();
    assert_eq!(pool.get(f).unwrap()[..4000], [0u8; 4000]);
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    let pool = Pool::open(&path, "sealed").unwrap();
    assert_eq!(pool.get(b).unwrap()[0], got[0]);
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_detached_handle_makes_this_threads_reads_and_transactions_fail_at_once() {
    let (pool, path) = pool("detachedheld");
    let root = pool.root::<u64>().unwrap();
    let p = pool.clone();
    let (get, write, read) = support::within("a thread holding a handle", 30, move || {
        let mut d = p.open_mut(root).unwrap();
        *d = 5;
        let get = p.get(root).map(|_| ());
        let write = p.tx(|tx| {
            *tx.open(root)? = 1;
            Ok(())
        });
        let read = p.tx(|tx| tx.get(root).map(|r| *r));
        // Freezing the pool would wait for the handle's lane and lock.
        let t = std::time::Instant::now();
        let frozen = p.verify_parity();
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{frozen:?}"
        );
        assert!(
            matches!(frozen, Err(Error::HeldByThisThread { .. })),
            "{frozen:?}"
        );
        d.commit().unwrap();
        (get, write, read)
    });
    assert!(
        matches!(get, Err(Error::LockedByThisThread { .. })),
        "{get:?}"
    );
    assert!(
        matches!(write, Err(Error::LockedByThisThread { .. })),
        "{write:?}"
    );
    assert!(
        matches!(read, Err(Error::LockedByThisThread { .. })),
        "{read:?}"
    );
    assert_eq!(*pool.get(root).unwrap(), 5);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_thread_holding_a_detached_handle_never_waits_for_its_own_lane() {
    // Two lanes: another thread holds one, this thread's `Detached` the other. A
    // transaction of this thread must wait for the other thread's lane, not its own.
    let (pool, path) = pool("detachedlane");
    let (a, b, c) = pool
        .tx(|tx| Ok((tx.alloc(0u64)?, tx.alloc(0u64)?, tx.alloc(0u64)?)))
        .unwrap();
    let (held, release) = (
        std::sync::Arc::new(std::sync::Barrier::new(2)),
        std::sync::Arc::new(std::sync::Barrier::new(2)),
    );
    let other = {
        let (pool, held, release) = (pool.clone(), held.clone(), release.clone());
        std::thread::spawn(move || {
            let mut d = pool.open_mut(b).unwrap();
            *d = 2;
            held.wait();
            release.wait();
            std::thread::sleep(std::time::Duration::from_millis(200));
            d.commit().unwrap();
        })
    };
    let p = pool.clone();
    let r = support::within("a thread holding a handle", 30, move || {
        held.wait();
        let mut d = p.open_mut(a).unwrap();
        *d = 1;
        release.wait();
        // Both lanes are taken: this waits until the other thread commits.
        let r = p.tx(|tx| {
            *tx.open(c)? = 3;
            Ok(())
        });
        d.commit().unwrap();
        // Every lane held by this thread: an error, not a wait for itself.
        let d1 = p.open_mut(a).unwrap();
        let d2 = p.open_mut(b).unwrap();
        let full = p.tx(|tx| tx.get(c).map(|_| ()));
        drop((d1, d2));
        (r, full)
    });
    other.join().unwrap();
    assert!(r.0.is_ok(), "{:?}", r.0);
    assert!(matches!(r.1, Err(Error::InTransaction { .. })), "{:?}", r.1);
    assert_eq!(*pool.get(a).unwrap(), 1);
    assert_eq!(*pool.get(b).unwrap(), 2);
    assert_eq!(*pool.get(c).unwrap(), 3);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn pool_root_inside_a_transaction_that_holds_the_root_returns_it() {
    // Helpers that look the root up themselves, called twice in one transaction.
    let (pool, path) = pool("rootheld");
    let root = pool.root::<u64>().unwrap();
    pool.tx(|tx| {
        *tx.open(pool.root::<u64>()?)? += 1;
        let mut live = tx.open(pool.root::<u64>()?)?;
        *live += 1;
        assert_eq!(pool.root::<u64>()?, root, "with a live handle to it");
        assert!(matches!(pool.root::<u32>(), Err(Error::RootType { .. })));
        Ok(())
    })
    .unwrap();
    assert_eq!(*pool.get(root).unwrap(), 2);
    let again = pool.tx(|tx| {
        let _r = tx.get(root)?;
        pool.root::<u64>()
    });
    assert_eq!(again.unwrap(), root);
    let mut d = pool.open_mut(pool.root::<u64>().unwrap()).unwrap();
    *d += 1;
    assert_eq!(pool.root::<u64>().unwrap(), root, "with a Detached of it");
    d.commit().unwrap();
    assert_eq!(*pool.get(root).unwrap(), 3);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn object_readers_never_wait_for_this_threads_own_locks() {
    let (pool, path) = pool("readerswait");
    let root = pool.root::<u64>().unwrap();
    let p = pool.clone();
    let (in_tx, other, listed, verified, read) =
        support::within("a thread holding a handle", 30, move || {
            let in_tx = p.tx(|tx| {
                *tx.open(root)? = 1;
                p.read_object(root.raw()).map(|_| ())
            });
            let other = p.tx(|tx| {
                let o = tx.alloc(7u64)?;
                *tx.open(root)? = o.raw();
                Ok(())
            });
            let o = Oid::<u64>::from_raw(*p.get(root).unwrap());
            let other = other.and_then(|()| p.tx(|_| p.read_object(o.raw()).map(|(_, b)| b)));
            let d = p.open_mut(root).unwrap();
            let listed = p.objects().map(|l| l.len());
            let verified = p.verify_objects(|_, _| {}).map(|v| v.len());
            let read = p.read_object(root.raw()).map(|_| ());
            drop(d);
            (in_tx, other, listed, verified, read)
        });
    assert!(
        matches!(in_tx, Err(Error::LockedByThisThread { .. })),
        "{in_tx:?}"
    );
    assert_eq!(
        other.unwrap(),
        7u64.to_le_bytes(),
        "another object reads fine"
    );
    assert!(
        matches!(listed, Err(Error::LockedByThisThread { .. })),
        "{listed:?}"
    );
    assert!(
        matches!(verified, Err(Error::LockedByThisThread { .. })),
        "{verified:?}"
    );
    assert!(
        matches!(read, Err(Error::LockedByThisThread { .. })),
        "{read:?}"
    );
    assert_eq!(pool.objects().unwrap().len(), 2);
    std::fs::remove_file(path).unwrap();
}

/// A stored type with a name of its own in the registry.
#[derive(pgl::Persistent, Clone, Copy, Debug)]
#[repr(C)]
#[pgl(id = 0x7e57_0001)]
struct Reading {
    celsius: u64,
}

#[test]
fn errors_about_a_pools_contents_name_its_file_and_the_stored_type() {
    let (pool, path) = pool("named");
    let other_path = support::test_dir().join(format!("pgl-txapi-named2-{}", std::process::id()));
    let _ = std::fs::remove_file(&other_path);
    let other = Pool::create(&other_path, &Config::small("named2").parity(false)).unwrap();
    let reading = pool.tx(|tx| tx.alloc(Reading { celsius: 21 })).unwrap();
    let wrong: Oid<[u8; 8]> = reading.cast();

    // Inside the closure the error is as the transaction made it; leaving `pool.tx` it
    // names the file and the registered name of the type found.
    let e = pool
        .tx(|tx| {
            let e = tx.get(wrong).map(|_| ()).unwrap_err();
            assert_eq!(e.pool_file(), None, "not yet: still inside the transaction");
            Err::<(), _>(e)
        })
        .unwrap_err();
    let Error::TypeMismatch {
        ref pool_file,
        ref found_name,
        ..
    } = e
    else {
        panic!("expected TypeMismatch, got {e:?}");
    };
    assert_eq!(pool_file.as_deref(), Some(&*path));
    assert!(
        found_name
            .as_deref()
            .is_some_and(|n| n.ends_with("Reading")),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())), "{msg}");
    assert!(msg.contains("`tx_api::Reading`"), "{msg}");
    // The same outside a transaction, and through a nested `pool.tx` (whose boundary
    // names the file but reads no registry inside the outer transaction: the outer one
    // adds the name).
    let e = pool.get(wrong).map(|_| ()).unwrap_err();
    assert_eq!(e.pool_file(), Some(&*path), "{e}");
    let e = pool
        .tx(|_| pool.tx(|tx| tx.get(wrong).map(|_| ())))
        .unwrap_err();
    assert_eq!(e.pool_file(), Some(&*path), "{e}");
    assert!(e.to_string().contains("`tx_api::Reading`"), "{e}");

    // An error of another pool, returned through this pool's transaction, keeps its own
    // file: a damaged object of `other` (which keeps no parity, so nothing rebuilds it).
    let damaged = other.tx(|tx| tx.alloc(Reading { celsius: 5 })).unwrap();
    other
        .inject(&pgl::Fault::BitFlips {
            offset: damaged.raw(),
            bits: 1,
            seed: 9,
        })
        .unwrap();
    let e = pool
        .tx(|_| other.tx(|tx| Ok(*tx.open(damaged)?)))
        .unwrap_err();
    let Error::ChecksumMismatch {
        ref pool_file,
        ref type_name,
        ..
    } = e
    else {
        panic!("expected ChecksumMismatch, got {e:?}");
    };
    assert_eq!(pool_file.as_deref(), Some(&*other_path), "{e}");
    assert!(
        type_name.as_deref().is_some_and(|n| n.ends_with("Reading")),
        "{e}"
    );

    // Errors that are not about a pool's contents name none.
    let e = pool.tx(|_| pool.open_mut(reading).map(|_| ())).unwrap_err();
    assert!(matches!(e, Error::InTransaction { .. }), "{e:?}");
    assert_eq!(e.pool_file(), None);
    drop((pool, other));
    std::fs::remove_file(path).unwrap();
    std::fs::remove_file(other_path).unwrap();
}

#[test]
fn two_threads_each_holding_a_detached_handle_do_not_wait_for_each_others_lane() {
    // Two lanes, each held by one thread's `Detached`; each thread then starts a
    // transaction, which would wait for the other thread's lane, held until that thread's
    // own transaction ends: a deadlock. It must end in an error instead.
    let (pool, path) = pool("detachedcycle");
    let (a, b, c) = pool
        .tx(|tx| Ok((tx.alloc(0u64)?, tx.alloc(0u64)?, tx.alloc(0u64)?)))
        .unwrap();
    let both = std::sync::Arc::new(std::sync::Barrier::new(2));
    let (send, recv) = std::sync::mpsc::channel();
    for (mine, v) in [(a, 1u64), (b, 2u64)] {
        let (pool, both, send) = (pool.clone(), both.clone(), send.clone());
        std::thread::spawn(move || {
            let mut d = pool.open_mut(mine).unwrap();
            *d = v;
            both.wait();
            let r = pool.tx(|tx| {
                *tx.open(c)? += v;
                Ok(())
            });
            drop(d);
            let _ = send.send(r);
        });
    }
    for _ in 0..2 {
        let r = recv
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("hung: each thread waits for the lane of the other's Detached");
        assert!(
            matches!(r, Ok(()) | Err(Error::InTransaction { .. })),
            "{r:?}"
        );
    }
    // Every lane is free again.
    pool.tx(|tx| {
        *tx.open(c)? += 10;
        Ok(())
    })
    .unwrap();
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// `tx.get` of an object the transaction has not buffered reads it in place, under the
/// transaction's read lock; that handle borrows the object as one reading a buffer does.
/// Opening it for update meanwhile made a copy the live `Read` did not see (it kept
/// reading the old bytes while the `Mut` changed the copy: two views of one object that
/// disagree), and freeing it succeeded under the live `Read`; both are refused with
/// `AlreadyBorrowed`, as they are when the object is buffered.
#[test]
fn a_read_in_place_borrows_its_object_like_a_buffered_read() {
    let (pool, path) = pool("readborrow");
    let x = pool.tx(|tx| tx.alloc(1u64)).unwrap();
    let y = pool.tx(|tx| tx.alloc(5u64)).unwrap();
    let r = pool.tx(|tx| {
        let a = tx.get(x)?;
        let mut b = tx.open(x)?;
        *b = 2;
        Ok(*a)
    });
    assert!(matches!(r, Err(Error::AlreadyBorrowed { .. })), "{r:?}");
    let r = pool.tx(|tx| {
        let a = tx.get(x)?;
        tx.free(x)?;
        Ok(*a)
    });
    assert!(matches!(r, Err(Error::AlreadyBorrowed { .. })), "{r:?}");
    // The same through a nested pool.tx, which joins the transaction.
    let r = pool.tx(|tx| {
        let a = tx.get(x)?;
        pool.tx(|inner| inner.open(x).map(|_| ()))?;
        Ok(*a)
    });
    assert!(matches!(r, Err(Error::AlreadyBorrowed { .. })), "{r:?}");
    assert_eq!(*pool.get(x).unwrap(), 1, "nothing committed");
    // Two reads share it; once they are dropped it opens, and the next read sees the copy.
    let v = pool
        .tx(|tx| {
            let (a, b) = (tx.get(x)?, tx.get(x)?);
            let w = *tx.get(y)?; // another object is no obstacle
            let sum = *a + *b + w;
            drop((a, b));
            *tx.open(x)? = sum;
            let after = *tx.get(x)?;
            Ok(after)
        })
        .unwrap();
    assert_eq!(v, 7);
    assert_eq!(*pool.get(x).unwrap(), 7);
    // A forgotten read keeps its borrow to the end of its transaction only.
    pool.tx(|tx| {
        std::mem::forget(tx.get(x)?);
        assert!(matches!(tx.open(x), Err(Error::AlreadyBorrowed { .. })));
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| tx.free(x)).unwrap();
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// A zero-sized type (`[T; 0]` is `Persistent`) cannot be stored: every way to allocate
/// one fails with an error that names the type and says what to do, not with
/// "invalid configuration" (nothing was wrong with the pool's configuration), and nothing
/// is allocated.
#[test]
fn zero_sized_objects_are_refused_naming_their_type() {
    let (pool, path) = pool("zerosized");
    let free = pool.free_bytes();
    let results = [
        pool.tx(|tx| tx.alloc::<[u64; 0]>([]).map(|_| ())),
        pool.tx(|tx| tx.alloc_zeroed::<[u64; 0]>().map(|_| ())),
        pool.tx(|tx| tx.alloc_unzeroed::<[u64; 0]>().map(|_| ())),
        pool.root::<[u64; 0]>().map(|_| ()),
    ];
    for r in results {
        let Err(e) = r else {
            panic!("a zero-sized object was allocated");
        };
        assert!(matches!(e, Error::ZeroSized { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("[u64; 0]"), "{msg}");
        assert!(!msg.contains("configuration"), "{msg}");
    }
    assert_eq!(pool.free_bytes(), free);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// `pool.scrub`, `pool.inject` and `pool.verify_parity` take the whole pool (every lock and
/// lane), so they cannot run while this thread holds a `Ref` or a `Detached` of it. They
/// failed at once with `Error::Conflict` ("transaction conflict on object at <a zone or
/// page offset>: another transaction holds it; retry"): no other transaction was involved,
/// the offset named no object, and retrying could never help while the handle lives.
#[test]
fn whole_pool_operations_name_this_threads_handles_as_what_blocks_them() {
    let (pool, path) = pool("heldhere");
    let x = pool.tx(|tx| tx.alloc([7u64; 4])).unwrap();
    let scribble = pgl::Fault::ObjectScribble {
        oid: x.raw(),
        at: 20,
        len: 4,
        seed: 1,
    };
    let media = pgl::Fault::MediaError { offset: x.raw() };
    for held in ["pool.get Ref", "pool.open_mut handle"] {
        let (mut r, mut d) = (None, None);
        match held {
            "pool.get Ref" => r = Some(pool.get(x).unwrap()),
            _ => d = Some(pool.open_mut(x).unwrap()),
        }
        let results = [
            ("pool.scrub", pool.scrub(true, |_, _| {}).map(|_| ())),
            ("pool.inject", pool.inject(&scribble)),
            ("pool.inject", pool.inject(&media)),
            ("pool.verify_parity", pool.verify_parity().map(|_| ())),
        ];
        for (what, r) in results {
            let e = r.expect_err(what);
            assert!(matches!(e, Error::HeldByThisThread { .. }), "{held}: {e:?}");
            assert!(e.pool_file().is_some(), "{held}: {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(what), "{held}: {msg}");
            assert!(msg.contains("this thread holds"), "{held}: {msg}");
            assert!(!msg.contains("another transaction"), "{held}: {msg}");
        }
        drop((r, d));
    }
    // Nothing was damaged, and with the handles gone the operations run.
    assert!(pool.verify_parity().unwrap().is_empty());
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// The root object lives as long as the pool. `tx.free(root)` was allowed and left the
/// pool's root word naming a free block: every later `pool.root()` failed with "invalid
/// oid ...: not allocated" (and `root` never creates a new one while the word is set), and
/// once an allocation of the same type took the block, `pool.root()` returned that
/// unrelated object as the root. Freeing the root is refused, saying why.
#[test]
fn the_root_object_cannot_be_freed() {
    let (pool, path) = pool("rootfree");
    let root = pool.root::<[u64; 4]>().unwrap();
    pool.tx(|tx| {
        tx.open(root)?[0] = 5;
        Ok(())
    })
    .unwrap();
    let r = pool.tx(|tx| tx.free(root));
    let e = r.expect_err("the root was freed");
    assert!(matches!(e, Error::RootNotFreeable { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("root") && msg.contains(&format!("{:#x}", root.raw())),
        "{msg}"
    );
    assert!(e.pool_file().is_some(), "{e:?}");
    // Refused inside a larger transaction too, which then commits nothing of it.
    let a = pool.tx(|tx| tx.alloc([1u64; 4])).unwrap();
    let r = pool.tx(|tx| {
        tx.free(a)?;
        tx.free(root)
    });
    assert!(r.is_err());
    assert_eq!(*pool.get(a).unwrap(), [1; 4]);
    // The root stays the root: an allocation of its type does not take its place.
    let other = pool.tx(|tx| tx.alloc([9u64; 4])).unwrap();
    assert_ne!(other, root);
    assert_eq!(pool.root::<[u64; 4]>().unwrap(), root);
    assert_eq!(pool.get(root).unwrap()[0], 5);
    drop(pool);
    let pool = Pool::open(&path, "rootfree").unwrap();
    assert_eq!(pool.root::<[u64; 4]>().unwrap(), root);
    assert!(pool.tx(|tx| tx.free(root)).is_err());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
