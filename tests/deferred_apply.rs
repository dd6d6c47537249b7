//! Deferred apply: a commit that only overwrites objects takes one ordering point and leaves
//! its write-backs to the next (`pgl-runtime/src/tx/deferred.rs`). Each test checks one of
//! the ways its record is settled — the owner's next fence, another thread's commit over the
//! same chunk, a transaction taking its lane, the pool's close — on `CrashSim`, whose fence
//! persists only the fencing thread's write-backs, as a CPU's does. A power failure is the
//! persisted image alone: every committed value must be in it.

use pgl::{Config, CrashSim, Oid, Pool};
use std::sync::Arc;

/// Words `A` and `B` lie on different cache lines, neither of them the header's (whose
/// checksum every commit rewrites): a write-back of one never carries the other.
type Root = [u64; 32];
const A: usize = 8;
const B: usize = 24;

fn pool(name: &str) -> (Arc<CrashSim>, Config, Pool, Oid<Root>) {
    pool_of(Config::small(name))
}

/// `pool` with `lanes` lanes (`Config::small` has 2).
fn pool_with_lanes(name: &str, lanes: u64) -> (Arc<CrashSim>, Config, Pool, Oid<Root>) {
    let mut small = Config::small(name);
    small.lanes = lanes;
    small.max_size = small.geometry().pool_size(8);
    pool_of(small)
}

fn pool_of(small: Config) -> (Arc<CrashSim>, Config, Pool, Oid<Root>) {
    let max = small.max_size;
    let cfg = small.size(max);
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    (sim, cfg, pool, root)
}

/// Sets word `word` of the root, and only its bytes (a `DerefMut` would mark the whole
/// object written).
fn set(pool: &Pool, root: Oid<Root>, word: usize, v: u64) {
    pool.tx(|tx| {
        tx.open(root)?.write_at(word * 8, &v);
        Ok(())
    })
    .unwrap();
}

/// The pool a power failure leaves now: only what reached media.
fn power_fail(sim: &CrashSim, cfg: &Config) -> Pool {
    let dev = CrashSim::from_image(&sim.persisted_image(), sim.len(), sim.capacity());
    Pool::open_sim_with(&dev, cfg).unwrap()
}

/// Asserts that words `A` and `B` of the root hold `want` after a power failure now.
fn assert_words_after_power_failure(
    sim: &CrashSim,
    cfg: &Config,
    root: Oid<Root>,
    want: (u64, u64),
) {
    let again = power_fail(sim, cfg);
    let r = *again.get(root).unwrap();
    assert_eq!((r[A], r[B]), want);
}

/// Runs `f` on a thread of its own, which ends with its write-backs issued and never
/// fenced by itself.
fn on_other_thread(f: impl FnOnce() + Send) {
    std::thread::scope(|s| {
        s.spawn(f);
    });
}

#[test]
fn an_overwrite_takes_one_ordering_point() {
    let (_sim, _cfg, pool, root) = pool("deferred-fences");
    set(&pool, root, A, 1); // the lanes' first commits mark their zones dirty
    set(&pool, root, A, 2);
    let before = pool.stats();
    for v in 0..100 {
        set(&pool, root, (v % 8) as usize, v);
    }
    let after = pool.stats();
    assert_eq!(after.deferred_applies - before.deferred_applies, 100);
    assert_eq!(after.fences - before.fences, 100, "one fence per overwrite");
    // An allocation applies under its own fence, as before.
    let before = pool.stats();
    pool.tx(|tx| {
        tx.open(root)?[1] = 5;
        tx.alloc(7u64)
    })
    .unwrap();
    let after = pool.stats();
    assert_eq!(after.deferred_applies, before.deferred_applies);
    assert_eq!(after.fences - before.fences, 2);
}

#[test]
fn a_deferred_record_replays_after_a_power_failure() {
    let (sim, cfg, pool, root) = pool("deferred-replay");
    set(&pool, root, A, 1);
    set(&pool, root, A, 2);
    let again = power_fail(&sim, &cfg);
    assert_eq!(again.get(root).unwrap()[A], 2);
    assert!(again.stats().records_replayed >= 1);
    drop(again);
    drop(pool);
}

#[test]
fn the_owners_next_commit_settles_it() {
    let (sim, cfg, pool, root) = pool("deferred-owner");
    set(&pool, root, A, 0); // the lanes' first commits mark their zones dirty
    set(&pool, root, B, 0);
    for v in 1..=20 {
        let fences = pool.stats().fences;
        set(&pool, root, A, v);
        set(&pool, root, B, v);
        // One fence each: neither took a lane still pending, which costs its taker a
        // settling fence (both lanes are pending if the owner's fence settles nothing).
        assert_eq!(pool.stats().fences - fences, 2, "round {v}");
        assert_words_after_power_failure(&sim, &cfg, root, (v, v));
    }
}

