//! Data extents: which bytes of a range of a pool file the file system holds as data, and
//! which as holes (unallocated bytes that read as zeros), as `lseek(SEEK_DATA / SEEK_HOLE)`
//! tells.
//!
//! A pool created without preallocation is a sparse file, and on tmpfs a load from a hole
//! of a shared mapping allocates the page: a pass that reads every page (verifying or
//! recomputing zone parity) would make the file as large in memory as it is long. Such a
//! pass asks here first and does not read the holes: they are zeros, which add nothing to
//! an XOR.
//!
//! Invariant: a range `has_data` says `false` for reads as zeros (as long as nothing writes
//! it after the extents were taken). When the file system cannot tell, or for simulated
//! media, every byte counts as data: never a hole that is not one.

use std::fs::File;

/// The data extents of one range of a file, taken at one moment: sorted, disjoint,
/// non-empty `[start, end)` byte ranges, or "everything is data".
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DataExtents {
    /// `None`: every byte is data (unknown, or no file).
    ranges: Option<Vec<(u64, u64)>>,
}

impl DataExtents {
    /// Every byte is data: for media without a file, or a file system that cannot tell.
    pub(crate) fn everything() -> DataExtents {
        DataExtents { ranges: None }
    }

    /// The data extents of `[from, to)` of `file` (the parts of ranges past `to` cut
    /// off); `everything()` if the file system does not support `SEEK_DATA` or an offset
    /// is beyond `off_t`. Moves the file's offset (nothing in pgl reads or writes a pool
    /// file through its offset).
    pub(crate) fn of_file(file: &File, from: u64, to: u64) -> DataExtents {
        match data_ranges(file, from, to) {
            Some(ranges) => DataExtents {
                ranges: Some(ranges),
            },
            None => DataExtents::everything(),
        }
    }

    /// Counts `[off, off + len)` as data too (a page the media-error handler holds as
    /// lost: reading it is what repairs it).
    pub(crate) fn add(&mut self, off: u64, len: u64) {
        let Some(ranges) = &mut self.ranges else {
            return;
        };
        if len == 0 {
            return;
        }
        let end = off.saturating_add(len);
        let at = ranges.partition_point(|&(s, _)| s < off);
        ranges.insert(at, (off, end));
        // Merge what now overlaps or touches, keeping the list sorted and disjoint.
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for &(s, e) in ranges.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *ranges = merged;
    }

    /// Counts every range of `more` as data too, merging once (`add` per range would be
    /// quadratic in a long list).
    pub(crate) fn add_all(&mut self, more: impl IntoIterator<Item = (u64, u64)>) {
        let Some(ranges) = &mut self.ranges else {
            return;
        };
        let before = ranges.len();
        ranges.extend(more.into_iter().filter(|&(s, e)| s < e));
        if ranges.len() == before {
            return;
        }
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for &(s, e) in ranges.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *ranges = merged;
    }

    /// Whether any byte of `[off, off + len)` is data (a page partly data is data).
    pub(crate) fn has_data(&self, off: u64, len: u64) -> bool {
        let Some(ranges) = &self.ranges else {
            return true;
        };
        if len == 0 {
            return false;
        }
        // The first range ending past `off`; sorted and disjoint, so ends are sorted too.
        let i = ranges.partition_point(|&(_, e)| e <= off);
        ranges
            .get(i)
            .is_some_and(|&(s, _)| s < off.saturating_add(len))
    }

    /// Bytes of data in the extents (`None`: every byte counts as data).
    #[cfg(test)]
    pub(crate) fn data_bytes(&self) -> Option<u64> {
        self.ranges
            .as_ref()
            .map(|r| r.iter().map(|&(s, e)| e - s).sum())
    }
}

