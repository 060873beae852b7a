//! One node's RNIC as a sans-IO state machine: memory regions, completion queues and
//! reliable-connection queue pairs, with the ordering rules and completion semantics of
//! seed 000 §2:
//!
//! - posted operations (WRITE, WRITE_WITH_IMM, SEND) are executed in order on arrival;
//! - non-posted operations (READ, CAS, FETCH_ADD, FLUSH, ATOMIC WRITE, non-posted WRITE) are
//!   executed only after every earlier operation of the QP took effect, so a posted
//!   operation that arrives later may take effect before an earlier non-posted one;
//! - a fenced work request waits at the requester until every earlier non-posted request
//!   of its QP has completed;
//! - on InfiniBand and RoCE a posted request completes when the responder's RNIC has
//!   received it; on iWARP when the requester's transport accepted it (seed 000 §3.2);
//! - a SEND or WRITE_WITH_IMM that finds no posted receive is refused with a
//!   receiver-not-ready NAK and retried after a delay (seed 000 §4.3);
//! - remote access violations complete with an error status and never touch memory;
//! - the fabric loses nothing, so a requester never retransmits on a time-out: a request
//!   not answered within the profile's `ack_timeout_ns` (a real RNIC's time-out times its
//!   retries: when it declares the peer dead) completes with `RetryExcErr`, and a profile
//!   must give its slowest legitimate response less than that.
//!
//! The requester's transmit/acknowledge/complete machinery is in `rnic/requester.rs`, the
//! responder's execution of requests in `rnic/responder.rs`, the unreliable service types
//! (UC, UD) in `rnic/transport.rs`, the native flush primitives of seed 003 §4.1 (SFlush,
//! RFlush; WFlush is FLUSH) in `rnic/flush.rs`.
//!
//! The runtime feeds packets in with [`Rnic::handle_packet`], takes packets out with
//! [`Rnic::poll_transmit`], and calls [`Rnic::handle_timeout`] at [`Rnic::poll_timeout`].

use crate::bytes::Bytes;
use crate::config::{PersistenceDomain, ServerConfig, Transport};
use crate::hierarchy::{FlushRange, MemoryHierarchy, Space};
use crate::mem::SparseMem;
use crate::prng::Prng;
use crate::profile::LatencyProfile;
use crate::time::{Duration, Instant};
use crate::verbs::*;
use crate::wire::{Body, NakCode, Packet, Psn, WriteRef, WriteTrain};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

mod flush;
mod outbox;
mod requester;
mod responder;
mod transport;

/// Largest message on a reliable connection (seed 000 §3.2: 1 to 2^31 bytes).
pub const MAX_MESSAGE: u64 = 1 << 31;
/// Upper bound on queue depths, as `ibv_query_device` would report.
pub const MAX_QUEUE_DEPTH: usize = 1 << 16;
/// Most non-posted requests (READ, ATOMIC, FLUSH, non-posted WRITE) of one QP that wait
/// behind an earlier one at the responder; one more is refused with NAK invalid request
/// (IBTA's responder resources, IRD). Real RNICs hold far fewer (rdma-core's
/// `max_qp_rd_atom` is 16 on mlx5) and their requesters keep to it (ORD); the model's
/// requester has no ORD, so the bound is the deepest send queue: a requester that waits
/// for its answers never meets it (a durable-RPC batch posts one ATOMIC WRITE per request,
/// thousands behind one FLUSH), and a peer that floods cannot queue more. What the waiting
/// requests hold is bounded apart from this, by a real-time runtime
/// ([`Rnic::waiting_bytes`]).
pub const MAX_WAITING_NP: usize = MAX_QUEUE_DEPTH;
/// `rnr_retry` value meaning "retry forever" (InfiniBand encodes infinite as 7).
pub const RNR_RETRY_INFINITE: u8 = 7;
/// A requester asks for an acknowledgement at least every this many posted packets.
const ACK_EVERY: Psn = 16;

/// A registered memory region as the application sees it (`ibv_mr`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MrInfo {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// DRAM or PM.
    pub space: Space,
    /// Rights.
    pub access: Access,
}

/// Queue-pair creation attributes (`ibv_qp_init_attr` and the RNR retry attribute).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// Send-queue depth.
    pub sq_depth: usize,
    /// Receive-queue depth.
    pub rq_depth: usize,
    /// RNR retries before an error; [`RNR_RETRY_INFINITE`] retries forever.
    pub rnr_retry: u8,
    /// Transport service type (`ibv_qp_init_attr.qp_type`); RC by default.
    pub qp_type: QpType,
    /// The Q_Key of a UD QP (`ibv_qp_attr.qkey`): datagrams naming another are dropped.
    pub qkey: u32,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            sq_depth: 1024,
            rq_depth: 1024,
            rnr_retry: RNR_RETRY_INFINITE,
            qp_type: QpType::Rc,
            qkey: 0,
        }
    }
}

/// How many RNIC objects are live (created and not yet destroyed): a server that frees each
/// connection's objects keeps these bounded however many connections it serves.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Objects {
    /// Queue pairs.
    pub qps: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Protection domains.
    pub pds: usize,
}

/// Something the RNIC did, for the runtime's trace recorder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    /// When.
    pub at: Instant,
    /// What.
    pub kind: EventKind,
    /// The QP concerned.
    pub qp: QpNum,
    /// Work-request id or PSN.
    pub id: u64,
}

/// Kinds of [`NodeEvent`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A send work request was posted.
    Posted,
    /// A request packet left the requester.
    Transmitted,
    /// A request was executed at the responder.
    Executed,
    /// A completion was made available.
    Completed,
    /// A receiver-not-ready NAK was sent.
    RnrNak,
    /// A request was refused with an access or invalid-request NAK.
    AccessNak,
    /// A packet was dropped (unknown QP, out of sequence, node down).
    Dropped,
}

