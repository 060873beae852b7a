//! Shared rig for the `ordering` and `verbs_errors` tests: one server node and one client node
//! joined by a reliable connection, with registered memory on both sides, work-request
//! builders, and observers that watch the server's memory and the client's completions on
//! virtual time.
#![allow(dead_code)]

use remora_model::config::*;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::RnicStats;
use remora_model::time::{Duration, Instant};
use remora_sim::{NodeHandle, Sim};
use remora_verbs::*;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Server PM registered with every right.
pub const PM_LEN: u64 = 1 << 20;
/// Server DRAM for receive buffers (LOCAL_WRITE only).
pub const RECV_LEN: u64 = 1 << 16;
/// Client DRAM for SGE payloads and READ/atomic results.
pub const LOCAL_LEN: u64 = 1 << 20;

/// Completions with the virtual time at which the application saw them.
pub type Completions = Rc<RefCell<Vec<(WorkCompletion, Instant)>>>;

/// A configuration by its seed 000 Table 1 name, e.g. `DMP+noDDIO+PM-RQWRB@iwarp`.
pub fn cfg(name: &str) -> ServerConfig {
    name.parse().unwrap()
}

/// How to build a [`Pair`].
#[derive(Clone)]
pub struct Opts {
    pub seed: u64,
    pub server: ServerConfig,
    pub client: ServerConfig,
    pub server_attr: QpAttr,
    pub client_attr: QpAttr,
    pub profile: LatencyProfile,
}

impl Opts {
    /// Server and client with the same configuration, default QPs and profile.
    pub fn new(seed: u64, config: ServerConfig) -> Self {
        Opts {
            seed,
            server: config,
            client: config,
            server_attr: QpAttr::default(),
            client_attr: QpAttr::default(),
            profile: LatencyProfile::default_profile(),
        }
    }
    pub fn client(mut self, c: ServerConfig) -> Self {
        self.client = c;
        self
    }
    pub fn server_attr(mut self, a: QpAttr) -> Self {
        self.server_attr = a;
        self
    }
    pub fn client_attr(mut self, a: QpAttr) -> Self {
        self.client_attr = a;
        self
    }
    pub fn profile(mut self, p: LatencyProfile) -> Self {
        self.profile = p;
        self
    }
    pub fn build(self) -> Pair {
        Pair::build(self)
    }
}

/// A server and a client with one connected QP each.
pub struct Pair {
    pub sim: Sim,
    pub profile: LatencyProfile,
    pub server: NodeHandle,
    pub client: NodeHandle,
    pub spd: PdId,
    /// Server PM, [`PM_LEN`] bytes, `Access::ALL`.
    pub mr: MrInfo,
    /// Server DRAM for receive buffers, [`RECV_LEN`] bytes, `LOCAL_WRITE`.
    pub rmr: MrInfo,
    pub scq: CqId,
    pub sqp: QpNum,
    pub cpd: PdId,
    /// Client DRAM, [`LOCAL_LEN`] bytes, `Access::ALL`.
    pub lmr: MrInfo,
    pub ccq: CqId,
    pub cqp: QpNum,
    client_wcs: RefCell<Option<Completions>>,
}

impl Pair {
    /// Server and client with `config`, seed `seed`, the default profile.
    pub fn new(seed: u64, config: ServerConfig) -> Pair {
        Opts::new(seed, config).build()
    }

    fn build(o: Opts) -> Pair {
        let sim = Sim::new(o.seed, o.profile.clone());
        let server = sim.add_node("server", o.server);
        let client = sim.add_node("client", o.client);
        let spd = server.alloc_pd().unwrap();
        let base = server.alloc(Space::Pm, PM_LEN, 4096);
        let mr = server
            .reg_mr(spd, Space::Pm, base, PM_LEN, Access::ALL)
            .unwrap();
        let rbase = server.alloc(Space::Dram, RECV_LEN, 4096);
        let rmr = server
            .reg_mr(spd, Space::Dram, rbase, RECV_LEN, Access::LOCAL_WRITE)
            .unwrap();
        let scq = server.create_cq(4096).unwrap();
        let sqp = server.create_qp(spd, scq, scq, o.server_attr).unwrap();
        let cpd = client.alloc_pd().unwrap();
        let lbase = client.alloc(Space::Dram, LOCAL_LEN, 4096);
        let lmr = client
            .reg_mr(cpd, Space::Dram, lbase, LOCAL_LEN, Access::ALL)
            .unwrap();
        let ccq = client.create_cq(4096).unwrap();
        let cqp = client.create_qp(cpd, ccq, ccq, o.client_attr).unwrap();
        sim.connect((&client, cqp), (&server, sqp)).unwrap();
        Pair {
            sim,
            profile: o.profile,
            server,
            client,
            spd,
            mr,
            rmr,
            scq,
            sqp,
            cpd,
            lmr,
            ccq,
            cqp,
            client_wcs: RefCell::new(None),
        }
    }

