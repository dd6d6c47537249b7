//! `Pool::grow` when the file cannot grow: extending it fails (a full file system, for a
//! sparse pool at its new length and for a preallocated one at its new blocks), or the
//! fsync of its new size fails. The pool keeps its old size, no header names zones that
//! are not there, and a later grow succeeds. One test per binary: the injected faults are
//! process-wide.

mod support;

use pgl::{fault, Config, Error, FlushMode, Oid, Pool};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = support::test_dir().join(format!("pgl-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&d);
    d
}

type Block = [u64; 128];

/// Allocates 1 KiB objects until the pool is full; returns them with their tags.
fn fill(pool: &Pool, tag: &mut u64) -> Vec<(Oid<Block>, u64)> {
    let mut out = Vec::new();
    loop {
        *tag += 1;
        match pool.tx(|tx| tx.alloc([*tag; 128])) {
            Ok(o) => out.push((o, *tag)),
            Err(Error::PoolFull { .. }) => return out,
            Err(e) => panic!("alloc: {e}"),
        }
    }
}

fn check(pool: &Pool, objs: &[(Oid<Block>, u64)]) {
    for &(o, tag) in objs {
        assert_eq!(*pool.get(o).unwrap(), [tag; 128], "object {:#x}", o.raw());
    }
    assert_eq!(pool.verify_objects(|_, _| {}).unwrap().len(), 0);
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
}

/// The file cannot be extended: `grow` fails with `Error::Io`, and changes nothing (the
/// file keeps its length, the pool its size, and it takes commits); a later grow succeeds.
fn extend_fails(name: &str, preallocate: bool) {
    let path = tmp(name);
    let cfg = Config::small(name)
        .flush(FlushMode::Msync)
        .preallocate(preallocate);
    let geo = cfg.geometry();
    let pool = Pool::create(&path, &cfg).unwrap();
    let mut tag = 0;
    let mut objs = fill(&pool, &mut tag);
    let len = std::fs::metadata(&path).unwrap().len();

    fault::set_fail_grow_extend(true);
    let r = pool.grow(geo.pool_size(4));
    fault::set_fail_grow_extend(false);
    assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
    // The message says what to do about a full file system.
    let msg = r.unwrap_err().to_string();
    assert!(
        msg.contains("the file system is full: free space on it"),
        "{msg}"
    );
    assert_eq!(pool.size(), geo.pool_size(1));
    assert_eq!(pool.info().header.zones, 1);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
    assert!(matches!(
        pool.tx(|tx| tx.alloc(0u64)),
        Err(Error::PoolFull { .. })
    ));
    // Still takes commits.
    let (o, t) = objs[0];
    pool.tx(|tx| {
        tx.open(o)?[0] = !t;
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        tx.open(o)?[0] = t;
        Ok(())
    })
    .unwrap();

    pool.grow(geo.pool_size(4)).unwrap();
    assert_eq!(pool.size(), geo.pool_size(4));
    objs.extend(fill(&pool, &mut tag));
    check(&pool, &objs);
    drop(pool);
    let pool = Pool::open_with(&path, &cfg).unwrap();
    assert_eq!(pool.size(), geo.pool_size(4));
    check(&pool, &objs);
    assert_eq!(
        (pool.stats().header_repairs, pool.stats().metadata_repairs),
        (0, 0)
    );
    drop(pool);
    if preallocate {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&path).unwrap();
        assert!(m.blocks() * 512 >= m.len(), "no longer preallocated");
    }
    std::fs::remove_file(&path).unwrap();
}

/// The fsync that makes the new length durable fails. That fsync also reports (once, to
/// this open file) a failed write-back of any page of the file — perhaps a commit's, whose
/// own msync then reports nothing — so what was written may not be durable: the pool
/// refuses commits from then on, as after a failed msync, until reopened. Reopened, it
/// has its old size and every object, and grows.
fn fsync_fails() {
    let path = tmp("grow-fsync");
    let cfg = Config::small("grow-fsync").flush(FlushMode::Msync);
    let geo = cfg.geometry();
    let pool = Pool::create(&path, &cfg).unwrap();
    let mut tag = 0;
    let mut objs = fill(&pool, &mut tag);

    fault::set_fail_grow_fsync(true);
    let r = pool.grow(geo.pool_size(3));
    fault::set_fail_grow_fsync(false);
    assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
    assert_eq!(pool.size(), geo.pool_size(1));
    let (o, t) = objs[0];
    let later = pool.tx(|tx| {
        tx.open(o)?[0] = !t;
        Ok(())
    });
    assert!(
        matches!(later, Err(Error::Io { .. })),
        "a commit after the failed fsync: {later:?}"
    );
    // Reads still work; the grow is refused too (nothing it writes would be trusted).
    assert_eq!(*pool.get(o).unwrap(), [t; 128]);
    assert!(matches!(pool.grow(geo.pool_size(3)), Err(Error::Io { .. })));
    drop(pool);

    let pool = Pool::open_with(&path, &cfg).unwrap();
    assert_eq!(pool.size(), geo.pool_size(1));
    check(&pool, &objs);
    pool.grow(geo.pool_size(3)).unwrap();
    objs.extend(fill(&pool, &mut tag));
    check(&pool, &objs);
    drop(pool);
    let pool = Pool::open_with(&path, &cfg).unwrap();
    assert_eq!(pool.size(), geo.pool_size(3));
    check(&pool, &objs);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_grow_that_cannot_extend_or_sync_the_file_leaves_the_pool_at_its_old_size() {
    extend_fails("grow-enospc", false);
    extend_fails("grow-enospc-prealloc", true);
    fsync_fails();
}
