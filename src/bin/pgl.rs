//! `pgl`: create, inspect and check pool files, and inspect and check log files.
//!
//! Exit status: 0 on success; `pgl check`, `pgl scrub` and `pgl log check` exit 1 when
//! they find a problem; every command exits 2 on an error (a missing file, a file that is not a pool, a bad argument).
//! Errors are printed to stderr as `error: <message>`; reports go to stdout.

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pgl::checksum::{adler32, adler32_continue};
use pgl::log::Inspection;
use pgl::{Config, Error, Fault, ObjectHeader, Pool, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Create, inspect and check pgl pool files.
#[derive(Parser)]
#[command(name = "pgl", version, about, long_about = None)]
#[command(
    after_help = "Exit status: 0 ok; 1 `check`, `scrub` or `log check` found problems; 2 error."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a new pool file (sparse unless --preallocate: no data is written).
    Create(CreateArgs),
    /// Show a pool's header, geometry, space, objects by type and counters.
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
    /// Opening the pool rewrites a damaged header copy from the good one and replays
    /// committed transactions a crash interrupted, as every program opening it would.
    /// It repairs no object: `pgl scrub --repair` does. Exits 0 if the pool is clean, 1
    /// if a problem was found, 2 on an error.
    Check {
        /// The pool file.
        file: PathBuf,
    },
    /// Scrub a pool: verify every object's checksum and every zone's parity; with
    /// `--repair`, rebuild damaged objects from parity and fix stale parity.
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
    /// Print one object's header and a hex dump of its payload.
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
    /// Verify both superline copies and every record; exits 1 if recovery would drop a
    /// record or a superline copy is damaged.
    Check {
        /// The log file.
        file: PathBuf,
    },
}

/// The faults `pgl inject` can inject (see `pgl::Fault`).
#[derive(Subcommand)]
enum FaultArg {
    /// Random bytes over LEN bytes at pool offset OFFSET.
    Scribble {
        #[arg(value_parser = parse_oid)]
        offset: u64,
        #[arg(value_parser = parse_size)]
        len: u64,
    },
    /// Flip BITS random bits of the 8-byte word holding pool offset OFFSET.
    Bitflip {
        #[arg(value_parser = parse_oid)]
        offset: u64,
        #[arg(default_value_t = 1)]
        bits: u32,
    },
    /// Random bytes over LEN bytes of an object, AT bytes from its header's start.
    Object {
        #[arg(value_parser = parse_oid)]
        oid: u64,
        at: u64,
        len: u64,
    },
    /// Random bytes over LEN bytes of zone ZONE's metadata chunk, from byte AT.
    Metadata { zone: u64, at: u64, len: u64 },
    /// Random bytes over LEN bytes of copy COPY of redo lane LANE, from byte AT.
    Lane {
        lane: u64,
        copy: u64,
        at: u64,
        len: u64,
    },
    /// Random bytes over LEN bytes of copy COPY of the pool header, from byte AT.
    Header { copy: u64, at: u64, len: u64 },
    /// A media error: the page holding OFFSET loses its contents.
    Media {
        #[arg(value_parser = parse_oid)]
        offset: u64,
    },
}

impl FaultArg {
    fn fault(&self, seed: u64) -> Fault {
        match *self {
            FaultArg::Scribble { offset, len } => Fault::Scribble { offset, len, seed },
            FaultArg::Bitflip { offset, bits } => Fault::BitFlips { offset, bits, seed },
            FaultArg::Object { oid, at, len } => Fault::ObjectScribble { oid, at, len, seed },
            FaultArg::Metadata { zone, at, len } => Fault::MetadataScribble {
                zone,
                at,
                len,
                seed,
            },
            FaultArg::Lane {
                lane,
                copy,
                at,
                len,
            } => Fault::LaneScribble {
                lane,
                copy,
                at,
                len,
                seed,
            },
            FaultArg::Header { copy, at, len } => Fault::HeaderScribble {
                copy,
                at,
                len,
                seed,
            },
            FaultArg::Media { offset } => Fault::MediaError { offset },
        }
    }
}

/// What `slow` says while a pool opens: recovery and reconciling parity after a crash can
/// take a while on a large pool.
const OPENING: &str = "opening the pool (recovering it, if a crash interrupted it)";

