//! Blocking receive: while one stream carries the traffic, the executor waits for it in a
//! blocking `recv` on that stream instead of in `epoll_wait`.
//!
//! **Why.** Waiting in `epoll_wait` and then reading costs a ping-pong about 1.1 µs more
//! per side than one blocking `recv` (interleaved C ping-pongs on the 2-core VM, eighteenth
//! session, `docs/results/soft-rnic-history.md`; `poll(2)` and a blocking `MSG_PEEK` save only
//! half of it: it is the second system call and the wake-up through the poller). That was
//! half of the soft RNIC's latency budget over the raw TCP ping-pong (issue 5: 1.3x).
//!
//! **When.** The executor has nothing to run; no task waits to write (only epoll says when
//! there is room); no timer is due within [`MIN_WAIT`]; epoll looked at every source less
//! than a [`SLICE`] ago and no interrupt came since; a stream's reader waits. The stream
//! waited on is the one most recently active (sent or received on): a client's answer comes
//! on the connection its request just left on, a server's next request most likely on the
//! connection it answered last.
//!
//! **The others are not kept waiting.** Every other source (other streams, the listener, the
//! signal pipe) has `O_ASYNC` set, with the executor's thread as its owner and `SIGURG` as
//! its signal (`F_SETOWN_EX`, `F_SETSIG`): input on any of them, a connection to accept or a
//! caught signal's byte interrupts the receive (`EINTR`: a receive on a socket with
//! `SO_RCVTIMEO` is never restarted, signal(7)), and epoll then looks at them all. A
//! wake-up from another thread signals the thread too (`tgkill`). A signal that lands
//! between the last look at the signal count and the receive's start would interrupt
//! nothing, and what it stood for would wait for the receive's time-out, `SO_RCVTIMEO` =
//! [`SLICE`] (rounded up to the kernel's tick): so the thread names the descriptor before
//! that look ([`RECV_FD`]), and a handler that runs while it is named sets the socket's
//! `O_NONBLOCK` (`fcntl` is async-signal-safe). The receive then returns at once instead
//! of starting to wait, and the thread puts the flags back. A receive that no signal came
//! for pays nothing; one that a signal interrupted (any of the interrupts above) pays three
//! `fcntl` calls, two in the handler and one after. If `SIGURG` is blocked on the
//! executor's thread, the executor never blocks in a receive.
//!
//! **Timers.** A timer due before the receive's time-out could end (two [`SLICE`]s: the
//! time-out is rounded up to the kernel's tick, at most 10 ms) is kept by a POSIX timer of
//! the executor's thread that raises the same signal at its deadline (`timer_create`,
//! `SIGEV_THREAD_ID`). It is set only when the deadline comes before the one it holds, so a
//! server whose next timer moves later with every request (the model's cache write-backs)
//! makes no system call for it per wait, and takes a spurious wake-up now and then.
//!
//! **Streams put to use.** A stream disarms itself when it sends or receives (one
//! `fcntl`, only when it was armed): its answer is coming, and an answer that arrives while
//! the executor still runs (on a shared CPU the peer answers before the send returns)
//! would cost a signal though no wait was disturbed. The next arming pass arms it again if
//! another stream is the one waited on.
//!
//! **Several busy streams.** Each input on an armed source costs a signal (and, when it
//! interrupts a receive, a trip through epoll), also while the executor is not blocked. A
//! score adds [`INTERRUPT_COST`] per such signal (told from the timer's and other threads'
//! by its `si_code`) and takes one off per blocking receive that brought data; past
//! [`SCORE_LIMIT`] the executor uses epoll alone for [`OFF`], with `O_ASYNC` cleared
//! everywhere.
//!
//! **The socket.** The stream waited on has `O_NONBLOCK` cleared (once, when it is first
//! waited on; for the whole open file description, so also for a duplicate of the
//! descriptor; a signal during a receive sets it for the instant until the thread puts it
//! back); every other operation on a stream passes `MSG_DONTWAIT`, so only this receive
//! ever blocks. Its bytes go to the stream's stash, which the reader's next read
//! takes first. A read that empties the stash short of what it asked for spends the
//! stream's readiness only if epoll has not looked since the receive: bytes that came
//! after it then still have their edge waiting in epoll (otherwise epoll may have spent
//! that edge, and the next read asks the socket).

