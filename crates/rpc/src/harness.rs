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
use remora_model::time::Instant;
use remora_sim::{NodeHandle, Sim};
use remora_verbs::{Space, Verbs};
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
                processing: remora_model::time::Duration::ZERO,
                backlog_threshold: 64,
                workers: 1,
            },
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
            layout,
            setup,
        }
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
                kv.apply(PRELOAD_CONN, k + 1, &op).await.expect("preload");
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
