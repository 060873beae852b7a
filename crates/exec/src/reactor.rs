//! The reactor: one `mio::Poll` (epoll), a slot per registered source with its readiness
//! and the wakers of the task reading and the task writing.
//!
//! When one stream carries the traffic, the executor waits in a blocking `recv` on it
//! instead of in `epoll_wait` ([`blocking`] says when and why).

mod blocking;

pub(crate) use blocking::interrupt;

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use mio::{Interest, Token};

/// The token of the poller's own waker (wake-ups from other threads).
const WAKER: Token = Token(usize::MAX);

/// Readiness of one source, and who waits for it.
pub(crate) struct IoState {
    readable: Cell<bool>,
    writable: Cell<bool>,
    /// The peer closed its side or the connection failed: reads stay ready (they return
    /// 0 or the error), since no further edge will come for it. A short read before the
    /// end must not spend the readiness the end is waiting in.
    read_closed: Cell<bool>,
    reader: RefCell<Option<Waker>>,
    writer: RefCell<Option<Waker>>,
    /// What a blocking receive may use of this source ([`blocking`]).
    wait: blocking::SourceWait,
    /// Its reactor's count of sources with a task waiting to write ([`Reactor::writers`]).
    writers: Rc<Cell<usize>>,
}

/// Which way a task waits.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Read,
    Write,
}

impl Drop for IoState {
    fn drop(&mut self) {
        if self.writer.get_mut().is_some() {
            self.count_writer(false);
        }
    }
}

impl IoState {
    /// A writer waker was set (`up`) or taken or dropped on this source.
    fn count_writer(&self, up: bool) {
        let n = self.writers.get();
        self.writers.set(if up { n + 1 } else { n - 1 });
    }

    fn flag(&self, dir: Dir) -> &Cell<bool> {
        match dir {
            Dir::Read => &self.readable,
            Dir::Write => &self.writable,
        }
    }

    fn waiter(&self, dir: Dir) -> &RefCell<Option<Waker>> {
        match dir {
            Dir::Read => &self.reader,
            Dir::Write => &self.writer,
        }
    }

    /// Runs `op` while the source is ready for `dir`; on `WouldBlock` the readiness is
    /// spent and the task waits for the next event (the poller is edge-triggered: an
    /// event comes only after an operation found the source empty or full).
    pub(crate) fn poll_io<R>(
        &self,
        dir: Dir,
        cx: &mut Context<'_>,
        mut op: impl FnMut() -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        // A source that stays ready would keep its task polling it for ever: after
        // `BUDGET` operations the task goes to the back of the queue (as tokio's budget).
        if !crate::spend_budget() {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        loop {
            if !self.flag(dir).get() {
                let mut w = self.waiter(dir).borrow_mut();
                match &mut *w {
                    Some(old) => old.clone_from(cx.waker()),
                    None => {
                        *w = Some(cx.waker().clone());
                        if dir == Dir::Write {
                            self.count_writer(true);
                        }
                    }
                }
                return Poll::Pending;
            }
            match op() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.flag(dir).set(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => return Poll::Ready(r),
            }
        }
    }

    /// Waits until the source is (reported) ready for `dir`.
    pub(crate) fn poll_ready(&self, dir: Dir, cx: &mut Context<'_>) -> Poll<()> {
        if self.flag(dir).get() {
            return Poll::Ready(());
        }
        let old = self.waiter(dir).borrow_mut().replace(cx.waker().clone());
        if dir == Dir::Write && old.is_none() {
            self.count_writer(true);
        }
        Poll::Pending
    }

    /// Marks the source not ready for `dir` (an operation outside `poll_io` found it so),
    /// unless the peer's end is already reported (reads then stay ready).
    pub(crate) fn clear(&self, dir: Dir) {
        if dir == Dir::Read && self.read_closed.get() {
            return;
        }
        self.flag(dir).set(false);
    }
}

/// The poller and the sources registered with it.
pub(crate) struct Reactor {
    poll: RefCell<mio::Poll>,
    events: RefCell<mio::Events>,
    sources: RefCell<Vec<Option<Rc<IoState>>>>,
    free: RefCell<Vec<usize>>,
    /// When and whether to wait in a blocking receive ([`blocking`]).
    blocker: blocking::Blocker,
    /// Counts registrations and deregistrations (the blocking receive re-arms the other
    /// sources when the set changes).
    generation: Cell<u64>,
    /// Sources with a task waiting to write (a `writer` waker set), counted where a writer
    /// waker is set, taken, or dropped with its source: while there is one, the executor
    /// does not wait in a blocking receive ([`blocking`]'s `wait_target`), and counting
    /// them spares it a look at every source.
    writers: Rc<Cell<usize>>,
}

impl Reactor {
    pub(crate) fn new() -> io::Result<Reactor> {
        Ok(Reactor {
            poll: RefCell::new(mio::Poll::new()?),
            events: RefCell::new(mio::Events::with_capacity(256)),
            sources: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            blocker: blocking::Blocker::default(),
            generation: Cell::new(0),
            writers: Rc::new(Cell::new(0)),
        })
    }

