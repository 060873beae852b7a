//! One RPC server and its senders on the simulator, for any design: the benchmark, the
//! tests and (later) the durable RPCs' checker build on it.
//!
//! A design plugs in through [`Deployment`]: given the simulated nodes and the object
//! store's layout, it sets up its server, connects one client per sender node and spawns
//! the server's task. [`BaselineDeployment`] does this for the eight baselines,
//! [`DurableDeployment`] for the four durable RPCs.

use crate::api::{RpcClient, RpcError, ServerCosts};
use crate::baselines::{BaselineClient, BaselineParams, BaselineServer, ServerCpu, ServerStats};
use crate::design::{Design, FlushForm};
use crate::durable::{DurableClient, DurableOptions, DurableServer};
use crate::flush::FlushParams;
use crate::kv::{KvLayout, KvStore};
use crate::workers::WorkerPool;
use crate::workload::value_for;
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_sim::{CpuLoad, NodeHandle, Sim};
use remora_verbs::{Opcode, Payload, QpAttr, QpType, SendWr, Space, UdDest, Verbs};
use std::cell::RefCell;
use std::rc::Rc;

/// The connection id the preloader stamps objects with (clients use 1, 2, ...).
pub const PRELOAD_CONN: u32 = 0;

/// What a simulated deployment looks like.
#[derive(Clone, Debug)]
pub struct SimSetup {
    /// Seed of the simulation.
    pub seed: u64,
    /// Latency profile.
    pub profile: LatencyProfile,
    /// The server's configuration (seed 003 §5.1: "We disable the DDIO by default").
    pub server_config: ServerConfig,
    /// Sender nodes, one client connection each (seed 003 §5.5, "concurrent senders").
    pub senders: u32,
    /// Objects the store holds (keys `0..objects`).
    pub objects: u64,
    /// Largest object.
    pub max_value: u64,
    /// Most requests per RPC (batching, §5.5).
    pub max_batch: u32,
    /// Longest scan.
    pub max_scan: u32,
    /// Per-request server costs (§5.2 light/heavy load).
    pub costs: ServerCosts,
    /// What else loads the machines while the senders run (§5.5, Figures 14–16).
    pub conditions: Conditions,
    /// Where the servers record their CPU work per request (§5.6, Figure 20), if anywhere.
    pub work_log: Option<crate::account::WorkLog>,
}

/// What else runs while the senders measure (seed 003 §5.5, Figures 14–16): nothing by
/// default.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Conditions {
    /// A background sender loading the server's link (Figure 14), on a node of its own.
    pub net_load: Option<NetLoad>,
    /// A CPU-bound background program on the server (Figure 15).
    pub server_cpu: Option<CpuLoad>,
    /// A CPU-bound background program on every sender node (Figure 16).
    pub sender_cpu: Option<CpuLoad>,
}

/// A background sender on another node that "contiguously send\[s\] small data packets"
/// over the server's link (seed 003 §5.5, Figure 14): UD datagrams to a server queue pair
/// that posts no receive, so the server's RNIC drops each on arrival (counted), and they
/// load the link and the switch port toward the server, not its PCIe, memory or CPU.
/// The sender paces itself to `percent` of the link's bandwidth and, like a sender on a
/// lossless fabric under link-level flow control, pauses while the switch port toward the
/// server holds `max_queue` or more of queued packets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct NetLoad {
    /// Offered load, in percent of the link bandwidth (100: as fast as its port sends).
    pub percent: u32,
    /// Payload bytes of each packet.
    pub packet_bytes: u64,
    /// The switch port's queue (as serialization time) at which the sender pauses.
    pub max_queue: Duration,
}

impl NetLoad {
    /// Packets posted at once; the pacing interval covers them all (fewer wake-ups).
    const BURST: u64 = 16;

    /// The busy link of Figure 14: 64-byte packets at `percent` of the link, pausing at
    /// 2 µs of queue (50 KB at 200 Gb/s; an assumption: seed 003 does not describe its
    /// switch, and a shared-buffer switch's per-port pause threshold is tens of KB).
    pub fn busy(percent: u32) -> Self {
        NetLoad {
            percent: percent.max(1),
            packet_bytes: 64,
            max_queue: Duration::from_micros(2),
        }
    }
}

