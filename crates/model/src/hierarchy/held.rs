//! Writes held in the RNIC buffer under WSP (see [`MemoryHierarchy::hold`]): the medium
//! holds each one, over later writes of the same bytes, from its arrival until it leaves
//! the buffer, so that a real-time runtime's pool file is what a power failure would keep
//! at every instant. Apart from the hierarchy's data path: almost always there are none.
//!
//! Every held write over a byte shares what lies under it (its *base*), kept once in an
//! image of its own, and the medium shows the last held write over each byte: which one,
//! for every byte held writes cover, is kept as disjoint ranges (`vis`). So a hold, or a
//! write under held writes, looks at the ranges over its bytes only; a release looks at
//! the ranges where the write it lets go shows (where a later write covers its bytes,
//! nothing changes), and only there at the earlier writes over those bytes, which it
//! finds in classes by length, each by first byte (a class's window reaches its longest
//! write below a range). Writes let go of in the order they came (a QP's writes execute
//! in order) find none there. A durable-RPC batch's thousand ATOMIC WRITEs held behind
//! one FLUSH cost every other line written a lookup, and no layout a peer sends makes a
//! hold or a release walk the others; letting go of a write that shows over earlier ones
//! (a failed QP, or a later QP's write executing first) walks those earlier ones.

use super::{MemoryHierarchy, Space};
use crate::config::PersistenceDomain;
use crate::mem::SparseMem;
use std::collections::BTreeMap;

/// A write waiting in the RNIC buffer under WSP (see [`MemoryHierarchy::hold`]).
#[derive(Clone, Debug)]
pub(super) struct Held {
    key: u64,
    pub(super) addr: u64,
    pub(super) data: Vec<u8>,
}

impl Held {
    /// The overlap of `self` with `addr..addr+len`, as offsets into `self` and into the
    /// other range.
    fn overlap(&self, addr: u64, len: usize) -> Option<(usize, usize, usize)> {
        let lo = self.addr.max(addr);
        let hi = (self.addr + self.data.len() as u64).min(addr.saturating_add(len as u64));
        (lo < hi).then(|| {
            (
                (lo - self.addr) as usize,
                (lo - addr) as usize,
                (hi - lo) as usize,
            )
        })
    }
}

/// Where a held write is kept within its length class: by first byte, then by arrival
/// (`seq`).
type Slot = (u64, u64);

/// Length classes per doubling of the length, for lengths over 8 bytes: a class's
/// writes are at most an eighth of their octave's start shorter than its longest, so few
/// of the writes that start in its window end before the range looked up.
const BANDS: u32 = 8;

/// The length class of a write of `len` bytes (at least 1); see [`longest`].
fn class(len: u64) -> u32 {
    // `len` is in (2^(c-1), 2^c].
    let c = u64::BITS - (len - 1).leading_zeros();
    if c <= 3 {
        return c * BANDS + BANDS - 1;
    }
    let lo = 1u64 << (c - 1);
    c * BANDS + ((len - lo - 1) / (lo / BANDS as u64)) as u32
}

/// The longest write of length class `class`.
fn longest(class: u32) -> u64 {
    let (c, band) = (class / BANDS, u64::from(class % BANDS));
    if c <= 3 {
        return 1 << c;
    }
    let lo = 1u64 << (c - 1);
    lo.saturating_add((band + 1).saturating_mul(lo / BANDS as u64))
}

/// The held writes, in classes by length, each by [`Slot`]; where each key's is; and what
/// lies under them.
#[derive(Debug, Default)]
pub(super) struct HeldWrites {
    classes: BTreeMap<u32, BTreeMap<Slot, Held>>,
    at: BTreeMap<u64, (u32, Slot)>,
    /// Which held write the medium shows at each byte held writes cover: disjoint ranges
    /// `start -> (end, seq)`. Their union is the union of the held writes.
    vis: BTreeMap<u64, (u64, u64)>,
    next_seq: u64,
    /// What the medium holds under the held writes, at the bytes they cover (elsewhere
    /// stale): put back where the last write over a byte leaves.
    base: SparseMem,
}

/// Which bytes of a range some held writes cover, and how many they leave uncovered.
struct Cover {
    by: Vec<bool>,
    left: usize,
}

impl Cover {
    fn new(len: usize) -> Cover {
        Cover {
            by: vec![false; len],
            left: len,
        }
    }

    /// Marks `j..j+n` covered.
    fn mark(&mut self, j: usize, n: usize) {
        for c in &mut self.by[j..j + n] {
            if !*c {
                *c = true;
                self.left -= 1;
            }
        }
    }
}

