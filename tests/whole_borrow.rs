//! A write through `DerefMut` marks the whole object; the commit compares an object larger
//! than a cache line with the pool and logs, writes and updates parity only from the first
//! changed byte to the last. These tests count what the commits log and write
//! (`stats()`), check the bytes and checksums that result, and check the parity after.

use pgl::prelude::*;

#[derive(Persistent, Clone, Copy)]
#[repr(C)]
struct Small {
    a: u64,
    b: u64,
    c: u64,
    d: u64,
    e: u64,
    f: u64,
}

fn pool(name: &str) -> (std::path::PathBuf, Pool) {
    let path = std::env::temp_dir().join(format!(
        "pgl-whole-borrow-{name}-{}.pool",
        std::process::id()
    ));
    let pool = Pool::reset(&path, &Config::small("whole-borrow")).unwrap();
    (path, pool)
}

/// What `f`'s transaction logged and wrote in place.
fn cost(pool: &Pool, f: impl FnMut(&Tx<'_>) -> pgl::Result<()>) -> (u64, u64) {
    let before = pool.stats();
    pool.tx(f).unwrap();
    let after = pool.stats();
    (
        after.bytes_logged - before.bytes_logged,
        after.bytes_written - before.bytes_written,
    )
}

#[test]
fn one_element_changed_through_deref_mut_commits_that_element_only() {
    let (path, pool) = pool("element");
    let a = pool.tx(|tx| tx.alloc([7u64; 512])).unwrap();
    let (logged, written) = cost(&pool, |tx| {
        tx.open(a)?[100] = 0xdead_beef;
        Ok(())
    });
    // Two lane copies of a record: its 128-byte head and one entry (16-byte header, the
    // checksum, the changed bytes).
    assert!(
        logged <= 2 * (128 + 64),
        "logged {logged} bytes for one u64"
    );
    assert!(
        written <= 8 + 4,
        "wrote {written} bytes for one u64 and the checksum"
    );
    // A change at both ends: everything between goes too.
    let (_, written) = cost(&pool, |tx| {
        let mut h = tx.open(a)?;
        h[0] = 1;
        h[511] = 2;
        Ok(())
    });
    // Byte 0 of the first word to byte 0 of the last: 511 words and a byte.
    assert!(written > 511 * 8, "first to last changed byte: {written}");
    drop(pool);
    let pool = Pool::open(&path, "whole-borrow").unwrap();
    let v = *pool.get(a).unwrap();
    let mut want = [7u64; 512];
    want[100] = 0xdead_beef;
    want[0] = 1;
    want[511] = 2;
    assert_eq!(v, want);
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    assert!(pool.verify_parity().unwrap().is_empty());
    drop(pool);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_borrow_that_changes_nothing_commits_nothing() {
    let (path, pool) = pool("nothing");
    let a = pool.tx(|tx| tx.alloc([3u8; 1024])).unwrap();
    let (logged, written) = cost(&pool, |tx| {
        let mut h = tx.open(a)?;
        h[10] = 9;
        h[10] = 3; // back to what it was
        Ok(())
    });
    assert_eq!((logged, written), (0, 0));
    assert_eq!(*pool.get(a).unwrap(), [3u8; 1024]);
    drop(pool);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn an_object_of_one_line_is_committed_whole() {
    let (path, pool) = pool("line");
    let s = pool
        .tx(|tx| {
            tx.alloc(Small {
                a: 1,
                b: 2,
                c: 3,
                d: 4,
                e: 5,
                f: 6,
            })
        })
        .unwrap();
    let (_, written) = cost(&pool, |tx| {
        tx.open(s)?.c = 30;
        Ok(())
    });
    assert!(written >= 48, "48 bytes and the checksum, wrote {written}");
    let (_, written) = cost(&pool, |tx| {
        use SmallFields as _;
        tx.open(s)?.set_d(40);
        Ok(())
    });
    assert!(written < 48, "a setter marks its field: wrote {written}");
    let v = *pool.get(s).unwrap();
    assert_eq!((v.a, v.c, v.d, v.f), (1, 30, 40, 6));
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn setters_and_a_borrow_in_one_transaction_keep_every_change() {
    let (path, pool) = pool("mixed");
    let a = pool.tx(|tx| tx.alloc([0u32; 256])).unwrap();
    pool.tx(|tx| {
        let mut h = tx.open(a)?;
        h.write_at(4 * 200, &9u32); // a mark of its own
        h[10] = 5; // then the whole borrow
        h[20] = 6;
        Ok(())
    })
    .unwrap();
    let v = *pool.get(a).unwrap();
    assert_eq!((v[10], v[20], v[200], v[0], v[255]), (5, 6, 9, 0, 0));
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    assert!(pool.verify_parity().unwrap().is_empty());
    drop(pool);
    let _ = std::fs::remove_file(&path);
}
