//! A crash while creating a pool or a log: a child process (this test binary, re-run with
//! `PGL_CREATE_CHILD=<path>`) creates a large preallocated pool or log at the path, and the
//! parent kills it with SIGKILL at a random moment of the create. Afterwards the path holds
//! either nothing (create again) or a whole pool or log that opens: never a half-made file,
//! which every open would refuse as not a pool and every create as already there (found by
//! a user-perspective review: the file was made and formatted at the path itself).
//!
//! `PGL_CREATE_KILLS` sets the number of kills (default 16).

mod support;

use pgl::log::{Log, LogConfig};
use pgl::{Config, Pool};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "PGL_CREATE_CHILD";
const KIND_ENV: &str = "PGL_CREATE_KIND";
const LAYOUT: &str = "create-interrupted";
/// Big enough that preallocating it takes a while (tens of ms on tmpfs).
const SIZE: u64 = 256 << 20;

fn create(kind: &str, path: &Path) {
    match kind {
        "pool" => drop(
            Pool::create(path, &Config::new(LAYOUT).size(SIZE).preallocate(true))
                .expect("create pool"),
        ),
        _ => drop(Log::create(path, LogConfig::new(SIZE).preallocate(true)).expect("create log")),
    }
}

/// Whether `path` holds a pool or log that opens (`kind`), or an error saying why not.
fn opens(kind: &str, path: &Path) -> Result<(), String> {
    match kind {
        "pool" => Pool::open(path, LAYOUT).map(drop),
        _ => Log::open(path).map(drop),
    }
    .map_err(|e| e.to_string())
}

#[test]
fn create_child_entry() {
    if let (Ok(path), Ok(kind)) = (std::env::var(CHILD_ENV), std::env::var(KIND_ENV)) {
        println!("PGL-CREATE start");
        create(&kind, Path::new(&path));
        println!("PGL-CREATE done");
    }
}

/// The hidden temporary files a create leaves beside `path` when killed.
fn temporaries(path: &Path) -> Vec<PathBuf> {
    let prefix = format!(".{}.pgl-new-", path.file_name().unwrap().to_string_lossy());
    std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .collect()
}

#[test]
fn a_create_killed_at_any_moment_leaves_nothing_or_a_whole_file() {
    let kills: u64 = std::env::var("PGL_CREATE_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let dir = support::test_dir();
    let exe = std::env::current_exe().unwrap();
    let mut rng = support::Rng(0x5eed_c0de);
    let (mut nothing, mut whole) = (0u64, 0u64);
    for kind in ["pool", "log"] {
        let path = dir.join(format!(
            "pgl-create-interrupted-{}-{kind}",
            std::process::id()
        ));
        // How long a whole create takes here: kills land anywhere within it.
        let t0 = Instant::now();
        create(kind, &path);
        let span = t0.elapsed().as_micros().max(1) as u64;
        std::fs::remove_file(&path).unwrap();
        for _ in 0..kills / 2 {
            let mut child = Command::new(&exe)
                .args(["create_child_entry", "--exact", "--nocapture"])
                .env(CHILD_ENV, &path)
                .env(KIND_ENV, kind)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn child");
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            while !line.contains("PGL-CREATE start") {
                line.clear();
                if out.read_line(&mut line).unwrap() == 0 {
                    break;
                }
            }
            std::thread::sleep(Duration::from_micros(rng.next() % (span * 5 / 4)));
            child.kill().expect("kill -9");
            child.wait().expect("wait");
            if path.exists() {
                opens(kind, &path).unwrap_or_else(|e| {
                    panic!(
                        "a {kind} killed while being created left a file that does not open: {e}"
                    )
                });
                whole += 1;
                std::fs::remove_file(&path).unwrap();
            } else {
                nothing += 1;
            }
            for t in temporaries(&path) {
                std::fs::remove_file(t).unwrap();
            }
        }
    }
    println!("kills during create: {nothing} left nothing, {whole} a whole pool or log");
    assert!(
        nothing > 0,
        "no kill landed inside a create (spans too short?)"
    );
}

/// A stale temporary file of `path`'s creates, as a create by process `pid` names it.
fn temporary(path: &Path, pid: u32, n: u64) -> PathBuf {
    let name = path.file_name().unwrap().to_string_lossy();
    path.with_file_name(format!(".{name}.pgl-new-{pid}-{n}"))
}

#[test]
fn the_next_create_removes_the_temporaries_of_dead_creators_only() {
    // Found by a user review: a create killed before publishing left its temporary file
    // (as large as the pool) beside the path for ever.
    let dir = support::test_dir();
    // A pid that is gone: a child that has exited and been reaped.
    let mut dead = Command::new("true").spawn().expect("spawn true");
    let dead_pid = dead.id();
    dead.wait().expect("wait");
    // A pid that is alive: a child blocked reading its stdin until we close it.
    let mut live = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn cat");
    let live_pid = live.id();
    let me = std::process::id();
    for kind in ["pool", "log"] {
        let path = dir.join(format!("pgl-create-stale-{me}-{kind}"));
        let other = dir.join(format!("pgl-create-stale-{me}-{kind}-other"));
        let stale = temporary(&path, dead_pid, 0);
        let kept = [
            temporary(&path, live_pid, 0),
            temporary(&path, me, 1 << 40),
            // Another path's, though its creator is dead too.
            temporary(&other, dead_pid, 0),
            // Not a name a create makes.
            path.with_file_name(format!(
                ".{}.pgl-new-{dead_pid}-x",
                path.file_name().unwrap().to_string_lossy()
            )),
        ];
        for t in kept.iter().chain([&stale]) {
            std::fs::write(t, b"half a pool").unwrap();
        }
        create(kind, &path);
        assert!(
            !stale.exists(),
            "the {kind} create left the temporary file of a dead creator"
        );
        for t in &kept {
            assert!(t.exists(), "the {kind} create removed {}", t.display());
            std::fs::remove_file(t).unwrap();
        }
        opens(kind, &path).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
    drop(live.stdin.take());
    live.wait().expect("wait");
}
