//! `pool.scrub(true, ..)` beside threads that run transactions: every object a thread
//! committed reads back as committed, every injected fault is repaired (by the scrub or by
//! the thread that met it first), and the counts add up.

mod support;

use pgl::{Config, Fault, Oid, Pool};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use support::Rng;

type Obj = [u64; 24];
/// What a thread owns: its objects and their committed values.
type Model = Mutex<Vec<(Oid<Obj>, Obj)>>;

#[test]
fn scrubs_beside_transactions_repair_every_fault_and_lose_no_commit() {
    let p = support::test_dir().join(format!("pgl-scrub-beside-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    let cfg = Config::small("beside");
    let pool = Pool::create(&p, &cfg.clone().size(cfg.geometry().pool_size(2))).unwrap();
    let models: Vec<Model> = (0..2u64)
        .map(|t| {
            Mutex::new(
                (0..60u64)
                    .map(|i| {
                        let v = [t * 1000 + i; 24];
                        (pool.tx(|tx| tx.alloc(v)).unwrap(), v)
                    })
                    .collect(),
            )
        })
        .collect();
    let stop = AtomicBool::new(false);
    let (mut injected, mut scrub_repaired) = (0u64, 0u64);
    std::thread::scope(|s| {
        for (t, m) in models.iter().enumerate() {
            let (pool, stop) = (&pool, &stop);
            s.spawn(move || {
                let mut rng = Rng(t as u64 + 1);
                while !stop.load(Ordering::Relaxed) {
                    let mut m = m.lock().unwrap();
                    let k = rng.below(m.len() as u64) as usize;
                    let new = [rng.next(); 24];
                    let oid = m[k].0;
                    pool.tx(|tx| {
                        *tx.open(oid)? = new;
                        Ok(())
                    })
                    .unwrap();
                    m[k].1 = new;
                }
            });
        }
        let mut rng = Rng(99);
        for round in 0..40u64 {
            // One fault per round, on an object of either thread, taken while no commit
            // of its owner runs (the model lock), so its committed value is known.
            let m = &models[(round % 2) as usize];
            let g = m.lock().unwrap();
            let (oid, _) = g[rng.below(g.len() as u64) as usize];
            drop(g);
            let f = Fault::ObjectScribble {
                oid: oid.raw(),
                at: 16 + rng.below(180),
                len: 8,
                seed: rng.next(),
            };
            pool.inject(&f).unwrap();
            injected += 1;
            let r = pool.scrub(true, |_, _| {}).unwrap();
            assert!(r.is_clean(), "round {round}: {r:?}");
            assert!(r.damaged.is_empty());
            scrub_repaired += r.objects_repaired;
        }
        stop.store(true, Ordering::Relaxed);
    });
    let st = pool.stats();
    assert_eq!(st.objects_unrecoverable, 0);
    assert_eq!(
        st.objects_repaired, injected,
        "scrubs repaired {scrub_repaired}"
    );
    for m in &models {
        for (oid, v) in m.lock().unwrap().iter() {
            assert_eq!(pool.tx(|tx| Ok(*tx.open(*oid)?)).unwrap(), *v);
        }
    }
    assert!(pool.verify_parity().unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}
