//! `pgl dump`.

use crate::check::expected_checksum;
use crate::progress::{slow, OPENING};
use pgl::{Pool, Result};
use std::fmt::Write as _;
use std::path::Path;

/// `hexdump -C`-style lines; runs of identical lines are shown once, then `*`.
pub(crate) fn hex_dump(out: &mut String, data: &[u8]) {
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

/// `pgl dump`: the report, and whether it shows damage (a checksum that does not match).
/// The pool is opened read-only: dumping never writes the file.
pub(crate) fn dump(file: &Path, oid: u64, max: Option<u64>) -> Result<(String, bool)> {
    let pool = slow(OPENING, || Pool::open_read_only(file))?;
    let (h, data) = pool.read_object(oid)?;
    let mut out = String::new();
    let _ = writeln!(out, "object {oid:#x}");
    let _ = writeln!(out, "  size      {} bytes", h.size);
    let _ = writeln!(out, "  type id   {:#010x}", h.type_id);
    let computed = expected_checksum(oid, &h, &data);
    let valid = computed == h.checksum && h.size == data.len() as u64;
    if valid {
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
    Ok((out, !valid))
}

#[cfg(test)]
mod tests {
    use super::*;

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
