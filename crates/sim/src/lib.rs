//! # remora-sim: the deterministic simulator
//!
//! A [`Sim`] owns virtual time, one event queue, a seeded random stream, the simulated
//! fabric (every node's [`Rnic`] from `remora-model`, joined through per-port links with
//! bandwidth and queueing), and a single-threaded async executor. Application code is
//! ordinary `async` Rust written against [`remora_verbs::Verbs`]; [`NodeHandle`] implements
//! it on virtual time. Nothing here reads a clock or an unseeded random source, so the
//! same seed and program give the same run, bit for bit ([`Sim::fingerprint`]).
//!
//! Faults are inputs: a [`FaultPlan`] crashes a node (power failure) at a virtual time or
//! at the k-th event, and the node's tasks die with it.

pub mod cpu;
pub mod crashcheck;
mod executor;
pub mod trace;

pub use cpu::CpuLoad;
use cpu::CpuSched;
use executor::Executor;
use remora_model::hierarchy::Space;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{MrInfo, QpAttr, Rnic};
use remora_model::time::{Duration, Instant};
use remora_model::verbs::*;
use remora_model::wire::{Body, Packet};
use remora_model::ServerConfig;
use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
pub use trace::{Trace, TraceEvent, TraceSummary};

/// When a planned crash happens.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CrashAt {
    /// At this virtual time.
    Time(Instant),
    /// Just before the k-th event (counting from 0) is processed.
    Event(u64),
}

/// A planned power failure of one node.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    /// The node that loses power.
    pub node: NodeId,
    /// When.
    pub at: CrashAt,
}

/// Faults to inject into a run. Empty by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Power failures.
    pub crashes: Vec<Crash>,
}

impl FaultPlan {
    /// A plan with one crash.
    pub fn crash(node: NodeId, at: CrashAt) -> Self {
        FaultPlan {
            crashes: vec![Crash { node, at }],
        }
    }
}

enum Ev {
    /// A packet arrives. Who sent it when is in [`World::sent`], beside the slot: an event
    /// of at most 128 bytes is copied inline, a larger one through `memcpy`.
    Deliver(Packet),
    NodeTimer(NodeId),
    Wake(Waker),
    Crash(NodeId),
}

#[derive(Clone, Copy, Default)]
struct Port {
    egress_free: Instant,
    ingress_free: Instant,
}

/// An event's place in the queue: its time, then its sequence number (ties in time go in
/// the order the events were queued), packed with its slot into one `u128` so that the
/// heap moves plain integers (a tuple of three fields costs the heap a stalled load per
/// move: it is stored field by field and read back in wider pieces).
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct EventKey(u128);

impl EventKey {
    const SLOT_BITS: u32 = 24;

    fn new(at: Instant, seq: u64, slot: u32) -> Self {
        assert!(
            seq < 1 << (64 - Self::SLOT_BITS) && slot < 1 << Self::SLOT_BITS,
            "event queue beyond 2^40 events or 2^24 queued at once"
        );
        EventKey((at.as_nanos() as u128) << 64 | (seq << Self::SLOT_BITS | slot as u64) as u128)
    }
    fn at(self) -> Instant {
        Instant::from_nanos((self.0 >> 64) as u64)
    }
    fn slot(self) -> u32 {
        (self.0 as u64 & ((1 << Self::SLOT_BITS) - 1)) as u32
    }
}

/// The simulated world: nodes, links and the event queue. Reached through [`Sim`].
pub struct World {
    now: Instant,
    profile: LatencyProfile,
    rng: Prng,
    nodes: Vec<Rnic>,
    names: Vec<String>,
    ports: Vec<Port>,
    /// Per node, its CPU's background load ([`Sim::set_cpu_load`]); `None`: the node's
    /// threads always run.
    cpu: Vec<Option<CpuSched>>,
    /// Per node, the instants of its queued timer events: a deadline already queued is
    /// not queued again (a duplicate event would run the RNIC's timers for nothing).
    timers_queued: Vec<BTreeSet<Instant>>,
    /// Queued events as [`EventKey`]s, earliest first.
    queue: BinaryHeap<Reverse<EventKey>>,
    /// Queued events by slot. A free slot (in `free_slots`) may still hold a delivered
    /// packet without heap memory (see `process_event`); `push_with` overwrites it.
    payloads: Vec<Option<Ev>>,
    /// Per slot of a packet: it left its sender at this instant, sent by the sender's
    /// incarnation with this index (if that incarnation lost power before, it never left),
    /// to the receiver's incarnation with this index (if that one lost power before the
    /// packet arrived, the packet is lost with it: a restarted node's RNIC never sees
    /// what was on its way to the one before).
    sent: Vec<(Instant, u32, u32)>,
    free_slots: Vec<u32>,
    seq: u64,
    events_processed: u64,
    event_crashes: Vec<Crash>,
    cq_waiters: Vec<(NodeId, CqId, Waker)>,
    crashed: Vec<(NodeId, Instant)>,
    /// Per node, when each incarnation lost power (index = incarnation).
    deaths: Vec<Vec<Instant>>,
    dirty: Vec<NodeId>,
    dirty_spare: Vec<NodeId>,
    /// Wakers to call once the world is no longer borrowed (see [`Sim::wake_collected`]).
    wake: Vec<Waker>,
    trace: Trace,
}

