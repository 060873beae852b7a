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

use remora_exec::net::{OwnedReadHalf, OwnedWriteHalf};
use remora_exec::sync::Notify;
use remora_model::hierarchy::Space;
use remora_model::rnic::{MrInfo, QpAttr, Rnic, Tx};
use remora_model::time::{Duration, Instant};
use remora_model::verbs::*;
use remora_model::wire::{Frame, Packet, TrainTail, WireError, WriteRef};
use remora_model::ServerConfig;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

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
/// Output pending for one peer (queued on its connection, waiting for its departure, or
/// owed by its requests the RNIC holds or has just taken) beyond which its requests wait:
/// a peer that does not read what it is sent, or that asks faster than the model's data
/// path answers, must not make this process buffer without bound (a READ asks for up to
/// a region's bytes in a 60-byte frame). Its responses are still taken, so two peers that
/// each wait for the other to read go on reading each other.
pub const BACKLOG_HIGH: u64 = 64 << 20;
/// Bytes a reader hands to the RNIC before it lets the executor look at its other sockets
/// and timers: the executor's budget counts polls, and a poll of a socket that never runs
/// dry brings 64 KiB, so one streaming peer would otherwise delay everyone else by
/// hundreds of megabytes' worth of work.
const YIELD_BYTES: usize = 256 << 10;
/// How often a reader holding a peer's requests looks again at what the RNIC owes the peer
/// (it drains with the model's time, not with a write).
const RECHECK: std::time::Duration = std::time::Duration::from_millis(1);
/// How long an ended connection's writer goes on sending what is left to a peer that does
/// not take it, before it drops it and closes the socket.
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a reader that stopped reading a peer waits for the output to the peer to
/// shrink before it reads once more anyway: two nodes that each stopped reading the other
/// would otherwise wait for ever.
const STALL: std::time::Duration = std::time::Duration::from_millis(10);
/// Bytes of held requests, beyond twice [`HELD_HIGH`], that those reads may add before the
/// connection is closed as a peer that sends and does not read.
const HELD_SLACK: usize = 1 << 20;
/// Bytes of a peer's requests held while its output is backed up beyond which its socket
/// is no longer read until the output drains (TCP then holds the peer's sends back).
pub const HELD_HIGH: usize = 64 << 20;

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
        let mut queued = 0;
        while self.held.is_empty() {
            let Some((ready, true)) = self.rnic.next_departure() else {
                break;
            };
            if ready > horizon {
                break;
            }
            // What this makes goes behind the packet (a packet that would overtake it
            // breaks the order, and the rest goes by the held queue).
            self.depart_at(now, ready);
            match self.rnic.peek_transmit().expect("peeked") {
                Tx::Packet(p) => queue_on(&self.peers, &mut self.stats, p),
                Tx::Write(w) => queue_write_on(&self.peers, &mut self.stats, &w),
            }
            self.rnic.discard_transmit();
            queued += 1;
        }
        queued
    }

    /// Moves the model's clock `now` to a packet's departure at `ready` if that is later,
    /// running what falls due by then: the hierarchy reaches the departure first (writing
    /// the pool file, synced before the packet leaves).
    fn depart_at(&mut self, now: &mut Instant, ready: Instant) {
        if ready > *now {
            *now = ready;
            self.model_now = ready;
            self.rnic.handle_timeout(ready);
        }
    }

    /// Encodes a packet that is due onto its connection's output. It leaves at the next
    /// flush, which comes after the step's `sync_media`.
    fn queue(&mut self, pkt: &Packet) {
        queue_on(&self.peers, &mut self.stats, pkt);
    }
}

/// For a non-posted request, what it asks to be sent back beyond an acknowledgement (a
/// READ's length; 0 for the others, which the RNIC may queue: the backlog is looked at
/// again after each); `None` for any other frame.
#[inline]
fn non_posted_asks(frame: &Frame<'_>) -> Option<u64> {
    match frame {
        Frame::Packet(p) if p.is_non_posted() => Some(p.read_len()),
        _ => None,
    }
}

