//! The LEDS experiment (Wu et al., "Persistent data retention models", §6): what keeping
//! old data costs when a struct changes, under the Manual model (`pool.migration()`) and
//! under the Automatic model (`#[extendible]`, lazy upgrade).
//!
//! ```text
//! cargo run --release --example leds_evolution
//! ```
//!
//! A v0 program builds two maps with 32-bit keys: a hash map (a bucket array in the root,
//! chained nodes) and a tree map (an unbalanced binary search tree). Version 1 changes the
//! node in one of two ways:
//!
//! - **Layout-Change**: the key becomes 64 bits (every search reads it);
//! - **Layout-Add**: a new 16-byte name field (the workload never reads it).
//!
//! The v1 program then deletes a random share of the keys (10, 25, 50 or 100 %; each
//! deletion searches for its key first). Three runs of it, each on freshly built v0 data:
//!
//! - *native*: the data was converted beforehand by a Manual migration (`P-Retain`), and
//!   the v1 program (`P-Manual`) uses the new layout, stored contiguously;
//! - *Manual*: the cost of that migration, which converts every node whatever the v1
//!   program touches. Overhead = `T(P-Retain) / T(P-Manual)`;
//! - *LEDS*: the v1 program (`P-Auto`) runs on the v0 data with `#[extendible]` nodes that
//!   upgrade on first access. Overhead = `(T(P-Auto) - T(P-Manual)) / T(P-Manual)`.
//!
//! P-Auto runs on nodes declared in up to three ways (`nodes`): `sep`, `#[extendible]` as
//! the paper's LEDS (every extension group a separate object, linked from the node);
//! `r8`, `#[extendible(reserve = 8)]`, whose nodes keep one word for later groups (the
//! widened key's group fits, as the last group a reserve holds needs no link, and lives
//! inline: read with the node, upgraded by writing the node alone; Layout-Add's 16-byte
//! name does not fit and stays a separate object); and, for Layout-Change, `r8+w`, the
//! same nodes declared `upgrade = on_write`: a read shows the widened key made in DRAM
//! and stores nothing, and a node is upgraded in the pool only when written through
//! `tx.ext_mut` (which this workload never does: it rewrites links with `tx.open`). The
//! reserve is the v0 program's choice, made before it knew the change; every row is
//! against the same Manual and native runs.
//!
//! P-Auto reads the key with `tx.ext_with(node, |n| *n.key())`, which makes the node's
//! view where the closure runs (a view returned by `tx.ext` and moved costs more than the
//! read: the book's "Evolving your structs", "What it costs"). `loads%` is P-Auto's
//! overhead on nodes upgraded beforehand: the extra loads alone; the rest of `LEDS%` is
//! the upgrades (allocating or writing and linking the groups), or with `r8+w` the views
//! made in DRAM (every read of a node not upgraded makes one). For Layout-Add it is more
//! than loads: the name never fits the reserve, so every node upgraded beforehand
//! carries a group of its own, which each delete frees with it.
//!
//! NVMM bytes are what the pool wrote to media, in place and to redo records
//! (`stats().bytes_written + bytes_logged`): Manual's are the migration's, LEDS's the
//! difference between its run and the native run (negative where it wrote less: with an
//! added field the v1 program never reads, nothing is upgraded and the nodes stay smaller
//! than the native ones). The maps change a link with its setter
//! (`tx.open(n)?.set_next(to)`), which marks those 8 bytes written: an assignment
//! through the handle (`tx.open(n)?.next = to`) marks the whole value, and the v0 nodes,
//! whose value ends with the extension link, are larger than the native ones, so every
//! such write would count against LEDS bytes its upgrades did not write. `fewer` is
//! `Manual B / LEDS B` (`all`: LEDS wrote nothing more than the native run); `upgraded`
//! is the share of nodes P-Auto upgraded in the pool. Times are the fastest of the
//! repetitions (this machine's noise only ever adds time); each percentage is the median
//! over the repetitions of that repetition's own (its runs are seconds apart, the
//! repetitions minutes, and the machine's slow phases last minutes).
//!
//! The run ends with the targets set for this experiment, each marked `met` or `MISSED`
//! by this run's figures, for each way of declaring the nodes (`r8+w`'s Layout-Add is
//! `r8`'s rows: the same v0 nodes, and the added name does not fit the reserve that
//! `upgrade = on_write` needs, so the program that adds it upgrades on read). Small
//! `PGL_LEDS_N` or `PGL_LEDS_RUNS` make the times (a few milliseconds) mostly noise, and
//! the timed verdicts with them.
//!
//! Environment: `PGL_BENCH_DIR` (default /dev/shm), `PGL_LEDS_N` (keys, default 20000),
//! `PGL_LEDS_RUNS` (repetitions, default 9: between two runs of one build, a percentage
//! moved by up to 13 points with 5 repetitions, by up to 6 with 9), `PGL_BENCH_PARITY`
//! (0: pools without zone parity upkeep), `PGL_LEDS_CASES` (a comma-separated subset of
//! `hash-change`, `hash-add`, `tree-change`, `tree-add`; default all).

