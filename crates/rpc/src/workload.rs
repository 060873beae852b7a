//! The workloads of seed 003 §5.1, generated lazily and deterministically from a seed.
//!
//! * The **micro-benchmark**: "the sender first generates 50K objects in a remote server,
//!   and then reads/writes these objects for 300K times ... The default object size is
//!   64 KB. The data access pattern follows a zipfian distribution with a read/write ratio
//!   of 1:1" ([`MicroSpec`]).
//! * **YCSB A–F**: "we store 50K objects in a KV store system. The sizes of keys and values
//!   are 8 Bytes and 4 KB ... We perform KV operations 300K times"; A 50/50 update/read,
//!   B 95/5 read/update, C read-only, D 95% reads of the most recently inserted records and
//!   5% inserts, E 95% scans and 5% inserts, F 50% reads and 50% read-modify-writes; "the
//!   data access patterns of these workloads (except D) all follow a zipfian distribution
//!   (99% skewness)" ([`YcsbSpec`]).
//! * **PageRank** (§5.3, Figure 10): "We store the graph data in a remote server's PM, and
//!   store the intermediate results of PageRank in the main memory of the computation node
//!   locally. The graph data are fetched via RPCs by the client node", for graphs of the
//!   sizes of Word association-2011, Enron and Dblp-2010 ([`PageRankSpec`]).
//!
//! Keys come from YCSB's own generators (Gray et al.'s Zipfian algorithm as in YCSB's
//! `ZipfianGenerator`, scrambled with FNV-1a as in `ScrambledZipfianGenerator`, and
//! `SkewedLatestGenerator` for D), written here rather than taken from `rand_distr` so the
//! sequence is YCSB's and fixed by the seed. Values are not stored ahead of time (300K
//! 64 KB values would be 19 GB): [`value_for`] derives an object's bytes from its key and
//! version, and [`check_value`] tells a well-formed object from anything else.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// YCSB's Zipfian constant for "99% skewness" (seed 003 §5.1; YCSB `ZIPFIAN_CONSTANT`).
pub const ZIPF_THETA: f64 = 0.99;

/// Generalized harmonic number: `sum_{i=from+1..=to} 1/i^theta` added to `acc`.
fn zeta_extend(acc: f64, from: u64, to: u64, theta: f64) -> f64 {
    let mut z = acc;
    for i in from + 1..=to {
        z += 1.0 / (i as f64).powf(theta);
    }
    z
}

