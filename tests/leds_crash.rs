//! Crash consistency of the lazy upgrade of `#[extendible]` objects (and of creating,
//! copying and freeing them with their chains): a crash at any fence of the transaction
//! leaves each object either un-upgraded or fully upgraded — every group allocated,
//! initialised and linked — and atomically with the rest of that transaction (a root word
//! it also sets), with no object leaked or lost. A Manual-model migration of two types
//! (a root and the list it heads, a few objects per transaction) leaves what is reachable
//! wholly old or wholly new, and running it again completes it with nothing leaked.
//!
//! Each op runs with a fence hook that captures a crash point at every fence (plus one after
//! the op); every image (nothing pending, everything pending, then random subsets of the
//! pending words) is recovered with `Pool::open_sim` and checked. `PGL_CRASH_STATES` raises
//! the number of images (default 10,000 per op). The upgrade is checked again with
//! `#[extendible(reserve = N)]`, where a group may be written into the base's reserve, and
//! run over the whole pool by `pool.upgrade_all`, whose rerun after a crash finishes it.

mod common;
mod support;

use common::crash::{config, crash_points_of, target_states, Rng};
use pgl::{CrashSim, Oid, PStr, Persistent, Pool};

mod v0 {
    use pgl::{extendible, Oid, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_c001)]
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
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_c001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |old| PStr::truncating(&format!("n{}", old.key())))]
        pub name: PStr<16>,
    }
}

mod v2 {
    use pgl::{extendible, Oid, PStr, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_c001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |old| PStr::truncating(&format!("n{}", old.key())))]
        pub name: PStr<16>,
        #[extension(2, replaces = key, init = |old| old.key() as u64 * 1000)]
        pub key64: u64,
    }
}

use v2::NodeExtFields as _;

/// The same evolution with `#[extendible(reserve = 16)]`: group 1 (the widened key) lives
/// in the node's reserve, group 2 (the name, from the widened key) in an object of its own.
mod reserve {
    pub mod v0 {
        use pgl::{extendible, Persistent};
        #[extendible(reserve = 16)]
        #[derive(Persistent)]
        #[pgl(id = 0x1ed5_c002)]
        #[repr(C)]
        pub struct Node {
            pub key: u32,
            pub value: u32,
        }
    }

    pub mod v1 {
        use pgl::{extendible, Persistent};
        #[extendible(reserve = 16)]
        #[derive(Persistent)]
        #[pgl(id = 0x1ed5_c002)]
        #[repr(C)]
        pub struct Node {
            pub key: u32,
            pub value: u32,
            #[extension(1, replaces = key, init = |old| old.key() as u64 * 1000)]
            pub key64: u64,
        }
    }

    pub mod v2 {
        use pgl::{extendible, PStr, Persistent};
        #[extendible(reserve = 16)]
        #[derive(Persistent)]
        #[pgl(id = 0x1ed5_c002)]
        #[repr(C)]
        pub struct Node {
            pub key: u32,
            pub value: u32,
            #[extension(1, replaces = key, init = |old| old.key() as u64 * 1000)]
            pub key64: u64,
            #[extension(2, init = |old| PStr::truncating(&format!("n{}", old.key())))]
            pub name: PStr<16>,
        }
    }
}

/// The Manual model's types: a head (the root) and its list, before and after.
mod manual {
    use pgl::{Oid, Persistent};
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_c101)]
    #[repr(C)]
    pub struct Head0 {
        pub first: Oid<Item0>,
        pub count: u64,
    }
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_c102)]
    #[repr(C)]
    pub struct Item0 {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Item0>,
    }
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_c103)]
    #[repr(C)]
    pub struct Head1 {
        pub first: Oid<Item1>,
        pub count: u64,
    }
    /// `#[extendible]`: a new object owns a tail, which the roll-back of an interrupted
    /// migration must neither walk nor verify through a torn object.
    #[pgl::extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_c104)]
    #[repr(C)]
    pub struct Item1 {
        pub key: u64,
        pub next: Oid<Item1>,
        pub value: u64,
    }

    /// A type the test's migration leaves alone, and what a later one converts it to.
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_c105)]
    #[repr(C)]
    pub struct Extra0 {
        pub key: u64,
    }
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_c106)]
    #[repr(C)]
    pub struct Extra1 {
        pub key: u64,
        pub double: u64,
    }

    pub fn item1(key: u64, next: Oid<Item1>, value: u64) -> Item1 {
        Item1 {
            key,
            next,
            value,
            __pgl_ext: pgl::__private::ExtLink::NULL,
        }
    }
}

