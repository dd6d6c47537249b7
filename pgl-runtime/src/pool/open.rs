//! Creating and opening a pool: the header copies (repaired from each other), crash
//! recovery, zone metadata replicas, allocation bitmaps, parity and checksums brought back
//! in line, then the volatile heap and the transaction engine.
//!
//! Invariant: `Pool::load` returns a pool only once every repair it made is durable and
//! the header says the pool is open (so that a crash from here on is recovered again); on
//! a private mapping (`Pool::open_read_only`) the same steps run in the process's own copy
//! of the bytes, and the header is left as read.

use super::config::Config;
use super::header::{
    Header, HeaderFault, FLAG_NO_CHECKSUMS, FLAG_OPEN, FLAG_PARITY, FLAG_POWER_CLASSES,
    FORMAT_VERSION,
};
use super::pool::{new_uuid, now_secs, Inner, Pool, ALREADY_OPEN, ALREADY_OPEN_READ_ONLY};
use super::run_classes;
use crate::geometry::{Geometry, PAGE};
use crate::heap::Heap;
use crate::persist::Media;
use crate::tx::{self, Engine};
use crate::{Error, Result};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Pool {
    /// Writes both header copies of a new pool (everything else is zeros), durably.
    pub(super) fn format(
        media: &Media,
        geo: &Geometry,
        zones: u64,
        layout: &str,
        parity: bool,
    ) -> Result<()> {
        let h = Header {
            version: FORMAT_VERSION,
            generation: 1,
            uuid: new_uuid(),
            layout: layout.to_owned(),
            geo: *geo,
            zones,
            created: now_secs(),
            // A new pool is zeros, whose parity (zeros) is consistent. Its runs are cut to
            // the power classes for good.
            flags: FLAG_POWER_CLASSES | if parity { FLAG_PARITY } else { 0 },
        };
        let bytes = h.encode();
        for copy in 0..2 {
            let off = geo.header_offset(copy);
            // SAFETY: a fresh pool nobody else has mapped; the header page is inside it.
            unsafe { media.write(off, &bytes) };
            media.flush(off, PAGE);
        }
        media.fence();
        media.check()
    }

    /// Opens the pool on `media` with `config`; with `keep_modes`, zone parity and object
    /// checksums are kept or not as the pool has them instead of as `config` says.
    pub(super) fn from_media(
        media: Media,
        layout: Option<&str>,
        config: &Config,
        keep_modes: bool,
    ) -> Result<Pool> {
        let path = media.path();
        Self::load(media, layout, config, keep_modes).map_err(|e| e.in_pool(&path, |_| None))
    }

    /// `from_media`, its errors not yet naming the file.
    fn load(media: Media, layout: Option<&str>, config: &Config, keep_modes: bool) -> Result<Pool> {
        // Before anything is read: another `Pool` on this file could be changing it. A
        // read-only open writes only its private copy, and shares the file with others.
        let read_only = media.is_private();
        if read_only {
            media.lock_shared("pool", ALREADY_OPEN_READ_ONLY)?;
        } else {
            media.lock_exclusive("pool", ALREADY_OPEN)?;
        }
        let path = media.path();
        let len = media.len();
        if len < 2 * PAGE {
            // A pool cut short inside its headers still has its first copy: a truncated
            // pool (to restore), not some other file.
            if len >= PAGE {
                let mut first = vec![0u8; PAGE as usize];
                // SAFETY: the first page lies in the file (`len >= PAGE`); the file is
                // locked, and nothing else reads or writes it while it opens.
                unsafe { media.read(0, &mut first) };
                if let Ok(h) = Header::decode(&first) {
                    return Err(Error::Truncated {
                        path,
                        expected: h.pool_size(),
                        actual: len,
                    });
                }
            }
            return Err(Error::NotAPool {
                path,
                reason: format!("{len} bytes is smaller than a pool header"),
            });
        }
        let (header, repairs) = read_header(&media, &path)?;
        if let Some(l) = layout {
            if header.layout != l {
                return Err(Error::LayoutName {
                    path,
                    expected: l.to_owned(),
                    found: header.layout.clone(),
                });
            }
        }
        let size = header.pool_size();
        if len < size {
            return Err(Error::Truncated {
                path,
                expected: size,
                actual: len,
            });
        }
        if size > media.reserve() {
            return Err(Error::config(format!(
                "the pool is {size} bytes, more than max_size {}",
                media.reserve()
            )));
        }
        let geo = header.geo;
        let rec = tx::recover(&media, &geo, size)?;
        // After a crash (the OPEN flag is still set) any subset of the last commits' data
        // and parity lines may have reached media: the zones the lanes marked dirty are
        // reconciled with their parity (replay is done, so the rows are final; damage
        // parity can still rebuild is repaired first, see `integrity::reconcile`); a pool
        // whose parity was not kept gets every zone recomputed.
        let mut header = header;
        // Checksums are trusted only if they were kept since they were last recomputed.
        let sums_valid = header.flags & FLAG_NO_CHECKSUMS == 0;
        let (parity, checksums) = if keep_modes {
            (header.flags & FLAG_PARITY != 0, sums_valid)
        } else {
            (config.parity, config.checksums)
        };
        // Zone metadata replicas, now that replay has written its records to both copies,
        // and before reconciling parity (which must see the repaired bytes, not bake the
        // damage in). A pool of an older format gets its copies B made from A, after its
        // header says durably that its parity is not kept (so it is recomputed below, and
        // again if a crash cuts this short). Zones whose copy was repaired are reconciled.
        let (meta_repaired, metadata_repairs) = check_metadata(&media, &geo, &mut header)?;
        // The header's size-class table is the one the runs were cut to, before anything
        // walks their blocks with it (and writes to them: bitmap repairs, parity, checksum
        // recomputation) or the header is rewritten: with the other table those walks
        // would take payload bytes for objects and bitmap words.
        let table = header.class_table();
        // SAFETY: the pool is opening under its lock; its zones lie in the file (checked).
        let misfit = unsafe { run_classes::misfit(&media, &geo, header.zones, table, len) };
        if let Some(m) = misfit {
            return Err(misfit_error(&media, &geo, &header, m, len));
        }
        // Allocation-bitmap words that do not verify are rebuilt from parity before
        // anything below recomputes parity from the rows (which would bake the damage in)
        // or walks the objects through them; only where parity on media can be trusted for
        // them: it was kept, and the zone is not one a crash may have left stale. Whether
        // this open keeps parity does not matter: the media's parity is still intact.
        let bitmap_repairs = repair_bitmap_words(&media, &geo, &header)?;
        let reconciled = if parity
            && (header.flags & FLAG_OPEN != 0
                || header.flags & FLAG_PARITY == 0
                || !meta_repaired.is_empty())
        {
            reconcile_parity(&media, &geo, &header, sums_valid, &meta_repaired)?
        } else {
            crate::integrity::Reconciled::default()
        };
        // Checksums kept again after a time without them: recomputed over the bytes as
        // they are (with the parity of the zones that changed).
        if checksums && !sums_valid {
            // Parity recomputed too if the header still says it is kept, even by an open
            // that drops it: a crash before the header says otherwise leaves it trusted.
            let kept = parity || header.flags & FLAG_PARITY != 0;
            // SAFETY: the pool's zones; nothing else runs while it opens.
            unsafe {
                super::checksums::recompute(&media, &geo, header.class_table(), header.zones, kept)
            };
            media.fence();
            media.check()?;
        }
        // Without lane replication (`Config::replicate_lanes`) commits leave copy B as it
        // is here, after recovery: its retire mark equal to A's and no record, since both
        // marks, stored unflushed, may tear together in a crash while A's record is being
        // rewritten (`repair_lanes`). A B left by a crash (record newer than its own retire
        // mark) must not outlive this open either, lest a later damaged A let it replay.
        let crashed = header.flags & FLAG_OPEN != 0;
        let lane_repairs = tx::repair_lanes(&media, &geo, config.replicate_lanes, crashed);
        media.fence();
        media.check()?;
        // Parity is now consistent everywhere: no zone is dirty for this session yet. The
        // marks go only once the lane repair above is durable: a crash that kept cleared
        // marks and a half-rewritten lane copy let the next open replay into a zone it then
        // did not reconcile (found by the crash-during-recovery probe with half the pending
        // words persisted). (An open that drops parity keeps the marks: until its header
        // says parity is not kept, a crash must leave the next open the zones to
        // reconcile.)
        if parity {
            tx::clear_dirty_zones(&media, &geo);
            media.fence();
            media.check()?;
        }
        // NO_CHECKSUMS is durable before any commit leaves a checksum stale. (A read-only
        // open commits nothing: its header stays the one the file holds, for `info`.)
        if !read_only {
            header.flags = FLAG_OPEN
                | if parity { FLAG_PARITY } else { 0 }
                | if checksums { 0 } else { FLAG_NO_CHECKSUMS }
                | header.flags & FLAG_POWER_CLASSES;
            header.version = FORMAT_VERSION;
            header.generation += 1;
            Self::write_header_copy(&media, 0, &header);
            Self::write_header_copy(&media, geo.header_offset(1), &header);
            media.check()?;
        }
        // Runs with bitmap words still damaged (beyond parity) load out of service.
        let heap = Heap::open(&media, geo, header.zones, header.class_table())?;
        let next_seq = rec.max_seq.checked_add(1).ok_or_else(|| Error::Corrupt {
            what: "redo lane",
            offset: geo.lane_offset(0, 0),
            detail: "sequence numbers exhausted".into(),
            pool_file: None,
        })?;
        let eng = Engine::new(
            media,
            geo,
            heap,
            next_seq,
            tx::Options {
                verify: config.verify,
                parity,
                parity_atomic_max: config.parity_atomic_max,
                replicate_lanes: config.replicate_lanes,
                checksums,
            },
        );
        let inner = Arc::new(Inner {
            eng,
            header: Mutex::new(header),
            root_lock: Mutex::new(()),
            grow_lock: Mutex::new(()),
            replayed: rec.replayed,
            header_repairs: repairs.damaged,
            header_updates_completed: repairs.interrupted,
            lane_repairs: lane_repairs.rewritten,
            lane_copies_damaged: lane_repairs.damaged,
            metadata_repairs,
            bitmap_repairs,
            reconciled,
            scrubs: Default::default(),
            scrubs_unclean: Default::default(),
            scrubs_failed: Default::default(),
        });
        for &(off, h) in &inner.reconciled.beyond {
            inner.eng.repairs.beyond_repair(off, h);
        }
        if inner.reconciled.unrecoverable > 0 {
            // Objects beyond repair may be freed: see `Engine::seals_trusted`.
            inner
                .eng
                .repairs
                .free_space_suspect
                .store(true, Ordering::Relaxed);
        }
        // Now at its final address: the media-error handler may point at it.
        inner.eng.arm_fault_handler();
        let scrubber = match config.verify {
            crate::VerifyPolicy::Scrub { every_n_tx } => {
                super::scrub::spawn(Arc::downgrade(&inner), every_n_tx)
            }
            _ => None,
        };
        Ok(Pool { inner, scrubber })
    }

    /// A pool of a format before zone metadata replicas may hold more registry entries
    /// than copy A (half the metadata chunk) has room for.
    fn check_registry_fits(media: &Media, geo: &Geometry, zones: u64) -> Result<()> {
        use crate::heap::layout::{registry_capacity, registry_offset};
        let count_at = geo.chunk_offset(0, 0) + registry_offset(geo);
        // The geometry must be one this format accepts (room for both copies).
        super::header::check_geometry(geo, zones).map_err(|why| Error::Corrupt {
            what: "zone metadata",
            offset: geo.chunk_offset(0, 0),
            detail: format!(
                "this pool cannot keep a second copy of zone metadata: {why}; open it with an \
                 older pgl and copy its data to a pool with bigger chunks"
            ),
            pool_file: None,
        })?;
        // SAFETY: the registry's count word lies in zone 0's metadata chunk; the pool is
        // opening, nothing else runs.
        let count = unsafe { media.read_u64(count_at) };
        let cap = registry_capacity(geo);
        if count > cap {
            return Err(Error::Corrupt {
                what: "type registry",
                offset: count_at,
                detail: format!(
                    "{count} registered types, but this format keeps zone metadata twice and \
                     has room for {cap} in this geometry; open the pool with an older pgl \
                     and copy its data to a pool with bigger chunks"
                ),
                pool_file: None,
            });
        }
        Ok(())
    }

    pub(super) fn write_header_copy(media: &Media, off: u64, h: &Header) {
        // SAFETY: a header page inside the pool, written only while opening (single
        // threaded) or under the grow lock.
        unsafe { media.write(off, &h.encode()) };
        media.flush(off, PAGE);
        media.fence();
    }
}

