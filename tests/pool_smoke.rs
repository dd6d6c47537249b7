//! Smoke tests of the pool API on real files and on CrashSim.

mod support;
use pgl::{Config, CrashSim, Error, Oid, Pool};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = support::test_dir().join(format!("pgl-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&d);
    d
}

#[test]
fn create_alloc_overwrite_free_reopen() {
    let path = tmp("smoke");
    let cfg = Config::small("smoke");
    {
        let pool = Pool::create(&path, &cfg).unwrap();
        let root = pool.root::<[u64; 4]>().unwrap();
        let initial_free = pool.free_bytes();
        let obj = pool
            .tx(|tx| {
                let o = tx.alloc([7u64; 8])?;
                let mut r = tx.open(root)?;
                r[0] = o.raw();
                Ok(o)
            })
            .unwrap();
        assert_eq!(pool.get(obj).unwrap()[3], 7);
        pool.tx(|tx| {
            let mut h = tx.open(obj)?;
            h[3] = 99;
            Ok(())
        })
        .unwrap();
        assert_eq!(pool.get(obj).unwrap()[3], 99);
        assert!(pool.free_bytes() < initial_free);
        let s = pool.stats();
        assert!(s.commits >= 3, "{s:?}");
    }
    {
        let pool = Pool::open(&path, "smoke").unwrap();
        let root = pool.root::<[u64; 4]>().unwrap();
        let obj = Oid::<[u64; 8]>::from_raw(pool.get(root).unwrap()[0]);
        assert_eq!(pool.get(obj).unwrap()[3], 99);
        pool.tx(|tx| {
            tx.free(obj)?;
            let mut r = tx.open(root)?;
            r[0] = 0;
            Ok(())
        })
        .unwrap();
        assert!(matches!(pool.get(obj), Err(Error::InvalidOid { .. })));
    }
    assert!(matches!(
        Pool::open(&path, "other"),
        Err(Error::LayoutName { .. })
    ));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn sim_pool_recovers() {
    let cfg = Config::small("sim");
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<u64>().unwrap();
    pool.tx(|tx| {
        *tx.open(root)? = 5;
        Ok(())
    })
    .unwrap();
    let cp = sim.crash_point();
    drop(pool);
    let dev = cp.device(cfg.max_size, |_| false);
    let p2 = Pool::open_sim(&dev, "sim").unwrap();
    let r2 = p2.root::<u64>().unwrap();
    assert_eq!(*p2.get(r2).unwrap(), 5);
}

static_assertions::assert_impl_all!(pgl::Pool: Send, Sync, Clone);
static_assertions::assert_not_impl_any!(pgl::Tx<'static>: Send, Sync);
static_assertions::assert_not_impl_any!(pgl::Mut<'static, u64>: Send, Sync);
static_assertions::assert_impl_all!(pgl::Ref<'static, u64>: Sync);
static_assertions::assert_not_impl_any!(pgl::Ref<'static, u64>: Send);
static_assertions::assert_not_impl_any!(pgl::Read<'static, u64>: Send, Sync);
static_assertions::assert_not_impl_any!(pgl::Place<'static, u64>: Send, Sync);
static_assertions::assert_not_impl_any!(pgl::Detached<'static, u64>: Send, Sync);
static_assertions::assert_impl_all!(pgl::Log: Send, Sync);
static_assertions::assert_impl_all!(pgl::Reservation<'static>: Sync);
// The thread that reserves a record completes it: that lets a force tell the caller's own
// open records (an error) from other threads' (a wait).
static_assertions::assert_not_impl_any!(pgl::Reservation<'static>: Send);
static_assertions::assert_impl_all!(pgl::CrashSim: Send, Sync);

#[test]
fn create_is_sparse_for_1_gib() {
    let path = tmp("sparse");
    let t = std::time::Instant::now();
    let pool = Pool::create(&path, &Config::new("sparse").size(1 << 30)).unwrap();
    let took = t.elapsed();
    assert!(pool.size() >= (1 << 30) - Config::new("x").geometry().zone_size());
    // Sparse: the file occupies far less than its length (only headers and metadata pages).
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.len() >= 1 << 29);
    assert!(
        meta.blocks() * 512 < 16 << 20,
        "{} bytes allocated for a fresh pool",
        meta.blocks() * 512
    );
    println!("created a {} byte pool in {took:?}", pool.size());
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn create_preallocated_owns_every_block_and_grows_so() {
    let path = tmp("prealloc");
    let t = std::time::Instant::now();
    let cfg = Config::new("prealloc").size(256 << 20).preallocate(true);
    let pool = Pool::create(&path, &cfg).unwrap();
    let took = t.elapsed();
    use std::os::unix::fs::MetadataExt;
    let allocated = |p: &std::path::Path| std::fs::metadata(p).unwrap().blocks() * 512;
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(
        allocated(&path) >= len,
        "{} of {len} bytes allocated",
        allocated(&path)
    );
    pool.grow(pool.size() + (64 << 20)).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(
        allocated(&path) >= len,
        "grown: {} of {len} bytes allocated",
        allocated(&path)
    );
    println!("created a preallocated {} byte pool in {took:?}", cfg.size);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

/// A second `Pool` on a file that one already has open (here, in this process; another
/// process is refused alike, see the CLI tests) would share its bytes without sharing its
/// locks and lanes: two commits could race on the same object, and its recovery would
/// replay records under the first one's feet. Opening is refused until the first closes;
/// clones of the first are the way to share it.
#[test]
fn a_pool_open_already_is_not_opened_again() {
    let path = tmp("open-twice");
    let cfg = Config::small("twice");
    let pool = Pool::create(&path, &cfg).unwrap();
    let root = pool.root::<u64>().unwrap();
    let header = std::fs::read(&path).unwrap()[..4096].to_vec();
    for r in [Pool::open(&path, "twice"), Pool::open_any(&path)] {
        match r {
            Err(Error::AlreadyOpen {
                path: ref at,
                what: "pool",
                ..
            }) if at == &path => {}
            other => panic!("a second open of an open pool: {other:?}"),
        }
    }
    assert_eq!(
        std::fs::read(&path).unwrap()[..4096],
        header[..],
        "the refused open changed the header"
    );
    let clone = pool.clone();
    clone
        .tx(|tx| {
            *tx.open(root)? = 5;
            Ok(())
        })
        .unwrap();
    drop((pool, clone));
    let pool = Pool::open(&path, "twice").unwrap();
    assert_eq!(*pool.get(root).unwrap(), 5);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

/// A child process another thread starts holds a copy of every descriptor from its fork
/// until its exec closes it, the pool file's with its lock: a pool this program has just
/// closed then still looks open for a moment (the media-error tests, which start child
/// processes, failed their reopen now and then). Opening waits out such a short hold; a
/// lock held for good is still refused.
#[test]
fn a_pool_closed_a_moment_ago_opens_while_a_copy_of_its_descriptor_goes() {
    use std::os::fd::AsRawFd;
    let path = tmp("lock-grace");
    let cfg = Config::small("grace");
    drop(Pool::create(&path, &cfg).unwrap());
    // Another open of the file takes its lock, as the child's copy of the closed pool's
    // descriptor still holds it, and lets go 50 ms later.
    let holder = std::fs::File::open(&path).unwrap();
    // SAFETY: flock on a descriptor `holder` owns; touches no memory of ours.
    let rc = unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(rc, 0, "the test's lock");
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(holder);
    });
    let reopened = Pool::open(&path, "grace");
    release.join().unwrap();
    assert!(reopened.is_ok(), "{:?}", reopened.err());
    drop(reopened);
    // Held for good, it is refused.
    let holder = std::fs::File::open(&path).unwrap();
    // SAFETY: as above.
    let rc = unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(rc, 0, "the test's lock");
    assert!(matches!(
        Pool::open(&path, "grace"),
        Err(Error::AlreadyOpen { .. })
    ));
    drop(holder);
    std::fs::remove_file(&path).unwrap();
}

/// `grow` adds zones to a pool other threads are allocating from, writing to and freeing
/// in: none of their objects is lost or damaged, the new zones take allocations, and
/// parity and checksums verify after, and after reopening.
#[test]
fn a_pool_grows_while_threads_allocate_from_it() {
    grow_under_load("grow-live", pgl::VerifyPolicy::default());
}

/// The same with the background scrubber running every 50 transactions: it verifies
/// zones while new ones are added.
#[test]
fn a_pool_grows_while_threads_allocate_and_a_scrubber_runs() {
    grow_under_load("grow-scrub", pgl::VerifyPolicy::Scrub { every_n_tx: 50 });
}

fn grow_under_load(name: &str, verify: pgl::VerifyPolicy) {
    let path = tmp(name);
    let mut cfg = Config::small(name).verify(verify);
    cfg.lanes = 4;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.geometry().pool_size(8);
    let pool = Pool::create(&path, &cfg).unwrap();
    let zone = cfg.geometry().pool_size(2) - cfg.geometry().pool_size(1);
    let start = pool.size();
    const THREADS: u64 = 3;
    const PER_THREAD: u64 = 200; // 3 × 200 × 1 KiB: more than the first zone holds
    let kept: Vec<Vec<(Oid<[u64; 128]>, u64)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let pool = pool.clone();
                s.spawn(move || {
                    let mut mine = Vec::new();
                    let mut i = 0;
                    while (mine.len() as u64) < PER_THREAD {
                        let tag = t << 32 | i;
                        match pool.tx(|tx| tx.alloc([tag; 128])) {
                            Ok(o) => mine.push((o, tag)),
                            // The grower has not caught up yet: try again.
                            Err(Error::PoolFull { .. }) => {
                                std::thread::yield_now();
                                continue;
                            }
                            Err(e) => panic!("thread {t}: {e}"),
                        }
                        // Every third object is overwritten, every fifth freed again.
                        if i % 3 == 0 {
                            if let Some(&(o, _)) = mine.last() {
                                pool.tx(|tx| {
                                    tx.open(o)?[1] = !tag;
                                    Ok(())
                                })
                                .unwrap();
                                mine.last_mut().unwrap().1 = !tag;
                            }
                        }
                        if i % 5 == 4 {
                            let (o, _) = mine.pop().unwrap();
                            pool.tx(|tx| tx.free(o)).unwrap();
                        }
                        i += 1;
                    }
                    mine
                })
            })
            .collect();
        let mut zones = 1;
        while !workers.iter().all(|w| w.is_finished()) {
            if pool.free_bytes() < zone / 2 && zones < 8 {
                zones += 1;
                pool.grow(cfg.geometry().pool_size(zones)).unwrap();
            }
            std::thread::yield_now();
        }
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    if verify != pgl::VerifyPolicy::default() {
        // Wait for one scrub over the grown pool at least (a few transactions more).
        let t = std::time::Instant::now();
        while pool.stats().scrubs < 2 && t.elapsed().as_secs() < 30 {
            let (o, _) = kept[0][0];
            pool.tx(|tx| {
                tx.open(o)?[2] += 1;
                Ok(())
            })
            .unwrap();
        }
        assert!(pool.stats().scrubs >= 2, "{:?}", pool.stats());
    }
    let grown = (pool.size() - start) / zone;
    assert!(
        grown >= 2,
        "grew by {grown} zone(s): the test proves little"
    );
    let check = |pool: &Pool| {
        for (t, mine) in kept.iter().enumerate() {
            for &(o, tag) in mine {
                let got = pool.get(o).unwrap();
                let first = if tag >> 63 == 1 { !tag } else { tag };
                assert_eq!(
                    (got[0], got[1], got[127]),
                    (first, tag, first),
                    "thread {t}"
                );
            }
        }
        assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
        assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    };
    check(&pool);
    let above = kept
        .iter()
        .flatten()
        .filter(|(o, _)| o.raw() >= start)
        .count();
    assert!(above > 0, "no object landed in a new zone");
    let size = pool.size();
    drop(pool);
    let pool = Pool::open(&path, name).unwrap();
    assert_eq!(pool.size(), size);
    check(&pool);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
