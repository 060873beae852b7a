//! Seed 003's durable RPCs (§4.2) on the soft RNIC from the command line:
//! `remora rpc-serve` (a server over a PM pool file), `remora rpc` (a client issuing Puts
//! and Gets), and `remora rpc-crashcheck`, which SIGKILLs server processes at random
//! moments, restarts them on the same pool (they recover from the redo logs), reconnects
//! the same clients (one, or several at once on shared keys) and checks every acknowledged
//! Put and that every Put ran exactly once, in one serial order the store agrees with.

use crate::killloop::{
    self, early_kill, failed_of_early_kill, life_ms, server_command, wall, KillArgs, ServerProc,
};
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::PM_BASE;
use remora_model::time::Duration;
use remora_model::ServerConfig;
use remora_rpc::durable::{ConnInfo, DurableOptions, Fault, RecoveryReport};
use remora_rpc::kv::{parse_object, KvLayout, Stamp};
use remora_rpc::real::{
    serve_durable, ClientSettings, RealClient, RealConnectError, RealServeOptions,
};
use remora_rpc::{Design, FlushForm, Op, Reply, RpcClient, RpcError};
use remora_sim::crashcheck;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Parses a durable design's name (case-insensitive); baselines and unknown names are
/// refused with the list of durable designs.
pub fn parse_durable(s: &str) -> Result<Design, String> {
    let d: Design = s.parse()?;
    if !d.is_durable_rpc() {
        return Err(format!(
            "{d} is a baseline without a redo log; durable designs: {}",
            Design::DURABLE.map(Design::name).join(", ")
        ));
    }
    Ok(d)
}

/// Parses `emulated` or `native`.
pub fn parse_form(s: &str) -> Result<FlushForm, String> {
    match s {
        "emulated" => Ok(FlushForm::Emulated),
        "native" => Ok(FlushForm::Native),
        _ => Err(format!("unknown Flush form {s:?}: emulated or native")),
    }
}

/// A negative control's command-line name.
pub fn fault_name(f: Fault) -> &'static str {
    match f {
        Fault::AckOnWriteCompletion => "ack-on-write-completion",
        Fault::SkipResponderCpuFlush => "skip-responder-cpu-flush",
        Fault::OperatorBeforeData => "operator-before-data",
        Fault::IgnoreStampOnRecovery => "ignore-stamp-on-recovery",
        Fault::UnlockedStore => "unlocked-store",
    }
}

/// Parses a negative control's name (see [`fault_name`]).
pub fn parse_fault(s: &str) -> Result<Fault, String> {
    [
        Fault::AckOnWriteCompletion,
        Fault::SkipResponderCpuFlush,
        Fault::OperatorBeforeData,
        Fault::IgnoreStampOnRecovery,
        Fault::UnlockedStore,
    ]
    .into_iter()
    .find(|&f| fault_name(f) == s)
    .ok_or_else(|| format!("unknown fault {s:?}"))
}

/// Settings of `remora rpc-serve`: the server's own options.
pub type RpcServeArgs = RealServeOptions;

/// The connection options of `rpc-serve`'s flags.
pub fn serve_options(
    design: Design,
    form: FlushForm,
    capacity: u32,
    objects: u64,
    max_value: u32,
    processing_us: u64,
    fault: Option<Fault>,
) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.flush.form = form;
    o.capacity = capacity;
    o.objects = objects;
    o.max_value = max_value;
    o.costs.processing = Duration::from_micros(processing_us);
    o.costs.backlog_threshold = (capacity / 2).max(1);
    o.fault = fault;
    o
}

/// Runs a durable-RPC server until SIGTERM or Ctrl-C. Its first output line is
/// `listening on ADDR`, its second what start-up recovery did (`recovery: ...`).
pub fn rpc_serve_blocking(args: &RpcServeArgs) -> Result<(), String> {
    let rt = crate::killloop::runtime()?;
    let o = args.clone();
    let (design, form, config) = (args.opts.design, args.opts.flush.form, args.config);
    rt
        .block_on(
            serve_durable(o, |s| {
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, "listening on {}", s.addr);
                let _ = writeln!(o, "{}", recovery_line(&s.logs));
                let _ = writeln!(
                    o,
                    "pool {}: {}; {design} ({form:?} Flush) on {config}; {} connections (client nodes 1..={}), logs at {} ({} entries each), {} objects at {:#x}",
                    args.pool.display(),
                    if s.created { "created" } else { "reopened" },
                    s.logs.len(),
                    s.logs.len(),
                    s.logs
                        .iter()
                        .map(|(i, _)| format!("{:#x}", i.layout.base))
                        .collect::<Vec<_>>()
                        .join("/"),
                    s.info.layout.capacity,
                    s.kv.objects,
                    s.kv.base
                );
                let _ = writeln!(o, "durability: {}", s.durability);
                let _ = writeln!(o, "{}", args.admission);
                let _ = o.flush();
            }),
        )
        .map_err(|e| e.to_string())
}