/// What `read_header` rewrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct HeaderFixes {
    /// Copies rewritten because they were damaged (or older than a crash can leave them).
    pub damaged: u64,
    /// Copies brought up to date because a crash interrupted a header update: not damage.
    pub interrupted: u64,
}

/// The 8-byte words of a header page that a header update may change: version and flags,
/// generation, zones, and the checksum. Every other word of both copies is written once,
/// when the pool is created.
const UPDATED_WORDS: [usize; 4] = [1, 2, 18, 511];

/// Word `i` of a header page.
fn word(p: &[u8], i: usize) -> &[u8] {
    &p[i * 8..i * 8 + 8]
}

/// Whether copies `newer` (valid) and `other` (valid or not) are what a crash interrupting
/// a header update leaves. An update writes copy A whole, makes it durable, then copy B,
/// and a crash keeps any subset of the 8-byte words of the copy being written. So: copy A
/// one generation ahead of a valid B, or one copy torn between the generation of the other
/// and the one before or after it (`a_newer`: whether `newer` is copy A); in every case
/// the copies differ only in the words an update writes. (A stray write confined to those
/// words is taken for one too: it is repaired all the same.)
fn interrupted_update(
    newer: &Header,
    newer_page: &[u8],
    other: &std::result::Result<Header, HeaderFault>,
    other_page: &[u8],
    a_newer: bool,
) -> bool {
    let words = newer_page.len() / 8;
    let only_updated = (0..words)
        .all(|i| UPDATED_WORDS.contains(&i) || word(newer_page, i) == word(other_page, i));
    let g = newer.generation;
    let u64_at = |i: usize| u64::from_le_bytes(word(other_page, i).try_into().unwrap_or([0; 8]));
    let other_gen = u64_at(2);
    // A torn copy's words are each the old or the new value of a header: a version this
    // build reads, known flags, the size-class flag of the other copy (no update changes
    // it), a zone count a header may hold. (Random bytes confined to those words fail
    // this, but for a chance of about 2^-58.)
    let (version, flags) = (u64_at(1) as u32, (u64_at(1) >> 32) as u32);
    let plausible = (super::header::OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version)
        && flags & !(FLAG_OPEN | FLAG_PARITY | FLAG_NO_CHECKSUMS | FLAG_POWER_CLASSES) == 0
        && flags & FLAG_POWER_CLASSES == newer.flags & FLAG_POWER_CLASSES
        && (1..=crate::geometry::MAX_ZONES).contains(&u64_at(18));
    only_updated
        && match other {
            Ok(o) => a_newer && o.generation.checked_add(1) == Some(g),
            Err(HeaderFault::Checksum) if a_newer => {
                plausible && (other_gen == g || other_gen.checked_add(1) == Some(g))
            }
            Err(HeaderFault::Checksum) => {
                plausible && (other_gen == g || g.checked_add(1) == Some(other_gen))
            }
            Err(_) => false,
        }
}

