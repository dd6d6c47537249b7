//! A pool file a crash interrupted in the middle of a transaction, for the tests of
//! read-only inspection (`Pool::open_read_only`, `pgl info|check|dump|scrub`).

use pgl::prelude::*;
use pgl::CrashSim;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

#[derive(Persistent)]
#[repr(C)]
pub struct Root {
    pub cold: Oid<Item>,
    pub hot: Oid<Item>,
}

#[derive(Persistent)]
#[repr(C)]
pub struct Item {
    pub value: u64,
    pub label: [u8; 24],
}

/// `cold`'s label, which the interrupted transaction does not change.
pub const COLD_LABEL: [u8; 24] = *b"cold, never changed.....";

/// A pool file removed when the test ends.
pub struct TempFile(pub PathBuf);

impl TempFile {
    /// `<test dir>/pgl-<test>-<pid>-<name>`, removed if it exists.
    pub fn new(test: &str, name: &str) -> TempFile {
        let p = super::test_dir().join(format!("pgl-{test}-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempFile(p)
    }

    /// The path, as a command-line argument.
    pub fn arg(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The bytes of a pool of layout `layout` a crash interrupted in the middle of a
/// transaction that set `hot`'s value to 3, once its record was sealed (the next open
/// replays it), and the oids of `cold` (value 1, which that transaction did not touch)
/// and `hot` (value 2 before it).
pub fn crashed_mid_transaction(layout: &str) -> (Vec<u8>, Oid<Item>, Oid<Item>) {
    let cfg = Config::small(layout);
    let sim = CrashSim::new(cfg.size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Root>().unwrap();
    let (cold, hot) = pool
        .tx(|tx| {
            let cold = tx.alloc(Item {
                value: 1,
                label: COLD_LABEL,
            })?;
            let hot = tx.alloc(Item {
                value: 2,
                label: *b"hot, changed at crash...",
            })?;
            let mut r = tx.open(root)?;
            r.cold = cold;
            r.hot = hot;
            Ok((cold, hot))
        })
        .unwrap();
    // Closed and opened again: the allocating transaction's retire mark is durable, and
    // the only record a crash below leaves to replay is the one that changes `hot`.
    drop(pool);
    let pool = Pool::open_sim(&sim, layout).unwrap();
    let points = Arc::new(Mutex::new(Vec::new()));
    let sink = points.clone();
    sim.set_fence_hook(move |s: &CrashSim| sink.lock().unwrap().push(s.crash_point()));
    pool.tx(|tx| {
        let mut h = tx.open(hot)?;
        h.value = 3;
        h.label = *b"hot, changed by the tx..";
        Ok(())
    })
    .unwrap();
    sim.clear_fence_hook();
    // And the instant after it returned: its retire mark is written but not yet flushed.
    let mut points = points.lock().unwrap();
    points.push(sim.crash_point());
    let image = points
        .iter()
        .find_map(|cp| {
            let dev = cp.device(cfg.size, |_| false);
            let replayed = Pool::open_sim(&dev, layout).ok()?.stats().records_replayed;
            (replayed > 0).then(|| cp.image(|_| false))
        })
        .expect("a crash point with a sealed record to replay");
    let bytes = image
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .take(sim.len() as usize)
        .collect();
    (bytes, cold, hot)
}

/// Overwrites `bytes.len()` bytes of `data` at `offset`.
pub fn scribble(data: &mut [u8], offset: u64, bytes: &[u8]) {
    data[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
}
