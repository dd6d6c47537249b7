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
//! The three reads through DRAM run on a pool of their own on which no node was ever
//! upgraded, so its registry has never stored the groups they make: the case of data that
//! only `upgrade = on_write` programs read.
//!
//! Then what an upgrade on read (the default policy) adds to a transaction, on nodes of
//! 64 bytes whose group lives in their reserve: `write-field`, a transaction that changes
//! one field of a node (`tx.open(n)?.set_value(..)`, a value it did not hold, so that the
//! node's bytes, checksum and parity all change, as an upgrade's do); `upgrade-on-read`, one that reads
//! the key of a node not yet upgraded (`ext_with`, which upgrades it: one node written);
//! `tx.upgrade`, the upgrade alone, asked for; `upgrade-on-read+write-field`, a read
//! that upgrades and a write of another node in one transaction. CSV
//! `leds,tx,pgl,<way>,64,1,N,ns` (per transaction) and the ratio to `write-field`.
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

/// A version of the node, in module `$m`: `#[extendible($args)]` over the base fields,
/// then `$groups`, its extension fields.
macro_rules! node {
    ($(#[$doc:meta])* $m:ident, ($($args:tt)*), { $($groups:tt)* }) => {
        $(#[$doc])*
        mod $m {
            use pgl::prelude::*;

            #[extendible($($args)*)]
            #[derive(Persistent)]
            #[repr(C)]
            #[pgl(id = 0xbe_1ed5)]
            pub struct Node {
                pub key: u32,
                pub _pad: u32,
                pub value: u64,
                pub left: Oid<Node>,
                pub right: Oid<Node>,
                $($groups)*
            }
        }
    };
}

node!(
    /// The version that wrote the data: 32-bit keys.
    v0, (reserve = 24), {}
);
node!(
    /// The key widened, read through DRAM until written.
    v1, (reserve = 24, upgrade = on_write), {
        #[extension(1, replaces = key, init = |old| u64::from(old.key()))]
        pub key64: u64,
    }
);
node!(
    /// `v1`'s nodes upgraded on read (the default): the first read writes the group.
    v1r, (reserve = 24), {
        #[extension(1, replaces = key, init = |old| u64::from(old.key()))]
        pub key64: u64,
    }
);
node!(
    /// Two groups, both missing from the data.
    v2, (reserve = 24, upgrade = on_write), {
        #[extension(1, replaces = key, init = |old| u64::from(old.key()))]
        pub key64: u64,
        #[extension(2, init = |old| old.key64() ^ old.value())]
        pub tag: u64,
    }
);

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
use v1r::NodeExtFields as _;
use v1r::NodeFields as _;
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

/// What an upgrade on read adds to a transaction: `PGL_BENCH_UPGRADES` transactions a
/// way and round (default 10000), each on nodes of its own, so that every upgrade meets a
/// node not upgraded yet (and every way nodes as cold). ns per transaction, median of the
/// rounds.
fn upgrades(dir: &std::path::Path, runs: usize) -> pgl::Result<()> {
    let k = env_num("PGL_BENCH_UPGRADES", 10_000).max(1);
    let path = dir.join(format!("pgl-bench-leds-up-{}.pool", std::process::id()));
    let pool = Pool::reset(&path, &Config::new("bench-leds-up").size(256 << 20))?;
    let nodes = |count: usize| -> pgl::Result<Vec<Oid<v1r::Node>>> {
        let mut v = Vec::with_capacity(count);
        for chunk in 0..count.div_ceil(1000) {
            let m = (count - chunk * 1000).min(1000);
            v.extend(pool.tx(|tx| {
                (0..m as u32)
                    .map(|i| {
                        let o = tx.alloc_ext(v0::NodeData {
                            key: i,
                            _pad: 0,
                            value: i.into(),
                            left: Oid::NULL,
                            right: Oid::NULL,
                        })?;
                        Ok(o.cast::<v1r::Node>())
                    })
                    .collect::<pgl::Result<Vec<_>>>()
            })?);
        }
        Ok(v)
    };
    // Upgraded beforehand (writing one upgrades nothing), one a transaction: every way
    // meets nodes it has not touched since they were made, as cold in the cache.
    let written = nodes(k * runs)?;
    pool.upgrade_all::<v1r::Node>()?;
    let fresh_read = nodes(k * runs)?;
    let fresh_rw = nodes(k * runs)?;
    let fresh_up = nodes(k * runs)?;
    type Step<'a> = Box<dyn Fn(&Tx<'_>, usize) -> pgl::Result<u64> + 'a>;
    let ways: [(&str, Step<'_>); 4] = [
        (
            "write-field",
            Box::new(|tx, i| {
                tx.open(written[i])?.set_value(!(i as u64));
                Ok(0)
            }),
        ),
        (
            "upgrade-on-read",
            Box::new(|tx, i| tx.ext_with(fresh_read[i], |v| *v.key())),
        ),
        (
            "tx.upgrade",
            Box::new(|tx, i| Ok(u64::from(tx.upgrade(fresh_up[i])?))),
        ),
        (
            "upgrade-on-read+write-field",
            Box::new(|tx, i| {
                let key = tx.ext_with(fresh_rw[i], |v| *v.key())?;
                tx.open(written[i])?.set_value(!(i as u64));
                Ok(key)
            }),
        ),
    ];
    let upgrades_before = pool.stats().upgrades;
    let mut times = vec![Vec::with_capacity(runs); ways.len()];
    for r in 0..runs {
        for ((_, step), t) in ways.iter().zip(&mut times) {
            let start = Instant::now();
            for i in r * k..(r + 1) * k {
                black_box(pool.tx(|tx| step(tx, i))?);
            }
            t.push(start.elapsed().as_nanos() as f64 / k as f64);
        }
    }
    assert_eq!(
        (pool.stats().upgrades - upgrades_before) as usize,
        3 * k * runs,
        "each transaction of the three upgrade ways upgraded one node"
    );
    let mut base = None;
    for ((way, _), t) in ways.iter().zip(&mut times) {
        t.sort_by(f64::total_cmp);
        let ns = t[t.len() / 2];
        let base = *base.get_or_insert(ns);
        println!("leds,tx,pgl,{way},64,1,{k},{ns:.0}");
        eprintln!(
            "{way:>28}: {ns:6.0} ns per transaction, {:.2}x write-field",
            ns / base
        );
    }
    drop(pool);
    let _ = std::fs::remove_file(&path);
    Ok(())
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
    // The reads through DRAM run on a pool of their own, on which no node was ever
    // upgraded: the pool's registry has never stored the groups they make, as with data
    // that only `upgrade = on_write` programs read (the leds_evolution example's `r8+w`).
    let dram_path = dir.join(format!("pgl-bench-leds-dram-{}.pool", std::process::id()));
    let dram_pool = Pool::reset(&dram_path, &Config::new("bench-leds-dram").size(64 << 20))?;
    let old = |pool: &Pool| -> pgl::Result<Vec<Oid<v0::Node>>> {
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
    let upgraded: Vec<Oid<v1::Node>> = old(&pool)?.into_iter().map(Oid::cast).collect();
    pool.tx(|tx| upgraded.iter().try_for_each(|&o| tx.upgrade(o).map(drop)))?;
    let dram1: Vec<Oid<v1::Node>> = old(&dram_pool)?.into_iter().map(Oid::cast).collect();
    let dram2: Vec<Oid<v2::Node>> = old(&dram_pool)?.into_iter().map(Oid::cast).collect();

    type Read<'a> = Box<dyn Fn(&Tx<'_>) -> pgl::Result<u64> + 'a>;
    let ways: [(&str, &Pool, Read<'_>); 6] = [
        (
            "get",
            &pool,
            Box::new(|tx| plain.iter().try_fold(0, |s, &o| Ok(s ^ tx.get(o)?.key))),
        ),
        (
            "get-twice",
            &pool,
            Box::new(|tx| {
                plain.iter().try_fold(0, |s, &o| {
                    let key = tx.get(o)?.key;
                    Ok(s ^ key ^ tx.get(o)?.left.raw())
                })
            }),
        ),
        (
            "ext_with",
            &pool,
            Box::new(|tx| {
                upgraded
                    .iter()
                    .try_fold(0, |s, &o| Ok(s ^ tx.ext_with(o, |v| *v.key())?))
            }),
        ),
        (
            "ext_with-dram",
            &dram_pool,
            Box::new(|tx| {
                dram1
                    .iter()
                    .try_fold(0, |s, &o| Ok(s ^ tx.ext_with(o, |v| *v.key())?))
            }),
        ),
        (
            "ext-dram",
            &dram_pool,
            Box::new(|tx| dram1.iter().try_fold(0, |s, &o| Ok(s ^ *tx.ext(o)?.key()))),
        ),
        (
            "ext_with-2groups-dram",
            &dram_pool,
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
        .filter(|(way, _, _)| {
            *way == "get" || chosen.is_empty() || chosen.split(',').any(|w| w == *way)
        })
        .collect();
    // `get` alone runs only as the others' baseline, or when asked for.
    let ways = if ways.len() > 1 || chosen.is_empty() || chosen.split(',').any(|w| w == "get") {
        ways
    } else {
        Vec::new()
    };
    // Round by round, every way in turn: a slow phase of the machine hits them all.
    let mut times = vec![Vec::with_capacity(runs); ways.len()];
    for _ in 0..runs {
        for ((_, on, read), t) in ways.iter().zip(&mut times) {
            // `get-twice` reads each object twice: ns per object, as the others.
            t.push(per_read(on, n, reads, read)?);
        }
    }
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let base = times.first_mut().map_or(0.0, median);
    for ((way, _, _), t) in ways.iter().zip(&mut times) {
        let ns = median(t);
        println!("leds,read,pgl,{way},{reads},1,{n},{ns:.1}");
        eprintln!("{way:>22}: {ns:6.1} ns per read, {:.2}x get", ns / base);
    }
    // Nothing was upgraded in the pool by the reads through DRAM.
    let present = dram_pool.tx(|tx| {
        dram2
            .iter()
            .map(|&o| tx.groups_present(o))
            .sum::<pgl::Result<usize>>()
    })?;
    assert_eq!(present, 0, "a read through DRAM stored a group");
    drop((pool, dram_pool));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&dram_path);
    if chosen.is_empty() || chosen.split(',').any(|w| w == "upgrades") {
        upgrades(&dir, runs)?;
    }
    Ok(())
}
