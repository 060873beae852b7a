//! The real-time runtime: one node's [`Rnic`] driven by the wall clock and real sockets,
//! on the single-threaded executor of `remora-exec`. [`RtNode`] implements
//! [`remora_verbs::Verbs`], so the library and RemoteLog run on it unchanged.
//!
//! Time: the model's clock never runs behind the wall clock. When the model schedules
//! something a little ahead (a response that leaves once a FLUSH's data reached the
//! persistence domain, a completion once a DMA is visible), the runtime moves the model's
//! clock there at once instead of sleeping for a few hundred nanoseconds: it first advances
//! the memory hierarchy, which writes every line that entered the persistence domain into
//! the pool file, and only then sends the packet. So an acknowledgement never leaves
//! before the data it acknowledges is in the file, and a `kill -9` loses exactly what the
//! model says a power failure at that instant loses. Longer waits (ACK time-outs) sleep.
//!
//! Where each part is: this file has the node, its clock, the driver and the step (what
//! the RNIC sends, and when); `conn` a peer's connection (its output, its writer, its
//! end); `reader` what comes in from a peer, and the bound on what one peer can make the
//! node buffer; `verbs` the [`Verbs`](remora_verbs::Verbs) calls applications make.

use remora_model::rnic::{Rnic, Tx};
use remora_model::time::{Duration, Instant};
use remora_model::verbs::*;
use remora_model::wire::Packet;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};

mod conn;
mod reader;
mod verbs;
use conn::{held_bytes, queue_on, Conn};
pub use reader::{Limits, BACKLOG_HIGH, HELD_HIGH, NODE_FACTOR, SHARE_FLOOR, WAITING_HIGH};

/// Longest the driver waits for its turn while tasks do CPU work (`compute`, `memcpy`,
/// `persist_local`) before they yield to it: short work runs straight on to the task's next
/// verb, as a real CPU would, and long work still lets packets through.
const CPU_SLICE: std::time::Duration = std::time::Duration::from_micros(20);
/// Environment variable that sets the CPU slice in microseconds instead of `CPU_SLICE`.
/// It is for instruction counts under valgrind, where everything runs tens of times
/// slower: with the slice as shipped, tasks yield at nearly every piece of CPU work there
/// (natively RemoteLog's short work never spends a slice) and the counts measure valgrind,
/// not the code (`scripts/callgrind.sh` widens it to 20 ms). It changes how tasks
/// interleave, not only what they cost, so the CLI says so on stderr when it is set.
pub const CPU_SLICE_ENV: &str = "REMORA_CPU_SLICE_US";
/// Longest step the model's clock takes ahead of the wall clock without sleeping.
const JUMP: Duration = Duration::from_micros(200);
/// CPU work shorter than this is paid by the real CPU doing it: the task does not sleep
/// (and yields only after [`CPU_SLICE`]).
const SLEEP_MIN: Duration = Duration::from_micros(50);
/// Most scheduling slices the driver lets the tasks it woke run before it writes the
/// packets queued so far (so an acknowledgement and the answer a task sends at once leave
/// in one write).
const COALESCE_SLICES: u32 = 8;
/// Output queued beyond which the driver writes at once instead of letting woken tasks
/// add to it: coalescing saves a write for a small answer, while a stream's batch leaves
/// as soon as it is made, so the peer works on it while the next one is posted.
const COALESCE_BYTES: usize = 16 << 10;

/// ACK time-out on TCP. The transport is reliable and a dead peer shows up as a closed
/// connection (its QPs fail at once), so the time-out only catches a hung peer; a
/// microsecond-scale model value would misfire whenever the host is busy.
pub const REAL_ACK_TIMEOUT: Duration = Duration::from_millis(2_000);

/// Receiver-not-ready retry delay on TCP: InfiniBand's `min_rnr_timer` runs from 0.01 to
/// 655 ms, and the model's 10 µs, shorter than the driver's jump over short waits, made a
/// requester refused for ever (a receiver that never posts) resend at once, back to back,
/// a CPU spinning; 1 ms is a value of the range a peer waits on the wall clock.
pub const REAL_RNR_RETRY_DELAY: Duration = Duration::from_millis(1);

