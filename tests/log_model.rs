//! Random op streams against a model, with repeated crashes: one thread appends records of
//! random sizes into a small area (so it wraps), forces, reclaims, and crashes — a random
//! subset of the words not yet on media reaches it — then recovers and carries on from
//! what survived, many times over. This is what exercises epochs: records left behind
//! by one crash lie in the area while the next generations write over and around them.
//!
//! After each crash the recovered log must hold, for every LSN from its start to its end,
//! exactly the bytes the model says that LSN was given; keep everything forced; and keep
//! the start an acknowledged reclaim set. `PGL_LOG_MODEL_SEEDS` sets the number of streams
//! (default 300).

mod support;
use support::Rng;

use pgl::log::{ForcePolicy, Log, LogConfig, Lsn};
use pgl::CrashSim;
use std::collections::BTreeMap;
use std::sync::Arc;

const DEVICE: u64 = 64 << 10;

/// Records ever given each LSN, newest last (after a crash an LSN may be given again).
#[derive(Default)]
struct Model {
    given: BTreeMap<Lsn, Vec<u8>>,
    forced: Lsn,
    start: Lsn,
}

fn stream(seed: u64) -> Result<u64, String> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let policy = match seed % 3 {
        0 => ForcePolicy::Sync,
        1 => ForcePolicy::GroupCommit(1 + rng.below(6) as u32),
        _ => ForcePolicy::Frequency(1 + rng.below(6) as u32),
    };
    let area = 4096 * (1 + rng.below(3));
    let mut dev: Arc<CrashSim> = CrashSim::new(DEVICE);
    let mut log = Log::create_sim(&dev, LogConfig::new(area).policy(policy)).unwrap();
    let mut m = Model {
        start: 1,
        ..Model::default()
    };
    let mut crashes = 0;
    for step in 0..400u64 {
        match rng.below(20) {
            0..=13 => {
                let max = if rng.below(4) == 0 { 1500 } else { 120 };
                let len = rng.below(max) as usize;
                let mut res = match log.reserve(len) {
                    Ok(r) => r,
                    Err(pgl::Error::LogFull { .. }) => {
                        let d = log.durable_lsn();
                        if d >= log.start_lsn() {
                            log.reclaim(d).map_err(|e| e.to_string())?;
                            m.start = d + 1;
                        }
                        continue;
                    }
                    Err(e) => return Err(format!("step {step}: reserve: {e}")),
                };
                let lsn = res.lsn();
                let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                res.copy_from_slice(&bytes);
                m.given.insert(lsn, bytes);
                log.complete(res).map_err(|e| e.to_string())?;
                m.forced = m.forced.max(log.durable_lsn());
            }
            14..=15 => {
                let l = log.completed_lsn();
                log.force(l).map_err(|e| e.to_string())?;
                m.forced = m.forced.max(l);
            }
            16 => {
                let d = log.durable_lsn();
                if d >= log.start_lsn() {
                    let upto = log.start_lsn() + rng.below(d - log.start_lsn() + 1);
                    log.reclaim(upto).map_err(|e| e.to_string())?;
                    m.start = upto + 1;
                }
            }
            _ => {
                // Crash: any subset of the words not yet on media may have reached it.
                crashes += 1;
                let cp = dev.crash_point();
                let p = rng.below(3);
                let mut keep = Rng(rng.next() | 1);
                dev = cp.device(DEVICE, |_| match p {
                    0 => false,
                    1 => true,
                    _ => keep.next() % 2 == 0,
                });
                drop(log);
                log = Log::open_sim(&dev).map_err(|e| format!("step {step}: recovery: {e}"))?;
                let r = log.recovery().clone();
                if r.next_lsn <= m.forced {
                    return Err(format!(
                        "step {step}: forced up to {}, recovered up to {}",
                        m.forced,
                        r.next_lsn - 1
                    ));
                }
                if r.start_lsn != m.start {
                    return Err(format!(
                        "step {step}: start {} after reclaims to {}",
                        r.start_lsn, m.start
                    ));
                }
                let mut end = r.start_lsn;
                for (want, rec) in (r.start_lsn..).zip(log.iter()) {
                    let rec = rec.map_err(|e| format!("step {step}: iter: {e}"))?;
                    if rec.lsn != want {
                        return Err(format!("step {step}: LSN {} where {want} was due", rec.lsn));
                    }
                    if m.given.get(&rec.lsn) != Some(&rec.payload) {
                        return Err(format!(
                            "step {step}, crash {crashes}: LSN {} holds bytes it was not \
                             last given (a record from an earlier generation?)",
                            rec.lsn
                        ));
                    }
                    end = want + 1;
                }
                if end != r.next_lsn {
                    return Err(format!(
                        "step {step}: read up to {end}, recovery said {}",
                        r.next_lsn
                    ));
                }
                // Carry on from what survived: later LSNs will be given anew.
                m.given.retain(|&l, _| l < r.next_lsn);
                m.forced = r.next_lsn - 1;
            }
        }
    }
    Ok(crashes)
}

#[test]
fn random_streams_with_repeated_crashes_match_the_model() {
    let seeds: u64 = std::env::var("PGL_LOG_MODEL_SEEDS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(300);
    let mut crashes = 0;
    let mut failures = Vec::new();
    for seed in 0..seeds {
        match stream(seed) {
            Ok(0) => failures.push(format!("seed {seed}: the stream never crashed")),
            Ok(c) => crashes += c,
            Err(e) => failures.push(format!("seed {seed}: {e}")),
        }
    }
    let line = format!("log model: {seeds} streams, {crashes} crashes recovered\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    assert!(
        failures.is_empty(),
        "{} failing stream(s), first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}
