//! The `pgl` command, run as a user runs it: the built binary on temporary pool files.
//! Output is snapshotted with paths, UUIDs and dates redacted.

mod support;

use pgl::prelude::*;
use pgl::FlushMode;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

const LAYOUT: &str = "cli-test";

#[derive(Persistent)]
#[repr(C)]
struct Root {
    count: u64,
    first: Oid<Item>,
}

#[derive(Persistent)]
#[repr(C)]
struct Item {
    value: u64,
    label: [u8; 24],
    next: Oid<Item>,
}

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("pgl-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create temp dir");
        TempDir(d)
    }
    /// A directory on tmpfs (`/dev/shm`), where a load from a hole of a pool's mapping
    /// allocates the page; `None` without one.
    fn on_tmpfs(name: &str) -> Option<TempDir> {
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            return None;
        }
        let d = shm.join(format!("pgl-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create tmpfs dir");
        Some(TempDir(d))
    }
    fn join(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `pgl args...` with a fixed flush mode, so that `info` prints the same everywhere.
fn pgl(dir: &TempDir, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_pgl"))
        .args(args)
        .env("PGL_FLUSH", "msync")
        .output()
        .expect("run pgl");
    let redact = |b: &[u8]| redact(&String::from_utf8_lossy(b), &dir.0);
    Output {
        code: out.status.code().expect("pgl exited by a signal"),
        stdout: redact(&out.stdout),
        stderr: redact(&out.stderr),
    }
}

/// Replaces the temp dir, the UUID and the creation date, which differ from run to run.
fn redact(s: &str, dir: &Path) -> String {
    let s = s.replace(&*dir.to_string_lossy(), "[DIR]");
    s.lines()
        .map(|l| {
            if l.starts_with("uuid ") {
                "uuid      [UUID]".to_owned()
            } else if l.starts_with("created ") && l.ends_with(" UTC") {
                "created   [DATE]".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Creates a small pool with `pgl create` and fills it with a root and three items; returns
/// its path and what `pgl create` printed.
fn sample_pool_with_output(dir: &TempDir) -> (PathBuf, String) {
    let path = dir.join("sample.pool");
    let p = path.to_str().expect("utf-8 temp path");
    let out = pgl(
        dir,
        &[
            "create",
            p,
            "--layout",
            LAYOUT,
            "--size",
            "4M",
            "--chunk-size",
            "64K",
            "--rows",
            "8",
            "--lanes",
            "2",
            "--lane-size",
            "64K",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);

    let pool = Pool::open_with(&path, &Config::new(LAYOUT).flush(FlushMode::Msync)).unwrap();
    let root = pool.root::<Root>().unwrap();
    pool.tx(|tx| {
        let mut r = tx.open(root)?;
        for i in 1..=3u64 {
            let mut label = [0u8; 24];
            let text = format!("item number {i}");
            label[..text.len()].copy_from_slice(text.as_bytes());
            r.first = tx.alloc(Item {
                value: i * 100,
                label,
                next: r.first,
            })?;
            r.count += 1;
        }
        Ok(())
    })
    .unwrap();
    (path, out.stdout)
}

fn sample_pool(dir: &TempDir) -> PathBuf {
    sample_pool_with_output(dir).0
}

/// The offsets of the pool's objects of type `Item`, in offset order.
fn items(path: &Path) -> Vec<u64> {
    let pool = Pool::open(path, LAYOUT).unwrap();
    let mut v: Vec<u64> = pool
        .objects()
        .unwrap()
        .into_iter()
        .filter(|(_, h)| h.type_id == Item::TYPE_ID)
        .map(|(off, _)| off)
        .collect();
    v.sort_unstable();
    v
}

fn scribble(path: &Path, offset: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn info_of_a_pool_an_older_build_made_names_its_size_classes() {
    // A format-7 pool (tests/fixtures) keeps the size classes its runs were cut to; `info`
    // reads it without upgrading it, and says which table it uses.
    let dir = TempDir::new("older");
    let path = support::fixture::unpack("pool-v7.bin", "cli-");
    let p = path.to_str().unwrap();
    let info = pgl(&dir, &["info", p]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(info.code, 0, "{}", info.stderr);
    assert!(
        info.stdout.contains("format    version 7,"),
        "{}",
        info.stdout
    );
    assert!(
        info.stdout
            .contains("  size classes    eighth steps (a pool made before format 8)\n"),
        "{}",
        info.stdout
    );
}

#[test]
fn info_check_and_dump_of_a_healthy_pool() {
    let dir = TempDir::new("healthy");
    let (path, created) = sample_pool_with_output(&dir);
    insta::assert_snapshot!("create", created);
    let p = path.to_str().unwrap();

    let info = pgl(&dir, &["info", p]);
    assert_eq!(info.code, 0, "{}", info.stderr);
    assert!(info.stdout.contains(&format!("{:#010x}", Item::TYPE_ID)));
    insta::assert_snapshot!("info", info.stdout);

    // `--objects` lists the oids that `dump` and `inject object` take.
    let listed = pgl(&dir, &["info", p, "--objects"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    for item in items(&path) {
        let line = format!("{item:#x}");
        assert!(
            listed
                .stdout
                .lines()
                .any(|l| l.trim_start().starts_with(&line) && l.ends_with("cli::Item")),
            "{line} not listed: {}",
            listed.stdout
        );
    }

    let check = pgl(&dir, &["check", p]);
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert_eq!(check.stderr, "");
    insta::assert_snapshot!("check_clean", check.stdout);

    let first = items(&path)[0];
    let dump = pgl(&dir, &["dump", p, &format!("{first:#x}")]);
    assert_eq!(dump.code, 0, "{}", dump.stderr);
    assert!(dump.stdout.contains("(valid)"));
    assert!(dump.stdout.contains("item num"));
    insta::assert_snapshot!("dump", dump.stdout);

    let decimal = pgl(&dir, &["dump", p, &first.to_string(), "--max", "16"]);
    assert_eq!(decimal.code, 0, "{}", decimal.stderr);
    assert!(decimal.stdout.contains("more bytes not shown"));
}

#[test]
fn check_reports_a_scribbled_object_and_exits_1() {
    let dir = TempDir::new("scribble");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let victim = items(&path)[1];
    // A pool offset is a file offset: overwrite part of the label, as a stray write would.
    scribble(&path, victim + 10, b"SCRIBBLE");

    let check = pgl(&dir, &["check", p]);
    assert_eq!(check.code, 1, "{}\n{}", check.stdout, check.stderr);
    assert!(
        check
            .stdout
            .contains(&format!("{victim:#x}: checksum mismatch")),
        "{}",
        check.stdout
    );
    assert!(
        check.stdout.contains("`pgl scrub --repair` rebuilds"),
        "check says how to repair: {}",
        check.stdout
    );
    assert!(
        !check.stdout.contains("parity could not rebuild"),
        "check tried no repair: {}",
        check.stdout
    );
    insta::assert_snapshot!("check_scribbled", check.stdout);

    // Damage shown is a problem found: exit 1, as `check` does.
    let dump = pgl(&dir, &["dump", p, &format!("{victim:#x}")]);
    assert_eq!(dump.code, 1, "{}", dump.stderr);
    assert!(dump.stdout.contains("MISMATCH"), "{}", dump.stdout);
}

#[test]
fn check_reports_a_bitmap_word_beyond_repair_and_exits_1() {
    let dir = TempDir::new("bitmap");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let victim = items(&path)[0];
    let (word, parity) = {
        let pool = Pool::open(&path, LAYOUT).unwrap();
        let info = pool.info();
        let g = info.header.geo;
        let pos = g.locate(victim, info.header.zones).unwrap();
        let classes = pgl::SizeClasses::new(g.chunk_size, info.header.class_table());
        let class = classes
            .class_for(std::mem::size_of::<Item>() as u64 + 16)
            .unwrap();
        let run = g.chunk_offset(pos.zone, pos.chunk);
        let block = (victim - 16 - run - classes.header(class)) / classes.block(class);
        let word = run + block / 32 * 8;
        let rel = word - g.zones_offset();
        let parity = g.parity_offset(rel / g.zone_size()) + rel % g.zone_size() % g.row_size();
        (word, parity)
    };
    // The word and the parity that could rebuild it, both overwritten.
    scribble(&path, word, &[0x5a; 8]);
    scribble(&path, parity, &[0xa5; 8]);

    let check = pgl(&dir, &["check", p]);
    assert_eq!(check.code, 1, "{}\n{}", check.stdout, check.stderr);
    assert!(
        check.stdout.contains("1 run(s) out of service"),
        "{}",
        check.stdout
    );
    assert!(
        check.stdout.contains(&format!("{word:#x} does not verify")),
        "{}",
        check.stdout
    );
    assert!(
        check.stdout.contains("objects   1 checked, 0 bad"),
        "the root verified (the items all lie under the word): {}",
        check.stdout
    );
    // info counts what it can list; scrub reports the word (and the parity page that
    // disagrees) and says damage remains.
    let info = pgl(&dir, &["info", p]);
    assert_eq!(info.code, 0, "{}", info.stderr);
    assert!(
        info.stdout.contains("under 1 allocation bitmap word(s)"),
        "{}",
        info.stdout
    );
    let scrub = pgl(&dir, &["scrub", p]);
    assert_eq!(scrub.code, 1, "{}\n{}", scrub.stdout, scrub.stderr);
    assert!(
        scrub
            .stdout
            .contains("1 allocation bitmap word(s) damaged, 0 rebuilt"),
        "{}",
        scrub.stdout
    );
    // The pool still opens, and its objects read back.
    let pool = Pool::open(&path, LAYOUT).unwrap();
    assert_eq!(pool.stats().runs_quarantined, 1);
    assert_eq!(
        pool.get(Oid::<Item>::from_raw(victim)).unwrap().value % 100,
        0
    );
}

/// `pgl check` reports a damaged header copy, and leaves it to a program's open to rewrite
/// it: a second check reports it again, and after an open the check is clean.
#[test]
fn check_reports_a_damaged_header_copy_without_repairing_it() {
    let dir = TempDir::new("header");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    scribble(&path, 40, b"garbage!"); // inside copy A's layout name

    let first = pgl(&dir, &["check", p]);
    assert_eq!(first.code, 1, "{}\n{}", first.stdout, first.stderr);
    assert!(
        first.stdout.contains("header    one copy is damaged"),
        "{}",
        first.stdout
    );
    let again = pgl(&dir, &["check", p]);
    assert_eq!(again.stdout, first.stdout, "the first check wrote the file");

    drop(Pool::open(&path, LAYOUT).unwrap());
    let second = pgl(&dir, &["check", p]);
    assert_eq!(second.code, 0, "{}\n{}", second.stdout, second.stderr);
    assert!(
        second.stdout.ends_with("result: clean"),
        "{}",
        second.stdout
    );
}

/// A crash between the writes of a header update's two copies leaves copy A one
/// generation ahead of copy B: not damage. `pgl check` says a program's open completes it and
/// exits 0 (it reported a damaged copy rewritten, exit 1: a false alarm).
#[test]
fn check_completes_a_header_update_a_crash_interrupted_without_alarm() {
    let dir = TempDir::new("header-interrupted");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let page = std::fs::read(&path).unwrap()[..4096].to_vec();
    let h = pgl::Header::decode(&page).unwrap();
    let ahead = pgl::Header {
        generation: h.generation + 1,
        ..h
    };
    scribble(&path, 0, &ahead.encode()); // copy A written, copy B not yet

    let check = pgl(&dir, &["check", p]);
    assert_eq!(check.code, 0, "{}\n{}", check.stdout, check.stderr);
    assert!(
        check.stdout.contains(
            "header    a header update a crash interrupted left one copy older (not damage: \
             a program's next open completes it)"
        ) && check.stdout.ends_with("result: clean"),
        "{}",
        check.stdout
    );
    drop(Pool::open(&path, LAYOUT).unwrap());
    let again = pgl(&dir, &["check", p]);
    assert!(
        again.stdout.contains("header    both copies valid"),
        "{}",
        again.stdout
    );
}

/// A damaged copy of a redo lane (its seal, or its retire mark) in a pool closed cleanly:
/// a program's open rewrites it from the other copy; `pgl check` reports it and exits 1 (it said
/// "lanes valid" and exited 0). A program's open rewrites it: the next check is clean.
#[test]
fn check_reports_a_damaged_lane_copy_and_exits_1() {
    let dir = TempDir::new("lane");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    // The seal of copy 1 of lane 0 (the lane the sample's transaction used), then the
    // retire mark of copy 0 of lane 1 (never used: its bytes were zeros).
    for (lane, copy, at, len) in [("0", "1", "64", "8"), ("1", "0", "0", "16")] {
        let inj = pgl(&dir, &["inject", p, "lane", lane, copy, at, len]);
        assert_eq!(inj.code, 0, "{}", inj.stderr);
        let check = pgl(&dir, &["check", p]);
        assert_eq!(
            check.code, 1,
            "lane {lane} copy {copy}: {}\n{}",
            check.stdout, check.stderr
        );
        assert!(
            check.stdout.contains(
                "  lanes     1 damaged lane copy, the other valid (a program's next open \
                 rewrites it from the other; the pool is consistent)"
            ) && check.stdout.ends_with("result: 1 problem(s)"),
            "lane {lane} copy {copy}: {}",
            check.stdout
        );
        drop(Pool::open(&path, LAYOUT).unwrap());
        let again = pgl(&dir, &["check", p]);
        assert_eq!(again.code, 0, "{}", again.stdout);
        assert!(
            again.stdout.contains("  lanes     valid;"),
            "{}",
            again.stdout
        );
    }
}

/// `pgl inject header` damages a header copy for good: closing the pool after the
/// injection must not write the copy back whole, or `pgl check` finds nothing.
#[test]
fn injected_header_damage_survives_the_close_and_check_reports_it() {
    let dir = TempDir::new("inject-header");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let inj = pgl(&dir, &["inject", p, "header", "0", "0", "64"]);
    assert_eq!(inj.code, 0, "{}", inj.stderr);
    let check = pgl(&dir, &["check", p]);
    assert_eq!(check.code, 1, "{}\n{}", check.stdout, check.stderr);
    assert!(
        check.stdout.contains("header    one copy is damaged"),
        "{}",
        check.stdout
    );
    drop(Pool::open(&path, LAYOUT).unwrap());
    assert_eq!(pgl(&dir, &["check", p]).code, 0, "the open repaired it");

    let inj = pgl(&dir, &["inject", p, "header", "1", "100", "8"]);
    assert_eq!(inj.code, 0, "{}", inj.stderr);
    let check = pgl(&dir, &["check", p]);
    assert_eq!(
        check.code, 1,
        "copy B too: {}\n{}",
        check.stdout, check.stderr
    );
}

#[test]
fn errors_exit_2_with_the_message_on_stderr() {
    let dir = TempDir::new("errors");
    let missing = dir.join("missing.pool");
    let m = missing.to_str().unwrap();
    for cmd in ["check", "info", "scrub"] {
        let out = pgl(&dir, &[cmd, m]);
        assert_eq!(out.code, 2, "{cmd}");
        assert_eq!(out.stdout, "", "{cmd}");
        // All three open the pool read-only (`scrub` without `--repair` only reports).
        let open = "open read-only";
        assert_eq!(
            out.stderr,
            format!(
                "error: {open} [DIR]/missing.pool: No such file or directory (os error 2); \
                 check the path, or create the pool (Pool::create, `pgl create`)"
            ),
            "{cmd}"
        );
    }

    let junk = dir.join("junk.pool");
    std::fs::write(&junk, vec![0x5a; 64 << 10]).unwrap();
    let out = pgl(&dir, &["check", junk.to_str().unwrap()]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .starts_with("error: [DIR]/junk.pool: not a pgl pool"),
        "{}",
        out.stderr
    );

    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let out = pgl(&dir, &["create", p]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("already exists"), "{}", out.stderr);

    let out = pgl(&dir, &["dump", p, "0x10"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .starts_with("error: [DIR]/sample.pool: invalid oid 0x10"),
        "{}",
        out.stderr
    );

    let out = pgl(&dir, &["dump", p, "ten"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("is not an oid"), "{}", out.stderr);

    let out = pgl(
        &dir,
        &[
            "create",
            dir.join("x").to_str().unwrap(),
            "--chunk-size",
            "1000",
        ],
    );
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .starts_with("error: invalid configuration: chunk_size 1000"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"));
}

/// A log file given to the pool commands: the error says it is a log and which commands
/// read one, instead of only "not a pgl pool".
#[test]
fn pool_commands_name_a_log_as_a_log() {
    let dir = TempDir::new("notapool");
    let log = dir.join("events.log");
    drop(pgl::log::Log::create(&log, pgl::log::LogConfig::new(64 << 10)).unwrap());
    let l = log.to_str().unwrap();
    for args in [
        &["check", l][..],
        &["info", l],
        &["scrub", l],
        &["dump", l, "0x10"],
        &["inject", l, "media", "0"],
    ] {
        let out = pgl(&dir, args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.starts_with(
                "error: [DIR]/events.log: not a pgl pool (it is a pgl log: inspect it with \
                 `pgl log info` or `pgl log check`)"
            ),
            "{args:?}: {}",
            out.stderr
        );
    }
}

/// A directory where a pool file is expected, and a new pool in a directory that does not
/// exist: the OS error alone ("Is a directory", "No such file or directory") says what
/// happened, not what to do.
#[test]
fn directories_in_place_of_files_say_what_to_do() {
    let dir = TempDir::new("dirs");
    let d = dir.0.to_str().unwrap();
    for args in [&["check", d][..], &["info", d], &["scrub", d, "--repair"]] {
        let out = pgl(&dir, args);
        assert_eq!(out.code, 2, "{args:?}");
        let open = if args[0] == "scrub" {
            "open"
        } else {
            "open read-only"
        };
        assert_eq!(
            out.stderr,
            format!(
                "error: {open} [DIR]: Is a directory (os error 21); give the path of a pool \
                 file, not of a directory"
            ),
            "{args:?}"
        );
    }
    let out = pgl(&dir, &["log", "info", d]);
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr,
        "error: open log [DIR]: Is a directory (os error 21); give the path of a log file, \
         not of a directory"
    );

    let out = pgl(&dir, &["create", d]);
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr,
        "error: [DIR]: a directory is there; give the path of the new file (in a directory \
         that exists), not of a directory"
    );

    let nested = dir.join("no/such/dir/new.pool");
    let out = pgl(&dir, &["create", nested.to_str().unwrap()]);
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr,
        "error: create [DIR]/no/such/dir/new.pool: No such file or directory (os error 2); \
         its directory does not exist: create the directory first, or choose another path"
    );
}

/// A size above what a pool may map: the message says which limit, and what to do with
/// the command at hand (`Config::max_size` has no flag; a smaller `--size` does it).
#[test]
fn create_refuses_a_size_beyond_max_size_and_says_what_to_do() {
    let dir = TempDir::new("huge");
    let path = dir.join("huge.pool");
    let out = pgl(&dir, &["create", path.to_str().unwrap(), "--size", "2T"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.starts_with(
            "error: invalid configuration: size 2199023255552 is more than max_size \
             1099511627776"
        ),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("create a smaller pool (`pgl create --size`)"),
        "{}",
        out.stderr
    );
    assert!(!path.exists(), "nothing is created");
}

/// A pool cut down to less than its two header copies is still recognised by its first
/// header: reported as a truncated pool to restore, not as a file that is no pool.
#[test]
fn a_pool_cut_short_inside_its_headers_is_reported_as_truncated() {
    let dir = TempDir::new("cut");
    let path = sample_pool(&dir);
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.join("cut.pool");
    let c = cut.to_str().unwrap();

    std::fs::write(&cut, &bytes[..4096]).unwrap();
    let out = pgl(&dir, &["check", c]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(&format!(
            "open      FAILED: [DIR]/cut.pool: truncated pool file: 4096 bytes, but the header \
             says {}; restore the file from a backup",
            bytes.len()
        )),
        "{}",
        out.stdout
    );
    let out = pgl(&dir, &["info", c]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .starts_with("error: [DIR]/cut.pool: truncated pool file: 4096 bytes"),
        "{}",
        out.stderr
    );
}

/// A pool a program has open looks crashed to any other opener (its OPEN flag is set):
/// `pgl check` would replay its lanes and recompute its parity while the program commits.
/// Every command refuses it with exit 2, and leaves the file alone.
#[test]
fn commands_refuse_a_pool_a_program_has_open() {
    let dir = TempDir::new("busy");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let pool = Pool::open_with(&path, &Config::new(LAYOUT).flush(FlushMode::Msync)).unwrap();
    let before = std::fs::read(&path).unwrap();
    for args in [
        &["check", p][..],
        &["info", p],
        &["scrub", p, "--repair"],
        &["dump", p, "0x10"],
    ] {
        let out = pgl(&dir, args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains("the pool is open in another program"),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert!(std::fs::read(&path).unwrap() == before, "the file changed");
    drop(pool);
    assert_eq!(pgl(&dir, &["check", p]).code, 0);
}

#[test]
fn inject_then_scrub_finds_and_repairs() {
    let dir = TempDir::new("scrub");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let victim = items(&path)[2];
    let v = format!("{victim:#x}");
    let inj = pgl(&dir, &["inject", p, "object", &v, "20", "8", "--seed", "3"]);
    assert_eq!(inj.code, 0, "{}", inj.stderr);
    assert!(
        inj.stdout.starts_with(&format!(
            "injected 8 random bytes at byte 20 of object {v} (from its header; seed 3) into"
        )),
        "the oid is echoed as `info --objects` lists it: {}",
        inj.stdout
    );

    let look = pgl(&dir, &["scrub", p]);
    assert_eq!(look.code, 1, "{}\n{}", look.stdout, look.stderr);
    assert!(
        look.stdout.contains("0 repaired, 1 damaged"),
        "{}",
        look.stdout
    );
    assert!(look.stdout.contains(&format!("{v}: ")), "{}", look.stdout);

    let fix = pgl(&dir, &["scrub", p, "--repair"]);
    assert_eq!(fix.code, 0, "{}\n{}", fix.stdout, fix.stderr);
    assert!(
        fix.stdout.contains("1 repaired, 0 damaged"),
        "{}",
        fix.stdout
    );
    assert!(fix.stdout.contains("result: clean"), "{}", fix.stdout);
    assert_eq!(pgl(&dir, &["check", p]).code, 0);

    // A media error on the same object: its page is lost; scrubbing rebuilds it.
    let media = pgl(&dir, &["inject", p, "media", &v]);
    assert_eq!(media.code, 0, "{}", media.stderr);
    assert_eq!(pgl(&dir, &["check", p]).code, 1, "the lost page shows");
    let fix = pgl(&dir, &["scrub", p, "--repair"]);
    assert_eq!(fix.code, 0, "{}\n{}", fix.stdout, fix.stderr);
    assert_eq!(pgl(&dir, &["check", p]).code, 0);

    let bad = pgl(&dir, &["inject", p, "lane", "99", "0", "0", "1"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("lane 99"), "{}", bad.stderr);
}

/// Faults that do not fit the pool: each is refused with exit 2 and a message that names
/// the file, the fault and the limit it broke, and says the pool is unchanged; it is not
/// called a configuration error (`pgl inject` takes no configuration).
#[test]
fn inject_refuses_faults_outside_the_pool_and_says_why() {
    let dir = TempDir::new("inject-bad");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    for (args, says) in [
        (
            &["scribble", "0xffffffffff", "8"][..],
            format!(
                "cannot inject 8 random bytes at pool offset 0xffffffffff (seed 1): bytes \
                 1099511627775..1099511627783 are not all within the {size} bytes of the pool"
            ),
        ),
        (
            &["scribble", "0", "0"],
            "cannot inject 0 random bytes at pool offset 0x0 (seed 1): the length is 0".to_string(),
        ),
        (
            &["bitflip", "0", "65"],
            "a bit flip flips 1 to 64 bits of one word, not 65".to_string(),
        ),
        (
            &["metadata", "99", "0", "8"],
            "zone 99 is not in the pool, whose zones are 0 to ".to_string(),
        ),
        (
            &["lane", "0", "5", "0", "8"],
            "copy 5 of lane 0 does not exist: the pool has lanes 0 to 1, copies 0 and 1"
                .to_string(),
        ),
        (
            &["header", "0", "4000", "999"],
            "bytes 4000..4999 are not all within the 4096 bytes of the header page".to_string(),
        ),
        (
            &["media", "0x10"],
            "a media error can be injected only into the zones' rows".to_string(),
        ),
    ] {
        let mut all = vec!["inject", p];
        all.extend_from_slice(args);
        let out = pgl(&dir, &all);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr
                .starts_with("error: [DIR]/sample.pool: cannot inject "),
            "{args:?}: {}",
            out.stderr
        );
        assert!(out.stderr.contains(&says), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.trim_end().ends_with("the pool is unchanged"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("configuration"), "{}", out.stderr);
    }
    assert_eq!(pgl(&dir, &["check", p]).code, 0, "nothing was damaged");
}

/// Every argument of every command is described in its `--help`.
#[test]
fn help_describes_every_argument() {
    let dir = TempDir::new("help");
    let commands: &[&[&str]] = &[
        &["create"],
        &["info"],
        &["check"],
        &["scrub"],
        &["dump"],
        &["inject"],
        &["inject", "f", "scribble"],
        &["inject", "f", "bitflip"],
        &["inject", "f", "object"],
        &["inject", "f", "metadata"],
        &["inject", "f", "lane"],
        &["inject", "f", "header"],
        &["inject", "f", "media"],
        &["log", "info"],
        &["log", "dump"],
        &["log", "check"],
    ];
    for cmd in commands {
        let mut args = cmd.to_vec();
        args.push("--help");
        let out = pgl(&dir, &args);
        assert_eq!(out.code, 0, "{cmd:?}: {}", out.stderr);
        let lines: Vec<&str> = out.stdout.lines().collect();
        let mut section = "";
        for (i, line) in lines.iter().enumerate() {
            if !line.starts_with(' ') {
                section = line;
                continue;
            }
            let l = line.trim();
            let entry = l.starts_with('<') || l.starts_with('[') || l.starts_with('-');
            if !(section == "Arguments:" || section == "Options:") || !entry {
                continue; // not an argument, or a description on its own line
            }
            // Described on the same line, or (long help) on the next, indented further.
            let inline = l
                .split_once("  ")
                .is_some_and(|(_, d)| !d.trim().is_empty());
            let below = lines.get(i + 1).is_some_and(|n| {
                let d = n.trim();
                n.len() - n.trim_start().len() > line.len() - line.trim_start().len()
                    && !d.is_empty()
            });
            assert!(
                inline || below,
                "{cmd:?}: `{l}` has no description:\n{}",
                out.stdout
            );
        }
    }
}

/// An unknown fault kind is named as a fault, with the kinds there are (clap alone said
/// "unexpected argument 'frobnicate' found", which lists nothing).
#[test]
fn inject_names_an_unknown_fault_and_lists_the_kinds() {
    let dir = TempDir::new("inject-kind");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    for args in [
        &["inject", p, "frobnicate", "0"][..],
        &["inject", "--seed", "3", p, "frobnicate"],
    ] {
        let out = pgl(&dir, args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.starts_with(
                "error: unknown fault 'frobnicate': the faults are scribble, bitflip, object, \
                 metadata, lane, header and media"
            ),
            "{args:?}: {}",
            out.stderr
        );
        assert!(out.stderr.contains("Usage: pgl inject"), "{}", out.stderr);
    }
    // A typo still gets clap's suggestion.
    let out = pgl(&dir, &["inject", p, "scribbel", "0", "8"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("'scribble'"), "{}", out.stderr);
}

/// Damage beyond parity (two pages of one page column): `scrub --repair` lists the object
/// it could not rebuild as `check` does, and says what is left to do, not to run itself.
#[test]
fn scrub_repair_says_what_it_could_not_rebuild_and_what_to_do() {
    let dir = TempDir::new("beyond");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let victim = items(&path)[0];
    let v = format!("{victim:#x}");
    assert_eq!(pgl(&dir, &["inject", p, "object", &v, "20", "8"]).code, 0);
    // The same bytes of the next row: the object's page column now has two damaged pages.
    let below = format!("{:#x}", victim + 4 + (64 << 10));
    assert_eq!(pgl(&dir, &["inject", p, "scribble", &below, "8"]).code, 0);

    let fix = pgl(&dir, &["scrub", p, "--repair"]);
    assert_eq!(fix.code, 1, "{}{}", fix.stdout, fix.stderr);
    assert!(
        fix.stdout.contains("0 repaired, 1 damaged"),
        "{}",
        fix.stdout
    );
    assert!(
        fix.stdout.contains(&format!(
            "    {v}: checksum mismatch (`cli::Item`, type id "
        )),
        "{}",
        fix.stdout
    );
    assert!(
        !fix.stdout.contains("`pgl scrub --repair` rebuilds"),
        "it does not tell the user to run what they ran: {}",
        fix.stdout
    );
    assert!(
        fix.stdout.trim_end().ends_with(
            "result: damage remains that parity cannot rebuild: restore the pool from a \
             backup, or have the program that owns the objects listed above rewrite or \
             free them"
        ),
        "{}",
        fix.stdout
    );
}

/// An oid that names no object, given to `dump` or `inject object`: the message says where
/// the oids are listed.
#[test]
fn an_oid_that_names_no_object_points_to_the_listing() {
    let dir = TempDir::new("oid");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let inside = format!("{:#x}", items(&path)[0] + 8);
    for args in [
        &["dump", p, "0x10"][..],
        &["dump", p, &inside],
        &["inject", p, "object", &inside, "0", "8"],
    ] {
        let out = pgl(&dir, args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr
                .starts_with("error: [DIR]/sample.pool: invalid oid 0x"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(
            out.stderr.ends_with(
                "; `pgl info --objects [DIR]/sample.pool` lists the pool's objects and their oids"
            ),
            "{args:?}: {}",
            out.stderr
        );
    }
}

/// A list whose nodes become `NodeWide` in the Manual migration below.
#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 0x0c11_0001)]
struct Node {
    value: u64,
    next: Oid<Node>,
}

#[derive(Persistent)]
#[repr(C)]
#[pgl(id = 0x0c11_0002)]
struct NodeWide {
    value: u64,
    next: Oid<NodeWide>,
    extra: u64,
}

#[test]
fn check_and_info_name_a_migration_a_crash_interrupted() {
    let dir = TempDir::new("migration");
    let cfg = Config::small(LAYOUT);
    let sim = pgl::CrashSim::new(cfg.size);
    let pool = Pool::create_sim(&sim, &cfg).unwrap();
    let root = pool.root::<Node>().unwrap();
    pool.tx(|tx| {
        let mut next = Oid::NULL;
        for value in 0..6 {
            next = tx.alloc(Node { value, next })?;
        }
        tx.open(root)?.next = next;
        Ok(())
    })
    .unwrap();
    let points = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = points.clone();
    sim.set_fence_hook(move |s: &pgl::CrashSim| sink.lock().unwrap().push(s.crash_point()));
    pool.migration()
        .batch(2)
        .convert(|n: &Node, r| NodeWide {
            value: n.value,
            next: r.oid(n.next),
            extra: 0,
        })
        .run()
        .unwrap();
    sim.clear_fence_hook();
    // The last crash point before the switch: new objects made, nothing reachable moved.
    let path = dir.join("interrupted.pool");
    let points = points.lock().unwrap();
    let interrupted = points.iter().rev().find_map(|cp| {
        let dev = cp.device(cfg.size, |_| false);
        let p = Pool::open_sim(&dev, LAYOUT).ok()?;
        let m = p.pending_migration().ok()??;
        (!m.switched && m.to_free > 0).then(|| cp.image(|_| false))
    });
    let image = interrupted.expect("a crash point before the switch");
    let bytes: Vec<u8> = image
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .take(sim.len() as usize)
        .collect();
    std::fs::write(&path, bytes).unwrap();

    let p = path.to_str().unwrap();
    let check = pgl(&dir, &["check", p]);
    assert_eq!(
        check.code, 0,
        "not a problem: {}{}",
        check.stdout, check.stderr
    );
    assert!(
        check
            .stdout
            .contains("migration interrupted before its switch: 7 unreachable new objects"),
        "{}",
        check.stdout
    );
    let info = pgl(&dir, &["info", p]);
    assert!(
        info.stdout
            .contains("migration interrupted before its switch"),
        "{}",
        info.stdout
    );
}

/// Bytes the file system has given the file at `path` (fewer than its length: sparse).
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).expect("stat").blocks() * 512
}

/// `pgl check` and `pgl scrub` read no hole of a sparse pool: on tmpfs a read of one
/// through the mapping would allocate it (before, `check` made a new 1 GiB pool take
/// 1015 MiB of memory).
#[test]
fn check_and_scrub_leave_a_sparse_pool_sparse() {
    let Some(dir) = TempDir::on_tmpfs("sparse") else {
        println!("skipped: no /dev/shm, where reading a hole would allocate it");
        return;
    };
    let path = dir.join("sparse.pool");
    let p = path.to_str().unwrap();
    let created = pgl(&dir, &["create", p, "--size", "256M"]);
    assert_eq!(created.code, 0, "{}", created.stderr);
    let len = std::fs::metadata(&path).unwrap().len();
    let before = allocated(&path);
    if before >= len / 2 {
        println!("skipped: /dev/shm keeps the pool allocated ({before} of {len} bytes)");
        return;
    }
    let check = pgl(&dir, &["check", p]);
    assert_eq!(check.code, 0, "{}\n{}", check.stdout, check.stderr);
    assert!(check.stdout.contains("result: clean"), "{}", check.stdout);
    let after_check = allocated(&path);
    let scrub = pgl(&dir, &["scrub", p, "--repair"]);
    assert_eq!(scrub.code, 0, "{}\n{}", scrub.stdout, scrub.stderr);
    let after_scrub = allocated(&path);
    println!("allocated: {before} bytes created, {after_check} after check, {after_scrub} after scrub, of {len}");
    assert!(
        after_check < before + (4 << 20),
        "check made the pool allocate {} bytes",
        after_check - before
    );
    assert!(
        after_scrub < before + (4 << 20),
        "scrub made the pool allocate {} bytes",
        after_scrub - before
    );
}

/// A pool whose header copy A a newer pgl wrote (its open stopped before copy B): every
/// command refuses it with exit 2, says to upgrade pgl, and leaves the file as it is;
/// `scrub --repair`, which writes, rewrites neither copy from the other.
#[test]
fn a_pool_a_newer_pgl_wrote_is_refused_by_every_command() {
    let dir = TempDir::new("newer");
    let path = sample_pool(&dir);
    let p = path.to_str().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let mut h = pgl::Header::decode(&bytes[..4096]).unwrap();
    h.version = 99;
    support::file_write(&path, 0, &h.encode());
    let before = std::fs::read(&path).unwrap();
    for args in [
        &["info", p][..],
        &["check", p],
        &["scrub", p],
        &["scrub", "--repair", p],
    ] {
        let out = pgl(&dir, args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.starts_with(
                "error: [DIR]/sample.pool: the pool was written by a newer pgl (format version \
                 99;"
            ) && out.stderr.contains("upgrade pgl to open it"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(
            std::fs::read(&path).unwrap() == before,
            "{args:?} changed the file"
        );
    }
}

#[test]
fn info_of_a_pool_with_scribbled_object_sizes_neither_panics_nor_wraps() {
    let dir = TempDir::new("scribbled-sizes");
    let path = dir.join("p.pool");
    let pool = Pool::create(&path, &Config::small(LAYOUT)).unwrap();
    let oids: Vec<Oid<[u64; 4]>> = (0..4)
        .map(|i| pool.tx(|tx| tx.alloc([i; 4])).unwrap())
        .collect();
    // Random bytes over the size fields of three of them: sizes near 2^64, whose sum wraps.
    for (seed, o) in oids[1..].iter().enumerate() {
        let f = pgl::Fault::ObjectScribble {
            oid: o.raw(),
            at: 0,
            len: 8,
            seed: seed as u64,
        };
        pool.inject(&f).unwrap();
    }
    drop(pool);
    let p = path.to_str().unwrap();
    let out = pgl(&dir, &["info", p]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("objects   4 (32 payload bytes)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("3 of them with a header whose size does not fit the heap"),
        "{}",
        out.stdout
    );
    let check = pgl(&dir, &["check", p]);
    assert_eq!(check.code, 1, "{}", check.stdout);
}