use std::cell::{Cell, OnceCell, RefCell};
use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::{IoState, Reactor};
use crate::time::Instant;

/// Longest a blocking receive waits (its `SO_RCVTIMEO`), and the longest epoll goes
/// without looking at every source while the executor blocks in receives.
pub(crate) const SLICE: Duration = Duration::from_millis(10);
/// What an interrupt adds to the score (see the module's doc).
const INTERRUPT_COST: u32 = 8;
/// The score past which the executor uses epoll alone for [`OFF`].
const SCORE_LIMIT: u32 = 64;
/// How long the executor uses epoll alone once interrupts come too often.
const OFF: Duration = Duration::from_millis(100);
/// A timer due sooner than this is waited for in epoll: blocking would save less than
/// setting the POSIX timer costs.
const MIN_WAIT: Duration = Duration::from_micros(50);
/// Bytes one blocking receive may take (as much as the soft RNIC's readers ask for).
const STASH_BYTES: usize = 64 << 10;

// fcntl(2) commands the libc crate does not name for glibc: the values of
// asm-generic/fcntl.h. They hold only on the architectures whose fcntl.h takes them from
// asm-generic (alpha, mips, parisc and sparc define their own); elsewhere the executor never
// arms a socket (`SourceWait::arm` refuses) and waits in epoll alone.
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;
/// Whether [`F_SETSIG`], [`F_SETOWN_EX`] and [`F_OWNER_TID`] are this architecture's.
const ASM_GENERIC_FCNTL: bool = cfg!(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "powerpc64",
    target_arch = "powerpc",
    target_arch = "s390x",
));

/// `struct f_owner_ex` of fcntl(2).
#[repr(C)]
struct FOwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

thread_local! {
    /// Interrupt signals this thread received (what the handler does besides the
    /// interruption itself, and besides making a named socket non-blocking: [`RECV_FD`]).
    /// Per thread: every signal of the design is directed at the executor's own thread
    /// (`F_SETOWN_EX`, `SIGEV_THREAD_ID`, `tgkill`), and another executor's signals must
    /// not move this one's counts. Constant-initialised atomics without a destructor: the
    /// handler's access is a plain TLS access, and atomic (the handler interrupts this
    /// thread's own code).
    static SIGNALS: AtomicU64 = const { AtomicU64::new(0) };
    /// Those of them that input on an armed source raised (`si_code` one of `POLL_*`):
    /// what the score counts.
    static IO_SIGNALS: AtomicU64 = const { AtomicU64::new(0) };
    /// The socket this thread is about to wait on, from before its last look at the
    /// signal count until its receive returned; -1 otherwise. The handler makes it
    /// non-blocking (see the module's doc: the window a signal could otherwise be lost in).
    static RECV_FD: AtomicI32 = const { AtomicI32::new(-1) };
    /// [`RECV_FD`]'s flags before the handler set its `O_NONBLOCK` (-1: it did not), which
    /// the thread puts back.
    static SAVED_FLAGS: AtomicI32 = const { AtomicI32::new(-1) };
}

/// What the handler does besides counting: a signal that comes while the thread is about
/// to wait in (or waits in) a receive makes that receive return at once.
fn close_window() {
    let _ = RECV_FD.try_with(|fd| {
        let fd = fd.load(Ordering::SeqCst);
        if fd < 0 {
            return;
        }
        // SAFETY: `fcntl(2)` is async-signal-safe; the descriptor is open while named (the
        // thread names it only around its own receive). `errno` is kept for the code the
        // handler interrupted.
        unsafe {
            let errno = *libc::__errno_location();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0
                && flags & libc::O_NONBLOCK == 0
                && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
            {
                let _ = SAVED_FLAGS.try_with(|w| w.store(flags, Ordering::SeqCst));
            }
            *libc::__errno_location() = errno;
        }
    });
}

