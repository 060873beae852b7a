//! Timers: [`sleep`], [`sleep_until`], [`Sleep::reset`] and [`timeout`], on the wall clock.

// This module is the executor's clock: it reads the wall clock, which the workspace's
// clippy configuration keeps out of everything that is not a runtime.
#![allow(clippy::disallowed_methods)]

use std::cell::{Cell, RefCell};
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// A reading of the wall clock: `CLOCK_MONOTONIC` (the clock `std::time::Instant` reads on
/// Linux) in nanoseconds. Read directly, because the soft RNIC reads it several times per
/// round trip on each side, and `std::time::Instant`'s reading and subtraction (its
/// `timespec` checks and `Duration` arithmetic) cost about 100 instructions more per
/// reading (callgrind, sixteenth session: about 6% of a soft-RNIC server's instructions
/// per append).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The `CLOCK_MONOTONIC` reading in nanoseconds (for a POSIX timer's deadline).
    pub(crate) fn as_nanos(self) -> u64 {
        self.0
    }

    /// Nanoseconds from `earlier` to this instant, zero if `earlier` is later.
    pub fn nanos_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// The time from `earlier` to this instant, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.nanos_since(earlier))
    }

    /// The time since this instant.
    pub fn elapsed(self) -> Duration {
        now().saturating_duration_since(self)
    }

    /// `self + d`, or `None` past the clock's range (u64 nanoseconds: about 584 years
    /// after boot, where `std::time::Instant` reaches billions of years).
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let d = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(d).map(Instant)
    }

    /// `self + d`, or the clock's last instant past its range: a deadline that far away
    /// never comes, which is what a caller with an unbounded wait means.
    pub fn saturating_add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant(u64::MAX))
    }
}

impl std::ops::Add<Duration> for Instant {
    type Output = Instant;
    /// Panics past the clock's range (see [`Instant::checked_add`]; callers whose
    /// duration may be unbounded use [`Instant::saturating_add`]).
    fn add(self, d: Duration) -> Instant {
        self.checked_add(d)
            .expect("overflow when adding duration to instant")
    }
}

