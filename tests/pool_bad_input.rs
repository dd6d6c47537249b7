//! Bad input must give a typed `pgl::Error`, never a panic: missing, empty, truncated and
//! random files, damaged header copies, a wrong layout, a full pool, invalid configurations,
//! and a bounded loop of random mutations of real pool images (`PGL_MUTATIONS`, default 300).

mod support;
use pgl::{Config, Error, Header, Oid, Pool};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::Rng;

const PAGE: u64 = 4096;

type Root = [u64; 64];
type A = [u64; 4];
type B = [u64; 64];
type C = [u64; 2000];
type D = [u64; 3000];

/// A unique path in the temp dir, removed when dropped.
struct TmpPath(PathBuf);

impl TmpPath {
    fn new(name: &str) -> TmpPath {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("pgl-bad-input-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let _ = std::fs::remove_dir(&p);
        TmpPath(p)
    }
}

impl Drop for TmpPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir(&self.0);
    }
}

impl std::ops::Deref for TmpPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

fn layout_cfg(layout: &str) -> Config {
    let mut cfg = Config::small(layout);
    cfg.rows = 8;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.geometry().pool_size(4);
    cfg
}

/// A small real pool: a root holding oids of objects of four types (small, medium, the
/// largest small class, a multi-page large object), and one freed hole.
fn build_pool(path: &Path) -> Config {
    let cfg = layout_cfg("bad-input");
    let pool = Pool::create(path, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    pool.tx(|tx| {
        let mut r = tx.open(root)?;
        for i in 0..5u64 {
            r[i as usize] = tx.alloc([i, i + 1, i + 2, i + 3])?.raw();
        }
        for i in 0..3u64 {
            r[5 + i as usize] = tx.alloc([i * 7; 64])?.raw();
        }
        let hole = tx.alloc([9u64; 4])?;
        tx.free(hole)?;
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        let c = tx.alloc_zeroed::<C>()?;
        tx.open(c)?[1999] = 1999;
        let d = tx.alloc_zeroed::<D>()?;
        tx.open(d)?[2999] = 2999;
        let mut r = tx.open(root)?;
        r[8] = c.raw();
        r[9] = d.raw();
        Ok(())
    })
    .unwrap();
    // The last record touches the root and one object; its lane keeps it (retired).
    pool.tx(|tx| {
        let a = Oid::<A>::from_raw(tx.get(root)?[0]);
        tx.open(a)?[3] = 33;
        tx.open(root)?[10] = 10;
        Ok(())
    })
    .unwrap();
    cfg
}

fn read_header(path: &Path) -> Header {
    let bytes = std::fs::read(path).unwrap();
    Header::decode(&bytes[..PAGE as usize]).expect("copy A decodes")
}

fn patch(path: &Path, off: u64, f: impl FnOnce(&mut [u8])) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes[off as usize..]);
    std::fs::write(path, &bytes).unwrap();
}

fn check_root_content(pool: &Pool) {
    let root = pool.root::<Root>().unwrap();
    let r = *pool.get(root).unwrap();
    let a = Oid::<A>::from_raw(r[0]);
    assert_eq!(*pool.get(a).unwrap(), [0, 1, 2, 33]);
    let d = Oid::<D>::from_raw(r[9]);
    assert_eq!(pool.get(d).unwrap()[2999], 2999);
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
}

#[test]
fn missing_file_is_io_not_found() {
    let p = TmpPath::new("missing");
    match Pool::open(&*p, "x") {
        Err(e @ Error::Io { .. }) => {
            let Error::Io { source, .. } = &e else {
                unreachable!()
            };
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            // The message says what to do, not only what the OS said.
            assert!(
                e.to_string().ends_with(
                    "No such file or directory (os error 2); check the path, or create the \
                     pool (Pool::create, `pgl create`)"
                ),
                "{e}"
            );
        }
        other => panic!("expected Io(NotFound), got {other:?}"),
    }
}

