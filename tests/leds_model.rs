//! Random op streams over `#[extendible]` objects against a model, with crashes: one
//! thread allocates, reads, writes, copies, frees and upgrades objects of three shapes of
//! extension chain, through three versions of the program, in transactions of one op or
//! of several (which may use one object more than once: make, read, upgrade, write, copy
//! and free it in one transaction). Now and then a transaction, or a `pool.upgrade_all`,
//! is crashed at one of its fences or after it, with none, all or a random half of the
//! words not yet on media reaching media; the stream recovers and carries on from what
//! survived. Versions only move forward, as a program's builds do: some steps switch to the
//! next version, in the same process, at a clean reopen or at the recovery after a crash.
//! (An older build on newer objects is `leds_older_build.rs`'s; `upgrade_all` runs one
//! batch here, as the streams hold fewer objects than a batch: `leds_crash.rs` crashes
//! it between batches.)
//!
//! The shapes: `W` (`reserve = 24`: both groups inline, the last one without its link),
//! `R` (`reserve = 16`: group 1 inline, group 2 an object of its own once group 1 needs its
//! link), `B` (no reserve: every group an object of its own) and `O` (`W` declared
//! `upgrade = on_write`: a read shows the groups it lacks without storing them; writes,
//! `tx.upgrade` and `upgrade_all` store them). Group 1 widens the key
//! (`replaces = key`), group 2 adds a tag computed from the widened key, so what an upgrade
//! writes depends on when it runs.
//!
//! Some steps scribble over an object's payload (a base's fields, link or reserve, or a
//! separate group) behind pgl's back; a scrub must then rebuild one object from parity
//! and leave the pool clean, and the pool must still equal the model.
//!
//! After every crash, reopen and scribble, and at the end, the pool must equal the model
//! (before or after the transaction a crash interrupted): every root slot the same oid,
//! every object its fields as this version reads them and the groups present (read in a
//! transaction that is then rolled back, so checking upgrades nothing), the objects in the
//! pool by type id exactly the live ones and their separate groups, every checksum and the
//! parity of every zone sound. `PGL_LEDS_MODEL_SEEDS` sets the number of streams (default
//! 48, of 150 steps), `PGL_LEDS_MODEL_FIRST` the first seed (default 0).

mod common;

use common::crash::{crash_points_of, Rng};
use pgl::{Config, CrashSim, Oid, Pool, Tx};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The 64-bit key group 1's init makes of a 32-bit one.
fn widened(key: u32) -> u64 {
    u64::from(key) << 20 | 0x5eed
}

/// What group 2's init makes of the widened key.
fn tag_of(key64: u64) -> u64 {
    key64.rotate_left(9) ^ 0xa5a5
}

/// The three shapes of one version (same type ids across versions), with `$ext` (the
/// extension fields that version knows) after the base fields.
macro_rules! shapes {
    (@one $name:ident, $id:tt, ($($attr:tt)*), $($ext:tt)*) => {
        #[pgl::extendible($($attr)*)]
        #[derive(pgl::Persistent)]
        #[pgl(id = $id)]
        #[repr(C)]
        pub struct $name {
            pub key: u32,
            pub value: u32,
            $($ext)*
        }
    };
    ($($ext:tt)*) => {
        shapes!(@one W, 0x1ed5_f101, (reserve = 24), $($ext)*);
        shapes!(@one R, 0x1ed5_f102, (reserve = 16), $($ext)*);
        shapes!(@one B, 0x1ed5_f103, (), $($ext)*);
        shapes!(@one O, 0x1ed5_f104, (reserve = 24, upgrade = on_write), $($ext)*);
    };
}

mod v0 {
    shapes!();
}
mod v1 {
    shapes!(
        #[extension(1, replaces = key, init = |old| super::widened(old.key()))]
        pub key64: u64,
    );
}
mod v2 {
    shapes!(
        #[extension(1, replaces = key, init = |old| super::widened(old.key()))]
        pub key64: u64,
        #[extension(2, init = |old| super::tag_of(old.key64()))]
        pub tag: u64,
    );
}

/// The shape of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    W,
    R,
    B,
    O,
}

const SHAPES: [Shape; 4] = [Shape::W, Shape::R, Shape::B, Shape::O];

