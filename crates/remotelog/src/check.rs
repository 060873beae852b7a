//! The crash checker (seed 000 §3–4 turned into a test): run RemoteLog appends with a
//! method, cut the server's power at many points (every event boundary of the run, and
//! random instants in between, which is where stages of the data path change), recover the
//! server from its surviving PM (the library replays PM receive buffers, RemoteLog finds
//! its tail), and check:
//!
//! - every append the client was told is persistent is present and intact, and inside
//!   the recovered log;
//! - a compound log's tail pointer never points past a record that did not survive.
//!
//! The checker is apart from the system: it recomputes expected records, and it judges
//! negative controls (wrong methods) the same way, which must be caught.

use crate::log::{
    collect_garbage, collect_garbage_head_visible_first, is_log_full, is_record, recover,
    LogClient, LogShape, Recovered,
};
use remora::harness::SimPair;
use remora::{Method, Primitive, Scenario, ServerSetup, Shape, Taxonomy, Update};
use remora_model::config::{PersistenceDomain, ServerConfig, Transport};
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_sim::crashcheck::{CrashRun, DryRun, Sweep};
use remora_sim::{CrashAt, FaultPlan};
use remora_verbs::{FlushMethod, Verbs};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// A method on a server to check.
#[derive(Clone, Debug)]
pub struct Target {
    /// Name in reports.
    pub name: String,
    /// The server (and fabric) configuration.
    pub config: ServerConfig,
    /// Update kind.
    pub update: Update,
    /// Primitive the client connects with.
    pub primitive: Primitive,
    /// The method run.
    pub method: Method,
    /// How FLUSH is performed.
    pub flush: FlushMethod,
    /// True for a negative control: a wrong method (or collector) the checker must catch.
    pub wrong: bool,
    /// Whether the run reuses the ring's slots, and the collector the server runs.
    pub ring: Ring,
}

/// How a check uses RemoteLog's ring, and which garbage collector the server runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Ring {
    /// The ring outlasts the run ([`CheckOptions::shape`] and `appends`): the collector
    /// runs, but no slot is reused and the client never reads the head.
    Fresh,
    /// The ring is smaller than the run ([`CheckOptions::reuse`]): the client waits for the
    /// collector when the ring is full and overwrites the slots it freed, and the collector
    /// is descheduled between each store and its persist. The promise is narrower: every
    /// acknowledged append the client had not begun to overwrite survives.
    Reused,
    /// As `Reused`, but the server's collector publishes the head to the client before it
    /// makes it durable: a negative control (the client then overwrites records that a
    /// crash before the durable head is persisted needs; found by a review, seed 000 §4.1).
    ReusedHeadVisibleFirst,
}

impl Ring {
    fn reused(self) -> bool {
        self != Ring::Fresh
    }
}

/// The ring of a [`Ring::Reused`] check, and how many appends run through it.
#[derive(Copy, Clone, Debug)]
pub struct Reuse {
    /// Appends per run: several times the capacity, so every slot is reused.
    pub appends: u64,
    /// The ring (its capacity, the collector's interval and pause).
    pub shape: LogShape,
}

impl Default for Reuse {
    fn default() -> Self {
        Reuse {
            appends: 24,
            shape: LogShape {
                capacity: 4,
                gc_interval: Duration::from_micros(1),
                gc_pause: Duration::from_micros(20),
                ..LogShape::default()
            },
        }
    }
}

/// Checker settings.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Appends per run.
    pub appends: u64,
    /// Crash points per target (at least).
    pub crash_points: u64,
    /// First seed.
    pub seed: u64,
    /// Latency profile.
    pub profile: LatencyProfile,
    /// Log shape.
    pub shape: LogShape,
    /// The ring and run length of [`Ring::Reused`] targets.
    pub reuse: Reuse,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            appends: 8,
            crash_points: 1000,
            seed: 1,
            profile: LatencyProfile::default_profile(),
            shape: LogShape {
                capacity: 256,
                ..LogShape::default()
            },
            reuse: Reuse::default(),
        }
    }
}

pub use remora_sim::crashcheck::CheckReport;

/// The 72 scenarios with the method the library picks for each.
pub fn scenario_targets() -> Vec<Target> {
    let t = Taxonomy::shipped();
    Scenario::all()
        .into_iter()
        .map(|sc| scenario_target(&t, sc))
        .collect()
}

