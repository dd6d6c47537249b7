//! `Pool::open_read_only`: recovery and repair run in the process's private copy, the file
//! keeps every byte; everything that would change the pool is `Error::ReadOnly`; read-only
//! opens share a file with each other, not with a writer.

mod support;

use pgl::prelude::*;
use pgl::{Error, Fault};
use support::crashed::{crashed_mid_transaction, scribble, Item, Root, TempFile, COLD_LABEL};

const LAYOUT: &str = "pool-read-only";

/// A pool file a crash interrupted right after a transaction set `hot`'s value to 3 (its
/// record sealed, its retire mark not durable: the next open replays it), with header copy
/// A and the payload of `cold` (which the transaction did not touch) damaged; the oids of
/// `cold` and `hot`.
fn crashed_and_damaged(file: &TempFile) -> (Oid<Item>, Oid<Item>) {
    let (mut bytes, cold, hot) = crashed_mid_transaction(LAYOUT);
    scribble(&mut bytes, 40, b"garbage!");
    scribble(&mut bytes, cold.raw() + 8, b"\xde\xad\xbe\xef");
    std::fs::write(&file.0, &bytes).unwrap();
    (cold, hot)
}

/// Opening read-only replays the crash's record and repairs the header copy and the
/// damaged object in memory: the caller reads the recovered, repaired pool, the stats say
/// what was done, and the file's bytes are the same after the pool is dropped.
#[test]
fn a_read_only_open_recovers_and_repairs_in_memory_and_leaves_the_file_as_it_was() {
    let file = TempFile::new("ro", "crashed");
    let (cold, hot) = crashed_and_damaged(&file);
    let before = std::fs::read(&file.0).unwrap();
    let pool = Pool::open_read_only(&file.0).unwrap();
    assert!(pool.is_read_only() && pool.info().read_only);
    let s = pool.stats();
    assert_eq!(
        (s.records_replayed, s.header_repairs, s.objects_repaired),
        (1, 1, 1),
        "{s:?}"
    );
    assert_eq!(pool.get(hot).unwrap().value, 3, "the record was replayed");
    let c = pool.get(cold).unwrap();
    assert_eq!((c.value, c.label), (1, COLD_LABEL), "parity rebuilt it");
    drop(c);
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    assert!(pool.verify_parity().unwrap().is_empty());
    drop(pool);
    assert!(
        std::fs::read(&file.0).unwrap() == before,
        "the file changed"
    );
    // The next writable open finds the same to do.
    let pool = Pool::open(&file.0, LAYOUT).unwrap();
    assert_eq!(pool.stats().records_replayed, 1);
}

/// Everything that would change a read-only pool fails with `Error::ReadOnly` and changes
/// nothing; transactions that only read work.
#[test]
fn changes_to_a_read_only_pool_are_refused_with_read_only() {
    let file = TempFile::new("ro", "refused");
    let pool = Pool::create(&file.0, &Config::small(LAYOUT)).unwrap();
    let item = pool
        .tx(|tx| {
            tx.alloc(Item {
                value: 5,
                label: [0; 24],
            })
        })
        .unwrap();
    drop(pool);
    let before = std::fs::read(&file.0).unwrap();
    let pool = Pool::open_read_only(&file.0).unwrap();
    let read_only = |r: Result<()>, what: &str| match r {
        Err(Error::ReadOnly { ref path, .. }) if *path == file.0 => {
            let msg = r.unwrap_err().to_string();
            assert!(
                msg.contains("read-only") && msg.contains("Pool::open"),
                "{msg}"
            );
        }
        other => panic!("{what}: expected Error::ReadOnly, got {other:?}"),
    };
    read_only(
        pool.tx(|tx| {
            tx.open(item)?.value = 6;
            Ok(())
        }),
        "a change",
    );
    read_only(
        pool.tx(|tx| {
            tx.alloc(Item {
                value: 1,
                label: [0; 24],
            })
            .map(drop)
        }),
        "an allocation",
    );
    read_only(pool.tx(|tx| tx.free(item)), "a free");
    // A borrow of the whole value that changes no byte is a read.
    pool.tx(|tx| {
        let mut h = tx.open(item)?;
        h.value += 1;
        h.value -= 1;
        Ok(())
    })
    .unwrap();
    read_only(pool.root::<Root>().map(drop), "creating the root");
    read_only(pool.grow(pool.size() * 2), "grow");
    read_only(
        pool.inject(&Fault::ObjectScribble {
            oid: item.raw(),
            at: 16,
            len: 4,
            seed: 1,
        }),
        "inject",
    );
    read_only(pool.scrub(true, |_, _| {}).map(drop), "scrub with repair");
    // Reading works, in and out of transactions; the refused ones changed nothing.
    assert_eq!(pool.tx(|tx| Ok(tx.get(item)?.value)).unwrap(), 5);
    assert_eq!(pool.get(item).unwrap().value, 5);
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    assert_eq!(pool.objects().unwrap().len(), 1);
    drop(pool);
    assert!(
        std::fs::read(&file.0).unwrap() == before,
        "the file changed"
    );
}

