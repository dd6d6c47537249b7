//! Scrubbing: verify the whole pool, not just what the program happens to read, and repair
//! what parity can rebuild — on demand (`pool.scrub`, `pgl scrub`) or from a background
//! thread every N transactions (`VerifyPolicy::Scrub`).
//!
//! Invariant: a scrub changes only damaged bytes (through online repair, which verifies
//! what it writes) and parity pages that disagree with rows whose objects all verify, checked
//! again with the pool frozen right before the parity is rewritten.

use super::pool::Pool;
use crate::stats::Counter;
use crate::tx::{self, Outcome};
use crate::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a scrub, with the pool frozen, waits for the root lock before it gives up
/// (`Error::Conflict`): its holder only reads the root word, unless it waits for a lane.
const ROOT_WAIT: Duration = Duration::from_millis(100);

/// What a scrub found and did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ScrubReport {
    /// Objects verified.
    pub objects_checked: u64,
    /// Damaged objects rebuilt from parity.
    pub objects_repaired: u64,
    /// Pool pages whose bytes those repairs changed (as [`crate::Stats::pages_rebuilt`]
    /// counts them).
    pub pages_repaired: u64,
    /// Damaged objects left as they are (not repairing, or beyond parity), with the error a
    /// read of each reports.
    pub damaged: Vec<(u64, Error)>,
    /// Page columns whose parity disagreed with their rows (after object repairs).
    pub parity_columns_bad: u64,
    /// Of those, recomputed (when repairing).
    pub parity_columns_fixed: u64,
    /// Zone metadata copies that failed their checksum (or disagreed with a valid twin).
    pub metadata_copies_bad: u64,
    /// Of those, rewritten from the other copy (when repairing).
    pub metadata_copies_fixed: u64,
    /// Words of run allocation bitmaps that did not verify.
    pub bitmap_words_bad: u64,
    /// Of those, rebuilt from parity (when repairing; the others are in `damaged`).
    pub bitmap_words_fixed: u64,
}

impl ScrubReport {
    /// Whether the pool is sound now: nothing damaged left, parity consistent.
    pub fn is_clean(&self) -> bool {
        self.damaged.is_empty()
            && self.parity_columns_bad == self.parity_columns_fixed
            && self.metadata_copies_bad == self.metadata_copies_fixed
            && self.bitmap_words_bad == self.bitmap_words_fixed
    }
}

impl Pool {
    /// Verifies every allocated object's checksum and every zone's parity; with `repair`,
    /// rebuilds damaged objects from parity (as a read of them would) and then recomputes
    /// the parity of columns that still disagree while every object in them verifies
    /// (damage to free space or to the parity page itself). `progress(done, total)` is
    /// called as objects are verified. Runs beside transactions (each object under its
    /// lock; each zone's parity with the pool briefly frozen); not inside one
    /// (`Error::InTransaction`), nor while this thread holds a `Ref` or a `Detached` of the
    /// pool (`Error::HeldByThisThread`).
    pub fn scrub(&self, repair: bool, progress: impl FnMut(u64, u64)) -> Result<ScrubReport> {
        if repair {
            self.refuse_read_only("a scrub with repair")?;
        }
        let eng = &self.inner.eng;
        let mut report = self.scrub_all(repair, progress).map_err(|e| eng.named(e))?;
        report.damaged = (report.damaged.into_iter())
            .map(|(off, e)| (off, eng.named(e)))
            .collect();
        Ok(report)
    }