use auto_change::{HNodeExtFields as _, TNodeExtFields as _};
use auto_change_r::{HNodeExtFields as _, TNodeExtFields as _};
use auto_change_w::{HNodeExtFields as _, TNodeExtFields as _};
use pgl::prelude::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Buckets of the hash map (its root is the bucket array).
const BUCKETS: usize = 4096;

/// The roots of both maps in a version module: the hash map's bucket array and the
/// tree's top, over that module's `HNode` and `TNode`, with the type ids given.
macro_rules! roots {
    ($hash:tt, $tree:tt) => {
        #[derive(Persistent)]
        #[repr(C)]
        #[pgl(id = $hash)]
        pub struct HRoot {
            pub buckets: [Oid<HNode>; super::BUCKETS],
        }

        #[derive(Persistent)]
        #[repr(C)]
        #[pgl(id = $tree)]
        pub struct TRoot {
            pub top: Oid<TNode>,
            pub count: u64,
        }
    };
}

/// Layout-Change under LEDS, module `$m` with `#[extendible($args)]` nodes: the types
/// and ids of the v0 program's, the key widened by group 1.
macro_rules! leds_change {
    ($m:ident, ($($args:tt)*)) => {
        mod $m {
            use pgl::prelude::*;

            #[pgl::extendible($($args)*)]
            #[derive(Persistent)]
            #[repr(C)]
            #[pgl(id = 0x1ed5_e001)]
            pub struct HNode {
                pub key: u32,
                pub _pad: u32,
                pub value: u64,
                pub next: Oid<HNode>,
                #[extension(1, replaces = key, init = |old| u64::from(old.key()))]
                pub key64: u64,
            }

            #[pgl::extendible($($args)*)]
            #[derive(Persistent)]
            #[repr(C)]
            #[pgl(id = 0x1ed5_e003)]
            pub struct TNode {
                pub key: u32,
                pub _pad: u32,
                pub value: u64,
                pub left: Oid<TNode>,
                pub right: Oid<TNode>,
                #[extension(1, replaces = key, init = |old| u64::from(old.key()))]
                pub key64: u64,
            }

            roots!(0x1ed5_e002, 0x1ed5_e004);
        }
    };
}

/// The three LEDS versions of the nodes, their `#[extendible]` taking `$args`: `$v0`, the
/// program that built the data (32-bit keys; its nodes are `#[extendible]` from the start,
/// as LEDS requires of a struct that may gain fields); `$change`, Layout-Change under
/// LEDS (`leds_change!`); `$add`, Layout-Add under LEDS (a name added by group 1).
macro_rules! leds_versions {
    ($v0:ident, $change:ident, $add:ident, ($($args:tt)*)) => {
        mod $v0 {
            use pgl::prelude::*;

            #[pgl::extendible($($args)*)]
            #[derive(Persistent)]
            #[repr(C)]
            #[pgl(id = 0x1ed5_e001)]
            pub struct HNode {
                pub key: u32,
                pub _pad: u32,
                pub value: u64,
                pub next: Oid<HNode>,
            }

            #[pgl::extendible($($args)*)]
            #[derive(Persistent)]
            #[repr(C)]
            #[pgl(id = 0x1ed5_e003)]
            pub struct TNode {
                pub key: u32,
                pub _pad: u32,
                pub value: u64,
                pub left: Oid<TNode>,
                pub right: Oid<TNode>,
            }

            roots!(0x1ed5_e002, 0x1ed5_e004);
        }

        leds_change!($change, ($($args)*));

        mod $add {
            use pgl::prelude::*;

            #[pgl::extendible($($args)*)]
            #[derive(Persistent)]
            #[repr(C)]
            #[pgl(id = 0x1ed5_e001)]
            pub struct HNode {
                pub key: u32,
                pub _pad: u32,
                pub value: u64,
                pub next: Oid<HNode>,
                #[extension(1, init = [0u8; 16])]
                pub name: [u8; 16],
            }

            #[pgl::extendible($($args)*)]
            #[derive(Persistent)]
            #[repr(C)]
            #[pgl(id = 0x1ed5_e003)]
            pub struct TNode {
                pub key: u32,
                pub _pad: u32,
                pub value: u64,
                pub left: Oid<TNode>,
                pub right: Oid<TNode>,
                #[extension(1, init = [0u8; 16])]
                pub name: [u8; 16],
            }

            roots!(0x1ed5_e002, 0x1ed5_e004);
        }
    };
}

// As the paper's LEDS: every group a separate object.
leds_versions!(v0, auto_change, auto_add, ());
// With room for the widened key in each node: the group lives inline (`RESERVE`).
leds_versions!(v0r, auto_change_r, auto_add_r, (reserve = 8));
// The same nodes (the v0 data is `v0r`'s), upgraded in the pool only when written: a read
// shows the widened key made in DRAM. (Layout-Add's name does not fit the reserve, which
// `upgrade = on_write` needs; its workload never reads the name, so it would run as
// `auto_add_r` does.)
leds_change!(auto_change_w, (reserve = 8, upgrade = on_write));

