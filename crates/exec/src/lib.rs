//! The soft RNIC's executor: one thread, tasks that need not be `Send`, and a reactor over
//! epoll (through `mio`).
//!
//! The soft RNIC's round trip is two processes each waking once per message: a socket
//! becomes readable, a reader task steps the RNIC model and wakes the application task
//! waiting for a completion, which posts the answer. A general-purpose runtime spends about
//! 2,000 instructions per such wake-up in its reactor dispatch, its local task set's queue,
//! the task harness and the time driver (`docs/results/soft-rnic-history.md`, fourteenth session),
//! a sixth of the stack's whole cost. Here a wake-up is a push onto a thread-local queue,
//! and the reactor is polled only when no task is ready (or every [`EVENT_INTERVAL`] polls,
//! so that a busy set of tasks cannot starve the sockets).
//!
//! The API follows the shapes the soft RNIC used before (tokio's): [`block_on`],
//! [`spawn_local`] with a [`JoinHandle`], [`yield_now`], [`time`], [`net`], [`sync`] and
//! [`signal`]. While one stream carries the traffic, the executor waits for it in a
//! blocking receive instead of `epoll_wait` (see [`net`]). Everything runs on the thread
//! that called [`block_on`]; a waker may be used from another thread (it then goes through
//! a locked queue and the poller's waker, and interrupts a blocking receive).
//! A socket or a timer belongs to the executor it was made on: awaited on another
//! [`Runtime`], it would never be woken.

#![warn(missing_docs)]

mod reactor;

pub mod net;
pub mod signal;
pub mod sync;
pub mod time;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// Task polls between two non-blocking looks at the sockets while tasks keep each other
/// busy (tokio's default too): enough to let a burst of wake-ups finish first, few enough
/// that input is not left waiting.
pub const EVENT_INTERVAL: u32 = 61;

/// Socket operations a task may make in one poll before it must yield (tokio's budget):
/// a reader whose socket never runs dry lets the other tasks in at this rate.
pub const BUDGET: u32 = 128;

/// A task's identity (its slot, and the task's number, which tells it from a later task in
/// the same slot), and the flag that keeps it queued at most once.
struct Header {
    id: TaskId,
    queued: AtomicBool,
    shared: Arc<Shared>,
}

/// A queued wake-up: a slot and the number of the task it is for. A plain value, so
/// queueing and running a task touch no reference count.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct TaskId {
    slot: usize,
    number: u64,
}

/// What a waker on another thread reaches: a locked queue and the poller's waker.
struct Shared {
    remote: Mutex<Vec<TaskId>>,
    pending: AtomicBool,
    waker: mio::Waker,
    /// The executor's thread (its kernel id) while it blocks in a receive, else 0: a
    /// remote wake-up then interrupts the receive (the poller's waker would not).
    blocked: AtomicU64,
}

impl Wake for Header {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        // `try_with`: a waker may be used while this thread's locals are torn down.
        let local = CURRENT
            .try_with(|c| match c.try_borrow().as_deref() {
                Ok(Some(core)) if Arc::ptr_eq(&core.shared, &self.shared) => {
                    core.ready.borrow_mut().push_back(self.id);
                    true
                }
                _ => false,
            })
            .unwrap_or(false);
        if !local {
            self.shared
                .remote
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(self.id);
            self.shared.pending.store(true, Ordering::SeqCst);
            let _ = self.shared.waker.wake();
            let blocked = self.shared.blocked.load(Ordering::SeqCst);
            if blocked != 0 {
                reactor::interrupt(blocked);
            }
        }
    }
}

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

/// A task's slot: its header, and its future with the waker it is polled with (made once),
/// taken out while it is polled.
struct Slot {
    header: Arc<Header>,
    task: Option<(LocalFuture, Waker)>,
}