    /// `scrub`, its errors not yet naming the pool file.
    fn scrub_all(&self, repair: bool, mut progress: impl FnMut(u64, u64)) -> Result<ScrubReport> {
        let eng = &self.inner.eng;
        if tx::in_tx(eng) {
            return Err(Error::InTransaction {
                what: "pool.scrub",
                instead: "scrub between transactions",
            });
        }
        eng.refuse_held_here("pool.scrub")?;
        let mut report = ScrubReport::default();
        // Metadata first: the objects are found through it.
        let zones = self.inner.header.lock().zones;
        self.scrub_metadata(zones, repair, &mut report)?;
        let mut checked = 0;
        // Without checksums no object can be verified; parity still can.
        let found = if eng.checksums {
            // Damaged bitmap words were rebuilt (when repairing) or reported above: the
            // objects under the ones left are skipped here, not reported twice.
            self.verify_listed(false, |d, t| {
                checked = t;
                progress(d, t)
            })?
            .0
        } else {
            Vec::new()
        };
        report.objects_checked = checked;
        self.settle(found, repair, &mut report)?;
        if !eng.parity.enabled() {
            return Ok(report);
        }
        for z in 0..zones {
            self.scrub_zone_parity(z, repair, &mut report)?;
        }
        eng.media.check()?;
        Ok(report)
    }

    /// Verifies zone `z`'s parity with the pool frozen; when repairing, recomputes the
    /// columns that disagree once every object of the zone verifies again, frozen. Damage
    /// that re-check finds (done after the object pass) is repaired from the parity that
    /// was kept, and the zone is taken again, so that a column of free space that also
    /// disagrees is recomputed by this scrub, not the next.
    fn scrub_zone_parity(&self, z: u64, repair: bool, report: &mut ScrubReport) -> Result<()> {
        let eng = &self.inner.eng;
        let busy = || Error::Conflict {
            offset: eng.geo.zone_offset(z),
        };
        for _ in 0..2 {
            let r = eng.exclusive(|| {
                // Taken frozen: no commit turns a hole into data before the pass is done.
                let data = eng.zone_extents(z);
                // SAFETY: zone `z` lies in the pool; the pool is held exclusively.
                let bad = unsafe { crate::integrity::verify_zone(&eng.media, &eng.geo, z, &data) };
                let mut fixed = 0;
                let mut late = Vec::new();
                // Recomputed only when every object verified: without checksums nothing
                // says whether the rows or the parity are right, so it is only reported.
                if repair && eng.checksums && !bad.is_empty() && report.damaged.is_empty() {
                    // The objects were verified with the pool running: one damaged since
                    // then would have its damage made permanent (parity agreeing with it).
                    // So they are verified again, frozen; if one fails, parity stays as it
                    // is, to rebuild it.
                    late = self.damaged_in_zone(z);
                    if late.is_empty() {
                        // Taken again: pages repaired since (lost ones, read above) are data now.
                        let data = eng.zone_extents(z);
                        // SAFETY: as above.
                        unsafe { crate::integrity::recompute_zone(&eng.media, &eng.geo, z, &data) };
                        eng.media.fence();
                        // What disagreed was free space (every object verified): its bytes
                        // are now the parity's, so a sealed block may hold others than its
                        // freed object's.
                        eng.repairs
                            .free_space_suspect
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        fixed = bad.len() as u64;
                    }
                }
                (bad.len() as u64, fixed, late)
            });
            let (bad, fixed, late) = r.ok_or_else(busy)?;
            if late.is_empty() {
                report.parity_columns_bad += bad;
                report.parity_columns_fixed += fixed;
                return Ok(());
            }
            // Repaired from the parity just kept (a repair leaves its column agreeing);
            // then the zone is taken again.
            self.settle(late, repair, report)?;
        }
        // Damaged again while it was repaired: what disagrees now is left to the next scrub.
        let again = eng.exclusive(|| {
            let data = eng.zone_extents(z);
            // SAFETY: as above.
            unsafe { crate::integrity::verify_zone(&eng.media, &eng.geo, z, &data) }.len() as u64
        });
        report.parity_columns_bad += again.ok_or_else(busy)?;
        Ok(())
    }