impl HeldWrites {
    /// Whether none is held.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// The held writes, in arrival order.
    pub(super) fn in_arrival_order(&self) -> Vec<&Held> {
        let mut all: Vec<(u64, &Held)> = self
            .classes
            .values()
            .flat_map(|c| c.iter().map(|(&(_, s), h)| (s, h)))
            .collect();
        all.sort_unstable_by_key(|&(s, _)| s);
        all.into_iter().map(|(_, h)| h).collect()
    }

    /// Takes every held write, in arrival order.
    pub(super) fn take(&mut self) -> Vec<Held> {
        let all = std::mem::take(self);
        let mut all: Vec<(Slot, Held)> = all.classes.into_values().flatten().collect();
        all.sort_unstable_by_key(|&((_, s), _)| s);
        all.into_iter().map(|(_, h)| h).collect()
    }

    /// The range of slots of a class whose writes may overlap `addr..addr+len` (they start
    /// at most the class's longest length below it).
    fn window(c: u32, addr: u64, len: usize) -> std::ops::Range<Slot> {
        let lo = addr.saturating_sub(longest(c) - 1);
        let hi = addr.saturating_add(len as u64);
        (lo, 0)..(hi, 0)
    }

    /// The held writes that overlap `addr..addr+len`, with their arrival numbers and
    /// overlaps (as [`Held::overlap`] gives them).
    fn over(
        &self,
        addr: u64,
        len: usize,
    ) -> impl Iterator<Item = (u64, &Held, (usize, usize, usize))> + '_ {
        self.classes
            .iter()
            .filter(move |_| len > 0)
            .flat_map(move |(&c, slots)| slots.range(Self::window(c, addr, len)))
            .filter_map(move |(&(_, seq), h)| h.overlap(addr, len).map(|o| (seq, h, o)))
    }

    /// The shown ranges that overlap `addr..end`, clipped to it: `(start, end, seq)`.
    fn shown(&self, addr: u64, end: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        if addr >= end {
            return out;
        }
        if let Some((_, &(e, q))) = self.vis.range(..addr).next_back() {
            if e > addr {
                out.push((addr, e.min(end), q));
            }
        }
        for (&s, &(e, q)) in self.vis.range(addr..end) {
            out.push((s, e.min(end), q));
        }
        out
    }

    /// Makes the medium's bytes `addr..end` show held write `seq`, or none.
    fn show(&mut self, addr: u64, end: u64, seq: Option<u64>) {
        if addr >= end {
            return;
        }
        // Split the ranges that cross either edge, then drop what lies between.
        for at in [addr, end] {
            if let Some((&s, &(e, q))) = self.vis.range(..at).next_back() {
                if e > at {
                    self.vis.insert(s, (at, q));
                    self.vis.insert(at, (e, q));
                }
            }
        }
        let inside: Vec<u64> = self.vis.range(addr..end).map(|(&s, _)| s).collect();
        for s in inside {
            self.vis.remove(&s);
        }
        if let Some(q) = seq {
            self.vis.insert(addr, (end, q));
        }
    }

    /// Which bytes of `addr..addr+len` held writes cover.
    fn cover(&self, addr: u64, len: usize) -> Cover {
        let mut cover = Cover::new(len);
        for (s, e, _) in self.shown(addr, addr.saturating_add(len as u64)) {
            cover.mark((s - addr) as usize, (e - s) as usize);
        }
        cover
    }

    /// Whether a held write overlaps `addr..addr+len`.
    pub(super) fn overlaps(&self, addr: u64, len: u64) -> bool {
        !self.shown(addr, addr.saturating_add(len)).is_empty()
    }

    fn contains(&self, key: u64) -> bool {
        self.at.contains_key(&key)
    }

    fn len(&self) -> usize {
        self.at.len()
    }

    fn insert(&mut self, h: Held) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let len = h.data.len() as u64;
        let (c, slot) = (class(len), (h.addr, seq));
        self.at.insert(h.key, (c, slot));
        // The newest held write shows over everything under it.
        self.show(h.addr, h.addr + len, Some(seq));
        self.classes.entry(c).or_default().insert(slot, h);
    }

    fn remove(&mut self, key: u64) -> Option<(u64, Held)> {
        let (c, slot) = self.at.remove(&key)?;
        let slots = self.classes.get_mut(&c).expect("indexed");
        let h = slots.remove(&slot).expect("indexed");
        if slots.is_empty() {
            self.classes.remove(&c);
        }
        Some((slot.1, h))
    }
}