/// The profile a real-time node runs with: the model's, with [`REAL_ACK_TIMEOUT`] and
/// [`REAL_RNR_RETRY_DELAY`].
pub fn real_time_profile(p: &remora_model::LatencyProfile) -> remora_model::LatencyProfile {
    let mut p = p.clone();
    p.rnic.ack_timeout_ns = p.rnic.ack_timeout_ns.max(REAL_ACK_TIMEOUT.as_nanos());
    p.rnic.rnr_retry_delay_ns = p
        .rnic
        .rnr_retry_delay_ns
        .max(REAL_RNR_RETRY_DELAY.as_nanos());
    p
}

/// A reading of the wall clock (the executor's: the model's clock follows it).
type Wall = remora_exec::time::Instant;

#[allow(clippy::disallowed_methods)] // a real-time runtime: its clock is the wall clock
fn wall() -> Wall {
    remora_exec::time::now()
}

/// Counters of what the network delivered.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Packets sent.
    pub sent: u64,
    /// Packets received and handed to the RNIC.
    pub received: u64,
    /// Connections closed because a frame did not parse.
    pub malformed: u64,
    /// Packets whose source did not match the connection they came on, or whose
    /// destination is another node.
    pub spoofed: u64,
    /// Socket writes the driver started (one per connection with output at a flush):
    /// how many packets share a write shows the coalescing.
    pub writes: u64,
    /// Steps of the RNIC (by the driver, or by a reader for what it read): a round trip
    /// takes one per read and one per batch of posts.
    pub steps: u64,
    /// Request frames held because their peer's output was backed up beyond
    /// [`BACKLOG_HIGH`] (handed to the RNIC once it drained).
    pub held_back: u64,
    /// Times a peer's socket was left unread because [`HELD_HIGH`] bytes of its requests
    /// were held.
    pub paused: u64,
    /// The most output one peer had pending after a write the socket did not take whole
    /// (bytes; see [`BACKLOG_HIGH`]).
    pub peak_backlog: u64,
}

impl std::fmt::Display for NetStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} packets received, {} sent in {} socket writes, {} RNIC steps; {} malformed frames, {} spoofed packets",
            self.received, self.sent, self.writes, self.steps, self.malformed, self.spoofed
        )?;
        if self.held_back > 0 {
            write!(
                f,
                "; {} requests held while their peer's output backed up (at most {} bytes), reading paused {} times",
                self.held_back, self.peak_backlog, self.paused
            )?;
        }
        Ok(())
    }
}

/// What a node holds for its connections ([`RtNode::tables`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    /// Attached connections.
    pub peers: usize,
    /// Packets held for a later departure.
    pub held_packets: usize,
    /// Tasks waiting for a completion.
    pub cq_waiters: usize,
}

struct State {
    rnic: Rnic,
    model_now: Instant,
    /// Packets the model schedules beyond the jump horizon, by departure time.
    /// Kept sorted by departure, first in first out among equal times. Departures mostly
    /// come in order, so a packet is appended; a packet is moved only when one overtakes.
    held: std::collections::VecDeque<(Instant, Packet)>,
    peers: BTreeMap<NodeId, Rc<Conn>>,
    /// Tasks waiting for a completion: (waiter id, CQ, waker). Woken only when their CQ
    /// holds something, not after every step.
    cq_waiters: Vec<(u64, CqId, Waker)>,
    next_waiter: u64,
    /// Tasks woken for a completion that have not gone back to waiting for one.
    unsettled: u32,
    /// Packets queued on connections but not yet written.
    unflushed: bool,
    /// A coalescing round is under way ([`RtNode::start_coalescing`]).
    coalescing: bool,
    /// The model time the driver's timer is set for.
    armed: Option<Instant>,
    /// The next deadline the last step found (whoever ran it: the driver or a reader).
    next: Option<Instant>,
    stats: NetStats,
}

