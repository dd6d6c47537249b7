//! A large object placed over an empty run: the heap takes the run's chunk back in DRAM
//! only, so on media the chunk is still a run, its bitmap live, until the allocation
//! commits. A crash at any fence of that commit, with any of its pending lines on media —
//! in particular the new object's lines without its record's — must leave either the old
//! run with its bitmap intact or the committed large object, never a run whose bitmap is
//! the new object's header (found by the kill -9 test: `kill9.rs`).

mod support;

use pgl::{Config, CrashPoint, CrashSim, Oid, Pool};
use std::sync::{Arc, Mutex};

type Small = [u64; 1024];
type Large = [u64; 2560];

/// The chunk holding offset `off`: (zone, chunk).
fn chunk_of(geo: &pgl::geometry::Geometry, off: u64) -> (u64, u64) {
    let p = geo.locate(off, 1).expect("in the zone");
    (p.zone, p.chunk)
}

/// Opens four images of each crash point — every pending line on media, none, all but the
/// redo lanes' (a new object's lines without its record), only the lanes' — checks that
/// each opens with no destroyed bitmap word and every object verifying, then hands it to
/// `check`. Returns how many images it opened.
fn each_image(
    cfg: &Config,
    layout: &str,
    points: &[CrashPoint],
    check: impl Fn(&Pool, &CrashPoint),
) -> usize {
    let geo = cfg.geometry();
    let lanes = (geo.lane_offset(0, 0) / 8) as usize..(geo.header_offset(1) / 8) as usize;
    assert!(!points.is_empty());
    let mut images = 0;
    for cp in points {
        let (all, none) = (cp.image(|_| true), cp.image(|_| false));
        let pending: Vec<usize> = (0..all.len()).filter(|&w| all[w] != none[w]).collect();
        let picks: [&dyn Fn(usize) -> bool; 4] = [
            &|_| true,
            &|_| false,
            &|i| !lanes.contains(&pending[i]),
            &|i| lanes.contains(&pending[i]),
        ];
        for pick in picks {
            images += 1;
            let dev = cp.device(cfg.max_size, pick);
            let pool = Pool::open_sim(&dev, layout).unwrap();
            assert_eq!(
                pool.objects_with_damage().unwrap().damaged_words(),
                Vec::<u64>::new(),
                "crash at fence {}: a bitmap word was destroyed",
                cp.fence()
            );
            assert_eq!(
                pool.verify_objects(|_, _| {}).unwrap().len(),
                0,
                "crash at fence {}",
                cp.fence()
            );
            check(&pool, cp);
        }
    }
    images
}

#[test]
fn a_large_object_over_an_empty_run_never_clobbers_its_bitmap_in_a_crash() {
    let cfg = Config::small("reclaim");
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let geo = pool.info().header.geo;
    let root = pool.root::<[u64; 8]>().unwrap();
    // An empty run: one small object allocated, then freed.
    let s: Oid<Small> = pool.tx(|tx| tx.alloc([7u64; 1024])).unwrap();
    let run_chunk = chunk_of(&geo, s.raw());
    pool.tx(|tx| tx.free(s)).unwrap();
    // Reopened, no lane allocates from that run any more: the heap may take its chunk.
    drop(pool);
    let pool = Pool::open_sim(&sim, "reclaim").unwrap();

    // Large objects until one lands on the empty run's chunk, its commit's crash points
    // captured.
    let points: Arc<Mutex<Vec<CrashPoint>>> = Arc::default();
    let mut landed = None;
    for i in 0..4u64 {
        let sink = points.clone();
        sim.set_fence_hook(move |s: &CrashSim| sink.lock().unwrap().push(s.crash_point()));
        let o = pool
            .tx(|tx| {
                let o = tx.alloc([i + 1; 2560])?;
                tx.open(root)?[0] = o.raw();
                Ok(o)
            })
            .unwrap();
        sim.clear_fence_hook();
        if chunk_of(&geo, o.raw() - 16) == run_chunk {
            landed = Some((o, i + 1));
            break;
        }
        points.lock().unwrap().clear();
    }
    let (large, fill) = landed.expect("a large object took the empty run's chunk (the scenario)");
    drop(pool);

    let points = points.lock().unwrap().clone();
    let images = each_image(&cfg, "reclaim", &points, |pool, _| {
        let r = pool.get(root).unwrap()[0];
        if r != 0 {
            assert_eq!(r, large.raw());
            let got = *pool.get(Oid::<Large>::from_raw(r)).unwrap();
            assert!(got.iter().all(|&w| w == fill), "the large object is whole");
        }
    });
    println!("crash images checked: {images} at {} fences", points.len());
}