/// The groups of an object of shape `s` with `level` groups that are objects of their own.
fn separate_groups(s: Shape, level: u8) -> std::ops::RangeInclusive<usize> {
    let first = match s {
        Shape::W | Shape::O => 3,
        Shape::R => 2,
        Shape::B => 1,
    };
    first..=usize::from(level)
}

/// What the model knows of one object: its fields as of the groups it carries (`level`).
#[derive(Clone, Debug, PartialEq)]
struct Obj {
    shape: Shape,
    /// Its oid (0 until the transaction that makes it has).
    oid: u64,
    level: u8,
    /// The base key (meaningful while `level` is 0: no later version reads it).
    key32: u32,
    /// Group 1's key (meaningful from `level` 1).
    key64: u64,
    /// Group 2's tag (meaningful from `level` 2).
    tag: u64,
    value: u32,
}

impl Obj {
    /// The object as a read by version `v` leaves it: upgraded, unless its struct is
    /// upgraded on write.
    fn read_by(&self, v: u8) -> Obj {
        match self.shape {
            Shape::O => self.clone(),
            _ => self.upgraded(v),
        }
    }

    /// The object as an upgrade to version `v` leaves it (the inits of the groups it
    /// lacks, in order, from its fields as they are then).
    fn upgraded(&self, v: u8) -> Obj {
        let mut o = self.clone();
        if o.level < 1 && v >= 1 {
            o.key64 = widened(o.key32);
        }
        if o.level < 2 && v >= 2 {
            o.tag = tag_of(o.key64);
        }
        o.level = o.level.max(v);
        o
    }

    /// What version `v` reads of it: the key (the widened one from version 1), the value,
    /// and the tag in version 2.
    fn seen(&self, v: u8) -> Seen {
        let o = self.upgraded(v);
        match v {
            0 => (u64::from(o.key32), o.value, None),
            1 => (o.key64, o.value, None),
            _ => (o.key64, o.value, Some(o.tag)),
        }
    }
}

type Seen = (u64, u32, Option<u64>);

/// Root slots that hold objects.
const SLOTS: usize = 40;
type Root = [u64; 64];

/// The model: which slot holds which object.
type Model = Vec<Option<Obj>>;

/// The new fields of a write (`None`: left as it is).
#[derive(Clone, Copy, Debug)]
struct Write {
    key: Option<u64>,
    value: Option<u32>,
    tag: Option<u64>,
}

/// Dispatches `$body` on shape `$s`, with `$T` the struct of that shape in version module
/// `$v` and `$D` its `Data`.
macro_rules! with_type {
    ($v:ident, $s:expr, |$T:ident, $D:ident| $body:expr) => {
        with_type!(@arms $v, $s, $T, $D, $body, (W, WData), (R, RData), (B, BData), (O, OData))
    };
    (@arms $v:ident, $s:expr, $T:ident, $D:ident, $body:expr, $(($name:ident, $data:ident)),*) => {
        match $s {
            $(Shape::$name => {
                #[allow(unused)]
                type $T = $v::$name;
                #[allow(unused)]
                type $D = $v::$data;
                $body
            })*
        }
    };
}

/// `with_type!` on the version `$v` names at run time.
macro_rules! with_version {
    ($v:expr, $s:expr, |$T:ident, $D:ident| $body:expr) => {
        match $v {
            0 => with_type!(v0, $s, |$T, $D| $body),
            1 => with_type!(v1, $s, |$T, $D| $body),
            _ => with_type!(v2, $s, |$T, $D| $body),
        }
    };
}

/// The type id of a shape's base.
fn base_id(s: Shape) -> u32 {
    with_type!(v2, s, |T, D| <T as pgl::Persistent>::TYPE_ID)
}

/// The type id of a shape's group `k`.
fn group_id(s: Shape, k: usize) -> u32 {
    with_type!(v2, s, |T, D| <T as pgl::Extendible>::GROUP_KEYS[k - 1].0)
}

