//! The queue of PM records waiting to enter a memory controller's WPQ (see
//! [`PersistQueue`]), apart from the hierarchy that fills and drains it.

use super::queue::SliceQueue;
use crate::time::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A PM record's place in the queue to the WPQ: (`t_wpq`, `t_visible`, seq, slot). Lines
/// entering the WPQ at the same instant reach the medium in visibility order, which is
/// their version order.
pub(super) type PersistKey = (Instant, Instant, u64, u32);

/// Most entries a push into the queue's sorted part passes over before it goes to the heap.
const SORTED_SCAN: usize = 16;

/// Records waiting to enter the WPQ, popped in [`PersistKey`] order. Inbound DMAs that
/// bypass the LLC are scheduled in nearly that order (their visibility is in IIO order and
/// the mesh adds at most `imc_jitter_ns`), so they go to a sorted queue, placed from its
/// back in a step or two; everything else (LLC write-backs at seeded eviction times, and
/// a DMA that would have to pass more than [`SORTED_SCAN`] entries, as one held back by a
/// full WPQ or by an earlier write of its line can be) goes to a heap. A pop
/// takes the smaller of the two fronts, which is the order one heap of all of them would
/// give: the split changes the cost per line (a heap push and pop sift through about
/// log2 of the lines in flight), not the model.
#[derive(Debug, Default)]
pub(super) struct PersistQueue {
    heap: BinaryHeap<Reverse<PersistKey>>,
    sorted: SliceQueue<PersistKey>,
}

impl PersistQueue {
    pub(super) fn push(&mut self, k: PersistKey) {
        self.heap.push(Reverse(k));
    }

    /// Pushes an entry that most likely belongs at or near the back.
    pub(super) fn push_nearly_sorted(&mut self, k: PersistKey) {
        if !self.sorted.insert_near_back(k, SORTED_SCAN) {
            self.push(k);
        }
    }

    /// The first entry, and whether it is the sorted part's (else the heap's).
    fn front(&self) -> Option<(PersistKey, bool)> {
        match (self.heap.peek(), self.sorted.front()) {
            (Some(Reverse(h)), Some(d)) if d < h => Some((*d, true)),
            (Some(Reverse(h)), _) => Some((*h, false)),
            (None, d) => d.map(|d| (*d, true)),
        }
    }

    pub(super) fn peek(&self) -> Option<PersistKey> {
        self.front().map(|(k, _)| k)
    }

    /// Whether an entry is due by `now`: [`peek`](Self::peek)'s time is at most `now`,
    /// asked of the two parts' times alone (the earlier of the two fronts is the first
    /// entry, and its time the earlier time), without ordering their whole keys.
    #[inline]
    pub(super) fn any_due(&self, now: Instant) -> bool {
        self.sorted.front().is_some_and(|k| k.0 <= now)
            || self.heap.peek().is_some_and(|Reverse(k)| k.0 <= now)
    }

    /// Takes the first entry if it is due by `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<PersistKey> {
        let (k, sorted) = self.front().filter(|(k, _)| k.0 <= now)?;
        if sorted {
            self.sorted.pop_front();
        } else {
            self.heap.pop();
        }
        Some(k)
    }

    /// The latest time of an entry that `matches`, if any: the sorted part from its back
    /// to its first match (its times only fall), the heap whole (a few out-of-order
    /// entries). A FLUSH asks this once per FLUSH, over every line in flight.
    pub(super) fn latest(&self, mut matches: impl FnMut(&PersistKey) -> bool) -> Option<Instant> {
        let sorted = self.sorted.iter().rev().find(|k| matches(k)).map(|k| k.0);
        let heap = self
            .heap
            .iter()
            .map(|Reverse(k)| k)
            .filter(|k| matches(k))
            .map(|k| k.0)
            .max();
        sorted.max(heap)
    }

    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.sorted.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The persist queue pops in the order one heap of all its entries would, whichever
        /// part each entry went to, with pops interleaved with pushes as `advance` does.
        #[test]
        fn the_persist_queue_pops_in_one_heaps_order(
            ops in proptest::collection::vec((0u64..400, proptest::bool::ANY, 0u64..3), 1..300)
        ) {
            let mut q = PersistQueue::default();
            let mut reference = BinaryHeap::new();
            let (mut now, mut seq) = (0u64, 0u64);
            let mut popped = (Vec::new(), Vec::new());
            for (delta, dma, pops) in ops {
                // A DMA's time is near the latest (jitter either way, sometimes already due);
                // others anywhere from now on.
                let t = if dma { now.saturating_sub(50) + delta / 2 } else { now + delta * 3 };
                let k = (Instant::from_nanos(t), Instant::from_nanos(t / 2), seq, seq as u32);
                seq += 1;
                if dma {
                    q.push_nearly_sorted(k);
                } else {
                    q.push(k);
                    if delta % 7 == 0 {
                        // The same entry again, as `clwb` re-queues a group's time.
                        q.push(k);
                        reference.push(Reverse(k));
                    }
                }
                reference.push(Reverse(k));
                for _ in 0..pops {
                    now += 40;
                    let due = Instant::from_nanos(now);
                    proptest::prop_assert_eq!(
                        q.any_due(due),
                        q.peek().is_some_and(|k| k.0 <= due)
                    );
                    while let Some(k) = q.pop_due(due) {
                        popped.0.push(k);
                    }
                    while reference.peek().is_some_and(|Reverse(k)| k.0 <= due) {
                        popped.1.push(reference.pop().unwrap().0);
                    }
                    proptest::prop_assert_eq!(&popped.0, &popped.1);
                }
            }
            while let Some(k) = q.pop_due(Instant::NEVER) {
                popped.0.push(k);
            }
            popped.1.extend(std::iter::from_fn(|| reference.pop().map(|Reverse(k)| k)));
            proptest::prop_assert_eq!(popped.0, popped.1);
        }
    }

    #[test]
    fn a_dma_far_out_of_order_goes_to_the_heap_and_still_pops_first() {
        let key = |t: u64, seq: u64| (Instant::from_nanos(t), Instant::ZERO, seq, seq as u32);
        let mut q = PersistQueue::default();
        let last = 100 + SORTED_SCAN as u64 + 3;
        for t in 100..=last {
            q.push_nearly_sorted(key(t, t));
        }
        // One step back from the end: stays in the sorted part.
        q.push_nearly_sorted(key(last - 1, 1_000));
        // Before all of them, past more than SORTED_SCAN entries: to the heap.
        q.push_nearly_sorted(key(5, 5));
        assert_eq!((q.heap.len(), q.sorted.len()), (1, SORTED_SCAN + 5));
        let order: Vec<u64> =
            std::iter::from_fn(|| q.pop_due(Instant::NEVER).map(|k| k.2)).collect();
        let mut expected = vec![5];
        expected.extend(100..last);
        expected.extend([1_000, last]);
        assert_eq!(order, expected);
    }
}
