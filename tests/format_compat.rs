//! Pools written by older builds open in this one, keep every object, and take new work.
//!
//! `tests/fixtures/pool-v<N>.bin` are pools that a commit writing format version N (`make.sh`
//! says which, and rebuilds them) made with `tests/fixtures/make_fixture.rs`: 48 objects in
//! three size classes and one large object, three frees and an overwrite behind them; from
//! format 7 on, two more objects whose size classes are numbered otherwise in the pools
//! this build makes (`pgl::ClassTable`): their runs must be read with the table they were
//! cut to (a format-8 pool's table is this build's). `tests/format_compat_leds.rs` reads
//! the `#[extendible]` objects of a format-8 pool.
//! `.crashed` is the same pool's file taken while it was still open (as a crash leaves
//! it). Each is opened here, checked object by object, upgraded (the version this build
//! writes, parity, metadata copies, bitmaps), given new work, reopened and checked again.

mod support;

use pgl::{Oid, Pool};
use std::path::PathBuf;

include!("fixtures/shape.rs");

/// Writes the fixture `name` out as a pool file; its path.
fn unpack(name: &str) -> PathBuf {
    unpack_as(name, "")
}

/// `unpack`, to a path of its own (`tag`): tests run in parallel threads of one process.
fn unpack_as(name: &str, tag: &str) -> PathBuf {
    support::fixture::unpack(name, tag)
}

/// The wide and page objects of a fixture that has them.
type Extra = (Oid<Wide>, Oid<Page>);

/// Checks every object the fixture's root lists; `third` is what object 3 holds (the
/// crashed image has the overwrite the clean one undid). The small objects' oids, and the
/// wide and page objects' if the fixture has them (formats 7 on).
fn check(pool: &Pool, third: Small, name: &str) -> (Vec<Oid<Small>>, Option<Extra>) {
    let root = pool.root::<Root>().unwrap();
    let r = *pool.get(root).unwrap();
    let mut smalls = Vec::new();
    for (i, &raw) in r[..40].iter().enumerate() {
        if FREED.contains(&i) {
            assert_eq!(raw, 0, "{name}: freed object {i} still listed");
            continue;
        }
        let o = Oid::<Small>::from_raw(raw);
        let want = match i {
            2 => small(2, 1),
            3 => third,
            _ => small(i as u64, 0),
        };
        assert_eq!(*pool.get(o).unwrap(), want, "{name}: small object {i}");
        smalls.push(o);
    }
    for (i, &raw) in r[40..50].iter().enumerate() {
        let o = Oid::<Medium>::from_raw(raw);
        assert_eq!(
            *pool.get(o).unwrap(),
            medium(i as u64),
            "{name}: medium object {i}"
        );
    }
    let big = pool.get(Oid::<Large>::from_raw(r[50])).unwrap();
    assert!(
        big.iter().enumerate().all(|(i, &b)| b == large_byte(i)),
        "{name}: the large object"
    );
    let extra = (r[51] != 0).then(|| {
        let (w, p) = (Oid::<Wide>::from_raw(r[51]), Oid::<Page>::from_raw(r[52]));
        assert_eq!(*pool.get(w).unwrap(), wide(), "{name}: the wide object");
        assert_eq!(*pool.get(p).unwrap(), page(), "{name}: the page object");
        (w, p)
    });
    (smalls, extra)
}

