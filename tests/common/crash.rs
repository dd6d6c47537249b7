//! The crash-consistency harness over `CrashSim`, shared by `tests/crash_suite.rs` and
//! `tests/crash_harness_proof.rs`.
//!
//! A [`Run`] is a pool on a simulated device plus a plain-Rust [`Model`] of what it must
//! hold: a root of type [`Root`] whose slots hold the oids of objects `[u8; N]`. Each checked
//! op runs with a fence hook that captures a [`CrashPoint`] at every fence, plus one after the
//! op returns. From each point the harness builds crash images (every subset of the pending
//! words when at most [`EXHAUSTIVE_MAX`] are pending, else ordered sweeps plus
//! [`RANDOM_SUBSETS`] distinct random subsets), recovers each with `Pool::open_sim`, and
//! requires the recovered [`State`] — pool size, free bytes, root, every allocated object's
//! header and bytes, checksum problems — to equal exactly the live pool's state just before
//! or just after the op. A leaked or lost object is therefore a violation too.
//!
//! One recovered image in [`PROBE_EVERY`] also runs transactions and is reopened: recovery
//! must leave a usable pool.
//!
//! Invariant: violations are collected in a [`Report`], never swallowed: every one is counted
//! by class, `Suite::assert_clean` panics listing the classes with a full example of each,
//! `Suite::finish` hands the report to a caller that expects violations (the proof).
#![allow(dead_code)]

use pgl::geometry::{Geometry, PAGE};
use pgl::{Config, CrashPoint, CrashSim, ObjectHeader, Oid, Pool, Tx};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The layout name of every pool of the suite.
pub const LAYOUT: &str = "crash";
/// The root object: slots `0..SLOTS` hold oids (0 = empty), slot `PROBE_SLOT` a counter.
pub type Root = [u64; 64];
/// Slots that may hold an oid.
pub const SLOTS: usize = 63;
/// The root word the usability probe increments.
pub const PROBE_SLOT: usize = 63;
/// Payload sizes of the objects the suite stores.
pub const SIZES: [usize; 6] = [64, 256, 1024, 4096, 16384, 65536];
/// Crash points with at most this many pending words are explored exhaustively.
pub const EXHAUSTIVE_MAX: usize = 12;
/// Distinct random subsets explored per crash point with more pending words.
pub const RANDOM_SUBSETS: usize = 1000;
/// One recovered image in this many is also used for a transaction and reopened.
pub const PROBE_EVERY: u64 = 50;
/// Default number of crash states per op type (`PGL_CRASH_STATES` overrides).
pub const DEFAULT_STATES: u64 = 10_000;
/// Violation classes reported in full by an example (all are counted).
const MAX_REPORTED: usize = 6;
/// Violation classes listed in summaries.
const MAX_CLASSES_SHOWN: usize = 12;

// ---------------------------------------------------------------------------------------
// Random numbers
// ---------------------------------------------------------------------------------------

/// xorshift64*: small, seeded, good enough for choosing subsets and test data.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Rng {
        let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xd1b5_4a32_d192_ed03);
        if r.0 == 0 {
            r.0 = 1;
        }
        r.next();
        r
    }

    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `permille / 1000`.
    pub fn chance(&mut self, permille: u32) -> bool {
        self.next() % 1000 < permille as u64
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }

    /// Shuffles `v` in place.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }

    /// One element of `v` (non-empty).
    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())]
    }
}

// ---------------------------------------------------------------------------------------
// Typed access to `[u8; N]` objects by runtime size
// ---------------------------------------------------------------------------------------

macro_rules! by_size {
    ($n:expr, $N:ident => $body:expr) => {
        match $n {
            16 => {
                const $N: usize = 16;
                $body
            }
            64 => {
                const $N: usize = 64;
                $body
            }
            256 => {
                const $N: usize = 256;
                $body
            }
            1024 => {
                const $N: usize = 1024;
                $body
            }
            4096 => {
                const $N: usize = 4096;
                $body
            }
            16384 => {
                const $N: usize = 16384;
                $body
            }
            65536 => {
                const $N: usize = 65536;
                $body
            }
            200_000 => {
                const $N: usize = 200_000;
                $body
            }
            other => panic!("the crash suite has no object type of {other} bytes"),
        }
    };
}

/// Allocates an object `[u8; data.len()]` holding `data`; returns its raw oid.
pub fn tx_alloc(tx: &Tx<'_>, data: &[u8]) -> pgl::Result<u64> {
    by_size!(data.len(), N => {
        let mut v = Box::new([0u8; N]);
        v.copy_from_slice(data);
        tx.alloc(*v).map(|o| o.raw())
    })
}

/// Allocates a zeroed object of `data.len()` bytes, then writes `data` into it through a
/// handle in the same transaction.
pub fn tx_alloc_then_write(tx: &Tx<'_>, data: &[u8]) -> pgl::Result<u64> {
    by_size!(data.len(), N => {
        let o = tx.alloc_zeroed::<[u8; N]>()?;
        tx.open(o)?.write_bytes(0, data);
        Ok(o.raw())
    })
}

/// Allocates an unfilled object of `data.len()` bytes and writes `data`'s bytes at
/// `ranges` only, through a handle in the same transaction; returns its oid and its
/// contents (elsewhere the bytes its block held before).
pub fn tx_alloc_unzeroed(
    tx: &Tx<'_>,
    data: &[u8],
    ranges: &[(usize, usize)],
) -> pgl::Result<(u64, Vec<u8>)> {
    by_size!(data.len(), N => {
        let o = tx.alloc_unzeroed::<[u8; N]>()?;
        let mut h = tx.open(o)?;
        for &(a, z) in ranges {
            h.write_bytes(a, &data[a..z]);
        }
        Ok((o.raw(), h.as_bytes().to_vec()))
    })
}

/// `tx.alloc_unzeroed` of an `n`-byte object that the transaction never touches: its
/// commit writes only the header (with the checksum a sealed block lends it, if the block
/// is one). Read its contents after the commit (`object_bytes`).
pub fn tx_alloc_untouched(tx: &Tx<'_>, n: usize) -> pgl::Result<u64> {
    by_size!(n, N => tx.alloc_unzeroed::<[u8; N]>().map(|o| o.raw()))
}

/// The bytes of the `n`-byte object `oid`, read outside any transaction.
pub fn object_bytes(pool: &Pool, oid: u64, n: usize) -> pgl::Result<Vec<u8>> {
    by_size!(n, N => pool.get(Oid::<[u8; N]>::from_raw(oid)).map(|r| r.to_vec()))
}