/// YCSB's `ZipfianGenerator` (Gray et al., "Quickly generating billion-record synthetic
/// databases", SIGMOD 1994): ranks `0..n`, rank 0 the most popular, `P(i) ∝ 1/(i+1)^θ`.
/// The item count may grow (inserts), extending ζ(n) incrementally as YCSB does.
#[derive(Clone, Debug)]
pub struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zeta2: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    /// A generator over `n >= 1` items with skew `theta` in `(0, 1)`.
    pub fn new(n: u64, theta: f64) -> Self {
        assert!(n >= 1, "a Zipfian needs at least one item");
        assert!(
            theta > 0.0 && theta < 1.0,
            "YCSB's algorithm needs 0 < θ < 1"
        );
        let zetan = zeta_extend(0.0, 0, n, theta);
        let mut z = Zipfian {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2: zeta_extend(0.0, 0, 2, theta),
            zetan,
            eta: 0.0,
        };
        z.eta = z.eta_for(n);
        z
    }

    fn eta_for(&self, n: u64) -> f64 {
        (1.0 - (2.0 / n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// Items.
    pub fn items(&self) -> u64 {
        self.n
    }

    /// ζ(n) = Σ 1/i^θ, the normalizer: `P(rank 0) = 1/ζ(n)`.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// Grows the item count to `n` (never shrinks).
    pub fn grow(&mut self, n: u64) {
        if n > self.n {
            self.zetan = zeta_extend(self.zetan, self.n, n, self.theta);
            self.n = n;
            self.eta = self.eta_for(n);
        }
    }

    /// The next rank in `0..n`.
    pub fn next_rank(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// FNV-1a over the 8 bytes of `v` (YCSB `Utils.fnvhash64`), used to scramble ranks so the
/// popular objects are spread over the key space (YCSB `ScrambledZipfianGenerator`).
pub fn fnv64(v: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in v.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// How keys are chosen.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub enum KeyDist {
    /// Scrambled Zipfian with skew θ (seed 003 §5.1: "zipfian distribution (99% skewness)").
    Zipfian(f64),
    /// Uniform.
    Uniform,
    /// YCSB "latest": Zipfian over recency, the newest record the most popular (workload D).
    Latest(f64),
}

/// What one generated operation does.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum OpKind {
    /// Read one object.
    Read,
    /// Overwrite one existing object.
    Update,
    /// Write a new object (key past every existing one).
    Insert,
    /// Read `count` objects from the key upward (YCSB E).
    Scan {
        /// Objects to read.
        count: u32,
    },
    /// Read an object, then write it (YCSB F); one operation, one latency.
    ReadModifyWrite,
}

impl OpKind {
    /// True for operations that change an object.
    pub fn writes(self) -> bool {
        matches!(
            self,
            OpKind::Update | OpKind::Insert | OpKind::ReadModifyWrite
        )
    }
}

/// One generated operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OpSpec {
    /// What to do.
    pub kind: OpKind,
    /// The object (first object of a scan).
    pub key: u64,
}

/// The micro-benchmark of seed 003 §5.1.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct MicroSpec {
    /// Objects created before the run (§5.1: 50K).
    pub objects: u64,
    /// Operations (§5.1: 300K).
    pub operations: u64,
    /// Percentage of reads; the rest are writes (§5.1: 1:1, i.e. 50; §5.5 also 95 and 5).
    pub read_percent: u32,
    /// Object size in bytes (§5.1: 64 KB default; 32 B, 1 KB, 64 KB in §5.2).
    pub object_bytes: u64,
    /// Key distribution (§5.1: Zipfian).
    pub dist: KeyDist,
}

impl Default for MicroSpec {
    fn default() -> Self {
        MicroSpec {
            objects: 50_000,
            operations: 300_000,
            read_percent: 50,
            object_bytes: 64 * 1024,
            dist: KeyDist::Zipfian(ZIPF_THETA),
        }
    }
}

/// The six YCSB core workloads (seed 003 §5.1, "Macro-benchmarks").
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum YcsbKind {
    /// 50% reads, 50% updates.
    A,
    /// 95% reads, 5% updates.
    B,
    /// 100% reads.
    C,
    /// 95% reads of the latest records, 5% inserts.
    D,
    /// 95% scans, 5% inserts.
    E,
    /// 50% reads, 50% read-modify-writes.
    F,
}

impl YcsbKind {
    /// All six, in order.
    pub const ALL: [YcsbKind; 6] = [
        YcsbKind::A,
        YcsbKind::B,
        YcsbKind::C,
        YcsbKind::D,
        YcsbKind::E,
        YcsbKind::F,
    ];

    /// "A" … "F".
    pub fn name(self) -> &'static str {
        match self {
            YcsbKind::A => "A",
            YcsbKind::B => "B",
            YcsbKind::C => "C",
            YcsbKind::D => "D",
            YcsbKind::E => "E",
            YcsbKind::F => "F",
        }
    }

    /// Percentages of (read, update, insert, scan, read-modify-write).
    pub fn mix(self) -> [u32; 5] {
        match self {
            YcsbKind::A => [50, 50, 0, 0, 0],
            YcsbKind::B => [95, 5, 0, 0, 0],
            YcsbKind::C => [100, 0, 0, 0, 0],
            YcsbKind::D => [95, 0, 5, 0, 0],
            YcsbKind::E => [0, 0, 5, 95, 0],
            YcsbKind::F => [50, 0, 0, 0, 50],
        }
    }
}

/// A YCSB workload with seed 003 §5.1's sizes as defaults.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct YcsbSpec {
    /// Which workload.
    pub kind: YcsbKind,
    /// Records loaded before the run (§5.1: 50K).
    pub records: u64,
    /// Operations (§5.1: 300K).
    pub operations: u64,
    /// Value bytes (§5.1: 4 KB). Keys are 8 bytes (the `u64` key).
    pub value_bytes: u64,
    /// Zipfian skew (§5.1: 0.99).
    pub theta: f64,
    /// Longest scan; lengths are uniform in `1..=max_scan` (YCSB workload E's default, 100).
    pub max_scan: u32,
}