/// Runs `work`, with a spinner saying `msg` on standard error once it has taken a second
/// (work that reports no progress of its own: opening a pool, walking a large heap).
fn slow<R>(msg: &'static str, work: impl FnOnce() -> R) -> R {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(msg);
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let r = std::thread::scope(|s| {
        let b = bar.clone();
        s.spawn(move || {
            if wait.recv_timeout(Duration::from_secs(1))
                == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            {
                b.set_draw_target(ProgressDrawTarget::stderr());
                b.enable_steady_tick(Duration::from_millis(200));
            }
        });
        let r = work();
        drop(done);
        r
    });
    bar.finish_and_clear();
    r
}

/// `pgl scrub`: the report, and whether damage remains.
fn scrub(file: &Path, repair: bool) -> Result<(String, bool)> {
    let pool = slow(OPENING, || Pool::open_any(file))?;
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template("scrubbing {wide_bar} {pos}/{len} objects, {eta} left")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let mut shown = false;
    let r = pool.scrub(repair, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
        if !shown && start.elapsed() > Duration::from_secs(1) {
            shown = true;
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(Duration::from_millis(200));
        }
    });
    bar.finish_and_clear();
    let r = r?;
    let mut out = String::new();
    let _ = writeln!(out, "scrubbing {}", file.display());
    let _ = writeln!(
        out,
        "  objects   {} checked, {} repaired, {} damaged",
        r.objects_checked,
        r.objects_repaired,
        r.damaged.len()
    );
    for (off, e) in &r.damaged {
        let _ = writeln!(out, "    {off:#x}: {e}");
    }
    let _ = writeln!(
        out,
        "  parity    {} page column(s) disagreed, {} recomputed",
        r.parity_columns_bad, r.parity_columns_fixed
    );
    let _ = writeln!(
        out,
        "  metadata  {} zone metadata cop(ies) damaged, {} rewritten from the other",
        r.metadata_copies_bad, r.metadata_copies_fixed
    );
    let _ = writeln!(
        out,
        "  bitmaps   {} allocation bitmap word(s) damaged, {} rebuilt from parity",
        r.bitmap_words_bad, r.bitmap_words_fixed
    );
    let clean = r.is_clean();
    let _ = writeln!(
        out,
        "result: {}",
        match (clean, repair) {
            (true, _) => "clean",
            (false, false) => "damaged (run with --repair to rebuild what parity can)",
            (false, true) => "damage remains that parity cannot rebuild",
        }
    );
    Ok((out, !clean))
}

/// `pgl inject`.
fn inject(file: &Path, fault: &FaultArg, seed: u64) -> Result<String> {
    let pool = slow(OPENING, || Pool::open_any(file))?;
    let f = fault.fault(seed);
    pool.inject(&f)?;
    Ok(format!("injected {f} into {}\n", file.display()))
}

/// Arguments of `pgl create`. Unset values take `pgl::Config`'s defaults.
#[derive(clap::Args)]
struct CreateArgs {
    /// The file to create; it must not exist.
    file: PathBuf,
    /// The layout name programs open the pool with (1 to 63 bytes).
    #[arg(long, default_value = "pgl")]
    layout: String,
    /// Initial size, rounded down to whole zones (K/M/G suffixes: 64M, 1G).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    size: u64,
    /// Bytes per chunk: a power of two from 16K to 64M [default: 256K].
    #[arg(long, value_parser = parse_size)]
    chunk_size: Option<u64>,
    /// Chunks per row [default: 1].
    #[arg(long)]
    chunks_per_row: Option<u64>,
    /// Data rows per zone; one more row holds parity [default: 100].
    #[arg(long)]
    rows: Option<u64>,
    /// Redo lanes: how many transactions can commit at once [default: 8].
    #[arg(long)]
    lanes: Option<u64>,
    /// Bytes of one lane copy: the largest redo record [default: 256K].
    #[arg(long, value_parser = parse_size)]
    lane_size: Option<u64>,
    /// Give the file all its blocks now, as PMDK does: a full file system fails here
    /// instead of killing a program with SIGBUS when it first writes a page.
    #[arg(long)]
    preallocate: bool,
}

/// Parses a byte count: a decimal number with an optional K, M, G or T suffix (powers of
/// 1024; `KiB`, `KB` and `k` are accepted too).
fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let bad = || format!("{s:?} is not a size: use bytes or a number with K, M, G or T (e.g. 64M)");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Parses an oid: `0x`-prefixed hex or decimal.
fn parse_oid(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => t.replace('_', "").parse(),
    };
    r.map_err(|_| format!("{s:?} is not an oid: use hex (0x1e00010) or decimal"))
}

