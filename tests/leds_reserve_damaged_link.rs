//! A damaged base link of an `#[extendible]` object, as a scribble in a pool that keeps
//! no checksums (or a crafted file) leaves it: a count of inline groups (its low 4 bits)
//! that the object's reserve cannot hold is `Error::Corrupt` on every path that reads it
//! (`ext`, `free`, `copy_ext`), never read as inline groups, and frees or copies nothing.
//! Every group has a field and all but the last one a reserve holds end with an 8-byte
//! link, so a reserve of `N` bytes holds at most `1 + (N - 1) / 9` (2 for 16 bytes).

mod support;

use pgl::{Config, Error, Pool};

mod v1 {
    use pgl::{extendible, Persistent};
    /// Group 1 fills the 16-byte reserve, which holds at most 2 groups by size.
    #[extendible(reserve = 16)]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_f001)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        #[extension(1, replaces = key, init = |old| u64::from(old.key()))]
        pub key64: u64,
    }
}

mod bare {
    use pgl::{extendible, Persistent};
    /// No reserve, and this build knows no group.
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_f002)]
    #[repr(C)]
    pub struct Bare {
        pub key: u64,
    }
}

use v1::NodeExtFields as _;

fn config() -> Config {
    let mut c = Config::small("damaged-reserve-link");
    c.checksums = false;
    c
}

/// Writes `link` over the link that ends the value (`value` bytes) of the object at `off`.
fn forge(path: &std::path::Path, off: u64, value: usize, link: u64) {
    support::file_write(path, off + value as u64 - 8, &link.to_le_bytes());
}

fn corrupt<R: std::fmt::Debug>(what: &str, r: pgl::Result<R>) {
    match r {
        Err(Error::Corrupt {
            what: w, detail, ..
        }) => {
            assert_eq!(w, "extension link", "{what}: {detail}");
            assert!(detail.contains("kept inline"), "{what}: {detail}");
        }
        other => panic!("{what}: {other:?}"),
    }
}

#[test]
fn an_inline_count_the_reserve_cannot_hold_is_corrupt_on_every_path() {
    let path = support::test_dir().join(format!("pgl-reserve-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let (node, bare) = {
        let pool = Pool::create(&path, &config()).unwrap();
        pool.tx(|tx| {
            Ok((
                tx.alloc_ext(v1::NodeData { value: 1, key64: 7 })?,
                tx.alloc_ext(bare::BareData { key: 3 })?,
            ))
        })
        .unwrap()
    };
    // 15 inline groups in a 16-byte reserve; 1 in an object without a reserve.
    forge(&path, node.raw(), size_of::<v1::Node>(), 15);
    forge(&path, bare.raw(), size_of::<bare::Bare>(), 1);
    let pool = Pool::open_with(&path, &config()).unwrap();
    corrupt("ext", pool.tx(|tx| Ok(*tx.ext(node)?.key())));
    corrupt("ext_mut", pool.tx(|tx| tx.ext_mut(node).map(drop)));
    corrupt("copy_ext", pool.tx(|tx| tx.copy_ext(node)));
    corrupt("free", pool.tx(|tx| tx.free(node)));
    corrupt("ext (no reserve)", pool.tx(|tx| tx.ext(bare).map(drop)));
    corrupt("copy_ext (no reserve)", pool.tx(|tx| tx.copy_ext(bare)));
    corrupt("free (no reserve)", pool.tx(|tx| tx.free(bare)));
    assert_eq!(pool.objects().unwrap().len(), 2, "nothing freed or copied");
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
