//! kill -9: a child process (this test binary, re-run with `PGL_KILL9_CHILD=<pool path>`)
//! runs a deterministic stream of transactions on a file pool and reports each commit on
//! stdout; the parent kills it with SIGKILL at random moments, reopens the pool (recovery)
//! and checks it against a model: the state is the one after the last reported commit or
//! the one after it, every object verifies, no object leaked, free space adds up.
//!
//! `PGL_KILL9_RUNS` sets the number of kills (default 100), `PGL_KILL9_SEED` the seed.
mod support;

use pgl::{ClassTable, Config, FlushMode, Oid, Pool, SizeClasses};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const LAYOUT: &str = "kill9";
const CHILD_ENV: &str = "PGL_KILL9_CHILD";
const FAST_ENV: &str = "PGL_KILL9_CHILD_FAST_FLUSH";
const MARK: &str = "PGL-KILL9";

/// The root: `[0]` = number of committed steps, `[1..=SLOTS]` = slot oids,
/// `[COUNTERS_AT..]` = counters.
type Root = [u64; 64];
const SLOTS: usize = 24;
const COUNTERS_AT: usize = 32;
const COUNTERS: usize = 32;

/// Slot `s` holds an object of kind `s % 4`: four sizes, from a 32-byte block to a large
/// object that takes a whole chunk.
const LENS: [usize; 4] = [4, 64, 1024, 2560];

fn config() -> Config {
    let mut cfg = Config::small(LAYOUT);
    cfg.rows = 24;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.geometry().pool_size(2);
    cfg
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Content of an object created at step `k` in slot `s`.
fn fill(k: u64, s: usize, len: usize) -> Vec<u64> {
    (0..len as u64)
        .map(|j| mix(k ^ ((s as u64) << 40) ^ (j << 20)))
        .collect()
}

/// What step `k` does to one slot.
#[derive(Clone, Copy, Debug)]
enum Action {
    /// Allocate (if empty) or free (if full).
    AllocOrFree,
    /// Two words changed through `write_at` (partial logging).
    Poke,
    /// Free the object and allocate a new one in the same transaction.
    Replace,
    /// Every word changed through `DerefMut` (whole-object logging).
    Rewrite,
}

/// The deterministic plan of step `k`: (counter, [(slot, action); 2]).
fn plan(k: u64) -> (usize, [(usize, Action); 2]) {
    let r = mix(k);
    let action = |bits: u64| match bits % 4 {
        0 => Action::AllocOrFree,
        1 => Action::Poke,
        2 => Action::Replace,
        _ => Action::Rewrite,
    };
    let s1 = ((r >> 8) % SLOTS as u64) as usize;
    let s2 = (s1 + 1 + ((r >> 32) % (SLOTS as u64 - 1)) as usize) % SLOTS;
    (
        (r % COUNTERS as u64) as usize,
        [(s1, action(r >> 16)), (s2, action(r >> 24))],
    )
}

/// The model: the state after `k` steps.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Model {
    k: u64,
    counters: [u64; COUNTERS],
    slots: Vec<Option<Vec<u64>>>,
}

impl Model {
    fn new() -> Model {
        Model {
            k: 0,
            counters: [0; COUNTERS],
            slots: vec![None; SLOTS],
        }
    }

    fn step(&mut self) {
        let k = self.k + 1;
        let (c, acts) = plan(k);
        self.counters[c] = self.counters[c].wrapping_add(k);
        for (s, a) in acts {
            let len = LENS[s % 4];
            let slot = &mut self.slots[s];
            match (a, slot.as_mut()) {
                (_, None) => *slot = Some(fill(k, s, len)),
                (Action::AllocOrFree, Some(_)) => *slot = None,
                (Action::Poke, Some(v)) => {
                    v[0] = k;
                    v[(k as usize) % len] ^= mix(k);
                }
                (Action::Replace, Some(_)) => *slot = Some(fill(k, s, len)),
                (Action::Rewrite, Some(v)) => {
                    for w in v.iter_mut() {
                        *w = w.wrapping_add(k);
                    }
                }
            }
        }
        self.k = k;
    }

