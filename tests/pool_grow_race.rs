//! `Pool::grow`, one zone at a time and without waiting for the pool to fill, while other
//! threads run transactions on the same pool: allocating small and large objects,
//! overwriting and freeing them, and upgrading `#[extendible]` objects with `tx.ext_mut`.
//! A fourth thread verifies parity and every object meanwhile. Checked: no thread stalls
//! (a watchdog fails the test); parity and objects verify clean throughout; every
//! committed value reads back, before and after reopening; every extendible object is
//! upgraded once and keeps every increment; the allocation counters match the workers'
//! counts.
//!
//! `PGL_GROW_RACE_OPS` sets the transactions per worker (default 600).

mod support;

use pgl::{Config, Error, Oid, Pool};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

mod v0 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_9a01)]
    #[repr(C)]
    pub struct Counter {
        pub id: u64,
    }
}

mod v1 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_9a01)]
    #[repr(C)]
    pub struct Counter {
        pub id: u64,
        #[extension(1, init = |old| old.id() * 2)]
        pub double: u64,
        #[extension(1, init = 0)]
        pub hits: u64,
    }
}

use v1::CounterExtFields as _;

const COUNTERS: u64 = 64;
const ZONES: u64 = 8;

type Small = [u64; 128];
type Large = [u64; 12288];

