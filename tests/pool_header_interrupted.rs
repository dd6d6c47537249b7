//! A crash in the middle of a header update (opening, closing, growing a pool) leaves one
//! header copy older than the other, or torn: a state the update legitimately passes
//! through, not damage. Opening completes the update and counts it in
//! `Stats::header_updates_completed`, not in `header_repairs` (which `pgl check` reports as
//! a problem); real damage to a copy is still counted as damage.

use pgl::{Config, CrashPoint, CrashSim, Header, Pool};
use std::sync::{Arc, Mutex};

const LAYOUT: &str = "hdr-crash";
const PAGE: u64 = 4096;

/// The crash points captured at every fence of `op`, among those whose pending words all
/// lie in the header pages (the ones a header update leaves).
fn header_points(sim: &Arc<CrashSim>, b_at: u64, op: impl FnOnce()) -> Vec<CrashPoint> {
    let points = Arc::new(Mutex::new(Vec::new()));
    let p = points.clone();
    sim.set_fence_hook(move |s| p.lock().unwrap().push(s.crash_point()));
    op();
    sim.clear_fence_hook();
    let all = std::mem::take(&mut *points.lock().unwrap());
    let in_headers = |img: &[u64], base: &[u64]| {
        img.iter().zip(base).enumerate().all(|(w, (x, y))| {
            let off = w as u64 * 8;
            x == y || off < PAGE || (b_at..b_at + PAGE).contains(&off)
        })
    };
    all.into_iter()
        .filter(|c| c.pending() > 0 && c.pending() <= 12)
        .filter(|c| in_headers(&c.image(|_| true), &c.image(|_| false)))
        .collect()
}

/// Opens every image each point can leave (every subset of its pending words) and checks
/// that none is taken for damage; returns how many images completed an update.
fn open_every_image(points: &[CrashPoint], cap: u64) -> (u64, u64) {
    let (mut images, mut completed) = (0, 0);
    for c in points {
        for mask in 0u32..1 << c.pending() {
            let dev = c.device(cap, |i| mask & (1 << i) != 0);
            let pool = Pool::open_sim(&dev, LAYOUT).unwrap_or_else(|e| {
                panic!("fence {} subset {mask:#x}: {e}", c.fence());
            });
            let s = pool.stats();
            assert_eq!(
                s.header_repairs,
                0,
                "fence {} subset {mask:#x}: an interrupted header update taken for damage",
                c.fence()
            );
            completed += s.header_updates_completed;
            images += 1;
        }
    }
    (images, completed)
}

#[test]
fn a_crash_inside_a_header_update_is_not_damage() {
    let cfg = Config::small(LAYOUT);
    let cap = cfg.max_size;
    let b_at = cfg.geometry().header_offset(1);
    let sim = CrashSim::new(cap);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    pool.tx(|tx| tx.alloc(7u64)).unwrap();

    // Closing (clears OPEN), growing (adds a zone), then opening (sets OPEN).
    let mut points = header_points(&sim, b_at, || drop(pool));
    let pool = Pool::open_sim(&sim, LAYOUT).unwrap();
    let size = pool.size() + cfg.geometry().zone_size();
    points.extend(header_points(&sim, b_at, || pool.grow(size).unwrap()));
    drop(pool);
    points.extend(header_points(&sim, b_at, || {
        drop(Pool::open_sim(&sim, LAYOUT).unwrap())
    }));
    assert!(
        points.len() >= 6,
        "two header writes per update: {}",
        points.len()
    );
    let (images, completed) = open_every_image(&points, cap);
    assert!(
        completed > 0 && completed < images,
        "some images complete an update, some find it done or not begun: {completed} of \
         {images}"
    );
}