#[derive(Clone, Debug)]
struct Mr {
    pd: PdId,
    space: Space,
    addr: u64,
    len: u64,
    access: Access,
}

#[derive(Debug, Default)]
struct Cq {
    entries: VecDeque<WorkCompletion>,
    depth: usize,
    /// Time of the last completion handed out: completions of a CQ appear in order.
    last_at: Instant,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum QpState {
    Init,
    Rts,
    Error,
}

impl QpState {
    fn name(self) -> &'static str {
        match self {
            QpState::Init => "INIT",
            QpState::Rts => "RTS",
            QpState::Error => "ERROR",
        }
    }
}

/// A posted send work request; `len` keeps the request's length.
#[derive(Debug)]
struct Wqe {
    /// The request. Its payload is what is sent: inline from the start, or an SGE that the
    /// RNIC replaces with the bytes it fetched when it first transmitted the request
    /// (kept until completion for retransmission after an RNR NAK). READ and atomics keep
    /// their SGE, where the results go.
    wr: SendWr,
    len: u64,
    /// The payload in `wr.local` is ready to send (inline, fetched, or none to send).
    fetched: bool,
    psn: Psn,
    sent: bool,
    done: Option<(WcStatus, Instant)>,
    /// For an SFlush: the PSN of the SEND it follows.
    sflush_of: Psn,
}

#[derive(Debug)]
struct Qp {
    pd: PdId,
    send_cq: CqId,
    recv_cq: CqId,
    attr: QpAttr,
    state: QpState,
    remote: Option<(NodeId, QpNum)>,
    // requester
    sq: VecDeque<Wqe>,
    next_send: usize,
    next_psn: Psn,
    outstanding_np: u32,
    rnr_left: u8,
    rnr_waiting: bool,
    last_progress: Instant,
    ack_timer_armed: bool,
    // responder
    rq: VecDeque<RecvWr>,
    expected_psn: Psn,
    np_barrier: Instant,
    deferred: VecDeque<Packet>,
    deferred_timer_armed: bool,
    /// A request refused (access/invalid NAK) while earlier non-posted requests still
    /// wait in `deferred`: the NAK goes out, and the QP fails, only after they execute
    /// (IBTA: the responder handles requests in PSN order).
    deferred_nak: Option<(Packet, NakCode)>,
    doorbell: bool,
    /// State of the seed 003 flush primitives.
    flush: flush::QpFlush,
    /// Destroyed: its number waits in `free_qps` for reuse.
    freed: bool,
    /// Which QP of its number this is (numbers are reused): a lost completion fails the QP
    /// it was for, never a later one that took the number (see `deliver_cqe`).
    serial: u64,
}

impl Qp {
    fn new(pd: PdId, send_cq: CqId, recv_cq: CqId, attr: QpAttr) -> Qp {
        Qp {
            pd,
            send_cq,
            recv_cq,
            attr,
            state: QpState::Init,
            remote: None,
            sq: VecDeque::new(),
            next_send: 0,
            next_psn: 0,
            outstanding_np: 0,
            rnr_left: attr.rnr_retry,
            rnr_waiting: false,
            last_progress: Instant::ZERO,
            ack_timer_armed: false,
            rq: VecDeque::new(),
            expected_psn: 0,
            np_barrier: Instant::ZERO,
            deferred: VecDeque::new(),
            deferred_timer_armed: false,
            deferred_nak: None,
            doorbell: false,
            flush: flush::QpFlush::default(),
            freed: false,
            serial: 0,
        }
    }

    /// What a destroyed QP's slot holds: no peer, no CQs, nothing queued, in the error
    /// state, so a packet still on its way to the number is dropped.
    fn freed() -> Qp {
        let none = CqId(u32::MAX);
        Qp {
            state: QpState::Error,
            freed: true,
            ..Qp::new(PdId(0), none, none, QpAttr::default())
        }
    }
}