impl State {
    /// Moves what the RNIC transmitted into the queue of held packets; a packet due by
    /// `now` while none is held is queued on its connection at once (the common case:
    /// requests and acknowledgements leave as soon as they are made). Returns how many
    /// were queued.
    fn hold_transmitted(&mut self, now: Instant) -> usize {
        let mut queued = 0;
        while let Some((ready, pkt)) = self.rnic.poll_transmit() {
            if self.held.is_empty() && ready <= now {
                self.queue(&pkt);
                queued += 1;
                continue;
            }
            if let Some(c) = self.peers.get(&pkt.dst) {
                c.later.set(c.later.get() + held_bytes(&pkt));
            }
            if self.held.back().is_none_or(|(t, _)| *t <= ready) {
                self.held.push_back((ready, pkt));
            } else {
                let at = self.held.partition_point(|(t, _)| *t <= ready);
                self.held.insert(at, (ready, pkt));
            }
        }
        queued
    }

    /// Takes the first held packet (due now) off the held queue and its connection's count.
    fn unhold(&mut self) -> Option<(Instant, Packet)> {
        let (ready, pkt) = self.held.pop_front()?;
        if let Some(c) = self.peers.get(&pkt.dst) {
            c.later.set(c.later.get().saturating_sub(held_bytes(&pkt)));
        }
        Some((ready, pkt))
    }

    /// What [`hold_transmitted`](Self::hold_transmitted) and the step's loop over the held
    /// packets would do, without moving a packet: while none is held and the RNIC's outbox
    /// is in departure order, its front is the earliest packet, so it is encoded where it
    /// lies once the model's clock is at its departure (jumping it there, as the step does,
    /// up to the step's `horizon`). A stream's packets, made in posting order, all go this
    /// way.
    /// Returns how many were queued; what is left goes by the held queue.
    fn send_in_order(&mut self, now: &mut Instant, horizon: Instant) -> usize {
        // Nothing below holds a packet, so the held queue stays as it is.
        if !self.held.is_empty() {
            return 0;
        }
        let State {
            rnic,
            model_now,
            peers,
            stats,
            ..
        } = self;
        let mut queued = 0;
        // The connection the last packet went to: a run of packets to one peer (a
        // stream's) looks it up once.
        let mut to: Option<(NodeId, Option<&Conn>)> = None;
        while let Some((ready, true)) = rnic.next_departure() {
            if ready > horizon {
                break;
            }
            // What this makes goes behind the packet (a packet that would overtake it
            // breaks the order, and the rest goes by the held queue).
            depart(rnic, model_now, now, ready);
            let tx = rnic.peek_transmit().expect("peeked");
            let dst = match &tx {
                Tx::Packet(p) => p.dst,
                Tx::Write(w) => w.dst,
            };
            let conn = match to {
                Some((d, c)) if d == dst => c,
                _ => {
                    let c = peers.get(&dst).map(|c| &**c);
                    to = Some((dst, c));
                    c
                }
            };
            // A peer not (or no longer) connected gets nothing, as `queue_on`.
            if let Some(conn) = conn {
                match tx {
                    Tx::Packet(p) => conn.queue(p),
                    Tx::Write(w) => conn.queue_write(&w),
                }
                stats.sent += 1;
            }
            rnic.discard_transmit();
            queued += 1;
        }
        queued
    }

    /// Moves the model's clock `now` to a packet's departure at `ready` if that is later,
    /// running what falls due by then: the hierarchy reaches the departure first (writing
    /// the pool file, synced before the packet leaves).
    fn depart_at(&mut self, now: &mut Instant, ready: Instant) {
        depart(&mut self.rnic, &mut self.model_now, now, ready);
    }

    /// Encodes a packet that is due onto its connection's output. It leaves at the next
    /// flush, which comes after the step's `sync_media`.
    fn queue(&mut self, pkt: &Packet) {
        queue_on(&self.peers, &mut self.stats, pkt);
    }
}

/// [`State::depart_at`] on the state's fields, for a caller that holds other fields of it
/// borrowed (`send_in_order`, its connections).
#[inline]
fn depart(rnic: &mut Rnic, model_now: &mut Instant, now: &mut Instant, ready: Instant) {
    if ready > *now {
        *now = ready;
        *model_now = ready;
        rnic.handle_timeout(ready);
    }
}