/// A byte count with its binary-unit rounding: `52953088 (50.5 MiB)`.
fn bytes(n: u64) -> String {
    if n < 1024 {
        return format!("{n} B");
    }
    format!("{n} ({})", human(n))
}

/// `n` bytes in the largest binary unit that keeps it at least 1, to one decimal.
fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    let mut v = n as f64;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        return format!("{n} B");
    }
    let s = format!("{v:.1}");
    format!("{} {}", s.strip_suffix(".0").unwrap_or(&s), UNITS[unit])
}

/// Seconds since the Unix epoch as `YYYY-MM-DD hh:mm:ss UTC`.
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn create(a: &CreateArgs) -> Result<String> {
    let mut config = Config::new(a.layout.as_str());
    config.size = a.size;
    let set = |field: &mut u64, v: Option<u64>| {
        if let Some(v) = v {
            *field = v;
        }
    };
    set(&mut config.chunk_size, a.chunk_size);
    set(&mut config.chunks_per_row, a.chunks_per_row);
    set(&mut config.rows, a.rows);
    set(&mut config.lanes, a.lanes);
    set(&mut config.lane_size, a.lane_size);
    config.preallocate = a.preallocate;
    let pool = slow("creating the pool", || Pool::create(&a.file, &config))?;
    let info = pool.info();
    let mut out = String::new();
    let _ = writeln!(out, "created {}", a.file.display());
    let _ = writeln!(out, "  layout  {:?}", info.header.layout);
    let _ = writeln!(
        out,
        "  size    {}, {} zone(s)",
        bytes(info.size),
        info.header.zones
    );
    let _ = writeln!(out, "  heap    {} for objects", bytes(info.heap_capacity));
    Ok(out)
}

fn info(file: &Path, list: bool) -> Result<String> {
    let pool = slow(OPENING, || Pool::open_any(file))?;
    let info = pool.info();
    let h = &info.header;
    let g = &h.geo;
    let mut out = String::new();
    let mut line = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<10}{v}");
    };
    line("pool", file.display().to_string());
    line("uuid", h.uuid_string());
    line("layout", format!("{:?}", h.layout));
    line(
        "format",
        format!("version {}, generation {}", h.version, h.generation),
    );
    line("created", utc(h.created));
    line("size", bytes(info.size));
    line("heap", format!("{} capacity", bytes(info.heap_capacity)));
    line("used", bytes(info.heap_capacity.saturating_sub(info.free)));
    line("free", bytes(info.free));
    line("flush", info.flush.to_string());
    if let Some(m) = migration_line(&pool)? {
        line("migration", m);
    }

    let _ = writeln!(out, "\ngeometry");
    let _ = writeln!(out, "  chunk size      {}", bytes(g.chunk_size));
    let _ = writeln!(out, "  chunks per row  {}", g.chunks_per_row);
    let _ = writeln!(out, "  rows            {} data + 1 parity", g.rows);
    let _ = writeln!(out, "  zone size       {}", bytes(g.zone_size()));
    let _ = writeln!(out, "  zones           {}", h.zones);
    let _ = writeln!(
        out,
        "  lanes           {} × {} (2 copies)",
        g.lanes,
        bytes(g.lane_size)
    );

    let listing = slow("listing the objects", || pool.objects_with_damage())?;
    let hidden = listing.damaged_words();
    let objects = listing.objects;
    let mut by_type: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for (_, oh) in &objects {
        let e = by_type.entry(oh.type_id).or_default();
        e.0 += 1;
        e.1 += oh.size;
    }
    let total: u64 = by_type.values().map(|v| v.1).sum();
    let _ = writeln!(
        out,
        "\nobjects   {} ({} payload bytes)",
        objects.len(),
        total
    );
    if !hidden.is_empty() {
        let _ = writeln!(
            out,
            "  and uncounted ones under {} allocation bitmap word(s) that do not verify \
             (`pgl check` reports them)",
            hidden.len()
        );
    }
    // The registry names each type; a type with objects but no entry (stored by a pgl
    // older than the registry) is still listed, and a damaged registry is reported.
    let types = match pool.types() {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(out, "  type registry unreadable: {e}");
            Vec::new()
        }
    };
    let mut rows: Vec<(u32, Option<u64>, String)> = types
        .iter()
        .map(|t| (t.type_id, Some(t.layout), t.name.clone()))
        .collect();
    for t in by_type.keys() {
        if !rows.iter().any(|r| r.0 == *t) {
            rows.push((*t, None, "(not in the type registry)".into()));
        }
    }
    if !rows.is_empty() {
        let _ = writeln!(
            out,
            "  {:<12}{:>8}{:>12}  {:<20}type (registry)",
            "type id", "count", "bytes", "layout"
        );
        for (t, layout, name) in &rows {
            let (n, b) = by_type.get(t).copied().unwrap_or_default();
            let layout = layout.map_or_else(|| "-".into(), |l| format!("{l:#018x}"));
            let _ = writeln!(
                out,
                "  {:<12}{n:>8}{b:>12}  {layout:<20}{name}",
                format!("{t:#010x}")
            );
        }
    }

    if list {
        let mut sorted: Vec<_> = objects.iter().collect();
        sorted.sort_unstable_by_key(|(off, _)| *off);
        let _ = writeln!(
            out,
            "\n  {:<14}{:<12}{:>10}  type",
            "oid", "type id", "bytes"
        );
        for (off, oh) in sorted {
            let name = rows
                .iter()
                .find(|r| r.0 == oh.type_id)
                .map_or("", |r| r.2.as_str());
            let _ = writeln!(
                out,
                "  {:<14}{:<12}{:>10}  {name}",
                format!("{off:#x}"),
                format!("{:#010x}", oh.type_id),
                oh.size
            );
        }
    }

    let s = pool.stats();
    let _ = writeln!(out, "\ncounters (since this open)");
    for (k, v) in [
        ("records replayed", s.records_replayed),
        ("header repairs", s.header_repairs),
        ("commits", s.commits),
        ("aborts", s.aborts),
        ("retries", s.retries),
        ("fences", s.fences),
        ("bytes logged", s.bytes_logged),
        ("bytes written", s.bytes_written),
        ("allocs", s.allocs),
        ("frees", s.frees),
    ] {
        let _ = writeln!(out, "  {k:<18}{v}");
    }
    Ok(out)
}

