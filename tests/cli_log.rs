//! `pgl log info|dump|check`, run as a user runs them: the built binary on temporary log
//! files. Output is snapshotted with the temporary directory redacted.

use pgl::log::{ForcePolicy, Log, LogConfig};
use pgl::FlushMode;

mod support;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
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
    support::file_flip(&path, 4096 + 6 * 64 + 30);
    support::file_flip(&path, 40);
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
    // As `pgl check` on a file that is not a pool: an error (2), not a problem found (1).
    let check = pgl(&dir, &["log", "check", p]);
    assert_eq!(check.code, 2, "{}{}", check.stdout, check.stderr);
    assert!(
        check.stderr.starts_with("error: [DIR]/junk: not a pgl log"),
        "{}",
        check.stderr
    );
    let missing = pgl(&dir, &["log", "dump", "/nonexistent/x.log"]);
    assert_eq!(missing.code, 2);
    let missing = pgl(&dir, &["log", "check", "/nonexistent/x.log"]);
    assert_eq!(missing.code, 2);
}

/// `pgl log check` exits as `pgl check` does: 0 clean, 1 damage found (a log too damaged
/// to open included: the problem is reported on stdout), 2 when it could not check (the
/// error on stderr). A log whose superline copies are both damaged, or which was cut
/// short, is a damaged log; `pgl check` says the same of a pool with both headers damaged
/// or cut short.
#[test]
fn log_check_exits_as_pool_check_does() {
    let dir = TempDir::new("exits");
    // Both superline copies damaged (their magic intact): 1, the log cannot be opened.
    let path = sample(&dir);
    let p = path.to_str().unwrap();
    let cap = std::fs::metadata(&path).unwrap().len() - pgl::log::format::file_len(0);
    support::file_flip(&path, 40);
    support::file_flip(&path, pgl::log::format::super_offset(1, cap) + 40);
    let check = pgl(&dir, &["log", "check", p]);
    assert_eq!(check.code, 1, "{}{}", check.stdout, check.stderr);
    assert!(
        check
            .stdout
            .contains("open      FAILED: [DIR]/sample.log: not a pgl log (no valid superline")
            && check
                .stdout
                .ends_with("result: 1 problem: the log cannot be opened\n"),
        "{}",
        check.stdout
    );
    // Cut short: 1.
    std::fs::remove_file(&path).unwrap();
    let path = sample(&dir);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(std::fs::metadata(&path).unwrap().len() - 4096)
        .unwrap();
    let check = pgl(&dir, &["log", "check", p]);
    assert_eq!(check.code, 1, "{}{}", check.stdout, check.stderr);
    assert!(check.stdout.contains("truncated"), "{}", check.stdout);

    // The help says what each exit status means.
    let help = pgl(&dir, &["log", "check", "--help"]);
    assert!(
        help.stdout
            .contains("Exits 0 if the log is clean, 1 if a problem was found"),
        "{}",
        help.stdout
    );
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
    // `log check` too: a pool is no log to check (as `pgl check` of a log exits 2).
    let out = pgl(&dir, &["log", "check", p]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.starts_with(&format!("error: {said}")),
        "{}",
        out.stderr
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

/// `pgl log dump` shows a record's length and first 16 bytes, but read each record's whole
/// payload (up to 2 GiB) into memory to do so: a sparse log holding one 1.5 GiB record of
/// zeros (well sealed: 8 KiB of the file are written) aborted it under a 1 GiB address
/// space limit. It must read a record in pieces, keeping only what it shows.
#[test]
fn dump_of_a_huge_record_keeps_only_what_it_shows() {
    use pgl::log::format::{seal, RecordHeader, AREA_OFFSET};
    const LEN: u32 = 3 << 29;
    let dir = TempDir::new("huge-record");
    let path = dir.0.join("huge.log");
    drop(Log::create(&path, LogConfig::new(2 << 30).flush(FlushMode::None)).unwrap());
    // Zeros, as the sparse area reads; not touched, so they take no memory. (Creating
    // the log opened it: epoch 2.)
    let zeros = vec![0u8; LEN as usize];
    let h = seal(RecordHeader::new(1, LEN, false, 2), 0, &zeros);
    drop(zeros);
    let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.seek(SeekFrom::Start(AREA_OFFSET)).unwrap();
    f.write_all(&h.encode()).unwrap();
    drop(f);

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgl"));
    cmd.args(["log", "dump", path.to_str().unwrap()]);
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: runs in the child between fork and exec; setrlimit is async-signal-safe
        // and the closure touches nothing of the parent's but the constant it copies.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 1 << 30,
                    rlim_max: 1 << 30,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pgl log dump failed ({:?}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().nth(1).expect("a record line");
    assert!(
        line.contains(&format!(" {LEN} ")) && line.contains("00 00 00 00"),
        "{line}"
    );
}