impl MemoryHierarchy {
    /// A write that reached the RNIC buffer and waits there to execute (a non-posted write
    /// behind an earlier non-posted request of its QP), identified by `key`. Under WSP the
    /// RNIC buffer is in the persistence domain, and a power failure writes such a write
    /// out after everything else (`Rnic::power_fail`), so the medium holds it, over every
    /// later write of the same bytes, from now until [`release_held`](Self::release_held): then a
    /// real-time runtime's pool file is what a power failure would keep at every instant.
    /// It is not visible until it executes. Only PM writes under WSP are held; elsewhere
    /// this does nothing.
    pub fn hold(&mut self, key: u64, space: Space, addr: u64, data: &[u8]) {
        if self.domain != PersistenceDomain::Wsp || space != Space::Pm || data.is_empty() {
            return;
        }
        if self.held.contains(key) {
            // A key is a QP's PSN, unique among its waiting requests: a second hold would
            // leave bytes in the medium that no held write accounts for.
            debug_assert!(false, "held write {key} held twice");
            return;
        }
        self.pin_visible(addr, data.len());
        // What lies under it: the medium, except where earlier held writes show instead
        // (there the base is theirs already).
        let cover = self.held.cover(addr, data.len());
        if cover.left > 0 {
            let mut under = vec![0u8; data.len()];
            self.media.read(addr, &mut under);
            if cover.left == data.len() {
                self.held.base.write(addr, &under);
            } else {
                let mut base = vec![0u8; data.len()];
                self.held.base.read(addr, &mut base);
                for (b, (u, c)) in base.iter_mut().zip(under.iter().zip(&cover.by)) {
                    if !c {
                        *b = *u;
                    }
                }
                self.held.base.write(addr, &base);
            }
        }
        self.media.write(addr, data);
        self.held.insert(Held {
            key,
            addr,
            data: data.to_vec(),
        });
    }

    /// The held write `key` leaves the RNIC buffer: it executed (and reached the medium as
    /// any write does) or it never will (its queue pair failed, its region went). The medium
    /// gets back what lies under it, with the other held writes over that.
    pub fn release_held(&mut self, key: u64) {
        let Some((seq, h)) = self.held.remove(key) else {
            return;
        };
        // Where a later held write covers a byte, it shows there, as it did; where this
        // one showed, the last earlier held write over the byte shows now, or the base.
        let end = h.addr + h.data.len() as u64;
        let mine: Vec<(u64, u64)> = self
            .held
            .shown(h.addr, end)
            .into_iter()
            .filter(|&(_, _, q)| q == seq)
            .map(|(s, e, _)| (s, e))
            .collect();
        for (s, e) in mine {
            let n = (e - s) as usize;
            let mut bytes = vec![0u8; n];
            self.held.base.read(s, &mut bytes);
            // Which earlier write shows at each byte (none held over it: `None`).
            let mut top: Vec<Option<u64>> = vec![None; n];
            let mut earlier: Vec<(u64, &Held, (usize, usize, usize))> =
                self.held.over(s, n).collect();
            earlier.sort_unstable_by_key(|(q, _, _)| *q);
            for (q, o, (i, j, k)) in earlier {
                bytes[j..j + k].copy_from_slice(&o.data[i..i + k]);
                top[j..j + k].fill(Some(q));
            }
            self.media.write(s, &bytes);
            let mut j = 0;
            while j < n {
                let run = top[j..].iter().take_while(|t| **t == top[j]).count();
                self.held.show(s + j as u64, s + (j + run) as u64, top[j]);
                j += run;
            }
        }
        if self.held.is_empty() {
            self.held = HeldWrites::default();
        }
    }

    /// How many writes are held.
    pub fn held_writes(&self) -> usize {
        self.held.len()
    }

    /// Whether the write `key` is held.
    pub fn is_held(&self, key: u64) -> bool {
        self.held.contains(key)
    }

    /// Writes `bytes` at `addr` into the medium.
    pub(super) fn media_write(&mut self, addr: u64, bytes: &[u8]) {
        if self.held.is_empty() {
            self.media.write(addr, bytes);
        } else {
            self.write_under_held(addr, bytes);
        }
    }