/// Ends the window [`RECV_FD`] opened on `fd`: whether a signal closed it, with the
/// socket's blocking restored for the next wait (if that fails, `refused` is set: the
/// executor stops waiting in receives rather than spin on a non-blocking one).
fn leave_window(fd: RawFd, refused: &Cell<bool>) -> bool {
    // Unnamed first: a handler that runs after this leaves the flags alone.
    RECV_FD.with(|f| f.store(-1, Ordering::SeqCst));
    let flags = SAVED_FLAGS.with(|w| w.swap(-1, Ordering::SeqCst));
    if flags < 0 {
        return false;
    }
    // SAFETY: the stream's own, open descriptor; `flags` are its own, read by the handler.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } != 0 {
        refused.set(true);
    }
    true
}

#[cfg(test)]
thread_local! {
    /// Run in the window, just before the receive (tests land a signal there).
    static IN_WINDOW: Cell<Option<fn()>> = const { Cell::new(None) };
}

fn signals() -> u64 {
    SIGNALS.with(|c| c.load(Ordering::SeqCst))
}

/// Installs the interrupt signal's handler once per process; false if it cannot be (then
/// the executor never blocks in a receive).
fn handler_installed() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // SAFETY: the action increments atomics and calls `fcntl`, which are
        // async-signal-safe.
        unsafe {
            signal_hook_registry::register_sigaction(libc::SIGURG, |info: &libc::siginfo_t| {
                close_window();
                // `try_with`: a thread being torn down has no counts to keep.
                let _ = SIGNALS.try_with(|c| c.fetch_add(1, Ordering::SeqCst));
                // POLL_IN .. POLL_HUP are 1..=6; the timer's, tgkill's and kill's are not.
                if (1..=6).contains(&info.si_code) {
                    let _ = IO_SIGNALS.try_with(|c| c.fetch_add(1, Ordering::SeqCst));
                }
            })
        }
        .is_ok()
    })
}

/// Whether `SIGURG` reaches this thread (a thread that blocks it could not be
/// interrupted).
fn sigurg_unblocked() -> bool {
    // SAFETY: reads this thread's signal mask into a zeroed, valid `sigset_t`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set) == 0
            && libc::sigismember(&set, libc::SIGURG) == 0
    }
}

/// This thread's kernel id (what a remote wake-up signals, see [`interrupt`]).
pub(crate) fn thread_id() -> u64 {
    // SAFETY: gettid(2) cannot fail.
    unsafe { libc::gettid() as u64 }
}

/// Interrupts the blocking receive of this process's thread `tid` (a wake-up from another
/// thread). `tgkill` with this process's id: should the thread have ended since it named
/// itself, the signal reaches at most another thread of this process, whose handler only
/// counts it.
pub(crate) fn interrupt(tid: u64) {
    // SAFETY: a plain system call; no memory is passed.
    unsafe { libc::tgkill(libc::getpid(), tid as libc::pid_t, libc::SIGURG) };
}

thread_local! {
    /// Epoll looks on this thread, counted (see `IoState::unstash`).
    static POLLS: Cell<u64> = const { Cell::new(0) };
}

/// What a blocking receive keeps per source.
pub(crate) struct SourceWait {
    fd: RawFd,
    /// A stream (a blocking receive may wait on it); a listener or a pipe is not.
    stream: bool,
    /// What a blocking receive took for the reader.
    stash: RefCell<Stash>,
    /// This thread's activity count when the stream last sent or received.
    last_active: Cell<u64>,
    /// The source's index in the reactor (its token).
    pub(super) token: Cell<usize>,
    /// `O_NONBLOCK` cleared and `SO_RCVTIMEO` set: `None` until first waited on,
    /// `Some(false)` if the socket refused.
    blocking: Cell<Option<bool>>,
    /// Owner and signal set (`F_SETOWN_EX`, `F_SETSIG`).
    owned: Cell<bool>,
    /// `O_ASYNC` set.
    armed: Cell<bool>,
}

impl SourceWait {
    pub(crate) fn new(fd: RawFd, stream: bool) -> Self {
        SourceWait {
            fd,
            stream,
            stash: RefCell::default(),
            last_active: Cell::new(0),
            token: Cell::new(usize::MAX),
            blocking: Cell::new(None),
            owned: Cell::new(false),
            armed: Cell::new(false),
        }
    }