type Root = [u64; 8];
/// Root word the upgrading transaction also sets.
const MARK: usize = 7;
const NODES: usize = 3;

/// A pool on a fresh device with `NODES` v0 nodes (keys 1, 2, 3) in root slots 0..3.
fn setup() -> (std::sync::Arc<CrashSim>, Pool, Oid<Root>, pgl::Config) {
    let cfg = config(1);
    let capacity = cfg.size;
    let sim = CrashSim::new(capacity);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    pool.tx(|tx| {
        let mut r = tx.open(root)?;
        for (i, slot) in r.iter_mut().take(NODES).enumerate() {
            let o = tx.alloc_ext(v0::NodeData {
                key: i as u32 + 1,
                value: 10 * (i as u32 + 1),
                next: Oid::NULL,
            })?;
            *slot = o.raw();
        }
        Ok(())
    })
    .unwrap();
    (sim, pool, root, cfg)
}

/// What one node is after recovery: how many groups it carries, checked for content.
fn node_state(pool: &Pool, root: Oid<Root>, i: usize) -> Result<usize, String> {
    let oid: Oid<v2::Node> = Oid::from_raw(pool.get(root).map_err(|e| e.to_string())?[i]);
    pool.tx(|tx| {
        let n = tx.groups_present(oid)?;
        let base = tx.get(oid)?;
        let key = i as u32 + 1;
        if base.value != 10 * key {
            return Err(pgl::Error::Aborted {
                reason: format!("node {i}: value {}", base.value),
            });
        }
        drop(base);
        if n == 2 {
            // Read the groups without upgrading: they are all there.
            let e = tx.ext(oid)?;
            if *e.key() != key as u64 * 1000 || e.name().as_str() != format!("n{key}") {
                return Err(pgl::Error::Aborted {
                    reason: format!("node {i}: key {} name {:?}", e.key(), e.name().as_str()),
                });
            }
        }
        Ok(n)
    })
    .map_err(|e| e.to_string())
}

