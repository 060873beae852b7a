//! The driver: runs one design on one workload in a simulation (`run_with`), with every
//! sender issuing its operation stream, checking what it reads and timing each RPC.

use super::*;
use crate::account::WorkLog;
use crate::api::{Op, RpcClient, ServerCosts};
use crate::harness::{BaselineDeployment, Deployment, DurableDeployment, SimEnv, SimSetup};
use crate::workload::{check_value, fnv64, InsertCursor, OpKind, OpSpec};
use remora_model::time::Instant;
use remora_verbs::Verbs;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

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
