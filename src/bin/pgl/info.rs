//! `pgl info`: what a pool holds, read without writing the file (`Pool::open_read_only`).

use crate::progress::{slow, OPENING};
use crate::units::{bytes, utc};
use pgl::{Pool, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

pub(crate) fn info(file: &Path, list: bool) -> Result<String> {
    let pool = slow(OPENING, || Pool::open_read_only(file))?;
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
    if info.read_only {
        line(
            "flush",
            "none: opened read-only (what the counters below repaired was repaired in \
             memory; the file is unchanged)"
                .to_string(),
        );
    } else {
        line("flush", info.flush.to_string());
    }
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
    let table = h.class_table();
    let older = match table {
        pgl::ClassTable::Steps => " (a pool made before format 8)",
        pgl::ClassTable::StepsAndPowers => "",
    };
    let _ = writeln!(out, "  size classes    {table}{older}");

    let listing = slow("listing the objects", || pool.objects_with_damage())?;
    let hidden = listing.damaged_words();
    let objects = listing.objects;
    // Headers are listed as found, unverified: a size past the whole heap is a damaged
    // header, not added up (scribbled sizes would wrap the sums).
    let mut by_type: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut impossible = 0u64;
    for (_, oh) in &objects {
        let e = by_type.entry(oh.type_id).or_default();
        e.0 += 1;
        if oh.size > info.heap_capacity {
            impossible += 1;
        } else {
            e.1 = e.1.saturating_add(oh.size);
        }
    }
    let total = by_type.values().fold(0u64, |t, v| t.saturating_add(v.1));
    let _ = writeln!(
        out,
        "\nobjects   {} ({} payload bytes)",
        objects.len(),
        total
    );
    if impossible > 0 {
        let _ = writeln!(
            out,
            "  {impossible} of them with a header whose size does not fit the heap (damaged; \
             their bytes are not counted; `pgl check` reports them)"
        );
    }
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
        .map(|t| (t.type_id, Some(t.layout), type_name(&t.name)))
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
        ("header updates completed", s.header_updates_completed),
        ("lane repairs", s.lane_repairs),
        ("lane copies damaged", s.lane_copies_damaged),
        ("metadata repairs", s.metadata_repairs),
        ("bitmap repairs", s.bitmap_repairs),
        ("parity columns recomputed", s.parity_columns_recomputed),
        ("commits", s.commits),
        ("aborts", s.aborts),
        ("retries", s.retries),
        ("fences", s.fences),
        ("bytes logged", s.bytes_logged),
        ("bytes written", s.bytes_written),
        ("allocs", s.allocs),
        ("frees", s.frees),
    ] {
        let _ = writeln!(out, "  {k:<27}{v}");
    }
    Ok(out)
}

/// What `check` and `info` say of a Manual migration a crash interrupted (not a problem:
/// the program's next migration run deals with it).
pub(crate) fn migration_line(pool: &Pool) -> Result<Option<String>> {
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

/// A registered type's name as its user knows it: the hidden type of an `#[extendible]`
/// struct's extension group `k` (`path::__PglNodeExt1`, which the derive generates) as
/// `path::Node extension group 1`; every other name as stored.
pub(crate) fn type_name(stored: &str) -> String {
    let (path, last) = match stored.rfind("::") {
        Some(i) => stored.split_at(i + 2),
        None => ("", stored),
    };
    // The derive puts the group's type in a `const _: () = { ... }` beside the struct.
    let path = match path.strip_suffix("_::") {
        Some(p) if p.is_empty() || p.ends_with("::") => p,
        _ => path,
    };
    let group = last.strip_prefix("__Pgl").and_then(|rest| {
        let at = rest.rfind("Ext")?;
        let (name, k) = (&rest[..at], &rest[at + 3..]);
        let numbered = !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit());
        (numbered && !name.is_empty()).then(|| format!("{path}{name} extension group {k}"))
    });
    group.unwrap_or_else(|| stored.to_owned())
}

#[cfg(test)]
mod tests {
    use super::type_name;

    #[test]
    fn extension_groups_are_named_for_their_struct() {
        assert_eq!(
            type_name("app::__PglNodeExt1"),
            "app::Node extension group 1"
        );
        assert_eq!(type_name("__PglNodeExt12"), "Node extension group 12");
        assert_eq!(
            type_name("a::b::__PglNextExt2"),
            "a::b::Next extension group 2"
        );
        assert_eq!(
            type_name("app::_::__PglNodeExt1"),
            "app::Node extension group 1"
        );
        assert_eq!(
            type_name("my_::__PglNodeExt1"),
            "my_::Node extension group 1"
        );
        // Not a group's hidden type: as stored.
        assert_eq!(type_name("app::Node"), "app::Node");
        assert_eq!(type_name("app::__PglExt1"), "app::__PglExt1");
        assert_eq!(type_name("app::__PglNodeExt"), "app::__PglNodeExt");
        assert_eq!(type_name("app::__PglNodeExtra"), "app::__PglNodeExtra");
    }
}