/// Runs `op` with crash points captured at every fence, then checks every recovered image
/// with `check`.
fn explore(
    what: &str,
    sim: &CrashSim,
    pool: &Pool,
    cfg: &pgl::Config,
    op: impl FnOnce(&Pool),
    check: impl Fn(&Pool) -> Result<(), String>,
) {
    let ((), mut points) = crash_points_of(sim, || op(pool));
    points.push(sim.crash_point());
    let target = target_states();
    let per_point = (target as usize).div_ceil(points.len()).max(2);
    let mut rng = Rng::new(0x1ed5);
    let (mut states, mut violations) = (0u64, Vec::new());
    for (k, cp) in points.iter().enumerate() {
        for j in 0..per_point {
            let image = match j {
                0 => cp.device(cfg.size, |_| false),
                1 => cp.device(cfg.size, |_| true),
                _ => cp.device(cfg.size, |_| rng.chance(500)),
            };
            states += 1;
            let verdict = match Pool::open_sim_with(&image, cfg) {
                Ok(p) => check(&p).and_then(|()| match p.verify_objects(|_, _| {}) {
                    Ok(bad) if bad.is_empty() => Ok(()),
                    Ok(bad) => Err(format!("damaged objects: {bad:?}")),
                    Err(e) => Err(e.to_string()),
                }),
                Err(e) => Err(format!("recovery failed: {e}")),
            };
            if let Err(e) = verdict {
                violations.push(format!(
                    "point {k} ({} pending), image {j}: {e}",
                    cp.pending()
                ));
            }
        }
    }
    let line = format!(
        "crash states explored: {states} (op: {what}; {} crash points)\n",
        points.len()
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    assert!(
        violations.is_empty(),
        "{} violation(s), first: {:#?}",
        violations.len(),
        &violations[..violations.len().min(5)]
    );
}

#[test]
fn crash_during_an_upgrade_leaves_the_object_unupgraded_or_fully_upgraded() {
    let (sim, pool, root, cfg) = setup();
    // One transaction upgrades node 0 from v0 to v2 (two groups), changes an extension
    // field of it, and sets a root word.
    explore(
        "upgrade v0 -> v2",
        &sim,
        &pool,
        &cfg,
        |pool| {
            pool.tx(|tx| {
                let oid: Oid<v2::Node> = Oid::from_raw(tx.get(root)?[0]);
                let e = tx.ext(oid)?;
                assert_eq!(*e.key(), 1000);
                drop(e);
                tx.open(root)?[MARK] = 42;
                Ok(())
            })
            .unwrap();
        },
        |p| {
            let objects = p.objects().map_err(|e| e.to_string())?.len();
            let mark = p.get(root).map_err(|e| e.to_string())?[MARK];
            let n = node_state(p, root, 0)?;
            match (mark, n, objects) {
                (0, 0, o) if o == 1 + NODES => Ok(()),
                (42, 2, o) if o == 1 + NODES + 2 => Ok(()),
                other => Err(format!("(mark, groups, objects) = {other:?}")),
            }
        },
    );
    assert_eq!(pool.stats().upgrades, 1);
}

/// `pool.upgrade_all` (all three nodes, one batch): a crash leaves every node un-upgraded
/// or every one fully upgraded, and calling it again on the recovered pool finishes the
/// work with nothing leaked.
#[test]
fn crash_during_upgrade_all_leaves_each_batch_undone_or_done_and_a_rerun_finishes() {
    let (sim, pool, root, cfg) = setup();
    explore(
        "upgrade_all v0 -> v2",
        &sim,
        &pool,
        &cfg,
        |pool| assert_eq!(pool.upgrade_all::<v2::Node>().unwrap(), NODES as u64),
        |p| {
            let states = (0..NODES)
                .map(|i| node_state(p, root, i))
                .collect::<Result<Vec<_>, _>>()?;
            let objects = p.objects().map_err(|e| e.to_string())?.len();
            match (states.as_slice(), objects) {
                ([0, 0, 0], o) if o == 1 + NODES => {}
                ([2, 2, 2], o) if o == 1 + 3 * NODES => {}
                other => return Err(format!("(groups per node, objects) = {other:?}")),
            }
            // The rerun upgrades what the crash left undone, and only that.
            let left = if states[0] == 0 { NODES as u64 } else { 0 };
            match p.upgrade_all::<v2::Node>() {
                Ok(n) if n == left => {}
                other => return Err(format!("rerun upgraded {other:?}, not {left}")),
            }
            let after = (0..NODES)
                .map(|i| node_state(p, root, i))
                .collect::<Result<Vec<_>, _>>()?;
            let objects = p.objects().map_err(|e| e.to_string())?.len();
            if after != [2, 2, 2] || objects != 1 + 3 * NODES {
                return Err(format!("after the rerun: {after:?}, {objects} objects"));
            }
            Ok(())
        },
    );
    assert_eq!(pool.stats().upgrades, NODES as u64);
}

#[test]
fn crash_during_a_partial_upgrade_and_during_copy_and_free() {
    let (sim, pool, root, cfg) = setup();
    // Node 1 carries group 1 (written by a v1 program) before the op.
    pool.tx(|tx| {
        let oid: Oid<v1::Node> = Oid::from_raw(tx.get(root)?[1]);
        tx.upgrade(oid).map(drop)
    })
    .unwrap();
    explore(
        "upgrade v1 -> v2",
        &sim,
        &pool,
        &cfg,
        |pool| {
            pool.tx(|tx| {
                let oid: Oid<v2::Node> = Oid::from_raw(tx.get(root)?[1]);
                tx.ext_mut(oid)?.set_name(PStr::truncating("n2"));
                Ok(())
            })
            .unwrap();
        },
        |p| {
            let objects = p.objects().map_err(|e| e.to_string())?.len();
            let oid: Oid<v1::Node> = Oid::from_raw(p.get(root).map_err(|e| e.to_string())?[1]);
            let v1_groups = p
                .tx(|tx| tx.groups_present(oid))
                .map_err(|e| e.to_string())?;
            let n = node_state(p, root, 1)?;
            match (v1_groups, n, objects) {
                (1, 1, o) if o == 1 + NODES + 1 => Ok(()),
                (1, 2, o) if o == 1 + NODES + 2 => Ok(()),
                other => Err(format!("(v1 groups, v2 groups, objects) = {other:?}")),
            }
        },
    );
    // Copy node 1 with its chain into slot 4, in one transaction.
    explore(
        "copy_ext",
        &sim,
        &pool,
        &cfg,
        |pool| {
            pool.tx(|tx| {
                let oid: Oid<v2::Node> = Oid::from_raw(tx.get(root)?[1]);
                let c = tx.copy_ext(oid)?;
                tx.open(root)?[4] = c.raw();
                Ok(())
            })
            .unwrap();
        },
        |p| {
            let objects = p.objects().map_err(|e| e.to_string())?.len();
            let copy = p.get(root).map_err(|e| e.to_string())?[4];
            match (copy, objects) {
                (0, o) if o == 1 + NODES + 2 => Ok(()),
                (c, o) if c != 0 && o == 1 + NODES + 5 => {
                    let c: Oid<v2::Node> = Oid::from_raw(c);
                    p.tx(|tx| Ok((tx.groups_present(c)?, *tx.ext(c)?.key())))
                        .map_err(|e| e.to_string())
                        .and_then(|g| match g {
                            (2, 2000) => Ok(()),
                            other => Err(format!("copy: (groups, key) = {other:?}")),
                        })
                }
                other => Err(format!("(copy, objects) = {other:?}")),
            }
        },
    );
    // Free the copy with its chain.
    explore(
        "free (with the chain)",
        &sim,
        &pool,
        &cfg,
        |pool| {
            pool.tx(|tx| {
                let oid: Oid<v2::Node> = Oid::from_raw(tx.get(root)?[4]);
                tx.free(oid)?;
                tx.open(root)?[4] = 0;
                Ok(())
            })
            .unwrap();
        },
        |p| {
            let objects = p.objects().map_err(|e| e.to_string())?.len();
            let copy = p.get(root).map_err(|e| e.to_string())?[4];
            match (copy, objects) {
                (0, o) if o == 1 + NODES + 2 => Ok(()),
                (c, o) if c != 0 && o == 1 + NODES + 5 => Ok(()),
                other => Err(format!("(copy, objects) = {other:?}")),
            }
        },
    );
}

/// A pool on a fresh device with `NODES` `reserve::v0` nodes (keys 1, 2, 3) in root slots
/// 0..3.
fn setup_reserve() -> (std::sync::Arc<CrashSim>, Pool, Oid<Root>, pgl::Config) {
    let cfg = config(1);
    let sim = CrashSim::new(cfg.size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    pool.tx(|tx| {
        let mut r = tx.open(root)?;
        for (i, slot) in r.iter_mut().take(NODES).enumerate() {
            let o = tx.alloc_ext(reserve::v0::NodeData {
                key: i as u32 + 1,
                value: 10 * (i as u32 + 1),
            })?;
            *slot = o.raw();
        }
        Ok(())
    })
    .unwrap();
    (sim, pool, root, cfg)
}

/// How many groups the reserve node in root slot `slot` carries (0 to 2), each checked
/// for content: value `10 * key`, widened key `key64` (group 1, inline), name `name`
/// (group 2, separate).
fn reserve_node_state(
    pool: &Pool,
    root: Oid<Root>,
    slot: usize,
    (key, key64): (u32, u64),
    name: &str,
) -> Result<usize, String> {
    use reserve::v1::NodeExtFields as _;
    use reserve::v2::NodeExtFields as _;
    let raw = pool.get(root).map_err(|e| e.to_string())?[slot];
    let bad = |reason: String| pgl::Error::Aborted { reason };
    pool.tx(|tx| {
        let oid: Oid<reserve::v2::Node> = Oid::from_raw(raw);
        let n = tx.groups_present(oid)?;
        if tx.get(oid)?.value != 10 * key {
            return Err(bad(format!("slot {slot}: value")));
        }
        // Read with a build that knows the groups present: nothing is upgraded.
        let want = key64;
        match n {
            0 => {}
            1 => {
                let v1: Oid<reserve::v1::Node> = Oid::from_raw(raw);
                let k = *tx.ext(v1)?.key64();
                if k != want {
                    return Err(bad(format!("slot {slot}: key64 {k}")));
                }
            }
            _ => {
                let e = tx.ext(oid)?;
                if *e.key64() != want || e.name().as_str() != name {
                    return Err(bad(format!(
                        "slot {slot}: key64 {} name {:?}",
                        e.key64(),
                        e.name().as_str()
                    )));
                }
            }
        }
        Ok(n)
    })
    .map_err(|e| e.to_string())
}

#[test]
fn crash_during_an_upgrade_into_the_reserve_leaves_the_object_unupgraded_or_fully_upgraded() {
    use reserve::v2::NodeExtFields as _;
    let (sim, pool, root, cfg) = setup_reserve();
    let objects_at = |p: &Pool| p.objects().map(|o| o.len()).map_err(|e| e.to_string());
    let mark_at = |p: &Pool| p.get(root).map(|r| r[MARK]).map_err(|e| e.to_string());
    // Group 1 only, inline: the upgrade writes the node alone.
    explore(
        "upgrade v0 -> v1, into the reserve",
        &sim,
        &pool,
        &cfg,
        |pool| {
            pool.tx(|tx| {
                let oid: Oid<reserve::v1::Node> = Oid::from_raw(tx.get(root)?[0]);
                tx.upgrade(oid)?;
                tx.open(root)?[MARK] = 1;
                Ok(())
            })
            .unwrap();
        },
        |p| {
            let n = reserve_node_state(p, root, 0, (1, 1000), "n1")?;
            match (mark_at(p)?, n, objects_at(p)?) {
                (0, 0, o) | (1, 1, o) if o == 1 + NODES => Ok(()),
                other => Err(format!("(mark, groups, objects) = {other:?}")),
            }
        },
    );
    // Both groups from v0: group 1 into the reserve, group 2 allocated and linked.
    explore(
        "upgrade v0 -> v2, group 1 inline, group 2 separate",
        &sim,
        &pool,
        &cfg,
        |pool| {
            pool.tx(|tx| {
                let oid: Oid<reserve::v2::Node> = Oid::from_raw(tx.get(root)?[1]);
                assert_eq!(*tx.ext(oid)?.key64(), 2000);
                tx.open(root)?[MARK] = 2;
                Ok(())
            })
            .unwrap();
        },
        |p| {
            let n = reserve_node_state(p, root, 1, (2, 2000), "n2000")?;
            match (mark_at(p)?, n, objects_at(p)?) {
                (1, 0, o) if o == 1 + NODES => Ok(()),
                (2, 2, o) if o == 1 + NODES + 1 => Ok(()),
                other => Err(format!("(mark, groups, objects) = {other:?}")),
            }
        },
    );
    // Node 0 (group 1 inline) gains group 2, and its widened key changes in the reserve.
    explore(
        "upgrade v1 -> v2 and a write into the reserve",
        &sim,
        &pool,
        &cfg,
        |pool| {
            pool.tx(|tx| {
                let oid: Oid<reserve::v2::Node> = Oid::from_raw(tx.get(root)?[0]);
                let mut e = tx.ext_mut(oid)?;
                e.set_name(PStr::truncating("renamed"));
                e.set_key64(7);
                tx.open(root)?[MARK] = 3;
                Ok(())
            })
            .unwrap();
        },
        |p| {
            let objects = objects_at(p)?;
            match mark_at(p)? {
                2 => match reserve_node_state(p, root, 0, (1, 1000), "n1")? {
                    1 if objects == 1 + NODES + 1 => Ok(()),
                    n => Err(format!("before: groups {n}, objects {objects}")),
                },
                3 => match reserve_node_state(p, root, 0, (1, 7), "renamed")? {
                    2 if objects == 1 + NODES + 2 => Ok(()),
                    n => Err(format!("after: groups {n}, objects {objects}")),
                },
                m => Err(format!("mark {m}")),
            }
        },
    );
    // A copy (its reserve with the node, its group 2 apart), then freeing it.
    explore(
        "copy_ext of a node with an inline and a separate group",
        &sim,
        &pool,
        &cfg,
        |pool| {
            pool.tx(|tx| {
                let oid: Oid<reserve::v2::Node> = Oid::from_raw(tx.get(root)?[1]);
                let c = tx.copy_ext(oid)?;
                tx.open(root)?[4] = c.raw();
                Ok(())
            })
            .unwrap();
        },
        |p| match (p.get(root).map_err(|e| e.to_string())?[4], objects_at(p)?) {
            (0, o) if o == 1 + NODES + 2 => Ok(()),
            (_, o) if o == 1 + NODES + 4 => reserve_node_state(p, root, 4, (2, 2000), "n2000")
                .and_then(|n| match n {
                    2 => Ok(()),
                    n => Err(format!("the copy carries {n} groups")),
                }),
            other => Err(format!("(copy, objects) = {other:?}")),
        },
    );
    explore(
        "free of a node with an inline and a separate group",
        &sim,
        &pool,
        &cfg,
        |pool| {
            pool.tx(|tx| {
                let oid: Oid<reserve::v2::Node> = Oid::from_raw(tx.get(root)?[4]);
                tx.free(oid)?;
                tx.open(root)?[4] = 0;
                Ok(())
            })
            .unwrap();
        },
        |p| match (p.get(root).map_err(|e| e.to_string())?[4], objects_at(p)?) {
            (0, o) if o == 1 + NODES + 2 => {
                reserve_node_state(p, root, 1, (2, 2000), "n2000").map(drop)
            }
            (c, o) if c != 0 && o == 1 + NODES + 4 => {
                reserve_node_state(p, root, 4, (2, 2000), "n2000").map(drop)
            }
            other => Err(format!("(copy, objects) = {other:?}")),
        },
    );
}

/// The keys of the list under a head of either version, and which version it was.
fn manual_state(p: &Pool) -> Result<(u8, Vec<u64>), String> {
    use manual::*;
    let e = |e: pgl::Error| e.to_string();
    let mut keys = Vec::new();
    let version = match p.root::<Head0>() {
        Ok(h) => {
            let mut cur = p.get(h).map_err(e)?.first;
            while !cur.is_null() {
                let n = p.get(cur).map_err(e)?;
                if u64::from(n.value) != u64::from(n.key) * 10 {
                    return Err(format!("v0 item {}: value {}", n.key, n.value));
                }
                keys.push(u64::from(n.key));
                cur = n.next;
            }
            0
        }
        Err(pgl::Error::RootType { .. }) => {
            let h = p.root::<Head1>().map_err(e)?;
            let mut cur = p.get(h).map_err(e)?.first;
            while !cur.is_null() {
                let n = p.get(cur).map_err(e)?;
                if n.value != (n.key >> 32) * 10 {
                    return Err(format!("v1 item {:#x}: value {}", n.key, n.value));
                }
                keys.push(n.key >> 32);
                cur = n.next;
            }
            1
        }
        Err(err) => return Err(err.to_string()),
    };
    Ok((version, keys))
}

#[test]
fn crash_during_a_manual_migration_leaves_it_old_or_new_and_the_next_run_completes_it() {
    use manual::*;
    // Every read verifies its object: a torn object would fail the run after the crash.
    let cfg = config(1).verify(pgl::VerifyPolicy::Conservative);
    let (sim, pool) = manual_pool(&cfg);
    explore(
        "manual migration of a head and its list, two objects a transaction",
        &sim,
        &pool,
        &cfg,
        |pool| {
            let remap = migrate_manual(pool).unwrap();
            assert_eq!(remap.len(), 5);
        },
        |p| {
            // What a crash left reachable is wholly one version...
            let (version, keys) = manual_state(p)?;
            if keys != [1, 2, 3, 4] {
                return Err(format!("v{version} after the crash: keys {keys:?}"));
            }
            // ...and running the migration again (as the program does at start-up) rolls
            // the interrupted one back or finishes it, then converts what is still old:
            // every object new, none leaked, no journal left.
            migrate_manual(p).map_err(|e| format!("v{version}: migrating again: {e}"))?;
            let (version, keys) = manual_state(p)?;
            let ids: Vec<u32> = p
                .objects()
                .map_err(|e| e.to_string())?
                .iter()
                .map(|(_, h)| h.type_id)
                .collect();
            let want = [Head1::TYPE_ID, Item1::TYPE_ID];
            if version != 1
                || keys != [1, 2, 3, 4]
                || ids.len() != 5
                || ids.iter().any(|i| !want.contains(i))
            {
                return Err(format!(
                    "after migrating again: v{version}, keys {keys:?}, type ids {ids:x?}"
                ));
            }
            Ok(())
        },
    );
}

#[test]
fn an_interrupted_migration_is_rolled_back_by_any_migration_but_finished_only_by_its_own() {
    use manual::*;
    let cfg = config(1);
    let (sim, pool) = manual_pool(&cfg);
    let (_, points) = crash_points_of(&sim, || migrate_manual(&pool).unwrap());
    let ours = [
        Head0::TYPE_ID,
        Item0::TYPE_ID,
        Head1::TYPE_ID,
        Item1::TYPE_ID,
    ];
    let census = |p: &Pool| {
        let objects = p.objects().unwrap();
        let journal = objects
            .iter()
            .filter(|(_, h)| !ours.contains(&h.type_id))
            .count();
        (objects.len(), journal)
    };
    let (mut rolled_back, mut refused) = (0, 0);
    for cp in points.iter() {
        let image = cp.device(cfg.size, |_| false);
        let p = Pool::open_sim_with(&image, &cfg).unwrap();
        let (version, keys) = manual_state(&p).unwrap();
        assert_eq!(keys, [1, 2, 3, 4]);
        let (objects, journal) = census(&p);
        let pending = p.pending_migration().unwrap();
        if journal == 0 {
            assert_eq!(pending, None);
            continue; // before the migration began, or after it ended
        }
        let pending = pending.expect("a journal in the pool is a pending migration");
        assert_eq!(pending.switched, version == 1);
        let news = p
            .objects()
            .unwrap()
            .iter()
            .filter(|(_, h)| h.type_id == Head1::TYPE_ID || h.type_id == Item1::TYPE_ID)
            .count() as u64;
        if pending.switched {
            assert_eq!(
                pending.objects, 5,
                "every pair was recorded before the switch"
            );
            assert_eq!(
                pending.to_free,
                (objects - journal - 5) as u64,
                "old objects left"
            );
        } else {
            assert_eq!(pending.to_free, news, "the new objects to roll back");
        }
        // A migration with no conversions at all: it can still undo an unswitched one...
        let other = p.migration().run();
        if version == 0 {
            assert!(other.is_ok(), "{other:?}");
            assert_eq!(census(&p), (5, 0), "only the old head and items are left");
            assert_eq!(manual_state(&p).unwrap(), (0, vec![1, 2, 3, 4]));
            rolled_back += 1;
        } else if objects > 5 + journal {
            // ...but not free the old objects of a switched one, which needs their types.
            assert!(
                matches!(other, Err(pgl::Error::InvalidConfig { .. })),
                "{other:?}"
            );
            assert_eq!(census(&p), (objects, journal), "nothing changed");
            migrate_manual(&p).unwrap();
            assert_eq!(census(&p), (5, 0));
            assert_eq!(manual_state(&p).unwrap(), (1, vec![1, 2, 3, 4]));
            refused += 1;
        } else {
            // Switched, every old object freed: only the journal is left to delete.
            assert!(other.is_ok(), "{other:?}");
            assert_eq!(census(&p), (5, 0));
        }
    }
    assert!(
        rolled_back > 0 && refused > 0,
        "crash points before ({rolled_back}) and after ({refused}) the switch"
    );
}

#[test]
fn finishing_an_interrupted_migration_goes_on_to_convert_what_is_still_old() {
    use manual::*;
    let cfg = config(1);
    let (sim, pool) = manual_pool(&cfg);
    let (_, points) = crash_points_of(&sim, || migrate_manual(&pool).unwrap());
    let mut finished = 0;
    for cp in points.iter() {
        let image = cp.device(cfg.size, |_| false);
        let p = Pool::open_sim_with(&image, &cfg).unwrap();
        if !matches!(p.pending_migration().unwrap(), Some(m) if m.switched) {
            continue;
        }
        // An object of a type the interrupted migration did not convert, which this
        // run, with one conversion more, does once it has finished that one.
        let extra = p.tx(|tx| tx.alloc(Extra0 { key: 9 })).unwrap();
        let remap = manual_migration(&p)
            .convert(|e: &Extra0, _| Extra1 {
                key: e.key,
                double: 2 * e.key,
            })
            .run()
            .unwrap();
        // (The map holds the finished migration's pairs too; `extra` may sit in the block
        // of an old object it freed, and then maps to its own new object.)
        let extra: Oid<Extra1> = remap.oid(extra);
        assert_eq!(
            (p.get(extra).unwrap().key, p.get(extra).unwrap().double),
            (9, 18)
        );
        assert_eq!(p.pending_migration().unwrap(), None);
        assert_eq!(manual_state(&p).unwrap(), (1, vec![1, 2, 3, 4]));
        let ids: Vec<u32> = p
            .objects()
            .unwrap()
            .iter()
            .map(|(_, h)| h.type_id)
            .collect();
        assert_eq!(ids.len(), 6, "{ids:x?}");
        assert!(!ids.contains(&Extra0::TYPE_ID), "{ids:x?}");
        finished += 1;
    }
    assert!(finished > 0, "no crash point after the switch");
}

#[test]
fn a_damaged_old_object_is_left_and_reported_and_does_not_hold_up_finishing_the_migration() {
    use manual::*;
    let cfg = config(1);
    let (sim, pool) = manual_pool(&cfg);
    let (_, points) = crash_points_of(&sim, || migrate_manual(&pool).unwrap());
    // The first crash point after the switch: every old object is still to free.
    let (device, p) = points
        .iter()
        .map(|cp| {
            let device = cp.device(cfg.size, |_| false);
            let p = Pool::open_sim_with(&device, &cfg).unwrap();
            (device, p)
        })
        .find(|(_, p)| {
            matches!(p.pending_migration().unwrap(), Some(m) if m.switched && m.to_free == 5)
        })
        .expect("a crash point right after the switch");
    let items: Vec<u64> = p
        .objects()
        .unwrap()
        .iter()
        .filter(|(_, h)| h.type_id == Item0::TYPE_ID)
        .map(|&(off, _)| off)
        .collect();
    assert_eq!(items.len(), 4);
    // Three faults, all over old objects' headers: one parity rebuilds (item a), and
    // one beyond it (item b: its header and the parity that covers it, two faults).
    let (a, b) = (items[1], items[2]);
    let header = |oid: u64, seed| pgl::Fault::Scribble {
        offset: oid - 16,
        len: 16,
        seed,
    };
    p.inject(&header(a, 1)).unwrap();
    p.inject(&header(b, 2)).unwrap();
    p.inject(&pgl::Fault::Scribble {
        offset: support::parity_of(&p, b - 16),
        len: 16,
        seed: 3,
    })
    .unwrap();
    // The run finishes the migration all the same: what could be freed is freed, the
    // damaged block is left as it is and reported, and the new data is whole.
    let (remap, points) = crash_points_of(&device, || migrate_manual(&p).unwrap());
    assert_eq!(remap.len(), 5);
    let left = remap.not_freed();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].0, b, "{left:?}");
    assert_eq!(p.pending_migration().unwrap(), None);
    assert_eq!(manual_state(&p).unwrap(), (1, vec![1, 2, 3, 4]));
    let objects = p.objects().unwrap();
    assert_eq!(
        objects.len(),
        6,
        "5 new objects and the damaged block: {objects:x?}"
    );
    assert!(objects.iter().any(|&(off, _)| off == b));
    // All three faults accounted for: one repaired, two reported (b, and its parity).
    assert_eq!(p.stats().objects_repaired, 1);
    let bad = p.verify_objects(|_, _| {}).unwrap();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0].0, b);
    // And the next run has nothing left to do.
    let again = migrate_manual(&p).unwrap();
    assert!(
        again.is_empty() && again.not_freed().is_empty(),
        "{again:?}"
    );
    // A crash anywhere in that run (b left, or marked left in the journal, at any point):
    // the next run finishes it, and reports b while the journal is there to say so.
    for (k, cp) in points.iter().enumerate() {
        let p = Pool::open_sim_with(&cp.device(cfg.size, |_| false), &cfg).unwrap();
        let pending = p.pending_migration().unwrap();
        let remap = migrate_manual(&p).unwrap_or_else(|e| panic!("point {k}: {e}"));
        let left: Vec<u64> = remap.not_freed().iter().map(|l| l.0).collect();
        let want = if pending.is_some() { vec![b] } else { vec![] };
        assert_eq!(left, want, "point {k}");
        assert_eq!(p.pending_migration().unwrap(), None, "point {k}");
        assert_eq!(
            manual_state(&p).unwrap(),
            (1, vec![1, 2, 3, 4]),
            "point {k}"
        );
        assert_eq!(p.objects().unwrap().len(), 6, "point {k}");
    }
    assert!(points.len() > 4, "{} crash points", points.len());
}

