//! Sealed blocks (see `heap::alloc`): an unfilled allocation of a block freed earlier may
//! take the freed object's checksum instead of reading the block, but only while damage
//! to free space is something parity repairs. Each test injects one fault into a freed
//! block and asserts the new, unfilled object over it opens and verifies.

mod support;

use pgl::{Config, Fault, Oid, Pool};

type Page = [u8; 4096];

fn pool(name: &str, cfg: impl FnOnce(Config) -> Config) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-sealed-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (
        Pool::create(&path, &cfg(Config::small(name))).unwrap(),
        path,
    )
}

/// Commits a filled page, frees it (its block is sealed), then injects `fault` (given
/// the page's oid). Returns the oid.
fn freed_and_damaged(pool: &Pool, fault: impl FnOnce(u64) -> Fault) -> u64 {
    let a = pool
        .tx(|tx| {
            let a = tx.alloc_zeroed::<Page>()?;
            tx.open(a)?.fill(0x5a);
            Ok(a)
        })
        .unwrap();
    pool.tx(|tx| tx.free(a)).unwrap();
    pool.inject(&fault(a.raw())).unwrap();
    a.raw()
}

/// One fault: 24 random bytes over the payload of the page at `oid`.
fn scribble(oid: u64) -> Fault {
    Fault::Scribble {
        offset: oid + 1000,
        len: 24,
        seed: 11,
    }
}

/// Allocates a page unfilled, untouched, linked from the root (if the pool has one);
/// asserts it landed on the freed block `freed` and that it opens.
fn reuse_unfilled(pool: &Pool, freed: u64, root: Option<Oid<u64>>) -> Oid<Page> {
    let b = pool
        .tx(|tx| {
            let b = tx.alloc_unzeroed::<Page>()?;
            if let Some(root) = root {
                *tx.open(root)? = b.raw();
            }
            Ok(b)
        })
        .unwrap();
    assert_eq!(
        b.raw(),
        freed,
        "the freed block is reused (the test needs it)"
    );
    // Any bytes are a valid page: a new, unfilled object must open.
    let r = pool.tx(|tx| tx.open(b).map(|h| h[0]));
    assert!(r.is_ok(), "a freshly allocated unfilled object: {r:?}");
    b
}

/// A scrub that repairs declares damage to free space benign and recomputes parity over
/// it, reporting the pool clean: after that no seal is trusted, or an unfilled allocation
/// of the block would inherit a checksum its bytes no longer match, with nothing to repair
/// it from.
#[test]
fn a_scrub_over_free_space_damage_voids_the_seals() {
    let (pool, path) = pool("scrub", |c| c);
    let root = pool.root::<u64>().unwrap();
    let a = freed_and_damaged(&pool, scribble);
    let report = pool.scrub(true, |_, _| {}).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(pool.verify_parity().unwrap().is_empty());
    reuse_unfilled(&pool, a, Some(root));
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
    let a = freed_and_damaged(&pool, scribble);
    reuse_unfilled(&pool, a, None);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// A media error on a free block's page that nothing can rebuild (no parity) is
/// zero-filled by the handler and costs nothing: no object lives there. The unfilled
/// object over it holds the zeros under a checksum of them. (Like the test above, this
/// guards the parity condition of `Engine::seals_trusted`: without parity no seal is
/// trusted, lost page or not.)
#[test]
fn a_lost_free_page_stays_harmless() {
    let (pool, path) = pool("lostpage", |c| c.parity(false));
    // The page of the payload's last byte (not the header's: 16 + 4096 bytes span two).
    let a = freed_and_damaged(&pool, |a| Fault::MediaError { offset: a + 4095 });
    let b = reuse_unfilled(&pool, a, None);
    // The lost page's share of the payload reads as zeros; the rest still holds the freed
    // object's fill (an unfilled allocation keeps the block's bytes).
    let lost_from = (((a + 4095) & !4095) - a) as usize;
    let bytes = pool.tx(|tx| Ok(*tx.open(b)?)).unwrap();
    assert!(
        bytes[..lost_from].iter().all(|&x| x == 0x5a),
        "the bytes before the lost page changed"
    );
    assert!(
        bytes[lost_from..].iter().all(|&x| x == 0),
        "the lost page's bytes [{lost_from}, 4096) are not zero-filled"
    );
    assert_eq!(
        pool.stats().media_errors_lost,
        1,
        "the lost page is reported"
    );
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// As `a_scrub_over_free_space_damage_voids_the_seals`, across a reopen: the new object
/// verifies and a scrub finds the pool clean.
#[test]
fn a_scrubbed_pool_reopens_clean() {
    let (pool, path) = pool("durable", |c| c);
    let root = pool.root::<u64>().unwrap();
    let a = freed_and_damaged(&pool, scribble);
    assert!(pool.scrub(true, |_, _| {}).unwrap().is_clean());
    let b = reuse_unfilled(&pool, a, Some(root));
    drop(pool);
    let pool = Pool::open(&path, "durable").unwrap();
    let report = pool.scrub(true, |_, _| {}).unwrap();
    let got = pool.get(b).map(|r| r[0]);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
    assert!(report.is_clean(), "after reopen: {report:?}; get: {got:?}");
    assert!(got.is_ok(), "{got:?}");
}