/// The reserve of the second LEDS variant: one word, which the widened key's group fits
/// (the last group a reserve holds ends without its link); Layout-Add's 16-byte name does
/// not (its group stays a separate object, which its workload never reads).
const RESERVE: usize = 8;

/// Layout-Change as the Manual model stores it: new types, written contiguously.
mod native_change {
    use pgl::prelude::*;

    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0x1ed5_e011)]
    pub struct HNode {
        pub key: u64,
        pub value: u64,
        pub next: Oid<HNode>,
    }

    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0x1ed5_e013)]
    pub struct TNode {
        pub key: u64,
        pub value: u64,
        pub left: Oid<TNode>,
        pub right: Oid<TNode>,
    }

    roots!(0x1ed5_e012, 0x1ed5_e014);
}

/// Layout-Add as the Manual model stores it.
mod native_add {
    use pgl::prelude::*;

    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0x1ed5_e021)]
    pub struct HNode {
        pub key: u32,
        pub _pad: u32,
        pub value: u64,
        pub next: Oid<HNode>,
        pub name: [u8; 16],
    }

    #[derive(Persistent)]
    #[repr(C)]
    #[pgl(id = 0x1ed5_e023)]
    pub struct TNode {
        pub key: u32,
        pub _pad: u32,
        pub value: u64,
        pub left: Oid<TNode>,
        pub right: Oid<TNode>,
        pub name: [u8; 16],
    }

    roots!(0x1ed5_e022, 0x1ed5_e024);
}

// ---------------------------------------------------------------------------------------
// The maps, written once over every version of their nodes.