/// Errors of `Pool::open` that mean the pool is damaged, not that it cannot be read at all.
fn is_damage(e: &Error) -> bool {
    matches!(
        e,
        Error::HeaderCorrupt { .. }
            | Error::Corrupt { .. }
            | Error::Truncated { .. }
            | Error::ChecksumMismatch { .. }
            | Error::BitmapMismatch { .. }
    )
}

/// What `check` and `info` say of a Manual migration a crash interrupted (not a problem:
/// the program's next migration run deals with it).
fn migration_line(pool: &Pool) -> Result<Option<String>> {
    Ok(pool.pending_migration()?.map(|m| {
        if m.switched {
            format!(
                "interrupted after its switch: {} of {} old objects still to free; the \
                 program's migration (same conversions) finishes it",
                m.to_free, m.objects
            )
        } else {
            format!(
                "interrupted before its switch: {} unreachable new objects; the program's \
                 next migration run rolls it back",
                m.to_free
            )
        }
    }))
}

/// `pgl check`: the report, and whether it found problems.
fn check(file: &Path) -> Result<(String, bool)> {
    let mut out = String::new();
    let _ = writeln!(out, "checking {}", file.display());
    let pool = match slow(OPENING, || Pool::open_any(file)) {
        Ok(p) => p,
        Err(e) if is_damage(&e) => {
            let _ = writeln!(out, "  open      FAILED: {e}");
            let _ = writeln!(out, "result: 1 problem: the pool cannot be opened");
            return Ok((out, true));
        }
        Err(e) => return Err(e),
    };
    let mut problems = 0u64;
    let s = pool.stats();
    if s.header_repairs == 0 {
        let _ = writeln!(out, "  header    both copies valid");
    } else {
        problems += 1;
        let _ = writeln!(
            out,
            "  header    a damaged copy was rewritten from the valid one"
        );
    }
    let _ = writeln!(
        out,
        "  lanes     valid; {} committed record(s) replayed",
        s.records_replayed
    );
    if s.metadata_repairs == 0 {
        let _ = writeln!(out, "  metadata  both copies valid in every zone");
    } else {
        problems += s.metadata_repairs;
        let _ = writeln!(
            out,
            "  metadata  {} damaged zone metadata cop(ies) rewritten from the other",
            s.metadata_repairs
        );
    }
    if s.bitmap_repairs == 0 && s.runs_quarantined == 0 {
        let _ = writeln!(out, "  bitmaps   every allocation bitmap word valid");
    }
    if s.bitmap_repairs > 0 {
        problems += s.bitmap_repairs;
        let _ = writeln!(
            out,
            "  bitmaps   {} damaged allocation bitmap word(s) rebuilt from parity",
            s.bitmap_repairs
        );
    }
    if s.runs_quarantined > 0 {
        // The words themselves are counted below, where the objects are verified.
        let _ = writeln!(
            out,
            "  bitmaps   {} run(s) out of service: an allocation bitmap word neither \
             verifies nor could be rebuilt (their objects stay readable; nothing is \
             allocated there)",
            s.runs_quarantined
        );
    }
    if let Some(line) = migration_line(&pool)? {
        let _ = writeln!(out, "  migration {line}");
    }
    match pool.types() {
        Ok(t) => {
            let _ = writeln!(out, "  types     {} registered, all entries valid", t.len());
        }
        Err(e) if is_damage(&e) => {
            problems += 1;
            let _ = writeln!(out, "  types     FAILED: {e}");
        }
        Err(e) => return Err(e),
    }

    // The parity line is written where it belongs once the objects are verified: a page
    // that disagrees because an object in its column was damaged is that object's problem,
    // not a second one.
    let parity_at = out.len();
    let bad_pages = match pool.verify_parity() {
        Ok(bad) => Some(bad),
        Err(Error::InvalidConfig { .. }) => None,
        Err(e) => return Err(e),
    };
    let parity_kept = bad_pages.is_some();
    let parity_line = |damaged: &[(u64, Error)]| -> (String, u64) {
        let Some(bad) = &bad_pages else {
            return ("  parity    not kept by this pool\n".into(), 0);
        };
        if bad.is_empty() {
            return ("  parity    consistent in every zone\n".into(), 0);
        }
        let info = pool.info();
        let explained: Vec<u64> = damaged
            .iter()
            .flat_map(|(off, e)| {
                let len = match e {
                    Error::ChecksumMismatch { size, .. } => *size,
                    _ => 8,
                };
                columns_parity(&info.header.geo, info.header.zones, *off, len)
            })
            .collect();
        let alone = bad.iter().filter(|p| !explained.contains(p)).count() as u64;
        let pages = bad
            .iter()
            .map(|o| format!("{o:#x}"))
            .collect::<Vec<_>>()
            .join(", ");
        let why = match alone {
            0 => " (the page columns of the damaged objects below)".to_string(),
            n if n == bad.len() as u64 => String::new(),
            n => format!(" ({n} of them not explained by the damaged objects below)"),
        };
        (
            format!(
                "  parity    {} page(s) disagree with their rows: {pages}{why}\n",
                bad.len()
            ),
            alone,
        )
    };
    // Bitmap words beyond repair are reported by verify_objects, which verifies the rest.
    let (total, hidden) = match pool.objects_with_damage() {
        Ok(l) => (l.objects.len() as u64, l.damaged_words().len() as u64),
        Err(e) if is_damage(&e) => {
            let (line, n) = parity_line(&[]);
            out.insert_str(parity_at, &line);
            let _ = writeln!(out, "  heap      FAILED: {e}");
            let _ = writeln!(out, "result: {} problem(s)", problems + n + 1);
            return Ok((out, true));
        }
        Err(e) => return Err(e),
    };
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    bar.set_style(
        ProgressStyle::with_template("verifying {wide_bar} {pos}/{len} objects, {eta} left")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let mut shown = false;
    let bad = pool.verify_objects(|done, _| {
        bar.set_position(done);
        if !shown && start.elapsed() > Duration::from_secs(1) {
            shown = true;
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(Duration::from_millis(200));
        }
    });
    bar.finish_and_clear();
    let bad = match bad {
        Ok(b) => b,
        Err(Error::InvalidConfig { .. }) => {
            let _ = writeln!(
                out,
                "  objects   {total}; checksums not kept by this pool: none verified"
            );
            // Without checksums nothing else reports the bitmap words.
            let (line, n) = parity_line(&[]);
            out.insert_str(parity_at, &line);
            problems += hidden + n;
            let verdict = if problems == 0 {
                "result: clean (as far as parity tells)".to_string()
            } else {
                format!("result: {problems} problem(s)")
            };
            let _ = writeln!(out, "{verdict}");
            return Ok((out, problems > 0));
        }
        Err(e) if is_damage(&e) => {
            let (line, n) = parity_line(&[]);
            out.insert_str(parity_at, &line);
            let _ = writeln!(out, "  heap      FAILED: {e}");
            let _ = writeln!(out, "result: {} problem(s)", problems + n + 1);
            return Ok((out, true));
        }
        Err(e) => return Err(e),
    };
    let (line, n) = parity_line(&bad);
    out.insert_str(parity_at, &line);
    problems += n;
    // Bitmap words that hide their blocks are not among the objects checked.
    let (words, objects): (Vec<_>, Vec<_>) = bad
        .iter()
        .partition(|(_, e)| matches!(e, Error::BitmapMismatch { .. }));
    for (off, e) in &words {
        let _ = writeln!(out, "  bitmaps   {off:#x}: {e}");
    }
    let _ = writeln!(out, "  objects   {total} checked, {} bad", objects.len());
    for (off, e) in &objects {
        match e {
            // The error's own text is for a program, after repair from parity failed;
            // `check` has not tried: say what was found, and (below) how to repair it.
            Error::ChecksumMismatch {
                type_id,
                ref type_name,
                size,
                stored,
                computed,
                ..
            } => {
                let named = match type_name {
                    Some(n) => format!("`{n}`, "),
                    None => String::new(),
                };
                let _ = writeln!(
                    out,
                    "    {off:#x}: checksum mismatch ({named}type id {type_id:#010x}, {size} \
                     bytes): stored {stored:#010x}, computed {computed:#010x}; changed \
                     outside a transaction (a scribble or a media error)"
                );
            }
            e => {
                let _ = writeln!(out, "    {off:#x}: {e}");
            }
        }
    }
    problems += bad.len() as u64;
    if problems == 0 {
        let _ = writeln!(out, "result: clean");
    } else if !objects.is_empty() && parity_kept {
        let _ = writeln!(
            out,
            "result: {problems} problem(s); `pgl scrub --repair` rebuilds from parity what \
             it can"
        );
    } else {
        let _ = writeln!(out, "result: {problems} problem(s)");
    }
    Ok((out, problems > 0))
}

/// The parity pages of the page columns that the `len` bytes at `off` lie in (an object's
/// header included, or a bitmap word): where damage to them makes parity disagree.
fn columns_parity(geo: &pgl::geometry::Geometry, zones: u64, off: u64, len: u64) -> Vec<u64> {
    let page = pgl::geometry::PAGE;
    let (from, to) = (off.saturating_sub(16), off.saturating_add(len));
    let mut out = Vec::new();
    for at in (from / page * page..to).step_by(page as usize) {
        let at = at.max(from);
        let (Some(pos), Some(col)) = (geo.locate(at, zones), geo.page_column(at)) else {
            continue;
        };
        out.push(geo.parity_offset(pos.zone) + col * page);
    }
    out
}

/// The Adler-32 an object with this header and payload should carry (see
/// `heap/layout.rs`: it covers the payload offset, size and type id, then the payload).
fn expected_checksum(off: u64, h: &ObjectHeader, payload: &[u8]) -> u32 {
    let mut prefix = [0u8; 20];
    prefix[0..8].copy_from_slice(&off.to_le_bytes());
    prefix[8..16].copy_from_slice(&h.size.to_le_bytes());
    prefix[16..20].copy_from_slice(&h.type_id.to_le_bytes());
    adler32_continue(adler32(&prefix), payload)
}

/// `hexdump -C`-style lines; runs of identical lines are shown once, then `*`.
fn hex_dump(out: &mut String, data: &[u8]) {
    let mut prev: Option<&[u8]> = None;
    let mut starred = false;
    for (i, row) in data.chunks(16).enumerate() {
        if prev == Some(row) && row.len() == 16 {
            if !starred {
                out.push_str("*\n");
                starred = true;
            }
            continue;
        }
        starred = false;
        prev = Some(row);
        let _ = write!(out, "{:08x} ", i * 16);
        for j in 0..16 {
            if j == 8 {
                out.push(' ');
            }
            match row.get(j) {
                Some(b) => {
                    let _ = write!(out, " {b:02x}");
                }
                None => out.push_str("   "),
            }
        }
        out.push_str("  |");
        out.extend(row.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        }));
        out.push_str("|\n");
    }
    let _ = writeln!(out, "{:08x}", data.len());
}

