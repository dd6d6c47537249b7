//! An extension group is read in place under its owner's lock only (`tx::GroupScope`), so
//! no other type may reach its bytes: a plain struct given the group's type id by hand
//! (`#[pgl(id = ..)]`, legal safe code) is refused by the type registry before it can
//! take the group's own lock and write it behind a reader of the owner. (Its layout cannot
//! match: the group's link field has a name `#[derive(Persistent)]` reserves.)

mod support;

use pgl::{Config, Error, Oid, Persistent, Pool};
use v1::CounterExtFields as _;

mod v1 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_dd01)]
    #[repr(C)]
    pub struct Counter {
        pub id: u64,
        #[extension(1, init = 0)]
        pub hits: u64,
    }
}

mod fake {
    use pgl::Persistent;
    /// Group 1 of `v1::Counter` as closely as safe code can imitate it.
    #[derive(Persistent)]
    #[pgl(id = 0x4d90_11f2)]
    #[repr(C)]
    pub struct Fake {
        pub hits: u64,
        pub next: pgl::ExtLink,
    }
}

#[test]
fn a_plain_type_with_a_groups_id_cannot_open_the_group() {
    let (group_id, _) = <v1::Counter as pgl::Extendible>::GROUP_KEYS[0];
    assert_eq!(
        fake::Fake::TYPE_ID,
        group_id,
        "update `Fake`'s id to group 1's ({group_id:#x})"
    );
    let path = support::test_dir().join(format!("pgl-group-alias-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &Config::small("alias")).unwrap();
    let owner = pool
        .tx(|tx| tx.alloc_ext(v1::CounterData { id: 1, hits: 5 }))
        .unwrap();
    let (_, bytes) = pool.read_object(owner.raw()).unwrap();
    let link = u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().unwrap());
    let group = Oid::<fake::Fake>::from_raw(link);
    let opened = pool.tx(|tx| {
        tx.open(group)?.hits = 77;
        Ok(())
    });
    assert!(
        matches!(opened, Err(Error::LayoutMismatch { .. })),
        "{opened:?}"
    );
    let detached = pool.open_mut(group).map(drop);
    assert!(
        matches!(detached, Err(Error::LayoutMismatch { .. })),
        "{detached:?}"
    );
    let read = pool.get(group).map(drop);
    assert!(
        matches!(read, Err(Error::LayoutMismatch { .. })),
        "{read:?}"
    );
    assert_eq!(
        pool.tx(|tx| Ok(*tx.ext(owner)?.hits())).unwrap(),
        5,
        "the group is untouched"
    );
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