/// Version `v`'s read of the object at `raw` (upgrading it if it lacks groups), through
/// `tx.ext_with` or, with `view`, a view `tx.ext` returns.
fn read(tx: &Tx<'_>, v: u8, s: Shape, raw: u64, view: bool) -> pgl::Result<Seen> {
    use v1::{BExtFields as _, OExtFields as _, RExtFields as _, WExtFields as _};
    use v2::{BExtFields as _, OExtFields as _, RExtFields as _, WExtFields as _};
    match v {
        0 => with_type!(v0, s, |T, D| {
            let n = tx.get(Oid::<T>::from_raw(raw))?;
            Ok((u64::from(n.key), n.value, None))
        }),
        1 => with_type!(v1, s, |T, D| {
            let oid = Oid::<T>::from_raw(raw);
            match view {
                true => tx.ext(oid).map(|n| (*n.key(), n.value, None)),
                false => tx.ext_with(oid, |n| (*n.key(), n.value, None)),
            }
        }),
        _ => with_type!(v2, s, |T, D| {
            let oid = Oid::<T>::from_raw(raw);
            match view {
                true => tx.ext(oid).map(|n| (*n.key(), n.value, Some(*n.tag()))),
                false => tx.ext_with(oid, |n| (*n.key(), n.value, Some(*n.tag()))),
            }
        }),
    }
}

/// Version `v`'s write of `w` into the object at `raw`.
fn write(tx: &Tx<'_>, v: u8, s: Shape, raw: u64, w: Write) -> pgl::Result<()> {
    use v1::{BExtFields as _, BFields as _, RExtFields as _, RFields as _, WExtFields as _};
    use v1::{OExtFields as _, OFields as _, WFields as _};
    use v2::{BExtFields as _, BFields as _, RExtFields as _, RFields as _, WExtFields as _};
    use v2::{OExtFields as _, OFields as _, WFields as _};
    match v {
        0 => with_type!(v0, s, |T, D| {
            let mut n = tx.open(Oid::<T>::from_raw(raw))?;
            if let Some(k) = w.key {
                n.key = k as u32;
            }
            if let Some(x) = w.value {
                n.value = x;
            }
            Ok(())
        }),
        1 => with_type!(v1, s, |T, D| {
            let mut n = tx.ext_mut(Oid::<T>::from_raw(raw))?;
            if let Some(k) = w.key {
                n.set_key(k);
            }
            if let Some(x) = w.value {
                n.set_value(x);
            }
            Ok(())
        }),
        _ => with_type!(v2, s, |T, D| {
            let mut n = tx.ext_mut(Oid::<T>::from_raw(raw))?;
            if let Some(k) = w.key {
                n.set_key(k);
            }
            if let Some(x) = w.value {
                n.set_value(x);
            }
            if let Some(t) = w.tag {
                n.set_tag(t);
            }
            Ok(())
        }),
    }
}

/// Version `v` makes `o` (of its level, `v`) with its whole chain; its oid.
fn alloc(tx: &Tx<'_>, v: u8, o: &Obj) -> pgl::Result<u64> {
    Ok(match v {
        0 => with_type!(v0, o.shape, |T, D| {
            tx.alloc_ext(D {
                key: o.key32,
                value: o.value,
            })?
            .raw()
        }),
        1 => with_type!(v1, o.shape, |T, D| {
            tx.alloc_ext(D {
                value: o.value,
                key64: o.key64,
            })?
            .raw()
        }),
        _ => with_type!(v2, o.shape, |T, D| {
            tx.alloc_ext(D {
                value: o.value,
                key64: o.key64,
                tag: o.tag,
            })?
            .raw()
        }),
    })
}

fn copy(tx: &Tx<'_>, v: u8, s: Shape, raw: u64) -> pgl::Result<u64> {
    with_version!(v, s, |T, D| {
        Ok(tx.copy_ext(Oid::<T>::from_raw(raw))?.raw())
    })
}

fn free(tx: &Tx<'_>, v: u8, s: Shape, raw: u64) -> pgl::Result<()> {
    with_version!(v, s, |T, D| tx.free(Oid::<T>::from_raw(raw)))
}

/// How many of the groups version `v` knows the object at `raw` carries.
fn present(tx: &Tx<'_>, v: u8, s: Shape, raw: u64) -> pgl::Result<usize> {
    with_version!(v, s, |T, D| tx.groups_present(Oid::<T>::from_raw(raw)))
}

fn upgrade(tx: &Tx<'_>, v: u8, s: Shape, raw: u64) -> pgl::Result<bool> {
    with_version!(v, s, |T, D| tx.upgrade(Oid::<T>::from_raw(raw)))
}

