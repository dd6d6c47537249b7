//! A damaged extension link that names another owner's group: two owners then reach the
//! same group, and a transaction reading one owner's groups (`tx.ext`) must not see them
//! change under its `&` references while another transaction writes the group through the
//! other owner (`tx.ext_mut`). The file is damaged by hand, with checksums off, so nothing
//! can notice the damage before the group is borrowed.

mod support;

use pgl::{Config, Pool};
use std::io::{Seek, SeekFrom, Write};
use std::sync::mpsc;
use std::time::Duration;
use v1::CounterExtFields as _;

mod v1 {
    use pgl::{extendible, Persistent};
    #[extendible]
    #[derive(Persistent)]
    #[pgl(id = 0x1ed5_aa01)]
    #[repr(C)]
    pub struct Counter {
        pub id: u64,
        #[extension(1, init = 0)]
        pub hits: u64,
    }
}

fn config() -> Config {
    let mut c = Config::small("shared-link");
    c.checksums = false;
    c
}

/// The extension link that ends the object at `off` (its last 8 bytes).
fn link_of(pool: &Pool, off: u64) -> (u64, u64) {
    let (_, bytes) = pool.read_object(off).unwrap();
    let at = bytes.len() - 8;
    (
        off + at as u64,
        u64::from_le_bytes(bytes[at..].try_into().unwrap()),
    )
}

#[test]
fn a_group_two_owners_link_does_not_change_under_a_reader_of_one() {
    let path = support::test_dir().join(format!("pgl-shared-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let (a, b) = {
        let pool = Pool::create(&path, &config()).unwrap();
        let a = pool
            .tx(|tx| tx.alloc_ext(v1::CounterData { id: 1, hits: 5 }))
            .unwrap();
        let b = pool
            .tx(|tx| tx.alloc_ext(v1::CounterData { id: 2, hits: 6 }))
            .unwrap();
        let (a_link_at, _) = link_of(&pool, a.raw());
        let (_, b_group) = link_of(&pool, b.raw());
        drop(pool);
        // The damage: `a`'s link now names `b`'s group.
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(a_link_at)).unwrap();
        f.write_all(&b_group.to_le_bytes()).unwrap();
        f.sync_all().unwrap();
        (a, b)
    };
    let pool = Pool::open_with(&path, &config()).unwrap();
    assert_eq!(
        pool.tx(|tx| Ok(*tx.ext(a)?.hits())).unwrap(),
        6,
        "`a` reaches `b`'s group"
    );

    let (go, wait) = mpsc::channel::<()>();
    let (done, written) = mpsc::channel::<String>();
    let (before, after) = std::thread::scope(|s| {
        let writer = pool.clone();
        s.spawn(move || {
            wait.recv().unwrap();
            let r = writer.tx(|tx| {
                tx.ext_mut(b)?.set_hits(99);
                Ok(())
            });
            let _ = done.send(format!("{r:?}"));
        });
        pool.tx(|tx| {
            let v = tx.ext(a)?;
            let before = *v.hits();
            go.send(()).unwrap();
            // The writer cannot commit while this reader borrows the group: give it time
            // to try, then read again through the same view.
            let _ = written.recv_timeout(Duration::from_millis(500));
            let after = *v.hits();
            Ok((before, after))
        })
        .unwrap()
    });
    assert_eq!(
        (before, after),
        (6, 6),
        "the group changed under a live read view of it"
    );
    // The writer went through once the reader was done.
    assert_eq!(pool.tx(|tx| Ok(*tx.ext(b)?.hits())).unwrap(), 99);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