impl World {
    fn push(&mut self, at: Instant, ev: Ev) {
        self.push_with(at, move || ev);
    }

    /// Queues the event `make` builds, built straight into its slot (a packet is large:
    /// building the event elsewhere and moving it in costs a copy per packet).
    #[inline(always)]
    fn push_with(&mut self, at: Instant, make: impl FnOnce() -> Ev) -> u32 {
        assert!(at >= self.now, "event scheduled in the past");
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.payloads.push(None);
                self.sent.push((Instant::ZERO, 0, 0));
                self.payloads.len() as u32 - 1
            }
        };
        self.payloads[slot as usize] = Some(make());
        self.seq += 1;
        self.queue.push(Reverse(EventKey::new(at, self.seq, slot)));
        slot
    }

    /// Moves what a node produced onto the fabric, re-arms its timer and collects the
    /// waiters whose completion queue is no longer empty.
    fn service(&mut self, n: NodeId) {
        let now = self.now;
        let node = &mut self.nodes[n as usize];
        node.process_doorbells(now);
        if self.trace.recording() {
            for e in node.take_events() {
                use remora_model::rnic::EventKind as K;
                match e.kind {
                    K::Posted => self.trace.wr_posted(n, e.qp.0, e.id, e.at),
                    K::Completed => self.trace.wr_completed(n, e.qp.0, e.id, e.at),
                    K::Transmitted | K::Executed => {}
                    other => self.trace.push(TraceEvent {
                        at: e.at,
                        dur: None,
                        node: n,
                        lane: format!("qp {}", e.qp.0),
                        name: format!("{other:?}"),
                    }),
                }
            }
        }
        while let Some((ready, pkt)) = self.nodes[n as usize].poll_transmit() {
            self.transmit(ready.max(self.now), pkt);
        }
        if let Some(t) = self.nodes[n as usize].poll_timeout() {
            let t = t.max(now);
            let queued = &mut self.timers_queued[n as usize];
            // Only the earliest deadline needs an event: when it fires, the node is
            // serviced again and its next deadline queued then.
            if queued.first().is_none_or(|&first| first > t) {
                queued.insert(t);
                self.push(t, Ev::NodeTimer(n));
            }
        }
        let mut i = 0;
        while i < self.cq_waiters.len() {
            let (wn, cq, _) = &self.cq_waiters[i];
            if *wn == n && self.nodes[n as usize].cq_len(*cq) > 0 {
                let waker = self.cq_waiters.swap_remove(i).2;
                self.wake.push(waker);
            } else {
                i += 1;
            }
        }
    }

    /// Link model: the sender's port serializes, the wire and switch add half the NIC
    /// round trip, the receiver's switch port serializes again (per-port queueing).
    #[inline(always)]
    fn transmit(&mut self, ready: Instant, pkt: Packet) {
        let (s, d) = (pkt.src as usize, pkt.dst as usize);
        assert!(d < self.nodes.len(), "packet to unknown node {d}");
        let wire = self.profile.wire_time(pkt.payload_len());
        let depart = ready.max(self.ports[s].egress_free);
        self.ports[s].egress_free = depart + wire;
        let start = (depart + self.profile.one_way()).max(self.ports[d].ingress_free);
        self.ports[d].ingress_free = start + wire;
        let arrive = start + wire;
        if self.trace.recording() {
            self.trace.push(TraceEvent {
                at: depart,
                dur: Some(arrive - depart),
                node: pkt.src,
                lane: format!("wire→{}", pkt.dst),
                name: body_name(&pkt.body).to_string(),
            });
        }
        let (life, dst_life) = (self.deaths[s].len() as u32, self.deaths[d].len() as u32);
        let slot = self.push_with(arrive, move || Ev::Deliver(pkt));
        self.sent[slot as usize] = (depart, life, dst_life);
    }

    /// The first instant at or after now at which node `n`'s threads run.
    fn cpu_ready(&mut self, n: NodeId) -> Instant {
        let now = self.now;
        match &mut self.cpu[n as usize] {
            Some(c) => c.ready(now),
            None => now,
        }
    }

    /// When `d` of node `n`'s CPU work started now finishes.
    fn cpu_finish(&mut self, n: NodeId, d: Duration) -> Instant {
        let now = self.now;
        match &mut self.cpu[n as usize] {
            Some(c) => c.finish(now, d),
            None => now + d,
        }
    }

    fn crash(&mut self, n: NodeId) {
        let now = self.now;
        self.trace.fold(&[4, now.as_nanos(), n as u64]);
        self.trace.push(TraceEvent {
            at: now,
            dur: None,
            node: n,
            lane: "power".into(),
            name: "power failure".into(),
        });
        self.nodes[n as usize].power_fail(now);
        self.crashed.push((n, now));
        self.deaths[n as usize].push(now);
        self.cq_waiters.retain(|(wn, _, _)| *wn != n);
    }
}

