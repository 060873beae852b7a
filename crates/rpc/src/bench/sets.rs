//! The experiment sets of seed 003 §5 (which runs each makes) and the options they run
//! with.

use super::*;
use crate::baselines::BASELINES;
use crate::harness::{dmp, Conditions, NetLoad};
use crate::workload::{Graph, MicroSpec, PageRankSpec, YcsbKind, YcsbSpec, EDGE_BYTES};
use std::sync::Arc;

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
    /// Runs durable RPCs instead of [`DurableDeployment`](crate::harness::DurableDeployment) (default `None`).
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

    pub(super) fn micro(&self, object_bytes: u64, read_percent: u32) -> Workload {
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

    pub(super) fn spec(
        &self,
        experiment: &'static str,
        design: Design,
        workload: Workload,
    ) -> RunSpec {
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

/// The idle runs Figures 14–16 compare with (the load study with nothing loaded).
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
