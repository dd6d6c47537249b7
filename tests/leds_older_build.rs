//! An older build of the program on a pool a newer build has used (a rolled-back deploy),
//! as the book's "Rolling back to an older build" describes it:
//!
//! - `#[extendible]`: the older build reads and writes objects the newer one upgraded or
//!   created, and the groups it does not know survive its copies for the newer build;
//!   a base field a newer group replaced is left as it was (what the older build sees);
//! - Manual: after the switch the older build's root is a clear `Error::RootType`; before it
//!   (the newer build's migration killed midway, in a child process: this test binary
//!   re-run with `PGL_OLDER_BUILD_CHILD=<pool>`), the older build's changes are what the
//!   newer build's next run converts.
//!
//! Each version opens the pool afresh, with its own definitions only, as a separate build
//! would (the definitions share pinned type ids as builds share module paths).

mod support;

use pgl::{Config, Error, Oid, PStr, Pool, Remap};
use std::process::Command;

const CHILD_ENV: &str = "PGL_OLDER_BUILD_CHILD";
/// Objects the killed migration converts before its process dies.
const CONVERTED_BEFORE_KILL: u32 = 120;
const ITEMS: u32 = 400;

mod v1 {
    use pgl::{extendible, PStr, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x01de_b001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, init = |old| PStr::truncating(&format!("node {}", old.key())))]
        pub name: PStr<16>,
    }
}

mod v2 {
    use pgl::{extendible, PStr, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x01de_b001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, init = |old| PStr::truncating(&format!("node {}", old.key())))]
        pub name: PStr<16>,
        #[extension(2, replaces = key, init = |old| u64::from(old.key()))]
        pub key64: u64,
    }
}

mod old {
    use pgl::{Oid, Persistent};
    #[derive(Persistent)]
    #[pgl(id = 0x01de_b010)]
    #[repr(C)]
    pub struct Item {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Item>,
    }
}

mod new {
    use pgl::{Oid, Persistent};
    #[derive(Persistent)]
    #[pgl(id = 0x01de_b011)]
    #[repr(C)]
    pub struct Item {
        pub key: u64,
        pub next: Oid<Item>,
    }
}

