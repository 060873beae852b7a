//! The evaluation of seed 003 §5 on the simulator: a driver that runs any design on any
//! workload and measures throughput (operations per simulated second) and latency (mean,
//! p50, p99 with hdrhistogram), and the experiment sets of §5.2–§5.5 as functions
//! returning result tables.
//!
//! | function | seed 003 | what varies | reported |
//! |---|---|---|---|
//! | [`micro`] | §5.2, Figures 8–9 | object 32 B, 1 KB, 64 KB × heavy/light load | throughput, p99 |
//! | [`ycsb`] | §5.3, Figure 11 | YCSB A–F (4 KB values) | mean latency |
//! | [`sizes`] | §5.5, Figure 13 | object 64 B … 256 KB | mean latency |
//! | [`senders`] | §5.5, Figure 17 | 1, 2, 4, 8 concurrent senders (30K requests each) | mean latency |
//! | [`read_write`] | §5.5, Figure 18 | read:write 95:5, 50:50, 5:95 | mean latency |
//! | [`batch`] | §5.5, Figure 19 | requests per RPC 1 … 16 | total execution time |
//! | [`net_load`] | §5.5, Figure 14 | idle / busy link to the server (background sender) | mean latency |
//! | [`server_cpu`] | §5.5, Figure 15 | idle / busy server CPU (background program) | mean latency |
//! | [`sender_cpu`] | §5.5, Figure 16 | idle / busy sender CPU (background program) | mean latency |
//! | [`pagerank`] | §5.3, Figure 10 | graphs of Word association-2011, Enron, Dblp-2010's sizes | total execution time |
//! | [`breakdown`](fn@breakdown) | §5.6, Figure 20 | YCSB A latency: sender software, network, receiver software | mean per part |
//! | [`recovery`](fn@recovery) | §5.4, Figure 12 | server availability × read:write | total execution time |
//!
//! Designs plug in through [`crate::harness::Deployment`]: [`run_with`] runs any of them;
//! [`run`] picks [`BaselineDeployment`] for a baseline and
//! [`DurableDeployment`](crate::harness::DurableDeployment) (or the caller's
//! [`DurableRunner`]) for a durable RPC, with the Flush primitives in the run's
//! [`FlushForm`] (emulated by default, as the paper measured; a native form the model
//! lacks is reported as unsupported, never substituted). [`run_all`] runs every set and
//! [`report::write_report`] writes `rpc.md`, `rpc.csv`, `rpc.json` and SVG plots.

mod claims;
pub mod durable;
pub mod recovery;
pub mod report;

use crate::account::WorkLog;
use crate::api::{Op, RpcClient, ServerCosts};
use crate::baselines::{transport_substituted, BASELINES};
use crate::design::{Design, FlushForm};
use crate::harness::{
    dmp, BaselineDeployment, Conditions, Deployment, DurableDeployment, NetLoad, SimEnv, SimSetup,
};
use crate::workload::{
    check_value, fnv64, Graph, InsertCursor, MicroSpec, OpKind, OpSpec, PageRankSpec, Workload,
    YcsbKind, YcsbSpec, EDGE_BYTES,
};
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
pub use remora_sim::CpuLoad;
use remora_verbs::Verbs;
use serde::Serialize;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

pub use recovery::{recovery, recovery_of, FailureSide, RecoveryParams, RecoveryResult};
pub use report::write_report;

/// Server load (seed 003 §5.2): "injecting an additional latency of 100 us for data
/// processing ... heavy load ... light-load RPCs only perform read/write operations".
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Load {
    /// No injected processing time.
    Light,
    /// 100 µs of processing per request.
    Heavy,
}

impl Load {
    /// The per-request processing time (the paper's 100 µs under heavy load).
    pub fn processing(self) -> Duration {
        self.processing_with(HEAVY_PROCESSING)
    }

    /// The per-request processing time when heavy load costs `heavy`.
    pub fn processing_with(self, heavy: Duration) -> Duration {
        match self {
            Load::Light => Duration::ZERO,
            Load::Heavy => heavy,
        }
    }

    /// "light" or "heavy".
    pub fn name(self) -> &'static str {
        match self {
            Load::Light => "light",
            Load::Heavy => "heavy",
        }
    }
}

/// Injected processing time of a heavy-load request (seed 003 §5.2: "an additional latency of
/// 100 us for data processing, like DaRPC").
pub const HEAVY_PROCESSING: Duration = Duration::from_micros(100);

/// Server worker threads in the evaluation, for every design alike: the cores of seed
/// 003's server ("two-socket Intel Xeon Gold 6230 2.10 GHz 20-core processors", §5.1).
/// The paper does not say how many threads its RPC servers execute requests on; its
/// durable server creates "a thread ... to handle the RPC requests" once one is logged
/// (§4.2), so requests are processed concurrently there, and nothing in the paper gives
/// the baselines fewer.
pub const SERVER_THREADS: u32 = 40;

/// One measured run: a design, a workload, senders, batch size, load.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Experiment label carried into the result.
    pub experiment: &'static str,
    /// The design.
    pub design: Design,
    /// The workload each sender runs.
    pub workload: Workload,
    /// Concurrent senders (§5.5).
    pub senders: u32,
    /// Requests per RPC (§5.5 batching; 1 = none).
    pub batch: u32,
    /// Server load (§5.2).
    pub load: Load,
    /// Processing time of a request under heavy load ([`HEAVY_PROCESSING`]).
    pub heavy_processing: Duration,
    /// Server worker threads, the same for every design ([`crate::workers`]).
    pub server_threads: u32,
    /// Flush form of a durable RPC (ignored for a baseline).
    pub flush: FlushForm,
    /// The server's configuration.
    pub server_config: ServerConfig,
    /// Simulation seed (senders' operation streams derive from it).
    pub seed: u64,
    /// Latency profile.
    pub profile: LatencyProfile,
    /// Background load on the link or the CPUs during the measurement (§5.5, Figures
    /// 14–16); none by default.
    pub conditions: Conditions,
    /// Break each RPC's latency down into sender software, network and receiver software
    /// (§5.6, Figure 20; one sender, one request per RPC).
    pub breakdown: bool,
}