/// Writes `bytes` at `at` into the `size`-byte object `oid` (marks only that range).
pub fn tx_write(tx: &Tx<'_>, oid: u64, size: usize, at: usize, bytes: &[u8]) -> pgl::Result<()> {
    by_size!(size, N => {
        tx.open(Oid::<[u8; N]>::from_raw(oid))?.write_bytes(at, bytes);
        Ok(())
    })
}

/// Writes `bytes` at `at` into the `size`-byte object `oid` with `Tx::write_bytes` (a
/// buffer with holes, for objects of 512 bytes or more).
pub fn tx_write_ranged(
    tx: &Tx<'_>,
    oid: u64,
    size: usize,
    at: usize,
    bytes: &[u8],
) -> pgl::Result<()> {
    by_size!(size, N => tx.write_bytes(Oid::<[u8; N]>::from_raw(oid), at, bytes))
}

/// Replaces the whole object `oid` with `data` through `DerefMut` (marks everything).
pub fn tx_write_whole(tx: &Tx<'_>, oid: u64, data: &[u8]) -> pgl::Result<()> {
    by_size!(data.len(), N => {
        let mut h = tx.open(Oid::<[u8; N]>::from_raw(oid))?;
        h.copy_from_slice(data);
        Ok(())
    })
}

/// Writes each `(at, bytes)` of `writes` into the `size`-byte object `oid` through one
/// `DerefMut` borrow of the whole value (which marks everything; the commit narrows it).
pub fn tx_write_borrowed(
    tx: &Tx<'_>,
    oid: u64,
    size: usize,
    writes: &[(usize, Vec<u8>)],
) -> pgl::Result<()> {
    by_size!(size, N => {
        let mut h = tx.open(Oid::<[u8; N]>::from_raw(oid))?;
        let value: &mut [u8; N] = &mut h;
        for (at, d) in writes {
            value[*at..at + d.len()].copy_from_slice(d);
        }
        Ok(())
    })
}

/// Frees the `size`-byte object `oid`.
pub fn tx_free(tx: &Tx<'_>, oid: u64, size: usize) -> pgl::Result<()> {
    by_size!(size, N => tx.free(Oid::<[u8; N]>::from_raw(oid)))
}

/// Sets root slot `slot` to `value`: through `write_at` (8 bytes logged) or, when `whole`,
/// through `DerefMut` (the whole root logged).
pub fn tx_set_slot(
    tx: &Tx<'_>,
    root: Oid<Root>,
    slot: usize,
    value: u64,
    whole: bool,
) -> pgl::Result<()> {
    let mut r = tx.open(root)?;
    if whole {
        r[slot] = value;
    } else {
        r.write_at(slot * 8, &value);
    }
    Ok(())
}

/// Allocates an object of each size in `sizes` (random bytes from `rng`) into the first
/// empty root slots, a transaction each, and records them in `m`.
pub fn fill_slots(pool: &Pool, root: Oid<Root>, m: &mut Model, rng: &mut Rng, sizes: &[usize]) {
    for &n in sizes {
        let slot = m.free_slot();
        let data = rng.bytes(n);
        pool.tx(|tx| {
            let o = tx_alloc(tx, &data)?;
            tx_set_slot(tx, root, slot, o, false)
        })
        .expect("setup alloc");
        m.put(slot, data);
    }
}

/// The raw oid in root slot `slot` (read outside any transaction).
pub fn slot_oid(pool: &Pool, root: Oid<Root>, slot: usize) -> u64 {
    pool.get(root).expect("root readable")[slot]
}

// ---------------------------------------------------------------------------------------
// The model and the observed state
// ---------------------------------------------------------------------------------------

/// What the pool must hold, in plain Rust: the bytes of the object in each root slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    /// `slots[i]`: the payload of the object whose oid is in root slot `i`.
    pub slots: Vec<Option<Vec<u8>>>,
    /// The value of root word `PROBE_SLOT`.
    pub probe: u64,
    /// Payloads of objects that are allocated but in no slot (allocated by a transaction
    /// that stored the oid nowhere).
    pub orphans: Vec<Vec<u8>>,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            slots: vec![None; SLOTS],
            probe: 0,
            orphans: Vec::new(),
        }
    }
}

impl Model {
    /// Records a new object in `slot`.
    pub fn put(&mut self, slot: usize, data: Vec<u8>) {
        assert!(self.slots[slot].is_none(), "model: slot {slot} is taken");
        self.slots[slot] = Some(data);
    }

