//! [`Notify`]: a task waits until another tells it to go on.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Wakes waiting tasks: [`notify_one`](Self::notify_one) leaves a permit for the next
/// wait if none is waiting; [`notify_waiters`](Self::notify_waiters) releases every wait
/// begun (every [`Notified`] made) before it, and leaves no permit.
#[derive(Default)]
pub struct Notify {
    permit: Cell<bool>,
    /// Counts `notify_waiters` calls: a `Notified` made before one is released by it.
    generation: Cell<u64>,
    waiters: RefCell<Vec<(u64, Waker)>>,
    next_id: Cell<u64>,
}

impl Notify {
    /// A `Notify` with no permit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Releases one waiting task, or the next wait if none waits.
    pub fn notify_one(&self) {
        self.permit.set(true);
        // The first of them to run takes the permit; the others wait again.
        for (_, w) in self.waiters.borrow().iter() {
            w.wake_by_ref();
        }
    }

    /// Releases every wait begun before this call.
    pub fn notify_waiters(&self) {
        self.generation.set(self.generation.get() + 1);
        for (_, w) in self.waiters.borrow_mut().drain(..) {
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
        }
    }
}

/// A wait on a [`Notify`].
pub struct Notified<'a> {
    notify: &'a Notify,
    generation: u64,
    id: u64,
}

impl Future for Notified<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let n = self.notify;
        if n.generation.get() != self.generation || n.permit.replace(false) {
            n.waiters.borrow_mut().retain(|(id, _)| *id != self.id);
            return Poll::Ready(());
        }
        let mut ws = n.waiters.borrow_mut();
        match ws.iter_mut().find(|(id, _)| *id == self.id) {
            Some((_, w)) => w.clone_from(cx.waker()),
            None => ws.push((self.id, cx.waker().clone())),
        }
        Poll::Pending
    }
}

impl Drop for Notified<'_> {
    fn drop(&mut self) {
        if let Ok(mut ws) = self.notify.waiters.try_borrow_mut() {
            ws.retain(|(id, _)| *id != self.id);
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
}