fn body_name(b: &Body) -> &'static str {
    match b {
        Body::Write { imm: None, .. } => "WRITE",
        Body::Write { .. } => "WRITE_IMM",
        Body::Send { .. } => "SEND",
        Body::Read { .. } => "READ",
        Body::Atomic {
            compare: Some(_), ..
        } => "CAS",
        Body::Atomic { .. } => "FETCH_ADD",
        Body::Flush { .. } => "FLUSH",
        Body::NonPostedWrite { atomic: true, .. } => "ATOMIC_WRITE",
        Body::NonPostedWrite { .. } => "NP_WRITE",
        Body::Ack => "ACK",
        Body::Nak(_) => "NAK",
        Body::ReadResp(_) => "READ_RESP",
        Body::AtomicResp(_) => "ATOMIC_RESP",
        Body::Done => "DONE",
        Body::SFlush { .. } => "SFLUSH",
        Body::Datagram { .. } => "UD_SEND",
    }
}

/// What a packet carries beyond its time, ends, PSN and length, as fingerprint words:
/// its kind, its header fields and a digest of its bytes, so that runs that send other
/// bytes, or other requests of the same size, have other fingerprints.
fn packet_words(pkt: &Packet) -> [u64; 4] {
    use remora_model::hierarchy::FlushPlacement;
    let imm = |v: &Option<u32>| v.map_or(0, |v| 1 << 32 | v as u64);
    let key = |rkey: &u32, more: u64| (*rkey as u64) << 32 ^ more;
    let (kind, a, b, data): (u64, u64, u64, &[u8]) = match &pkt.body {
        Body::Write {
            addr,
            rkey,
            data,
            imm: i,
            ack_req,
        } => (1, *addr, key(rkey, imm(i) << 1 | *ack_req as u64), data),
        Body::Send {
            data,
            imm: i,
            ack_req,
        } => (2, 0, imm(i) << 1 | *ack_req as u64, data),
        Body::Read { addr, rkey, len } => (3, *addr, key(rkey, *len as u64), &[]),
        Body::Atomic {
            addr,
            rkey,
            compare,
            operand,
        } => (
            4,
            *addr ^ compare.map_or(0, |c| c.rotate_left(17) ^ 1),
            key(rkey, 0) ^ *operand,
            &[],
        ),
        Body::Flush {
            addr,
            rkey,
            len,
            placement,
        } => (
            5 | (matches!(placement, FlushPlacement::Persistence) as u64) << 8,
            *addr,
            key(rkey, 0) ^ *len,
            &[],
        ),
        Body::NonPostedWrite {
            addr,
            rkey,
            data,
            atomic,
        } => (6 | (*atomic as u64) << 8, *addr, key(rkey, 0), data),
        Body::Ack => (7, 0, 0, &[]),
        Body::Nak(code) => (8, *code as u64, 0, &[]),
        Body::ReadResp(data) => (9, 0, 0, data),
        Body::AtomicResp(v) => (10, *v, 0, &[]),
        Body::Done => (11, 0, 0, &[]),
        Body::SFlush { send_psn } => (12, *send_psn as u64, 0, &[]),
        Body::Datagram { qkey, data, imm: i } => (13, *qkey as u64, imm(i), data),
    };
    [kind, a, b, trace::digest(data)]
}

pub(crate) struct Shared {
    world: RefCell<World>,
    exec: Executor,
    /// Live [`Sim`] handles. Tasks hold the world through their node handles, a cycle
    /// that would keep endless tasks (servers, garbage collectors) and the whole world
    /// alive forever; when the last `Sim` goes, nothing can run them again, so they are
    /// dropped and the cycle is broken.
    sims: Cell<usize>,
}

