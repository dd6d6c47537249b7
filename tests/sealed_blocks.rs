//! Sealed blocks (see `heap::alloc`): an unfilled allocation of a block freed earlier may
//! take the freed object's checksum instead of reading the block, but only while damage
//! to free space is something parity repairs. Each test injects one fault into a freed
//! block and asserts the new, unfilled object over it opens and verifies.

mod support;

use pgl::{Config, Fault, Pool};

fn pool(name: &str, cfg: impl FnOnce(Config) -> Config) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-sealrev-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (
        Pool::create(&path, &cfg(Config::small(name))).unwrap(),
        path,
    )
}

/// A scrub that repairs declares damage to free space benign and recomputes parity over
/// it, reporting the pool clean: after that no seal is trusted, or an unfilled allocation
/// of the block would inherit a checksum its bytes no longer match, with nothing to repair
/// it from.
#[test]
fn a_scrub_over_free_space_damage_voids_the_seals() {
    let (pool, path) = pool("scrub", |c| c);
    let root = pool.root::<[u64; 1]>().unwrap();
    let a = pool
        .tx(|tx| {
            let a = tx.alloc_zeroed::<[u8; 4096]>()?;
            tx.open(a)?.fill(0x5a);
            Ok(a)
        })
        .unwrap();
    pool.tx(|tx| tx.free(a)).unwrap();
    pool.inject(&Fault::Scribble {
        offset: a.raw() + 1000,
        len: 24,
        seed: 11,
    })
    .unwrap();
    let report = pool.scrub(true, |_, _| {}).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(pool.verify_parity().unwrap().is_empty());
    let b = pool
        .tx(|tx| {
            let b = tx.alloc_unzeroed::<[u8; 4096]>()?;
            tx.open(root)?[0] = b.raw();
            Ok(b)
        })
        .unwrap();
    assert_eq!(
        b.raw(),
        a.raw(),
        "the freed block is reused (the test needs it)"
    );
    // Any bytes are a valid [u8; 4096]: a new, unfilled object must open.
    let r = pool.tx(|tx| tx.open(b).map(|h| h[0]));
    assert!(r.is_ok(), "a freshly allocated unfilled object: {r:?}");
    let bad = pool.verify_objects(|_, _| {}).unwrap();
    assert!(bad.is_empty(), "damaged after a clean scrub: {bad:?}");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// Without parity a scribble over free space is harmless, and no seal is trusted: the new
/// object's checksum is that of its bytes.
#[test]
fn without_parity_free_space_damage_stays_harmless() {
    let (pool, path) = pool("noparity", |c| c.parity(false));
    let a = pool
        .tx(|tx| {
            let a = tx.alloc_zeroed::<[u8; 4096]>()?;
            tx.open(a)?.fill(0x5a);
            Ok(a)
        })
        .unwrap();
    pool.tx(|tx| tx.free(a)).unwrap();
    pool.inject(&Fault::Scribble {
        offset: a.raw() + 1000,
        len: 24,
        seed: 11,
    })
    .unwrap();
    let b = pool.tx(|tx| tx.alloc_unzeroed::<[u8; 4096]>()).unwrap();
    assert_eq!(
        b.raw(),
        a.raw(),
        "the freed block is reused (the test needs it)"
    );
    let r = pool.tx(|tx| tx.open(b).map(|h| h[0]));
    assert!(r.is_ok(), "a freshly allocated unfilled object: {r:?}");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// A media error on a free block's page that nothing can rebuild (no parity) is
/// zero-filled by the handler and costs nothing: no object lives there. The unfilled
/// object over it holds the zeros under a checksum of them.
#[test]
fn a_lost_free_page_stays_harmless() {
    let (pool, path) = pool("lostpage", |c| c.parity(false));
    let a = pool
        .tx(|tx| {
            let a = tx.alloc_zeroed::<[u8; 4096]>()?;
            tx.open(a)?.fill(0x5a);
            Ok(a)
        })
        .unwrap();
    pool.tx(|tx| tx.free(a)).unwrap();
    // The page of the payload's last byte (not the header's: 16 + 4096 bytes span two).
    pool.inject(&Fault::MediaError {
        offset: a.raw() + 4095,
    })
    .unwrap();
    let b = pool.tx(|tx| tx.alloc_unzeroed::<[u8; 4096]>()).unwrap();
    assert_eq!(
        b.raw(),
        a.raw(),
        "the freed block is reused (the test needs it)"
    );
    let r = pool.tx(|tx| tx.open(b).map(|h| h[0]));
    assert!(r.is_ok(), "a freshly allocated unfilled object: {r:?}");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// As `a_scrub_over_free_space_damage_voids_the_seals`, across a reopen: the new object
/// verifies and a scrub finds the pool clean.
#[test]
fn a_scrubbed_pool_reopens_clean() {
    let (pool, path) = pool("durable", |c| c);
    let root = pool.root::<[u64; 1]>().unwrap();
    let a = pool
        .tx(|tx| {
            let a = tx.alloc_zeroed::<[u8; 4096]>()?;
            tx.open(a)?.fill(0x5a);
            Ok(a)
        })
        .unwrap();
    pool.tx(|tx| tx.free(a)).unwrap();
    pool.inject(&Fault::Scribble {
        offset: a.raw() + 1000,
        len: 24,
        seed: 11,
    })
    .unwrap();
    assert!(pool.scrub(true, |_, _| {}).unwrap().is_clean());
    let b = pool
        .tx(|tx| {
            let b = tx.alloc_unzeroed::<[u8; 4096]>()?;
            tx.open(root)?[0] = b.raw();
            Ok(b)
        })
        .unwrap();
    drop(pool);
    let pool = Pool::open(&path, "durable").unwrap();
    let report = pool.scrub(true, |_, _| {}).unwrap();
    let got = pool.get(b).map(|r| r[0]);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
    assert!(report.is_clean(), "after reopen: {report:?}; get: {got:?}");
}