/// `rpc-serve`'s second line: what start-up recovery did to every connection's log,
/// watermarks per connection (in node-id order) and the rest summed, e.g. `recovery:
/// watermark 3/0 before, 2 re-executed, watermark 5/0 after, 0 stale operators cleared,
/// torn: none` (the crash loop reads it, `parse_recovery`).
pub fn recovery_line(logs: &[(ConnInfo, RecoveryReport)]) -> String {
    let marks = |f: &dyn Fn(&RecoveryReport) -> u64| {
        logs.iter()
            .map(|(_, r)| f(r).to_string())
            .collect::<Vec<_>>()
            .join("/")
    };
    let torn: Vec<String> = logs
        .iter()
        .filter_map(|(i, r)| {
            let t = r.torn.as_ref()?;
            Some(format!("log at {:#x}: {t}", i.layout.base))
        })
        .collect();
    format!(
        "recovery: watermark {} before, {} re-executed, watermark {} after, {} stale operators cleared, torn: {}",
        marks(&|r| r.processed_before),
        logs.iter().map(|(_, r)| r.reexecuted).sum::<u64>(),
        marks(&|r| r.processed),
        logs.iter().map(|(_, r)| r.truncated).sum::<u64>(),
        if torn.is_empty() { "none".to_string() } else { torn.join("; ") }
    )
}

/// The value `remora rpc` and the crash loop write with their `i`-th operation.
pub fn value_of(i: u64, max_value: u32) -> Vec<u8> {
    let len = (16 + i % 48).min(max_value as u64) as usize;
    vec![(i as u8).wrapping_mul(37).wrapping_add(1); len]
}

/// The `i`-th operation of the workload: every fourth a Get, the rest Puts, over `objects`
/// keys.
pub fn op_of(i: u64, objects: u64, max_value: u32) -> Op {
    let key = i % objects.max(1);
    if i % 4 == 3 {
        Op::Get { key }
    } else {
        Op::Put {
            key,
            value: value_of(i, max_value),
        }
    }
}

/// `remora rpc`: `ops` operations against a durable-RPC server; Put and Get latency.
pub fn rpc_against(
    addr: &str,
    design: Option<Design>,
    ops: u64,
    batch: u32,
    profile: &LatencyProfile,
) -> Result<String, String> {
    let batch = batch.max(1);
    let (addr, profile) = (addr.to_string(), profile.clone());
    crate::killloop::run_client(async move {
        let settings = ClientSettings {
            design,
            batch,
            ..ClientSettings::default()
        };
        let mut c = RealClient::connect(&addr, &profile, &settings)
            .await
            .map_err(|e| e.to_string())?;
        let h = c.hello.clone();
        let (objects, max_value) = (h.opts.objects, h.opts.max_value);
        let mut puts = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
        let mut gets = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
        // Values this run wrote, to check what Gets read.
        let mut mine: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut put_seqs = BTreeSet::new();
        let mut i = 0;
        while i < ops {
            let n = (batch as u64).min(ops - i);
            let chunk: Vec<Op> = (i..i + n).map(|k| op_of(k, objects, max_value)).collect();
            i += n;
            let t0 = wall();
            // One RPC: the batch's requests share one Flush (§4.3).
            let done = c
                .client
                .call_batch(chunk.clone())
                .await
                .map_err(|e| e.to_string())?;
            let ns = t0.elapsed().as_nanos() as u64;
            if done.len() != chunk.len() {
                return Err(format!(
                    "{} completions for a batch of {}",
                    done.len(),
                    chunk.len()
                ));
            }
            // The server executes a batch in order: a Get sees the Puts before it.
            for (op, done) in chunk.into_iter().zip(done) {
                match op {
                    Op::Put { key, value } => {
                        puts.record(ns).expect("latency fits");
                        put_seqs.insert(done.seq);
                        mine.insert(key, value);
                    }
                    Op::Get { key } => {
                        gets.record(ns).expect("latency fits");
                        let got = done.reply.map(Reply::executed).transpose();
                        let got = got.map_err(|e| e.to_string())?;
                        let got = got.map(|r| r.value).unwrap_or_default();
                        if let Some(want) = mine.get(&key) {
                            if &got != want {
                                return Err(format!(
                                    "Get of key {key} (seq {}) read {} bytes, not this run's last Put",
                                    done.seq,
                                    got.len()
                                ));
                            }
                        }
                    }
                    Op::Scan { .. } => unreachable!("the workload has no Scans"),
                }
            }
        }
        let replies = c.client.drain().await.and_then(Reply::all_executed);
        let replies = replies.map_err(|e| e.to_string())?;
        let got: BTreeSet<u64> = replies.iter().map(|r| r.seq).collect();
        if let Some(s) = put_seqs.iter().find(|s| !got.contains(s)) {
            return Err(format!("the reply of Put seq {s} never arrived"));
        }
        let mut s = format!(
            "{} ({:?} Flush) on {} at {addr}: {} operations (sequence numbers {}..={}){}, every reply arrived\n\n| operation | count | mean µs | p50 µs | p99 µs |\n|---|---|---|---|---|\n",
            h.opts.design,
            h.opts.flush.form,
            h.info.config,
            ops,
            h.info.processed + 1,
            c.client.issued(),
            if batch > 1 {
                format!(" in RPCs of up to {batch} requests, one Flush each")
            } else {
                String::new()
            }
        );
        for (name, hist) in [
            ("Put (until durable)", &puts),
            ("Get (until the reply)", &gets),
        ] {
            if hist.is_empty() {
                continue;
            }
            let _ = writeln!(
                s,
                "| {name} | {} | {:.1} | {:.1} | {:.1} |",
                hist.len(),
                hist.mean() / 1e3,
                hist.value_at_quantile(0.5) as f64 / 1e3,
                hist.value_at_quantile(0.99) as f64 / 1e3
            );
        }
        Ok(s)
    })
}

// ------------------------------------------------------------------ the real crash loop

