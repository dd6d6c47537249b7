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
        other => panic!("unknown step {other}"),
    };
    r.unwrap_or_else(|e| panic!("step {step}: {e}"));
    println!("step {step} done");
}

#[test]
fn v0_v1_v2_across_process_runs() {
    let path = support::test_dir().join(format!("pgl-leds-evolve-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let exe = std::env::current_exe().unwrap();
    for step in ["v0", "v1", "v2", "v2-again"] {
        let out = Command::new(&exe)
            .args([
                "leds_evolution_child_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(STEP_ENV, step)
            .env(POOL_ENV, &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("step {step} done")),
            "step {step} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_file(&path).unwrap();
}