fn upgrade_all(pool: &Pool, v: u8, s: Shape) -> pgl::Result<u64> {
    with_version!(v, s, |T, D| pool.upgrade_all::<T>())
}

/// One op of a transaction, on slots of the root.
#[derive(Clone, Debug)]
enum Op {
    Alloc { slot: usize, obj: Obj },
    Read { slot: usize, view: bool },
    Write { slot: usize, w: Write },
    Copy { from: usize, to: usize },
    Free { slot: usize },
    Upgrade { slot: usize },
}

/// Runs `ops` in one transaction of version `v`, checking every read against the model;
/// the model as the transaction leaves it.
fn run_tx(pool: &Pool, root: Oid<Root>, v: u8, model: &Model, ops: &[Op]) -> Result<Model, String> {
    pool.tx(|tx| {
        let mut m = model.clone();
        for op in ops {
            let slot_oid =
                |tx: &Tx<'_>, slot: usize| -> pgl::Result<u64> { Ok(tx.get(root)?[slot]) };
            match op {
                Op::Alloc { slot, obj } => {
                    let raw = alloc(tx, v, obj)?;
                    tx.open(root)?[*slot] = raw;
                    m[*slot] = Some(Obj {
                        oid: raw,
                        ..obj.clone()
                    });
                }
                Op::Read { slot, view } => {
                    let o = m[*slot].clone().expect("read of a live slot");
                    let got = read(tx, v, o.shape, slot_oid(tx, *slot)?, *view)?;
                    let want = o.seen(v);
                    if got != want {
                        return Err(pgl::Error::Aborted {
                            reason: format!("slot {slot}: read {got:?}, the model says {want:?}"),
                        });
                    }
                    m[*slot] = Some(o.read_by(v));
                }
                Op::Write { slot, w } => {
                    let o = m[*slot].clone().expect("write of a live slot");
                    write(tx, v, o.shape, slot_oid(tx, *slot)?, *w)?;
                    let mut o = if v == 0 { o } else { o.upgraded(v) };
                    if let Some(k) = w.key {
                        if v == 0 {
                            o.key32 = k as u32;
                        } else {
                            o.key64 = k;
                        }
                    }
                    if let Some(x) = w.value {
                        o.value = x;
                    }
                    if let Some(t) = w.tag {
                        o.tag = t;
                    }
                    m[*slot] = Some(o);
                }
                Op::Copy { from, to } => {
                    let o = m[*from].clone().expect("copy of a live slot");
                    let raw = copy(tx, v, o.shape, slot_oid(tx, *from)?)?;
                    tx.open(root)?[*to] = raw;
                    m[*to] = Some(Obj { oid: raw, ..o });
                }
                Op::Free { slot } => {
                    let o = m[*slot].take().expect("free of a live slot");
                    free(tx, v, o.shape, slot_oid(tx, *slot)?)?;
                    tx.open(root)?[*slot] = 0;
                }
                Op::Upgrade { slot } => {
                    let o = m[*slot].clone().expect("upgrade of a live slot");
                    let did = upgrade(tx, v, o.shape, slot_oid(tx, *slot)?)?;
                    if did != (o.level < v) {
                        return Err(pgl::Error::Aborted {
                            reason: format!("slot {slot}: upgrade said {did} at level {}", o.level),
                        });
                    }
                    m[*slot] = Some(o.upgraded(v));
                }
            }
        }
        Ok(m)
    })
    .map_err(|e| format!("{ops:?}: {e}"))
}

/// The reason a check's transaction is rolled back when everything matched.
const CHECKED: &str = "checked: every slot matches";

/// The root's words.
fn words_of(pool: &Pool, root: Oid<Root>) -> Root {
    *pool.get(root).expect("the root reads")
}