impl YcsbSpec {
    /// Workload `kind` with the paper's sizes.
    pub fn paper(kind: YcsbKind) -> Self {
        YcsbSpec {
            kind,
            records: 50_000,
            operations: 300_000,
            value_bytes: 4096,
            theta: ZIPF_THETA,
            max_scan: 100,
        }
    }
}

/// The graphs of seed 003 §5.1 ("Macro-benchmarks"), by their sizes: "Word
/// association-2011 \[50\] contains 10K nodes and 72K edges. Enron \[49\] contains 69K nodes
/// and 276K edges. Dblp-2010 \[48\] contains 326K nodes and 1615K edges."
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Graph {
    /// Word association-2011: 10K nodes, 72K edges.
    WordAssociation,
    /// Enron: 69K nodes, 276K edges.
    Enron,
    /// Dblp-2010: 326K nodes, 1,615K edges.
    Dblp,
}

impl Graph {
    /// The three, smallest first (Figure 10's order).
    pub const ALL: [Graph; 3] = [Graph::WordAssociation, Graph::Enron, Graph::Dblp];

    /// The dataset's name.
    pub fn name(self) -> &'static str {
        match self {
            Graph::WordAssociation => "wordassoc-2011",
            Graph::Enron => "enron",
            Graph::Dblp => "dblp-2010",
        }
    }

    /// Nodes (§5.1).
    pub fn nodes(self) -> u64 {
        match self {
            Graph::WordAssociation => 10_000,
            Graph::Enron => 69_000,
            Graph::Dblp => 326_000,
        }
    }

    /// Edges (§5.1).
    pub fn edges(self) -> u64 {
        match self {
            Graph::WordAssociation => 72_000,
            Graph::Enron => 276_000,
            Graph::Dblp => 1_615_000,
        }
    }
}

/// Bytes of one edge in the server's copy of the graph: two 4-byte node numbers (every
/// graph of §5.1 has fewer than 2^32 nodes). Assumption: the paper does not give its layout.
pub const EDGE_BYTES: u64 = 8;

/// PageRank iterations. Assumption (the paper does not say): a fixed count, so every
/// design fetches the same data; the ratios between designs do not depend on it.
pub const PAGERANK_ITERATIONS: u32 = 10;

/// Client CPU time per edge of an iteration: reading the source's rank from the local
/// rank array (a cache miss on the larger graphs) and adding its share to the
/// destination's. Assumption: the paper gives no timing of its computation, only that it
/// is "computation-intensive" (§5.3).
pub const PAGERANK_EDGE_NS: u64 = 5;

/// Client CPU time per node at the end of an iteration (the damping and the new rank
/// written back). Assumption, like [`PAGERANK_EDGE_NS`].
pub const PAGERANK_NODE_NS: u64 = 2;

/// PageRank as an RPC workload (seed 003 §5.3, Figure 10): the graph's edge list lies in
/// the server's PM as objects of `block_bytes` (the §5.1 default object size, 64 KB); each
/// iteration the client fetches every block with a Get, in order, and computes on it
/// before fetching the next ([`Workload::think`]: its edges' CPU time, and at the end of
/// an iteration its nodes'), keeping the ranks in its own memory. The blocks are the
/// store's checked objects ([`value_for`]), not a real edge list: what the model measures
/// is the run's time, which depends on the graph's size, not on which node links to which.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct PageRankSpec {
    /// The graph whose sizes the run takes.
    pub graph: Graph,
    /// Nodes (the graph's, or fewer in a scaled-down run).
    pub nodes: u64,
    /// Edges (the graph's, or fewer in a scaled-down run).
    pub edges: u64,
    /// Iterations.
    pub iterations: u32,
    /// Bytes of the objects the edge list is stored in.
    pub block_bytes: u64,
}

