//! v0 → v1 → v2 evolution of an `#[extendible]` struct across real process runs on one
//! pool file. The test re-executes its own binary once per program version
//! (`leds_evolution_child_entry` with `PGL_LEDS_STEP`); each child process opens the pool
//! with the definitions of its version only (`v0`, `v1`, `v2` below, which share a pinned
//! type id exactly as three builds of one program would share a module path), checks what
//! the earlier versions left, and leaves its own changes for the next one.
//!
//! - v0 creates a list of 100 nodes with 32-bit keys.
//! - v1 adds a name (group 1): it reads every base, upgrades the even keys by reading
//!   their names (50 upgrades), and appends 10 nodes created with the full chain.
//! - v2 widens the key (group 2, replacing `key`): every node is read through `key()`;
//!   odd v0 nodes get both groups at once, the rest only group 2 (110 upgrades).
//! - v2 again: nothing left to upgrade.
//!
//! The same with `#[extendible(reserve = 16)]` (`r0`, `r1`, `r2`): group 1 (the widened
//! key) is kept in each node's reserve, group 2 (a name) in an object of its own; a build
//! whose group 1 changed is refused in a later process, and `pgl check` finds the pool
//! sound.

mod support;

use pgl::{Config, Oid, Pool};
use std::process::Command;

const STEP_ENV: &str = "PGL_LEDS_STEP";
const POOL_ENV: &str = "PGL_LEDS_POOL";
const V0_NODES: u32 = 100;
const V1_NODES: u32 = 10;

/// Root: the list head (a raw oid, so that every version reads the same root type) and
/// the number of nodes.
type Root = [u64; 2];

mod v0 {
    use pgl::{extendible, Oid, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_e001)]
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
    #[pgl(id = 0x1ed5_e001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |old| PStr::truncating(&format!("v0 node {}", old.key())))]
        pub name: PStr<16>,
    }
}

mod v2 {
    use pgl::{extendible, Oid, PStr, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_e001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |old| PStr::truncating(&format!("v0 node {}", old.key())))]
        pub name: PStr<16>,
        #[extension(2, replaces = key, init = |old| u64::from(old.key()) << 32)]
        pub key64: u64,
    }
}

/// The reserve variant's versions: group 1 fits the 16-byte reserve, group 2 does not.
mod reserve {
    pub mod r0 {
        use pgl::{extendible, Oid, Persistent};
        #[extendible(reserve = 16)]
        #[derive(Persistent)]
        #[pgl(id = 0x1ed5_e002)]
        #[repr(C)]
        pub struct Node {
            pub key: u32,
            pub value: u32,
            pub next: Oid<Node>,
        }
    }

    pub mod r1 {
        use pgl::{extendible, Oid, Persistent};
        #[extendible(reserve = 16)]
        #[derive(Persistent)]
        #[pgl(id = 0x1ed5_e002)]
        #[repr(C)]
        pub struct Node {
            pub key: u32,
            pub value: u32,
            pub next: Oid<Node>,
            #[extension(1, replaces = key, init = |old| u64::from(old.key()) << 32)]
            pub key64: u64,
        }
    }

    /// `r1` with group 1 changed after objects carry it.
    pub mod r1_changed {
        use pgl::{extendible, Oid, Persistent};
        #[extendible(reserve = 16)]
        #[derive(Persistent)]
        #[pgl(id = 0x1ed5_e002)]
        #[repr(C)]
        pub struct Node {
            pub key: u32,
            pub value: u32,
            pub next: Oid<Node>,
            #[extension(1, replaces = key, init = |old| [old.key(), 0])]
            pub key64: [u32; 2],
        }
    }

    pub mod r2 {
        use pgl::{extendible, Oid, PStr, Persistent};
        #[extendible(reserve = 16)]
        #[derive(Persistent)]
        #[pgl(id = 0x1ed5_e002)]
        #[repr(C)]
        pub struct Node {
            pub key: u32,
            pub value: u32,
            pub next: Oid<Node>,
            #[extension(1, replaces = key, init = |old| u64::from(old.key()) << 32)]
            pub key64: u64,
            #[extension(2, init = |old| PStr::truncating(&format!("node {}", old.key() >> 32)))]
            pub name: PStr<16>,
        }
    }
}

fn run_r0(pool: &Pool) -> pgl::Result<()> {
    use reserve::r0::{Node, NodeData};
    let root = pool.root::<Root>()?;
    pool.tx(|tx| {
        let mut head = Oid::<Node>::NULL;
        for key in (0..V0_NODES).rev() {
            head = tx.alloc_ext(NodeData {
                key,
                value: key * 3,
                next: head,
            })?;
        }
        let mut r = tx.open(root)?;
        r[0] = head.raw();
        r[1] = V0_NODES as u64;
        Ok(())
    })
}