/// A deterministic simulation. Cheap to clone (a handle). When the last handle is
/// dropped, the simulation's remaining tasks are dropped with it.
pub struct Sim {
    shared: Rc<Shared>,
}

impl Clone for Sim {
    fn clone(&self) -> Self {
        self.shared.sims.set(self.shared.sims.get() + 1);
        Sim {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let left = self.shared.sims.get() - 1;
        self.shared.sims.set(left);
        if left == 0 {
            self.shared.exec.cancel_all();
        }
    }
}

impl Sim {
    /// An empty world with the given seed and latency profile.
    pub fn new(seed: u64, profile: LatencyProfile) -> Self {
        let world = World {
            now: Instant::ZERO,
            profile,
            rng: Prng::from_seed(seed),
            nodes: Vec::new(),
            names: Vec::new(),
            ports: Vec::new(),
            cpu: Vec::new(),
            timers_queued: Vec::new(),
            queue: BinaryHeap::new(),
            payloads: Vec::new(),
            sent: Vec::new(),
            free_slots: Vec::new(),
            seq: 0,
            events_processed: 0,
            event_crashes: Vec::new(),
            cq_waiters: Vec::new(),
            crashed: Vec::new(),
            deaths: Vec::new(),
            dirty: Vec::new(),
            dirty_spare: Vec::new(),
            wake: Vec::new(),
            trace: Trace::default(),
        };
        Sim {
            shared: Rc::new(Shared {
                world: RefCell::new(world),
                exec: Executor::default(),
                sims: Cell::new(1),
            }),
        }
    }

    /// Adds a node (machine) with its own RNIC and memory system.
    pub fn add_node(&self, name: &str, config: ServerConfig) -> NodeHandle {
        let mut w = self.shared.world.borrow_mut();
        let id = w.nodes.len() as NodeId;
        let rng = w.rng.fork();
        let mut rnic = Rnic::new(id, config, &w.profile, rng);
        rnic.record_events(w.trace.recording());
        w.nodes.push(rnic);
        w.names.push(name.to_string());
        w.ports.push(Port::default());
        w.cpu.push(None);
        w.timers_queued.push(BTreeSet::new());
        w.deaths.push(Vec::new());
        NodeHandle {
            shared: self.shared.clone(),
            id,
        }
    }

    /// Connects two queue pairs (what a connection manager does out of band).
    pub fn connect(
        &self,
        a: (&NodeHandle, QpNum),
        b: (&NodeHandle, QpNum),
    ) -> Result<(), VerbsError> {
        let mut w = self.shared.world.borrow_mut();
        w.nodes[a.0.id as usize].connect(a.1, b.0.id, b.1)?;
        w.nodes[b.0.id as usize].connect(b.1, a.0.id, a.1)
    }

    /// Puts a CPU-bound background program on node `n` from now on (`None` removes it):
    /// its threads run only in the on windows [`CpuLoad`] describes (see [`cpu`]). Its
    /// windows come from a stream forked off the world's, so call it after adding every
    /// node (forking shifts the streams of nodes added later).
    pub fn set_cpu_load(&self, n: NodeId, load: Option<CpuLoad>) {
        let mut w = self.shared.world.borrow_mut();
        let now = w.now;
        let sched = load.map(|l| CpuSched::new(l, w.rng.fork(), now));
        w.cpu[n as usize] = sched;
    }

    /// Installs a fault plan.
    pub fn set_faults(&self, plan: &FaultPlan) {
        let mut w = self.shared.world.borrow_mut();
        for c in &plan.crashes {
            match c.at {
                CrashAt::Time(t) => w.push(t, Ev::Crash(c.node)),
                CrashAt::Event(_) => w.event_crashes.push(*c),
            }
        }
    }

    /// Starts recording a timeline (before adding nodes, to capture everything).
    pub fn record_trace(&self, on: bool) {
        let mut w = self.shared.world.borrow_mut();
        w.trace.set_recording(on);
        for n in &mut w.nodes {
            n.record_events(on);
        }
    }

    /// Virtual time now.
    pub fn now(&self) -> Instant {
        self.shared.world.borrow().now
    }

    /// The run's fingerprint so far.
    pub fn fingerprint(&self) -> u64 {
        self.shared.world.borrow().trace.fingerprint()
    }

    /// Events processed so far.
    pub fn events_processed(&self) -> u64 {
        self.shared.world.borrow().events_processed
    }