impl PageRankSpec {
    /// `graph` at the paper's size, in 64 KB objects.
    pub fn paper(graph: Graph) -> Self {
        PageRankSpec {
            graph,
            nodes: graph.nodes(),
            edges: graph.edges(),
            iterations: PAGERANK_ITERATIONS,
            block_bytes: 64 * 1024,
        }
    }

    /// Objects the edge list fills.
    pub fn blocks(&self) -> u64 {
        (self.edges * EDGE_BYTES).div_ceil(self.block_bytes).max(1)
    }

    /// Edges in block `b` (the last one may be partly filled).
    pub fn edges_in(&self, b: u64) -> u64 {
        let per = self.block_bytes / EDGE_BYTES;
        self.edges.saturating_sub(b * per).min(per)
    }

    /// Client CPU time after fetching block `b`: its edges, and at the end of an
    /// iteration (the last block) every node.
    pub fn think(&self, b: u64) -> u64 {
        let nodes = if b + 1 == self.blocks() {
            self.nodes * PAGERANK_NODE_NS
        } else {
            0
        };
        self.edges_in(b) * PAGERANK_EDGE_NS + nodes
    }
}

/// Any of the workload families.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub enum Workload {
    /// §5.1 micro-benchmark.
    Micro(MicroSpec),
    /// §5.1 YCSB.
    Ycsb(YcsbSpec),
    /// §5.3 PageRank.
    PageRank(PageRankSpec),
}

impl Workload {
    /// Objects present before the run.
    pub fn preload(&self) -> u64 {
        match self {
            Workload::Micro(m) => m.objects,
            Workload::Ycsb(y) => y.records,
            Workload::PageRank(p) => p.blocks(),
        }
    }

    /// Operations in the run (for one sender).
    pub fn operations(&self) -> u64 {
        match self {
            Workload::Micro(m) => m.operations,
            Workload::Ycsb(y) => y.operations,
            Workload::PageRank(p) => p.blocks() * p.iterations as u64,
        }
    }

    /// Size of every object.
    pub fn object_bytes(&self) -> u64 {
        match self {
            Workload::Micro(m) => m.object_bytes,
            Workload::Ycsb(y) => y.value_bytes,
            Workload::PageRank(p) => p.block_bytes,
        }
    }

    /// Largest scan (objects) an operation may ask for.
    pub fn max_scan(&self) -> u32 {
        match self {
            Workload::Ycsb(y) if y.kind == YcsbKind::E => y.max_scan,
            Workload::Micro(_) | Workload::Ycsb(_) | Workload::PageRank(_) => 1,
        }
    }

    /// Percentage of inserts.
    fn insert_percent(&self) -> u32 {
        match self {
            Workload::Micro(_) | Workload::PageRank(_) => 0,
            Workload::Ycsb(y) => y.kind.mix()[2],
        }
    }

    /// Keys the store must hold: the preloaded objects plus room for this many senders'
    /// inserts (the expected number plus a margin of several standard deviations; a
    /// generator that would overflow it reads instead, see [`Generator`]).
    pub fn key_space(&self, senders: u64) -> u64 {
        let p = self.insert_percent() as f64 / 100.0;
        let ops = (self.operations() * senders) as f64;
        let extra = ops * p + 6.0 * (ops * p * (1.0 - p)).sqrt() + 64.0;
        self.preload() + if p > 0.0 { extra.ceil() as u64 } else { 0 }
    }

    /// A short name for tables.
    pub fn name(&self) -> String {
        match self {
            Workload::Micro(m) => format!(
                "micro {}B r{}:w{}",
                m.object_bytes,
                m.read_percent,
                100 - m.read_percent
            ),
            Workload::Ycsb(y) => format!("YCSB-{}", y.kind.name()),
            Workload::PageRank(p) => format!("PageRank {}", p.graph.name()),
        }
    }

    /// Sender CPU time after an operation on `key` (PageRank's computation on the block
    /// it fetched; nothing for the other workloads).
    pub fn think(&self, key: u64) -> remora_model::time::Duration {
        match self {
            Workload::PageRank(p) => remora_model::time::Duration::from_nanos(p.think(key)),
            Workload::Micro(_) | Workload::Ycsb(_) => remora_model::time::Duration::ZERO,
        }
    }

