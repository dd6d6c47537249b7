//! The journal of a Manual migration: what a migration run in many transactions has done,
//! so that one a crash interrupted is rolled back or finished by the next `run`.
//!
//! ```text
//! anchor: zone 0's metadata word JOURNAL_OFFSET (0 = no migration under way), set and
//!         cleared in transactions like the root word
//! head page (a JournalPage object, 512 u64 words):
//!   0  magic    u64   JOURNAL_MAGIC
//!   1  state    u64   1 = building (new objects being allocated and converted; nothing
//!                     reachable points to them), 2 = freeing (the switch committed: the
//!                     old objects are unreachable and being freed)
//!   2  pairs    u64   (old, new) pairs recorded
//!   3  freed    u64   while freeing: old objects of the first `freed` pairs are freed
//!   4  first    u64   offset of the first pair page (0 = none)
//! pair page (a JournalPage object):
//!   0  next     u64   offset of the next pair page (0 = none)
//!   1  (zero)
//!   2… pairs: old u64, new u64; new = 0 once a roll-back freed it; bit 0 of old
//!      (LEFT; oids are 16-byte aligned) set once freeing left the old object as it is
//!      (damaged beyond repair: see `migrate::finish`)
//! ```
//!
//! Invariant: every change to the journal is made in the transaction whose work it
//! records, so the journal and the heap never disagree after a crash.

use crate::persistent::{fnv1a64, fold_type_id, Oid, Persistent};
use crate::tx::Tx;
use crate::{Error, Result};

/// Words of a journal page (4 KiB).
const WORDS: usize = 512;
/// Pairs a pair page holds.
const PER_PAGE: usize = (WORDS - 2) / 2;
/// "PGLMIGR1".
const JOURNAL_MAGIC: u64 = u64::from_le_bytes(*b"PGLMIGR1");
const MAGIC: usize = 0;
const STATE: usize = 1;
const PAIRS: usize = 2;
const FREED: usize = 3;
const FIRST: usize = 4;
const NEXT: usize = 0;
/// The mark of a pair whose old object freeing left allocated (bit 0 of its old word).
const LEFT: u64 = 1;

/// Where pair `i` lies: its page's index in the chain and the word of its old oid in
/// that page (the new oid follows).
const fn pair_at(i: usize) -> (usize, usize) {
    (i / PER_PAGE, 2 + 2 * (i % PER_PAGE))
}

/// The two states of a journal (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Building = 1,
    Freeing = 2,
}

/// One page of a migration journal.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct JournalPage([u64; WORDS]);

// SAFETY: a transparent array of u64: valid for every bit pattern, no padding, no pointers
// (offsets, checked on use like oids), alignment 8 <= MAX_ALIGN, size 4096.
unsafe impl Persistent for JournalPage {
    const TYPE_ID: u32 = fold_type_id(fnv1a64(b"pgl::MigrationJournal", 0));
    const LAYOUT: u64 = fnv1a64(b"pgl::MigrationJournal", WORDS as u64);
    const TYPE_NAME: &'static str = "MigrationJournal";
}

/// A journal and where its next pair goes (the DRAM side; `truncate` forgets what an
/// aborted transaction added).
pub(crate) struct Journal {
    head: Oid<JournalPage>,
    /// The pair pages, in order.
    pages: Vec<Oid<JournalPage>>,
    /// Pairs recorded.
    pairs: usize,
}

/// A journal read back after a crash (`Journal::load`).
pub(crate) struct Loaded {
    pub journal: Journal,
    pub state: State,
    /// Old objects of the first `freed` pairs are freed.
    pub freed: usize,
    /// Every (old, new) pair.
    pub pairs: Vec<(u64, u64)>,
    /// The pairs below `freed` whose old object was left allocated (`Journal::leave`).
    pub left: Vec<usize>,
}

fn corrupt(head: u64, detail: String) -> Error {
    Error::Corrupt {
        what: "migration journal",
        offset: head,
        detail,
        pool_file: None,
    }
}

impl Journal {
    /// Starts a journal in `tx` (building, no pairs) and names it in the anchor word.
    pub(crate) fn create(tx: &Tx<'_>, anchor: u64) -> Result<Journal> {
        let mut words = [0u64; WORDS];
        words[MAGIC] = JOURNAL_MAGIC;
        words[STATE] = State::Building as u64;
        let head = tx.alloc(JournalPage(words))?;
        tx.set_meta_word(anchor, head.raw());
        Ok(Journal {
            head,
            pages: Vec::new(),
            pairs: 0,
        })
    }

