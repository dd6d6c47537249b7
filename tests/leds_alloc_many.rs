//! One transaction allocating many `#[extendible]` objects with extension groups: each
//! allocation costs the same however many came before it in the transaction. (Review:
//! each one looked through every buffer of the transaction for another owner of its
//! group, so allocating k of them took time quadratic in k: 16,000 took ~20 times as
//! long per object as 1,000.)

mod support;

use pgl::{extendible, Config, Error, Oid, Persistent, Pool};
use std::time::{Duration, Instant};

#[extendible]
#[derive(Persistent)]
#[repr(C)]
pub struct Node {
    pub key: u64,
    pub next: Oid<Node>,
    #[extension(1, init = 0)]
    pub name: u64,
    #[extension(2, init = 0)]
    pub more: u64,
}

/// The shortest of three runs of one transaction allocating `k` nodes (with both groups)
/// and then aborting, so that no record limit applies.
fn time_to_allocate(pool: &Pool, k: u64) -> Duration {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            let r = pool.tx(|tx| {
                for i in 0..k {
                    tx.alloc_ext(NodeData {
                        key: i,
                        next: Oid::NULL,
                        name: i,
                        more: i,
                    })?;
                }
                Err::<(), _>(Error::Aborted {
                    reason: "measured only".into(),
                })
            });
            let elapsed = t.elapsed();
            assert!(matches!(r, Err(Error::Aborted { .. })), "{r:?}");
            elapsed
        })
        .min()
        .expect("three runs")
}

#[test]
fn allocating_many_extendible_objects_in_one_transaction_costs_the_same_per_object() {
    let path = support::test_dir().join(format!("pgl-leds-alloc-many-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::new("alloc-many").size(256 << 20)).unwrap();
    let (small, large) = (1_000u64, 16_000u64);
    // Warm the lane's runs and buffers up first.
    time_to_allocate(&pool, small);
    let per_small = time_to_allocate(&pool, small).as_secs_f64() / small as f64;
    let per_large = time_to_allocate(&pool, large).as_secs_f64() / large as f64;
    let ratio = per_large / per_small;
    // Linear: about 1 (a quadratic cost made it about 20); generous for a busy machine.
    assert!(
        ratio < 6.0,
        "per object: {per_small:.2e} s among {small}, {per_large:.2e} s among {large} \
         (ratio {ratio:.1})"
    );
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