/// Whether a frame asks something of this node's responder (a write train always does).
fn frame_is_request(frame: &Frame<'_>) -> bool {
    match frame {
        Frame::Packet(p) => p.is_request(),
        Frame::WriteTrain(_) => true,
    }
}

/// What a packet held for its departure counts toward its peer's backlog: its payload and
/// a frame's head (the same figure when it is held and when it leaves).
fn held_bytes(pkt: &Packet) -> u64 {
    pkt.payload_len() + 64
}

/// [`State::queue`] on the state's connections and counters (borrowed apart from its RNIC).
#[inline]
fn queue_on(peers: &BTreeMap<NodeId, Rc<Conn>>, stats: &mut NetStats, pkt: &Packet) {
    to_peer(peers, stats, pkt.dst, |c| c.queue(pkt));
}

/// [`queue_on`] for a WRITE where it lies (a streamed WRITE is encoded from its work
/// request, without a packet).
fn queue_write_on(peers: &BTreeMap<NodeId, Rc<Conn>>, stats: &mut NetStats, w: &WriteRef<'_>) {
    to_peer(peers, stats, w.dst, |c| c.queue_write(w));
}

/// Queues on the connection to `dst`, counted; a peer not (or no longer) connected gets
/// nothing.
#[inline]
fn to_peer(
    peers: &BTreeMap<NodeId, Rc<Conn>>,
    stats: &mut NetStats,
    dst: NodeId,
    queue: impl FnOnce(&Conn),
) {
    if let Some(conn) = peers.get(&dst) {
        queue(conn);
        stats.sent += 1;
    }
}

/// One peer's TCP connection. The driver appends every packet of a step to `out` and
/// writes it with one non-blocking `write` at the end of the step; only when the socket's
/// buffer is full does the connection's writer task take over and wait for room.
struct Conn {
    out: RefCell<Vec<u8>>,
    /// The write train that ends `out`, while WRITEs may still join it.
    train: Cell<Option<TrainTail>>,
    write: OwnedWriteHalf,
    /// Wakes the writer task (the socket was full, or the connection is closing).
    writer: Notify,
    closing: Cell<bool>,
    /// A task posted a send on one of this connection's QPs (during a coalescing round).
    posted: Cell<bool>,
    /// Whether tasks posted on this connection during the last coalescing round in which
    /// it had output waiting, so its output waits for them.
    answers: Cell<bool>,
    /// The connection had output when the current coalescing round began.
    in_round: Cell<bool>,
    /// Bytes of packets to this peer held for a later departure (see [`held_bytes`]).
    later: Cell<u64>,
    /// [`BACKLOG_HIGH`] for this connection (a node's [`RtNode::set_backlog_limits`]).
    high: u64,
    /// The reader holds requests until the backlog is at most half of `high`; the writer
    /// then wakes it through `drained`.
    backed: Cell<bool>,
    drained: Notify,
    /// The most [`backlog`](Self::backlog) a write left behind.
    peak: Cell<u64>,
}

impl Conn {
    /// Appends a due packet to the output: a WRITE without immediate data joins the write
    /// train ending the output if it is the next one of the same QP and rkey (one frame
    /// per run of WRITEs, as a doorbell batch), or starts one; anything else is a packet.
    fn queue(&self, pkt: &Packet) {
        self.queue_frame(WriteRef::of(pkt).as_ref(), |out| pkt.emit_into(out));
    }

    /// [`queue`](Self::queue) for a WRITE without immediate data where it lies.
    fn queue_write(&self, w: &WriteRef<'_>) {
        self.queue_frame(Some(w), |out| w.to_packet().emit_into(out));
    }

    /// Appends `write` (a WRITE that may join a train) to the train ending the output, or
    /// starts one with it; anything else, and a WRITE too long for a train, `emit`s itself
    /// as a packet.
    fn queue_frame(&self, write: Option<&WriteRef<'_>>, emit: impl FnOnce(&mut Vec<u8>)) {
        let mut out = self.out.borrow_mut();
        let mut train = self.train.take();
        let joined =
            write.is_some_and(|w| train.as_mut().is_some_and(|t| t.push_write(w, &mut out)));
        if !joined {
            train = write.and_then(|w| TrainTail::start_write(w, &mut out));
            if train.is_none() {
                emit(&mut out);
            }
        }
        self.train.set(train);
    }