impl Timer {
    fn qp(self) -> QpNum {
        match self {
            Timer::Deferred(q) | Timer::RnrRetry(q) | Timer::AckTimeout(q) => q,
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Deferred(QpNum),
    RnrRetry(QpNum),
    AckTimeout(QpNum),
}

/// Counters for reports and tests.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RnicStats {
    /// Request packets transmitted (retransmissions included).
    pub requests_sent: u64,
    /// Requests executed as a responder.
    pub requests_executed: u64,
    /// RNR NAKs sent.
    pub rnr_naks: u64,
    /// Packets dropped.
    pub dropped: u64,
    /// UC/UD messages silently dropped because no receive was posted (an RC responder
    /// sends an RNR NAK instead).
    pub unreliable_no_recv: u64,
    /// UC WRITEs silently dropped for a bad rkey, range or rights (RC NAKs them).
    pub unreliable_access: u64,
    /// UC/UD messages longer than the receive buffer: the receive completes with
    /// `LocLenErr` and the message is dropped (RC NAKs the sender too).
    pub unreliable_too_long: u64,
    /// UD datagrams dropped because they named another Q_Key than the QP's.
    pub ud_bad_qkey: u64,
    /// Completions lost to a full completion queue (an overrun: see `deliver_cqe`).
    pub cq_overruns: u64,
    /// Successful receive completions discarded with their completion queue (destroyed
    /// before they were polled, or before they reached it): messages the RNIC
    /// acknowledged that no application took.
    pub messages_discarded: u64,
}

/// One node's RNIC and memory system.
#[derive(Debug)]
pub struct Rnic {
    id: NodeId,
    config: ServerConfig,
    hier: MemoryHierarchy,
    up: bool,
    proc: Duration,
    pcie: Duration,
    rnr_delay: Duration,
    ack_timeout: Duration,
    /// Protection domains by number - 1: live or deallocated (numbers are reused).
    pds: Vec<bool>,
    free_pds: Vec<u32>,
    mrs: BTreeMap<u32, Mr>,
    next_key: u32,
    cqs: Vec<Cq>,
    qps: Vec<Qp>,
    /// Destroyed CQs and QPs, whose numbers the next `create_*` reuses (so a server that
    /// serves connection after connection keeps a bounded table).
    free_cqs: Vec<u32>,
    free_qps: Vec<u32>,
    outbox: outbox::Outbox,
    doorbells: Vec<QpNum>,
    tx_free: Instant,
    /// The largest message this RNIC sends or answers ([`set_max_message`](Self::set_max_message)).
    max_message: u64,
    timers: BinaryHeap<Reverse<(Instant, u64, Timer)>>,
    /// Completions waiting for their time, each carried in its entry (no side table to
    /// insert into and remove from per completion).
    cqe_pending: BinaryHeap<Reverse<PendingCqe>>,
    /// QPs whose completion a full CQ lost, with when and the QP's `serial`: moved to the
    /// error state by the next `handle_timeout` (see `deliver_cqe`).
    overruns: Vec<(Instant, QpNum, u64)>,
    /// The last `serial` given to a QP.
    qp_serial: u64,
    seq: u64,
    alloc_next: [u64; 2],
    events: Option<Vec<NodeEvent>>,
    stats: RnicStats,
    ext: transport::RnicExt,
    /// The non-posted requests waiting in `deferred`, per sending node: what they hold or
    /// will answer with ([`waiting_bytes`](Self::waiting_bytes)) and how many there are
    /// ([`waiting_requests`](Self::waiting_requests)); and the bytes over all of them.
    waiting: BTreeMap<NodeId, Waiting>,
    waiting_total: u64,
}

/// One sending node's non-posted requests waiting behind an earlier one of their QP.
#[derive(Copy, Clone, Debug, Default)]
struct Waiting {
    bytes: u64,
    requests: u64,
}

/// What one waiting non-posted request counts in [`Rnic::waiting_bytes`].
fn waiting_cost(pkt: &Packet) -> u64 {
    crate::wire::PACKET_OVERHEAD + pkt.payload_len() + pkt.read_len()
}

/// A completion the RNIC has made but not yet delivered to its CQ: delivered in order of
/// time, then of creation (`seq`, unique).
#[derive(Debug)]
struct PendingCqe {
    at: Instant,
    seq: u64,
    cq: u32,
    wc: WorkCompletion,
    /// The `serial` of the QP it is for.
    serial: u64,
}

impl PartialEq for PendingCqe {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for PendingCqe {}
impl PartialOrd for PendingCqe {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for PendingCqe {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Base of the PM physical range, so DRAM and PM addresses never collide in traces.
pub const PM_BASE: u64 = 1 << 44;

/// The packet at the front of the outbox, as [`Rnic::peek_transmit`] shows it.
#[derive(Debug)]
pub enum Tx<'a> {
    /// A packet made whole: responses, and every request but a reliable connection's
    /// WRITE without immediate data.
    Packet(&'a Packet),
    /// A reliable connection's WRITE without immediate data, read where it lies in the
    /// send queue.
    Write(WriteRef<'a>),
}

impl Rnic {
    /// A node with the given configuration and latency profile.
    pub fn new(id: NodeId, config: ServerConfig, profile: &LatencyProfile, rng: Prng) -> Self {
        Self::with_media(id, config, profile, rng, Box::new(SparseMem::new()))
    }

    /// A node whose persistent memory is `media` (e.g. a pool file kept from an earlier run).
    pub fn with_media(
        id: NodeId,
        config: ServerConfig,
        profile: &LatencyProfile,
        mut rng: Prng,
        media: Box<dyn crate::mem::PmMedia>,
    ) -> Self {
        let hier =
            MemoryHierarchy::with_media(config.domain, config.ddio, profile, rng.fork(), media);
        Rnic {
            id,
            config,
            hier,
            up: true,
            proc: Duration::from_nanos(profile.rnic.proc_ns),
            pcie: Duration::from_nanos(profile.rnic.pcie_ns),
            rnr_delay: Duration::from_nanos(profile.rnic.rnr_retry_delay_ns),
            ack_timeout: Duration::from_nanos(profile.rnic.ack_timeout_ns),
            pds: Vec::new(),
            free_pds: Vec::new(),
            mrs: BTreeMap::new(),
            next_key: 0x100,
            cqs: Vec::new(),
            qps: Vec::new(),
            free_cqs: Vec::new(),
            free_qps: Vec::new(),
            outbox: outbox::Outbox::default(),
            doorbells: Vec::new(),
            tx_free: Instant::ZERO,
            max_message: MAX_MESSAGE,
            timers: BinaryHeap::new(),
            cqe_pending: BinaryHeap::new(),
            overruns: Vec::new(),
            qp_serial: 0,
            seq: 0,
            alloc_next: [0x1000, PM_BASE],
            events: None,
            stats: RnicStats::default(),
            ext: transport::RnicExt::new(profile),
            waiting: BTreeMap::new(),
            waiting_total: 0,
        }
    }

    /// Bytes that the non-posted requests from `peer` waiting behind an earlier one of
    /// their QP hold (their payloads) or will send (what their READs ask for), plus a
    /// packet's head each: what a real-time runtime counts toward the output it owes the
    /// peer, so that a peer cannot queue requests here without bound (the queue drains
    /// at the model's pace, which on a slow data path is slower than a socket fills it).
    #[inline]
    pub fn waiting_bytes(&self, peer: NodeId) -> u64 {
        if self.waiting_total == 0 {
            return 0;
        }
        self.waiting.get(&peer).map_or(0, |w| w.bytes)
    }

    /// How many non-posted requests from `peer` wait behind an earlier one of their QP.
    /// Under WSP each waiting write is held in the memory hierarchy
    /// ([`MemoryHierarchy::hold`]), whose bookkeeping grows with their number: a
    /// real-time runtime stops handing a peer's requests over past a count of them, as a
    /// link's credits hold a sender back.
    #[inline]
    pub fn waiting_requests(&self, peer: NodeId) -> u64 {
        if self.waiting_total == 0 {
            return 0;
        }
        self.waiting.get(&peer).map_or(0, |w| w.requests)
    }

    /// Counts a non-posted request from `peer` into, or out of, [`waiting_bytes`](Self::waiting_bytes)
    /// and [`waiting_requests`](Self::waiting_requests).
    fn note_waiting(&mut self, pkt: &Packet, added: bool) {
        let cost = waiting_cost(pkt);
        let w = self.waiting.entry(pkt.src).or_default();
        if added {
            w.bytes += cost;
            w.requests += 1;
            self.waiting_total += cost;
        } else {
            w.bytes = w.bytes.saturating_sub(cost);
            w.requests = w.requests.saturating_sub(1);
            self.waiting_total = self.waiting_total.saturating_sub(cost);
            if w.requests == 0 {
                self.waiting.remove(&pkt.src);
            }
        }
    }

    /// Node id.
    pub fn id(&self) -> NodeId {
        self.id
    }
    /// The node's configuration (what a server advertises to clients).
    pub fn config(&self) -> ServerConfig {
        self.config
    }
    /// The memory system.
    pub fn hierarchy(&mut self) -> &mut MemoryHierarchy {
        &mut self.hier
    }
    /// Counters.
    pub fn stats(&self) -> RnicStats {
        self.stats
    }
    /// False between a power failure and [`restart`](Self::restart).
    pub fn is_up(&self) -> bool {
        self.up
    }
    /// Turns on recording of [`NodeEvent`]s, drained with [`take_events`](Self::take_events).
    pub fn record_events(&mut self, on: bool) {
        self.events = if on { Some(Vec::new()) } else { None };
    }
    /// Recorded events since the last call.
    pub fn take_events(&mut self) -> Vec<NodeEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    #[inline]
    fn event(&mut self, at: Instant, kind: EventKind, qp: QpNum, id: u64) {
        if let Some(ev) = &mut self.events {
            ev.push(NodeEvent { at, kind, qp, id });
        }
    }

    // ------------------------------------------------------------ resources

    /// Reserves `len` bytes of the node's DRAM or PM, aligned to `align` (a power of two).
    /// Allocation restarts from the bottom after a restart, so a recovering program that
    /// allocates in the same order finds its PM data at the same addresses.
    pub fn alloc(&mut self, space: Space, len: u64, align: u64) -> u64 {
        assert!(align.is_power_of_two());
        let cur = &mut self.alloc_next[space as usize];
        let addr = cur.next_multiple_of(align);
        *cur = addr + len;
        addr
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> PdId {
        if let Some(n) = self.free_pds.pop() {
            self.pds[n as usize - 1] = true;
            return PdId(n);
        }
        self.pds.push(true);
        PdId(self.pds.len() as u32)
    }

    /// `ibv_dealloc_pd`: refused while a memory region or queue pair belongs to it (as
    /// `EBUSY`); its number may be reused.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), VerbsError> {
        if !self.pd_live(pd) {
            return Err(VerbsError::NoSuch("protection domain"));
        }
        let in_use = self.mrs.values().any(|m| m.pd == pd)
            || self.qps.iter().any(|q| !q.freed && q.pd == pd);
        if in_use {
            return Err(VerbsError::Invalid(
                "protection domain in use: deregister its memory regions and destroy its queue pairs first",
            ));
        }
        self.pds[pd.0 as usize - 1] = false;
        self.free_pds.push(pd.0);
        Ok(())
    }

    fn pd_live(&self, pd: PdId) -> bool {
        (pd.0 as usize)
            .checked_sub(1)
            .and_then(|i| self.pds.get(i))
            .copied()
            .unwrap_or(false)
    }

    /// `ibv_reg_mr` over memory the node owns.
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        space: Space,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<MrInfo, VerbsError> {
        if !self.up {
            return Err(VerbsError::NodeDown(self.id));
        }
        if !self.pd_live(pd) {
            return Err(VerbsError::NoSuch("protection domain"));
        }
        if len == 0 {
            return Err(VerbsError::BadRegistration("zero length"));
        }
        let in_range = match space {
            Space::Dram => addr.checked_add(len).is_some_and(|e| e <= PM_BASE),
            Space::Pm => addr >= PM_BASE && addr.checked_add(len).is_some(),
        };
        if !in_range {
            return Err(VerbsError::BadRegistration("range is not in that memory"));
        }
        let key = self.next_key;
        self.next_key += 1;
        self.mrs.insert(
            key,
            Mr {
                pd,
                space,
                addr,
                len,
                access,
            },
        );
        Ok(MrInfo {
            lkey: key,
            rkey: key,
            addr,
            len,
            space,
            access,
        })
    }

    /// `ibv_dereg_mr`: later accesses with its keys fail.
    pub fn dereg_mr(&mut self, key: u32) -> Result<(), VerbsError> {
        self.mrs
            .remove(&key)
            .ok_or(VerbsError::NoSuch("memory region"))?;
        self.recheck_held();
        Ok(())
    }

    /// `ibv_create_cq`.
    pub fn create_cq(&mut self, depth: usize) -> Result<CqId, VerbsError> {
        if depth == 0 || depth > MAX_QUEUE_DEPTH {
            return Err(VerbsError::Invalid("completion queue depth"));
        }
        let cq = Cq {
            entries: VecDeque::new(),
            depth,
            last_at: Instant::ZERO,
        };
        if let Some(n) = self.free_cqs.pop() {
            self.cqs[n as usize] = cq;
            return Ok(CqId(n));
        }
        self.cqs.push(cq);
        Ok(CqId(self.cqs.len() as u32 - 1))
    }

    /// `ibv_destroy_cq`: refused while a queue pair uses the CQ (as `EBUSY`); completions
    /// still in it or on their way to it are discarded (the messages among them counted
    /// in [`RnicStats::messages_discarded`]), and its number may be reused.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), VerbsError> {
        if !self.cq_live(cq) {
            return Err(VerbsError::NoSuch("completion queue"));
        }
        let in_use = self
            .qps
            .iter()
            .any(|q| !q.freed && (q.send_cq == cq || q.recv_cq == cq));
        if in_use {
            return Err(VerbsError::Invalid(
                "completion queue in use by a queue pair: destroy the queue pair first",
            ));
        }
        let message =
            |wc: &WorkCompletion| wc.opcode.is_receive() && wc.status == WcStatus::Success;
        let polled_never = self.cqs[cq.0 as usize]
            .entries
            .iter()
            .filter(|wc| message(wc));
        let on_the_way = self
            .cqe_pending
            .iter()
            .filter(|Reverse(p)| p.cq == cq.0 && message(&p.wc));
        self.stats.messages_discarded += (polled_never.count() + on_the_way.count()) as u64;
        self.cqe_pending.retain(|Reverse(p)| p.cq != cq.0);
        // Depth 0 marks a destroyed CQ (`create_cq` refuses depth 0).
        self.cqs[cq.0 as usize] = Cq::default();
        self.free_cqs.push(cq.0);
        Ok(())
    }

    fn cq_live(&self, cq: CqId) -> bool {
        self.cqs.get(cq.0 as usize).is_some_and(|c| c.depth > 0)
    }

    /// Live objects: (queue pairs, completion queues, memory regions). Destroyed ones do
    /// not count, so a server's figures stay bounded while it serves connection after
    /// connection.
    pub fn live_objects(&self) -> Objects {
        Objects {
            qps: self.qps.len() - self.free_qps.len(),
            cqs: self.cqs.len() - self.free_cqs.len(),
            mrs: self.mrs.len(),
            pds: self.pds.len() - self.free_pds.len(),
        }
    }

    /// `ibv_create_qp` for a reliable connection; the QP starts in INIT.
    pub fn create_qp(
        &mut self,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        attr: QpAttr,
    ) -> Result<QpNum, VerbsError> {
        if !self.pd_live(pd) {
            return Err(VerbsError::NoSuch("protection domain"));
        }
        if !self.cq_live(send_cq) || !self.cq_live(recv_cq) {
            return Err(VerbsError::NoSuch("completion queue"));
        }
        if attr.sq_depth == 0 || attr.sq_depth > MAX_QUEUE_DEPTH || attr.rq_depth > MAX_QUEUE_DEPTH
        {
            return Err(VerbsError::Invalid("queue depth"));
        }
        let qp = Qp::new(pd, send_cq, recv_cq, attr);
        let qpn = match self.free_qps.pop() {
            Some(n) => {
                self.qps[n as usize] = qp;
                QpNum(n)
            }
            None => {
                self.qps.push(qp);
                QpNum(self.qps.len() as u32 - 1)
            }
        };
        self.qp_serial += 1;
        self.qps[qpn.0 as usize].serial = self.qp_serial;
        self.created_qp(qpn);
        Ok(qpn)
    }

    /// Connects a QP to a remote QP and moves it to RTS (the `ibv_modify_qp` sequence
    /// INIT → RTR → RTS after the connection manager exchanged QP numbers).
    pub fn connect(
        &mut self,
        qp: QpNum,
        remote: NodeId,
        remote_qp: QpNum,
    ) -> Result<(), VerbsError> {
        let q = self
            .qps
            .get_mut(qp.0 as usize)
            .filter(|q| !q.freed)
            .ok_or(VerbsError::NoSuch("queue pair"))?;
        if q.attr.qp_type == QpType::Ud {
            return Err(VerbsError::Invalid(
                "a UD queue pair is not connected: each work request names its destination",
            ));
        }
        if q.state != QpState::Init {
            return Err(VerbsError::QpState(qp, q.state.name()));
        }
        q.remote = Some((remote, remote_qp));
        q.state = QpState::Rts;
        Ok(())
    }

    /// Moves a QP to the error state (its peer went away): outstanding requests and
    /// posted receives complete with `WrFlushErr`, so whoever waits on them wakes up.
    pub fn fail_qp(&mut self, now: Instant, qp: QpNum) -> Result<(), VerbsError> {
        if !self.qp_live(qp) {
            return Err(VerbsError::NoSuch("queue pair"));
        }
        self.enter_error(now, qp);
        self.retire(now, qp);
        Ok(())
    }

    /// `ibv_destroy_qp`: fails the QP if it has not failed yet (its outstanding work
    /// completes with `WrFlushErr` into its CQs, which keep those completions), forgets its
    /// timers and the packets it has not sent, and frees its number for the next
    /// `create_qp`. A packet still on its way to the number is dropped: a reused number is
    /// connected to another peer.
    pub fn destroy_qp(&mut self, now: Instant, qp: QpNum) -> Result<(), VerbsError> {
        if !self.qp_live(qp) {
            return Err(VerbsError::NoSuch("queue pair"));
        }
        if self.qps[qp.0 as usize].state != QpState::Error {
            self.enter_error(now, qp);
            self.retire(now, qp);
        }
        self.timers.retain(|Reverse((_, _, t))| t.qp() != qp);
        self.outbox.retain(|(_, o)| o.src_qp() != qp);
        self.doorbells.retain(|&q| q != qp);
        self.qps[qp.0 as usize] = Qp::freed();
        self.free_qps.push(qp.0);
        Ok(())
    }

    /// The node a connected QP talks to (`None` for a UD QP, an unconnected or unknown one).
    pub fn qp_peer(&self, qp: QpNum) -> Option<NodeId> {
        self.qps
            .get(qp.0 as usize)
            .filter(|q| !q.freed)
            .and_then(|q| q.remote)
            .map(|(node, _)| node)
    }

    fn qp_live(&self, qp: QpNum) -> bool {
        self.qps.get(qp.0 as usize).is_some_and(|q| !q.freed)
    }

    // ------------------------------------------------------------ posting

    /// `ibv_post_send`. Errors that a real `ibv_post_send` returns at once are returned;
    /// errors found later (bad keys, remote refusals) complete with an error status.
    // Inlined into the runtime's verb, which then hands the request on without a copy.
    #[inline]
    pub fn post_send(&mut self, now: Instant, qp: QpNum, wr: SendWr) -> Result<(), VerbsError> {
        if !self.up {
            return Err(VerbsError::NodeDown(self.id));
        }
        let caps = self.config.caps;
        let q = self
            .qps
            .get(qp.0 as usize)
            .filter(|q| !q.freed)
            .ok_or(VerbsError::NoSuch("queue pair"))?;
        if q.state != QpState::Rts {
            return Err(VerbsError::QpState(qp, q.state.name()));
        }
        if q.sq.len() >= q.attr.sq_depth {
            return Err(VerbsError::QueueFull("send", qp, q.attr.sq_depth));
        }
        if wr.opcode == Opcode::Write && wr.ud.is_none() && q.attr.qp_type != QpType::Ud {
            // A WRITE on a connected QP (a stream's): of the checks below, only the remote
            // address's and the length's can fail; it is no SEND (for `flush.posted`).
            let len = self.check_remote_and_len(&wr, true)?;
            self.enqueue(now, qp, wr, len, 0);
            return Ok(());
        }
        match wr.opcode {
            Opcode::Flush { .. } if !caps.native_flush => {
                return Err(VerbsError::Unsupported("RDMA FLUSH"))
            }
            Opcode::AtomicWrite { .. } if !caps.atomic_write => {
                return Err(VerbsError::Unsupported("RDMA ATOMIC WRITE"))
            }
            Opcode::NonPostedWrite if !caps.non_posted_write => {
                return Err(VerbsError::Unsupported("non-posted RDMA WRITE"))
            }
            _ => {}
        }
        self.check_post(qp, &wr)?;
        let needs_remote = !matches!(
            wr.opcode,
            Opcode::Send | Opcode::SendWithImm(_) | Opcode::SFlush | Opcode::RFlush { .. }
        );
        let len = self.check_remote_and_len(&wr, needs_remote)?;
        let needs_result_buffer = matches!(
            wr.opcode,
            Opcode::Read | Opcode::CompareSwap { .. } | Opcode::FetchAdd { .. }
        );
        if needs_result_buffer && !matches!(wr.local, Payload::Sge(_)) {
            return Err(VerbsError::Invalid(
                "READ and atomics need a local SGE for the result",
            ));
        }
        if matches!(
            wr.opcode,
            Opcode::CompareSwap { .. } | Opcode::FetchAdd { .. }
        ) && wr.local.len() != 8
        {
            return Err(VerbsError::Invalid("atomics transfer exactly 8 bytes"));
        }
        if matches!(wr.opcode, Opcode::Flush { .. } | Opcode::AtomicWrite { .. })
            && !wr.local.is_empty()
        {
            return Err(VerbsError::Invalid(
                "FLUSH and ATOMIC WRITE carry no local payload",
            ));
        }
        let psn = self.qps[qp.0 as usize].next_psn;
        let sflush_of = self.qps[qp.0 as usize].flush.posted(wr.opcode, psn);
        self.enqueue(now, qp, wr, len, sflush_of);
        Ok(())
    }

    /// `wr`'s payload length, once `wr` names a remote address if it `needs_remote` and
    /// its payload fits in a message of the port.
    #[inline(always)]
    fn check_remote_and_len(&self, wr: &SendWr, needs_remote: bool) -> Result<u64, VerbsError> {
        if needs_remote && wr.remote.is_none() {
            return Err(VerbsError::Invalid(
                "operation needs a remote address and rkey",
            ));
        }
        let len = wr.local.len();
        if len > self.max_message {
            return Err(VerbsError::TooLong {
                len,
                max: self.max_message,
                what: "a message on this port (its max_msg_sz)",
            });
        }
        Ok(len)
    }

    /// Queues the checked request `wr` (of `len` bytes; `sflush_of` as `QpFlush::posted`
    /// said) on `qp`'s send queue with the QP's next PSN, and rings its doorbell.
    #[inline(always)]
    fn enqueue(&mut self, now: Instant, qp: QpNum, wr: SendWr, len: u64, sflush_of: Psn) {
        let fetched = !matches!(wr.local, Payload::Sge(_));
        let id = wr.wr_id;
        let q = &mut self.qps[qp.0 as usize];
        let psn = q.next_psn;
        q.next_psn = q.next_psn.wrapping_add(1);
        q.sq.push_back(Wqe {
            wr,
            len,
            fetched,
            psn,
            sent: false,
            done: None,
            sflush_of,
        });
        if !q.doorbell {
            q.doorbell = true;
            self.doorbells.push(qp);
        }
        self.event(now, EventKind::Posted, qp, id);
    }

    /// Lets the RNIC act on the doorbells rung since the last call: posted work requests
    /// are fetched and transmitted. Like a real RNIC, it does so after the program posted a
    /// batch, so only the batch's last request asks for an acknowledgement.
    pub fn process_doorbells(&mut self, now: Instant) {
        // Usually one QP rang; index instead of taking the vector, which would allocate a
        // new one on the next doorbell.
        let mut i = 0;
        while i < self.doorbells.len() {
            let qp = self.doorbells[i];
            i += 1;
            if let Some(q) = self.qps.get_mut(qp.0 as usize) {
                q.doorbell = false;
                self.pump(now, qp);
            }
        }
        self.doorbells.clear();
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, now: Instant, qp: QpNum, wr: RecvWr) -> Result<(), VerbsError> {
        if !self.up {
            return Err(VerbsError::NodeDown(self.id));
        }
        let q = self
            .qps
            .get_mut(qp.0 as usize)
            .filter(|q| !q.freed)
            .ok_or(VerbsError::NoSuch("queue pair"))?;
        if q.state == QpState::Error {
            return Err(VerbsError::QpState(qp, q.state.name()));
        }
        if q.rq.len() >= q.attr.rq_depth {
            return Err(VerbsError::QueueFull("receive", qp, q.attr.rq_depth));
        }
        q.rq.push_back(wr);
        let _ = now;
        Ok(())
    }

    /// Takes the oldest completion of `cq`, if any.
    pub fn poll_one(&mut self, cq: CqId) -> Option<WorkCompletion> {
        self.cqs.get_mut(cq.0 as usize)?.entries.pop_front()
    }

    /// `ibv_poll_cq`: moves up to `max` completions into `out`, returns how many.
    pub fn poll_cq(&mut self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let Some(c) = self.cqs.get_mut(cq.0 as usize) else {
            return 0;
        };
        let n = max.min(c.entries.len());
        out.extend(c.entries.drain(..n));
        n
    }

    /// Sets the largest message the RNIC sends, and the largest READ it answers (the
    /// port's `max_msg_sz`; [`MAX_MESSAGE`] unless set): a runtime whose wire carries a
    /// message in one frame of bounded size sets it to that bound, so a request beyond it
    /// is refused when posted, and a peer's READ beyond it is answered with a NAK
    /// (invalid request) instead of a response the peer's wire would refuse.
    pub fn set_max_message(&mut self, max: u64) {
        self.max_message = max.min(MAX_MESSAGE);
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.cqs.get(cq.0 as usize).map_or(0, |c| c.entries.len())
    }

    // ------------------------------------------------------------ runtime interface

    /// The next packet to put on the wire and the earliest time it may leave. Call
    /// [`process_doorbells`](Self::process_doorbells) first.
    #[inline]
    pub fn poll_transmit(&mut self) -> Option<(Instant, Packet)> {
        let (at, out) = self.outbox.pop()?;
        let pkt = match out {
            outbox::Out::Packet(p) => p,
            outbox::Out::Request { qp, psn, ack_req } => {
                requester::request_packet(self.id, &self.qps[qp.0 as usize], qp, psn, ack_req)
            }
        };
        Some((at, pkt))
    }

    /// When the packet [`poll_transmit`](Self::poll_transmit) would return next may leave,
    /// and whether no packet behind it may leave earlier (then it is the earliest to leave,
    /// and a runtime that sends by departure time can take it without looking further).
    pub fn next_departure(&self) -> Option<(Instant, bool)> {
        self.outbox.front().map(|(at, _, ordered)| (at, ordered))
    }

    /// The packet [`poll_transmit`](Self::poll_transmit) would return next, where it lies
    /// (a streamed WRITE in its send queue: see [`Tx`]). Take it with
    /// [`discard_transmit`](Self::discard_transmit): a runtime that encodes it in place
    /// saves building and moving a packet.
    #[inline]
    pub fn peek_transmit(&self) -> Option<Tx<'_>> {
        let (_, out, _) = self.outbox.front()?;
        Some(match *out {
            outbox::Out::Packet(ref p) => Tx::Packet(p),
            outbox::Out::Request { qp, psn, ack_req } => Tx::Write(requester::request_write(
                self.id,
                &self.qps[qp.0 as usize],
                qp,
                psn,
                ack_req,
            )),
        })
    }