fn dump(file: &Path, oid: u64, max: Option<u64>) -> Result<String> {
    let pool = slow(OPENING, || Pool::open_any(file))?;
    let (h, data) = pool.read_object(oid)?;
    let mut out = String::new();
    let _ = writeln!(out, "object {oid:#x}");
    let _ = writeln!(out, "  size      {} bytes", h.size);
    let _ = writeln!(out, "  type id   {:#010x}", h.type_id);
    let computed = expected_checksum(oid, &h, &data);
    if computed == h.checksum && h.size == data.len() as u64 {
        let _ = writeln!(out, "  checksum  {:#010x} (valid)", h.checksum);
    } else {
        let _ = writeln!(
            out,
            "  checksum  {:#010x} (MISMATCH: the payload sums to {computed:#010x})",
            h.checksum
        );
    }
    let shown = max.map_or(data.len(), |m| data.len().min(m as usize));
    let _ = writeln!(out, "payload");
    hex_dump(&mut out, &data[..shown]);
    if shown < data.len() {
        let _ = writeln!(out, "({} more bytes not shown)", data.len() - shown);
    }
    Ok(out)
}

/// One superline copy, for `pgl log info`.
fn copy_line(c: &std::result::Result<pgl::log::format::Superline, String>) -> String {
    match c {
        Ok(s) => format!(
            "seq {}, start LSN {}, epoch {} from LSN {}",
            s.seq, s.start_lsn, s.epoch, s.epoch_lsn
        ),
        Err(e) => format!("INVALID: {e}"),
    }
}