/// Reads both header copies and rewrites a damaged or older one from the other; returns
/// the header and which copies were rewritten, and why.
///
/// This and the other steps below run only inside `Pool::load`: the file is locked and
/// nothing else reads or writes the pool.
fn read_header(media: &Media, path: &Path) -> Result<(Header, HeaderFixes)> {
    let len = media.len();
    let path = path.to_path_buf();
    let page = |off: u64| -> &[u8] {
        // SAFETY: `off + PAGE <= len` is checked by every caller; no other `Pool`, in
        // this process or another, has the file open (`Pool::load` took its lock first).
        unsafe { std::slice::from_raw_parts(media.ptr(off) as *const u8, PAGE as usize) }
    };
    let a = Header::decode(page(0));
    // Copy B's place depends on the geometry; if copy A is bad, search the pages where
    // some geometry could put it.
    let b_at = |h: &Header| h.geo.header_offset(1);
    let b = match &a {
        Ok(h) if b_at(h) + PAGE <= len => Header::decode(page(b_at(h))).map(|hb| (b_at(h), hb)),
        Ok(_) => Err(HeaderFault::NoMagic),
        Err(_) => {
            let mut found = Err(HeaderFault::NoMagic);
            // Copy B sits at PAGE + 2 * lanes * lane_size, an odd page below
            // HEADER_B_LIMIT (`check_geometry` refuses any geometry that puts it
            // further), so those are the only pages to look at.
            let last = (len / PAGE).min(super::header::HEADER_B_LIMIT / PAGE);
            for p in (1..last).step_by(2) {
                let off = p * PAGE;
                if page(off)[..8] != super::header::MAGIC {
                    continue;
                }
                match Header::decode(page(off)) {
                    Ok(h) if b_at(&h) == off => {
                        found = Ok((off, h));
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        if matches!(found, Err(HeaderFault::NoMagic)) {
                            found = Err(e);
                        }
                    }
                }
            }
            found
        }
    };
    // A copy a newer pgl wrote (its checksum verifies; only its version is past this
    // build's): that pgl may have changed the pool in ways this one would misread (each
    // format version is one older builds must refuse), and its open may have stopped
    // between the two copies. Neither copy is rewritten from the other: that would hand
    // the pool back to this build and undo the newer one's header.
    let newer = [a.as_ref().err(), b.as_ref().err()]
        .into_iter()
        .flatten()
        .find_map(|fault| match fault {
            HeaderFault::Version(v) if *v > FORMAT_VERSION => Some(*v),
            _ => None,
        });
    if let Some(found) = newer {
        return Err(Error::Version {
            path,
            found,
            supported: FORMAT_VERSION,
        });
    }
    let fixed = |interrupted: bool| HeaderFixes {
        damaged: u64::from(!interrupted),
        interrupted: u64::from(interrupted),
    };
    let (header, repairs) = match (a, b) {
        (Ok(ha), Ok((off_b, hb))) => {
            // The size-class table is fixed when the pool is made: two valid copies that
            // name different ones are not an interrupted update but damage (or a forgery)
            // with a valid checksum. The generation cannot say which copy is right, the
            // runs can: the copy whose table they are cut to wins (reading them with the
            // other table would walk blocks where there are none). If they cannot tell
            // (no run of a class the tables number differently), either table reads the
            // pool, and the newer copy wins as usual.
            let disputed = ha.class_table() != hb.class_table();
            let fits = |h: &Header| {
                // SAFETY: the pool is opening under its lock; entries past `len` are not read.
                unsafe { run_classes::misfit(media, &h.geo, h.zones, h.class_table(), len) }
                    .is_none()
            };
            let a_wins = match disputed.then(|| (fits(&ha), fits(&hb))) {
                Some((fa, fb)) if fa != fb => fa,
                _ => ha.generation >= hb.generation,
            };
            if a_wins {
                if ha == hb {
                    (ha, HeaderFixes::default())
                } else {
                    let why =
                        !disputed && interrupted_update(&ha, page(0), &Ok(hb), page(off_b), true);
                    Pool::write_header_copy(media, off_b, &ha);
                    (ha, fixed(why))
                }
            } else {
                Pool::write_header_copy(media, 0, &hb);
                (hb, fixed(false))
            }
        }
        (Ok(ha), Err(eb)) => {
            let off_b = b_at(&ha);
            let mut why = false;
            if off_b + PAGE <= len {
                why = interrupted_update(&ha, page(0), &Err(eb), page(off_b), true);
                Pool::write_header_copy(media, off_b, &ha);
            }
            (ha, fixed(why))
        }
        (Err(ea), Ok((off_b, hb))) => {
            let why = interrupted_update(&hb, page(off_b), &Err(ea), page(0), false);
            Pool::write_header_copy(media, 0, &hb);
            (hb, fixed(why))
        }
        (Err(ea), Err(eb)) => {
            if let (HeaderFault::Version(v), _) | (_, HeaderFault::Version(v)) = (&ea, &eb) {
                return Err(Error::Version {
                    path,
                    found: *v,
                    supported: FORMAT_VERSION,
                });
            }
            if ea == HeaderFault::NoMagic && eb == HeaderFault::NoMagic {
                let reason = if page(0)[..8] == crate::log::format::MAGIC {
                    "it is a pgl log: inspect it with `pgl log info` or `pgl log check`"
                } else {
                    "no pgl pool header in either copy"
                };
                return Err(Error::NotAPool {
                    path,
                    reason: reason.into(),
                });
            }
            return Err(Error::HeaderCorrupt {
                path,
                detail: format!("copy A: {ea}; copy B: {eb}"),
            });
        }
    };
    Ok((header, repairs))
}