    /// Records a write of `bytes` at `at` into the object of `slot`.
    pub fn write(&mut self, slot: usize, at: usize, bytes: &[u8]) {
        let d = self.slots[slot]
            .as_mut()
            .expect("model: write to an empty slot");
        d[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// Records the free of the object in `slot`.
    pub fn take(&mut self, slot: usize) -> Vec<u8> {
        self.slots[slot]
            .take()
            .expect("model: free of an empty slot")
    }

    /// Size of the object in `slot`.
    pub fn size(&self, slot: usize) -> usize {
        self.slots[slot].as_ref().expect("model: empty slot").len()
    }

    /// Occupied slots.
    pub fn used(&self) -> Vec<usize> {
        (0..SLOTS).filter(|&s| self.slots[s].is_some()).collect()
    }

    /// Occupied slots holding objects of `size` bytes.
    pub fn used_of(&self, size: usize) -> Vec<usize> {
        (0..SLOTS)
            .filter(|&s| self.slots[s].as_ref().is_some_and(|d| d.len() == size))
            .collect()
    }

    /// The first empty slot.
    pub fn free_slot(&self) -> usize {
        (0..SLOTS)
            .find(|&s| self.slots[s].is_none())
            .expect("model: no free slot")
    }
}

/// What a pool holds, as observed through its public API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// `pool.size()`.
    pub size: u64,
    /// `pool.free_bytes()`.
    pub free_bytes: u64,
    /// The root oid.
    pub root: u64,
    /// Every allocated object (`pool.objects()`), with its bytes (`pool.read_object`).
    pub objects: BTreeMap<u64, (ObjectHeader, Vec<u8>)>,
    /// Whatever failed while observing: unreadable objects, checksum problems.
    pub problems: Vec<String>,
}

/// Observes `pool` (quiescent). Creates the root if the pool has none, after listing the
/// objects (so a lost root shows as a different root oid).
pub fn snapshot(pool: &Pool) -> State {
    let mut st = State {
        size: pool.size(),
        free_bytes: pool.free_bytes(),
        root: 0,
        objects: BTreeMap::new(),
        problems: Vec::new(),
    };
    match pool.objects() {
        Ok(list) => {
            for (off, h) in list {
                match pool.read_object(off) {
                    Ok((h2, bytes)) => {
                        if h2 != h {
                            st.problems
                                .push(format!("object {off:#x}: header {h2:?} != listed {h:?}"));
                        }
                        if st.objects.insert(off, (h, bytes)).is_some() {
                            st.problems.push(format!("object {off:#x} listed twice"));
                        }
                    }
                    Err(e) => st.problems.push(format!(
                        "object {off:#x} is in the heap metadata but does not read: {e}"
                    )),
                }
            }
        }
        Err(e) => st.problems.push(format!("pool.objects() failed: {e}")),
    }
    // Checksums, when the pool keeps them (header flag NO_CHECKSUMS clear).
    match pool.verify_objects(|_, _| {}) {
        _ if pool.info().header.flags & 4 != 0 => {}
        Ok(bad) => {
            for (off, e) in bad {
                st.problems.push(format!("verify_objects: {off:#x}: {e}"));
            }
        }
        Err(e) => st.problems.push(format!("verify_objects failed: {e}")),
    }
    // Zone parity: kept by every commit on the live pool, recomputed by recovery (when the
    // pool keeps it at all: header flag PARITY).
    match pool.verify_parity() {
        _ if pool.info().header.flags & 2 == 0 => {}
        Ok(bad) if bad.is_empty() => {}
        Ok(bad) => st
            .problems
            .push(format!("parity disagrees with the rows at pages {bad:x?}")),
        Err(e) => st.problems.push(format!("verify_parity failed: {e}")),
    }
    // The transaction that stores a type's first object registers the type: a crash may
    // not leave one without the other, nor a torn or doubled registry entry.
    match pool.types() {
        Ok(types) => {
            for (off, (h, _)) in &st.objects {
                if !types.iter().any(|t| t.type_id == h.type_id) {
                    st.problems.push(format!(
                        "object {off:#x} has type id {:#x}, which the type registry lacks",
                        h.type_id
                    ));
                }
            }
            let mut ids: Vec<u32> = types.iter().map(|t| t.type_id).collect();
            ids.sort_unstable();
            ids.dedup();
            if ids.len() != types.len() {
                st.problems
                    .push(format!("the type registry holds a type twice: {types:?}"));
            }
        }
        Err(e) => st.problems.push(format!("pool.types() failed: {e}")),
    }
    match pool.root::<Root>() {
        Ok(r) => st.root = r.raw(),
        Err(e) => st.problems.push(format!("pool.root() failed: {e}")),
    }
    st
}

fn root_words(st: &State) -> Option<Vec<u64>> {
    let (h, b) = st.objects.get(&st.root)?;
    (h.size == 512).then(|| {
        b.chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
            .collect()
    })
}

/// Checks an observed state against the model: root slots, each object's bytes, and that
/// nothing else is allocated.
pub fn check_model(st: &State, m: &Model) -> Result<(), String> {
    if !st.problems.is_empty() {
        return Err(format!("problems: {:#?}", st.problems));
    }
    let words = root_words(st).ok_or_else(|| format!("root {:#x} is not a live root", st.root))?;
    let mut expect = BTreeSet::from([st.root]);
    for (s, want) in m.slots.iter().enumerate() {
        match (words[s], want) {
            (0, None) => {}
            (0, Some(d)) => return Err(format!("slot {s} is empty; the model has {} B", d.len())),
            (o, None) => return Err(format!("slot {s} holds {o:#x}; the model has nothing")),
            (o, Some(d)) => {
                let (h, b) = st
                    .objects
                    .get(&o)
                    .ok_or_else(|| format!("slot {s} points at {o:#x}, not an allocated object"))?;
                if h.size != d.len() as u64 || b != d {
                    return Err(format!(
                        "slot {s} ({o:#x}): {} B object differs from the model's {} B: {}",
                        h.size,
                        d.len(),
                        bytes_diff(d, b)
                    ));
                }
                if !expect.insert(o) {
                    return Err(format!("slot {s} repeats oid {o:#x}"));
                }
            }
        }
    }
    if words[PROBE_SLOT] != m.probe {
        return Err(format!(
            "probe word {} != model {}",
            words[PROBE_SLOT], m.probe
        ));
    }
    let mut got: BTreeSet<u64> = st.objects.keys().copied().collect();
    // Objects in no slot must be exactly the model's orphans (matched by their bytes).
    let mut orphans = m.orphans.clone();
    let extra: Vec<u64> = got.difference(&expect).copied().collect();
    for o in extra {
        let bytes = &st.objects[&o].1;
        if let Some(i) = orphans.iter().position(|d| d == bytes) {
            orphans.swap_remove(i);
            got.remove(&o);
        }
    }
    if !orphans.is_empty() {
        return Err(format!(
            "{} orphan object(s) of the model are not allocated (sizes {:?})",
            orphans.len(),
            orphans.iter().map(Vec::len).collect::<Vec<_>>()
        ));
    }
    if got != expect {
        return Err(format!(
            "allocated objects {:x?}, expected {:x?} (leaked: {:x?}, missing: {:x?})",
            got,
            expect,
            got.difference(&expect).collect::<Vec<_>>(),
            expect.difference(&got).collect::<Vec<_>>()
        ));
    }
    Ok(())
}

fn bytes_diff(want: &[u8], got: &[u8]) -> String {
    if want.len() != got.len() {
        return format!("length {} != {}", got.len(), want.len());
    }
    let diff: Vec<usize> = (0..want.len()).filter(|&i| want[i] != got[i]).collect();
    match (diff.first(), diff.last()) {
        (Some(a), Some(z)) => format!(
            "{} byte(s) differ in [{a}, {}]; first: got {:#04x}, want {:#04x}",
            diff.len(),
            z + 1,
            got[*a],
            want[*a]
        ),
        _ => "equal".into(),
    }
}

/// The kinds of difference between `want` and `got`, without offsets or values.
pub fn diff_kinds(want: &State, got: &State) -> Vec<&'static str> {
    let mut k = Vec::new();
    if want.size != got.size {
        k.push("pool size");
    }
    if want.free_bytes != got.free_bytes {
        k.push("free bytes");
    }
    if want.root != got.root {
        k.push("root oid");
    }
    if want.objects.keys().any(|o| !got.objects.contains_key(o)) {
        k.push("object lost");
    }
    if got.objects.keys().any(|o| !want.objects.contains_key(o)) {
        k.push("object leaked");
    }
    let common = want
        .objects
        .iter()
        .filter_map(|(o, w)| got.objects.get(o).map(|g| (w, g)));
    let (mut hdr, mut bytes) = (false, false);
    for ((wh, wb), (gh, gb)) in common {
        hdr |= wh != gh;
        bytes |= wb != gb;
    }
    if hdr {
        k.push("object header");
    }
    if bytes {
        k.push("object bytes");
    }
    if !got.problems.is_empty() {
        k.push("checksum/read problems");
    }
    k
}