fn opens_keeps_everything_and_takes_new_work(name: &str, version: u32, third: Small) {
    let path = unpack(name);
    let pool = Pool::open(&path, "fixture").unwrap_or_else(|e| panic!("{name}: {e}"));
    let info = pool.info();
    assert_eq!(info.header.version, pgl::FORMAT_VERSION, "{name}: upgraded");
    let classes = if version >= 8 {
        pgl::ClassTable::StepsAndPowers
    } else {
        pgl::ClassTable::Steps
    };
    assert_eq!(
        info.header.class_table(),
        classes,
        "{name}: keeps the size classes its runs were cut to"
    );
    let (smalls, extra) = check(&pool, third, name);
    assert_eq!(
        extra.is_some(),
        version >= 7,
        "{name}: the wide and page objects"
    );
    let extras = 2 * extra.is_some() as usize;
    let r = pool.scrub(false, |_, _| {}).unwrap();
    assert!(r.is_clean(), "{name}: {r:?}");
    assert_eq!(pool.verify_parity().unwrap(), Vec::<u64>::new(), "{name}");
    let listed = pool.objects().unwrap().len();
    assert_eq!(
        listed,
        1 + 37 + 10 + 1 + extras,
        "{name}: root and the live objects"
    );

    // New work beside the old: objects of every class (into the old runs' free blocks
    // and new runs), frees of old objects, an overwrite of an old one.
    let root = pool.root::<Root>().unwrap();
    let mut made = Vec::new();
    for i in 0..60u64 {
        made.push(pool.tx(|tx| tx.alloc(small(100 + i, 0))).unwrap());
    }
    let mediums: Vec<_> = (0..5u64)
        .map(|i| pool.tx(|tx| tx.alloc(medium(100 + i))).unwrap())
        .collect();
    // Objects of the classes the tables number otherwise: into the old runs when the
    // fixture has them (overlapping blocks would fail the reads after the reopen below).
    let (wides, pages): (Vec<_>, Vec<_>) = (0..3)
        .map(|_| {
            pool.tx(|tx| Ok((tx.alloc(wide())?, tx.alloc(page())?)))
                .unwrap()
        })
        .unzip();
    pool.tx(|tx| {
        tx.free(smalls[0])?;
        tx.open(root)?[0] = 0;
        *tx.open(smalls[1])? = small(1, 9);
        Ok(())
    })
    .unwrap();
    let all: std::collections::HashSet<u64> = made.iter().map(|o| o.raw()).collect();
    assert_eq!(all.len(), made.len(), "{name}: a block handed out twice");
    assert!(
        smalls[1..].iter().all(|o| !all.contains(&o.raw())),
        "{name}: a live block handed out again"
    );
    drop(pool);

    let pool = Pool::open(&path, "fixture").unwrap();
    assert_eq!(*pool.get(smalls[1]).unwrap(), small(1, 9), "{name}");
    for (i, o) in made.iter().enumerate() {
        assert_eq!(*pool.get(*o).unwrap(), small(100 + i as u64, 0), "{name}");
    }
    for (i, o) in mediums.iter().enumerate() {
        assert_eq!(*pool.get(*o).unwrap(), medium(100 + i as u64), "{name}");
    }
    for (w, p) in wides.iter().zip(&pages) {
        assert_eq!(*pool.get(*w).unwrap(), wide(), "{name}");
        assert_eq!(*pool.get(*p).unwrap(), page(), "{name}");
    }
    if let Some((w, p)) = extra {
        assert_eq!(*pool.get(w).unwrap(), wide(), "{name}");
        assert_eq!(*pool.get(p).unwrap(), page(), "{name}");
    }
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean(), "{name}");
    assert_eq!(pool.objects().unwrap().len(), listed - 1 + 65 + 6, "{name}");
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn pools_of_every_older_format_open_and_keep_their_objects() {
    for v in 1..pgl::FORMAT_VERSION {
        opens_keeps_everything_and_takes_new_work(&format!("pool-v{v}.bin"), v, small(3, 0));
    }
    println!(
        "formats opened: {} (1 to {})",
        pgl::FORMAT_VERSION - 1,
        pgl::FORMAT_VERSION - 1
    );
}

#[test]
fn crashed_pools_of_every_older_format_recover() {
    for v in 1..pgl::FORMAT_VERSION {
        opens_keeps_everything_and_takes_new_work(
            &format!("pool-v{v}.bin.crashed"),
            v,
            small(3, 1),
        );
    }
}

/// The format-7 fixtures' runs tell the two size-class tables apart (their 1,100-byte and
/// 4 KiB objects' classes are numbered otherwise with the power classes): their headers
/// forged to name the power classes (version 8, flag bit 3, valid checksums) fail the open,
/// naming the flag. Were every run of a class both tables number alike, the tests above
/// would pass with either table, and could not show that an older pool is read with its own.
#[test]
fn the_format_7_fixtures_tell_the_class_tables_apart() {
    for name in ["pool-v7.bin", "pool-v7.bin.crashed"] {
        let path = unpack_as(name, "forged-");
        let mut file = std::fs::read(&path).unwrap();
        let b_at = pgl::Header::decode(&file[..4096])
            .unwrap()
            .geo
            .header_offset(1) as usize;
        for at in [0, b_at] {
            let mut h = pgl::Header::decode(&file[at..at + 4096]).unwrap();
            assert_eq!(h.class_table(), pgl::ClassTable::Steps, "{name}");
            h.version = pgl::FORMAT_VERSION;
            h.flags |= 8;
            assert_eq!(h.class_table(), pgl::ClassTable::StepsAndPowers, "{name}");
            file[at..at + 4096].copy_from_slice(&h.encode());
        }
        std::fs::write(&path, &file).unwrap();
        let e = Pool::open(&path, "fixture")
            .err()
            .unwrap_or_else(|| panic!("{name}: opened with the power classes"));
        assert!(
            matches!(e, pgl::Error::Corrupt { .. })
                && e.to_string().contains("header copies name the wrong table"),
            "{name}: {e}"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
