//! What a read of an `#[extendible]` object costs, against a plain `tx.get` of the same
//! bytes: the figures behind the book's "Evolving your structs", "What it costs".
//!
//! ```text
//! cargo bench --bench leds
//! ```
//!
//! One transaction reads the key of each of `PGL_BENCH_READS` nodes (default 16, cached:
//! the same nodes every transaction), in five ways:
//!
//! - `get`: `tx.get(n)?.key` of a plain struct (the native program's read);
//! - `get-twice`: `tx.get(n)?.key`, then `tx.get(n)?.left` (a tree walk's reads of a node;
//!   the figure is per node, so it is the cost of two reads);
//! - `ext_with`: `tx.ext_with(n, |v| *v.key())` of a node that holds its group inline;
//! - `ext_with-dram`: the same read of a v0 node with `upgrade = on_write`, which makes
//!   the widened key in DRAM on every read (`read_through`) and stores nothing;
//! - `ext-dram`: the same through `tx.ext(n)?.key()`, whose view owns its copy;
//! - `ext_with-2groups-dram`: a node whose two groups are both missing.
//!
//! CSV `leds,read,pgl,<way>,<reads>,1,N,ns` (per read, the transaction's fixed cost
//! shared out; median of `PGL_BENCH_RUNS` rounds, default 15, each of which runs every way
//! in turn) and, on stderr, each way's
//! time over `get`'s.
//!
//! Environment: `PGL_BENCH_DIR` (default /dev/shm), `PGL_BENCH_N` (transactions per way
//! and round, default 50000), `PGL_BENCH_WAYS` (a comma-separated subset of the ways; `get` always
//! runs, as the baseline).

use pgl::prelude::*;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

mod v0 {
    use pgl::prelude::*;

    #[extendible(reserve = 24)]
    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0xbe_1ed5)]
    pub struct Node {
        pub key: u32,
        pub _pad: u32,
        pub value: u64,
        pub left: Oid<Node>,
        pub right: Oid<Node>,
    }
}

mod v1 {
    use pgl::prelude::*;

    #[extendible(reserve = 24, upgrade = on_write)]
    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0xbe_1ed5)]
    pub struct Node {
        pub key: u32,
        pub _pad: u32,
        pub value: u64,
        pub left: Oid<Node>,
        pub right: Oid<Node>,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()))]
        pub key64: u64,
    }
}

mod v2 {
    use pgl::prelude::*;

    #[extendible(reserve = 24, upgrade = on_write)]
    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0xbe_1ed5)]
    pub struct Node {
        pub key: u32,
        pub _pad: u32,
        pub value: u64,
        pub left: Oid<Node>,
        pub right: Oid<Node>,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()))]
        pub key64: u64,
        #[extension(2, init = |old| old.key64() ^ old.value())]
        pub tag: u64,
    }
}

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 0xbe_1ed6)]
struct Plain {
    key: u64,
    value: u64,
    left: Oid<Plain>,
    right: Oid<Plain>,
}