    /// Sets or clears `O_ASYNC` (the first time also the owner thread and the signal).
    fn arm(&self, on: bool) -> io::Result<()> {
        let fd = self.fd;
        if on && !ASM_GENERIC_FCNTL {
            // Another value of a command could be another command: better no blocking
            // receives than a wrong fcntl.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "F_SETSIG and F_SETOWN_EX are not known on this architecture",
            ));
        }
        // SAFETY: fcntl(2) on a registered descriptor, with a valid `f_owner_ex`.
        unsafe {
            if on && !self.owned.get() {
                let owner = FOwnerEx {
                    kind: F_OWNER_TID,
                    pid: thread_id() as libc::pid_t,
                };
                if libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx) < 0
                    || libc::fcntl(fd, F_SETSIG, libc::SIGURG) < 0
                {
                    return Err(io::Error::last_os_error());
                }
                self.owned.set(true);
            }
            set_flag(fd, libc::O_ASYNC, on)?;
        }
        self.armed.set(on);
        Ok(())
    }
}

/// Sets or clears one of a descriptor's status flags.
///
/// # Safety
/// `fd` is an open descriptor.
unsafe fn set_flag(fd: RawFd, flag: libc::c_int, on: bool) -> io::Result<()> {
    let flags = libc::fcntl(fd, libc::F_GETFL);
    let want = if on { flags | flag } else { flags & !flag };
    if flags < 0 || (want != flags && libc::fcntl(fd, libc::F_SETFL, want) < 0) {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Clears `O_NONBLOCK` and sets `SO_RCVTIMEO` to [`SLICE`].
fn make_blocking(fd: RawFd) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: SLICE.as_micros() as libc::suseconds_t,
    };
    // SAFETY: system calls on a registered descriptor, with a valid `timeval`.
    unsafe {
        if libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        set_flag(fd, libc::O_NONBLOCK, false)
    }
}

/// Bytes (or the error) a blocking receive took for a stream's reader.
#[derive(Default)]
struct Stash {
    buf: Vec<u8>,
    start: usize,
    err: Option<io::Error>,
    /// [`POLLS`] when the receive filled it.
    polls_at_fill: u64,
}

thread_local! {
    /// Sends and receives on this thread's streams, counted: orders the streams by their
    /// latest.
    static ACTIVITY: Cell<u64> = const { Cell::new(0) };
    /// The token of the stream that was active last (see [`IoState::active`]).
    static LAST_ACTIVE: Cell<usize> = const { Cell::new(usize::MAX) };
    /// Streams that cleared their own `O_ASYNC` on becoming active, counted: the arming
    /// pass must run again.
    static SELF_DISARMED: Cell<u64> = const { Cell::new(0) };
}

impl IoState {
    /// Notes that this stream sent or received data now. An armed stream disarms itself:
    /// its answer is coming, and should it come while the executor runs (the peer can
    /// answer before the send returns, on a shared CPU always), it would cost a signal
    /// and count against blocking receives, though no wait was disturbed.
    pub(crate) fn active(&self) {
        let n = ACTIVITY.with(|a| {
            let n = a.get() + 1;
            a.set(n);
            n
        });
        self.wait.last_active.set(n);
        LAST_ACTIVE.with(|t| t.set(self.wait.token.get()));
        if self.wait.armed.get() && self.wait.arm(false).is_ok() {
            SELF_DISARMED.with(|d| d.set(d.get() + 1));
        }
    }

    /// Hands what a blocking receive stashed to an empty `buf` (whose spare room is
    /// `want`) by swapping the two buffers (a stream's receives come 64 KiB at a time: no
    /// copy); `None` if it cannot.
    pub(crate) fn unstash_into(&self, buf: &mut Vec<u8>, want: usize) -> Option<usize> {
        let mut st = self.wait.stash.borrow_mut();
        if !buf.is_empty() || st.start != 0 || st.buf.is_empty() {
            return None;
        }
        std::mem::swap(&mut st.buf, buf);
        st.buf.clear();
        let n = buf.len();
        self.emptied(&st, n, want);
        Some(n)
    }