/// A readable account of how `got` differs from `want`.
pub fn diff(want: &State, got: &State) -> String {
    let mut out = String::new();
    if want.size != got.size {
        let _ = writeln!(out, "  pool size {} != {}", got.size, want.size);
    }
    if want.free_bytes != got.free_bytes {
        let _ = writeln!(
            out,
            "  free bytes {} != {}",
            got.free_bytes, want.free_bytes
        );
    }
    if want.root != got.root {
        let _ = writeln!(out, "  root {:#x} != {:#x}", got.root, want.root);
    }
    for (off, (h, b)) in &want.objects {
        match got.objects.get(off) {
            None => {
                let _ = writeln!(out, "  object {off:#x} ({} B) missing (lost)", h.size);
            }
            Some((gh, gb)) => {
                if gh != h {
                    let _ = writeln!(out, "  object {off:#x}: header {gh:?} != {h:?}");
                }
                if gb != b {
                    let _ = writeln!(out, "  object {off:#x}: {}", bytes_diff(b, gb));
                }
            }
        }
    }
    for (off, (h, _)) in &got.objects {
        if !want.objects.contains_key(off) {
            let _ = writeln!(out, "  object {off:#x} ({} B) extra (leaked)", h.size);
        }
    }
    for p in &got.problems {
        let _ = writeln!(out, "  problem: {p}");
    }
    if out.is_empty() {
        out.push_str("  (equal)\n");
    }
    out
}

// ---------------------------------------------------------------------------------------
// Subsets of pending words
// ---------------------------------------------------------------------------------------

/// Pending words closer than this many words fall in one group (same or next cache line).
const GROUP_GAP: u64 = 8;
/// At most this many groups get their own "only"/"all but" subsets and sweep cuts.
const MAX_GROUPS: usize = 64;

/// Which pending words reach media in one crash image.
#[derive(Clone, Copy, Debug)]
enum Subset {
    /// Bit `i` set: pending word `i` persisted (at most `EXHAUSTIVE_MAX` pending).
    Mask(u64),
    /// The first `n` pending words in address order.
    Prefix(usize),
    /// The last `n` pending words in address order.
    Suffix(usize),
    /// Only the words of group `g`.
    Only(usize),
    /// Every word except those of group `g`.
    AllBut(usize),
    /// A random subset drawn from `seed` (see `random_bits`).
    Random(u64),
}

/// How a random subset is drawn.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Words,
    Lines,
    Groups,
}

const DENSITIES: [u32; 7] = [500, 500, 250, 750, 50, 950, 10];

fn random_params(seed: u64) -> (Mode, u32, Rng) {
    let mut r = Rng::new(seed);
    let mode = match r.below(5) {
        0 | 1 => Mode::Words,
        2 | 3 => Mode::Lines,
        _ => Mode::Groups,
    };
    let p = r.pick(&DENSITIES);
    (mode, p, r)
}

fn random_bits(seed: u64, addrs: &[u64], groups: &[(usize, usize)]) -> Vec<bool> {
    let (mode, p, mut r) = random_params(seed);
    let k = addrs.len();
    let mut bits = vec![false; k];
    match mode {
        Mode::Words => bits.iter_mut().for_each(|b| *b = r.chance(p)),
        Mode::Lines => {
            let mut line = u64::MAX;
            let mut on = false;
            for (i, a) in addrs.iter().enumerate() {
                if a / 8 != line {
                    line = a / 8;
                    on = r.chance(p);
                }
                bits[i] = on;
            }
        }
        Mode::Groups => {
            // whole groups, and one group torn at a random word
            let torn = r.below(groups.len());
            for (g, &(a, z)) in groups.iter().enumerate() {
                if g == torn {
                    let cut = r.range(a, z);
                    let prefix = r.chance(500);
                    for (i, b) in bits.iter_mut().enumerate().take(z).skip(a) {
                        *b = (i < cut) == prefix;
                    }
                } else if r.chance(p) {
                    bits[a..z].iter_mut().for_each(|b| *b = true);
                }
            }
        }
    }
    bits
}

impl Subset {
    fn bits(self, addrs: &[u64], groups: &[(usize, usize)]) -> Vec<bool> {
        let k = addrs.len();
        match self {
            Subset::Mask(m) => (0..k).map(|i| m >> i & 1 == 1).collect(),
            Subset::Prefix(n) => (0..k).map(|i| i < n).collect(),
            Subset::Suffix(n) => (0..k).map(|i| i >= k - n).collect(),
            Subset::Only(g) => (0..k)
                .map(|i| (groups[g].0..groups[g].1).contains(&i))
                .collect(),
            Subset::AllBut(g) => (0..k)
                .map(|i| !(groups[g].0..groups[g].1).contains(&i))
                .collect(),
            Subset::Random(seed) => random_bits(seed, addrs, groups),
        }
    }

    fn describe(self, addrs: &[u64], groups: &[(usize, usize)], geo: &Geometry) -> String {
        let what = match self {
            Subset::Mask(m) => format!("exhaustive mask {m:#b}"),
            Subset::Prefix(n) => format!("ordered sweep: first {n} pending words"),
            Subset::Suffix(n) => format!("ordered sweep: last {n} pending words"),
            Subset::Only(g) => format!("only group {g}"),
            Subset::AllBut(g) => format!("all but group {g}"),
            Subset::Random(seed) => {
                let (mode, p, _) = random_params(seed);
                format!("random {mode:?} p={p}/1000 seed={seed:#x}")
            }
        };
        let bits = self.bits(addrs, groups);
        let chosen = bits.iter().filter(|b| **b).count();
        let mut out = format!(
            "{what}: {chosen} of {} pending words persisted; by group (persisted/pending):",
            addrs.len()
        );
        for (g, &(a, z)) in groups.iter().enumerate().take(16) {
            let n = bits[a..z].iter().filter(|b| **b).count();
            let _ = write!(
                out,
                "\n      g{g}: {} .. {} : {n}/{}",
                region(geo, addrs[a] * 8),
                region(geo, addrs[z - 1] * 8 + 7),
                z - a
            );
        }
        if groups.len() > 16 {
            let _ = write!(out, "\n      … {} more groups", groups.len() - 16);
        }
        out
    }
}