/// Whether the pool holds exactly `model`, as version `v` reads it.
fn check(pool: &Pool, root: Oid<Root>, v: u8, model: &Model) -> Result<(), String> {
    let words = *pool.get(root).map_err(|e| format!("root: {e}"))?;
    // Read in a transaction that is always rolled back: checking upgrades nothing.
    let verdict = pool.tx(|tx| {
        for (slot, o) in model.iter().enumerate() {
            let raw = words[slot];
            let found = match o {
                None if raw == 0 => continue,
                None => format!("slot {slot} holds {raw:#x}, the model none"),
                Some(_) if raw == 0 => format!("slot {slot} is empty, the model holds an object"),
                Some(o) if raw != o.oid => {
                    format!("slot {slot} holds {raw:#x}, the model {:#x}", o.oid)
                }
                Some(o) => match present(tx, v, o.shape, raw) {
                    Ok(n) if n != usize::from(o.level) => {
                        format!("slot {slot}: {n} groups, the model {}", o.level)
                    }
                    Err(e) => format!("slot {slot}: {e}"),
                    Ok(_) => match read(tx, v, o.shape, raw, false) {
                        Ok(got) if got == o.seen(v) => continue,
                        Ok(got) => {
                            format!("slot {slot}: read {got:?}, the model says {:?}", o.seen(v))
                        }
                        Err(e) => format!("slot {slot}: {e}"),
                    },
                },
            };
            return Err::<(), _>(pgl::Error::Aborted { reason: found });
        }
        Err(pgl::Error::Aborted {
            reason: CHECKED.into(),
        })
    });
    match verdict {
        Err(pgl::Error::Aborted { reason }) if reason == CHECKED => {}
        Err(pgl::Error::Aborted { reason }) => return Err(reason),
        other => return Err(format!("checking: {other:?}")),
    }
    // The root, the live objects and their separate groups, nothing else: counted by type
    // id, so that a group leaked and another lost do not cancel out.
    let mut want = BTreeMap::new();
    for o in model.iter().flatten() {
        *want.entry(base_id(o.shape)).or_insert(0) += 1;
        for k in separate_groups(o.shape, o.level) {
            *want.entry(group_id(o.shape, k)).or_insert(0) += 1;
        }
    }
    let mut found = BTreeMap::new();
    for (off, h) in pool.objects().map_err(|e| e.to_string())? {
        if off != root.raw() {
            *found.entry(h.type_id).or_insert(0) += 1;
        }
    }
    if found != want {
        return Err(format!(
            "objects by type id in the pool {found:x?}, in the model {want:x?} (the root aside)"
        ));
    }
    let bad = pool.verify_objects(|_, _| {}).map_err(|e| e.to_string())?;
    if !bad.is_empty() {
        return Err(format!("damaged objects: {bad:?}"));
    }
    let stale = pool.verify_parity().map_err(|e| e.to_string())?;
    if !stale.is_empty() {
        return Err(format!("stale parity in zones {stale:?}"));
    }
    Ok(())
}

/// A small pool of many small chunks: every size class of the three shapes and their
/// groups gets runs of its own.
fn config() -> Config {
    let mut c = Config::small("leds-model");
    c.chunk_size = 16 << 10;
    c.rows = 16;
    c.size = c.geometry().pool_size(2);
    c
}

/// What the streams did, summed: so that a run shows each branch was taken.
#[derive(Default, Debug)]
struct Tally {
    /// Crashes recovered from.
    crashes: u64,
    /// Of those, in a transaction that changed the model: recovered to the state before
    /// it, and to the state after it.
    before_after: [u64; 2],
    /// Steps run by each version.
    steps: [u64; 3],
    /// Crashes in transactions that upgraded objects of each shape (`W`, `R`, `B`, `O`),
    /// recovered to the state before and after them.
    upgrade_crashes: [[u64; 2]; 4],
    /// Reads of `O` objects that lack groups: shown upgraded, left as they were; of
    /// those, reads of objects that carry some groups (group 1 stored, group 2 built).
    read_through: u64,
    read_through_partial: u64,
    /// Crashes in `upgrade_all`.
    upgrade_all_crashes: u64,
    /// Scribbles injected over a base (its fields, link or reserve) and over a separate
    /// group, each rebuilt by a scrub.
    scribbled_bases: u64,
    scribbled_groups: u64,
    /// Clean reopens, `upgrade_all` calls, and streams that reached version 2.
    reopens: u64,
    upgrade_alls: u64,
    at_v2: u64,
}

/// A pool on its simulated device, run by version `v` of the program.
struct Run {
    dev: Arc<CrashSim>,
    /// `None` only while it is reopened.
    pool: Option<Pool>,
    root: Oid<Root>,
    cfg: Config,
    v: u8,
}