/// Makes the RNIC's PM medium durable, or ends the process. A sync that fails (`msync`
/// returning EIO) must not unwind into the executor, which catches a task's panic and goes
/// on: the packets queued on the promise of this sync would leave at the next flush (the
/// writer of the connection the panic ended sends what is left at once), and the pool has
/// already forgotten the range it failed to write back. A power failure at this instant is
/// what the process may show the world, nothing after it.
pub(crate) fn sync_or_abort(rnic: &mut Rnic) {
    let guard = AbortOnUnwind("the PM pool could not be made durable");
    rnic.sync_media();
    std::mem::forget(guard);
}

/// Ends the process if dropped, that is if what it guards unwinds (it is forgotten once
/// that is done): for work after which a panic caught by the executor would let packets
/// leave on a promise not kept.
struct AbortOnUnwind(&'static str);

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        eprintln!("{}; stopping at once", self.0);
        std::process::abort();
    }
}

struct Inner {
    st: RefCell<State>,
    /// The driver's waker while it waits for a kick.
    driver: Cell<Option<Waker>>,
    /// A kick is pending (the driver has not looked since): further kicks are free.
    kicked: Cell<bool>,
    /// The RNIC's state changed since the last step (a post, a verb, a closed connection):
    /// the driver's next turn steps. A reader that stepped itself wakes the driver only to
    /// coalesce or re-arm, and leaves this unset (a second step would find nothing new).
    changed: Cell<bool>,
    /// [`RtNode::close`] was called: the driver stops once every connection is gone.
    closed: Cell<bool>,
    epoch: Wall,
    /// The driver's last turn, or the last wake-up of tasks for a completion, whichever
    /// came later: since then tasks have run without the RNIC (see [`RtNode::cpu_yield`]).
    cpu_since: Cell<Wall>,
    /// [`CPU_SLICE`] in ns, or what [`CPU_SLICE_ENV`] says.
    cpu_slice_ns: u64,
    /// What one peer, and all together, may make the node buffer.
    limits: Cell<Limits>,
}

/// The CPU slice [`CPU_SLICE_ENV`] sets, in µs: `None` when it is not set (the slice is
/// `CPU_SLICE`). A value that is not a number is an error, not ignored: a measurement run
/// with the slice silently at its default would count the wrong thing. Programs call it at
/// start-up to refuse a bad value before they serve anyone; a node made with one panics.
pub fn cpu_slice_from_env() -> Result<Option<std::time::Duration>, String> {
    // A value that is not UTF-8 is not a number either; its lossy form names it.
    parse_cpu_slice(
        std::env::var_os(CPU_SLICE_ENV)
            .map(|v| v.to_string_lossy().into_owned())
            .as_deref(),
    )
}

/// [`cpu_slice_from_env`] for the variable's value (`None`: not set).
fn parse_cpu_slice(v: Option<&str>) -> Result<Option<std::time::Duration>, String> {
    v.map(|v| {
        v.trim()
            .parse::<u64>()
            .map(std::time::Duration::from_micros)
            .map_err(|_| format!("{CPU_SLICE_ENV}={v:?} is not a number of microseconds"))
    })
    .transpose()
}

impl Inner {
    /// Wakes the driver to act on a change of the RNIC's state (once per wake-up, however
    /// many posts ask for it).
    fn kick(&self) {
        self.changed.set(true);
        self.wake_driver();
    }

    /// Wakes the driver without asking it to step (the caller stepped already).
    fn wake_driver(&self) {
        if !self.kicked.replace(true) {
            if let Some(w) = self.driver.take() {
                w.wake();
            }
        }
    }