/// The executor of one thread.
struct Core {
    shared: Arc<Shared>,
    slots: RefCell<Vec<Option<Slot>>>,
    free: RefCell<Vec<usize>>,
    ready: RefCell<VecDeque<TaskId>>,
    /// Numbers tasks (and `block_on` calls) apart.
    numbers: Cell<u64>,
    /// Wakers of tasks that yielded to the reactor ([`yield_now`]): woken after its next poll.
    deferred: RefCell<Vec<Waker>>,
    reactor: reactor::Reactor,
    timers: time::Timers,
    /// Tasks alive (the root future not counted).
    live: Cell<usize>,
    /// What is left of the polled task's [`BUDGET`].
    budget: Cell<u32>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Core>>> = const { RefCell::new(None) };
}

/// The slot of the future [`block_on`] runs (not a task slot).
const ROOT: usize = usize::MAX;

fn with_core<R>(f: impl FnOnce(&Rc<Core>) -> R) -> R {
    CURRENT.with(|c| {
        let core = c.borrow();
        f(core
            .as_ref()
            .expect("remora-exec: called outside remora_exec::block_on"))
    })
}

fn core() -> Rc<Core> {
    with_core(|c| c.clone())
}

impl Core {
    fn new() -> std::io::Result<Rc<Core>> {
        let reactor = reactor::Reactor::new()?;
        let waker = reactor.waker()?;
        Ok(Rc::new(Core {
            shared: Arc::new(Shared {
                remote: Mutex::new(Vec::new()),
                pending: AtomicBool::new(false),
                waker,
                blocked: AtomicU64::new(0),
            }),
            slots: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            ready: RefCell::new(VecDeque::new()),
            numbers: Cell::new(0),
            deferred: RefCell::new(Vec::new()),
            reactor,
            timers: time::Timers::default(),
            live: Cell::new(0),
            budget: Cell::new(BUDGET),
        }))
    }

    fn header(&self, slot: usize) -> Arc<Header> {
        let number = self.numbers.get();
        self.numbers.set(number + 1);
        Arc::new(Header {
            id: TaskId { slot, number },
            queued: AtomicBool::new(true),
            shared: self.shared.clone(),
        })
    }

    fn spawn(&self, future: LocalFuture) {
        let slot = self.free.borrow_mut().pop().unwrap_or_else(|| {
            let mut slots = self.slots.borrow_mut();
            slots.push(None);
            slots.len() - 1
        });
        let header = self.header(slot);
        let id = header.id;
        let waker = Waker::from(header.clone());
        self.slots.borrow_mut()[slot] = Some(Slot {
            header,
            task: Some((future, waker)),
        });
        self.live.set(self.live.get() + 1);
        self.ready.borrow_mut().push_back(id);
    }

    /// Polls the task a wake-up names, if it is still the task in that slot.
    fn run(&self, id: TaskId) {
        let task = {
            let mut slots = self.slots.borrow_mut();
            match slots.get_mut(id.slot) {
                Some(Some(s)) if s.header.id == id => {
                    s.header.queued.store(false, Ordering::Release);
                    s.task.take()
                }
                _ => None,
            }
        };
        // Taken out while polled (a wake-up during the poll only queues it again).
        let Some((mut future, waker)) = task else {
            return;
        };
        self.budget.set(BUDGET);
        let done = future
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_ready();
        if done {
            self.slots.borrow_mut()[id.slot] = None;
            self.free.borrow_mut().push(id.slot);
            self.live.set(self.live.get() - 1);
            // Dropped here, with no borrow held: its drop may touch the executor.
            drop((future, waker));
        } else if let Some(Some(s)) = self.slots.borrow_mut().get_mut(id.slot) {
            s.task = Some((future, waker));
        }
    }

    /// Moves wake-ups from other threads onto the ready queue.
    fn take_remote(&self) {
        if self.shared.pending.swap(false, Ordering::AcqRel) {
            let remote =
                std::mem::take(&mut *self.shared.remote.lock().unwrap_or_else(|e| e.into_inner()));
            self.ready.borrow_mut().extend(remote);
        }
    }

