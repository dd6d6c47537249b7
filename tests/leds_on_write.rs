//! `#[extendible(upgrade = on_write)]`: an object that lacks extension groups is read
//! through a view of it upgraded in DRAM (the inits run on every such read) and is
//! upgraded in the pool only when it is written through `tx.ext_mut` (or by `tx.upgrade`,
//! `pool.upgrade_all`). Reads write nothing, lock nothing for update, and show the same
//! values the upgrade would store.

mod support;

use pgl::{Config, Error, Oid, Persistent, Pool};
use std::sync::Arc;

/// The program that stored the nodes: 32-bit keys, 24 bytes of reserve.
mod v0 {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 24)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_0e10)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
    }
}

/// Group 1 widens the key (upgraded when read, the default).
mod v1 {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 24)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_0e10)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()) + (1 << 40))]
        pub key64: u64,
    }
}

/// `v1` upgraded when written.
mod v1w {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 24, upgrade = on_write)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_0e10)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()) + (1 << 40))]
        pub key64: u64,
    }
}

/// Group 2 (also in the reserve) is made from group 1, upgraded when written.
mod v2w {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 24, upgrade = on_write)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_0e10)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()) + (1 << 40))]
        pub key64: u64,
        #[extension(2, init = |old| (old.key() * 2) as u32)]
        pub twice: u32,
    }
}

/// `v1w` with group 1 changed (same size, other fields): a pool whose objects carry
/// `v1`'s group 1 has another layout for it.
mod v1w_changed {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 24, upgrade = on_write)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_0e10)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, init = |old| [old.key(), 7])]
        pub pair: [u32; 2],
    }
}

/// A node larger than the views' inline image storage (128 bytes), as stored...
mod big0 {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 16)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_0e11)]
    #[repr(C)]
    pub struct Big {
        pub words: [u64; 24],
    }
}

/// ... and with a group made from its first and last words, upgraded when written.
mod big1w {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 16, upgrade = on_write)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_0e11)]
    #[repr(C)]
    pub struct Big {
        pub words: [u64; 24],
        #[extension(1, init = |old| old.words()[0] ^ old.words()[23])]
        pub ends: u64,
    }
}

use big1w::BigExtFields as _;
use v1::NodeExtFields as _;
use v1w::NodeExtFields as _;
use v1w_changed::NodeExtFields as _;
use v2w::NodeExtFields as _;

const NAME: &str = "on-write";

fn pool(name: &str) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-on-write-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (Pool::create(&path, &Config::small(NAME)).unwrap(), path)
}

fn v0_nodes(pool: &Pool, n: u32) -> Vec<Oid<v0::Node>> {
    pool.tx(|tx| {
        (0..n)
            .map(|k| {
                tx.alloc_ext(v0::NodeData {
                    key: k,
                    value: k * 3,
                })
            })
            .collect()
    })
    .unwrap()
}

fn cast<A: Persistent, B: Persistent>(oids: &[Oid<A>]) -> Vec<Oid<B>> {
    oids.iter().map(|o| Oid::from_raw(o.raw())).collect()
}

/// Everything a commit writes to media, in place and to redo records.
fn nvmm_bytes(pool: &Pool) -> u64 {
    let s = pool.stats();
    s.bytes_written + s.bytes_logged
}

fn key1(k: u32) -> u64 {
    u64::from(k) + (1 << 40)
}

