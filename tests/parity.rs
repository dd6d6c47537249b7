//! Zone parity: every commit keeps it equal to the XOR of the zone's rows (concurrent
//! commits included), it rebuilds a lost page, a crash or an older pool gets it recomputed
//! on open, and a change made outside a transaction shows as a disagreement.

mod support;

use pgl::{Config, Header, Oid, Pool};
use support::Rng;

fn path(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-parity-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// A workload of allocations (small and multi-chunk), overwrites and frees on 2 threads.
fn churn(pool: &Pool, seed: u64, ops: usize) {
    std::thread::scope(|s| {
        for t in 0..2u64 {
            s.spawn(move || {
                let mut rng = Rng(seed + t);
                let mut small: Vec<Oid<[u64; 20]>> = Vec::new();
                let mut big: Vec<Oid<[u8; 40_000]>> = Vec::new();
                for i in 0..ops as u64 {
                    match rng.below(6) {
                        0 | 1 => small.push(pool.tx(|tx| tx.alloc([i; 20])).unwrap()),
                        2 if big.len() < 3 => {
                            big.push(pool.tx(|tx| tx.alloc_zeroed()).unwrap());
                        }
                        3 if !small.is_empty() => {
                            let o = small[rng.below(small.len() as u64) as usize];
                            pool.tx(|tx| {
                                tx.open(o)?[(i % 20) as usize] = rng_word(i);
                                Ok(())
                            })
                            .unwrap();
                        }
                        4 if !big.is_empty() => {
                            let o = big[rng.below(big.len() as u64) as usize];
                            pool.tx(|tx| {
                                tx.open(o)?
                                    .write_bytes((i as usize * 97) % 35_000, &[7; 5000]);
                                Ok(())
                            })
                            .unwrap();
                        }
                        _ if !small.is_empty() => {
                            let o = small.swap_remove(rng.below(small.len() as u64) as usize);
                            pool.tx(|tx| tx.free(o)).unwrap();
                        }
                        _ => {}
                    }
                }
            });
        }
    });
}

fn rng_word(i: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[test]
fn commits_keep_parity_consistent_and_a_lost_page_can_be_rebuilt() {
    let path = path("keep");
    let cfg = Config::small("parity").size(Config::small("parity").geometry().pool_size(6));
    let pool = Pool::create(&path, &cfg).unwrap();
    churn(&pool, 11, 400);
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    let zone = pool.info().header.geo.zone_size();
    pool.grow(pool.size() + zone).unwrap();
    churn(&pool, 12, 200);
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    let geo = pool.info().header.geo;
    let zones = pool.info().header.zones;
    drop(pool);

    // Rebuild every non-empty data page of zone 0 from the other rows and the parity row.
    let file = std::fs::read(&path).unwrap();
    let page = 4096usize;
    let mut rebuilt = 0;
    for z in 0..zones {
        let zone = geo.zone_offset(z) as usize;
        let row = geo.row_size() as usize;
        for r in 0..geo.rows as usize {
            for col in (0..row).step_by(page) {
                let at = zone + r * row + col;
                let lost = &file[at..at + page];
                if lost.iter().all(|&b| b == 0) {
                    continue;
                }
                let mut x = file[geo.parity_offset(z) as usize + col..][..page].to_vec();
                for other in (0..geo.rows as usize).filter(|&o| o != r) {
                    let o = zone + other * row + col;
                    for (a, b) in x.iter_mut().zip(&file[o..o + page]) {
                        *a ^= b;
                    }
                }
                assert_eq!(x, lost, "zone {z} row {r} column {col:#x}");
                rebuilt += 1;
            }
        }
    }
    assert!(rebuilt > 20, "only {rebuilt} pages held data");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn the_shared_atomic_path_keeps_parity_consistent_beside_the_exclusive_one() {
    // Updates of up to 256 bytes take the stripe shared with atomic XORs (the small
    // objects' writes and every metadata word), longer ones exclusive (the 40 KB objects):
    // both at once on two threads, over the same few page columns.
    let path = path("atomic");
    let mut cfg = Config::small("parity").size(Config::small("parity").geometry().pool_size(6));
    cfg.parity_atomic_max = 256;
    let pool = Pool::create(&path, &cfg).unwrap();
    churn(&pool, 21, 600);
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    drop(pool);
    let pool = Pool::open_with(&path, &cfg).unwrap();
    churn(&pool, 22, 300);
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_change_outside_a_transaction_is_seen_and_reopening_after_a_crash_recomputes() {
    let path = path("scribble");
    let pool = Pool::create(&path, &Config::small("parity")).unwrap();
    let o = pool.tx(|tx| tx.alloc([5u64; 64])).unwrap();
    let other = pool.tx(|tx| tx.alloc([6u64; 64])).unwrap();
    drop(pool);

    // A scribble: one byte of the object changed behind the pool's back.
    let mut file = std::fs::read(&path).unwrap();
    file[o.raw() as usize + 3] ^= 0x40;
    std::fs::write(&path, &file).unwrap();
    let pool = Pool::open(&path, "parity").unwrap();
    let bad = pool.verify_parity().unwrap();
    assert_eq!(bad.len(), 1, "{bad:x?}");

    // Reopening does not "fix" a scribble by recomputing parity around it: only a crash
    // does, and only for the zones a lane marked dirty.
    drop(pool);
    let pool = Pool::open(&path, "parity").unwrap();
    assert_eq!(
        pool.verify_parity().unwrap().len(),
        1,
        "the scribble is still seen"
    );

    // A crash image: the file of a pool still open after a commit (OPEN set, the lane's
    // dirty-zone bit set), with that zone's parity damaged as a torn update would leave it.
    pool.tx(|tx| {
        tx.open(other)?[7] = 8;
        Ok(())
    })
    .unwrap();
    let image = std::fs::read(&path).unwrap();
    drop(pool);
    let mut image = image;
    let h = Header::decode(&image[..4096]).unwrap();
    assert_eq!(
        h.flags & 1,
        1,
        "the image was taken while the pool was open"
    );
    let p0 = h.geo.parity_offset(0) as usize;
    image[p0..p0 + 64].iter_mut().for_each(|b| *b ^= 0x11);
    std::fs::write(&path, &image).unwrap();
    let pool = Pool::open(&path, "parity").unwrap();
    assert!(
        pool.verify_parity().unwrap().is_empty(),
        "the dirty zone was recomputed (which also absorbed the earlier scribble)"
    );
    drop(pool);

    // A pool of format version 1, which kept no parity (garbage parity here): recomputed on
    // open, then kept, and written back as version 2.
    let mut file = std::fs::read(&path).unwrap();
    let mut h = Header::decode(&file[..4096]).unwrap();
    let b = h.geo.header_offset(1) as usize;
    h.version = 1;
    h.flags = 0;
    file[..4096].copy_from_slice(&h.encode());
    file[b..b + 4096].copy_from_slice(&h.encode());
    let p = h.geo.parity_offset(0) as usize;
    file[p..p + 100].fill(0xee);
    std::fs::write(&path, &file).unwrap();
    let pool = Pool::open(&path, "parity").unwrap();
    assert!(pool.verify_parity().unwrap().is_empty());
    assert_eq!(pool.info().header.flags & 2, 2, "parity kept from now on");
    assert_eq!(pool.info().header.version, pgl::FORMAT_VERSION);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn parity_can_be_turned_off_and_back_on() {
    let path = path("toggle");
    let off = Config::small("parity").parity(false);
    let pool = Pool::create(&path, &off).unwrap();
    let o = pool.tx(|tx| tx.alloc([9u64; 32])).unwrap();
    assert!(matches!(
        pool.verify_parity(),
        Err(pgl::Error::InvalidConfig { .. })
    ));
    assert_eq!(pool.info().header.flags & 2, 0);
    drop(pool);
    // Reopened with parity on (the default): recomputed, then kept.
    let pool = Pool::open(&path, "parity").unwrap();
    assert!(pool.verify_parity().unwrap().is_empty());
    pool.tx(|tx| {
        tx.open(o)?[3] = 4;
        Ok(())
    })
    .unwrap();
    assert!(pool.verify_parity().unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_write_near_an_objects_start_is_applied_with_its_checksum_as_one_piece() {
    // A range starting at most 32 bytes into the payload is stored in place together
    // with the checksum word before it, the unchanged bytes between rewritten from the
    // buffer: parity stays the rows' XOR on both parity paths, every object verifies after
    // reopening with the bytes written, and only the changed bytes and the word count as
    // written. Writes through a setter (the range marked), through a whole-value borrow
    // (the range found by comparison), and of two objects in one transaction.
    let fill = |i: usize| -> [u8; 96] { std::array::from_fn(|k| (i * 37 + k * 11) as u8) };
    for atomic_max in [0, 256] {
        let path = path(&format!("near-start-{atomic_max}"));
        let mut cfg = Config::small("parity").size(Config::small("parity").geometry().pool_size(2));
        cfg.parity_atomic_max = atomic_max;
        let pool = Pool::create(&path, &cfg).unwrap();
        let objs: Vec<Oid<[u8; 96]>> = (0..41)
            .map(|i| pool.tx(|tx| tx.alloc(fill(i))).unwrap())
            .collect();
        let mut want: Vec<[u8; 96]> = (0..41).map(fill).collect();
        for at in 0..40 {
            for (w, len) in [1usize, 3, 8, 9].into_iter().enumerate() {
                let data: Vec<u8> = (0..len)
                    .map(|k| (at * 31 + k * 7 + w) as u8 ^ 0x80)
                    .collect();
                // Object `at` alone, by setter or by whole-value borrow; or with object 40
                // (its bytes at `40 - at`) in the same transaction.
                let (o, other) = (objs[at], objs[40]);
                let before = pool.stats().bytes_written;
                pool.tx(|tx| {
                    match w {
                        0 | 2 => tx.open(o)?.write_bytes(at, &data),
                        1 => {
                            let mut h = tx.open(o)?;
                            let mut v = *h;
                            v[at..at + len].copy_from_slice(&data);
                            *h = v;
                        }
                        _ => {
                            tx.open(o)?.write_bytes(at, &data);
                            tx.open(other)?.write_bytes(40 - at, &data);
                        }
                    }
                    Ok(())
                })
                .unwrap();
                let objects = if w == 3 { 2 } else { 1 };
                assert_eq!(
                    pool.stats().bytes_written - before,
                    (objects * (len + 4)) as u64,
                    "{len} bytes at {at}: the range and the checksum word, not the gap"
                );
                want[at][at..at + len].copy_from_slice(&data);
                if w == 3 {
                    want[40][40 - at..40 - at + len].copy_from_slice(&data);
                }
            }
        }
        assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
        drop(pool);
        let pool = Pool::open_with(&path, &cfg).unwrap();
        assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
        for (o, w) in objs.iter().zip(&want) {
            // `open` verifies the object's checksum.
            let got = pool.tx(|tx| Ok(*tx.open(*o)?)).unwrap();
            assert_eq!(&got, w);
        }
        drop(pool);
        std::fs::remove_file(path).unwrap();
    }
}