    /// Reads the journal the anchor names (`head`, not 0), verifying the checksum of every
    /// page (whatever the pool's verify policy: it says which objects to free): its state,
    /// how many old objects are freed, and its pairs.
    pub(crate) fn load(tx: &Tx<'_>, head: u64) -> Result<Loaded> {
        // `open` verifies an object's checksum as it buffers it.
        let h = tx.open(Oid::<JournalPage>::from_raw(head))?;
        if h.0[MAGIC] != JOURNAL_MAGIC {
            return Err(corrupt(head, "its magic word is wrong".into()));
        }
        let state = match h.0[STATE] {
            1 => State::Building,
            2 => State::Freeing,
            s => return Err(corrupt(head, format!("unknown state {s}"))),
        };
        let (count, freed) = (h.0[PAIRS] as usize, h.0[FREED] as usize);
        let mut next = h.0[FIRST];
        drop(h);
        let mut pages = Vec::new();
        let mut pairs = Vec::with_capacity(count.min(1 << 20));
        // Pages seen: a chain that comes back to one would be followed until `count`
        // (any number the head says) were read, the pairs of each lap kept in memory.
        let mut seen = std::collections::HashSet::new();
        while next != 0 {
            if pages.len() * PER_PAGE >= count {
                return Err(corrupt(
                    head,
                    format!("more pages than its {count} pairs need"),
                ));
            }
            if next == head || !seen.insert(next) {
                return Err(corrupt(
                    head,
                    format!(
                        "its chain of pair pages loops back to page {next:#x} after {} pages",
                        pages.len()
                    ),
                ));
            }
            let p = Oid::<JournalPage>::from_raw(next);
            let page = tx.open(p)?;
            let first = pages.len() * PER_PAGE;
            let n = PER_PAGE.min(count - first);
            pairs.extend((first..first + n).map(|i| {
                let w = pair_at(i).1;
                (page.0[w], page.0[w + 1])
            }));
            next = page.0[NEXT];
            pages.push(p);
        }
        let left: Vec<usize> = (0..pairs.len())
            .filter(|&i| pairs[i].0 & LEFT != 0)
            .collect();
        for p in &mut pairs {
            p.0 &= !LEFT;
        }
        if let Some(&i) = left.iter().find(|&&i| i >= freed) {
            return Err(corrupt(
                head,
                format!("pair {i} is marked left allocated, but only {freed} pairs are freed"),
            ));
        }
        if pairs.len() != count || freed > count {
            return Err(corrupt(
                head,
                format!(
                    "{count} pairs ({freed} freed) in {} pages of {PER_PAGE}",
                    pages.len()
                ),
            ));
        }
        let journal = Journal {
            head: Oid::from_raw(head),
            pages,
            pairs: count,
        };
        Ok(Loaded {
            journal,
            state,
            freed,
            pairs,
            left,
        })
    }

    /// Pairs recorded.
    pub(crate) fn len(&self) -> usize {
        self.pairs
    }

    /// Forgets the pairs from `n` on in DRAM (an aborted transaction recorded them).
    pub(crate) fn truncate(&mut self, n: usize) {
        self.pages.truncate(n.div_ceil(PER_PAGE));
        self.pairs = n;
    }

    /// Records the pair (old, new) in `tx`.
    pub(crate) fn push(&mut self, tx: &Tx<'_>, old: u64, new: u64) -> Result<()> {
        let (page, w) = pair_at(self.pairs);
        if page == self.pages.len() {
            let p = tx.alloc(JournalPage([0; WORDS]))?;
            match self.pages.last() {
                Some(&last) => tx.open(last)?.0[NEXT] = p.raw(),
                None => tx.open(self.head)?.0[FIRST] = p.raw(),
            }
            self.pages.push(p);
        }
        let mut p = tx.open(self.pages[page])?;
        p.0[w] = old;
        p.0[w + 1] = new;
        drop(p);
        self.pairs += 1;
        tx.open(self.head)?.0[PAIRS] = self.pairs as u64;
        Ok(())
    }

    /// Pairs `[from, to)`.
    pub(crate) fn pairs(&self, tx: &Tx<'_>, from: usize, to: usize) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::with_capacity(to - from);
        let mut i = from;
        while i < to {
            let p = tx.get(self.pages[pair_at(i).0])?;
            let n = (PER_PAGE - i % PER_PAGE).min(to - i);
            out.extend((i..i + n).map(|i| {
                let w = pair_at(i).1;
                (p.0[w] & !LEFT, p.0[w + 1])
            }));
            i += n;
        }
        Ok(out)
    }

    /// Forgets the new object of pair `i` (a roll-back freed it), in `tx`.
    pub(crate) fn clear_new(&self, tx: &Tx<'_>, i: usize) -> Result<()> {
        let (page, w) = pair_at(i);
        tx.open(self.pages[page])?.0[w + 1] = 0;
        Ok(())
    }

    /// Marks, in `tx`, whether the old object of pair `i` is left allocated (freeing it
    /// failed: see `migrate::finish`).
    pub(crate) fn leave(&self, tx: &Tx<'_>, i: usize, left: bool) -> Result<()> {
        let (page, w) = pair_at(i);
        let mut p = tx.open(self.pages[page])?;
        p.0[w] = if left { p.0[w] | LEFT } else { p.0[w] & !LEFT };
        Ok(())
    }

    /// Moves to the freeing state, in `tx` (the transaction that moves the root).
    pub(crate) fn switch(&self, tx: &Tx<'_>) -> Result<()> {
        let mut h = tx.open(self.head)?;
        h.0[STATE] = State::Freeing as u64;
        h.0[FREED] = 0;
        Ok(())
    }

    /// Records, in `tx`, that the old objects of the first `n` pairs are freed.
    pub(crate) fn set_freed(&self, tx: &Tx<'_>, n: usize) -> Result<()> {
        tx.open(self.head)?.0[FREED] = n as u64;
        Ok(())
    }

    /// Frees the journal and clears the anchor, in `tx`.
    pub(crate) fn delete(&self, tx: &Tx<'_>, anchor: u64) -> Result<()> {
        for &p in &self.pages {
            tx.free(p)?;
        }
        tx.free(self.head)?;
        tx.set_meta_word(anchor, 0);
        Ok(())
    }
}