/// A table as the header names it, for errors.
fn flag_text(table: crate::heap::ClassTable) -> String {
    let bit = match table {
        crate::heap::ClassTable::Steps => "header flag bit 3 clear",
        crate::heap::ClassTable::StepsAndPowers => "header flag bit 3",
    };
    format!("{table} ({bit})")
}

/// The error for a run that the header's size-class table does not describe: a damaged
/// chunk-table entry, or (if the other table describes every run) a damaged header flag.
fn misfit_error(
    media: &Media,
    geo: &Geometry,
    header: &Header,
    m: run_classes::Misfit,
    len: u64,
) -> Error {
    let table = header.class_table();
    let other = table.other();
    // SAFETY: as for the check that found `m` (the pool is opening under its lock).
    let flag = unsafe { run_classes::misfit(media, geo, header.zones, other, len) }.is_none();
    let detail = if flag {
        format!(
            "a run of class {} with {}-byte blocks, which the header's size classes ({}) do \
             not have, while every run of the pool fits the other table ({}): both header \
             copies name the wrong table (damage with valid checksums, or a forged header); \
             no object was touched",
            m.class,
            m.block,
            flag_text(table),
            flag_text(other),
        )
    } else {
        format!(
            "a run of class {} with {}-byte blocks, which the pool's size classes ({}) do not \
             have: the entry is damaged; no object was touched",
            m.class,
            m.block,
            flag_text(table),
        )
    };
    Error::Corrupt {
        what: "chunk table entry",
        offset: m.offset,
        detail,
        pool_file: None,
    }
}