/// A design on a server configuration, possibly with a fault, for the real loop.
#[derive(Clone, Debug)]
pub struct RpcTarget {
    /// Name in reports.
    pub name: String,
    /// Server configuration.
    pub config: ServerConfig,
    /// Design.
    pub design: Design,
    /// The negative control, if any.
    pub fault: Option<Fault>,
}

impl RpcTarget {
    /// True for a negative control.
    pub fn wrong(&self) -> bool {
        self.fault.is_some()
    }
}

/// Server configurations of the real loop (as `remora_rpc::check::CONFIGS`).
pub const RPC_CONFIGS: [&str; 3] = remora_rpc::check::CONFIGS;

/// The real loop's targets: every durable design (emulated Flush) on DMP without and with
/// DDIO and MHP; with `negative`, the four negative controls of `remora_rpc::check` (a
/// lost acknowledged Put, a committed entry over torn data, or a Put executed twice, which
/// the servers' execution journal shows), and with `clients` of two or more a server whose
/// connections update the shared store without the `StoreLock` (`Fault::UnlockedStore`:
/// a Put executed twice or over a later Put; with one client it has nothing to get wrong).
pub fn rpc_targets(negative: bool, clients: u32) -> Vec<RpcTarget> {
    let mut v = Vec::new();
    for c in RPC_CONFIGS {
        for d in Design::DURABLE {
            v.push(RpcTarget {
                name: format!("{d}/emulated/{c}"),
                config: c.parse().expect("valid configuration"),
                design: d,
                fault: None,
            });
        }
    }
    if negative {
        let mut faults = vec![
            (
                Design::WFlushRpc,
                "DMP+noDDIO+PM-RQWRB",
                Fault::AckOnWriteCompletion,
            ),
            (
                Design::WFlushRpc,
                "DMP+DDIO+PM-RQWRB",
                Fault::SkipResponderCpuFlush,
            ),
            (
                Design::WFlushRpc,
                "DMP+noDDIO+PM-RQWRB",
                Fault::OperatorBeforeData,
            ),
            (
                Design::WRFlushRpc,
                "DMP+noDDIO+PM-RQWRB",
                Fault::IgnoreStampOnRecovery,
            ),
        ];
        if clients >= 2 {
            faults.push((
                Design::WFlushRpc,
                "DMP+noDDIO+PM-RQWRB",
                Fault::UnlockedStore,
            ));
        }
        for (d, c, f) in faults {
            v.push(RpcTarget {
                name: format!("{d}/{}/{c}", fault_name(f)),
                config: c.parse().expect("valid configuration"),
                design: d,
                fault: Some(f),
            });
        }
    }
    v
}

/// Settings of the real loop.
#[derive(Clone, Debug)]
pub struct RpcCrashArgs {
    /// Kills, their timing, the pool directory, the profile and how servers start.
    pub kill: KillArgs,
    /// Injected processing time per request, µs: a backlog of logged, unprocessed
    /// requests widens the window in which a wrongly acknowledged one can be lost.
    pub processing_us: u64,
    /// Clients issuing at once against one server (`rpc-serve --connections` this many),
    /// each on a connection and redo log of its own, all over the same keys (at least 1).
    pub clients: u32,
}

/// What kind of finding ended a target's loop. Every kind but [`Finding::Failure`] is a
/// verdict on the server's data (a rule of exactly-once durable execution broke); a
/// failure only says the loop could not go on, so it fails a correct design but does not
/// count as catching a negative control.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// A Put acknowledged as durable was gone after recovery (the reconnecting client's
    /// resume found the server's log short of it), or an issued Put was never executed.
    LostPut,
    /// Recovery found a committed redo-log entry over torn data.
    TornEntry,
    /// A Put was executed twice, out of its connection's order, or without being issued.
    WrongExecution,
    /// An object in the pool is not, stamp and value, the Put to its key that ran last.
    WrongObject,
    /// A Get read another value than the last Put to its key.
    StaleGet,
    /// A client never learned the result of one of its Puts.
    LostResult,
    /// No verdict: a connection failed or a call hung, so the loop stopped.
    Failure,
}

impl Finding {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Finding::LostPut => "lost acknowledged Put",
            Finding::TornEntry => "torn entry",
            Finding::WrongExecution => "wrong execution",
            Finding::WrongObject => "wrong object",
            Finding::StaleGet => "stale Get",
            Finding::LostResult => "lost result",
            Finding::Failure => "failure (no verdict)",
        }
    }
}

/// A finding and what it is about.
type Found = (Finding, String);

/// What the real loop found for one target.
#[derive(Clone, Debug)]
pub struct RpcCrashReport {
    /// Target name.
    pub name: String,
    /// A negative control.
    pub wrong: bool,
    /// Clients that ran at once against each server.
    pub clients: u32,
    /// Server processes killed with SIGKILL.
    pub kills: u64,
    /// Of those, the SIGKILLs that cut the clients' return short (their reconnection,
    /// resume or drain), drawn to land within a few milliseconds of the server's start.
    pub early: u64,
    /// Puts acknowledged as durable (all clients).
    pub acked: u64,
    /// Committed entries recovery re-executed, over all restarts.
    pub reexecuted: u64,
    /// Lives after which a rule broke, or the loop failed.
    pub violations: u64,
    /// The kind of the first violation.
    pub finding: Option<Finding>,
    /// The first violation.
    pub example: Option<String>,
}

impl RpcCrashReport {
    /// Correct designs break no rule and never fail; negative controls must be caught by
    /// a verdict on the data, not by a failed connection or a hung call.
    pub fn passed(&self) -> bool {
        match self.finding {
            Some(Finding::Failure) => false,
            _ => crashcheck::passed(self.wrong, self.violations),
        }
    }

