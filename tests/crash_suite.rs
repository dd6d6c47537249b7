//! Crash consistency of every kind of pool operation on `CrashSim`: alloc, overwrite
//! (64 B … 64 KiB), ranged writes (`Tx::write_bytes`, 1 KiB … 64 KiB), free, multi-object
//! transactions, nested transactions, `pool.grow`, and a new run made over a chunk that a
//! freed large object used.
//!
//! Each test explores at least `PGL_CRASH_STATES` (default 10,000) crash images of its op
//! type and requires every recovered pool to equal the state before or after the op (see
//! `tests/common/crash.rs`). Scenarios vary (sizes, shapes, order, position in a run) until
//! the target is reached; none is repeated to pad the count.
mod common;

use common::crash::*;
use pgl::{CrashPoint, CrashSim, Error, Oid, Pool};
use std::sync::{Arc, Mutex};

/// Zone index of pool offset `off` in the small geometry.
fn zone_of(off: u64) -> u64 {
    let g = config(1).geometry();
    (off - g.zones_offset()) / g.zone_size()
}

/// How an allocation fills its object.
#[derive(Clone, Debug)]
enum Fill {
    /// `tx.alloc(value)`.
    Value,
    /// `tx.alloc_zeroed` then one `write_bytes` of everything.
    ZeroedThenWrite,
    /// `tx.alloc_unzeroed` then `write_bytes` of these ranges only: the rest keeps the
    /// block's earlier bytes.
    Unzeroed(Vec<(usize, usize)>),
    /// `tx.alloc_unzeroed` and nothing else: the commit writes only the header.
    Untouched,
}

impl Fill {
    /// A random way to fill an `n`-byte object.
    fn random(rng: &mut Rng, n: usize) -> Fill {
        match rng.below(10) {
            0..=3 => Fill::Value,
            4..=6 => Fill::ZeroedThenWrite,
            _ => Fill::unzeroed(rng, n),
        }
    }

    /// Unfilled, with random ranges written (see `written_ranges`).
    fn unzeroed(rng: &mut Rng, n: usize) -> Fill {
        Fill::Unzeroed(written_ranges(rng, n))
    }
}

/// Up to three random ranges of an `n`-byte object (perhaps none, perhaps overlapping).
fn written_ranges(rng: &mut Rng, n: usize) -> Vec<(usize, usize)> {
    (0..rng.below(4))
        .map(|_| {
            let a = rng.below(n);
            (a, rng.range(a + 1, n))
        })
        .collect()
}

/// One transaction: allocate `data` (filled as `fill` says) into `slot`; returns the oid
/// and the object's contents.
fn alloc_tx(
    pool: &Pool,
    root: Oid<Root>,
    slot: usize,
    data: &[u8],
    fill: &Fill,
    whole_root: bool,
) -> pgl::Result<(u64, Vec<u8>)> {
    let (o, contents) = pool.tx(|tx| {
        let (o, contents) = match fill {
            Fill::Value => (tx_alloc(tx, data)?, data.to_vec()),
            Fill::ZeroedThenWrite => (tx_alloc_then_write(tx, data)?, data.to_vec()),
            Fill::Unzeroed(ranges) => tx_alloc_unzeroed(tx, data, ranges)?,
            Fill::Untouched => (tx_alloc_untouched(tx, data.len())?, Vec::new()),
        };
        tx_set_slot(tx, root, slot, o, whole_root)?;
        Ok((o, contents))
    })?;
    match fill {
        Fill::Untouched => Ok((o, object_bytes(pool, o, data.len())?)),
        _ => Ok((o, contents)),
    }
}

/// Setup helper: allocate one object of each size in `sizes` into the first free slots.
fn fill(run: &mut Run<'_>, sizes: &[usize]) {
    let sizes = sizes.to_vec();
    run.setup(move |pool, root, m, rng| {
        for n in sizes {
            let slot = m.free_slot();
            let data = rng.bytes(n);
            alloc_tx(pool, root, slot, &data, &Fill::Value, false).expect("setup alloc");
            m.put(slot, data);
        }
    });
}

/// A checked op: allocate a random `n`-byte object into a free slot, filled as `fill`
/// says (at random when `None`); returns its oid.
fn alloc_op(run: &mut Run<'_>, kind: &str, n: usize, why: &str, fill: Option<Fill>) -> u64 {
    let slot = run.model.free_slot();
    let data = run.rng.bytes(n);
    let fill = fill.unwrap_or_else(|| Fill::random(&mut run.rng, n));
    let whole_root = run.rng.chance(300);
    let label = format!(
        "alloc {n} B into slot {slot} ({why}; {fill:?}, root slot set {})",
        if whole_root {
            "via DerefMut"
        } else {
            "via write_at"
        }
    );
    let mut oid = 0;
    run.op(kind, label, |pool, root, m, _| {
        let (o, contents) = alloc_tx(pool, root, slot, &data, &fill, whole_root).expect("alloc tx");
        oid = o;
        m.put(slot, contents);
    });
    oid
}

/// Two checked ops: a transaction that only allocates (into an existing run: the direct
/// commit, no record), then one that links the new object into a slot.
fn orphan_then_link_ops(run: &mut Run<'_>, n: usize) {
    let data = run.rng.bytes(n);
    let fill = Fill::random(&mut run.rng, n);
    let mut oid = 0;
    let mut contents = Vec::new();
    run.op(
        "alloc",
        format!("alloc {n} B ({fill:?}) and store the oid nowhere (direct commit)"),
        |pool, _, m, _| {
            let direct = pool.stats().direct_commits;
            let (o, d) = pool
                .tx(|tx| match &fill {
                    Fill::Unzeroed(ranges) => tx_alloc_unzeroed(tx, &data, ranges),
                    _ => Ok((tx_alloc(tx, &data)?, data.clone())),
                })
                .expect("alloc-only tx");
            assert_eq!(
                pool.stats().direct_commits,
                direct + 1,
                "an allocation from an existing run commits without a record"
            );
            oid = o;
            contents = d.clone();
            m.orphans.push(d);
        },
    );
    let slot = run.model.free_slot();
    run.op(
        "alloc",
        format!("link the {n} B orphan into slot {slot}"),
        move |pool, root, m, _| {
            pool.tx(|tx| tx_set_slot(tx, root, slot, oid, false))
                .expect("link tx");
            let i = m
                .orphans
                .iter()
                .position(|o| *o == contents)
                .expect("model orphan");
            let data = m.orphans.swap_remove(i);
            m.put(slot, data);
        },
    );
}