    /// Looks at the sockets and the timers: waits for them if `block` and nothing else is
    /// to be done, then wakes the tasks that yielded to the reactor.
    #[allow(clippy::disallowed_methods)] // the executor's own clock
    fn park(&self, block: bool) {
        let nothing_ready = self.ready.borrow().is_empty() && self.deferred.borrow().is_empty();
        // One clock reading serves every decision taken before the wait (the next timer's
        // distance, whether to block in a receive, the poll's time stamp): a reading costs
        // about 30 ns in a VM, and a round trip parks on each side.
        let now = time::now();
        let timeout = if block && nothing_ready {
            self.timers.next_wait(now)
        } else {
            Some(std::time::Duration::ZERO)
        };
        if !(block && nothing_ready && self.reactor.block_recv(timeout, now, &self.shared)) {
            self.reactor.poll(timeout, now);
        }
        self.take_remote();
        self.timers.fire();
        for w in std::mem::take(&mut *self.deferred.borrow_mut()) {
            w.wake();
        }
    }
}

/// Runs `future` to completion on this thread, with the tasks it spawns; tasks still alive
/// when it completes are dropped. Not re-entrant.
///
/// # Panics
/// If called inside another `block_on` on the same thread, or if the poller cannot be made.
pub fn block_on<F: Future>(future: F) -> F::Output {
    Runtime::new()
        .expect("remora-exec: cannot create the poller")
        .block_on(future)
}

/// An executor whose tasks outlive one [`block_on`](Runtime::block_on): what one call
/// spawns runs on in the next (a crash loop keeps its clients' nodes between lives). Its
/// tasks are dropped with it.
pub struct Runtime {
    core: Rc<Core>,
}

impl Runtime {
    /// An executor with its own poller.
    pub fn new() -> std::io::Result<Runtime> {
        Ok(Runtime { core: Core::new()? })
    }

    /// Runs `future` to completion on this thread, with this executor's tasks.
    ///
    /// # Panics
    /// Inside another `block_on` on the same thread.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        let core = &self.core;
        let _current = Enter::new(core);
        let mut future = std::pin::pin!(future);
        let root = core.header(ROOT);
        let root_waker = Waker::from(root.clone());
        core.ready.borrow_mut().push_back(root.id);
        let mut since_park = 0;
        loop {
            // One pass over what is ready now; what these polls wake waits for the next.
            let n = core.ready.borrow().len();
            for _ in 0..n {
                let Some(h) = core.ready.borrow_mut().pop_front() else {
                    break;
                };
                if h.slot == ROOT {
                    // A root of an earlier call, woken late: nothing to run.
                    if h != root.id {
                        continue;
                    }
                    root.queued.store(false, Ordering::Release);
                    core.budget.set(BUDGET);
                    let mut cx = Context::from_waker(&root_waker);
                    if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
                        return v;
                    }
                } else {
                    core.run(h);
                }
                since_park += 1;
            }
            if core.ready.borrow().is_empty() {
                core.park(true);
                since_park = 0;
            } else if since_park >= EVENT_INTERVAL {
                core.park(false);
                since_park = 0;
            }
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // The tasks are dropped while their executor is current (their drops may
        // deregister sockets or timers), with no borrow of it held.
        let _current = Enter::new(&self.core);
        let slots = std::mem::take(&mut *self.core.slots.borrow_mut());
        drop(slots);
        self.core.ready.borrow_mut().clear();
        self.core.deferred.borrow_mut().clear();
    }
}

/// Makes an executor this thread's current one until dropped (also when a panic unwinds).
struct Enter;

impl Enter {
    fn new(core: &Rc<Core>) -> Enter {
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            assert!(c.is_none(), "remora-exec: block_on inside block_on");
            *c = Some(core.clone());
        });
        Enter
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().take());
    }
}

/// Takes one unit of the polled task's [`BUDGET`]; false once it is spent (the caller
/// yields). Outside an executor there is no budget to spend.
pub(crate) fn spend_budget() -> bool {
    CURRENT
        .try_with(|c| match c.try_borrow().as_deref() {
            Ok(Some(core)) => {
                let left = core.budget.get();
                core.budget.set(left.saturating_sub(1));
                left > 0
            }
            _ => true,
        })
        .unwrap_or(true)
}

