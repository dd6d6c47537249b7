//! A `CrashSim` device holds at most one open `Pool` or `Log` at a time, as a file does
//! (its `flock`): two over the same bytes would each trust their own locks and lanes, so
//! one's commit could rewrite bytes the other lends out as `&T` or `&mut [u8]`.

use pgl::{Config, CrashSim, Error, Log, LogConfig, Pool};

#[test]
fn a_second_pool_on_an_open_device_is_refused() {
    let cfg = Config::small("sim-excl");
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<u64>().unwrap();
    match Pool::open_sim(&sim, "sim-excl") {
        Err(Error::AlreadyOpen { what: "pool", .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
        Ok(other) => {
            // What the refusal prevents: the other pool's commit rewrites the bytes behind
            // a live `&u64` lent out by this one (undefined behaviour).
            let r = pool.get(root).unwrap();
            let seen: &u64 = &r;
            let before = *seen;
            other
                .tx(|tx| {
                    *tx.open(root)? = before + 1;
                    Ok(())
                })
                .unwrap();
            panic!(
                "two pools opened one device: a `&u64` changed under a live Ref from {before} \
                 to {}",
                // SAFETY: none; this read is the undefined behaviour being shown.
                unsafe { std::ptr::read_volatile(seen) }
            );
        }
    }
    assert!(matches!(
        Pool::create_sim(&sim, &cfg),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        Log::open_sim(&sim),
        Err(Error::AlreadyOpen { .. })
    ));
    // Closed, the device opens again.
    drop(pool);
    let pool = Pool::open_sim(&sim, "sim-excl").unwrap();
    assert_eq!(*pool.get(root).unwrap(), 0);
}

#[test]
fn a_second_log_on_an_open_device_is_refused() {
    let sim = CrashSim::new(1 << 20);
    let log = Log::create_sim(&sim, LogConfig::new(4096)).unwrap();
    match Log::open_sim(&sim) {
        Err(Error::AlreadyOpen { what: "log", .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
        Ok(other) => {
            // Both logs hand out the same area bytes as `&mut [u8]`.
            let mut a = log.reserve(16).unwrap();
            let mut b = other.reserve(16).unwrap();
            let (pa, pb) = (a.as_mut_ptr(), b.as_mut_ptr());
            panic!("two logs opened one device: reservations at {pa:p} and {pb:p} alias");
        }
    }
    assert!(matches!(
        Pool::open_sim(&sim, "x"),
        Err(Error::AlreadyOpen { .. })
    ));
    drop(log);
    Log::open_sim(&sim).unwrap();
}

#[test]
fn concurrent_creates_on_one_device_format_it_once() {
    let cfg = Config::small("sim-race");
    for _ in 0..20 {
        let sim = CrashSim::new(cfg.max_size);
        let made: Vec<bool> = std::thread::scope(|s| {
            let h: Vec<_> = (0..2)
                .map(|_| s.spawn(|| Pool::create_sim(&sim, &cfg).is_ok()))
                .collect();
            h.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(made.iter().filter(|m| **m).count() <= 1, "{made:?}");
    }
}

#[test]
fn the_refusal_tells_a_crash_test_what_to_do() {
    // A crash test that reopens the device its pool still has open is told how to
    // simulate the crash instead, not about other programs and files.
    let cfg = Config::small("sim-excl");
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let msg = Pool::open_sim(&sim, "sim-excl").err().unwrap().to_string();
    assert!(
        msg.contains("crash_point") && msg.contains("end_lease_of_leaked"),
        "{msg}"
    );
    drop(pool);
    let log_sim = CrashSim::new(1 << 20);
    let log = Log::create_sim(&log_sim, LogConfig::new(4096)).unwrap();
    let msg = Log::open_sim(&log_sim).err().unwrap().to_string();
    assert!(msg.contains("crash_point"), "{msg}");
    drop(log);
}
