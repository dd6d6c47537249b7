//! `Pool::grow` by several zones at once: every new zone takes objects (small ones in runs,
//! large ones over several chunks), and the pool verifies clean — objects, parity, both
//! header copies, both metadata copies of every zone — right after the grow, after a
//! clean reopen, and after a reopen that recovers from a crash (`CrashSim`).

mod support;

use pgl::{Config, CrashSim, Error, Oid, Pool};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = support::test_dir().join(format!("pgl-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&d);
    d
}

/// A 1 KiB object (a run's block) or a 96 KiB one (a large object over two chunks of the
/// small geometry), tagged so that each is told apart.
#[derive(Clone, Copy, Debug)]
enum Obj {
    Small(Oid<[u64; 128]>, u64),
    Large(Oid<[u64; 12288]>, u64),
}

impl Obj {
    fn raw(&self) -> u64 {
        match *self {
            Obj::Small(o, _) => o.raw(),
            Obj::Large(o, _) => o.raw(),
        }
    }

    fn check(&self, pool: &Pool) {
        match *self {
            Obj::Small(o, tag) => {
                let v = pool.get(o).unwrap();
                assert_eq!((v[0], v[127]), (tag, !tag), "small object {:#x}", o.raw());
            }
            Obj::Large(o, tag) => {
                let v = pool.get(o).unwrap();
                assert_eq!(
                    (v[0], v[6000], v[12287]),
                    (tag, tag ^ 1, !tag),
                    "large object {:#x}",
                    o.raw()
                );
            }
        }
    }
}

fn alloc_small(pool: &Pool, tag: u64) -> pgl::Result<Obj> {
    let mut v = [tag; 128];
    v[127] = !tag;
    pool.tx(|tx| tx.alloc(v)).map(|o| Obj::Small(o, tag))
}

fn alloc_large(pool: &Pool, tag: u64) -> pgl::Result<Obj> {
    pool.tx(|tx| {
        let o = tx.alloc_zeroed::<[u64; 12288]>()?;
        let mut v = tx.open(o)?;
        v[0] = tag;
        v[6000] = tag ^ 1;
        v[12287] = !tag;
        Ok(o)
    })
    .map(|o| Obj::Large(o, tag))
}

/// The zone of pool offset `off`.
fn zone_of(pool: &Pool, off: u64) -> u64 {
    let g = pool.info().header.geo;
    (off - g.zones_offset()) / g.zone_size()
}

/// What `pgl check` verifies, on an open pool: every object's checksum, every zone's
/// parity; with `opened`, also that opening repaired nothing (headers, zone metadata
/// copies, bitmaps) and recomputed no parity.
fn assert_clean(pool: &Pool, opened: bool) {
    assert_eq!(pool.verify_objects(|_, _| {}).unwrap().len(), 0);
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    if opened {
        let s = pool.stats();
        assert_eq!(
            (
                s.header_repairs,
                s.metadata_repairs,
                s.bitmap_repairs,
                s.runs_quarantined,
                s.objects_repaired,
                s.objects_unrecoverable
            ),
            (0, 0, 0, 0, 0, 0),
            "{s:?}"
        );
    }
}

/// Every object of `objs` reads back as written, and the pool is clean (`assert_clean`).
fn assert_holds(pool: &Pool, objs: &[Obj], opened: bool) {
    for o in objs {
        o.check(pool);
    }
    assert_clean(pool, opened);
}

/// Fills the pool: large objects until one fails for lack of space, then small ones
/// likewise; `objs` holds the live objects. In the small geometry a zone has three data
/// chunks: a large object takes two, and a run of small ones the third.
fn fill(pool: &Pool, objs: &mut Vec<Obj>, tag: &mut u64) {
    let mut alloc_until_full = |objs: &mut Vec<Obj>, large: bool| loop {
        *tag += 1;
        let r = if large {
            alloc_large(pool, *tag)
        } else {
            alloc_small(pool, *tag)
        };
        match r {
            Ok(o) => objs.push(o),
            Err(Error::PoolFull { .. }) => break,
            Err(e) => panic!("alloc: {e}"),
        }
    };
    alloc_until_full(objs, true);
    alloc_until_full(objs, false);
}

/// Grows a one-zone pool to four zones in one call, fills every new zone with small and
/// large objects, and checks it all before and after reopening.
#[test]
fn a_pool_grown_by_three_zones_at_once_fills_them_all_and_verifies() {
    let path = tmp("grow-multi");
    let cfg = Config::small("grow-multi");
    let geo = cfg.geometry();
    let pool = Pool::create(&path, &cfg).unwrap();
    let (mut objs, mut tag) = (Vec::new(), 0);
    fill(&pool, &mut objs, &mut tag);
    assert!(objs.iter().all(|o| zone_of(&pool, o.raw()) == 0));
    let free_before = pool.free_bytes();
    let commits_before = pool.stats().commits;

    pool.grow(geo.pool_size(4)).unwrap();
    assert_eq!(pool.size(), geo.pool_size(4));
    assert_eq!(pool.info().header.zones, 4);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), geo.pool_size(4));
    // Three zones of data chunks more (each zone's first chunk holds its metadata).
    let per_zone = (geo.rows * geo.chunks_per_row - 1) * geo.chunk_size;
    assert_eq!(pool.free_bytes(), free_before + 3 * per_zone);
    assert_eq!(pool.stats().commits, commits_before, "grow is not a commit");
    assert_clean(&pool, false);

    let old = objs.len();
    fill(&pool, &mut objs, &mut tag);
    let added = &objs[old..];
    for z in 1..4 {
        for large in [false, true] {
            assert!(
                added
                    .iter()
                    .any(|o| zone_of(&pool, o.raw()) == z && matches!(o, Obj::Large(..)) == large),
                "no {} object in new zone {z}",
                if large { "large" } else { "small" }
            );
        }
    }
    assert_holds(&pool, &objs, false);
    drop(pool);

    let pool = Pool::open(&path, "grow-multi").unwrap();
    assert_eq!(pool.size(), geo.pool_size(4));
    assert_eq!(pool.stats().parity_columns_recomputed, 0);
    assert_holds(&pool, &objs, true);
    assert_eq!(pool.objects().unwrap().len(), objs.len());
    // The space of the new zones is reused after frees, and grow goes on from four zones.
    for o in objs.iter().filter(|o| zone_of(&pool, o.raw()) >= 2) {
        match *o {
            Obj::Small(oid, _) => pool.tx(|tx| tx.free(oid)).unwrap(),
            Obj::Large(oid, _) => pool.tx(|tx| tx.free(oid)).unwrap(),
        }
    }
    objs.retain(|o| zone_of(&pool, o.raw()) < 2);
    fill(&pool, &mut objs, &mut tag);
    pool.grow(geo.pool_size(6)).unwrap();
    fill(&pool, &mut objs, &mut tag);
    assert!(objs.iter().any(|o| zone_of(&pool, o.raw()) == 5));
    drop(pool);

    let pool = Pool::open(&path, "grow-multi").unwrap();
    assert_eq!(pool.size(), geo.pool_size(6));
    assert_holds(&pool, &objs, true);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

