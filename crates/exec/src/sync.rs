//! [`Notify`]: a task waits until another tells it to go on.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Wakes waiting tasks: [`notify_one`](Self::notify_one) releases the longest-waiting
/// task, or leaves a permit for the next wait if none waits;
/// [`notify_waiters`](Self::notify_waiters) releases every wait begun (every [`Notified`]
/// made) before it, and leaves no permit.
#[derive(Default)]
pub struct Notify {
    permit: Cell<bool>,
    /// Counts `notify_waiters` calls: a `Notified` made before one is released by it.
    generation: Cell<u64>,
    /// Waits that were polled and are pending, longest first.
    waiters: RefCell<VecDeque<(u64, Waker)>>,
    /// Waits `notify_one` released that have not yet seen it.
    handed: RefCell<Vec<u64>>,
    next_id: Cell<u64>,
}

impl Notify {
    /// A `Notify` with no permit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Releases the longest-waiting task, or the next wait if none waits.
    pub fn notify_one(&self) {
        let first = self.waiters.borrow_mut().pop_front();
        match first {
            Some((id, w)) => {
                self.handed.borrow_mut().push(id);
                w.wake();
            }
            None => self.permit.set(true),
        }
    }

    /// Releases every wait begun before this call.
    pub fn notify_waiters(&self) {
        self.generation.set(self.generation.get() + 1);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for (_, w) in waiters {
            w.wake();
        }
    }

    /// A wait; it counts as begun now (for `notify_waiters`), before it is first polled.
    pub fn notified(&self) -> Notified<'_> {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        Notified {
            notify: self,
            generation: self.generation.get(),
            id,
            done: false,
        }
    }

    /// Takes the notification `notify_one` handed to wait `id`, if it did.
    fn take_handed(&self, id: u64) -> bool {
        let mut handed = self.handed.borrow_mut();
        match handed.iter().position(|&h| h == id) {
            Some(i) => {
                handed.swap_remove(i);
                true
            }
            None => false,
        }
    }
}

/// A wait on a [`Notify`].
pub struct Notified<'a> {
    notify: &'a Notify,
    generation: u64,
    id: u64,
    done: bool,
}

impl Future for Notified<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let n = self.notify;
        if self.done
            || n.take_handed(self.id)
            || n.generation.get() != self.generation
            || n.permit.replace(false)
        {
            n.waiters.borrow_mut().retain(|(id, _)| *id != self.id);
            self.done = true;
            return Poll::Ready(());
        }
        let mut ws = n.waiters.borrow_mut();
        match ws.iter_mut().find(|(id, _)| *id == self.id) {
            Some((_, w)) => w.clone_from(cx.waker()),
            None => ws.push_back((self.id, cx.waker().clone())),
        }
        Poll::Pending
    }
}

impl Drop for Notified<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let n = self.notify;
        if let Ok(mut ws) = n.waiters.try_borrow_mut() {
            ws.retain(|(id, _)| *id != self.id);
        }
        // Released by `notify_one` but dropped before it saw it: the next wait gets it.
        if n.take_handed(self.id) {
            n.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn a_permit_is_kept_for_the_next_wait_and_waiters_are_released_once() {
        crate::block_on(async {
            let n = Rc::new(Notify::new());
            n.notify_one();
            n.notified().await; // the permit
            let begun = n.notified();
            n.notify_waiters(); // releases `begun`, leaves no permit
            begun.await;
            let m = n.clone();
            let h = crate::spawn_local(async move { m.notified().await });
            crate::yield_local().await;
            n.notify_one();
            h.await.unwrap();
            assert!(!n.permit.get());
        });
    }

    #[test]
    fn each_notify_one_releases_its_own_waiter_in_order_even_if_one_is_dropped() {
        crate::block_on(async {
            let n = Rc::new(Notify::new());
            let order = Rc::new(RefCell::new(Vec::new()));
            let mut hs = Vec::new();
            for i in 0..3 {
                let (n, o) = (n.clone(), order.clone());
                hs.push(crate::spawn_local(async move {
                    n.notified().await;
                    o.borrow_mut().push(i);
                }));
                crate::yield_local().await; // each waits before the next
            }
            // A fourth wait, released and dropped unseen: its release passes on.
            let dropped = n.notified();
            let mut dropped = Box::pin(dropped);
            assert!(futures_poll(dropped.as_mut()).is_pending());
            n.notify_one(); // waiter 0
            n.notify_one(); // waiter 1
            crate::yield_local().await;
            assert_eq!(*order.borrow(), vec![0, 1]);
            n.notify_one(); // waiter 2
            n.notify_one(); // `dropped`: it passes the release on as a permit
            drop(dropped);
            for h in hs {
                h.await.unwrap();
            }
            assert_eq!(*order.borrow(), vec![0, 1, 2]);
            assert!(n.permit.get(), "the dropped wait's release was passed on");
        });
    }

    /// Polls once with a waker that does nothing.
    fn futures_poll<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(std::task::Waker::noop()))
    }
}