    /// Resolves once a kick is pending. The flag is the whole state (no stored permit, as
    /// a `Notify` would keep for a kick the driver already handled in its last step, and
    /// spend a turn of the driver on).
    fn kicked(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.kicked.get() {
                Poll::Ready(())
            } else {
                self.driver.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
    }

    /// Reads the wall clock and brings the model's clock up to it.
    #[inline]
    fn now(&self, st: &mut State) -> Instant {
        self.now_at(st, wall())
    }

    /// Brings the model's clock up to `wall`, a reading the caller took: a wake-up reads
    /// the clock once (about 30 ns each in this VM) and its step and wake-ups share it.
    fn now_at(&self, st: &mut State, wall: Wall) -> Instant {
        st.model_now = st.model_now.max(self.real(wall));
        st.model_now
    }

    /// The wall clock's reading `wall` on the model's time line.
    #[inline]
    fn real(&self, wall: Wall) -> Instant {
        Instant::from_nanos(wall.nanos_since(self.epoch))
    }
}

/// One node running in real time. Cheap to clone; not `Send` (one thread drives it).
#[derive(Clone)]
pub struct RtNode {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for RtNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("RtNode");
        // Printing must not panic where the node's state is borrowed (inside `with`).
        if let Ok(st) = self.inner.st.try_borrow() {
            d.field("id", &st.rnic.id()).field("net", &st.stats);
        }
        d.finish_non_exhaustive()
    }
}

impl RtNode {
    /// Wraps an RNIC. Call [`drive`](Self::drive) in a local task to make it run.
    pub fn new(mut rnic: Rnic) -> Self {
        // A message travels in one frame, whose body the peer bounds.
        rnic.set_max_message(remora_model::wire::MAX_WIRE_BODY as u64);
        RtNode {
            inner: Rc::new(Inner {
                st: RefCell::new(State {
                    rnic,
                    model_now: Instant::ZERO,
                    held: Default::default(),
                    cq_waiters: Vec::new(),
                    next_waiter: 0,
                    unsettled: 0,
                    unflushed: false,
                    coalescing: false,
                    armed: None,
                    next: None,
                    peers: BTreeMap::new(),
                    stats: NetStats::default(),
                }),
                driver: Cell::new(None),
                kicked: Cell::new(false),
                changed: Cell::new(false),
                closed: Cell::new(false),
                epoch: wall(),
                cpu_since: Cell::new(wall()),
                cpu_slice_ns: cpu_slice_from_env()
                    .unwrap_or_else(|e| panic!("{e}"))
                    .unwrap_or(CPU_SLICE)
                    .as_nanos()
                    .try_into()
                    .unwrap_or(u64::MAX),
                limits: Cell::new(Limits::default()),
            }),
        }
    }