    /// Nodes that lost power, with when.
    pub fn crashed(&self) -> Vec<(NodeId, Instant)> {
        self.shared.world.borrow().crashed.clone()
    }

    /// Runs `f` on the recorded trace.
    pub fn with_trace<R>(&self, f: impl FnOnce(&Trace) -> R) -> R {
        f(&self.shared.world.borrow().trace)
    }

    /// The timeline as Chrome trace-event JSON.
    pub fn chrome_trace(&self) -> String {
        let w = self.shared.world.borrow();
        let names = w
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (i as NodeId, n.clone()))
            .collect::<BTreeMap<_, _>>();
        w.trace.to_chrome_json(&names)
    }

    /// Gives `f` the model of node `n` at the current time (inspection in tests and
    /// checkers: crash images, hierarchy state).
    pub fn with_rnic<R>(&self, n: NodeId, f: impl FnOnce(&mut Rnic, Instant) -> R) -> R {
        let mut w = self.shared.world.borrow_mut();
        let now = w.now;
        f(&mut w.nodes[n as usize], now)
    }

    /// Crashes node `n` now (power failure): its tasks are dropped.
    pub fn crash_now(&self, n: NodeId) {
        self.shared.world.borrow_mut().crash(n);
        self.shared.exec.cancel_owned_by(n);
    }

    /// Powers node `n` back on with an empty RNIC over its surviving PM.
    pub fn restart(&self, n: NodeId) {
        let mut w = self.shared.world.borrow_mut();
        let now = w.now;
        w.nodes[n as usize].restart(now);
        w.timers_queued[n as usize].clear();
    }

    /// Spawns a task belonging to `node` (it dies if the node loses power).
    pub fn spawn_on(&self, node: &NodeHandle, fut: impl Future<Output = ()> + 'static) {
        self.shared.exec.spawn(Some(node.id), Box::pin(fut));
    }

    /// Spawns a task that belongs to no node (a test driver, an observer).
    pub fn spawn(&self, fut: impl Future<Output = ()> + 'static) {
        self.shared.exec.spawn(None, Box::pin(fut));
    }

    /// Runs until nothing is left to do (no runnable task and no event), or until virtual
    /// time would pass `limit`. Returns the number of events processed.
    pub fn run_until(&self, limit: Instant) -> u64 {
        let start = self.events_processed();
        while self.step(limit) {}
        self.events_processed() - start
    }

    /// Runs until nothing is left to do.
    pub fn run(&self) -> u64 {
        self.run_until(Instant::NEVER)
    }

