//! `pgl`: create, inspect and check pool files, and inspect and check log files.
//!
//! `info`, `check`, `dump` and `scrub` without `--repair` never write the pool file
//! (`Pool::open_read_only`): they may inspect a read-only file, and what opening the pool
//! would repair is reported, not done.
//! `scrub` (with `--repair`) and `inject` are the commands that change a pool.
//!
//! Exit status: 0 on success; `pgl check`, `pgl scrub` and `pgl log check` exit 1 when
//! they find a problem (damage, a pool or log too damaged to open included: the report on
//! stdout says so), and `pgl dump` when the object it shows does not verify; every command exits 2 on an error, when it could not do its work (a
//! missing or unreadable file, a file that is not a pool, or not a log, a format version
//! this build does not read, a bad argument). Errors are printed to stderr as
//! `error: <message>`; reports go to stdout.
//!
//! One module per command (`create`, `info`, `check`, `dump`, `scrub` with `inject`, `log`);
//! `args` parses what they take, `progress` shows slow work, `units` prints sizes and dates.

mod args;
mod check;
mod create;
mod dump;
mod info;
mod log;
mod progress;
mod scrub;
mod units;

use args::{parse_oid, parse_size, CreateArgs, FaultArg};
use check::check;
use clap::{CommandFactory as _, Parser, Subcommand};
use create::create;
use dump::dump;
use info::info;
use log::{log_check, log_dump, log_info};
use scrub::{inject, scrub};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Create, inspect and check pgl pool files.
#[derive(Parser)]
#[command(name = "pgl", version, about, long_about = None)]
#[command(
    after_help = "`info`, `check`, `dump` and `scrub` (without --repair) never write the pool \
                  file; `scrub --repair` and \
                  `inject` change it.\n\nExit status: 0 ok; 1 `check`, `scrub` or `log check` \
                  found problems (damage, a pool or log too damaged to open included), or the \
                  object `dump` shows does not verify; 2 error: the command could not do its \
                  work (a missing file, a file that is not a pool or not a log, a bad argument, \
                  a pool another program has open)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a new pool file (sparse unless --preallocate: no data is written).
    Create(CreateArgs),
    /// Show a pool's header, geometry, space, objects by type and counters (without
    /// writing the file: what opening the pool repairs, the counters show repaired in
    /// memory only).
    Info {
        /// The pool file.
        file: PathBuf,
        /// Also list every object: its oid (for `pgl dump` and `pgl inject object`), type
        /// id and size.
        #[arg(long)]
        objects: bool,
    },
    /// Verify a pool: headers, redo lanes, zone metadata, allocation bitmaps, the type
    /// registry, parity and every object's checksum.
    ///
    /// Never writes the file (it may be read-only): the pool is checked as a program's
    /// next open would leave it (committed transactions a crash interrupted replayed), and
    /// what that open would repair (a damaged header, lane or metadata copy, a bitmap
    /// word) is reported as damage. It repairs nothing: `pgl scrub --repair` does, and any
    /// program opening the pool repairs what opening repairs. Exits 0 if the pool is
    /// clean, 1 if a problem was found (the pool too damaged to open included: both header
    /// copies, or cut short), 2 on an error (a missing file, a file that is not a pgl pool,
    /// a format version this build does not read, a pool another program has open).
    Check {
        /// The pool file.
        file: PathBuf,
    },
    /// Scrub a pool: verify every object's checksum and every zone's parity; with
    /// `--repair`, rebuild damaged objects from parity and fix stale parity. Without it,
    /// the pool is opened read-only (the file is never written): what opening it repairs
    /// is reported as damage, as `check` does.
    ///
    /// Exits 0 if the pool is clean (after repairs), 1 if damage remains, 2 on an error.
    Scrub {
        /// The pool file.
        file: PathBuf,
        /// Repair what parity can rebuild (otherwise only report).
        #[arg(long)]
        repair: bool,
    },
    /// Damage a pool on purpose, to test how a program copes (the bytes are changed
    /// behind pgl's back and made durable; parity, checksums and replicas are not told).
    #[command(subcommand_value_name = "FAULT", subcommand_help_heading = "Faults")]
    Inject {
        /// The pool file.
        file: PathBuf,
        /// The fault.
        #[command(subcommand)]
        fault: FaultArg,
        /// Seed of the random bytes (the same seed damages the same way).
        #[arg(long, global = true, default_value_t = 1)]
        seed: u64,
    },
    /// Print one object's header and a hex dump of its payload (without writing the
    /// file). Exits 1 if the object does not verify (its checksum, or its size), 2 on an
    /// error.
    Dump {
        /// The pool file.
        file: PathBuf,
        /// The object's oid: its payload offset, as hex (`0x1e00010`) or decimal.
        #[arg(value_parser = parse_oid)]
        oid: u64,
        /// Dump at most this many payload bytes (K/M/G suffixes allowed).
        #[arg(long, value_parser = parse_size)]
        max: Option<u64>,
    },
    /// Inspect and check Arcadia log files (`pgl::log::Log`), without changing them.
    #[command(subcommand)]
    Log(LogCommand),
}