    /// Output pending for the peer on this side of the RNIC: queued here, and held for its
    /// departure. (What the RNIC owes it besides, see [`RtNode::backlog`].)
    #[inline]
    fn backlog(&self) -> u64 {
        self.out.borrow().len() as u64 + self.later.get()
    }

    /// Writes what the socket takes without blocking; true if nothing is left.
    fn try_flush(&self) -> bool {
        let mut out = self.out.borrow_mut();
        let mut done = 0;
        while done < out.len() {
            match self.write.try_write(&out[done..]) {
                Ok(n) if n > 0 => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // A broken connection: the reader sees it too and closes the peer.
                _ => {
                    done = out.len();
                }
            }
        }
        if done > 0 {
            // What is written is gone: a train partly written is closed.
            self.train.set(None);
        }
        out.drain(..done);
        let empty = out.is_empty();
        drop(out);
        if !empty || self.backed.get() {
            self.after_short_write();
        }
        empty
    }

    /// After a write that left output behind, or while the reader holds requests: notes
    /// the backlog, and wakes the reader once it drained enough.
    #[cold]
    fn after_short_write(&self) {
        let backlog = self.backlog();
        self.peak.set(self.peak.get().max(backlog));
        // A hint: the reader looks at the whole backlog again.
        if self.backed.get() && backlog <= self.high / 2 {
            self.backed.set(false);
            self.drained.notify_waiters();
        }
    }

