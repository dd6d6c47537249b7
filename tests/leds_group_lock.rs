//! The read lock a transaction takes on each extension group it reads in place (`tx.ext`,
//! besides its owner's) unless the owner's checksum vouches for the link that names it:
//! it must not stop a legitimate program, and it is skipped exactly when the owner
//! verifies. Reading then changing one
//! owner in one transaction, an owner and its group on one lock stripe, another object of
//! this thread sharing the group's stripe, readers and upgraders of the same owners on two
//! threads; and the lock goes with the transaction however it ends (an error, a panic, a
//! poisoned commit, a group that fails its checksum and is repaired). Every step that
//! could wait on a lock never let go runs under a timeout.

mod support;

use pgl::__private::Extendible;
use pgl::{Config, Error, Oid, Pool, VerifyPolicy};
use v1::CounterExtFields as _;

mod v0 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_ab01)]
    #[repr(C)]
    pub struct Counter {
        pub id: u64,
    }
}

mod v1 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_ab01)]
    #[repr(C)]
    pub struct Counter {
        pub id: u64,
        #[extension(1, init = 0)]
        pub hits: u64,
        #[extension(1, init = |old| old.id() * 2)]
        pub double: u64,
    }
}

/// Long enough for any of these steps; a lock left held makes the step retry for minutes.
const LIMIT_SECS: u64 = 60;

fn new_pool(name: &str, cfg: Config) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-glock-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (Pool::create(&path, &cfg).unwrap(), path)
}

fn counter(pool: &Pool, id: u64) -> Oid<v1::Counter> {
    pool.tx(|tx| {
        tx.alloc_ext(v1::CounterData {
            id,
            hits: 0,
            double: 2 * id,
        })
    })
    .unwrap()
}

fn group_of(pool: &Pool, o: Oid<v1::Counter>) -> u64 {
    Extendible::__link(&*pool.get(o).unwrap())
}

/// Reads the group, then changes it through `ext_mut`, in one transaction, on another
/// thread (a conflict of the transaction with itself would retry until `within` fails).
fn read_then_bump(pool: &Pool, o: Oid<v1::Counter>, what: &str) -> u64 {
    let p = pool.clone();
    support::within(what, LIMIT_SECS, move || {
        p.tx(|tx| {
            let h = *tx.ext(o)?.hits();
            tx.ext_mut(o)?.set_hits(h + 1);
            Ok(*tx.ext(o)?.hits())
        })
    })
    .unwrap()
}