    /// The operation stream of one sender: deterministic in `seed` (PageRank's is every
    /// block in order, once per iteration).
    pub fn generator(&self, seed: u64) -> Generator {
        Generator::new(*self, seed)
    }
}

/// Keys handed out for inserts, shared by every sender of one run (inserts by different
/// senders must not collide). Single-threaded, like the simulator.
pub type InsertCursor = std::rc::Rc<std::cell::Cell<u64>>;

/// The operation stream of one sender.
#[derive(Clone, Debug)]
pub struct Generator {
    w: Workload,
    rng: ChaCha8Rng,
    left: u64,
    zipf: Zipfian,
    inserts: InsertCursor,
    capacity: u64,
}

impl Generator {
    fn new(w: Workload, seed: u64) -> Self {
        let theta = match w {
            Workload::Micro(MicroSpec {
                dist: KeyDist::Zipfian(t) | KeyDist::Latest(t),
                ..
            }) => t,
            Workload::Ycsb(y) => y.theta,
            _ => ZIPF_THETA,
        };
        Generator {
            w,
            rng: ChaCha8Rng::seed_from_u64(seed),
            left: w.operations(),
            zipf: Zipfian::new(w.preload().max(1), theta),
            inserts: std::rc::Rc::new(std::cell::Cell::new(w.preload())),
            capacity: w.key_space(1),
        }
    }

    /// Shares `cursor` for inserts with other senders; `capacity` is the store's key space.
    pub fn share_inserts(mut self, cursor: InsertCursor, capacity: u64) -> Self {
        self.inserts = cursor;
        self.capacity = capacity;
        self
    }

    fn existing(&self) -> u64 {
        self.inserts.get().max(1)
    }

    fn pick(&mut self, dist: KeyDist) -> u64 {
        let n = self.existing();
        match dist {
            KeyDist::Uniform => self.rng.gen_range(0..n),
            KeyDist::Zipfian(_) => {
                self.zipf.grow(n);
                fnv64(self.zipf.next_rank(&mut self.rng)) % n
            }
            KeyDist::Latest(_) => {
                self.zipf.grow(n);
                n - 1 - self.zipf.next_rank(&mut self.rng)
            }
        }
    }

    fn insert_key(&mut self) -> Option<u64> {
        let k = self.inserts.get();
        if k < self.capacity {
            self.inserts.set(k + 1);
            Some(k)
        } else {
            None
        }
    }
}

impl Iterator for Generator {
    type Item = OpSpec;

    fn next(&mut self) -> Option<OpSpec> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if let Workload::PageRank(p) = self.w {
            // No draw: the order is the algorithm's.
            let done = p.blocks() * p.iterations as u64 - self.left - 1;
            return Some(OpSpec {
                kind: OpKind::Read,
                key: done % p.blocks(),
            });
        }
        let roll = self.rng.gen_range(0..100u32);
        match self.w {
            Workload::Micro(m) => {
                let key = self.pick(m.dist);
                let kind = if roll < m.read_percent {
                    OpKind::Read
                } else {
                    OpKind::Update
                };
                Some(OpSpec { kind, key })
            }
            Workload::Ycsb(y) => {
                let dist = if y.kind == YcsbKind::D {
                    KeyDist::Latest(y.theta)
                } else {
                    KeyDist::Zipfian(y.theta)
                };
                let mix = y.kind.mix();
                let mut acc = 0;
                let mut which = 0;
                for (i, p) in mix.iter().enumerate() {
                    acc += p;
                    if roll < acc {
                        which = i;
                        break;
                    }
                }
                let op = match which {
                    1 => OpSpec {
                        kind: OpKind::Update,
                        key: self.pick(dist),
                    },
                    2 => match self.insert_key() {
                        Some(key) => OpSpec {
                            kind: OpKind::Insert,
                            key,
                        },
                        None => OpSpec {
                            kind: OpKind::Read,
                            key: self.pick(dist),
                        },
                    },
                    3 => {
                        let count = self.rng.gen_range(1..=y.max_scan.max(1));
                        OpSpec {
                            kind: OpKind::Scan { count },
                            key: self.pick(dist),
                        }
                    }
                    4 => OpSpec {
                        kind: OpKind::ReadModifyWrite,
                        key: self.pick(dist),
                    },
                    _ => OpSpec {
                        kind: OpKind::Read,
                        key: self.pick(dist),
                    },
                };
                Some(op)
            }
            Workload::PageRank(_) => unreachable!("handled above"),
        }
    }
}