    fn advance_to(&mut self, k: u64) {
        while self.k < k {
            self.step();
        }
    }
}

/// Step `k` on slot `s` holding `[u64; N]`, inside `tx`; returns the slot's new oid word.
fn apply_slot<const N: usize>(
    tx: &pgl::Tx<'_>,
    k: u64,
    s: usize,
    a: Action,
    cur: u64,
) -> pgl::Result<u64> {
    let new = |tx: &pgl::Tx<'_>| -> pgl::Result<u64> {
        let mut v = [0u64; N];
        v.copy_from_slice(&fill(k, s, N));
        Ok(tx.alloc(v)?.raw())
    };
    if cur == 0 {
        return new(tx);
    }
    let oid = Oid::<[u64; N]>::from_raw(cur);
    match a {
        Action::AllocOrFree => {
            tx.free(oid)?;
            Ok(0)
        }
        Action::Poke => {
            let mut o = tx.open(oid)?;
            let i = (k as usize) % N;
            o.write_at(0, &k);
            let w = o[i] ^ mix(k);
            o.write_at(i * 8, &w);
            Ok(cur)
        }
        Action::Replace => {
            tx.free(oid)?;
            new(tx)
        }
        Action::Rewrite => {
            let mut o = tx.open(oid)?;
            for w in o.iter_mut() {
                *w = w.wrapping_add(k);
            }
            Ok(cur)
        }
    }
}

/// Step `k` as one transaction.
fn step(pool: &Pool, root: Oid<Root>, k: u64) -> pgl::Result<()> {
    let (c, acts) = plan(k);
    pool.tx(|tx| {
        let mut r = tx.open(root)?;
        r.write_at(0, &k);
        let cv = r[COUNTERS_AT + c].wrapping_add(k);
        r.write_at((COUNTERS_AT + c) * 8, &cv);
        for (s, a) in acts {
            let cur = r[1 + s];
            let next = match s % 4 {
                0 => apply_slot::<{ LENS[0] }>(tx, k, s, a, cur)?,
                1 => apply_slot::<{ LENS[1] }>(tx, k, s, a, cur)?,
                2 => apply_slot::<{ LENS[2] }>(tx, k, s, a, cur)?,
                _ => apply_slot::<{ LENS[3] }>(tx, k, s, a, cur)?,
            };
            if next != cur {
                r.write_at((1 + s) * 8, &next);
            }
        }
        Ok(())
    })
}

/// The child: open (recovering), report the step the pool is at, then run steps and report
/// each commit before starting the next, until killed.
fn child(path: &Path) {
    // `open_with` a small `max_size`: reserving the default 1 TiB of address space costs tens
    // of milliseconds per open, which would hide the recovery path from early kills. Half
    // the children use the flush mode a file pool gets by default (`msync` on a disk file:
    // few, slow commits, so kills land inside them), half cache-line flushes (as on
    // persistent memory or tmpfs: many fast commits).
    let mut cfg = config();
    if std::env::var(FAST_ENV).is_ok() {
        cfg = cfg.flush(FlushMode::detect());
    }
    let pool = Pool::open_with(path, &cfg).expect("child: open");
    let root = pool.root::<Root>().expect("child: root");
    let mut k = pool.get(root).expect("child: get root")[0];
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{MARK} START {k}").unwrap();
    out.flush().unwrap();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        k += 1;
        step(&pool, root, k).expect("child: step");
        writeln!(out, "{MARK} C {k}").unwrap();
        out.flush().unwrap();
    }
}

/// Entry point of the child process; does nothing in a normal test run.
#[test]
fn kill9_child_entry() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(Path::new(&path));
    }
}