    /// Sends what is queued now, leaving any rest to the writer task; false if nothing was
    /// queued (no write started).
    fn flush(&self) -> bool {
        if self.out.borrow().is_empty() {
            return false;
        }
        if !self.try_flush() {
            self.writer.notify_one();
        }
        true
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
    /// [`BACKLOG_HIGH`] and [`HELD_HIGH`] for connections attached from now on.
    limits: Cell<(u64, usize)>,
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
                limits: Cell::new((BACKLOG_HIGH, HELD_HIGH)),
            }),
        }
    }

    /// Sets, for connections attached from now on, the output pending for a peer beyond
    /// which its requests wait ([`BACKLOG_HIGH`] unless set) and the bytes of requests
    /// held beyond which its socket is not read ([`HELD_HIGH`]). For tests, which show
    /// the mechanism with megabytes instead of a hundred.
    pub fn set_backlog_limits(&self, backlog: u64, held: usize) {
        self.inner.limits.set((backlog.max(1), held.max(1)));
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

    /// Starts exchanging packets with `peer` over a TCP connection: spawns its reader and
    /// writer. When the connection ends, `on_close` runs (e.g. to fail the peer's QPs).
    pub fn attach(
        &self,
        peer: NodeId,
        read: OwnedReadHalf,
        write: OwnedWriteHalf,
        on_close: impl FnOnce(&RtNode) + 'static,
    ) {
        let conn = Rc::new(Conn {
            out: RefCell::new(Vec::with_capacity(1 << 12)),
            train: Cell::new(None),
            write,
            writer: Notify::new(),
            closing: Cell::new(false),
            posted: Cell::new(false),
            answers: Cell::new(true),
            in_round: Cell::new(false),
            later: Cell::new(0),
            high: self.inner.limits.get().0,
            backed: Cell::new(false),
            drained: Notify::new(),
            peak: Cell::new(0),
        });
        self.inner.st.borrow_mut().peers.insert(peer, conn.clone());
        remora_exec::spawn_local(write_loop(conn.clone()));
        // The connection's end runs also if the reader unwinds (a bug of the model's,
        // caught by the executor): its socket and buffers are released, and the peer's
        // QPs fail, as when the connection ends.
        let end = ConnEnd {
            node: self.clone(),
            peer,
            conn,
            on_close: Some(Box::new(on_close)),
        };
        remora_exec::spawn_local(async move {
            if let Err(e) = end.node.read_loop(peer, &end.conn, read).await {
                eprintln!("peer {peer}: {e}; connection closed");
            }
            drop(end);
        });
    }

    /// Whether a connection to `peer` is attached and has not ended.
    pub fn attached(&self, peer: NodeId) -> bool {
        self.inner.st.borrow().peers.contains_key(&peer)
    }

    /// Ends the connection to `peer` from this side: what its socket takes now is
    /// written, then the connection is shut down in both directions (the peer sees its
    /// end, the reader stops), and the `on_close` given to [`attach`](Self::attach) does
    /// not run. For a peer whose QP failed: a connection that can carry nothing more
    /// must not keep the server's socket and buffers. False if the connection had ended
    /// already.
    pub fn detach(&self, peer: NodeId) -> bool {
        let conn = self.inner.st.borrow_mut().peers.remove(&peer);
        let Some(conn) = conn else { return false };
        conn.closing.set(true);
        conn.try_flush();
        let _ = conn.write.shutdown_both();
        conn.writer.notify_one();
        true
    }

    /// Reads and handles `peer`'s frames until the connection ends (`Ok`) or a frame is
    /// malformed (the connection is closed: a byte stream cannot be resynchronised).
    ///
    /// While the peer's output is backed up (see [`BACKLOG_HIGH`]) its requests are held,
    /// in order, and its responses still go to the RNIC: a peer that does not read gets no
    /// more answers queued for it, and one that waits for this node to read goes on being
    /// read. The held requests go to the RNIC once the output has drained to half the
    /// limit, as if the network had delayed them; past [`HELD_HIGH`] bytes of them the
    /// socket is left unread, and TCP holds the peer back.
    async fn read_loop(
        &self,
        peer: NodeId,
        conn: &Conn,
        mut read: OwnedReadHalf,
    ) -> Result<(), WireError> {
        // Frames are parsed in place; consumed bytes are dropped once per read, not per
        // frame (a 64 KiB buffer of small frames would otherwise be shifted per frame).
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
        let mut at = 0;
        // Requests held while the output is backed up: whole frames, first come first.
        let mut held: Vec<u8> = Vec::new();
        let (high, held_high) = (conn.high, self.inner.limits.get().1);
        // Bytes handled since the executor last looked at its other sockets and timers.
        let mut since_yield = 0;
        // While the socket is left unread: since when the output has not shrunk, and to what.
        let mut pause: Option<(Wall, u64)> = None;
        loop {
            // Every frame of one read arrived by the time the read returned: one clock read
            // per read, at the loop's edge, not one per frame.
            let mut arrived = None;
            let mut handled = false;
            // What the READs handed to the RNIC since the last step ask for: their
            // responses are made, but in no count yet (the step after the read moves
            // them onto the connection).
            let mut promised = 0;
            if !held.is_empty() && self.backlog(peer, conn, 0) <= high / 2 {
                handled = self.release_held(peer, conn, &mut held, &mut arrived, &mut promised);
            }
            let mut backed = !held.is_empty() || self.backlog(peer, conn, promised) > high;
            while let Some(len) = Packet::frame_len(&buf[at..])
                .inspect_err(|_| self.inner.st.borrow_mut().stats.malformed += 1)?
            {
                if buf.len() - at < len {
                    break;
                }
                let bytes = &buf[at..at + len];
                let frame = Frame::parse(bytes)
                    .inspect_err(|_| self.inner.st.borrow_mut().stats.malformed += 1)?;
                at += len;
                if backed && frame_is_request(&frame) {
                    held.extend_from_slice(bytes);
                    self.inner.st.borrow_mut().stats.held_back += 1;
                    continue;
                }
                handled |= self.deliver(peer, &frame, &mut arrived);
                if let Some(asks) = non_posted_asks(&frame) {
                    promised += asks;
                    backed = self.backlog(peer, conn, promised) > high;
                }
            }
            if handled {
                self.after_receive();
            }
            since_yield += at;
            buf.drain(..at);
            at = 0;
            if buf.capacity() - buf.len() < 1 << 14 {
                buf.reserve(1 << 16);
            }
            if since_yield >= YIELD_BYTES {
                // A peer whose socket never runs dry must not keep the executor from the
                // other connections and the timers (its budget counts polls, not bytes).
                since_yield = 0;
                remora_exec::yield_now().await;
            }
            // A failed socket (a reset: the peer was killed) ends the connection as its
            // orderly end does; only a malformed frame is an error.
            let n = if held.is_empty() {
                pause = None;
                read.read_buf(&mut buf).await.unwrap_or(0)
            } else {
                let owed = self.backlog(peer, conn, 0);
                if owed <= high / 2 {
                    continue;
                }
                conn.peak.set(conn.peak.get().max(owed));
                // The writer wakes this once the connection's output drained (see
                // `Conn::try_flush`); what the RNIC owes drains with the model's time,
                // looked at again every `RECHECK`.
                conn.backed.set(true);
                let wake =
                    remora_exec::first(conn.drained.notified(), remora_exec::time::sleep(RECHECK));
                if held.len() < held_high {
                    pause = None;
                } else if held.len() >= held_high.saturating_mul(2).saturating_add(HELD_SLACK) {
                    // Past the trickle's allowance too: a peer that goes on sending
                    // requests and takes none of their answers is broken or hostile.
                    eprintln!(
                        "peer {peer}: {} bytes of its requests held and {owed} bytes owed to \
                         it, which it does not read; connection closed",
                        held.len()
                    );
                    // What it did not take is dropped with the connection.
                    let _ = conn.write.shutdown_both();
                    return Ok(());
                } else {
                    // Not read until the output drains. But if the peer does the same,
                    // each waits for the other: after `STALL` without the output
                    // shrinking, one more read (its responses are taken, its requests
                    // held), which lets a peer that waits for this node to read go on.
                    let (since, was) = *pause.get_or_insert_with(|| {
                        self.inner.st.borrow_mut().stats.paused += 1;
                        (wall(), owed)
                    });
                    let stalled =
                        owed >= was && wall().nanos_since(since) >= STALL.as_nanos() as u64;
                    if owed < was || stalled {
                        // Progress, or a read about to be made: the clock starts again.
                        pause = Some((wall(), owed));
                    }
                    if !stalled {
                        wake.await;
                        continue;
                    }
                }
                match remora_exec::first(read.read_buf(&mut buf), wake).await {
                    remora_exec::Either::Left(n) => n.unwrap_or(0),
                    remora_exec::Either::Right(_) => continue,
                }
            };
            if n == 0 {
                return Ok(());
            }
        }
    }

    /// Output pending for `peer`: queued on its connection, held for its departure, owed
    /// by the requests it has waiting in the RNIC ([`Rnic::waiting_bytes`]), and
    /// `promised` by READs handed to the RNIC since the last step.
    #[inline]
    fn backlog(&self, peer: NodeId, conn: &Conn, promised: u64) -> u64 {
        conn.backlog() + self.inner.st.borrow().rnic.waiting_bytes(peer) + promised
    }

    /// Hands one frame of `peer`'s to the RNIC at the time its read arrived (read once, into
    /// `arrived`); false for one that did not come from the peer or is not for this node.
    #[inline]
    fn deliver(&self, peer: NodeId, frame: &Frame<'_>, arrived: &mut Option<Instant>) -> bool {
        let mut st = self.inner.st.borrow_mut();
        let (src, dst, n) = match frame {
            Frame::Packet(p) => (p.src, p.dst, 1),
            Frame::WriteTrain(t) => (t.src, t.dst, t.len() as u64),
        };
        if src != peer || dst != st.rnic.id() {
            // A peer may only speak for itself, and to this node; drop, keep the
            // connection.
            st.stats.spoofed += n;
            return false;
        }
        st.stats.received += n;
        // Never behind the model's clock (a step may have jumped it meanwhile).
        let now = match *arrived {
            Some(t) => st.model_now.max(t),
            None => *arrived.insert(self.inner.now(&mut st)),
        };
        match frame {
            Frame::Packet(pkt) => st.rnic.handle_packet(now, pkt),
            Frame::WriteTrain(train) => st.rnic.handle_write_train(now, train),
        }
        true
    }

    /// Hands the held requests to the RNIC, first held first, while the peer's output
    /// stays within the limit (counting what their READs ask for into `promised`); true if
    /// any went.
    fn release_held(
        &self,
        peer: NodeId,
        conn: &Conn,
        held: &mut Vec<u8>,
        arrived: &mut Option<Instant>,
        promised: &mut u64,
    ) -> bool {
        let mut at = 0;
        let mut handled = false;
        while at < held.len() && self.backlog(peer, conn, *promised) <= conn.high {
            // Each frame parsed whole when it was held.
            let len = match Packet::frame_len(&held[at..]) {
                Ok(Some(len)) if len <= held.len() - at => len,
                _ => unreachable!("a held frame is whole"),
            };
            let frame = Frame::parse(&held[at..at + len]).expect("a held frame parsed before");
            at += len;
            handled |= self.deliver(peer, &frame, arrived);
            *promised += non_posted_asks(&frame).unwrap_or(0);
        }
        held.drain(..at);
        handled
    }

    /// Acts on what a read delivered at once, without a trip through the driver task: steps
    /// the RNIC, wakes the tasks with a completion, and writes the answers if no task was
    /// woken (a woken task may answer too: then the driver coalesces, as after any step).
    /// The driver is kicked only if it has something to do: coalescing, or an earlier timer.
    fn after_receive(&self) {
        // A clock read of its own, not the frames' arrival time: everything that fell due
        // while they were handled is due in this step (an older reading would make the
        // step walk through those deadlines one by one).
        let turn = wall();
        self.step(turn);
        let woken = self.wake_cq_waiters(turn);
        let (unflushed, earlier) = {
            let st = self.inner.st.borrow();
            let earlier = st.next.is_some_and(|t| st.armed.is_none_or(|a| t < a));
            (st.unflushed, earlier)
        };
        if unflushed && woken == 0 {
            self.flush();
        }
        if unflushed && woken > 0 {
            // Before the woken tasks run: what they will not add to leaves now.
            self.start_coalescing();
        }
        if (unflushed && woken > 0) || earlier {
            // Its deadline is in `State::next`: the driver re-arms without stepping again.
            self.inner.wake_driver();
        }
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
            st.rnic.sync_media();
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

/// The end of an attached connection (see [`RtNode::attach`]), run when its reader
/// stops or unwinds: the connection leaves the node's peers, its writer finishes, and
/// `on_close` runs, unless [`RtNode::detach`] ended the connection first.
struct ConnEnd {
    node: RtNode,
    peer: NodeId,
    conn: Rc<Conn>,
    on_close: Option<OnClose>,
}

/// What runs when an attached connection ends (see [`RtNode::attach`]).
type OnClose = Box<dyn FnOnce(&RtNode)>;

impl Drop for ConnEnd {
    fn drop(&mut self) {
        let mine = {
            let Ok(mut st) = self.node.inner.st.try_borrow_mut() else {
                return; // unwinding with the node's state borrowed: nothing safe to do
            };
            st.stats.peak_backlog = st.stats.peak_backlog.max(self.conn.peak.get());
            let mine = st
                .peers
                .get(&self.peer)
                .is_some_and(|c| Rc::ptr_eq(c, &self.conn));
            if mine {
                st.peers.remove(&self.peer);
            }
            mine
        };
        self.conn.closing.set(true);
        self.conn.writer.notify_one();
        if mine {
            if let Some(f) = self.on_close.take() {
                f(&self.node);
            }
        }
        self.node.inner.kick();
    }
}

/// A connection's writer: sends what the driver could not write at once, waiting for room
/// in the socket; on close, sends what is left and shuts the connection down (dropping the
/// write half).
async fn write_loop(conn: Rc<Conn>) {
    loop {
        conn.writer.notified().await;
        let mut closing_since = None;
        while !conn.try_flush() {
            if conn.closing.get() {
                let since = *closing_since.get_or_insert_with(wall);
                if wall().nanos_since(since) >= LINGER.as_nanos() as u64 {
                    // A peer that takes nothing more of an ended connection: what it did
                    // not take is dropped, and the socket with it.
                    let _ = conn.write.shutdown_both();
                    return;
                }
            }
            // Room in the socket, or the connection's end (which starts the linger), or
            // a look at the linger's clock.
            let woke = remora_exec::first(
                conn.write.writable(),
                remora_exec::first(
                    conn.writer.notified(),
                    remora_exec::time::sleep(LINGER / 10),
                ),
            )
            .await;
            if let remora_exec::Either::Left(Err(_)) = woke {
                return;
            }
        }
        if conn.closing.get() {
            return;
        }
    }
}

/// Waits until a CQ holds a completion; the driver wakes it after the step that put one
/// there.
struct WaitCq {
    inner: Rc<Inner>,
    cq: CqId,
    id: u64,
}

impl Future for WaitCq {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.inner.st.borrow_mut();
        if st.rnic.cq_len(self.cq) > 0 {
            st.cq_waiters.retain(|(id, _, _)| *id != self.id);
            return Poll::Ready(());
        }
        match st.cq_waiters.iter_mut().find(|(id, _, _)| *id == self.id) {
            Some((_, _, w)) => w.clone_from(cx.waker()),
            None => {
                st.cq_waiters.push((self.id, self.cq, cx.waker().clone()));
                // A task went (back) to waiting: one fewer that may still answer.
                st.unsettled = st.unsettled.saturating_sub(1);
            }
        }
        Poll::Pending
    }
}

impl Drop for WaitCq {
    fn drop(&mut self) {
        if let Ok(mut st) = self.inner.st.try_borrow_mut() {
            st.cq_waiters.retain(|(id, _, _)| *id != self.id);
        }
    }
}

impl remora_verbs::Verbs for RtNode {
    fn node(&self) -> NodeId {
        self.inner.st.borrow().rnic.id()
    }
    fn now(&self) -> Instant {
        let mut st = self.inner.st.borrow_mut();
        self.inner.now(&mut st)
    }
    fn config(&self) -> ServerConfig {
        self.inner.st.borrow().rnic.config()
    }
    fn alloc(&self, space: Space, len: u64, align: u64) -> u64 {
        self.with(|r, _| r.alloc(space, len, align))
    }
    fn alloc_pd(&self) -> Result<PdId, VerbsError> {
        self.with(|r, _| Ok(r.alloc_pd()))
    }
    fn reg_mr(
        &self,
        pd: PdId,
        space: Space,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<MrInfo, VerbsError> {
        self.with(|r, _| r.reg_mr(pd, space, addr, len, access))
    }
    fn create_cq(&self, depth: usize) -> Result<CqId, VerbsError> {
        self.with(|r, _| r.create_cq(depth))
    }
    fn create_qp(
        &self,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        attr: QpAttr,
    ) -> Result<QpNum, VerbsError> {
        self.with(|r, _| r.create_qp(pd, send_cq, recv_cq, attr))
    }
    fn dereg_mr(&self, mr: &MrInfo) -> Result<(), VerbsError> {
        self.with_quiet(|r, _| r.dereg_mr(mr.lkey))
    }
    fn dealloc_pd(&self, pd: PdId) -> Result<(), VerbsError> {
        self.with_quiet(|r, _| r.dealloc_pd(pd))
    }
    fn destroy_qp(&self, qp: QpNum) -> Result<(), VerbsError> {
        self.with(|r, now| r.destroy_qp(now, qp))
    }
    fn destroy_cq(&self, cq: CqId) -> Result<(), VerbsError> {
        self.with_quiet(|r, _| r.destroy_cq(cq))
    }
    fn post_send(&self, qp: QpNum, wr: SendWr) -> Result<(), VerbsError> {
        // Posting only queues the request (`now` dates its trace event); the driver's step
        // reads the clock before the RNIC acts on the doorbell. So no clock read per post:
        // the model's clock as of the loop's last edge.
        let r = {
            let mut st = self.inner.st.borrow_mut();
            let now = st.model_now;
            let r = st.rnic.post_send(now, qp, wr);
            // Only a coalescing round reads it (a stream's posts skip the lookup).
            if st.coalescing {
                if let Some(conn) = st.rnic.qp_peer(qp).and_then(|p| st.peers.get(&p)) {
                    conn.posted.set(true);
                }
            }
            r
        };
        self.inner.kick();
        r
    }
    fn post_recv(&self, qp: QpNum, wr: RecvWr) -> Result<(), VerbsError> {
        // Queuing a receive gives the RNIC nothing to send or time, and reads no clock
        // (as `post_send`: the model's clock as of the last step).
        let mut st = self.inner.st.borrow_mut();
        let now = st.model_now;
        st.rnic.post_recv(now, qp, wr)
    }
    fn poll_cq(&self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        self.inner.st.borrow_mut().rnic.poll_cq(cq, max, out)
    }
    fn poll_one(&self, cq: CqId) -> Option<WorkCompletion> {
        self.inner.st.borrow_mut().rnic.poll_one(cq)
    }
    fn wait_cq(&self, cq: CqId) -> impl Future<Output = ()> {
        let id = {
            let mut st = self.inner.st.borrow_mut();
            st.next_waiter += 1;
            st.next_waiter
        };
        WaitCq {
            inner: self.inner.clone(),
            cq,
            id,
        }
    }
    fn load(&self, space: Space, addr: u64, buf: &mut [u8]) {
        // A load only reads (it may move the hierarchy's clock, which makes the driver's
        // next deadline later, never earlier).
        self.with_quiet(|r, now| r.cpu_load(now, space, addr, buf))
    }
    fn store(&self, space: Space, addr: u64, data: &[u8]) {
        self.with(|r, now| r.cpu_store(now, space, addr, data))
    }
    async fn persist_local(&self, addr: u64, len: u64) {
        let w = wall();
        let (now, done) = {
            let mut st = self.inner.st.borrow_mut();
            let now = self.inner.now_at(&mut st, w);
            let issue = st.rnic.hierarchy().clwb(now, addr, len);
            (now, st.rnic.hierarchy().sfence(now + issue))
        };
        // A long fence (a slow data path) takes its time on the wall clock too.
        if done > now + JUMP {
            remora_exec::time::sleep(std::time::Duration::from_nanos((done - now).as_nanos()))
                .await;
        }
        {
            let mut st = self.inner.st.borrow_mut();
            // The fence completes in model time; the lines are in the pool file on return.
            st.model_now = st.model_now.max(done);
            let t = st.model_now;
            st.rnic.handle_timeout(t);
            st.rnic.sync_media();
        }
        self.inner.kick();
        // A fence long enough to sleep yielded already; a short one is this reading's work.
        self.cpu_yield_at(w).await;
    }

    async fn compute(&self, d: Duration) {
        if d == Duration::ZERO {
            // An explicit yield point (e.g. an application that posted a batch and wants
            // the RNIC to send it while it prepares the next).
            remora_exec::yield_local().await;
        } else if d < SLEEP_MIN {
            self.cpu_yield().await;
        } else {
            remora_exec::time::sleep(std::time::Duration::from_nanos(d.as_nanos())).await;
        }
    }
    async fn memcpy(&self, dst: (Space, u64), src: (Space, u64), len: u64) {
        let mut scratch = remora_model::bytes::Scratch::new();
        let buf = scratch.get(len as usize);
        // One piece of CPU work: the load, the store and the slice's check share a
        // reading of the clock.
        let w = wall();
        self.with_at(w, |r, now| {
            r.cpu_load(now, src.0, src.1, buf);
            r.cpu_store(now, dst.0, dst.1, buf)
        });
        self.cpu_yield_at(w).await;
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