use v1::NodeExtFields as _;
use v2::NodeExtFields as _;

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The ns per read that `read` (one transaction of `reads` reads) takes, over `n`
/// transactions.
fn per_read(
    pool: &Pool,
    n: usize,
    reads: usize,
    read: impl Fn(&Tx<'_>) -> pgl::Result<u64>,
) -> pgl::Result<f64> {
    let t = Instant::now();
    for _ in 0..n {
        black_box(pool.tx(|tx| read(tx))?);
    }
    Ok(t.elapsed().as_nanos() as f64 / (n * reads) as f64)
}

fn main() -> pgl::Result<()> {
    let dir = PathBuf::from(std::env::var("PGL_BENCH_DIR").unwrap_or_else(|_| "/dev/shm".into()));
    let n = env_num("PGL_BENCH_N", 50_000).max(1);
    let runs = env_num("PGL_BENCH_RUNS", 15).max(1);
    let reads = env_num("PGL_BENCH_READS", 16).max(1);
    let path = dir.join(format!("pgl-bench-leds-{}.pool", std::process::id()));
    let pool = Pool::reset(&path, &Config::new("bench-leds").size(64 << 20))?;

    let plain: Vec<Oid<Plain>> = (0..reads as u64)
        .map(|k| {
            pool.tx(|tx| {
                tx.alloc(Plain {
                    key: k,
                    value: k,
                    left: Oid::NULL,
                    right: Oid::NULL,
                })
            })
        })
        .collect::<pgl::Result<_>>()?;
    let old = |_: ()| -> pgl::Result<Vec<Oid<v0::Node>>> {
        (0..reads as u32)
            .map(|k| {
                pool.tx(|tx| {
                    tx.alloc_ext(v0::NodeData {
                        key: k,
                        _pad: 0,
                        value: k.into(),
                        left: Oid::NULL,
                        right: Oid::NULL,
                    })
                })
            })
            .collect()
    };
    let upgraded: Vec<Oid<v1::Node>> = old(())?.into_iter().map(Oid::cast).collect();
    pool.tx(|tx| upgraded.iter().try_for_each(|&o| tx.upgrade(o).map(drop)))?;
    let dram1: Vec<Oid<v1::Node>> = old(())?.into_iter().map(Oid::cast).collect();
    let dram2: Vec<Oid<v2::Node>> = old(())?.into_iter().map(Oid::cast).collect();

    type Read<'a> = Box<dyn Fn(&Tx<'_>) -> pgl::Result<u64> + 'a>;
    let ways: [(&str, Read<'_>); 6] = [
        (
            "get",
            Box::new(|tx| plain.iter().try_fold(0, |s, &o| Ok(s ^ tx.get(o)?.key))),
        ),
        (
            "get-twice",
            Box::new(|tx| {
                plain.iter().try_fold(0, |s, &o| {
                    let key = tx.get(o)?.key;
                    Ok(s ^ key ^ tx.get(o)?.left.raw())
                })
            }),
        ),
        (
            "ext_with",
            Box::new(|tx| {
                upgraded
                    .iter()
                    .try_fold(0, |s, &o| Ok(s ^ tx.ext_with(o, |v| *v.key())?))
            }),
        ),
        (
            "ext_with-dram",
            Box::new(|tx| {
                dram1
                    .iter()
                    .try_fold(0, |s, &o| Ok(s ^ tx.ext_with(o, |v| *v.key())?))
            }),
        ),
        (
            "ext-dram",
            Box::new(|tx| dram1.iter().try_fold(0, |s, &o| Ok(s ^ *tx.ext(o)?.key()))),
        ),
        (
            "ext_with-2groups-dram",
            Box::new(|tx| {
                dram2
                    .iter()
                    .try_fold(0, |s, &o| Ok(s ^ tx.ext_with(o, |v| *v.tag())?))
            }),
        ),
    ];
    let chosen = std::env::var("PGL_BENCH_WAYS").unwrap_or_default();
    let ways: Vec<_> = ways
        .into_iter()
        .filter(|(way, _)| {
            *way == "get" || chosen.is_empty() || chosen.split(',').any(|w| w == *way)
        })
        .collect();
    // Round by round, every way in turn: a slow phase of the machine hits them all.
    let mut times = vec![Vec::with_capacity(runs); ways.len()];
    for _ in 0..runs {
        for ((_, read), t) in ways.iter().zip(&mut times) {
            // `get-twice` reads each object twice: ns per object, as the others.
            t.push(per_read(&pool, n, reads, read)?);
        }
    }
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let base = median(&mut times[0]);
    for ((way, _), t) in ways.iter().zip(&mut times) {
        let ns = median(t);
        println!("leds,read,pgl,{way},{reads},1,{n},{ns:.1}");
        eprintln!("{way:>22}: {ns:6.1} ns per read, {:.2}x get", ns / base);
    }
    // Nothing was upgraded in the pool by the reads through DRAM.
    let present = pool.tx(|tx| {
        dram2
            .iter()
            .map(|&o| tx.groups_present(o))
            .sum::<pgl::Result<usize>>()
    })?;
    assert_eq!(present, 0, "a read through DRAM stored a group");
    drop(pool);
    let _ = std::fs::remove_file(&path);
    Ok(())
}