/// What the hash map needs of a version of its node and root.
trait HashV {
    type Node: Persistent;
    type Root: Persistent;
    fn key(tx: &Tx<'_>, n: Oid<Self::Node>) -> pgl::Result<u64>;
    fn next(tx: &Tx<'_>, n: Oid<Self::Node>) -> pgl::Result<Oid<Self::Node>>;
    fn set_next(tx: &Tx<'_>, n: Oid<Self::Node>, to: Oid<Self::Node>) -> pgl::Result<()>;
    fn bucket(root: &Self::Root, b: usize) -> Oid<Self::Node>;
}

/// What the tree map needs of a version of its node and root.
trait TreeV {
    type Node: Persistent;
    type Root: Persistent;
    fn key(tx: &Tx<'_>, n: Oid<Self::Node>) -> pgl::Result<u64>;
    fn left(tx: &Tx<'_>, n: Oid<Self::Node>) -> pgl::Result<Oid<Self::Node>>;
    fn right(tx: &Tx<'_>, n: Oid<Self::Node>) -> pgl::Result<Oid<Self::Node>>;
    fn set_left(tx: &Tx<'_>, n: Oid<Self::Node>, to: Oid<Self::Node>) -> pgl::Result<()>;
    fn set_right(tx: &Tx<'_>, n: Oid<Self::Node>, to: Oid<Self::Node>) -> pgl::Result<()>;
    fn top(root: &Self::Root) -> Oid<Self::Node>;
}

/// Implements both traits for the types of module `$m`, reading the key with `$key`.
macro_rules! versions {
    ($hash:ident, $tree:ident, $m:ident, |$tx:ident, $n:ident| $key:expr) => {
        struct $hash;
        impl HashV for $hash {
            type Node = $m::HNode;
            type Root = $m::HRoot;
            fn key($tx: &Tx<'_>, $n: Oid<$m::HNode>) -> pgl::Result<u64> {
                $key
            }
            fn next(tx: &Tx<'_>, n: Oid<$m::HNode>) -> pgl::Result<Oid<$m::HNode>> {
                Ok(tx.get(n)?.next)
            }
            fn set_next(tx: &Tx<'_>, n: Oid<$m::HNode>, to: Oid<$m::HNode>) -> pgl::Result<()> {
                use $m::HNodeFields as _;
                tx.open(n)?.set_next(to);
                Ok(())
            }
            fn bucket(root: &$m::HRoot, b: usize) -> Oid<$m::HNode> {
                root.buckets[b]
            }
        }
        struct $tree;
        impl TreeV for $tree {
            type Node = $m::TNode;
            type Root = $m::TRoot;
            fn key($tx: &Tx<'_>, $n: Oid<$m::TNode>) -> pgl::Result<u64> {
                $key
            }
            fn left(tx: &Tx<'_>, n: Oid<$m::TNode>) -> pgl::Result<Oid<$m::TNode>> {
                Ok(tx.get(n)?.left)
            }
            fn right(tx: &Tx<'_>, n: Oid<$m::TNode>) -> pgl::Result<Oid<$m::TNode>> {
                Ok(tx.get(n)?.right)
            }
            fn set_left(tx: &Tx<'_>, n: Oid<$m::TNode>, to: Oid<$m::TNode>) -> pgl::Result<()> {
                use $m::TNodeFields as _;
                tx.open(n)?.set_left(to);
                Ok(())
            }
            fn set_right(tx: &Tx<'_>, n: Oid<$m::TNode>, to: Oid<$m::TNode>) -> pgl::Result<()> {
                use $m::TNodeFields as _;
                tx.open(n)?.set_right(to);
                Ok(())
            }
            fn top(root: &$m::TRoot) -> Oid<$m::TNode> {
                root.top
            }
        }
    };
}

versions!(
    HashNativeChange,
    TreeNativeChange,
    native_change,
    |tx, n| Ok(tx.get(n)?.key)
);
versions!(HashNativeAdd, TreeNativeAdd, native_add, |tx, n| Ok(
    u64::from(tx.get(n)?.key)
));
versions!(HashAutoChange, TreeAutoChange, auto_change, |tx, n| tx
    .ext_with(n, |e| *e.key()));
versions!(HashAutoAdd, TreeAutoAdd, auto_add, |tx, n| Ok(u64::from(
    tx.get(n)?.key
)));
versions!(HashAutoChangeR, TreeAutoChangeR, auto_change_r, |tx, n| tx
    .ext_with(n, |e| *e.key()));
versions!(HashAutoAddR, TreeAutoAddR, auto_add_r, |tx, n| Ok(
    u64::from(tx.get(n)?.key)
));
versions!(HashAutoChangeW, TreeAutoChangeW, auto_change_w, |tx, n| tx
    .ext_with(n, |e| *e.key()));

fn bucket_of(key: u64) -> usize {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize % BUCKETS
}

/// Deletes `key` from the hash map; whether it was there.
fn hash_delete<V: HashV>(tx: &Tx<'_>, root: Oid<V::Root>, key: u64) -> pgl::Result<bool> {
    let b = bucket_of(key);
    let mut prev = Oid::NULL;
    let mut cur = V::bucket(&*tx.get(root)?, b);
    while !cur.is_null() {
        let next = V::next(tx, cur)?;
        if V::key(tx, cur)? == key {
            if prev.is_null() {
                tx.write_at(root, b * 8, &next)?;
            } else {
                V::set_next(tx, prev, next)?;
            }
            tx.free(cur)?;
            return Ok(true);
        }
        prev = cur;
        cur = next;
    }
    Ok(false)
}

/// Deletes `key` from the tree map (the node is unlinked, its in-order successor moved
/// into its place, no key copied); whether it was there.
fn tree_delete<V: TreeV>(tx: &Tx<'_>, root: Oid<V::Root>, key: u64) -> pgl::Result<bool> {
    let mut parent: Option<(Oid<V::Node>, bool)> = None;
    let mut cur = V::top(&*tx.get(root)?);
    loop {
        if cur.is_null() {
            return Ok(false);
        }
        let k = V::key(tx, cur)?;
        if k == key {
            break;
        }
        let left = key < k;
        parent = Some((cur, left));
        cur = if left {
            V::left(tx, cur)?
        } else {
            V::right(tx, cur)?
        };
    }
    let (l, r) = (V::left(tx, cur)?, V::right(tx, cur)?);
    let replacement = if l.is_null() {
        r
    } else if r.is_null() {
        l
    } else {
        let (mut sp, mut s) = (cur, r);
        loop {
            let sl = V::left(tx, s)?;
            if sl.is_null() {
                break;
            }
            sp = s;
            s = sl;
        }
        if sp != cur {
            V::set_left(tx, sp, V::right(tx, s)?)?;
            V::set_right(tx, s, r)?;
        }
        V::set_left(tx, s, l)?;
        s
    };
    match parent {
        None => tx.open(root)?.write_at(0, &replacement),
        Some((p, true)) => V::set_left(tx, p, replacement)?,
        Some((p, false)) => V::set_right(tx, p, replacement)?,
    }
    tx.free(cur)?;
    Ok(true)
}

// ---------------------------------------------------------------------------------------
// The experiment.

#[derive(Clone, Copy, PartialEq)]
enum Map {
    Hash,
    Tree,
}

#[derive(Clone, Copy, PartialEq)]
enum Change {
    /// The key widened to 64 bits.
    Change,
    /// A 16-byte name added.
    Add,
}

/// How P-Auto's nodes are declared.
#[derive(Clone, Copy, PartialEq)]
enum Nodes {
    /// `#[extendible]`: every group a separate object, as the paper's LEDS.
    Separate,
    /// `#[extendible(reserve = 8)]`: a group that fits lives in the node.
    Reserve,
    /// `#[extendible(reserve = 8, upgrade = on_write)]`: the same nodes, upgraded in the
    /// pool only when written (Layout-Change only: Layout-Add's name does not fit).
    OnWrite,
}

impl Nodes {
    /// The ways of declaring the nodes that `change` runs with.
    fn for_change(change: Change) -> &'static [Nodes] {
        match change {
            Change::Change => &[Nodes::Separate, Nodes::Reserve, Nodes::OnWrite],
            Change::Add => &[Nodes::Separate, Nodes::Reserve],
        }
    }

    /// Whether the v0 program's nodes have the reserve.
    fn reserve(self) -> bool {
        self != Nodes::Separate
    }

    /// The table's `nodes` column.
    fn label(self) -> &'static str {
        match self {
            Nodes::Separate => "sep",
            Nodes::Reserve => "r8",
            Nodes::OnWrite => "r8+w",
        }
    }
}

/// A small deterministic generator (xorshift64*), so every run sees the same keys.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// `n` distinct random 32-bit keys.
    fn keys(&mut self, n: usize) -> Vec<u32> {
        let mut seen = std::collections::HashSet::with_capacity(n);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let k = self.next() as u32;
            if seen.insert(k) {
                out.push(k);
            }
        }
        out
    }
}

/// The v0 program's work on `pool`, with the types of module `$m`: `$map` with every key
/// of `$setup`.
macro_rules! fill_map {
    ($setup:expr, $pool:expr, $map:expr, $m:ident) => {{
        let pool = $pool;
        let map = $map;
        match map {
            Map::Hash => {
                let root = pool.root::<$m::HRoot>()?;
                for &key in &$setup.keys {
                    pool.tx(|tx| {
                        let b = bucket_of(u64::from(key));
                        let head = tx.get(root)?.buckets[b];
                        let n = tx.alloc_ext($m::HNodeData {
                            key,
                            _pad: 0,
                            value: u64::from(key) * 3,
                            next: head,
                        })?;
                        tx.write_at(root, b * 8, &n)?;
                        Ok(())
                    })?;
                }
            }
            Map::Tree => {
                let root = pool.root::<$m::TRoot>()?;
                for &key in &$setup.keys {
                    pool.tx(|tx| {
                        let n = tx.alloc_ext($m::TNodeData {
                            key,
                            _pad: 0,
                            value: u64::from(key) * 3,
                            left: Oid::NULL,
                            right: Oid::NULL,
                        })?;
                        let mut cur = tx.get(root)?.top;
                        if cur.is_null() {
                            tx.open(root)?.top = n;
                        }
                        while !cur.is_null() {
                            let c = tx.get(cur)?;
                            let (left, child) = if key < c.key {
                                (true, c.left)
                            } else {
                                (false, c.right)
                            };
                            drop(c);
                            if child.is_null() {
                                let mut c = tx.open(cur)?;
                                if left {
                                    c.left = n;
                                } else {
                                    c.right = n;
                                }
                                break;
                            }
                            cur = child;
                        }
                        tx.open(root)?.count += 1;
                        Ok(())
                    })?;
                }
            }
        }
    }};
}

struct Setup {
    dir: PathBuf,
    keys: Vec<u32>,
}

impl Setup {
    fn config(&self) -> Config {
        // Large lanes: the Manual migration runs in a handful of big transactions.
        let mut c = Config::new("leds-evolution").size(128 << 20);
        c.lanes = 2;
        c.lane_size = 16 << 20;
        c.parity = std::env::var("PGL_BENCH_PARITY").map_or(true, |v| v != "0");
        c
    }

    fn path(&self) -> PathBuf {
        self.dir
            .join(format!("pgl-leds-evolution-{}.pool", std::process::id()))
    }

    /// The v0 program: a fresh pool holding `map` with every key (not timed), its nodes
    /// with a reserve if `reserve`.
    fn build(&self, map: Map, reserve: bool) -> pgl::Result<Pool> {
        let pool = Pool::reset(self.path(), &self.config())?;
        if reserve {
            fill_map!(self, &pool, map, v0r);
        } else {
            fill_map!(self, &pool, map, v0);
        }
        Ok(pool)
    }
}

/// NVMM bytes the pool has written since it was opened.
fn nvmm_bytes(pool: &Pool) -> u64 {
    let s = pool.stats();
    s.bytes_written + s.bytes_logged
}

/// The v1 program's work: deletes each of `keys`, one transaction each; the time taken.
fn workload<R: Persistent>(
    pool: &Pool,
    keys: &[u32],
    delete: impl Fn(&Tx<'_>, Oid<R>, u64) -> pgl::Result<bool>,
) -> pgl::Result<Duration> {
    let root = pool.root::<R>()?;
    let t = Instant::now();
    for &key in keys {
        let found = pool.tx(|tx| delete(tx, root, u64::from(key)))?;
        assert!(found, "key {key} is missing: the retained data lost it");
    }
    Ok(t.elapsed())
}

/// One run of every program for one map, change and working set. The LEDS runs are
/// `Nodes::for_change`'s, in its order.
struct Sample {
    retain: Duration,
    native: Duration,
    retain_bytes: u64,
    native_bytes: u64,
    auto: Vec<Auto>,
}

/// P-Auto's run, and the same on nodes upgraded beforehand (`access`: the extra loads
/// alone).
struct Auto {
    time: Duration,
    access: Duration,
    /// NVMM bytes of the run.
    bytes: u64,
    upgrades: u64,
}

/// Manual: migrate every node and the root of `map`.
fn migrate(pool: &Pool, map: Map, change: Change) -> pgl::Result<usize> {
    let m = pool.migration();
    let remap = match (map, change) {
        (Map::Hash, Change::Change) => m
            .convert(|n: &v0::HNode, r| native_change::HNode {
                key: u64::from(n.key),
                value: n.value,
                next: r.oid(n.next),
            })
            .convert(|h: &v0::HRoot, r| native_change::HRoot {
                buckets: h.buckets.map(|b| r.oid(b)),
            })
            .run()?,
        (Map::Hash, Change::Add) => m
            .convert(|n: &v0::HNode, r| native_add::HNode {
                key: n.key,
                _pad: 0,
                value: n.value,
                next: r.oid(n.next),
                name: [0; 16],
            })
            .convert(|h: &v0::HRoot, r| native_add::HRoot {
                buckets: h.buckets.map(|b| r.oid(b)),
            })
            .run()?,
        (Map::Tree, Change::Change) => m
            .convert(|n: &v0::TNode, r| native_change::TNode {
                key: u64::from(n.key),
                value: n.value,
                left: r.oid(n.left),
                right: r.oid(n.right),
            })
            .convert(|t: &v0::TRoot, r| native_change::TRoot {
                top: r.oid(t.top),
                count: t.count,
            })
            .run()?,
        (Map::Tree, Change::Add) => m
            .convert(|n: &v0::TNode, r| native_add::TNode {
                key: n.key,
                _pad: 0,
                value: n.value,
                left: r.oid(n.left),
                right: r.oid(n.right),
                name: [0; 16],
            })
            .convert(|t: &v0::TRoot, r| native_add::TRoot {
                top: r.oid(t.top),
                count: t.count,
            })
            .run()?,
    };
    Ok(remap.len())
}

fn sample(setup: &Setup, map: Map, change: Change, work: &[u32]) -> pgl::Result<Sample> {
    // Manual: P-Retain, then P-Manual on the converted data.
    let pool = setup.build(map, false)?;
    let before = nvmm_bytes(&pool);
    let t = Instant::now();
    let converted = migrate(&pool, map, change)?;
    let retain = t.elapsed();
    assert_eq!(converted, setup.keys.len() + 1, "every node and the root");
    let retain_bytes = nvmm_bytes(&pool) - before;
    let (native, native_bytes) = measured(&pool, || match (map, change) {
        (Map::Hash, Change::Change) => workload(&pool, work, hash_delete::<HashNativeChange>),
        (Map::Hash, Change::Add) => workload(&pool, work, hash_delete::<HashNativeAdd>),
        (Map::Tree, Change::Change) => workload(&pool, work, tree_delete::<TreeNativeChange>),
        (Map::Tree, Change::Add) => workload(&pool, work, tree_delete::<TreeNativeAdd>),
    })?;
    drop(pool);
    let auto = Nodes::for_change(change)
        .iter()
        .map(|&nodes| auto_run(setup, map, change, work, nodes))
        .collect::<pgl::Result<_>>()?;
    Ok(Sample {
        retain,
        native,
        retain_bytes,
        native_bytes,
        auto,
    })
}

/// P-Auto on the v0 data (its nodes declared as `nodes` says), then the same on data
/// upgraded beforehand (untimed).
fn auto_run(
    setup: &Setup,
    map: Map,
    change: Change,
    work: &[u32],
    nodes: Nodes,
) -> pgl::Result<Auto> {
    // The workload over the hash map's `$hash` or the tree's `$tree` nodes, their
    // `HNode`/`TNode` in module `$m` upgraded beforehand with `$pre`.
    macro_rules! delete {
        ($pool:expr, $m:ident, $hash:ty, $tree:ty, $pre:expr) => {{
            let pool = $pool;
            match map {
                Map::Hash => {
                    if $pre {
                        pool.upgrade_all::<$m::HNode>()?;
                    }
                    measured(pool, || workload(pool, work, hash_delete::<$hash>))
                }
                Map::Tree => {
                    if $pre {
                        pool.upgrade_all::<$m::TNode>()?;
                    }
                    measured(pool, || workload(pool, work, tree_delete::<$tree>))
                }
            }
        }};
    }
    // Timed on the v0 data as built (`pre` false), or upgraded first.
    let run = |pool: &Pool, pre: bool| match (change, nodes) {
        (Change::Change, Nodes::Separate) => {
            delete!(pool, auto_change, HashAutoChange, TreeAutoChange, pre)
        }
        (Change::Change, Nodes::Reserve) => {
            delete!(pool, auto_change_r, HashAutoChangeR, TreeAutoChangeR, pre)
        }
        (Change::Change, Nodes::OnWrite) => {
            delete!(pool, auto_change_w, HashAutoChangeW, TreeAutoChangeW, pre)
        }
        (Change::Add, Nodes::Separate) => delete!(pool, auto_add, HashAutoAdd, TreeAutoAdd, pre),
        // Not asked for (`Nodes::for_change`): the name does not fit the reserve, and the
        // workload never reads it, so the nodes would be `auto_add_r`'s.
        (Change::Add, Nodes::Reserve | Nodes::OnWrite) => {
            delete!(pool, auto_add_r, HashAutoAddR, TreeAutoAddR, pre)
        }
    };
    let pool = setup.build(map, nodes.reserve())?;
    let upgrades = pool.stats().upgrades;
    let (time, bytes) = run(&pool, false)?;
    let upgrades = pool.stats().upgrades - upgrades;
    drop(pool);

    let pool = setup.build(map, nodes.reserve())?;
    let (access, _) = run(&pool, true)?;
    drop(pool);
    Ok(Auto {
        time,
        access,
        bytes,
        upgrades,
    })
}

/// `f`'s result, with the NVMM bytes `pool` wrote while it ran.
fn measured<R>(pool: &Pool, f: impl FnOnce() -> pgl::Result<R>) -> pgl::Result<(R, u64)> {
    let before = nvmm_bytes(pool);
    let r = f()?;
    Ok((r, nvmm_bytes(pool) - before))
}

/// The fastest of the repetitions (the times shown): interference from the rest of the
/// machine only adds time, so the minimum is the steadiest estimate of what a program
/// itself costs.
fn fastest(v: impl Iterator<Item = Duration>) -> Duration {
    v.min().unwrap_or_default()
}

/// A percentage from two times of each repetition, `(a, b)` of `pair`: the median over the
/// repetitions of `100 * a / b - less`. The two runs of one repetition are seconds apart,
/// the repetitions minutes: this machine's slow phases, which last minutes, hit both
/// sides of one repetition, where the fastest of each side could come from different
/// phases (P-Auto on nodes that need no upgrade, whose overhead is nil by construction,
/// ranged from -12 % to +22 % that way).
fn paired(samples: &[Sample], pair: impl Fn(&Sample) -> (Duration, Duration), less: f64) -> f64 {
    let mut v: Vec<f64> = samples
        .iter()
        .map(|s| {
            let (a, b) = pair(s);
            100.0 * a.as_secs_f64() / b.as_secs_f64() - less
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One row of the table.
struct Row {
    map: Map,
    change: Change,
    share: usize,
    /// How the LEDS nodes are declared.
    nodes: Nodes,
    manual_pct: f64,
    auto_pct: f64,
    manual_bytes: u64,
    /// What P-Auto wrote more than the native run.
    auto_bytes: i64,
    upgraded_pct: f64,
}

fn run(dir: &Path) -> pgl::Result<Vec<Row>> {
    let n = env_num("PGL_LEDS_N", 20_000).max(100);
    let runs = env_num("PGL_LEDS_RUNS", 9).max(1);
    let keys = Rng(0x1ed5_2026).keys(n);
    let setup = Setup {
        dir: dir.to_owned(),
        keys,
    };
    println!("# LEDS retention experiment: {n} keys per map, fastest of {runs} runs");
    println!(
        "{:<5} {:<6} {:>5} {:>5} | {:>9} {:>9} {:>9} | {:>8} {:>8} {:>8} | {:>11} {:>11} {:>7} | {:>8}",
        "map",
        "layout",
        "work",
        "nodes",
        "retain ms",
        "manual ms",
        "auto ms",
        "Manual%",
        "LEDS%",
        "loads%",
        "Manual B",
        "LEDS B",
        "fewer",
        "upgraded"
    );
    let cases = std::env::var("PGL_LEDS_CASES").unwrap_or_default();
    let wanted = |map: Map, change: Change| {
        let name = format!(
            "{}-{}",
            if map == Map::Hash { "hash" } else { "tree" },
            if change == Change::Change {
                "change"
            } else {
                "add"
            }
        );
        cases.is_empty() || cases.split(',').any(|c| c.trim() == name)
    };
    let mut rows = Vec::new();
    for map in [Map::Hash, Map::Tree] {
        for change in [Change::Change, Change::Add] {
            if !wanted(map, change) {
                continue;
            }
            for share in [10, 25, 50, 100] {
                let mut order = setup.keys.clone();
                let mut rng = Rng(0x5eed ^ share as u64);
                for i in (1..order.len()).rev() {
                    order.swap(i, rng.next() as usize % (i + 1));
                }
                order.truncate(n * share / 100);
                let samples: Vec<Sample> = (0..runs)
                    .map(|_| sample(&setup, map, change, &order))
                    .collect::<pgl::Result<_>>()?;
                let retain = fastest(samples.iter().map(|s| s.retain));
                let native = fastest(samples.iter().map(|s| s.native));
                let s = &samples[0];
                let manual_pct = paired(&samples, |s| (s.retain, s.native), 0.0);
                for (v, &nodes) in Nodes::for_change(change).iter().enumerate() {
                    let auto = fastest(samples.iter().map(|s| s.auto[v].time));
                    let auto_pct = paired(&samples, |s| (s.auto[v].time, s.native), 100.0);
                    let access_pct = paired(&samples, |s| (s.auto[v].access, s.native), 100.0);
                    let auto_bytes = s.auto[v].bytes as i64 - s.native_bytes as i64;
                    let fewer = if auto_bytes > 0 {
                        format!("{:.1}x", s.retain_bytes as f64 / auto_bytes as f64)
                    } else {
                        "all".to_string()
                    };
                    let upgraded_pct = 100.0 * s.auto[v].upgrades as f64 / n as f64;
                    println!(
                        "{:<5} {:<6} {:>4}% {:>5} | {:>9.1} {:>9.1} {:>9.1} | {:>7.1}% {:>7.1}% {:>7.1}% | {:>11} {:>11} {:>7} | {:>7.1}%",
                        if map == Map::Hash { "hash" } else { "tree" },
                        if change == Change::Change { "Change" } else { "Add" },
                        share,
                        nodes.label(),
                        retain.as_secs_f64() * 1e3,
                        native.as_secs_f64() * 1e3,
                        auto.as_secs_f64() * 1e3,
                        manual_pct,
                        auto_pct,
                        access_pct,
                        s.retain_bytes,
                        auto_bytes,
                        fewer,
                        upgraded_pct,
                    );
                    rows.push(Row {
                        map,
                        change,
                        share,
                        nodes,
                        manual_pct,
                        auto_pct,
                        manual_bytes: s.retain_bytes,
                        auto_bytes,
                        upgraded_pct,
                    });
                }
            }
        }
    }
    let _ = std::fs::remove_file(setup.path());
    Ok(rows)
}

/// Prints each target of the issue with whether this run met it, for the LEDS nodes
/// without a reserve and with one.
fn verdicts(all: &[Row]) {
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    for nodes in [Nodes::Separate, Nodes::Reserve, Nodes::OnWrite] {
        // `r8+w` is a choice the v1 program makes for a change whose groups fit the
        // reserve. Its v0 data is `r8`'s, and Layout-Add's name does not fit: the program
        // that adds it to those nodes is `r8`'s (`upgrade = on_write` does not compile
        // there), whose rows stand for it.
        let rows: Vec<&Row> = all
            .iter()
            .filter(|r| {
                r.nodes == nodes
                    || (nodes == Nodes::OnWrite
                        && r.nodes == Nodes::Reserve
                        && r.change == Change::Add)
            })
            .collect();
        let full = |change| {
            rows.iter()
                .filter(move |r| r.change == change && r.share == 100)
        };
        // The worst overhead of a change, if any case of it ran (`PGL_LEDS_CASES`).
        let worst = |change| full(change).map(|r| r.auto_pct).reduce(f64::max);
        let ratio_at = |share: usize| {
            rows.iter()
                .filter(|r| r.share == share)
                .map(|r| {
                    if r.auto_bytes <= 0 {
                        f64::INFINITY
                    } else {
                        r.manual_bytes as f64 / r.auto_bytes as f64
                    }
                })
                .fold(f64::INFINITY, f64::min)
        };
        let ratios: Vec<(usize, f64)> = [10, 25, 50, 100].map(|s| (s, ratio_at(s))).to_vec();
        let ahead = rows
            .iter()
            .filter(|r| r.share <= 50)
            .all(|r| r.auto_pct < r.manual_pct);
        println!();
        match nodes {
            Nodes::Separate => println!("# targets, LEDS nodes without a reserve (every group a separate object)"),
            Nodes::Reserve => println!("# targets, LEDS nodes with `#[extendible(reserve = {RESERVE})]` (the widened key inline), upgraded when read"),
            Nodes::OnWrite => println!("# targets, LEDS nodes with `#[extendible(reserve = {RESERVE}, upgrade = on_write)]`, upgraded when written\n# (Layout-Add: r8's rows, as its name does not fit the reserve that `on_write` needs)"),
        }
        println!("# (overheads: LEDS with 100 % of the keys deleted)");
        for (name, change, target) in [
            ("Layout-Add", Change::Add, 0.5),
            ("Layout-Change", Change::Change, 8.0),
        ] {
            match worst(change) {
                Some(w) => println!(
                    "{name} overhead <= {target} %: worst {w:.2} % ({})",
                    mark(w <= target)
                ),
                None => println!("{name} overhead <= {target} %: not run"),
            }
        }
        let by_share: Vec<String> = ratios
            .iter()
            .map(|(s, r)| {
                if r.is_finite() {
                    format!("{s} %: {r:.1}x")
                } else {
                    format!("{s} %: all")
                }
            })
            .collect();
        println!(
            "bytes written >= 7x fewer than Manual: least by keys deleted {} (at 10 %: {}; at all: {})",
            by_share.join(", "),
            mark(ratios.first().is_some_and(|(_, r)| *r >= 7.0)),
            mark(ratios.iter().all(|(_, r)| *r >= 7.0))
        );
        println!(
            "LEDS ahead of Manual whenever <= 50 % of the keys are touched: {}",
            mark(ahead)
        );
    }
    let tree_touch = all
        .iter()
        .filter(|r| r.map == Map::Tree && r.change == Change::Change && r.nodes == Nodes::Separate)
        .map(|r| format!("{} % -> {:.0} %", r.share, r.upgraded_pct))
        .collect::<Vec<_>>()
        .join(", ");
    if !tree_touch.is_empty() {
        println!("(tree, Layout-Change: keys deleted -> nodes upgraded: {tree_touch})");
    }
}

fn main() {
    let dir = PathBuf::from(std::env::var("PGL_BENCH_DIR").unwrap_or_else(|_| "/dev/shm".into()));
    let dir = if dir.is_dir() {
        dir
    } else {
        std::env::temp_dir()
    };
    match run(&dir) {
        Ok(rows) => verdicts(&rows),
        Err(e) => {
            eprintln!("leds_evolution: {e}");
            std::process::exit(1);
        }
    }
}
