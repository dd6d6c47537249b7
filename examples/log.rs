//! An event log shared by four threads: run it twice and the log grows.
//!
//! ```text
//! cargo run --release --example log
//! ```
//!
//! The log lives at `$PGL_LOG_EXAMPLE`, or `pgl-example.log` in the system's temporary
//! directory. Each run appends 1,000 events from four threads under the Frequency(8)
//! force policy, forces, and reclaims all but the newest 10,000 events. Kill it at any
//! point: the next run recovers every forced event and nothing after a hole.
//!
//! It prints what recovery found, then the forces this run made and their window: the
//! events a force made durable at once (completed, not yet durable when it began).

use pgl::log::{ForcePolicy, Log, LogConfig};
use std::path::PathBuf;

fn main() -> pgl::Result<()> {
    let path = std::env::var_os("PGL_LOG_EXAMPLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("pgl-example.log"));
    let log = if path.exists() {
        Log::open(&path)?
    } else {
        Log::create(
            &path,
            LogConfig::new(4 << 20).policy(ForcePolicy::Frequency(8)),
        )?
    };
    let r = log.recovery();
    println!(
        "{}: {} events recovered{}{}",
        path.display(),
        r.records,
        if r.records > 0 {
            format!(" (LSNs {} to {})", r.start_lsn, r.next_lsn - 1)
        } else {
            String::new()
        },
        match &r.torn {
            Some(t) => format!(", a torn event at LSN {} dropped", t.lsn),
            None => String::new(),
        }
    );

    std::thread::scope(|s| {
        for thread in 0..4u32 {
            let log = &log;
            s.spawn(move || {
                for i in 0..250u32 {
                    // Build the event in place: thread, sequence number, a label.
                    let mut res = log.reserve(16).expect("reserve");
                    res[..4].copy_from_slice(&thread.to_le_bytes());
                    res[4..8].copy_from_slice(&i.to_le_bytes());
                    res[8..].copy_from_slice(b"event!!!");
                    log.complete(res).expect("complete");
                }
            });
        }
    });
    log.force(log.completed_lsn())?;
    let keep_from = log.next_lsn().saturating_sub(10_000);
    if keep_from > log.start_lsn() {
        log.reclaim(keep_from - 1)?;
    }

    let s = log.stats();
    println!(
        "appended {} events with {} forces (mean window {:.1}, largest {}); {} live",
        s.completed,
        s.forces,
        s.window_mean(),
        s.window_max,
        log.iter().count()
    );
    Ok(())
}