fn ops() -> u64 {
    std::env::var("PGL_GROW_RACE_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600)
}

/// An object a worker keeps, and the tag it last committed into it.
#[derive(Clone, Copy, Debug)]
enum Obj {
    Small(Oid<Small>, u64),
    Large(Oid<Large>, u64),
}

impl Obj {
    fn check(self, pool: &Pool) {
        match self {
            Obj::Small(o, tag) => {
                let v = pool.get(o).unwrap();
                assert_eq!((v[0], v[127]), (tag, !tag), "small {:#x}", o.raw());
            }
            Obj::Large(o, tag) => {
                let v = pool.get(o).unwrap();
                assert_eq!(
                    (v[0], v[6000], v[12287]),
                    (tag, tag ^ 1, !tag),
                    "large {:#x}",
                    o.raw()
                );
            }
        }
    }
}

/// One worker's transactions: returns the objects it kept, and its (allocs, frees).
/// It carries on past `ops` until `grown` is set, so that every grow lands among its
/// transactions.
fn worker(
    pool: &Pool,
    t: u64,
    ops: u64,
    progress: &AtomicU64,
    grown: &AtomicBool,
) -> (Vec<Obj>, u64, u64) {
    let mut rng = support::Rng((t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let (mut mine, mut allocs, mut frees) = (Vec::<Obj>::new(), 0, 0);
    let mut i = 0;
    while i < ops || !grown.load(Ordering::Relaxed) {
        let tag = t << 40 | i;
        let op = rng.below(10);
        let r = if op < 4 || mine.is_empty() {
            let large = op == 0;
            let r = if large {
                pool.tx(|tx| {
                    let o = tx.alloc_zeroed::<Large>()?;
                    let mut v = tx.open(o)?;
                    (v[0], v[6000], v[12287]) = (tag, tag ^ 1, !tag);
                    Ok(Obj::Large(o, tag))
                })
            } else {
                let mut v = [tag; 128];
                v[127] = !tag;
                pool.tx(|tx| tx.alloc(v)).map(|o| Obj::Small(o, tag))
            };
            r.map(|o| {
                mine.push(o);
                allocs += 1;
            })
        } else if op < 8 {
            let k = rng.below(mine.len() as u64) as usize;
            let r = match mine[k] {
                Obj::Small(o, _) => pool
                    .tx(|tx| {
                        let mut v = tx.open(o)?;
                        (v[0], v[127]) = (tag, !tag);
                        Ok(())
                    })
                    .map(|()| Obj::Small(o, tag)),
                Obj::Large(o, _) => pool
                    .tx(|tx| {
                        let mut v = tx.open(o)?;
                        (v[0], v[6000], v[12287]) = (tag, tag ^ 1, !tag);
                        Ok(())
                    })
                    .map(|()| Obj::Large(o, tag)),
            };
            r.map(|o| mine[k] = o)
        } else {
            let k = rng.below(mine.len() as u64) as usize;
            let r = match mine[k] {
                Obj::Small(o, _) => pool.tx(|tx| tx.free(o)),
                Obj::Large(o, _) => pool.tx(|tx| tx.free(o)),
            };
            r.map(|()| {
                mine.swap_remove(k);
                frees += 1;
            })
        };
        match r {
            Ok(()) => {
                i += 1;
                progress.fetch_add(1, Ordering::Relaxed);
            }
            Err(Error::PoolFull { .. }) => std::thread::yield_now(),
            Err(e) => panic!("worker {t}, op {i}: {e}"),
        }
    }
    (mine, allocs, frees)
}

fn run() {
    let ops = ops();
    let path = support::test_dir().join(format!("pgl-grow-race-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut cfg = Config::small("grow-race");
    cfg.lanes = 4;
    let geo = cfg.geometry();
    cfg.size = geo.pool_size(1);
    cfg.max_size = geo.pool_size(ZONES);
    let pool = Pool::create(&path, &cfg).unwrap();
    let counters: Vec<Oid<v1::Counter>> = pool
        .tx(|tx| {
            (0..COUNTERS)
                .map(|id| tx.alloc_ext(v0::CounterData { id }).map(|o| o.cast()))
                .collect()
        })
        .unwrap();
    // The upgrader's rounds over the counters, at least.
    let min_rounds = ops / 10;
    // Transactions the workers committed: the grower adds a zone every `ops / 4` of them,
    // so that every grow lands in the middle of their run.
    let progress = AtomicU64::new(0);
    let grown = AtomicBool::new(false);
    let (kept, allocs, frees, rounds) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let (pool, progress, grown) = (pool.clone(), &progress, &grown);
                s.spawn(move || worker(&pool, t, ops, progress, grown))
            })
            .collect();
        let upgrader = {
            let (pool, counters, grown) = (pool.clone(), &counters, &grown);
            s.spawn(move || {
                let mut round = 0;
                while round < min_rounds || !grown.load(Ordering::Relaxed) {
                    for (id, &c) in counters.iter().enumerate() {
                        // The first round allocates each counter's group: until a grow,
                        // the pool may be full.
                        loop {
                            let r = pool.tx(|tx| {
                                let mut c = tx.ext_mut(c)?;
                                assert_eq!(*c.double(), 2 * id as u64);
                                assert_eq!(*c.hits(), round, "counter {id} lost an increment");
                                c.set_hits(round + 1);
                                Ok(())
                            });
                            match r {
                                Ok(()) => break,
                                Err(Error::PoolFull { .. }) => std::thread::yield_now(),
                                Err(e) => panic!("counter {id}, round {round}: {e}"),
                            }
                        }
                    }
                    round += 1;
                }
                round
            })
        };
        // A checker: parity and every object verify while zones are added.
        let checker = {
            let (pool, grown) = (pool.clone(), &grown);
            s.spawn(move || {
                let mut passes = 0u64;
                while passes < 2 || !grown.load(Ordering::Relaxed) {
                    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
                    let bad = pool.verify_objects(|_, _| {}).unwrap();
                    assert!(bad.is_empty(), "{bad:?}");
                    passes += 1;
                }
            })
        };
        // Grow a zone at a time while the others run.
        let mut zones = 1;
        while zones < ZONES {
            if progress.load(Ordering::Relaxed) < (zones - 1) * (ops / 4) {
                std::thread::yield_now();
                continue;
            }
            zones += 1;
            pool.grow(geo.pool_size(zones)).unwrap();
            assert_eq!(pool.size(), geo.pool_size(zones));
        }
        grown.store(true, Ordering::Relaxed);
        let rounds = upgrader.join().unwrap();
        checker.join().unwrap();
        let r: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        let allocs: u64 = r.iter().map(|x| x.1).sum();
        let frees: u64 = r.iter().map(|x| x.2).sum();
        let kept: Vec<Obj> = r.into_iter().flat_map(|x| x.0).collect();
        (kept, allocs, frees, rounds)
    });
    let s = pool.stats();
    // Each counter: its base, then the group its upgrade linked.
    assert_eq!((s.allocs, s.frees), (allocs + 2 * COUNTERS, frees), "{s:?}");
    assert_eq!(s.upgrades, COUNTERS, "each counter upgraded once: {s:?}");
    let last_zone = kept
        .iter()
        .map(|o| {
            let raw = match *o {
                Obj::Small(o, _) => o.raw(),
                Obj::Large(o, _) => o.raw(),
            };
            (raw - geo.zones_offset()) / geo.zone_size()
        })
        .max();
    assert!(
        last_zone > Some(1),
        "no object in a grown zone past the second"
    );
    let check = |pool: &Pool| {
        for &o in &kept {
            o.check(pool);
        }
        pool.tx(|tx| {
            for (id, &c) in counters.iter().enumerate() {
                let c = tx.ext(c)?;
                assert_eq!((*c.double(), *c.hits()), (2 * id as u64, rounds));
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(pool.verify_objects(|_, _| {}).unwrap().len(), 0);
        assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    };
    check(&pool);
    let size = pool.size();
    drop(pool);
    let pool = Pool::open(&path, "grow-race").unwrap();
    assert_eq!(pool.size(), size);
    check(&pool);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn grow_races_allocs_frees_overwrites_and_upgrades() {
    support::within("growing the pool under transactions", 120, run);
}