#[test]
fn crash_alloc() {
    let mut suite = Suite::new("alloc");
    let mut seed = 0;
    while !suite.done() {
        seed += 1;
        // The first scenario runs whole (every size and position); later ones stop at the
        // target.
        let whole = suite.states() == 0;
        let mut run = suite.run(format!("alloc #{seed}"), config(3), seed);
        // Every size once, in a random order: each the first object of its run (a new run
        // chunk) or of its chunks (a large object). Between them, at random places, one
        // allocation into an existing run and one into space freed by an earlier
        // transaction (stale bytes there, perhaps a stale valid header).
        let mut sizes = SIZES.to_vec();
        run.rng.shuffle(&mut sizes);
        let existing_at = run.rng.range(1, 4);
        let reuse_at = run.rng.range(2, 5);
        for (i, &n) in sizes.iter().enumerate() {
            if !whole && run.done() {
                break;
            }
            alloc_op(&mut run, "alloc", n, "first of its class", None);
            let small: Vec<usize> = sizes[..=i].iter().copied().filter(|&s| s <= 4096).collect();
            if i == existing_at && !small.is_empty() {
                let n = run.rng.pick(&small);
                alloc_op(&mut run, "alloc", n, "into an existing run", None);
                let n = run.rng.pick(&small);
                orphan_then_link_ops(&mut run, n);
            }
            if i == reuse_at {
                let n = run.rng.pick(&sizes[..=i]);
                run.setup(move |pool, root, m, _| {
                    let slot = m.used_of(n)[0];
                    let oid = slot_oid(pool, root, slot);
                    pool.tx(|tx| {
                        tx_free(tx, oid, n)?;
                        tx_set_slot(tx, root, slot, 0, false)
                    })
                    .expect("setup free");
                    m.take(slot);
                });
                // Unfilled: the stale bytes it keeps must be durable and checksummed. Left
                // untouched, the block's old header lends its checksum (a sealed block).
                let fill = if run.rng.chance(500) {
                    Fill::Untouched
                } else {
                    Fill::unzeroed(&mut run.rng, n)
                };
                alloc_op(&mut run, "alloc", n, "into space freed earlier", Some(fill));
            }
        }
    }
    suite.assert_clean();
}

#[derive(Clone, Copy, Debug)]
enum Shape {
    /// The whole object through `DerefMut`.
    Whole,
    /// One aligned range.
    Range,
    /// Two disjoint ranges (two checksum patches, two log entries).
    TwoRanges,
    /// An odd offset and an odd length.
    Unaligned,
    /// Two disjoint ranges written through `DerefMut`: the commit finds the span from the
    /// first changed byte to the last (objects over 64 bytes) and writes only that.
    Borrowed,
}

/// A checked op: overwrite the object in `slot` with `shape`.
fn overwrite_op(run: &mut Run<'_>, kind: &str, slot: usize, shape: Shape) {
    let n = run.model.size(slot);
    let rng = &mut run.rng;
    let mut writes: Vec<(usize, Vec<u8>)> = Vec::new();
    match shape {
        Shape::Whole => writes.push((0, rng.bytes(n))),
        Shape::Range => {
            let len = match rng.below(4) {
                0 => 8,
                1 => 64.min(n),
                2 => n / 4,
                _ => 8 * rng.range(1, n / 8),
            };
            let at = 8 * rng.range(0, (n - len) / 8);
            writes.push((at, rng.bytes(len)));
        }
        Shape::TwoRanges | Shape::Borrowed => {
            let half = n / 2;
            let l1 = rng.range(1, half / 2);
            let a1 = rng.range(0, half - l1);
            let l2 = rng.range(1, half / 2);
            let a2 = half + rng.range(0, half - l2);
            writes.push((a1, rng.bytes(l1)));
            writes.push((a2, rng.bytes(l2)));
        }
        Shape::Unaligned => {
            let len = (rng.range(1, n / 2) | 1).min(n - 1);
            let at = rng.range(0, n - len) | 1;
            let at = at.min(n - len);
            writes.push((at, rng.bytes(len)));
        }
    }
    let ranges: Vec<String> = writes
        .iter()
        .map(|(a, d)| format!("[{a}, {})", a + d.len()))
        .collect();
    let label = format!(
        "overwrite {n} B object in slot {slot}: {shape:?} {}",
        ranges.join(" ")
    );
    run.op(kind, label, |pool, root, m, _| {
        let oid = slot_oid(pool, root, slot);
        pool.tx(|tx| {
            if matches!(shape, Shape::Borrowed) {
                return tx_write_borrowed(tx, oid, n, &writes);
            }
            for (at, d) in &writes {
                if matches!(shape, Shape::Whole) {
                    tx_write_whole(tx, oid, d)?;
                } else {
                    tx_write(tx, oid, n, *at, d)?;
                }
            }
            Ok(())
        })
        .expect("overwrite tx");
        for (at, d) in &writes {
            m.write(slot, *at, d);
        }
    });
}