    /// The `result` cell: `pass`, `caught: <kind>: <first violation>`, `**FAIL**
    /// <kind>: <first violation>`, or `**not caught**` (with the failure that stopped
    /// the loop, if one did).
    pub fn result_cell(&self) -> String {
        let example = self
            .finding
            .zip(self.example.as_deref())
            .map(|(f, e)| format!("{}: {e}", f.name()));
        match (self.wrong, self.finding) {
            (true, Some(Finding::Failure)) => format!(
                "**not caught** (the loop stopped: {})",
                example.unwrap_or_default()
            ),
            _ => killloop::result_cell(self.wrong, self.violations, example.as_deref()),
        }
    }
}

const OBJECTS: u64 = 4;
const MAX_VALUE: u32 = 96;
const CAPACITY: u32 = 8;
/// Longest a single call, drain or reconnect may take before the loop calls it hung.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// Most operations per client and life (a bound, should a kill never land).
const MAX_OPS_PER_LIFE: u64 = 100_000;

fn journal_path(pool: &Path) -> PathBuf {
    pool.with_extension("journal")
}

/// Starts `remora rpc-serve` on `pool` for `t`, with a connection per client; its second
/// line says what start-up recovery did.
fn start_server(
    exe: &Path,
    pool: &Path,
    t: &RpcTarget,
    args: &RpcCrashArgs,
) -> Result<(ServerProc, String), String> {
    let mut cmd = server_command(exe, &args.kill.server_prefix);
    cmd.args(["rpc-serve", "--listen", &args.kill.server_listen, "--pool"])
        .arg(pool)
        .args(["--pool-bytes", &(4u64 << 20).to_string()])
        .args(["--config", &t.config.name()])
        .args(["--design", t.design.name(), "--form", "emulated"])
        .args(["--capacity", &CAPACITY.to_string()])
        .args(["--objects", &OBJECTS.to_string()])
        .args(["--max-value", &MAX_VALUE.to_string()])
        .args(["--profile", &args.kill.profile_arg])
        .args(["--processing-us", &args.processing_us.to_string()])
        .args(["--connections", &args.clients.max(1).to_string()])
        .arg("--execution-journal")
        .arg(journal_path(pool));
    if let Some(f) = t.fault {
        cmd.args(["--fault", fault_name(f)]);
    }
    let server = ServerProc::start(&mut cmd, exe, "rpc-serve", 1, &args.kill.server_log)?;
    let recovery = &server.said[0];
    if !recovery.starts_with("recovery: ") {
        return Err(format!("rpc-serve said {recovery:?}, not its recovery"));
    }
    let recovery = recovery.trim().to_string();
    Ok((server, recovery))
}

/// The numbers in `recovery: watermark A before, N re-executed, ... torn: T`.
fn parse_recovery(line: &str) -> (u64, Option<String>) {
    let n = line
        .split(", ")
        .find_map(|p| p.strip_suffix(" re-executed"))
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    let torn = line
        .split("torn: ")
        .nth(1)
        .filter(|t| *t != "none")
        .map(String::from);
    (n, torn)
}

/// Reads `key`'s object from the pool file (its stamp and value).
fn object_in_pool(
    pool: &Path,
    kv: &KvLayout,
    key: u64,
) -> Result<Option<(Stamp, Vec<u8>)>, String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(pool).map_err(|e| format!("{}: {e}", pool.display()))?;
    let at = remora_soft::pool::HEADER_BYTES + kv.slot(key).map_err(|e| e.to_string())? - PM_BASE;
    let mut slot = vec![0u8; kv.slot_bytes() as usize];
    f.seek(SeekFrom::Start(at))
        .and_then(|_| f.read_exact(&mut slot))
        .map_err(|e| format!("{}: {e}", pool.display()))?;
    Ok(parse_object(&slot, kv.max_value))
}

/// The loop's `i`-th operation on connection `conn`: [`op_of`] (every fourth a Get, over
/// all the keys, so clients overlap), a Put's value tagged with `conn` and `i` in its first
/// 12 bytes, so a value read back names the Put that wrote it, whoever issued it.
fn loop_op(conn: u32, i: u64) -> Op {
    match op_of(i, OBJECTS, MAX_VALUE) {
        Op::Put { key, value } => {
            let mut value = value;
            value[0..4].copy_from_slice(&conn.to_le_bytes());
            value[4..12].copy_from_slice(&i.to_le_bytes());
            Op::Put { key, value }
        }
        get => get,
    }
}

/// The connection and key of the Put of [`loop_op`] whose value is exactly `value`, if any.
fn put_named_by(value: &[u8]) -> Option<(u32, u64)> {
    let conn = u32::from_le_bytes(value.get(0..4)?.try_into().ok()?);
    let i = u64::from_le_bytes(value.get(4..12)?.try_into().ok()?);
    match loop_op(conn, i) {
        Op::Put { key, value: v } if v == value => Some((conn, key)),
        _ => None,
    }
}

/// What one client did, kept across server lives.
#[derive(Default)]
struct History {
    /// Its connection id (client node id), as the server assigned it; 0 before it connected.
    conn: u32,
    /// Every issued operation by sequence number.
    ops: BTreeMap<u64, Op>,
    /// Puts acknowledged durable.
    acked: BTreeSet<u64>,
    /// Sequence numbers whose result the client received or learned.
    replied: BTreeSet<u64>,
    /// Operations generated (the workload's index).
    next: u64,
}

