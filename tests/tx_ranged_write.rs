//! `Tx::write_at` / `Tx::write_bytes`: a few bytes of an object changed without copying
//! the rest of it into a buffer (a buffer with holes), and everything a buffer made by
//! `open` promises still holds: the bytes written and no others change, reads in the same
//! transaction see them, the checksum and parity stay right, damage is repaired first.

mod support;

use pgl::{Config, Error, Fault, Oid, Pool, VerifyPolicy};

/// Objects large enough to be written with holes (`RANGED_MIN` is 512 bytes).
type Big = [u8; 4096];

fn pool_with(name: &str, config: Config) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-ranged-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (Pool::create(&path, &config).unwrap(), path)
}

fn pool(name: &str) -> (Pool, std::path::PathBuf) {
    pool_with(name, Config::small(name))
}

/// The bytes a new object starts with: every byte distinct from its neighbours, and none
/// zero (a fresh buffer's bytes).
fn pattern() -> Big {
    std::array::from_fn(|i| ((i * 7 + 3) % 255 + 1) as u8)
}

/// A new object holding `pattern()`. Then a transaction that leaves the lane's spare
/// buffer holding other bytes (a buffer is reused as it was left): a hole the commit
/// wrongly read would hold those, not the object's.
fn big(pool: &Pool) -> Oid<Big> {
    let o = pool.tx(|tx| tx.alloc(pattern())).unwrap();
    let decoy = pool.tx(|tx| tx.alloc([0xeeu8; 4096])).unwrap();
    pool.tx(|tx| tx.free(decoy)).unwrap();
    o
}

/// Checks every object's checksum and the pool's parity: the commit left both right.
fn assert_sound(pool: &Pool) {
    let bad = pool.verify_objects(|_, _| {}).unwrap();
    assert!(bad.is_empty(), "objects failing verification: {bad:?}");
    let stale = pool.verify_parity().unwrap();
    assert!(stale.is_empty(), "pages whose parity is stale: {stale:?}");
}

#[test]
fn a_ranged_write_changes_its_bytes_and_no_others() {
    let (pool, path) = pool("bytes");
    let o = big(&pool);
    let mut want = pattern();
    // One range, two a few bytes apart (the bytes between are written back as they are),
    // one near the start, an odd one, the last byte.
    let writes: [(usize, &[u8]); 6] = [
        (1000, &[1; 8]),
        (1010, &[2; 3]),
        (1040, &[3; 5]),
        (8, &[4; 4]),
        (2049, &[5; 77]),
        (4095, &[6]),
    ];
    pool.tx(|tx| {
        for (at, bytes) in writes {
            tx.write_bytes(o, at, bytes)?;
        }
        Ok(())
    })
    .unwrap();
    for (at, bytes) in writes {
        want[at..at + bytes.len()].copy_from_slice(bytes);
    }
    assert_eq!(*pool.get(o).unwrap(), want);
    assert_sound(&pool);
    drop(pool);
    let pool = Pool::open(&path, "bytes").unwrap();
    assert_eq!(*pool.get(o).unwrap(), want, "as committed, after a reopen");
    assert_sound(&pool);
    std::fs::remove_file(path).unwrap();
}

/// The edges of the short holes the commit fills (32 bytes: `MERGE_GAP`): a lone range
/// starting 32 or 33 bytes in (the bytes before it written back with the checksum word, or
/// not), two ranges 32 or 33 bytes apart (merged into one piece, or not). A hole the
/// commit wrote back without filling would hold the lane's stale buffer bytes (`big`).
#[test]
fn ranged_writes_at_the_edges_of_the_holes_the_commit_fills() {
    let (pool, path) = pool("edges");
    let cases: [&[(usize, usize)]; 6] = [
        &[(32, 8)],
        &[(33, 8)],
        &[(31, 1)],
        &[(100, 8), (140, 8)],
        &[(100, 8), (141, 8)],
        &[(0, 1), (33, 1), (66, 1)],
    ];
    for ranges in cases {
        let o = big(&pool);
        let mut want = pattern();
        pool.tx(|tx| {
            for &(at, len) in ranges {
                tx.write_bytes(o, at, &vec![0x77; len])?;
            }
            Ok(())
        })
        .unwrap();
        for &(at, len) in ranges {
            want[at..at + len].fill(0x77);
        }
        assert_eq!(*pool.get(o).unwrap(), want, "{ranges:?}");
        assert_sound(&pool);
    }
    std::fs::remove_file(path).unwrap();
}