/// Checks `pool` against `model`; `Err` says what differs.
fn verify(pool: &Pool, model: &Model, cfg: &Config) -> Result<(), String> {
    let root = pool.root::<Root>().map_err(|e| format!("root: {e}"))?;
    let r = *pool.get(root).map_err(|e| format!("get root: {e}"))?;
    if r[0] != model.k {
        return Err(format!("root says step {}, model is at {}", r[0], model.k));
    }
    if r[COUNTERS_AT..COUNTERS_AT + COUNTERS] != model.counters {
        return Err(format!("counters differ at step {}", model.k));
    }
    let mut expected: BTreeMap<u64, u64> = BTreeMap::new(); // payload offset -> size
    expected.insert(root.raw(), 512);
    for (s, m) in model.slots.iter().enumerate() {
        let oid = r[1 + s];
        let got: Option<Vec<u64>> = match oid {
            0 => None,
            o => Some(
                match s % 4 {
                    0 => pool
                        .get(Oid::<[u64; LENS[0]]>::from_raw(o))
                        .map(|v| v.to_vec()),
                    1 => pool
                        .get(Oid::<[u64; LENS[1]]>::from_raw(o))
                        .map(|v| v.to_vec()),
                    2 => pool
                        .get(Oid::<[u64; LENS[2]]>::from_raw(o))
                        .map(|v| v.to_vec()),
                    _ => pool
                        .get(Oid::<[u64; LENS[3]]>::from_raw(o))
                        .map(|v| v.to_vec()),
                }
                .map_err(|e| format!("slot {s}: {e}"))?,
            ),
        };
        if &got != m {
            return Err(format!(
                "slot {s} at step {}: pool has {:?}.., model {:?}..",
                model.k,
                got.as_ref().map(|v| &v[..v.len().min(4)]),
                m.as_ref().map(|v| &v[..v.len().min(4)]),
            ));
        }
        if oid != 0 && expected.insert(oid, LENS[s % 4] as u64 * 8).is_some() {
            return Err(format!("slot {s} shares its object {oid:#x}"));
        }
    }
    let objects: BTreeMap<u64, u64> = pool
        .objects()
        .map_err(|e| format!("objects: {e}"))?
        .into_iter()
        .map(|(o, h)| (o, h.size))
        .collect();
    if objects != expected {
        let leaked: Vec<_> = objects
            .keys()
            .filter(|o| !expected.contains_key(o))
            .collect();
        let lost: Vec<_> = expected
            .keys()
            .filter(|o| !objects.contains_key(o))
            .collect();
        return Err(format!(
            "heap objects differ from the model at step {}: leaked {leaked:x?}, missing \
             {lost:x?} ({} vs {} objects)",
            model.k,
            objects.len(),
            expected.len()
        ));
    }
    let bad = pool
        .verify_objects(|_, _| {})
        .map_err(|e| format!("verify: {e}"))?;
    if !bad.is_empty() {
        return Err(format!("objects fail to verify: {bad:?}"));
    }
    let want = expected_free(&objects, cfg)?;
    if pool.free_bytes() != want {
        return Err(format!(
            "free_bytes {} but the live objects leave {want} free",
            pool.free_bytes()
        ));
    }
    Ok(())
}