impl Run {
    fn pool(&self) -> &Pool {
        self.pool.as_ref().expect("the pool is open")
    }

    /// Runs `op`, which returns the model it leaves, capturing a crash point at each of its
    /// fences; then crashes at one of them or after it, with none, all or a random half of
    /// the words not yet on media reaching it, recovers (perhaps as the next version), and
    /// requires the recovered pool to equal `model` or what `op` left. Returns what `op`
    /// left, and whether the recovered pool holds it (else it holds `model`).
    fn crash_around(
        &mut self,
        rng: &mut Rng,
        model: &Model,
        op: impl FnOnce(&Pool) -> Result<Model, String>,
    ) -> Result<(Model, bool), String> {
        let (after, mut points) = crash_points_of(&self.dev, || op(self.pool()));
        let after = after?;
        points.push(self.dev.crash_point());
        let cp = &points[rng.below(points.len())];
        let p = rng.below(3);
        let mut keep = Rng::new(rng.next());
        let image = cp.device(self.cfg.size, |_| match p {
            0 => false,
            1 => true,
            _ => keep.chance(500),
        });
        if self.v < 2 && rng.chance(100) {
            self.v += 1;
        }
        self.pool =
            Some(Pool::open_sim_with(&image, &self.cfg).map_err(|e| format!("recovery: {e}"))?);
        self.dev = image;
        match (
            check(self.pool(), self.root, self.v, model),
            check(self.pool(), self.root, self.v, &after),
        ) {
            (Ok(()), _) => Ok((after, false)),
            (_, Ok(())) => Ok((after, true)),
            (Err(b), Err(a)) => Err(format!("neither before ({b}) nor after ({a})")),
        }
    }
}

/// The shapes of which `after` holds an object upgraded since `before`.
fn upgraded_shapes(before: &Model, after: &Model) -> Vec<Shape> {
    let mut out = Vec::new();
    for (b, a) in before.iter().zip(after) {
        if let (Some(b), Some(a)) = (b, a) {
            if a.oid == b.oid && a.level > b.level && !out.contains(&a.shape) {
                out.push(a.shape);
            }
        }
    }
    out
}