#[test]
fn crash_overwrite() {
    const SHAPES: [Shape; 5] = [
        Shape::Whole,
        Shape::Range,
        Shape::TwoRanges,
        Shape::Unaligned,
        Shape::Borrowed,
    ];
    let mut suite = Suite::new("overwrite");
    let mut seed = 100;
    while !suite.done() {
        seed += 1;
        let mut run = suite.run(format!("overwrite #{seed}"), config(3), seed);
        fill(&mut run, &SIZES);
        let mut order: Vec<usize> = (0..SIZES.len()).collect();
        run.rng.shuffle(&mut order);
        let skew = run.rng.below(4);
        // Every size in the first round, every shape within the first four ops.
        // Rounds run whole (every size once each); the target decides how many.
        for round in 0..SHAPES.len() {
            if run.done() {
                break;
            }
            for (j, &slot) in order.iter().enumerate() {
                let shape = SHAPES[(round + j + skew) % SHAPES.len()];
                overwrite_op(&mut run, "overwrite", slot, shape);
                // Now and then the same object again at once: the second record must retire
                // the first, whose retire mark is not yet durable.
                if run.rng.chance(150) {
                    overwrite_op(&mut run, "overwrite", slot, Shape::Range);
                }
            }
        }
    }
    suite.assert_clean();
}

/// How a ranged-write transaction (`Tx::write_bytes`) writes an object.
#[derive(Clone, Copy, Debug)]
enum Ranged {
    /// One range.
    One,
    /// Two ranges at most 32 bytes apart, the first perhaps near the start: the commit
    /// fills the hole between them (and before the first) from the pool.
    Near,
    /// Two ranges far apart, covering more than half the object.
    Most,
    /// A range, a read of the whole object (which fills every hole), another range.
    ThenRead,
}

/// A checked op: write into the object in `slot` with `Tx::write_bytes`, as `how` says.
fn ranged_op(run: &mut Run<'_>, slot: usize, how: Ranged) {
    let n = run.model.size(slot);
    let rng = &mut run.rng;
    let writes: Vec<(usize, Vec<u8>)> = match how {
        Ranged::One => {
            let len = rng.range(1, n / 4);
            vec![(rng.range(0, n - len), rng.bytes(len))]
        }
        Ranged::Near => {
            let a = if rng.chance(500) {
                rng.range(0, 32)
            } else {
                rng.range(0, n / 2)
            };
            let l1 = rng.range(1, 64);
            let b = a + l1 + rng.range(1, 33);
            let l2 = rng.range(1, (n - b).min(64));
            vec![(a, rng.bytes(l1)), (b, rng.bytes(l2))]
        }
        Ranged::Most => {
            let hole = rng.range(33, n / 4);
            let at = rng.range(1, n - hole - 1);
            vec![(0, rng.bytes(at)), (at + hole, rng.bytes(n - at - hole))]
        }
        Ranged::ThenRead => {
            let l1 = rng.range(1, n / 8);
            let l2 = rng.range(1, n / 8);
            vec![
                (rng.range(0, n - l1), rng.bytes(l1)),
                (rng.range(0, n - l2), rng.bytes(l2)),
            ]
        }
    };
    let ranges: Vec<String> = writes
        .iter()
        .map(|(a, d)| format!("[{a}, {})", a + d.len()))
        .collect();
    let label = format!(
        "ranged write into {n} B object in slot {slot}: {how:?} {}",
        ranges.join(" ")
    );
    run.op("ranged write", label, |pool, root, m, _| {
        let oid = slot_oid(pool, root, slot);
        pool.tx(|tx| {
            for (k, (at, d)) in writes.iter().enumerate() {
                if k == 1 && matches!(how, Ranged::ThenRead) {
                    object_bytes_in(tx, oid, n)?;
                }
                tx_write_ranged(tx, oid, n, *at, d)?;
            }
            Ok(())
        })
        .expect("ranged write tx");
        for (at, d) in &writes {
            m.write(slot, *at, d);
        }
    });
}

/// Reads the whole `n`-byte object `oid` in `tx` (for a buffer with holes: fills them).
fn object_bytes_in(tx: &pgl::Tx<'_>, oid: u64, n: usize) -> pgl::Result<()> {
    match n {
        1024 => tx.get(Oid::<[u8; 1024]>::from_raw(oid)).map(drop),
        4096 => tx.get(Oid::<[u8; 4096]>::from_raw(oid)).map(drop),
        16384 => tx.get(Oid::<[u8; 16384]>::from_raw(oid)).map(drop),
        _ => tx.get(Oid::<[u8; 65536]>::from_raw(oid)).map(drop),
    }
}

#[test]
fn crash_ranged_write() {
    const HOW: [Ranged; 4] = [Ranged::One, Ranged::Near, Ranged::Most, Ranged::ThenRead];
    // The sizes written with holes (512 bytes and more).
    const BIG: [usize; 4] = [1024, 4096, 16384, 65536];
    let mut suite = Suite::new("ranged write");
    let mut seed = 900;
    while !suite.done() {
        seed += 1;
        let mut run = suite.run(format!("ranged write #{seed}"), config(3), seed);
        fill(&mut run, &BIG);
        let skew = run.rng.below(4);
        for round in 0..HOW.len() {
            if run.done() {
                break;
            }
            for slot in 0..BIG.len() {
                ranged_op(&mut run, slot, HOW[(round + slot + skew) % HOW.len()]);
            }
        }
    }
    suite.assert_clean();
}

