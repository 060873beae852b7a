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
//! [`run`] picks [`BaselineDeployment`](crate::harness::BaselineDeployment) for a baseline and
//! [`DurableDeployment`](crate::harness::DurableDeployment) (or the caller's
//! [`DurableRunner`]) for a durable RPC, with the Flush primitives in the run's
//! [`FlushForm`] (emulated by default, as the paper measured; a native form the model
//! lacks is reported as unsupported, never substituted). [`run_all`] runs every set and
//! [`report::write_report`] writes `rpc.md`, `rpc.csv`, `rpc.json` and SVG plots.
//!
//! Files: this one holds what a run is and measured ([`RunSpec`], [`RunResult`],
//! [`Results`]) and [`run_all`]; `driver.rs` runs one design on one workload (senders,
//! read checks, timing); `sets.rs` the experiment sets and [`BenchOptions`]; `report.rs`
//! and `claims.rs` the page; `recovery.rs` §5.4's model; `durable.rs` the replay
//! measurement.

mod claims;
mod driver;
pub mod durable;
pub mod recovery;
pub mod report;
mod sets;

use crate::baselines::transport_substituted;
use crate::design::{Design, FlushForm};
use crate::harness::Conditions;
use crate::workload::{MicroSpec, Workload};
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::Duration;
pub use remora_sim::CpuLoad;
use serde::Serialize;

pub use driver::{run, run_with, sender_seed, touched_keys, unsupported, DurableRunner};
pub use recovery::{recovery, recovery_of, FailureSide, RecoveryParams, RecoveryResult};
pub use report::write_report;
pub use sets::{
    batch, breakdown, load_idle, micro, net_load, pagerank, pagerank_spec, read_write, sender_cpu,
    senders, server_cpu, sizes, ycsb, BenchOptions, Progress, Set, CPU_LOAD, SIZES,
};

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
    pub(crate) fn skipped(spec: &RunSpec, why: String) -> Self {
        let mut r = Self::empty(spec);
        r.skipped = Some(why);
        r
    }

    pub(crate) fn empty(spec: &RunSpec) -> Self {
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