/// The damage `pgl log info` and `pgl log check` report, one line each.
fn log_problems(i: &Inspection) -> Vec<String> {
    let mut v = Vec::new();
    for (k, c) in i.copies.iter().enumerate() {
        if let Err(e) = c {
            v.push(format!(
                "superline copy {} is invalid ({e}); opening the log rewrites it",
                ["A", "B"][k]
            ));
        }
    }
    if let Some(t) = &i.report.torn {
        v.push(format!(
            "record LSN {} at {:#x} is torn or damaged ({}); opening the log drops it and \
             {} record(s) after it",
            t.lsn,
            t.offset,
            t.reason,
            i.report.dropped - 1
        ));
    }
    v
}

fn log_info(file: &Path) -> Result<String> {
    let i = slow("reading the log", || Inspection::open(file))?;
    let r = &i.report;
    let s = &i.superline;
    let mut out = String::new();
    let _ = writeln!(out, "log       {}", file.display());
    let _ = writeln!(out, "format    version {}", pgl::log::format::VERSION);
    let _ = writeln!(out, "area      {}", bytes(i.capacity));
    let _ = writeln!(out, "policy    {}", i.policy);
    let _ = writeln!(
        out,
        "epoch     {} (from LSN {}), superline seq {}",
        s.epoch, s.epoch_lsn, s.seq
    );
    let _ = writeln!(
        out,
        "superline copy {} in use",
        ["A", "B"][r.superline_copy]
    );
    let _ = writeln!(out, "  copy A  {}", copy_line(&i.copies[0]));
    let _ = writeln!(out, "  copy B  {}", copy_line(&i.copies[1]));
    let _ = writeln!(out, "records   {}", r.records);
    if r.records > 0 {
        let _ = writeln!(out, "  LSNs    {} to {}", r.start_lsn, r.next_lsn - 1);
    }
    let _ = writeln!(
        out,
        "  bytes   {} ({:.1}% of the area)",
        bytes(r.bytes),
        r.bytes as f64 * 100.0 / i.capacity as f64
    );
    let aborted = i.records().filter(|x| x.aborted).count();
    let _ = writeln!(out, "  aborted {aborted}");
    let _ = writeln!(out, "next LSN  {}", r.next_lsn);
    let problems = log_problems(&i);
    if problems.is_empty() {
        let _ = writeln!(out, "damage    none");
    }
    for p in problems {
        let _ = writeln!(out, "damage    {p}");
    }
    Ok(out)
}