/// Mean latency of an RPC in the three parts of seed 003 §5.6 (Figure 20: "software
/// overhead at the sender side, network RTTs (hardware), and software overhead at the
/// receiver side (including RPC processing cost and data persisting cost)"), ns. They add
/// up to the mean latency.
#[derive(Copy, Clone, Debug, Default, Serialize, PartialEq)]
pub struct Breakdown {
    /// CPU work at the sender. Zero in the model: the latency profile charges a sender's
    /// CPU nothing for building and posting a request or reaping its completion (its
    /// polling and completion waits are waiting for the network).
    pub sender_ns: f64,
    /// Everything else: the NICs, wire, switch, PCIe and memory, and the sender's and
    /// server's waits for them (an emulated SFlush's 7 µs lookup included: it stands for
    /// the RNIC's).
    pub network_ns: f64,
    /// Server CPU work the RPC waited for ([`crate::account`]): for an RPC whose result
    /// it returns, the work for it and for the requests before it on its connection
    /// (FIFO); for a durable Put returning at durability, only the work for its
    /// durability (an RFlush design's CPU persist).
    pub receiver_ns: f64,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunResult {
    /// Experiment label.
    pub experiment: String,
    /// Design name.
    pub design: String,
    /// Workload name.
    pub workload: String,
    /// Object size.
    pub object_bytes: u64,
    /// Senders.
    pub senders: u32,
    /// Requests per RPC.
    pub batch: u32,
    /// "light" or "heavy".
    pub load: String,
    /// Read percentage of a micro-benchmark (YCSB: its mix's reads).
    pub read_percent: u32,
    /// Server configuration name.
    pub config: String,
    /// Operations completed (all senders).
    pub ops: u64,
    /// RPCs issued (batches count once; a read-modify-write twice).
    pub rpcs: u64,
    /// Simulated time from the first request to the last reply, ns.
    pub elapsed_ns: u64,
    /// Operations per simulated second.
    pub throughput_ops_s: f64,
    /// Mean latency of an operation (of an RPC when batched), ns.
    pub mean_ns: f64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Maximum, ns.
    pub max_ns: u64,
    /// Mean latency of reads (Get, Scan), ns (NaN when none).
    pub read_mean_ns: f64,
    /// Mean latency of writes (Put, insert, read-modify-write), ns (NaN when none).
    pub write_mean_ns: f64,
    /// Reads whose result was checked.
    pub reads_checked: u64,
    /// Simulator events.
    pub events: u64,
    /// The simulation's fingerprint (same seed, same value).
    pub fingerprint: u64,
    /// Flush form of a durable RPC ("emulated" or "native"; `None` for a baseline).
    pub flush: Option<String>,
    /// A transport the model substituted (HERD, FaSST over RC until UC/UD exist).
    pub transport_note: Option<String>,
    /// Why the run was skipped (e.g. FaSST and objects over the 4 KB UD MTU).
    pub skipped: Option<String>,
    /// "idle", or what was loaded ("busy link", "busy server CPU", "busy sender CPU").
    pub condition: String,
    /// The latency breakdown, for a run that asked for it ([`RunSpec::breakdown`]).
    pub breakdown: Option<Breakdown>,
}

impl RunResult {
    fn skipped(spec: &RunSpec, why: String) -> Self {
        let mut r = Self::empty(spec);
        r.skipped = Some(why);
        r
    }

    fn empty(spec: &RunSpec) -> Self {
        RunResult {
            experiment: spec.experiment.into(),
            design: spec.design.name().into(),
            workload: spec.workload.name(),
            object_bytes: spec.workload.object_bytes(),
            senders: spec.senders,
            batch: spec.batch,
            load: spec.load.name().into(),
            read_percent: read_percent(&spec.workload),
            config: spec.server_config.name(),
            ops: 0,
            rpcs: 0,
            elapsed_ns: 0,
            throughput_ops_s: f64::NAN,
            mean_ns: f64::NAN,
            p50_ns: 0,
            p99_ns: 0,
            max_ns: 0,
            read_mean_ns: f64::NAN,
            write_mean_ns: f64::NAN,
            reads_checked: 0,
            events: 0,
            fingerprint: 0,
            flush: spec
                .design
                .is_durable_rpc()
                .then(|| flush_name(spec.flush).to_string()),
            transport_note: transport_substituted(spec.design).map(str::to_string),
            skipped: None,
            condition: condition_name(&spec.conditions).into(),
            breakdown: None,
        }
    }
}

fn read_percent(w: &Workload) -> u32 {
    match w {
        Workload::Micro(m) => m.read_percent,
        Workload::Ycsb(y) => {
            let m = y.kind.mix();
            m[0] + m[3]
        }
        Workload::PageRank(_) => 100,
    }
}

/// "idle" when `c` loads nothing, else what it loads.
pub fn condition_name(c: &Conditions) -> &'static str {
    match (c.net_load, c.server_cpu, c.sender_cpu) {
        (None, None, None) => "idle",
        (Some(_), None, None) => "busy link",
        (None, Some(_), None) => "busy server CPU",
        (None, None, Some(_)) => "busy sender CPU",
        _ => "busy",
    }
}

/// "emulated" or "native".
pub fn flush_name(f: FlushForm) -> &'static str {
    match f {
        FlushForm::Emulated => "emulated",
        FlushForm::Native => "native",
    }
}

/// Runs a durable RPC another way than [`DurableDeployment`] (e.g. a checker's variant).
pub type DurableRunner = fn(&RunSpec) -> Result<RunResult, String>;

/// Runs `spec` with the baseline deployment, or for a durable RPC with `durable` if given
/// and [`DurableDeployment`] otherwise. A Flush form the model cannot run (e.g. native
/// SFlush before the RNIC has the opcode) gives a result skipped as "unsupported".
pub fn run(spec: &RunSpec, durable: Option<DurableRunner>) -> Result<RunResult, String> {
    if crate::baselines::paths(spec.design).is_some() {
        run_with(spec, |setup| BaselineDeployment::new(spec.design, setup))
    } else if let Some(f) = durable {
        f(spec)
    } else {
        let dep = DurableDeployment::new(spec.design, spec.flush);
        if let Err(e) = crate::flush::FlushPlan::new(spec.design, dep.flush, &spec.server_config) {
            return Ok(RunResult::skipped(spec, format!("unsupported: {e}")));
        }
        run_with(spec, |_| dep)
    }
}

