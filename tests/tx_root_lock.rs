//! `pool.root` inside a transaction never waits for the root's creation while holding its
//! lane: the creator needs a lane too, and with every lane held by such waiters nothing
//! could move.

mod support;

use pgl::{Config, Pool};
use std::sync::{Arc, Barrier};
use std::time::Duration;

type Root = [u64; 4];

#[test]
fn root_lookups_inside_transactions_do_not_starve_the_roots_creator() {
    starve_the_creator("root", |pool| pool.root::<Root>().map(|_| ()));
}

#[test]
fn pending_migration_inside_transactions_does_not_starve_the_roots_creator() {
    starve_the_creator("pending", |pool| pool.pending_migration().map(|_| ()));
}

/// Two transactions hold both lanes and call `op` while another thread creates the
/// root (holding the root lock, waiting for a lane).
fn starve_the_creator(name: &str, op: fn(&Pool) -> pgl::Result<()>) {
    let path = support::test_dir().join(format!("pgl-rootlock-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // Two lanes: both taken by transactions below.
    let pool = Pool::create(&path, &Config::small("rootlock")).unwrap();
    let (done_send, done) = std::sync::mpsc::channel();
    let inside = Arc::new(Barrier::new(3));
    let go = Arc::new(Barrier::new(3));
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (pool, inside, go, done_send) =
            (pool.clone(), inside.clone(), go.clone(), done_send.clone());
        workers.push(std::thread::spawn(move || {
            let mut first = true;
            let r = pool.tx(|_| {
                if std::mem::take(&mut first) {
                    inside.wait(); // both lanes are held now
                    go.wait(); // the creator holds the root lock, waiting for a lane
                }
                op(&pool)
            });
            let _ = done_send.send(r);
        }));
    }
    inside.wait();
    let creator = {
        let (pool, done_send) = (pool.clone(), done_send.clone());
        std::thread::spawn(move || {
            let _ = done_send.send(pool.root::<Root>().map(|_| ()));
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    go.wait();
    for _ in 0..3 {
        let r = done.recv_timeout(Duration::from_secs(30)).expect(
            "hung: the root's creator waits for a lane held by transactions waiting for it",
        );
        // Inside a transaction a root not created yet is refused; no other error.
        assert!(
            matches!(r, Ok(()) | Err(pgl::Error::InTransaction { .. })),
            "{r:?}"
        );
    }
    creator.join().unwrap();
    for w in workers {
        w.join().unwrap();
    }
    assert!(pool.root::<Root>().is_ok());
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
