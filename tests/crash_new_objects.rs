//! One commit that creates many objects of every shape recovery checks before it replays
//! a record: blocks side by side in one new run (new objects that touch), a new run over a
//! chunk a freed large object left its bytes in (the record zeroes the run's bitmap), an
//! object allocated and freed before another is allocated, and a large object over an
//! empty run (writes of the record land in the new object, over the run's bitmap).
//! Recovery takes such a record for committed only if its new objects, with the record's
//! writes laid over them, verify, are disjoint, and its zero entries stay inside their
//! chunks: a crash at any fence of the commit, with any of its pending lines on media,
//! must reopen to the state before or after it, with 64 KiB, 16 KiB and 512 KiB chunks.

mod support;

use pgl::{Config, CrashPoint, CrashSim, Oid, Pool};
use std::sync::{Arc, Mutex};

/// A block of the smallest size class, which no other object here uses: its first
/// allocation makes a run (with a plain bitmap in a geometry of large chunks and small
/// lanes).
type Tiny = [u64; 2];
/// An object larger than any block: a large object over whole chunks.
type Big = [u64; 2560];
/// What the root lists: the objects the commit under test made (0: not committed).
type Root = [u64; 16];

/// The chunk holding offset `off`: (zone, chunk).
fn chunk_of(geo: &pgl::geometry::Geometry, off: u64) -> (u64, u64) {
    let p = geo.locate(off, 1).expect("in the zone");
    (p.zone, p.chunk)
}

fn tiny(i: u64) -> Tiny {
    [i, !i.rotate_left(17)]
}