fn run_r1(pool: &Pool) -> pgl::Result<()> {
    use reserve::r1::{Node, NodeData, NodeExtFields as _};
    let root = pool.root::<Root>()?;
    pool.tx(|tx| {
        let mut cur: Oid<Node> = Oid::from_raw(tx.get(root)?[0]);
        let mut last = cur;
        while !cur.is_null() {
            let base = tx.get(cur)?;
            let value = base.value;
            let next = base.next;
            drop(base);
            let k = u64::from(value / 3);
            if k % 2 == 0 {
                assert_eq!(*tx.ext(cur)?.key(), k << 32, "group 1's init ran");
            }
            last = cur;
            cur = next;
        }
        for i in 0..V1_NODES {
            let key = V0_NODES + i;
            let o = tx.alloc_ext(NodeData {
                value: key * 3,
                next: Oid::NULL,
                key64: u64::from(key) << 32,
            })?;
            tx.open(last)?.next = o;
            last = o;
        }
        tx.open(root)?[1] += V1_NODES as u64;
        Ok(())
    })?;
    assert_eq!(pool.stats().upgrades, u64::from(V0_NODES / 2));
    let objects = pool.objects()?.len() as u64;
    assert_eq!(
        objects,
        1 + u64::from(V0_NODES + V1_NODES),
        "group 1 is inline"
    );
    Ok(())
}

fn run_r1_changed(pool: &Pool) -> pgl::Result<()> {
    use reserve::r1_changed::{Node, NodeExtFields as _};
    let root = pool.root::<Root>()?;
    let first: Oid<Node> = pool.tx(|tx| Ok(Oid::from_raw(tx.get(root)?[0])))?;
    match pool.tx(|tx| Ok(*tx.ext(first)?.key())) {
        Err(pgl::Error::LayoutMismatch { group: Some(1), .. }) => Ok(()),
        other => panic!("a changed inline group read as {other:?}"),
    }
}

fn run_r2(pool: &Pool, first: bool) -> pgl::Result<()> {
    use reserve::r2::{Node, NodeExtFields as _};
    let root = pool.root::<Root>()?;
    pool.tx(|tx| {
        let mut cur: Oid<Node> = Oid::from_raw(tx.get(root)?[0]);
        let mut seen = 0u64;
        while !cur.is_null() {
            let n = tx.ext(cur)?;
            let k = u64::from(n.value / 3);
            let want = if first { k << 32 } else { k + 1 };
            assert_eq!(*n.key(), want);
            assert_eq!(n.name().as_str(), format!("node {k}"));
            let next = n.next;
            drop(n);
            if first {
                tx.ext_mut(cur)?.set_key(k + 1);
            }
            seen += 1;
            cur = next;
        }
        assert_eq!(seen, tx.get(root)?[1]);
        Ok(())
    })?;
    let nodes = u64::from(V0_NODES + V1_NODES);
    assert_eq!(pool.stats().upgrades, if first { nodes } else { 0 });
    assert_eq!(
        pool.objects()?.len() as u64,
        1 + 2 * nodes,
        "group 2 is separate"
    );
    Ok(())
}

fn run_v0(pool: &Pool) -> pgl::Result<()> {
    let root = pool.root::<Root>()?;
    pool.tx(|tx| {
        let mut head = Oid::<v0::Node>::NULL;
        for key in (0..V0_NODES).rev() {
            head = tx.alloc_ext(v0::NodeData {
                key,
                value: key * 3,
                next: head,
            })?;
        }
        let mut r = tx.open(root)?;
        r[0] = head.raw();
        r[1] = V0_NODES as u64;
        Ok(())
    })
}

fn run_v1(pool: &Pool) -> pgl::Result<()> {
    use v1::NodeExtFields as _;
    let root = pool.root::<Root>()?;
    pool.tx(|tx| {
        let mut cur: Oid<v1::Node> = Oid::from_raw(tx.get(root)?[0]);
        let mut last = cur;
        let mut seen = 0;
        while !cur.is_null() {
            let base = tx.get(cur)?;
            assert_eq!(base.value, base.key * 3, "v0's data is intact");
            let key = base.key;
            let next = base.next;
            drop(base);
            if key % 2 == 0 {
                assert_eq!(tx.ext(cur)?.name().as_str(), format!("v0 node {key}"));
            }
            seen += 1;
            last = cur;
            cur = next;
        }
        assert_eq!(seen, V0_NODES);
        // Append nodes created by v1, with their chain.
        for i in 0..V1_NODES {
            let key = V0_NODES + i;
            let o = tx.alloc_ext(v1::NodeData {
                key,
                value: key * 3,
                next: Oid::NULL,
                name: pgl::PStr::truncating(&format!("v1 node {key}")),
            })?;
            tx.open(last)?.next = o;
            last = o;
        }
        tx.open(root)?[1] += V1_NODES as u64;
        Ok(())
    })?;
    assert_eq!(pool.stats().upgrades, u64::from(V0_NODES / 2));
    Ok(())
}