impl History {
    /// The last issued Put to `key` before `seq`.
    fn last_put(&self, key: u64, before: u64) -> Option<(u64, &Vec<u8>)> {
        self.ops.range(..before).rev().find_map(|(s, op)| match op {
            Op::Put { key: k, value } if *k == key => Some((*s, value)),
            _ => None,
        })
    }

    /// Whether a Get (`seq`, `key`) that read `got` broke a rule: it must read the value
    /// of this client's last Put to the key before it (FIFO: it ran first), nothing if
    /// there was none, or, with other clients on the same keys, a Put of another client to
    /// that key (one that ran after ours; the loop cannot tell when).
    fn get_violation(&self, seq: u64, key: u64, got: &[u8]) -> Option<String> {
        let want = self.last_put(key, seq).map_or(&[][..], |(_, v)| v);
        if got == want {
            return None;
        }
        match put_named_by(got) {
            Some((c, k)) if c != self.conn && k == key => None,
            _ => Some(format!(
                "Get seq {seq} of key {key} read {} bytes, not the last Put's {}",
                got.len(),
                want.len()
            )),
        }
    }
}

async fn timed<T, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match remora_exec::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| format!("{what}: {e}")),
        Err(_) => Err(format!("{what} hung for {CALL_TIMEOUT:?}")),
    }
}

/// Runs every future to completion, concurrently on the current task, and returns their
/// outputs in order.
async fn join_all<F: std::future::Future>(fs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    use std::task::Poll;
    let mut fs: Vec<_> = fs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = fs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in fs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(x) => *o = Some(x),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("finished")).collect()
}

/// After every client (re)connected and drained, judges the servers' execution journal
/// and the objects in the pool against what the clients issued: every issued Put was
/// executed exactly once (the journal holds nothing else), each connection's Puts in the
/// order it issued them, every Put's result reached its client, and each object holds,
/// stamp and value, the Put to its key that the journal executed last. So the executed
/// Puts form one serial order (the journal's) and the store is its outcome; with one client
/// that is its last issued Put to each key.
fn judge(hs: &[History], pool: &Path, kv: &KvLayout) -> Result<Option<Found>, String> {
    // Executions, in the order the servers counted them (the journal survives their kills).
    let journal = remora_rpc::real::read_journal_entries(&journal_path(pool))?;
    judge_executions(hs, &journal, kv.objects, |key| {
        object_in_pool(pool, kv, key)
    })
}

/// [`judge`] over the journal's entries and the objects `object` reads (by key, below
/// `objects`).
fn judge_executions(
    hs: &[History],
    journal: &[(u32, u64)],
    objects: u64,
    object: impl Fn(u64) -> Result<Option<(Stamp, Vec<u8>)>, String>,
) -> Result<Option<Found>, String> {
    let by_conn: BTreeMap<u32, &History> = hs.iter().map(|h| (h.conn, h)).collect();
    let put = |c: u32, s: u64| {
        if hs.len() == 1 {
            format!("Put seq {s}")
        } else {
            format!("Put seq {s} of connection {c}")
        }
    };
    let mut count: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    let mut last_of_conn: BTreeMap<u32, u64> = BTreeMap::new();
    let mut last_on_key: BTreeMap<u64, (u32, u64, &Vec<u8>)> = BTreeMap::new();
    for &(c, s) in journal {
        let Some(Op::Put { key, value }) = by_conn.get(&c).and_then(|h| h.ops.get(&s)) else {
            return Ok(Some((
                Finding::WrongExecution,
                format!("executed ({c}, {s}), which was never issued as a Put"),
            )));
        };
        let n = count.entry((c, s)).or_default();
        *n += 1;
        if *n > 1 {
            let n = journal.iter().filter(|&&e| e == (c, s)).count();
            return Ok(Some((
                Finding::WrongExecution,
                format!("{} executed {n} times", put(c, s)),
            )));
        }
        if let Some(&before) = last_of_conn.get(&c).filter(|&&b| b > s) {
            return Ok(Some((
                Finding::WrongExecution,
                format!("{} executed after {}", put(c, s), put(c, before)),
            )));
        }
        last_of_conn.insert(c, s);
        last_on_key.insert(*key, (c, s, value));
    }
    for h in hs {
        for (s, op) in &h.ops {
            if !matches!(op, Op::Put { .. }) {
                continue;
            }
            if !count.contains_key(&(h.conn, *s)) {
                return Ok(Some((
                    Finding::LostPut,
                    format!("issued {} never executed", put(h.conn, *s)),
                )));
            }
            if !h.replied.contains(s) {
                return Ok(Some((
                    Finding::LostResult,
                    format!("the client never learned the result of {}", put(h.conn, *s)),
                )));
            }
        }
    }
    for key in 0..objects {
        let want = last_on_key.get(&key);
        let got = object(key)?;
        match (want, &got) {
            (None, None) => {}
            (Some(&(c, s, v)), Some((st, gv))) if st.conn == c && st.seq == s && v == gv => {}
            (want, got) => {
                let got = got.as_ref().map(|(st, v)| (st.conn, st.seq, v.len()));
                return Ok(Some((Finding::WrongObject, match want {
                    Some(&(c, s, _)) => format!(
                        "key {key} holds {got:?} (connection, seq, bytes) in the pool, expected the {} the journal executed last",
                        put(c, s)
                    ),
                    None => format!("key {key} holds {got:?} (connection, seq, bytes) in the pool, but no Put to it was executed"),
                })));
            }
        }
    }
    Ok(None)
}

