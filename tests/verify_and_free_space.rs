//! What the book promises a user about verification and free space: which reads verify under
//! the default policy, what damage to freed blocks costs until a scrub, and that an older
//! build frees the extension groups it does not know (found by a user-perspective review).
use pgl::prelude::*;
use pgl::{Fault, VerifyPolicy};

fn scratch(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("pgl-user-review-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

mod v0 {
    use pgl::prelude::*;
    #[extendible]
    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0x5151)]
    pub struct Node {
        pub key: u64,
        pub next: Oid<Node>,
    }
}
mod v1 {
    use pgl::prelude::*;
    #[extendible]
    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0x5151)]
    pub struct Node {
        pub key: u64,
        pub next: Oid<Node>,
        #[extension(1, init = |old| old.key() + 1)]
        pub extra: u64,
    }
}

/// The book's "Fault tolerance": with the default policy `tx.get`/`pool.get` do not verify
/// checksums (damage is returned as it is); `Conservative` verifies and repairs.
#[test]
fn gets_verify_only_under_conservative() {
    for policy in [VerifyPolicy::Default, VerifyPolicy::Conservative] {
        let path = scratch(&format!("get-{policy:?}"));
        let pool = Pool::create(&path, &Config::new("probe").verify(policy)).unwrap();
        let o = pool.tx(|tx| tx.alloc([7u64; 8])).unwrap();
        pool.inject(&Fault::ObjectScribble {
            oid: o.raw(),
            at: 16,
            len: 8,
            seed: 1,
        })
        .unwrap();
        let got = pool.tx(|tx| Ok(*tx.get(o)?)).unwrap();
        let conservative = policy == VerifyPolicy::Conservative;
        assert_eq!(got == [7; 8], conservative, "{policy:?}");
        assert_eq!(pool.stats().objects_repaired, u64::from(conservative));
        // An update verifies whatever the policy.
        assert_eq!(pool.tx(|tx| Ok(*tx.open(o)?)).unwrap(), [7; 8]);
        drop(pool);
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn an_older_build_frees_the_groups_it_does_not_know() {
    let path = scratch("free-groups");
    let pool = Pool::create(&path, &Config::new("probe")).unwrap();
    let before = pool.free_bytes();
    let o = pool
        .tx(|tx| {
            tx.alloc_ext(v1::NodeData {
                key: 1,
                next: Oid::NULL,
                extra: 5,
            })
        })
        .unwrap();
    let old: Oid<v0::Node> = o.cast();
    pool.tx(|tx| tx.free(old)).unwrap();
    assert_eq!(pool.free_bytes(), before);
    drop(pool);
    let _ = std::fs::remove_file(&path);
}

/// Damages free space: frees one of two objects in the same page column, one chunk
/// apart (another row), and scribbles over its freed block. Returns the other, live one.
fn damaged_free_block_in_the_column_of(pool: &Pool) -> Oid<[u64; 4]> {
    let chunk = pool.info().header.geo.chunk_size;
    let mut all = Vec::new();
    while all.len() < 2 * (chunk as usize / 48) + 100 {
        let batch = pool
            .tx(|tx| {
                (0..500u64)
                    .map(|i| tx.alloc([i + 1; 4]))
                    .collect::<pgl::Result<Vec<_>>>()
            })
            .unwrap();
        all.extend(batch);
    }
    let set: std::collections::HashMap<u64, Oid<[u64; 4]>> =
        all.iter().map(|o| (o.raw(), *o)).collect();
    let (a, b) = all
        .iter()
        .find_map(|a| set.get(&(a.raw() + chunk)).map(|b| (*a, *b)))
        .expect("two objects one chunk apart");
    pool.tx(|tx| tx.free(a)).unwrap();
    pool.inject(&Fault::Scribble {
        offset: a.raw(),
        len: 32,
        seed: 5,
    })
    .unwrap();
    b
}

/// Scribbles over live object `b`'s payload.
fn scribble(pool: &Pool, b: Oid<[u64; 4]>) {
    pool.inject(&Fault::ObjectScribble {
        oid: b.raw(),
        at: 16,
        len: 32,
        seed: 6,
    })
    .unwrap();
}

/// The book's "Fault tolerance": damage to free space is damage to its page column; a
/// second damage in the column is not rebuilt until a repairing scrub recomputes parity.
#[test]
fn free_space_damage_costs_its_column_until_a_scrub() {
    let path = scratch("free-space");
    let pool = Pool::create(&path, &Config::new("probe")).unwrap();
    let b = damaged_free_block_in_the_column_of(&pool);
    scribble(&pool, b);
    let r = pool.tx(|tx| Ok(tx.open(b)?[0]));
    assert!(matches!(r, Err(Error::ChecksumMismatch { .. })), "{r:?}");
    assert_eq!(pool.stats().objects_unrecoverable, 1);
    drop(pool);
    let _ = std::fs::remove_file(&path);
}

/// The same free-space damage, scrubbed before the second damage in the column: the live
/// object is repaired (without the scrub it is not: the test above).
#[test]
fn free_space_damage_scrubbed_then_object_repaired() {
    let path = scratch("free-space-scrub");
    let pool = Pool::create(&path, &Config::new("probe")).unwrap();
    let b = damaged_free_block_in_the_column_of(&pool);
    let want = *pool.get(b).unwrap();
    assert!(!pool.verify_parity().unwrap().is_empty());
    assert!(pool.scrub(true, |_, _| {}).unwrap().is_clean());
    scribble(&pool, b);
    assert_eq!(pool.tx(|tx| Ok(*tx.open(b)?)).unwrap(), want);
    drop(pool);
    let _ = std::fs::remove_file(&path);
}