/// Why `design` cannot run `w`, if it cannot (FaSST's 4 KB UD MTU, seed 003 §5.1: "we only
/// show experimental results of FaSST for objects smaller than 4KB").
pub fn unsupported(design: Design, w: &Workload, batch: u32) -> Option<String> {
    let limit = design.max_object()?;
    let object = w.object_bytes();
    if object > limit {
        return Some(format!(
            "{design}: {object}-byte objects exceed the 4 KB UD MTU"
        ));
    }
    if object * w.max_scan() as u64 > limit {
        return Some(format!(
            "{design}: scans of up to {} objects exceed the 4 KB UD MTU",
            w.max_scan()
        ));
    }
    if object * batch as u64 > limit {
        return Some(format!(
            "{design}: a batch of {batch} objects exceeds the 4 KB UD MTU"
        ));
    }
    None
}

/// The seed of sender `i`'s operation stream.
pub fn sender_seed(seed: u64, i: u32) -> u64 {
    fnv64(seed ^ fnv64(i as u64 + 1))
}

/// Keys the run reads before it could have written them: preloaded (seed 003 §5.1: "the
/// sender first generates 50K objects in a remote server"). Objects no operation touches
/// are left out; they change no measurement and would only cost memory.
pub fn touched_keys(w: &Workload, senders: u32, seed: u64) -> BTreeSet<u64> {
    let mut keys = BTreeSet::new();
    let cursor: InsertCursor = Rc::new(Cell::new(w.preload()));
    let cap = w.key_space(senders as u64);
    for i in 0..senders {
        for op in w
            .generator(sender_seed(seed, i))
            .share_inserts(cursor.clone(), cap)
        {
            match op.kind {
                OpKind::Insert => {}
                OpKind::Scan { count } => {
                    keys.extend(op.key..(op.key + count as u64).min(w.preload()));
                }
                _ => {
                    if op.key < w.preload() {
                        keys.insert(op.key);
                    }
                }
            }
        }
    }
    keys
}

#[derive(Default)]
struct Tally {
    hist: Option<hdrhistogram::Histogram<u64>>,
    ops: u64,
    rpcs: u64,
    reads: (u64, u64),
    writes: (u64, u64),
    reads_checked: u64,
    error: Option<String>,
    /// Sums over RPCs of (sender, network, receiver) ns and the RPCs counted.
    parts: (u64, u64, u64, u64),
}

impl Tally {
    fn record(&mut self, ns: u64) {
        self.hist
            .get_or_insert_with(|| hdrhistogram::Histogram::new(3).expect("histogram"))
            .record(ns.max(1))
            .expect("latency fits");
    }
}

/// Runs `spec` with the deployment `make` builds for the run's [`SimSetup`]: preloads the
/// objects, deploys, runs every sender's operation stream on its own node, checks every
/// read, and measures.
pub fn run_with<D: Deployment>(
    spec: &RunSpec,
    make: impl FnOnce(&SimSetup) -> D,
) -> Result<RunResult, String> {
    if let Some(why) = unsupported(spec.design, &spec.workload, spec.batch) {
        return Ok(RunResult::skipped(spec, why));
    }
    let w = spec.workload;
    let key_space = w.key_space(spec.senders as u64);
    let setup = SimSetup {
        seed: spec.seed,
        profile: spec.profile.clone(),
        server_config: spec.server_config,
        senders: spec.senders,
        objects: key_space,
        max_value: w.object_bytes(),
        max_batch: spec.batch.max(1),
        max_scan: w.max_scan(),
        costs: ServerCosts {
            processing: spec.load.processing_with(spec.heavy_processing),
            backlog_threshold: 64,
            workers: spec.server_threads,
        },
        conditions: spec.conditions,
        work_log: spec.breakdown.then(WorkLog::default),
    };
    if spec.breakdown && (spec.senders != 1 || spec.batch > 1) {
        return Err("the latency breakdown needs one sender and one request per RPC".into());
    }
    let work_log = setup.work_log.clone();
    let dep = make(&setup);
    assert_eq!(dep.design(), spec.design);
    let env = SimEnv::new(setup);
    env.preload(touched_keys(&w, spec.senders, spec.seed), w.object_bytes());
    let clients = dep.deploy(&env).map_err(|e| e.to_string())?;
    env.start_conditions().map_err(|e| e.to_string())?;
    let tally = Rc::new(RefCell::new(Tally::default()));
    let cursor: InsertCursor = Rc::new(Cell::new(w.preload()));
    let versions = Rc::new(RefCell::new(vec![0u64; key_space as usize]));
    let next_version = Rc::new(Cell::new(1u64));
    let exact = spec.senders == 1;
    let mut senders: Vec<Pin<Box<dyn Future<Output = ()>>>> = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        let gen = w
            .generator(sender_seed(spec.seed, i as u32))
            .share_inserts(cursor.clone(), key_space);
        let ctx = Sender {
            node: env.senders[i].clone(),
            tally: tally.clone(),
            versions: versions.clone(),
            next_version: next_version.clone(),
            exact,
            object: w.object_bytes(),
            preloaded: w.preload(),
            batch: spec.batch.max(1) as usize,
            conn: i as u32 + 1,
            work_log: work_log.clone(),
            workload: w,
        };
        senders.push(Box::pin(ctx.run(client, gen)));
    }
    let start = env.sim.now();
    let events0 = env.sim.events_processed();
    let finished = env.sim.block_on(Instant::NEVER, JoinAll(senders));
    let elapsed = env.sim.now().saturating_since(start).as_nanos();
    let t = tally.borrow();
    if let Some(e) = &t.error {
        release(&env);
        return Err(format!("{} on {}: {e}", spec.design, w.name()));
    }
    if finished.is_none() {
        release(&env);
        return Err(format!("{} on {}: the run stalled", spec.design, w.name()));
    }
    let h = t.hist.as_ref().ok_or("no operation ran")?;
    let mut r = RunResult::empty(spec);
    r.ops = t.ops;
    r.rpcs = t.rpcs;
    r.elapsed_ns = elapsed;
    r.throughput_ops_s = t.ops as f64 / (elapsed.max(1) as f64 / 1e9);
    r.mean_ns = h.mean();
    r.p50_ns = h.value_at_quantile(0.5);
    r.p99_ns = h.value_at_quantile(0.99);
    r.max_ns = h.max();
    r.read_mean_ns = mean(t.reads);
    r.write_mean_ns = mean(t.writes);
    r.reads_checked = t.reads_checked;
    if spec.breakdown {
        let (s, n, v, k) = t.parts;
        let k = k.max(1) as f64;
        r.breakdown = Some(Breakdown {
            sender_ns: s as f64 / k,
            network_ns: n as f64 / k,
            receiver_ns: v as f64 / k,
        });
    }
    r.events = env.sim.events_processed() - events0;
    r.fingerprint = env.sim.fingerprint();
    drop(t);
    release(&env);
    Ok(r)
}

