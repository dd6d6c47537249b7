//! Allocation bitmaps check themselves: every word of a run's bitmap is sealed with a
//! check of its bits and its offset, so damage there (a scribble, bit flips, a zeroed word)
//! is found wherever the word is next used: when the pool opens, when a commit allocates
//! or frees in that run, by a scrub, by `pool.objects`. Within parity's reach the word is
//! rebuilt byte-exact and nothing is lost; beyond it the word's run is taken out of
//! service (the pool still opens, its objects stay readable), the damage is a typed error
//! (`Error::BitmapMismatch`) where the word is needed, and nothing is written over it. Each test says how many
//! faults it injected and what became of them.

mod support;

use pgl::{Config, Error, Fault, Oid, Pool};

type Obj = [u64; 8];

/// A kind of damage: its name, what injects it at a word (of the pool at the path), and
/// how many words it hits.
type Damage = (&'static str, fn(&Pool, &std::path::Path, u64), u64);

fn inject(f: Fault) -> impl Fn(&Pool) {
    move |pool| pool.inject(&f).unwrap()
}

fn path(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-bitmap-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn cfg(parity: bool) -> Config {
    let mut c = Config::small("bitmaps");
    c.parity = parity;
    c
}

/// Pool offset of the bitmap word holding `oid`'s block.
fn word_of(pool: &Pool, oid: u64) -> u64 {
    support::bitmap_word_of(pool, oid, std::mem::size_of::<Obj>() as u64)
}

use support::{file_word as read_u64, parity_of};

/// Scribbles 8 bytes over bitmap word `w` and over the parity bytes that could rebuild
/// it (seeds `seed` and `seed + 1`): damage beyond parity.
fn scribble_word_and_parity(pool: &Pool, w: u64, seed: u64) {
    for (offset, seed) in [(w, seed), (parity_of(pool, w), seed + 1)] {
        pool.inject(&Fault::Scribble {
            offset,
            len: 8,
            seed,
        })
        .unwrap();
    }
}

/// `n` objects with distinct values.
fn fill(pool: &Pool, n: u64) -> Vec<(Oid<Obj>, Obj)> {
    (0..n)
        .map(|i| {
            let v: Obj = std::array::from_fn(|k| i * 100 + k as u64);
            (pool.tx(|tx| tx.alloc(v)).unwrap(), v)
        })
        .collect()
}

fn check(pool: &Pool, objs: &[(Oid<Obj>, Obj)]) {
    for (oid, v) in objs {
        assert_eq!(pool.tx(|tx| Ok(*tx.open(*oid)?)).unwrap(), *v);
    }
}

/// Allocates 100 more objects and checks that none lands on a live one (a bitmap that
/// lost bits would hand their blocks out again).
fn no_block_handed_out_twice(pool: &Pool, objs: &[(Oid<Obj>, Obj)]) {
    let live: std::collections::HashSet<u64> = objs.iter().map(|(o, _)| o.raw()).collect();
    for _ in 0..100 {
        let o = pool.tx(|tx| tx.alloc([7u64; 8])).unwrap();
        assert!(
            !live.contains(&o.raw()),
            "block {:#x} handed out twice",
            o.raw()
        );
    }
    check(pool, objs);
}

#[test]
fn damaged_bitmap_words_are_rebuilt_when_the_pool_opens() {
    let p = path("open");
    // Each shape of damage, one at a time: an 8-byte scribble, 1-3 flipped bits, a zeroed
    // word, and a 64-byte scribble over eight words.
    let faults: [Damage; 6] = [
        (
            "8-byte scribble",
            |p, _, w| {
                inject(Fault::Scribble {
                    offset: w,
                    len: 8,
                    seed: 1,
                })(p)
            },
            1,
        ),
        (
            "1-bit flip",
            |p, _, w| {
                inject(Fault::BitFlips {
                    offset: w,
                    bits: 1,
                    seed: 2,
                })(p)
            },
            1,
        ),
        (
            "2-bit flip",
            |p, _, w| {
                inject(Fault::BitFlips {
                    offset: w,
                    bits: 2,
                    seed: 3,
                })(p)
            },
            1,
        ),
        (
            "3-bit flip",
            |p, _, w| {
                inject(Fault::BitFlips {
                    offset: w,
                    bits: 3,
                    seed: 4,
                })(p)
            },
            1,
        ),
        (
            "64-byte scribble",
            |p, _, w| {
                inject(Fault::Scribble {
                    offset: w,
                    len: 64,
                    seed: 5,
                })(p)
            },
            8,
        ),
        // A stray write of zeros (through the file: parity never hears of it).
        ("zeroed word", |_, path, w| stray_write(path, w, 0), 1),
    ];
    let mut injected = 0;
    let mut repaired = 0;
    for (name, fault, words) in &faults {
        let _ = std::fs::remove_file(&p);
        let pool = Pool::create(&p, &cfg(true)).unwrap();
        let objs = fill(&pool, 300);
        let w = word_of(&pool, objs[0].0.raw());
        let free = pool.free_bytes();
        drop(pool);
        let before: Vec<u64> = (0..*words).map(|i| read_u64(&p, w + 8 * i)).collect();
        let pool = Pool::open(&p, "bitmaps").unwrap();
        fault(&pool, &p, w);
        drop(pool);
        injected += 1;
        let changed = (0..*words)
            .filter(|&i| read_u64(&p, w + 8 * i) != before[i as usize])
            .count() as u64;
        assert_eq!(changed, *words, "{name}: every word damaged");

        let pool = Pool::open(&p, "bitmaps").unwrap();
        assert_eq!(pool.stats().bitmap_repairs, *words, "{name}");
        let after: Vec<u64> = (0..*words).map(|i| read_u64(&p, w + 8 * i)).collect();
        assert_eq!(after, before, "{name}: rebuilt byte-exact");
        assert_eq!(
            pool.free_bytes(),
            free,
            "{name}: the allocator sees the same blocks"
        );
        assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new(), "{name}");
        check(&pool, &objs);
        no_block_handed_out_twice(&pool, &objs);
        repaired += 1;
    }
    println!("faults injected: {injected}, repaired when the pool opened: {repaired}");
    assert_eq!(repaired, injected);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_commit_that_meets_a_damaged_word_has_it_rebuilt_and_goes_on() {
    let p = path("commit");
    let pool = Pool::create(&p, &cfg(true)).unwrap();
    // Ten objects in a fresh run: the next allocation sets bit 10 of its first word.
    let mut objs = fill(&pool, 10);
    let w = word_of(&pool, objs[0].0.raw());
    assert_eq!(word_of(&pool, objs[9].0.raw()), w);
    let sealed = read_u64(&p, w);

    // 1. An allocation.
    pool.inject(&Fault::Scribble {
        offset: w,
        len: 8,
        seed: 11,
    })
    .unwrap();
    let o = pool.tx(|tx| tx.alloc([42u64; 8])).unwrap();
    assert_eq!(word_of(&pool, o.raw()), w, "allocated in the damaged word");
    let s = pool.stats();
    assert_eq!(s.bitmap_repairs, 1);
    assert!(
        s.aborts >= 1,
        "the first attempt aborted before writing anything"
    );
    assert_eq!(read_u64(&p, w) as u32, (sealed as u32) | 1 << 10);
    objs.push((o, [42; 8]));

    // 2. A free.
    pool.inject(&Fault::BitFlips {
        offset: w,
        bits: 2,
        seed: 12,
    })
    .unwrap();
    let (gone, _) = objs.remove(3);
    pool.tx(|tx| tx.free(gone)).unwrap();
    assert_eq!(pool.stats().bitmap_repairs, 2);
    assert_eq!(
        read_u64(&p, w) as u32,
        ((sealed as u32) | 1 << 10) & !(1 << 3)
    );

    // 3. `pool.objects`, which walks the persistent bitmaps.
    pool.inject(&Fault::Scribble {
        offset: w,
        len: 8,
        seed: 13,
    })
    .unwrap();
    let listed = pool.objects().unwrap();
    assert_eq!(pool.stats().bitmap_repairs, 3);
    for (oid, _) in &objs {
        assert!(
            listed.iter().any(|(o, _)| o == &oid.raw()),
            "{oid:?} listed"
        );
    }
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    check(&pool, &objs);
    println!("faults injected: 3, repaired by the operation that met them: 3");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn scrub_reports_and_rebuilds_damaged_bitmap_words() {
    let p = path("scrub");
    let pool = Pool::create(&p, &cfg(true)).unwrap();
    let objs = fill(&pool, 200);
    let w = word_of(&pool, objs[0].0.raw());
    let sealed = read_u64(&p, w);
    pool.inject(&Fault::Scribble {
        offset: w + 8,
        len: 16,
        seed: 21,
    })
    .unwrap();
    let r = pool.scrub(false, |_, _| {}).unwrap();
    assert_eq!((r.bitmap_words_bad, r.bitmap_words_fixed), (2, 0));
    assert!(!r.is_clean());
    assert!(r
        .damaged
        .iter()
        .all(|(off, e)| matches!(e, Error::BitmapMismatch { offset, .. } if offset == off)));
    let r = pool.scrub(true, |_, _| {}).unwrap();
    assert_eq!((r.bitmap_words_bad, r.bitmap_words_fixed), (2, 2));
    assert!(r.is_clean(), "{r:?}");
    assert_eq!(pool.stats().bitmap_repairs, 2);
    assert_eq!(read_u64(&p, w), sealed);
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new());
    check(&pool, &objs);
    println!("faults injected: 1 (two words), repaired by the scrub: 1");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// A bitmap word damaged after the scrub checked the zone's metadata, before it checks
/// the zone's parity: the frozen re-check finds it, and it is rebuilt from the parity
/// that was kept (recomputing the column instead would make the damage permanent).
#[test]
fn a_bitmap_word_damaged_during_a_scrub_is_rebuilt_by_that_scrub() {
    let p = path("scrub-late");
    let pool = Pool::create(&p, &cfg(true)).unwrap();
    let objs = fill(&pool, 40);
    let w = word_of(&pool, objs[0].0.raw());
    let sealed = read_u64(&p, w);
    let mut injected = 0;
    // Progress is reported as objects are verified: metadata was checked before.
    let r = pool
        .scrub(true, |done, total| {
            if done == total && injected == 0 {
                pool.inject(&Fault::BitFlips {
                    offset: w,
                    bits: 3,
                    seed: 4,
                })
                .unwrap();
                injected += 1;
            }
        })
        .unwrap();
    assert_eq!(injected, 1, "one fault injected during the scrub");
    assert_eq!((r.bitmap_words_bad, r.bitmap_words_fixed), (1, 1), "{r:?}");
    assert!(r.is_clean(), "{r:?}");
    assert_eq!(read_u64(&p, w), sealed, "rebuilt byte-exact");
    let again = pool.scrub(true, |_, _| {}).unwrap();
    assert!(
        again.is_clean() && again.bitmap_words_bad == 0 && again.parity_columns_bad == 0,
        "{again:?}"
    );
    check(&pool, &objs);
    println!("faults injected: 1, repaired by the scrub it hit: 1");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// What a pool opened over a bitmap word nothing could rebuild must do: open, with the
/// word's run out of service; keep every object readable; never allocate under the word;
/// report it (typed) where the word itself is needed; never write over it.
fn opened_with_the_word_quarantined(p: &std::path::Path, w: u64, objs: &[(Oid<Obj>, Obj)]) {
    let damaged = read_u64(p, w);
    let pool = Pool::open(p, "bitmaps").unwrap_or_else(|e| panic!("the pool did not open: {e}"));
    assert_eq!(pool.stats().runs_quarantined, 1);
    check(&pool, objs);
    let mut made = Vec::new();
    for i in 0..100u64 {
        let o = pool.tx(|tx| tx.alloc([i; 8])).unwrap();
        assert_ne!(
            word_of(&pool, o.raw()),
            w,
            "allocated under the damaged word"
        );
        made.push((o, [i; 8]));
    }
    // A free of an object the word covers needs the word: typed, nothing freed.
    match pool.tx(|tx| tx.free(objs[0].0)) {
        Err(Error::BitmapMismatch { offset, .. }) => assert_eq!(offset, w),
        other => panic!("expected BitmapMismatch, got {other:?}"),
    }
    match pool.objects() {
        Err(Error::BitmapMismatch { offset, .. }) => assert_eq!(offset, w),
        other => panic!("expected BitmapMismatch, got {other:?}"),
    }
    // Tools that report damage list what they can, and verify every other object.
    let listing = pool.objects_with_damage().unwrap();
    assert_eq!(listing.damaged_words(), vec![w]);
    assert!(made
        .iter()
        .all(|(o, _)| listing.objects.iter().any(|(l, _)| l == &o.raw())));
    let bad = pool.verify_objects(|_, _| {}).unwrap();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(matches!(bad[0], (o, Error::BitmapMismatch { offset, .. }) if o == w && offset == w));
    let r = pool.scrub(false, |_, _| {}).unwrap();
    assert_eq!((r.bitmap_words_bad, r.bitmap_words_fixed), (1, 0));
    check(&pool, objs);
    check(&pool, &made);
    // Objects elsewhere are freed as usual.
    pool.tx(|tx| tx.free(made[0].0)).unwrap();
    drop(pool);
    assert_eq!(read_u64(p, w), damaged, "nothing written over the damage");
    // Still quarantined, still open-able, on every later open.
    let pool = Pool::open(p, "bitmaps").unwrap();
    assert_eq!(pool.stats().runs_quarantined, 1);
    check(&pool, objs);
    check(&pool, &made[1..]);
}

/// A pool without parity holding 5 objects, with `bits` bits of the bitmap word of the
/// first flipped: its path, the pool, the objects and the word's offset.
fn flipped_without_parity(
    name: &str,
    bits: u32,
    seed: u64,
) -> (std::path::PathBuf, Pool, Vec<(Oid<Obj>, Obj)>, u64) {
    let p = path(name);
    let pool = Pool::create(&p, &cfg(false)).unwrap();
    let objs = fill(&pool, 5);
    let w = word_of(&pool, objs[0].0.raw());
    pool.inject(&Fault::BitFlips {
        offset: w,
        bits,
        seed,
    })
    .unwrap();
    (p, pool, objs, w)
}

#[test]
fn bitmap_damage_beyond_parity_is_a_typed_error_and_nothing_builds_on_it() {
    // Without parity: detected, never repaired, never written over.
    let (p, pool, objs, w) = flipped_without_parity("beyond", 1, 31);
    let damaged = read_u64(&p, w);
    match pool.tx(|tx| tx.alloc([1u64; 8])) {
        Err(Error::BitmapMismatch { offset, .. }) => assert_eq!(offset, w),
        other => panic!("expected BitmapMismatch, got {other:?}"),
    }
    assert_eq!(read_u64(&p, w), damaged, "nothing written over the damage");
    match pool.objects() {
        Err(Error::BitmapMismatch { offset, .. }) => assert_eq!(offset, w),
        other => panic!("expected BitmapMismatch, got {other:?}"),
    }
    check(&pool, &objs);
    drop(pool);
    opened_with_the_word_quarantined(&p, w, &objs);

    // With parity, but the word and its parity bytes both damaged.
    std::fs::remove_file(&p).unwrap();
    let pool = Pool::create(&p, &cfg(true)).unwrap();
    let objs = fill(&pool, 5);
    let w = word_of(&pool, objs[0].0.raw());
    scribble_word_and_parity(&pool, w, 32);
    drop(pool);
    opened_with_the_word_quarantined(&p, w, &objs);
    println!("faults injected: 2 beyond repair (one without parity, one with its parity hit too), detected: 2, pools that still opened: 2");
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_damaged_word_in_a_zone_a_crash_left_dirty_is_quarantined_not_rebuilt() {
    // A crash image (the file of a pool still open after a commit: its lane marks the
    // zone dirty, so parity there may be stale) with a bitmap word damaged too. A rebuild
    // from stale parity could return an older word that verifies, so none is tried.
    let p = path("crashed");
    let pool = Pool::create(&p, &cfg(true)).unwrap();
    let objs = fill(&pool, 5);
    let w = word_of(&pool, objs[0].0.raw());
    pool.tx(|tx| {
        tx.open(objs[1].0)?[0] = objs[1].1[0];
        Ok(())
    })
    .unwrap();
    let mut image = std::fs::read(&p).unwrap();
    drop(pool);
    image[w as usize + 1] ^= 0x10;
    std::fs::write(&p, &image).unwrap();
    opened_with_the_word_quarantined(&p, w, &objs);
    println!("faults injected: 1 (a crash plus a bit flip in that zone's bitmap), detected: 1, quarantined: 1");
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn turning_checksums_back_on_reaches_the_objects_of_a_quarantined_run() {
    // A pool run without checksums (and parity), its bitmap word then damaged: the open
    // that turns checksums back on recomputes them for the blocks under the word too, or
    // its objects could never be read again.
    let p = path("sums");
    let mut off = cfg(false);
    off.checksums = false;
    let pool = Pool::create(&p, &off).unwrap();
    let objs = fill(&pool, 5);
    // Changed while checksums are off: the stored checksum is stale.
    pool.tx(|tx| {
        tx.open(objs[1].0)?[0] = objs[1].1[0];
        tx.open(objs[2].0)?[3] = 77;
        Ok(())
    })
    .unwrap();
    let mut objs = objs;
    objs[2].1[3] = 77;
    let w = word_of(&pool, objs[0].0.raw());
    drop(pool);
    let mut file = std::fs::read(&p).unwrap();
    file[w as usize + 2] ^= 0x04;
    std::fs::write(&p, &file).unwrap();
    let pool = Pool::open_with(&p, &cfg(false)).unwrap();
    assert_eq!(pool.stats().runs_quarantined, 1);
    check(&pool, &objs);
    let bad = pool.verify_objects(|_, _| {}).unwrap();
    assert!(
        bad.iter().all(|(o, _)| *o == w),
        "only the word is a problem: {bad:?}"
    );
    println!("faults injected: 1 (a bit flip in a bitmap word of a pool without checksums or parity), detected: 1, objects under it still readable: 5");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn without_parity_a_dead_word_is_quarantined_at_once_beside_a_long_transaction() {
    // Nothing can rebuild the word, so the commit that meets it must not first wait to
    // freeze the pool (10 s while another transaction runs) only to learn that.
    //
    // The other transaction starts first and holds one of the pool's two lanes from then
    // on, so that the objects are made, and the allocation that meets their word runs, on
    // the other lane, whose run they are in. (Started after them, it could take their
    // lane: the allocation would then come from another run, and never meet the word.)
    // The word is damaged through the file, as a stray write would: `pool.inject` freezes
    // the pool, which would wait for the other transaction.
    let p = path("busy");
    let pool = Pool::create(&p, &cfg(false)).unwrap();
    assert_eq!(pool.info().header.geo.lanes, 2);
    let (started, done) = (
        std::sync::mpsc::channel::<()>(),
        std::sync::mpsc::channel::<()>(),
    );
    let (started_tx, started_rx) = started;
    let (done_tx, done_rx) = done;
    std::thread::scope(|s| {
        let pool = &pool;
        s.spawn(move || {
            pool.tx(|_| {
                let _ = started_tx.send(());
                let _ = done_rx.recv_timeout(std::time::Duration::from_secs(30));
                Ok(())
            })
            .unwrap();
        });
        started_rx.recv().unwrap();
        // The other transaction holds its lane until told to finish.
        let objs = fill(pool, 5);
        let w = word_of(pool, objs[0].0.raw());
        let word = read_u64(&p, w);
        support::file_write(&p, w, &(word ^ (1 << 3 | 1 << 40)).to_le_bytes());
        match pool.tx(|tx| tx.alloc([9u64; 8])) {
            Err(Error::BitmapMismatch { offset, .. }) => assert_eq!(offset, w),
            other => panic!("expected BitmapMismatch, got {other:?}"),
        }
        assert_eq!(
            pool.stats().runs_quarantined,
            1,
            "quarantined while the other transaction still runs"
        );
        done_tx.send(()).unwrap();
    });
    println!("faults injected: 1 (2 bit flips in a bitmap word of a pool without parity), detected: 1, quarantined: 1");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

/// Writes 8 bytes of `byte` at `off` of the file (a stray write parity never hears of).
fn stray_write(path: &std::path::Path, off: u64, byte: u8) {
    support::file_write(path, off, &[byte; 8]);
}

#[test]
fn opens_that_recompute_or_drop_parity_still_rebuild_the_word_first() {
    // An open that recomputes checksums (the pool ran without them) recomputes parity from
    // the rows; one that drops parity stops keeping it. Either must first rebuild a damaged
    // word from the parity on media, or the damage is baked in for good.
    let p = path("modes");
    let mut injected = 0;
    for mode in ["checksums back on", "parity dropped"] {
        let _ = std::fs::remove_file(&p);
        let pool = Pool::create(&p, &cfg(true)).unwrap();
        let objs = fill(&pool, 20);
        let w = word_of(&pool, objs[0].0.raw());
        drop(pool);
        let sealed = read_u64(&p, w);
        let next = if mode == "checksums back on" {
            let mut c = cfg(true);
            c.checksums = false;
            drop(Pool::open_with(&p, &c).unwrap());
            cfg(true)
        } else {
            cfg(false)
        };
        stray_write(&p, w, 0xab);
        injected += 1;
        let pool = Pool::open_with(&p, &next).unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert_eq!(pool.stats().bitmap_repairs, 1, "{mode}");
        assert_eq!(read_u64(&p, w), sealed, "{mode}");
        check(&pool, &objs);
        drop(pool);
        let pool = Pool::open(&p, "bitmaps").unwrap();
        check(&pool, &objs);
    }
    println!("faults injected: {injected}, repaired when the pool opened: {injected}");
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn runs_of_any_geometry_fit_their_first_record() {
    // A new checked run logs every word of its bitmap in its first commit: where that
    // would not fit a lane (lanes far smaller than chunks) the run is made plain instead.
    for (chunk, lane) in [
        (16u64 << 20, 256u64 << 10),
        (1 << 20, 8 << 10),
        (512 << 10, 8 << 10),
    ] {
        let p = path("geometry");
        let mut c = Config::new("bitmaps");
        c.chunk_size = chunk;
        c.lane_size = lane;
        c.rows = 4;
        c.lanes = 2;
        c.size = c.geometry().pool_size(1);
        c.max_size = c.size;
        let pool = Pool::create(&p, &c).unwrap();
        let objs: Vec<_> = (0..40u64)
            .map(|i| {
                let o = pool
                    .tx(|tx| tx.alloc([i; 2]))
                    .unwrap_or_else(|e| panic!("chunk {chunk}, lane {lane}: {e}"));
                (o, [i; 2])
            })
            .collect();
        drop(pool);
        let pool = Pool::open(&p, "bitmaps").unwrap();
        for (o, v) in &objs {
            assert_eq!(*pool.get(*o).unwrap(), *v);
        }
        drop(pool);
        std::fs::remove_file(&p).unwrap();
    }
}

/// As above, but the new plain run's chunk held a large object before: its bitmap words
/// hold the old payload's bytes. A plain bitmap of the smallest class takes 8 KiB here,
/// as much as a whole lane, so logging those words one by one could not fit the record;
/// the commit zeroes them with one record entry. The run then hands out every block
/// once, none of the old bytes reads as an allocated block, and the pool reopens and
/// checks clean.
#[test]
fn a_plain_run_over_a_reused_chunk_fits_its_first_record() {
    let p = path("plain-reused");
    let mut c = Config::new("bitmaps");
    c.chunk_size = 2 << 20;
    c.chunks_per_row = 2;
    c.rows = 2;
    c.lanes = 2;
    c.lane_size = 8 << 10;
    c.size = c.geometry().pool_size(1);
    c.max_size = c.size;
    let pool = Pool::create(&p, &c).unwrap();
    // A large object whose first 8 KiB hold 0xff, freed: the next new run takes its chunk.
    let big = pool
        .tx(|tx| tx.alloc_zeroed::<[u8; (2 << 20) - 16]>())
        .unwrap();
    for at in (0..8192).step_by(2048) {
        pool.tx(|tx| {
            tx.open(big)?.write_bytes(at, &[0xff; 2048]);
            Ok(())
        })
        .unwrap();
    }
    pool.tx(|tx| tx.free(big)).unwrap();
    let first = pool.tx(|tx| tx.alloc([7u8; 8])).unwrap();
    assert_eq!(
        first.raw() & !((2 << 20) - 1),
        big.raw() & !((2 << 20) - 1),
        "the new run took the freed chunk"
    );
    let listed = pool.objects().unwrap();
    assert_eq!(
        listed.len(),
        1,
        "the old bytes read as allocated blocks: {listed:?}"
    );
    // More of the class: each a block of its own, in the same run.
    let mut made = vec![(first, [7u8; 8])];
    for i in 0..200u8 {
        made.push((pool.tx(|tx| tx.alloc([i; 8])).unwrap(), [i; 8]));
    }
    let distinct: std::collections::HashSet<u64> = made.iter().map(|(o, _)| o.raw()).collect();
    assert_eq!(distinct.len(), made.len(), "a block handed out twice");
    drop(pool);
    let pool = Pool::open(&p, "bitmaps").unwrap();
    for (o, v) in &made {
        assert_eq!(*pool.get(*o).unwrap(), *v);
    }
    assert_eq!(pool.objects().unwrap().len(), made.len());
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn a_word_beyond_repair_is_reported_by_a_scrub_and_its_run_taken_out_of_service() {
    let p = path("quarantine");
    let pool = Pool::create(&p, &cfg(true)).unwrap();
    let objs = fill(&pool, 20);
    let w = word_of(&pool, objs[0].0.raw());
    scribble_word_and_parity(&pool, w, 41);
    // A repairing scrub reports what it could not rebuild; it does not fail. It takes the
    // word's run out of service: the class allocates elsewhere.
    let r = pool.scrub(true, |_, _| {}).unwrap();
    assert_eq!((r.bitmap_words_bad, r.bitmap_words_fixed), (1, 0));
    assert!(!r.is_clean());
    assert_eq!(pool.stats().runs_quarantined, 1);
    let mut failed = 0;
    let mut made = Vec::new();
    for i in 0..50u64 {
        match pool.tx(|tx| tx.alloc([i; 8])) {
            Ok(o) => made.push((o, [i; 8])),
            Err(Error::BitmapMismatch { offset, .. }) => {
                assert_eq!(offset, w);
                failed += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(
        failed, 0,
        "{failed} allocations failed: the run stayed in service"
    );
    assert_eq!(pool.stats().runs_quarantined, 1);
    for (o, _) in &made {
        assert_ne!(
            word_of(&pool, o.raw()),
            w,
            "allocated under the damaged word"
        );
    }
    check(&pool, &objs);
    check(&pool, &made);
    println!("faults injected: 1 beyond repair (word and parity), detected: 1, allocations that failed on it: {failed}");
    drop(pool);
    std::fs::remove_file(&p).unwrap();
}