fn run_v2(pool: &Pool, first: bool) -> pgl::Result<()> {
    use v2::NodeExtFields as _;
    let root = pool.root::<Root>()?;
    pool.tx(|tx| {
        let mut cur: Oid<v2::Node> = Oid::from_raw(tx.get(root)?[0]);
        let mut seen = 0u64;
        while !cur.is_null() {
            let n = tx.ext(cur)?;
            let value = n.value;
            let key = *n.key();
            if first {
                assert_eq!(key, u64::from(value / 3) << 32, "group 2's init ran");
            } else {
                assert_eq!(key, u64::from(value / 3) + 1, "the first v2 run's update");
            }
            let k = value / 3;
            let who = if k < V0_NODES { "v0" } else { "v1" };
            assert_eq!(n.name().as_str(), format!("{who} node {k}"));
            let next = n.next;
            drop(n);
            if first {
                tx.ext_mut(cur)?.set_key(u64::from(k) + 1);
            }
            seen += 1;
            cur = next;
        }
        assert_eq!(seen, tx.get(root)?[1]);
        Ok(())
    })?;
    let expect = if first {
        u64::from(V0_NODES + V1_NODES)
    } else {
        0
    };
    assert_eq!(pool.stats().upgrades, expect);
    let objects = pool.objects()?.len() as u64;
    assert_eq!(objects, 1 + 3 * u64::from(V0_NODES + V1_NODES));
    Ok(())
}

/// One program version's run (in a child process).
#[test]
fn leds_evolution_child_entry() {
    let (Ok(step), Ok(path)) = (std::env::var(STEP_ENV), std::env::var(POOL_ENV)) else {
        return; // not a child: nothing to do
    };
    let r = match step.as_str() {
        "v0" => Pool::create(&path, &Config::small("evolve")).and_then(|p| run_v0(&p)),
        "v1" => Pool::open(&path, "evolve").and_then(|p| run_v1(&p)),
        "v2" => Pool::open(&path, "evolve").and_then(|p| run_v2(&p, true)),
        "v2-again" => Pool::open(&path, "evolve").and_then(|p| run_v2(&p, false)),
        "r0" => Pool::create(&path, &Config::small("evolve")).and_then(|p| run_r0(&p)),
        "r1" => Pool::open(&path, "evolve").and_then(|p| run_r1(&p)),
        "r1-changed" => Pool::open(&path, "evolve").and_then(|p| run_r1_changed(&p)),
        "r2" => Pool::open(&path, "evolve").and_then(|p| run_r2(&p, true)),
        "r2-again" => Pool::open(&path, "evolve").and_then(|p| run_r2(&p, false)),
        other => panic!("unknown step {other}"),
    };
    r.unwrap_or_else(|e| panic!("step {step}: {e}"));
    println!("step {step} done");
}

#[test]
fn v0_v1_v2_across_process_runs() {
    let path = support::test_dir().join(format!("pgl-leds-evolve-{}", std::process::id()));
    run_steps(&path, &["v0", "v1", "v2", "v2-again"]);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn v0_v1_v2_with_a_reserve_across_process_runs() {
    let path = support::test_dir().join(format!("pgl-leds-evolve-r-{}", std::process::id()));
    run_steps(&path, &["r0", "r1", "r1-changed", "r2", "r2-again"]);
    // The pool is sound for the CLI, which knows no types: inline groups are bytes of
    // their node.
    let out = Command::new(env!("CARGO_BIN_EXE_pgl"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pgl check:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&path).unwrap();
}

/// Runs each program version of `steps`, in order, in a child process on the pool at
/// `path`.
fn run_steps(path: &std::path::Path, steps: &[&str]) {
    let _ = std::fs::remove_file(path);
    let exe = std::env::current_exe().unwrap();
    for &step in steps {
        let out = Command::new(&exe)
            .args([
                "leds_evolution_child_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(STEP_ENV, step)
            .env(POOL_ENV, path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("step {step} done")),
            "step {step} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