#[test]
fn crash_overwrite_with_protections_off() {
    // The protection switches, in turn: one lane copy (commits write copy A alone; B's
    // older record must never replay), no object checksums with parity kept (recovery
    // cannot tell damage, so reconciling recomputes the dirty columns), and neither nor
    // parity (the paper's bare "pangolin" configuration).
    type Switch = fn(&mut pgl::Config);
    let modes: [(&str, Switch); 4] = [
        ("one lane copy", |c| c.replicate_lanes = false),
        // Not a protection off: parity updates up to 256 bytes on the shared atomic path.
        ("atomic parity updates", |c| c.parity_atomic_max = 256),
        ("no checksums", |c| c.checksums = false),
        ("no replication, checksums or parity", |c| {
            c.replicate_lanes = false;
            c.checksums = false;
            c.parity = false;
        }),
    ];
    for (what, switch) in modes {
        let mut suite = Suite::new(&format!("overwrite, {what}"));
        let mut seed = 700;
        while !suite.done() {
            seed += 1;
            let mut cfg = config(3);
            switch(&mut cfg);
            let mut run = suite.run(format!("overwrite, {what} #{seed}"), cfg, seed);
            fill(&mut run, &SIZES);
            for slot in 0..SIZES.len() {
                if run.done() {
                    break;
                }
                overwrite_op(&mut run, "overwrite", slot, Shape::Range);
                overwrite_op(&mut run, "overwrite", slot, Shape::TwoRanges);
            }
        }
        suite.assert_clean();
    }
}

/// A checked op: free the `n`-byte object in `slot` and clear the slot (through
/// `DerefMut` of the root if `whole_root`).
fn free_op(run: &mut Run<'_>, slot: usize, n: usize, whole_root: bool, label: String) {
    run.op("free", label, |pool, root, m, _| {
        let oid = slot_oid(pool, root, slot);
        pool.tx(|tx| {
            tx_free(tx, oid, n)?;
            tx_set_slot(tx, root, slot, 0, whole_root)
        })
        .expect("free tx");
        m.take(slot);
    });
}

#[test]
fn crash_free() {
    let mut suite = Suite::new("free");
    let mut seed = 200;
    while !suite.done() {
        seed += 1;
        // The first scenario runs whole (every object); later ones stop at the target.
        let whole = suite.states() == 0;
        let mut run = suite.run(format!("free #{seed}"), config(3), seed);
        // Two objects share the 64 B run and two the 1 KiB run: freeing the second empties
        // the run (the last object of a run); 16 KiB and 64 KiB objects are large.
        fill(&mut run, &[64, 64, 256, 1024, 1024, 4096, 16384, 65536]);
        let mut slots = run.model.used();
        run.rng.shuffle(&mut slots);
        for slot in slots {
            if !whole && run.done() {
                break;
            }
            let n = run.model.size(slot);
            let last = run.model.used_of(n).len() == 1;
            let whole_root = run.rng.chance(300);
            let label = format!(
                "free {n} B object in slot {slot}{} (root slot cleared {})",
                if n > 4096 {
                    ", a large object"
                } else if last {
                    ", the last object of its run"
                } else {
                    ""
                },
                if whole_root {
                    "via DerefMut"
                } else {
                    "via write_at"
                }
            );
            free_op(&mut run, slot, n, whole_root, label);
        }
    }
    suite.assert_clean();
}

/// One part of a multi-object transaction.
#[derive(Clone, Debug)]
enum Part {
    /// Allocate by value, or (`unzeroed`) unfilled with only these ranges of `data`
    /// written.
    Alloc {
        slot: usize,
        data: Vec<u8>,
        unzeroed: Option<Vec<(usize, usize)>>,
    },
    /// Allocate, then free again in the same transaction: nothing remains.
    AllocFree {
        size: usize,
    },
    Write {
        slot: usize,
        at: usize,
        data: Vec<u8>,
    },
    Whole {
        slot: usize,
        data: Vec<u8>,
    },
    Free {
        slot: usize,
    },
    /// Write, then free in the same transaction.
    WriteFree {
        slot: usize,
        data: Vec<u8>,
    },
}

fn plan_multi(run: &mut Run<'_>) -> Vec<Part> {
    let m = run.model.clone();
    let rng = &mut run.rng;
    let mut used = m.used();
    rng.shuffle(&mut used);
    let mut taken = Vec::new();
    let mut parts = Vec::new();
    let mut logged = 0;
    let large = m.used().iter().filter(|&&s| m.size(s) > 4096).count();
    // allocations into free slots
    let mut free_slots = (0..SLOTS).filter(|&s| m.slots[s].is_none());
    for _ in 0..rng.range(1, 2) {
        let pool = if large < 3 { &SIZES[..5] } else { &SIZES[..4] };
        let n = rng.pick(pool);
        let slot = free_slots.next().expect("free slot");
        let unzeroed = rng.chance(400).then(|| written_ranges(rng, n));
        parts.push(Part::Alloc {
            slot,
            data: rng.bytes(n),
            unzeroed,
        });
    }
    if rng.chance(300) {
        parts.push(Part::AllocFree {
            size: rng.pick(&SIZES[..4]),
        });
    }
    // overwrites and a free of existing objects (keep the record under the lane size)
    for &slot in &used {
        let n = m.size(slot);
        let part = match taken.len() {
            0 | 1 if n <= 4096 || logged + n <= 96 << 10 => {
                if rng.chance(300) {
                    logged += n;
                    Part::Whole {
                        slot,
                        data: rng.bytes(n),
                    }
                } else {
                    let len = rng.range(1, n.min(2048));
                    let at = rng.range(0, n - len);
                    logged += len;
                    Part::Write {
                        slot,
                        at,
                        data: rng.bytes(len),
                    }
                }
            }
            2 if used.len() > 4 => {
                if rng.chance(250) && n <= 16384 {
                    let len = n.min(256);
                    Part::WriteFree {
                        slot,
                        data: rng.bytes(len),
                    }
                } else {
                    Part::Free { slot }
                }
            }
            _ => continue,
        };
        taken.push(slot);
        parts.push(part);
    }
    rng.shuffle(&mut parts);
    parts
}