    /// Repairs the damaged objects and allocation bitmap words `found` (when repairing and
    /// parity can rebuild them) and adds the others to the report's `damaged`. The words
    /// are the ones the frozen re-check of a zone found: damaged after the metadata pass,
    /// so counted here.
    fn settle(
        &self,
        found: Vec<(u64, Error)>,
        repair: bool,
        report: &mut ScrubReport,
    ) -> Result<()> {
        let eng = &self.inner.eng;
        for (off, e) in found {
            if let Error::BitmapMismatch { .. } = e {
                report.bitmap_words_bad += 1;
                if repair {
                    match eng.repair_bitmap_word(off) {
                        Some(true) => {
                            report.bitmap_words_fixed += 1;
                            continue;
                        }
                        Some(false) => eng.heap.quarantine_run_of(off),
                        // Not frozen in time: nothing was tried.
                        None => {}
                    }
                }
            } else if repair && tx::repairable(&e).is_some() {
                match eng.repair_object(off)? {
                    Outcome::Repaired { pages } => {
                        report.objects_repaired += 1;
                        report.pages_repaired += pages;
                        continue;
                    }
                    Outcome::Intact { .. } => continue,
                    Outcome::Consistent | Outcome::Unrecoverable | Outcome::Busy => {}
                }
            }
            report.damaged.push((off, e));
        }
        Ok(())
    }
}

impl Pool {
    /// The objects of zone `z` that fail verification now (as `verify_objects` checks
    /// them); a damaged bitmap word counts as one. Call it with the pool frozen
    /// (`Engine::exclusive`): no commit writes objects or heap metadata meanwhile, which
    /// stands in for the object locks `verify_locked` expects.
    fn damaged_in_zone(&self, z: u64) -> Vec<(u64, Error)> {
        let eng = &self.inner.eng;
        // SAFETY: heap metadata words inside the pool; the pool is frozen.
        let read = |off| unsafe { eng.media.read_u64(off) };
        let mut out = Vec::new();
        let words = crate::heap::walk(&eng.geo, eng.heap.classes(), z..z + 1, read, |hdr, _| {
            let mut b = [0u8; 16];
            // SAFETY: an allocated block's header inside the pool; the pool is frozen.
            unsafe { eng.media.read(hdr, &mut b) };
            let off = hdr + crate::heap::layout::HEADER_SIZE;
            if let Err(e) =
                self.verify_locked(off, &crate::heap::layout::ObjectHeader::from_bytes(&b))
            {
                out.push((off, e));
            }
        });
        out.extend(
            words
                .into_iter()
                .map(|off| (off, crate::heap::bitmap_mismatch(off, read(off)))),
        );
        out
    }
}

impl Pool {
    /// Verifies both metadata copies of every zone, rewriting a damaged one from the other
    /// when repairing, and every word of its runs' allocation bitmaps, rebuilding a damaged
    /// one from parity when repairing; what stays damaged is reported in `damaged`. Each
    /// zone with the pool frozen and every metadata word (and the root word) locked.
    fn scrub_metadata(&self, zones: u64, repair: bool, report: &mut ScrubReport) -> Result<()> {
        let eng = &self.inner.eng;
        for z in 0..zones {
            let r = eng
                .exclusive(|| {
                    // The root word lives in zone 0 and is read under the root lock: taken with
                    // the pool frozen, not before, or a transaction that asks for the root while
                    // holding its lane would wait for this scrub while the scrub waits for it
                    // (until `exclusive` gives up). Not for long either: its holder may be
                    // waiting for a lane itself (creating the root, a migration).
                    let _root = match z {
                        0 => Some(self.inner.root_lock.try_lock_for(ROOT_WAIT)?),
                        _ => None,
                    };
                    Some(eng.meta.with_all(|| {
                        // SAFETY: zone `z` lies in the pool; no commit runs and every metadata
                        // reader (metadata locks, root lock) waits.
                        let c = unsafe {
                            crate::integrity::replica::check_zone(
                                &eng.media,
                                &eng.geo,
                                z,
                                repair,
                                eng.parity.enabled(),
                            )
                        };
                        let bitmaps = Self::scrub_bitmaps(eng, z, repair);
                        // The rewrites are durable before the pool thaws.
                        eng.media.fence();
                        (c, bitmaps)
                    }))
                })
                .flatten();
            let Some((copies, (bad_words, fixed_words))) = r else {
                return Err(Error::Conflict {
                    offset: eng.geo.zone_offset(z),
                });
            };
            report.bitmap_words_bad += bad_words.len() as u64;
            report.bitmap_words_fixed += fixed_words;
            if repair {
                // Beyond repair: out of service now (as a commit that met it would do), so
                // that no allocation fails on it and `stats().runs_quarantined` shows it.
                for &(off, _, _) in bad_words.iter().filter(|&&(_, _, fixed)| !fixed) {
                    eng.heap.quarantine_run_of(off);
                }
            }
            report.damaged.extend(
                bad_words
                    .into_iter()
                    .filter(|&(_, _, fixed)| !fixed)
                    .map(|(off, word, _)| (off, crate::heap::bitmap_mismatch(off, word))),
            );
            match copies {
                crate::integrity::replica::Copies::Sound => {}
                crate::integrity::replica::Copies::OneBad { fixed } => {
                    report.metadata_copies_bad += 1;
                    if fixed {
                        report.metadata_copies_fixed += 1;
                        eng.repairs.metadata_copies.fetch_add(1, Ordering::Relaxed);
                    }
                }
                crate::integrity::replica::Copies::BothRebuilt => {
                    report.metadata_copies_bad += 2;
                    report.metadata_copies_fixed += 2;
                    eng.repairs.metadata_copies.fetch_add(2, Ordering::Relaxed);
                }
                crate::integrity::replica::Copies::BothBad => {
                    report.metadata_copies_bad += 2;
                    report.damaged.push((
                        eng.geo.chunk_offset(z, 0),
                        crate::integrity::replica::both_bad(&eng.geo, z),
                    ));
                }
            }
        }
        eng.media.check()
    }
}

