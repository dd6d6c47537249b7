//! `pgl info`, `check`, `dump` and `scrub` (without `--repair`) never write the pool file:
//! a damaged pool, and one a crash interrupted mid-transaction, keep every byte, while the
//! damage is reported; a read-only file inspects fine; `dump` of damage exits 1; `info`
//! names `#[extendible]` groups as their user knows them; `check` lists the objects
//! opening rebuilt from parity.

mod support;

use pgl::prelude::*;
use pgl::PStr;
use std::path::Path;
use std::process::Command;
use support::crashed::{crashed_mid_transaction, scribble, Item, Root, TempFile};

const LAYOUT: &str = "cli-read-only";

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `pgl args...`.
fn pgl(args: &[&str]) -> Output {
    run(args, false)
}

/// Runs `pgl args...`, with `unprivileged` as user nobody when this test runs as root (for
/// whom a file's mode bits would not make it read-only).
fn run(args: &[&str], unprivileged: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgl"));
    cmd.args(args).env("PGL_FLUSH", "msync");
    // SAFETY: geteuid has no preconditions.
    if unprivileged && unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt as _;
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().expect("run pgl");
    Output {
        code: out.status.code().expect("pgl exited by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `pgl args`, and asserts that the pool file's bytes are what they were.
fn inspect(path: &Path, args: &[&str]) -> Output {
    inspect_as(path, args, false)
}

/// `inspect`, `unprivileged` as `run` says.
fn inspect_as(path: &Path, args: &[&str], unprivileged: bool) -> Output {
    let before = std::fs::read(path).unwrap();
    let out = run(args, unprivileged);
    let after = std::fs::read(path).unwrap();
    assert!(
        before == after,
        "`pgl {}` changed the pool file ({} bytes differ)\n{}{}",
        args.join(" "),
        before.iter().zip(&after).filter(|(a, b)| a != b).count(),
        out.stdout,
        out.stderr
    );
    out
}

/// A crashed pool with a damaged header copy and a scribbled object: `check` reports each
/// (and the record to replay) and exits 1, `info` shows it, `dump` shows the object as
/// parity rebuilds it, and none of them changes a byte (they recovered and repaired the
/// file as they read it). The second `check` reports the same.
#[test]
fn inspecting_a_damaged_crashed_pool_changes_no_byte_and_reports_the_damage() {
    let (mut bytes, cold, _) = crashed_mid_transaction(LAYOUT);
    let cold = cold.raw();
    scribble(&mut bytes, 40, b"garbage!"); // header copy A's layout name
    scribble(&mut bytes, cold + 4, b"\xde\xad"); // the untouched object's payload
    let file = TempFile::new("cli-ro", "crashed");
    std::fs::write(&file.0, &bytes).unwrap();
    let p = file.arg();
    let oid = format!("{cold:#x}");

    let check = inspect(&file.0, &["check", p]);
    assert_eq!(check.code, 1, "{}{}", check.stdout, check.stderr);
    for line in [
        "  header    one copy is damaged, the other valid (a program's next open rewrites \
         it from the valid one)",
        "committed record(s) a crash left to replay",
    ] {
        assert!(check.stdout.contains(line), "{line:?}:\n{}", check.stdout);
    }
    let object_reported = check
        .stdout
        .contains(&format!("{cold:#x}: checksum mismatch"))
        || check
            .stdout
            .contains("1 damaged object(s) in zones a crash interrupted");
    assert!(object_reported, "{}", check.stdout);
    assert!(
        check
            .stdout
            .lines()
            .last()
            .unwrap()
            .starts_with("result: 2 problem(s)"),
        "{}",
        check.stdout
    );
    let again = inspect(&file.0, &["check", p]);
    assert_eq!(
        again.stdout, check.stdout,
        "the first check changed the pool"
    );

    let info = inspect(&file.0, &["info", p]);
    assert_eq!(info.code, 0, "{}{}", info.stdout, info.stderr);
    assert!(
        info.stdout.contains("opened read-only")
            && info.stdout.contains("header repairs             1"),
        "{}",
        info.stdout
    );

    // Parity rebuilt the object as the pool opened (in memory): it shows as it was stored.
    let dump = inspect(&file.0, &["dump", p, &oid]);
    assert_eq!(dump.code, 0, "{}{}", dump.stdout, dump.stderr);
    assert!(
        dump.stdout.contains("(valid)") && dump.stdout.contains("|........cold, ne|"),
        "{}",
        dump.stdout
    );

    // The file still holds the damage: a program's open repairs it, then all is clean.
    drop(Pool::open(&file.0, LAYOUT).unwrap());
    let after = pgl(&["check", p]);
    // The scribbled object is rebuilt from parity only by a scrub (or a read).
    assert!(
        after.stdout.contains("  header    both copies valid")
            && after
                .stdout
                .contains("  lanes     valid; 0 committed record(s) replayed"),
        "{}",
        after.stdout
    );
}

/// A pool file nobody may write (mode 0444, inspected by an unprivileged user) is
/// inspected as any other; `scrub --repair`, which writes, is refused by the system.
#[test]
fn a_read_only_file_inspects_fine() {
    let file = TempFile::new("cli-ro", "mode-0444");
    let pool = Pool::create(&file.0, &Config::small(LAYOUT)).unwrap();
    let root = pool.root::<Root>().unwrap();
    let item = pool
        .tx(|tx| {
            let it = tx.alloc(Item {
                value: 7,
                label: [b'x'; 24],
            })?;
            tx.open(root)?.cold = it;
            Ok(it)
        })
        .unwrap();
    drop(pool);
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&file.0, std::fs::Permissions::from_mode(0o444)).unwrap();
    let p = file.arg();
    let oid = format!("{:#x}", item.raw());
    for args in [&["info", p][..], &["check", p], &["dump", p, &oid]] {
        let out = inspect_as(&file.0, args, true);
        assert_eq!(out.code, 0, "{args:?}: {}{}", out.stdout, out.stderr);
    }
    let scrub = run(&["scrub", p, "--repair"], true);
    assert_eq!(scrub.code, 2, "{}{}", scrub.stdout, scrub.stderr);
    assert!(
        scrub.stderr.contains("Permission denied"),
        "{}",
        scrub.stderr
    );
}

/// An object whose header was lost (zeros) does not verify: `dump` says MISMATCH, and
/// exits 1, not 0.
#[test]
fn dump_of_an_object_whose_header_was_lost_exits_1() {
    let file = TempFile::new("cli-ro", "lost-header");
    let pool = Pool::create(&file.0, &Config::small(LAYOUT)).unwrap();
    let root = pool.root::<Root>().unwrap();
    let item = pool
        .tx(|tx| {
            let it = tx.alloc(Item {
                value: 9,
                label: [b'y'; 24],
            })?;
            tx.open(root)?.hot = it;
            Ok(it)
        })
        .unwrap();
    drop(pool);
    let mut bytes = std::fs::read(&file.0).unwrap();
    scribble(&mut bytes, item.raw() - 16, &[0; 16]);
    std::fs::write(&file.0, &bytes).unwrap();
    let dump = inspect(
        &file.0,
        &["dump", file.arg(), &format!("{:#x}", item.raw())],
    );
    assert!(
        dump.stdout.contains("MISMATCH"),
        "{}{}",
        dump.stdout,
        dump.stderr
    );
    assert_eq!(dump.code, 1, "{}{}", dump.stdout, dump.stderr);
}

mod v1 {
    use pgl::{extendible, Oid, PStr, Persistent};

    #[extendible]
    #[derive(Persistent, Debug)]
    #[pgl(id = 0x5eed_0ead)]
    #[repr(C)]
    pub struct Node {
        pub key: u32,
        pub value: u32,
        pub next: Oid<Node>,
        #[extension(1, init = |_old| PStr::truncating("new"))]
        pub name: PStr<16>,
    }
}

/// `pgl info` lists an `#[extendible]` struct's extension group as the struct's group,
/// not as the hidden type the derive generates for it (`__PglNodeExt1`).
#[test]
fn info_names_extension_groups_for_their_struct() {
    let file = TempFile::new("cli-ro", "groups");
    let pool = Pool::create(&file.0, &Config::small(LAYOUT)).unwrap();
    pool.tx(|tx| {
        tx.alloc_ext(v1::NodeData {
            key: 1,
            value: 2,
            next: Oid::NULL,
            name: PStr::truncating("n"),
        })
    })
    .unwrap();
    drop(pool);
    let info = inspect(&file.0, &["info", file.arg()]);
    assert_eq!(info.code, 0, "{}{}", info.stdout, info.stderr);
    assert!(
        info.stdout
            .contains("cli_read_only::v1::Node extension group 1")
            && !info.stdout.contains("__Pgl"),
        "{}",
        info.stdout
    );
}

/// Commands on a pool a program has open say to wait for that program or stop it, not
/// the library's advice to a program opening a file twice (share one `Pool`).
#[test]
fn a_pool_open_in_a_program_is_refused_with_advice_for_the_command_line() {
    let file = TempFile::new("cli-ro", "busy");
    let pool = Pool::create(&file.0, &Config::small(LAYOUT)).unwrap();
    let p = file.arg();
    for args in [&["check", p][..], &["info", p], &["scrub", p, "--repair"]] {
        let out = inspect(&file.0, args);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr.contains("open in another program")
                && out
                    .stderr
                    .contains("wait for it to close the pool, or stop it")
                && !out.stderr.contains("clone"),
            "{args:?}: {}",
            out.stderr
        );
    }
    drop(pool);
}

/// `pgl scrub` without `--repair` only reports: it keeps every byte of a pool whose header
/// copy `pgl inject` damaged (opening the pool writable would rewrite the copy from the
/// other), says that opening repairs it, and exits 1; `--repair` then rewrites it.
#[test]
fn scrub_without_repair_changes_no_byte_and_reports_what_opening_repairs() {
    let file = TempFile::new("cli-ro", "scrub-report");
    drop(Pool::create(&file.0, &Config::small(LAYOUT)).unwrap());
    let p = file.arg();
    let inj = pgl(&["inject", p, "header", "0", "40", "8"]);
    assert_eq!(inj.code, 0, "{}{}", inj.stdout, inj.stderr);

    let scrub = inspect(&file.0, &["scrub", p]);
    assert_eq!(scrub.code, 1, "{}{}", scrub.stdout, scrub.stderr);
    assert!(
        scrub
            .stdout
            .contains("  opening   1 damaged header cop(ies); opening repairs it")
            && scrub.stdout.contains("result: damaged"),
        "{}",
        scrub.stdout
    );
    let again = inspect(&file.0, &["scrub", p]);
    assert_eq!(
        again.stdout, scrub.stdout,
        "the first scrub changed the pool"
    );

    let repair = pgl(&["scrub", p, "--repair"]);
    assert_eq!(repair.code, 0, "{}{}", repair.stdout, repair.stderr);
    assert!(
        repair
            .stdout
            .contains("  opening   1 damaged header cop(ies); repaired as the pool opened"),
        "{}",
        repair.stdout
    );
    let after = inspect(&file.0, &["scrub", p]);
    assert_eq!(after.code, 0, "{}{}", after.stdout, after.stderr);
    assert!(!after.stdout.contains("opening"), "{}", after.stdout);
}

/// `pgl check` lists the objects parity rebuilt while it opened a crashed pool (in
/// memory), not only how many: the user needs to know which.
#[test]
fn check_lists_the_objects_rebuilt_opening_a_crashed_pool() {
    let (mut bytes, cold, _) = crashed_mid_transaction(LAYOUT);
    let cold = cold.raw();
    scribble(&mut bytes, cold + 4, b"\xde\xad");
    let file = TempFile::new("cli-ro", "rebuilt-opening");
    std::fs::write(&file.0, &bytes).unwrap();
    let p = file.arg();
    let check = inspect(&file.0, &["check", p]);
    assert_eq!(check.code, 1, "{}{}", check.stdout, check.stderr);
    assert!(
        check
            .stdout
            .contains("1 damaged object(s) in zones a crash interrupted")
            && check.stdout.contains(&format!(
                "    {cold:#x}: rebuilt from parity as the pool opened"
            )),
        "{}",
        check.stdout
    );
    let scrub = inspect(&file.0, &["scrub", p]);
    assert!(
        scrub.stdout.contains(&format!(
            "  opening   object {cold:#x} damaged in a zone a crash interrupted"
        )),
        "{}",
        scrub.stdout
    );
}