    /// What a blocking receive stashed, if anything: `copy` takes as many of the bytes as
    /// fit in the `want` the caller has room for and says how many; a stashed error comes
    /// out once, after the bytes.
    pub(crate) fn unstash(
        &self,
        want: usize,
        copy: impl FnOnce(&[u8]) -> usize,
    ) -> Option<io::Result<usize>> {
        let mut st = self.wait.stash.borrow_mut();
        if st.start < st.buf.len() {
            let n = copy(&st.buf[st.start..]);
            st.start += n;
            if st.start == st.buf.len() {
                st.buf.clear();
                st.start = 0;
                self.emptied(&st, n, want);
            }
            return Some(Ok(n));
        }
        st.err.take().map(Err)
    }

    /// A read of `n` of the `want` bytes asked emptied the stash: it spends the readiness
    /// as a short read from the socket does, but only if epoll has not looked since the
    /// stash was filled (see the module's doc).
    fn emptied(&self, st: &Stash, n: usize, want: usize) {
        if n < want && POLLS.with(|p| p.get()) == st.polls_at_fill {
            self.clear(super::Dir::Read);
        }
    }
}

/// When and whether the executor waits in a blocking receive.
#[derive(Default)]
pub(crate) struct Blocker {
    /// When epoll last looked at every source.
    last_poll: Cell<Option<Instant>>,
    /// [`SIGNALS`] then: a signal since means a source may have input.
    signals_at_poll: Cell<u64>,
    /// [`IO_SIGNALS`] at the last look (what the score has counted).
    io_signals_seen: Cell<u64>,
    score: Cell<u32>,
    /// Epoll alone until then.
    off_until: Cell<Option<Instant>>,
    /// A source refused `O_ASYNC`, or `SIGURG` is blocked on the thread: nothing could
    /// interrupt a receive, so the executor never blocks in one (again).
    refused: Cell<bool>,
    /// `SIGURG`'s mask on the executor's thread was checked.
    mask_checked: Cell<bool>,
    /// The executor's thread's kernel id (a runtime stays on its thread: it is not `Send`).
    tid: OnceCell<u64>,
    /// The thread's POSIX timer (see the module's doc), made when first needed.
    timer: OnceCell<Timer>,
    /// The deadline the POSIX timer is set for (it may since have passed).
    timer_at: Cell<Option<Instant>>,
    /// The target (its slot), the sources' generation and the count of self-disarmed
    /// streams the arming pass last ran for: until one changes, every other source is
    /// still armed.
    armed_for: Cell<Option<(usize, u64, u64)>>,
    stats: Cell<crate::WaitStats>,
}

/// A POSIX timer that raises `SIGURG` on its thread; `None` inside if it cannot be made
/// (then the executor blocks only when no timer is due within two [`SLICE`]s).
#[derive(Copy, Clone)]
struct Timer(Option<libc::timer_t>);

impl Timer {
    fn new() -> Timer {
        // SAFETY: a zeroed `sigevent` is valid; the fields set name this thread and the
        // signal; `timer_create` writes the id only on success.
        unsafe {
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = libc::SIGURG;
            ev.sigev_notify_thread_id = libc::gettid();
            let mut id: libc::timer_t = std::ptr::null_mut();
            let ok = libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut id) == 0;
            Timer(ok.then_some(id))
        }
    }

    /// Sets the timer to fire at `at` (a `CLOCK_MONOTONIC` instant).
    fn set(self, at: Instant) -> bool {
        let Some(id) = self.0 else { return false };
        let ns = at.as_nanos();
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: `id` is a live timer of this thread; `spec` is valid.
        unsafe { libc::timer_settime(id, libc::TIMER_ABSTIME, &spec, std::ptr::null_mut()) == 0 }
    }
}

impl Reactor {
    /// The counts of the executor's blocking receives so far.
    pub(crate) fn wait_stats(&self) -> crate::WaitStats {
        crate::WaitStats {
            input_signals: IO_SIGNALS.with(|c| c.load(Ordering::SeqCst)),
            ..self.blocker.stats.get()
        }
    }