    /// Drops the packet [`peek_transmit`](Self::peek_transmit) showed (the runtime took it).
    pub fn discard_transmit(&mut self) {
        self.outbox.discard_front();
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.timers.peek().map(|Reverse((t, _, _))| *t);
        let c = self.cqe_pending.peek().map(|Reverse(p)| p.at);
        let next = match (t, c) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if self.overruns.is_empty() {
            next
        } else {
            self.with_overruns(next)
        }
    }

    /// [`poll_timeout`](Self::poll_timeout) when a CQ overran (rare: off its path).
    #[cold]
    fn with_overruns(&self, next: Option<Instant>) -> Option<Instant> {
        let o = self.overruns.iter().map(|&(t, _, _)| t).min();
        [next, o].into_iter().flatten().min()
    }

    /// Puts `wc` in CQ `cq` (made available at `at`) and records the completion's event.
    /// A full CQ overruns: its application sized it below what its queues can complete
    /// (e.g. a send CQ smaller than the send queue a failed connection flushes). As on an
    /// RNIC (`IBV_EVENT_CQ_ERR`), the completion is lost and the QP it was for moves to
    /// the error state, at the next [`handle_timeout`](Self::handle_timeout): its
    /// application learns of it from its next request instead of waiting for ever, and
    /// one connection's overrun never stops the node. Counted in
    /// [`RnicStats::cq_overruns`]. `serial` is the QP's (see `Qp::serial`): a QP destroyed
    /// meanwhile, whose number a new QP took, fails nothing.
    #[inline]
    fn deliver_cqe(&mut self, at: Instant, cq: u32, wc: WorkCompletion, serial: u64) {
        let c = &mut self.cqs[cq as usize];
        if c.entries.len() < c.depth {
            let (qp, wr_id) = (wc.qp, wc.wr_id);
            c.entries.push_back(wc);
            self.event(at, EventKind::Completed, qp, wr_id);
        } else {
            self.overrun(at, wc.qp, serial);
        }
    }

