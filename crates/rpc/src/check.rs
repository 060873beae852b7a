//! The crash checker for seed 003's durable RPCs (§4.2 turned into a test), after
//! `remora_remotelog::check`: run a workload of Puts and Gets on a durable design, cut the
//! server's power at many points (event boundaries of the run, and random instants),
//! recover the server from its PM redo log, reconnect the client (which learns the
//! recovered results and re-sends what was never durable), and judge from outside:
//!
//! - every Put acknowledged as durable was executed exactly once (the [`ExecutionLog`]
//!   lives outside the simulated machine) and, after the client finished, every issued
//!   Put was executed exactly once;
//! - no request was executed twice, and nothing executed that was not issued;
//! - each object holds the last executed Put to its key, intact;
//! - recovery found no committed entry over torn data, and the reconnected client learned
//!   a result for every issued Put.
//!
//! Negative controls ([`negative_controls`]) run wrong protocols the same way; the
//! checker must catch each.
//!
//! [`ExecutionLog`]: crate::kv::ExecutionLog

use crate::api::{Op, Reply, RpcClient};
use crate::design::{Design, FlushForm};
use crate::durable::{DurableClient, DurableOptions, DurablePair, Fault};
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_sim::crashcheck::{CrashRun, DryRun, Sweep};
use remora_sim::{CrashAt, FaultPlan, NodeHandle};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// A durable design on a server to check.
#[derive(Clone, Debug)]
pub struct Target {
    /// Name in reports.
    pub name: String,
    /// The server configuration.
    pub config: ServerConfig,
    /// The connection's options (design, flush form, batch, fault).
    pub opts: DurableOptions,
    /// True for a negative control: a wrong protocol the checker must catch.
    pub wrong: bool,
    /// Bytes of every Put's value instead of the default small ones (a negative control
    /// whose hazard window must not depend on incidental timing).
    pub value_bytes: Option<u32>,
}

/// Checker settings.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Operations per run (every fourth a Get, the rest Puts over three keys).
    pub ops: u64,
    /// Crash points per target (at least; every event boundary of a short run first,
    /// then random instants).
    pub crash_points: u64,
    /// First seed.
    pub seed: u64,
    /// Latency profile.
    pub profile: LatencyProfile,
    /// Stop a target at its first violation (negative controls only need one).
    pub stop_at_first: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            ops: 8,
            crash_points: 300,
            seed: 1,
            profile: LatencyProfile::default_profile(),
            stop_at_first: false,
        }
    }
}

pub use remora_sim::crashcheck::CheckReport;

/// Server configurations the checker covers: DMP without and with DDIO, MHP.
pub const CONFIGS: [&str; 3] = [
    "DMP+noDDIO+PM-RQWRB",
    "DMP+DDIO+PM-RQWRB",
    "MHP+DDIO+PM-RQWRB",
];

fn options(design: Design, form: FlushForm, batch: u32, fault: Option<Fault>) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.flush.form = form;
    o.capacity = 4;
    o.objects = 4;
    o.max_value = 96;
    o.batch = batch;
    o.fault = fault;
    o
}

fn config(s: &str) -> ServerConfig {
    s.parse().expect("valid configuration")
}

/// Every durable design × [`CONFIGS`] × {emulated, native} Flush (native SFlush and
/// RFlush are the model's opcodes, native WFlush the IBTA FLUSH); and batched variants
/// (3 requests per Flush) of both forms.
pub fn targets() -> Vec<Target> {
    let mut v = Vec::new();
    for c in CONFIGS {
        for form in [FlushForm::Emulated, FlushForm::Native] {
            for d in Design::DURABLE {
                v.push(Target {
                    name: format!("{d}/{}/{c}", form_name(form)),
                    config: config(c),
                    opts: options(d, form, 1, None),
                    wrong: false,
                    value_bytes: None,
                });
            }
        }
    }
    for form in [FlushForm::Emulated, FlushForm::Native] {
        for d in Design::DURABLE {
            v.push(Target {
                name: format!("{d}/{}/batch3/DMP+noDDIO+PM-RQWRB", form_name(form)),
                config: config("DMP+noDDIO+PM-RQWRB"),
                opts: options(d, form, 3, None),
                wrong: false,
                value_bytes: None,
            });
        }
    }
    v
}

