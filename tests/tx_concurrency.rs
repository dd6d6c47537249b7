//! Concurrency: 2, 4 and 8 threads run random transactions over shared objects.
//!
//! - `serial_replay_*`: every transaction takes a ticket from a shared log object (opened
//!   for update last, so tickets follow commit order), records what it observed, and
//!   changes accounts and their attached notes (transfers, allocations, frees, updates).
//!   Sorting the committed transactions by ticket and replaying them on a plain Rust model
//!   must reproduce every observation and the final pool, before and after a reopen.
//! - `bank_total_*`: writers move money between accounts (and allocate and free receipts)
//!   while readers sum all balances inside one transaction (`tx.get`) and read single
//!   accounts with `pool.get`; no reader may ever see a total other than the initial one or
//!   a half-written account.

mod support;
use pgl::{Config, FlushMode, Oid, Pool};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;
use support::Rng;

type Root = [u64; 64];
/// `[0]` balance, `[1]` version, `[2]` note oid, `[3]` ticket of the last change,
/// `[7]` = `!balance` (written as a separate range, so a torn account is visible).
type Account = [u64; 8];
type Note = [u64; 16];
const LOG_CAP: usize = 2047;
/// `[0]` next ticket, `[1 + t % LOG_CAP]` = tag of the transaction that took ticket `t`.
type Log = [u64; LOG_CAP + 1];

const ACCOUNTS: usize = 12;
const INITIAL: u64 = 1_000;