    /// A second connection between the same nodes (same PDs, so the same MRs work):
    /// returns (client QP, client CQ, server QP, server CQ).
    pub fn second_connection(&self) -> (QpNum, CqId, QpNum, CqId) {
        let scq = self.server.create_cq(256).unwrap();
        let sqp = self
            .server
            .create_qp(self.spd, scq, scq, QpAttr::default())
            .unwrap();
        let ccq = self.client.create_cq(256).unwrap();
        let cqp = self
            .client
            .create_qp(self.cpd, ccq, ccq, QpAttr::default())
            .unwrap();
        self.sim
            .connect((&self.client, cqp), (&self.server, sqp))
            .unwrap();
        (cqp, ccq, sqp, scq)
    }

    // ------------------------------------------------------------ work requests

    pub fn remote(&self, addr: u64) -> Option<Remote> {
        Some(Remote {
            addr,
            rkey: self.mr.rkey,
        })
    }
    /// A local SGE in the client's DRAM region.
    pub fn local(&self, addr: u64, len: u32) -> Sge {
        Sge {
            addr,
            len,
            lkey: self.lmr.lkey,
        }
    }
    /// Signaled, unfenced inline WRITE.
    pub fn write(&self, id: u64, addr: u64, data: Vec<u8>) -> SendWr {
        SendWr::new(id, Opcode::Write, Payload::inline(data), self.remote(addr))
    }
    pub fn write_imm(&self, id: u64, addr: u64, data: Vec<u8>, imm: u32) -> SendWr {
        SendWr::new(
            id,
            Opcode::WriteWithImm(imm),
            Payload::inline(data),
            self.remote(addr),
        )
    }
    pub fn send(&self, id: u64, data: Vec<u8>) -> SendWr {
        SendWr::new(id, Opcode::Send, Payload::inline(data), None)
    }
    pub fn send_imm(&self, id: u64, data: Vec<u8>, imm: u32) -> SendWr {
        SendWr::new(id, Opcode::SendWithImm(imm), Payload::inline(data), None)
    }
    /// READ of `len` bytes at remote `addr` into client `laddr`.
    pub fn read(&self, id: u64, addr: u64, len: u32, laddr: u64) -> SendWr {
        SendWr::new(
            id,
            Opcode::Read,
            Payload::Sge(self.local(laddr, len)),
            self.remote(addr),
        )
    }
    pub fn cas(&self, id: u64, addr: u64, compare: u64, swap: u64, laddr: u64) -> SendWr {
        SendWr::new(
            id,
            Opcode::CompareSwap { compare, swap },
            Payload::Sge(self.local(laddr, 8)),
            self.remote(addr),
        )
    }
    pub fn faa(&self, id: u64, addr: u64, add: u64, laddr: u64) -> SendWr {
        SendWr::new(
            id,
            Opcode::FetchAdd { add },
            Payload::Sge(self.local(laddr, 8)),
            self.remote(addr),
        )
    }
    pub fn flush(&self, id: u64, addr: u64, len: u64, placement: FlushPlacement) -> SendWr {
        SendWr::new(
            id,
            Opcode::Flush { placement, len },
            Payload::None,
            self.remote(addr),
        )
    }
    pub fn atomic_write(&self, id: u64, addr: u64, value: u64) -> SendWr {
        SendWr::new(
            id,
            Opcode::AtomicWrite { value },
            Payload::None,
            self.remote(addr),
        )
    }
    /// A receive buffer in the server's receive region at `off`.
    pub fn recv(&self, id: u64, off: u64, len: u32) -> RecvWr {
        RecvWr {
            wr_id: id,
            sge: Sge {
                addr: self.rmr.addr + off,
                len,
                lkey: self.rmr.lkey,
            },
        }
    }

    // ------------------------------------------------------------ acting

    /// Posts `wrs` on the client QP (from outside any task: the RNIC acts on the next step).
    pub fn post_all(&self, wrs: Vec<SendWr>) {
        for wr in wrs {
            self.client.post_send(self.cqp, wr).unwrap();
        }
    }

