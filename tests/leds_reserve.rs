//! `#[extendible(reserve = N)]`: extension groups that fit in an object's reserve are
//! kept inline (no object of their own), the others in separate objects as without a
//! reserve. Three versions of one struct in one process, as three builds would be: v0
//! (base only), v1 (widens the key: fits the 16-byte reserve), v2 (adds a 16-byte name:
//! does not fit after v1's group, so it is a separate object).

mod support;

use pgl::{Config, Error, Oid, PStr, Persistent, Pool};

mod v0 {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 16)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_7e50)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
    }

    /// A node value, for a Manual migration's converter.
    pub fn node(key: u32, value: u32) -> Node {
        Node {
            key,
            value,
            __pgl_ext: pgl::__private::ExtLink::NULL,
        }
    }
}

mod v1 {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 16)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_7e50)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()) + (1 << 40))]
        pub key64: u64,
    }
}

mod v2 {
    use pgl::{extendible, PStr, Persistent};

    #[extendible(reserve = 16)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_7e50)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()) + (1 << 40))]
        pub key64: u64,
        #[extension(2, init = |old| PStr::truncating(&format!("n{}", old.value())))]
        pub name: PStr<16>,
    }
}

/// The same base as `v0` without a reserve: another layout.
mod no_reserve {
    use pgl::{extendible, Persistent};

    #[extendible]
    #[derive(Persistent, Debug)]
    #[pgl(id = 0x5eed_7e50)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
    }
}

/// `v1` with group 1 changed (same size, other fields): a group is frozen once objects
/// carry it, inline or not.
mod v1_changed {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 16)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_7e50)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, init = |old| [old.key(), 7])]
        pub pair: [u32; 2],
    }
}

/// `v1` with group 1 grown past the reserve: this build would keep it in an object of its
/// own.
mod v1_grown {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 16)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_7e50)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()) + (1 << 40))]
        pub key64: u64,
        #[extension(1, init = 0)]
        pub extra: u64,
    }
}

/// `v1_changed` grown by `v2`'s group 2, whose init reads the changed group 1.
mod v2_changed {
    use pgl::{extendible, PStr, Persistent};

    #[extendible(reserve = 16)]
    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_7e50)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, init = |old| [old.key(), 7])]
        pub pair: [u32; 2],
        #[extension(2, init = |old| PStr::truncating(&format!("p{}", old.pair()[1])))]
        pub name: PStr<16>,
    }
}

/// A plain struct, what a Manual migration converts nodes from and to.
mod plain {
    use pgl::Persistent;

    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_7e51)]
    #[repr(C)]
    pub struct Pair {
        pub key: u64,
        pub value: u64,
    }

    #[derive(Persistent, Debug, Clone, Copy)]
    #[pgl(id = 0x5eed_7e52)]
    #[repr(C)]
    pub struct Wide {
        pub key: u64,
        pub value: u32,
        pub pad: u32,
    }
}

use v1::NodeExtFields as _;
use v2::NodeExtFields as _;

/// The pools' layout name.
const NAME: &str = "reserve";

fn pool(name: &str) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-reserve-{name}-{}", std::process::id()));
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

