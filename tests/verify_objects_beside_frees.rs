//! `Pool::verify_objects` may run beside transactions (its documentation says so): an
//! object freed between its listing and its verification is gone, not damaged, and must
//! not be reported. Before the fix, one whose block bit was already clear came back as
//! `InvalidOid { reason: "not allocated (freed, or never allocated)" }`.

mod support;

use pgl::{Config, Oid, Pool};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[test]
fn verify_objects_reports_nothing_for_objects_freed_meanwhile() {
    let path = support::test_dir().join(format!("pgl-verify-frees-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::small("verify-frees")).unwrap();
    let done = AtomicBool::new(false);
    let rounds = AtomicU64::new(0);
    let found = std::thread::scope(|s| {
        let (churner, done, rounds) = (pool.clone(), &done, &rounds);
        let churn = s.spawn(move || {
            // Allocates a batch, then frees it, over and over: most listed objects are
            // freed before the verifier reaches them.
            while !done.load(Ordering::Relaxed) {
                let (small, large): (Vec<Oid<[u64; 16]>>, Oid<[u64; 12288]>) = churner
                    .tx(|tx| {
                        let small: pgl::Result<Vec<_>> =
                            (0..64u64).map(|i| tx.alloc([i; 16])).collect();
                        Ok((small?, tx.alloc_zeroed()?))
                    })
                    .unwrap();
                churner
                    .tx(|tx| {
                        small.iter().try_for_each(|&o| tx.free(o))?;
                        tx.free(large)
                    })
                    .unwrap();
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        });
        // The churner stops however this ends; the verdict is checked after the scope.
        let mut found = None;
        let mut pass = 0;
        while (pass < 200 || rounds.load(Ordering::Relaxed) < 200) && !churn.is_finished() {
            pass += 1;
            let bad = pool.verify_objects(|_, _| {}).unwrap();
            if !bad.is_empty() {
                found = Some(format!("pass {pass}: {bad:?}"));
                break;
            }
        }
        done.store(true, Ordering::Relaxed);
        found
    });
    assert_eq!(found, None);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