/// The two ways a group is read in place: without a lock of its own, its owner's
/// checksum verified (the default policy), and under its own read lock (the conservative
/// policy, whose reads verify every object instead).
fn both_paths() -> [(&'static str, Config); 2] {
    [
        ("vouched", Config::new("glock")),
        (
            "locked",
            Config::new("glock").verify(VerifyPolicy::Conservative),
        ),
    ]
}

#[test]
fn an_owner_read_then_changed_in_one_transaction_also_when_its_group_shares_its_stripe() {
    for (label, cfg) in both_paths() {
        let (pool, path) = new_pool(&format!("same-stripe-{label}"), cfg);
        let mut found = None;
        'search: for batch in 0..60u64 {
            let oids: Vec<Oid<v1::Counter>> = pool
                .tx(|tx| {
                    (0..2000)
                        .map(|i| {
                            tx.alloc_ext(v1::CounterData {
                                id: batch * 2000 + i,
                                hits: 0,
                                double: 0,
                            })
                        })
                        .collect()
                })
                .unwrap();
            for o in oids {
                if support::lock_stripe(o.raw()) == support::lock_stripe(group_of(&pool, o)) {
                    found = Some(o);
                    break 'search;
                }
            }
        }
        let same = found.expect("an owner whose group shares its lock stripe");
        let other = counter(&pool, 7);
        assert_ne!(
            support::lock_stripe(other.raw()),
            support::lock_stripe(group_of(&pool, other))
        );
        for (o, what) in [(same, "same stripe"), (other, "other stripes")] {
            assert_eq!(read_then_bump(&pool, o, what), 1, "{what}");
            // A nested transaction joins: the same locks, no conflict with itself.
            let p = pool.clone();
            let h = support::within(what, LIMIT_SECS, move || {
                p.tx(|_| {
                    let h = p.tx(|tx| Ok(*tx.ext(o)?.hits()))?;
                    p.tx(|tx| {
                        tx.ext_mut(o)?.set_hits(h + 1);
                        Ok(())
                    })?;
                    p.tx(|tx| Ok(*tx.ext(o)?.hits()))
                })
            })
            .unwrap();
            assert_eq!(h, 2, "{what}");
        }
        drop(pool);
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn a_ref_this_thread_holds_on_the_group_stripe_does_not_stop_reading_the_group() {
    for (label, cfg) in both_paths() {
        let (pool, path) = new_pool(&format!("ref-stripe-{label}"), cfg);
        let o = counter(&pool, 3);
        let g = group_of(&pool, o);
        let x = stripe_mates_of(&pool, o, g)[0];
        let p = pool.clone();
        let (read, write) = support::within("a read beside a Ref", LIMIT_SECS, move || {
            let held = p.get(x).unwrap();
            let read = p.tx(|tx| Ok(*tx.ext(o)?.double()));
            // Changing the group needs its stripe for writing, which this thread's `Ref` holds:
            // refused as for any object on that stripe, as it was before groups were locked.
            let write = p.tx(|tx| {
                tx.ext_mut(o)?.set_hits(1);
                Ok(())
            });
            drop(held);
            (read, write)
        });
        assert_eq!(read.unwrap(), 6);
        assert!(
            matches!(write, Err(Error::LockedByThisThread { .. })),
            "{write:?}"
        );
        assert_eq!(read_then_bump(&pool, o, "after the Ref"), 1);
        drop(pool);
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn a_group_read_lock_goes_with_the_transaction_however_it_ends() {
    for (label, cfg) in both_paths() {
        let (pool, path) = new_pool(&format!("exits-{label}"), cfg);
        let o = counter(&pool, 4);
        let mut want = 0;
        let mut bump_elsewhere = |how: &str| {
            want += 1;
            assert_eq!(read_then_bump(&pool, o, how), want, "{how}");
        };

        let r: pgl::Result<()> = pool.tx(|tx| {
            let _ = tx.ext(o)?;
            Err(Error::InvalidConfig {
                reason: "the closure's own error".into(),
            })
        });
        assert!(matches!(r, Err(Error::InvalidConfig { .. })), "{r:?}");
        bump_elsewhere("after an error");

        let p = pool.clone();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.tx(|tx| {
                let v = tx.ext(o)?;
                panic!("a panic with the view alive: {}", v.hits());
                #[allow(unreachable_code)]
                Ok(())
            })
        }));
        assert!(caught.is_err());
        bump_elsewhere("after a panic");

        // A nested transaction's error poisons the outer one, which then cannot commit.
        let r = pool.tx(|tx| {
            let _ = tx.ext(o)?;
            let inner: pgl::Result<()> = pool.tx(|_| {
                Err(Error::InvalidConfig {
                    reason: "inner".into(),
                })
            });
            assert!(inner.is_err());
            Ok(())
        });
        assert!(r.is_err(), "a poisoned transaction committed: {r:?}");
        bump_elsewhere("after a poisoned commit");

        drop(pool);
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn a_group_that_fails_its_checksum_is_repaired_and_read_under_the_conservative_policy() {
    let cfg = Config::new("glock").verify(VerifyPolicy::Conservative);
    let (pool, path) = new_pool("repair", cfg);
    let o = counter(&pool, 5);
    let g = group_of(&pool, o);
    pool.inject(&pgl::Fault::ObjectScribble {
        oid: g,
        at: 16,
        len: 8,
        seed: 3,
    })
    .unwrap();
    let p = pool.clone();
    let (hits, double) = support::within("a read of a damaged group", LIMIT_SECS, move || {
        p.tx(|tx| {
            let v = tx.ext(o)?;
            Ok((*v.hits(), *v.double()))
        })
    })
    .unwrap();
    assert_eq!((hits, double), (0, 10), "repaired from parity");
    assert_eq!(read_then_bump(&pool, o, "after the repair"), 1);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn threads_reading_and_upgrading_the_same_owners_all_get_through() {
    const OWNERS: u64 = 16;
    const ROUNDS: u64 = 300;
    let (pool, path) = new_pool("readers-upgraders", Config::new("glock"));
    // Un-upgraded: the first `ext` or `ext_mut` of each allocates and links its group.
    let oids: Vec<Oid<v1::Counter>> = pool
        .tx(|tx| {
            (0..OWNERS)
                .map(|id| tx.alloc_ext(v0::CounterData { id }).map(|o| o.cast()))
                .collect()
        })
        .unwrap();
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let (pool, oids) = (pool.clone(), oids.clone());
            std::thread::spawn(move || {
                for r in 0..ROUNDS {
                    // Thread 1 goes the other way round: each reads what the other bumps.
                    let i = if t == 0 {
                        r % OWNERS
                    } else {
                        OWNERS - 1 - r % OWNERS
                    };
                    let j = if t == 0 {
                        (i + 1) % OWNERS
                    } else {
                        (i + OWNERS - 1) % OWNERS
                    };
                    pool.tx(|tx| {
                        let d = *tx.ext(oids[i as usize])?.double();
                        assert_eq!(d, 2 * i);
                        let mut m = tx.ext_mut(oids[j as usize])?;
                        let h = *m.hits();
                        m.set_hits(h + 1);
                        Ok(())
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    support::within("two threads reading and upgrading", LIMIT_SECS, move || {
        for t in threads {
            t.join().unwrap();
        }
    });
    let total = pool
        .tx(|tx| {
            oids.iter()
                .map(|&o| Ok(*tx.ext(o)?.hits()))
                .sum::<pgl::Result<u64>>()
        })
        .unwrap();
    assert_eq!(total, 2 * ROUNDS, "every bump committed once");
    assert_eq!(pool.stats().upgrades, OWNERS, "each owner upgraded once");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// Objects sharing a lock stripe with `g` but not with `o`, allocated for the search.
fn stripe_mates_of(pool: &Pool, o: Oid<v1::Counter>, g: u64) -> Vec<Oid<[u64; 2]>> {
    support::stripe_mates(pool, support::lock_stripe(g), support::lock_stripe(o.raw()))
}

#[test]
fn a_stripe_this_thread_writes_elsewhere_refuses_a_group_read_at_once() {
    // What the group's lock adds: like any object read, a group read now meets this
    // thread's own holders of the group's stripe (a false share of the striped table). It
    // must be refused at once with `LockedByThisThread`, never retried as a conflict
    // (which would wait for this very thread), and leave nothing held. The conservative
    // policy verifies every read, and its group reads take the group's lock (no owner
    // vouches for a link there: `a_group_whose_owner_verifies_is_read_without_its_lock`).
    let cfg = Config::new("glock").verify(VerifyPolicy::Conservative);
    let (pool, path) = new_pool("own-stripe", cfg);
    let o = counter(&pool, 9);
    let g = group_of(&pool, o);
    let x = stripe_mates_of(&pool, o, g)[0];
    let p = pool.clone();
    let (read, in_tx_get, after) =
        support::within("reads beside this thread's lock", LIMIT_SECS, move || {
            let mut d = p.open_mut(x).unwrap();
            d[0] = 1;
            let read = p.tx(|tx| Ok(*tx.ext(o)?.double()));
            d.commit().unwrap();
            // The other way round: the transaction holds the group's stripe, a `pool.get` in it
            // of the stripe-mate is refused as for any object this transaction's lock covers.
            let in_tx_get = p.tx(|tx| {
                let _ = tx.ext(o)?;
                p.get(x).map(|r| r[0])
            });
            let after = p.tx(|tx| Ok(*tx.ext(o)?.double()));
            (read, in_tx_get, after)
        });
    assert!(
        matches!(read, Err(Error::LockedByThisThread { .. })),
        "{read:?}"
    );
    assert!(
        matches!(in_tx_get, Err(Error::LockedByThisThread { .. })),
        "{in_tx_get:?}"
    );
    assert_eq!(after.unwrap(), 18);
    assert_eq!(read_then_bump(&pool, o, "after the refusals"), 1);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// A transaction of this thread, holding the stripe of `x` (a stripe-mate of `o`'s group)
/// through a `Detached` write, reads `o`'s view: its result.
fn read_beside_own_stripe(pool: &Pool, o: Oid<v1::Counter>, x: Oid<[u64; 2]>) -> pgl::Result<u64> {
    let p = pool.clone();
    support::within("a read beside this thread's lock", LIMIT_SECS, move || {
        let mut d = p.open_mut(x).unwrap();
        d[0] = 1;
        let read = p.tx(|tx| Ok(*tx.ext(o)?.double()));
        d.commit().unwrap();
        read
    })
}

/// A new pool with an owner of id 9 (its group made) and an object whose lock stripe is
/// the group's but not the owner's.
fn owner_beside_a_stripe_mate(
    name: &str,
    cfg: Config,
) -> (Pool, std::path::PathBuf, Oid<v1::Counter>, Oid<[u64; 2]>) {
    let (pool, path) = new_pool(name, cfg);
    let o = counter(&pool, 9);
    let g = group_of(&pool, o);
    let x = stripe_mates_of(&pool, o, g)[0];
    (pool, path, o, x)
}

#[test]
fn a_group_whose_owner_verifies_is_read_without_its_lock() {
    // Under the default policy the owner's checksum vouches for its link: the group it
    // names is its own, which only the owner's writers change, and the owner's read lock
    // keeps them out. The group's read then takes no lock of its own, so a stripe this
    // thread holds elsewhere (the refusal above) no longer stands in its way.
    let (pool, path, o, x) = owner_beside_a_stripe_mate("vouched", Config::new("glock"));
    assert_eq!(read_beside_own_stripe(&pool, o, x).unwrap(), 18);
    assert_eq!(read_then_bump(&pool, o, "after the read"), 1);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_owner_that_fails_its_checksum_vouches_for_no_link() {
    // A scribble over the owner's `id` (not its link): its checksum fails, so its link is
    // not taken at its word, and the group is read under its own lock, as every read was
    // before, which meets this thread's stripe and is refused. The read of the owner
    // itself does not verify under the default policy (nothing repairs it here); the
    // next write verifies and repairs it.
    let (pool, path, o, x) = owner_beside_a_stripe_mate("unvouched", Config::new("glock"));
    pool.inject(&pgl::Fault::ObjectScribble {
        oid: o.raw(),
        at: 16,
        len: 8,
        seed: 11,
    })
    .unwrap();
    let read = read_beside_own_stripe(&pool, o, x);
    assert!(
        matches!(read, Err(Error::LockedByThisThread { .. })),
        "{read:?}"
    );
    assert_eq!(read_then_bump(&pool, o, "after the repair"), 1);
    let id = pool.tx(|tx| Ok(tx.ext(o)?.id)).unwrap();
    assert_eq!(id, 9, "the owner repaired from parity");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn without_checksums_no_owner_vouches_for_its_link() {
    // A pool that keeps no checksums has nothing to verify an owner's link against: its
    // groups are read under their own lock, and the stripe this thread holds elsewhere
    // refuses the read, as under the conservative policy.
    let mut cfg = Config::new("glock");
    cfg.checksums = false;
    let (pool, path, o, x) = owner_beside_a_stripe_mate("no-checksums", cfg);
    let read = read_beside_own_stripe(&pool, o, x);
    assert!(
        matches!(read, Err(Error::LockedByThisThread { .. })),
        "{read:?}"
    );
    assert_eq!(read_then_bump(&pool, o, "after the refusal"), 1);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
