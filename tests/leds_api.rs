//! `#[extendible]` structs through three versions in one process: v0 (base only), v1
//! (adds a name), v2 (widens the key). Each version is a module with the same pinned type
//! id, as the same struct would be in three builds of one program; `leds_evolution.rs`
//! does the same across real processes.

mod support;

use pgl::{Config, Error, Oid, PStr, Persistent, Pool};

mod v0 {
    use pgl::{extendible, Oid, Persistent};

    #[extendible]
    #[derive(Persistent, Debug)]
    #[pgl(id = 0x5eed_0001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
    }
}

mod v1 {
    use pgl::{extendible, Oid, PStr, Persistent};

    #[extendible]
    #[derive(Persistent, Debug)]
    #[pgl(id = 0x5eed_0001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |old| PStr::truncating(&format!("node{}", old.key())))]
        pub name: PStr<16>,
    }
}

mod v2 {
    use pgl::{extendible, Oid, PStr, Persistent};

    #[extendible]
    #[derive(Persistent, Debug)]
    #[pgl(id = 0x5eed_0001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |old| PStr::truncating(&format!("node{}", old.key())))]
        pub name: PStr<16>,
        #[extension(2, replaces = key, init = |old| old.key() as u64 + (1 << 40))]
        pub key64: u64,
        #[extension(2, init = 7)]
        pub hits: u32,
        #[extension(2, init = 0)]
        pub _pad: u32,
    }
}

fn pool(name: &str) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-leds-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (Pool::create(&path, &Config::small(name)).unwrap(), path)
}

/// A new node as the v0 build writes it (no extension group).
fn v0_node(pool: &Pool, key: u32, value: u32) -> Oid<v0::Node> {
    pool.tx(|tx| {
        tx.alloc_ext(v0::NodeData {
            key,
            value,
            next: Oid::NULL,
        })
    })
    .unwrap()
}

/// A new node as the v1 build writes it (group 1 holding `name`), linked to `next`.
fn v1_node(pool: &Pool, key: u32, value: u32, next: u64, name: &str) -> Oid<v1::Node> {
    pool.tx(|tx| {
        tx.alloc_ext(v1::NodeData {
            key,
            value,
            next: Oid::from_raw(next),
            name: PStr::truncating(name),
        })
    })
    .unwrap()
}

