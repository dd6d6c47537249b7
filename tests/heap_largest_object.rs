//! The largest object a geometry allows — every data chunk of one zone — allocates, reads
//! back after a reopen (the heap's load accepts a chunk-table entry of as many chunks as
//! the largest object takes, and no more: `layout::max_large_chunks`), and survives a
//! crash at any fence of its commit, in zones a pool was grown by and in zones of odd
//! shapes; one byte more is refused as too large.

mod support;

use pgl::{Config, CrashPoint, CrashSim, Error, Oid, Pool};
use std::sync::{Arc, Mutex};

/// A pool of one zone of `chunk_size` chunks, `per_row` a row, `rows` rows, grown to three.
fn config(layout: &str, chunk_size: u64, per_row: u64, rows: u64) -> Config {
    let mut c = Config::small(layout);
    c.chunk_size = chunk_size;
    c.chunks_per_row = per_row;
    c.rows = rows;
    c.size = c.geometry().pool_size(1);
    c.max_size = c.geometry().pool_size(3);
    c
}

fn byte(i: usize) -> u8 {
    (i * 7 + i / 4096) as u8
}

/// `[u8; MAX]` is the largest object of `cfg`'s geometry: two of them fill two grown zones
/// whole, one byte more is too large, and both read back after a reopen and after a
/// crash at any fence of the second's commit.
fn the_largest_object_fills_a_grown_zone<const MAX: usize, const MORE: usize>(cfg: &Config)
where
    [u8; MAX]: pgl::Persistent,
    [u8; MORE]: pgl::Persistent,
{
    assert_eq!(MORE, MAX + 1);
    let geo = cfg.geometry();
    assert_eq!(
        MAX as u64,
        (geo.rows * geo.chunks_per_row - 1) * geo.chunk_size - 16,
        "the test's size: every data chunk of a zone, less the header"
    );
    let layout = cfg.layout.clone();
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, cfg).unwrap();
    let root = pool.root::<[u64; 2]>().unwrap();
    pool.grow(geo.pool_size(3)).unwrap();
    let e = pool.tx(|tx| tx.alloc_zeroed::<[u8; MORE]>()).unwrap_err();
    assert!(matches!(e, Error::ObjectTooLarge { .. }), "{e}");
    let alloc = |pool: &Pool, slot: usize| {
        pool.tx(|tx| {
            let o = tx.alloc_zeroed::<[u8; MAX]>()?;
            {
                let mut v = tx.open(o)?;
                for (i, b) in v.iter_mut().enumerate().step_by(509) {
                    *b = byte(i);
                }
                v[MAX - 1] = 0xee;
            }
            tx.open(root)?[slot] = o.raw();
            Ok(o)
        })
        .unwrap()
    };
    let check = |pool: &Pool, o: u64, what: &str| {
        let v = pool.get(Oid::<[u8; MAX]>::from_raw(o)).unwrap();
        for (i, &b) in v[..MAX - 1].iter().enumerate() {
            let want = if i % 509 == 0 { byte(i) } else { 0 };
            assert_eq!(b, want, "{what}: byte {i}");
        }
        assert_eq!(v[MAX - 1], 0xee, "{what}: last byte");
    };
    let first = alloc(&pool, 0).raw();
    let points: Arc<Mutex<Vec<CrashPoint>>> = Arc::default();
    let sink = points.clone();
    sim.set_fence_hook(move |s: &CrashSim| sink.lock().unwrap().push(s.crash_point()));
    let second = alloc(&pool, 1).raw();
    sim.clear_fence_hook();
    let zones = [first, second].map(|o| (o - geo.zones_offset()) / geo.zone_size());
    assert_eq!(zones, [1, 2], "each takes a grown zone whole");
    drop(pool);

    let pool = Pool::open_sim(&sim, &layout).unwrap();
    check(&pool, first, "reopened: the first");
    check(&pool, second, "reopened: the second");
    assert_eq!(pool.verify_objects(|_, _| {}).unwrap().len(), 0);
    drop(pool);

    let points = points.lock().unwrap().clone();
    assert!(!points.is_empty());
    for cp in &points {
        // Every pending word, none, and random subsets of them.
        let (all, none) = (cp.image(|_| true), cp.image(|_| false));
        let pending = (0..all.len()).filter(|&w| all[w] != none[w]).count();
        let mut rng = support::Rng(cp.fence());
        let picks: Vec<Vec<bool>> = (0..12)
            .map(|k| {
                (0..pending)
                    .map(|_| k == 0 || (k > 1 && rng.below(2) == 0))
                    .collect()
            })
            .collect();
        for pick in picks {
            let dev = cp.device(cfg.max_size, |i| pick[i]);
            let pool = Pool::open_sim(&dev, &layout)
                .unwrap_or_else(|e| panic!("crash at fence {}: {e}", cp.fence()));
            assert_eq!(pool.verify_objects(|_, _| {}).unwrap().len(), 0);
            let r = *pool.get(root).unwrap();
            assert_eq!(r[0], first, "crash at fence {}", cp.fence());
            check(&pool, first, "after a crash: the first");
            match r[1] {
                0 => {}
                o if o == second => check(&pool, o, "after a crash: the second"),
                o => panic!("crash at fence {}: root names {o:#x}", cp.fence()),
            }
        }
    }
}

#[test]
fn the_largest_object_of_64k_chunks_one_a_row() {
    let cfg = config("largest-64k", 64 << 10, 1, 5);
    the_largest_object_fills_a_grown_zone::<{ 4 * (64 << 10) - 16 }, { 4 * (64 << 10) - 15 }>(&cfg);
}

#[test]
fn the_largest_object_of_16k_chunks_three_a_row() {
    let cfg = config("largest-16k", 16 << 10, 3, 3);
    the_largest_object_fills_a_grown_zone::<{ 8 * (16 << 10) - 16 }, { 8 * (16 << 10) - 15 }>(&cfg);
}