#[test]
fn crash_multi_object_tx() {
    let mut suite = Suite::new("multi-object tx");
    let mut seed = 300;
    while !suite.done() {
        seed += 1;
        // Seven of the nine chunks in use: 16 KiB allocations take the other two (or fail
        // with PoolFull, which aborts the transaction: then nothing may change).
        let mut run = suite.run(format!("multi #{seed}"), config(3), seed);
        fill(&mut run, &[64, 256, 1024, 4096, 65536, 64, 1024]);
        for _ in 0..12 {
            if run.done() {
                break;
            }
            let parts = plan_multi(&mut run);
            let label = format!(
                "one tx: {}",
                parts
                    .iter()
                    .map(|p| match p {
                        Part::Alloc {
                            slot,
                            data,
                            unzeroed,
                        } => format!(
                            "alloc {} B -> slot {slot}{}",
                            data.len(),
                            match unzeroed {
                                Some(r) => format!(" (unzeroed, writes {r:?})"),
                                None => String::new(),
                            }
                        ),
                        Part::AllocFree { size } => format!("alloc+free {size} B"),
                        Part::Write { slot, at, data } =>
                            format!("write slot {slot} [{at}, {})", at + data.len()),
                        Part::Whole { slot, data } =>
                            format!("overwrite slot {slot} ({} B)", data.len()),
                        Part::Free { slot } => format!("free slot {slot}"),
                        Part::WriteFree { slot, .. } => format!("write+free slot {slot}"),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            run.op("multi", label, |pool, root, m, _| {
                let sizes: Vec<usize> = (0..SLOTS)
                    .map(|s| m.slots[s].as_ref().map_or(0, |d| d.len()))
                    .collect();
                // What each unfilled allocation holds, by slot (known once it is made).
                let mut contents = std::collections::BTreeMap::new();
                let r = pool.tx(|tx| {
                    contents.clear();
                    for p in &parts {
                        match p {
                            Part::Alloc {
                                slot,
                                data,
                                unzeroed: None,
                            } => {
                                let o = tx_alloc(tx, data)?;
                                tx_set_slot(tx, root, *slot, o, false)?;
                            }
                            Part::Alloc {
                                slot,
                                data,
                                unzeroed: Some(ranges),
                            } => {
                                let (o, c) = tx_alloc_unzeroed(tx, data, ranges)?;
                                contents.insert(*slot, c);
                                tx_set_slot(tx, root, *slot, o, false)?;
                            }
                            Part::AllocFree { size } => {
                                let o = tx_alloc(tx, &vec![7; *size])?;
                                tx_write(tx, o, *size, 0, &[1, 2, 3])?;
                                tx_free(tx, o, *size)?;
                            }
                            Part::Write { slot, at, data } => {
                                let o = tx.get(root)?[*slot];
                                tx_write(tx, o, sizes[*slot], *at, data)?;
                            }
                            Part::Whole { slot, data } => {
                                let o = tx.get(root)?[*slot];
                                tx_write_whole(tx, o, data)?;
                            }
                            Part::Free { slot } => {
                                let o = tx.get(root)?[*slot];
                                tx_free(tx, o, sizes[*slot])?;
                                tx_set_slot(tx, root, *slot, 0, true)?;
                            }
                            Part::WriteFree { slot, data } => {
                                let o = tx.get(root)?[*slot];
                                tx_write(tx, o, sizes[*slot], 0, data)?;
                                tx_free(tx, o, sizes[*slot])?;
                                tx_set_slot(tx, root, *slot, 0, false)?;
                            }
                        }
                    }
                    Ok(())
                });
                match r {
                    Ok(()) => {
                        for p in &parts {
                            match p {
                                Part::Alloc { slot, data, .. } => m.put(
                                    *slot,
                                    contents.get(slot).cloned().unwrap_or_else(|| data.clone()),
                                ),
                                Part::Write { slot, at, data } => m.write(*slot, *at, data),
                                Part::Whole { slot, data } => m.write(*slot, 0, data),
                                Part::Free { slot } | Part::WriteFree { slot, .. } => {
                                    m.take(*slot);
                                }
                                Part::AllocFree { .. } => {}
                            }
                        }
                    }
                    // The heap may be too fragmented for a large object: then nothing changed.
                    Err(Error::PoolFull { .. }) => {}
                    Err(e) => panic!("multi-object tx failed: {e}"),
                }
            });
        }
    }
    suite.assert_clean();
}

fn inner_error() -> Error {
    Error::Aborted {
        reason: "the inner transaction gives up".into(),
    }
}

#[test]
fn crash_nested_tx() {
    let mut suite = Suite::new("nested tx");
    let mut seed = 400;
    while !suite.done() {
        seed += 1;
        // The first scenario runs whole (every kind of nesting); later ones stop at the
        // target.
        let whole = suite.states() == 0;
        let mut run = suite.run(format!("nested #{seed}"), config(3), seed);
        fill(&mut run, &[64, 1024, 4096, 16384]);
        let mut kinds: Vec<u32> = (0..7).collect();
        run.rng.shuffle(&mut kinds);
        for k in kinds {
            if !whole && run.done() {
                break;
            }
            let used = run.model.used();
            let b = run.rng.pick(&used);
            let nb = run.model.size(b);
            let len = run.rng.range(1, nb.min(512));
            let at = run.rng.range(0, nb - len);
            let patch = run.rng.bytes(len);
            let slot = run.model.free_slot();
            let n_new = run.rng.pick(&SIZES[..4]);
            let fresh = run.rng.bytes(n_new);
            match k {
                0 => run.op(
                    "nested",
                    format!("outer alloc {n_new} B -> slot {slot}; inner write slot {b} [{at}, {})", at + len),
                    |pool, root, m, _| {
                        pool.tx(|tx| {
                            let o = tx_alloc(tx, &fresh)?;
                            tx_set_slot(tx, root, slot, o, false)?;
                            pool.tx(|tx2| {
                                let ob = tx2.get(root)?[b];
                                tx_write(tx2, ob, nb, at, &patch)
                            })
                        })
                        .expect("nested tx");
                        m.put(slot, fresh);
                        m.write(b, at, &patch);
                    },
                ),
                1 => {
                    // three levels: outer write, inner alloc, innermost free
                    let victims: Vec<usize> = used.iter().copied().filter(|&s| s != b).collect();
                    let d = run.rng.pick(&victims);
                    let nd = run.model.size(d);
                    run.op(
                        "nested",
                        format!(
                            "outer write slot {b}; inner alloc {n_new} B -> slot {slot}; innermost free slot {d}"
                        ),
                        |pool, root, m, _| {
                            pool.tx(|tx| {
                                let ob = tx.get(root)?[b];
                                tx_write(tx, ob, nb, at, &patch)?;
                                pool.tx(|tx2| {
                                    let o = tx_alloc(tx2, &fresh)?;
                                    tx_set_slot(tx2, root, slot, o, true)?;
                                    pool.tx(|tx3| {
                                        let od = tx3.get(root)?[d];
                                        tx_free(tx3, od, nd)?;
                                        tx_set_slot(tx3, root, d, 0, false)
                                    })
                                })
                            })
                            .expect("nested tx");
                            m.write(b, at, &patch);
                            m.put(slot, fresh);
                            m.take(d);
                        },
                    );
                    fill(&mut run, &[nd]);
                }
                2 => run.op(
                    "nested",
                    format!("outer and inner write the same object (slot {b}), different ranges"),
                    |pool, root, m, _| {
                        let tail = vec![0x3c; 8.min(nb - at - len).max(1)];
                        let tail_at = nb - tail.len();
                        pool.tx(|tx| {
                            let ob = tx.get(root)?[b];
                            tx_write(tx, ob, nb, tail_at, &tail)?;
                            pool.tx(|tx2| tx_write(tx2, ob, nb, at, &patch))
                        })
                        .expect("nested tx");
                        m.write(b, tail_at, &tail);
                        m.write(b, at, &patch);
                    },
                ),
                3 => run.op_unchanged(
                    "nested-abort",
                    format!("outer alloc + write; inner returns Err, propagated: all aborted (slot {slot})"),
                    |pool, root, _, _| {
                        let r: pgl::Result<()> = pool.tx(|tx| {
                            let o = tx_alloc(tx, &fresh)?;
                            tx_set_slot(tx, root, slot, o, false)?;
                            let ob = tx.get(root)?[b];
                            tx_write(tx, ob, nb, at, &patch)?;
                            pool.tx(|_| Err::<(), _>(inner_error()))
                        });
                        assert!(matches!(r, Err(Error::Aborted { .. })), "{r:?}");
                    },
                ),
                4 => run.op_unchanged(
                    "nested-abort",
                    "outer write; inner fails on a bad oid, the outer swallows it: commit refuses".to_string(),
                    |pool, root, _, _| {
                        let r: pgl::Result<()> = pool.tx(|tx| {
                            let ob = tx.get(root)?[b];
                            tx_write(tx, ob, nb, at, &patch)?;
                            let inner = pool.tx(|tx2| {
                                tx2.open(Oid::<[u8; 64]>::from_raw(ob + 8))?[0] = 1;
                                Ok(())
                            });
                            assert!(inner.is_err());
                            Ok(())
                        });
                        assert!(r.is_err(), "a transaction whose nested part failed must not commit");
                    },
                ),
                5 => run.op_unchanged(
                    "nested-abort",
                    "inner alloc + write succeed, then the outer returns Err".to_string(),
                    |pool, root, _, _| {
                        let r: pgl::Result<()> = pool.tx(|_| {
                            pool.tx(|tx2| {
                                let o = tx_alloc(tx2, &fresh)?;
                                tx_set_slot(tx2, root, slot, o, false)?;
                                let ob = tx2.get(root)?[b];
                                tx_write(tx2, ob, nb, at, &patch)
                            })?;
                            Err(inner_error())
                        });
                        assert!(r.is_err());
                    },
                ),
                _ => run.op(
                    "nested",
                    format!("two sibling inner txs: write slot {b}, alloc {n_new} B -> slot {slot}"),
                    |pool, root, m, _| {
                        pool.tx(|_| {
                            pool.tx(|tx2| {
                                let ob = tx2.get(root)?[b];
                                tx_write(tx2, ob, nb, at, &patch)
                            })?;
                            pool.tx(|tx2| {
                                let o = tx_alloc_then_write(tx2, &fresh)?;
                                tx_set_slot(tx2, root, slot, o, false)
                            })
                        })
                        .expect("nested tx");
                        m.write(b, at, &patch);
                        m.put(slot, fresh);
                    },
                ),
            }
        }
    }
    suite.assert_clean();
}

/// Setup: fills the remaining chunks with 16 KiB objects (one chunk each) until the heap is
/// full, so that the next allocation of a new class must go to a zone added later.
fn fill_chunks(run: &mut Run<'_>) {
    run.setup(|pool, root, m, rng| loop {
        let slot = m.free_slot();
        let data = rng.bytes(16384);
        match alloc_tx(pool, root, slot, &data, &Fill::Value, false) {
            Ok(_) => m.put(slot, data),
            Err(Error::PoolFull { .. }) => break,
            Err(e) => panic!("setup alloc: {e}"),
        }
    });
}

#[test]
fn crash_grow() {
    let mut suite = Suite::new("grow");
    let mut seed = 500;
    let zone = config(1).geometry().zone_size();
    while !suite.done() {
        seed += 1;
        let mut run = suite.run(format!("grow #{seed}"), config(1), seed);
        fill(&mut run, &[65536]);
        fill_chunks(&mut run);
        // New classes, so that each allocation needs a chunk of the newest zone. Pools stop
        // at MAX_ZONES (every crash image is a copy of the whole pool); later scenarios take
        // other classes and steps. Every other scenario starts with one grow to MAX_ZONES
        // (three zones at once), the others grow by one or two zones a step.
        const MAX_ZONES: u64 = 4;
        let mut classes = vec![64, 256, 1024, 4096, 16384, 65536];
        run.rng.shuffle(&mut classes);
        let mut zones = 1;
        for n in classes {
            if run.done() || zones >= MAX_ZONES {
                break;
            }
            let add = if zones == 1 && seed % 2 == 1 {
                MAX_ZONES - 1
            } else if run.rng.chance(300) && zones + 2 <= MAX_ZONES {
                2
            } else {
                1
            };
            let size_before = run.pool.size();
            run.op(
                "grow",
                format!("grow from {zones} to {} zones", zones + add),
                |pool, _, _, _| {
                    pool.grow(size_before + add * zone).expect("grow");
                    assert_eq!(pool.size(), size_before + add * zone);
                },
            );
            zones += add;
            let oid = alloc_op(
                &mut run,
                "alloc after grow",
                n,
                "the first object in a new zone",
                None,
            );
            assert!(
                zone_of(oid) >= zones - add,
                "the new object lies in an old zone"
            );
            if add > 1 {
                // A large object takes the first new zone with two free chunks: another
                // new zone than the first object's (a run's chunk, from the last new zone,
                // or the first new zone's first two chunks if that was large too).
                let large = alloc_op(
                    &mut run,
                    "alloc after grow",
                    65536,
                    "a large object in another new zone",
                    None,
                );
                assert!(
                    zone_of(large) >= zones - add && zone_of(large) != zone_of(oid),
                    "the large object lies in zone {}, the first in {}",
                    zone_of(large),
                    zone_of(oid)
                );
            }
            // A transaction touching an old zone and the new one.
            let used = run.model.used();
            let old = used[0];
            let new = *used.last().expect("an object");
            let (na, nb) = (run.model.size(old), run.model.size(new));
            let (pa, pb) = (run.rng.bytes(na.min(200)), run.rng.bytes(nb.min(200)));
            run.op(
                "overwrite across zones",
                format!(
                    "one tx writes slot {old} (zone 0) and slot {new} (zone {})",
                    zones - 1
                ),
                |pool, root, m, _| {
                    pool.tx(|tx| {
                        tx_write(tx, tx.get(root)?[old], na, 0, &pa)?;
                        tx_write(tx, tx.get(root)?[new], nb, nb - pb.len(), &pb)
                    })
                    .expect("cross-zone tx");
                    m.write(old, 0, &pa);
                    m.write(new, nb - pb.len(), &pb);
                },
            );
            fill_chunks(&mut run);
            if add > 1 && !run.done() {
                // Every zone holds objects now: one transaction writes one in each.
                let slots: Vec<usize> = (0..zones)
                    .map(|z| {
                        let used = run.model.used();
                        *used
                            .iter()
                            .find(|&&s| zone_of(slot_oid(&run.pool, run.root, s)) == z)
                            .unwrap_or_else(|| panic!("no object in zone {z}"))
                    })
                    .collect();
                let patches: Vec<(usize, usize, Vec<u8>)> = slots
                    .iter()
                    .map(|&s| {
                        let size = run.model.size(s);
                        let len = size.min(64);
                        let at = run.rng.below(size - len + 1);
                        (s, at, run.rng.bytes(len))
                    })
                    .collect();
                run.op(
                    "overwrite across zones",
                    format!("one tx writes slots {slots:?}, one in each of zones 0..{zones}"),
                    |pool, root, m, _| {
                        pool.tx(|tx| {
                            for (s, at, p) in &patches {
                                tx_write(tx, tx.get(root)?[*s], m.size(*s), *at, p)?;
                            }
                            Ok(())
                        })
                        .expect("tx across every zone");
                        for (s, at, p) in &patches {
                            m.write(*s, *at, p);
                        }
                    },
                );
            }
        }
    }
    suite.assert_clean();
}

/// The smallest reproduction of what `crash_alloc` finds: a crash while the commit fence of
/// an allocating transaction is in flight may persist the sealed redo record without the new
/// object's header and payload (written straight into free space and flushed under the same
/// fence). Recovery then replays the record — the bitmap bit and the root slot — and the pool
/// holds an allocated, reachable object whose header is zero and whose checksum fails:
/// neither the state before the transaction nor the state after it.
#[test]
fn crash_alloc_record_durable_before_new_object() {
    let cfg = config(1);
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    let points: Arc<Mutex<Vec<CrashPoint>>> = Arc::default();
    let sink = points.clone();
    sim.set_fence_hook(move |s: &CrashSim| sink.lock().unwrap().push(s.crash_point()));
    pool.tx(|tx| {
        let o = tx.alloc([0xab_u8; 64])?;
        tx.open(root)?.write_at(0, &o.raw());
        Ok(())
    })
    .unwrap();
    sim.clear_fence_hook();
    let points = points.lock().unwrap();
    let lanes_end = cfg.geometry().header_offset(1) / 8;
    // At whichever fence the record and the new object are pending together (the commit's
    // first, as it is written now), and at every other: the cache wrote back the lines of
    // the redo lanes, not those of the new object.
    let mut met = 0;
    for (k, cp) in points.iter().enumerate() {
        let addrs = pending_addrs(cp);
        if addrs.iter().any(|&a| a < lanes_end) && addrs.iter().any(|&a| a >= lanes_end) {
            met += 1;
        }
        let dev = cp.device(0, |i| addrs[i] < lanes_end);
        let p = Pool::open_sim(&dev, LAYOUT).expect("recovery");
        let slot0 = p.get(p.root::<Root>().unwrap()).unwrap()[0];
        let bad = p.verify_objects(|_, _| {}).unwrap();
        assert!(
            bad.is_empty(),
            "fence {k}: after recovery root slot 0 = {slot0:#x} and the allocated objects fail \
             their checksums: {bad:?}"
        );
        if slot0 != 0 {
            let obj = p.get(Oid::<[u8; 64]>::from_raw(slot0)).unwrap();
            assert_eq!(
                *obj, [0xab; 64],
                "fence {k}: the new object's payload did not survive"
            );
        }
    }
    assert!(
        met > 0,
        "no fence had lane and object lines pending together"
    );
}

/// A geometry whose smallest class gets plain run bitmaps (a checked one would take more
/// than half of its 8 KiB lanes): 512 KiB chunks, one a row, four data rows (the
/// metadata, the root's run and two more chunks).
fn plain_run_config() -> pgl::Config {
    let mut c = config(1);
    c.chunk_size = 512 << 10;
    c.chunks_per_row = 1;
    c.rows = 4;
    c.lane_size = 8 << 10;
    c.size = c.geometry().pool_size(1);
    c.max_size = c.size;
    c
}

/// Bytes a plain bitmap of the smallest class takes at the start of a 512 KiB chunk.
const PLAIN_BITMAP: u64 = 2048;

/// Allocates a large `[u8; N]` (zeroed), leaves old bytes where the bitmap of a run made
/// over each of its chunks would lie, and frees it; the chunks it took. `sparse`: a few
/// nonzero words, none at the start of a chunk but the first (whose first words hold the
/// object's header), so that a zero entry starts after them; else random bytes over
/// the whole bitmap.
fn freed_large_object<const N: usize>(pool: &Pool, rng: &mut Rng, sparse: bool) -> Vec<u64>
where
    [u8; N]: pgl::Persistent,
{
    let g = pool.info().header.geo;
    let o = pool
        .tx(|tx| tx.alloc_zeroed::<[u8; N]>())
        .expect("setup: large alloc");
    let chunk_of = |off: u64| (off - g.zones_offset()) / g.chunk_size;
    let chunks: Vec<u64> = (chunk_of(o.raw() - 16)..=chunk_of(o.raw() + N as u64 - 1)).collect();
    for &c in &chunks {
        // The bitmap's bytes inside the payload, as payload offsets.
        let at = g.zones_offset() + c * g.chunk_size;
        let (from, to) = (at.max(o.raw()) - o.raw(), at + PLAIN_BITMAP - o.raw());
        let writes: Vec<(u64, Vec<u8>)> = if sparse {
            (0..rng.range(1, 3))
                .map(|_| {
                    let w = rng.range(2, (PLAIN_BITMAP / 8) as usize - 1) as u64;
                    (
                        at + w * 8 - o.raw(),
                        (rng.next() | 1).to_le_bytes().to_vec(),
                    )
                })
                .collect()
        } else {
            vec![(from, rng.bytes((to - from) as usize))]
        };
        pool.tx(|tx| {
            let mut h = tx.open(o)?;
            for (a, bytes) in &writes {
                h.write_bytes(*a as usize, bytes);
            }
            Ok(())
        })
        .expect("setup: old bytes");
    }
    pool.tx(|tx| tx.free(o)).expect("setup: large free");
    chunks
}

/// A new plain run made over a chunk of a large object freed earlier: the run's bitmap
/// words hold the old payload's bytes, which the commit clears with one zero entry, ahead
/// of the entry that sets the new object's bit. The old object took one chunk or two
/// (then the run takes the second, whose bitmap holds payload bytes only); its bytes there
/// are random (every word to clear) or zero but for a few words (a short entry). Then a
/// second object joins the run (no zero entry: the bitmap is clear) and the first is
/// freed (the run's last object but one).
#[test]
fn crash_new_run_over_freed_large_object() {
    let mut suite = Suite::new("new run over a freed large object");
    let mut seed = 900;
    let cfg = plain_run_config();
    let geo = cfg.geometry();
    let chunk_of = move |off: u64| (off - geo.zones_offset()) / geo.chunk_size;
    while !suite.done() {
        seed += 1;
        let mut run = suite.run(format!("plain run #{seed}"), cfg.clone(), seed);
        let sparse = seed % 2 == 0;
        let two = seed / 2 % 2 == 1;
        let mut big_chunks = Vec::new();
        run.setup(|pool, root, m, rng| {
            big_chunks = if two {
                freed_large_object::<700_000>(pool, rng, sparse)
            } else {
                freed_large_object::<200_000>(pool, rng, sparse)
            };
            if two {
                // A one-chunk object takes the first chunk back, so that the run goes
                // to the second, whose bitmap words hold payload bytes only.
                let slot = m.free_slot();
                pool.tx(|tx| {
                    let o = tx.alloc_zeroed::<[u8; 200_000]>()?;
                    tx_set_slot(tx, root, slot, o.raw(), false)
                })
                .expect("setup: filler");
                m.put(slot, vec![0; 200_000]);
            }
        });
        let what = format!(
            "{} over a freed {}-chunk object",
            if sparse {
                "a few nonzero words"
            } else {
                "random bytes"
            },
            big_chunks.len()
        );
        let slot = run.model.free_slot();
        let data = run.rng.bytes(16);
        let fill = Fill::random(&mut run.rng, 16);
        let mut chunk = 0;
        run.op(
            "alloc",
            format!("alloc 16 B into slot {slot}: a new run, {what} ({fill:?})"),
            |pool, root, m, _| {
                let (o, contents) =
                    alloc_tx(pool, root, slot, &data, &fill, false).expect("alloc tx");
                chunk = chunk_of(o);
                assert_eq!(
                    chunk,
                    *big_chunks.last().unwrap(),
                    "the run took the freed chunk"
                );
                m.put(slot, contents);
            },
        );
        if run.done() {
            break;
        }
        let n = 16;
        let data = run.rng.bytes(n);
        let second = run.model.free_slot();
        run.op(
            "alloc",
            format!("alloc 16 B into slot {second}, the same run"),
            |pool, root, m, _| {
                let (o, contents) =
                    alloc_tx(pool, root, second, &data, &Fill::Value, false).expect("alloc tx");
                assert_eq!(chunk_of(o), chunk);
                m.put(second, contents);
            },
        );
        free_op(
            &mut run,
            slot,
            n,
            false,
            format!("free the first 16 B object (slot {slot})"),
        );
    }
    suite.assert_clean();
}