    /// Closes every connection of this node (each peer sees its connection end: a server
    /// fails the QPs and frees the client's slot) and stops the driver once they are gone.
    /// The node's tasks hold it, so without this its connections stay open until the
    /// runtime ends; a client that goes on after a connection calls it. Data not yet
    /// written is dropped, as when a process exits.
    pub fn close(&self) {
        let peers: Vec<Rc<Conn>> = self.inner.st.borrow().peers.values().cloned().collect();
        for conn in peers {
            // Both directions: this node's reader sees the end as well and runs the
            // connection's close handling (its QPs fail, so waiting tasks wake).
            let sock = socket2::SockRef::from(&conn.write);
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
        self.inner.closed.set(true);
        self.inner.kick();
    }

    /// What the node holds for its connections now: for a server whose clients have all
    /// left, each should be back to nothing.
    pub fn tables(&self) -> Tables {
        let st = self.inner.st.borrow();
        Tables {
            peers: st.peers.len(),
            held_packets: st.held.len(),
            cq_waiters: st.cq_waiters.len(),
        }
    }

    /// Network counters.
    pub fn net_stats(&self) -> NetStats {
        let st = self.inner.st.borrow();
        let mut stats = st.stats;
        for c in st.peers.values() {
            stats.peak_backlog = stats.peak_backlog.max(c.peak.get());
        }
        stats
    }

    /// Runs `f` on the RNIC at the current time, then lets the driver act on it.
    pub fn with<R>(&self, f: impl FnOnce(&mut Rnic, Instant) -> R) -> R {
        self.with_at(wall(), f)
    }

    /// [`with`](Self::with) at `w`, a reading of the clock the caller took (and uses again).
    fn with_at<R>(&self, w: Wall, f: impl FnOnce(&mut Rnic, Instant) -> R) -> R {
        let r = {
            let mut st = self.inner.st.borrow_mut();
            let now = self.inner.now_at(&mut st, w);
            f(&mut st.rnic, now)
        };
        self.inner.kick();
        r
    }

    /// Like [`with`](Self::with), for calls that give the RNIC nothing to send and no
    /// earlier deadline: the driver is not woken.
    fn with_quiet<R>(&self, f: impl FnOnce(&mut Rnic, Instant) -> R) -> R {
        let mut st = self.inner.st.borrow_mut();
        let now = self.inner.now(&mut st);
        f(&mut st.rnic, now)
    }

    /// Connects a local QP to a peer's (after the connection manager's exchange).
    pub fn connect(&self, qp: QpNum, peer: NodeId, peer_qp: QpNum) -> Result<(), VerbsError> {
        self.with(|r, _| r.connect(qp, peer, peer_qp))
    }

    /// The driver: runs the RNIC's timers, transmits what it produces, and wakes tasks.
    /// Spawn it once per node with `remora_exec::spawn_local`; it returns only after
    /// [`close`](Self::close), once the connections are gone.
    pub async fn drive(self) {
        // One timer, moved only when an earlier deadline comes (not re-armed every turn).
        let mut sleep = std::pin::pin!(remora_exec::time::sleep(std::time::Duration::ZERO));
        let mut deferred = 0;
        // This coalescing round already let the runtime run once (see below).
        let mut via_runtime = false;
        // Tasks unsettled at the last coalescing slice (to tell whether they moved).
        let mut before = u32::MAX;
        // The timer fired (or the driver just started): a step is due.
        let mut due = true;
        loop {
            if self.inner.closed.get() && self.inner.st.borrow().peers.is_empty() {
                return;
            }
            // Kicks from here on wake the driver again. A turn steps only if the timer
            // fired or the RNIC's state changed since the last step: a turn that only let
            // woken tasks run (coalescing), or that a reader woke after stepping itself,
            // finds nothing new, and a step reads the clock and runs the timers, several
            // hundred instructions a turn.
            let turn = wall();
            self.inner.cpu_since.set(turn);
            let kicked = self.inner.kicked.replace(false);
            // `|`, not `||`: both flags are spent by this turn's step.
            if std::mem::take(&mut due) | self.inner.changed.replace(false) {
                self.step(turn);
                self.wake_cq_waiters(turn);
            }
            let (next, unflushed, unsettled, queued) = {
                let st = self.inner.st.borrow();
                let queued: usize = st.peers.values().map(|c| c.out.borrow().len()).sum();
                (st.next, st.unflushed, st.unsettled, queued)
            };
            if unflushed {
                if unsettled > 0 && deferred < COALESCE_SLICES && queued < COALESCE_BYTES {
                    // The tasks just woken (a completion arrived) usually answer at once:
                    // let them run first, so their packets leave in the same write.
                    if deferred == 0 {
                        self.start_coalescing();
                    }
                    deferred += 1;
                    let moved = kicked || unsettled < before;
                    before = unsettled;
                    if deferred == 1 || moved {
                        remora_exec::yield_local().await;
                        continue;
                    }
                    // A slice passed and no woken task posted or went back to waiting:
                    // it waits for something else (a timer, a socket). Once per round,
                    // let the executor look at its sockets and timers (one non-blocking
                    // poll): what the task waits for may be there, and its answer then
                    // leaves with the acknowledgement instead of in a write of its own,
                    // which also spares the peer a wake-up.
                    if !via_runtime {
                        via_runtime = true;
                        remora_exec::yield_now().await;
                        continue;
                    }
                }
                self.flush();
            }
            deferred = 0;
            via_runtime = false;
            before = u32::MAX;
            self.inner.st.borrow_mut().unsettled = 0;
            let kicked = self.inner.kicked();
            match next {
                Some(t) => {
                    // A later deadline keeps the timer: it fires early, the step finds
                    // nothing due and re-arms (ACK time-outs move on every round trip).
                    if self.inner.st.borrow().armed.is_none_or(|a| t < a) {
                        // One clock reading for the wait and the deadline it sets.
                        let w = wall();
                        // Measured from the wall clock, not from the model's (which may
                        // be up to a jump ahead): the timer fires when the deadline is due
                        // on the wall clock, so the model does not creep ahead by a jump
                        // per step.
                        let wait = {
                            let mut st = self.inner.st.borrow_mut();
                            self.inner.now_at(&mut st, w);
                            t.saturating_since(self.inner.real(w))
                        };
                        // Saturating: a deadline at the model's `NEVER` (a profile whose
                        // ACK time-out means "never") is a wait that never ends, not a panic.
                        sleep.as_mut().reset(
                            w.saturating_add(std::time::Duration::from_nanos(wait.as_nanos())),
                        );
                        self.inner.st.borrow_mut().armed = Some(t);
                    }
                    let woke = remora_exec::first(kicked, sleep.as_mut()).await;
                    if let remora_exec::Either::Right(()) = woke {
                        self.inner.st.borrow_mut().armed = None;
                        due = true;
                    }
                }
                None => {
                    // Only a kick wakes the driver now: the timer is not watched, so it is
                    // not armed. A stale `armed` (the timer expired while a kick won the
                    // select) would let the reader skip the kick for a new, later deadline
                    // (`after_receive`), and the packet waiting for it would never leave.
                    self.inner.st.borrow_mut().armed = None;
                    kicked.await
                }
            }
        }
    }

    /// Wakes the tasks whose CQ now holds a completion (their CPU slice starts at `wall`,
    /// the step's clock reading); returns how many.
    fn wake_cq_waiters(&self, wall: Wall) -> u32 {
        let mut st = self.inner.st.borrow_mut();
        let st = &mut *st;
        if st.cq_waiters.is_empty() {
            return 0;
        }
        let rnic = &st.rnic;
        let mut woken = 0;
        st.cq_waiters.retain(|(_, cq, w)| {
            if rnic.cq_len(*cq) > 0 {
                w.wake_by_ref();
                woken += 1;
                false
            } else {
                true
            }
        });
        st.unsettled += woken;
        if woken > 0 {
            self.inner.cpu_since.set(wall);
        }
        woken
    }

    /// Does everything due at `wall` (the caller's clock reading) or within [`JUMP`];
    /// leaves the next deadline beyond in `State::next`.
    fn step(&self, wall: Wall) {
        // A panic in the middle of a step (a broken model invariant) could leave packets
        // queued before the sync that must precede them, and the writer of a connection the
        // panic ended sends what is queued: the process stops instead, as at a power
        // failure.
        let abort = AbortOnUnwind("the soft RNIC's step failed");
        self.step_inner(wall);
        std::mem::forget(abort);
    }

    fn step_inner(&self, wall: Wall) {
        let mut guard = self.inner.st.borrow_mut();
        let st = &mut *guard;
        let mut now = self.inner.now_at(st, wall);
        // The jumps over short waits end here, `JUMP` past the wall clock's reading (a
        // model already ahead, from an earlier step's jump, jumps no further), however
        // many deadlines lie each within `JUMP` of the one before: otherwise a chain of
        // them (requests that each wait for the one before) runs the model's clock far
        // ahead of the wall clock, and every time-out with it.
        let horizon = (self.inner.real(wall) + JUMP).max(now);
        st.stats.steps += 1;
        let mut queued = 0;
        let next = loop {
            st.rnic.handle_timeout(now);
            st.rnic.process_doorbells(now);
            queued += st.send_in_order(&mut now, horizon);
            queued += st.hold_transmitted(now);
            // Take what is due, jumping the model's clock over short waits: the hierarchy
            // reaches a packet's departure (writing the pool file, synced below) first.
            while let Some((ready, _)) = st.held.front() {
                let ready = *ready;
                if ready > horizon {
                    break;
                }
                let (_, pkt) = st.unhold().expect("peeked");
                st.depart_at(&mut now, ready);
                st.queue(&pkt);
                queued += 1;
                // What the RNIC produced meanwhile may be due too (and must not wait for a
                // kick); it is queued behind this packet.
                queued += st.hold_transmitted(now);
            }
            // Wake at the next timer, departure, or data-path stage change, so a stage lasts
            // as long on the wall clock as in the model.
            let held = st.held.front().map(|(t, _)| *t);
            let transition = st.rnic.hierarchy().next_transition();
            let next = [st.rnic.poll_timeout(), held, transition]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= horizon => {
                    now = now.max(t);
                    st.model_now = now;
                }
                other => break other,
            }
        };
        st.next = next;
        if queued > 0 {
            // Whatever the queued packets acknowledge is on stable storage before they
            // leave (at the next flush): one sync covers every line that entered the
            // persistence domain up to the last departure (the model's clock is there now).
            sync_or_abort(&mut st.rnic);
            st.unflushed = true;
        }
    }

