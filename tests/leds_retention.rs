//! The Reset and Manual retention models: `Pool::reset` / `Pool::open_or_reset`, and
//! `Pool::migrate` / `Pool::migration`, which rewrite every object of the old types as
//! new types (root included), in as many transactions as their size needs.

mod support;

use pgl::{type_key, Config, Oid, Persistent, Pool};

mod old {
    use pgl::{Oid, Persistent};
    #[derive(Persistent, Clone, Copy)]
    #[pgl(id = 0x1ed5_a001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
    }
}

mod new {
    use pgl::{Oid, Persistent};
    #[derive(Persistent, Clone, Copy)]
    #[pgl(id = 0x1ed5_a002)]
    #[repr(C)]
    pub struct Node {
        pub key: u64,
        pub next: Oid<Node>,
        pub value: u32,
        pub _pad: u32,
    }
}

mod changed {
    use pgl::{Oid, Persistent};
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_a001)]
    #[repr(C)]
    pub struct Node {
        pub key: u64,
        pub next: Oid<Node>,
    }
}

/// `old::Node` as a stale program might define it: same type id, other fields
/// (and size).
mod stale {
    use pgl::{Oid, Persistent};
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_a001)]
    #[repr(C)]
    pub struct Node {
        pub next: Oid<Node>,
        pub key: u64,
        pub extra: u64,
    }
}

/// An `#[extendible]` old node whose extension group holds a field the conversion keeps.
mod grouped {
    use pgl::{extendible, Oid, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_a011)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |old| u64::from(old.key()) * 3)]
        pub triple: u64,
    }
}

/// `grouped` with a second group: upgrading a `grouped` object to it changes only the
/// groups (the base already links group 1).
mod grouped2 {
    use pgl::{extendible, Oid, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_a011)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |old| u64::from(old.key()) * 3)]
        pub triple: u64,
        #[extension(2, init = |old| old.triple() + 1)]
        pub more: u64,
    }
}