fn form_name(form: FlushForm) -> &'static str {
    match form {
        FlushForm::Native => "native",
        FlushForm::Emulated => "emulated",
    }
}

/// Wrong protocols; the checker must catch every one.
pub fn negative_controls() -> Vec<Target> {
    let t = |name: &str, c: &str, d: Design, fault: Fault| Target {
        name: name.into(),
        config: config(c),
        opts: options(d, FlushForm::Emulated, 1, Some(fault)),
        wrong: true,
        value_bytes: None,
    };
    vec![
        ack_on_write_completion(),
        t(
            "emulated WFlush under DMP+DDIO without the responder CPU's flush (§4.4.2)",
            "DMP+DDIO+PM-RQWRB",
            Design::WFlushRpc,
            Fault::SkipResponderCpuFlush,
        ),
        t(
            "WFlush-RPC persisting the operator before the data (DMP, no DDIO)",
            "DMP+noDDIO+PM-RQWRB",
            Design::WFlushRpc,
            Fault::OperatorBeforeData,
        ),
        t(
            "recovery ignoring the idempotency stamp (W-RFlush-RPC, DMP, no DDIO)",
            "DMP+noDDIO+PM-RQWRB",
            Design::WRFlushRpc,
            Fault::IgnoreStampOnRecovery,
        ),
        // With SEND-carried requests the server sees each entry as it arrives and, idle,
        // processes it before the sender's acknowledgement is back; heavy load (§5.2) opens
        // the window in which an acknowledged entry is only in the log.
        heavy(native(t(
            "native SFlush under DMP+DDIO without the responder CPU's flush (§4.4.2, heavy load)",
            "DMP+DDIO+PM-RQWRB",
            Design::SFlushRpc,
            Fault::SkipResponderCpuFlush,
        ))),
        heavy(native(t(
            "native RFlush under DMP+DDIO without the responder CPU's flush (S-RFlush-RPC, §4.4.2, heavy load)",
            "DMP+DDIO+PM-RQWRB",
            Design::SRFlushRpc,
            Fault::SkipResponderCpuFlush,
        ))),
    ]
}

/// WFlush-RPC acknowledging a Put once its WRITEs and operator complete, without any
/// Flush, on a DMP server without DDIO. A WRITE's completion means the responder's RNIC
/// received it, not that it persisted (seed 000 §2; seed 003 §4.1: hence the Flush
/// primitives). With the checker's small values the data usually reached the WPQ within
/// the ACK's half round trip, so whether a crash landed in the window depended on
/// incidental WPQ contention. With 64 KB values the window is structural: the RNIC
/// acknowledges a WRITE once its last packet arrived, and the profile's link (200 Gb/s)
/// delivers 64 KB in half the time its PCIe (100 Gb/s) takes to DMA them, so every
/// acknowledged Put still has microseconds of data short of the persistence domain when
/// its completion arrives, whatever the seed.
pub fn ack_on_write_completion() -> Target {
    let mut opts = options(
        Design::WFlushRpc,
        FlushForm::Emulated,
        1,
        Some(Fault::AckOnWriteCompletion),
    );
    opts.max_value = ACK_CONTROL_VALUE;
    Target {
        name: "WFlush-RPC acknowledging on WRITE completion, no Flush (DMP, no DDIO, 64 KB values)"
            .into(),
        config: config("DMP+noDDIO+PM-RQWRB"),
        opts,
        wrong: true,
        value_bytes: Some(ACK_CONTROL_VALUE),
    }
}

/// Value bytes of [`ack_on_write_completion`].
pub const ACK_CONTROL_VALUE: u32 = 65536;

fn native(mut t: Target) -> Target {
    t.opts.flush.form = FlushForm::Native;
    t
}

fn heavy(mut t: Target) -> Target {
    t.opts.costs.processing = remora_model::time::Duration::from_micros(50);
    t
}

fn workload(n: u64, value_bytes: Option<u32>) -> Vec<Op> {
    (0..n)
        .map(|i| {
            if i % 4 == 3 {
                Op::Get { key: i % 3 }
            } else {
                let len = value_bytes.map_or(40 + i as usize, |b| b as usize - i as usize);
                Op::Put {
                    key: i % 3,
                    value: vec![(i as u8).wrapping_mul(37).wrapping_add(1); len],
                }
            }
        })
        .collect()
}