fn fresh(name: &str) -> std::path::PathBuf {
    let path = support::test_dir().join(format!("pgl-older-build-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// Root of the extendible pool: raw oids, the same type in every version.
type Root = [u64; 3];

fn set_root(pool: &Pool, i: usize, raw: u64) {
    let root = pool.root::<Root>().unwrap();
    pool.tx(|tx| {
        tx.open(root)?[i] = raw;
        Ok(())
    })
    .unwrap();
}

#[test]
fn an_older_build_works_on_objects_a_newer_build_upgraded_and_keeps_their_groups() {
    let path = fresh("ext");
    // Version 1 stores a node with its name group.
    let pool = Pool::create(&path, &Config::small("older-build")).unwrap();
    let root = pool.root::<Root>().unwrap();
    let a = pool
        .tx(|tx| {
            tx.alloc_ext(v1::NodeData {
                key: 7,
                value: 70,
                name: PStr::truncating("seven"),
            })
        })
        .unwrap();
    set_root(&pool, 0, a.raw());
    drop(pool);

    // Version 2 upgrades it (group 2), widens its key and creates a node of its own.
    let pool = Pool::open(&path, "older-build").unwrap();
    {
        use v2::NodeExtFields as _;
        let a2: Oid<v2::Node> = a.cast();
        pool.tx(|tx| {
            tx.ext_mut(a2)?.set_key(1 << 40);
            Ok(())
        })
        .unwrap();
        let b = pool
            .tx(|tx| {
                tx.alloc_ext(v2::NodeData {
                    value: 1,
                    name: PStr::truncating("bee"),
                    key64: 99,
                })
            })
            .unwrap();
        set_root(&pool, 1, b.raw());
    }
    drop(pool);

    // Version 1 again (rolled back): reads and writes both, copies the newer node.
    let pool = Pool::open(&path, "older-build").unwrap();
    let b1: Oid<v1::Node> = Oid::from_raw(pool.get(root).unwrap()[1]);
    {
        use v1::NodeExtFields as _;
        pool.tx(|tx| {
            let n = tx.ext(a)?;
            assert_eq!(n.name().as_str(), "seven");
            assert_eq!(n.value, 70);
            // The replaced base field kept its value from before the upgrade, and a node
            // version 2 created has it zeroed: the book says so.
            assert_eq!(n.key, 7);
            assert_eq!(tx.ext(b1)?.key, 0);
            Ok(())
        })
        .unwrap();
        pool.tx(|tx| {
            tx.ext_mut(b1)?.set_name(PStr::truncating("renamed"));
            tx.open(b1)?.value = 2;
            tx.open(a)?.key = 8; // not seen by version 2
            Ok(())
        })
        .unwrap();
        let c = pool.tx(|tx| tx.copy_ext(b1)).unwrap();
        set_root(&pool, 2, c.raw());
        assert_eq!(pool.stats().upgrades, 0, "version 1 upgraded nothing");
    }
    drop(pool);

    // Version 2 again: its groups are there, the copy included, with version 1's writes
    // to the fields they share.
    let pool = Pool::open(&path, "older-build").unwrap();
    {
        use v2::NodeExtFields as _;
        let [a, b, c] = *pool.get(root).unwrap();
        pool.tx(|tx| {
            let (a, b, c) = (
                Oid::<v2::Node>::from_raw(a),
                Oid::<v2::Node>::from_raw(b),
                Oid::<v2::Node>::from_raw(c),
            );
            assert_eq!(*tx.ext(a)?.key(), 1 << 40, "the replacing field rules");
            for o in [b, c] {
                let n = tx.ext(o)?;
                assert_eq!((*n.key(), n.value, n.name().as_str()), (99, 2, "renamed"));
                assert_eq!(tx.groups_present(o)?, 2);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(pool.stats().upgrades, 0, "nothing was left to upgrade");
    }
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

/// The old list: root, then `ITEMS` items with keys 0, 1, 2, ...
fn old_list(pool: &Pool) -> Vec<(u32, u32)> {
    let mut v = Vec::new();
    let mut cur = pool.get(pool.root::<old::Item>().unwrap()).unwrap().next;
    while !cur.is_null() {
        let it = pool.get(cur).unwrap();
        v.push((it.key, it.value));
        cur = it.next;
    }
    v
}

/// The newer build's migration; `die_after` converted objects it aborts the process.
fn migrate(pool: &Pool, die_after: Option<u32>) -> pgl::Result<Remap> {
    let mut converted = 0;
    pool.migration()
        .convert(move |o: &old::Item, r: &Remap| {
            converted += 1;
            if Some(converted) == die_after {
                std::process::abort(); // the newer build's process dies midway
            }
            new::Item {
                key: u64::from(o.key) << 8 | u64::from(o.value),
                next: r.oid(o.next),
            }
        })
        .batch(10)
        .run()
}

#[test]
fn older_build_child_entry() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        let pool = Pool::open(&path, "older-build-manual").unwrap();
        migrate(&pool, Some(CONVERTED_BEFORE_KILL)).unwrap();
        unreachable!("the migration aborts the process");
    }
}

#[test]
fn an_older_build_meets_a_manual_migration_before_and_after_its_switch() {
    let path = fresh("manual");
    let pool = Pool::create(&path, &Config::small("older-build-manual")).unwrap();
    let root = pool.root::<old::Item>().unwrap();
    pool.tx(|tx| {
        let mut head = Oid::NULL;
        for key in (0..ITEMS).rev() {
            head = tx.alloc(old::Item {
                key,
                value: 1,
                next: head,
            })?;
        }
        tx.open(root)?.next = head;
        Ok(())
    })
    .unwrap();
    drop(pool);

    // The newer build's migration dies before its switch.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "older_build_child_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the child aborts midway");

    // The older build: the old objects are what it sees, and it changes them.
    let pool = Pool::open(&path, "older-build-manual").unwrap();
    let pending = pool
        .pending_migration()
        .unwrap()
        .expect("the migration is pending");
    assert!(!pending.switched && pending.objects > 0, "{pending:?}");
    assert_eq!(
        old_list(&pool),
        (0..ITEMS).map(|k| (k, 1)).collect::<Vec<_>>()
    );
    pool.tx(|tx| {
        let mut cur = tx.get(root)?.next;
        while !cur.is_null() {
            let mut it = tx.open(cur)?;
            it.value = 2;
            cur = it.next;
        }
        let head = tx.get(root)?.next;
        tx.open(root)?.next = tx.alloc(old::Item {
            key: ITEMS,
            value: 2,
            next: head,
        })?;
        Ok(())
    })
    .unwrap();
    drop(pool);

    // The newer build again: it rolls the interrupted run back and converts it all.
    let pool = Pool::open(&path, "older-build-manual").unwrap();
    let remap = migrate(&pool, None).unwrap();
    assert_eq!(
        remap.len(),
        ITEMS as usize + 2,
        "the root and every item, the new one too"
    );
    let mut keys = Vec::new();
    let mut cur = pool.get(pool.root::<new::Item>().unwrap()).unwrap().next;
    while !cur.is_null() {
        let it = pool.get(cur).unwrap();
        keys.push(it.key);
        cur = it.next;
    }
    let want: Vec<u64> = std::iter::once(ITEMS)
        .chain(0..ITEMS)
        .map(|k| u64::from(k) << 8 | 2)
        .collect();
    assert_eq!(keys, want, "the older build's changes were converted");
    assert_eq!(
        pool.objects().unwrap().len(),
        ITEMS as usize + 2,
        "nothing leaked"
    );
    drop(pool);

    // The older build after the switch: a clear error, not old bytes.
    let pool = Pool::open(&path, "older-build-manual").unwrap();
    match pool.root::<old::Item>() {
        Err(e @ Error::RootType { found, .. }) => {
            assert_eq!(found, 0x01de_b011);
            // Both types are called `Item`: the message tells them apart by their paths,
            // and points at the migration as a reason.
            let msg = e.to_string();
            assert!(
                msg.contains("`leds_older_build::new::Item`")
                    && msg.contains("not `leds_older_build::old::Item`")
                    && msg.contains("migration"),
                "{msg}"
            );
        }
        other => panic!("expected RootType, got {:?}", other.map(drop)),
    }
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
