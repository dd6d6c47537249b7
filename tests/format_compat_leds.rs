//! `#[extendible]` objects that a format-8 build wrote (`tests/fixtures/pool-v8-leds.bin`;
//! `fixtures/leds_shape.rs` says what they are) read, upgrade, change, copy and evolve in
//! this build.
//!
//! Format 8 kept an extension group in a reserve only if its link fit too; this build
//! keeps the last one without it. So `Tight`'s group 1 and `Pair`'s group 2 were separate
//! objects for the objects the format-8 build upgraded or created, and are inline for
//! those this build upgrades: both kinds live side by side in one pool and must read
//! alike. `Roomy`'s group lies where both formats put it.

mod support;

use pgl::{Extendible, Oid, Pool, Tx};

include!("fixtures/leds_shape.rs");

/// v2 adds a group 2 to `Roomy` and `Tight`: past their reserves, so a separate object.
mod v2 {
    use pgl::{extendible, Persistent};

    #[extendible(reserve = 16)]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_f801)]
    #[repr(C)]
    pub struct Roomy {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| super::widened(old.key()))]
        pub key64: u64,
        #[extension(2, init = |old| super::tag_of(old.key64()))]
        pub tag: u64,
    }

    #[extendible(reserve = 8)]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_f802)]
    #[repr(C)]
    pub struct Tight {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| super::widened(old.key()))]
        pub key64: u64,
        #[extension(2, init = |old| super::tag_of(old.key64()))]
        pub tag: u64,
    }
}

/// What object `w` of the root holds after the fixture's v1 program (key, value).
fn expected(w: usize) -> (u64, u32) {
    match kind_of(w) {
        (kind, i) if w < first_new_word(Kind::Roomy) => {
            let value = if i % 4 == 2 { i + 1000 } else { i };
            (widened(v0_key(i, kind)), value as u32)
        }
        (kind, i) => made(i, kind),
    }
}

/// Objects of the pool whose type id is `type_id`.
fn count(pool: &Pool, type_id: u32) -> usize {
    pool.objects()
        .unwrap()
        .iter()
        .filter(|(_, h)| h.type_id == type_id)
        .count()
}

/// The type id of group `k` of `T`.
fn group<T: Extendible>(k: usize) -> u32 {
    T::GROUP_KEYS[k - 1].0
}

/// Key, value and (for `Pair`) tag of the object at `raw`, read with the v1 definitions
/// (upgrading it if it is a v0 object).
fn read_v1(tx: &Tx<'_>, kind: Kind, raw: u64) -> pgl::Result<(u64, u32, Option<u64>)> {
    use v1::{PairExtFields as _, RoomyExtFields as _, TightExtFields as _};
    match kind {
        Kind::Roomy => tx.ext_with(Oid::<v1::Roomy>::from_raw(raw), |n| {
            (*n.key(), n.value, None)
        }),
        Kind::Tight => tx.ext_with(Oid::<v1::Tight>::from_raw(raw), |n| {
            (*n.key(), n.value, None)
        }),
        Kind::Pair => tx.ext_with(Oid::<v1::Pair>::from_raw(raw), |n| {
            (*n.key(), n.value, Some(*n.tag()))
        }),
    }
}

