//! The table of per-line state (see [`LineTable`]), apart from the hierarchy that keeps
//! its lines' state in it.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Lines the direct-mapped part holds: more than a stream keeps in flight between two of
/// its FLUSHes, at 64 bytes of table per slot.
const SLOTS: usize = 1024;

/// No line: a line address is a multiple of 64, this never is.
const EMPTY: u64 = u64::MAX;

/// State per cache line, by line address: a direct-mapped array of [`SLOTS`] slots (line
/// number modulo `SLOTS`), and a hash map for the lines whose slot another line holds. A
/// stream's lines in flight are consecutive, so each finds its own slot: a line's state
/// is made when its write arrives and dropped when the line persists, and for such a line
/// both are an index and a compare instead of a hash map's probe, insertion and removal.
/// A line is in one of the two places, never both; which one never reaches a result (the
/// only walk over the lines, `keys`, is sorted by its caller).
#[derive(Debug)]
pub(super) struct LineTable<V> {
    /// (line address, state), or ([`EMPTY`], a default state); allocated at the first
    /// line's state.
    slots: Vec<(u64, V)>,
    spill: HashMap<u64, V, BuildHasherDefault<crate::mem::U64Hasher>>,
    len: usize,
}

impl<V> Default for LineTable<V> {
    fn default() -> Self {
        LineTable {
            slots: Vec::new(),
            spill: HashMap::default(),
            len: 0,
        }
    }
}

impl<V: Default> LineTable<V> {
    #[inline]
    fn slot(line: u64) -> usize {
        (line >> 6) as usize & (SLOTS - 1)
    }

    /// Lines with state.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(super) fn get(&self, line: u64) -> Option<&V> {
        match self.slots.get(Self::slot(line)) {
            Some((k, v)) if *k == line => Some(v),
            _ if self.spill.is_empty() => None,
            _ => self.spill.get(&line),
        }
    }

    #[inline]
    pub(super) fn get_mut(&mut self, line: u64) -> Option<&mut V> {
        let i = Self::slot(line);
        if self.slots.get(i).is_some_and(|(k, _)| *k == line) {
            return Some(&mut self.slots[i].1);
        }
        if self.spill.is_empty() {
            return None;
        }
        self.spill.get_mut(&line)
    }

    /// `line`'s state, made (default) if it has none. Inlined always: a streamed line's
    /// state is made here, and a call costs as much as the lookup.
    #[inline(always)]
    pub(super) fn get_or_default(&mut self, line: u64) -> &mut V {
        let i = Self::slot(line);
        match self.slots.get(i) {
            Some((k, _)) if *k == line => {}
            // A free slot holds a default state already: the line only takes it (unless
            // the line is in the map, which can hold it only while the map has lines).
            Some((k, _)) if *k == EMPTY && self.spill.is_empty() => {
                self.slots[i].0 = line;
                self.len += 1;
            }
            _ => return self.get_or_default_elsewhere(line),
        }
        &mut self.slots[i].1
    }

    /// [`get_or_default`](Self::get_or_default) of a line that is in the map, or whose
    /// slot is taken, or while the map has lines or the slots are not yet allocated.
    fn get_or_default_elsewhere(&mut self, line: u64) -> &mut V {
        // A line whose slot was taken when it came keeps its state in the map.
        if self.spill.contains_key(&line) {
            return self.spill.get_mut(&line).unwrap();
        }
        self.len += 1;
        if self.slots.is_empty() {
            self.slots = (0..SLOTS).map(|_| (EMPTY, V::default())).collect();
        }
        let i = Self::slot(line);
        if self.slots[i].0 == EMPTY {
            self.slots[i].0 = line;
            return &mut self.slots[i].1;
        }
        self.spill.entry(line).or_default()
    }

    /// Drops `line`'s state once `f` has taken what it needs of it, returning what `f`
    /// returned. Inlined always: every streamed line's state is dropped here, and the state
    /// is reset in its slot rather than moved out whole.
    #[inline(always)]
    pub(super) fn remove_with<R>(&mut self, line: u64, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        let i = Self::slot(line);
        if let Some((k, v)) = self.slots.get_mut(i).filter(|(k, _)| *k == line) {
            let r = f(v);
            // A free slot holds a default state (see `get_or_default`).
            (*k, *v) = (EMPTY, V::default());
            self.len -= 1;
            return Some(r);
        }
        let mut v = self.spill.remove(&line)?;
        self.len -= 1;
        Some(f(&mut v))
    }

    /// The lines with state, in no particular order.
    pub(super) fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        let held = self.slots.iter().map(|(k, _)| *k).filter(|&k| k != EMPTY);
        held.chain(self.spill.keys().copied())
    }

    /// Drops every line's state.
    pub(super) fn clear(&mut self) {
        if self.len > 0 {
            for s in &mut self.slots {
                *s = (EMPTY, V::default());
            }
            self.spill.clear();
            self.len = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    proptest::proptest! {
        /// The table answers as one map of every line's state, whichever part holds each
        /// (lines `SLOTS` apart share a slot).
        #[test]
        fn the_line_table_answers_as_one_map(
            ops in proptest::collection::vec((0u64..6, 0u64..8, 0u8..4), 1..400)
        ) {
            let mut t: LineTable<u32> = LineTable::default();
            let mut reference: BTreeMap<u64, u32> = BTreeMap::new();
            for (lap, line, op) in ops {
                let line = (lap * SLOTS as u64 + line) * 64;
                match op {
                    0 | 1 => {
                        *t.get_or_default(line) += 1;
                        *reference.entry(line).or_default() += 1;
                    }
                    2 => proptest::prop_assert_eq!(
                        t.remove_with(line, |v| std::mem::take(v) + 100),
                        reference.remove(&line).map(|v| v + 100)
                    ),
                    _ => {
                        if let Some(v) = t.get_mut(line) {
                            *v += 10;
                        }
                        if let Some(v) = reference.get_mut(&line) {
                            *v += 10;
                        }
                    }
                }
                proptest::prop_assert_eq!(t.get(line), reference.get(&line));
                proptest::prop_assert_eq!(t.len(), reference.len());
                let mut keys: Vec<u64> = t.keys().collect();
                keys.sort_unstable();
                proptest::prop_assert_eq!(keys, reference.keys().copied().collect::<Vec<_>>());
            }
            t.clear();
            proptest::prop_assert_eq!(t.len(), 0);
            proptest::prop_assert_eq!(t.keys().count(), 0);
        }
    }
}
