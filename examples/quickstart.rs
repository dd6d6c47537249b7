//! A persistent run counter and log: run it twice and both grow.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```
//!
//! The pool lives at `$PGL_QUICKSTART_POOL`, or `pgl-quickstart.pool` in the system's
//! temporary directory. The first run creates it; later runs open it, and one transaction
//! bumps the counter and appends a node to a linked list. Kill the program at any point:
//! the next run sees either all of a run's changes or none of them.

// ANCHOR: types
use pgl::prelude::*;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// The pool's root object: where everything else is reached from.
#[derive(Persistent)]
#[repr(C)]
struct Root {
    /// How many times the program ran.
    runs: u64,
    /// The oldest node of the log (null while empty).
    head: Oid<Node>,
    /// The newest node, so that appending needs no walk.
    tail: Oid<Node>,
}

/// One entry of the log: which run, and when.
#[derive(Persistent)]
#[repr(C)]
struct Node {
    run: u64,
    unix_secs: u64,
    next: Oid<Node>,
}
// ANCHOR_END: types

/// The name programs open this pool with; another program's pool is refused.
const LAYOUT: &str = "quickstart";

fn pool_path() -> PathBuf {
    match std::env::var_os("PGL_QUICKSTART_POOL") {
        Some(p) => PathBuf::from(p),
        None => std::env::temp_dir().join("pgl-quickstart.pool"),
    }
}

// ANCHOR: run
fn run(path: &std::path::Path) -> pgl::Result<()> {
    // Open the pool, or create it on the first run (Config's default size, 64 MiB rounded
    // down to whole zones; a sparse file).
    let pool = if path.exists() {
        Pool::open(path, LAYOUT)?
    } else {
        Pool::create(path, &Config::new(LAYOUT))?
    };
    let root = pool.root::<Root>()?; // zero-filled the first time

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // One transaction: all of it becomes durable, or (crash, error) none of it.
    let runs = pool.tx(|tx| {
        let mut r = tx.open(root)?;
        let runs = r.runs + 1;
        r.set_runs(runs); // the generated setters log only the field they change
        let node = tx.alloc(Node {
            run: runs,
            unix_secs: now,
            next: Oid::NULL,
        })?;
        if r.tail.is_null() {
            r.set_head(node);
        } else {
            tx.open(r.tail)?.set_next(node);
        }
        r.set_tail(node);
        Ok(runs)
    })?;

    println!("runs: {runs}");
    let mut at = pool.get(root)?.head;
    while !at.is_null() {
        let node = pool.get(at)?;
        let ago = now.saturating_sub(node.unix_secs);
        println!(
            "  run {:>3} at unix time {} ({ago} s ago)",
            node.run, node.unix_secs
        );
        at = node.next;
    }
    Ok(())
}
// ANCHOR_END: run

fn main() -> std::process::ExitCode {
    let path = pool_path();
    let state = if path.exists() {
        "opened"
    } else {
        "created; delete the file to start over"
    };
    println!("pool: {} ({state})", path.display());
    match run(&path) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