    pub(super) fn count(&self, f: impl FnOnce(&mut crate::WaitStats)) {
        let mut s = self.blocker.stats.get();
        f(&mut s);
        self.blocker.stats.set(s);
    }

    /// Epoll is about to look at every source; `now` is the caller's reading of the clock,
    /// taken just before.
    pub(super) fn polling(&self, now: Instant) {
        let b = &self.blocker;
        POLLS.with(|p| p.set(p.get() + 1));
        b.last_poll.set(Some(now));
        b.signals_at_poll.set(signals());
        // Input on armed sources since the last look, whether or not it interrupted a
        // receive (see the module's doc).
        let io = IO_SIGNALS.with(|c| c.load(Ordering::SeqCst));
        let new = io.wrapping_sub(b.io_signals_seen.replace(io));
        if new == 0 {
            return;
        }
        let score = new
            .saturating_mul(INTERRUPT_COST as u64)
            .saturating_add(b.score.get() as u64);
        if score <= SCORE_LIMIT as u64 {
            b.score.set(score as u32);
            return;
        }
        b.score.set(0);
        b.off_until.set(Some(now + OFF));
        self.count(|s| s.switched_off += 1);
        self.disarm_all();
    }

    /// Epoll must look at every source before the next blocking receive (it may not have
    /// taken every ready event).
    pub(super) fn poll_again(&self) {
        self.blocker.last_poll.set(None);
    }

    /// Clears `O_ASYNC` everywhere (epoll alone watches the sources).
    fn disarm_all(&self) {
        self.blocker.armed_for.set(None);
        for s in self.sources.borrow().iter().flatten() {
            if s.wait.armed.get() && s.wait.arm(false).is_err() {
                self.blocker.refused.set(true);
            }
        }
    }

    /// Waits in one blocking `recv` if the module's conditions hold (`timeout`: until the
    /// next timer, `None` if there is none); returns whether it did (otherwise the caller
    /// polls).
    #[allow(clippy::disallowed_methods)] // the executor's own clock
    pub(crate) fn block_recv(
        &self,
        timeout: Option<Duration>,
        now: Instant,
        shared: &crate::Shared,
    ) -> bool {
        let b = &self.blocker;
        if timeout.is_some_and(|t| t < MIN_WAIT) || b.refused.get() {
            return false;
        }
        let recent = b
            .last_poll
            .get()
            .is_some_and(|t| now.saturating_duration_since(t) < SLICE);
        if !recent
            || signals() != b.signals_at_poll.get()
            || b.off_until.get().is_some_and(|t| now < t)
            || !handler_installed()
        {
            return false;
        }
        if !b.mask_checked.replace(true) && !sigurg_unblocked() {
            b.refused.set(true);
        }
        if b.refused.get() {
            return false;
        }
        let Some(target) = self.wait_target() else {
            return false;
        };
        if let Some(t) = timeout.filter(|&t| t < 2 * SLICE) {
            if !self.timer_by(now, now + t) {
                return false;
            }
        }
        let w = &target.wait;
        if w.blocking.get().is_none() {
            w.blocking.set(Some(make_blocking(w.fd).is_ok()));
        }
        if w.blocking.get() != Some(true) {
            return false;
        }
        let tid = *b.tid.get_or_init(thread_id);
        let n = {
            let mut st = w.stash.borrow_mut();
            debug_assert!(st.start == st.buf.len(), "a stash left unread");
            st.buf.clear();
            st.start = 0;
            st.buf.reserve(STASH_BYTES);
            // The thread is named before the last look at the remote queue, and a remote
            // waker queues before it looks at the name: one of the two sees the other. A
            // signal that came before the look at the count is seen by it; one that lands
            // after it, before the receive starts, finds the socket named and makes it
            // non-blocking (`close_window`).
            RECV_FD.with(|f| f.store(w.fd, Ordering::SeqCst));
            shared.blocked.store(tid, Ordering::SeqCst);
            if shared.pending.load(Ordering::SeqCst) || signals() != b.signals_at_poll.get() {
                shared.blocked.store(0, Ordering::SeqCst);
                leave_window(w.fd, &b.refused);
                return false;
            }
            #[cfg(test)]
            if let Some(f) = IN_WINDOW.with(|h| h.take()) {
                f();
            }
            let spare = st.buf.spare_capacity_mut();
            // SAFETY: `recv(2)` writes at most `spare.len()` bytes into the vector's spare
            // capacity; `set_len` below covers only the bytes it wrote.
            let n = unsafe { libc::recv(w.fd, spare.as_mut_ptr().cast(), spare.len(), 0) };
            // Taken before anything else can change it.
            let errno = (n < 0).then(io::Error::last_os_error);
            shared.blocked.store(0, Ordering::SeqCst);
            let closed = leave_window(w.fd, &b.refused);
            if n > 0 {
                unsafe { st.buf.set_len(n as usize) };
                st.polls_at_fill = POLLS.with(|p| p.get());
            } else if let Some(e) = errno {
                match e.kind() {
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => {
                        drop(st);
                        // Epoll looks at every source next (the score counts an input
                        // signal there); on the POSIX timer's signal the caller fires
                        // what is due.
                        b.last_poll.set(None);
                        // A receive a signal made non-blocking before it began waiting
                        // did not time out: it was interrupted early.
                        if e.kind() == io::ErrorKind::WouldBlock && !closed {
                            self.count(|s| s.timed_out += 1);
                        } else if b.timer_at.get().is_some_and(|t| crate::time::now() >= t) {
                            b.timer_at.set(None);
                            self.count(|s| s.timer_fired += 1);
                        } else {
                            self.count(|s| s.interrupted += 1);
                        }
                        return true;
                    }
                    _ => st.err = Some(e),
                }
            }
            n
        };
        b.score.set(b.score.get().saturating_sub(1));
        self.count(|s| s.received += 1);
        if n > 0 {
            target.active();
        } else if n == 0 {
            target.read_closed.set(true);
        }
        target.readable.set(true);
        if let Some(waker) = target.reader.borrow_mut().take() {
            waker.wake();
        }
        true
    }