    /// Starts a coalescing round: notes which connections have output, and writes at once
    /// the output of those whose tasks did not answer at once last time. Whether a
    /// woken task answers depends on the protocol (a responder applying a SEND-carried
    /// update sends nothing; one that acknowledges it does), so it is learned per
    /// connection, as TCP learns when to delay its ACKs: holding an acknowledgement for a
    /// task that will not answer puts the task's work before the requester's completion.
    fn start_coalescing(&self) {
        let mut st = self.inner.st.borrow_mut();
        let st = &mut *st;
        if std::mem::replace(&mut st.coalescing, true) {
            return; // a round is under way (begun by the reader)
        }
        for conn in st.peers.values() {
            let pending = !conn.out.borrow().is_empty();
            conn.in_round.set(pending);
            conn.posted.set(false);
            if pending && !conn.answers.get() && conn.flush() {
                st.stats.writes += 1;
            }
        }
    }

    /// Yields to the executor's other tasks once tasks have run [`CPU_SLICE`] without the
    /// RNIC (since the driver's last turn, or the completion that woke them), and at every
    /// piece of CPU work after that until the driver's next turn; before, the task goes
    /// straight on (a yield would hand the driver a turn, and a step, per piece of CPU
    /// work, between a message and its answer). Once the slice is spent, tasks doing CPU
    /// work take turns: connections that share state interleave as on a preemptive CPU
    /// (the unlocked-store negative control of the durable RPCs relies on it to be
    /// caught).
    async fn cpu_yield(&self) {
        self.cpu_yield_at(wall()).await
    }

