//! The header's flag bit 3 (`POWER_CLASSES`) is the only record of which size-class
//! table a pool's runs were cut to (`pgl::ClassTable`); the two tables number their classes
//! differently from 1,088-byte blocks on. Damage to the flag must never make a pool be read
//! with the other table: a scribbled copy is rewritten from the other, a valid copy naming
//! the other table (damage with a valid checksum, or a forgery) loses to the copy the runs
//! agree with, and if both copies name it the open fails cleanly, having touched nothing.
mod support;

use pgl::{ClassTable, Config, Error, Header, Oid, Pool};
use std::path::{Path, PathBuf};

const LAYOUT: &str = "class-table";
const PAGE: usize = 4096;
/// Header flag bit 3.
const POWER_CLASSES: u32 = 8;
/// Header flag bit 2.
const NO_CHECKSUMS: u32 = 4;

/// 4 KiB and 1 KiB payloads of small numbers: wherever a walk with the wrong table takes
/// their bytes for an object header, it reads a plausible size.
type Page = [u64; 512];
type Kib = [u64; 128];

fn page(i: usize) -> Page {
    std::array::from_fn(|j| ((i * 31 + j * 13) % 97 + 1) as u64)
}

fn kib(i: usize) -> Kib {
    std::array::from_fn(|j| ((i * 17 + j * 7) % 89 + 1) as u64)
}

/// A closed pool made by this build holding 4 KiB and 1 KiB objects (runs of classes the
/// two tables number differently), and their oids.
fn make(name: &str) -> (PathBuf, Vec<Oid<Page>>, Vec<Oid<Kib>>) {
    let path = support::test_dir().join(format!("pgl-class-table-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::small(LAYOUT)).unwrap();
    assert_eq!(pool.info().header.class_table(), ClassTable::StepsAndPowers);
    let pages = (0..5)
        .map(|i| pool.tx(|tx| tx.alloc(page(i))).unwrap())
        .collect();
    let kibs = (0..5)
        .map(|i| pool.tx(|tx| tx.alloc(kib(i))).unwrap())
        .collect();
    drop(pool);
    (path, pages, kibs)
}

fn check_objects(pool: &Pool, pages: &[Oid<Page>], kibs: &[Oid<Kib>], what: &str) {
    for (i, &o) in pages.iter().enumerate() {
        assert_eq!(*pool.get(o).unwrap(), page(i), "{what}: 4 KiB object {i}");
    }
    for (i, &o) in kibs.iter().enumerate() {
        assert_eq!(*pool.get(o).unwrap(), kib(i), "{what}: 1 KiB object {i}");
    }
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean(), "{what}");
}

/// Offsets of header copies A and B.
fn copies(path: &Path) -> [usize; 2] {
    let file = std::fs::read(path).unwrap();
    let h = Header::decode(&file[..PAGE]).unwrap();
    [0, h.geo.header_offset(1) as usize]
}

fn rewrite(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut file = std::fs::read(path).unwrap();
    f(&mut file);
    std::fs::write(path, file).unwrap();
}

/// Both header copies decode, naming the power classes.
fn both_copies_name_the_power_classes(path: &Path, what: &str) {
    let file = std::fs::read(path).unwrap();
    for (copy, at) in copies(path).into_iter().enumerate() {
        let h = Header::decode(&file[at..at + PAGE])
            .unwrap_or_else(|e| panic!("{what}: copy {copy} does not decode: {e:?}"));
        assert_eq!(
            h.class_table(),
            ClassTable::StepsAndPowers,
            "{what}: copy {copy}"
        );
    }
}

#[test]
fn a_scribble_clearing_the_flag_in_one_copy_is_repaired_from_the_other() {
    for copy in 0..2 {
        let what = format!("copy {copy} scribbled");
        let (path, pages, kibs) = make(&format!("scribble-{copy}"));
        let at = copies(&path)[copy];
        rewrite(&path, |f| f[at + 12] &= !(POWER_CLASSES as u8));
        let pool = Pool::open(&path, LAYOUT).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(pool.stats().header_repairs, 1, "{what}");
        assert_eq!(pool.info().header.class_table(), ClassTable::StepsAndPowers);
        check_objects(&pool, &pages, &kibs, &what);
        drop(pool);
        both_copies_name_the_power_classes(&path, &what);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn both_copies_scribbled_is_a_clean_error() {
    let (path, _, _) = make("scribble-both");
    let at = copies(&path);
    rewrite(&path, |f| {
        for a in at {
            f[a + 12] &= !(POWER_CLASSES as u8);
        }
    });
    let e = Pool::open(&path, LAYOUT).expect_err("no header copy is valid");
    assert!(matches!(e, Error::HeaderCorrupt { .. }), "{e}");
    std::fs::remove_file(&path).unwrap();
}

/// Copy `copy` re-encoded (a valid checksum) naming the steps table, one generation ahead.
fn forge(file: &mut [u8], at: usize, extra_flags: u32) {
    let mut h = Header::decode(&file[at..at + PAGE]).unwrap();
    h.flags = (h.flags & !POWER_CLASSES) | extra_flags;
    h.generation += 1;
    file[at..at + PAGE].copy_from_slice(&h.encode());
}

#[test]
fn a_valid_copy_naming_the_other_table_loses_to_the_copy_the_runs_agree_with() {
    for copy in 0..2 {
        let what = format!("copy {copy} forged");
        let (path, pages, kibs) = make(&format!("forge-{copy}"));
        let at = copies(&path)[copy];
        rewrite(&path, |f| forge(f, at, 0));
        let pool = Pool::open(&path, LAYOUT).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(pool.stats().header_repairs, 1, "{what}");
        assert_eq!(pool.info().header.class_table(), ClassTable::StepsAndPowers);
        check_objects(&pool, &pages, &kibs, &what);
        // New objects of those classes go where the old table put them.
        let more = pool.tx(|tx| tx.alloc(page(9))).unwrap();
        drop(pool);
        both_copies_name_the_power_classes(&path, &what);
        let pool = Pool::open(&path, LAYOUT).unwrap();
        assert_eq!(*pool.get(more).unwrap(), page(9), "{what}");
        check_objects(&pool, &pages, &kibs, &what);
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn both_copies_naming_the_other_table_fail_the_open_and_touch_nothing() {
    let (path, pages, kibs) = make("forge-both");
    let before = std::fs::read(&path).unwrap();
    // NO_CHECKSUMS too: the open would recompute every object's checksum, walking the
    // runs' blocks with the table the header names.
    rewrite(&path, |f| {
        for at in copies(&path) {
            forge(f, at, NO_CHECKSUMS);
        }
    });
    let forged = std::fs::read(&path).unwrap();
    let e = Pool::open(&path, LAYOUT).expect_err("a pool read with the wrong size classes opened");
    let after = std::fs::read(&path).unwrap();
    let changed = (0..after.len() / 8)
        .filter(|&w| after[w * 8..w * 8 + 8] != forged[w * 8..w * 8 + 8])
        .count();
    assert_eq!(changed, 0, "words the failed open changed ({e})");
    assert!(
        matches!(
            e,
            Error::Corrupt {
                what: "chunk table entry",
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("header copies name the wrong table"),
        "the error names the header flag: {msg}"
    );
    // The true header back: every object as it was.
    rewrite(&path, |f| {
        for at in copies(&path) {
            f[at..at + PAGE].copy_from_slice(&before[at..at + PAGE]);
        }
    });
    let pool = Pool::open(&path, LAYOUT).unwrap();
    check_objects(&pool, &pages, &kibs, "after the true header is restored");
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