fn log_dump(file: &Path, from: Option<u64>, max: Option<usize>) -> Result<String> {
    let i = slow("reading the log", || Inspection::open(file))?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>10}  {:>10}  {:>8}  {:>5}  first bytes",
        "LSN", "offset", "length", "epoch"
    );
    let from = from.unwrap_or(0);
    for (shown, rec) in i.records().filter(|r| r.lsn >= from).enumerate() {
        if max.is_some_and(|m| shown >= m) {
            let _ = writeln!(out, "(more records not shown)");
            break;
        }
        let head: Vec<String> = rec
            .payload
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect();
        let text: String = rec
            .payload
            .iter()
            .take(16)
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "{:>10}  {:>#10x}  {:>8}  {:>5}  {}{} |{text}|{}",
            rec.lsn,
            rec.offset,
            rec.payload.len(),
            rec.epoch,
            head.join(" "),
            "   ".repeat(16 - head.len()),
            if rec.aborted { " (aborted)" } else { "" }
        );
    }
    if let Some(t) = &i.report.torn {
        let _ = writeln!(
            out,
            "{:>10}  {:>#10x}  torn or damaged: {}",
            t.lsn, t.offset, t.reason
        );
    }
    Ok(out)
}

fn log_check(file: &Path) -> Result<(String, bool)> {
    let mut out = String::new();
    let _ = writeln!(out, "checking {}", file.display());
    let i = match slow("reading the log", || Inspection::open(file)) {
        Ok(i) => i,
        Err(e @ Error::NotALog { .. }) => {
            let _ = writeln!(out, "  open      FAILED: {e}");
            let _ = writeln!(out, "result: 1 problem: the log cannot be opened");
            return Ok((out, true));
        }
        Err(e) => return Err(e),
    };
    let r = &i.report;
    let in_use = ["A", "B"][r.superline_copy];
    if r.other_copy_invalid.is_none() {
        let _ = writeln!(out, "  superline both copies valid (copy {in_use} in use)");
    } else {
        let _ = writeln!(out, "  superline copy {in_use} valid (in use)");
    }
    let _ = writeln!(
        out,
        "  records   {} verified (LSNs {} to {}, {})",
        r.records,
        r.start_lsn,
        r.next_lsn.saturating_sub(1),
        bytes(r.bytes)
    );
    let problems = log_problems(&i);
    for p in &problems {
        let _ = writeln!(out, "  problem   {p}");
    }
    if problems.is_empty() {
        let _ = writeln!(out, "result: clean");
    } else {
        let _ = writeln!(out, "result: {} problem(s)", problems.len());
    }
    Ok((out, !problems.is_empty()))
}