/// How this thread's executor waited in blocking receives (see [`net`]: while one stream
/// carries the traffic, the executor waits for it in a blocking `recv` on that stream
/// instead of in `epoll_wait`, which costs a round trip about a microsecond per side).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Blocking receives that brought data, the peer's end or an error.
    pub received: u64,
    /// Blocking receives that a signal interrupted (input on another source, a wake-up
    /// from another thread, or any signal the thread caught).
    pub interrupted: u64,
    /// Blocking receives that reached their time-out.
    pub timed_out: u64,
    /// Blocking receives that the executor's timer ended (a timer was due).
    pub timer_fired: u64,
    /// Times interrupts came too often and the executor went back to epoll alone for a
    /// while.
    pub switched_off: u64,
    /// Waits in `epoll_wait` instead (with a time-out other than zero: the executor had
    /// nothing to run and did not block in a receive).
    pub epoll_waits: u64,
    /// Signals this thread received for input on a source armed to interrupt a receive
    /// (each interrupts whatever the thread was doing; the thread's count, which another
    /// executor on the same thread would share).
    pub input_signals: u64,
}

impl WaitStats {
    /// The counts since `earlier` (a reading of the same executor).
    pub fn since(self, earlier: WaitStats) -> WaitStats {
        WaitStats {
            received: self.received - earlier.received,
            interrupted: self.interrupted - earlier.interrupted,
            timed_out: self.timed_out - earlier.timed_out,
            timer_fired: self.timer_fired - earlier.timer_fired,
            switched_off: self.switched_off - earlier.switched_off,
            epoll_waits: self.epoll_waits - earlier.epoll_waits,
            input_signals: self.input_signals - earlier.input_signals,
        }
    }

    /// Blocking receives, however each ended.
    pub fn receives(&self) -> u64 {
        self.received + self.interrupted + self.timed_out + self.timer_fired
    }
}

/// One line for a report: how the executor waited.
impl std::fmt::Display for WaitStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} blocking receives brought data, {} were interrupted by another source, {} timed out, {} ended by a timer; blocking receives switched off {} times; {} waits in epoll; {} input signals",
            self.received,
            self.interrupted,
            self.timed_out,
            self.timer_fired,
            self.switched_off,
            self.epoll_waits,
            self.input_signals
        )
    }
}

/// The blocking receives of this thread's executor so far.
///
/// # Panics
/// Outside [`block_on`].
pub fn wait_stats() -> WaitStats {
    with_core(|c| c.reactor.wait_stats())
}

/// Spawns a task on this thread's executor.
///
/// # Panics
/// Outside [`block_on`].
pub fn spawn_local<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let state = Rc::new(JoinState {
        result: RefCell::new(None),
        waker: RefCell::new(None),
    });
    let done = state.clone();
    let task = async move {
        let out = CatchUnwind(future).await;
        *done.result.borrow_mut() = Some(out);
        if let Some(w) = done.waker.borrow_mut().take() {
            w.wake();
        }
    };
    core().spawn(Box::pin(task));
    JoinHandle { state }
}

/// A task panicked; the panic was caught and its message kept (the executor goes on, as
/// a server keeps serving its other connections).
#[derive(Debug, Clone)]
pub struct JoinError(String);

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "task panicked: {}", self.0)
    }
}

impl std::error::Error for JoinError {}

struct JoinState<T> {
    result: RefCell<Option<Result<T, JoinError>>>,
    waker: RefCell<Option<Waker>>,
}

/// Awaits a spawned task's output. Dropping it detaches the task (it runs on).
pub struct JoinHandle<T> {
    state: Rc<JoinState<T>>,
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(r) = self.state.result.borrow_mut().take() {
            return Poll::Ready(r);
        }
        *self.state.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Polls a future, turning a panic into an error.
struct CatchUnwind<F>(F);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, JoinError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: the inner future is never moved out of the pinned wrapper.
        let inner = unsafe { self.map_unchecked_mut(|s| &mut s.0) };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(p) => {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into());
                Poll::Ready(Err(JoinError(msg)))
            }
        }
    }
}