/// The wall clock (this crate is a runtime: it is where time comes from).
pub fn now() -> Instant {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec`; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // CLOCK_MONOTONIC is always there (std's `Instant` relies on it the same way).
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    Instant(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// A sleeping task's deadline and waker, shared with the heap.
struct Entry {
    deadline: Cell<Instant>,
    waker: RefCell<Option<Waker>>,
}

/// A heap item: the deadline it was pushed with (a reset pushes another; a stale item is
/// skipped when it comes up).
struct Item {
    at: Instant,
    seq: u64,
    entry: Weak<Entry>,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Reversed: the earliest deadline is the heap's top.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// The executor's timers.
#[derive(Default)]
pub(crate) struct Timers {
    heap: RefCell<BinaryHeap<Item>>,
    seq: Cell<u64>,
    /// Items whose timer was dropped or moved before they came up: a time-out per call
    /// leaves one each, so they are swept out once they are half the heap.
    stale: Cell<usize>,
}

impl Timers {
    fn push(&self, entry: &Rc<Entry>) {
        let seq = self.seq.get();
        self.seq.set(seq + 1);
        let stale = self.stale.get();
        if stale > 64 && 2 * stale > self.heap.borrow().len() {
            self.heap
                .borrow_mut()
                .retain(|i| i.entry.upgrade().is_some_and(|e| e.deadline.get() == i.at));
            self.stale.set(0);
        }
        self.heap.borrow_mut().push(Item {
            at: entry.deadline.get(),
            seq,
            entry: Rc::downgrade(entry),
        });
    }

    /// How long the poller may wait: until the earliest deadline (`None`: no timer).
    pub(crate) fn next_wait(&self, now: Instant) -> Option<Duration> {
        let mut heap = self.heap.borrow_mut();
        // Drop items of timers gone or moved, so they do not cut a wait short.
        while let Some(top) = heap.peek() {
            match top.entry.upgrade() {
                Some(e) if e.deadline.get() == top.at && e.waker.borrow().is_some() => {
                    // mio rounds a wait up to the next millisecond (epoll's unit, and
                    // tokio's timer granularity): it never ends before the deadline.
                    return Some(top.at.saturating_duration_since(now));
                }
                _ => {
                    heap.pop();
                }
            }
        }
        None
    }

    /// Wakes the tasks whose deadline has passed.
    pub(crate) fn fire(&self) {
        let mut heap = self.heap.borrow_mut();
        if heap.is_empty() {
            return;
        }
        let t = now();
        while let Some(top) = heap.peek() {
            if top.at > t {
                break;
            }
            let item = heap.pop().expect("peeked");
            if let Some(e) = item.entry.upgrade() {
                if e.deadline.get() <= t {
                    if let Some(w) = e.waker.borrow_mut().take() {
                        w.wake();
                    }
                }
            }
        }
    }
}

/// Resolves at a deadline. Can be moved to another deadline with [`reset`](Self::reset).
pub struct Sleep {
    entry: Rc<Entry>,
    /// The deadline the heap holds an item for (none before the first wait).
    pushed: Cell<Option<Instant>>,
}

/// Sleeps for `d` (a duration past the clock's range sleeps for about a century).
pub fn sleep(d: Duration) -> Sleep {
    let t = now();
    sleep_until(
        t.checked_add(d)
            .unwrap_or_else(|| t + Duration::from_secs(100 * 365 * 86_400)),
    )
}

/// Sleeps until `deadline`.
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        entry: Rc::new(Entry {
            deadline: Cell::new(deadline),
            waker: RefCell::new(None),
        }),
        pushed: Cell::new(None),
    }
}

impl Sleep {
    /// Moves the deadline (earlier or later).
    pub fn reset(self: Pin<&mut Self>, deadline: Instant) {
        self.entry.deadline.set(deadline);
        // A task waiting on it keeps waiting, for the new deadline.
        if self.entry.waker.borrow().is_some() && self.pushed.get() != Some(deadline) {
            self.push(deadline);
        }
    }

    /// The current deadline.
    pub fn deadline(&self) -> Instant {
        self.entry.deadline.get()
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.entry.deadline.get();
        // In the heap for this deadline and not fired (firing takes the waker): not due,
        // and no clock read needed (a driver polls its timer at every wake-up).
        if self.pushed.get() == Some(deadline) {
            if let Some(w) = &mut *self.entry.waker.borrow_mut() {
                w.clone_from(cx.waker());
                return Poll::Pending;
            }
        }
        if now() >= deadline {
            self.entry.waker.borrow_mut().take();
            return Poll::Ready(());
        }
        {
            let mut w = self.entry.waker.borrow_mut();
            match &mut *w {
                Some(old) => old.clone_from(cx.waker()),
                None => *w = Some(cx.waker().clone()),
            }
        }
        if self.pushed.get() != Some(deadline) {
            self.push(deadline);
        }
        Poll::Pending
    }
}

impl Sleep {
    /// Puts an item for `deadline` in the heap (an earlier item of this timer is stale).
    fn push(&self, deadline: Instant) {
        let moved = self.pushed.replace(Some(deadline)).is_some();
        crate::with_core(|c| {
            if moved {
                c.timers.stale.set(c.timers.stale.get() + 1);
            }
            c.timers.push(&self.entry)
        });
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        // Its item in the heap (if not fired) is stale now.
        if self.pushed.get().is_some() && self.entry.waker.borrow().is_some() {
            let _ = crate::CURRENT.try_with(|c| {
                if let Ok(Some(core)) = c.try_borrow().as_deref() {
                    core.timers.stale.set(core.timers.stale.get() + 1);
                }
            });
        }
    }
}

/// The future did not finish in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// Runs `future` for at most `d`, counted from this call (not from the first poll).
pub fn timeout<F: Future>(
    d: Duration,
    future: F,
) -> impl Future<Output = Result<F::Output, Elapsed>> {
    let sleep = sleep(d);
    timeout_with(sleep, future)
}

async fn timeout_with<F: Future>(sleep: Sleep, future: F) -> Result<F::Output, Elapsed> {
    let mut future = std::pin::pin!(future);
    let mut sleep = std::pin::pin!(sleep);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        sleep.as_mut().poll(cx).map(|_| Err(Elapsed))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_runs_with_std_and_its_arithmetic_saturates() {
        #[allow(clippy::disallowed_methods)] // the reference this clock is checked against
        let (s0, a) = (std::time::Instant::now(), now());
        std::thread::sleep(Duration::from_millis(5));
        let b = now();
        #[allow(clippy::disallowed_methods)]
        let s1 = std::time::Instant::now();
        assert!(b > a);
        // Both read CLOCK_MONOTONIC: the same interval, read inside std's.
        let ours = b.saturating_duration_since(a);
        assert!(
            ours >= Duration::from_millis(5) && ours <= s1 - s0,
            "{ours:?}"
        );
        assert_eq!(a.saturating_duration_since(b), Duration::ZERO);
        assert_eq!(a.nanos_since(b), 0);
        assert_eq!((a + Duration::from_nanos(7)).nanos_since(a), 7);
        assert_eq!(a.checked_add(Duration::MAX), None);
        assert_eq!(
            Instant(u64::MAX - 1).checked_add(Duration::from_nanos(2)),
            None
        );
        assert_eq!(
            a.saturating_add(Duration::from_nanos(u64::MAX)),
            Instant(u64::MAX)
        );
        assert_eq!(a.saturating_add(Duration::from_nanos(3)).nanos_since(a), 3);
    }

    #[test]
    fn sleeps_end_in_deadline_order_and_not_before() {
        let start = now();
        let order = crate::block_on(async {
            let order = Rc::new(RefCell::new(Vec::new()));
            let mut hs = Vec::new();
            for (i, ms) in [30u64, 10, 20].into_iter().enumerate() {
                let o = order.clone();
                hs.push(crate::spawn_local(async move {
                    sleep(Duration::from_millis(ms)).await;
                    o.borrow_mut().push(i);
                }));
            }
            for h in hs {
                h.await.unwrap();
            }
            order.take()
        });
        assert_eq!(order, vec![1, 2, 0]);
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn a_reset_moves_the_deadline_both_ways() {
        crate::block_on(async {
            let s = sleep(Duration::from_secs(3600));
            let mut s = std::pin::pin!(s);
            // Poll once so the far deadline is in the heap, then pull it in.
            assert!(timeout(Duration::from_millis(5), s.as_mut()).await.is_err());
            let t = now();
            s.as_mut().reset(t + Duration::from_millis(10));
            s.as_mut().await;
            assert!(now() >= t + Duration::from_millis(10));
        });
    }

    #[test]
    fn time_outs_that_did_not_fire_do_not_pile_up() {
        crate::block_on(async {
            for _ in 0..10_000 {
                let r = timeout(Duration::from_secs(3600), crate::yield_local()).await;
                assert!(r.is_ok());
            }
            let left = crate::with_core(|c| c.timers.heap.borrow().len());
            assert!(left <= 200, "{left} items left in the timer heap");
        });
    }

    #[test]
    fn timeout_gives_the_output_or_elapsed() {
        crate::block_on(async {
            assert_eq!(timeout(Duration::from_secs(1), async { 5 }).await, Ok(5));
            let never = std::future::pending::<()>();
            assert_eq!(timeout(Duration::from_millis(5), never).await, Err(Elapsed));
        });
    }
}