#[test]
fn a_commit_of_another_thread_over_the_same_chunk_settles_it_first() {
    let (sim, cfg, pool, root) = pool("deferred-other");
    // Not word A: this thread's own write-back of A's line, pending until its next fence,
    // would carry the other thread's bytes too (`CrashSim` persists a line as it is then).
    set(&pool, root, B, 1);
    // A thread commits and ends: nothing of its own ever fences its write-backs.
    on_other_thread(|| set(&pool, root, A, 2));
    // This thread's commit meets its record: it writes the record's bytes back itself,
    // fences, and retires it, before its own record's fence.
    set(&pool, root, B, 3);
    assert_words_after_power_failure(&sim, &cfg, root, (2, 3));
    drop(pool);
}

#[test]
fn another_threads_commit_settles_it_first_though_its_lane_last_retired_other_chunks() {
    // The other thread's lane last retired a record of other chunks (a large object's and
    // the zone metadata's): only the lane's deferred record names the root's chunk, and
    // the commit over the root must still find it (`lane.rs`, the directory) and settle it
    // before its own record, which is then retired durably. Were it left unsettled, a
    // power failure would replay the older record over the newer value.
    // Eight lanes: this thread's next transactions find a lane neither pending nor the
    // other thread's (taking a pending lane settles it on its own).
    let (sim, cfg, pool, root) = pool_with_lanes("deferred-other-chunks", 8);
    set(&pool, root, B, 1);
    on_other_thread(|| {
        let big = pool.tx(|tx| tx.alloc([0u8; 100_000])).unwrap();
        let chunk = |off: u64| off / cfg.chunk_size;
        assert_ne!(chunk(big.raw()), chunk(root.raw()));
        assert_ne!(chunk(big.raw() + 100_000), chunk(root.raw()));
        let deferred = pool.stats().deferred_applies;
        set(&pool, root, A, 2);
        assert_eq!(pool.stats().deferred_applies, deferred + 1);
    });
    set(&pool, root, A, 3);
    // Two more commits: the first settles this thread's record of A = 3, the second makes
    // its retire mark durable.
    set(&pool, root, B, 4);
    set(&pool, root, B, 5);
    assert_words_after_power_failure(&sim, &cfg, root, (3, 5));
    drop(pool);
}

#[test]
fn a_transaction_that_takes_the_lane_settles_it_first() {
    let (sim, cfg, pool, root) = pool("deferred-take");
    let blocker = pool.tx(|tx| tx.alloc(0u64)).unwrap();
    on_other_thread(|| set(&pool, root, A, 2));
    // A handle holds the one lane that is not pending: this thread's transaction must take
    // the other thread's lane, whose record its own then overwrites.
    let held = pool.open_mut(blocker).unwrap();
    set(&pool, root, B, 3);
    drop(held);
    assert_words_after_power_failure(&sim, &cfg, root, (2, 3));
    drop(pool);
}

#[test]
fn closing_the_pool_settles_every_lane() {
    let (sim, cfg, pool, root) = pool("deferred-close");
    on_other_thread(|| set(&pool, root, A, 2));
    drop(pool);
    let again = power_fail(&sim, &cfg);
    assert_eq!(again.get(root).unwrap()[A], 2);
    assert_eq!(
        again.stats().records_replayed,
        0,
        "a clean close leaves nothing to replay"
    );
}

#[test]
fn a_deferred_record_stays_owed_while_the_thread_commits_to_another_pool() {
    // A deferred record of more lines than a thread keeps for other pools (1,024): then
    // commits to a second pool. Its owed write-backs must survive them, or the next commit
    // over the same bytes on the first pool would take the record for settled and retire
    // a newer one while it stays unretired (found by review: the list dropped them).
    let (sim, cfg, pool, root) = pool("deferred-two-pools");
    type Big = [u64; 4096];
    let bigs: Vec<Oid<Big>> = (0..3)
        .map(|_| pool.tx(|tx| tx.alloc([0u64; 4096])).unwrap())
        .collect();
    let other = pool.tx(|tx| tx.alloc([0u64; 32])).unwrap();
    let deferred = pool.stats().deferred_applies;
    pool.tx(|tx| {
        for o in &bigs {
            let mut m = tx.open(*o)?;
            for line in 0..512 {
                m.write_at(line * 64, &1u64);
            }
        }
        tx.open(root)?.write_at(A * 8, &1u64);
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.stats().deferred_applies, deferred + 1);
    let (_sim2, _cfg2, second, root2) = self::pool("deferred-two-pools-2");
    set(&second, root2, A, 1);
    set(&second, root2, A, 2);
    // Acknowledged: A = 2 (applied under its own fence: it also allocates).
    pool.tx(|tx| {
        tx.open(root)?.write_at(A * 8, &2u64);
        tx.alloc(7u64)
    })
    .unwrap();
    // Replaces that commit's record (another object, so that nothing repairs the root).
    pool.tx(|tx| {
        tx.open(other)?.write_at(B * 8, &3u64);
        Ok(())
    })
    .unwrap();
    let again = power_fail(&sim, &cfg);
    assert_eq!(
        again.get(root).unwrap()[A],
        2,
        "an acknowledged commit was lost"
    );
    drop(again);
    drop(second);
    drop(pool);
}
