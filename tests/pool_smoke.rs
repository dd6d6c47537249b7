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