/// Scenario `sc` with the method the library picks for it (from taxonomy `t`).
pub fn scenario_target(t: &Taxonomy, sc: Scenario) -> Target {
    Target {
        name: sc.name(),
        config: sc.config,
        update: sc.update,
        primitive: sc.primitive,
        method: t
            .method_for(&sc.config, sc.primitive, sc.update, Shape::default())
            .clone(),
        flush: FlushMethod::for_caps(sc.config.caps),
        wrong: false,
        ring: Ring::Fresh,
    }
}

/// The 72 scenarios with the ring reused ([`Ring::Reused`]), named `ring-reuse/…`, and the
/// collector that publishes its head first, which must be caught, on the two DMP servers
/// where a store is visible before it is durable.
pub fn reuse_targets() -> Vec<Target> {
    let mut v: Vec<Target> = scenario_targets()
        .into_iter()
        .map(|t| Target {
            name: format!("ring-reuse/{}", t.name),
            ring: Ring::Reused,
            ..t
        })
        .collect();
    let t = Taxonomy::shipped();
    for config in ["DMP+noDDIO+PM-RQWRB", "DMP+DDIO+DRAM-RQWRB"] {
        let sc = Scenario {
            config: config.parse().expect("a Table 1 name"),
            primitive: Primitive::Write,
            update: Update::Singleton,
        };
        let correct = scenario_target(&t, sc);
        v.push(Target {
            name: format!("ring-reuse/head-visible-first/{}", correct.name),
            wrong: true,
            ring: Ring::ReusedHeadVisibleFirst,
            ..correct
        });
    }
    v
}

/// Other correct variants the library may run: the text's alternatives, and FLUSH
/// emulated by READ, on the configurations that allow them.
pub fn variant_targets() -> Vec<Target> {
    let t = Taxonomy::shipped();
    let mut v = Vec::new();
    for config in ServerConfig::table1() {
        for update in Update::ALL {
            for m in t.alternatives(&config, update) {
                v.push(Target {
                    name: format!("{}/{}/alt:{}", update.name(), config.name(), m.name),
                    config,
                    update,
                    primitive: m.primitive(),
                    method: m.clone(),
                    flush: FlushMethod::Native,
                    wrong: false,
                    ring: Ring::Fresh,
                });
            }
            let m = t.method_for(&config, Primitive::Write, update, Shape::default());
            if m.uses_flush() {
                v.push(Target {
                    name: format!("{}/{}/read-flush:{}", update.name(), config.name(), m.name),
                    config,
                    update,
                    primitive: Primitive::Write,
                    method: m.clone(),
                    flush: FlushMethod::ReadAfterWrite,
                    wrong: false,
                    ring: Ring::Fresh,
                });
            }
        }
        // iWARP under WSP: the library switches to the MHP methods.
        let mut iwarp = config;
        iwarp.transport = Transport::IWarp;
        if config.domain == PersistenceDomain::Wsp {
            for update in Update::ALL {
                let m = t.method_for(&iwarp, Primitive::Write, update, Shape::default());
                v.push(Target {
                    name: format!("{}/{}/{}", update.name(), iwarp.name(), m.name),
                    config: iwarp,
                    update,
                    primitive: Primitive::Write,
                    method: m.clone(),
                    flush: FlushMethod::Native,
                    wrong: false,
                    ring: Ring::Fresh,
                });
            }
        }
    }
    v
}

fn adhoc(name: &str, steps: &[&str], table: u8) -> Method {
    Method {
        name: name.into(),
        table,
        text: steps.iter().map(|s| s.to_string()).collect(),
        steps: steps
            .iter()
            .map(|s| s.parse().expect("valid step"))
            .collect(),
    }
}