/// Ends the servers' endless tasks (they hold the simulation's nodes, so the simulation,
/// its memory images included, would never be freed): every node is powered off, which
/// drops its tasks.
fn release(env: &SimEnv) {
    env.sim.crash_now(env.server.id());
    for n in env.senders.iter().chain(&env.background) {
        env.sim.crash_now(n.id());
    }
}

fn mean((sum, n): (u64, u64)) -> f64 {
    if n == 0 {
        f64::NAN
    } else {
        sum as f64 / n as f64
    }
}

/// Polls every future until all finished (the simulator's executor has no join).
struct JoinAll(Vec<Pin<Box<dyn Future<Output = ()>>>>);

impl Future for JoinAll {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if self.0.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

struct Sender<N: Verbs> {
    node: N,
    tally: Rc<RefCell<Tally>>,
    versions: Rc<RefCell<Vec<u64>>>,
    next_version: Rc<Cell<u64>>,
    exact: bool,
    object: u64,
    preloaded: u64,
    batch: usize,
    /// The sender's connection id (sender `i` has `i + 1`).
    conn: u32,
    /// The servers' work log, when the run breaks latencies down.
    work_log: Option<WorkLog>,
    /// The workload, for the sender's own computation between operations
    /// ([`Workload::think`]).
    workload: Workload,
}

impl<N: Verbs> Sender<N> {
    fn fail(&self, e: String) {
        self.tally.borrow_mut().error.get_or_insert(e);
    }

    async fn run<C: RpcClient>(self, mut client: C, gen: impl Iterator<Item = OpSpec>) {
        let mut gen = gen.peekable();
        while gen.peek().is_some() {
            let mut specs = Vec::with_capacity(self.batch);
            while specs.len() < self.batch {
                match gen.peek() {
                    Some(s) if s.kind == OpKind::ReadModifyWrite && !specs.is_empty() => break,
                    Some(_) => specs.push(gen.next().expect("peeked")),
                    None => break,
                }
            }
            let think = specs
                .iter()
                .fold(Duration::ZERO, |t, s| t + self.workload.think(s.key));
            if let Err(e) = self.one(&mut client, specs).await {
                self.fail(e);
                return;
            }
            if think > Duration::ZERO {
                // The sender computes on what it fetched before it asks for more.
                self.node.compute(think).await;
            }
        }
        if let Err(e) = client.drain().await {
            self.fail(e.to_string());
        }
    }

    fn put(&self, key: u64) -> (Op, u64) {
        let v = self.next_version.get();
        self.next_version.set(v + 1);
        let value = crate::workload::value_for(key, v, self.object);
        (Op::Put { key, value }, v)
    }

    /// One RPC (or, for a read-modify-write, a Get then a Put), timed.
    async fn one<C: RpcClient>(&self, client: &mut C, specs: Vec<OpSpec>) -> Result<(), String> {
        let t0 = self.node.now();
        let mut rpcs = 0;
        // (highest sequence number, waited for a result) of the requests this RPC issued,
        // for the breakdown.
        let mut waited = (0u64, false);
        if let [OpSpec {
            kind: OpKind::ReadModifyWrite,
            key,
        }] = specs[..]
        {
            let got = client
                .call(Op::Get { key })
                .await
                .map_err(|e| e.to_string())?;
            waited = (got.seq, got.reply.is_some());
            self.check_get(key, got.reply.map(|r| r.value))?;
            let (op, v) = self.put(key);
            let put = client.call(op).await.map_err(|e| e.to_string())?;
            waited = (put.seq, waited.1 || put.reply.is_some());
            self.versions.borrow_mut()[key as usize] = v;
            rpcs = 2;
        } else {
            let mut ops = Vec::with_capacity(specs.len());
            let mut written = Vec::new();
            for s in &specs {
                ops.push(match s.kind {
                    OpKind::Read => Op::Get { key: s.key },
                    OpKind::Scan { count } => Op::Scan { key: s.key, count },
                    _ => {
                        let (op, v) = self.put(s.key);
                        written.push((s.key, v));
                        op
                    }
                });
            }
            let done = client.call_batch(ops).await.map_err(|e| e.to_string())?;
            if done.len() != specs.len() {
                return Err(format!(
                    "{} completions for {} requests",
                    done.len(),
                    specs.len()
                ));
            }
            for c in &done {
                waited = (waited.0.max(c.seq), waited.1 || c.reply.is_some());
            }
            // The server executes a batch in order: a read sees the writes before it.
            let mut written = written.into_iter();
            for (s, c) in specs.iter().zip(done) {
                match s.kind {
                    OpKind::Read => self.check_get(s.key, c.reply.map(|r| r.value))?,
                    OpKind::Scan { count } => {
                        self.check_scan(s.key, count, c.reply.map(|r| r.value))?
                    }
                    _ => {
                        let (k, v) = written.next().expect("one version per write");
                        self.versions.borrow_mut()[k as usize] = v;
                    }
                }
            }
            rpcs += 1;
        }
        let t1 = self.node.now();
        let ns = t1.saturating_since(t0).as_nanos();
        let mut t = self.tally.borrow_mut();
        t.record(ns);
        if let Some(log) = &self.work_log {
            // Server work this RPC waited for: for a result, the work for its requests and,
            // FIFO, those before them; for a Put that returned at durability, only its own
            // (the durability path). The sender's CPU does no accounted work here.
            let (last, result) = waited;
            let conn = self.conn;
            let receiver = log.covered(t0, t1, |s| {
                s.conn == conn && (s.seq == last || (result && s.seq <= last))
            });
            t.parts.1 += ns - receiver;
            t.parts.2 += receiver;
            t.parts.3 += 1;
        }
        t.ops += specs.len() as u64;
        t.rpcs += rpcs;
        let per = ns / specs.len() as u64;
        for s in &specs {
            let slot = if s.kind.writes() {
                &mut t.writes
            } else {
                &mut t.reads
            };
            slot.0 += per;
            slot.1 += 1;
        }
        Ok(())
    }