impl SimSetup {
    /// One sender, `objects` objects of up to `max_value` bytes, light load, DMP without
    /// DDIO, the default profile.
    pub fn new(seed: u64, objects: u64, max_value: u64) -> Self {
        SimSetup {
            seed,
            profile: LatencyProfile::default_profile(),
            server_config: dmp(false),
            senders: 1,
            objects,
            max_value,
            max_batch: 1,
            max_scan: 1,
            costs: ServerCosts {
                processing: Duration::ZERO,
                backlog_threshold: 64,
                workers: 1,
            },
            conditions: Conditions::default(),
            work_log: None,
        }
    }
}

/// A DMP (ADR) server with or without DDIO, PM receive buffers not used by baselines.
pub fn dmp(ddio: bool) -> ServerConfig {
    ServerConfig {
        domain: remora_model::config::PersistenceDomain::Dmp,
        ddio,
        rqwrb: remora_model::config::RqwrbPlacement::Dram,
        transport: remora_model::config::Transport::InfiniBand,
        caps: remora_model::NicCaps::ALL,
    }
}

/// The simulated machines of one run.
pub struct SimEnv {
    /// The simulation.
    pub sim: Sim,
    /// The server node.
    pub server: NodeHandle,
    /// One node per sender.
    pub senders: Vec<NodeHandle>,
    /// The background sender's node ([`Conditions::net_load`]).
    pub background: Option<NodeHandle>,
    /// Where the objects live in the server's PM.
    pub layout: KvLayout,
    /// The setup it was built from.
    pub setup: SimSetup,
}

impl SimEnv {
    /// Builds the nodes and reserves the object store (nothing runs yet).
    pub fn new(setup: SimSetup) -> Self {
        let sim = Sim::new(setup.seed, setup.profile.clone());
        let server = sim.add_node("server", setup.server_config);
        let senders = (0..setup.senders)
            .map(|i| sim.add_node(&format!("sender{i}"), setup.server_config))
            .collect();
        // Added last, so the other nodes' random streams are those of an idle run.
        let background = setup
            .conditions
            .net_load
            .map(|_| sim.add_node("background", setup.server_config));
        let mut layout = KvLayout {
            base: 0,
            objects: setup.objects,
            max_value: setup.max_value,
        };
        layout.base = server.alloc(Space::Pm, layout.bytes(), 64);
        SimEnv {
            sim,
            server,
            senders,
            background,
            layout,
            setup,
        }
    }

    /// Starts the run's [`Conditions`]: the CPU loads from now on and the background
    /// sender's task. Call after preloading and deploying, so only the measurement runs
    /// under them.
    pub fn start_conditions(&self) -> Result<(), RpcError> {
        let c = self.setup.conditions;
        if let Some(load) = c.server_cpu {
            self.sim.set_cpu_load(self.server.id(), Some(load));
        }
        if let Some(load) = c.sender_cpu {
            for n in &self.senders {
                self.sim.set_cpu_load(n.id(), Some(load));
            }
        }
        if let (Some(load), Some(bg)) = (c.net_load, &self.background) {
            self.start_background(load, bg.clone())?;
        }
        Ok(())
    }

    fn start_background(&self, load: NetLoad, bg: NodeHandle) -> Result<(), RpcError> {
        const QKEY: u32 = 0x0005_1414;
        let ud = QpAttr {
            qp_type: QpType::Ud,
            qkey: QKEY,
            ..QpAttr::default()
        };
        // The server's end: a UD queue pair with no receive posted.
        let spd = self.server.alloc_pd()?;
        let scq = self.server.create_cq(16)?;
        let sqp = self.server.create_qp(spd, scq, scq, ud)?;
        let pd = bg.alloc_pd()?;
        let cq = bg.create_cq(16)?;
        let qp = bg.create_qp(pd, cq, cq, ud)?;
        let dest = UdDest {
            node: self.server.id(),
            qpn: sqp,
            qkey: QKEY,
        };
        let profile = &self.setup.profile;
        let burst = NetLoad::BURST;
        let tick = Duration::from_nanos(
            (profile.wire_time(load.packet_bytes).as_nanos() * burst * 100)
                .div_ceil(load.percent as u64),
        );
        let server = self.server.id();
        let data = vec![0u8; load.packet_bytes as usize];
        self.sim.spawn_on(&bg.clone(), async move {
            loop {
                // Link-level flow control: a full port pauses the sender.
                if bg.port_backlog(server) < load.max_queue {
                    for _ in 0..burst {
                        let wr = SendWr::new(0, Opcode::Send, Payload::inline(data.clone()), None)
                            .to(dest)
                            .signaled(false);
                        if bg.post_send(qp, wr).is_err() {
                            return;
                        }
                    }
                }
                bg.sleep(tick).await;
            }
        });
        Ok(())
    }