/// The data ranges of `[from, to)` of `file`, by `lseek(SEEK_DATA)` then `lseek(SEEK_HOLE)`
/// from each one's start; `None` where the system cannot tell.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
fn data_ranges(file: &File, from: u64, to: u64) -> Option<Vec<(u64, u64)>> {
    let mut ranges = Vec::new();
    let mut pos = from;
    while pos < to {
        let Some(start) = seek(file, pos, libc::SEEK_DATA)? else {
            break; // no data past `pos`
        };
        if start >= to {
            break;
        }
        // Every file ends with a hole, at its end if nowhere before (EOF counts as one).
        let end = seek(file, start, libc::SEEK_HOLE)?.unwrap_or(to).min(to);
        if end <= start {
            return None; // a file system that answers nonsense is not trusted
        }
        ranges.push((start.max(from), end));
        pos = end;
    }
    Some(ranges)
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn data_ranges(_file: &File, _from: u64, _to: u64) -> Option<Vec<(u64, u64)>> {
    None
}

/// `lseek(file, pos, whence)`: `Some(Some(offset))`, `Some(None)` for `ENXIO` (no data, or
/// no hole, past `pos`), `None` for any other failure (`EINVAL`: the file system does not
/// know `SEEK_DATA`) or an offset beyond `off_t`.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
fn seek(file: &File, pos: u64, whence: libc::c_int) -> Option<Option<u64>> {
    use std::os::fd::AsRawFd;
    let pos = libc::off_t::try_from(pos).ok()?;
    // SAFETY: lseek takes a descriptor and two integers and touches no memory of ours; the
    // descriptor is owned by `file`, which outlives the call.
    let rc = unsafe { libc::lseek(file.as_raw_fd(), pos, whence) };
    if rc >= 0 {
        return Some(u64::try_from(rc).ok());
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENXIO) => Some(None),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(ranges: &[(u64, u64)]) -> DataExtents {
        DataExtents {
            ranges: Some(ranges.to_vec()),
        }
    }

    #[test]
    fn a_range_has_data_when_it_overlaps_an_extent_by_a_byte() {
        let d = of(&[(4096, 8192), (16384, 20480)]);
        assert!(!d.has_data(0, 4096));
        assert!(d.has_data(0, 4097));
        assert!(d.has_data(8191, 1));
        assert!(!d.has_data(8192, 8192));
        assert!(d.has_data(8192, 8193));
        assert!(!d.has_data(20480, 4096));
        assert!(!d.has_data(5000, 0));
        assert!(!of(&[]).has_data(0, u64::MAX));
        assert!(DataExtents::everything().has_data(1 << 40, 1));
    }

    #[test]
    fn added_ranges_merge_and_stay_sorted() {
        let mut d = of(&[(4096, 8192), (16384, 20480)]);
        d.add(12288, 4096);
        assert_eq!(d, of(&[(4096, 8192), (12288, 20480)]));
        d.add(0, 4096);
        assert_eq!(d, of(&[(0, 8192), (12288, 20480)]));
        d.add(40960, 4096);
        assert_eq!(d, of(&[(0, 8192), (12288, 20480), (40960, 45056)]));
        d.add(8192, 4096);
        assert_eq!(d, of(&[(0, 20480), (40960, 45056)]));
        assert_eq!(d.data_bytes(), Some(20480 + 4096));
        let mut all = DataExtents::everything();
        all.add(0, 4096);
        assert_eq!(all, DataExtents::everything());
    }

    #[test]
    fn ranges_added_at_once_merge_like_one_by_one() {
        let mut d = of(&[(4096, 8192), (16384, 20480)]);
        d.add_all([(40960, 45056), (12288, 16384), (0, 4096), (5000, 5000)]);
        assert_eq!(d, of(&[(0, 8192), (12288, 20480), (40960, 45056)]));
        let mut all = DataExtents::everything();
        all.add_all([(0, 4096)]);
        assert_eq!(all, DataExtents::everything());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_sparse_file_shows_its_written_pages_as_data_and_the_rest_as_holes() {
        use std::os::unix::fs::FileExt;
        let path = crate::scratch_pool("extents");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("create");
        file.set_len(1 << 20).expect("size");
        file.write_all_at(&[1; 10], 3 * 4096 + 5).expect("write");
        file.write_all_at(&[2; 4096], 64 * 4096).expect("write");
        let d = DataExtents::of_file(&file, 0, 1 << 20);
        if d.data_bytes().is_some_and(|b| b >= 1 << 20) || d.data_bytes().is_none() {
            // A file system that keeps no holes (or cannot tell): all data, nothing to see.
            eprintln!("skipped: {} keeps no holes", path.display());
        } else {
            assert!(d.has_data(3 * 4096, 4096));
            assert!(d.has_data(64 * 4096, 4096));
            assert!(!d.has_data(0, 3 * 4096));
            assert!(!d.has_data(100 * 4096, 4096));
            // A window cut out of the middle keeps only what lies in it.
            let w = DataExtents::of_file(&file, 10 * 4096, 200 * 4096);
            assert!(!w.has_data(3 * 4096, 4096));
            assert!(w.has_data(64 * 4096, 4096));
            assert!(w.data_bytes().is_some_and(|b| b <= 200 * 4096));
        }
        drop(file);
        std::fs::remove_file(&path).expect("remove");
    }
}