#[derive(Default)]
struct ClientLog {
    /// Requests the client issued (sequence numbers 1..=issued, in workload order).
    issued: u64,
    /// Put sequence numbers acknowledged as durable.
    acked: BTreeSet<u64>,
    /// Sequence numbers the client received or learned replies for.
    replied: BTreeSet<u64>,
    failed: Option<String>,
    finished: bool,
}

struct Run {
    events: u64,
    start_events: u64,
    end: Instant,
    /// Whether power failed, and what broke.
    outcome: CrashRun,
}

type Slot = Rc<RefCell<Option<DurableClient<NodeHandle>>>>;

fn run_once(
    target: &Target,
    opts: &CheckOptions,
    seed: u64,
    crash: Option<CrashAt>,
) -> Result<Run, String> {
    let pair = DurablePair::new(
        seed,
        opts.profile.clone(),
        target.config,
        target.opts.clone(),
    );
    let client = pair.open().map_err(|e| e.to_string())?;
    let start_events = pair.sim.events_processed();
    if let Some(at) = crash {
        pair.sim.set_faults(&FaultPlan::crash(pair.server.id(), at));
    }
    let ops = workload(opts.ops, target.value_bytes);
    let log = Rc::new(RefCell::new(ClientLog::default()));
    let slot: Slot = Rc::new(RefCell::new(None));
    let batch = target.opts.batch.max(1) as usize;
    {
        let (log, slot, ops) = (log.clone(), slot.clone(), ops.clone());
        pair.sim.spawn_on(&pair.client, async move {
            let mut c = client;
            let mut ok = true;
            for chunk in ops.chunks(batch) {
                let r = c.call_batch(chunk.to_vec()).await;
                log.borrow_mut().issued = c.issued();
                match r {
                    Ok(done) => {
                        let mut l = log.borrow_mut();
                        for d in done {
                            if d.durable_at.is_some() {
                                l.acked.insert(d.seq);
                            }
                            if let Some(r) = d.reply {
                                if let Err(e) = r.executed() {
                                    l.failed = Some(e.to_string());
                                }
                                l.replied.insert(d.seq);
                            }
                        }
                    }
                    Err(e) => {
                        log.borrow_mut().failed = Some(e.to_string());
                        ok = false;
                        break;
                    }
                }
            }
            if ok {
                match c.drain().await.and_then(Reply::all_executed) {
                    Ok(r) => {
                        let mut l = log.borrow_mut();
                        l.replied.extend(r.iter().map(|r| r.seq));
                        l.finished = true;
                    }
                    Err(e) => log.borrow_mut().failed = Some(e.to_string()),
                }
            }
            *slot.borrow_mut() = Some(c);
        });
    }
    let events = pair.sim.run();
    let end = pair.sim.now();
    let crashed = !pair.sim.crashed().is_empty();
    let mut violation = None;
    let mut complete = log.borrow().finished;
    if crashed {
        violation = recover_and_resume(&pair, &slot, &log);
        complete = violation.is_none();
    } else if !complete {
        return Err(format!(
            "{}: run without a crash did not finish: {:?}",
            target.name,
            log.borrow().failed
        ));
    }
    if violation.is_none() {
        violation = judge(&pair, &ops, &log.borrow(), complete);
    }
    Ok(Run {
        events,
        start_events,
        end,
        outcome: CrashRun { crashed, violation },
    })
}

/// Recovers the server, reconnects the client and lets it resume and drain.
fn recover_and_resume(
    pair: &DurablePair,
    slot: &Slot,
    log: &Rc<RefCell<ClientLog>>,
) -> Option<String> {
    let Some(client) = slot.borrow_mut().take() else {
        return Some("the client hung after the server's power failure".into());
    };
    let (server, report) = match pair.recover_server() {
        Ok(x) => x,
        Err(e) => return Some(format!("recovery failed: {e}")),
    };
    if let Some(torn) = report.torn {
        return Some(format!(
            "recovery found a committed entry over torn data: {torn}"
        ));
    }
    let mut client = match pair.reconnect(server, client) {
        Ok(client) => client,
        Err(e) => return Some(format!("reconnect failed: {e}")),
    };
    let l = log.clone();
    let out = pair.sim.block_on(Instant::NEVER, async move {
        client.resume().await?;
        let r = Reply::all_executed(client.drain().await?)?;
        l.borrow_mut().replied.extend(r.iter().map(|r| r.seq));
        Ok::<(), crate::api::RpcError>(())
    });
    match out {
        Some(Ok(())) => None,
        Some(Err(e)) => Some(format!("client after recovery: {e}")),
        None => Some("client after recovery never finished".into()),
    }
}

