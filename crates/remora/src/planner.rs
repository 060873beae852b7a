//! The planner: lists every correct method for a server and an update kind, predicts each
//! one's latency by running it on the simulator with the server's latency profile, and
//! picks the fastest. [`explain`] says why.

use crate::harness::SimPair;
use crate::responder::ServerSetup;
use crate::taxonomy::{Method, Primitive, Shape, Taxonomy, Update};
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_verbs::{FlushMethod, Verbs};
use std::cell::RefCell;
use std::rc::Rc;

/// A correct method and its predicted latency.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The method.
    pub method: Method,
    /// How its FLUSHes are performed.
    pub flush: FlushMethod,
    /// Why it is correct for this server (which rule of seed 000 admits it).
    pub because: String,
    /// Mean predicted latency per update.
    pub mean: Duration,
}

/// The correct (method, flush method) pairs the library chooses among, unranked: each
/// primitive's table cell (with the text's rules, [`Taxonomy::method_for`]) and the text's
/// alternatives ([`Taxonomy::alternatives`]). Not every correct method: the two-sided
/// SEND idiom (`send-copy-flush`, seed 000 §3.4: "universal") is a candidate only where a
/// table cell names it.
pub fn candidates(
    t: &Taxonomy,
    config: &ServerConfig,
    update: Update,
    shape: Shape,
) -> Vec<(Method, FlushMethod, String)> {
    let mut out: Vec<(Method, FlushMethod, String)> = Vec::new();
    let mut push = |m: &Method, why: String| {
        let flushes: Vec<FlushMethod> = if !m.uses_flush() {
            vec![FlushMethod::Native]
        } else if config.caps.native_flush {
            vec![FlushMethod::Native, FlushMethod::ReadAfterWrite]
        } else {
            vec![FlushMethod::ReadAfterWrite]
        };
        for f in flushes {
            if !out.iter().any(|(o, of, _)| o.name == m.name && *of == f) {
                let why = if f == FlushMethod::ReadAfterWrite {
                    format!("{why}; FLUSH emulated by READ (seed 000 §3.4)")
                } else {
                    why.clone()
                };
                out.push((m.clone(), f, why));
            }
        }
    };
    for p in Primitive::ALL {
        let m = t.method_for(config, p, update, shape);
        push(
            m,
            format!("seed 000 Table {} cell for {}", m.table, p.name()),
        );
    }
    for m in t.alternatives(config, update) {
        push(m, "seed 000 §3.2–3.3 text alternative (footnote ∗: message exchange instead of FLUSH, or waiting for the first FLUSH)".into());
    }
    out
}

/// Predicts the mean latency of `method` on a server: `n` updates of 64 bytes (compound:
/// a 64-byte record, then a `b` of `shape.b_len` bytes) on a simulated pair. `None` if the
/// method cannot carry them (e.g. an ATOMIC WRITE of a `b` that is not 8 bytes).
pub fn predict(
    config: &ServerConfig,
    profile: &LatencyProfile,
    method: &Method,
    flush: FlushMethod,
    shape: Shape,
    n: u64,
    seed: u64,
) -> Option<Duration> {
    let pair = SimPair::new(seed, profile.clone(), *config, ServerSetup::default());
    let (mut client, _) = pair.open().ok()?;
    let method = method.clone();
    let update = method.update();
    let node = pair.client.clone();
    let total = Rc::new(RefCell::new(None));
    let out = total.clone();
    pair.sim.spawn_on(&pair.client, async move {
        if client.connect(method.primitive(), shape).await.is_err() {
            return;
        }
        // A method that is not correct for the server gets no prediction.
        if client.use_method(update, method).is_err() {
            return;
        }
        client.use_flush_method(flush);
        let record = [0x5au8; 64];
        // `b` at offset 0, the records after it.
        let first = shape.b_len.div_ceil(64).max(1) * 64;
        let mut b = vec![0u8; shape.b_len as usize];
        let start = node.now();
        for i in 0..n {
            let off = first + (i % 1024) * 64;
            for (j, x) in b.iter_mut().enumerate() {
                *x = (i + 1).to_le_bytes()[j % 8];
            }
            let r = match update {
                Update::Singleton => client.persist(off, &record).await,
                Update::Compound => client.persist_ordered((off, &record), (0, &b)).await,
            };
            if r.is_err() {
                return;
            }
        }
        *out.borrow_mut() = Some(node.now() - start);
    });
    pair.sim.run_until(Instant::NEVER);
    let t = (*total.borrow())?;
    Some(Duration::from_nanos(t.as_nanos() / n))
}

/// Every correct method, fastest first.
pub fn plan(
    config: &ServerConfig,
    update: Update,
    shape: Shape,
    profile: &LatencyProfile,
) -> Vec<Candidate> {
    let t = Taxonomy::shipped();
    let mut v: Vec<Candidate> = candidates(&t, config, update, shape)
        .into_iter()
        .filter_map(|(method, flush, because)| {
            let mean = predict(config, profile, &method, flush, shape, 200, 1)?;
            Some(Candidate {
                method,
                flush,
                because,
                mean,
            })
        })
        .collect();
    v.sort_by_key(|c| (c.mean, c.method.name.clone()));
    v
}

/// The plan as a readable explanation.
pub fn explain(
    config: &ServerConfig,
    update: Update,
    shape: Shape,
    profile: &LatencyProfile,
) -> String {
    render(
        config,
        update,
        profile,
        &plan(config, update, shape, profile),
    )
}

/// [`explain`] of a plan already made.
pub fn render(
    config: &ServerConfig,
    update: Update,
    profile: &LatencyProfile,
    plan: &[Candidate],
) -> String {
    let mut s = format!("Server {config}, {} updates, profile {:?}\n\n| rank | method | flush | predicted mean | why it is correct |\n|---|---|---|---|---|\n", update.name(), profile.name);
    for (i, c) in plan.iter().enumerate() {
        let flush = if c.method.uses_flush() {
            format!("{:?}", c.flush)
        } else {
            "-".into()
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            i + 1,
            c.method.name,
            flush,
            c.mean,
            c.because
        ));
    }
    if let Some(best) = plan.first() {
        s.push_str(&format!(
            "\nChosen: {} ({})\n  steps: {}\n",
            best.method.name,
            best.mean,
            best.method.text.join("; ")
        ));
    }
    s
}