struct TmpPool(PathBuf);
impl TmpPool {
    fn new(name: &str) -> TmpPool {
        let p = std::env::temp_dir().join(format!("pgl-txc-{}-{name}.pool", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TmpPool(p)
    }
}
impl Drop for TmpPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Cache-line flushes, as on persistent memory or tmpfs: `msync` (the default for a pool on
/// an ordinary disk file) would make this test about the disk, not about concurrency.
fn config(layout: &str) -> Config {
    let mut cfg = Config::small(layout).flush(FlushMode::detect());
    cfg.rows = 16;
    cfg.lanes = 4;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.geometry().pool_size(2);
    cfg
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Move `min(amount, balance of from)`.
    Transfer { from: usize, to: usize, amount: u64 },
    /// Replace the account's note (freeing the old one) with a new one.
    SetNote { acc: usize, salt: u64 },
    /// Free the account's note, if any.
    DropNote { acc: usize },
    /// Add `salt` to one word of the account's note, if any.
    TouchNote { acc: usize, salt: u64 },
}

fn random_op(rng: &mut Rng) -> Op {
    let acc = rng.below(ACCOUNTS as u64) as usize;
    match rng.below(8) {
        0..=3 => {
            let to = (acc + 1 + rng.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
            Op::Transfer {
                from: acc,
                to,
                amount: rng.below(300),
            }
        }
        4 | 5 => Op::SetNote {
            acc,
            salt: rng.next(),
        },
        6 => Op::DropNote { acc },
        _ => Op::TouchNote {
            acc,
            salt: rng.below(1 << 20),
        },
    }
}

fn tag(thread: usize, i: usize) -> u64 {
    (thread as u64 + 1) << 32 | i as u64
}

fn note_content(ticket: u64, t: u64, salt: u64) -> Note {
    std::array::from_fn(|j| ticket ^ t.rotate_left(7) ^ salt.wrapping_mul(j as u64 + 1))
}

/// One committed transaction as its thread saw it.
#[derive(Clone, Debug)]
struct Committed {
    ticket: u64,
    tag: u64,
    op: Op,
    observed: Vec<u64>,
}

/// Creates the shared objects; returns the root.
fn setup(pool: &Pool) -> Oid<Root> {
    let root = pool.root::<Root>().unwrap();
    pool.tx(|tx| {
        let log = tx.alloc_zeroed::<Log>()?;
        let mut r = tx.open(root)?;
        r[0] = log.raw();
        for a in 0..ACCOUNTS {
            let mut acc = [0u64; 8];
            acc[0] = INITIAL;
            acc[7] = !INITIAL;
            r[1 + a] = tx.alloc(acc)?.raw();
        }
        Ok(())
    })
    .unwrap();
    root
}

/// Runs `op` as one transaction; returns what it observed and the ticket it took.
fn run_op(
    pool: &Pool,
    log: Oid<Log>,
    accs: &[Oid<Account>],
    op: Op,
    tag: u64,
) -> pgl::Result<Committed> {
    pool.tx(|tx| {
        let mut observed = Vec::new();
        let mut touched = Vec::new();
        // The accounts first, the log last: the ticket is taken while every other lock of
        // the transaction is held, so ticket order is a valid serial order.
        match op {
            Op::Transfer { from, to, amount } => {
                let mut f = tx.open(accs[from])?;
                let mut t = tx.open(accs[to])?;
                observed.extend([f[0], t[0]]);
                let moved = amount.min(f[0]);
                let (fb, tb) = (f[0] - moved, t[0] + moved);
                f.write_at(0, &fb);
                f.write_at(56, &!fb);
                t.write_at(0, &tb);
                t.write_at(56, &!tb);
                touched.push(f);
                touched.push(t);
            }
            Op::SetNote { acc, .. } | Op::DropNote { acc } | Op::TouchNote { acc, .. } => {
                let a = tx.open(accs[acc])?;
                let note = Oid::<Note>::from_raw(a[2]);
                observed.push((a[2] != 0) as u64);
                match op {
                    Op::SetNote { .. } | Op::DropNote { .. } if !note.is_null() => {
                        observed.push(tx.get(note)?[0]);
                        tx.free(note)?;
                    }
                    Op::TouchNote { salt, .. } if !note.is_null() => {
                        let mut n = tx.open(note)?;
                        let j = (salt % 16) as usize;
                        observed.push(n[j]);
                        let v = n[j].wrapping_add(salt);
                        n.write_at(j * 8, &v);
                    }
                    _ => {}
                }
                touched.push(a);
            }
        }
        let mut l = tx.open(log)?;
        let ticket = l[0];
        l.write_at(0, &(ticket + 1));
        l.write_at((1 + ticket as usize % LOG_CAP) * 8, &tag);
        drop(l);
        for a in touched.iter_mut() {
            let v = a[1] + 1;
            a.write_at(8, &v);
            a.write_at(24, &ticket);
        }
        if let Op::SetNote { acc, salt } = op {
            let n = tx.alloc(note_content(ticket, tag, salt))?;
            touched[0].write_at(16, &n.raw());
            debug_assert_eq!(touched.len(), 1, "{acc}");
        }
        if let (Op::DropNote { .. }, true) = (op, touched[0][2] != 0) {
            touched[0].write_at(16, &0u64);
        }
        Ok(Committed {
            ticket,
            tag,
            op,
            observed,
        })
    })
}

/// The plain Rust model of the shared state.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ModelAccount {
    balance: u64,
    version: u64,
    note: Option<Note>,
    last: u64,
}

fn replay(commits: &[Committed]) -> Result<Vec<ModelAccount>, String> {
    let mut m = vec![
        ModelAccount {
            balance: INITIAL,
            version: 0,
            note: None,
            last: 0,
        };
        ACCOUNTS
    ];
    for (i, c) in commits.iter().enumerate() {
        if c.ticket != i as u64 {
            return Err(format!(
                "tickets are not 0..n: position {i} holds {}",
                c.ticket
            ));
        }
        let mut observed = Vec::new();
        let mut touched = Vec::new();
        match c.op {
            Op::Transfer { from, to, amount } => {
                observed.extend([m[from].balance, m[to].balance]);
                let moved = amount.min(m[from].balance);
                m[from].balance -= moved;
                m[to].balance += moved;
                touched.extend([from, to]);
            }
            Op::SetNote { acc, salt } => {
                observed.push(m[acc].note.is_some() as u64);
                if let Some(n) = m[acc].note {
                    observed.push(n[0]);
                }
                m[acc].note = Some(note_content(c.ticket, c.tag, salt));
                touched.push(acc);
            }
            Op::DropNote { acc } => {
                observed.push(m[acc].note.is_some() as u64);
                if let Some(n) = m[acc].note.take() {
                    observed.push(n[0]);
                }
                touched.push(acc);
            }
            Op::TouchNote { acc, salt } => {
                observed.push(m[acc].note.is_some() as u64);
                if let Some(n) = m[acc].note.as_mut() {
                    let j = (salt % 16) as usize;
                    observed.push(n[j]);
                    n[j] = n[j].wrapping_add(salt);
                }
                touched.push(acc);
            }
        }
        for a in touched {
            m[a].version += 1;
            m[a].last = c.ticket;
        }
        if observed != c.observed {
            return Err(format!(
                "ticket {} ({:?}, tag {:#x}) observed {:?}, but the serial replay of tickets \
                 0..{} gives {observed:?}",
                c.ticket, c.op, c.tag, c.observed, c.ticket
            ));
        }
    }
    Ok(m)
}

/// Compares the pool with the model and the log with the commits.
fn check_pool(
    pool: &Pool,
    root: Oid<Root>,
    model: &[ModelAccount],
    commits: &[Committed],
) -> Result<(), String> {
    let r = *pool.get(root).map_err(|e| e.to_string())?;
    let log = Oid::<Log>::from_raw(r[0]);
    {
        let l = pool.get(log).map_err(|e| e.to_string())?;
        if l[0] != commits.len() as u64 {
            return Err(format!(
                "log says {} tickets, {} commits",
                l[0],
                commits.len()
            ));
        }
        for c in commits.iter().rev().take(LOG_CAP) {
            let slot = 1 + c.ticket as usize % LOG_CAP;
            if l[slot] != c.tag {
                return Err(format!(
                    "log slot of ticket {} holds tag {:#x}, the thread that took it says {:#x}",
                    c.ticket, l[slot], c.tag
                ));
            }
        }
    }
    let mut expected: BTreeSet<u64> = [root.raw(), log.raw()].into();
    let mut total = 0;
    for (a, m) in model.iter().enumerate() {
        let oid = Oid::<Account>::from_raw(r[1 + a]);
        expected.insert(oid.raw());
        let acc = *pool.get(oid).map_err(|e| e.to_string())?;
        total += acc[0];
        let note = match acc[2] {
            0 => None,
            n => {
                expected.insert(n);
                Some(
                    *pool
                        .get(Oid::<Note>::from_raw(n))
                        .map_err(|e| e.to_string())?,
                )
            }
        };
        let got = ModelAccount {
            balance: acc[0],
            version: acc[1],
            note,
            last: acc[3],
        };
        if &got != m || acc[7] != !acc[0] {
            return Err(format!(
                "account {a}: pool {got:?} (mirror {:#x}), model {m:?}",
                acc[7]
            ));
        }
    }
    if total != INITIAL * ACCOUNTS as u64 {
        return Err(format!("balances sum to {total}"));
    }
    let objects: BTreeSet<u64> = pool
        .objects()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    if objects != expected {
        return Err(format!(
            "heap objects {objects:x?} differ from the reachable ones {expected:x?}"
        ));
    }
    let bad = pool.verify_objects(|_, _| {}).map_err(|e| e.to_string())?;
    if !bad.is_empty() {
        return Err(format!("objects fail to verify: {bad:?}"));
    }
    Ok(())
}

fn serial_replay(threads: usize) {
    let t0 = Instant::now();
    let tmp = TmpPool::new(&format!("replay{threads}"));
    let cfg = config("txc");
    let pool = Pool::create(&tmp.0, &cfg).unwrap();
    let root = setup(&pool);
    let r = *pool.get(root).unwrap();
    let log = Oid::<Log>::from_raw(r[0]);
    let accs: Vec<Oid<Account>> = (0..ACCOUNTS).map(|a| Oid::from_raw(r[1 + a])).collect();
    let done = AtomicBool::new(false);
    let torn = AtomicU64::new(0);
    let reads = AtomicU64::new(0);
    let start = std::sync::Barrier::new(threads + 1);
    let per_thread: Vec<Vec<Committed>> = std::thread::scope(|s| {
        // A reader: single objects through pool.get are never half-written.
        s.spawn(|| {
            start.wait();
            // At least a few passes, however the threads are scheduled.
            let mut passes = 0;
            while !done.load(Ordering::Relaxed) || passes < 4 {
                passes += 1;
                for a in &accs {
                    let v = *pool.get(*a).unwrap();
                    if v[7] != !v[0] {
                        torn.fetch_add(1, Ordering::Relaxed);
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (pool, accs, start) = (&pool, &accs, &start);
                s.spawn(move || {
                    let mut rng = Rng(0xc0ffee ^ ((threads as u64) << 8) ^ t as u64);
                    start.wait();
                    let deadline = Instant::now() + run_for();
                    // Past the deadline until it has MIN_OPS: on a loaded machine a
                    // thread may get few turns while the others run.
                    (0..MAX_OPS)
                        .take_while(|&i| i < MIN_OPS || Instant::now() < deadline)
                        .map(|i| {
                            let op = random_op(&mut rng);
                            run_op(pool, log, accs, op, tag(t, i))
                                .unwrap_or_else(|e| panic!("thread {t} op {i} {op:?}: {e}"))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let out = handles.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Relaxed);
        out
    });
    let mut commits: Vec<Committed> = per_thread.into_iter().flatten().collect();
    commits.sort_by_key(|c| c.ticket);
    let model = replay(&commits).unwrap_or_else(|e| panic!("{threads} threads: {e}"));
    check_pool(&pool, root, &model, &commits).unwrap_or_else(|e| panic!("{threads} threads: {e}"));
    assert_eq!(
        torn.load(Ordering::Relaxed),
        0,
        "pool.get saw half-written accounts"
    );
    assert!(
        reads.load(Ordering::Relaxed) > 0,
        "the pool.get reader never read: nothing was checked for torn accounts"
    );
    let stats = pool.stats();
    assert!(stats.commits >= commits.len() as u64, "{stats:?}");
    drop(pool);
    let pool = Pool::open_with(&tmp.0, &cfg).unwrap();
    check_pool(&pool, root, &model, &commits)
        .unwrap_or_else(|e| panic!("{threads} threads, after reopening: {e}"));
    println!(
        "{threads} threads: {} transactions replayed serially in {:.1?}; {} retries, {} aborts, \
         {} pool.get reads",
        commits.len(),
        t0.elapsed(),
        stats.retries,
        stats.aborts,
        reads.load(Ordering::Relaxed)
    );
}

/// How long each test's threads run (default 400 ms; `PGL_TXC_MILLIS` for a stress run).
/// Bounded by time, not by count, so that slow (debug) and fast builds both interleave.
fn run_for() -> std::time::Duration {
    let ms = std::env::var("PGL_TXC_MILLIS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    std::time::Duration::from_millis(ms)
}
/// At most this many transactions per thread.
const MAX_OPS: usize = 1 << 20;
/// At least this many per thread (each runs past its deadline until it has them), or the
/// test proves little.
const MIN_OPS: usize = 20;

#[test]
fn serial_replay_2_threads() {
    serial_replay(2);
}

#[test]
fn serial_replay_4_threads() {
    serial_replay(4);
}

#[test]
fn serial_replay_8_threads() {
    serial_replay(8);
}

/// The replay check can fail: a commit list with two tickets swapped (so one transaction's
/// observation no longer matches the serial order) is rejected.
#[test]
fn serial_replay_detects_a_wrong_order() {
    let op = |from, to| Op::Transfer {
        from,
        to,
        amount: 600,
    };
    let good = vec![
        Committed {
            ticket: 0,
            tag: 1,
            op: op(0, 1),
            observed: vec![1000, 1000],
        },
        Committed {
            ticket: 1,
            tag: 2,
            op: op(0, 2),
            observed: vec![400, 1000],
        },
    ];
    assert!(replay(&good).is_ok());
    let mut bad = good.clone();
    bad.swap(0, 1);
    bad[0].ticket = 0;
    bad[1].ticket = 1;
    assert!(replay(&bad).is_err());
}

fn bank_total(writers: usize, readers: usize) {
    let t0 = Instant::now();
    let tmp = TmpPool::new(&format!("bank{writers}-{readers}"));
    let cfg = config("bank");
    let pool = Pool::create(&tmp.0, &cfg).unwrap();
    let root = setup(&pool);
    let r = *pool.get(root).unwrap();
    let accs: Vec<Oid<Account>> = (0..ACCOUNTS).map(|a| Oid::from_raw(r[1 + a])).collect();
    let total = INITIAL * ACCOUNTS as u64;
    let done = AtomicBool::new(false);
    let (audits, gets, mixed) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let violations: std::sync::Mutex<Vec<String>> = Default::default();
    let start = std::sync::Barrier::new(writers + readers);
    let per_writer: Vec<(BTreeMap<usize, i64>, usize)> = std::thread::scope(|s| {
        for rd in 0..readers {
            let (pool, accs, done, audits, gets, mixed, violations, start) = (
                &pool,
                &accs,
                &done,
                &audits,
                &gets,
                &mixed,
                &violations,
                &start,
            );
            s.spawn(move || {
                start.wait();
                let mut i = 0u64;
                while !done.load(Ordering::Relaxed) || i < 4 {
                    i += 1;
                    if (i + rd as u64) % 2 == 0 {
                        // One transaction reads every balance: the sum never moves.
                        let seen = pool
                            .tx(|tx| {
                                let mut sum = 0;
                                let mut torn = 0;
                                for a in accs {
                                    let v = tx.get(*a)?;
                                    sum += v[0];
                                    torn += (v[7] != !v[0]) as u64;
                                }
                                Ok((sum, torn))
                            })
                            .unwrap();
                        if seen != (total, 0) {
                            violations.lock().unwrap().push(format!(
                                "reader {rd}: one transaction saw balances summing to {} with \
                                 {} torn accounts",
                                seen.0, seen.1
                            ));
                        }
                        audits.fetch_add(1, Ordering::Relaxed);
                    } else {
                        // Account by account, outside a transaction: each account is whole,
                        // but the sum may mix states (counted, to show the audits have teeth).
                        let mut sum = 0;
                        for a in accs {
                            let v = *pool.get(*a).unwrap();
                            sum += v[0];
                            if v[7] != !v[0] {
                                violations.lock().unwrap().push(format!(
                                    "reader {rd}: pool.get saw a torn account {v:?}"
                                ));
                            }
                            gets.fetch_add(1, Ordering::Relaxed);
                        }
                        if sum != total {
                            mixed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (pool, accs, start) = (&pool, &accs, &start);
                s.spawn(move || {
                    let mut rng = Rng(0xba4c ^ ((w as u64) << 16) ^ writers as u64);
                    start.wait();
                    let deadline = Instant::now() + run_for();
                    let mut delta: BTreeMap<usize, i64> = BTreeMap::new();
                    let mut receipts = std::collections::VecDeque::new();
                    let mut done_ops = 0;
                    // Past the deadline until it has MIN_OPS (see `serial_replay`).
                    for i in (0..MAX_OPS).take_while(|&i| i < MIN_OPS || Instant::now() < deadline)
                    {
                        done_ops += 1;
                        let from = rng.below(ACCOUNTS as u64) as usize;
                        let to = (from + 1 + rng.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
                        let amount = rng.below(400);
                        let receipt = i % 4 == 0;
                        let (moved, rec) = pool
                            .tx(|tx| {
                                let mut f = tx.open(accs[from])?;
                                let mut t = tx.open(accs[to])?;
                                let moved = amount.min(f[0]);
                                let (fb, tb) = (f[0] - moved, t[0] + moved);
                                f.write_at(0, &fb);
                                t.write_at(0, &tb);
                                f.write_at(56, &!fb);
                                t.write_at(56, &!tb);
                                let v = f[3] + 1;
                                f.write_at(24, &v);
                                let rec = if receipt {
                                    Some(tx.alloc([w as u64, i as u64, moved, 0])?)
                                } else {
                                    None
                                };
                                Ok((moved, rec))
                            })
                            .unwrap_or_else(|e| panic!("writer {w} op {i}: {e}"));
                        *delta.entry(from).or_default() -= moved as i64;
                        *delta.entry(to).or_default() += moved as i64;
                        receipts.extend(rec);
                        if receipts.len() > 3 {
                            let old = receipts.pop_front().unwrap();
                            pool.tx(|tx| tx.free(old)).unwrap();
                        }
                    }
                    for old in receipts {
                        assert_eq!(pool.get(old).unwrap()[0], w as u64);
                        pool.tx(|tx| tx.free(old)).unwrap();
                    }
                    (delta, done_ops)
                })
            })
            .collect();
        let out = handles.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Relaxed);
        out
    });
    let transfers: Vec<usize> = per_writer.iter().map(|p| p.1).collect();
    let deltas: Vec<BTreeMap<usize, i64>> = per_writer.into_iter().map(|p| p.0).collect();
    let violations = violations.into_inner().unwrap();
    assert!(
        violations.is_empty(),
        "{} violations, first: {}",
        violations.len(),
        violations[0]
    );
    assert!(audits.load(Ordering::Relaxed) >= 2 * readers as u64);
    let check = |pool: &Pool| {
        let mut sum = 0;
        for (a, oid) in accs.iter().enumerate() {
            let want: i64 = INITIAL as i64
                + deltas
                    .iter()
                    .map(|d| d.get(&a).copied().unwrap_or(0))
                    .sum::<i64>();
            let v = *pool.get(*oid).unwrap();
            assert_eq!(
                v[0] as i64, want,
                "account {a}: committed transfers do not add up"
            );
            assert_eq!(v[7], !v[0]);
            sum += v[0];
        }
        assert_eq!(sum, total);
        let objects: BTreeSet<u64> = pool
            .objects()
            .unwrap()
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        let log = r[0];
        let expected: BTreeSet<u64> = accs
            .iter()
            .map(|a| a.raw())
            .chain([root.raw(), log])
            .collect();
        assert_eq!(objects, expected, "receipts leaked or objects lost");
        assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    };
    check(&pool);
    let stats = pool.stats();
    drop(pool);
    check(&Pool::open_with(&tmp.0, &cfg).unwrap());
    println!(
        "{writers} writers + {readers} readers: {} transfers in {:.1?}; {} whole-bank audits, \
         {} pool.get reads ({} account-by-account sums saw a mix of states), {} retries",
        transfers.iter().sum::<usize>(),
        t0.elapsed(),
        audits.load(Ordering::Relaxed),
        gets.load(Ordering::Relaxed),
        mixed.load(Ordering::Relaxed),
        stats.retries
    );
}

#[test]
fn bank_total_2_threads() {
    bank_total(1, 1);
}

#[test]
fn bank_total_4_threads() {
    bank_total(3, 1);
}

#[test]
fn bank_total_8_threads() {
    bank_total(6, 2);
}