    fn check_get(&self, key: u64, value: Option<Vec<u8>>) -> Result<(), String> {
        let Some(value) = value else {
            // A durable RPC may return a read's result through `drain`.
            return Ok(());
        };
        if value.is_empty() && (key >= self.preloaded || !self.exact) {
            // An inserted key another sender has not finished writing.
            return Ok(());
        }
        let v = check_value(key, self.object, &value)?;
        if self.exact && v != self.versions.borrow()[key as usize] {
            return Err(format!(
                "object {key}: read version {v}, last written {}",
                self.versions.borrow()[key as usize]
            ));
        }
        self.tally.borrow_mut().reads_checked += 1;
        Ok(())
    }

    fn check_scan(&self, key: u64, count: u32, value: Option<Vec<u8>>) -> Result<(), String> {
        let Some(value) = value else { return Ok(()) };
        if !(value.len() as u64).is_multiple_of(self.object) {
            return Err(format!("scan from {key}: {} bytes", value.len()));
        }
        for chunk in value.chunks(self.object as usize) {
            let k = u64::from_le_bytes(chunk[0..8].try_into().expect("8"));
            if !(key..key + count as u64).contains(&k) {
                return Err(format!("scan {key}+{count} returned object {k}"));
            }
            check_value(k, self.object, chunk)?;
        }
        self.tally.borrow_mut().reads_checked += 1;
        Ok(())
    }
}

/// The experiment sets of the evaluation (seed 003 §5), to run a part of it (at the
/// paper's size, say, where the whole would take hours).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Set {
    /// §5.2 micro-benchmark, Figures 8 and 9 (6 runs per design).
    Micro,
    /// §5.3 YCSB A–F, Figure 11 (6 runs per design).
    Ycsb,
    /// §5.5 object sizes, Figure 13 (7 runs per design).
    Sizes,
    /// §5.5 concurrent senders, Figure 17 (4 runs per design).
    Senders,
    /// §5.5 read:write ratios, Figure 18 (3 runs per design), and the failure-recovery
    /// model of §5.4, Figure 12, computed from them.
    ReadWrite,
    /// §5.5 batch sizes, Figure 19 (5 runs per design).
    Batch,
    /// §5.5 network and CPU load, Figures 14–16 (4 runs per design).
    Load,
    /// §5.6 latency breakdown, Figure 20 (1 run per design).
    Breakdown,
    /// §5.3 PageRank, Figure 10 (3 runs per design).
    PageRank,
}

impl Set {
    /// Every set, in the order they run.
    pub const ALL: [Set; 9] = [
        Set::Micro,
        Set::Ycsb,
        Set::Sizes,
        Set::Senders,
        Set::ReadWrite,
        Set::Batch,
        Set::Load,
        Set::Breakdown,
        Set::PageRank,
    ];

    /// The name `--sets` takes.
    pub fn name(self) -> &'static str {
        match self {
            Set::Micro => "micro",
            Set::Ycsb => "ycsb",
            Set::Sizes => "sizes",
            Set::Senders => "senders",
            Set::ReadWrite => "read-write",
            Set::Batch => "batch",
            Set::Load => "load",
            Set::Breakdown => "breakdown",
            Set::PageRank => "pagerank",
        }
    }

    /// Simulation runs per design.
    fn runs_per_design(self) -> usize {
        match self {
            Set::Micro | Set::Ycsb => 6,
            Set::Sizes => SIZES.len(),
            Set::Senders | Set::Load => 4,
            Set::ReadWrite | Set::PageRank => 3,
            Set::Batch => 5,
            Set::Breakdown => 1,
        }
    }
}

impl std::str::FromStr for Set {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Set::ALL.into_iter().find(|x| x.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Set::ALL.iter().map(|x| x.name()).collect();
            format!("unknown experiment set {s:?}: one of {}", names.join(", "))
        })
    }
}

/// How to run the experiment sets.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Small sizes that run in seconds (CI) instead of the paper's.
    pub quick: bool,
    /// Seed of every simulation.
    pub seed: u64,
    /// Latency profile.
    pub profile: LatencyProfile,
    /// Worker threads (each simulation is single-threaded).
    pub threads: usize,
    /// Server configuration (seed 003 §5.1: "We disable the DDIO by default": DMP without
    /// DDIO).
    pub server_config: ServerConfig,
    /// Designs to run (default: all twelve).
    pub designs: Vec<Design>,
    /// Experiment sets to run (default: all); the others' tables stay empty.
    pub sets: Vec<Set>,
    /// Runs durable RPCs instead of [`DurableDeployment`] (default `None`).
    pub durable: Option<DurableRunner>,
    /// Flush form of the durable RPCs (default emulated, what seed 003 measured, §4.1.3).
    pub flush: FlushForm,
    /// Processing time of a heavy-load request (default [`HEAVY_PROCESSING`]).
    pub heavy_processing: Duration,
    /// Server worker threads of every design (default [`SERVER_THREADS`]).
    pub server_threads: u32,
    /// Scale of the paper's sizes in full mode: objects, operations and requests per
    /// sender are divided by it (1 = the paper's; ignored in quick mode).
    pub divisor: u64,
    /// The busy link of Figure 14 ([`net_load`]; default [`NetLoad::busy`] at 100%).
    pub net_load: NetLoad,
    /// The busy CPU of Figures 15 and 16 ([`server_cpu`], [`sender_cpu`]; default
    /// [`CPU_LOAD`]).
    pub cpu_load: CpuLoad,
    /// Called after every run (a progress bar).
    pub progress: Option<Progress>,
}