/// Checks the zone metadata replicas (now that replay has written its records to both
/// copies) and rewrites a damaged copy from the other, or from parity; a pool of a format
/// before replicas gets its copies B made from A. Returns the zones whose copy was
/// repaired, and how many copies were rewritten.
fn check_metadata(media: &Media, geo: &Geometry, header: &mut Header) -> Result<(Vec<u64>, u64)> {
    let mut meta_repaired = (Vec::new(), 0);
    if header.version < 4 {
        Pool::check_registry_fits(media, geo, header.zones)?;
        if header.flags & FLAG_PARITY != 0 {
            header.flags &= !FLAG_PARITY;
            Pool::write_header_copy(media, 0, header);
            Pool::write_header_copy(media, geo.header_offset(1), header);
            media.check()?;
        }
        // SAFETY: the pool's zones; nothing else runs while it opens.
        unsafe { crate::integrity::replica::create_replicas(media, geo, header.zones) };
        media.fence();
        media.check()?;
    } else {
        // Parity may rebuild a zone whose copies are both damaged (if it was kept; a
        // rebuilt copy is used only if it verifies).
        let kept = header.flags & FLAG_PARITY != 0;
        // SAFETY: as above.
        meta_repaired =
            unsafe { crate::integrity::replica::check_zones(media, geo, header.zones, kept)? };
        if !meta_repaired.0.is_empty() {
            media.fence();
            media.check()?;
        }
    }
    Ok(meta_repaired)
}