/// Names the place of pool byte `off`.
pub fn region(geo: &Geometry, off: u64) -> String {
    let hb = geo.header_offset(1);
    if off < PAGE {
        format!("header A+{off:#x}")
    } else if off < hb {
        let i = (off - PAGE) / geo.lane_size;
        let (lane, copy) = (i % geo.lanes, if i < geo.lanes { 'A' } else { 'B' });
        format!("lane {lane}{copy}+{:#x}", (off - PAGE) % geo.lane_size)
    } else if off < hb + PAGE {
        format!("header B+{:#x}", off - hb)
    } else if off < geo.zones_offset() {
        format!("{off:#x} (before zone 0)")
    } else {
        let rel = off - geo.zones_offset();
        let z = rel / geo.zone_size();
        let in_zone = rel % geo.zone_size();
        let c = in_zone / geo.chunk_size;
        let w = in_zone % geo.chunk_size;
        if c >= geo.chunks_per_zone() {
            format!(
                "zone {z} parity+{:#x}",
                in_zone - geo.chunks_per_zone() * geo.chunk_size
            )
        } else if c == 0 {
            format!("zone {z} metadata+{w:#x}")
        } else {
            format!("zone {z} chunk {c}+{w:#x}")
        }
    }
}

/// The word indices of a crash point's pending words, in address order (the order its
/// `pick` indexes them in).
pub fn pending_addrs(cp: &CrashPoint) -> Vec<u64> {
    let lo = cp.image(|_| false);
    let hi = cp.image(|_| true);
    let addrs: Vec<u64> = (0..lo.len())
        .filter(|&i| lo[i] != hi[i])
        .map(|i| i as u64)
        .collect();
    assert_eq!(
        addrs.len(),
        cp.pending(),
        "pending words are the words that differ"
    );
    addrs
}

/// Maximal runs `[a, z)` of pending words whose addresses are within `GROUP_GAP` words.
fn groups_of(addrs: &[u64]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut a = 0;
    for i in 1..=addrs.len() {
        if i == addrs.len() || addrs[i] > addrs[i - 1] + GROUP_GAP {
            out.push((a, i));
            a = i;
        }
    }
    out
}

/// The ordered sweeps of a crash point with many pending words: prefixes and suffixes cut at
/// evenly spaced points, at group boundaries and in the middle of groups, and each group
/// alone or missing.
fn sweeps(k: usize, groups: &[(usize, usize)]) -> Vec<Subset> {
    let step = groups.len().div_ceil(MAX_GROUPS).max(1);
    let chosen: Vec<usize> = (0..groups.len()).step_by(step).collect();
    let mut cuts = BTreeSet::from([0, 1, 2, k - 2, k - 1, k]);
    for j in 1..16 {
        cuts.insert(k * j / 16);
    }
    for &g in &chosen {
        let (a, z) = groups[g];
        cuts.insert(a);
        cuts.insert(z);
        cuts.insert(a + (z - a) / 2);
        cuts.insert(z - 1);
    }
    let mut out = Vec::new();
    for &c in &cuts {
        out.push(Subset::Prefix(c));
        out.push(Subset::Suffix(k - c));
    }
    for &g in &chosen {
        out.push(Subset::Only(g));
        out.push(Subset::AllBut(g));
    }
    out
}

fn bits_hash(bits: &[bool]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for c in bits.chunks(64) {
        let w = c
            .iter()
            .enumerate()
            .fold(0u64, |w, (i, &b)| w | (b as u64) << i);
        w.hash(&mut h);
    }
    h.finish()
}

// ---------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------

/// One crash image whose recovery broke the model.
#[derive(Clone, Debug)]
pub struct Violation {
    /// Op type of the suite.
    pub op: String,
    /// The class of violation (step kind, crash point, kinds of difference).
    pub class: String,
    /// The scenario (run) it happened in.
    pub scenario: String,
    /// The step of the run (which op, with its parameters).
    pub step: String,
    /// Index of the crash point within the step, and how many the step had (the last one is
    /// the point after the op returned).
    pub point: usize,
    /// Crash points of the step.
    pub points: usize,
    /// The device's fence count at the crash point.
    pub fence: u64,
    /// Pending words at the crash point.
    pub pending: usize,
    /// Which pending words reached media.
    pub subset: String,
    /// What went wrong: an error, a panic, or a diff against both legal states.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let when = if self.point + 1 == self.points {
            "after the op returned".to_string()
        } else {
            format!("before fence #{} took effect", self.fence)
        };
        write!(
            f,
            "CRASH VIOLATION op={} class={:?}\n  scenario={:?} step={:?}\n  crash point {}/{} \
             ({when}), fence count {}, {} pending words\n  subset: {}\n{}",
            self.op,
            self.class,
            self.scenario,
            self.step,
            self.point,
            self.points,
            self.fence,
            self.pending,
            self.subset,
            self.detail
        )
    }
}

/// What a suite explored and found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Op type.
    pub op: String,
    /// Crash images recovered and compared.
    pub states: u64,
    /// Of those, per step kind.
    pub states_by_kind: BTreeMap<String, u64>,
    /// Crash points captured.
    pub points: u64,
    /// Scenarios (runs) executed.
    pub scenarios: u64,
    /// Checked ops executed.
    pub steps: u64,
    /// Recovered images also used for a transaction and reopened.
    pub probes: u64,
    /// Images that broke the model.
    pub violation_count: u64,
    /// Violations by class (step kind, crash point, kinds of difference).
    pub classes: BTreeMap<String, u64>,
    /// The first violation of each of the first few classes, in full.
    pub violations: Vec<Violation>,
    /// Wall time.
    pub elapsed: Duration,
    /// CPU time of the thread that ran the suite.
    pub cpu: Duration,
}

impl Report {
    /// The one-line summary the CI log shows.
    pub fn summary(&self) -> String {
        format!("crash states explored: {} (op: {})", self.states, self.op)
    }