    /// Runs `fut` to completion (with every other task) and returns its output, or `None`
    /// if the world ran out of work (or reached `limit`) first.
    pub fn block_on<T: 'static>(
        &self,
        limit: Instant,
        fut: impl Future<Output = T> + 'static,
    ) -> Option<T> {
        self.block_on_owned(None, limit, fut)
    }

    /// [`block_on`](Self::block_on) with `fut` a task of `node`: a power failure of the
    /// node ends it there, as it ends the node's other tasks, and gives `None` (a server's
    /// recovery that a crash cuts short stops where the crash found it).
    pub fn block_on_node<T: 'static>(
        &self,
        node: &NodeHandle,
        limit: Instant,
        fut: impl Future<Output = T> + 'static,
    ) -> Option<T> {
        self.block_on_owned(Some(node.id), limit, fut)
    }

    fn block_on_owned<T: 'static>(
        &self,
        owner: Option<NodeId>,
        limit: Instant,
        fut: impl Future<Output = T> + 'static,
    ) -> Option<T> {
        let out = Rc::new(RefCell::new(None));
        let o = out.clone();
        self.shared.exec.spawn(
            owner,
            Box::pin(async move {
                *o.borrow_mut() = Some(fut.await);
            }),
        );
        loop {
            self.settle();
            if out.borrow().is_some() || !self.process_event(limit) {
                break;
            }
        }
        let v = out.borrow_mut().take();
        v
    }

    /// One step: run every runnable task and let the nodes they used act (doorbells,
    /// transmissions, timers), then process one event. False when idle.
    fn step(&self, limit: Instant) -> bool {
        self.settle();
        self.process_event(limit)
    }

    /// Runs every runnable task and lets the nodes they used act, until nothing is
    /// runnable at the current instant.
    fn settle(&self) {
        loop {
            self.shared.exec.run_ready();
            {
                let mut w = self.shared.world.borrow_mut();
                if w.dirty.is_empty() {
                    break; // no task used a node: nothing to service, nobody to wake
                }
                let mut dirty = std::mem::take(&mut w.dirty_spare);
                std::mem::swap(&mut dirty, &mut w.dirty);
                dirty.sort_unstable();
                dirty.dedup();
                for &n in &dirty {
                    w.service(n);
                }
                dirty.clear();
                w.dirty_spare = dirty;
            }
            if !self.wake_collected() {
                break;
            }
        }
    }

    /// Calls the wakers that servicing the nodes collected, with the world no longer
    /// borrowed (a waker may run code that borrows it). False when there were none.
    fn wake_collected(&self) -> bool {
        let mut wake = {
            let mut w = self.shared.world.borrow_mut();
            if w.wake.is_empty() {
                return false;
            }
            std::mem::take(&mut w.wake)
        };
        for waker in wake.drain(..) {
            waker.wake();
        }
        // Give the buffer back unless a waker queued more meanwhile.
        let mut w = self.shared.world.borrow_mut();
        if w.wake.is_empty() {
            w.wake = wake;
        }
        true
    }

    /// Processes the next event unless it lies beyond `limit`. False when there is none.
    fn process_event(&self, limit: Instant) -> bool {
        {
            let mut w = self.shared.world.borrow_mut();
            let Some(&Reverse(key)) = w.queue.peek() else {
                return false;
            };
            let at = key.at();
            if at > limit {
                return false;
            }
            let k = w.events_processed;
            // Every crash planned before this event lands (two nodes may share one), in
            // the plan's order.
            while let Some(pos) = w
                .event_crashes
                .iter()
                .position(|c| c.at == CrashAt::Event(k))
            {
                let c = w.event_crashes.remove(pos);
                w.crash(c.node);
                drop(w);
                self.shared.exec.cancel_owned_by(c.node);
                w = self.shared.world.borrow_mut();
            }
            let slot = w.queue.pop().expect("peeked").0.slot();
            w.now = at;
            w.events_processed += 1;
            // A packet is handled where it lies in its slot (no copy of it out).
            let World {
                payloads,
                sent,
                nodes,
                trace,
                deaths,
                ..
            } = &mut *w;
            if let Some(Ev::Deliver(pkt)) = &payloads[slot as usize] {
                let (depart, life, dst_life) = sent[slot as usize];
                let (dst, heap) = (pkt.dst, pkt.holds_heap());
                let [kind, a, b, bytes] = packet_words(pkt);
                trace.fold(&[
                    1,
                    at.as_nanos(),
                    pkt.src as u64,
                    dst as u64,
                    pkt.psn as u64,
                    pkt.payload_len(),
                    (pkt.src_qp.0 as u64) << 32 | pkt.dst_qp.0 as u64,
                    kind,
                    a,
                    b,
                    bytes,
                ]);
                // The RNIC computes a response's departure ahead of time; if its node lost
                // power before that instant, the packet never left.
                // Nor does one reach a receiver that lost power while it was on its way.
                let lost = deaths[pkt.src as usize]
                    .get(life as usize)
                    .is_some_and(|&c| c < depart)
                    || deaths[dst as usize].len() as u32 != dst_life;
                if !lost {
                    nodes[dst as usize].handle_packet(at, pkt);
                }
                // A delivered packet that owns no heap memory stays in its slot until the
                // slot is reused (overwritten then at no extra cost): clearing the slot
                // is a copy of the whole event per packet. One that shares a payload
                // buffer lets go of it now.
                if heap {
                    payloads[slot as usize] = None;
                }
                w.free_slots.push(slot);
                if !lost {
                    w.service(dst);
                }
                drop(w);
                self.wake_collected();
                return true;
            }
            let ev = w.payloads[slot as usize]
                .take()
                .expect("queued event has a payload");
            w.free_slots.push(slot);
            match ev {
                Ev::Deliver(_) => unreachable!("handled in its slot above"),
                Ev::NodeTimer(n) => {
                    w.trace.fold(&[2, at.as_nanos(), n as u64]);
                    w.timers_queued[n as usize].remove(&at);
                    if w.nodes[n as usize].is_up() {
                        w.nodes[n as usize].handle_timeout(at);
                        w.service(n);
                    }
                }
                Ev::Wake(waker) => {
                    w.trace.fold(&[3, at.as_nanos()]);
                    w.wake.push(waker);
                }
                Ev::Crash(n) => {
                    w.crash(n);
                    drop(w);
                    self.shared.exec.cancel_owned_by(n);
                }
            }
        }
        self.wake_collected();
        true
    }
}

/// One node as application code sees it: implements [`remora_verbs::Verbs`] on virtual
/// time. Cheap to clone.
#[derive(Clone)]
pub struct NodeHandle {
    shared: Rc<Shared>,
    id: NodeId,
}