/// Lets the reactor run once, then continues: the task resumes after the next look at
/// the sockets and timers (what arrived meanwhile is handled first).
pub fn yield_now() -> impl Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        with_core(|c| c.deferred.borrow_mut().push(cx.waker().clone()));
        Poll::Pending
    })
}

/// Lets the other ready tasks run, then continues, without a look at the sockets (the task
/// goes to the back of the ready queue).
pub fn yield_local() -> impl Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
}

/// The output of [`first`]: which future finished.
#[derive(Debug, PartialEq, Eq)]
pub enum Either<A, B> {
    /// The first future finished first (or both were ready: the first is polled first).
    Left(A),
    /// The second future finished first.
    Right(B),
}

/// Waits for whichever of `a` and `b` finishes first, polling `a` first; the other is
/// dropped.
pub async fn first<A: Future, B: Future>(a: A, b: B) -> Either<A::Output, B::Output> {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = a.as_mut().poll(cx) {
            return Poll::Ready(Either::Left(v));
        }
        b.as_mut().poll(cx).map(Either::Right)
    })
    .await
}

/// Runs `a` and `b` together until both finish.
pub async fn join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            Poll::Ready((ra.take().expect("ready"), rb.take().expect("ready")))
        } else {
            Poll::Pending
        }
    })
    .await
}

/// Tasks alive on this thread's executor (for tests).
pub fn tasks() -> usize {
    with_core(|c| c.live.get())
}

/// Whether a task of this thread's executor waits to write on one of its sources.
#[cfg(test)]
pub(crate) fn writers_waiting() -> bool {
    with_core(|c| c.reactor.writers_waiting())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawned_tasks_run_and_their_outputs_come_back() {
        let out = block_on(async {
            let a = spawn_local(async { 1 });
            let b = spawn_local(async {
                yield_local().await;
                yield_now().await;
                2
            });
            a.await.unwrap() + b.await.unwrap()
        });
        assert_eq!(out, 3);
    }

    #[test]
    fn a_panicking_task_is_an_error_and_the_rest_go_on() {
        let out = block_on(async {
            let bad = spawn_local(async {
                if tasks() > 0 {
                    panic!("on purpose");
                }
            });
            let good = spawn_local(async { 7 });
            (bad.await, good.await)
        });
        let e = out.0.expect_err("the panic is reported");
        assert!(e.to_string().contains("on purpose"), "{e}");
        assert_eq!(out.1.unwrap(), 7);
    }

    #[test]
    fn tasks_left_alive_are_dropped_and_a_new_executor_starts_clean() {
        struct Flag(Rc<Cell<bool>>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.set(true);
            }
        }
        let dropped = Rc::new(Cell::new(false));
        let d = dropped.clone();
        block_on(async move {
            spawn_local(async move {
                let _f = Flag(d);
                std::future::pending::<()>().await;
            });
            yield_local().await;
        });
        assert!(dropped.get());
        assert_eq!(block_on(async { tasks() }), 0);
    }

    #[test]
    fn a_runtime_keeps_its_tasks_between_calls() {
        let rt = Runtime::new().unwrap();
        let n = Rc::new(Cell::new(0));
        let m = n.clone();
        rt.block_on(async move {
            spawn_local(async move {
                loop {
                    m.set(m.get() + 1);
                    yield_local().await;
                }
            });
            yield_local().await;
        });
        let before = n.get();
        rt.block_on(async {
            for _ in 0..3 {
                yield_local().await;
            }
            assert_eq!(tasks(), 1);
        });
        assert!(n.get() > before, "the task ran again in the second call");
    }

    #[test]
    fn a_waker_from_another_thread_wakes_the_task() {
        let out = block_on(async {
            let mut sent = false;
            let flag = Arc::new(AtomicBool::new(false));
            std::future::poll_fn(|cx| {
                if flag.load(Ordering::Acquire) {
                    return Poll::Ready(42);
                }
                if !sent {
                    sent = true;
                    let (w, f) = (cx.waker().clone(), flag.clone());
                    std::thread::spawn(move || {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        f.store(true, Ordering::Release);
                        w.wake();
                    });
                }
                Poll::Pending
            })
            .await
        });
        assert_eq!(out, 42);
    }
}