    /// Writes version 0 of each of `keys` (`object_bytes` each, [`value_for`]) into the
    /// store and persists it, on the server's CPU, before any client runs.
    pub fn preload(&self, keys: impl IntoIterator<Item = u64>, object_bytes: u64) {
        let mut kv = KvStore::new(self.server.clone(), self.layout);
        let keys: Vec<u64> = keys.into_iter().collect();
        let done = self.sim.block_on(Instant::NEVER, async move {
            for k in keys {
                let op = crate::api::Op::Put {
                    key: k,
                    value: value_for(k, 0, object_bytes),
                };
                let r = kv.apply(PRELOAD_CONN, k + 1, &op).await;
                assert_eq!(r.status, crate::api::ReplyStatus::Ok, "preload of key {k}");
            }
        });
        assert!(done.is_some(), "the preload finished");
    }

    /// Reads object `key` as the server's CPU sees it now (after a crash and
    /// [`Sim::restart`], what survived).
    pub fn server_object(&self, key: u64) -> Option<Vec<u8>> {
        KvStore::new(self.server.clone(), self.layout)
            .read(key)
            .expect("key in the store")
            .map(|(_, v)| v)
    }
}

/// How a design is set up on simulated machines.
pub trait Deployment {
    /// The client type.
    type Client: RpcClient + 'static;
    /// The design.
    fn design(&self) -> Design;
    /// Sets up the server on `env.server`, connects one client per sender node (client `i`
    /// on `env.senders[i]`), spawns the server's task(s) and returns the clients.
    fn deploy(&self, env: &SimEnv) -> Result<Vec<Self::Client>, RpcError>;
}

/// One of the eight baselines.
#[derive(Clone, Debug)]
pub struct BaselineDeployment {
    /// Its parameters (sizes are overwritten from the [`SimSetup`]).
    pub params: BaselineParams,
    /// The server's counters, once deployed.
    pub stats: Rc<RefCell<Option<Rc<RefCell<ServerStats>>>>>,
}

impl BaselineDeployment {
    /// Baseline `design` with default parameters for `setup`.
    pub fn new(design: Design, setup: &SimSetup) -> Self {
        let mut params = BaselineParams::new(design, setup.max_value, &setup.profile);
        params.max_batch = setup.max_batch;
        params.max_scan = setup.max_scan;
        BaselineDeployment {
            params,
            stats: Rc::default(),
        }
    }

    /// The server's counters (after [`Deployment::deploy`]).
    pub fn server_stats(&self) -> Option<ServerStats> {
        self.stats.borrow().as_ref().map(|s| s.borrow().clone())
    }
}

impl Deployment for BaselineDeployment {
    type Client = BaselineClient<NodeHandle>;

    fn design(&self) -> Design {
        self.params.design
    }

    fn deploy(&self, env: &SimEnv) -> Result<Vec<Self::Client>, RpcError> {
        let cpu = ServerCpu::from_profile(&env.setup.profile);
        let mut server = BaselineServer::create(
            env.server.clone(),
            self.params,
            cpu,
            env.setup.costs,
            env.layout,
        )?;
        let mut clients = Vec::with_capacity(env.senders.len());
        for (i, node) in env.senders.iter().enumerate() {
            let (c, sqp) = server.accept(node.clone(), i as u32 + 1)?;
            env.sim.connect((node, c.qp()), (&env.server, sqp))?;
            clients.push(c);
        }
        *self.stats.borrow_mut() = Some(server.stats());
        if let Some(log) = &env.setup.work_log {
            server.set_work_log(log.clone());
        }
        env.sim.spawn_on(&env.server, async move {
            let _why = server.serve().await;
        });
        Ok(clients)
    }
}