/// Rebuilds from parity the allocation-bitmap words that do not verify, where parity on
/// media can be trusted for them; returns how many.
fn repair_bitmap_words(media: &Media, geo: &Geometry, header: &Header) -> Result<u64> {
    let crashed = header.flags & FLAG_OPEN != 0;
    let media_parity = header.flags & FLAG_PARITY != 0;
    let zones = header.zones;
    let dirty_marks = tx::dirty_zones(media, geo);
    let trusted = |off: u64| {
        media_parity
            && geo
                .locate(off, zones)
                .is_some_and(|p| !(crashed && tx::zone_is_dirty(&dirty_marks, p.zone)))
    };
    let mut bitmap_repairs = 0u64;
    // Whether a word's page column is holes in every row and in parity (then the word
    // rebuilds as zero, which never verifies: no need to read it), for the last column
    // asked about: the words of a page come one after the other. (A chunk table may
    // declare runs over holes, all of whose words are damage.)
    let mut extents: Option<(u64, crate::persist::DataExtents)> = None;
    let mut last_column: Option<(u64, u64, bool)> = None;
    let mut column_is_holes = |off: u64| -> bool {
        let Some(pos) = geo.locate(off, zones) else {
            return false;
        };
        let (z, page) = (pos.zone, (off - geo.zone_offset(pos.zone)) / PAGE);
        let col = page % (geo.row_size() / PAGE);
        if let Some((lz, lc, holes)) = last_column {
            if (lz, lc) == (z, col) {
                return holes;
            }
        }
        if extents.as_ref().is_none_or(|(ez, _)| *ez != z) {
            extents = Some((z, crate::integrity::zone_extents(media, geo, z)));
        }
        let data = &extents.as_ref().expect("just set").1;
        let holes = (0..=geo.rows)
            .all(|r| !data.has_data(geo.zone_offset(z) + r * geo.row_size() + col * PAGE, PAGE));
        last_column = Some((z, col, holes));
        holes
    };
    // Each damaged word is rebuilt as the walk finds it (the walk has read it and goes on
    // to the next): a list of them could be as long as a 1/256 of the pool's chunks,
    // which a chunk table declaring runs over holes makes all damage.
    crate::heap::walk_each(
        geo,
        &crate::heap::SizeClasses::new(geo.chunk_size, header.class_table()),
        0..header.zones,
        // SAFETY: heap metadata words inside the pool; nothing else runs while it opens.
        |off| unsafe { media.read_u64(off) },
        |_, _| {},
        |_, _| {},
        |off, _| {
            // SAFETY: a heap metadata word of a zone of the pool; nothing else runs while
            // the pool opens, and the walk does not read the word again.
            bitmap_repairs += u64::from(
                trusted(off)
                    && !column_is_holes(off)
                    && unsafe { crate::integrity::rewrite_bitmap_word(media, geo, off) },
            );
        },
    );
    if bitmap_repairs > 0 {
        media.fence();
        media.check()?;
    }
    Ok(bitmap_repairs)
}