/// Issues the workload on one client until its server dies (a call fails) or the bound
/// [`MAX_OPS_PER_LIFE`] is reached; returns what broke a rule (a Get's reply) or a hung
/// call.
async fn issue(c: &mut RealClient, h: &mut History) -> Option<Found> {
    for _ in 0..MAX_OPS_PER_LIFE {
        let op = loop_op(h.conn, h.next);
        h.next += 1;
        let seq = c.client.issued() + 1;
        let r = remora_exec::time::timeout(CALL_TIMEOUT, c.client.call(op.clone())).await;
        if c.client.issued() >= seq {
            h.ops.insert(seq, op.clone());
        }
        match r {
            Ok(Ok(done)) => match op {
                Op::Put { .. } => {
                    h.acked.insert(done.seq);
                }
                Op::Get { key } => {
                    h.replied.insert(done.seq);
                    let got = match done.reply.map(Reply::executed).transpose() {
                        Ok(r) => r.map(|r| r.value).unwrap_or_default(),
                        Err(e) => return Some((Finding::Failure, e.to_string())),
                    };
                    if let Some(v) = h.get_violation(done.seq, key, &got) {
                        return Some((Finding::StaleGet, v));
                    }
                }
                Op::Scan { .. } => unreachable!("no Scans"),
            },
            Ok(Err(_)) => return None,
            Err(_) => {
                return Some((
                    Finding::Failure,
                    format!("a call hung for {CALL_TIMEOUT:?}"),
                ))
            }
        }
    }
    None
}

/// Runs the real loop on one target: start `remora rpc-serve` with a connection per
/// client, (re)connect every client (a reconnecting one learns recovered results and
/// re-sends what was never durable) and drain it, judge, then let all clients issue Puts
/// and Gets over the same keys at once until a SIGKILL lands; restart on the same pool
/// (it recovers every log), repeat.
pub fn rpc_real_crash(
    target: &RpcTarget,
    args: &RpcCrashArgs,
    exe: &Path,
    index: u64,
) -> Result<RpcCrashReport, String> {
    let k = &args.kill;
    let pool = k.dir.join(format!("rpc-pool-{index}.pm"));
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(journal_path(&pool));
    let mut rng = Prng::from_seed(k.seed ^ index.wrapping_mul(0x9e37_79b9));
    let clients = args.clients.max(1);
    let mut report = RpcCrashReport {
        name: target.name.clone(),
        wrong: target.wrong(),
        clients,
        kills: 0,
        early: 0,
        acked: 0,
        reexecuted: 0,
        violations: 0,
        finding: None,
        example: None,
    };
    // Which client a verdict is about, when there are several.
    let who = |h: &History| {
        if clients == 1 {
            String::new()
        } else {
            format!("connection {}: ", h.conn)
        }
    };
    let rt = crate::killloop::runtime()?;
    let mut hs: Vec<History> = (0..clients).map(|_| History::default()).collect();
    let mut conns: Vec<Option<RealClient>> = (0..clients).map(|_| None).collect();
    for life in 0..=k.kills {
        let (mut server, recovery) = start_server(exe, &pool, target, args)?;
        let (reexecuted, torn) = parse_recovery(&recovery);
        report.reexecuted += reexecuted;
        // In some lives the SIGKILL lands while the clients come back: in the server's
        // recovery of their logs, in their reconnections, resumes and drains.
        let mut early = early_kill(&mut rng, life, k.kills, &mut server);
        let cut_short = std::cell::Cell::new(false);
        let verdict = rt.block_on(async {
            if let Some(t) = torn {
                return Ok((
                    Some((
                        Finding::TornEntry,
                        format!(
                            "life {life}: recovery found a committed entry over torn data: {t}"
                        ),
                    )),
                    false,
                ));
            }
            let back = come_back(&server, target, k, life, &mut conns, &mut hs, &who).await?;
            match back {
                // Only a SIGKILL sent before the failure may cut the clients' return short;
                // the life ends there.
                Some((Finding::Failure, v)) => {
                    if !failed_of_early_kill(&mut early) {
                        return Ok((Some((Finding::Failure, v)), false));
                    }
                    cut_short.set(true);
                    return Ok((None, true));
                }
                Some(found) => return Ok((Some(found), false)),
                None => {}
            }
            let kv = conns[0].as_ref().expect("connected").hello.kv_layout();
            if let Some((f, v)) = judge(&hs, &pool, &kv)? {
                return Ok((Some((f, format!("life {life}: {v}"))), false));
            }
            if life == k.kills {
                return Ok((None, false));
            }
            // Every client issues until the server dies; the kill lands at a random moment
            // (or when drawn above).
            let killer = match early.take() {
                Some(e) => e,
                None => server.kill_after(life_ms(&mut rng, k.max_life_ms)),
            };
            let verdicts = join_all(conns.iter_mut().zip(hs.iter_mut()).map(|(c, h)| async {
                let v = issue(c.as_mut().expect("connected"), h).await;
                v.map(|(f, v)| (f, format!("life {life}: {}{v}", who(h))))
            }))
            .await;
            let killed = killer.join();
            Ok::<_, String>((verdicts.into_iter().flatten().next(), killed))
        })?;
        let (verdict, killed) = verdict;
        drop(server);
        if killed {
            report.kills += 1;
            if cut_short.get() {
                report.early += 1;
            }
        }
        if let Some((f, v)) = verdict {
            report.violations += 1;
            report.finding.get_or_insert(f);
            report.example.get_or_insert(v);
            // The histories no longer say what the server must hold.
            break;
        }
    }
    report.acked = hs.iter().map(|h| h.acked.len() as u64).sum();
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(journal_path(&pool));
    Ok(report)
}