    /// The client's completions as a task sees them (with times), collected from now on.
    pub fn client_completions(&self) -> Completions {
        self.client_wcs
            .borrow_mut()
            .get_or_insert_with(|| collect(&self.sim, &self.client, self.ccq))
            .clone()
    }

    /// Posts `wrs` back to back, runs the simulation until it is idle and returns the
    /// client completions that arrived meanwhile.
    pub fn run_ops(&self, wrs: Vec<SendWr>) -> Vec<(WorkCompletion, Instant)> {
        let wcs = self.client_completions();
        let start = wcs.borrow().len();
        self.post_all(wrs);
        self.sim.run();
        let out = wcs.borrow()[start..].to_vec();
        out
    }

    // ------------------------------------------------------------ observing

    /// What a CPU load on the server returns now.
    pub fn server_bytes(&self, space: Space, addr: u64, len: usize) -> Vec<u8> {
        peek(&self.sim, self.server.id(), space, addr, len)
    }
    /// Server PM bytes visible now.
    pub fn pm(&self, addr: u64, len: usize) -> Vec<u8> {
        self.server_bytes(Space::Pm, addr, len)
    }
    /// What a CPU load on the client returns now.
    pub fn client_bytes(&self, addr: u64, len: usize) -> Vec<u8> {
        peek(&self.sim, self.client.id(), Space::Dram, addr, len)
    }
    /// What a power failure of the server now would leave at `addr`.
    pub fn durable(&self, addr: u64, len: usize) -> Vec<u8> {
        self.sim.with_rnic(self.server.id(), |r, now| {
            r.crash_image(now).read_vec(addr, len)
        })
    }
    pub fn server_stats(&self) -> RnicStats {
        self.sim.with_rnic(self.server.id(), |r, _| r.stats())
    }
    /// Nanoseconds of the profile's NIC-to-NIC round trip.
    pub fn rtt(&self) -> Duration {
        Duration::from_nanos(self.profile.network.nic_rtt_ns)
    }
    pub fn one_way(&self) -> Duration {
        self.profile.one_way()
    }
}

/// A CPU load on node `n` at the simulation's current time, without touching the node's
/// doorbells (safe to call from a task or from the test body).
pub fn peek(sim: &Sim, n: NodeId, space: Space, addr: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    sim.with_rnic(n, |r, now| r.cpu_load(now, space, addr, &mut buf));
    buf
}

/// Spawns a task (owned by no node) that takes every completion of `node`'s `cq` as soon
/// as it is available and records it with the time.
pub fn collect(sim: &Sim, node: &NodeHandle, cq: CqId) -> Completions {
    let out: Completions = Rc::new(RefCell::new(Vec::new()));
    let (o, n) = (out.clone(), node.clone());
    sim.spawn(async move {
        loop {
            let wc = next_completion(&n, cq).await;
            let t = n.now();
            o.borrow_mut().push((wc, t));
        }
    });
    out
}

/// Spawns a task that loads `len` bytes at `addr` on `node` every `step` until `pred`
/// holds (or `until` passes) and records the first time it held.
#[allow(clippy::too_many_arguments)]
pub fn watch(
    sim: &Sim,
    node: &NodeHandle,
    space: Space,
    addr: u64,
    len: usize,
    step: Duration,
    until: Instant,
    pred: impl Fn(&[u8]) -> bool + 'static,
) -> Rc<Cell<Option<Instant>>> {
    let seen = Rc::new(Cell::new(None));
    let (s, n, sm) = (seen.clone(), node.clone(), sim.clone());
    sim.spawn(async move {
        loop {
            let buf = peek(&sm, n.id(), space, addr, len);
            if pred(&buf) {
                s.set(Some(n.now()));
                return;
            }
            if n.now() >= until {
                return;
            }
            n.sleep(step).await;
        }
    });
    seen
}

/// A task that makes virtual time advance in `step`s until `stop` is set, so that
/// `run_until(t)` leaves the simulation exactly at `t`.
pub fn ticker(sim: &Sim, node: &NodeHandle, step: Duration) -> Rc<Cell<bool>> {
    let stop = Rc::new(Cell::new(false));
    let (s, n) = (stop.clone(), node.clone());
    sim.spawn(async move {
        while !s.get() {
            n.sleep(step).await;
        }
    });
    stop
}

/// `len` bytes of a recognisable, never-zero pattern.
pub fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u8).wrapping_mul(31) ^ salt) | 1)
        .collect()
}

pub fn u64_at(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

pub fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

pub fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}