/// Wrong methods (seed 000 §3 says why each is wrong); the checker must catch every one.
pub fn negative_controls() -> Vec<Target> {
    let t = Taxonomy::shipped();
    let c = |s: &str| s.parse::<ServerConfig>().expect("config");
    let m = |n: &str| t.method(n).expect("method").clone();
    let target = |name: &str, config: ServerConfig, update, method: Method| Target {
        name: name.into(),
        config,
        update,
        primitive: method.primitive(),
        method,
        flush: FlushMethod::Native,
        wrong: true,
        ring: Ring::Fresh,
    };
    let mut iwarp_wsp = c("WSP+noDDIO+PM-RQWRB");
    iwarp_wsp.transport = Transport::IWarp;
    vec![
        target(
            "WRITE+FLUSH under DMP with DDIO on (data stays in the LLC)",
            c("DMP+DDIO+DRAM-RQWRB"),
            Update::Singleton,
            m("write-flush"),
        ),
        target(
            "WRITE with completion only under MHP (RNIC buffer is volatile)",
            c("MHP+DDIO+DRAM-RQWRB"),
            Update::Singleton,
            m("write-comp"),
        ),
        target(
            "WSP on iWARP without FLUSH (completion before arrival)",
            iwarp_wsp,
            Update::Singleton,
            m("write-comp"),
        ),
        target(
            "b issued before the first FLUSH completes under DMP without DDIO",
            c("DMP+noDDIO+DRAM-RQWRB"),
            Update::Compound,
            adhoc(
                "write-flush-write-flush-nowait",
                &[
                    "Rq Write(a)",
                    "Rq Flush",
                    "Rq Write(b)",
                    "Rq Flush",
                    "Rq CompFlush",
                ],
                3,
            ),
        ),
        target(
            "WRITE(a), WRITE(b), one FLUSH under DMP without DDIO",
            c("DMP+noDDIO+DRAM-RQWRB"),
            Update::Compound,
            m("write2-flush"),
        ),
        target(
            "SEND to a PM receive buffer + FLUSH under DMP with DDIO on",
            c("DMP+DDIO+PM-RQWRB"),
            Update::Singleton,
            m("send-flush"),
        ),
        target(
            "SEND to a PM receive buffer + a FLUSH of the region, not the ring, under DMP without DDIO",
            c("DMP+noDDIO+PM-RQWRB"),
            Update::Singleton,
            adhoc(
                "send-flush-region",
                &["Rq Send(a)", "Rq Flush(a)", "Rq CompFlush"],
                2,
            ),
        ),
    ]
}

/// What one run with (or without) a crash produced.
struct Run {
    events: u64,
    end: Instant,
    /// Whether power failed, and what broke.
    outcome: CrashRun,
}

fn run_once(
    target: &Target,
    opts: &CheckOptions,
    seed: u64,
    crash: Option<CrashAt>,
) -> Result<Run, String> {
    let (shape, appends) = if target.ring.reused() {
        (opts.reuse.shape, opts.reuse.appends)
    } else {
        (opts.shape, opts.appends)
    };
    let setup = ServerSetup {
        region_len: shape.region_len(),
        ..ServerSetup::default()
    };
    let pair = SimPair::new(seed, opts.profile.clone(), target.config, setup);
    if let Some(at) = crash {
        pair.sim.set_faults(&FaultPlan::crash(pair.server.id(), at));
    }
    let (client, region) = pair.open().map_err(|e| e.to_string())?;
    let update = target.update;
    let running = Rc::new(Cell::new(true));
    let r = running.clone();
    let server = pair.server.clone();
    match target.ring {
        Ring::Fresh | Ring::Reused => pair.sim.spawn_on(
            &pair.server,
            collect_garbage(server, region.addr, shape, update, move || r.get()),
        ),
        Ring::ReusedHeadVisibleFirst => pair.sim.spawn_on(
            &pair.server,
            collect_garbage_head_visible_first(server, region.addr, shape, update, move || r.get()),
        ),
    }
    let acked = Rc::new(RefCell::new(Vec::new()));
    // One past the highest record the client has begun to write: a reused ring's slots
    // below `started - capacity` hold newer records, by design.
    let started = Rc::new(Cell::new(0u64));
    let end = Rc::new(Cell::new(Instant::ZERO));
    let (a, s, e, node) = (
        acked.clone(),
        started.clone(),
        end.clone(),
        pair.client.clone(),
    );
    // Why the library refused the target's method, if it did.
    let refused = Rc::new(RefCell::new(None));
    let (method, flush, primitive) = (target.method.clone(), target.flush, target.primitive);
    let (wrong, r) = (target.wrong, refused.clone());
    pair.sim.spawn_on(&pair.client, async move {
        let mut client = client;
        if client.connect(primitive, Shape::default()).await.is_ok() {
            // A negative control is forced past the library's check; any other method
            // must pass it.
            if wrong {
                client.use_method_unchecked(update, method);
            } else if let Err(e) = client.use_method(update, method) {
                *r.borrow_mut() = Some(e.to_string());
                return;
            }
            client.use_flush_method(flush);
            let mut log = LogClient::new(client, shape, update);
            let mut full_waits = 0;
            while log.next_index() < appends {
                s.set(log.next_index() + 1);
                match log.append().await {
                    Ok(i) => a.borrow_mut().push(i),
                    // The ring is full: wait for the collector (bounded, so a collector
                    // that stopped ends the run).
                    Err(e) if is_log_full(&e) && full_waits < 1000 => {
                        full_waits += 1;
                        node.compute(Duration::from_micros(1)).await;
                    }
                    Err(_) => break,
                }
            }
        }
        e.set(remora_verbs::Verbs::now(&node));
        running.set(false);
    });
    let events = pair.sim.run();
    if let Some(e) = refused.borrow().as_ref() {
        return Err(format!(
            "{}: the library refused the method: {e}",
            target.name
        ));
    }
    let crashed = !pair.sim.crashed().is_empty();
    if !crashed && (acked.borrow().len() as u64) < appends {
        return Err(format!(
            "{}: without a crash, {} of {appends} appends completed",
            target.name,
            acked.borrow().len()
        ));
    }
    let mut violation = None;
    if crashed {
        pair.recover_server().map_err(|e| e.to_string())?;
        let read = |off: u64, len: u64| pair.server_read(region.addr + off, len as usize);
        let rec = recover(read, &shape, update);
        let kept: Vec<u64> = acked
            .borrow()
            .iter()
            .copied()
            .filter(|&i| i + shape.capacity >= started.get())
            .collect();
        violation = log_violation(&read, &shape, update, &rec, &kept).map(|v| v.describe(&rec));
        if violation.is_none() && rec.head > rec.tail {
            violation = Some(format!("head {} is past the tail {}", rec.head, rec.tail));
        }
    }
    Ok(Run {
        events,
        end: end.get(),
        outcome: CrashRun { crashed, violation },
    })
}