/// A pool on a fresh device whose root is a v0 head of four v0 items (keys 1 to 4).
fn manual_pool(cfg: &pgl::Config) -> (std::sync::Arc<CrashSim>, Pool) {
    use manual::*;
    let sim = CrashSim::new(cfg.size);
    let pool = Pool::create_sim(&sim, cfg).unwrap();
    let head = pool.root::<Head0>().unwrap();
    pool.tx(|tx| {
        let mut next = Oid::NULL;
        for key in (1..=4u32).rev() {
            next = tx.alloc(Item0 {
                key,
                value: key * 10,
                next,
            })?;
        }
        let mut h = tx.open(head)?;
        h.first = next;
        h.count = 4;
        Ok(())
    })
    .unwrap();
    (sim, pool)
}

/// The Manual migration of the test's head and list, two objects per transaction (so a
/// crash can fall between any of its steps).
fn migrate_manual(pool: &Pool) -> pgl::Result<pgl::Remap> {
    manual_migration(pool).run()
}

/// `migrate_manual` before its `run`.
fn manual_migration(pool: &Pool) -> pgl::Migration<'_> {
    use manual::*;
    pool.migration()
        .batch(2)
        .convert(|h: &Head0, r| Head1 {
            first: r.oid(h.first),
            count: h.count,
        })
        .convert(|n: &Item0, r| item1(u64::from(n.key) << 32, r.oid(n.next), u64::from(n.value)))
}