    /// A completion for `qp` (of `serial`) was lost to a full CQ (see `deliver_cqe`).
    #[cold]
    fn overrun(&mut self, at: Instant, qp: QpNum, serial: u64) {
        self.stats.cq_overruns += 1;
        self.overruns.push((at, qp, serial));
    }

    /// Moves the QPs whose completions a full CQ lost to the error state (see
    /// `deliver_cqe`).
    #[cold]
    fn fail_overrun_qps(&mut self, now: Instant) {
        for (_, qp, serial) in std::mem::take(&mut self.overruns) {
            let q = self.qps.get(qp.0 as usize);
            // The QP the completion was for, not one that took its number since.
            let same = q.is_some_and(|q| !q.freed && q.serial == serial);
            if same && self.qps[qp.0 as usize].state != QpState::Error {
                self.enter_error(now, qp);
                self.retire(now, qp);
            }
        }
    }

    /// Runs everything due at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.hier.advance(now);
        while self
            .cqe_pending
            .peek()
            .is_some_and(|Reverse(p)| p.at <= now)
        {
            let Reverse(PendingCqe {
                at: t,
                cq,
                wc,
                serial,
                ..
            }) = self.cqe_pending.pop().expect("peeked");
            self.deliver_cqe(t, cq, wc, serial);
        }
        if !self.overruns.is_empty() {
            self.fail_overrun_qps(now);
        }
        while let Some(&Reverse((t, _, timer))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            match timer {
                Timer::Deferred(qp) => {
                    self.qps[qp.0 as usize].deferred_timer_armed = false;
                    self.run_deferred(now, qp);
                }
                Timer::RnrRetry(qp) => {
                    let q = &mut self.qps[qp.0 as usize];
                    if q.state == QpState::Rts {
                        q.rnr_waiting = false;
                        self.pump(now, qp);
                    }
                }
                Timer::AckTimeout(qp) => self.ack_timeout(now, qp),
            }
        }
    }

