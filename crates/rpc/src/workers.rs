//! A server's worker threads, shared by every design the same way.
//!
//! Seed 003 measures heavy load by "injecting an additional latency of 100 us for data
//! processing" per request (§5.2) and says of the durable server that once a request is
//! durable in the log "a thread is created to handle the RPC requests. Meanwhile, the
//! sender can initiate another RPC request earlier" (§4.2, Figure 5), on servers with two
//! 20-core processors (§5.1). How many threads execute requests is a property of the
//! server, not of the RPC design, so every server here (the baselines' and the durable
//! RPCs') executes requests on a [`WorkerPool`] of [`ServerCosts::workers`] threads, shared
//! by all connections of the server: a request holds a worker while the server processes
//! it (the injected processing, the store access, its CPU copies). Noticing requests
//! (polling, receive completions) stays on each design's own dispatcher thread.
//!
//! The pool is a counting semaphore; [`Tasks`] runs the requests that hold a worker
//! concurrently inside the server's one task (no spawning, so it runs on any executor).
//!
//! [`ServerCosts::workers`]: crate::api::ServerCosts::workers

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// A pool of server worker threads (a counting semaphore). Clones share the pool.
#[derive(Clone)]
pub struct WorkerPool(Rc<PoolInner>);

struct PoolInner {
    size: u32,
    free: Cell<u32>,
    waiters: RefCell<Vec<Waker>>,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WorkerPool({}/{} free)", self.0.free.get(), self.0.size)
    }
}

impl WorkerPool {
    /// A pool of `size` workers (at least one).
    pub fn new(size: u32) -> Self {
        let size = size.max(1);
        WorkerPool(Rc::new(PoolInner {
            size,
            free: Cell::new(size),
            waiters: RefCell::new(Vec::new()),
        }))
    }

    /// Workers in the pool.
    pub fn size(&self) -> u32 {
        self.0.size
    }

    /// Workers not held now.
    pub fn free(&self) -> u32 {
        self.0.free.get()
    }

    /// Waits for a free worker and holds it until the returned guard is dropped.
    pub async fn acquire(&self) -> Worker {
        poll_fn(|cx| {
            let free = self.0.free.get();
            if free > 0 {
                self.0.free.set(free - 1);
                Poll::Ready(Worker(self.clone()))
            } else {
                self.0.waiters.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// A held worker; dropping it frees the worker and wakes whoever waits for one.
pub struct Worker(WorkerPool);

impl Drop for Worker {
    fn drop(&mut self) {
        let p = &self.0 .0;
        p.free.set(p.free.get() + 1);
        for w in p.waiters.borrow_mut().drain(..) {
            w.wake();
        }
    }
}

type Job<'a, E> = Pin<Box<dyn Future<Output = Result<(), E>> + 'a>>;

/// Futures started by a driver and run concurrently with it (see [`Tasks::run`]).
pub struct Tasks<'a, E> {
    started: RefCell<Vec<Job<'a, E>>>,
}

impl<E> Default for Tasks<'_, E> {
    fn default() -> Self {
        Tasks {
            started: RefCell::new(Vec::new()),
        }
    }
}

impl<'a, E> Tasks<'a, E> {
    /// Starts `job`; it runs until it finishes (an error ends [`run`](Self::run)).
    pub fn start(&self, job: impl Future<Output = Result<(), E>> + 'a) {
        self.started.borrow_mut().push(Box::pin(job));
    }

    /// Runs `driver` and every job it starts, all in the caller's task, until the driver
    /// finishes (its output) or a job fails (its error). A job that finishes and frees
    /// a worker wakes the task, so a driver waiting for one is polled again.
    pub async fn run<T>(&self, driver: impl Future<Output = T>) -> Result<T, E> {
        let mut driver = std::pin::pin!(driver);
        let mut running: Vec<Job<'a, E>> = Vec::new();
        poll_fn(|cx| loop {
            if let Poll::Ready(x) = driver.as_mut().poll(cx) {
                return Poll::Ready(Ok(x));
            }
            running.append(&mut self.started.borrow_mut());
            let mut i = 0;
            while i < running.len() {
                match running[i].as_mut().poll(cx) {
                    Poll::Ready(Ok(())) => drop(running.remove(i)),
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => i += 1,
                }
            }
            if self.started.borrow().is_empty() {
                return Poll::Pending;
            }
        })
        .await
    }
}