/// Checks one target with at least `opts.crash_points` crash points: every event
/// boundary of a run and as many random instants, round after round with the next seed.
pub fn check(target: &Target, opts: &CheckOptions) -> Result<CheckReport, String> {
    let mut report = CheckReport::new(&target.name, &target.method.name, target.wrong);
    let sweep = Sweep {
        crash_points: opts.crash_points,
        seed: opts.seed,
        salt: 0x5eed,
        random_divisor: 1,
        spread: false,
        stop_at_first: false,
    };
    let dry = |seed| {
        let dry = run_once(target, opts, seed, None)?;
        if dry.outcome.crashed || dry.end == Instant::ZERO {
            return Err(format!("{}: dry run did not complete", target.name));
        }
        Ok(DryRun {
            first_event: 0,
            events: dry.events,
            end: dry.end,
        })
    };
    let crash = |seed, at| run_once(target, opts, seed, Some(at)).map(|r| r.outcome);
    remora_sim::crashcheck::sweep(&mut report, &sweep, dry, crash)?;
    Ok(report)
}

/// A rule a recovered log broke (see [`log_violation`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LogViolation {
    /// This acknowledged append is not intact in PM.
    Lost(u64),
    /// This acknowledged append is intact but at or past the recovered tail.
    BeyondTail(u64),
    /// A compound log's tail pointer points past this record, which did not survive.
    PastLost(u64),
}

impl LogViolation {
    /// What broke, in words, with the recovered log `rec` it was found in.
    pub fn describe(&self, rec: &Recovered) -> String {
        match *self {
            LogViolation::Lost(i) => format!("acknowledged append {i} is lost or torn"),
            LogViolation::BeyondTail(i) => format!(
                "acknowledged append {i} is beyond the recovered tail {}",
                rec.tail
            ),
            LogViolation::PastLost(j) => format!(
                "tail pointer {} points past record {j}, which did not survive",
                rec.tail_pointer
            ),
        }
    }
}

/// Judges a recovered log from outside: every acknowledged append (`acked`, in order) is
/// intact and inside the log, and a compound log's tail pointer covers only records that
/// survived. `read(offset, len)` reads the server's region. Gives the first broken rule.
/// The simulator's checker and the real SIGKILL loop (`remora crashcheck --real`) both use
/// it, each wording the violation its own way.
pub fn log_violation(
    read: &dyn Fn(u64, u64) -> Vec<u8>,
    shape: &LogShape,
    update: Update,
    rec: &Recovered,
    acked: &[u64],
) -> Option<LogViolation> {
    for &i in acked {
        if !is_record(&read(shape.slot(i), shape.record_bytes), i) {
            return Some(LogViolation::Lost(i));
        }
        if i >= rec.tail {
            return Some(LogViolation::BeyondTail(i));
        }
    }
    if update == Update::Compound {
        for j in rec.head..rec.tail_pointer.min(rec.head + shape.capacity) {
            if !is_record(&read(shape.slot(j), shape.record_bytes), j) {
                return Some(LogViolation::PastLost(j));
            }
        }
    }
    None
}
