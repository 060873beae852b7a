//! Shared rig for `flush_primitives.rs` and `unreliable.rs`: nodes with registered PM and
//! DRAM, one send and one receive CQ each, QPs of any service type, and probes of what a
//! power failure would leave.
#![allow(dead_code)]

use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_sim::{NodeHandle, Sim};
use remora_verbs::*;

/// Bytes of PM and of DRAM each node registers.
pub const REGION: u64 = 1 << 20;

pub fn cfg(name: &str) -> ServerConfig {
    name.parse().unwrap()
}

/// One node: PM and DRAM regions with every right, a send CQ and a receive CQ.
#[derive(Clone)]
pub struct Node {
    pub h: NodeHandle,
    pub pd: PdId,
    pub pm: MrInfo,
    pub dram: MrInfo,
    pub scq: CqId,
    pub rcq: CqId,
}

impl Node {
    pub fn new(sim: &Sim, name: &str, config: ServerConfig) -> Node {
        let h = sim.add_node(name, config);
        let pd = h.alloc_pd().unwrap();
        let a = h.alloc(Space::Pm, REGION, 4096);
        let pm = h.reg_mr(pd, Space::Pm, a, REGION, Access::ALL).unwrap();
        let a = h.alloc(Space::Dram, REGION, 4096);
        let dram = h.reg_mr(pd, Space::Dram, a, REGION, Access::ALL).unwrap();
        let scq = h.create_cq(4096).unwrap();
        let rcq = h.create_cq(4096).unwrap();
        Node {
            h,
            pd,
            pm,
            dram,
            scq,
            rcq,
        }
    }
    pub fn id(&self) -> NodeId {
        self.h.id()
    }
    pub fn qp(&self, qp_type: QpType, qkey: u32) -> QpNum {
        let attr = QpAttr {
            qp_type,
            qkey,
            ..QpAttr::default()
        };
        self.h.create_qp(self.pd, self.scq, self.rcq, attr).unwrap()
    }
    /// An SGE over this node's PM (`pm`) or DRAM at `off`.
    pub fn sge(&self, pm: bool, off: u64, len: u32) -> Sge {
        let mr = if pm { self.pm } else { self.dram };
        Sge {
            addr: mr.addr + off,
            len,
            lkey: mr.lkey,
        }
    }
    pub fn recv(&self, qp: QpNum, id: u64, sge: Sge) {
        self.h.post_recv(qp, RecvWr { wr_id: id, sge }).unwrap();
    }
    pub fn remote_pm(&self, off: u64) -> Remote {
        Remote {
            addr: self.pm.addr + off,
            rkey: self.pm.rkey,
        }
    }
}

/// A client and a server, with one QP each of the same service type (RC and UC
/// connected, UD not).
pub struct Net {
    pub sim: Sim,
    pub server: Node,
    pub client: Node,
    pub sqp: QpNum,
    pub cqp: QpNum,
    pub qkey: u32,
}

impl Net {
    pub fn new(seed: u64, server: ServerConfig, t: QpType) -> Net {
        Self::with_profile(seed, server, t, LatencyProfile::default_profile())
    }
    pub fn with_profile(seed: u64, config: ServerConfig, t: QpType, p: LatencyProfile) -> Net {
        let sim = Sim::new(seed, p);
        let server = Node::new(&sim, "server", config);
        let client = Node::new(&sim, "client", config);
        let qkey = 0x5eed;
        let sqp = server.qp(t, qkey);
        let cqp = client.qp(t, qkey);
        if t != QpType::Ud {
            sim.connect((&client.h, cqp), (&server.h, sqp)).unwrap();
        }
        Net {
            sim,
            server,
            client,
            sqp,
            cqp,
            qkey,
        }
    }
    /// The UD destination of the server's QP.
    pub fn to_server(&self) -> UdDest {
        UdDest {
            node: self.server.id(),
            qpn: self.sqp,
            qkey: self.qkey,
        }
    }
    pub fn to_client(&self) -> UdDest {
        UdDest {
            node: self.client.id(),
            qpn: self.cqp,
            qkey: self.qkey,
        }
    }
    /// Runs `fut` (and every other task) to completion.
    pub fn block_on<T: 'static>(&self, fut: impl std::future::Future<Output = T> + 'static) -> T {
        self.sim
            .block_on(Instant::NEVER, fut)
            .expect("the scenario finishes")
    }
    /// What a power failure of the server now would leave at `addr` (without failing).
    pub fn server_image(&self, addr: u64, len: usize) -> Vec<u8> {
        image(&self.sim, self.server.id(), addr, len)
    }
    /// Cuts the server's power now and returns what survived at `addr`.
    pub fn crash_server(&self, addr: u64, len: usize) -> Vec<u8> {
        self.sim.crash_now(self.server.id());
        self.sim.with_rnic(self.server.id(), |r, now| {
            r.hierarchy().durable(now).read_vec(addr, len)
        })
    }
    /// What a CPU load on node `n` returns now.
    pub fn load(&self, n: &Node, space: Space, addr: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        self.sim
            .with_rnic(n.id(), |r, now| r.cpu_load(now, space, addr, &mut buf));
        buf
    }
    pub fn stats(&self, n: &Node) -> remora_model::rnic::RnicStats {
        self.sim.with_rnic(n.id(), |r, _| r.stats())
    }
}

/// What a power failure of node `n` now would leave at `addr`, without failing it.
pub fn image(sim: &Sim, n: NodeId, addr: u64, len: usize) -> Vec<u8> {
    sim.with_rnic(n, |r, now| r.crash_image(now).read_vec(addr, len))
}

/// `len` bytes of a recognisable, never-zero pattern.
pub fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u8).wrapping_mul(31) ^ salt) | 1)
        .collect()
}