/// A transaction in a read-only pool that met an object it could not verify (no parity to
/// rebuild it from), handled the error and changed nothing commits as the read it is, not
/// as a change refused with `Error::ReadOnly`.
#[test]
fn a_failed_open_in_a_read_only_pool_is_no_change() {
    let file = TempFile::new("ro", "failed-open");
    let pool = Pool::create(&file.0, &Config::small(LAYOUT).parity(false)).unwrap();
    let [damaged, fine] = [5, 6].map(|value| {
        pool.tx(|tx| {
            tx.alloc(Item {
                value,
                label: [0; 24],
            })
        })
        .unwrap()
    });
    // Faults: 1 scribble, beyond repair (no parity), reported at each open.
    pool.inject(&Fault::ObjectScribble {
        oid: damaged.raw(),
        at: 16,
        len: 4,
        seed: 1,
    })
    .unwrap();
    drop(pool);
    let pool = Pool::open_read_only(&file.0).unwrap();
    let r = pool.tx(|tx| {
        let failed = tx.open(damaged).map(|m| m.value);
        assert!(
            matches!(failed, Err(Error::ChecksumMismatch { .. })),
            "{failed:?}"
        );
        Ok(tx.get(fine)?.value)
    });
    assert_eq!(r.unwrap(), 6, "committed as a read");
}

/// Read-only opens share a file; a writer and a reader exclude each other (a reader beside
/// a writer would see its commits half made).
#[test]
fn read_only_opens_share_a_file_but_not_with_a_writer() {
    let file = TempFile::new("ro", "shared");
    let writer = Pool::create(&file.0, &Config::small(LAYOUT)).unwrap();
    match Pool::open_read_only(&file.0) {
        Err(Error::AlreadyOpen { instead, .. }) => {
            assert!(instead.contains("wait for the program"), "{instead}")
        }
        other => panic!("expected AlreadyOpen, got {:?}", other.map(drop)),
    }
    drop(writer);
    let a = Pool::open_read_only(&file.0).unwrap();
    let b = Pool::open_read_only(&file.0).unwrap();
    assert!(matches!(
        Pool::open(&file.0, LAYOUT),
        Err(Error::AlreadyOpen { .. })
    ));
    drop((a, b));
    drop(Pool::open(&file.0, LAYOUT).unwrap());
}

/// A verifying read (`tx.open`, left unchanged) that finds an object damaged rebuilds it
/// from parity, as on any pool, in the private copy: the reader gets the object as stored,
/// the transaction commits (it changed nothing), the file keeps the damage.
#[test]
fn a_read_repairs_a_damaged_object_in_memory_only() {
    let file = TempFile::new("ro", "read-repair");
    let pool = Pool::create(&file.0, &Config::small(LAYOUT)).unwrap();
    let item = pool
        .tx(|tx| {
            tx.alloc(Item {
                value: 11,
                label: [b'r'; 24],
            })
        })
        .unwrap();
    drop(pool);
    let mut bytes = std::fs::read(&file.0).unwrap();
    let at = item.raw() as usize + 2;
    bytes[at..at + 3].copy_from_slice(b"\x01\x02\x03");
    std::fs::write(&file.0, &bytes).unwrap();

    let pool = Pool::open_read_only(&file.0).unwrap();
    let (value, label) = pool
        .tx(|tx| {
            let it = tx.open(item)?;
            Ok((it.value, it.label))
        })
        .unwrap();
    assert_eq!((value, label), (11, [b'r'; 24]));
    assert_eq!(pool.stats().objects_repaired, 1);
    // `pool.get` checks only the header under the default policy; it now reads the
    // rebuilt bytes.
    assert_eq!(pool.get(item).unwrap().value, 11);
    drop(pool);
    assert!(std::fs::read(&file.0).unwrap() == bytes, "the file changed");
}