fn judge(pair: &DurablePair, ops: &[Op], log: &ClientLog, complete: bool) -> Option<String> {
    let conn = pair.opts.conn;
    let ex = pair.executions.borrow();
    let puts: BTreeMap<u64, &Op> = ops
        .iter()
        .enumerate()
        .map(|(i, op)| (i as u64 + 1, op))
        .filter(|(s, op)| *s <= log.issued && matches!(op, Op::Put { .. }))
        .collect();
    for (&(c, seq), &n) in ex.iter() {
        if c != conn || !puts.contains_key(&seq) {
            return Some(format!(
                "executed ({c}, {seq}), which was never issued as a Put"
            ));
        }
        if n > 1 {
            return Some(format!("Put seq {seq} executed {n} times"));
        }
    }
    for &seq in &log.acked {
        if ex.get(&(conn, seq)).copied().unwrap_or(0) != 1 {
            return Some(format!(
                "Put seq {seq} was acknowledged durable but never executed"
            ));
        }
    }
    if complete {
        for &seq in puts.keys() {
            if ex.get(&(conn, seq)).copied().unwrap_or(0) != 1 {
                return Some(format!(
                    "issued Put seq {seq} not executed after the client finished"
                ));
            }
            if !log.replied.contains(&seq) {
                return Some(format!(
                    "the client never learned the result of Put seq {seq}"
                ));
            }
        }
    }
    // Each object holds the last executed Put to its key.
    let Some(store) = pair.store() else {
        return Some("the server never opened its store".into());
    };
    let mut last: BTreeMap<u64, (u64, &Vec<u8>)> = BTreeMap::new();
    for (&seq, op) in &puts {
        if let Op::Put { key, value } = op {
            if ex.contains_key(&(conn, seq)) {
                last.insert(*key, (seq, value));
            }
        }
    }
    for key in 0..pair.opts.objects {
        let got = match store.read(key) {
            Ok(g) => g,
            Err(e) => return Some(format!("reading key {key}: {e}")),
        };
        match (last.get(&key), got) {
            (None, None) => {}
            (Some((seq, value)), Some((stamp, v))) if stamp.seq == *seq && &v == *value => {}
            (want, got) => {
                return Some(format!(
                    "key {key} holds {:?}, expected the Put of seq {:?}",
                    got.map(|(s, v)| (s.seq, v.len())),
                    want.map(|w| w.0)
                ))
            }
        }
    }
    None
}

/// Checks one target with at least `opts.crash_points` crash points: the event boundaries
/// of a run and a quarter as many random instants, spread over the run, round after round
/// with the next seed.
pub fn check(target: &Target, opts: &CheckOptions) -> Result<CheckReport, String> {
    let o = &target.opts;
    let method = format!("{} ({} Flush)", o.design, form_name(o.flush.form));
    let mut report = CheckReport::new(&target.name, &method, target.wrong);
    let sweep = Sweep {
        crash_points: opts.crash_points,
        seed: opts.seed,
        salt: 0xd0_7a61e,
        random_divisor: 4,
        spread: true,
        stop_at_first: opts.stop_at_first,
    };
    let dry = |seed| {
        let dry = run_once(target, opts, seed, None)?;
        if dry.outcome.crashed || dry.outcome.violation.is_some() {
            return Err(format!(
                "{}: run without a crash failed: {:?}",
                target.name, dry.outcome.violation
            ));
        }
        Ok(DryRun {
            first_event: dry.start_events,
            events: dry.events,
            end: dry.end,
        })
    };
    let crash = |seed, at| run_once(target, opts, seed, Some(at)).map(|r| r.outcome);
    remora_sim::crashcheck::sweep(&mut report, &sweep, dry, crash)?;
    Ok(report)
}
