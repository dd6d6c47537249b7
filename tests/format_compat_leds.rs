//! `#[extendible]` objects that a format-8 build wrote (`tests/fixtures/pool-v8-leds.bin`;
//! `fixtures/leds_shape.rs` says what they are) read, upgrade, change, copy and evolve in
//! this build.
//!
//! Format 8 kept an extension group in a reserve only if its link fit too; this build
//! keeps the last one without it. So `Tight`'s group 1 (8 bytes of fields in an 8-byte
//! reserve) was a separate object for the objects the format-8 build upgraded or created,
//! and is inline for those this build upgrades: both kinds live side by side in one pool
//! and must read alike. `Roomy`'s group lies where both formats put it.

mod support;

use pgl::{Extendible, Oid, Pool};

include!("fixtures/leds_shape.rs");

/// v2 adds a group 2 to both structs: past each reserve, so a separate object.
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
        pub tag: u32,
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
        pub tag: u32,
    }
}

fn tag_of(key: u64) -> u32 {
    (key >> 32) as u32 ^ 0xa5
}

/// What object `word` of the root holds after the v1 program (key, value).
fn expected(word: usize) -> (u64, u32) {
    let n = V0_OBJECTS as usize;
    if word < 2 * n {
        let (i, tight) = (word % n, word >= n);
        let value = if i % 4 == 2 { i + 1000 } else { i };
        (widened(v0_key(i as u64, tight)), value as u32)
    } else {
        let j = word - 2 * n;
        (0x7777_0000_0000 + j as u64, 90 + j as u32)
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

/// Whether root word `w` holds a `Tight` object.
fn is_tight(w: usize) -> bool {
    let n = V0_OBJECTS as usize;
    (n..2 * n).contains(&w) || (18..20).contains(&w)
}

#[test]
fn a_format_8_pools_groups_in_and_out_of_reserves_read_upgrade_and_evolve() {
    let path = support::fixture::unpack("pool-v8-leds.bin", "");
    let tight_groups = <v1::Tight as Extendible>::GROUP_KEYS[0].0;
    let roomy_groups = <v1::Roomy as Extendible>::GROUP_KEYS[0].0;

    // v1 on the format-8 pool.
    let pool = Pool::open(&path, "fixture").unwrap();
    assert_eq!(pool.info().header.version, pgl::FORMAT_VERSION, "upgraded");
    let root = pool.root::<LedsRoot>().unwrap();
    let words = *pool.get(root).unwrap();
    assert_eq!(words[63], 1, "the fixture's v1 program finished");
    // Format 8 kept `Tight`'s group 1 in objects of its own: 4 upgraded, 2 created.
    assert_eq!(
        count(&pool, tight_groups),
        6,
        "Tight groups the format-8 build made"
    );
    assert_eq!(
        count(&pool, roomy_groups),
        0,
        "Roomy groups live in the reserve"
    );
    let upgrades = pool.stats().upgrades;
    {
        use v1::{RoomyExtFields as _, TightExtFields as _};
        pool.tx(|tx| {
            for (w, &raw) in words[..20].iter().enumerate() {
                let (key, value) = expected(w);
                let (k, v) = if is_tight(w) {
                    tx.ext_with(Oid::<v1::Tight>::from_raw(raw), |n| (*n.key(), n.value))?
                } else {
                    tx.ext_with(Oid::<v1::Roomy>::from_raw(raw), |n| (*n.key(), n.value))?
                };
                assert_eq!((k, v), (key, value), "root word {w}");
            }
            Ok(())
        })
        .unwrap();
    }
    // The odd v0 objects of each struct were upgraded just now: `Tight`'s into its
    // reserve, without its link, so no group object was made.
    assert_eq!(pool.stats().upgrades - upgrades, 8);
    assert_eq!(
        count(&pool, tight_groups),
        6,
        "this build upgrades into the reserve"
    );
    assert_eq!(count(&pool, roomy_groups), 0);

    // Writes through every kind of group: whole inline (Roomy), separate (Tight, older),
    // inline without its link (Tight, upgraded just now).
    {
        use v1::{RoomyExtFields as _, TightExtFields as _};
        pool.tx(|tx| {
            for (w, &raw) in words[..20].iter().enumerate() {
                let key = expected(w).0 ^ 0xff;
                if is_tight(w) {
                    tx.ext_mut(Oid::<v1::Tight>::from_raw(raw))?.set_key(key);
                } else {
                    tx.ext_mut(Oid::<v1::Roomy>::from_raw(raw))?.set_key(key);
                }
            }
            Ok(())
        })
        .unwrap();
        // Copies of a `Tight` object with a separate group (word 8, upgraded by the
        // format-8 build) and of one with its group inline (word 9, upgraded above).
        let copies = pool
            .tx(|tx| {
                Ok([
                    tx.copy_ext(Oid::<v1::Tight>::from_raw(words[8]))?,
                    tx.copy_ext(Oid::<v1::Tight>::from_raw(words[9]))?,
                ])
            })
            .unwrap();
        pool.tx(|tx| {
            for (c, w) in copies.iter().zip([8, 9]) {
                let key = tx.ext_with(*c, |n| *n.key())?;
                assert_eq!(key, expected(w).0 ^ 0xff, "copy of word {w}");
            }
            // The copies go; so does word 8's original, with its group.
            for c in copies {
                tx.free(c)?;
            }
            tx.free(Oid::<v1::Tight>::from_raw(words[8]))?;
            tx.open(root)?[8] = 0;
            Ok(())
        })
        .unwrap();
    }
    assert_eq!(
        count(&pool, tight_groups),
        5,
        "the copy's group and word 8's freed"
    );
    assert!(pool.scrub(false, |_, _| {}).unwrap().is_clean());
    drop(pool);

    // v2 adds group 2, past both reserves: a separate object for every object, linked
    // from the base (inline group 1) or from the separate group 1.
    for run in 0..2 {
        let pool = Pool::open(&path, "fixture").unwrap();
        use v2::{RoomyExtFields as _, TightExtFields as _};
        pool.tx(|tx| {
            for w in (0..20).filter(|&w| w != 8) {
                let key = expected(w).0 ^ 0xff;
                let (k, v, tag) = if is_tight(w) {
                    let o = Oid::<v2::Tight>::from_raw(words[w]);
                    tx.ext_with(o, |n| (*n.key(), n.value, *n.tag()))?
                } else {
                    let o = Oid::<v2::Roomy>::from_raw(words[w]);
                    tx.ext_with(o, |n| (*n.key(), n.value, *n.tag()))?
                };
                assert_eq!(
                    (k, v, tag),
                    (key, expected(w).1, tag_of(key)),
                    "v2 run {run}, root word {w}"
                );
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(
            count(&pool, <v2::Tight as Extendible>::GROUP_KEYS[1].0),
            9,
            "run {run}: a group 2 for each `Tight` object"
        );
        assert_eq!(count(&pool, <v2::Roomy as Extendible>::GROUP_KEYS[1].0), 10);
        assert_eq!(
            count(&pool, tight_groups),
            5,
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
