//! The object-lock stripes one transaction holds, and how: a bit per stripe for each mode,
//! so asking costs one load whatever the transaction touched, plus the list of stripes
//! taken, so releasing costs one step per stripe held. (A transaction that walks a tree
//! holds dozens of stripes; asking a map for each cost more than the lock itself.)
//!
//! Invariant: a stripe is in `list` exactly when its `any` bit is set; its `write` bit is
//! set only if its `any` bit is.

use super::locks::{Held, OBJECT_STRIPES};

const WORDS: usize = OBJECT_STRIPES / 64;

/// See the module docs.
pub(crate) struct HeldStripes {
    any: Box<[u64; WORDS]>,
    write: Box<[u64; WORDS]>,
    list: Vec<u32>,
}

impl Default for HeldStripes {
    fn default() -> Self {
        HeldStripes {
            any: Box::new([0; WORDS]),
            write: Box::new([0; WORDS]),
            list: Vec::new(),
        }
    }
}

/// The word and bit of `stripe`.
fn at(stripe: u32) -> (usize, u64) {
    (stripe as usize / 64, 1 << (stripe % 64))
}

impl HeldStripes {
    /// How the transaction holds `stripe`, if it does.
    #[inline]
    pub(crate) fn get(&self, stripe: u32) -> Option<Held> {
        let (w, b) = at(stripe);
        if self.any[w] & b == 0 {
            None
        } else if self.write[w] & b == 0 {
            Some(Held::Read)
        } else {
            Some(Held::Write)
        }
    }

    /// Whether the transaction holds `stripe` at all.
    pub(crate) fn contains(&self, stripe: u32) -> bool {
        self.get(stripe).is_some()
    }

    /// Records that the transaction now holds `stripe` as `how` (a read lock upgraded to a
    /// write lock stays one entry).
    #[inline]
    pub(crate) fn insert(&mut self, stripe: u32, how: Held) {
        let (w, b) = at(stripe);
        if self.any[w] & b == 0 {
            self.any[w] |= b;
            self.list.push(stripe);
        }
        if how == Held::Write {
            self.write[w] |= b;
        }
    }

    /// Whether the transaction holds no stripe.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Hands every stripe held, with how, to `release`, and forgets them all.
    pub(crate) fn release_all(&mut self, mut release: impl FnMut(u32, Held)) {
        for stripe in self.list.drain(..) {
            let (w, b) = at(stripe);
            let how = if self.write[w] & b == 0 {
                Held::Read
            } else {
                Held::Write
            };
            self.any[w] &= !b;
            self.write[w] &= !b;
            release(stripe, how);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn agrees_with_a_map_and_releases_each_stripe_once() {
        let mut held = HeldStripes::default();
        let mut model: HashMap<u32, Held> = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..20 {
            for _ in 0..200 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let stripe = (x % OBJECT_STRIPES as u64) as u32;
                let how = if x & (1 << 40) == 0 {
                    Held::Read
                } else {
                    Held::Write
                };
                assert_eq!(held.get(stripe), model.get(&stripe).copied());
                held.insert(stripe, how);
                let m = model.entry(stripe).or_insert(how);
                if how == Held::Write {
                    *m = Held::Write;
                }
                assert_eq!(held.get(stripe), Some(*m), "round {round}");
            }
            let mut released: HashMap<u32, Held> = HashMap::new();
            held.release_all(|s, h| assert!(released.insert(s, h).is_none(), "twice: {s}"));
            assert_eq!(released, model);
            assert!(held.is_empty());
            assert!(model.keys().all(|&s| !held.contains(s)), "bits cleared");
            model.clear();
        }
    }
}
