//! `pgl log info|dump|check`, run as a user runs them: the built binary on temporary log
//! files. Output is snapshotted with the temporary directory redacted.

use pgl::log::{ForcePolicy, Log, LogConfig};
use pgl::FlushMode;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("pgl-clilog-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create temp dir");
        TempDir(d)
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

fn pgl(dir: &TempDir, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_pgl"))
        .args(args)
        .output()
        .expect("run pgl");
    let redact = |b: &[u8]| String::from_utf8_lossy(b).replace(&*dir.0.to_string_lossy(), "[DIR]");
    Output {
        code: out.status.code().expect("pgl exited by a signal"),
        stdout: redact(&out.stdout),
        stderr: redact(&out.stderr),
    }
}

/// A log with eight records (one aborted), the first two reclaimed.
fn sample(dir: &TempDir) -> PathBuf {
    let path = dir.0.join("sample.log");
    let log = Log::create(
        &path,
        LogConfig::new(64 << 10)
            .policy(ForcePolicy::Frequency(4))
            .flush(FlushMode::None),
    )
    .unwrap();
    for i in 1..=7u64 {
        log.append(format!("record number {i}").as_bytes()).unwrap();
        if i == 5 {
            drop(log.reserve(10).unwrap());
        }
    }
    log.force(8).unwrap();
    log.reclaim(2).unwrap();
    path
}

fn flip(path: &Path, off: u64) {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.seek(SeekFrom::Start(off)).unwrap();
    f.read_exact(&mut b).unwrap();
    b[0] ^= 1;
    f.seek(SeekFrom::Start(off)).unwrap();
    f.write_all(&b).unwrap();
}

#[test]
fn log_info_dump_check_of_a_clean_log() {
    let dir = TempDir::new("clean");
    let path = sample(&dir);
    let p = path.to_str().unwrap();
    let info = pgl(&dir, &["log", "info", p]);
    assert_eq!(info.code, 0, "{}", info.stderr);
    insta::assert_snapshot!("log_info", info.stdout);
    let dump = pgl(&dir, &["log", "dump", p]);
    assert_eq!(dump.code, 0, "{}", dump.stderr);
    insta::assert_snapshot!("log_dump", dump.stdout);
    let some = pgl(&dir, &["log", "dump", p, "--from", "5", "--max", "2"]);
    assert_eq!(some.stdout.lines().count(), 4, "{}", some.stdout);
    assert!(some.stdout.contains("(more records not shown)"));
    let check = pgl(&dir, &["log", "check", p]);
    assert_eq!(check.code, 0, "{}", check.stdout);
    insta::assert_snapshot!("log_check_clean", check.stdout);
    // Inspecting changed nothing: the log opens as before.
    let log = Log::open_with(&path, Some(FlushMode::None)).unwrap();
    assert_eq!(log.recovery().records, 6);
}

#[test]
fn log_check_reports_a_damaged_record_and_superline_copy() {
    let dir = TempDir::new("damaged");
    let path = sample(&dir);
    let p = path.to_str().unwrap();
    // The record in the seventh 64-byte slot (LSN 7), and superline copy A.
    flip(&path, 4096 + 6 * 64 + 30);
    flip(&path, 40);
    let check = pgl(&dir, &["log", "check", p]);
    assert_eq!(check.code, 1, "{}", check.stdout);
    insta::assert_snapshot!("log_check_damaged", check.stdout);
    let info = pgl(&dir, &["log", "info", p]);
    assert_eq!(info.code, 0);
    assert!(
        info.stdout.contains("copy A  INVALID: checksum mismatch"),
        "{}",
        info.stdout
    );
}

#[test]
fn log_commands_on_a_file_that_is_not_a_log() {
    let dir = TempDir::new("notalog");
    let path = dir.0.join("junk");
    std::fs::write(&path, vec![9u8; 16384]).unwrap();
    let p = path.to_str().unwrap();
    let info = pgl(&dir, &["log", "info", p]);
    assert_eq!(info.code, 2);
    assert!(
        info.stderr.starts_with("error: [DIR]/junk: not a pgl log"),
        "{}",
        info.stderr
    );
    let check = pgl(&dir, &["log", "check", p]);
    assert_eq!(check.code, 1);
    assert!(
        check.stdout.contains("the log cannot be opened"),
        "{}",
        check.stdout
    );
    let missing = pgl(&dir, &["log", "dump", "/nonexistent/x.log"]);
    assert_eq!(missing.code, 2);
}

/// A pool, a missing file and a device given to `pgl log`: each error names the file as
/// what it is (never "pool" for a log the user asked about) and says what to run instead.
#[test]
fn log_commands_name_a_pool_a_missing_file_and_a_device_as_what_they_are() {
    let dir = TempDir::new("wrongkind");
    let pool = dir.0.join("data.pool");
    let p = pool.to_str().unwrap();
    let made = pgl(&dir, &["create", p, "--size", "16M", "--chunk-size", "64K"]);
    assert_eq!(made.code, 0, "{}", made.stderr);
    let said = "[DIR]/data.pool: not a pgl log (it is a pgl pool: inspect it with `pgl info` \
                or `pgl check`)";
    for cmd in ["info", "dump"] {
        let out = pgl(&dir, &["log", cmd, p]);
        assert_eq!(out.code, 2, "log {cmd}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.starts_with(&format!("error: {said}")),
            "log {cmd}: {}",
            out.stderr
        );
    }
    // `log check` reports a file it cannot open as a log as its one problem (see
    // `log_commands_on_a_file_that_is_not_a_log`).
    let out = pgl(&dir, &["log", "check", p]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(&format!("open      FAILED: {said}")),
        "{}",
        out.stdout
    );

    let out = pgl(&dir, &["log", "info", "/nonexistent/x.log"]);
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr,
        "error: open log /nonexistent/x.log: No such file or directory (os error 2); check \
         the path, or create the log (Log::create)\n"
    );

    let out = pgl(&dir, &["log", "info", "/dev/null"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .starts_with("error: /dev/null: not a pgl log (not a regular file)"),
        "{}",
        out.stderr
    );
}

/// `--from` past the last record: the listing says why it is empty and which LSNs the log
/// holds, instead of a bare column header.
#[test]
fn log_dump_from_past_the_end_says_which_lsns_there_are() {
    let dir = TempDir::new("from");
    let path = sample(&dir);
    let p = path.to_str().unwrap();
    let out = pgl(&dir, &["log", "dump", p, "--from", "999999"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("(no records from LSN 999999: the log's live records are LSNs 3 to 8)"),
        "{}",
        out.stdout
    );
}