#[derive(Subcommand)]
enum LogCommand {
    /// Show a log's superline copies, policy, live records and any damage.
    Info {
        /// The log file.
        file: PathBuf,
    },
    /// List the records recovery would keep: LSN, offset, length and the first bytes.
    Dump {
        /// The log file.
        file: PathBuf,
        /// Start at this LSN.
        #[arg(long)]
        from: Option<u64>,
        /// List at most this many records.
        #[arg(long)]
        max: Option<usize>,
    },
    /// Verify both superline copies and every record, without changing the log.
    ///
    /// Exits 0 if the log is clean, 1 if a problem was found (recovery would drop a
    /// record, a superline copy is damaged, or the log is too damaged to open: both
    /// superline copies, or cut short), 2 on an error (a missing file, a file that is not
    /// a pgl log), as `pgl check` does for a pool.
    Check {
        /// The log file.
        file: PathBuf,
    },
}

/// Writes `s` to stdout; a closed pipe (`pgl info | head`) is not an error.
fn emit(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes()).and_then(|()| o.flush());
}

/// Parses the command line; clap prints what is wrong (or the help) and exits on a bad one.
fn parse() -> Cli {
    let e = match Cli::try_parse() {
        Ok(cli) => return cli,
        Err(e) => e,
    };
    // `pgl inject FILE KIND ...`: clap takes an unknown KIND for a stray argument ("unexpected
    // argument 'x' found"), since FILE was the one positional. Say it is a fault, and list them.
    let stray = e.get(clap::error::ContextKind::InvalidArg);
    if let (clap::error::ErrorKind::UnknownArgument, Some(clap::error::ContextValue::String(arg))) =
        (e.kind(), stray)
    {
        let mut cmd = Cli::command();
        let injecting = std::env::args_os().nth(1).is_some_and(|a| a == "inject");
        if let Some(inject) = cmd.find_subcommand_mut("inject").filter(|_| injecting) {
            if !arg.starts_with('-') {
                let kinds: Vec<String> = inject
                    .get_subcommands()
                    .map(|c| c.get_name().to_owned())
                    .filter(|n| n != "help")
                    .collect();
                let (last, rest) = kinds.split_last().expect("inject has faults");
                let msg = format!(
                    "unknown fault '{arg}': the faults are {} and {last} (`pgl inject --help` \
                     says what each does)",
                    rest.join(", ")
                );
                inject.set_bin_name("pgl inject");
                inject
                    .error(clap::error::ErrorKind::InvalidSubcommand, msg)
                    .exit();
            }
        }
    }
    e.exit()
}

fn main() -> ExitCode {
    let cli = parse();
    let result = match &cli.command {
        Command::Create(a) => create(a).map(|s| (s, false)),
        Command::Info { file, objects } => info(file, *objects).map(|s| (s, false)),
        Command::Check { file } => check(file),
        Command::Dump { file, oid, max } => dump(file, *oid, *max),
        Command::Scrub { file, repair } => scrub(file, *repair),
        Command::Inject { file, fault, seed } => inject(file, fault, *seed).map(|s| (s, false)),
        Command::Log(LogCommand::Info { file }) => log_info(file).map(|s| (s, false)),
        Command::Log(LogCommand::Dump { file, from, max }) => {
            log_dump(file, *from, *max).map(|s| (s, false))
        }
        Command::Log(LogCommand::Check { file }) => log_check(file),
    };
    match result {
        Ok((report, problems)) => {
            emit(&report);
            ExitCode::from(u8::from(problems))
        }
        Err(e) => {
            // A pool open elsewhere: the library's advice speaks to a program opening it
            // twice; here the other holder is another program, or another `pgl`.
            if let pgl::Error::AlreadyOpen {
                path, what: "pool", ..
            } = &e
            {
                let _ = writeln!(std::io::stderr(), "error: {}", already_open(path, &cli));
                return ExitCode::from(2);
            }
            // The oid came from the command line: say where the valid ones are listed.
            let hint = match (&e, &cli.command) {
                (
                    pgl::Error::InvalidOid { .. },
                    Command::Dump { file, .. } | Command::Inject { file, .. },
                ) => format!(
                    "; `pgl info --objects {}` lists the pool's objects and their oids",
                    file.display()
                ),
                _ => String::new(),
            };
            let _ = writeln!(std::io::stderr(), "error: {e}{hint}");
            ExitCode::from(2)
        }
    }
}

/// What `pgl` says of a pool another program (or another `pgl`) has open.
fn already_open(path: &std::path::Path, cli: &Cli) -> String {
    let why = match cli.command {
        Command::Info { .. } | Command::Check { .. } | Command::Dump { .. } => {
            "; a pool is inspected only while no program has it open to write (its commits \
             would change the bytes under the inspection)"
        }
        _ => "",
    };
    format!(
        "{}: the pool is open in another program (or another `pgl` command){why}; wait for \
         it to close the pool, or stop it, then run this again",
        path.display()
    )
}