    /// Details after the summary.
    pub fn details(&self) -> String {
        let mut out = format!(
            "  {} scenarios, {} checked ops, {} crash points, {} probes; states by step kind \
             {:?}; {} violation(s); {:.1} s wall, {:.1} s CPU",
            self.scenarios,
            self.steps,
            self.points,
            self.probes,
            self.states_by_kind,
            self.violation_count,
            self.elapsed.as_secs_f64(),
            self.cpu.as_secs_f64()
        );
        for (class, n) in self.classes.iter().take(MAX_CLASSES_SHOWN) {
            let _ = write!(out, "\n  {n:>6} x {class}");
        }
        if self.classes.len() > MAX_CLASSES_SHOWN {
            let _ = write!(
                out,
                "\n  … and {} more classes",
                self.classes.len() - MAX_CLASSES_SHOWN
            );
        }
        out
    }
}

/// The states to explore per op type: `PGL_CRASH_STATES`, else `DEFAULT_STATES`.
pub fn target_states() -> u64 {
    match std::env::var("PGL_CRASH_STATES") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("PGL_CRASH_STATES={v:?} is not a number")),
        Err(_) => DEFAULT_STATES,
    }
}

/// Every crash image is a fresh device of the pool's size (1-3 MiB). With glibc's defaults
/// each one is a new mmap: page faults to zero it, and a munmap when dropped, which cost more
/// than recovering the pool. Keeping such blocks in the malloc heap removes both; only the
/// allocator's behaviour changes.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only changes malloc tuning parameters; it is thread-safe.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
            }
        });
    }
}

/// CPU time of the calling thread (zero where unknown): a measure of a suite's cost that
/// other processes on the machine do not inflate.
fn thread_cpu() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        }
    }
    Duration::ZERO
}

/// A small-geometry config of `zones` zones (growable to 8).
pub fn config(zones: u64) -> Config {
    let mut c = Config::small(LAYOUT);
    c.size = c.geometry().pool_size(zones);
    c
}

// ---------------------------------------------------------------------------------------
// Suite and runs
// ---------------------------------------------------------------------------------------

/// The crash exploration of one op type.
pub struct Suite {
    report: Report,
    target: u64,
    start: Instant,
    cpu_start: Duration,
}

impl Suite {
    /// A suite for op type `op` with the default (or `PGL_CRASH_STATES`) target.
    pub fn new(op: &str) -> Suite {
        Self::with_target(op, target_states())
    }

    /// A suite for op type `op` that explores `target` states.
    pub fn with_target(op: &str, target: u64) -> Suite {
        keep_freed_memory();
        Suite {
            report: Report {
                op: op.to_owned(),
                ..Report::default()
            },
            target,
            start: Instant::now(),
            cpu_start: thread_cpu(),
        }
    }

    /// Whether the target is reached.
    pub fn done(&self) -> bool {
        self.report.states >= self.target
    }

    /// States explored so far.
    pub fn states(&self) -> u64 {
        self.report.states
    }

    /// Starts a scenario: a fresh pool of `cfg` on a fresh device, with its root.
    pub fn run(&mut self, scenario: impl Into<String>, cfg: Config, seed: u64) -> Run<'_> {
        let sim = CrashSim::new(cfg.max_size);
        let pool = Pool::create_sim(&sim, &cfg).expect("create pool");
        let root = pool.root::<Root>().expect("root");
        self.report.scenarios += 1;
        Run {
            suite: self,
            scenario: scenario.into(),
            geo: cfg.geometry(),
            sim,
            pool,
            root,
            model: Model::default(),
            rng: Rng::new(seed),
            observe_copies: false,
        }
    }

    /// Ends the suite: prints the summary and returns the report.
    pub fn finish(mut self) -> Report {
        self.report.elapsed = self.start.elapsed();
        self.report.cpu = thread_cpu().saturating_sub(self.cpu_start);
        let r = self.report;
        let text = format!("{}\n{}\n", r.summary(), r.details());
        print!("{text}");
        // Also straight to the process's stderr, which the test harness does not capture,
        // so that CI logs show the counts of passing runs too.
        let _ = std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes());
        r
    }

    /// Ends the suite and panics with every violation found, or if the target was missed.
    pub fn assert_clean(self) -> Report {
        let target = self.target;
        let r = self.finish();
        if r.violation_count > 0 {
            let mut msg = format!(
                "{} crash image(s) of op type {:?} broke the model ({} explored), in {} \
                 class(es):\n",
                r.violation_count,
                r.op,
                r.states,
                r.classes.len()
            );
            for (class, n) in r.classes.iter().take(MAX_CLASSES_SHOWN) {
                let _ = writeln!(msg, "  {n:>6} x {class}");
            }
            let _ = writeln!(
                msg,
                "the first of the first {} class(es):\n",
                r.violations.len()
            );
            for v in &r.violations {
                let _ = writeln!(msg, "{v}\n");
            }
            panic!("{msg}");
        }
        assert!(
            r.states >= target,
            "only {} crash states explored for {:?}; the target is {target}",
            r.states,
            r.op
        );
        r
    }
}

/// One scenario: a pool, its model, and the ops run on it.
pub struct Run<'s> {
    suite: &'s mut Suite,
    scenario: String,
    geo: Geometry,
    sim: Arc<CrashSim>,
    /// The live pool.
    pub pool: Pool,
    /// Its root.
    pub root: Oid<Root>,
    /// What it must hold.
    pub model: Model,
    /// The scenario's random numbers (seeded).
    pub rng: Rng,
    /// Observe the pool before and after each op on a copy of its volatile image (a pool
    /// opened on it, as after a crash that kept every pending word) instead of the live
    /// pool, whose observation settles deferred records (`snapshot` freezes it): so that
    /// a deferred record stays pending from one op into the next.
    pub observe_copies: bool,
}