#[test]
fn reads_and_opens_after_a_ranged_write_see_it_and_the_rest() {
    let (pool, path) = pool("reads");
    let o = big(&pool);
    let mut want = pattern();
    pool.tx(|tx| {
        tx.write_at(o, 100, &0xabcd_u16)?;
        let r = tx.get(o)?;
        assert_eq!(r[100..102], 0xabcd_u16.to_le_bytes(), "the write");
        assert_eq!(
            r[..100],
            pattern()[..100],
            "the bytes before it, from the pool"
        );
        assert_eq!(r[102..], pattern()[102..], "the bytes after it");
        drop(r);
        // A whole borrow after the holes were filled.
        let mut h = tx.open(o)?;
        h[3000] = 9;
        h[0] = 1;
        drop(h);
        tx.write_at(o, 200, &7u8)
    })
    .unwrap();
    want[100..102].copy_from_slice(&0xabcd_u16.to_le_bytes());
    want[3000] = 9;
    want[0] = 1;
    want[200] = 7;
    assert_eq!(*pool.get(o).unwrap(), want);
    assert_sound(&pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_ranged_write_over_most_of_an_object_keeps_its_checksum_right() {
    let (pool, path) = pool("most");
    let o = big(&pool);
    let mut want = pattern();
    pool.tx(|tx| {
        tx.write_bytes(o, 0, &[0x5a; 3000])?;
        tx.write_bytes(o, 3100, &[0xa5; 996])
    })
    .unwrap();
    want[..3000].fill(0x5a);
    want[3100..].fill(0xa5);
    assert_eq!(*pool.get(o).unwrap(), want);
    assert_sound(&pool);
    std::fs::remove_file(path).unwrap();
}

/// A second, shared mapping of the pool file at `path`: stores through it are stray
/// writes pgl never sees (the tests' injected faults).
fn stray_mapping(path: &std::path::Path) -> memmap2::MmapMut {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // SAFETY: a mapping of the pool file that only the test's stray stores write.
    unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap()
}

/// A stray write into a hole after the ranged write verified the object: a read of the
/// object later in the transaction verifies it again before filling the holes, so it
/// fails (no unverified byte reaches the buffer); `pool.tx` repairs the object from
/// parity and runs the closure again.
#[test]
fn a_stray_write_into_a_hole_is_caught_when_the_object_is_read() {
    let (pool, path) = pool("caught");
    let o = big(&pool);
    let mut stray = stray_mapping(&path);
    let at = o.raw() as usize + 3000;
    let runs = std::cell::Cell::new(0);
    let before = pool.stats().objects_repaired;
    pool.tx(|tx| {
        runs.set(runs.get() + 1);
        tx.write_bytes(o, 0, &[0x11; 100])?;
        if runs.get() == 1 {
            stray[at] ^= 0xff; // 1 fault, in a hole
        }
        let r = tx.get(o);
        if runs.get() == 1 {
            assert!(
                matches!(r, Err(Error::ChecksumMismatch { .. })),
                "the read verifies first: {:?}",
                r.as_ref().map(|_| ())
            );
        }
        assert_eq!(r?[3000], pattern()[3000], "repaired, not the stray byte");
        Ok(())
    })
    .unwrap();
    assert_eq!(runs.get(), 2, "run again once repaired");
    assert_eq!(
        pool.stats().objects_repaired - before,
        1,
        "1 injected, 1 repaired"
    );
    let mut want = pattern();
    want[..100].fill(0x11);
    assert_eq!(*pool.get(o).unwrap(), want);
    assert_sound(&pool);
    drop(stray);
    std::fs::remove_file(path).unwrap();
}

/// A stray write into the short hole between two ranged writes, which the commit fills
/// from the pool and writes back unchanged: the commit patches the checksum from the
/// verified one (more than half the object is written, where an opened buffer's checksum
/// is summed over the payload), so the stray byte still fails verification and scrub
/// repairs it from parity, instead of its being sealed under a checksum summed over it.
#[test]
fn a_stray_write_into_a_short_hole_is_not_sealed_by_the_commit() {
    let (pool, path) = pool("scribble");
    let o = big(&pool);
    let mut stray = stray_mapping(&path);
    let at = o.raw() as usize + 2105;
    pool.tx(|tx| {
        tx.write_bytes(o, 0, &[0x11; 2100])?;
        tx.write_bytes(o, 2110, &[0x22; 1986])?;
        stray[at] ^= 0xff; // 1 fault, in the 10-byte hole between the ranges
        Ok(())
    })
    .unwrap();
    let mut want = pattern();
    want[..2100].fill(0x11);
    want[2110..].fill(0x22);
    let bad = pool.verify_objects(|_, _| {}).unwrap();
    assert_eq!(
        bad.len(),
        1,
        "the stray byte still fails verification: {bad:?}"
    );
    let report = pool.scrub(true, |_, _| {}).unwrap();
    assert_eq!(
        report.objects_repaired, 1,
        "1 injected, 1 repaired: {report:?}"
    );
    assert_eq!(
        *pool.get(o).unwrap(),
        want,
        "the commit's bytes, the stray one undone"
    );
    assert_sound(&pool);
    drop(stray);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_aborted_ranged_write_changes_nothing() {
    let (pool, path) = pool("abort");
    let o = big(&pool);
    let r: pgl::Result<()> = pool.tx(|tx| {
        tx.write_bytes(o, 10, &[1; 100])?;
        Err(Error::Aborted {
            reason: "test".into(),
        })
    });
    assert!(matches!(r, Err(Error::Aborted { .. })), "{r:?}");
    assert_eq!(*pool.get(o).unwrap(), pattern());
    assert_sound(&pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_damaged_object_is_repaired_before_a_ranged_write() {
    let (pool, path) = pool("repair");
    let o = big(&pool);
    let before = pool.stats().objects_repaired;
    // One fault: 32 bytes of the payload, away from the range written.
    pool.inject(&Fault::ObjectScribble {
        oid: o.raw(),
        at: 16 + 2000,
        len: 32,
        seed: 7,
    })
    .unwrap();
    pool.tx(|tx| tx.write_at(o, 64, &u64::MAX)).unwrap();
    let mut want = pattern();
    want[64..72].fill(0xff);
    assert_eq!(*pool.get(o).unwrap(), want, "repaired, then written");
    assert_eq!(
        pool.stats().objects_repaired - before,
        1,
        "1 injected, 1 repaired"
    );
    assert_sound(&pool);
    std::fs::remove_file(path).unwrap();
}

/// A ranged write that finds the object damaged fails, and the object stays refused for
/// the rest of the transaction, as after a failed `open`: a closure that swallows the
/// error cannot read the damaged bytes as if nothing happened.
#[test]
fn an_object_a_ranged_write_found_damaged_stays_refused() {
    let (pool, path) = pool("refused");
    let o = big(&pool);
    pool.inject(&Fault::ObjectScribble {
        oid: o.raw(),
        at: 16 + 1000,
        len: 8,
        seed: 3,
    })
    .unwrap();
    pool.tx(|tx| {
        let e = tx.write_at(o, 0, &1u8).unwrap_err();
        assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e:?}");
        let e = tx.get(o).map(|_| ()).unwrap_err();
        assert!(matches!(e, Error::InvalidOid { .. }), "{e:?}");
        let e = tx.write_at(o, 0, &1u8).unwrap_err();
        assert!(matches!(e, Error::InvalidOid { .. }), "{e:?}");
        Ok(())
    })
    .unwrap();
    // Scrub repairs it (1 fault injected, 1 repaired).
    let report = pool.scrub(true, |_, _| {}).unwrap();
    assert_eq!(report.objects_repaired, 1, "{report:?}");
    assert_eq!(*pool.get(o).unwrap(), pattern());
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_ranged_write_to_an_object_a_live_read_borrows_is_refused() {
    let (pool, path) = pool("borrowed");
    let o = big(&pool);
    pool.tx(|tx| {
        let r = tx.get(o)?;
        let e = tx.write_at(o, 0, &1u8).unwrap_err();
        assert!(matches!(e, Error::AlreadyBorrowed { .. }), "{e:?}");
        drop(r);
        // Once the read is gone, the write goes through.
        tx.write_at(o, 0, &1u8)
    })
    .unwrap();
    assert_eq!(pool.get(o).unwrap()[0], 1);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_ranged_write_frees_no_one_from_the_type_check() {
    let (pool, path) = pool("types");
    let o = big(&pool);
    let other = Oid::<[u64; 512]>::from_raw(o.raw());
    let e = pool.tx(|tx| tx.write_at(other, 0, &1u64)).unwrap_err();
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e:?}");
    assert_eq!(*pool.get(o).unwrap(), pattern());
    std::fs::remove_file(path).unwrap();
}

#[test]
#[should_panic(expected = "outside a 4096-byte object")]
fn a_ranged_write_past_the_end_panics_like_an_index() {
    let (pool, path) = pool("past");
    let o = big(&pool);
    let _ = std::fs::remove_file(path);
    let _ = pool.tx(|tx| tx.write_bytes(o, 4090, &[0; 7]));
}

#[test]
fn small_objects_and_pools_without_checksums_take_ranged_writes_too() {
    for (name, config) in [
        ("small", Config::small("small")),
        ("nosum", {
            let mut c = Config::small("nosum");
            c.checksums = false;
            c
        }),
        (
            "conservative",
            Config::small("conservative").verify(VerifyPolicy::Conservative),
        ),
    ] {
        let (pool, path) = pool_with(name, config);
        let small = pool.tx(|tx| tx.alloc([1u8; 64])).unwrap();
        let o = big(&pool);
        pool.tx(|tx| {
            tx.write_at(small, 8, &2u8)?;
            tx.write_at(o, 8, &2u8)
        })
        .unwrap();
        let mut want = [1u8; 64];
        want[8] = 2;
        assert_eq!(*pool.get(small).unwrap(), want, "{name}");
        let mut want = pattern();
        want[8] = 2;
        assert_eq!(*pool.get(o).unwrap(), want, "{name}");
        if name == "nosum" {
            // Nothing to verify but parity.
            assert!(pool.verify_parity().unwrap().is_empty(), "{name}");
        } else {
            assert_sound(&pool);
        }
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn a_ranged_write_then_a_free_frees_the_object() {
    let (pool, path) = pool("free");
    let o = big(&pool);
    let free0 = pool.free_bytes();
    pool.tx(|tx| {
        tx.write_at(o, 0, &1u8)?;
        tx.free(o)
    })
    .unwrap();
    assert!(
        pool.free_bytes() > free0,
        "the object's space is free again"
    );
    assert!(pool.get(o).is_err(), "the oid is stale");
    std::fs::remove_file(path).unwrap();
}