/// Runs the commit under test in a pool of `cfg`, then opens crash images of each of its
/// fences and checks each is the state before or after it. `big_first`: the commit makes
/// its large object before its tiny ones, else after. Returns whether the tiny objects'
/// run took the freed large object's chunk, and whether the large object took the empty
/// run's chunk (so that writes of the record land in it: its bytes over the run's bitmap).
/// The object freed before it is `[u8; OLD]`: a large object in `cfg`'s geometry.
fn many_new_objects_in_one_commit<const OLD: usize>(cfg: &Config, big_first: bool) -> (bool, bool)
where
    [u8; OLD]: pgl::Persistent,
{
    let layout = cfg.layout.clone();
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, cfg).unwrap();
    let geo = pool.info().header.geo;
    let root = pool.root::<Root>().unwrap();
    // An empty run: one object allocated, then freed (and no lane allocates from its run
    // once the pool is reopened).
    let e = pool.tx(|tx| tx.alloc([5u64; 64])).unwrap();
    let empty_chunk = chunk_of(&geo, e.raw());
    pool.tx(|tx| tx.free(e)).unwrap();
    // A large object whose bytes (its header at the chunk's start) stay once it is freed.
    let old = pool
        .tx(|tx| {
            let o = tx.alloc_zeroed::<[u8; OLD]>()?;
            tx.open(o)?.write_bytes(0, &[0xff; 64]);
            Ok(o)
        })
        .unwrap();
    let old_chunk = chunk_of(&geo, old.raw() - 16);
    pool.tx(|tx| tx.free(old)).unwrap();
    drop(pool);
    let pool = Pool::open_sim(&sim, &layout).unwrap();
    let free_before = pool.free_bytes();

    let points: Arc<Mutex<Vec<CrashPoint>>> = Arc::default();
    let sink = points.clone();
    sim.set_fence_hook(move |s: &CrashSim| sink.lock().unwrap().push(s.crash_point()));
    let made = pool
        .tx(|tx| {
            let mut made = [0u64; 16];
            let big = |tx: &pgl::Tx<'_>, made: &mut [u64; 16]| -> pgl::Result<()> {
                let big = tx.alloc_zeroed::<Big>()?;
                let mut b = tx.open(big)?;
                b[0] = 0xb16;
                b[2559] = !0xb16;
                made[11] = big.raw();
                Ok(())
            };
            if big_first {
                big(tx, &mut made)?;
            }
            for (i, m) in made.iter_mut().enumerate().take(10) {
                *m = tx.alloc(tiny(i as u64 + 1))?.raw();
            }
            // Allocated and freed in this commit: its block is not taken again by it.
            let gone = tx.alloc(tiny(99))?;
            tx.free(gone)?;
            made[10] = tx.alloc(tiny(11))?.raw();
            if !big_first {
                big(tx, &mut made)?;
            }
            *tx.open(root)? = made;
            Ok(made)
        })
        .unwrap();
    sim.clear_fence_hook();
    let reused = chunk_of(&geo, made[0]) == old_chunk;
    let landed = chunk_of(&geo, made[11] - 16) == empty_chunk;
    drop(pool);

    let points = points.lock().unwrap().clone();
    assert!(!points.is_empty());
    let mut images = 0;
    for cp in &points {
        let (all, none) = (cp.image(|_| true), cp.image(|_| false));
        let pending: Vec<usize> = (0..all.len()).filter(|&w| all[w] != none[w]).collect();
        let half = pending.len() / 2;
        // Every pending word, none, two halves, and random subsets (words of the record
        // without some of its applied writes, and the other way round).
        let mut rng = support::Rng(0x9e37_79b9_7f4a_7c15 ^ cp.fence());
        let picks: Vec<Vec<bool>> = (0..36)
            .map(|k| match k {
                0 => vec![true; pending.len()],
                1 => vec![false; pending.len()],
                2 | 3 => (0..pending.len()).map(|i| (i < half) == (k == 2)).collect(),
                _ => (0..pending.len()).map(|_| rng.below(2) == 0).collect(),
            })
            .collect();
        for pick in picks {
            let pick = |i: usize| pick[i];
            images += 1;
            let dev = cp.device(cfg.max_size, pick);
            let pool = Pool::open_sim(&dev, &layout)
                .unwrap_or_else(|e| panic!("crash at fence {}: {e}", cp.fence()));
            assert_eq!(
                pool.verify_objects(|_, _| {}).unwrap().len(),
                0,
                "crash at fence {}",
                cp.fence()
            );
            let r = *pool.get(root).unwrap();
            if r == [0; 16] {
                assert_eq!(
                    pool.free_bytes(),
                    free_before,
                    "crash at fence {}: nothing committed, yet space is taken",
                    cp.fence()
                );
                continue;
            }
            assert_eq!(r, made, "crash at fence {}: the root", cp.fence());
            for (i, &o) in r[..11].iter().enumerate() {
                assert_eq!(
                    *pool.get(Oid::<Tiny>::from_raw(o)).unwrap(),
                    tiny(i as u64 + 1),
                    "crash at fence {}: object {i}",
                    cp.fence()
                );
            }
            let b = pool.get(Oid::<Big>::from_raw(r[11])).unwrap();
            assert_eq!(
                (b[0], b[2559]),
                (0xb16, !0xb16),
                "crash at fence {}",
                cp.fence()
            );
            assert!(
                b[1..2559].iter().all(|&w| w == 0),
                "the large object is whole"
            );
        }
    }
    println!("{layout}: {images} crash images at {} fences", points.len());
    (reused, landed)
}

#[test]
fn many_new_objects_in_one_commit_survive_a_crash_with_64k_chunks() {
    let cfg = Config::small("new-objects-64k");
    assert_eq!(
        many_new_objects_in_one_commit::<20_480>(&cfg, true),
        (true, true),
        "the tiny objects' run over the freed object, the large one over the empty run"
    );
}

#[test]
fn many_new_objects_in_one_commit_survive_a_crash_with_16k_chunks() {
    let mut cfg = Config::small("new-objects-16k");
    cfg.chunk_size = 16 << 10;
    cfg.chunks_per_row = 8;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.size;
    let (_, landed) = many_new_objects_in_one_commit::<5_000>(&cfg, true);
    assert!(landed, "the large object over the empty run");
}

/// 512 KiB chunks and 8 KiB lanes: the smallest class's runs have plain bitmaps, so the
/// new run over the freed object's chunk is zeroed by a zero entry of the record.
#[test]
fn many_new_objects_in_one_commit_survive_a_crash_with_a_zero_entry() {
    let mut cfg = Config::small("new-objects-zero");
    cfg.chunk_size = 512 << 10;
    cfg.chunks_per_row = 1;
    cfg.rows = 4;
    cfg.lane_size = 8 << 10;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.size;
    let (reused, _) = many_new_objects_in_one_commit::<200_000>(&cfg, false);
    assert!(
        reused,
        "the tiny objects' run over the freed object (the scenario: a zero entry)"
    );
}
