//! Two threads touching the same un-upgraded `#[extendible]` objects at once upgrade each
//! exactly once: the second finds the groups the first linked (the base's write lock makes
//! them conflict, and the loser's retry sees the committed chain).

mod support;

use pgl::{Config, Oid, Pool};
use std::sync::{Arc, Barrier};

mod v0 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_cc01)]
    #[repr(C)]
    pub struct Counter {
        pub id: u64,
    }
}

mod v1 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_cc01)]
    #[repr(C)]
    pub struct Counter {
        pub id: u64,
        #[extension(1, init = |old| old.id() * 2)]
        pub double: u64,
        #[extension(1, init = 0)]
        pub hits: u64,
    }
}

/// v1 with a second group: upgrading a v1 object to it relinks group 1.
mod v2 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_cc01)]
    #[repr(C)]
    pub struct Counter {
        pub id: u64,
        #[extension(1, init = |old| old.id() * 2)]
        pub double: u64,
        #[extension(1, init = 0)]
        pub hits: u64,
        #[extension(2, init = |old| old.double() + 1)]
        pub odd: u64,
    }
}

use v1::CounterExtFields as _;

const OBJECTS: usize = 300;

#[test]
fn two_threads_upgrade_each_object_once() {
    let path = support::test_dir().join(format!("pgl-leds-conc-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::small("conc")).unwrap();
    let oids: Vec<Oid<v1::Counter>> = pool
        .tx(|tx| {
            (0..OBJECTS as u64)
                .map(|id| tx.alloc_ext(v0::CounterData { id }).map(|o| o.cast()))
                .collect()
        })
        .unwrap();
    let barrier = Arc::new(Barrier::new(2));
    std::thread::scope(|s| {
        for t in 0..2 {
            let (pool, oids, barrier) = (pool.clone(), &oids, barrier.clone());
            s.spawn(move || {
                barrier.wait();
                // Thread 1 walks the objects backwards, so the threads meet in the middle
                // and also race on the same object at the start of each other's run.
                let order: Vec<usize> = if t == 0 {
                    (0..OBJECTS).collect()
                } else {
                    (0..OBJECTS).rev().collect()
                };
                for i in order {
                    pool.tx(|tx| {
                        let mut c = tx.ext_mut(oids[i])?;
                        assert_eq!(*c.double(), 2 * i as u64);
                        let h = *c.hits();
                        c.set_hits(h + 1);
                        Ok(())
                    })
                    .unwrap();
                }
            });
        }
    });
    assert_eq!(
        pool.stats().upgrades,
        OBJECTS as u64,
        "each object upgraded once"
    );
    assert_eq!(
        pool.objects().unwrap().len(),
        2 * OBJECTS,
        "one group per object"
    );
    pool.tx(|tx| {
        for o in &oids {
            assert_eq!(*tx.ext(*o)?.hits(), 2, "both threads' updates are there");
        }
        Ok(())
    })
    .unwrap();
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

/// A transaction reads extension groups under their owner's lock alone; one that adds a
/// group to the object (relinking group 1) must therefore wait for it to end.
#[test]
fn an_upgrade_waits_for_a_reader_of_the_groups_it_relinks() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use v2::CounterExtFields as _;
    let path = support::test_dir().join(format!("pgl-leds-relink-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::small("relink")).unwrap();
    let o: Oid<v1::Counter> = pool
        .tx(|tx| {
            tx.alloc_ext(v1::CounterData {
                id: 5,
                double: 10,
                hits: 3,
            })
        })
        .unwrap();
    let upgraded = AtomicBool::new(false);
    let reading = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut first = true;
            pool.tx(|tx| {
                let c = tx.ext(o)?;
                if std::mem::take(&mut first) {
                    reading.wait();
                }
                std::thread::sleep(std::time::Duration::from_millis(150));
                assert!(
                    !upgraded.load(Ordering::SeqCst),
                    "group 1 was relinked under a reader holding its owner"
                );
                assert_eq!((*c.double(), *c.hits()), (10, 3));
                Ok(())
            })
            .unwrap();
        });
        reading.wait();
        let odd = pool
            .tx(|tx| Ok(*tx.ext(o.cast::<v2::Counter>())?.odd()))
            .unwrap();
        upgraded.store(true, Ordering::SeqCst);
        assert_eq!(odd, 11);
    });
    assert_eq!(pool.stats().upgrades, 1);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