/// The free bytes the allocator must report for exactly these live objects: free chunks
/// count whole, a run chunk counts its free blocks, a large object's chunks count nothing.
fn expected_free(objects: &BTreeMap<u64, u64>, cfg: &Config) -> Result<u64, String> {
    let g = cfg.geometry();
    // A pool this build made.
    let classes = SizeClasses::new(g.chunk_size, ClassTable::StepsAndPowers);
    let mut chunks: BTreeMap<u64, (Option<u16>, u64)> = BTreeMap::new(); // chunk -> (class, n)
    for (&off, &size) in objects {
        let pos = g
            .locate(off, 1)
            .ok_or(format!("object {off:#x} outside the zone"))?;
        match classes.class_for(size + 16) {
            Some(c) => {
                let e = chunks.entry(pos.chunk).or_insert((Some(c), 0));
                if e.0 != Some(c) {
                    return Err(format!("chunk {} holds blocks of two classes", pos.chunk));
                }
                e.1 += 1;
            }
            None => {
                let n = (size + 16).div_ceil(g.chunk_size);
                for c in pos.chunk..pos.chunk + n {
                    if chunks.insert(c, (None, 0)).is_some() {
                        return Err(format!("chunk {c} is used twice"));
                    }
                }
            }
        }
    }
    let mut free = 0;
    for c in 1..g.chunks_per_zone() {
        free += match chunks.get(&c) {
            None => g.chunk_size,
            Some((None, _)) => 0,
            Some((Some(class), n)) => (classes.nblocks(*class) as u64 - n) * classes.block(*class),
        };
    }
    Ok(free)
}

/// After verification: an allocation and a free in the recovered pool, and free space
/// returns to where it was.
fn alloc_free_round_trip(pool: &Pool) -> Result<(), String> {
    let before = pool.free_bytes();
    let o = pool
        .tx(|tx| tx.alloc([1u64; 4]))
        .map_err(|e| format!("alloc after recovery: {e}"))?;
    pool.tx(|tx| tx.free(o))
        .map_err(|e| format!("free after recovery: {e}"))?;
    if pool.free_bytes() != before {
        return Err(format!(
            "free_bytes {} after an alloc + free, {before} before",
            pool.free_bytes()
        ));
    }
    Ok(())
}