#[test]
fn old_objects_are_upgraded_lazily_and_once() {
    use v1::NodeExtFields as _;
    use v2::NodeExtFields as _;
    let (pool, path) = pool("lazy");
    let a = v0_node(&pool, 5, 50);
    assert_eq!(pool.stats().upgrades, 0);

    // v1 reads the base without upgrading; `tx.ext` upgrades.
    let a1: Oid<v1::Node> = a.cast();
    let present = pool.tx(|tx| tx.groups_present(a1)).unwrap();
    assert_eq!(present, 0);
    let name = pool
        .tx(|tx| Ok(tx.ext(a1)?.name().as_str().to_owned()))
        .unwrap();
    assert_eq!(name, "node5");
    assert_eq!(pool.stats().upgrades, 1);
    pool.tx(|tx| tx.ext(a1).map(drop)).unwrap();
    assert_eq!(
        pool.stats().upgrades,
        1,
        "a second access does not upgrade again"
    );

    // v2 adds group 2; `key()` now reads the widened key.
    let a2: Oid<v2::Node> = a.cast();
    pool.tx(|tx| {
        let n = tx.ext(a2)?;
        assert_eq!(*n.key(), 5 + (1 << 40));
        assert_eq!(*n.hits(), 7);
        assert_eq!(n.name().as_str(), "node5");
        assert_eq!(n.value, 50);
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.stats().upgrades, 2);
    assert_eq!(pool.tx(|tx| tx.groups_present(a2)).unwrap(), 2);

    // Setters of old and new fields.
    pool.tx(|tx| {
        let mut n = tx.ext_mut(a2)?;
        n.set_key(1 << 50);
        n.set_name(PStr::truncating("renamed"));
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        let n = tx.ext(a2)?;
        assert_eq!(*n.key(), 1 << 50);
        assert_eq!(*n.key64(), 1 << 50);
        assert_eq!(n.name().as_str(), "renamed");
        Ok(())
    })
    .unwrap();
    // Nothing leaked: base + 2 groups.
    assert_eq!(pool.objects().unwrap().len(), 3);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn new_objects_have_the_full_chain_and_copy_and_free_follow_it() {
    use v2::NodeExtFields as _;
    let (pool, path) = pool("new");
    let o = pool
        .tx(|tx| {
            tx.alloc_ext(v2::NodeData {
                value: 1,
                next: Oid::NULL,
                name: PStr::truncating("fresh"),
                key64: 99,
                hits: 3,
                _pad: 0,
            })
        })
        .unwrap();
    assert_eq!(pool.tx(|tx| tx.groups_present(o)).unwrap(), 2);
    let c = pool.tx(|tx| tx.copy_ext(o)).unwrap();
    assert_eq!(pool.objects().unwrap().len(), 6);
    pool.tx(|tx| {
        tx.ext_mut(c)?.set_key(100);
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        assert_eq!(*tx.ext(o)?.key(), 99, "the copy has its own groups");
        assert_eq!(*tx.ext(c)?.key(), 100);
        assert_eq!(tx.ext(c)?.name().as_str(), "fresh");
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.stats().upgrades, 0, "nothing needed upgrading");
    pool.tx(|tx| tx.free(o)).unwrap();
    assert_eq!(pool.objects().unwrap().len(), 3);
    // An older program copies the groups it does not know too.
    let c0: Oid<v0::Node> = c.cast();
    let cc = pool.tx(|tx| tx.copy_ext(c0)).unwrap();
    pool.tx(|tx| {
        assert_eq!(*tx.ext(cc.cast::<v2::Node>())?.key(), 100);
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| tx.free(c0)).unwrap();
    pool.tx(|tx| tx.free(cc)).unwrap();
    assert_eq!(pool.objects().unwrap().len(), 0);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_aborted_upgrade_leaves_the_object_as_it_was() {
    use v1::NodeExtFields as _;
    let (pool, path) = pool("abort");
    let a = v0_node(&pool, 1, 2);
    let a1: Oid<v1::Node> = a.cast();
    let r: pgl::Result<()> = pool.tx(|tx| {
        assert_eq!(tx.ext(a1)?.name().as_str(), "node1");
        Err(Error::Aborted {
            reason: "test".into(),
        })
    });
    assert!(r.is_err());
    assert_eq!(pool.tx(|tx| tx.groups_present(a1)).unwrap(), 0);
    assert_eq!(pool.objects().unwrap().len(), 1);
    assert_eq!(pool.stats().upgrades, 0);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

mod v2_changed_group {
    use pgl::{extendible, Oid, PStr, Persistent};

    /// Group 1 of v1 with a field retyped: a mistake the pool must catch.
    #[extendible]
    #[derive(Persistent, Debug)]
    #[pgl(id = 0x5eed_0001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |_old| PStr::truncating("x"))]
        pub name: PStr<24>,
    }
}

mod v_changed_base {
    use pgl::{extendible, Oid, Persistent};

    #[extendible]
    #[derive(Persistent, Debug)]
    #[pgl(id = 0x5eed_0001)]
    #[repr(C)]
    pub struct Node {
        pub key: u64,
        pub next: Oid<Node>,
    }
}

#[test]
fn a_changed_group_or_base_is_a_layout_mismatch_naming_it() {
    let (pool, path) = pool("mismatch");
    let a = v1_node(&pool, 1, 2, 0, "n");
    let e = pool
        .tx(|tx| tx.ext(a.cast::<v2_changed_group::Node>()).map(drop))
        .unwrap_err();
    match &e {
        Error::LayoutMismatch {
            group, type_name, ..
        } => {
            assert_eq!(*group, Some(1), "{e}");
            assert!(type_name.contains("extension group 1"), "{type_name}");
        }
        other => panic!("expected a layout mismatch, got {other:?}"),
    }
    assert!(e.to_string().contains("extension group 1 of this"), "{e}");
    let e = pool
        .tx(|tx| tx.ext(a.cast::<v_changed_base::Node>()).map(drop))
        .unwrap_err();
    assert!(
        matches!(e, Error::LayoutMismatch { group: Some(0), .. }),
        "{e:?}"
    );
    // Creating an object names the part too, as reading one does, and creates nothing.
    let e = pool
        .tx(|tx| {
            tx.alloc_ext(v2_changed_group::NodeData {
                key: 3,
                value: 4,
                next: Oid::NULL,
                name: PStr::truncating("m"),
            })
            .map(drop)
        })
        .unwrap_err();
    assert!(
        matches!(e, Error::LayoutMismatch { group: Some(1), .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("extension group 1 of this"), "{e}");
    let e = pool
        .tx(|tx| {
            let data = v_changed_base::NodeData {
                key: 5,
                next: Oid::NULL,
            };
            tx.alloc_ext(data).map(drop)
        })
        .unwrap_err();
    assert!(
        matches!(e, Error::LayoutMismatch { group: Some(0), .. }),
        "{e:?}"
    );
    assert_eq!(pool.objects().unwrap().len(), 2, "nothing was created");
    assert_ne!(
        <v0::Node as Persistent>::LAYOUT,
        <v_changed_base::Node as Persistent>::LAYOUT
    );
    assert_eq!(
        <v0::Node as Persistent>::LAYOUT,
        <v2::Node as Persistent>::LAYOUT,
        "extensions never change the base"
    );
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_damaged_extension_group_is_repaired_through_ext_mut() {
    use v1::NodeExtFields as _;
    let (pool, path) = pool("damaged-group");
    let a: Oid<v1::Node> = v0_node(&pool, 9, 90).cast();
    pool.tx(|tx| tx.upgrade(a)).unwrap();
    let group = pool
        .objects()
        .unwrap()
        .into_iter()
        .find(|(_, h)| h.type_id != <v1::Node as Persistent>::TYPE_ID)
        .map(|(off, _)| off)
        .expect("the group");
    pool.inject(&pgl::Fault::ObjectScribble {
        oid: group,
        at: 16,
        len: 8,
        seed: 3,
    })
    .unwrap();
    let name = pool
        .tx(|tx| Ok(tx.ext_mut(a)?.name().as_str().to_owned()))
        .unwrap();
    assert_eq!(name, "node9", "the group rebuilt from parity");
    assert_eq!(pool.stats().objects_repaired, 1);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_unzeroed_extendible_object_owns_no_stale_groups() {
    // An unfilled allocation reuses a freed object's block, stale bytes and all; its
    // extension link must not be one of them, or freeing it would free whatever now
    // lives where the freed object's group was.
    let (pool, path) = pool("unzeroed");
    let root = pool.root::<[u64; 2]>().unwrap();
    let a = v1_node(&pool, 1, 2, 0, "a");
    let group = pool
        .objects()
        .unwrap()
        .into_iter()
        .map(|(off, _)| off)
        .find(|&off| off != a.raw() && off != root.raw())
        .expect("a's extension group");
    pool.tx(|tx| tx.free(a)).unwrap();
    // Something else takes the group's block (the same class: 24 payload bytes whose last
    // 8 are zero, like a null link).
    let y = pool
        .tx(|tx| {
            let y = tx.alloc([
                9u8, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 0, 0, 0, 0, 0, 0, 0, 0,
            ])?;
            tx.open(root)?[0] = y.raw();
            Ok(y)
        })
        .unwrap();
    assert_eq!(
        y.raw(),
        group,
        "the group's block is reused (the test needs it)"
    );
    let b = pool.tx(|tx| tx.alloc_unzeroed::<v1::Node>()).unwrap();
    assert_eq!(b.raw(), a.raw(), "a's block is reused (the test needs it)");
    assert_eq!(pool.tx(|tx| tx.groups_present(b)).unwrap(), 0);
    pool.tx(|tx| tx.free(b)).unwrap();
    assert_eq!(
        pool.get(y).unwrap()[..16],
        [9u8; 16],
        "y is still allocated and whole"
    );
    assert_eq!(pool.objects().unwrap().len(), 2, "the root and y");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn reset_on_mismatch_sees_a_changed_extension_group() {
    let (pool, path) = pool("reset-groups");
    let cfg = Config::small("reset-groups");
    pool.tx(|tx| {
        tx.alloc_ext(v1::NodeData {
            key: 1,
            value: 2,
            next: Oid::NULL,
            name: PStr::truncating("a"),
        })
        .map(drop)
    })
    .unwrap();
    drop(pool);
    assert_eq!(
        pgl::type_keys::<v1::Node>().len(),
        2,
        "the base and group 1"
    );
    assert_eq!(pgl::type_keys::<v2::Node>().len(), 3);
    // The same build, and a later one that adds a group: kept.
    for keys in [pgl::type_keys::<v1::Node>(), pgl::type_keys::<v2::Node>()] {
        let (pool, reset) = Pool::open_or_reset(&path, &cfg, &keys).unwrap();
        assert!(!reset, "{keys:x?}");
        assert_eq!(pool.objects().unwrap().len(), 2);
    }
    // Group 1 retyped, base unchanged: the base's key alone cannot tell; its group's can.
    let base_only = [pgl::type_key::<v2_changed_group::Node>()];
    assert!(!Pool::open_or_reset(&path, &cfg, &base_only).unwrap().1);
    let keys = pgl::type_keys::<v2_changed_group::Node>();
    let (pool, reset) = Pool::open_or_reset(&path, &cfg, &keys).unwrap();
    assert!(reset, "a changed extension group resets the pool");
    assert_eq!(pool.objects().unwrap().len(), 0);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// Resetting a pool that is open would leave its owner committing to a removed file.
#[test]
fn reset_refuses_a_pool_that_is_open() {
    let (pool, path) = pool("reset-open");
    let cfg = Config::small("reset-open");
    let o = pool.tx(|tx| tx.alloc(7u64)).unwrap();
    match Pool::reset(&path, &cfg) {
        Err(e @ Error::AlreadyOpen { what: "pool", .. }) => {
            assert!(e.to_string().contains("before resetting"), "{e}")
        }
        other => panic!("expected AlreadyOpen, got {:?}", other.map(drop)),
    }
    assert_eq!(*pool.get(o).unwrap(), 7, "the open pool is untouched");
    drop(pool);
    assert!(Pool::open(&path, "reset-open").unwrap().get(o).is_ok());
    let fresh = Pool::reset(&path, &cfg).unwrap();
    assert!(fresh.objects().unwrap().is_empty(), "closed, it resets");
    drop(fresh);
    std::fs::remove_file(path).unwrap();
}

/// Reset removes pool files only: a path naming some other file (a typo, a wrong
/// variable) leaves it alone. An empty file (a creation that never finished) is reset.
#[test]
fn reset_leaves_a_file_that_is_not_a_pool_alone() {
    let path = support::test_dir().join(format!("pgl-leds-reset-other-{}", std::process::id()));
    let text = b"precious notes, not a pool\n".repeat(1000);
    std::fs::write(&path, &text).unwrap();
    let cfg = Config::small("reset-other");
    match Pool::reset(&path, &cfg) {
        Err(Error::NotAPool { reason, .. }) => assert!(reason.contains("left this one alone")),
        other => panic!("expected NotAPool, got {:?}", other.map(drop)),
    }
    assert_eq!(std::fs::read(&path).unwrap(), text, "the file is untouched");
    std::fs::write(&path, b"").unwrap();
    drop(Pool::reset(&path, &cfg).unwrap());
    std::fs::remove_file(path).unwrap();
}

/// A migration commits transactions of its own: inside one it is refused, by its name.
#[test]
fn a_migration_inside_a_transaction_is_refused_by_name() {
    let (pool, path) = pool("migrate-in-tx");
    pool.tx(|tx| tx.alloc(3u64).map(drop)).unwrap();
    let r = pool.tx(|_| {
        pool.migrate::<u64, [u32; 2]>(|&v, _| [v as u32, 0])
            .map(drop)
    });
    match r {
        Err(e @ Error::InTransaction { .. }) => {
            assert!(e.to_string().starts_with("pool.migrate"), "{e}")
        }
        other => panic!("expected InTransaction, got {other:?}"),
    }
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

mod flat {
    use pgl::{Oid, PStr, Persistent};

    /// v1's node as a plain struct: what a Manual migration away from `#[extendible]`
    /// produces.
    #[derive(Persistent, Debug)]
    #[pgl(id = 0x5eed_0002)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        pub name: PStr<16>,
        pub _pad: u32,
    }
}

#[test]
fn a_manual_migration_of_an_extendible_type_keeps_its_extension_fields() {
    use v1::NodeExtFields as _;
    let (pool, path) = pool("migrate-ext");
    // One node written by v0 (no group), linked from one written by v1 (its name set).
    let b = v0_node(&pool, 7, 8);
    let a = v1_node(&pool, 1, 2, b.raw(), "alpha");
    assert_eq!(pool.objects().unwrap().len(), 3);
    let remap = pool
        .migration()
        .convert_ext(|old: &pgl::Ext<'_, v1::Node>, r| flat::Node {
            key: old.key,
            value: old.value,
            next: r.oid(old.next),
            name: *old.name(),
            _pad: 0,
        })
        .run()
        .unwrap();
    assert_eq!(remap.len(), 2);
    let na = pool.get(remap.oid::<_, flat::Node>(a)).unwrap();
    assert_eq!((na.key, na.value, na.name.as_str()), (1, 2, "alpha"));
    // The v0 node was upgraded on the way: its name is its init's.
    let nb = pool.get(na.next).unwrap();
    assert_eq!((nb.key, nb.value, nb.name.as_str()), (7, 8, "node7"));
    assert!(nb.next.is_null());
    drop((na, nb));
    // The old nodes are gone, their groups with them.
    assert_eq!(pool.objects().unwrap().len(), 2);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// A v1 node "a" and another object that reads like a last extension group (it ends
/// with 0): what a wrong link would point at.
fn node_and_other(pool: &Pool) -> (Oid<v1::Node>, Oid<[u64; 4]>) {
    let a = v1_node(pool, 1, 2, 0, "a");
    (a, pool.tx(|tx| tx.alloc([9u64, 9, 9, 0])).unwrap())
}

/// Checks that `other` is intact and that the pool holds 3 objects (it and one node with
/// its group), then closes and removes the pool.
fn the_other_lives(pool: Pool, path: std::path::PathBuf, other: Oid<[u64; 4]>) {
    assert_eq!(
        *pool.get(other).unwrap(),
        [9u64, 9, 9, 0],
        "the other object lives"
    );
    assert_eq!(pool.objects().unwrap().len(), 3);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_overwritten_extension_link_is_put_back_and_frees_no_other_object() {
    use v1::NodeExtFields as _;
    let (pool, path) = pool("link-overwritten");
    let (a, other) = node_and_other(&pool);
    // The base's last 8 bytes are its link to group 1: written over by hand, they are
    // back as pgl set them once the handle is gone (inside the transaction already).
    let link_at = std::mem::size_of::<v1::Node>() - 8;
    pool.tx(|tx| {
        tx.open(a)?.write_bytes(link_at, &other.raw().to_le_bytes());
        assert_eq!(
            tx.ext(a)?.name().as_str(),
            "a",
            "its own group, in the transaction"
        );
        Ok(())
    })
    .unwrap();
    assert_eq!(
        pool.tx(|tx| Ok(tx.ext(a)?.name().as_str().to_owned()))
            .unwrap(),
        "a"
    );
    let copy = pool.tx(|tx| tx.copy_ext(a)).unwrap();
    assert_eq!(
        pool.tx(|tx| Ok(tx.ext(copy)?.name().as_str().to_owned()))
            .unwrap(),
        "a"
    );
    // a, its group, other, the copy and its group; freeing a frees its group only.
    assert_eq!(pool.objects().unwrap().len(), 5);
    pool.tx(|tx| tx.free(a)).unwrap();
    the_other_lives(pool, path, other);
}

#[test]
fn a_damaged_extension_link_never_frees_another_object() {
    // A pool without checksums: damage to a link is caught only by the chain's own check.
    let path = support::test_dir().join(format!("pgl-leds-link-damaged-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut cfg = Config::small("link-damaged");
    cfg.checksums = false;
    let pool = Pool::create(&path, &cfg).unwrap();
    let (a, other) = node_and_other(&pool);
    drop(pool);
    // The base's last 8 bytes are its link to group 1: pointed at `other` on media (the
    // pool file maps from offset 0, so an oid is a file offset).
    let link_at = a.raw() + std::mem::size_of::<v1::Node>() as u64 - 8;
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(link_at)).unwrap();
        f.write_all(&other.raw().to_le_bytes()).unwrap();
    }
    let pool = Pool::open_with(&path, &cfg).unwrap();
    for r in [
        pool.tx(|tx| tx.free(a)),
        pool.tx(|tx| tx.copy_ext(a).map(drop)),
    ] {
        match r {
            Err(Error::Corrupt { what, detail, .. }) => {
                assert_eq!(what, "extension chain");
                assert!(detail.contains("not to its extension group 1"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }
    the_other_lives(pool, path, other);
}

/// An upgrade hangs new groups after the last group its links lead to: a damaged link
/// that names another object's group 1 must not make that object's chain grow (or its
/// group change), whatever the verify policy.
#[test]
fn an_upgrade_follows_no_damaged_link_into_another_chain() {
    let path = support::test_dir().join(format!("pgl-leds-upgrade-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = Config::small("upgrade-link").parity(false);
    let pool = Pool::create(&path, &cfg).unwrap();
    let x = v1_node(&pool, 1, 10, 0, "x");
    let y = v1_node(&pool, 2, 20, 0, "y");
    drop(pool);
    // y's link (its base's last 8 bytes) set to x's, behind pgl's back: y's checksum no
    // longer matches (the pool file maps from offset 0: an oid is a file offset).
    let end = |o: Oid<v1::Node>| o.raw() + std::mem::size_of::<v1::Node>() as u64 - 8;
    {
        use std::io::{Read, Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut xs = [0u8; 8];
        f.seek(SeekFrom::Start(end(x))).unwrap();
        f.read_exact(&mut xs).unwrap();
        assert_ne!(u64::from_le_bytes(xs), 0, "x has its group 1");
        f.seek(SeekFrom::Start(end(y))).unwrap();
        f.write_all(&xs).unwrap();
    }
    let pool = Pool::open_with(&path, &cfg).unwrap();
    let y2: Oid<v2::Node> = Oid::from_raw(y.raw());
    match pool.tx(|tx| tx.ext(y2).map(drop)) {
        Err(Error::ChecksumMismatch { offset, .. }) if offset == y.raw() => {}
        other => panic!("expected y's ChecksumMismatch, got {other:?}"),
    }
    // x upgrades to its own chain, untouched by y's attempt.
    use v2::NodeExtFields as _;
    let x2: Oid<v2::Node> = Oid::from_raw(x.raw());
    let (name, key64) = pool
        .tx(|tx| {
            let e = tx.ext(x2)?;
            Ok((e.name().as_str().to_owned(), *e.key64()))
        })
        .unwrap();
    assert_eq!((name.as_str(), key64), ("x", 1 + (1 << 40)));
    assert!(pool
        .verify_objects(|_, _| {})
        .unwrap()
        .iter()
        .all(|(o, _)| *o == y.raw()));
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

mod copyable {
    use pgl::{extendible, Persistent};

    /// An `#[extendible]` struct a program may copy whole.
    #[extendible]
    #[derive(Persistent, Clone, Copy, Debug)]
    #[pgl(id = 0x5eed_00c1)]
    #[repr(C)]
    pub struct Pair {
        pub a: u64,
        #[extension(1, init = |old| old.a() * 10)]
        pub b: u64,
    }
}

/// Two `copyable::Pair`s with their groups: (1, 100) and (2, 200).
fn two_pairs(pool: &Pool) -> (Oid<copyable::Pair>, Oid<copyable::Pair>) {
    pool.tx(|tx| {
        Ok((
            tx.alloc_ext(copyable::PairData { a: 1, b: 100 })?,
            tx.alloc_ext(copyable::PairData { a: 2, b: 200 })?,
        ))
    })
    .unwrap()
}

/// The base and extension fields of a `copyable::Pair`.
fn pair(pool: &Pool, p: Oid<copyable::Pair>) -> (u64, u64) {
    use copyable::PairExtFields as _;
    pool.tx(|tx| {
        let e = tx.ext(p)?;
        Ok((e.a, *e.b()))
    })
    .unwrap()
}

/// Checks that y (of `two_pairs`) still reads (2, 200) through its own group, that the
/// pool holds `objects` objects (`what`), all verifying; then closes and removes the pool.
fn ys_group_lives(
    pool: Pool,
    path: std::path::PathBuf,
    y: Oid<copyable::Pair>,
    objects: usize,
    what: &str,
) {
    assert_eq!(pair(&pool, y), (2, 200), "y's group lives");
    assert_eq!(pool.objects().unwrap().len(), objects, "{what}");
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn copying_a_whole_extendible_struct_copies_its_base_not_its_groups() {
    let (pool, path) = pool("copy-whole");
    let (x, y) = two_pairs(&pool);
    // `*x = *y` copies every byte of the Rust value, the hidden link to y's group
    // included; x keeps its own group all the same.
    pool.tx(|tx| {
        let theirs = *tx.get(y)?;
        *tx.open(x)? = theirs;
        Ok(())
    })
    .unwrap();
    assert_eq!(
        pair(&pool, x),
        (2, 100),
        "y's base, x's own extension field"
    );
    assert_eq!(pair(&pool, y), (2, 200));
    // Freeing x frees x's group and nothing of y's.
    pool.tx(|tx| tx.free(x)).unwrap();
    ys_group_lives(pool, path, y, 2, "y and its group");
}

#[test]
fn allocating_a_copy_of_an_extendible_struct_shares_none_of_its_groups() {
    let (pool, path) = pool("alloc-copy");
    let (_, y) = two_pairs(&pool);
    let z = pool
        .tx(|tx| {
            let theirs = *tx.get(y)?;
            tx.alloc(theirs)
        })
        .unwrap();
    assert_eq!(
        pool.tx(|tx| tx.groups_present(z)).unwrap(),
        0,
        "no group yet"
    );
    // Read through `ext`, z is upgraded with a group of its own.
    assert_eq!(pair(&pool, z), (2, 20));
    pool.tx(|tx| tx.free(z)).unwrap();
    ys_group_lives(pool, path, y, 4, "x, y and their groups");
}

#[test]
fn a_forgotten_handle_cannot_relink_an_extendible_object() {
    let (pool, path) = pool("forgotten-handle");
    let (x, y) = two_pairs(&pool);
    // The handle's drop never runs: the commit puts the link back all the same.
    pool.tx(|tx| {
        let theirs = *tx.get(y)?;
        let mut h = tx.open(x)?;
        *h = theirs;
        std::mem::forget(h);
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| tx.free(x)).unwrap();
    ys_group_lives(pool, path, y, 2, "y and its group");
}

#[test]
fn a_copy_made_by_copy_ext_keeps_its_own_link_in_the_same_transaction() {
    let (pool, path) = pool("copy-ext-relink");
    let (x, y) = two_pairs(&pool);
    // The copy's buffer is new in this transaction: writing y's bytes over it must not
    // link y's group (the copy's own link comes back as for any other object).
    let c = pool
        .tx(|tx| {
            let c = tx.copy_ext(x)?;
            let theirs = *tx.get(y)?;
            *tx.open(c)? = theirs;
            Ok(c)
        })
        .unwrap();
    assert_eq!(pair(&pool, c), (2, 100), "y's base, the copy's own group");
    pool.tx(|tx| tx.free(c)).unwrap();
    assert_eq!(pair(&pool, y), (2, 200), "y's group lives");
    assert_eq!(pair(&pool, x), (1, 100), "x's group lives");
    assert_eq!(pool.objects().unwrap().len(), 4, "x, y and their groups");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn the_hidden_linked_alloc_takes_no_existing_chain() {
    let (pool, path) = pool("alloc-linked");
    let (_, y) = two_pairs(&pool);
    let r = pool.tx(|tx| {
        let theirs = *tx.get(y)?;
        tx.__alloc_linked(theirs, &pgl::__private::ObjImage::of::<copyable::Pair>())
    });
    assert!(matches!(r, Err(Error::InvalidOid { .. })), "{r:?}");
    ys_group_lives(pool, path, y, 4, "x, y and their groups");
}

#[test]
fn freeing_an_owner_whose_link_is_scribbled_frees_nothing() {
    // The owner's link says which groups are freed with it: free follows it only once the
    // owner's checksum vouches for it, whatever the verify policy (reads outside
    // `Conservative` do not verify).
    for verify in [pgl::VerifyPolicy::Default, pgl::VerifyPolicy::Conservative] {
        freeing_a_scribbled_owner(verify);
    }
}

fn freeing_a_scribbled_owner(verify: pgl::VerifyPolicy) {
    let path = support::test_dir().join(format!("pgl-leds-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = Config::small("link").parity(false).verify(verify);
    let pool = Pool::create(&path, &cfg).unwrap();
    let a = v1_node(&pool, 1, 2, 0, "a");
    let before = pool.objects().unwrap().len();
    let link_at = 16 + core::mem::size_of::<v1::Node>() as u64 - 8;
    pool.inject(&pgl::Fault::ObjectScribble {
        oid: a.raw(),
        at: link_at,
        len: 8,
        seed: 11,
    })
    .unwrap();
    match pool.tx(|tx| tx.free(a)) {
        Err(Error::ChecksumMismatch { offset, .. }) if offset == a.raw() => {}
        other => panic!("{verify:?}: expected the owner's ChecksumMismatch, got {other:?}"),
    }
    assert_eq!(pool.objects().unwrap().len(), before, "nothing was freed");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn the_hidden_linked_alloc_gives_a_new_chain_to_one_owner() {
    let (pool, path) = pool("alloc-linked-twice");
    let (_, y) = two_pairs(&pool);
    // A chain this transaction built, already linked by its owner z: a second owner
    // would share z's group (writes through one show through the other), and freeing
    // either would leave the other linking a freed block, never to be freed itself.
    let r = pool.tx(|tx| {
        let z = tx.alloc_ext(copyable::PairData { a: 3, b: 300 })?;
        let theirs = *tx.get(z)?;
        tx.__alloc_linked(theirs, &pgl::__private::ObjImage::of::<copyable::Pair>())
    });
    assert!(matches!(r, Err(Error::InvalidOid { .. })), "{r:?}");
    ys_group_lives(pool, path, y, 4, "x, y and their groups");
}

// The views hold transaction handles: like them, they stay on the transaction's thread.
static_assertions::assert_not_impl_any!(pgl::Ext<'static, v1::Node>: Send, Sync);
static_assertions::assert_not_impl_any!(pgl::ExtMut<'static, v1::Node>: Send, Sync);

/// An oid of the group type `_of` shows (for naming a group's hidden type, which only
/// `#[extendible]`'s glue does).
fn oid_as<T: Persistent>(_of: pgl::__private::GroupRef<'_, T>, off: u64) -> Oid<T> {
    Oid::from_raw(off)
}

#[test]
fn an_extension_group_is_changed_or_freed_only_through_its_owner() {
    use pgl::__private::{ExtGroups, Extendible};
    let (pool, path) = pool("group-direct");
    let n = v1_node(&pool, 3, 30, 0, "three");
    // 3 attempts, one per way of writing an object, each refused with the group intact.
    let refused = pool
        .tx(|tx| {
            let view = tx.ext(n)?;
            let link = Extendible::__link(&*view);
            let group = oid_as(ExtGroups::__groups(&view).g1, link);
            let opened = tx.open(group).map(drop);
            let freed = tx.free(group);
            Ok((opened, freed, group))
        })
        .unwrap();
    let (opened, freed, group) = refused;
    for (what, r) in [("tx.open", opened), ("tx.free", freed)] {
        match r {
            Err(Error::InvalidOid { reason, .. }) => {
                assert!(reason.contains("through its owner"), "{what}: {reason}")
            }
            other => panic!("{what} of an extension group: {other:?}"),
        }
    }
    match pool.open_mut(group).map(drop) {
        Err(Error::InvalidOid { reason, .. }) => assert!(reason.contains("extension group")),
        other => panic!("pool.open_mut of an extension group: {other:?}"),
    }
    use v1::NodeExtFields as _;
    let name = pool
        .tx(|tx| Ok(tx.ext(n)?.name().as_str().to_owned()))
        .unwrap();
    assert_eq!(name, "three");
    assert_eq!(
        pool.objects().unwrap().len(),
        2,
        "base and group, both live"
    );
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_transaction_reads_the_groups_it_changed_or_created() {
    use v1::NodeExtFields as _;
    let (pool, path) = pool("group-own-writes");
    let n = v1_node(&pool, 4, 40, 0, "four");
    let old = v0_node(&pool, 6, 60).cast::<v1::Node>();
    pool.tx(|tx| {
        // Groups read in place first, then changed: the next read sees the change.
        assert_eq!(tx.ext(n)?.name().as_str(), "four");
        tx.ext_mut(n)?.set_name(PStr::truncating("changed"));
        assert_eq!(tx.ext(n)?.name().as_str(), "changed");
        // A group this transaction created (the upgrade) and then changed.
        assert_eq!(tx.ext(old)?.name().as_str(), "node6");
        tx.ext_mut(old)?.set_name(PStr::truncating("six"));
        assert_eq!(tx.ext(old)?.name().as_str(), "six");
        Ok(())
    })
    .unwrap();
    let names = pool
        .tx(|tx| {
            Ok((
                tx.ext(n)?.name().as_str().to_owned(),
                tx.ext(old)?.name().as_str().to_owned(),
            ))
        })
        .unwrap();
    assert_eq!(names, ("changed".to_owned(), "six".to_owned()));
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_transaction_reads_the_groups_of_a_copy_it_made() {
    use copyable::PairExtFields as _;
    let (pool, path) = pool("copy-ext-read");
    let (x, _) = two_pairs(&pool);
    // copy_ext buffers the copied groups (new, uncommitted): a read of the copy in the
    // same transaction must find them there, not read their blocks in place.
    let (c, read) = pool
        .tx(|tx| {
            let c = tx.copy_ext(x)?;
            let e = tx.ext(c)?;
            Ok((c, (e.a, *e.b())))
        })
        .unwrap();
    assert_eq!(
        read,
        (1, 100),
        "the copy read in the transaction that made it"
    );
    assert_eq!(pair(&pool, c), (1, 100));
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// Two versions of an item whose group 1 `init` calls back into the pool (what `reenter`
/// does): `$v0` without the group, `$v1` with it, `#[extendible]` taking `$args`.
macro_rules! reentrant {
    (@item $id:tt, ($($args:tt)*), $($ext:tt)*) => {
        use pgl::{extendible, Persistent};
        #[extendible($($args)*)]
        #[derive(Persistent)]
        #[pgl(id = $id)]
        #[repr(C)]
        pub struct Item {
            pub key: u32,
            pub _pad: u32,
            $($ext)*
        }
    };
    ($v0:ident, $v1:ident, $id:tt, $args:tt) => {
        mod $v0 {
            reentrant!(@item $id, $args,);
        }

        mod $v1 {
            reentrant!(
                @item $id,
                $args,
                #[extension(1, init = |old| super::reenter(old.key()))]
                pub wide: u64,
            );
        }
    };
}

reentrant!(reentrant0, reentrant1, 0x5eed_0031, ());
// With a reserve: group 1 is built in it (`leds::chain`'s own path for groups kept inline).
reentrant!(reentrant_r0, reentrant_r1, 0x5eed_0032, (reserve = 8));

/// The upgrade an `init` of `reentrant1` or `reentrant_r1` makes through the pool (taken
/// by the first init that runs), and what each gave.
type Reentry = (Option<Box<dyn FnOnce() -> pgl::Result<()>>>, Vec<String>);

thread_local! {
    static REENTER: std::cell::RefCell<Reentry> = const { std::cell::RefCell::new((None, Vec::new())) };
}

/// The inits of `reentrant1` and `reentrant_r1`: run the upgrade the test left (through a
/// captured pool: its `pool.tx` joins the transaction of the upgrade), once.
fn reenter(key: u32) -> u64 {
    let target = REENTER.with(|r| r.borrow_mut().0.take());
    if let Some(upgrade) = target {
        let seen = match upgrade() {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.to_string(),
        };
        REENTER.with(|r| r.borrow_mut().1.push(seen));
    }
    u64::from(key) * 10
}

/// An upgrade of `item` whose init upgrades `nested` (`item` itself, or another old
/// object) through the pool: refused, with the transaction, and nothing upgraded; `wide`
/// reads the widened key once it can (`key * 10`, from `item`'s 32-bit `key`).
fn upgrade_reentering<T: pgl::Extendible>(
    pool: &Pool,
    item: Oid<T>,
    nested: Oid<T>,
    key: u64,
    wide: impl Fn(&pgl::Tx<'_>, Oid<T>) -> pgl::Result<u64>,
) {
    let p = pool.clone();
    REENTER
        .with(|r| r.borrow_mut().0 = Some(Box::new(move || p.tx(|tx| tx.ext(nested).map(drop)))));
    let r = pool.tx(|tx| tx.ext(item).map(drop));
    let seen = REENTER.with(|r| std::mem::take(&mut r.borrow_mut().1));
    assert_eq!(
        seen.len(),
        1,
        "the init ran its nested upgrade once: {seen:?}"
    );
    assert!(seen[0].contains("init"), "{}", seen[0]);
    // The nested failure fails the upgrade's transaction: nothing was upgraded.
    match r {
        Err(Error::Aborted { reason }) => assert!(reason.contains("init"), "{reason}"),
        other => panic!("the upgrade whose init re-entered: {other:?}"),
    }
    assert_eq!(pool.tx(|tx| tx.groups_present(item)).unwrap(), 0);
    assert_eq!(pool.tx(|tx| tx.groups_present(nested)).unwrap(), 0);
    // Without a pool to call back into, the init is an ordinary one.
    assert_eq!(pool.tx(|tx| wide(tx, item)).unwrap(), key * 10);
}

#[test]
fn an_init_that_upgrades_through_the_pool_is_refused_not_a_stack_overflow() {
    let (pool, path) = pool("reenter");
    let item = pool
        .tx(|tx| tx.alloc_ext(reentrant0::ItemData { key: 7, _pad: 0 }))
        .unwrap()
        .cast::<reentrant1::Item>();
    use reentrant1::ItemExtFields as _;
    upgrade_reentering(&pool, item, item, 7, |tx, i| Ok(*tx.ext(i)?.wide()));
    // The same where the group is built in the reserve, for the item itself and for
    // another old item.
    let [item, other] = [7, 8].map(|key| {
        pool.tx(|tx| tx.alloc_ext(reentrant_r0::ItemData { key, _pad: 0 }))
            .unwrap()
            .cast::<reentrant_r1::Item>()
    });
    use reentrant_r1::ItemExtFields as _;
    upgrade_reentering(&pool, item, other, 7, |tx, i| Ok(*tx.ext(i)?.wide()));
    upgrade_reentering(&pool, other, other, 8, |tx, i| Ok(*tx.ext(i)?.wide()));
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn an_upgrade_that_fails_half_way_leaves_no_group_behind() {
    // The upgrade allocates the missing groups before it relinks the base, which fails
    // while the program holds a read handle of it. A program that takes that error in
    // stride and commits must not leave the groups allocated and linked from nowhere.
    use v2::NodeExtFields as _;
    let (pool, path) = pool("half-upgrade");
    let a = v0_node(&pool, 8, 80).cast::<v2::Node>();
    let r = pool.tx(|tx| {
        let base = tx.get(a)?;
        let up = tx.ext(a).map(drop);
        assert!(matches!(up, Err(Error::AlreadyBorrowed { .. })), "{up:?}");
        drop(base);
        Ok(())
    });
    assert!(
        !matches!(r, Err(Error::AlreadyBorrowed { .. })),
        "the closure did not return the error: {r:?}"
    );
    assert_eq!(
        pool.objects().unwrap().len(),
        1,
        "the base alone: no group of the failed upgrade committed ({r:?})"
    );
    assert_eq!(pool.tx(|tx| tx.groups_present(a)).unwrap(), 0);
    assert_eq!(
        pool.tx(|tx| Ok(*tx.ext(a)?.key64())).unwrap(),
        8 + (1 << 40)
    );
    assert_eq!(pool.objects().unwrap().len(), 3);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_free_that_fails_half_way_frees_neither_the_owner_nor_part_of_its_chain() {
    // A `pool.get` handle this thread holds on an object that shares a lock stripe with
    // an owner's group makes freeing the group fail (`LockedByThisThread`) after the
    // owner's own free is recorded. A program that takes the error in stride and commits
    // must not free the owner and leave its groups allocated, owned by no one.
    use pgl::__private::Extendible;
    let path = support::test_dir().join(format!("pgl-leds-half-free-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::new("half-free")).unwrap();
    let owner: Oid<v1::Node> = v1_node(&pool, 0, 0, 0, "owner");
    let g1 = pool
        .tx(|tx| Ok(Extendible::__link(&*tx.get(owner)?)))
        .unwrap();
    let (want, avoid) = (support::lock_stripe(g1), support::lock_stripe(owner.raw()));
    assert_ne!(
        want, avoid,
        "the owner shares its group's stripe: no object can hold that stripe alone"
    );
    let other = support::stripe_mates(&pool, want, avoid)[0];
    let before = pool.objects().unwrap().len();
    let held = pool.get(other).unwrap();
    let r = pool.tx(|tx| {
        let freed = tx.free(owner);
        assert!(
            matches!(freed, Err(Error::LockedByThisThread { .. })),
            "{freed:?}"
        );
        Ok(())
    });
    drop(held);
    assert!(
        !matches!(r, Err(Error::LockedByThisThread { .. })),
        "the closure did not return the error: {r:?}"
    );
    assert_eq!(
        pool.objects().unwrap().len(),
        before,
        "the failed free changed nothing ({r:?})"
    );
    use v1::NodeExtFields as _;
    assert_eq!(
        pool.tx(|tx| Ok(tx.ext(owner)?.name().as_str().to_owned()))
            .unwrap(),
        "owner"
    );
    pool.tx(|tx| tx.free(owner)).unwrap();
    assert_eq!(pool.objects().unwrap().len(), before - 2);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// An item whose group 1 `init` runs what `HIJACK` holds, through the pool it captured.
mod hijack0 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x5eed_0041)]
    #[repr(C)]
    pub struct Item {
        pub key: u32,
        pub _pad: u32,
    }
}

mod hijack1 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x5eed_0041)]
    #[repr(C)]
    pub struct Item {
        pub key: u32,
        pub _pad: u32,
        #[extension(1, init = |old| super::hijack(old.key()))]
        pub wide: u64,
    }
}

/// What `hijack1`'s init does in the transaction of the upgrade.
type Hijack = Box<dyn Fn(&pgl::Tx<'_>) -> pgl::Result<()>>;

thread_local! {
    static HIJACK: std::cell::RefCell<Option<(Pool, Hijack)>> = const { std::cell::RefCell::new(None) };
}

fn hijack(key: u32) -> u64 {
    if let Some((pool, f)) = HIJACK.with(|h| h.borrow_mut().take()) {
        // Its failure fails the upgrade's transaction (a nested `pool.tx`).
        let _ = pool.tx(|tx| f(tx));
    }
    u64::from(key)
}

#[test]
fn an_init_cannot_change_a_group_under_a_reader_of_its_owner() {
    // `tx.ext` reads an object's groups in place under the owner's lock alone: no one
    // writes a group without its owner's write lock. An `init` runs inside an upgrade of
    // another object; through a captured pool it must not be able to open the groups of
    // an owner it does not hold.
    use pgl::__private::{ExtGroups, Extendible};
    use std::sync::mpsc;
    use v1::NodeExtFields as _;
    let (pool, path) = pool("init-hijack");
    let owner = v1_node(&pool, 3, 30, 0, "owner");
    let item = pool
        .tx(|tx| tx.alloc_ext(hijack0::ItemData { key: 7, _pad: 0 }))
        .unwrap()
        .cast::<hijack1::Item>();
    let group = pool
        .tx(|tx| {
            let v = tx.ext(owner)?;
            Ok(oid_as(ExtGroups::__groups(&v).g1, Extendible::__link(&*v)))
        })
        .unwrap();
    let (go, wait) = mpsc::channel::<()>();
    let (done, upgraded) = mpsc::channel::<String>();
    let seen = std::thread::scope(|s| {
        let pool2 = pool.clone();
        s.spawn(move || {
            wait.recv().unwrap();
            let f: Hijack = Box::new(move |tx| {
                tx.open(group)?.name = PStr::truncating("hijacked");
                Ok(())
            });
            HIJACK.with(|h| *h.borrow_mut() = Some((pool2.clone(), f)));
            let r = pool2.tx(|tx| tx.ext(item).map(drop));
            done.send(format!("{r:?}")).unwrap();
        });
        pool.tx(|tx| {
            let v = tx.ext(owner)?;
            let before = v.name().as_str().to_owned();
            go.send(()).unwrap();
            let upgrade = upgraded.recv().unwrap();
            let after = v.name().as_str().to_owned();
            Ok((before, after, upgrade))
        })
        .unwrap()
    });
    let (before, after, upgrade) = seen;
    assert_eq!(
        before, after,
        "a group changed under a reader that holds its owner locked (the upgrade: {upgrade})"
    );
    assert_eq!(
        pool.tx(|tx| Ok(tx.ext(owner)?.name().as_str().to_owned()))
            .unwrap(),
        "owner"
    );
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
