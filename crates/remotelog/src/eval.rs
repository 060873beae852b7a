//! The RemoteLog evaluation of seed 000 §4: every scenario, `appends` appends each, mean /
//! p50 / p99 latency, on the simulator with a latency profile. Scenarios are independent
//! simulations, spread over worker threads.

use crate::log::{collect_garbage, LogClient, LogShape};
use remora::harness::SimPair;
use remora::{Scenario, ServerSetup, Shape, Taxonomy};
use remora_model::profile::LatencyProfile;
use remora_verbs::Verbs;
use serde::Serialize;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// How to run the evaluation.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// Appends per scenario (seed 000 §4.1: 10,000,000).
    pub appends: u64,
    /// Seed of every simulation.
    pub seed: u64,
    /// Latency profile.
    pub profile: LatencyProfile,
    /// Log shape.
    pub shape: LogShape,
    /// Worker threads.
    pub threads: usize,
}

/// One scenario's result.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioResult {
    /// `update/config/primitive`.
    pub scenario: String,
    /// Update kind.
    pub update: String,
    /// Server configuration.
    pub config: String,
    /// Primitive.
    pub primitive: String,
    /// The method the library ran.
    pub method: String,
    /// Appends measured.
    pub appends: u64,
    /// Mean latency, ns.
    pub mean_ns: f64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Maximum, ns.
    pub max_ns: u64,
    /// Events the simulator processed.
    pub events: u64,
}

/// Runs one scenario.
pub fn run_scenario(sc: &Scenario, opts: &EvalOptions) -> Result<ScenarioResult, String> {
    let setup = ServerSetup {
        region_len: opts.shape.region_len(),
        ..ServerSetup::default()
    };
    let pair = SimPair::new(opts.seed, opts.profile.clone(), sc.config, setup);
    let (client, region) = pair.open().map_err(|e| e.to_string())?;
    let (shape, update) = (opts.shape, sc.update);
    let running = Rc::new(std::cell::Cell::new(true));
    let r = running.clone();
    pair.sim.spawn_on(
        &pair.server,
        collect_garbage(pair.server.clone(), region.addr, shape, update, move || {
            r.get()
        }),
    );
    let method = Taxonomy::shipped()
        .method_for(&sc.config, sc.primitive, sc.update, Shape { b_len: 8 })
        .name
        .clone();
    let hist = Rc::new(RefCell::new(
        hdrhistogram::Histogram::<u64>::new(3).expect("histogram"),
    ));
    let err = Rc::new(RefCell::new(None));
    let (h, e, node, n, primitive) = (
        hist.clone(),
        err.clone(),
        pair.client.clone(),
        opts.appends,
        sc.primitive,
    );
    pair.sim.spawn_on(&pair.client, async move {
        let _stop = StopOnDrop(running);
        let mut client = client;
        if let Err(x) = client.connect(primitive, Shape { b_len: 8 }).await {
            *e.borrow_mut() = Some(x.to_string());
            return;
        }
        let mut log = LogClient::new(client, shape, update);
        for _ in 0..n {
            let t0 = node.now();
            if let Err(x) = log.append().await {
                *e.borrow_mut() = Some(x.to_string());
                return;
            }
            h.borrow_mut()
                .record((node.now() - t0).as_nanos())
                .expect("latency fits the histogram");
        }
    });
    let events = pair.sim.run();
    if let Some(x) = err.borrow_mut().take() {
        return Err(format!("{}: {x}", sc.name()));
    }
    let h = hist.borrow();
    if h.len() != n {
        return Err(format!(
            "{}: only {} of {n} appends finished",
            sc.name(),
            h.len()
        ));
    }
    Ok(ScenarioResult {
        scenario: sc.name(),
        update: sc.update.name().into(),
        config: sc.config.name(),
        primitive: sc.primitive.name().into(),
        method,
        appends: n,
        mean_ns: h.mean(),
        p50_ns: h.value_at_quantile(0.5),
        p99_ns: h.value_at_quantile(0.99),
        max_ns: h.max(),
        events,
    })
}

/// Stops the garbage collector when the client task ends, however it ends.
struct StopOnDrop(Rc<std::cell::Cell<bool>>);
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Runs every scenario on `opts.threads` threads; `progress(done, total)` is called as
/// scenarios finish. Results come back in [`Scenario::all`] order.
pub fn run_all(
    opts: &EvalOptions,
    scenarios: &[Scenario],
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<ScenarioResult>, String> {
    parallel_map(scenarios, opts.threads, progress, |sc| {
        run_scenario(sc, opts)
    })
    .into_iter()
    .collect()
}

/// Applies `f` to every item on `threads` worker threads (each takes the next unclaimed
/// item); `progress(done, total)` is called as items finish. Results come back in item
/// order, whatever order they finished in.
pub fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= items.len() {
                    break;
                }
                let r = f(&items[i]);
                results.lock().expect("results")[i] = Some(r);
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, items.len());
            });
        }
    });
    results
        .into_inner()
        .expect("results")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}