impl Run<'_> {
    /// The state the checks compare crash images with: the live pool's, or a copy's
    /// (`observe_copies`).
    fn observe(&self) -> State {
        if !self.observe_copies {
            return snapshot(&self.pool);
        }
        let dev = CrashSim::from_image(&self.sim.volatile_image(), self.sim.len(), 0);
        let pool = Pool::open_sim(&dev, LAYOUT).expect("open a copy of the live pool");
        snapshot(&pool)
    }

    /// Whether the suite reached its target.
    pub fn done(&self) -> bool {
        self.suite.done()
    }

    /// Runs `f` without crash exploration (building the state an op starts from), then
    /// checks the pool against the model.
    pub fn setup(&mut self, f: impl FnOnce(&Pool, Oid<Root>, &mut Model, &mut Rng)) {
        f(&self.pool, self.root, &mut self.model, &mut self.rng);
        let st = snapshot(&self.pool);
        if let Err(e) = check_model(&st, &self.model) {
            panic!(
                "[{}] live pool disagrees with the model after setup: {e}",
                self.scenario
            );
        }
    }

    /// Runs `f` (which performs one operation on the pool and updates the model to what the
    /// pool must hold afterwards) and explores every crash state it passes through.
    pub fn op(
        &mut self,
        kind: &str,
        step: impl Into<String>,
        f: impl FnOnce(&Pool, Oid<Root>, &mut Model, &mut Rng),
    ) {
        self.op_inner(kind, step.into(), false, f);
    }

    /// Like [`Run::op`] for an operation that must change nothing (an aborted transaction):
    /// also requires the live state after it to equal the state before, free bytes included.
    pub fn op_unchanged(
        &mut self,
        kind: &str,
        step: impl Into<String>,
        f: impl FnOnce(&Pool, Oid<Root>, &mut Model, &mut Rng),
    ) {
        self.op_inner(kind, step.into(), true, f);
    }

    fn op_inner(
        &mut self,
        kind: &str,
        step: String,
        unchanged: bool,
        f: impl FnOnce(&Pool, Oid<Root>, &mut Model, &mut Rng),
    ) {
        let before = self.observe();
        if let Err(e) = check_model(&before, &self.model) {
            panic!(
                "[{} / {step}] live pool disagrees with the model before the op: {e}",
                self.scenario
            );
        }
        let model_before = self.model.clone();
        let points = Arc::new(Mutex::new(Vec::new()));
        let sink = points.clone();
        self.sim.set_fence_hook(move |s: &CrashSim| {
            sink.lock().expect("hook sink").push(s.crash_point());
        });
        f(&self.pool, self.root, &mut self.model, &mut self.rng);
        self.sim.clear_fence_hook();
        let mut points = std::mem::take(&mut *points.lock().expect("hook sink"));
        points.push(self.sim.crash_point());
        let after = self.observe();
        if let Err(e) = check_model(&after, &self.model) {
            panic!(
                "[{} / {step}] live pool disagrees with the model after the op: {e}",
                self.scenario
            );
        }
        if unchanged {
            assert_eq!(self.model, model_before, "[{step}] the model changed");
            assert!(
                after == before,
                "[{} / {step}] an op that must change nothing changed the live pool:\n{}",
                self.scenario,
                diff(&before, &after)
            );
        }
        self.suite.report.steps += 1;
        self.explore(kind, &step, &points, &before, &after);
    }

    fn explore(
        &mut self,
        kind: &str,
        step: &str,
        points: &[CrashPoint],
        before: &State,
        after: &State,
    ) {
        let start = self.suite.report.states;
        for (pi, cp) in points.iter().enumerate() {
            self.suite.report.points += 1;
            let k = cp.pending();
            let addrs = pending_addrs(cp);
            let groups = groups_of(&addrs);
            let ctx = PointCtx {
                kind,
                step,
                point: pi,
                points: points.len(),
                cp,
                addrs: &addrs,
                groups: &groups,
            };
            if k <= EXHAUSTIVE_MAX {
                for m in 0..1u64 << k {
                    let s = Subset::Mask(m);
                    self.check(&ctx, s, &s.bits(&addrs, &groups), before, after);
                }
                continue;
            }
            let mut seen = HashSet::new();
            for s in sweeps(k, &groups) {
                let bits = s.bits(&addrs, &groups);
                if seen.insert(bits_hash(&bits)) {
                    self.check(&ctx, s, &bits, before, after);
                }
            }
            let mut accepted = 0;
            let mut attempts = 0;
            while accepted < RANDOM_SUBSETS && attempts < RANDOM_SUBSETS * 8 {
                attempts += 1;
                let s = Subset::Random(self.rng.next());
                let bits = s.bits(&addrs, &groups);
                if seen.insert(bits_hash(&bits)) {
                    self.check(&ctx, s, &bits, before, after);
                    accepted += 1;
                }
            }
        }
        *self
            .suite
            .report
            .states_by_kind
            .entry(kind.to_owned())
            .or_default() += self.suite.report.states - start;
    }

    fn check(
        &mut self,
        ctx: &PointCtx<'_>,
        s: Subset,
        bits: &[bool],
        before: &State,
        after: &State,
    ) {
        let report = &mut self.suite.report;
        report.states += 1;
        let probe = report.states % PROBE_EVERY == 0;
        if probe {
            report.probes += 1;
        }
        let dev = ctx.cp.device(0, |i| bits[i]);
        let r = catch_unwind(AssertUnwindSafe(|| {
            recover_and_compare(&dev, before, after, probe)
        }))
        .unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(non-string panic)".into());
            Err(Failure::Panic(msg))
        });
        let Err(failure) = r else {
            return;
        };
        report.violation_count += 1;
        let class = format!(
            "{} at crash point {}/{}: {}",
            ctx.kind,
            ctx.point,
            ctx.points,
            failure.class(before, after)
        );
        let n = report.classes.entry(class.clone()).or_default();
        *n += 1;
        if *n == 1 && report.violations.len() < MAX_REPORTED {
            let v = Violation {
                op: report.op.clone(),
                class,
                scenario: self.scenario.clone(),
                step: ctx.step.to_owned(),
                point: ctx.point,
                points: ctx.points,
                fence: ctx.cp.fence(),
                pending: ctx.cp.pending(),
                subset: s.describe(ctx.addrs, ctx.groups, &self.geo),
                detail: failure.detail(before, after),
            };
            report.violations.push(v);
        }
    }
}

struct PointCtx<'a> {
    kind: &'a str,
    step: &'a str,
    point: usize,
    points: usize,
    cp: &'a CrashPoint,
    addrs: &'a [u64],
    groups: &'a [(usize, usize)],
}

/// Why a crash image broke the model (its text is built only for reported violations).
enum Failure {
    /// `Pool::open_sim` returned an error.
    Open(pgl::Error),
    /// Recovery or observation panicked.
    Panic(String),
    /// The recovered state is neither the one before nor the one after.
    Mismatch(Box<State>),
    /// The recovered pool failed the usability probe.
    Probe(String),
}

