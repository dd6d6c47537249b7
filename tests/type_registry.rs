//! The pool's type registry: each stored type's layout is recorded the first time it is
//! stored, a build whose struct changed fails with `Error::LayoutMismatch` instead of
//! reading old bytes as the new layout, and `pool.types()` lists the registry.

mod support;

use pgl::{Config, Error, Oid, Pool};

mod v1 {
    use pgl::Persistent;
    /// The first version of a record.
    #[derive(Persistent, Clone, Copy, Debug, PartialEq)]
    #[repr(C)]
    #[pgl(id = 4242)]
    pub struct Account {
        pub id: u64,
        pub balance: i64,
    }
}

mod v2 {
    use pgl::Persistent;
    /// The same type id, one field added: the layout fingerprint differs.
    #[derive(Persistent, Clone, Copy, Debug, PartialEq)]
    #[repr(C)]
    #[pgl(id = 4242)]
    pub struct Account {
        pub id: u64,
        pub balance: i64,
        pub currency: u32,
        pub flags: u32,
    }
}

fn path(name: &str) -> std::path::PathBuf {
    let p = support::test_dir().join(format!("pgl-registry-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn a_changed_struct_is_refused_with_its_names_and_fingerprints() {
    let path = path("mismatch");
    let pool = Pool::create(&path, &Config::small("reg")).unwrap();
    let oid = pool
        .tx(|tx| tx.alloc(v1::Account { id: 1, balance: 10 }))
        .unwrap();
    drop(pool);

    let pool = Pool::open(&path, "reg").unwrap();
    let stale: Oid<v2::Account> = Oid::from_raw(oid.raw());
    let expect_mismatch = |e: Error| match e {
        Error::LayoutMismatch {
            type_name,
            stored_name,
            type_id,
            stored,
            compiled,
            group,
            pool_file,
        } => {
            assert_eq!(group, None, "not an extendible struct");
            assert_eq!(
                pool_file.as_deref(),
                Some(&*path),
                "the error names the pool"
            );
            assert!(type_name.ends_with("v2::Account"), "{type_name}");
            assert!(stored_name.ends_with("v1::Account"), "{stored_name}");
            assert_eq!(type_id, 4242);
            assert_eq!(stored, <v1::Account as pgl::Persistent>::LAYOUT);
            assert_eq!(compiled, <v2::Account as pgl::Persistent>::LAYOUT);
        }
        other => panic!("expected LayoutMismatch, got {other:?}"),
    };
    // Every way in is refused: open in a transaction, read outside one, read inside one,
    // allocate a new one, the detached open.
    expect_mismatch(pool.tx(|tx| tx.open(stale).map(|_| ())).unwrap_err());
    expect_mismatch(pool.get(stale).map(|_| ()).unwrap_err());
    expect_mismatch(pool.tx(|tx| tx.get(stale).map(|_| ())).unwrap_err());
    expect_mismatch(
        pool.tx(|tx| tx.alloc_zeroed::<v2::Account>().map(|_| ()))
            .unwrap_err(),
    );
    expect_mismatch(pool.open_mut(stale).map(|_| ()).unwrap_err());

    // The message names the three ways out.
    let msg = pool.get(stale).map(|_| ()).unwrap_err().to_string();
    for way in ["reset the pool", "migrate", "#[extendible]"] {
        assert!(msg.contains(way), "{msg}");
    }
    // The old definition still reads the object, and nothing was registered for v2.
    assert_eq!(*pool.get(oid).unwrap(), v1::Account { id: 1, balance: 10 });
    let types = pool.types().unwrap();
    let accounts: Vec<_> = types.iter().filter(|t| t.type_id == 4242).collect();
    assert_eq!(accounts.len(), 1);
    assert_eq!(accounts[0].layout, <v1::Account as pgl::Persistent>::LAYOUT);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn types_are_registered_once_by_the_transaction_that_first_stores_them() {
    let path = path("once");
    let pool = Pool::create(&path, &Config::small("reg")).unwrap();
    assert!(pool.types().unwrap().is_empty(), "a new pool has no types");
    assert_eq!(
        pool.objects().unwrap().len(),
        0,
        "the registry is metadata, not objects"
    );

    // An aborted transaction registers nothing.
    let r: pgl::Result<()> = pool.tx(|tx| {
        tx.alloc(7u32)?;
        Err(Error::Aborted {
            reason: "test".into(),
        })
    });
    assert!(r.is_err());
    assert!(pool.types().unwrap().is_empty());

    for _ in 0..3 {
        pool.tx(|tx| {
            tx.alloc(v1::Account { id: 2, balance: 0 })?;
            tx.alloc(7u32)?;
            Ok(())
        })
        .unwrap();
    }
    let types = pool.types().unwrap();
    assert_eq!(types.len(), 2, "{types:?}");
    assert!(types.iter().any(|t| t.name == "u32"));
    assert!(types.iter().any(|t| t.name.ends_with("v1::Account")));
    // Survives reopening.
    drop(pool);
    let pool = Pool::open(&path, "reg").unwrap();
    assert_eq!(pool.types().unwrap(), types);
    assert!(pool.verify_objects(|_, _| {}).unwrap().is_empty());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

macro_rules! store_arrays {
    ($pool:expr, $($n:literal)*) => {
        vec![$( ($n, $pool.tx(|tx| tx.alloc([$n as u8; $n])).unwrap().raw()) ),*]
    };
}

#[test]
fn many_types_from_several_threads_are_each_registered_once() {
    let path = path("pages");
    let pool = Pool::create(&path, &Config::new("reg")).unwrap();
    let stored = store_arrays!(pool,
        1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30
        31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57
        58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80);
    assert_eq!(
        pool.types().unwrap().len(),
        80,
        "63 types per page: two pages"
    );
    drop(pool);
    let pool = Pool::open(&path, "reg").unwrap();
    assert_eq!(pool.types().unwrap().len(), 80);
    let (n, off) = stored[75];
    assert_eq!(n, 76);
    assert_eq!(
        *pool.get(Oid::<[u8; 76]>::from_raw(off)).unwrap(),
        [76u8; 76]
    );
    // Two more, registered from two threads at once: no entry is lost or duplicated.
    std::thread::scope(|s| {
        s.spawn(|| pool.tx(|tx| tx.alloc([0u16; 3])).unwrap());
        s.spawn(|| pool.tx(|tx| tx.alloc([0u16; 5])).unwrap());
    });
    let types = pool.types().unwrap();
    assert_eq!(types.len(), 82, "{types:?}");
    let mut ids: Vec<u32> = types.iter().map(|t| t.type_id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 82);
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_damaged_registry_entry_is_repaired_from_the_other_copy_or_refused() {
    let path = path("damaged");
    let pool = Pool::create(&path, &Config::small("reg")).unwrap();
    let oid = pool.tx(|tx| tx.alloc(7u64)).unwrap();
    let geo = pool.info().header.geo;
    drop(pool);

    // Flip one bit of the first entry's layout (see the book's byte table), in copy A of
    // zone 0's metadata: the open finds copy A failing its checksum and rewrites it from B.
    let chunks = geo.rows * geo.chunks_per_row;
    let registry = geo.chunk_offset(0, 0) + (1024 + 8 * chunks).div_ceil(64) * 64;
    let at = (registry + 64 + 8) as usize;
    let copy_b = (geo.chunk_size / 2) as usize;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let pool = Pool::open(&path, "reg").unwrap();
    assert_eq!(pool.stats().metadata_repairs, 1);
    assert_eq!(pool.types().unwrap().len(), 1);
    assert_eq!(*pool.get(oid).unwrap(), 7);
    drop(pool);

    // The same bit in both copies (other page columns): both are rebuilt from parity.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at] ^= 0x10;
    bytes[at + copy_b] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let pool = Pool::open(&path, "reg").unwrap();
    assert_eq!(
        pool.stats().metadata_repairs,
        2,
        "both copies of the zone rebuilt"
    );
    assert_eq!(pool.types().unwrap().len(), 1);
    drop(pool);

    // Without parity nothing can rebuild them: the zone's metadata cannot be trusted, the
    // pool is refused with a typed error.
    let mut no_parity = Config::small("reg");
    no_parity.parity = false;
    drop(Pool::open_with(&path, &no_parity).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at] ^= 0x10;
    bytes[at + copy_b] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    match Pool::open_with(&path, &no_parity) {
        Err(Error::Corrupt { what, offset, .. }) => {
            assert_eq!(what, "zone metadata");
            assert_eq!(offset, geo.chunk_offset(0, 0));
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    std::fs::remove_file(path).unwrap();
}