fn path(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-leds-retain-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn manual_migration_rewrites_every_object_and_moves_the_root() {
    let p = path("manual");
    let pool = Pool::create(&p, &Config::small("retain")).unwrap();
    let root = pool.root::<old::Node>().unwrap();
    pool.tx(|tx| {
        let mut next = Oid::NULL;
        for key in (1..50).rev() {
            next = tx.alloc(old::Node {
                key,
                value: key * 2,
                next,
            })?;
        }
        let mut r = tx.open(root)?;
        r.next = next;
        r.value = 7;
        Ok(())
    })
    .unwrap();
    let written = pool.stats().bytes_written;
    let remap = pool
        .migrate::<old::Node, new::Node>(|o, remap| new::Node {
            key: u64::from(o.key) << 32,
            next: remap.oid(o.next),
            value: o.value,
            _pad: 0,
        })
        .unwrap();
    assert_eq!(remap.len(), 50);
    assert!(pool.stats().bytes_written > written);
    // The root the migration moved is the root from then on: not freeable.
    let moved = pool.root::<new::Node>().unwrap();
    let freed = pool.tx(|tx| tx.free(moved));
    assert!(
        matches!(freed, Err(pgl::Error::RootNotFreeable { .. })),
        "{freed:?}"
    );
    drop(pool);

    let pool = Pool::open(&p, "retain").unwrap();
    let root = pool.root::<new::Node>().unwrap();
    assert_eq!(pool.get(root).unwrap().value, 7);
    let mut cur = pool.get(root).unwrap().next;
    let mut key = 1u64;
    while !cur.is_null() {
        let n = pool.get(cur).unwrap();
        assert_eq!((n.key, n.value), (key << 32, key as u32 * 2));
        cur = n.next;
        key += 1;
    }
    assert_eq!(key, 50);
    assert!(pool
        .objects()
        .unwrap()
        .iter()
        .all(|(_, h)| h.type_id == <new::Node as Persistent>::TYPE_ID));
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_migration_many_times_larger_than_a_lane_runs_in_batches() {
    let p = path("batches");
    let mut cfg = Config::small("retain");
    cfg.lane_size = 16 << 10; // a small lane: about 200 new objects' worth of record
    let pool = Pool::create(&p, &cfg).unwrap();
    let root = pool.root::<old::Node>().unwrap();
    const N: u32 = 2000;
    for lo in (1..N).step_by(40).rev() {
        pool.tx(|tx| {
            let mut next = tx.get(root)?.next;
            for key in (lo..(lo + 40).min(N)).rev() {
                next = tx.alloc(old::Node {
                    key,
                    value: key * 3,
                    next,
                })?;
            }
            tx.open(root)?.next = next;
            Ok(())
        })
        .unwrap();
    }
    let commits = pool.stats().commits;
    // No cap on the batches: each that is too large for the lane is split until it fits.
    let remap = pool
        .migration()
        .batch(usize::MAX)
        .convert(|o: &old::Node, r| new::Node {
            key: u64::from(o.key),
            next: r.oid(o.next),
            value: o.value,
            _pad: 0,
        })
        .run()
        .unwrap();
    assert_eq!(remap.len(), N as usize, "every node and the root");
    // The lane holds about 200 new objects' worth of record: at least ten batches.
    assert!(
        pool.stats().commits - commits >= 10,
        "{} commits",
        pool.stats().commits - commits
    );
    drop(pool);

    let pool = Pool::open(&p, "retain").unwrap();
    let root = pool.root::<new::Node>().unwrap();
    let mut cur = pool.get(root).unwrap().next;
    let mut key = 1u64;
    while !cur.is_null() {
        let n = pool.get(cur).unwrap();
        assert_eq!((n.key, n.value), (key, key as u32 * 3));
        cur = n.next;
        key += 1;
    }
    assert_eq!(key, u64::from(N));
    let objects = pool.objects().unwrap();
    assert_eq!(
        objects.len(),
        N as usize,
        "no old node, no journal page left"
    );
    assert!(objects
        .iter()
        .all(|(_, h)| h.type_id == <new::Node as Persistent>::TYPE_ID));
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn migrating_to_the_same_type_id_is_refused_and_changes_nothing() {
    let p = path("same");
    let pool = Pool::create(&p, &Config::small("retain")).unwrap();
    pool.root::<old::Node>().unwrap();
    let e = pool.migrate::<old::Node, old::Node>(|o, _| *o).unwrap_err();
    assert!(e.to_string().contains("type id"), "{e}");
    assert_eq!(pool.objects().unwrap().len(), 1);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn converting_one_old_type_twice_is_refused_and_changes_nothing() {
    let p = path("twice");
    let pool = Pool::create(&p, &Config::small("retain")).unwrap();
    pool.root::<old::Node>().unwrap();
    let convert = |o: &old::Node, remap: &pgl::Remap| new::Node {
        key: u64::from(o.key),
        next: remap.oid(o.next),
        value: o.value,
        _pad: 0,
    };
    let e = pool
        .migration()
        .convert(convert)
        .convert(convert)
        .run()
        .unwrap_err();
    assert!(e.to_string().contains("already converts"), "{e}");
    assert!(pool
        .objects()
        .unwrap()
        .iter()
        .all(|(_, h)| h.type_id == <old::Node as Persistent>::TYPE_ID));
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_migration_chaining_types_is_refused() {
    // old -> new, then new -> changed: the new objects would be converted again.
    let p = path("chain");
    let pool = Pool::create(&p, &Config::small("retain")).unwrap();
    pool.root::<old::Node>().unwrap();
    let e = pool
        .migration()
        .convert(|o: &old::Node, r| new::Node {
            key: u64::from(o.key),
            next: r.oid(o.next),
            value: o.value,
            _pad: 0,
        })
        .convert(|n: &new::Node, r| changed::Node {
            key: n.key,
            next: r.oid(n.next),
        })
        .run()
        .unwrap_err();
    assert!(e.to_string().contains("produces objects"), "{e}");
    assert_eq!(pool.objects().unwrap().len(), 1);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// A pool whose root is an old node heading a list of `n` more (keys 1 to n).
fn old_list(p: &std::path::Path, cfg: &Config, n: u32) -> Pool {
    let pool = Pool::create(p, cfg).unwrap();
    let root = pool.root::<old::Node>().unwrap();
    pool.tx(|tx| {
        let mut next = Oid::NULL;
        for key in (1..=n).rev() {
            next = tx.alloc(old::Node {
                key,
                value: key * 2,
                next,
            })?;
        }
        tx.open(root)?.next = next;
        Ok(())
    })
    .unwrap();
    pool
}

fn to_new(o: &old::Node, r: &pgl::Remap) -> new::Node {
    new::Node {
        key: u64::from(o.key),
        next: r.oid(o.next),
        value: o.value,
        _pad: 0,
    }
}

#[test]
fn a_migration_that_fills_the_pool_fails_with_pool_full_and_leaves_the_pool_as_it_was() {
    let p = path("full");
    const N: u32 = 1000;
    let pool = old_list(&p, &Config::small("retain"), N);
    // Room for the journal's pages, kept while the rest of the pool is filled.
    let room = pool
        .tx(|tx| {
            (0..8)
                .map(|_| tx.alloc([0u64; 512]))
                .collect::<pgl::Result<Vec<_>>>()
        })
        .unwrap();
    // Filler of the new nodes' size until the pool is full, then room for half of them.
    let mut filler = Vec::new();
    while let Ok(v) = pool.tx(|tx| {
        (0..64)
            .map(|_| tx.alloc([7u64; 3]))
            .collect::<pgl::Result<Vec<_>>>()
    }) {
        filler.extend(v);
    }
    pool.tx(|tx| {
        for &o in &filler[..N as usize / 2] {
            tx.free(o)?;
        }
        room.iter().try_for_each(|&o| tx.free(o))
    })
    .unwrap();
    // Not switched: the new objects made so far and the journal are freed again, so the
    // space is the program's once more (a pending migration would hold it until the
    // next run, which would fill the pool again).
    let e =
        fails_leaving_the_pool_as_it_was(&pool, |p| p.migration().batch(100).convert(to_new).run());
    assert!(matches!(e, pgl::Error::PoolFull { .. }), "{e}");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// Flips 3 bits at `offset`: one injected fault.
fn damage(pool: &Pool, offset: u64) {
    pool.inject(&pgl::Fault::BitFlips {
        offset,
        bits: 3,
        seed: 5,
    })
    .unwrap();
}

/// Runs `migrate`, which must fail, and checks that it left the pool as it was: no pending
/// migration, the same objects. Returns the error.
fn fails_leaving_the_pool_as_it_was(
    pool: &Pool,
    migrate: impl FnOnce(&Pool) -> pgl::Result<pgl::Remap>,
) -> pgl::Error {
    let before = pool.objects().unwrap();
    let e = match migrate(pool) {
        Ok(remap) => panic!("the migration succeeded: {remap:?}"),
        Err(e) => e,
    };
    assert_eq!(pool.pending_migration().unwrap(), None);
    assert_eq!(pool.objects().unwrap(), before);
    e
}

/// The 30th node of an `old_list` pool, and its value field's pool offset.
fn node_30(pool: &Pool) -> (Oid<old::Node>, u64) {
    let mut cur = pool.get(pool.root::<old::Node>().unwrap()).unwrap().next;
    for _ in 1..30 {
        cur = pool.get(cur).unwrap().next;
    }
    (cur, cur.raw() + 4)
}

#[test]
fn a_migration_converts_a_damaged_old_object_as_parity_rebuilds_it() {
    // The default verify policy does not check reads; a migration reads every old object
    // once and writes it anew with a fresh checksum, so it checks them all, or damage
    // would come out of it with a valid checksum, beyond detection and repair.
    let p = path("damaged");
    let pool = old_list(&p, &Config::small("retain"), 50);
    let (_, value) = node_30(&pool);
    damage(&pool, value);
    pool.migrate(to_new).unwrap();
    let mut cur = pool.get(pool.root::<new::Node>().unwrap()).unwrap().next;
    while !cur.is_null() {
        let n = pool.get(cur).unwrap();
        assert_eq!(u64::from(n.value), n.key * 2, "node {}", n.key);
        cur = n.next;
    }
    assert_eq!(pool.stats().objects_repaired, 1);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_damaged_old_object_beyond_repair_fails_the_migration_and_leaves_the_pool_as_it_was() {
    let p = path("beyond");
    let pool = old_list(&p, &Config::small("retain").parity(false), 50);
    let (node, value) = node_30(&pool);
    damage(&pool, value);
    // Every new object is allocated before the conversions find the damage.
    let e =
        fails_leaving_the_pool_as_it_was(&pool, |p| p.migration().batch(10).convert(to_new).run());
    assert!(
        matches!(e, pgl::Error::ChecksumMismatch { offset, .. } if offset == node.raw()),
        "{e}"
    );
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// A pool whose root slot 0 holds the first of `n` `grouped` nodes (keys 1 to n), each
/// with its extension group, `triple` = 3 * key.
fn grouped_list(p: &std::path::Path, cfg: &Config, n: u32) -> Pool {
    let pool = Pool::create(p, cfg).unwrap();
    let root = pool.root::<[u64; 4]>().unwrap();
    pool.tx(|tx| {
        let mut next = Oid::NULL;
        for key in (1..=n).rev() {
            next = tx.alloc_ext(grouped::NodeData {
                key,
                value: key * 2,
                next,
                triple: u64::from(key) * 3,
            })?;
        }
        tx.open(root)?[0] = next.raw();
        Ok(())
    })
    .unwrap();
    pool
}

/// The extension group of the 30th node of a `grouped_list` pool (its payload starts
/// with `triple`).
fn group_30(pool: &Pool) -> u64 {
    let mut cur: Oid<grouped::Node> =
        Oid::from_raw(pool.get(pool.root::<[u64; 4]>().unwrap()).unwrap()[0]);
    for _ in 1..30 {
        cur = pool.get(cur).unwrap().next;
    }
    // The base's last 8 bytes link its group 1.
    let (_, bytes) = pool.read_object(cur.raw()).unwrap();
    u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().unwrap())
}

fn flatten(o: &pgl::Ext<'_, grouped::Node>, r: &pgl::Remap) -> new::Node {
    use grouped::NodeExtFields as _;
    new::Node {
        key: u64::from(o.key),
        next: r.oid(o.next),
        value: *o.triple() as u32,
        _pad: 0,
    }
}

/// Runs `during` on another thread while a migration of `pool`'s grouped nodes into
/// `new::Node` (one object a batch) stands between its first and second batch; returns
/// what `during` returned once the migration is over.
fn while_migrating<R: Send>(pool: &Pool, during: impl FnOnce(&Pool) -> R + Send) -> R {
    use std::sync::mpsc;
    let (to_writer, go) = mpsc::channel::<()>();
    let (done, from_writer) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let writer = s.spawn(move || {
            go.recv().unwrap();
            let r = during(pool);
            done.send(()).unwrap();
            r
        });
        let mut to_writer = Some(to_writer);
        pool.migration()
            .batch(1)
            .convert_ext(|o, r| {
                if let Some(tx) = to_writer.take() {
                    tx.send(()).unwrap();
                    from_writer
                        .recv_timeout(std::time::Duration::from_secs(10))
                        .unwrap();
                }
                flatten(o, r)
            })
            .run()
            .unwrap();
        writer.join().unwrap()
    })
}

#[test]
fn convert_ext_converts_a_damaged_extension_group_as_parity_rebuilds_it() {
    // As for a base: a group copied as it is would come out of the migration with a fresh,
    // valid checksum. One fault injected (3 bits of one group); repaired: 1.
    let p = path("group-damaged");
    let pool = grouped_list(&p, &Config::small("retain"), 50);
    damage(&pool, group_30(&pool));
    let remap = pool.migration().convert_ext(flatten).run().unwrap();
    assert_eq!(remap.len(), 50);
    // The root is no node: its oid of the first one is the caller's to remap.
    let root = pool.root::<[u64; 4]>().unwrap();
    let first: Oid<grouped::Node> = Oid::from_raw(pool.get(root).unwrap()[0]);
    let mut cur: Oid<new::Node> = remap.oid(first);
    let mut key = 0;
    while !cur.is_null() {
        let n = pool.get(cur).unwrap();
        key += 1;
        assert_eq!((n.key, u64::from(n.value)), (key, key * 3), "node {key}");
        cur = n.next;
    }
    assert_eq!(key, 50);
    assert_eq!(pool.stats().objects_repaired, 1);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn convert_ext_with_a_damaged_group_beyond_repair_fails_and_leaves_the_pool_as_it_was() {
    // One fault injected (3 bits of one group, no parity to rebuild it): reported.
    let p = path("group-beyond");
    let pool = grouped_list(&p, &Config::small("retain").parity(false), 50);
    let group = group_30(&pool);
    damage(&pool, group);
    let e = fails_leaving_the_pool_as_it_was(&pool, |p| {
        p.migration().batch(10).convert_ext(flatten).run()
    });
    assert!(
        matches!(e, pgl::Error::ChecksumMismatch { offset, .. } if offset == group),
        "{e}"
    );
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn another_thread_cannot_change_create_or_free_old_objects_while_they_are_migrated() {
    // A change committed to an old object after its conversion would be lost at the
    // switch: while a migration runs, the transactions of other threads that would
    // change, free or create an object of a type it converts are refused.
    use std::sync::mpsc;
    let p = path("concurrent");
    let pool = old_list(&p, &Config::small("retain"), 50);
    let mut oids = std::collections::HashMap::new();
    let mut cur = pool.root::<old::Node>().unwrap();
    while !cur.is_null() {
        let n = pool.get(cur).unwrap();
        oids.insert(n.key, cur);
        cur = n.next;
    }
    let (to_writer, from_migration) = mpsc::channel::<Vec<Oid<old::Node>>>();
    let (to_migration, from_writer) = mpsc::channel::<()>();
    let results = std::thread::scope(|s| {
        let pool = &pool;
        let writer = s.spawn(move || {
            // Objects the migration has converted (and committed) by now.
            let converted = from_migration.recv().unwrap();
            let change = pool.tx(|tx| {
                for &o in &converted {
                    tx.open(o)?.value += 1000;
                }
                Ok(())
            });
            let free = pool.tx(|tx| tx.free(converted[0]));
            let create = pool.tx(|tx| {
                tx.alloc(old::Node {
                    key: 99,
                    value: 0,
                    next: Oid::NULL,
                })
            });
            to_migration.send(()).unwrap();
            (change, free, create)
        });
        // One object a transaction; halfway, the writer has its go.
        let mut seen = std::collections::BTreeSet::new();
        let mut to_writer = Some(to_writer);
        let remap = pool
            .migration()
            .batch(1)
            .convert(|o: &old::Node, r| {
                if seen.len() == 25 && !seen.contains(&o.key) {
                    if let Some(tx) = to_writer.take() {
                        tx.send(seen.iter().map(|k| oids[k]).collect()).unwrap();
                        from_writer
                            .recv_timeout(std::time::Duration::from_secs(10))
                            .unwrap();
                    }
                }
                seen.insert(o.key);
                to_new(o, r)
            })
            .run()
            .unwrap();
        assert_eq!(remap.len(), 51);
        writer.join().unwrap()
    });
    let (change, free, create) = results;
    for (what, r) in [
        ("change", change.map(drop)),
        ("free", free.map(drop)),
        ("create", create.map(drop)),
    ] {
        match r {
            Err(e @ pgl::Error::Migrating { .. }) => {
                assert!(e.to_string().contains(what), "{e}");
                assert!(e.to_string().contains("Manual migration"), "{e}");
            }
            other => panic!("{what} during the migration: {other:?}"),
        }
    }
    // Nothing was lost: every node as it was before, converted.
    let mut cur = pool.get(pool.root::<new::Node>().unwrap()).unwrap().next;
    let mut key = 0;
    while !cur.is_null() {
        let n = pool.get(cur).unwrap();
        key += 1;
        assert_eq!((n.key, u64::from(n.value)), (key, key * 2), "node {key}");
        cur = n.next;
    }
    assert_eq!(key, 50);
    // Once it is over, old types are anyone's again.
    pool.tx(|tx| {
        tx.alloc(old::Node {
            key: 99,
            value: 0,
            next: Oid::NULL,
        })
    })
    .unwrap();
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_stale_definition_of_the_old_type_is_refused_and_changes_nothing() {
    let p = path("stale");
    let pool = old_list(&p, &Config::small("retain"), 50);
    let before = pool.objects().unwrap();
    // Same type id as the stored nodes, another layout: it would list no object of
    // its size in the heap and convert nothing.
    let e = pool
        .migration()
        .convert(|o: &stale::Node, r| new::Node {
            key: o.key,
            next: r.oid(o.next),
            value: 0,
            _pad: 0,
        })
        .run()
        .unwrap_err();
    assert!(matches!(e, pgl::Error::LayoutMismatch { .. }), "{e}");
    assert_eq!(pool.pending_migration().unwrap(), None);
    assert_eq!(pool.objects().unwrap(), before);
    // The right definition migrates it.
    assert_eq!(pool.migrate(to_new).unwrap().len(), 51);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn reset_on_mismatch_discards_a_pool_whose_types_changed() {
    let p = path("reset");
    let cfg = Config::small("retain");
    let (pool, reset) = Pool::open_or_reset(&p, &cfg, &[type_key::<old::Node>()]).unwrap();
    assert!(!reset, "a new pool is created, not reset");
    pool.tx(|tx| {
        tx.alloc(old::Node {
            key: 1,
            value: 2,
            next: Oid::NULL,
        })
        .map(drop)
    })
    .unwrap();
    drop(pool);
    let (pool, reset) = Pool::open_or_reset(&p, &cfg, &[type_key::<old::Node>()]).unwrap();
    assert!(!reset, "same layout: kept");
    assert_eq!(pool.objects().unwrap().len(), 1);
    drop(pool);
    let (pool, reset) = Pool::open_or_reset(&p, &cfg, &[type_key::<changed::Node>()]).unwrap();
    assert!(reset, "changed layout: reset");
    assert_eq!(pool.objects().unwrap().len(), 0);
    assert!(pool.types().unwrap().is_empty());
    drop(pool);
    let pool = Pool::reset(&p, &cfg).unwrap();
    assert_eq!(pool.objects().unwrap().len(), 0);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn another_thread_cannot_add_a_group_to_an_old_object_while_it_is_migrated() {
    // The upgrade to `grouped2` relinks group 1 and leaves the base's bytes as they are:
    // it is refused all the same (the migration would free the new group unread).
    let p = path("upgrade-during");
    let pool = grouped_list(&p, &Config::small("retain"), 20);
    let root = pool.root::<[u64; 4]>().unwrap();
    let first: Oid<grouped::Node> = Oid::from_raw(pool.get(root).unwrap()[0]);
    let upgrade = while_migrating(&pool, |pool| {
        pool.tx(|tx| tx.upgrade(first.cast::<grouped2::Node>()))
    });
    match upgrade {
        Err(e @ pgl::Error::Migrating { .. }) => assert!(e.to_string().contains("change"), "{e}"),
        other => panic!("an upgrade during the migration: {other:?}"),
    }
    assert_eq!(pool.stats().upgrades, 0);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_chain_refused_during_a_migration_leaves_no_group_behind() {
    // `alloc_ext` and `copy_ext` allocate an object's groups before its base, which a
    // migration of its type on another thread refuses (`Error::Migrating`). A program
    // that takes that error in stride (to try again once the migration is over) and
    // commits must not leave the groups allocated, owned by no base.
    let p = path("chain-during");
    let pool = grouped_list(&p, &Config::small("retain"), 20);
    let root = pool.root::<[u64; 4]>().unwrap();
    let first: Oid<grouped::Node> = Oid::from_raw(pool.get(root).unwrap()[0]);
    let group_id = pgl::type_keys::<grouped::Node>()[1].0;
    let (alloc, copy) = while_migrating(&pool, |pool| {
        let refused = |r: pgl::Result<Oid<grouped::Node>>| {
            assert!(matches!(r, Err(pgl::Error::Migrating { .. })), "{r:?}");
        };
        let alloc = pool.tx(|tx| {
            refused(tx.alloc_ext(grouped::NodeData {
                key: 99,
                value: 0,
                next: Oid::NULL,
                triple: 1,
            }));
            Ok(())
        });
        let copy = pool.tx(|tx| {
            refused(tx.copy_ext(first));
            Ok(())
        });
        (alloc, copy)
    });
    let left = pool
        .objects()
        .unwrap()
        .iter()
        .filter(|(_, h)| h.type_id == group_id || h.type_id == grouped::Node::TYPE_ID)
        .count();
    assert_eq!(
        left, 0,
        "the migration freed every old node with its group, and the refused chains left \
         none (alloc_ext: {alloc:?}, copy_ext: {copy:?})"
    );
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}
