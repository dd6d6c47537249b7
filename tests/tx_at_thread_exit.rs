//! A transaction may run from a thread-local's destructor while its thread exits, after
//! pgl's own thread-locals (the registry of this thread's open transactions) are gone: it
//! must commit, not panic (a panic in a thread-local's destructor aborts the process). Its
//! own binary: an abort takes the whole test binary down.

use pgl::{Config, CrashSim, Oid, Pool};
use std::cell::RefCell;
use std::sync::Arc;

type Root = [u64; 32];

/// Writes `value` into word 16 of the root when dropped (at the thread's exit).
struct CommitOnExit {
    pool: Pool,
    root: Oid<Root>,
    value: u64,
}

impl Drop for CommitOnExit {
    fn drop(&mut self) {
        let v = self.value;
        self.pool
            .tx(|tx| {
                tx.open(self.root)?.write_at(128, &v);
                Ok(())
            })
            .expect("a commit at thread exit");
    }
}

thread_local! {
    static ON_EXIT: RefCell<Option<CommitOnExit>> = const { RefCell::new(None) };
}

#[test]
fn a_transaction_at_thread_exit_commits() {
    let cfg = Config::small("tx-at-exit");
    let sim: Arc<CrashSim> = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    let thread_pool = pool.clone();
    std::thread::spawn(move || {
        // Set before this thread's first transaction registers pgl's thread-locals, so it
        // is destroyed after them.
        ON_EXIT.with(|k| {
            *k.borrow_mut() = Some(CommitOnExit {
                pool: thread_pool.clone(),
                root,
                value: 7,
            })
        });
        thread_pool
            .tx(|tx| {
                tx.open(root)?.write_at(128, &1u64);
                Ok(())
            })
            .unwrap();
    })
    .join()
    .expect("the thread exits without a panic");
    assert_eq!(pool.get(root).unwrap()[16], 7);
    drop(pool);
    let dev = CrashSim::from_image(&sim.persisted_image(), sim.len(), sim.capacity());
    let again = Pool::open_sim_with(&dev, &cfg).unwrap();
    assert_eq!(again.get(root).unwrap()[16], 7, "durable after the close");
}
