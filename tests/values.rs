//! `PBool`, `PStr<N>` and `PBytes<N>` as fields of a derived struct: accepted by the derive,
//! committed in a transaction, and read back whole after the pool is reopened.

mod support;

use pgl::prelude::*;

const LAYOUT: &str = "values";

/// Every field has alignment 1, so the struct has no padding (49 bytes).
#[derive(Persistent)]
#[repr(C)]
struct Record {
    done: PBool,
    name: PStr<24>,
    key: PBytes<16>,
}

fn pool_path(name: &str) -> std::path::PathBuf {
    let path = support::test_dir().join(format!("pgl-values-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn derived_struct_with_wrappers_round_trips_through_reopen() {
    assert_eq!(core::mem::size_of::<Record>(), 1 + (24 + 4) + (16 + 4));
    let path = pool_path("roundtrip");
    {
        let pool = Pool::create(&path, &Config::small(LAYOUT)).unwrap();
        let root = pool.root::<Record>().unwrap();
        {
            // A new root is zero-filled: every wrapper reads as its default.
            let r = pool.get(root).unwrap();
            assert_eq!(r.done, PBool::FALSE);
            assert!(r.name.is_empty());
            assert!(r.key.is_empty());
        }
        pool.tx(|tx| {
            let mut r = tx.open(root)?;
            r.done = PBool::TRUE;
            r.name.set("Grace Hopper — COBOL")?;
            r.key = PBytes::new(&[0xde, 0xad, 0xbe, 0xef, 0])?;
            Ok(())
        })
        .unwrap();
    }
    let pool = Pool::open(&path, LAYOUT).unwrap();
    let root = pool.root::<Record>().unwrap();
    {
        let r = pool.get(root).unwrap();
        assert!(r.done.get());
        assert_eq!(r.name, "Grace Hopper — COBOL");
        assert_eq!(r.key.as_slice(), &[0xde, 0xad, 0xbe, 0xef, 0]);
    }
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn too_long_value_aborts_the_transaction() {
    let path = pool_path("toolong");
    let pool = Pool::create(&path, &Config::small(LAYOUT)).unwrap();
    let root = pool.root::<Record>().unwrap();
    pool.tx(|tx| {
        let mut r = tx.open(root)?;
        r.name.set("kept")?;
        Ok(())
    })
    .unwrap();
    let res = pool.tx(|tx| {
        let mut r = tx.open(root)?;
        r.done = PBool::TRUE;
        r.name.set("a name of more than twenty-four bytes")?;
        Ok(())
    });
    assert!(
        matches!(
            res,
            Err(Error::TooLong {
                what: "PStr",
                len: 37,
                capacity: 24
            })
        ),
        "{res:?}"
    );
    let r = pool.get(root).unwrap();
    assert!(!r.done.get(), "the whole transaction was rolled back");
    assert_eq!(r.name, "kept");
    drop(r);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
