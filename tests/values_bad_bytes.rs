//! `PBool`, `PStr<N>` and `PBytes<N>` over bytes pgl never wrote: a pool file overwritten
//! by hand, with checksums off so that nothing notices before the values are borrowed.
//! Every handle (`pool.get`, `tx.get`, `tx.open`, a `Place` projection, an array element)
//! shows a value valid for its type: a true `PBool`, a length clamped to the capacity, the
//! longest valid UTF-8 prefix of a `PStr`.

mod support;

use pgl::prelude::*;
use std::io::{Seek, SeekFrom, Write};

const LAYOUT: &str = "values-bad-bytes";

/// Every field has alignment 1: `done` at 0, `name` at 1 (length 1..5, bytes 5..29), `key`
/// at 29 (length 29..33, bytes 33..49).
#[derive(Persistent)]
#[repr(C)]
struct Record {
    done: PBool,
    name: PStr<24>,
    key: PBytes<16>,
}

fn config() -> Config {
    let mut c = Config::small(LAYOUT);
    c.checksums = false;
    c
}

/// The bytes written over a `Record`: a `PBool` of 2, a `PStr` whose length is far past
/// its capacity and whose bytes turn invalid after "héllo", a `PBytes` of length u32::MAX.
fn garbage() -> Vec<u8> {
    let mut b = vec![0x02];
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    let mut name = b"h\xc3\xa9llo \xff\xfe rest".to_vec();
    name.resize(24, 0xc3);
    b.extend_from_slice(&name);
    b.extend_from_slice(&0x8000_0001u32.to_le_bytes());
    b.extend((0u8..16).map(|i| 0xf0 | i));
    assert_eq!(b.len(), core::mem::size_of::<Record>());
    b
}

/// An array of three `PStr<4>`: one cut inside a 2-byte char, one whose length says 200,
/// one of a lone continuation byte.
fn garbage_array() -> Vec<u8> {
    let mut b = Vec::new();
    for (len, bytes) in [(4u32, *b"ab\xc3\xa9"), (200, *b"wxyz"), (1, *b"\x80abc")] {
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&bytes);
    }
    b
}

fn check(r: &Record) {
    assert!(r.done.get());
    assert_eq!(r.done, PBool::TRUE);
    assert_eq!(r.done.to_string(), "true");
    let name: &str = &r.name;
    assert!(std::str::from_utf8(name.as_bytes()).is_ok());
    assert_eq!(name, "héllo ");
    assert_eq!(r.name.len(), "héllo ".len());
    assert!(r.name.len() <= PStr::<24>::capacity());
    assert_eq!(format!("{}|{:?}", r.name, r.name), "héllo |\"héllo \"");
    assert_eq!(r.name, PStr::<24>::new("héllo ").unwrap());
    assert_eq!(r.key.len(), 16);
    assert_eq!(
        r.key.as_slice(),
        &(0u8..16).map(|i| 0xf0 | i).collect::<Vec<_>>()[..]
    );
}

fn check_array(a: &[PStr<4>; 3]) {
    assert_eq!(a[0].as_str(), "abé");
    assert_eq!(a[1].as_str(), "wxyz");
    assert_eq!(a[2].as_str(), "");
    for s in a {
        assert!(s.len() <= 4);
        assert!(std::str::from_utf8(s.as_bytes()).is_ok());
    }
}

#[test]
fn wrappers_over_hand_written_bytes_read_valid_through_every_handle() {
    let path = support::test_dir().join(format!("pgl-values-bad-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let (root, arr) = {
        let pool = Pool::create(&path, &config()).unwrap();
        let root = pool.root::<Record>().unwrap();
        let arr = pool.tx(|tx| tx.alloc([PStr::<4>::new("ok")?; 3])).unwrap();
        drop(pool);
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        for (oid, bytes) in [(root.raw(), garbage()), (arr.raw(), garbage_array())] {
            f.seek(SeekFrom::Start(oid)).unwrap();
            f.write_all(&bytes).unwrap();
        }
        f.sync_all().unwrap();
        (root, arr)
    };
    let pool = Pool::open_with(&path, &config()).unwrap();
    // The bytes are the pool's as written.
    assert_eq!(pool.read_object(root.raw()).unwrap().1, garbage());
    assert_eq!(pool.read_object(arr.raw()).unwrap().1, garbage_array());

    check(&pool.get(root).unwrap());
    check_array(&pool.get(arr).unwrap());
    pool.tx(|tx| {
        check(&*tx.get(root)?);
        check_array(&*tx.get(arr)?);
        Ok(())
    })
    .unwrap();
    pool.tx(|tx| {
        let mut r = tx.open(root)?;
        check(&r);
        let name = r.place().project(|r| &r.name);
        assert_eq!(name.as_str(), "héllo ");
        let done = r.place().project(|r| &r.done);
        assert!(done.get());
        let mut a = tx.open(arr)?;
        check_array(&a);
        assert_eq!(a.place().at(0).as_str(), "abé");
        assert_eq!(a.place().at(1).len(), 4);
        // Writing through a place stores canonical bytes again.
        a.place().at(1).set(PStr::new("new")?);
        Ok(())
    })
    .unwrap();
    assert_eq!(pool.get(arr).unwrap()[1], "new");
    let (_, bytes) = pool.read_object(arr.raw()).unwrap();
    assert_eq!(&bytes[8..16], b"\x03\0\0\0new\0");
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