    /// [`cpu_yield`](Self::cpu_yield) with a reading of the clock the caller took during
    /// the piece of work it ends (a reading costs about 30 ns in this VM; the slice is
    /// tens of microseconds).
    async fn cpu_yield_at(&self, w: Wall) {
        if w.nanos_since(self.inner.cpu_since.get()) > self.inner.cpu_slice_ns {
            remora_exec::yield_local().await;
        }
    }

    /// Writes what the steps queued: one write per connection. Ends a coalescing round: a
    /// connection that had output when the round began answers at once if a task posted a
    /// send on it during the round (packets the RNIC made on its own, such as a FLUSH
    /// response that waited for the data path, do not count).
    fn flush(&self) {
        let mut st = self.inner.st.borrow_mut();
        let st = &mut *st;
        st.unflushed = false;
        st.unsettled = 0;
        st.coalescing = false;
        for conn in st.peers.values() {
            if conn.in_round.take() {
                conn.answers.set(conn.posted.get());
            }
            if conn.flush() {
                st.stats.writes += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_slice_is_unset_unless_the_environment_gives_microseconds() {
        assert_eq!(parse_cpu_slice(None), Ok(None));
        assert_eq!(
            parse_cpu_slice(Some(" 20000\n")),
            Ok(Some(std::time::Duration::from_millis(20)))
        );
        for bad in ["", "20ms", "-1", "1e3"] {
            let e = parse_cpu_slice(Some(bad)).unwrap_err();
            assert!(
                e.contains(CPU_SLICE_ENV) && e.contains("microseconds"),
                "{bad:?}: {e}"
            );
        }
    }
}