impl Pool {
    /// Verifies every checked bitmap word of zone `z`'s runs; with `repair` (and parity),
    /// rebuilds the damaged ones. The damaged words `(offset, word found, rebuilt)` and how
    /// many were rebuilt. Call it with the pool held exclusively and every metadata word
    /// locked.
    fn scrub_bitmaps(
        eng: &crate::tx::Engine,
        z: u64,
        repair: bool,
    ) -> (Vec<(u64, u64, bool)>, u64) {
        let read = |off| {
            // SAFETY: a heap metadata word inside the pool; no commit runs and every
            // metadata reader waits (the caller's locks).
            unsafe { eng.media.read_u64(off) }
        };
        let mut bad = Vec::new();
        let mut fixed = 0;
        let damaged = crate::heap::walk(&eng.geo, eng.heap.classes(), z..z + 1, read, |_, _| {});
        for off in damaged {
            let word = read(off);
            let rebuilt = repair
                && eng.parity.enabled()
                // SAFETY: the word lies in a zone of the pool; the pool is frozen and no
                // metadata reader runs.
                && unsafe { crate::integrity::rewrite_bitmap_word(&eng.media, &eng.geo, off) };
            if rebuilt {
                fixed += 1;
                eng.repairs.bitmap_words.fetch_add(1, Ordering::Relaxed);
            }
            bad.push((off, word, rebuilt));
        }
        (bad, fixed)
    }
}