    /// A packet arrived from the wire at `now`.
    pub fn handle_packet(&mut self, now: Instant, pkt: &Packet) {
        if !self.up {
            return;
        }
        self.hier.advance(now);
        let Some(q) = self.qps.get(pkt.dst_qp.0 as usize) else {
            return self.drop_packet(now, pkt);
        };
        if q.attr.qp_type != QpType::Rc || matches!(pkt.body, Body::Datagram { .. }) {
            return self.handle_unreliable(now, pkt);
        }
        if q.remote != Some((pkt.src, pkt.src_qp)) || q.state == QpState::Error {
            return self.drop_packet(now, pkt);
        }
        if pkt.is_request() {
            self.handle_request(now, pkt);
        } else {
            self.handle_response(now, pkt);
        }
    }

    // ------------------------------------------------------------ CPU

    /// CPU load of the visible value.
    pub fn cpu_load(&mut self, now: Instant, space: Space, addr: u64, buf: &mut [u8]) {
        self.hier.cpu_load(now, space, addr, buf);
    }
    /// CPU store (into the cache).
    pub fn cpu_store(&mut self, now: Instant, space: Space, addr: u64, data: &[u8]) {
        self.hier.cpu_store(now, space, addr, data);
    }

    // ------------------------------------------------------------ power

