//! A pool may be closed from a thread-local's destructor while its thread exits, after
//! pgl's list of owed write-backs (`tx/deferred.rs`) is gone: the close must still settle the
//! deferred records, not panic (a panic in a thread-local's destructor aborts the
//! process). Its own binary: an abort takes the whole test binary down.

use pgl::{Config, CrashSim, Pool};
use std::cell::RefCell;
use std::sync::Arc;

type Root = [u64; 32];

thread_local! {
    /// The last clone of the pool: it closes when the thread's thread-locals are destroyed.
    static KEPT: RefCell<Option<Pool>> = const { RefCell::new(None) };
}

#[test]
fn a_pool_closed_at_thread_exit_settles_its_deferred_records() {
    let cfg = Config::small("deferred-exit");
    let sim: Arc<CrashSim> = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    let thread_pool = pool.clone();
    drop(pool);
    std::thread::spawn(move || {
        // `KEPT` is touched before this thread's first commit registers pgl's list of owed
        // write-backs, so it is destroyed after that one.
        KEPT.with(|k| *k.borrow_mut() = Some(thread_pool.clone()));
        for v in 0..3u64 {
            thread_pool
                .tx(|tx| {
                    tx.open(root)?.write_at(128, &v);
                    Ok(())
                })
                .unwrap();
        }
        drop(thread_pool);
    })
    .join()
    .unwrap();
    // Closed cleanly at the thread's exit: only what reached media counts.
    let dev = CrashSim::from_image(&sim.persisted_image(), sim.len(), sim.capacity());
    let again = Pool::open_sim_with(&dev, &cfg).unwrap();
    let r = *again.get(root).unwrap();
    assert_eq!(r[16], 2);
    assert_eq!(again.stats().records_replayed, 0, "closed cleanly");
}