/// The background scrubber of `VerifyPolicy::Scrub { every_n_tx }`, owned by the
/// program's `Pool` handles: dropped with the last of them, it stops the thread and waits
/// for it to exit. The thread holds the pool only while it scrubs; without the wait, a
/// scrub running when the program drops its last handle would keep the pool open (its
/// file locked, so that opening it again fails) and close it later, on the scrubber.
pub(crate) struct Scrubber {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Scrubber {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            // Only the program's handles hold a `Scrubber`, never the thread itself.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// Wakes of the background scrubber (20 ms apart) before a failed pass is tried again:
/// one after the first failure, doubling while passes keep failing, at most this many.
const RETRY_WAKES_MAX: u32 = 50;

/// A failed pass of the background scrubber waiting to be tried again.
#[derive(Clone, Copy)]
struct Retry {
    /// Wakes left before the next try.
    wakes: u32,
    /// The wait after this one, should the next try fail too.
    next: u32,
}

/// Starts the background scrubber: wakes every 20 ms, scrubs (repairing) once `every`
/// more transactions committed, and exits when told (`Scrubber`'s drop) or when the pool
/// is gone. A pass that fails is counted (`stats().scrubs_failed`) and tried again after
/// a wait that doubles while it keeps failing (`RETRY_WAKES_MAX`), whatever the
/// transactions do. `None` if no thread could be started: the pool still works, the
/// scrubs simply do not happen, which `stats().scrubs` shows.
pub(crate) fn spawn(pool: Weak<super::pool::Inner>, every: u64) -> Option<Arc<Scrubber>> {
    let every = every.max(1);
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let told = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("pgl-scrub".into())
        .spawn(move || {
            let mut last = 0u64;
            let mut retry: Option<Retry> = None;
            loop {
                {
                    let mut stopped = told.0.lock();
                    if !*stopped {
                        told.1.wait_for(&mut stopped, Duration::from_millis(20));
                    }
                    if *stopped {
                        return;
                    }
                }
                let Some(inner) = pool.upgrade() else { return };
                let pool = Pool {
                    inner,
                    scrubber: None,
                };
                #[cfg(test)]
                tests::hold(&pool);
                let commits: u64 = pool
                    .inner
                    .eng
                    .lanes
                    .iter()
                    .map(|l| l.counters.get(Counter::Commits))
                    .sum();
                let due = match &mut retry {
                    Some(r) => {
                        r.wakes -= 1;
                        r.wakes == 0
                    }
                    // Commit counts only grow.
                    None => commits - last >= every,
                };
                if !due {
                    continue;
                }
                #[cfg(test)]
                let result = tests::failing(&pool).map_or_else(|| pool.scrub(true, |_, _| {}), Err);
                #[cfg(not(test))]
                let result = pool.scrub(true, |_, _| {});
                match result {
                    Ok(report) => {
                        last = commits;
                        retry = None;
                        // Unclean first: a program that sees the pass counted sees its
                        // verdict too.
                        if !report.is_clean() {
                            pool.inner.scrubs_unclean.fetch_add(1, Ordering::Relaxed);
                        }
                        pool.inner.scrubs.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        pool.inner.scrubs_failed.fetch_add(1, Ordering::Relaxed);
                        let wait = retry.map_or(1, |r| r.next);
                        retry = Some(Retry {
                            wakes: wait,
                            next: (wait * 2).min(RETRY_WAKES_MAX),
                        });
                    }
                }
            }
        })
        .ok()?;
    Some(Arc::new(Scrubber {
        stop,
        thread: Some(thread),
    }))
}

#[cfg(test)]
mod tests {
    use crate::{Config, Pool, VerifyPolicy};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// Armed by a test with its pool's file: that pool's scrubber, when it next wakes,
    /// holds the pool for a while, as a long scrub would (keyed by file, so that another
    /// test's scrubber cannot take the turn).
    static ARMED: parking_lot::Mutex<Option<std::path::PathBuf>> = parking_lot::Mutex::new(None);
    static HOLDING: AtomicBool = AtomicBool::new(false);

    /// Pools (by file) whose background scrubber's next passes fail, and how many.
    static FAIL: parking_lot::Mutex<Vec<(std::path::PathBuf, u32)>> =
        parking_lot::Mutex::new(Vec::new());

    /// A failure for the scrubber of `pool` to report instead of scrubbing, if a test
    /// asked for one.
    pub(super) fn failing(pool: &Pool) -> Option<crate::Error> {
        let path = pool.inner.eng.media.path();
        let mut fail = FAIL.lock();
        let (_, n) = fail.iter_mut().find(|(p, n)| *p == path && *n > 0)?;
        *n -= 1;
        Some(crate::Error::Conflict { offset: 0 })
    }