    /// Makes sure the POSIX timer fires by `deadline`; false if there is no timer.
    fn timer_by(&self, now: Instant, deadline: Instant) -> bool {
        let b = &self.blocker;
        let timer = *b.timer.get_or_init(Timer::new);
        if timer.0.is_none() {
            return false;
        }
        // A timer set for a deadline still to come, no later than this one, will do (it
        // may fire early: the wait then ends with nothing due, and goes on).
        if b.timer_at.get().is_some_and(|t| t > now && t <= deadline) {
            return true;
        }
        if !timer.set(deadline) {
            return false;
        }
        b.timer_at.set(Some(deadline));
        true
    }

    /// The stream to wait on (the candidate active last), with every other source armed;
    /// `None` if there is none, if a task waits to write, or if a source was armed just now
    /// (its input may have come before: epoll looks first).
    fn wait_target(&self) -> Option<Rc<IoState>> {
        if self.writers_waiting() {
            return None;
        }
        let sources = self.sources.borrow();
        // A stream whose reader waits for its next input, and that can block.
        let candidate = |s: &IoState| {
            let w = &s.wait;
            w.stream
                && w.blocking.get() != Some(false)
                && s.reader.borrow().is_some()
                && !s.readable.get()
        };
        // The target is the candidate active last. Usually that is the stream active last
        // of all, the one a request just went out on: found by its token, without a look
        // at every source (a server of many clients has many). A wait whose stream is not
        // that one still scans, and a change of target still runs the arming pass over
        // every source.
        let last = LAST_ACTIVE.with(Cell::get);
        let latest = ACTIVITY.with(Cell::get);
        let fast = sources
            .get(last)
            .and_then(Option::as_ref)
            .filter(|s| s.wait.last_active.get() == latest && candidate(s))
            .map(|s| (last, s));
        let (index, target) = fast.or_else(|| {
            let mut target: Option<(usize, &Rc<IoState>)> = None;
            for (i, s) in sources.iter().enumerate() {
                let Some(s) = s else { continue };
                if candidate(s)
                    && target
                        .is_none_or(|(_, t)| s.wait.last_active.get() > t.wait.last_active.get())
                {
                    target = Some((i, s));
                }
            }
            target
        })?;
        // The arming pass runs only when the target or the set of sources changed, or a
        // stream disarmed itself.
        let b = &self.blocker;
        let arming = (
            index,
            self.generation.get(),
            SELF_DISARMED.with(|d| d.get()),
        );
        if b.armed_for.get() == Some(arming) {
            return Some(target.clone());
        }
        let mut armed_now = false;
        for s in sources.iter().flatten() {
            let w = &s.wait;
            let on = !Rc::ptr_eq(s, target);
            if w.armed.get() != on {
                if w.arm(on).is_err() {
                    b.refused.set(true);
                    drop(sources);
                    self.disarm_all();
                    return None;
                }
                armed_now |= on;
            }
        }
        b.armed_for.set(Some(arming));
        (!armed_now).then(|| target.clone())
    }
}