impl NodeHandle {
    /// The node id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Runs a verb on this node's RNIC. The RNIC acts on it (transmits, completes) when
    /// the calling task yields, as a real RNIC acts on a doorbell asynchronously.
    #[inline(always)]
    fn with<R>(&self, f: impl FnOnce(&mut Rnic, Instant) -> R) -> R {
        let mut w = self.shared.world.borrow_mut();
        let now = w.now;
        let r = f(&mut w.nodes[self.id as usize], now);
        if w.dirty.last() != Some(&self.id) {
            w.dirty.push(self.id);
        }
        r
    }

    /// Moves queue pair `qp` to the error state, as a connection manager does when the
    /// peer's connection goes away (the soft RNIC, when a client's TCP connection closes):
    /// its outstanding requests and posted receives complete with `WrFlushErr`, and the
    /// tasks waiting on them wake.
    pub fn fail_qp(&self, qp: QpNum) -> Result<(), VerbsError> {
        self.with(|r, now| r.fail_qp(now, qp))
    }

    /// Waits until this node's threads have the CPU (at once unless a background load
    /// holds it, [`Sim::set_cpu_load`]).
    fn cpu_ready(&self) -> Sleep {
        let at = self.shared.world.borrow_mut().cpu_ready(self.id);
        self.sleep_until(at)
    }

    /// Waits until virtual time `at`.
    pub fn sleep_until(&self, at: Instant) -> Sleep {
        Sleep {
            shared: self.shared.clone(),
            at,
            armed: false,
        }
    }

    /// Waits for `d`.
    pub fn sleep(&self, d: Duration) -> Sleep {
        let at = self.shared.world.borrow().now + d;
        self.sleep_until(at)
    }

    /// Records a span on this node's timeline (shown in Perfetto).
    pub fn trace_span(&self, lane: &str, name: &str, start: Instant, end: Instant) {
        let mut w = self.shared.world.borrow_mut();
        if !w.trace.recording() {
            return;
        }
        w.trace.push(TraceEvent {
            at: start,
            dur: Some(end.saturating_since(start)),
            node: self.id,
            lane: lane.into(),
            name: name.into(),
        });
    }

    /// How long a packet reaching node `n`'s switch port now would queue there before
    /// its serialization toward `n` starts (the port's backlog; zero when idle). What a
    /// lossless fabric's link-level flow control reacts to: a sender told the port is
    /// full pauses (seed 003 §5.5's congested link, `remora_rpc`'s background sender).
    pub fn port_backlog(&self, n: NodeId) -> Duration {
        let w = self.shared.world.borrow();
        w.ports[n as usize].ingress_free.saturating_since(w.now)
    }

    /// The latency profile in force.
    pub fn profile(&self) -> LatencyProfile {
        self.shared.world.borrow().profile.clone()
    }
}

/// A future that completes at a virtual time.
pub struct Sleep {
    shared: Rc<Shared>,
    at: Instant,
    armed: bool,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut w = self.shared.world.borrow_mut();
        if w.now >= self.at {
            return Poll::Ready(());
        }
        if !self.armed {
            let at = self.at;
            w.push(at, Ev::Wake(cx.waker().clone()));
            drop(w);
            self.armed = true;
        }
        Poll::Pending
    }
}

struct WaitCq {
    shared: Rc<Shared>,
    node: NodeId,
    cq: CqId,
}

impl Future for WaitCq {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut w = self.shared.world.borrow_mut();
        if w.nodes[self.node as usize].cq_len(self.cq) > 0 {
            // A thread woken while a background program has the CPU runs when it gets
            // the CPU back (a loaded node, `Sim::set_cpu_load`).
            let at = w.cpu_ready(self.node);
            if at > w.now {
                w.push(at, Ev::Wake(cx.waker().clone()));
                return Poll::Pending;
            }
            return Poll::Ready(());
        }
        w.cq_waiters.push((self.node, self.cq, cx.waker().clone()));
        Poll::Pending
    }
}

