//! The hierarchy's queues taken from the front (see [`SliceQueue`]).

/// A queue taken from the front: a vector and the index of its first live entry, so its
/// entries are one slice. The hierarchy's queues are taken from the front and filled at
/// or near the back, once or twice per streamed line; a `VecDeque` does the same with
/// its wrap-around arithmetic on every access, and an insertion before the back with its
/// wrap-around copy, which were a noticeable part of a line's cost. The vector is
/// compacted when it is full and at least half of it is taken (amortized: one entry
/// moved per entry taken). A queue that is kept in ascending order (the channels' drain
/// times, the sorted part of the persist queue) is filled through `insert` and
/// `insert_near_back`.
#[derive(Debug)]
pub(super) struct SliceQueue<T> {
    v: Vec<T>,
    head: usize,
}

impl<T> Default for SliceQueue<T> {
    fn default() -> Self {
        SliceQueue {
            v: Vec::new(),
            head: 0,
        }
    }
}

impl<T: Copy> SliceQueue<T> {
    /// The entries, front first.
    #[inline]
    pub(super) fn as_slice(&self) -> &[T] {
        &self.v[self.head..]
    }

    /// The entries, front first.
    pub(super) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.as_slice().iter()
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.v.len() - self.head
    }

    #[inline]
    pub(super) fn front(&self) -> Option<&T> {
        self.v.get(self.head)
    }

    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<T> {
        let x = *self.v.get(self.head)?;
        self.head += 1;
        if self.head == self.v.len() {
            self.clear();
        }
        Some(x)
    }

    pub(super) fn clear(&mut self) {
        self.v.clear();
        self.head = 0;
    }

    /// Makes room for one more entry without growing while half the vector is taken.
    #[inline(always)]
    fn reserve_one(&mut self) {
        if self.v.len() == self.v.capacity() {
            self.make_room();
        }
    }

    /// [`reserve_one`](Self::reserve_one) of a full vector: compacted if at least half of
    /// it is taken, else grown. Out of line: once per so many entries.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self) {
        if self.head >= self.v.len() / 2 {
            self.v.drain(..self.head);
            self.head = 0;
        } else {
            self.v.reserve(1);
        }
    }

    #[inline]
    pub(super) fn push_back(&mut self, x: T) {
        self.reserve_one();
        self.v.push(x);
    }
}

impl<T: Ord + Copy> SliceQueue<T> {
    /// Inserts `x` after every entry not greater than it, if that place is at most `scan`
    /// entries from the back (at most `scan` entries are greater than `x`); else leaves
    /// the queue as it was and returns false. Inlined always: `insert` is built on it, on
    /// the path of every streamed line.
    #[inline(always)]
    pub(super) fn insert_near_back(&mut self, x: T, scan: usize) -> bool {
        let live = self.as_slice();
        let n = live.len();
        // Sorted: more than `scan` entries are greater than `x` if the one `scan` + 1
        // from the back is.
        if n > scan && live[n - scan - 1] > x {
            return false;
        }
        self.push_sorted(x);
        true
    }

    /// Inserts `x` after every entry not greater than it: at the back in one comparison
    /// when it is the greatest, by moving the entries it passes one place back when they
    /// are few (the places are found and made in one pass, with no call to `memmove`),
    /// else where a binary search puts it.
    #[inline(always)]
    pub(super) fn insert(&mut self, x: T) {
        if !self.insert_near_back(x, SHORT_PASS) {
            self.insert_far(x);
        }
    }

    /// [`insert`](Self::insert) of an entry more than [`SHORT_PASS`] places from the back.
    #[inline(never)]
    fn insert_far(&mut self, x: T) {
        let at = self.as_slice().partition_point(|y| *y <= x);
        self.reserve_one();
        self.v.insert(self.head + at, x);
    }

    /// Inserts `x` after every entry not greater than it, passing the greater ones from
    /// the back (the caller knows they are few).
    #[inline(always)]
    fn push_sorted(&mut self, x: T) {
        self.reserve_one();
        self.v.push(x);
        let live = &mut self.v[self.head..];
        let mut at = live.len() - 1;
        while at > 0 && live[at - 1] > x {
            live[at] = live[at - 1];
            at -= 1;
        }
        live[at] = x;
    }
}

/// Most entries [`SliceQueue::insert`] passes one by one; past that, a binary search finds
/// the place.
const SHORT_PASS: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Instant;
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, VecDeque};

    proptest::proptest! {
        /// A queue used as a channel's drain times (`insert`, `pop_front` up to a
        /// time, `len`) answers as the min-heap it stands for, through its compactions.
        #[test]
        fn a_sorted_queue_answers_as_a_min_heap(
            ops in proptest::collection::vec((0u64..500, 0usize..4), 1..2000)
        ) {
            let mut q = SliceQueue::default();
            let mut reference = BinaryHeap::new();
            let mut now = 0u64;
            for (delta, pops) in ops {
                // Mostly later than the latest, sometimes well before it.
                let t = Instant::from_nanos(now + delta);
                q.insert(t);
                reference.push(Reverse(t));
                now += 3;
                let due = Instant::from_nanos(now);
                for _ in 0..pops {
                    if q.front().is_some_and(|d| *d <= due) {
                        proptest::prop_assert_eq!(q.pop_front(), reference.pop().map(|r| r.0));
                    }
                }
                proptest::prop_assert_eq!(q.len(), reference.len());
                proptest::prop_assert_eq!(q.front().copied(), reference.peek().map(|r| r.0));
                proptest::prop_assert!(q.as_slice().windows(2).all(|w| w[0] <= w[1]));
            }
        }
    }

    proptest::proptest! {
        /// `insert_near_back` places an entry as `insert` does when at most `scan` entries
        /// are greater than it, and otherwise refuses it, leaving the queue as it was.
        #[test]
        fn insert_near_back_refuses_only_what_lies_too_far_back(
            ops in proptest::collection::vec((0u64..60, 0usize..20, proptest::bool::ANY), 1..400)
        ) {
            let (mut q, mut reference) = (SliceQueue::default(), Vec::new());
            for (x, scan, pop) in ops {
                let greater = reference.iter().filter(|&&y| y > x).count();
                let placed = q.insert_near_back(x, scan);
                proptest::prop_assert_eq!(placed, greater <= scan);
                if placed {
                    let at = reference.len() - greater;
                    reference.insert(at, x);
                }
                if pop && !reference.is_empty() {
                    proptest::prop_assert_eq!(q.pop_front(), Some(reference.remove(0)));
                }
                proptest::prop_assert_eq!(q.as_slice(), &reference[..]);
            }
        }
    }

    proptest::proptest! {
        /// Filled at the back only, it is a FIFO queue, through its compactions.
        #[test]
        fn the_slice_queue_is_a_fifo(ops in proptest::collection::vec(0usize..3, 1..2000)) {
            let (mut q, mut reference) = (SliceQueue::default(), VecDeque::new());
            for (i, pops) in ops.into_iter().enumerate() {
                q.push_back(i);
                reference.push_back(i);
                for _ in 0..pops {
                    proptest::prop_assert_eq!(q.pop_front(), reference.pop_front());
                }
                proptest::prop_assert_eq!(q.as_slice(), reference.iter().copied().collect::<Vec<_>>());
            }
        }
    }
}