/// Connects every client (the first life) or reconnects it, and drains it, one after the
/// other; the first thing that went wrong, if anything did (a failure or a lost Put).
async fn come_back(
    server: &ServerProc,
    target: &RpcTarget,
    k: &KillArgs,
    life: u64,
    conns: &mut [Option<RealClient>],
    hs: &mut [History],
    who: &dyn Fn(&History) -> String,
) -> Result<Option<Found>, String> {
    // (Re)connect and drain the clients one after the other.
    for (slot, h) in conns.iter_mut().zip(hs.iter_mut()) {
        let c = match slot {
            None => {
                let settings = ClientSettings {
                    design: Some(target.design),
                    // A negative control's clients join it (some are client-side).
                    fault: target.fault,
                    ..ClientSettings::default()
                };
                let c = timed(
                    "connect",
                    RealClient::connect(&server.addr, &k.profile, &settings),
                )
                .await?;
                h.conn = c.hello.opts.conn;
                slot.insert(c)
            }
            Some(c) => {
                match remora_exec::time::timeout(CALL_TIMEOUT, c.reconnect(&server.addr)).await {
                    Ok(Ok(())) => {}
                    // The recovered server lacks a Put it acknowledged: a verdict.
                    Ok(Err(RealConnectError::Rpc(e @ RpcError::LostDurable { .. }))) => {
                        let v = format!("life {life}: {}reconnect: {e}", who(h));
                        return Ok(Some((Finding::LostPut, v)));
                    }
                    Ok(Err(e)) => {
                        let v = format!("life {life}: {}reconnect: {e}", who(h));
                        return Ok(Some((Finding::Failure, v)));
                    }
                    Err(_) => {
                        let v =
                            format!("life {life}: {}reconnect hung for {CALL_TIMEOUT:?}", who(h));
                        return Ok(Some((Finding::Failure, v)));
                    }
                }
                c
            }
        };
        let executed = |r| Reply::all_executed(r).map_err(|e| e.to_string());
        match timed("drain", c.client.drain()).await.and_then(executed) {
            Ok(r) => h.replied.extend(r.iter().map(|r| r.seq)),
            Err(e) => {
                let v = format!("life {life}: {}{e}", who(h));
                return Ok(Some((Finding::Failure, v)));
            }
        }
    }
    Ok(None)
}