/// A random op stream of `steps` steps, tallied into `t`.
fn stream(seed: u64, steps: usize, t: &mut Tally) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let cfg = config();
    let dev: Arc<CrashSim> = CrashSim::new(cfg.size);
    let pool = Pool::create_sim(&dev, &cfg).map_err(|e| e.to_string())?;
    let root = pool.root::<Root>().map_err(|e| e.to_string())?;
    let mut run = Run {
        dev,
        pool: Some(pool),
        root,
        cfg,
        v: 0,
    };
    let mut model: Model = vec![None; SLOTS];
    let mut next_key = 1u32;
    for step in 0..steps {
        let v = run.v;
        t.steps[usize::from(v)] += 1;
        let live: Vec<usize> = (0..SLOTS).filter(|&s| model[s].is_some()).collect();
        let empty: Vec<usize> = (0..SLOTS).filter(|&s| model[s].is_none()).collect();
        let mut new_obj = |rng: &mut Rng| {
            next_key += 1;
            let key64 = rng.next();
            Obj {
                shape: rng.pick(&SHAPES),
                oid: 0,
                level: v,
                key32: next_key,
                key64,
                tag: tag_of(key64) ^ 1,
                value: rng.next() as u32,
            }
        };
        let write = |rng: &mut Rng| Write {
            key: rng
                .chance(600)
                .then(|| rng.next() & if v == 0 { 0xffff_ffff } else { u64::MAX }),
            value: rng.chance(600).then(|| rng.next() as u32),
            tag: (v == 2 && rng.chance(400)).then(|| rng.next()),
        };
        // One op on the slots as they are (`None`: none fits).
        let mut one = |rng: &mut Rng, live: &[usize], empty: &[usize]| -> Option<Op> {
            Some(match rng.below(12) {
                0..=2 if !empty.is_empty() => Op::Alloc {
                    slot: rng.pick(empty),
                    obj: new_obj(rng),
                },
                3..=5 if !live.is_empty() => Op::Read {
                    slot: rng.pick(live),
                    view: rng.chance(500),
                },
                6..=8 if !live.is_empty() => Op::Write {
                    slot: rng.pick(live),
                    w: write(rng),
                },
                9 if !live.is_empty() && !empty.is_empty() => Op::Copy {
                    from: rng.pick(live),
                    to: rng.pick(empty),
                },
                10 if !live.is_empty() => Op::Free {
                    slot: rng.pick(live),
                },
                11 if !live.is_empty() && v > 0 => Op::Upgrade {
                    slot: rng.pick(live),
                },
                _ => return None,
            })
        };
        let kind = rng.below(20);
        match kind {
            // A version step in the same process (a later build's code running on).
            0 if v < 2 && rng.chance(300) => run.v += 1,
            // `pool.upgrade_all` of one shape, crashed now and then.
            1 if v > 0 => {
                let s = rng.pick(&SHAPES);
                let op = |pool: &Pool| {
                    let n = upgrade_all(pool, v, s).map_err(|e| format!("upgrade_all: {e}"))?;
                    let mut m = model.clone();
                    let mut upgraded = 0;
                    for o in m.iter_mut().flatten().filter(|o| o.shape == s) {
                        upgraded += u64::from(o.level < v);
                        *o = o.upgraded(v);
                    }
                    if n != upgraded {
                        return Err(format!(
                            "upgrade_all of {s:?} to version {v} upgraded {n}, the model \
                             {upgraded}"
                        ));
                    }
                    Ok(m)
                };
                t.upgrade_alls += 1;
                model = if rng.chance(250) {
                    t.crashes += 1;
                    t.upgrade_all_crashes += 1;
                    match run.crash_around(&mut rng, &model, op) {
                        Ok((after, true)) => after,
                        Ok((_, false)) => model,
                        Err(e) => return Err(format!("step {step}, crash in upgrade_all: {e}")),
                    }
                } else {
                    op(run.pool()).map_err(|e| format!("step {step}: {e}"))?
                };
            }
            // A scribble over an object's payload (a base's fields, link or reserve, or a
            // separate group), then a scrub that must rebuild it from parity exactly: the
            // model does not change.
            3 if !live.is_empty() => {
                let pool = run.pool();
                let objects = pool.objects().map_err(|e| format!("step {step}: {e}"))?;
                let bases: Vec<u64> = live.iter().map(|&s| words_of(pool, root)[s]).collect();
                let candidates: Vec<(u64, u64)> = objects
                    .iter()
                    .filter(|(off, _)| *off != root.raw())
                    .map(|(off, h)| (*off, h.size))
                    .collect();
                let (oid, size) = candidates[rng.below(candidates.len())];
                let len = rng.range(1, 16.min(size as usize)) as u64;
                let at = 16 + rng.below((size - len + 1) as usize) as u64;
                let fault = pgl::Fault::ObjectScribble {
                    oid,
                    at,
                    len,
                    seed: rng.next(),
                };
                pool.inject(&fault)
                    .map_err(|e| format!("step {step}: {fault:?}: {e}"))?;
                let what = if bases.contains(&oid) {
                    t.scribbled_bases += 1;
                    "base"
                } else {
                    t.scribbled_groups += 1;
                    "group"
                };
                let r = pool
                    .scrub(true, |_, _| {})
                    .map_err(|e| format!("step {step}: scrub after {fault:?}: {e}"))?;
                if !r.is_clean() || r.objects_repaired != 1 {
                    return Err(format!(
                        "step {step}: {fault:?} (a {what}): the scrub repaired {} object(s) and \
                         left {:?}",
                        r.objects_repaired, r.damaged
                    ));
                }
                check(pool, root, v, &model).map_err(|e| {
                    format!("step {step}, after {fault:?} (a {what}) and a scrub: {e}")
                })?;
            }
            // A clean close and reopen, perhaps by the next version.
            2 => {
                t.reopens += 1;
                if v < 2 && rng.chance(200) {
                    run.v += 1;
                }
                // Closed before its device is opened again.
                run.pool = None;
                run.pool = Some(
                    Pool::open_sim_with(&run.dev, &run.cfg)
                        .map_err(|e| format!("step {step}: reopen: {e}"))?,
                );
                check(run.pool(), root, run.v, &model)
                    .map_err(|e| format!("step {step}, reopened: {e}"))?;
            }
            _ => {
                // A transaction of one op, or of a few: later ops may use the slots earlier
                // ones made, changed or emptied (an object read, upgraded, written and
                // copied in one transaction; one made and freed in it).
                let n = if rng.chance(600) { rng.range(2, 6) } else { 1 };
                let (mut live, mut empty) = (live, empty);
                let mut ops = Vec::new();
                for _ in 0..n {
                    let Some(op) = one(&mut rng, &live, &empty) else {
                        continue;
                    };
                    match &op {
                        Op::Alloc { slot, .. } | Op::Copy { to: slot, .. } => {
                            empty.retain(|s| s != slot);
                            live.push(*slot);
                        }
                        Op::Free { slot } => {
                            live.retain(|s| s != slot);
                            empty.push(*slot);
                        }
                        Op::Read { .. } | Op::Write { .. } | Op::Upgrade { .. } => {}
                    }
                    ops.push(op);
                }
                if ops.is_empty() {
                    continue;
                }
                for op in &ops {
                    if let Op::Read { slot, .. } = op {
                        if let Some(o) = model[*slot].as_ref() {
                            if o.shape == Shape::O && o.level < v {
                                t.read_through += 1;
                                t.read_through_partial += u64::from(o.level > 0);
                            }
                        }
                    }
                }
                // Now and then the transaction is crashed; more often one that upgrades an
                // object (a read, write or upgrade of one of an older version).
                let upgrades = ops.iter().any(|op| match op {
                    Op::Read { slot, .. } | Op::Write { slot, .. } | Op::Upgrade { slot } => {
                        model[*slot].as_ref().is_some_and(|o| o.level < v)
                    }
                    _ => false,
                });
                let op = |pool: &Pool| run_tx(pool, root, v, &model, &ops);
                if rng.chance(if upgrades { 350 } else { 100 }) {
                    t.crashes += 1;
                    let (after, done) = run
                        .crash_around(&mut rng, &model, op)
                        .map_err(|e| format!("step {step}, crash {} in {ops:?}: {e}", t.crashes))?;
                    if after != model {
                        let side = usize::from(done);
                        t.before_after[side] += 1;
                        for s in upgraded_shapes(&model, &after) {
                            t.upgrade_crashes[s as usize][side] += 1;
                        }
                    }
                    if done {
                        model = after;
                    }
                } else {
                    model = op(run.pool()).map_err(|e| format!("step {step}: {e}"))?;
                }
            }
        }
    }
    check(run.pool(), root, run.v, &model).map_err(|e| format!("at the end: {e}"))?;
    t.at_v2 += u64::from(run.v == 2);
    Ok(())
}