struct Cleanup(Vec<PathBuf>);
impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn kill9_at_random_moments_then_recover() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let runs = env_u64("PGL_KILL9_RUNS", 100);
    let seed = env_u64("PGL_KILL9_SEED", 0x9_9999);
    let dir = std::env::temp_dir();
    let path = dir.join(format!("pgl-kill9-{}.pool", std::process::id()));
    let copy = dir.join(format!("pgl-kill9-{}.copy.pool", std::process::id()));
    let _cleanup = Cleanup(vec![path.clone(), copy.clone()]);
    let _ = std::fs::remove_file(&path);
    let cfg = config();
    {
        let pool = Pool::create(&path, &cfg).unwrap();
        pool.root::<Root>().unwrap();
    }
    let exe = std::env::current_exe().unwrap();
    let mut model = Model::new();
    let mut rng = seed;
    let t0 = Instant::now();
    let (mut early, mut no_commit, mut one_ahead, mut steps) = (0u64, 0u64, 0u64, 0u64);
    let mut replays: BTreeSet<String> = BTreeSet::new();
    for run in 0..runs {
        rng = mix(rng);
        // One kill in eight lands anywhere from process start (often during open and
        // recovery); the others 0-20 ms after the child reported where it starts.
        let early_kill = rng % 8 == 0;
        let delay = Duration::from_micros(if early_kill {
            (rng >> 8) % 5_000
        } else {
            (rng >> 8) % 20_000
        });
        let mut cmd = Command::new(&exe);
        if run % 2 == 1 {
            cmd.env(FAST_ENV, "1");
        }
        cmd.args([
            "kill9_child_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path);
        let (mut child, reports) = support::Reports::spawn(&mut cmd, MARK);
        let mut lines = Vec::new();
        if early_kill {
            early += 1;
        } else {
            let got = reports.lines.recv_timeout(Duration::from_secs(20));
            match got {
                Ok(l) => lines.push(l),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "run {run}: the child reported nothing in 20 s; stderr:\n{}",
                        reports.finish().1
                    );
                }
            }
        }
        std::thread::sleep(delay);
        child.kill().unwrap();
        let status = child.wait().unwrap();
        let (rest, stderr) = reports.finish();
        lines.extend(rest);
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                status.signal(),
                Some(libc::SIGKILL),
                "run {run}: the child ended before the kill ({status}); stderr:\n{stderr}"
            );
        }

        // What the child said: START k0, then C k0+1, C k0+2, ...
        let mut reported = None;
        for l in &lines {
            let mut it = l.split_whitespace();
            let (Some(kind), Some(n)) = (it.next(), it.next().and_then(|n| n.parse::<u64>().ok()))
            else {
                panic!("run {run}: unparsable report {l:?}");
            };
            match (kind, reported) {
                ("START", None) => assert_eq!(
                    n, model.k,
                    "run {run}: the child opened the pool at step {n}, the parent verified {}",
                    model.k
                ),
                ("C", Some(prev)) => assert_eq!(n, prev + 1, "run {run}: reports out of order"),
                _ => panic!("run {run}: unexpected report {l:?} after {reported:?}"),
            }
            reported = Some(n);
        }
        let last = reported.unwrap_or(model.k);
        if reported.is_none_or(|n| n == model.k) {
            no_commit += 1;
        }

        // Verify a copy (so that the next child recovers the original itself), and every
        // tenth run the original.
        let before_open = if run % 10 == 9 {
            std::fs::read(&path).unwrap()
        } else {
            Vec::new()
        };
        let target = if run % 10 == 9 {
            path.clone()
        } else {
            std::fs::copy(&path, &copy).unwrap();
            copy.clone()
        };
        let pool = Pool::open_with(&target, &cfg)
            .unwrap_or_else(|e| panic!("run {run}: reopen after kill -9 failed: {e}"));
        let at = pool.get(pool.root::<Root>().unwrap()).unwrap()[0];
        // Without a START line nothing ran; otherwise the child may have committed one
        // step more than it reported.
        let allowed = if reported.is_none() {
            last..=last
        } else {
            last..=last + 1
        };
        assert!(
            allowed.contains(&at),
            "run {run}: the pool is at step {at}, the child reported {reported:?} (allowed \
             {allowed:?}); stderr:\n{stderr}"
        );
        if at == last + 1 {
            one_ahead += 1;
        }
        steps += at - model.k;
        model.advance_to(at);
        if let Err(e) = verify(&pool, &model, &cfg) {
            let keep = dir.join(format!("pgl-kill9-failed-{}.pool", std::process::id()));
            drop(pool);
            if target == copy {
                let _ = std::fs::copy(&path, &keep);
            } else {
                let _ = std::fs::write(&keep, &before_open);
            }
            panic!(
                "run {run} (seed {seed:#x}), after kill -9 at step {at} (reports {:?}..{:?}, \
                 {} lines; the pool as the child left it is kept at {}): {e}",
                lines.first(),
                lines.last(),
                lines.len(),
                keep.display()
            );
        }
        if target == copy {
            if let Err(e) = alloc_free_round_trip(&pool) {
                panic!("run {run} (seed {seed:#x}), after kill -9 at step {at}: {e}");
            }
        }
        replays.insert(format!("{}", pool.stats().records_replayed));
        drop(pool);
        let _ = std::fs::remove_file(&copy);
    }
    let pool = Pool::open(&path, LAYOUT).unwrap();
    verify(&pool, &model, &cfg).unwrap();
    println!(
        "{runs} kills in {:.1?} (seed {seed:#x}): {steps} steps committed, {early} early kills, \
         {no_commit} runs without a reported commit, {one_ahead} runs where the pool was one \
         step past the last report; records replayed per open: {replays:?}",
        t0.elapsed()
    );
    assert!(
        steps > runs,
        "too few steps ran ({steps}) for the kills to mean much"
    );
}