#[test]
fn a_read_shows_the_new_fields_and_writes_nothing() {
    let (pool, path) = pool("read");
    let nodes = cast::<_, v2w::Node>(&v0_nodes(&pool, 16));
    let (bytes, before) = (nvmm_bytes(&pool), pool.stats());
    for _ in 0..3 {
        pool.tx(|tx| {
            for (k, &n) in nodes.iter().enumerate() {
                let k = k as u32;
                let (key, twice, value) = tx.ext_with(n, |e| (*e.key(), *e.twice(), e.value))?;
                assert_eq!((key, twice, value), (key1(k), (key1(k) * 2) as u32, k * 3));
                let e = tx.ext(n)?;
                assert_eq!(
                    (*e.key(), *e.twice()),
                    (key, twice),
                    "ext shows what ext_with does"
                );
                assert_eq!(tx.groups_present(n)?, 0, "not upgraded in the pool");
            }
            Ok(())
        })
        .unwrap();
    }
    let after = pool.stats();
    assert_eq!(
        nvmm_bytes(&pool),
        bytes,
        "the reads wrote nothing, not even the groups' layouts (nothing stores them)"
    );
    assert_eq!(
        after.fences, before.fences,
        "no ordering point: read-only transactions"
    );
    assert_eq!(after.upgrades, before.upgrades);
    assert_eq!(pool.objects().unwrap().len(), 16, "no object was allocated");
    drop(pool);
    let pool = Pool::open(&path, NAME).unwrap();
    pool.tx(|tx| {
        for &n in &nodes {
            assert_eq!(tx.groups_present(n)?, 0);
        }
        Ok(())
    })
    .unwrap();
    drop(pool);
    // A pool opened read-only shows them too (one upgraded when read could not).
    let pool = Pool::open_read_only(&path).unwrap();
    let keys = pool
        .tx(|tx| {
            nodes
                .iter()
                .map(|&n| tx.ext_with(n, |e| *e.key()))
                .collect::<pgl::Result<Vec<_>>>()
        })
        .unwrap();
    assert_eq!(keys, (0..16).map(key1).collect::<Vec<_>>());
    let on_read = Oid::<v1::Node>::from_raw(nodes[0].raw());
    let r = pool.tx(|tx| tx.ext_with(on_read, |e| *e.key()));
    assert!(
        matches!(r, Err(Error::ReadOnly { .. })),
        "an upgrade on read needs a writable pool: {r:?}"
    );
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_write_through_ext_mut_upgrades_the_object_in_the_pool() {
    let (pool, path) = pool("write");
    let nodes = cast::<_, v2w::Node>(&v0_nodes(&pool, 4));
    let upgrades = pool.stats().upgrades;
    pool.tx(|tx| {
        let mut m = tx.ext_mut(nodes[1])?;
        assert_eq!(*m.key(), key1(1), "the init ran before the write");
        m.set_twice(77);
        Ok(())
    })
    .unwrap();
    // A base write through `open` changes the base alone: the object still lacks its
    // groups.
    pool.tx(|tx| {
        tx.open(nodes[2])?.value = 50;
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.stats().upgrades - upgrades, 1);
    // `tx.upgrade` upgrades in the pool too.
    assert!(pool.tx(|tx| tx.upgrade(nodes[3])).unwrap());
    drop(pool);
    let pool = Pool::open(&path, NAME).unwrap();
    pool.tx(|tx| {
        let present: Vec<usize> = nodes
            .iter()
            .map(|&n| tx.groups_present(n))
            .collect::<pgl::Result<_>>()?;
        assert_eq!(present, [0, 2, 0, 2]);
        assert_eq!(
            tx.ext_with(nodes[1], |e| (*e.key(), *e.twice()))?,
            (key1(1), 77)
        );
        assert_eq!(
            tx.ext_with(nodes[2], |e| (*e.key(), *e.twice(), e.value))?,
            (key1(2), (key1(2) * 2) as u32, 50)
        );
        assert_eq!(tx.ext_with(nodes[3], |e| *e.twice())?, (key1(3) * 2) as u32);
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.objects().unwrap().len(), 4, "the groups are inline");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn groups_the_pool_holds_are_read_from_it_and_the_missing_ones_made_from_them() {
    let (pool, path) = pool("partial");
    let nodes = v0_nodes(&pool, 2);
    // v1 (upgraded when read) stores group 1, and a key its init would not give.
    let n1 = Oid::<v1::Node>::from_raw(nodes[0].raw());
    pool.tx(|tx| {
        tx.ext_mut(n1)?.set_key64(1000);
        Ok(())
    })
    .unwrap();
    let w = cast::<_, v2w::Node>(&nodes);
    pool.tx(|tx| {
        assert_eq!(tx.groups_present(w[0])?, 1);
        assert_eq!(tx.ext_with(w[0], |e| (*e.key(), *e.twice()))?, (1000, 2000));
        assert_eq!(tx.groups_present(w[0])?, 1, "group 2 only in DRAM");
        Ok(())
    })
    .unwrap();
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_view_made_in_dram_keeps_the_object_from_being_changed_under_it() {
    let (pool, path) = pool("borrow");
    let nodes = cast::<_, v1w::Node>(&v0_nodes(&pool, 2));
    pool.tx(|tx| {
        let view = tx.ext(nodes[0])?;
        assert!(
            matches!(tx.open(nodes[0]), Err(Error::AlreadyBorrowed { .. })),
            "the view shows the object: a copy opened for update would diverge from it"
        );
        assert!(matches!(
            tx.ext_mut(nodes[0]),
            Err(Error::AlreadyBorrowed { .. })
        ));
        assert!(matches!(
            tx.free(nodes[0]),
            Err(Error::AlreadyBorrowed { .. })
        ));
        assert_eq!(*view.key(), key1(0));
        drop(view);
        tx.ext_with(nodes[1], |e| {
            assert!(matches!(
                tx.open(nodes[1]),
                Err(Error::AlreadyBorrowed { .. })
            ));
            assert_eq!(*e.key(), key1(1));
        })?;
        // Dropped: both open for update now, and upgraded by `ext_mut`.
        tx.ext_mut(nodes[0])?.set_key64(5);
        tx.open(nodes[1])?.value = 9;
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        assert_eq!(
            (tx.groups_present(nodes[0])?, tx.groups_present(nodes[1])?),
            (1, 0)
        );
        assert_eq!(*tx.ext(nodes[0])?.key(), 5);
        assert_eq!(
            tx.ext_with(nodes[1], |e| (*e.key(), e.value))?,
            (key1(1), 9)
        );
        Ok(())
    })
    .unwrap();
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_group_the_pool_stores_with_another_layout_is_reported_whether_the_object_has_it_or_not() {
    // Node 0 carries group 1 as `v1` lays it out; node 1 carries no group. A build whose
    // group 1 differs reads neither: not node 0's group through its own layout, and not
    // node 1 through its own group 1 while the pool says otherwise (an upgrade on read,
    // or a write, would be refused the same way).
    let (pool, path) = pool("mismatch");
    let nodes = v0_nodes(&pool, 2);
    let n0 = Oid::<v1::Node>::from_raw(nodes[0].raw());
    pool.tx(|tx| tx.upgrade(n0).map(drop)).unwrap();
    for (k, &n) in nodes.iter().enumerate() {
        let c = Oid::<v1w_changed::Node>::from_raw(n.raw());
        for r in [
            pool.tx(|tx| tx.ext_with(c, |e| *e.pair())),
            pool.tx(|tx| tx.ext(c).map(|e| *e.pair())),
        ] {
            assert!(
                matches!(r, Err(Error::LayoutMismatch { group: Some(1), .. })),
                "node {k}: {r:?}"
            );
        }
    }
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// A transaction checks a group's layout once for all its views (it reads many objects of
/// one type): what it remembers is that layout, not the group's id, so a view of the same
/// group in another layout, later in the same transaction, is still checked and refused.
#[test]
fn a_view_after_one_of_the_same_group_in_another_layout_is_still_checked() {
    let (pool, path) = pool("view-memo");
    let nodes = v0_nodes(&pool, 3);
    // The pool stores group 1 as `v1` (and `v1w`) lay it out.
    pool.tx(|tx| {
        tx.upgrade(Oid::<v1::Node>::from_raw(nodes[0].raw()))
            .map(drop)
    })
    .unwrap();
    let w = Oid::<v1w::Node>::from_raw(nodes[1].raw());
    let c = Oid::<v1w_changed::Node>::from_raw(nodes[2].raw());
    let (before, changed, after) = pool
        .tx(|tx| {
            Ok((
                tx.ext_with(w, |e| *e.key()),
                tx.ext_with(c, |e| *e.pair()),
                tx.ext_with(w, |e| *e.key()),
            ))
        })
        .unwrap();
    assert_eq!(before.unwrap(), key1(1));
    assert!(
        matches!(changed, Err(Error::LayoutMismatch { group: Some(1), .. })),
        "{changed:?}"
    );
    assert_eq!(after.unwrap(), key1(1));
    // Nothing was upgraded in the pool by the views.
    let present = pool.tx(|tx| tx.groups_present(w)).unwrap();
    assert_eq!(present, 0);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// What a transaction remembers of a view's check is dated by the registrations committed
/// when it checked: another thread that stores the group in another layout meanwhile
/// makes the transaction's next view look again, and refuse.
#[test]
fn a_view_after_another_transaction_registers_the_group_in_another_layout_is_refused() {
    let (pool, path) = pool("view-memo-registration");
    let nodes = v0_nodes(&pool, 3);
    let pool = Arc::new(pool);
    let both = Arc::new(std::sync::Barrier::new(2));
    let other = {
        let (pool, both) = (Arc::clone(&pool), Arc::clone(&both));
        let n1 = Oid::<v1w_changed::Node>::from_raw(nodes[1].raw());
        std::thread::spawn(move || {
            both.wait();
            // Stores group 1 as `v1w_changed` lays it out: registered, committed.
            pool.tx(|tx| tx.upgrade(n1)).unwrap();
            both.wait();
        })
    };
    let w = |k: usize| Oid::<v1w::Node>::from_raw(nodes[k].raw());
    let (first, second) = pool
        .tx(|tx| {
            // The pool has never stored group 1: the view's check finds it missing.
            let first = tx.ext_with(w(0), |e| *e.key());
            both.wait();
            both.wait();
            Ok((first, tx.ext_with(w(2), |e| *e.key())))
        })
        .unwrap();
    other.join().unwrap();
    assert_eq!(first.unwrap(), key1(0));
    assert!(
        matches!(second, Err(Error::LayoutMismatch { group: Some(1), .. })),
        "{second:?}"
    );
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// Views returned by `tx.ext` own their copy; a thread keeps the last one freed for the
/// next view. Views of objects of other sizes in turn, small and larger than that copy's
/// inline storage, each show their own object's values.
#[test]
fn views_of_objects_of_other_sizes_in_turn_show_each_its_own_values() {
    let (pool, path) = pool("view-sizes");
    let nodes = cast::<_, v1w::Node>(&v0_nodes(&pool, 3));
    let bigs: Vec<Oid<big1w::Big>> = pool
        .tx(|tx| {
            (0..3u64)
                .map(|k| {
                    let words = core::array::from_fn(|i| k * 100 + i as u64);
                    tx.alloc_ext(big0::BigData { words })
                        .map(|o| Oid::from_raw(o.raw()))
                })
                .collect()
        })
        .unwrap();
    for round in 0..3 {
        pool.tx(|tx| {
            for k in 0..3 {
                let n = tx.ext(nodes[k])?;
                assert_eq!(*n.key(), key1(k as u32), "round {round}, node {k}");
                drop(n);
                let b = tx.ext(bigs[k])?;
                let k = k as u64;
                assert_eq!(
                    *b.ends(),
                    (k * 100) ^ (k * 100 + 23),
                    "round {round}, big {k}"
                );
                assert_eq!(b.words[5], k * 100 + 5);
                // Two views alive at once: each its own copy.
                let n = tx.ext(nodes[(k as usize + 1) % 3])?;
                assert_eq!(*b.ends(), (k * 100) ^ (k * 100 + 23));
                assert_eq!(*n.key(), key1((k as u32 + 1) % 3));
            }
            Ok(())
        })
        .unwrap();
    }
    let present = pool
        .tx(|tx| {
            bigs.iter()
                .map(|&b| tx.groups_present(b))
                .sum::<pgl::Result<usize>>()
        })
        .unwrap();
    assert_eq!(present, 0, "nothing upgraded in the pool");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn concurrent_readers_of_an_old_object_neither_upgrade_it_nor_conflict() {
    let (pool, path) = pool("threads");
    let nodes = cast::<_, v2w::Node>(&v0_nodes(&pool, 8));
    let pool = Arc::new(pool);
    let before = pool.stats();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (pool, nodes) = (Arc::clone(&pool), nodes.clone());
            std::thread::spawn(move || {
                for round in 0..2_000 {
                    let n = nodes[round % nodes.len()];
                    let k = (round % nodes.len()) as u32;
                    let twice = pool.tx(|tx| tx.ext_with(n, |e| *e.twice())).unwrap();
                    assert_eq!(twice, (key1(k) * 2) as u32);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let after = pool.stats();
    assert_eq!(after.upgrades, before.upgrades);
    assert_eq!(after.fences, before.fences);
    assert_eq!(
        after.retries, before.retries,
        "readers take no write lock: none turns another away"
    );
    let pool = Arc::into_inner(pool).unwrap();
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