    /// Whether a task waits to write on one of this reactor's sources.
    pub(crate) fn writers_waiting(&self) -> bool {
        self.writers.get() > 0
    }

    pub(crate) fn waker(&self) -> io::Result<mio::Waker> {
        mio::Waker::new(self.poll.borrow().registry(), WAKER)
    }

    /// Registers a source (descriptor `fd`) for reading and writing; returns its token
    /// and state. Both directions start ready: the first operation finds out. A
    /// `stream` is one a blocking receive may wait on.
    pub(crate) fn register(
        &self,
        source: &mut impl mio::event::Source,
        fd: RawFd,
        stream: bool,
    ) -> io::Result<(Token, Rc<IoState>)> {
        let state = Rc::new(IoState {
            readable: Cell::new(true),
            writable: Cell::new(true),
            read_closed: Cell::new(false),
            reader: RefCell::new(None),
            writer: RefCell::new(None),
            wait: blocking::SourceWait::new(fd, stream),
            writers: self.writers.clone(),
        });
        let i = self.free.borrow_mut().pop().unwrap_or_else(|| {
            let mut s = self.sources.borrow_mut();
            s.push(None);
            s.len() - 1
        });
        let token = Token(i);
        state.wait.token.set(i);
        if let Err(e) = self.poll.borrow().registry().register(
            source,
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.free.borrow_mut().push(i);
            return Err(e);
        }
        self.sources.borrow_mut()[i] = Some(state.clone());
        self.generation.set(self.generation.get() + 1);
        Ok((token, state))
    }

    pub(crate) fn deregister(&self, token: Token, source: &mut impl mio::event::Source) {
        let _ = self.poll.borrow().registry().deregister(source);
        if let Some(s) = self.sources.borrow_mut().get_mut(token.0) {
            *s = None;
            self.free.borrow_mut().push(token.0);
        }
        self.generation.set(self.generation.get() + 1);
    }

    /// Waits for events up to `timeout` (`None`: until one comes) and wakes the tasks
    /// waiting for them.
    pub(crate) fn poll(&self, timeout: Option<Duration>, now: crate::time::Instant) {
        self.polling(now);
        if timeout != Some(Duration::ZERO) {
            self.count(|s| s.epoll_waits += 1);
        }
        let mut events = self.events.borrow_mut();
        if let Err(e) = self.poll.borrow_mut().poll(&mut events, timeout) {
            // EINTR (a signal): the caller comes back round.
            if e.kind() != io::ErrorKind::Interrupted {
                panic!("remora-exec: epoll_wait failed: {e}");
            }
            return;
        }
        // A full batch may have left ready events in epoll, which no signal will announce.
        if events.iter().count() == events.capacity() {
            self.poll_again();
        }
        // Waking only queues the task: nothing here is re-entered.
        {
            let sources = self.sources.borrow();
            for ev in events.iter() {
                if ev.token() == WAKER {
                    continue;
                }
                let Some(Some(s)) = sources.get(ev.token().0) else {
                    continue;
                };
                // An error or a hang-up lets both sides find out by operating.
                let broken = ev.is_error();
                if ev.is_read_closed() || broken {
                    s.read_closed.set(true);
                }
                if ev.is_readable() || ev.is_read_closed() || broken {
                    s.readable.set(true);
                    if let Some(w) = s.reader.borrow_mut().take() {
                        w.wake();
                    }
                }
                if ev.is_writable() || ev.is_write_closed() || broken {
                    s.writable.set(true);
                    if let Some(w) = s.writer.borrow_mut().take() {
                        s.count_writer(false);
                        w.wake();
                    }
                }
            }
        }
    }
}