    /// [`media_write`](Self::media_write) under held writes: where one covers `addr..`,
    /// `bytes` become the base and the held write stays on top. One write of the medium,
    /// the held bytes already in it, so that a SIGKILL between two writes never leaves the
    /// medium without a held write. Out of line: held writes are rare, and the streaming
    /// path writes the medium once per line.
    #[cold]
    #[inline(never)]
    pub(super) fn write_under_held(&mut self, addr: u64, bytes: &[u8]) {
        let cover = self.held.cover(addr, bytes.len());
        if cover.left == bytes.len() {
            self.media.write(addr, bytes);
            return;
        }
        // Stale where nothing is held, and never read there.
        self.held.base.write(addr, bytes);
        let mut merged = vec![0u8; bytes.len()];
        self.media.read(addr, &mut merged);
        for (m, (b, c)) in merged.iter_mut().zip(bytes.iter().zip(&cover.by)) {
            if !c {
                *m = *b;
            }
        }
        self.media.write(addr, &merged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prng::Prng;
    use crate::profile::LatencyProfile;

    /// What the medium must show, kept the plain way: the bytes written under the held
    /// writes, and the held writes in arrival order; a byte shows the last held write over
    /// it, or else what was written.
    struct Spec {
        under: Vec<u8>,
        held: Vec<(u64, u64, Vec<u8>)>,
    }

    impl Spec {
        fn shows(&self) -> Vec<u8> {
            let mut m = self.under.clone();
            for (_, addr, data) in &self.held {
                m[*addr as usize..*addr as usize + data.len()].copy_from_slice(data);
            }
            m
        }
    }

    /// Bytes of the medium the operations touch (from PM address `BASE`).
    const SPAN: u64 = 256;
    const BASE: u64 = crate::rnic::PM_BASE;

    #[derive(Clone, Debug)]
    enum Op {
        Hold(u64, u64, u8),
        Release(usize),
        Write(u64, u64, u8),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        // Mostly short writes (ATOMIC WRITEs are 8 bytes), some up to the whole span.
        let short = (0..SPAN).prop_flat_map(|a| (Just(a), 1..=(SPAN - a).min(40)));
        let long = (0..SPAN).prop_flat_map(|a| (Just(a), 1..=SPAN - a));
        let range = prop_oneof![3 => short, 1 => long];
        prop_oneof![
            3 => (range.clone(), any::<u8>()).prop_map(|((a, n), b)| Op::Hold(a, n, b)),
            // Some releases of a key that is not held (nothing happens).
            2 => (0usize..64).prop_map(Op::Release),
            3 => (range, any::<u8>()).prop_map(|((a, n), b)| Op::Write(a, n, b)),
        ]
    }

    #[test]
    fn a_length_class_holds_its_lengths_and_no_longer_ones() {
        let mut last = 0;
        for len in (1..=70_000u64).chain([1 << 24, (1 << 24) + 1, u64::MAX / 2]) {
            let c = class(len);
            assert!(c >= last, "classes grow with the length: {len}");
            assert!(
                len <= longest(c),
                "{len} in class {c} of at most {}",
                longest(c)
            );
            if len > 8 {
                // At most an eighth of the octave's start shorter than the class's longest.
                let octave = 1u64 << (u64::BITS - (len - 1).leading_zeros() - 1);
                assert!(longest(c) - len < octave / 8, "{len}: class {c}");
            }
            last = c;
        }
    }

    proptest::proptest! {
        /// Whatever order writes are held, written under and let go in, the medium shows
        /// the last held write over each byte, or what was last written there; and once
        /// none is held, what was last written.
        #[test]
        fn the_medium_shows_the_last_held_write_over_what_was_written(
            ops in proptest::collection::vec(op(), 1..120)
        ) {
            let mut h = MemoryHierarchy::new(
                PersistenceDomain::Wsp,
                false,
                &LatencyProfile::default_profile(),
                Prng::from_seed(1),
            );
            let mut spec = Spec { under: vec![0; SPAN as usize], held: Vec::new() };
            let mut next_key = 0u64;
            for op in ops {
                match op {
                    Op::Hold(a, n, b) => {
                        let data: Vec<u8> = (0..n).map(|i| b.wrapping_add(i as u8)).collect();
                        h.hold(next_key, Space::Pm, BASE + a, &data);
                        spec.held.push((next_key, a, data));
                        next_key += 1;
                    }
                    Op::Release(i) if i < spec.held.len() => {
                        let (key, _, _) = spec.held.remove(i);
                        h.release_held(key);
                    }
                    Op::Release(i) => h.release_held(u64::MAX - i as u64),
                    Op::Write(a, n, b) => {
                        let data: Vec<u8> = (0..n).map(|i| b ^ (i as u8)).collect();
                        h.media_write(BASE + a, &data);
                        spec.under[a as usize..(a + n) as usize].copy_from_slice(&data);
                    }
                }
                let mut got = vec![0u8; SPAN as usize];
                h.media.read(BASE, &mut got);
                proptest::prop_assert_eq!(got, spec.shows());
                proptest::prop_assert_eq!(h.held_writes(), spec.held.len());
                // Whether a held write overlaps each 8-byte piece of the span.
                for a in (0..SPAN).step_by(8) {
                    let any = spec.held.iter().any(|(_, b, d)| *b < a + 8 && a < b + d.len() as u64);
                    proptest::prop_assert_eq!(h.held.overlaps(BASE + a, 8), any);
                }
            }
            for (key, _, _) in std::mem::take(&mut spec.held) {
                h.release_held(key);
            }
            let mut got = vec![0u8; SPAN as usize];
            h.media.read(BASE, &mut got);
            proptest::prop_assert_eq!(got, spec.under);
        }
    }
}