/// The busy CPU of seed 003 Figures 15–16 ("running a computation-intensive program in the
/// background", §5.5): the background program takes half of the CPU (a CPU-bound thread
/// sharing each core fairly with the RPC's), in scheduling periods of 100 µs on average.
/// Both numbers are assumptions: the paper does not describe its program or scheduler
/// (Linux gives CPU-bound threads slices of 0.75–3 ms, and a thread woken from a sleep
/// usually preempts them sooner).
pub const CPU_LOAD: CpuLoad = CpuLoad {
    percent: 50,
    period: Duration::from_micros(100),
};

/// A callback after every run, shared by the worker threads.
#[derive(Clone)]
pub struct Progress(pub Arc<dyn Fn(&RunResult) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

impl BenchOptions {
    /// Quick mode: every set with small N and M.
    pub fn quick() -> Self {
        BenchOptions {
            quick: true,
            seed: 3,
            profile: LatencyProfile::default_profile(),
            threads: 1,
            server_config: dmp(false),
            designs: Design::ALL.to_vec(),
            sets: Set::ALL.to_vec(),
            durable: None,
            flush: FlushForm::Emulated,
            heavy_processing: HEAVY_PROCESSING,
            server_threads: SERVER_THREADS,
            divisor: 1,
            net_load: NetLoad::busy(100),
            cpu_load: CPU_LOAD,
            progress: None,
        }
    }

    /// Quick mode with the eight baselines only.
    pub fn quick_baselines() -> Self {
        BenchOptions {
            designs: BASELINES.to_vec(),
            ..Self::quick()
        }
    }

    /// Runs [`run_all`] makes (for a progress bar): 39 per design with every set, plus one
    /// replay measurement per durable design with the read:write set.
    pub fn total_runs(&self) -> usize {
        let durable = self.designs.iter().filter(|d| d.is_durable_rpc()).count();
        let per_design: usize = self.sets.iter().map(|s| s.runs_per_design()).sum();
        let replays = if self.runs(Set::ReadWrite) {
            durable
        } else {
            0
        };
        per_design * self.designs.len() + replays
    }

    /// Whether set `s` runs.
    pub fn runs(&self, s: Set) -> bool {
        self.sets.contains(&s)
    }

    /// Objects (or records) and operations after [`divisor`](Self::divisor).
    fn scaled(&self, n: u64) -> u64 {
        (n / self.divisor.max(1)).max(1)
    }

    /// The paper's sizes (§5.1: 50K objects, 300K operations; §5.5: 30K per sender).
    pub fn full() -> Self {
        BenchOptions {
            quick: false,
            ..Self::quick()
        }
    }

    /// (objects, operations) of a micro-benchmark.
    fn micro_size(&self) -> (u64, u64) {
        if self.quick {
            (256, 40)
        } else {
            let m = MicroSpec::default();
            (self.scaled(m.objects), self.scaled(m.operations))
        }
    }

    fn micro(&self, object_bytes: u64, read_percent: u32) -> Workload {
        let (objects, operations) = self.micro_size();
        Workload::Micro(MicroSpec {
            objects,
            operations,
            read_percent,
            object_bytes,
            ..MicroSpec::default()
        })
    }

    fn pagerank(&self, graph: Graph) -> Workload {
        Workload::PageRank(pagerank_spec(self.quick, self.divisor, graph))
    }

    fn spec(&self, experiment: &'static str, design: Design, workload: Workload) -> RunSpec {
        RunSpec {
            experiment,
            design,
            workload,
            senders: 1,
            batch: 1,
            load: Load::Light,
            heavy_processing: self.heavy_processing,
            server_threads: self.server_threads,
            flush: self.flush,
            server_config: self.server_config,
            seed: self.seed,
            profile: self.profile.clone(),
            conditions: Conditions::default(),
            breakdown: false,
        }
    }

    fn run_specs(&self, specs: Vec<RunSpec>) -> Vec<RunResult> {
        let durable = self.durable;
        let progress = self.progress.clone();
        remora_remotelog::eval::parallel_map(&specs, self.threads, &|_, _| {}, |s| {
            let r =
                run(s, durable).unwrap_or_else(|e| RunResult::skipped(s, format!("failed: {e}")));
            if let Some(p) = &progress {
                (p.0)(&r);
            }
            r
        })
    }
}

/// §5.2 (Figures 8 and 9): objects of 32 B, 1 KB and 64 KB under heavy and light load;
/// throughput and p99 latency.
pub fn micro(o: &BenchOptions) -> Vec<RunResult> {
    let mut specs = Vec::new();
    for load in [Load::Heavy, Load::Light] {
        for size in [32, 1024, 64 * 1024] {
            for &d in &o.designs {
                let mut s = o.spec("micro", d, o.micro(size, 50));
                s.load = load;
                specs.push(s);
            }
        }
    }
    o.run_specs(specs)
}

/// §5.3 (Figure 11): YCSB A–F, 4 KB values, mean latency, light load.
pub fn ycsb(o: &BenchOptions) -> Vec<RunResult> {
    let mut specs = Vec::new();
    for kind in YcsbKind::ALL {
        let mut y = YcsbSpec::paper(kind);
        if o.quick {
            (y.records, y.operations, y.max_scan) = (256, 40, 10);
        } else {
            (y.records, y.operations) = (o.scaled(y.records), o.scaled(y.operations));
        }
        for &d in &o.designs {
            specs.push(o.spec("ycsb", d, Workload::Ycsb(y)));
        }
    }
    o.run_specs(specs)
}

/// Object sizes of §5.5 (Figure 13: "from 64 B to 4 KB ... larger than 4 KB"), and
/// beyond the paper's 64 KB.
pub const SIZES: [u64; 7] = [64, 256, 1024, 4096, 16384, 65536, 262144];

/// §5.5 object sizes (Figure 13): mean latency, micro-benchmark, light load.
pub fn sizes(o: &BenchOptions) -> Vec<RunResult> {
    let mut specs = Vec::new();
    for size in SIZES {
        for &d in &o.designs {
            specs.push(o.spec("sizes", d, o.micro(size, 50)));
        }
    }
    o.run_specs(specs)
}

/// §5.5 concurrent senders (Figure 17: "Each sender requests objects for 30K times").
pub fn senders(o: &BenchOptions) -> Vec<RunResult> {
    let mut specs = Vec::new();
    for n in [1u32, 2, 4, 8] {
        for &d in &o.designs {
            let mut w = o.micro(MicroSpec::default().object_bytes, 50);
            if let Workload::Micro(m) = &mut w {
                m.operations = if o.quick { 20 } else { o.scaled(30_000) };
            }
            let mut s = o.spec("senders", d, w);
            s.senders = n;
            specs.push(s);
        }
    }
    o.run_specs(specs)
}

/// §5.5 data access patterns (Figure 18): read:write 95:5, 50:50, 5:95.
pub fn read_write(o: &BenchOptions) -> Vec<RunResult> {
    let mut specs = Vec::new();
    for reads in [95u32, 50, 5] {
        for &d in &o.designs {
            specs.push(o.spec(
                "read_write",
                d,
                o.micro(MicroSpec::default().object_bytes, reads),
            ));
        }
    }
    o.run_specs(specs)
}

/// §5.5 batch sizes (Figure 19): total execution time with 1 … 16 requests per RPC.
pub fn batch(o: &BenchOptions) -> Vec<RunResult> {
    let mut specs = Vec::new();
    for b in [1u32, 2, 4, 8, 16] {
        for &d in &o.designs {
            let mut s = o.spec("batch", d, o.micro(MicroSpec::default().object_bytes, 50));
            s.batch = b;
            specs.push(s);
        }
    }
    o.run_specs(specs)
}

/// The PageRank run on `graph`: the paper's size with nodes and edges divided by
/// `divisor`; in quick mode a twentieth, at most three objects, and two iterations.
pub fn pagerank_spec(quick: bool, divisor: u64, graph: Graph) -> PageRankSpec {
    let mut p = PageRankSpec::paper(graph);
    if quick {
        p.edges = (graph.edges() / 20).min(3 * p.block_bytes / EDGE_BYTES);
        p.nodes = graph.nodes() / 20;
        p.iterations = 2;
    } else {
        p.edges = (p.edges / divisor.max(1)).max(1);
        p.nodes = (p.nodes / divisor.max(1)).max(1);
    }
    p
}

/// §5.3 (Figure 10): PageRank over graphs of the three datasets' sizes, one sender; the
/// run's execution time (fetches and the sender's computation).
pub fn pagerank(o: &BenchOptions) -> Vec<RunResult> {
    let mut specs = Vec::new();
    for g in Graph::ALL {
        for &d in &o.designs {
            specs.push(o.spec("pagerank", d, o.pagerank(g)));
        }
    }
    o.run_specs(specs)
}

/// The micro-benchmark of the load studies (§5.5, Figures 14–16: "the average latency of
/// RPCs in the micro-benchmark"): 64 KB objects, 50:50, light load. Its operations are a
/// tenth of the micro-benchmark's (the 30K requests per sender of Figure 17, scaled), so
/// the busy link's background packets (one simulated packet each) stay affordable.
fn load_study(o: &BenchOptions, experiment: &'static str, c: Conditions) -> Vec<RunSpec> {
    o.designs
        .iter()
        .map(|&d| {
            let mut w = o.micro(MicroSpec::default().object_bytes, 50);
            if let Workload::Micro(m) = &mut w {
                m.operations = if o.quick { 20 } else { o.scaled(30_000) };
            }
            let mut s = o.spec(experiment, d, w);
            s.conditions = c;
            s
        })
        .collect()
}

/// The idle runs Figures 14–16 compare with ([`load_study`] with nothing loaded).
pub fn load_idle(o: &BenchOptions) -> Vec<RunResult> {
    o.run_specs(load_study(o, "load_idle", Conditions::default()))
}

/// §5.5 network load (Figure 14): the load study with a background sender on another node
/// loading the link to the server ([`NetLoad`], [`BenchOptions::net_load`]).
pub fn net_load(o: &BenchOptions) -> Vec<RunResult> {
    let c = Conditions {
        net_load: Some(o.net_load),
        ..Conditions::default()
    };
    o.run_specs(load_study(o, "net_load", c))
}

/// §5.5 receivers' CPU load (Figure 15): the load study with a CPU-bound background
/// program on the server ([`BenchOptions::cpu_load`], [`remora_sim::cpu`]).
pub fn server_cpu(o: &BenchOptions) -> Vec<RunResult> {
    let c = Conditions {
        server_cpu: Some(o.cpu_load),
        ..Conditions::default()
    };
    o.run_specs(load_study(o, "server_cpu", c))
}

/// §5.5 senders' CPU load (Figure 16): the load study with a CPU-bound background program
/// on the sender.
pub fn sender_cpu(o: &BenchOptions) -> Vec<RunResult> {
    let c = Conditions {
        sender_cpu: Some(o.cpu_load),
        ..Conditions::default()
    };
    o.run_specs(load_study(o, "sender_cpu", c))
}

/// §5.6 software overhead (Figure 20): YCSB A (as in [`ycsb`]) with every RPC's latency
/// broken down into sender software, network and receiver software ([`Breakdown`]).
pub fn breakdown(o: &BenchOptions) -> Vec<RunResult> {
    let mut y = YcsbSpec::paper(YcsbKind::A);
    if o.quick {
        (y.records, y.operations, y.max_scan) = (256, 40, 10);
    } else {
        (y.records, y.operations) = (o.scaled(y.records), o.scaled(y.operations));
    }
    let specs = o
        .designs
        .iter()
        .map(|&d| {
            let mut s = o.spec("breakdown", d, Workload::Ycsb(y));
            s.breakdown = true;
            s
        })
        .collect();
    o.run_specs(specs)
}

/// Every experiment set's results.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    /// Quick or full mode.
    pub quick: bool,
    /// Full mode's sizes divided by this (1 = the paper's).
    pub divisor: u64,
    /// Seed.
    pub seed: u64,
    /// Latency profile name.
    pub profile: String,
    /// Server configuration name.
    pub config: String,
    /// Flush form of the durable RPCs.
    pub flush: String,
    /// Heavy-load processing time per request, ns.
    pub heavy_processing_ns: u64,
    /// Server worker threads of every design.
    pub server_threads: u32,
    /// §5.2.
    pub micro: Vec<RunResult>,
    /// §5.3.
    pub ycsb: Vec<RunResult>,
    /// §5.5 object sizes.
    pub sizes: Vec<RunResult>,
    /// §5.5 concurrent senders.
    pub senders: Vec<RunResult>,
    /// §5.5 read/write ratios.
    pub read_write: Vec<RunResult>,
    /// §5.5 batch sizes.
    pub batch: Vec<RunResult>,
    /// §5.5 load studies: the idle runs (Figures 14–16).
    pub load_idle: Vec<RunResult>,
    /// §5.5 busy link (Figure 14).
    pub net_load: Vec<RunResult>,
    /// §5.5 busy server CPU (Figure 15).
    pub server_cpu: Vec<RunResult>,
    /// §5.5 busy sender CPU (Figure 16).
    pub sender_cpu: Vec<RunResult>,
    /// §5.6 latency breakdown, YCSB A (Figure 20).
    pub breakdown: Vec<RunResult>,
    /// §5.3 PageRank (Figure 10).
    pub pagerank: Vec<RunResult>,
    /// The busy link's offered load, percent of the link bandwidth.
    pub net_load_percent: u32,
    /// The busy link's packet payload, bytes.
    pub net_packet_bytes: u64,
    /// The switch-port queue at which the background sender pauses, ns.
    pub net_max_queue_ns: u64,
    /// The busy CPU's background share, percent.
    pub cpu_load_percent: u32,
    /// The busy CPU's mean scheduling period, ns.
    pub cpu_period_ns: u64,
    /// §5.4: the durable RPCs' measured replay cost per logged request.
    pub replay: Vec<durable::ReplayResult>,
    /// §5.4 scenario.
    pub recovery_params: RecoveryParams,
    /// §5.4.
    pub recovery: Vec<RecoveryResult>,
    /// The experiment sets that ran ([`Set::name`]); the others' tables are empty.
    pub sets: Vec<String>,
    /// Wall-clock seconds the run took (set by the caller; 0 if unknown).
    pub wall_s: f64,
    /// The command that regenerates these results (set by the caller; empty if unknown).
    pub command: String,
}