/// One of the four durable RPCs (seed 003 §4.2), on the same machines, object store and
/// costs as a baseline: one redo log and one dispatcher per sender's connection, requests
/// executed on the server's worker pool ([`ServerCosts::workers`] threads shared by all
/// connections, as a baseline server's), into the shared, preloaded store of [`SimEnv`].
/// A Put returns once its log entry is durable; a read once its result arrived.
#[derive(Clone, Debug)]
pub struct DurableDeployment {
    /// The design.
    pub design: Design,
    /// Flush form (emulated, as the paper measured, or native).
    pub flush: FlushParams,
    /// Redo-log entries per connection.
    pub capacity: u32,
    /// The servers' counters, once deployed (one per connection).
    pub stats: Rc<RefCell<Vec<Rc<std::cell::Cell<crate::durable::ServerStats>>>>>,
}

impl DurableDeployment {
    /// Durable design `design` with the Flush primitives in `form` and a 64-entry log.
    pub fn new(design: Design, form: FlushForm) -> Self {
        DurableDeployment {
            design,
            flush: FlushParams {
                form,
                ..FlushParams::default()
            },
            capacity: 64,
            stats: Rc::default(),
        }
    }

    /// The options of the connection of sender `i` (connection id `i + 1`) in `setup`,
    /// for a store laid out as `layout`.
    pub fn options(&self, setup: &SimSetup, layout: &KvLayout, i: u32) -> DurableOptions {
        let mut o = DurableOptions::new(self.design);
        o.flush = self.flush;
        o.conn = i + 1;
        o.capacity = self.capacity;
        o.objects = layout.objects;
        o.max_value = u32::try_from(layout.max_value).unwrap_or(u32::MAX);
        o.max_scan = setup.max_scan.max(1);
        o.batch = setup.max_batch.max(1);
        o.costs = setup.costs;
        o.cpu = crate::baselines::ServerCpu::from_profile(&setup.profile);
        o
    }

    /// The servers' counters summed over connections (after [`Deployment::deploy`]).
    pub fn server_stats(&self) -> crate::durable::ServerStats {
        let mut t = crate::durable::ServerStats::default();
        for s in self.stats.borrow().iter() {
            let s = s.get();
            t.processed += s.processed;
            t.cpu_persisted += s.cpu_persisted;
            t.slow_downs += s.slow_downs;
            t.bad_entries += s.bad_entries;
        }
        t
    }
}

/// A [`DurableClient`] whose [`RpcClient::call_batch`] is the client's own batching call
/// (one Flush per batch, §4.3) rather than the trait's default of one call per request.
pub struct BatchingDurableClient(pub DurableClient<NodeHandle>);

impl RpcClient for BatchingDurableClient {
    async fn call(&mut self, op: crate::api::Op) -> Result<crate::api::Completion, RpcError> {
        self.0.call(op).await
    }

    async fn drain(&mut self) -> Result<Vec<crate::api::Reply>, RpcError> {
        self.0.drain().await
    }

    async fn call_batch(
        &mut self,
        ops: Vec<crate::api::Op>,
    ) -> Result<Vec<crate::api::Completion>, RpcError> {
        DurableClient::call_batch(&mut self.0, ops).await
    }
}

impl Deployment for DurableDeployment {
    type Client = BatchingDurableClient;

    fn design(&self) -> Design {
        self.design
    }

    fn deploy(&self, env: &SimEnv) -> Result<Vec<Self::Client>, RpcError> {
        let mut clients = Vec::with_capacity(env.senders.len());
        // One server: its worker threads are shared by every connection, as a baseline
        // server's are.
        let pool = WorkerPool::new(env.setup.costs.workers);
        for (i, node) in env.senders.iter().enumerate() {
            let opts = self.options(&env.setup, &env.layout, i as u32);
            let mut server =
                DurableServer::create_in(env.server.clone(), &opts, None, Some(env.layout))?;
            server.set_workers(pool.clone());
            if let Some(log) = &env.setup.work_log {
                server.set_work_log(log.clone());
            }
            // The formatted log header is durable before the client connects.
            let (s2, base) = (env.server.clone(), server.conn_info().layout.base);
            env.sim
                .block_on(Instant::NEVER, async move {
                    s2.persist_local(base, 128).await;
                })
                .ok_or_else(|| RpcError::Connection("server down while formatting".into()))?;
            let mut client = DurableClient::create(node.clone(), &opts)?;
            env.sim
                .connect((node, client.qp()), (&env.server, server.qp()))?;
            client.attach(server.conn_info())?;
            self.stats.borrow_mut().push(server.stats());
            env.sim.spawn_on(&env.server, async move {
                let _why = server.serve().await;
            });
            clients.push(BatchingDurableClient(client));
        }
        Ok(clients)
    }
}