/// A large object over many empty runs: their bitmaps, still live on media, would take
/// more of its record than a lane holds if logged (a pool whose every chunk was a run of
/// small blocks once could never again hold an object it held when new). Its commit sets
/// those chunks free on media first, by a record of its own: a crash at any fence leaves
/// the empty runs, free chunks, or the committed object, never a destroyed bitmap, and
/// the object fits again after reopening.
#[test]
fn a_large_object_over_many_empty_runs_fits_its_record_and_survives_a_crash() {
    const CHUNKS: usize = 30;
    type Wide = [u8; CHUNKS * (64 << 10)];
    let mut cfg = Config::small("reclaim-many");
    cfg.chunks_per_row = 16;
    cfg.lane_size = 8 << 10;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.size;
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<u64>().unwrap();
    let fresh = pool.free_bytes();
    // Every chunk a run of the smallest blocks (the largest bitmaps), then all empty.
    support::churn_smallest_runs(&pool);
    assert_eq!(pool.free_bytes(), fresh);
    drop(pool);
    let pool = Pool::open_sim(&sim, "reclaim-many").unwrap();

    let points: Arc<Mutex<Vec<CrashPoint>>> = Arc::default();
    let sink = points.clone();
    sim.set_fence_hook(move |s: &CrashSim| sink.lock().unwrap().push(s.crash_point()));
    let wide = pool
        .tx(|tx| {
            let o = tx.alloc_zeroed::<Wide>()?;
            tx.open(o)?[..8].copy_from_slice(&[0xa5; 8]);
            *tx.open(root)? = o.raw();
            Ok(o)
        })
        .expect("a large object a new pool holds fits after small-object churn");
    sim.clear_fence_hook();
    drop(pool);

    let points = points.lock().unwrap().clone();
    each_image(&cfg, "reclaim-many", &points, |pool, cp| {
        let r = *pool.get(root).unwrap();
        if r != 0 {
            assert_eq!(r, wide.raw());
            let got = pool.get(Oid::<Wide>::from_raw(r)).unwrap();
            assert_eq!(got[..8], [0xa5; 8]);
            assert!(
                got[8..].iter().all(|&b| b == 0),
                "the large object is whole"
            );
        } else {
            assert_eq!(pool.free_bytes(), fresh, "crash at fence {}", cp.fence());
            let o = pool.tx(|tx| tx.alloc_zeroed::<Wide>());
            assert!(o.is_ok(), "crash at fence {}: {o:?}", cp.fence());
        }
    });
    println!("crash images checked at {} fences", points.len());
}

/// The commit of a large object over many empty runs sets their chunks free on media by a
/// record of its own, then fails on its own record (here: too large for the lane) and is
/// rolled back: the chunks are free in DRAM and on media alike, the pool reopens clean at
/// every fence of that commit, and the space holds the object afterwards.
#[test]
fn a_commit_that_fails_after_freeing_its_guarded_chunks_leaves_them_free() {
    const CHUNKS: usize = 30;
    type Wide = [u8; CHUNKS * (64 << 10)];
    type Blob = [u8; 12 << 10];
    let mut cfg = Config::small("reclaim-fail");
    cfg.chunks_per_row = 16;
    cfg.lane_size = 8 << 10;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.size;
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<u64>().unwrap();
    let blob: Oid<Blob> = pool.tx(|tx| tx.alloc_zeroed::<Blob>()).unwrap();
    let fresh = pool.free_bytes();
    support::churn_smallest_runs(&pool);
    assert_eq!(pool.free_bytes(), fresh);
    drop(pool);
    let pool = Pool::open_sim(&sim, "reclaim-fail").unwrap();

    let points: Arc<Mutex<Vec<CrashPoint>>> = Arc::default();
    let sink = points.clone();
    sim.set_fence_hook(move |s: &CrashSim| sink.lock().unwrap().push(s.crash_point()));
    let r = pool.tx(|tx| {
        let o = tx.alloc_zeroed::<Wide>()?;
        tx.open(o)?[..8].copy_from_slice(&[0xa5; 8]);
        *tx.open(root)? = o.raw();
        tx.open(blob)?.fill(0x11);
        Ok(o)
    });
    sim.clear_fence_hook();
    assert!(
        matches!(r, Err(pgl::Error::TxTooLarge { .. })),
        "the commit fails on its own record: {r:?}"
    );
    // In this session: the space is free, and holds the object.
    assert_eq!(pool.free_bytes(), fresh);
    assert_eq!(*pool.get(root).unwrap(), 0);
    let wide = pool
        .tx(|tx| {
            let o = tx.alloc_zeroed::<Wide>()?;
            *tx.open(root)? = o.raw();
            Ok(o)
        })
        .unwrap();
    assert_eq!(pool.verify_objects(|_, _| {}).unwrap().len(), 0);
    drop(pool);
    let pool = Pool::open_sim(&sim, "reclaim-fail").unwrap();
    assert_eq!(
        pool.objects_with_damage().unwrap().damaged_words(),
        Vec::<u64>::new()
    );
    assert_eq!(pool.verify_objects(|_, _| {}).unwrap().len(), 0);
    assert_eq!(*pool.get(root).unwrap(), wide.raw());
    drop(pool);

    let points = points.lock().unwrap().clone();
    assert!(
        points.len() >= 2,
        "the first record's fences: {}",
        points.len()
    );
    each_image(&cfg, "reclaim-fail", &points, |pool, cp| {
        assert_eq!(*pool.get(root).unwrap(), 0);
        assert_eq!(pool.free_bytes(), fresh, "crash at fence {}", cp.fence());
        let o = pool.tx(|tx| tx.alloc_zeroed::<Wide>());
        assert!(o.is_ok(), "crash at fence {}: {o:?}", cp.fence());
    });
}