/// The same on `CrashSim`, with a crash (no clean close) after the objects in the new
/// zones are committed: recovery finds every one of them, and verifies clean.
#[test]
fn a_multi_zone_grow_and_its_objects_survive_a_crash() {
    let cfg = Config::small("grow-crash");
    let geo = cfg.geometry();
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let (mut objs, mut tag) = (Vec::new(), 0);
    fill(&pool, &mut objs, &mut tag);
    pool.grow(geo.pool_size(4)).unwrap();
    fill(&pool, &mut objs, &mut tag);
    assert!((1..4).all(|z| objs.iter().any(|o| zone_of(&pool, o.raw()) == z)));
    // The crash: only what reached the persisted image survives.
    let dev = sim.crash_point().device(cfg.max_size, |_| false);
    drop(pool);
    let pool = Pool::open_sim(&dev, "grow-crash").unwrap();
    assert_eq!(pool.size(), geo.pool_size(4));
    assert_holds(&pool, &objs, true);
    assert_eq!(pool.objects().unwrap().len(), objs.len());
}

/// Threads allocate, overwrite and free while the pool grows by three zones at a time
/// (1 -> 4 -> 7): their objects land in every new zone while `add_zones` publishes them,
/// none is lost, and size, capacity and counters agree afterwards, and after reopening.
#[test]
fn threads_allocate_into_zones_a_multi_zone_grow_adds() {
    let path = tmp("grow-multi-live");
    let mut cfg = Config::small("grow-multi-live");
    cfg.lanes = 4;
    let geo = cfg.geometry();
    cfg.size = geo.pool_size(1);
    cfg.max_size = geo.pool_size(8);
    let per_zone = (geo.rows * geo.chunks_per_row - 1) * geo.chunk_size;
    let pool = Pool::create(&path, &cfg).unwrap();
    const THREADS: u64 = 3;
    // 3 × 250 × 1 KiB live at the end: more than four zones hold, well less than seven
    // (each lane's current run may keep free blocks no other lane takes).
    const PER_THREAD: usize = 250;
    // Set by a worker that found the pool full; the main thread then grows it.
    let full = std::sync::atomic::AtomicBool::new(false);
    // Per thread, the objects it left and their tags; and how many it allocated.
    type Kept = Vec<Vec<(Oid<[u64; 128]>, u64)>>;
    let (kept, allocs): (Kept, u64) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pool, full) = (pool.clone(), &full);
                s.spawn(move || {
                    let (mut mine, mut allocs, mut i) = (Vec::new(), 0u64, 0u64);
                    let mut full_since: Option<std::time::Instant> = None;
                    while mine.len() < PER_THREAD {
                        let tag = t << 32 | i;
                        i += 1;
                        match pool.tx(|tx| tx.alloc([tag; 128])) {
                            Ok(o) => mine.push((o, tag)),
                            Err(Error::PoolFull { .. }) => {
                                full.store(true, std::sync::atomic::Ordering::Relaxed);
                                let since = *full_since.get_or_insert_with(std::time::Instant::now);
                                assert!(
                                    since.elapsed().as_secs() < 20,
                                    "thread {t}: full for 20 s at {} bytes, {} free",
                                    pool.size(),
                                    pool.free_bytes()
                                );
                                std::thread::yield_now();
                                continue;
                            }
                            Err(e) => panic!("thread {t}: {e}"),
                        }
                        full_since = None;
                        allocs += 1;
                        if i % 3 == 0 {
                            let (o, old) = mine[mine.len() / 2];
                            pool.tx(|tx| {
                                tx.open(o)?[64] = !old;
                                Ok(())
                            })
                            .unwrap();
                            pool.tx(|tx| {
                                tx.open(o)?[64] = old;
                                Ok(())
                            })
                            .unwrap();
                        }
                        if i % 7 == 0 {
                            let (o, _) = mine.swap_remove(0);
                            pool.tx(|tx| tx.free(o)).unwrap();
                        }
                    }
                    (mine, allocs)
                })
            })
            .collect();
        let mut zones = 1;
        while !workers.iter().all(|w| w.is_finished()) {
            if zones < 7 && full.swap(false, std::sync::atomic::Ordering::Relaxed) {
                zones += 3;
                pool.grow(geo.pool_size(zones)).unwrap();
                assert_eq!(pool.size(), geo.pool_size(zones));
            }
            std::thread::yield_now();
        }
        let r: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        let allocs = r.iter().map(|(_, a)| a).sum();
        (r.into_iter().map(|(m, _)| m).collect(), allocs)
    });
    let check = |pool: &Pool| {
        assert_eq!(pool.size(), geo.pool_size(7));
        assert_eq!(pool.info().header.zones, 7);
        assert_eq!(pool.info().heap_capacity, 7 * per_zone);
        for (t, mine) in kept.iter().enumerate() {
            for &(o, tag) in mine {
                assert_eq!(*pool.get(o).unwrap(), [tag; 128], "thread {t}");
            }
        }
        let live = kept.iter().map(Vec::len).sum::<usize>();
        assert_eq!(pool.objects().unwrap().len(), live);
        assert_clean(pool, false);
    };
    check(&pool);
    let s = pool.stats();
    let frees = allocs - (THREADS as usize * PER_THREAD) as u64;
    assert_eq!((s.allocs, s.frees), (allocs, frees), "{s:?}");
    let zones_used: std::collections::BTreeSet<u64> = kept
        .iter()
        .flatten()
        .map(|(o, _)| zone_of(&pool, o.raw()))
        .collect();
    assert!(
        (4..7).any(|z| zones_used.contains(&z)),
        "the second grow's zones took no object: {zones_used:?}"
    );
    drop(pool);
    let pool = Pool::open(&path, "grow-multi-live").unwrap();
    check(&pool);
    assert_clean(&pool, true);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