/// Smallest object [`value_for`] can describe (key and version).
pub const MIN_OBJECT: u64 = 16;

/// The bytes of version `version` of object `key`: the key, the version, then a pattern
/// both determine. Version 0 is the preloaded object.
pub fn value_for(key: u64, version: u64, len: u64) -> Vec<u8> {
    assert!(len >= MIN_OBJECT, "objects carry their key and version");
    let mut v = Vec::with_capacity(len as usize);
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    let seed =
        key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    // Word at a time: a full run generates and checks 300K 64 KB objects.
    let mut i = 2u64;
    while (v.len() as u64) < len {
        let word = (seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93)).to_le_bytes();
        let take = (len - v.len() as u64).min(8) as usize;
        v.extend_from_slice(&word[..take]);
        i += 1;
    }
    v
}

/// Checks that `bytes` is some version of object `key` of `len` bytes; returns the version.
pub fn check_value(key: u64, len: u64, bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() as u64 != len {
        return Err(format!(
            "object {key}: {} bytes, expected {len}",
            bytes.len()
        ));
    }
    let stored = u64::from_le_bytes(bytes[0..8].try_into().expect("16 bytes"));
    let version = u64::from_le_bytes(bytes[8..16].try_into().expect("16 bytes"));
    if stored != key {
        return Err(format!("object {key} holds object {stored}'s bytes"));
    }
    if value_for(key, version, len) != bytes {
        return Err(format!("object {key} version {version} is corrupt"));
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipfian_matches_its_distribution() {
        let n = 1000;
        let z = Zipfian::new(n, ZIPF_THETA);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let draws = 200_000u64;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            counts[z.next_rank(&mut rng) as usize] += 1;
        }
        // Ranks 0 and 1 are exact in Gray's algorithm: 1/ζ(n) and 0.5^θ/ζ(n).
        let p0 = 1.0 / z.zetan();
        let p1 = 0.5f64.powf(ZIPF_THETA) / z.zetan();
        let f0 = counts[0] as f64 / draws as f64;
        let f1 = counts[1] as f64 / draws as f64;
        assert!((f0 - p0).abs() < 0.01, "rank 0: {f0} vs {p0}");
        assert!((f1 - p1).abs() < 0.01, "rank 1: {f1} vs {p1}");
        // The mass of the top 10% of ranks is close to the exact Zipf mass.
        let top = (n / 10) as usize;
        let exact: f64 = (1..=top)
            .map(|i| 1.0 / (i as f64).powf(ZIPF_THETA))
            .sum::<f64>()
            / z.zetan();
        let got = counts[..top].iter().sum::<u64>() as f64 / draws as f64;
        assert!((got - exact).abs() < 0.03, "top 10%: {got} vs {exact}");
        // Popularity falls with rank (averaged over bands).
        let band = |a: usize, b: usize| counts[a..b].iter().sum::<u64>();
        assert!(band(0, 10) > band(10, 100) / 3);
        assert!(band(10, 100) > band(500, 590));
    }

    #[test]
    fn growing_matches_a_fresh_generator() {
        let mut g = Zipfian::new(100, ZIPF_THETA);
        g.grow(5000);
        let f = Zipfian::new(5000, ZIPF_THETA);
        assert!((g.zetan() - f.zetan()).abs() < 1e-9);
        assert_eq!(g.items(), 5000);
    }

    #[test]
    fn values_identify_key_and_version() {
        let v = value_for(42, 7, 64);
        assert_eq!(check_value(42, 64, &v), Ok(7));
        assert!(check_value(43, 64, &v).is_err());
        let mut bad = v.clone();
        bad[40] ^= 1;
        assert!(check_value(42, 64, &bad).is_err());
        assert!(check_value(42, 32, &v).is_err());
        assert_ne!(value_for(42, 7, 64), value_for(42, 8, 64));
    }
}
