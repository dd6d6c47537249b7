//! More threads than lanes: a transaction waiting for a lane gets whichever lane comes
//! free first, not only the one it first waited for. (Review: it waited for one lane for
//! good, so a long transaction holding that lane held up threads while other lanes were
//! free: with 8 threads on 4 lanes and one 300 ms transaction, half the threads waited
//! 300 ms.)

mod support;

use pgl::{Config, Pool};
use std::sync::mpsc;
use std::time::Duration;

/// Runs a transaction on another thread that holds its lane until `go` is sent.
fn hold_a_lane(pool: &Pool) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (held_tx, held) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let pool = pool.clone();
    let t = std::thread::spawn(move || {
        pool.tx(|_| {
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            Ok(())
        })
        .unwrap();
    });
    held.recv().unwrap();
    (go, t)
}

#[test]
fn a_waiting_transaction_takes_the_lane_that_comes_free() {
    let path = support::test_dir().join(format!("pgl-tx-lane-wait-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut cfg = Config::small("lane-wait");
    cfg.lanes = 2;
    let pool = Pool::create(&path, &cfg).unwrap();
    // Both lanes busy: `long` until the end of the test, `short` until released below.
    let (long, long_t) = hold_a_lane(&pool);
    let (short, short_t) = hold_a_lane(&pool);
    // Two waiters: fresh threads have consecutive home lanes, so whichever lane each
    // waits for first, one of them waits for the long transaction's.
    let (done_tx, done) = mpsc::channel();
    let waiters: Vec<_> = (0..2)
        .map(|i| {
            let pool = pool.clone();
            let done_tx = done_tx.clone();
            std::thread::spawn(move || {
                pool.tx(|tx| tx.alloc(i as u64).map(drop)).unwrap();
                done_tx.send(i).unwrap();
            })
        })
        .collect();
    // Let both start waiting (were they not yet, they would find the lane free: the
    // test could then pass without showing anything, never fail wrongly).
    std::thread::sleep(Duration::from_millis(200));
    short.send(()).unwrap();
    short_t.join().unwrap();
    for _ in 0..2 {
        let got = done.recv_timeout(Duration::from_secs(10));
        assert!(
            got.is_ok(),
            "a waiter was still waiting 10 s after a lane came free"
        );
    }
    long.send(()).unwrap();
    long_t.join().unwrap();
    for w in waiters {
        w.join().unwrap();
    }
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
