//! Scrubbing a sparse pool: a pool created without preallocation is a sparse file, and on
//! tmpfs a load from a hole of its mapping allocates the page. A scrub (and
//! `verify_parity`, which `pgl check` runs) must not read the holes: they are zeros, which
//! add nothing to a column's parity. Damage next to holes is still found and repaired.

mod support;

use pgl::{Config, Fault, Oid, Pool};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

fn path(name: &str) -> PathBuf {
    let p = support::test_dir().join(format!("pgl-scrub-sparse-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// Bytes the file system has given the file at `path` (fewer than its length: sparse).
fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).expect("stat").blocks() * 512
}

/// What a scrub may allocate on top of what it repairs: well under one zone (25 MiB here).
const GROWTH_MAX: u64 = 4 << 20;

type Small = [u64; 8];
type Big = [u64; 1 << 20];

fn small(i: u64) -> Small {
    std::array::from_fn(|k| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k as u64)
}

/// A 256 MiB sparse pool (ten zones of the default geometry) with a few small objects and
/// a few 8 MiB ones, which push later objects into later zones; `None` (and why, printed)
/// where the test directory's file system keeps the file fully allocated anyway.
fn sparse_pool(name: &str) -> Option<(PathBuf, Pool, Vec<Oid<Small>>)> {
    let p = path(name);
    let pool = Pool::create(&p, &Config::new("sparse").size(256 << 20)).unwrap();
    let mut smalls = Vec::new();
    for i in 0..12u64 {
        smalls.push(pool.tx(|tx| tx.alloc(small(i))).unwrap());
        if i % 3 == 2 {
            pool.tx(|tx| tx.alloc_zeroed::<Big>()).unwrap();
        }
    }
    let len = std::fs::metadata(&p).unwrap().len();
    if allocated(&p) >= len / 2 {
        println!(
            "skipped: {} keeps the pool's file allocated ({} of {len} bytes), so no scrub \
             can fault holes in",
            p.display(),
            allocated(&p)
        );
        drop(pool);
        std::fs::remove_file(&p).unwrap();
        return None;
    }
    Some((p, pool, smalls))
}

/// The zones holding objects.
fn object_zones(pool: &Pool) -> std::collections::BTreeSet<u64> {
    let objects = pool.objects().unwrap();
    objects.iter().map(|&(o, _)| zone_of(pool, o)).collect()
}

/// The zone holding pool offset `off`.
fn zone_of(pool: &Pool, off: u64) -> u64 {
    let g = pool.info().header.geo;
    (off - g.zones_offset()) / g.zone_size()
}

#[test]
fn scrubbing_and_verifying_a_sparse_pool_leave_it_sparse() {
    let Some((p, pool, smalls)) = sparse_pool("clean") else {
        return;
    };
    let zones = object_zones(&pool);
    println!("objects in zones {zones:?} of {}", pool.info().header.zones);
    assert!(zones.len() >= 2, "objects in zones {zones:?} only");
    let before = allocated(&p);
    let checked = pool.scrub(false, |_, _| {}).unwrap();
    assert!(checked.is_clean(), "{checked:?}");
    let repaired = pool.scrub(true, |_, _| {}).unwrap();
    assert!(repaired.is_clean(), "{repaired:?}");
    assert_eq!(
        (repaired.objects_repaired, repaired.parity_columns_bad),
        (0, 0),
        "{repaired:?}"
    );
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    let after = allocated(&p);
    println!(
        "allocated: {before} bytes before the scrubs, {after} after, of {}",
        pool.size()
    );
    assert!(
        after < before + GROWTH_MAX,
        "the scrubs made the pool allocate {} bytes",
        after - before
    );
    for (i, &o) in smalls.iter().enumerate() {
        assert_eq!(*pool.get(o).unwrap(), small(i as u64));
    }
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn damage_beside_holes_is_found_and_repaired_without_reading_the_holes() {
    let Some((p, pool, smalls)) = sparse_pool("damage") else {
        return;
    };
    let info = pool.info();
    let g = info.header.geo;
    let zones = info.header.zones;
    let used = object_zones(&pool);
    let empty = (1..zones)
        .find(|z| !used.contains(z))
        .expect("a zone without objects");
    let before = allocated(&p);
    let page = 4096;

    // 1. An object's page, whose column holds holes in most rows (its zone's rows are
    //    mostly free): rebuilt from parity, byte-exact.
    let victim = smalls[7];
    let victim_zone = zone_of(&pool, victim.raw());
    pool.inject(&Fault::ObjectScribble {
        oid: victim.raw(),
        at: 16 + 8,
        len: 16,
        seed: 5,
    })
    .unwrap();
    // 2. A hole of free space in a zone that holds no object: the page becomes data
    //    that its parity page (a hole, read as zeros) disagrees with.
    let free = g.zone_offset(empty) + 50 * g.row_size() + 3 * page + 100;
    pool.inject(&Fault::Scribble {
        offset: free,
        len: 32,
        seed: 9,
    })
    .unwrap();
    // 3. A parity page of that zone whose data column is all holes.
    let parity = g.parity_offset(empty) + 17 * page + 64;
    pool.inject(&Fault::Scribble {
        offset: parity,
        len: 8,
        seed: 11,
    })
    .unwrap();
    // 4. A media error on a parity page that is a hole (another column of that zone):
    //    the scrub must still read it, which has the handler rebuild it.
    pool.inject(&Fault::MediaError {
        offset: g.parity_offset(empty) + 40 * page,
    })
    .unwrap();
    let faults = 4u64;

    let report = pool.scrub(true, |_, _| {}).unwrap();
    println!("faults injected: {faults}; {report:?}");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(
        report.objects_repaired, 1,
        "the scribbled object: {report:?}"
    );
    assert_eq!(
        (report.parity_columns_bad, report.parity_columns_fixed),
        (2, 2),
        "the free page's column and the scribbled parity page's: {report:?}"
    );
    let s = pool.stats();
    assert_eq!(s.media_errors_repaired, 1, "the lost parity page: {s:?}");
    assert_eq!(s.media_errors_lost, 0, "{s:?}");
    let repaired = report.objects_repaired + report.parity_columns_fixed + s.media_errors_repaired;
    assert_eq!(repaired, faults, "every injected fault repaired");
    assert_eq!(*pool.get(victim).unwrap(), small(7), "the committed bytes");
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    let again = pool.scrub(true, |_, _| {}).unwrap();
    assert!(
        again.is_clean() && again.parity_columns_bad == 0 && again.objects_repaired == 0,
        "{again:?}"
    );
    let after = allocated(&p);
    println!(
        "allocated: {before} bytes before, {after} after (victim in zone {victim_zone}, \
         {zones} zones)"
    );
    assert!(
        after < before + GROWTH_MAX,
        "the scrubs made the pool allocate {} bytes",
        after - before
    );
    drop(pool);
    // The repairs are durable: the pool reopens clean.
    let pool = Pool::open(&p, "sparse").unwrap();
    assert_eq!(*pool.get(victim).unwrap(), small(7));
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}