#[test]
fn damage_to_a_header_copy_is_still_damage() {
    let cfg = Config::small(LAYOUT);
    let cap = cfg.max_size;
    let b_at = cfg.geometry().header_offset(1);
    let sim = CrashSim::new(cap);
    drop(Pool::create_sim(&sim, &cfg).unwrap());
    let clean = sim.persisted_image();
    let hdr = |img: &[u64], at: u64| -> Vec<u8> {
        img[(at / 8) as usize..((at + PAGE) / 8) as usize]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    };
    let put = |img: &mut [u64], at: u64, page: &[u8]| {
        for (i, w) in page.chunks(8).enumerate() {
            img[(at / 8) as usize + i] = u64::from_le_bytes(w.try_into().unwrap());
        }
    };
    let h = Header::decode(&hdr(&clean, 0)).unwrap();
    let cases: Vec<(&str, Vec<u64>)> = vec![
        // A byte of the layout name of copy A (a word no update writes).
        ("scribbled copy A", {
            let mut img = clean.clone();
            img[(40 / 8) as usize] ^= 0xff;
            img
        }),
        // Copy B a valid header, but newer than A: an update writes A first.
        ("copy B newer than A", {
            let mut img = clean.clone();
            let newer = Header {
                generation: h.generation + 1,
                ..h.clone()
            };
            put(&mut img, b_at, &newer.encode());
            img
        }),
        // Copy B valid, but three updates behind A: more than a crash leaves.
        ("copy B far behind", {
            let mut img = clean.clone();
            let older = Header {
                generation: h.generation - 3,
                ..h.clone()
            };
            put(&mut img, b_at, &older.encode());
            img
        }),
    ];
    for (what, img) in cases {
        let dev = CrashSim::from_image(&img, sim.len(), cap);
        let pool = Pool::open_sim(&dev, LAYOUT).unwrap();
        let s = pool.stats();
        assert_eq!(
            (s.header_repairs, s.header_updates_completed),
            (1, 0),
            "{what}"
        );
    }
}

/// Every crash point at the fences of `op` (every word a crash may keep, not just the
/// header's: a grow right after a commit leaves that commit's retire marks pending too).
fn all_points(sim: &Arc<CrashSim>, op: impl FnOnce()) -> Vec<CrashPoint> {
    let points = Arc::new(Mutex::new(Vec::new()));
    let p = points.clone();
    sim.set_fence_hook(move |s| p.lock().unwrap().push(s.crash_point()));
    op();
    sim.clear_fence_hook();
    let all = std::mem::take(&mut *points.lock().unwrap());
    all.into_iter().filter(|c| c.pending() <= 12).collect()
}

/// A header copy damaged while the pool is open: the header updates that follow (closing,
/// growing) rewrote the one good copy in place. A crash that tears it must still leave a
/// pool that opens (from a copy left intact, as before the update, or one written whole).
#[test]
fn a_crash_rewriting_the_only_good_header_copy_leaves_a_pool_that_opens() {
    let cfg = Config::small(LAYOUT);
    let cap = cfg.max_size;
    for (op, copy) in [("close", 0), ("close", 1), ("grow", 0), ("grow", 1)] {
        let sim = CrashSim::new(cap);
        let pool = Pool::create_sim(&sim, &cfg).unwrap();
        let oid = pool.tx(|tx| tx.alloc(7u64)).unwrap();
        pool.inject(&pgl::Fault::HeaderScribble {
            copy,
            at: 40,
            len: 8,
            seed: 3,
        })
        .unwrap();
        let points = match op {
            "close" => all_points(&sim, || drop(pool)),
            _ => {
                let size = pool.size() + cfg.geometry().zone_size();
                let points = all_points(&sim, || pool.grow(size).unwrap());
                drop(pool);
                points
            }
        };
        assert!(!points.is_empty(), "{op}: crash points");
        for c in &points {
            for mask in 0u32..1 << c.pending() {
                let dev = c.device(cap, |i| mask & (1 << i) != 0);
                let pool = Pool::open_sim(&dev, LAYOUT).unwrap_or_else(|e| {
                    panic!(
                        "{op}, copy {copy} damaged: fence {} subset {mask:#x}: {e}",
                        c.fence()
                    )
                });
                assert_eq!(
                    *pool.get(oid).unwrap(),
                    7,
                    "{op}, copy {copy}: fence {}",
                    c.fence()
                );
            }
        }
    }
}