#[test]
fn random_op_streams_with_crashes_across_versions_match_the_model() {
    let env = |name: &str, default: u64| -> u64 {
        std::env::var(name).ok().map_or(default, |v| {
            v.parse().unwrap_or_else(|_| panic!("{name}={v:?}"))
        })
    };
    let (first, seeds) = (
        env("PGL_LEDS_MODEL_FIRST", 0),
        env("PGL_LEDS_MODEL_SEEDS", 48),
    );
    let mut t = Tally::default();
    for seed in first..first + seeds {
        stream(seed, 150, &mut t).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
    eprintln!("LEDS op streams: {seeds} from seed {first}, {t:?}");
    if seeds < 48 {
        return; // too few streams to expect every branch
    }
    // Every branch was taken: crashes that undid a transaction and crashes that kept it,
    // for transactions that upgrade objects of each shape too; reads of `O` objects that
    // lack groups, some carrying group 1 (read from the pool, group 2 built from it);
    // crashes in `upgrade_all`; reopens; scribbles over bases and over groups; the last
    // version.
    assert!(
        t.before_after.iter().all(|&n| n > 0)
            && t.upgrade_crashes.iter().flatten().all(|&n| n > 0)
            && t.upgrade_all_crashes > 0
            && t.read_through_partial > 0
            && t.reopens > 0
            && t.scribbled_bases > 0
            && t.scribbled_groups > 0
            && t.at_v2 > 0,
        "a branch of the streams was never taken: {t:?}"
    );
}