impl Drop for Blocker {
    fn drop(&mut self) {
        if let Some(Timer(Some(id))) = self.timer.get().copied() {
            // SAFETY: the timer is this executor's and is deleted once.
            unsafe { libc::timer_delete(id) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, AsRawFd};
    use std::sync::atomic::AtomicBool;

    /// Whether the test's hook ran in the window.
    static HOOK_RAN: AtomicBool = AtomicBool::new(false);

    /// A signal that lands after the thread's last look at the signal count and before its
    /// receive starts (raised there by a test hook) ends that receive at once: counted as
    /// interrupted. Without the handler's `O_NONBLOCK` it interrupted nothing, and the
    /// receive waited out its time-out (counted as timed out, none interrupted).
    #[test]
    fn a_signal_just_before_the_receive_starts_is_not_lost() {
        crate::block_on(async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut s = crate::net::TcpStream::connect(l.local_addr().unwrap())
                .await
                .unwrap();
            let (mut peer, _) = l.accept().unwrap();
            let echo = std::thread::spawn(move || {
                let mut b = [0u8; 64];
                while let Ok(n @ 1..) = peer.read(&mut b) {
                    if peer.write_all(&b[..n]).is_err() {
                        return;
                    }
                }
            });
            // Round trips make `s` the stream the executor waits on.
            let mut b = [0u8; 8];
            for i in 0..20u8 {
                s.write_all(&[i; 8]).await.unwrap();
                s.read_exact(&mut b).await.unwrap();
            }
            IN_WINDOW.with(|h| {
                h.set(Some(|| {
                    HOOK_RAN.store(true, Ordering::SeqCst);
                    // SAFETY: raises the signal whose handler this module installed, on
                    // this thread (raise(3) in a threaded process).
                    unsafe { libc::raise(libc::SIGURG) };
                }))
            });
            // A wait shorter than `MIN_WAIT` goes to epoll: a fresh look at every source,
            // so the next wait may block in a receive however long this thread was held up.
            crate::time::sleep(Duration::from_micros(10)).await;
            let before = crate::wait_stats();
            // Nothing comes on `s`; the wait ends by the sleep, which is too far off for
            // the POSIX timer (more than two time-outs): only the signal could end the
            // first receive early.
            let mut one = [0u8; 1];
            match crate::first(
                s.read(&mut one),
                crate::time::sleep(Duration::from_millis(30)),
            )
            .await
            {
                crate::Either::Left(r) => panic!("the echo sent unasked: {r:?}"),
                crate::Either::Right(()) => {}
            }
            let w = crate::wait_stats().since(before);
            assert!(
                HOOK_RAN.load(Ordering::SeqCst),
                "no blocking receive was tried ({w})"
            );
            assert!(
                w.interrupted >= 1,
                "the signal raised just before the receive interrupted nothing ({w})"
            );
            // The socket blocks again for the next wait.
            // SAFETY: reads the flags of the test's own, open socket.
            let flags = unsafe { libc::fcntl(s.as_fd().as_raw_fd(), libc::F_GETFL) };
            assert_eq!(flags & libc::O_NONBLOCK, 0, "O_NONBLOCK left set");
            drop(s);
            echo.join().unwrap();
        });
    }
}