impl Results {
    /// Every run result, set by set.
    pub fn runs(&self) -> impl Iterator<Item = &RunResult> {
        self.micro
            .iter()
            .chain(&self.ycsb)
            .chain(&self.sizes)
            .chain(&self.senders)
            .chain(&self.read_write)
            .chain(&self.batch)
            .chain(&self.load_idle)
            .chain(&self.net_load)
            .chain(&self.server_cpu)
            .chain(&self.sender_cpu)
            .chain(&self.breakdown)
            .chain(&self.pagerank)
    }
}

/// Runs every experiment set. Recovery (§5.4) uses the read/write runs' latencies: a
/// baseline re-sends across an outage ([`FailureSide::baseline`]); a durable RPC keeps
/// logging writes and re-executes them from its log, at the replay cost measured by
/// [`durable::measure_replay`] ([`FailureSide::durable`]).
pub fn run_all(o: &BenchOptions) -> Results {
    let only = |s: Set, f: &dyn Fn(&BenchOptions) -> Vec<RunResult>| {
        if o.runs(s) {
            f(o)
        } else {
            Vec::new()
        }
    };
    let read_write = only(Set::ReadWrite, &read_write);
    let params = if o.quick {
        RecoveryParams::quick()
    } else {
        RecoveryParams::paper()
    };
    let object = MicroSpec::default().object_bytes;
    // The replay measurements serve only the recovery model, which needs the read:write
    // runs.
    let durable: Vec<Design> = o
        .designs
        .iter()
        .copied()
        .filter(|d| d.is_durable_rpc() && o.runs(Set::ReadWrite))
        .collect();
    let replay: Vec<durable::ReplayResult> = durable
        .iter()
        .map(|&d| {
            let r =
                durable::measure_replay(d, o.flush, object, &o.profile, o.server_config, o.seed);
            if let Some(p) = &o.progress {
                let mut shown =
                    RunResult::skipped(&o.spec("replay", d, o.micro(object, 0)), String::new());
                shown.skipped = r.skipped.clone();
                (p.0)(&shown);
            }
            r
        })
        .collect();
    let mut sides = Vec::new();
    for r in read_write.iter().filter(|r| r.skipped.is_none()) {
        if recovery::is_durable(&r.design) {
            let Some(rep) = replay
                .iter()
                .find(|x| x.design == r.design && x.skipped.is_none())
            else {
                continue;
            };
            let read = if r.read_mean_ns.is_nan() {
                r.mean_ns
            } else {
                r.read_mean_ns
            };
            let write = if r.write_mean_ns.is_nan() {
                r.mean_ns
            } else {
                r.write_mean_ns
            };
            sides.push((
                FailureSide::durable(&r.design, read, write, rep.replay_ns),
                r.read_percent,
            ));
            // The same latencies with a re-sending sender: Figure 12's normalization.
            sides.push((FailureSide::baseline(r), r.read_percent));
        } else {
            sides.push((FailureSide::baseline(r), r.read_percent));
        }
    }
    let recovery = recovery::recovery_of(&sides, &params, o.seed);
    Results {
        quick: o.quick,
        divisor: if o.quick { 1 } else { o.divisor.max(1) },
        seed: o.seed,
        profile: o.profile.name.clone(),
        config: o.server_config.name(),
        flush: flush_name(o.flush).into(),
        heavy_processing_ns: o.heavy_processing.as_nanos(),
        server_threads: o.server_threads,
        micro: only(Set::Micro, &micro),
        ycsb: only(Set::Ycsb, &ycsb),
        sizes: only(Set::Sizes, &sizes),
        senders: only(Set::Senders, &senders),
        read_write,
        batch: only(Set::Batch, &batch),
        load_idle: only(Set::Load, &load_idle),
        net_load: only(Set::Load, &net_load),
        server_cpu: only(Set::Load, &server_cpu),
        sender_cpu: only(Set::Load, &sender_cpu),
        breakdown: only(Set::Breakdown, &breakdown),
        pagerank: only(Set::PageRank, &pagerank),
        net_load_percent: o.net_load.percent,
        net_packet_bytes: o.net_load.packet_bytes,
        net_max_queue_ns: o.net_load.max_queue.as_nanos(),
        cpu_load_percent: o.cpu_load.percent,
        cpu_period_ns: o.cpu_load.period.as_nanos(),
        replay,
        recovery_params: params,
        recovery,
        sets: o.sets.iter().map(|x| x.name().to_string()).collect(),
        wall_s: 0.0,
        command: String::new(),
    }
}