/// `grow(n)` leaves the pool at least `n` bytes, as documented: the zones it adds are
/// rounded up, not down. Asking for no more than the pool has, or for more than
/// `max_size` allows, is an error that changes nothing.
#[test]
fn grow_rounds_up_to_whole_zones() {
    let path = tmp("grow-round");
    let cfg = Config::small("grow-round");
    let geo = cfg.geometry();
    let pool = Pool::create(&path, &cfg).unwrap();
    pool.grow(pool.size() + 1).unwrap();
    assert_eq!(pool.size(), geo.pool_size(2));
    let want = geo.pool_size(3) + geo.zone_size() / 2;
    pool.grow(want).unwrap();
    assert!(pool.size() >= want);
    assert_eq!(pool.size(), geo.pool_size(4));
    for bad in [pool.size(), pool.size() - 1, cfg.max_size + 1, u64::MAX] {
        let r = pool.grow(bad);
        assert!(
            matches!(r, Err(Error::InvalidConfig { .. })),
            "grow({bad}): {r:?}"
        );
        assert_eq!(pool.size(), geo.pool_size(4));
    }
    pool.grow(cfg.max_size).unwrap();
    assert_eq!(pool.size(), geo.pool_size(8));
    drop(pool);
    let pool = Pool::open(&path, "grow-round").unwrap();
    assert_eq!(pool.size(), geo.pool_size(8));
    assert_clean(&pool, true);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

/// A file longer than its pool (opening accepts it) whose bytes past the pool are not
/// zeros: the zones a grow adds there start as zeros all the same — the empty chunk
/// tables, metadata copies and parity a new zone is made of — not as what the file held.
#[test]
fn a_grow_over_a_file_tail_that_is_not_zeros_starts_from_zeros() {
    let path = tmp("grow-tail");
    let cfg = Config::small("grow-tail");
    let geo = cfg.geometry();
    let pool = Pool::create(&path, &cfg).unwrap();
    let (mut objs, mut tag) = (Vec::new(), 0);
    fill(&pool, &mut objs, &mut tag);
    drop(pool);
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        // Two zones' worth: chunk tables, metadata copies, data rows and parity rows.
        let junk: Vec<u8> = (0..2 * geo.zone_size())
            .map(|i| (i * 7 + 0xa5) as u8)
            .collect();
        f.write_all(&junk).unwrap();
    }
    let pool = Pool::open(&path, "grow-tail").unwrap();
    assert_eq!(pool.size(), geo.pool_size(1));
    pool.grow(geo.pool_size(3)).unwrap();
    assert_clean(&pool, false);
    fill(&pool, &mut objs, &mut tag);
    for z in 1..3 {
        assert!(
            objs.iter().any(|o| zone_of(&pool, o.raw()) == z),
            "zone {z}"
        );
    }
    assert_holds(&pool, &objs, false);
    drop(pool);
    let pool = Pool::open(&path, "grow-tail").unwrap();
    assert_holds(&pool, &objs, true);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

/// The same on `CrashSim`: a device longer than its pool, whose tail is not zeros.
#[test]
fn a_grow_over_a_device_tail_that_is_not_zeros_starts_from_zeros() {
    let cfg = Config::small("grow-tail-sim");
    let geo = cfg.geometry();
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let (mut objs, mut tag) = (Vec::new(), 0);
    fill(&pool, &mut objs, &mut tag);
    drop(pool);
    let mut image = sim.persisted_image();
    let words = 2 * geo.zone_size() / 8;
    image.extend((0..words).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1));
    let dev = CrashSim::from_image(&image, image.len() as u64 * 8, cfg.max_size);
    let pool = Pool::open_sim(&dev, "grow-tail-sim").unwrap();
    pool.grow(geo.pool_size(3)).unwrap();
    assert_clean(&pool, false);
    fill(&pool, &mut objs, &mut tag);
    assert_holds(&pool, &objs, false);
    drop(pool);
    let pool = Pool::open_sim(&dev, "grow-tail-sim").unwrap();
    assert_eq!(pool.size(), geo.pool_size(3));
    assert_holds(&pool, &objs, true);
}