    pub(super) fn hold(pool: &Pool) {
        let mine = {
            let mut armed = ARMED.lock();
            let mine = armed.as_deref() == Some(pool.inner.eng.media.path().as_path());
            if mine {
                *armed = None;
            }
            mine
        };
        if mine {
            HOLDING.store(true, Ordering::Release);
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    #[test]
    fn a_failed_background_pass_is_counted_and_tried_again_without_more_transactions() {
        // Two passes fail (a pool busy for long would make them); the third try succeeds
        // though no transaction committed after the first: a failed pass does not wait for
        // `every_n_tx` more.
        let path = crate::scratch_pool("scrub-retry");
        FAIL.lock().push((path.clone(), 2));
        let cfg = Config::small("scrub-retry").verify(VerifyPolicy::Scrub { every_n_tx: 3 });
        let pool = Pool::create(&path, &cfg).unwrap();
        for i in 0..3u64 {
            pool.tx(|tx| tx.alloc(i)).unwrap();
        }
        let t = Instant::now();
        while pool.stats().scrubs == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "no pass after the failed ones: {:?}",
                pool.stats()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let s = pool.stats();
        assert_eq!((s.scrubs_failed, s.scrubs), (2, 1), "{s:?}");
        FAIL.lock().retain(|(p, _)| *p != path);
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn dropping_the_last_pool_closes_it_even_while_the_scrubber_holds_it() {
        let path = crate::scratch_pool("scrub-drop");
        let cfg = Config::small("scrub-drop").verify(VerifyPolicy::Scrub { every_n_tx: 1 });
        let pool = Pool::create(&path, &cfg).unwrap();
        pool.tx(|tx| tx.alloc(7u64)).unwrap();
        *ARMED.lock() = Some(path.clone());
        let t = Instant::now();
        while !HOLDING.load(Ordering::Acquire) {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the scrubber never woke"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(pool);
        // The file is closed (its lock released, the clean close recorded) once the last
        // handle is gone: it opens again at once.
        let again = Pool::open_with(&path, &cfg);
        assert!(again.is_ok(), "reopen after drop: {:?}", again.err());
        drop(again);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_scrub_does_not_stall_a_transaction_that_looks_up_the_root() {
        // A transaction holds an object (its lock and lane) and then asks for the root
        // (`pool.root` takes the root lock); meanwhile a scrub starts on zone 0. The scrub
        // must not hold the root lock while it waits for that transaction to drain.
        let path = crate::scratch_pool("scrub-root");
        let pool = Pool::create(&path, &Config::small("scrub-root")).unwrap();
        let root = pool.root::<[u64; 2]>().unwrap();
        let other = pool.tx(|tx| tx.alloc(5u64)).unwrap();
        let (ready, started) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let p = &pool;
            let tx = s.spawn(move || {
                let t = Instant::now();
                let mut first = true;
                p.tx(|tx| {
                    let mut o = tx.open(other)?;
                    *o += 1;
                    if std::mem::take(&mut first) {
                        ready.send(()).unwrap();
                        // The scrub has started meanwhile.
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    assert_eq!(p.root::<[u64; 2]>()?, root);
                    Ok(())
                })
                .unwrap();
                t.elapsed()
            });
            started.recv().unwrap();
            let scrub = s.spawn(move || p.scrub(true, |_, _| {}));
            let took = tx.join().unwrap();
            assert!(
                took < Duration::from_secs(5),
                "the transaction waited {took:?} for the scrub"
            );
            let report = scrub.join().unwrap().unwrap();
            assert!(report.is_clean(), "{report:?}");
        });
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn late_damage_beside_damaged_free_space_leaves_the_zone_consistent_in_one_scrub() {
        // Free space of the zone is damaged before the scrub (its column must be
        // recomputed), and an object in another page column after the object pass (it must
        // be rebuilt from the parity kept). One scrub does both.
        let path = crate::scratch_pool("scrub-late-free");
        let cfg = Config::small("scrub-late-free");
        let geo = cfg.geometry();
        let pool = Pool::create(&path, &cfg).unwrap();
        let objs: Vec<crate::Oid<[u64; 8]>> = (0..4u64)
            .map(|i| pool.tx(|tx| tx.alloc([i; 8])).unwrap())
            .collect();
        let victim = objs[2];
        // The last data chunk of zone 0 holds nothing; its page is two columns away from
        // the victim's.
        let victim_col = (victim.raw() - geo.zones_offset()) % geo.row_size() / 4096;
        let col = (victim_col + 2) % (geo.row_size() / 4096);
        let last = geo.chunk_offset(0, geo.chunks_per_zone() - 1);
        let free = last - (last - geo.zones_offset()) % geo.row_size() + col * 4096 + 64;
        assert!(pool.objects().unwrap().iter().all(|&(o, _)| o + 64 < free));
        pool.inject(&crate::Fault::Scribble {
            offset: free,
            len: 8,
            seed: 3,
        })
        .unwrap();
        let mut injected = 1;
        let report = pool
            .scrub(true, |done, total| {
                if done == total && injected == 1 {
                    pool.inject(&crate::Fault::ObjectScribble {
                        oid: victim.raw(),
                        at: 16,
                        len: 8,
                        seed: 5,
                    })
                    .unwrap();
                    injected += 1;
                }
            })
            .unwrap();
        assert_eq!(injected, 2, "two faults injected");
        assert_eq!(report.objects_repaired, 1, "{report:?}");
        assert_eq!(
            (report.parity_columns_bad, report.parity_columns_fixed),
            (1, 1),
            "the free space's column, recomputed by this scrub: {report:?}"
        );
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(*pool.get(victim).unwrap(), [2u64; 8], "the committed bytes");
        assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn damage_after_an_object_was_verified_is_repaired_not_baked_into_parity() {
        // The object pass has verified every object when one is damaged; the parity pass
        // then finds its column disagreeing. Recomputing the column would make the damage
        // permanent: parity would agree with it, and nothing could rebuild the object.
        let path = crate::scratch_pool("scrub-late");
        let pool = Pool::create(&path, &Config::small("scrub-late")).unwrap();
        let objs: Vec<crate::Oid<[u64; 8]>> = (0..4u64)
            .map(|i| pool.tx(|tx| tx.alloc([i; 8])).unwrap())
            .collect();
        let victim = objs[2];
        let mut injected = 0;
        let report = pool
            .scrub(true, |done, total| {
                if done == total && injected == 0 {
                    pool.inject(&crate::Fault::ObjectScribble {
                        oid: victim.raw(),
                        at: 16 + 8,
                        len: 16,
                        seed: 5,
                    })
                    .unwrap();
                    injected += 1;
                }
            })
            .unwrap();
        assert_eq!(injected, 1, "one fault injected during the scrub");
        assert_eq!(report.objects_repaired, 1, "{report:?}");
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(*pool.get(victim).unwrap(), [2u64; 8], "the committed bytes");
        let again = pool.scrub(true, |_, _| {}).unwrap();
        assert!(
            again.is_clean() && again.parity_columns_bad == 0,
            "{again:?}"
        );
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_scrub_reports_the_pages_its_repairs_rewrote() {
        // An object straddling a page boundary, scribbled on both sides of it: the repair
        // rewrites two pages, as `Stats::pages_rebuilt` counts them.
        let path = crate::scratch_pool("scrub-pages");
        let pool = Pool::create(&path, &Config::small("scrub-pages")).unwrap();
        let objs: Vec<crate::Oid<[u64; 512]>> = (0..3u64)
            .map(|i| pool.tx(|tx| tx.alloc([i; 512])).unwrap())
            .collect();
        let victim = objs[1];
        // `at` counts from the object's header, 16 bytes before its oid.
        let to_boundary = 4096 - (victim.raw() - 16) % 4096;
        assert!(to_boundary > 8, "the block straddles a page boundary");
        for at in [to_boundary - 8, to_boundary + 8] {
            pool.inject(&crate::Fault::ObjectScribble {
                oid: victim.raw(),
                at,
                len: 4,
                seed: at,
            })
            .unwrap();
        }
        let before = pool.stats().pages_rebuilt;
        let report = pool.scrub(true, |_, _| {}).unwrap();
        assert_eq!(report.objects_repaired, 1, "{report:?}");
        assert_eq!(report.pages_repaired, 2, "{report:?}");
        assert_eq!(pool.stats().pages_rebuilt - before, 2);
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(*pool.get(victim).unwrap(), [1u64; 512]);
        let listed = pool.scrub(false, |_, _| {}).unwrap();
        assert_eq!(listed.pages_repaired, 0, "{listed:?}");
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }
}