/// The reports as Markdown.
pub fn rpc_crash_table(rs: &[RpcCrashReport]) -> String {
    let header = [
        "target",
        "kind",
        "SIGKILLs",
        "acked Puts",
        "re-executed",
        "violations",
        "result",
    ];
    let rows = rs.iter().map(|r| {
        vec![
            r.name.clone(),
            crashcheck::kind_cell(r.wrong, "correct design").to_string(),
            r.kills.to_string(),
            r.acked.to_string(),
            r.reexecuted.to_string(),
            r.violations.to_string(),
            r.result_cell(),
        ]
    });
    let clients = rs.iter().map(|r| r.clients).max().unwrap_or(1);
    let mut summary = format!(
        "{} targets, {} SIGKILLs, {} acknowledged Puts checked, {} requests re-executed from redo logs{}",
        rs.len(),
        rs.iter().map(|r| r.kills).sum::<u64>(),
        rs.iter().map(|r| r.acked).sum::<u64>(),
        rs.iter().map(|r| r.reexecuted).sum::<u64>(),
        if clients > 1 {
            format!(" ({clients} clients at once per server, on the same keys)")
        } else {
            String::new()
        }
    );
    let early = rs.iter().map(|r| r.early).sum::<u64>();
    if early > 0 {
        summary += &format!(
            "; {early} SIGKILLs landed while the clients came back (before the life's calls)"
        );
    }
    killloop::table(&header, rows, &summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client on `conn` that issued the loop's first `n` operations, every one answered.
    fn client(conn: u32, n: u64) -> History {
        let mut h = History {
            conn,
            next: n,
            ..History::default()
        };
        for i in 0..n {
            h.ops.insert(i + 1, loop_op(conn, i));
            h.replied.insert(i + 1);
        }
        h
    }

    fn value(h: &History, seq: u64) -> Vec<u8> {
        match &h.ops[&seq] {
            Op::Put { value, .. } => value.clone(),
            op => panic!("seq {seq} is {op:?}"),
        }
    }

    #[test]
    fn values_name_their_put_and_gets_must_read_a_put_that_can_be_last() {
        // Operation 0 is a Put to key 0, 3 a Get of key 3, 4 a Put to key 0 again.
        let (a, b) = (client(1, 6), client(2, 6));
        assert_eq!(put_named_by(&value(&a, 1)), Some((1, 0)));
        assert_eq!(put_named_by(&value(&b, 5)), Some((2, 0)));
        assert_eq!(put_named_by(b"not a tagged value"), None);
        assert!(matches!(a.ops[&4], Op::Get { key: 3 }));
        // A Get of key 0 after a's Puts 1 and 5: a's last, or another client's Put to key 0.
        assert_eq!(a.get_violation(6, 0, &value(&a, 5)), None);
        assert_eq!(a.get_violation(6, 0, &value(&b, 1)), None);
        // Not a's earlier Put, nor nothing, nor another client's Put to another key.
        assert!(a.get_violation(6, 0, &value(&a, 1)).is_some());
        assert!(a.get_violation(6, 0, &[]).is_some());
        assert!(a.get_violation(6, 0, &value(&b, 2)).is_some());
        // Before any Put of its own to key 3, nothing is right too.
        assert_eq!(a.get_violation(4, 3, &[]), None);
    }

    #[test]
    fn the_judge_wants_each_put_once_in_order_and_the_last_one_per_key_in_the_store() {
        // Two clients' first two operations: Puts to keys 0 and 1 (seqs 1 and 2).
        let hs = [client(1, 2), client(2, 2)];
        let store = |journal: &[(u32, u64)]| {
            let mut objects = BTreeMap::new();
            for &(c, s) in journal {
                let h = &hs[c as usize - 1];
                if let Op::Put { key, value } = &h.ops[&s] {
                    objects.insert(*key, (Stamp { conn: c, seq: s }, value.clone()));
                }
            }
            objects
        };
        let judge = |journal: &[(u32, u64)], objects: &BTreeMap<u64, (Stamp, Vec<u8>)>| {
            judge_executions(&hs, journal, OBJECTS, |k| Ok(objects.get(&k).cloned())).unwrap()
        };
        // One serial order and its outcome.
        let serial = [(1, 1), (2, 1), (2, 2), (1, 2)];
        assert_eq!(judge(&serial, &store(&serial)), None);
        // The store must be the outcome of the journal's order, not of another.
        let other = [(2, 1), (1, 1), (2, 2), (1, 2)];
        let (f, v) = judge(&serial, &store(&other)).unwrap();
        assert_eq!(f, Finding::WrongObject);
        assert!(
            v.contains("key 0 holds Some((1, 1, ") && v.contains("Put seq 1 of connection 2"),
            "{v}"
        );
        // A Put run twice, even where its second run leaves the right object.
        let twice = [(1, 1), (2, 1), (1, 1), (2, 2), (1, 2)];
        let v = judge(&twice, &store(&serial)).unwrap();
        assert_eq!(
            v,
            (
                Finding::WrongExecution,
                "Put seq 1 of connection 1 executed 2 times".into()
            )
        );
        // A connection's Puts out of order, one never run, one not issued.
        let (f, v) = judge(&[(1, 2), (1, 1), (2, 1), (2, 2)], &store(&serial)).unwrap();
        assert_eq!(f, Finding::WrongExecution);
        assert!(
            v.contains("Put seq 1 of connection 1 executed after Put seq 2"),
            "{v}"
        );
        let v = judge(&serial[..3], &store(&serial[..3])).unwrap();
        assert_eq!(
            v,
            (
                Finding::LostPut,
                "issued Put seq 2 of connection 1 never executed".into()
            )
        );
        let (f, v) = judge(&[(1, 1), (3, 1)], &store(&[(1, 1)])).unwrap();
        assert_eq!(f, Finding::WrongExecution);
        assert!(v.contains("executed (3, 1), which was never issued"), "{v}");
        // A result the client never learned.
        let mut late = client(1, 2);
        late.replied.remove(&2);
        let one = [(1, 1), (1, 2)];
        let objects: BTreeMap<u64, (Stamp, Vec<u8>)> = [0, 1]
            .map(|k| {
                (
                    k,
                    (
                        Stamp {
                            conn: 1,
                            seq: k + 1,
                        },
                        value(&late, k + 1),
                    ),
                )
            })
            .into();
        let v = judge_executions(&[late], &one, OBJECTS, |k| Ok(objects.get(&k).cloned()))
            .unwrap()
            .unwrap();
        assert_eq!(
            v,
            (
                Finding::LostResult,
                "the client never learned the result of Put seq 2".into()
            )
        );
    }

    #[test]
    fn a_failure_fails_a_correct_design_and_catches_no_negative_control() {
        let report = |wrong, finding: Option<Finding>| RpcCrashReport {
            name: "t".into(),
            wrong,
            clients: 1,
            kills: 3,
            early: 0,
            acked: 3,
            reexecuted: 0,
            violations: finding.is_some() as u64,
            finding,
            example: finding.map(|_| "life 2: what happened".into()),
        };
        let fail = Some(Finding::Failure);
        let lost = Some(Finding::LostPut);
        assert!(report(false, None).passed());
        assert!(!report(false, fail).passed() && !report(false, lost).passed());
        assert!(!report(true, None).passed() && !report(true, fail).passed());
        assert!(report(true, lost).passed());
        assert_eq!(
            report(true, lost).result_cell(),
            "caught: lost acknowledged Put: life 2: what happened"
        );
        assert!(report(true, fail)
            .result_cell()
            .starts_with("**not caught** (the loop stopped: failure (no verdict): life 2"));
        assert!(report(false, fail)
            .result_cell()
            .starts_with("**FAIL** failure (no verdict): life 2"));
    }

    #[test]
    fn names_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_durable("wflush-rpc"), Ok(Design::WFlushRpc));
        assert!(parse_durable("DaRPC").unwrap_err().contains("baseline"));
        assert!(parse_durable("nope")
            .unwrap_err()
            .contains("unknown RPC design"));
        for t in rpc_targets(true, 2) {
            if let Some(f) = t.fault {
                assert_eq!(parse_fault(fault_name(f)), Ok(f));
            }
        }
        assert!(parse_form("fast").is_err());
        assert_eq!(
            parse_recovery("recovery: watermark 3 before, 2 re-executed, watermark 5 after, 0 stale operators cleared, torn: none"),
            (2, None)
        );
        assert_eq!(
            parse_recovery("recovery: watermark 3 before, 0 re-executed, watermark 3 after, 0 stale operators cleared, torn: seq 4: bad").1,
            Some("seq 4: bad".into())
        );
    }
}