/// The heap's zone table is allocated in segments of 1024 zones as zones load: a pool
/// grown zone by zone from 1020 zones to 1032, while another thread allocates, frees and
/// reads objects, takes objects in zones on both sides of the segment boundary, and every
/// object reads back before and after reopening.
#[test]
fn zones_past_the_first_zone_table_segment_take_objects_while_the_pool_grows() {
    type Small = [u64; 4];
    /// One 16 KiB chunk: a large object.
    type Chunk = [u64; 2000];
    let path = tmp("grow-segment");
    let mut cfg = Config::small("grow-segment");
    cfg.chunk_size = 16 << 10;
    cfg.chunks_per_row = 2;
    cfg.rows = 2;
    cfg.lane_size = 8 << 10;
    let geo = cfg.geometry();
    cfg.size = geo.pool_size(1020);
    cfg.max_size = geo.pool_size(1032);
    let pool = Pool::create(&path, &cfg).unwrap();
    let done = AtomicBool::new(false);
    let txs = AtomicU64::new(0);
    let smalls: Vec<(Oid<Small>, u64)> = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let mut kept: Vec<(Oid<Small>, u64)> = Vec::new();
            let mut tag = 0u64;
            while !done.load(Ordering::Acquire) {
                tag += 1;
                let o = pool.tx(|tx| tx.alloc([tag; 4])).unwrap();
                kept.push((o, tag));
                if tag % 3 == 0 {
                    let (gone, _) = kept.swap_remove((tag as usize / 3) % kept.len());
                    pool.tx(|tx| tx.free(gone)).unwrap();
                }
                let (o, t) = kept[tag as usize % kept.len()];
                assert_eq!(*pool.get(o).unwrap(), [t; 4]);
                txs.fetch_add(1, Ordering::Release);
            }
            kept
        });
        for zones in 1021..=1032 {
            // A grow between transactions of the other thread (without sleeping: it
            // goes on until told to stop, unless it failed).
            let seen = txs.load(Ordering::Acquire);
            while txs.load(Ordering::Acquire) < seen + 4 && !worker.is_finished() {
                std::thread::yield_now();
            }
            pool.grow(geo.pool_size(zones)).unwrap();
        }
        done.store(true, Ordering::Release);
        worker.join().unwrap()
    });
    assert_eq!(pool.info().header.zones, 1032);
    // Every zone's free chunks, one large object each.
    let mut chunks: Vec<(Oid<Chunk>, u64)> = Vec::new();
    loop {
        let tag = 1 << 40 | chunks.len() as u64;
        match pool.tx(|tx| {
            let o = tx.alloc_zeroed::<Chunk>()?;
            let mut v = tx.open(o)?;
            v[0] = tag;
            v[1999] = !tag;
            Ok(o)
        }) {
            Ok(o) => chunks.push((o, tag)),
            Err(Error::PoolFull { .. }) => break,
            Err(e) => panic!("alloc: {e}"),
        }
    }
    let zones: std::collections::BTreeSet<u64> = (chunks.iter().map(|(o, _)| o.raw()))
        .chain(smalls.iter().map(|(o, _)| o.raw()))
        .map(|o| zone_of(&pool, o))
        .collect();
    for z in [0, 1019, 1020, 1023, 1024, 1025, 1031] {
        assert!(zones.contains(&z), "no object in zone {z}");
    }
    let check = |pool: &Pool| {
        for &(o, t) in &smalls {
            assert_eq!(*pool.get(o).unwrap(), [t; 4], "small object {:#x}", o.raw());
        }
        for &(o, t) in &chunks {
            let v = pool.get(o).unwrap();
            assert_eq!((v[0], v[1999]), (t, !t), "large object {:#x}", o.raw());
        }
        assert_eq!(pool.verify_objects(|_, _| {}).unwrap().len(), 0);
    };
    check(&pool);
    drop(pool);
    let pool = Pool::open(&path, "grow-segment").unwrap();
    assert_eq!(pool.info().header.zones, 1032);
    check(&pool);
    drop(pool);
    let _ = std::fs::remove_file(&path);
}