impl Failure {
    /// A short description without offsets or values, to group violations by kind.
    fn class(&self, before: &State, after: &State) -> String {
        match self {
            Failure::Open(e) => {
                let s = format!("{e:?}");
                format!(
                    "recovery failed: {}",
                    s.split([' ', '{', '(']).next().unwrap_or("")
                )
            }
            Failure::Panic(_) => "recovery panicked".into(),
            Failure::Mismatch(got) => format!(
                "vs before [{}], vs after [{}]",
                diff_kinds(before, got).join(", "),
                diff_kinds(after, got).join(", ")
            ),
            Failure::Probe(_) => "the recovered pool failed the usability probe".into(),
        }
    }

    fn detail(&self, before: &State, after: &State) -> String {
        match self {
            Failure::Open(e) => format!("  recovery failed: {e}"),
            Failure::Panic(m) => format!("  recovery or observation panicked: {m}"),
            Failure::Mismatch(got) => format!(
                "  recovered state is neither the state before nor after the op\n  \
                 --- recovered vs before:\n{}  --- recovered vs after:\n{}",
                diff(before, got),
                diff(after, got)
            ),
            Failure::Probe(m) => m.clone(),
        }
    }
}

/// Recovers the image on `dev` and requires the state before or after the op; with
/// `probe`, also runs transactions on the recovered pool and reopens it.
fn recover_and_compare(
    dev: &Arc<CrashSim>,
    before: &State,
    after: &State,
    probe: bool,
) -> Result<(), Failure> {
    if probe {
        crash_during_recovery(dev, before, after).map_err(Failure::Probe)?;
    }
    let pool = Pool::open_sim(dev, LAYOUT).map_err(Failure::Open)?;
    let got = snapshot(&pool);
    if got != *before && got != *after {
        return Err(Failure::Mismatch(Box::new(got)));
    }
    if probe {
        probe_usable(dev, pool, &got).map_err(Failure::Probe)?;
    }
    Ok(())
}

/// Runs `f`, capturing a crash point on `sim` at every fence it issues; returns what `f`
/// returned and the points, in order.
pub fn crash_points_of<R>(sim: &CrashSim, f: impl FnOnce() -> R) -> (R, Vec<CrashPoint>) {
    let points: Arc<Mutex<Vec<CrashPoint>>> = Arc::default();
    let sink = points.clone();
    sim.set_fence_hook(move |s: &CrashSim| sink.lock().expect("sink").push(s.crash_point()));
    let out = f();
    sim.clear_fence_hook();
    let points = std::mem::take(&mut *points.lock().expect("sink"));
    (out, points)
}

/// Recovers a copy of the image on `dev` capturing a crash point at every fence of the
/// recovery itself (replay, retire marks, parity recomputation, header update), then
/// recovers from some of those crashes (none, all, the lower and the upper half of their
/// pending words applied, in address order: different lanes' marks land on different
/// sides): each must again give the state before or after the op.
fn crash_during_recovery(dev: &Arc<CrashSim>, before: &State, after: &State) -> Result<(), String> {
    let copy = dev.crash_point().device(0, |_| false);
    let (first, points) = crash_points_of(&copy, || Pool::open_sim(&copy, LAYOUT));
    drop(first);
    let step = points.len().div_ceil(4).max(1);
    for (k, cp) in points.iter().enumerate().step_by(step) {
        let half = cp.pending() / 2;
        let subsets: [(&str, &dyn Fn(usize) -> bool); 4] = [
            ("none of the", &|_| false),
            ("all", &|_| true),
            ("the lower half of the", &|i| i < half),
            ("the upper half of the", &|i| i >= half),
        ];
        for (which, pick) in subsets {
            let d = cp.device(0, pick);
            let p = Pool::open_sim(&d, LAYOUT).map_err(|e| {
                format!("  a crash at fence {k} of recovery left a pool that does not open: {e}")
            })?;
            let got = snapshot(&p);
            if got != *before && got != *after {
                return Err(format!(
                    "  a crash at fence {k} of {} during recovery ({} pending words applied) \
                     recovered to neither state:\n{}",
                    points.len(),
                    which,
                    diff(before, &got)
                ));
            }
        }
    }
    Ok(())
}

/// Runs two small transactions on a recovered pool (a write to the root and to an object, an
/// allocation if there is room), then reopens the device twice — with none and with all of
/// the words still pending — and requires exactly the state the live pool reached.
fn probe_usable(dev: &Arc<CrashSim>, pool: Pool, got: &State) -> Result<(), String> {
    let root = Oid::<Root>::from_raw(got.root);
    let words = root_words(got).ok_or("probe: no root")?;
    let target = (0..SLOTS)
        .map(|s| words[s])
        .find(|&o| o != 0)
        .map(|o| (o, got.objects[&o].0.size as usize));
    pool.tx(|tx| {
        tx.open(root)?
            .write_at(PROBE_SLOT * 8, &(words[PROBE_SLOT] + 1));
        if let Some((o, size)) = target {
            tx_write(tx, o, size, size / 2, &[0xa5; 8])?;
        }
        Ok(())
    })
    .map_err(|e| format!("  probe: a transaction on the recovered pool failed: {e}"))?;
    if let Some(slot) = (0..SLOTS).find(|&s| words[s] == 0) {
        match pool.tx(|tx| {
            let o = tx_alloc(tx, &[0x5a; 64])?;
            tx_set_slot(tx, root, slot, o, false)
        }) {
            Ok(()) | Err(pgl::Error::PoolFull { .. }) => {}
            Err(e) => {
                return Err(format!(
                    "  probe: an allocation on the recovered pool failed: {e}"
                ))
            }
        }
    }
    let want = snapshot(&pool);
    if !want.problems.is_empty() {
        return Err(format!(
            "  probe: the recovered pool after two transactions:\n{}",
            diff(got, &want)
        ));
    }
    drop(pool);
    let cp = dev.crash_point();
    for all in [false, true] {
        let d = cp.device(0, |_| all);
        let p = Pool::open_sim(&d, LAYOUT)
            .map_err(|e| format!("  probe: reopening after the probe transactions failed: {e}"))?;
        let again = snapshot(&p);
        if again != want {
            return Err(format!(
                "  probe: reopened ({} pending words applied) state differs from the live one:\n{}",
                if all { "all" } else { "none of the" },
                diff(&want, &again)
            ));
        }
    }
    Ok(())
}
