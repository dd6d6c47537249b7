//! The heap returns to its initial free space after random allocation and free, and object
//! checksums stay exact under random partial edits.

mod support;
use support::Rng;

use pgl::{Config, Oid, Pool};

fn tmp(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// Random-size objects: payload sizes spread over small classes, big classes and whole chunks.
fn alloc_random(tx: &pgl::Tx<'_>, rng: &mut Rng) -> pgl::Result<(u64, usize)> {
    let size = match rng.below(10) {
        0..=5 => 1 + rng.below(512) as usize,
        6..=8 => 512 + rng.below(16 << 10) as usize,
        _ => (16 << 10) + rng.below(400 << 10) as usize,
    };
    // Sizes are rounded to a few array types; what matters is the spread over classes.
    let oid = match size {
        0..=64 => tx.alloc([1u8; 64])?.raw(),
        65..=200 => tx.alloc([2u8; 200])?.raw(),
        201..=512 => tx.alloc([3u8; 512])?.raw(),
        513..=1500 => tx.alloc([4u8; 1500])?.raw(),
        1501..=5000 => tx.alloc([5u8; 5000])?.raw(),
        5001..=17000 => tx.alloc_zeroed::<[u8; 17000]>()?.raw(),
        17001..=100_000 => tx.alloc_zeroed::<[u8; 100_000]>()?.raw(),
        _ => tx.alloc_zeroed::<[u8; 400_000]>()?.raw(),
    };
    Ok((oid, size))
}

fn free_any(tx: &pgl::Tx<'_>, oid: u64, size: usize) -> pgl::Result<()> {
    match size {
        0..=64 => tx.free(Oid::<[u8; 64]>::from_raw(oid)),
        65..=200 => tx.free(Oid::<[u8; 200]>::from_raw(oid)),
        201..=512 => tx.free(Oid::<[u8; 512]>::from_raw(oid)),
        513..=1500 => tx.free(Oid::<[u8; 1500]>::from_raw(oid)),
        1501..=5000 => tx.free(Oid::<[u8; 5000]>::from_raw(oid)),
        5001..=17000 => tx.free(Oid::<[u8; 17000]>::from_raw(oid)),
        17001..=100_000 => tx.free(Oid::<[u8; 100_000]>::from_raw(oid)),
        _ => tx.free(Oid::<[u8; 400_000]>::from_raw(oid)),
    }
}

#[test]
fn random_alloc_and_free_return_the_heap_to_its_initial_free_space() {
    let path = tmp("churn");
    let cfg = Config::new("churn").size(256 << 20);
    let pool = Pool::create(&path, &cfg).unwrap();
    let initial = pool.free_bytes();
    let n: usize = std::env::var("PGL_CHURN_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut live: Vec<(u64, usize)> = Vec::new();
    for i in 0..n {
        // Mostly single-object transactions, some with several allocations and frees.
        let allocs = if i % 10 == 0 { 1 + rng.below(4) } else { 1 };
        let frees = if live.len() > 2000 {
            allocs + 1
        } else {
            rng.below(2)
        };
        let mut to_free = Vec::new();
        for _ in 0..frees.min(live.len() as u64) {
            let k = rng.below(live.len() as u64) as usize;
            to_free.push(live.swap_remove(k));
        }
        let seed = rng.next();
        let made = pool
            .tx(|tx| {
                let mut r = Rng(seed | 1);
                let mut made = Vec::new();
                for _ in 0..allocs {
                    made.push(alloc_random(tx, &mut r)?);
                }
                for &(o, s) in &to_free {
                    free_any(tx, o, s)?;
                }
                Ok(made)
            })
            .unwrap();
        live.extend(made);
    }
    assert!(pool.free_bytes() < initial || live.is_empty());
    for chunk in live.chunks(64) {
        pool.tx(|tx| {
            for &(o, s) in chunk {
                free_any(tx, o, s)?;
            }
            Ok(())
        })
        .unwrap();
    }
    assert_eq!(
        pool.free_bytes(),
        initial,
        "free space after freeing everything"
    );
    assert!(pool.objects().unwrap().is_empty());
    drop(pool);
    // The persistent metadata agrees after reopening.
    let pool = Pool::open(&path, "churn").unwrap();
    assert_eq!(pool.free_bytes(), initial, "free space after reopen");
    // And the space is usable as one large object again (empty runs are reclaimed).
    let big = pool.tx(|tx| tx.alloc_zeroed::<[u8; 8 << 20]>()).unwrap();
    pool.tx(|tx| tx.free(big)).unwrap();
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn incremental_checksums_match_a_full_recompute_after_random_partial_edits() {
    let path = tmp("cksum");
    let pool = Pool::create(&path, &Config::small("cksum")).unwrap();
    let mut rng = Rng(12345);
    let objs: Vec<Oid<[u8; 3000]>> = (0..8)
        .map(|i| pool.tx(|tx| tx.alloc([i as u8; 3000])).unwrap())
        .collect();
    let mut model: Vec<Vec<u8>> = (0..8).map(|i| vec![i as u8; 3000]).collect();
    for _ in 0..2000 {
        let k = rng.below(8) as usize;
        let edits = 1 + rng.below(4);
        let mut plan = Vec::new();
        for _ in 0..edits {
            let start = rng.below(3000) as usize;
            let len = 1 + rng.below(64.min(3000 - start as u64)) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            plan.push((start, bytes));
        }
        pool.tx(|tx| {
            let mut h = tx.open(objs[k])?;
            for (start, bytes) in &plan {
                h.write_bytes(*start, bytes);
            }
            Ok(())
        })
        .unwrap();
        for (start, bytes) in &plan {
            model[k][*start..*start + bytes.len()].copy_from_slice(bytes);
        }
    }
    // Every object verifies (the stored checksum equals a full recompute) and holds the model.
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    for (k, o) in objs.iter().enumerate() {
        assert_eq!(&pool.get(*o).unwrap()[..], &model[k][..]);
        let (h, data) = pool.read_object(o.raw()).unwrap();
        let mut oracle = adler32::RollingAdler32::new();
        let mut prefix = Vec::new();
        prefix.extend_from_slice(&o.raw().to_le_bytes());
        prefix.extend_from_slice(&h.size.to_le_bytes());
        prefix.extend_from_slice(&h.type_id.to_le_bytes());
        oracle.update_buffer(&prefix);
        oracle.update_buffer(&data);
        assert_eq!(h.checksum, oracle.hash(), "object {k}");
    }
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
