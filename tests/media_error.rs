//! Media errors through the real signal handler: `Fault::MediaError` destroys a page and
//! protects it (`mprotect(PROT_NONE)`); the next load from it raises SIGSEGV, pgl's handler
//! rebuilds the page from parity, and the load completes with the right bytes. Beyond what
//! parity can rebuild, the page is zero-filled and the damage reported by checksums as a
//! typed error.

mod support;

use pgl::{Config, CrashSim, Error, Fault, Oid, Pool};
use std::sync::{Arc, Mutex};
use support::Rng;

fn path(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-media-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

type Obj = [u64; 100];

fn value(seed: u64) -> Obj {
    let mut r = Rng(seed);
    std::array::from_fn(|_| r.next())
}

#[test]
fn loads_from_lost_pages_are_repaired_transparently() {
    let p = path("loads");
    let pool = Pool::create(&p, &Config::new("media")).unwrap();
    let objs: Vec<Oid<Obj>> = (0..300)
        .map(|i| pool.tx(|tx| tx.alloc(value(i))).unwrap())
        .collect();
    let mut rng = Rng(77);
    let faults = 120u64;
    for i in 0..faults {
        let k = rng.below(objs.len() as u64) as usize;
        let o = objs[k];
        // A page under the object: its header's page or a later one.
        let offset = o.raw() - 16 + rng.below(800);
        pool.inject(&Fault::MediaError { offset }).unwrap();
        // Half the time through a raw read of the mapping (`pool.get` hands out a direct
        // reference: the load itself faults), half through a micro-buffer copy.
        let got = if i % 2 == 0 {
            *pool.get(o).unwrap()
        } else {
            pool.tx(|tx| Ok(*tx.open(o)?)).unwrap()
        };
        assert_eq!(got, value(k as u64), "object {k} after media error {i}");
    }
    let s = pool.stats();
    println!(
        "media errors injected: {faults}, repaired by the handler: {}, lost: {}",
        s.media_errors_repaired, s.media_errors_lost
    );
    assert_eq!(s.media_errors_repaired, faults);
    assert_eq!(s.media_errors_lost, 0);
    // Every object is intact, and parity agrees with the rows.
    for (k, &o) in objs.iter().enumerate() {
        assert_eq!(pool.tx(|tx| Ok(*tx.open(o)?)).unwrap(), value(k as u64));
    }
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn transactions_on_other_threads_keep_running_while_a_page_is_repaired() {
    let p = path("threads");
    let pool = Pool::create(&p, &Config::new("media")).unwrap();
    let objs: Vec<Oid<Obj>> = (0..64)
        .map(|i| pool.tx(|tx| tx.alloc(value(i))).unwrap())
        .collect();
    let counters: Vec<Oid<u64>> = (0..2)
        .map(|_| pool.tx(|tx| tx.alloc(0u64)).unwrap())
        .collect();
    std::thread::scope(|s| {
        for &c in &counters {
            let pool = &pool;
            s.spawn(move || {
                for _ in 0..3000 {
                    pool.tx(|tx| {
                        *tx.open(c)? += 1;
                        Ok(())
                    })
                    .unwrap();
                }
            });
        }
        let mut rng = Rng(5);
        for _ in 0..40 {
            let k = rng.below(objs.len() as u64) as usize;
            pool.inject(&Fault::MediaError {
                offset: objs[k].raw() + 100,
            })
            .unwrap();
            assert_eq!(*pool.get(objs[k]).unwrap(), value(k as u64));
        }
    });
    for &c in &counters {
        assert_eq!(*pool.get(c).unwrap(), 3000);
    }
    assert_eq!(pool.stats().media_errors_repaired, 40);
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn two_lost_pages_in_one_column_are_reported_not_guessed() {
    let p = path("two");
    let cfg = Config::small("media");
    let geo = cfg.geometry();
    let pool = Pool::create(&p, &cfg).unwrap();
    // Two objects whose pages share a page column, in different rows of one zone.
    let mut seen = std::collections::HashMap::new();
    let mut pair = None;
    for i in 0..20_000u64 {
        let o: Oid<[u64; 8]> = pool.tx(|tx| tx.alloc([i; 8])).unwrap();
        let rel = o.raw() - geo.zones_offset();
        let key = (rel / geo.zone_size(), rel % geo.row_size() / 4096);
        let row = rel % geo.zone_size() / geo.row_size();
        match seen.get(&key) {
            Some(&(r, other)) if r != row => {
                pair = Some((other, o));
                break;
            }
            Some(_) => {}
            None => {
                seen.insert(key, (row, o));
            }
        }
    }
    let (a, b) = pair.expect("two objects share a page column");
    pool.inject(&Fault::MediaError { offset: a.raw() }).unwrap();
    pool.inject(&Fault::MediaError { offset: b.raw() }).unwrap();
    for o in [a, b] {
        match pool.tx(|tx| Ok(*tx.open(o)?)) {
            Err(Error::ChecksumMismatch { .. }) | Err(Error::TypeMismatch { .. }) => {}
            other => panic!("expected the damage to be reported, got {other:?}"),
        }
    }
    let s = pool.stats();
    assert_eq!(s.media_errors_lost, 2, "neither page was guessed");
    assert_eq!(s.media_errors_repaired, 0);
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// The parity page of the page holding `off`.
fn parity_page_of(geo: &pgl::geometry::Geometry, off: u64) -> u64 {
    let rel = off - geo.zones_offset();
    let zone = rel / geo.zone_size();
    let col = rel % geo.zone_size() % geo.row_size() / 4096 * 4096;
    geo.parity_offset(zone) + col
}

/// The start of the chunk holding pool offset `off` (a run's first page holds its bitmap).
fn chunk_of(geo: &pgl::geometry::Geometry, off: u64) -> u64 {
    let rel = off - geo.zones_offset();
    geo.zones_offset() + rel / geo.chunk_size * geo.chunk_size
}

/// A new pool of `cfg` holding `value(0..40)`: its path, the pool and the objects.
fn forty(name: &str, cfg: &Config) -> (std::path::PathBuf, Pool, Vec<Oid<Obj>>) {
    let p = path(name);
    let pool = Pool::create(&p, cfg).unwrap();
    let objs: Vec<Oid<Obj>> = (0..40)
        .map(|i| pool.tx(|tx| tx.alloc(value(i))).unwrap())
        .collect();
    (p, pool, objs)
}

/// A new pool holding `value(0..40)`, with 1 fault injected: a media error on the parity
/// page of the 18th object's first page. Its path, config, the pool and the objects.
fn forty_with_a_lost_parity_page(name: &str) -> (std::path::PathBuf, Config, Pool, Vec<Oid<Obj>>) {
    let cfg = Config::small("media");
    let (p, pool, objs) = forty(name, &cfg);
    pool.inject(&Fault::MediaError {
        offset: parity_page_of(&cfg.geometry(), objs[17].raw()),
    })
    .unwrap();
    (p, cfg, pool, objs)
}

#[test]
fn a_lost_parity_page_is_rebuilt_from_its_data_rows() {
    // 1 fault: the parity page of o's first page. The commit below updates it: the
    // handler rebuilds it from the data rows first.
    let (p, _, pool, objs) = forty_with_a_lost_parity_page("parity-page");
    let o = objs[17];
    pool.tx(|tx| {
        *tx.open(o)? = value(1000);
        Ok(())
    })
    .unwrap();
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (1, 0));
    assert_eq!(
        pool.verify_parity().unwrap(),
        Vec::<u64>::new(),
        "parity right again"
    );
    // A 2nd fault, in the same column: rebuilt byte-exact from that parity.
    pool.inject(&Fault::MediaError { offset: o.raw() }).unwrap();
    assert_eq!(*pool.get(o).unwrap(), value(1000));
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (2, 0));
    for (k, &x) in objs.iter().enumerate().filter(|&(k, _)| k != 17) {
        assert_eq!(*pool.get(x).unwrap(), value(k as u64));
    }
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_lost_data_page_beside_a_lost_parity_page_is_reported_not_guessed() {
    let p = path("parity-and-data");
    let cfg = Config::small("media");
    let geo = cfg.geometry();
    let pool = Pool::create(&p, &cfg).unwrap();
    let o: Oid<Obj> = pool.tx(|tx| tx.alloc(value(3))).unwrap();
    // 2 faults in one column: the object's page and its parity page.
    pool.inject(&Fault::MediaError {
        offset: parity_page_of(&geo, o.raw()),
    })
    .unwrap();
    pool.inject(&Fault::MediaError { offset: o.raw() }).unwrap();
    match pool.tx(|tx| Ok(*tx.open(o)?)) {
        Err(Error::ChecksumMismatch { .. }) | Err(Error::TypeMismatch { .. }) => {}
        other => panic!("expected the damage to be reported, got {other:?}"),
    }
    // The parity page cannot be rebuilt either (its column lost a page): it is reported
    // by a parity check, not hung on.
    assert!(!pool.verify_parity().unwrap().is_empty());
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (0, 2));
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn media_errors_outside_the_data_rows_are_refused() {
    let p = path("refused");
    let pool = Pool::create(&p, &Config::new("media")).unwrap();
    for offset in [0, 4096, pool.size() + 10] {
        assert!(matches!(
            pool.inject(&Fault::MediaError { offset }),
            Err(Error::InvalidFault { .. })
        ));
        assert!(matches!(
            pool.inject(&Fault::LostPage { offset, seed: 1 }),
            Err(Error::InvalidFault { .. })
        ));
    }
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_page_lost_while_closed_is_found_by_checksums_and_its_objects_rebuilt() {
    // `LostPage`: the page's bytes destroyed behind the pool's back, parity kept. The next
    // session opens every object in a transaction (which verifies it; a `pool.get` does
    // only under `VerifyPolicy::Conservative`): each one on the page fails its checksum
    // and is rebuilt from parity; a repairing scrub then makes the page's column agree
    // with parity.
    // Faults: 1 lost page; every object on it repaired, none lost.
    let cfg = Config::new("media");
    let (p, pool, objs) = forty("lost-page", &cfg);
    let page = (objs[5].raw() + 100) / 4096 * 4096;
    let size = std::mem::size_of::<Obj>() as u64;
    let on_page = objs
        .iter()
        .filter(|o| o.raw() - 16 < page + 4096 && o.raw() + size > page)
        .count() as u64;
    assert!(on_page >= 2, "the page holds parts of {on_page} objects");
    pool.inject(&Fault::LostPage {
        offset: page + 7,
        seed: 9,
    })
    .unwrap();
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    for (i, o) in objs.iter().enumerate() {
        assert!(
            pool.tx(|tx| Ok(*tx.open(*o)?)).unwrap() == value(i as u64),
            "object {i}"
        );
    }
    let s = pool.stats();
    println!(
        "lost pages injected: 1, objects on it: {on_page}, repaired: {}, unrecoverable: {}",
        s.objects_repaired, s.objects_unrecoverable
    );
    assert_eq!((s.objects_repaired, s.objects_unrecoverable), (on_page, 0));
    let report = pool.scrub(true, |_, _| {}).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn faults_outside_pools_still_reach_the_previous_handler() {
    // A pool is open (the handler is installed); a stack overflow on another thread must
    // still be reported by Rust's own handler (which aborts the process), so run it in a
    // child process and look at how it died.
    if std::env::var("PGL_MEDIA_OVERFLOW_CHILD").is_ok() {
        let p = path("child");
        let _pool = Pool::create(&p, &Config::new("media")).unwrap();
        std::fs::remove_file(&p).unwrap();
        #[allow(unconditional_recursion)]
        fn recurse(n: u64) -> u64 {
            let a = [n; 64];
            std::hint::black_box(&a);
            recurse(n + 1) + a[3]
        }
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| recurse(0))
            .unwrap()
            .join()
            .ok();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "faults_outside_pools_still_reach_the_previous_handler",
            "--exact",
            "--nocapture",
        ])
        .env("PGL_MEDIA_OVERFLOW_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("has overflowed its stack"),
        "Rust's overflow report, not a hang or a silent exit: {stderr}"
    );
}

#[test]
fn a_lost_page_under_a_new_object_spanning_rows_does_not_hang_its_commit() {
    // A new object longer than a row has pages in the same page column of two rows. Its
    // commit counts the first row's pages as pending in their parity stripes; if the
    // second row's page in that column is lost, the fault on it must still be repaired,
    // not wait for the committing thread's own pending bytes.
    type Huge = [u8; 100_000];
    let p = path("spanning");
    let cfg = Config::small("media");
    let geo = cfg.geometry();
    assert!(geo.row_size() + 4096 < 100_000, "the object spans two rows");
    let pool = Pool::create(&p, &cfg).unwrap();
    let v: Huge = std::array::from_fn(|i| (i * 7 + 3) as u8);
    let first: Oid<Huge> = pool.tx(|tx| tx.alloc(v)).unwrap();
    pool.tx(|tx| tx.free(first)).unwrap();
    // The page one row past the object's start: the same column as its first page.
    pool.inject(&Fault::MediaError {
        offset: first.raw() + geo.row_size(),
    })
    .unwrap();
    let (send, recv) = std::sync::mpsc::channel();
    let p2 = pool.clone();
    std::thread::spawn(move || {
        let _ = send.send(p2.tx(|tx| tx.alloc(v)));
    });
    let again = recv
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the commit finished")
        .unwrap();
    assert_eq!(again.raw(), first.raw(), "the freed block was reused");
    assert_eq!(pool.tx(|tx| Ok(*tx.open(again)?)).unwrap(), v);
    assert_eq!(pool.stats().media_errors_repaired, 1);
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_crash_point_taken_over_a_lost_page_does_not_hang() {
    // A crash test captures a crash point (at a fence hook, or whenever it likes) while a
    // page of its simulated device is lost: reading the volatile image faults on that page
    // under the device's lock, and the handler's repair must not wait for that very lock.
    let cfg = Config::small("media");
    let sim = pgl::CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let o: Oid<Obj> = pool.tx(|tx| tx.alloc(value(9))).unwrap();
    pool.inject(&Fault::MediaError { offset: o.raw() }).unwrap();
    let (send, recv) = std::sync::mpsc::channel();
    let s2 = sim.clone();
    std::thread::spawn(move || {
        let _ = send.send(s2.crash_point().pending());
    });
    if recv
        .recv_timeout(std::time::Duration::from_secs(30))
        .is_err()
    {
        // Closing the pool would wait for the stuck thread's lock too: fail instead.
        std::mem::forget(pool);
        panic!("the crash point hung on the lost page");
    }
    assert_eq!(*pool.get(o).unwrap(), value(9));
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (1, 0));
}

/// `n` objects of `value(i)` whose first pages share one page column, each in another row
/// of one zone (`support::same_column`).
fn same_column(
    pool: &Pool,
    geo: &pgl::geometry::Geometry,
    n: usize,
    data_only: bool,
) -> Vec<Oid<Obj>> {
    support::same_column(pool, geo, n, data_only, value)
}

/// A new pool of two zones (`Config::small`): its path, config, geometry and the pool.
fn two_zones(name: &str) -> (std::path::PathBuf, Config, pgl::geometry::Geometry, Pool) {
    let p = path(name);
    let cfg = Config::small("media");
    let geo = cfg.geometry();
    let cfg = cfg.size(geo.pool_size(2));
    let pool = Pool::create(&p, &cfg).unwrap();
    (p, cfg, geo, pool)
}

#[test]
fn pages_zeroed_before_a_close_leave_their_column_rebuildable() {
    // Pages lost for good are zero-filled by the handler: `a` and `b` (two losses in one
    // column). Their column's parity must agree with the zeros once the pool is closed:
    // the next session no longer knows which pages were zeroed, and a later lost page of
    // the column (`c`) is rebuilt from that parity and counted as repaired. A page still
    // lost when the pool closes (`d`, never read, on a page of objects alone) is rebuilt
    // at the close from its column's parity, as a load would have rebuilt it: the next
    // session finds it intact and its column agreeing with parity, and the column
    // rebuilds a lost page (`e`) as before; a scrub then finds every object intact.
    // (Left zeroed for the next session, `d` alone was repaired when read: the rest of
    // its page kept its zeros, the column disagreed with its parity, and the objects of
    // that page the test never reads were damaged.)
    // Faults: 5 media errors; 2 lost for good (reported), 3 repaired (1 at the close).
    let (p, cfg, geo, pool) = two_zones("zeroed-close");
    let [a, b, c] = same_column(&pool, &geo, 3, false)[..] else {
        unreachable!()
    };
    let [d, e] = same_column(&pool, &geo, 2, true)[..] else {
        unreachable!()
    };
    let want = |o: Oid<Obj>| *pool.get(o).unwrap();
    let (want_c, want_d, want_e) = (want(c), want(d), want(e));
    support::lose_for_good(&pool, &[a, b]);
    pool.inject(&Fault::MediaError { offset: d.raw() }).unwrap();
    assert_eq!(pool.stats().media_errors_lost, 2);
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(
        pool.verify_parity().unwrap(),
        Vec::<u64>::new(),
        "every column agrees with its parity"
    );
    assert!(
        *pool.get(d).unwrap() == want_d,
        "the page lost at close was rebuilt from its column's intact parity"
    );
    assert_eq!(pool.stats().objects_repaired, 0, "nothing left to repair");
    support::assert_rebuilt(&pool, c, &want_c);
    support::assert_rebuilt(&pool, e, &want_e);
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (2, 0));
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    // Every object, those beside `d` and `e` on their pages included: damage is reported
    // on the pages of `a` and `b` alone (lost for good: their objects, or the bitmap
    // words over them), nowhere else.
    let report = pool.scrub(false, |_, _| {}).unwrap();
    let page = |off: u64| off / 4096;
    assert!(!report.damaged.is_empty(), "the pages lost for good");
    for (off, e) in &report.damaged {
        assert!(
            [a, b].iter().any(|o| page(o.raw()) == page(*off)),
            "damage at {off:#x} beyond the pages lost for good: {e}"
        );
    }
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn two_pages_of_one_column_still_lost_at_close_leave_it_rebuildable() {
    // Two pages of one column lost and never read before the pool closes (`a`, `b`): the
    // close cannot rebuild either (each is the other's second loss), so both are lost for
    // good, zeroed, and their column's parity must be recomputed over the zeros, as for
    // the pages the handler zero-filled: the next session no longer knows which pages were
    // zeroed, and a later lost page of the column (`c`) is rebuilt from that parity.
    // Faults: 3 media errors; 2 lost for good at the close, 1 repaired.
    let (p, cfg, geo, pool) = two_zones("two-unread");
    let [a, b, c] = same_column(&pool, &geo, 3, true)[..] else {
        unreachable!()
    };
    let want_c = *pool.get(c).unwrap();
    for o in [a, b] {
        pool.inject(&Fault::MediaError { offset: o.raw() }).unwrap();
    }
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(
        pool.verify_parity().unwrap(),
        Vec::<u64>::new(),
        "the column of the two zeroed pages agrees with its parity"
    );
    for o in [a, b] {
        assert!(
            pool.tx(|tx| Ok(*tx.open(o)?)).is_err(),
            "the loss is reported"
        );
    }
    support::assert_rebuilt(&pool, c, &want_c);
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (1, 0));
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_lost_page_holding_a_checked_run_bitmap_is_repaired_at_the_next_open() {
    // `LostPage` on a run's first page: its checked bitmap words (and the first objects)
    // hold random bytes. The next open finds every word damaged and rebuilds it from
    // parity; the objects on the page are repaired as they are read; allocation goes on
    // without handing out a live block.
    // Faults: 1 lost page.
    let cfg = Config::small("media");
    let (p, pool, objs) = forty("lost-bitmap", &cfg);
    let run = chunk_of(&cfg.geometry(), objs[0].raw());
    pool.inject(&Fault::LostPage {
        offset: run,
        seed: 5,
    })
    .unwrap();
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert!(
        pool.stats().bitmap_repairs > 0,
        "the bitmap words were rebuilt"
    );
    for (i, o) in objs.iter().enumerate() {
        assert!(
            pool.tx(|tx| Ok(*tx.open(*o)?)).unwrap() == value(i as u64),
            "object {i}"
        );
    }
    let more: Vec<Oid<Obj>> = (0..40)
        .map(|i| pool.tx(|tx| tx.alloc(value(100 + i))).unwrap())
        .collect();
    for (i, o) in objs.iter().enumerate() {
        assert!(
            *pool.get(*o).unwrap() == value(i as u64),
            "object {i} after allocations"
        );
    }
    for (i, o) in more.iter().enumerate() {
        assert!(
            *pool.get(*o).unwrap() == value(100 + i as u64),
            "new object {i}"
        );
    }
    assert_eq!(pool.stats().objects_unrecoverable, 0);
    let report = pool.scrub(true, |_, _| {}).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_lost_parity_page_is_reported_by_a_scrub_and_recomputed_by_a_repairing_one() {
    // `LostPage` on a parity page: no checksum covers it, so only a parity check finds
    // it. A scrub reports its column; a repairing scrub recomputes it, after which the
    // column rebuilds a lost data page byte-exact.
    // Faults: 1 lost page, then 1 media error (repaired).
    let cfg = Config::small("media");
    let (p, pool, objs) = forty("lost-parity", &cfg);
    let o = objs[17];
    let parity = parity_page_of(&cfg.geometry(), o.raw());
    pool.inject(&Fault::LostPage {
        offset: parity,
        seed: 5,
    })
    .unwrap();
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(
        pool.verify_parity().unwrap(),
        vec![parity],
        "the column is found"
    );
    let report = pool.scrub(false, |_, _| {}).unwrap();
    assert!(
        !report.is_clean() && report.parity_columns_bad > 0,
        "{report:?}"
    );
    let report = pool.scrub(true, |_, _| {}).unwrap();
    assert!(report.parity_columns_fixed > 0, "{report:?}");
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    pool.inject(&Fault::MediaError { offset: o.raw() }).unwrap();
    assert!(
        *pool.get(o).unwrap() == value(17),
        "rebuilt from the recomputed parity"
    );
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// `count` page columns, each holding the first pages of `n` objects, one per row (other
/// rows of one zone); the objects of each column in allocation order.
fn columns(
    pool: &Pool,
    geo: &pgl::geometry::Geometry,
    count: usize,
    n: usize,
) -> Vec<Vec<Oid<Obj>>> {
    let mut seen = std::collections::HashMap::<_, Vec<(u64, Oid<Obj>)>>::new();
    let mut full = Vec::new();
    for i in 0..50_000u64 {
        let o: Oid<Obj> = pool.tx(|tx| tx.alloc(value(i))).unwrap();
        let rel = o.raw() - geo.zones_offset();
        let key = (rel / geo.zone_size(), rel % geo.row_size() / 4096);
        let row = rel % geo.zone_size() / geo.row_size();
        let found = seen.entry(key).or_default();
        if found.len() < n && found.iter().all(|&(r, _)| r != row) {
            found.push((row, o));
            if found.len() == n {
                full.push(found.iter().map(|&(_, o)| o).collect());
                if full.len() == count {
                    return full;
                }
            }
        }
    }
    panic!("no {count} page columns hold {n} objects each");
}

#[test]
fn more_lost_pages_than_the_handler_records_are_never_rebuilt_from_stale_parity() {
    // The handler records the pages it zero-fills (64 of them) so that their columns are
    // not rebuilt from parity that still holds their old bytes. 33 columns lose two pages
    // each (`a`, `b`): 66 losses, none rebuildable. Then `c`, a third page of the last
    // column, is lost alone: its column's parity is stale (it still holds `a` and `b`),
    // so `c` must be reported lost, never "repaired" with wrong bytes. Once the pool is
    // closed, every column's parity agrees with its rows again, and `d` (a fourth page of
    // the last column) is rebuilt byte-exact.
    // Faults: 67 injected in the session, 0 repaired, 67 lost; 1 after reopening, repaired.
    let p = path("overflow");
    let cfg = Config::new("media");
    let geo = cfg.geometry();
    let pool = Pool::create(&p, &cfg).unwrap();
    let cols = columns(&pool, &geo, 33, 4);
    let want = |o: Oid<Obj>| *pool.get(o).unwrap();
    let wants: Vec<Vec<Obj>> = cols
        .iter()
        .map(|c| c.iter().map(|&o| want(o)).collect())
        .collect();
    // Reads `o` after a media error on its page: never wrong bytes counted as repaired.
    let lose = |o: Oid<Obj>, want: &Obj| {
        let before = pool.stats().media_errors_repaired;
        // The object's header may lie on the lost page: a lost one fails its type check.
        let got = pool.get(o).map(|r| *r).ok();
        if pool.stats().media_errors_repaired > before {
            assert!(
                got.as_ref() == Some(want),
                "object at {:#x} rebuilt from stale parity",
                o.raw()
            );
        }
    };
    for (c, w) in cols.iter().zip(&wants) {
        for &o in &c[..2] {
            pool.inject(&Fault::MediaError { offset: o.raw() }).unwrap();
        }
        lose(c[0], &w[0]);
        lose(c[1], &w[1]);
    }
    let last = cols.len() - 1;
    pool.inject(&Fault::MediaError {
        offset: cols[last][2].raw(),
    })
    .unwrap();
    lose(cols[last][2], &wants[last][2]);
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (0, 67));
    for o in cols.iter().flat_map(|c| &c[..2]).chain([&cols[last][2]]) {
        assert!(
            pool.tx(|tx| Ok(*tx.open(*o)?)).is_err(),
            "the loss is reported"
        );
    }
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    support::assert_rebuilt(&pool, cols[last][3], &wants[last][3]);
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (1, 0));
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_sigbus_sent_by_a_process_still_kills_when_the_previous_action_is_the_default() {
    // Where the action before pgl's was the default (a host whose runtime installs no
    // handler), a SIGBUS that no fault raised (`raise`, `kill`) must still end the
    // process: pgl's handler hands it on, and restoring the default action and returning
    // would drop it (no instruction faults again to raise it anew).
    if std::env::var("PGL_MEDIA_RAISE_CHILD").is_ok() {
        // SAFETY: a zeroed sigaction with the default action.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
        }
        let p = path("raise-child");
        let _pool = Pool::create(&p, &Config::small("media")).unwrap();
        std::fs::remove_file(&p).unwrap();
        // SAFETY: raise has no preconditions.
        unsafe { libc::raise(libc::SIGBUS) };
        std::process::exit(7);
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "a_sigbus_sent_by_a_process_still_kills_when_the_previous_action_is_the_default",
            "--exact",
            "--nocapture",
        ])
        .env("PGL_MEDIA_RAISE_CHILD", "1")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "killed by the SIGBUS ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_parity_page_still_lost_at_close_leaves_its_column_rebuildable() {
    // A parity page lost (never read) when the pool closes: its bytes are destroyed, and
    // no checksum covers a parity page, so the next session would never notice. Its
    // column must still rebuild a later lost data page byte-exact, not from zeroes.
    // Faults: 2 media errors; the 1st never read, the 2nd repaired in the next session.
    let (p, cfg, pool, objs) = forty_with_a_lost_parity_page("parity-close");
    let o = objs[17];
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    support::assert_rebuilt(&pool, o, &value(17));
    let s = pool.stats();
    assert_eq!((s.media_errors_repaired, s.media_errors_lost), (1, 0));
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// A geometry whose smallest class gets plain run bitmaps (a checked one would take more
/// than half of its 8 KiB lanes): no check tells a zeroed bitmap word from an empty one.
fn plain_run_config() -> Config {
    let mut c = Config::small("media");
    c.chunk_size = 512 << 10;
    c.chunks_per_row = 1;
    c.rows = 4;
    c.lane_size = 8 << 10;
    c.size = c.geometry().pool_size(1);
    c.max_size = c.size;
    c
}

/// A new pool of `plain_run_config` holding `1000 + i` for `i` in 0..400, all in one run:
/// its path, config, the pool, the objects and the run's chunk (whose first page holds
/// the plain bitmap).
#[allow(clippy::type_complexity)]
fn one_plain_run(name: &str) -> (std::path::PathBuf, Config, Pool, Vec<Oid<u64>>, u64) {
    let p = path(name);
    let cfg = plain_run_config();
    let geo = cfg.geometry();
    let pool = Pool::create(&p, &cfg).unwrap();
    let objs: Vec<Oid<u64>> = (0..400u64)
        .map(|i| pool.tx(|tx| tx.alloc(1000 + i)).unwrap())
        .collect();
    let run = chunk_of(&geo, objs[0].raw());
    assert!(
        objs.iter().all(|o| chunk_of(&geo, o.raw()) == run),
        "one run"
    );
    (p, cfg, pool, objs, run)
}

#[test]
fn a_lost_page_no_check_would_find_is_refused() {
    // `LostPage` marks nothing lost: a plain run bitmap's random words would free live
    // blocks, and without checksums objects would read back wrong, all unreported. Both
    // are refused, the pool unchanged; `MediaError` (rebuilt on the next load) is not.
    let (p, cfg, pool, objs, run) = one_plain_run("lost-unnoticed");
    let r = pool.inject(&Fault::LostPage {
        offset: run,
        seed: 3,
    });
    match r {
        Err(Error::InvalidFault { reason, .. }) => {
            assert!(
                reason.contains("plain (unchecked) allocation bitmap"),
                "{reason}"
            )
        }
        other => panic!("a plain bitmap's page: {other:?}"),
    }
    pool.inject(&Fault::MediaError { offset: run }).unwrap();
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    for (i, o) in objs.iter().enumerate() {
        assert_eq!(*pool.get(*o).unwrap(), 1000 + i as u64, "object {i}");
    }
    drop(pool);
    std::fs::remove_file(&p).unwrap();

    let p = path("lost-no-sums");
    let mut cfg = Config::new("media");
    cfg.checksums = false;
    let pool = Pool::create(&p, &cfg).unwrap();
    let o: Oid<Obj> = pool.tx(|tx| tx.alloc(value(1))).unwrap();
    let r = pool.inject(&Fault::LostPage {
        offset: o.raw(),
        seed: 3,
    });
    match r {
        Err(Error::InvalidFault { reason, .. }) => {
            assert!(reason.contains("no object checksums"), "{reason}")
        }
        other => panic!("a pool without checksums: {other:?}"),
    }
    assert!(*pool.get(o).unwrap() == value(1), "unchanged");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_plain_run_bitmap_page_still_lost_at_close_does_not_free_its_objects() {
    let (p, cfg, pool, objs, run) = one_plain_run("plain-bitmap");
    pool.inject(&Fault::MediaError { offset: run }).unwrap();
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    // New objects of the same class must not land on the live ones.
    let new: Vec<Oid<u64>> = (0..400u64)
        .map(|i| pool.tx(|tx| tx.alloc(9000 + i)).unwrap())
        .collect();
    for (i, o) in objs.iter().enumerate() {
        assert!(
            !new.contains(o),
            "object {i} at {:#x} allocated again",
            o.raw()
        );
        assert_eq!(*pool.get(*o).unwrap(), 1000 + i as u64, "object {i}");
    }
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn without_checksums_a_page_still_lost_at_close_is_rebuilt_not_zeroed() {
    // Nothing would tell the next session the page was lost: zeroed, its objects would
    // read back as zeros, though parity could rebuild them.
    let p = path("no-sums");
    let mut cfg = Config::new("media");
    cfg.checksums = false;
    let pool = Pool::create(&p, &cfg).unwrap();
    let objs: Vec<Oid<Obj>> = (0..20)
        .map(|i| pool.tx(|tx| tx.alloc(value(i))).unwrap())
        .collect();
    pool.inject(&Fault::MediaError {
        offset: objs[7].raw() + 100,
    })
    .unwrap();
    drop(pool);
    let pool = Pool::open_with(&p, &cfg).unwrap();
    for (i, o) in objs.iter().enumerate() {
        assert_eq!(*pool.get(*o).unwrap(), value(i as u64), "object {i}");
    }
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn write_backs_owed_to_a_page_lost_since_do_not_hang_a_commit_of_new_objects() {
    // An overwrite-only commit leaves its write-backs owed by its thread until its next
    // fence. The page is lost meanwhile (its record settled by the injection's freeze).
    // The thread's next commit creates an object with a page in the same column, counted
    // pending in the column's stripe, then issues the owed write-backs at its fence: the
    // simulated device reads the lost page there (as clwb checks access like a load), and
    // the repair must not wait for this very thread's pending bytes.
    type Big = [u8; 60_000];
    let cfg = Config::small("media");
    let geo = cfg.geometry();
    let sim = pgl::CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let o: Oid<Obj> = pool.tx(|tx| tx.alloc(value(3))).unwrap();
    let (send, recv) = std::sync::mpsc::channel();
    let p2 = pool.clone();
    std::thread::spawn(move || {
        let r = (|| {
            p2.tx(|tx| {
                tx.open(o)?[5] = 55;
                Ok(())
            })?;
            p2.inject(&Fault::MediaError { offset: o.raw() })?;
            p2.tx(|tx| tx.alloc([7u8; 60_000]))
        })();
        let _ = send.send(r);
    });
    let Ok(big) = recv.recv_timeout(std::time::Duration::from_secs(30)) else {
        std::mem::forget(pool);
        panic!("the commit hung on the lost page");
    };
    let big: Oid<Big> = big.unwrap();
    let column = |off: u64| (off - geo.zones_offset()) % geo.row_size() / 4096;
    assert!(
        (column(big.raw())..=column(big.raw() + 59_999)).contains(&column(o.raw())),
        "the new object has a page in the lost page's column"
    );
    let mut want = value(3);
    want[5] = 55;
    assert_eq!(*pool.get(o).unwrap(), want);
    assert_eq!(pool.get(big).unwrap()[59_999], 7);
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
}

/// A pool on a `CrashSim`, its device, and a freed block (of an `Obj`) with a lost page
/// one row away in its page column: the next allocation of an `Obj` reuses the block.
fn sim_with_lost_page_beside_a_free_block() -> (Arc<CrashSim>, Pool, Oid<Obj>) {
    let cfg = Config::small("media");
    let geo = cfg.geometry();
    let sim = CrashSim::new(cfg.max_size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    // The first object keeps its run in use, so that the second's block stays in it.
    let _keep: Oid<Obj> = pool.tx(|tx| tx.alloc(value(0))).unwrap();
    let first: Oid<Obj> = pool.tx(|tx| tx.alloc(value(1))).unwrap();
    pool.tx(|tx| tx.free(first)).unwrap();
    let row = (first.raw() - geo.zones_offset()) % geo.zone_size() / geo.row_size();
    let lost = match row + 1 < geo.rows {
        true => first.raw() + geo.row_size(),
        false => first.raw() - geo.row_size(),
    };
    pool.inject(&Fault::MediaError { offset: lost }).unwrap();
    (sim, pool, first)
}

#[test]
fn a_crash_point_at_a_fence_of_a_commit_with_new_objects_in_a_lost_pages_column_does_not_hang() {
    // The commit that allocates into the freed block counts the block's column as pending
    // (its parity updated, its bytes not yet durable) until after its fence. A crash test's
    // fence hook captures a crash point there, which reads the whole device, the lost page
    // too: were that load to fault, the repair would wait for the column's pending bytes,
    // which this very thread releases only once its fence is done. (One thread throughout:
    // each thread allocates from runs of its own.)
    support::within("a commit whose fence hook reads a lost page", 60, || {
        let (sim, pool, first) = sim_with_lost_page_beside_a_free_block();
        let points = Arc::new(Mutex::new(Vec::new()));
        let sink = points.clone();
        sim.set_fence_hook(move |s: &CrashSim| sink.lock().unwrap().push(s.crash_point()));
        let again = pool.tx(|tx| tx.alloc(value(2))).unwrap();
        sim.clear_fence_hook();
        assert_eq!(again.raw(), first.raw(), "the freed block was reused");
        assert!(!points.lock().unwrap().is_empty());
        assert_eq!(*pool.get(again).unwrap(), value(2));
        assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    });
}

#[test]
fn a_crash_point_beside_another_threads_commit_with_new_objects_in_a_lost_pages_column_does_not_hang(
) {
    // Thread B's commit counts the freed block's column as pending until after its fence;
    // thread A captures a crash point meanwhile (B's fence hook lets A run at that moment
    // and waits for it). Were A's read of the lost page to fault under the device's image
    // lock, the repair would wait for B's pending bytes, and B's fence for that lock.
    support::within("a commit beside a crash point over a lost page", 60, || {
        let (sim, pool, first) = sim_with_lost_page_beside_a_free_block();
        let (go, wait_go) = std::sync::mpsc::channel::<()>();
        let (done, wait_done) = std::sync::mpsc::channel::<usize>();
        let mut armed = Some((go, wait_done));
        sim.set_fence_hook(move |_: &CrashSim| {
            if let Some((go, wait_done)) = armed.take() {
                let _ = go.send(());
                let _ = wait_done.recv();
            }
        });
        let s2 = sim.clone();
        let a = std::thread::spawn(move || {
            wait_go.recv().unwrap();
            let _ = done.send(s2.crash_point().pending());
        });
        let again = pool.tx(|tx| tx.alloc(value(2))).unwrap();
        sim.clear_fence_hook();
        a.join().unwrap();
        assert_eq!(again.raw(), first.raw(), "the freed block was reused");
        assert_eq!(*pool.get(again).unwrap(), value(2));
        assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    });
}
