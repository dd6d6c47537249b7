//! A map for the few keys a typical transaction touches: a vector searched linearly, plus a
//! hash index once it grows past `LINEAR` entries. Keeps its allocations when cleared, so a
//! lane reuses them transaction after transaction.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

const LINEAR: usize = 16;

/// A hasher for integer keys.
#[derive(Default)]
pub(crate) struct IdHasher(u64);
impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = n as u64;
    }
}

/// See the module docs.
pub(crate) struct SmallMap<K, V> {
    items: Vec<(K, V)>,
    index: HashMap<K, usize, BuildHasherDefault<IdHasher>>,
}

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        SmallMap {
            items: Vec::new(),
            index: HashMap::default(),
        }
    }
}

impl<K: Copy + Eq + Hash, V> SmallMap<K, V> {
    #[inline]
    fn position(&self, k: &K) -> Option<usize> {
        if self.items.len() <= LINEAR {
            self.items.iter().rposition(|(key, _)| key == k)
        } else {
            self.index.get(k).copied()
        }
    }

    #[inline]
    pub(crate) fn get(&self, k: &K) -> Option<&V> {
        self.position(k).map(|i| &self.items[i].1)
    }

    /// Inserts or replaces.
    pub(crate) fn insert(&mut self, k: K, v: V) {
        match self.position(&k) {
            Some(i) => self.items[i].1 = v,
            None => self.push(k, v),
        }
    }

    /// Appends `k`, known to be absent, and indexes it once the map has grown past
    /// `LINEAR`.
    #[inline]
    fn push(&mut self, k: K, v: V) {
        self.items.push((k, v));
        let n = self.items.len();
        if n == LINEAR + 1 {
            for (i, (key, _)) in self.items.iter().enumerate() {
                self.index.insert(*key, i);
            }
        } else if n > LINEAR + 1 {
            self.index.insert(k, n - 1);
        }
    }

    /// The value of `k`, inserting `make()` first if absent (one search either way).
    #[inline]
    pub(crate) fn entry_or_insert_with(&mut self, k: K, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.position(&k) {
            Some(i) => i,
            None => {
                self.push(k, make());
                self.items.len() - 1
            }
        };
        &mut self.items[i].1
    }

    /// Applies `f` to the value of `k`, if present, and removes the entry when `f` says
    /// so (one search either way).
    #[inline]
    pub(crate) fn update_or_remove(&mut self, k: &K, f: impl FnOnce(&mut V) -> bool) {
        if let Some(i) = self.position(k) {
            if f(&mut self.items[i].1) {
                self.remove_at(i);
            }
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &(K, V)> {
        self.items.iter()
    }

    pub(crate) fn items_mut(&mut self) -> &mut Vec<(K, V)> {
        &mut self.items
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Removes `k`, returning its value (the last entry takes its place).
    #[cfg(test)]
    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        let i = self.position(k)?;
        Some(self.remove_at(i))
    }

    /// Removes the entry at `i` (the last entry takes its place).
    #[inline]
    fn remove_at(&mut self, i: usize) -> V {
        let (k, v) = self.items.swap_remove(i);
        if self.items.len() <= LINEAR {
            // Searched linearly again; `push` rebuilds the index when it next grows.
            if !self.index.is_empty() {
                self.index.clear();
            }
        } else {
            self.index.remove(&k);
            if let Some(&(moved, _)) = self.items.get(i) {
                self.index.insert(moved, i);
            }
        }
        v
    }

    /// Removes everything, keeping the allocations.
    pub(crate) fn clear(&mut self) {
        self.items.clear();
        self.index.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_map_across_the_threshold() {
        let mut m = SmallMap::default();
        let mut model = std::collections::HashMap::new();
        for i in 0..100u64 {
            let k = (i * 7919) % 61;
            m.insert(k, i);
            model.insert(k, i);
            for (mk, mv) in &model {
                assert_eq!(m.get(mk), Some(mv));
            }
            assert_eq!(m.len(), model.len());
        }
        assert!(m.get(&1000).is_none());
        m.update_or_remove(&1000, |_| panic!("absent: not called"));
        *m.entry_or_insert_with(1000, || 5) += 1;
        assert_eq!(m.get(&1000), Some(&6));
        m.clear();
        assert!(m.is_empty());
        assert_eq!(m.get(&0), None);
    }

    #[test]
    fn removes_like_a_map_across_the_threshold() {
        let mut m = SmallMap::default();
        let mut model = std::collections::HashMap::new();
        let mut x = 1u64;
        for i in 0..2000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (x >> 33) % 40;
            if x & (1 << 20) == 0 {
                m.insert(k, i);
                model.insert(k, i);
            } else if x & (1 << 21) == 0 {
                // Odd values go, even ones are bumped and stay.
                m.update_or_remove(&k, |v| {
                    *v += 1;
                    *v % 2 == 0
                });
                if let Some(v) = model.get_mut(&k) {
                    *v += 1;
                    if *v % 2 == 0 {
                        model.remove(&k);
                    }
                }
            } else {
                assert_eq!(m.remove(&k), model.remove(&k));
            }
            assert_eq!(m.len(), model.len());
            for k in 0..40 {
                assert_eq!(m.get(&k), model.get(&k), "key {k} after step {i}");
            }
        }
    }
}