impl remora_verbs::Verbs for NodeHandle {
    fn node(&self) -> NodeId {
        self.id
    }
    fn now(&self) -> Instant {
        self.shared.world.borrow().now
    }
    fn config(&self) -> ServerConfig {
        self.shared.world.borrow().nodes[self.id as usize].config()
    }
    fn alloc(&self, space: Space, len: u64, align: u64) -> u64 {
        self.with(|r, _| r.alloc(space, len, align))
    }
    fn alloc_pd(&self) -> Result<PdId, VerbsError> {
        self.with(|r, _| {
            if r.is_up() {
                Ok(r.alloc_pd())
            } else {
                Err(VerbsError::NodeDown(r.id()))
            }
        })
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
        self.with(|r, _| r.dereg_mr(mr.lkey))
    }
    fn dealloc_pd(&self, pd: PdId) -> Result<(), VerbsError> {
        self.with(|r, _| r.dealloc_pd(pd))
    }
    fn destroy_qp(&self, qp: QpNum) -> Result<(), VerbsError> {
        self.with(|r, now| r.destroy_qp(now, qp))
    }
    fn destroy_cq(&self, cq: CqId) -> Result<(), VerbsError> {
        self.with(|r, _| r.destroy_cq(cq))
    }
    #[inline(always)]
    fn post_send(&self, qp: QpNum, wr: SendWr) -> Result<(), VerbsError> {
        self.with(|r, now| r.post_send(now, qp, wr))
    }
    fn post_recv(&self, qp: QpNum, wr: RecvWr) -> Result<(), VerbsError> {
        self.with(|r, now| r.post_recv(now, qp, wr))
    }
    fn poll_cq(&self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        self.shared.world.borrow_mut().nodes[self.id as usize].poll_cq(cq, max, out)
    }
    fn poll_one(&self, cq: CqId) -> Option<WorkCompletion> {
        self.shared.world.borrow_mut().nodes[self.id as usize].poll_one(cq)
    }
    fn wait_cq(&self, cq: CqId) -> impl Future<Output = ()> {
        WaitCq {
            shared: self.shared.clone(),
            node: self.id,
            cq,
        }
    }
    fn load(&self, space: Space, addr: u64, buf: &mut [u8]) {
        self.with(|r, now| r.cpu_load(now, space, addr, buf))
    }
    fn store(&self, space: Space, addr: u64, data: &[u8]) {
        self.with(|r, now| r.cpu_store(now, space, addr, data))
    }
    async fn persist_local(&self, addr: u64, len: u64) {
        self.cpu_ready().await;
        let start = self.now();
        // The fence is issued once the write-backs are; one wait covers both.
        let done = self.with(|r, now| {
            let issue = r.hierarchy().clwb(now, addr, len);
            r.hierarchy().sfence(now + issue)
        });
        self.sleep_until(done).await;
        self.trace_span("cpu", "clwb+sfence", start, self.now());
    }
    async fn memcpy(&self, dst: (Space, u64), src: (Space, u64), len: u64) {
        self.cpu_ready().await;
        let start = self.now();
        let cost = self.shared.world.borrow().profile.memcpy_time(len);
        let mut scratch = remora_model::bytes::Scratch::new();
        let buf = scratch.get(len as usize);
        self.with(|r, now| r.cpu_load(now, src.0, src.1, buf));
        let end = self.shared.world.borrow_mut().cpu_finish(self.id, cost);
        self.sleep_until(end).await;
        // The stores happen as the copy finishes: a crash mid-copy finds none of them.
        self.with(|r, now| r.cpu_store(now, dst.0, dst.1, buf));
        self.trace_span("cpu", "memcpy", start, self.now());
    }
    async fn compute(&self, d: Duration) {
        let start = self.now();
        // Work progresses only while the node's threads have the CPU (`set_cpu_load`).
        let end = self.shared.world.borrow_mut().cpu_finish(self.id, d);
        self.sleep_until(end).await;
        self.trace_span("cpu", "compute", start, self.now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packed keys sort as (time, sequence) did, and give the slot back.
    #[test]
    fn event_keys_order_by_time_then_sequence() {
        let keys = [
            (5, 9, 3),
            (5, 10, 1),
            (4, 200, (1 << 24) - 1),
            (u64::MAX - 1, 1, 0),
            (0, (1 << 40) - 1, 7),
            (5, 9, 2),
        ];
        let mut packed: Vec<EventKey> = keys
            .iter()
            .map(|&(t, s, slot)| EventKey::new(Instant::from_nanos(t), s, slot))
            .collect();
        let mut plain = keys.to_vec();
        packed.sort();
        plain.sort();
        for (k, &(t, _, slot)) in packed.iter().zip(&plain) {
            assert_eq!(k.at(), Instant::from_nanos(t));
            assert_eq!(k.slot(), slot);
        }
    }

    #[test]
    #[should_panic(expected = "event queue beyond")]
    fn an_event_key_refuses_a_slot_it_cannot_hold() {
        let _ = EventKey::new(Instant::ZERO, 1, 1 << 24);
    }
}