#[test]
fn a_group_that_fits_the_reserve_is_upgraded_in_place_without_an_object() {
    let (pool, path) = pool("inline");
    let nodes = cast::<_, v1::Node>(&v0_nodes(&pool, 20));
    assert_eq!(pool.objects().unwrap().len(), 20);
    let upgrades = pool.stats().upgrades;
    pool.tx(|tx| {
        for (k, &n) in nodes.iter().enumerate() {
            assert_eq!(tx.groups_present(n)?, 0);
            let e = tx.ext(n)?;
            assert_eq!(*e.key(), k as u64 + (1 << 40), "the init ran");
            assert_eq!(e.value, k as u32 * 3);
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.stats().upgrades - upgrades, 20);
    assert_eq!(
        pool.objects().unwrap().len(),
        20,
        "the groups live in the nodes' reserves: no object was allocated"
    );
    // Written through the view, durable, and read back after a reopen.
    pool.tx(|tx| {
        tx.ext_mut(nodes[3])?.set_key64(99);
        Ok(())
    })
    .unwrap();
    drop(pool);
    let pool = Pool::open(&path, NAME).unwrap();
    pool.tx(|tx| {
        assert_eq!(tx.groups_present(nodes[3])?, 1);
        assert_eq!(*tx.ext(nodes[3])?.key(), 99);
        assert_eq!(*tx.ext(nodes[4])?.key(), 4 + (1 << 40));
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.stats().upgrades, 0, "nothing left to upgrade");
    // Freeing a node frees just it: its group was part of it.
    pool.tx(|tx| tx.free(nodes[3])).unwrap();
    assert_eq!(pool.objects().unwrap().len(), 19);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn freeing_a_node_whose_link_lost_its_separate_group_frees_it_with_that_group_or_nothing() {
    // A v2 node keeps group 1 inline and group 2 in an object of its own: its link is
    // group 2's offset with an inline count of 1. Damage that clears the offset and leaves
    // a count (a stray write of zeros over the link's upper bytes, when the offset is a
    // multiple of 256) reads as a node whose groups are all inline. The free must check
    // the node's checksum before it trusts that link: with parity the node is repaired
    // and freed with its group; without, the free is refused and nothing is freed. Taken
    // at its word, the node would be freed and its group 2 left allocated, linked from
    // nothing, for good.
    for parity in [false, true] {
        let path = support::test_dir().join(format!(
            "pgl-reserve-lost-separate-{parity}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let cfg = Config::small(NAME).parity(parity);
        let nodes = {
            let pool = Pool::create(&path, &cfg).unwrap();
            let nodes = pool
                .tx(|tx| {
                    (0..2)
                        .map(|k| {
                            tx.alloc_ext(v2::NodeData {
                                value: k,
                                key64: u64::from(k),
                                name: PStr::truncating("sep"),
                            })
                        })
                        .collect::<pgl::Result<Vec<_>>>()
                })
                .unwrap();
            assert_eq!(
                pool.objects().unwrap().len(),
                4,
                "two nodes, a group 2 each"
            );
            nodes
        };
        let link_at = nodes[0].raw() + core::mem::size_of::<v2::Node>() as u64 - 8;
        support::file_write(&path, link_at, &1u64.to_le_bytes());
        let pool = Pool::open_with(&path, &cfg).unwrap();
        let r = pool.tx(|tx| tx.free(nodes[0]));
        if parity {
            r.unwrap();
            assert_eq!(
                pool.objects().unwrap().len(),
                2,
                "repaired, then freed with its group 2: the other node and its group left"
            );
        } else {
            assert!(
                matches!(r, Err(Error::ChecksumMismatch { offset, .. }) if offset == nodes[0].raw()),
                "{r:?}"
            );
            assert_eq!(pool.objects().unwrap().len(), 4, "nothing was freed");
        }
        drop(pool);
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn groups_past_the_reserve_are_separate_objects_after_the_inline_ones() {
    let (pool, path) = pool("mixed");
    let v0s = v0_nodes(&pool, 4);
    // Node 0 reaches v2 through v1 (group 1 inline first), node 1 straight from v0.
    let a = Oid::<v1::Node>::from_raw(v0s[0].raw());
    pool.tx(|tx| tx.upgrade(a).map(drop)).unwrap();
    assert_eq!(pool.objects().unwrap().len(), 4);
    let nodes = cast::<_, v2::Node>(&v0s);
    pool.tx(|tx| {
        for &n in &nodes[..2] {
            let e = tx.ext(n)?;
            assert_eq!(*e.key(), u64::from(e.value / 3) + (1 << 40));
            assert_eq!(e.name().as_str(), format!("n{}", e.value));
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(
        pool.objects().unwrap().len(),
        6,
        "one separate group 2 each for the two nodes upgraded"
    );
    // New v2 objects: group 1 inline, group 2 separate.
    let fresh = pool
        .tx(|tx| {
            tx.alloc_ext(v2::NodeData {
                value: 7,
                key64: 1234,
                name: PStr::truncating("fresh"),
            })
        })
        .unwrap();
    assert_eq!(pool.objects().unwrap().len(), 8);
    // A copy duplicates the inline group with the node and the separate one apart.
    let copy = pool.tx(|tx| tx.copy_ext(fresh)).unwrap();
    assert_eq!(pool.objects().unwrap().len(), 10);
    pool.tx(|tx| {
        tx.ext_mut(copy)?.set_key64(5);
        tx.ext_mut(copy)?.set_name(PStr::truncating("copy"));
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        let f = tx.ext(fresh)?;
        assert_eq!(
            (*f.key(), f.name().as_str()),
            (1234, "fresh"),
            "the original kept its own"
        );
        let c = tx.ext(copy)?;
        assert_eq!((*c.key(), c.name().as_str(), c.value), (5, "copy", 7));
        Ok(())
    })
    .unwrap();
    // Freeing frees each node with its separate group, nothing else.
    pool.tx(|tx| {
        tx.free(fresh)?;
        tx.free(copy)?;
        tx.free(nodes[0])
    })
    .unwrap();
    assert_eq!(
        pool.objects().unwrap().len(),
        4,
        "nodes 1 to 3 and node 1's group 2"
    );
    drop(pool);
    let pool = Pool::open(&path, NAME).unwrap();
    pool.tx(|tx| {
        assert_eq!(tx.ext(nodes[1])?.name().as_str(), "n3");
        assert_eq!(tx.groups_present(nodes[1])?, 2);
        Ok(())
    })
    .unwrap();
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn the_programs_writes_to_the_value_never_reach_the_reserve() {
    let (pool, path) = pool("value-writes");
    let nodes = cast::<_, v1::Node>(&v0_nodes(&pool, 2));
    pool.tx(|tx| {
        tx.ext_mut(nodes[0])?.set_key64(10);
        tx.ext_mut(nodes[1])?.set_key64(20);
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        // A whole value copied from another node, and raw bytes up to the value's end.
        let other = *tx.get(nodes[1])?;
        *tx.open(nodes[0])? = other;
        let mut m = tx.open(nodes[0])?;
        assert_eq!(m.as_bytes().len(), core::mem::size_of::<v1::Node>());
        m.write_bytes(0, &[0xee; 4]);
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        let e = tx.ext(nodes[0])?;
        assert_eq!(*e.key(), 10, "node 0's widened key is its own");
        assert_eq!(e.value, 3, "the value was copied");
        Ok(())
    })
    .unwrap();
    let past_the_value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = pool.tx(|tx| {
            tx.open(nodes[0])?
                .write_bytes(core::mem::size_of::<v1::Node>(), &[1]);
            Ok(())
        });
    }));
    assert!(
        past_the_value.is_err(),
        "the reserve is not the program's to write"
    );
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_reserve_is_part_of_the_layout() {
    let (pool, path) = pool("layout");
    v0_nodes(&pool, 1);
    let r = pool.tx(|tx| tx.alloc_ext(no_reserve::NodeData { key: 1, value: 2 }));
    assert!(
        matches!(r, Err(Error::LayoutMismatch { .. })),
        "another reserve is another layout: {r:?}"
    );
    // The advice names the reserve, the part that changed, not just the fields.
    let msg = r.unwrap_err().to_string();
    assert!(msg.contains("`reserve = N`"), "{msg}");
    assert_ne!(v0::Node::LAYOUT, no_reserve::Node::LAYOUT);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn two_threads_reading_one_old_node_upgrade_it_once() {
    let (pool, path) = pool("threads");
    let node = cast::<_, v1::Node>(&v0_nodes(&pool, 1))[0];
    let before = pool.stats().upgrades;
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..50 {
                    let k = pool.tx(|tx| Ok(*tx.ext(node)?.key())).unwrap();
                    assert_eq!(k, 1 << 40);
                }
            });
        }
    });
    assert_eq!(pool.stats().upgrades - before, 1);
    assert_eq!(pool.objects().unwrap().len(), 1);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// A group kept inline is frozen like a separate one: a build whose group 1 has another
/// layout is refused (`Error::LayoutMismatch` naming group 1) rather than reading the
/// reserve's bytes as its fields, or upgrading from them.
#[test]
fn an_inline_group_of_another_layout_is_a_layout_mismatch() {
    use v1_changed::NodeExtFields as _;
    let (pool, path) = pool("inline-layout");
    let v0s = v0_nodes(&pool, 2);
    let created = pool
        .tx(|tx| {
            tx.alloc_ext(v1::NodeData {
                value: 1,
                key64: 0x1111_2222_3333_4444,
            })
        })
        .unwrap();
    let upgraded = Oid::<v1::Node>::from_raw(v0s[0].raw());
    pool.tx(|tx| tx.upgrade(upgraded).map(drop)).unwrap();
    assert_eq!(pool.objects().unwrap().len(), 3, "group 1 lives inline");
    fn is_group_1<R>(r: &pgl::Result<R>) -> bool {
        matches!(r, Err(Error::LayoutMismatch { group: Some(1), .. }))
    }
    for oid in [created.raw(), upgraded.raw()] {
        let oid = Oid::<v1_changed::Node>::from_raw(oid);
        let read = pool.tx(|tx| Ok(*tx.ext(oid)?.pair()));
        assert!(is_group_1(&read), "read: {read:?}");
        let write = pool.tx(|tx| {
            tx.ext_mut(oid)?.set_pair([1, 2]);
            Ok(())
        });
        assert!(is_group_1(&write), "write: {write:?}");
        let oid = Oid::<v2_changed::Node>::from_raw(oid.raw());
        let up = pool.tx(|tx| tx.upgrade(oid));
        assert!(is_group_1(&up), "upgrade: {up:?}");
    }
    // A v0 node upgraded by the changed build: its group 1 would be stored inline with the
    // changed layout under the id the pool knows with the other.
    let fresh = Oid::<v1_changed::Node>::from_raw(v0s[1].raw());
    let up = pool.tx(|tx| tx.upgrade(fresh));
    assert!(is_group_1(&up), "upgrade from v0: {up:?}");
    // Group 1 grown past the reserve: the link's inline group is no longer where this
    // build looks, which is the group's change, not damage to the link.
    let grown = Oid::<v1_grown::Node>::from_raw(created.raw());
    let read = pool.tx(|tx| tx.ext(grown).map(drop));
    assert!(is_group_1(&read), "grown: {read:?}");
    let alloc = pool.tx(|tx| {
        tx.alloc_ext(v1_changed::NodeData {
            key: 1,
            value: 1,
            pair: [1, 2],
        })
    });
    assert!(is_group_1(&alloc), "alloc: {alloc:?}");
    assert_eq!(pool.objects().unwrap().len(), 3, "nothing changed");
    assert_eq!(
        pool.tx(|tx| Ok(*tx.ext(created)?.key())).unwrap(),
        0x1111_2222_3333_4444
    );
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// A Manual migration into a type with a reserve (whose objects start without groups and
/// are upgraded into their reserves later), and out of one with its inline group read
/// through the view: values survive both ways, nothing leaks, every object verifies.
#[test]
fn a_manual_migration_into_and_out_of_a_reserve_keeps_the_values() {
    let (pool, path) = pool("migrate");
    // Blocks that held other bytes first: a new object's reserve is not assumed zero.
    let junk = pool
        .tx(|tx| {
            (0..8)
                .map(|_| tx.alloc([0xa5u8; 64]))
                .collect::<pgl::Result<Vec<_>>>()
        })
        .unwrap();
    pool.tx(|tx| junk.iter().try_for_each(|&j| tx.free(j)))
        .unwrap();
    let pairs = pool
        .tx(|tx| {
            (0..8u64)
                .map(|k| {
                    tx.alloc(plain::Pair {
                        key: k,
                        value: k * 3,
                    })
                })
                .collect::<pgl::Result<Vec<_>>>()
        })
        .unwrap();
    let remap = pool
        .migration()
        .convert(|p: &plain::Pair, _| v0::node(p.key as u32, p.value as u32))
        .run()
        .unwrap();
    assert!(remap.not_freed().is_empty());
    let nodes: Vec<Oid<v1::Node>> = pairs.iter().map(|&p| remap.oid(p)).collect();
    pool.tx(|tx| {
        for (k, &n) in nodes.iter().enumerate() {
            assert_eq!(
                tx.groups_present(n)?,
                0,
                "a converted node starts without groups"
            );
            assert_eq!(*tx.ext(n)?.key(), k as u64 + (1 << 40));
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(
        pool.objects().unwrap().len(),
        8,
        "upgraded in their reserves"
    );
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    // And out again, reading the inline group.
    let remap = pool
        .migration()
        .convert_ext(|n: &pgl::Ext<'_, v1::Node>, _| plain::Wide {
            key: *n.key(),
            value: n.value,
            pad: 0,
        })
        .run()
        .unwrap();
    assert!(remap.not_freed().is_empty());
    pool.tx(|tx| {
        for (k, &n) in nodes.iter().enumerate() {
            let w = tx.get(remap.oid::<_, plain::Wide>(n))?;
            assert_eq!((w.key, w.value), (k as u64 + (1 << 40), k as u32 * 3));
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.objects().unwrap().len(), 8);
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// Two threads upgrade the same old nodes at once, one to v1 (group 1 into the reserve),
/// the other to v2 (group 1 inline, group 2 separate): whichever commits first, every node
/// ends with group 1 once, in its reserve, and one group 2, with nothing leaked by the
/// transactions that conflicted and ran again.
#[test]
fn two_threads_upgrading_one_node_to_two_versions_leave_one_chain() {
    const N: u32 = 40;
    let (pool, path) = pool("two-versions");
    let v0s = v0_nodes(&pool, N);
    let (ones, twos) = (cast::<_, v1::Node>(&v0s), cast::<_, v2::Node>(&v0s));
    std::thread::scope(|s| {
        s.spawn(|| {
            for &n in ones.iter().rev() {
                let k = pool.tx(|tx| Ok(*tx.ext(n)?.key())).unwrap();
                assert_eq!(k >> 40, 1);
            }
        });
        s.spawn(|| {
            for &n in &twos {
                let name = pool
                    .tx(|tx| Ok(tx.ext(n)?.name().as_str().to_owned()))
                    .unwrap();
                assert!(name.starts_with('n'), "{name}");
            }
        });
    });
    assert_eq!(
        pool.objects().unwrap().len() as u32,
        2 * N,
        "each node and its group 2"
    );
    pool.tx(|tx| {
        for (k, &n) in twos.iter().enumerate() {
            assert_eq!(tx.groups_present(n)?, 2);
            let e = tx.ext(n)?;
            assert_eq!(*e.key(), k as u64 + (1 << 40));
            assert_eq!(e.name().as_str(), format!("n{}", k * 3));
        }
        Ok(())
    })
    .unwrap();
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// `tx.ext_with` shows what `tx.ext` shows, on each of its paths: an old node (upgraded
/// inside the call), an upgraded one whose group lives in its reserve (the path that reads
/// nothing but the node), one opened in this transaction (read from its buffer), one
/// with a separate group past the reserve, and errors: another build's layout of the
/// inline group, a wrong oid, a node freed in this transaction.
#[test]
fn ext_with_reads_what_ext_reads_on_every_path() {
    use v1::NodeExtFields as _;
    use v2::NodeExtFields as _;
    let (pool, path) = pool("ext-with");
    let v0s = v0_nodes(&pool, 4);
    let v1s = cast::<_, v1::Node>(&v0s);
    let upgrades = pool.stats().upgrades;
    // An old node: upgraded by the call, the init's value shown, once.
    let key = pool.tx(|tx| tx.ext_with(v1s[1], |e| *e.key())).unwrap();
    assert_eq!(key, 1 + (1 << 40));
    assert_eq!(pool.stats().upgrades - upgrades, 1);
    // Upgraded: the same value, no second upgrade, and `ext` agrees.
    pool.tx(|tx| {
        let with = tx.ext_with(v1s[1], |e| (*e.key(), e.value, e.oid()))?;
        let e = tx.ext(v1s[1])?;
        assert_eq!(with, (*e.key(), e.value, e.oid()));
        assert_eq!(with, (1 + (1 << 40), 3, v1s[1]));
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.stats().upgrades - upgrades, 1, "upgraded once");
    // Written and read back in the same transaction: from the node's buffer.
    pool.tx(|tx| {
        tx.ext_mut(v1s[1])?.set_key64(77);
        assert_eq!(tx.ext_with(v1s[1], |e| *e.key())?, 77);
        // A handle of the view and one of the base at once: both borrow it shared.
        let base = tx.get(v1s[1])?;
        assert_eq!(tx.ext_with(v1s[1], |e| e.value)?, base.value);
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.tx(|tx| tx.ext_with(v1s[1], |e| *e.key())).unwrap(), 77);
    // A separate group (v2's group 2) after the inline one.
    let v2s = cast::<_, v2::Node>(&v0s);
    let name = pool
        .tx(|tx| tx.ext_with(v2s[2], |e| (*e.key(), e.name().as_str().to_owned())))
        .unwrap();
    assert_eq!(name, (2 + (1 << 40), "n6".to_owned()));
    assert_eq!(pool.objects().unwrap().len(), 5, "one separate group 2");
    // Another build's layout of group 1: the error `ext` gives, and nothing written.
    use v1_changed::NodeExtFields as _;
    let changed = Oid::<v1_changed::Node>::from_raw(v1s[1].raw());
    let r = pool.tx(|tx| tx.ext_with(changed, |e| *e.pair()));
    assert!(
        matches!(r, Err(Error::LayoutMismatch { group: Some(1), .. })),
        "{r:?}"
    );
    // Not an object of the type, and an object freed in this transaction.
    let wrong = Oid::<v1::Node>::from_raw(v1s[0].raw() + 16);
    let r = pool.tx(|tx| tx.ext_with(wrong, |e| e.value));
    assert!(matches!(r, Err(Error::InvalidOid { .. })), "{r:?}");
    let r = pool.tx(|tx| {
        tx.free(v1s[3])?;
        tx.ext_with(v1s[3], |e| e.value)
    });
    assert!(r.is_err(), "a freed node is not read: {r:?}");
    assert_eq!(pool.tx(|tx| tx.ext_with(v1s[3], |e| e.value)).unwrap(), 9);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// Three versions of a struct whose groups all fit a 24-byte reserve, and a build whose
/// group 2 had another layout (registered in the pool first).
mod two_inline {
    pub mod v0 {
        use pgl::{extendible, Persistent};
        #[extendible(reserve = 24)]
        #[derive(Persistent)]
        #[pgl(id = 0x5eed_7e53)]
        #[repr(C)]
        pub struct Node {
            pub key: u64,
        }
    }
    pub mod v2 {
        use pgl::{extendible, Persistent};
        #[extendible(reserve = 24)]
        #[derive(Persistent)]
        #[pgl(id = 0x5eed_7e53)]
        #[repr(C)]
        pub struct Node {
            pub key: u64,
            #[extension(1, init = |old| old.key() + 1)]
            pub a: u64,
            #[extension(2, init = |old| old.a() + 1)]
            pub b: u64,
        }
    }
    pub mod v2_other {
        use pgl::{extendible, Persistent};
        #[extendible(reserve = 24)]
        #[derive(Persistent)]
        #[pgl(id = 0x5eed_7e53)]
        #[repr(C)]
        pub struct Node {
            pub key: u64,
            #[extension(1, init = |old| old.key() + 1)]
            pub a: u64,
            #[extension(2, init = 0)]
            pub b: u32,
        }
    }
}

/// An upgrade that fails part way (group 2's layout is another build's) fails its
/// transaction, as any change made of several steps does: a program that goes on after
/// the error cannot commit what it did meanwhile, or what the inits before the failure
/// did.
#[test]
fn an_upgrade_in_the_reserve_that_fails_part_way_fails_its_transaction() {
    use two_inline::{v0, v2, v2_other};
    let (pool, path) = pool("fails-part-way");
    pool.tx(|tx| tx.alloc_ext(v2_other::NodeData { key: 1, a: 2, b: 3 }))
        .unwrap();
    let old = pool.tx(|tx| tx.alloc_ext(v0::NodeData { key: 7 })).unwrap();
    let node = old.cast::<v2::Node>();
    let objects = pool.objects().unwrap().len();
    let r = pool.tx(|tx| {
        match tx.ext(node).map(drop) {
            Err(Error::LayoutMismatch { group, .. }) => assert_eq!(group, Some(2)),
            other => panic!("expected group 2's LayoutMismatch, got {other:?}"),
        }
        tx.alloc(5u64)?; // taken in stride: the transaction still must not commit
        Ok(())
    });
    match r {
        Err(Error::Aborted { reason }) => assert!(reason.contains("group 2"), "{reason}"),
        other => panic!("the transaction committed after a failed upgrade: {other:?}"),
    }
    assert_eq!(
        pool.objects().unwrap().len(),
        objects,
        "nothing of it is durable"
    );
    assert_eq!(pool.tx(|tx| tx.groups_present(node)).unwrap(), 0);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// A node no upgrade reached (its link is 0) is freed as any object is: buffered or not,
/// allocated in the same transaction, read first, refused while borrowed or as the root;
/// one upgraded earlier in the same transaction is freed with its groups.
#[test]
fn freeing_a_node_no_upgrade_reached_frees_it_alone_buffered_or_not() {
    let (pool, path) = pool("free-link0");
    let v0s = v0_nodes(&pool, 6);
    let (v1s, v2s) = (cast::<_, v1::Node>(&v0s), cast::<_, v2::Node>(&v0s));
    let count = |pool: &Pool| pool.objects().unwrap().len();
    assert_eq!(count(&pool), 6);
    // Link 0, not buffered; link 0, buffered (opened and written); link 0, allocated in
    // this transaction.
    pool.tx(|tx| {
        tx.free(v2s[0])?;
        tx.open(v2s[1])?.value = 77;
        tx.free(v2s[1])?;
        let fresh = tx.alloc_ext(v0::NodeData { key: 9, value: 9 })?;
        tx.free(fresh)
    })
    .unwrap();
    assert_eq!(
        count(&pool),
        4,
        "two nodes freed, the fresh one never committed"
    );
    // Borrowed: refused, and the transaction still commits.
    pool.tx(|tx| {
        let m = tx.open(v2s[2])?;
        assert!(matches!(
            tx.free(v2s[2]),
            Err(Error::AlreadyBorrowed { .. })
        ));
        drop(m);
        Ok(())
    })
    .unwrap();
    assert_eq!(count(&pool), 4);
    // Upgraded earlier in the same transaction (the link is no longer 0): freed with its
    // groups, the separate group 2 included.
    pool.tx(|tx| {
        assert_eq!(*tx.ext(v1s[3])?.key(), 3 + (1 << 40));
        tx.free(v1s[3])?;
        assert_eq!(tx.ext(v2s[4])?.name().as_str(), "n12");
        tx.free(v2s[4])
    })
    .unwrap();
    assert_eq!(count(&pool), 2, "nodes 2 and 5; no group 2 left behind");
    // Read (in place) before the free, in the same transaction.
    pool.tx(|tx| {
        assert_eq!(tx.get(v2s[5])?.value, 15);
        tx.free(v2s[5])
    })
    .unwrap();
    assert_eq!(count(&pool), 1);
    // The root, never upgraded, is still refused.
    let root = pool.root::<v0::Node>().unwrap();
    let r = pool.tx(|tx| tx.free(root));
    assert!(matches!(r, Err(Error::RootNotFreeable { .. })), "{r:?}");
    assert_eq!(count(&pool), 2, "node 2 and the root");
    drop(pool);
    let pool = Pool::open(&path, NAME).unwrap();
    assert_eq!(count(&pool), 2);
    pool.tx(|tx| tx.free(v2s[2])).unwrap();
    assert_eq!(count(&pool), 1);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