/// Writes `s` to stdout; a closed pipe (`pgl info | head`) is not an error.
fn emit(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes()).and_then(|()| o.flush());
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Create(a) => create(a).map(|s| (s, false)),
        Command::Info { file, objects } => info(file, *objects).map(|s| (s, false)),
        Command::Check { file } => check(file),
        Command::Dump { file, oid, max } => dump(file, *oid, *max).map(|s| (s, false)),
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
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("256k"), Ok(256 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn damage_is_traced_to_the_parity_pages_of_its_columns() {
        let geo = Config::small("cols").geometry();
        let (page, row) = (pgl::geometry::PAGE, geo.row_size());
        let zone1 = geo.zone_offset(1);
        // An object whose header and first 8 bytes lie in page 2 of row 1 of zone 1.
        let off = zone1 + row + 2 * page + 64;
        assert_eq!(
            columns_parity(&geo, 2, off, 8),
            vec![geo.parity_offset(1) + 2 * page]
        );
        // One that straddles a page boundary: both columns.
        let off = zone1 + 3 * page - 8;
        assert_eq!(
            columns_parity(&geo, 2, off, 100),
            vec![
                geo.parity_offset(1) + 2 * page,
                geo.parity_offset(1) + 3 * page
            ]
        );
        // Outside the zones' data rows: no column.
        assert!(columns_parity(&geo, 1, zone1 + 64, 8).is_empty());
    }

    #[test]
    fn slow_work_returns_its_value_whether_or_not_the_spinner_showed() {
        assert_eq!(slow("fast", || 7), 7);
        let t = Instant::now();
        assert_eq!(
            slow("slow", || {
                std::thread::sleep(Duration::from_millis(1100));
                8
            }),
            8
        );
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "the spinner held it up"
        );
    }

    #[test]
    fn oids() {
        assert_eq!(parse_oid("0x1e00010"), Ok(0x1e0_0010));
        assert_eq!(parse_oid("4096"), Ok(4096));
        assert!(parse_oid("0xzz").is_err());
    }

    #[test]
    fn dates_and_units() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(human(64 << 20), "64 MiB");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(bytes(100), "100 B");
    }

    #[test]
    fn hex_dump_squeezes_repeats() {
        let mut s = String::new();
        let mut data = vec![0u8; 64];
        data[0] = b'A';
        hex_dump(&mut s, &data);
        assert_eq!(
            s,
            "00000000  41 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |A...............|\n\
             00000010  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|\n\
             *\n\
             00000040\n"
        );
    }
}