/// Checks every object the root lists (but the `freed` words) with the v1 definitions,
/// whose keys are `expected`'s XOR `flip`.
fn check_v1(pool: &Pool, words: &LedsRoot, flip: u64, freed: &[usize], when: &str) {
    pool.tx(|tx| {
        for (w, &raw) in words[..OBJECT_WORDS].iter().enumerate() {
            if freed.contains(&w) {
                continue;
            }
            let (kind, _) = kind_of(w);
            let (key, value) = expected(w);
            let key = key ^ flip;
            let tag = (kind == Kind::Pair).then(|| tag_of(key));
            assert_eq!(
                read_v1(tx, kind, raw)?,
                (key, value, tag),
                "{when}: root word {w}"
            );
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn a_format_8_pools_groups_in_and_out_of_reserves_read_upgrade_and_evolve() {
    let path = support::fixture::unpack("pool-v8-leds.bin", "");
    // The group objects of each kind that format 8 made: half the v0 objects (the even
    // ones, upgraded) and every created one.
    let by_format_8 = V0_OBJECTS / 2 + NEW_OBJECTS;
    let separate = |pool: &Pool| {
        [
            count(pool, group::<v1::Roomy>(1)),
            count(pool, group::<v1::Tight>(1)),
            count(pool, group::<v1::Pair>(1)),
            count(pool, group::<v1::Pair>(2)),
        ]
    };

    // v1 on the format-8 pool.
    let pool = Pool::open(&path, "fixture").unwrap();
    assert_eq!(pool.info().header.version, pgl::FORMAT_VERSION, "upgraded");
    let root = pool.root::<LedsRoot>().unwrap();
    let words = *pool.get(root).unwrap();
    assert_eq!(words[63], 1, "the fixture's v1 program finished");
    // Format 8 kept `Tight`'s group 1 and `Pair`'s group 2 in objects of their own.
    assert_eq!(
        separate(&pool),
        [0, by_format_8, 0, by_format_8],
        "the groups the format-8 build made in objects of their own"
    );
    let upgrades = pool.stats().upgrades;
    check_v1(&pool, &words, 0, &[], "first read");
    // The odd v0 objects were upgraded just now, each group that fits into the reserve,
    // without its link: no group object was made.
    assert_eq!(
        pool.stats().upgrades - upgrades,
        (KINDS.len() * V0_OBJECTS / 2) as u64
    );
    assert_eq!(
        separate(&pool),
        [0, by_format_8, 0, by_format_8],
        "this build upgrades into the reserve"
    );

    // Writes through every kind of group: whole inline (Roomy, Pair's group 1), separate
    // (Tight's and Pair's older ones), inline without its link (the ones upgraded above).
    {
        use v1::{PairExtFields as _, RoomyExtFields as _, TightExtFields as _};
        pool.tx(|tx| {
            for (w, &raw) in words[..OBJECT_WORDS].iter().enumerate() {
                let key = expected(w).0 ^ 0xff;
                match kind_of(w).0 {
                    Kind::Roomy => tx.ext_mut(Oid::<v1::Roomy>::from_raw(raw))?.set_key(key),
                    Kind::Tight => tx.ext_mut(Oid::<v1::Tight>::from_raw(raw))?.set_key(key),
                    Kind::Pair => {
                        let mut m = tx.ext_mut(Oid::<v1::Pair>::from_raw(raw))?;
                        m.set_key(key);
                        m.set_tag(tag_of(key));
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    }
    check_v1(&pool, &words, 0xff, &[], "after the writes");
    // Copies of objects with groups the format-8 build put in objects of their own (the
    // first of each kind, upgraded by it) and with groups this build put inline (the
    // second), then frees: the copies, and the first `Tight` and `Pair` with their groups.
    let firsts = [first_word(Kind::Tight), first_word(Kind::Pair)];
    pool.tx(|tx| {
        let mut copies = Vec::new();
        for w in [firsts, firsts.map(|w| w + 1)].concat() {
            let (kind, _) = kind_of(w);
            copies.push(match kind {
                Kind::Tight => tx.copy_ext(Oid::<v1::Tight>::from_raw(words[w]))?.raw(),
                _ => tx.copy_ext(Oid::<v1::Pair>::from_raw(words[w]))?.raw(),
            });
        }
        for (c, w) in copies.iter().zip([firsts, firsts.map(|w| w + 1)].concat()) {
            let (kind, _) = kind_of(w);
            let (key, _, _) = read_v1(tx, kind, *c)?;
            assert_eq!(key, expected(w).0 ^ 0xff, "copy of word {w}");
            match kind {
                Kind::Tight => tx.free(Oid::<v1::Tight>::from_raw(*c))?,
                _ => tx.free(Oid::<v1::Pair>::from_raw(*c))?,
            }
        }
        tx.free(Oid::<v1::Tight>::from_raw(words[firsts[0]]))?;
        tx.free(Oid::<v1::Pair>::from_raw(words[firsts[1]]))?;
        let mut r = tx.open(root)?;
        for w in firsts {
            r[w] = 0;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(
        separate(&pool),
        [0, by_format_8 - 1, 0, by_format_8 - 1],
        "the copies' groups and the freed objects' went with them"
    );
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    drop(pool);

    // v2 adds group 2 to `Roomy` and `Tight`, past both reserves: a separate object for
    // each, linked from the base (inline group 1) or from the separate group 1. `Pair`
    // is read as before.
    for run in 0..2 {
        let pool = Pool::open(&path, "fixture").unwrap();
        // v1 reads every object; in the second run, objects v2 upgraded too (an older
        // build on them).
        check_v1(
            &pool,
            &words,
            0xff,
            &firsts,
            &format!("v2 run {run}, read as v1"),
        );
        use v2::{RoomyExtFields as _, TightExtFields as _};
        pool.tx(|tx| {
            for (w, &raw) in words[..OBJECT_WORDS].iter().enumerate() {
                let key = expected(w).0 ^ 0xff;
                let got = match kind_of(w).0 {
                    _ if firsts.contains(&w) => continue,
                    Kind::Roomy => tx.ext_with(Oid::<v2::Roomy>::from_raw(raw), |n| {
                        (*n.key(), n.value, *n.tag())
                    })?,
                    Kind::Tight => tx.ext_with(Oid::<v2::Tight>::from_raw(raw), |n| {
                        (*n.key(), n.value, *n.tag())
                    })?,
                    Kind::Pair => continue,
                };
                assert_eq!(
                    got,
                    (key, expected(w).1, tag_of(key)),
                    "v2 run {run}, root word {w}"
                );
            }
            Ok(())
        })
        .unwrap();
        let per_kind = V0_OBJECTS + NEW_OBJECTS;
        assert_eq!(count(&pool, group::<v2::Roomy>(2)), per_kind, "run {run}");
        assert_eq!(
            count(&pool, group::<v2::Tight>(2)),
            per_kind - 1,
            "run {run}"
        );
        assert_eq!(
            count(&pool, group::<v1::Tight>(1)),
            by_format_8 - 1,
            "run {run}: group 1 stays where it was"
        );
        assert!(
            pool.scrub(false, |_, _| {}).unwrap().is_clean(),
            "run {run}"
        );
        drop(pool);
    }
    std::fs::remove_file(&path).unwrap();
}