#[test]
fn model_and_pool_agree_without_kills() {
    // The workload and the verifier agree when nothing is killed: the harness can only fail
    // on a real difference.
    let path = std::env::temp_dir().join(format!("pgl-kill9-{}-nokill.pool", std::process::id()));
    let _cleanup = Cleanup(vec![path.clone()]);
    let _ = std::fs::remove_file(&path);
    let cfg = config();
    let pool = Pool::create(&path, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    let mut model = Model::new();
    for k in 1..=300 {
        step(&pool, root, k).unwrap();
        model.step();
        if k % 50 == 0 || std::env::var("PGL_KILL9_VERIFY_ALL").is_ok() {
            verify(&pool, &model, &cfg).unwrap_or_else(|e| panic!("step {k}: {e}"));
        }
    }
    // A model one step off is caught.
    let mut ahead = model.clone();
    ahead.step();
    assert!(verify(&pool, &ahead, &cfg).is_err());
    let mut wrong = model.clone();
    wrong.counters[3] ^= 1;
    assert!(verify(&pool, &wrong, &cfg).is_err());
    // A leaked object is caught.
    pool.tx(|tx| tx.alloc([5u64; 4])).unwrap();
    let e = verify(&pool, &model, &cfg).unwrap_err();
    assert!(e.contains("leaked"), "{e}");
}

/// The window the kill -9 runs first hit, made deterministic with the crash simulator: the
/// redo record is sealed (both lane copies) but the payload of a new object is not written
/// yet. A kill -9 leaves this state when the seal is written before the new objects (as
/// `commit_logged` does); a power failure can leave it in any order, since one fence covers
/// both. If recovery replays such a record, the root points at the new object while the
/// block still holds the object freed there before — same offset, size and type, so its
/// stale checksum verifies and the old contents are served as the new object's. Recovery
/// must discard the record instead (the transaction never reached its commit fence).
#[test]
fn sealed_record_without_its_new_object_payload() {
    let cfg = Config::small("seal-order");
    let g = cfg.geometry();
    let sim = pgl::CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<[u64; 4]>().unwrap();
    let old = pool
        .tx(|tx| {
            let o = tx.alloc([1u64; 4])?;
            tx.open(root)?[0] = o.raw();
            Ok(o)
        })
        .unwrap();
    pool.tx(|tx| {
        tx.free(old)?;
        tx.open(root)?[0] = 0;
        Ok(())
    })
    .unwrap();
    // The next transaction's first fence is its log fence: capture what a crash there leaves.
    let point = std::sync::Arc::new(std::sync::Mutex::new(None));
    let p2 = point.clone();
    sim.set_fence_hook(move |s| {
        let mut p = p2.lock().unwrap();
        if p.is_none() {
            *p = Some(s.crash_point());
        }
    });
    let new = pool
        .tx(|tx| {
            let o = tx.alloc([2u64; 4])?;
            tx.open(root)?[0] = o.raw();
            Ok(o)
        })
        .unwrap();
    sim.clear_fence_hook();
    assert_eq!(
        new, old,
        "the freed block is reused (the scenario needs it)"
    );
    drop(pool);
    let cp = point.lock().unwrap().take().unwrap();
    // Which pending words lie in the redo lanes: the program-order prefix "record written
    // (both copies) and sealed, new object not yet written" keeps exactly those.
    let all = cp.image(|_| true);
    let none = cp.image(|_| false);
    let lanes = (g.lane_offset(0, 0) / 8) as usize..(g.header_offset(1) / 8) as usize;
    let pending: Vec<usize> = (0..all.len()).filter(|&w| all[w] != none[w]).collect();
    assert!(
        pending.iter().any(|w| lanes.contains(w)) && pending.iter().any(|w| !lanes.contains(w))
    );
    let dev = cp.device(cfg.max_size, |i| lanes.contains(&pending[i]));
    let pool = Pool::open_sim(&dev, "seal-order").unwrap();
    let r = *pool.get(root).unwrap();
    // Either the transaction did not happen, or it did, with the new object's contents.
    if r[0] != 0 {
        let got = pool.get(Oid::<[u64; 4]>::from_raw(r[0])).map(|v| *v);
        assert!(
            matches!(got, Ok([2, 2, 2, 2])),
            "after recovery the root points at the new object, which holds {got:?} (the freed \
             object's contents), not [2, 2, 2, 2]"
        );
    }
}