#[test]
fn a_size_below_one_zone_says_how_to_fix_it() {
    let p = TmpPath::new("below-a-zone");
    match Pool::create(&*p, &Config::new("x").size(1 << 20)) {
        Err(Error::InvalidConfig { reason }) => {
            assert!(reason.contains("smaller than one zone"), "{reason}");
            assert!(reason.contains("raise the size"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(!p.exists());
}

#[test]
fn empty_and_tiny_files_are_not_a_pool() {
    let p = TmpPath::new("empty");
    std::fs::write(&*p, b"").unwrap();
    assert!(
        matches!(Pool::open(&*p, "x"), Err(Error::NotAPool { .. })),
        "zero-length file"
    );
    std::fs::write(&*p, b"PGLPOOL\0 and then not much").unwrap();
    assert!(
        matches!(Pool::open(&*p, "x"), Err(Error::NotAPool { .. })),
        "27-byte file"
    );
}

#[test]
fn directory_is_a_typed_error() {
    let p = TmpPath::new("dir");
    std::fs::create_dir(&*p).unwrap();
    let r = Pool::open(&*p, "x");
    assert!(
        matches!(r, Err(Error::Io { .. } | Error::NotAPool { .. })),
        "{r:?}"
    );
    assert!(matches!(
        Pool::create(&*p, &Config::small("x")),
        Err(Error::AlreadyExists { .. })
    ));
}

#[test]
fn random_bytes_are_not_a_pool() {
    let p = TmpPath::new("random");
    let mut rng = Rng(0xbad);
    let mut bytes: Vec<u8> = (0..(1u64 << 20)).map(|_| rng.next() as u8).collect();
    std::fs::write(&*p, &bytes).unwrap();
    assert!(matches!(Pool::open(&*p, "x"), Err(Error::NotAPool { .. })));
    // With the magic in front, the checksum rejects the rest.
    bytes[..8].copy_from_slice(b"PGLPOOL\0");
    std::fs::write(&*p, &bytes).unwrap();
    let r = Pool::open(&*p, "x");
    assert!(matches!(r, Err(Error::HeaderCorrupt { .. })), "{r:?}");
}

#[test]
fn truncated_pool_is_truncated() {
    let p = TmpPath::new("trunc");
    let cfg = build_pool(&p);
    let size = cfg.geometry().pool_size(1);
    let full = std::fs::read(&*p).unwrap();
    for len in [
        size - 1,
        size - PAGE,
        size / 2,
        cfg.geometry().zones_offset(),
    ] {
        std::fs::write(&*p, &full[..len as usize]).unwrap();
        match Pool::open(&*p, "bad-input") {
            Err(Error::Truncated {
                expected, actual, ..
            }) => assert_eq!((expected, actual), (size, len)),
            other => panic!("len {len}: expected Truncated, got {other:?}"),
        }
    }
    // Shorter than copy B: copy A alone still says how big the pool must be.
    std::fs::write(&*p, &full[..3 * PAGE as usize]).unwrap();
    let r = Pool::open(&*p, "bad-input");
    assert!(matches!(r, Err(Error::Truncated { .. })), "{r:?}");
    // Shorter than a header: not a pool.
    std::fs::write(&*p, &full[..100]).unwrap();
    let r = Pool::open(&*p, "bad-input");
    assert!(matches!(r, Err(Error::NotAPool { .. })), "{r:?}");
    // The full file still opens.
    std::fs::write(&*p, &full).unwrap();
    check_root_content(&Pool::open(&*p, "bad-input").unwrap());
}

#[test]
fn wrong_layout_name() {
    let p = TmpPath::new("layout");
    build_pool(&p);
    match Pool::open(&*p, "another-app") {
        Err(Error::LayoutName {
            expected, found, ..
        }) => assert_eq!(
            (expected.as_str(), found.as_str()),
            ("another-app", "bad-input")
        ),
        other => panic!("expected LayoutName, got {other:?}"),
    }
}

#[test]
fn header_copy_a_damaged_is_repaired_from_b() {
    let p = TmpPath::new("hdr-a");
    build_pool(&p);
    patch(&p, 0, |b| b[50] ^= 0x04); // inside the layout name: checksum mismatch
    {
        let pool = Pool::open(&*p, "bad-input").unwrap();
        assert_eq!(pool.stats().header_repairs, 1);
        check_root_content(&pool);
    }
    let pool = Pool::open(&*p, "bad-input").unwrap();
    assert_eq!(pool.stats().header_repairs, 0, "copy A was rewritten");
    check_root_content(&pool);
    drop(pool);
    // Wiped magic in copy A: found by searching for copy B.
    patch(&p, 0, |b| b[..PAGE as usize].fill(0));
    let pool = Pool::open(&*p, "bad-input").unwrap();
    assert_eq!(pool.stats().header_repairs, 1);
    check_root_content(&pool);
}

#[test]
fn header_copy_b_damaged_is_repaired_from_a() {
    let p = TmpPath::new("hdr-b");
    let cfg = build_pool(&p);
    let hb = cfg.geometry().header_offset(1);
    patch(&p, hb, |b| b[130] ^= 0x80); // inside `lanes`
    {
        let pool = Pool::open(&*p, "bad-input").unwrap();
        assert_eq!(pool.stats().header_repairs, 1);
        check_root_content(&pool);
    }
    let pool = Pool::open(&*p, "bad-input").unwrap();
    assert_eq!(pool.stats().header_repairs, 0, "copy B was rewritten");
    check_root_content(&pool);
    drop(pool);
    let bytes = std::fs::read(&*p).unwrap();
    assert_eq!(
        bytes[..PAGE as usize],
        bytes[hb as usize..(hb + PAGE) as usize]
    );
}

#[test]
fn both_header_copies_damaged() {
    let p = TmpPath::new("hdr-ab");
    let cfg = build_pool(&p);
    let hb = cfg.geometry().header_offset(1);
    let good = std::fs::read(&*p).unwrap();
    for (byte, bit) in [(50usize, 0x04u8), (16, 0x01), (4092, 0x80), (200, 0x10)] {
        patch(&p, 0, |b| b[byte] ^= bit);
        patch(&p, hb, |b| b[byte] ^= bit);
        let r = Pool::open(&*p, "bad-input");
        assert!(
            matches!(r, Err(Error::HeaderCorrupt { .. })),
            "flip {bit:#x} at byte {byte} of both copies: {r:?}"
        );
        std::fs::write(&*p, &good).unwrap();
    }
    // Magic gone in both copies: not a pool at all.
    patch(&p, 0, |b| b[0] ^= 1);
    patch(&p, hb, |b| b[0] ^= 1);
    let r = Pool::open(&*p, "bad-input");
    assert!(matches!(r, Err(Error::NotAPool { .. })), "{r:?}");
}

#[test]
fn other_format_version_and_impossible_geometry() {
    let p = TmpPath::new("version");
    let cfg = build_pool(&p);
    let hb = cfg.geometry().header_offset(1);
    let good = std::fs::read(&*p).unwrap();
    let mut h = read_header(&p);
    h.version = pgl::FORMAT_VERSION + 1;
    let enc = h.encode();
    patch(&p, 0, |b| b[..PAGE as usize].copy_from_slice(&enc));
    patch(&p, hb, |b| b[..PAGE as usize].copy_from_slice(&enc));
    match Pool::open(&*p, "bad-input") {
        Err(Error::Version {
            found, supported, ..
        }) => assert_eq!(
            (found, supported),
            (pgl::FORMAT_VERSION + 1, pgl::FORMAT_VERSION)
        ),
        other => panic!("expected Version, got {other:?}"),
    }
    // A well-checksummed header with an impossible geometry in both copies.
    std::fs::write(&*p, &good).unwrap();
    let mut h = read_header(&p);
    h.geo.chunk_size = 1000;
    let enc = h.encode();
    patch(&p, 0, |b| b[..PAGE as usize].copy_from_slice(&enc));
    patch(&p, hb, |b| b[..PAGE as usize].copy_from_slice(&enc));
    let r = Pool::open(&*p, "bad-input");
    assert!(matches!(r, Err(Error::HeaderCorrupt { .. })), "{r:?}");
}

/// A well-checksummed header naming no zone, in a file cut where zone 0 would start: the
/// file is as long as the header says, yet the root word and the type registry (in zone 0)
/// lie past its end, where a load raises SIGBUS. The header must be refused.
#[test]
fn a_header_naming_no_zone_is_corrupt() {
    let p = TmpPath::new("no-zone");
    let cfg = build_pool(&p);
    let g = cfg.geometry();
    let mut h = read_header(&p);
    h.zones = 0;
    let enc = h.encode();
    patch(&p, 0, |b| b[..PAGE as usize].copy_from_slice(&enc));
    patch(&p, g.header_offset(1), |b| {
        b[..PAGE as usize].copy_from_slice(&enc)
    });
    std::fs::OpenOptions::new()
        .write(true)
        .open(&*p)
        .unwrap()
        .set_len(g.zones_offset())
        .unwrap();
    let r = Pool::open(&*p, "bad-input").and_then(|pool| pool.root::<Root>().map(|_| ()));
    assert!(matches!(r, Err(Error::HeaderCorrupt { .. })), "{r:?}");
}

#[test]
fn create_refuses_an_existing_path_and_leaves_it_alone() {
    let p = TmpPath::new("exists");
    std::fs::write(&*p, b"precious").unwrap();
    let r = Pool::create(&*p, &Config::small("x"));
    assert!(matches!(r, Err(Error::AlreadyExists { .. })), "{r:?}");
    assert_eq!(std::fs::read(&*p).unwrap(), b"precious");
}

#[test]
fn invalid_configs_are_invalid_config() {
    let base = Config::small("cfg");
    let cases: Vec<(&str, Config)> = vec![
        ("empty layout", Config::small("")),
        ("64-byte layout", Config::small("x".repeat(64))),
        ("NUL in layout", Config::small("a\0b")),
        (
            "chunk 1000",
            Config {
                chunk_size: 1000,
                ..base.clone()
            },
        ),
        (
            "chunk 8 KiB",
            Config {
                chunk_size: 8 << 10,
                ..base.clone()
            },
        ),
        (
            "1 row",
            Config {
                rows: 1,
                ..base.clone()
            },
        ),
        (
            "0 chunks per row",
            Config {
                chunks_per_row: 0,
                ..base.clone()
            },
        ),
        (
            "0 lanes",
            Config {
                lanes: 0,
                ..base.clone()
            },
        ),
        (
            "65 lanes",
            Config {
                lanes: 65,
                ..base.clone()
            },
        ),
        (
            "lane 5000",
            Config {
                lane_size: 5000,
                ..base.clone()
            },
        ),
        ("size 0", base.clone().size(0)),
        ("size 1 page", base.clone().size(PAGE)),
        (
            "max < size",
            Config {
                max_size: PAGE,
                ..base.clone()
            },
        ),
        (
            "table > chunk",
            Config {
                rows: 10_000,
                ..base.clone()
            },
        ),
        (
            "table leaves no room for the type registry",
            Config {
                chunk_size: 16 << 10,
                rows: 1800,
                ..base.clone()
            },
        ),
        (
            "lanes past 4 GiB",
            Config {
                lanes: 64,
                lane_size: 64 << 20,
                ..base.clone()
            },
        ),
    ];
    for (what, cfg) in cases {
        let p = TmpPath::new("cfg");
        match Pool::create(&*p, &cfg) {
            Err(Error::InvalidConfig { reason }) => assert!(!reason.is_empty(), "{what}"),
            Err(e) => panic!("{what}: expected InvalidConfig, got {e:?}"),
            Ok(_) => panic!("{what}: created a pool"),
        }
        assert!(!p.exists(), "{what}: a file was left behind");
    }
}

#[test]
fn pool_full_is_typed_and_recoverable() {
    let p = TmpPath::new("full");
    let cfg = Config::small("full");
    let pool = Pool::create(&*p, &cfg).unwrap();
    let mut oids = Vec::new();
    let err = loop {
        match pool.tx(|tx| tx.alloc([oids.len() as u64; 500])) {
            Ok(o) => oids.push(o),
            Err(e) => break e,
        }
        assert!(oids.len() < 10_000, "a 1 MiB pool never filled up");
    };
    match err {
        Error::PoolFull {
            requested,
            free,
            ref pool_file,
        } => {
            assert_eq!(requested, 4000);
            assert_eq!(free, pool.free_bytes());
            assert_eq!(
                pool_file.as_deref(),
                Some(&*p),
                "the error names the pool file"
            );
        }
        e => panic!("expected PoolFull, got {e:?}"),
    }
    assert!(oids.len() > 10, "only {} objects fit", oids.len());
    let objects = pool.objects().unwrap().len();
    let free = pool.free_bytes();
    // A failing allocation aborts the whole transaction: the first allocation is undone.
    let r = pool.tx(|tx| {
        tx.alloc([1u64; 2])?;
        tx.alloc([2u64; 500])?;
        Ok(())
    });
    assert!(matches!(r, Err(Error::PoolFull { .. }) | Ok(())), "{r:?}");
    if r.is_err() {
        assert_eq!(pool.objects().unwrap().len(), objects);
        assert_eq!(pool.free_bytes(), free);
    }
    // Too large for any pool of this geometry.
    let r = pool.tx(|tx| tx.alloc_zeroed::<[u64; 1 << 20]>().map(|_| ()));
    assert!(matches!(r, Err(Error::ObjectTooLarge { .. })), "{r:?}");
    // Free one, and the same allocation fits again.
    let victim = oids.swap_remove(3);
    pool.tx(|tx| tx.free(victim)).unwrap();
    let again = pool.tx(|tx| tx.alloc([7u64; 500])).unwrap();
    assert_eq!(pool.get(again).unwrap()[499], 7);
    assert!(matches!(
        pool.tx(|tx| tx.alloc([8u64; 500])),
        Err(Error::PoolFull { .. })
    ));
    // Growing the pool makes room.
    pool.grow(cfg.geometry().pool_size(2)).unwrap();
    let grown = pool.tx(|tx| tx.alloc([9u64; 500])).unwrap();
    assert_eq!(pool.get(grown).unwrap()[0], 9);
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    let pool = Pool::open(&*p, "full").unwrap();
    assert_eq!(pool.get(grown).unwrap()[0], 9);
    assert_eq!(pool.objects().unwrap().len(), oids.len() + 2);
}

#[test]
fn oversized_transaction_is_typed_and_changes_nothing() {
    let p = TmpPath::new("txlarge");
    let cfg = layout_cfg("txlarge");
    let pool = Pool::create(&*p, &cfg).unwrap();
    // 12 objects of 16000 bytes: 192 KB of redo, more than a 160 KiB lane.
    let oids: Vec<Oid<C>> = (0..12)
        .map(|_| pool.tx(|tx| tx.alloc_zeroed::<C>()).unwrap())
        .collect();
    let r = pool.tx(|tx| {
        for o in &oids {
            tx.open(*o)?.fill(5); // every byte changed: all of it logged
        }
        Ok(())
    });
    assert!(matches!(r, Err(Error::TxTooLarge { .. })), "{r:?}");
    for o in &oids {
        assert_eq!(
            pool.get(*o).unwrap()[5],
            0,
            "an aborted transaction leaked a change"
        );
    }
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
}

/// Found by the mutation loop: recovery takes the largest sequence number written anywhere
/// in a lane (the unverified seal seq and the retired word) and `Pool::open` adds one to it;
/// all-ones bytes there must be a typed error (or a clean open), not an overflow panic.
#[test]
fn lane_sequence_words_all_ones_do_not_panic() {
    let p = TmpPath::new("seq-max");
    let cfg = build_pool(&p);
    let g = cfg.geometry();
    let good = std::fs::read(&*p).unwrap();
    // (what, offset inside lane 0 copy A): the seal's seq field, then the retired word.
    for (what, at) in [("seal seq", 72u64), ("retired word", 0)] {
        std::fs::write(&*p, &good).unwrap();
        patch(&p, g.lane_offset(0, 0) + at, |b| b[..8].fill(0xff));
        let r = catch_unwind(|| Pool::open(&*p, "bad-input").map(|_| ()));
        match r {
            Ok(Ok(())) | Ok(Err(Error::Corrupt { .. })) => {}
            Ok(Err(e)) => panic!("{what} = u64::MAX: unexpected error {e:?}"),
            Err(_) => panic!("{what} = u64::MAX: Pool::open panicked"),
        }
    }
}

/// A sealed redo record of 349,000 new-object entries (a forged one, filling an 8 MiB
/// lane): recovery checked each new object against every entry of the record, 10^11
/// steps before the pool opened. It must open (replaying the record: every object it
/// names is on media as it says) in time linear in the record.
#[test]
fn a_record_of_many_new_objects_replays_in_linear_time() {
    let p = TmpPath::new("many-new");
    let mut cfg = Config::small("bad-input");
    cfg.lane_size = 8 << 20;
    cfg.lanes = 1;
    cfg.rows = 256;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.size;
    drop(Pool::create(&*p, &cfg).unwrap());
    let g = cfg.geometry();
    let mut lane = vec![0u8; g.lane_size as usize];
    // Empty objects 16 bytes apart, past zone 0's metadata chunk: each is its header, all
    // zeros on media, and the record gives that header's crc.
    let mut new = [0u8; 8];
    new[4..].copy_from_slice(&pgl::checksum::strong(&[0u8; 16]).to_le_bytes());
    let n = (lane.len() - 128) / 24;
    let first = g.chunk_offset(0, 1);
    let entries: Vec<(u64, u32, &[u8])> = (0..n as u64)
        .map(|i| (first + 16 * i, 3, &new[..]))
        .collect();
    assert!(n as u64 * 16 < g.zone_size() / 2);
    assert!(support::forge_record(&mut lane, 1 << 40, &entries));
    patch(&p, g.lane_offset(0, 0), |b| {
        b[..lane.len()].copy_from_slice(&lane)
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let path = p.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(Pool::open(&path, "bad-input").map(|pool| pool.stats().records_replayed));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(r) => assert_eq!(r.unwrap(), 1),
        Err(_) => panic!("recovery of a record of {n} new objects took over a minute"),
    }
}

/// A sealed redo record (a forged one) whose zero entry covers 255 MiB of a sparse pool:
/// replay stored that many zero bytes, which a file system must allocate (a record naming
/// a terabyte pool's whole heap would fill the disk, or memory on tmpfs, before the pool
/// opened). A commit zeroes with one entry a new run's bitmap, which lies in one chunk:
/// an entry crossing a chunk is refused.
#[test]
fn a_record_zeroing_more_than_a_chunk_is_corrupt() {
    use std::os::unix::fs::MetadataExt;
    // On tmpfs where there is one: every page stored there takes memory.
    let p = TmpPath(
        support::test_dir().join(format!("pgl-bad-input-{}-zero-entry", std::process::id())),
    );
    let mut cfg = Config::small("bad-input");
    cfg.chunk_size = 64 << 20;
    cfg.rows = 8;
    cfg.size = cfg.geometry().pool_size(1);
    cfg.max_size = cfg.size;
    cfg.preallocate = false;
    drop(Pool::create(&*p, &cfg).unwrap());
    let g = cfg.geometry();
    let mut lane = vec![0u8; g.lane_size as usize];
    let len: u64 = (4 << 26) - 4096;
    assert!(support::forge_record(
        &mut lane,
        1 << 40,
        &[(g.chunk_offset(0, 1) + 4096, 4, &len.to_le_bytes())]
    ));
    {
        // Written in place: the rest of the file stays sparse.
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&*p).unwrap();
        f.seek(SeekFrom::Start(g.lane_offset(0, 0))).unwrap();
        f.write_all(&lane).unwrap();
    }
    let before = std::fs::metadata(&*p).unwrap().blocks();
    let r = Pool::open(&*p, "bad-input").map(|pool| pool.stats().records_replayed);
    let grew = (std::fs::metadata(&*p).unwrap().blocks() - before) * 512;
    match r {
        Err(Error::Corrupt { what, detail, .. }) => {
            assert_eq!(what, "redo record");
            assert!(detail.contains("chunk"), "{detail}");
        }
        other => {
            panic!("expected the record to be refused, got {other:?} ({grew} bytes allocated)")
        }
    }
    assert!(grew < 1 << 20, "opening allocated {grew} bytes of the file");
}

/// The bound of `a_record_zeroing_more_than_a_chunk_is_corrupt`, from both sides: a
/// sealed record whose zero entry ends exactly at the end of its chunk replays (the
/// chunk's old bytes, a freed object's, become zeros), and one word more is refused.
#[test]
fn a_zero_entry_up_to_its_chunks_end_replays_and_one_word_more_is_corrupt() {
    let cfg = Config::small("zero-bound");
    let g = cfg.geometry();
    for past in [0u64, 8] {
        let p = TmpPath(support::test_dir().join(format!(
            "pgl-bad-input-{}-zero-bound-{past}",
            std::process::id()
        )));
        let pool = Pool::create(&*p, &cfg).unwrap();
        let o = pool.tx(|tx| tx.alloc([0xabu8; 60_000])).unwrap();
        pool.tx(|tx| tx.free(o)).unwrap();
        drop(pool);
        let chunk = g.chunk_offset(0, (o.raw() - g.zones_offset()) / g.chunk_size);
        let (from, len) = (chunk + 4096, g.chunk_size - 4096 + past);
        assert_eq!(support::file_word(&p, from), u64::from_le_bytes([0xab; 8]));
        let mut lane = vec![0u8; g.lane_size as usize];
        assert!(support::forge_record(
            &mut lane,
            1 << 40,
            &[(from, 4, &len.to_le_bytes())]
        ));
        {
            use std::io::{Seek, SeekFrom, Write};
            let mut f = std::fs::OpenOptions::new().write(true).open(&*p).unwrap();
            f.seek(SeekFrom::Start(g.lane_offset(0, 0))).unwrap();
            f.write_all(&lane).unwrap();
        }
        let r = Pool::open(&*p, "zero-bound").map(|pool| pool.stats().records_replayed);
        if past == 0 {
            assert_eq!(r.unwrap(), 1, "the record up to the chunk's end replays");
            for at in [from, chunk + g.chunk_size - 8] {
                assert_eq!(support::file_word(&p, at), 0, "zeroed at {at:#x}");
            }
            let pool = Pool::open(&*p, "zero-bound").unwrap();
            // (Not parity: the file was closed cleanly, so the open does not reconcile it
            // after the replay, as it does after a crash, which this record is not.)
            assert_eq!(pool.verify_objects(|_, _| {}).unwrap().len(), 0);
        } else {
            match r {
                Err(Error::Corrupt { what, .. }) => assert_eq!(what, "redo record"),
                other => panic!("a zero entry one word past its chunk: {other:?}"),
            }
        }
    }
}

// ---- the mutation loop ----

/// Where to aim a mutation.
#[derive(Clone, Copy, Debug)]
enum Region {
    Anywhere,
    HeaderA,
    HeaderB,
    Lanes,
    LaneSeals,
    ZoneMeta,
    RunBitmaps,
    ObjectHeaders,
    Payloads,
    Parity,
}

const REGIONS: [Region; 10] = [
    Region::Anywhere,
    Region::HeaderA,
    Region::HeaderB,
    Region::Lanes,
    Region::LaneSeals,
    Region::ZoneMeta,
    Region::RunBitmaps,
    Region::ObjectHeaders,
    Region::Payloads,
    Region::Parity,
];

/// The base image and the places in it worth hitting.
struct Image {
    bytes: Vec<u8>,
    cfg: Config,
    objects: Vec<(u64, u64)>, // (payload offset, size)
}

impl Image {
    /// A random byte range `[start, end)` in `region`, at most `max` long.
    fn pick(&self, rng: &mut Rng, region: Region, max: u64) -> (u64, u64) {
        let g = self.cfg.geometry();
        let len = self.bytes.len() as u64;
        let (lo, hi) = match region {
            Region::Anywhere => (0, len),
            Region::HeaderA => (0, PAGE),
            Region::HeaderB => (g.header_offset(1), g.header_offset(1) + PAGE),
            Region::Lanes => (PAGE, g.header_offset(1)),
            Region::LaneSeals => {
                let lane = rng.below(g.lanes);
                let copy = rng.below(2);
                let o = g.lane_offset(lane, copy);
                // retired word, seal, first entries
                (o, o + 256)
            }
            Region::ZoneMeta => {
                let z = g.zone_offset(0);
                (z, z + 1024 + 8 * g.rows * g.chunks_per_row)
            }
            Region::RunBitmaps => {
                let c = rng.range(1, g.chunks_per_zone());
                let o = g.chunk_offset(0, c);
                (o, o + 128)
            }
            Region::ObjectHeaders => {
                let (off, _) = self.objects[rng.below(self.objects.len() as u64) as usize];
                (off - 16, off)
            }
            Region::Payloads => {
                let (off, size) = self.objects[rng.below(self.objects.len() as u64) as usize];
                (off, off + size)
            }
            Region::Parity => (g.parity_offset(0), g.parity_offset(0) + g.row_size()),
        };
        let start = rng.range(lo, hi);
        let end = (start + rng.range(1, max + 1)).min(hi);
        (start, end)
    }
}

/// Applies one random mutation to `b`; returns what it did.
fn mutate(img: &Image, rng: &mut Rng, b: &mut Vec<u8>) -> String {
    let region = REGIONS[rng.below(REGIONS.len() as u64) as usize];
    let g = img.cfg.geometry();
    match rng.below(18) {
        0..=4 => {
            let n = rng.range(1, 9);
            let mut at = Vec::new();
            for _ in 0..n {
                let (s, _) = img.pick(rng, region, 1);
                let bit = rng.below(8) as u8;
                if let Some(x) = b.get_mut(s as usize) {
                    *x ^= 1 << bit;
                }
                at.push(format!("{s:#x}.{bit}"));
            }
            format!("flip bits in {region:?} at {}", at.join(","))
        }
        5..=7 => {
            let (s, e) = img.pick(rng, region, 256);
            let e = e.min(b.len() as u64);
            for x in b[s.min(e) as usize..e as usize].iter_mut() {
                *x = rng.next() as u8;
            }
            format!("random bytes in {region:?} [{s:#x}, {e:#x})")
        }
        8..=9 => {
            let (s, e) = img.pick(rng, region, 64);
            let e = e.min(b.len() as u64);
            let v = if rng.below(2) == 0 { 0 } else { 0xff };
            b[s.min(e) as usize..e as usize].fill(v);
            format!("fill {v:#x} in {region:?} [{s:#x}, {e:#x})")
        }
        10 => {
            let (s, _) = img.pick(rng, region, 8);
            let s = s & !7;
            let v = match rng.below(4) {
                0 => u64::MAX,
                1 => 0,
                2 => rng.below(1 << 24),
                _ => rng.next(),
            };
            if s + 8 <= b.len() as u64 {
                b[s as usize..s as usize + 8].copy_from_slice(&v.to_le_bytes());
            }
            format!("word {v:#x} at {s:#x} ({region:?})")
        }
        11 => {
            let len = b.len() as u64;
            let new = match rng.below(4) {
                0 => rng.below(len),
                1 => rng.below(len / PAGE) * PAGE,
                2 => len.saturating_sub(rng.range(1, 64)),
                _ => (g.zones_offset() + rng.below(len.saturating_sub(g.zones_offset()))).min(len),
            };
            b.truncate(new as usize);
            format!("truncate to {new:#x}")
        }
        12 => {
            let n = rng.range(1, 3 * PAGE);
            let fill = rng.below(2) == 0;
            for _ in 0..n {
                b.push(if fill { 0 } else { rng.next() as u8 });
            }
            format!("append {n} {} bytes", if fill { "zero" } else { "random" })
        }
        13 => {
            // Un-retire every lane: recovery replays the last record of each.
            for lane in 0..g.lanes {
                for copy in 0..2 {
                    let o = g.lane_offset(lane, copy) as usize;
                    if o + 8 <= b.len() {
                        b[o..o + 8].fill(0);
                    }
                }
            }
            "zero every lane's retired word".into()
        }
        16..=17 => {
            // A well-formed chunk-table entry that disagrees with the chunk's contents, or a
            // full run bitmap word.
            let per = g.chunks_per_zone();
            let c = rng.range(1, per);
            let table = g.chunk_offset(0, 0) + 1024 + 8 * c;
            // A pool this build made.
            let classes = pgl::SizeClasses::new(g.chunk_size, pgl::ClassTable::StepsAndPowers);
            let (at, v, what) = match rng.below(5) {
                0 => {
                    let class = rng.below(classes.len() as u64) as u16;
                    let v = 1 | (class as u64) << 8 | classes.block(class) << 32;
                    (table, v, format!("run of class {class}"))
                }
                1 => {
                    let n = rng.range(1, per - c + 2);
                    (table, 2 | n << 32, format!("large head of {n} chunks"))
                }
                2 => (table, 3, "continuation".into()),
                3 => (table, 0, "free".into()),
                _ => {
                    let w = g.chunk_offset(0, c) + 8 * rng.below(4);
                    (w, u64::MAX, "full bitmap word".into())
                }
            };
            if at + 8 <= b.len() as u64 {
                b[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
            }
            format!("forge {what} ({v:#x}) at {at:#x} for chunk {c}")
        }
        _ => {
            // A well-checksummed header with one field changed, in one or both copies.
            let Ok(mut h) = Header::decode(&img.bytes[..PAGE as usize]) else {
                return "forge header: copy A did not decode".into();
            };
            let field = rng.below(8);
            let v = match rng.below(3) {
                0 => rng.below(4) + 1,
                1 => 1 << rng.range(10, 24),
                _ => rng.next() >> rng.below(64),
            };
            match field {
                0 => h.zones = v,
                1 => h.geo.rows = v,
                2 => h.geo.chunk_size = v,
                3 => h.geo.lanes = v,
                4 => h.geo.lane_size = v,
                5 => h.geo.chunks_per_row = v,
                6 => h.generation = v,
                _ => h.layout = "forged".into(),
            }
            let enc = h.encode();
            let both = rng.below(2) == 0;
            let mut at = vec![0];
            if both {
                at.push(g.header_offset(1));
            }
            for &o in &at {
                let o = o as usize;
                if o + PAGE as usize <= b.len() {
                    b[o..o + PAGE as usize].copy_from_slice(&enc);
                }
            }
            format!("forge header field {field} = {v:#x} in copies at {at:x?}")
        }
    }
}

/// What happened to one mutated image.
fn outcome_name(e: &Error) -> String {
    let d = format!("{e:?}");
    d.split([' ', '{', '(']).next().unwrap_or("?").to_owned()
}

/// Counts an error by variant name; returns the value of an `Ok`.
fn tally<T>(errors: &mut BTreeMap<String, u64>, r: Result<T, Error>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            *errors.entry(outcome_name(&e)).or_default() += 1;
            None
        }
    }
}

/// Exercises a pool that opened from a mutated image; every call must return Ok or a typed
/// Err. Counts the errors seen, by variant.
fn exercise(pool: &Pool, errors: &mut BTreeMap<String, u64>) {
    let root = tally(errors, pool.root::<Root>());
    let objects = tally(errors, pool.objects()).unwrap_or_default();
    for &(off, h) in &objects {
        tally(errors, pool.read_object(off));
        tally(errors, pool.get(Oid::<A>::from_raw(off)).map(|_| ()));
        tally(errors, pool.get(Oid::<B>::from_raw(off)).map(|_| ()));
        tally(errors, pool.get(Oid::<C>::from_raw(off)).map(|_| ()));
        tally(errors, pool.get(Oid::<D>::from_raw(off)).map(|_| ()));
        // Open it for update with the type its size says, change one word, commit.
        let r = match h.size {
            32 => pool.tx(|tx| {
                tx.open(Oid::<A>::from_raw(off))?[1] ^= 1;
                Ok(())
            }),
            512 => pool.tx(|tx| {
                tx.open(Oid::<B>::from_raw(off))?[1] ^= 1;
                Ok(())
            }),
            16000 => pool.tx(|tx| {
                tx.open(Oid::<C>::from_raw(off))?[1] ^= 1;
                Ok(())
            }),
            _ => pool.tx(|tx| {
                tx.open(Oid::<D>::from_raw(off))?[1] ^= 1;
                Ok(())
            }),
        };
        tally(errors, r);
    }
    if let Some(bad) = tally(errors, pool.verify_objects(|_, _| {})) {
        for (_, e) in bad {
            tally::<()>(errors, Err(e));
        }
    }
    // Oids read from the root, whatever they hold.
    let Some(root) = root else { return };
    let Some(words) = tally(errors, pool.get(root).map(|r| *r)) else {
        return;
    };
    for w in words.iter().take(12) {
        tally(errors, pool.get(Oid::<A>::from_raw(*w)).map(|_| ()));
        tally(errors, pool.get(Oid::<D>::from_raw(*w)).map(|_| ()));
    }
    // A small transaction: allocate, link from the root, free an old object.
    let r = pool.tx(|tx| {
        let n = tx.alloc([1u64, 2, 3, 4])?;
        let mut r = tx.open(root)?;
        r[63] = n.raw();
        let old = Oid::<A>::from_raw(r[1]);
        drop(r);
        tx.free(old)?;
        Ok(())
    });
    tally(errors, r);
    tally(errors, pool.tx(|tx| tx.alloc_zeroed::<D>().map(|_| ())));
    let _ = (pool.free_bytes(), pool.stats(), pool.info());
}

thread_local! {
    static IN_MUTATION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[test]
fn mutated_pool_images_never_panic() {
    let n: u64 = std::env::var("PGL_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let seed: u64 = std::env::var("PGL_MUTATION_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_0001);
    let base = TmpPath::new("mut-base");
    let cfg = build_pool(&base);
    let img = {
        let pool = Pool::open(&*base, "bad-input").unwrap();
        let objects = pool
            .objects()
            .unwrap()
            .into_iter()
            .map(|(o, h)| (o, h.size))
            .collect();
        drop(pool);
        Image {
            bytes: std::fs::read(&*base).unwrap(),
            cfg,
            objects,
        }
    };

    // Panics inside the loop are recorded, not printed by the default hook.
    let panics: Arc<Mutex<Vec<String>>> = Arc::default();
    let hook_panics = panics.clone();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if IN_MUTATION.with(|f| f.get()) {
            hook_panics.lock().unwrap().push(info.to_string());
        } else {
            default_hook(info);
        }
    }));
    // A hang is a bug too: report the iteration and abort rather than block CI.
    let heartbeat = Arc::new(AtomicU64::new(0));
    let current = Arc::new(Mutex::new(String::new()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (hb, cur, done) = (heartbeat.clone(), current.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = (0, Instant::now());
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let h = hb.load(Ordering::Relaxed);
                if h != last.0 {
                    last = (h, Instant::now());
                } else if last.1.elapsed() > Duration::from_secs(60) {
                    eprintln!("mutation iteration hangs: {}", cur.lock().unwrap());
                    std::process::abort();
                }
            }
        })
    };

    // `open_with` a small `max_size` and cache-line flushes: reserving the default 1 TiB of
    // address space costs tens of milliseconds per open and unmap, and `msync` (the default
    // on an ordinary disk file) waits for the disk; either would dominate the loop.
    let open_cfg = layout_cfg("bad-input").flush(pgl::FlushMode::detect());
    let t0 = Instant::now();
    let path = TmpPath::new("mut");
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut op_errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut slowest: Vec<(Duration, String)> = Vec::new();
    for i in 0..n {
        heartbeat.store(i + 1, Ordering::Relaxed);
        let mut rng = Rng(seed ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let mut bytes = img.bytes.clone();
        let k = rng.range(1, 4);
        let what: Vec<String> = (0..k).map(|_| mutate(&img, &mut rng, &mut bytes)).collect();
        let what = format!("iteration {i} (seed {seed:#x}): {}", what.join("; "));
        *current.lock().unwrap() = what.clone();
        std::fs::write(&*path, &bytes).unwrap();
        let before = panics.lock().unwrap().len();
        let started = Instant::now();
        IN_MUTATION.with(|f| f.set(true));
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut errs = BTreeMap::new();
            let first = match Pool::open_with(&*path, &open_cfg) {
                Ok(pool) => {
                    exercise(&pool, &mut errs);
                    "opened".to_owned()
                }
                Err(e) => format!("Err({})", outcome_name(&e)),
            };
            // Whatever the first open did (repairs, recovery, transactions), a second open
            // must again give Ok or a typed error.
            let second = match Pool::open_with(&*path, &open_cfg) {
                Ok(pool) => {
                    exercise(&pool, &mut errs);
                    "reopened".to_owned()
                }
                Err(e) => format!("then Err({})", outcome_name(&e)),
            };
            (first, second, errs)
        }));
        IN_MUTATION.with(|f| f.set(false));
        slowest.push((started.elapsed(), what.clone()));
        slowest.sort_by_key(|s| std::cmp::Reverse(s.0));
        slowest.truncate(3);
        match r {
            Ok((first, second, errs)) => {
                // What opened once opens again: an open (its repairs and recovery) and the
                // work after it never leave a pool that no later open accepts.
                if first == "opened" && second != "reopened" {
                    failures.push(format!("{what}\n    -> opened, {second}"));
                }
                let key = if first == "opened" {
                    format!("{first}, {second}")
                } else {
                    first
                };
                *outcomes.entry(key).or_default() += 1;
                for (k, v) in errs {
                    *op_errors.entry(k).or_default() += v;
                }
            }
            Err(_) => {
                let msgs = panics.lock().unwrap()[before..].join(" | ");
                *outcomes.entry("PANIC".into()).or_default() += 1;
                failures.push(format!("{what}\n    -> {msgs}"));
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    watchdog.join().unwrap();
    let _ = std::panic::take_hook();

    println!(
        "{n} mutated images in {:.1?} (seed {seed:#x}):",
        t0.elapsed()
    );
    for (k, v) in &outcomes {
        println!("  {v:5}  {k}");
    }
    for (t, what) in &slowest {
        println!("  slow: {t:.1?} for {what}");
    }
    println!("errors returned by operations on pools that opened:");
    for (k, v) in &op_errors {
        println!("  {v:5}  {k}");
    }
    assert!(
        failures.is_empty(),
        "{} of {n} mutated images panicked, or opened once and then not again:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        outcomes.keys().any(|k| k.starts_with("opened")),
        "no mutated image opened: the loop never exercised a damaged but open pool"
    );
    assert!(
        outcomes.keys().any(|k| k.starts_with("Err")),
        "no mutated image was rejected: the mutations are too weak"
    );
}

/// `CrashSim` sizes that do not fit the address space: rounding the capacity up to a page
/// overflowed, which in a release build wrapped to a 4096-byte device whose length still
/// said `len` bytes, and `Pool::open_sim` then read past the allocation (it scans the pages
/// below 4 GiB for header copy B): out-of-bounds reads from safe code. (A debug build
/// panicked with "attempt to multiply with overflow".) The constructor now refuses such a
/// size with a panic that says what and why, as `Vec::with_capacity` does; it never wraps.
#[test]
fn crash_sim_sizes_beyond_the_address_space_are_refused_never_wrapped() {
    for (len, capacity) in [(u64::MAX, 0), (0, u64::MAX), (u64::MAX - 4000, 4096)] {
        let r = catch_unwind(|| pgl::CrashSim::from_image(&[], len, capacity));
        let Err(p) = r else {
            panic!("a CrashSim of len {len}, capacity {capacity} was made");
        };
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        assert!(
            msg.contains("CrashSim") && msg.contains("address space"),
            "len {len}, capacity {capacity}: {msg}"
        );
    }
    let r = catch_unwind(|| pgl::CrashSim::new(u64::MAX));
    assert!(r.is_err());
}