/// Brings the parity of the zones a crash may have left stale (every zone, if parity was
/// not kept) in line with their rows, repairing what checksums tell damaged first.
fn reconcile_parity(
    media: &Media,
    geo: &Geometry,
    header: &Header,
    sums_valid: bool,
    meta_repaired: &[u64],
) -> Result<crate::integrity::Reconciled> {
    let mut reconciled = crate::integrity::Reconciled::default();
    let all = header.flags & FLAG_PARITY == 0;
    let dirty = tx::dirty_zones(media, geo);
    let dirty: Vec<u64> = (0..header.zones)
        .filter(|&z| all || tx::zone_is_dirty(&dirty, z) || meta_repaired.binary_search(&z).is_ok())
        .collect();
    if all {
        for &z in &dirty {
            let data = crate::integrity::zone_extents(media, geo, z);
            // SAFETY: zone `z` lies in the pool (its size was checked above);
            // nothing else runs while the pool opens.
            reconciled.columns += unsafe { crate::integrity::recompute_zone(media, geo, z, &data) };
        }
    } else if !dirty.is_empty() {
        // Without trusted checksums no object can be told damaged: the dirty
        // zones' disagreeing columns are recomputed from the rows as they are. The
        // objects are listed one dirty zone at a time: a list of the whole pool's would
        // take 16 bytes per object of every zone (a pool of small objects, or runs whose
        // bitmaps say so, in a sparse file: gigabytes).
        let classes = crate::heap::SizeClasses::new(geo.chunk_size, header.class_table());
        for &z in &dirty {
            let mut objects = Vec::new();
            if sums_valid {
                crate::heap::walk(
                    geo,
                    &classes,
                    z..z + 1,
                    // SAFETY: heap metadata words inside the pool (the walk stays within
                    // the zone); nothing else runs while the pool opens.
                    |off| unsafe { media.read_u64(off) },
                    |hdr, cap| objects.push((hdr, cap)),
                );
            }
            // SAFETY: zone `z` lies in the pool (its size was checked above); nothing
            // else runs while the pool opens.
            let r = unsafe { crate::integrity::reconcile_zone(media, geo, z, &objects) };
            reconciled.columns += r.columns;
            reconciled.rebuilt.extend(r.rebuilt);
            reconciled.pages += r.pages;
            reconciled.unrecoverable += r.unrecoverable;
            reconciled.beyond.extend(r.beyond);
        }
    }
    media.fence();
    // The marks may be cleared only once the recomputed parity is durable.
    media.check()?;
    Ok(reconciled)
}
