//! `Pool::upgrade_all`: every old object of an `#[extendible]` struct upgraded ahead of
//! use, in batches, once; objects freed by other transactions meanwhile passed over.

mod support;

use pgl::{Config, Error, Oid, Pool, UPGRADE_BATCH};

mod v0 {
    use pgl::{extendible, Persistent};

    /// Its group will be a separate object.
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x0e6e_0001)]
    #[repr(C)]
    pub struct Far {
        pub key: u32,
        pub value: u32,
    }

    /// Its group will live in the reserve.
    #[extendible(reserve = 8)]
    #[derive(Persistent)]
    #[pgl(id = 0x0e6e_0002)]
    #[repr(C)]
    pub struct Near {
        pub key: u32,
        pub value: u32,
    }
}

mod v1 {
    use pgl::{extendible, Persistent};

    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x0e6e_0001)]
    #[repr(C)]
    pub struct Far {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()) * 3)]
        pub key64: u64,
    }

    #[extendible(reserve = 8)]
    #[derive(Persistent)]
    #[pgl(id = 0x0e6e_0002)]
    #[repr(C)]
    pub struct Near {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()) * 3)]
        pub key64: u64,
    }
}

fn pool(name: &str) -> (Pool, std::path::PathBuf) {
    let path = support::test_dir().join(format!("pgl-upgrade-all-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut config = Config::new("upgrade-all");
    config.size = 64 << 20;
    (Pool::create(&path, &config).unwrap(), path)
}

/// `n` v0 objects of each struct, in transactions of 100; their oids as v1's.
fn old_objects(pool: &Pool, n: u32) -> (Vec<Oid<v1::Far>>, Vec<Oid<v1::Near>>) {
    let mut far = Vec::new();
    let mut near = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        pool.tx(|tx| {
            for &key in chunk {
                far.push(
                    tx.alloc_ext(v0::FarData {
                        key,
                        value: key + 1,
                    })?
                    .cast(),
                );
                near.push(
                    tx.alloc_ext(v0::NearData {
                        key,
                        value: key + 1,
                    })?
                    .cast(),
                );
            }
            Ok(())
        })
        .unwrap();
    }
    (far, near)
}

#[test]
fn every_old_object_is_upgraded_once_in_batches_and_no_other_is_touched() {
    use v1::{FarExtFields as _, NearExtFields as _};
    let (pool, path) = pool("once");
    // More than two batches, plus objects created by v1, which have their groups.
    let n = 2 * UPGRADE_BATCH as u32 + 45;
    let (far, near) = old_objects(&pool, n);
    let made = pool
        .tx(|tx| {
            tx.alloc_ext(v1::FarData {
                value: 7,
                key64: 70,
            })
        })
        .unwrap();
    let objects = pool.objects().unwrap().len();
    let before = pool.stats().upgrades;

    assert_eq!(pool.upgrade_all::<v1::Far>().unwrap(), u64::from(n));
    assert_eq!(pool.stats().upgrades - before, u64::from(n));
    assert_eq!(
        pool.objects().unwrap().len(),
        objects + n as usize,
        "a separate group for each old `Far`, none for `Near`s yet"
    );
    pool.tx(|tx| {
        for (key, (&f, &m)) in far.iter().zip(&near).enumerate() {
            assert_eq!(tx.groups_present(f)?, 1, "far {key}");
            assert_eq!(tx.groups_present(m)?, 0, "near {key}: another struct");
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.upgrade_all::<v1::Far>().unwrap(), 0, "nothing left");

    assert_eq!(pool.upgrade_all::<v1::Near>().unwrap(), u64::from(n));
    assert_eq!(
        pool.objects().unwrap().len(),
        objects + n as usize,
        "`Near`'s groups went into the reserves"
    );
    assert_eq!(pool.stats().upgrades - before, 2 * u64::from(n));
    // The inits ran as a lazy upgrade's would have, and reading upgrades nothing more.
    pool.tx(|tx| {
        for (key, (&f, &m)) in far.iter().zip(&near).enumerate() {
            let key = key as u64;
            assert_eq!(
                tx.ext_with(f, |v| (*v.key(), v.value))?,
                (key * 3, key as u32 + 1)
            );
            assert_eq!(
                tx.ext_with(m, |v| (*v.key(), v.value))?,
                (key * 3, key as u32 + 1)
            );
        }
        assert_eq!(tx.ext_with(made, |v| *v.key())?, 70);
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.stats().upgrades - before, 2 * u64::from(n));
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());

    // Inside a transaction it refuses, as listing the objects does.
    let e = pool.tx(|_| pool.upgrade_all::<v1::Far>()).unwrap_err();
    assert!(matches!(e, Error::InTransaction { .. }), "{e}");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// What upgrading an object freed since it was listed gives, freed and then reused for
/// another type: the errors `upgrade_all` passes over (as gone), and nothing changed.
#[test]
fn an_object_freed_since_it_was_listed_is_gone_not_upgraded() {
    let (pool, path) = pool("gone");
    let (far, near) = old_objects(&pool, 2);
    pool.tx(|tx| {
        tx.free(far[0])?;
        tx.free(near[0])?;
        Ok(())
    })
    .unwrap();
    // near[0]'s block again, as another type of its size class.
    let other = pool.tx(|tx| tx.alloc([9u64; 3])).unwrap();
    assert_eq!(other.raw(), near[0].raw(), "the freed block is reused");
    for (what, e) in [
        ("freed", pool.tx(|tx| tx.upgrade(far[0])).unwrap_err()),
        ("reused", pool.tx(|tx| tx.upgrade(near[0])).unwrap_err()),
    ] {
        assert!(
            matches!(
                e,
                Error::InvalidOid { .. } | Error::TypeMismatch { .. } | Error::UseAfterFree { .. }
            ),
            "{what}: {e}"
        );
    }
    assert_eq!(*pool.get(other).unwrap(), [9u64; 3]);
    assert_eq!(pool.upgrade_all::<v1::Near>().unwrap(), 1, "near[1]");
    drop(pool);
    std::fs::remove_file(path).unwrap();
}

/// Another thread frees objects while `upgrade_all` works through its list: those it
/// has not reached are passed over, every survivor is upgraded, and nothing errs.
#[test]
fn objects_freed_beside_it_are_passed_over() {
    let (pool, path) = pool("beside");
    let n = 30 * UPGRADE_BATCH as u32;
    let (far, _near) = old_objects(&pool, n);
    let freed = far.len() / 4;
    let doomed: Vec<Oid<v1::Far>> = far[far.len() - freed..].to_vec();
    let before = pool.stats().upgrades;
    let upgraded = std::thread::scope(|s| {
        let pool = &pool;
        let upgrading = s.spawn(move || pool.upgrade_all::<v1::Far>());
        // Once the list is taken (the first upgrade counted), free the list's tail, far
        // ahead of the batch under way, in one transaction.
        while pool.stats().upgrades == before && !upgrading.is_finished() {
            std::hint::spin_loop();
        }
        pool.tx(|tx| {
            for &o in &doomed {
                tx.free(o)?;
            }
            Ok(())
        })
        .unwrap();
        upgrading.join().unwrap()
    })
    .expect("objects freed meanwhile are passed over, not errors");
    let survivors = far.len() - freed;
    assert!(
        (survivors as u64..=far.len() as u64).contains(&upgraded),
        "{upgraded} upgraded of {} listed, {freed} freed meanwhile",
        far.len()
    );
    println!(
        "upgrade_all beside frees: {upgraded} upgraded, {} listed objects passed over",
        far.len() as u64 - upgraded
    );
    pool.tx(|tx| {
        for &o in &far[..survivors] {
            assert_eq!(tx.groups_present(o)?, 1);
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.upgrade_all::<v1::Far>().unwrap(), 0);
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