    /// Power failure at `now`: the memory system keeps what the persistence domain
    /// protects; all RNIC state (QPs, CQs, MRs, packets in its buffers) is gone, except
    /// that under WSP requests that reached the RNIC buffer but were not yet executed are
    /// written out too (the whole system is flushed on power failure).
    pub fn power_fail(&mut self, now: Instant) {
        // Under WSP the RNIC and IIO are inside the domain: everything that arrived is kept,
        // the non-posted writes waiting in the RNIC buffer too (the hierarchy holds them
        // from their arrival, so the medium, and a real-time runtime's pool file, has them
        // at every instant: `MemoryHierarchy::hold`).
        self.hier.power_fail(now);
        self.up = false;
        self.mrs.clear();
        self.cqs.clear();
        self.qps.clear();
        self.free_cqs.clear();
        self.free_qps.clear();
        self.outbox.clear();
        self.timers.clear();
        self.cqe_pending.clear();
        self.overruns.clear();
        self.pds.clear();
        self.free_pds.clear();
        self.waiting.clear();
        self.waiting_total = 0;
        self.tx_free = now;
        self.alloc_next = [0x1000, PM_BASE];
    }

    /// Power back on: an empty RNIC over the surviving PM image.
    pub fn restart(&mut self, _now: Instant) {
        self.up = true;
    }

    /// Makes the PM medium's writes durable against a machine crash; a real-time runtime
    /// calls it before sending packets.
    pub fn sync_media(&mut self) {
        self.hier.sync_media();
    }

    /// The PM image a power failure at `now` would leave, without failing.
    pub fn crash_image(&mut self, now: Instant) -> SparseMem {
        self.hier.crash_image(now)
    }
}
