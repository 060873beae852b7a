//! Seed 003's durable RPCs (§4.2) on the soft RNIC from the command line:
//! `remora rpc-serve` (a server over a PM pool file), `remora rpc` (a client issuing Puts
//! and Gets), and `remora rpc-crashcheck`, which SIGKILLs server processes at random
//! moments, restarts them on the same pool (they recover from the redo log), reconnects
//! the same client and checks every acknowledged Put.

use crate::killloop::{self, life_ms, ServerProc};
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::PM_BASE;
use remora_model::time::Duration;
use remora_model::ServerConfig;
use remora_rpc::durable::{ConnInfo, DurableOptions, Fault, RecoveryReport};
use remora_rpc::kv::{parse_object, KvLayout};
use remora_rpc::real::{serve_durable, ClientSettings, RealClient, RealServeOptions};
use remora_rpc::{Design, FlushForm, Op, RpcClient};
use remora_sim::crashcheck;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The four durable designs.
pub const DURABLE: [Design; 4] = [
    Design::SFlushRpc,
    Design::WFlushRpc,
    Design::SRFlushRpc,
    Design::WRFlushRpc,
];

/// Parses a durable design's name (case-insensitive); baselines and unknown names are
/// refused with the list of durable designs.
pub fn parse_durable(s: &str) -> Result<Design, String> {
    let d: Design = s.parse()?;
    if !d.is_durable_rpc() {
        return Err(format!(
            "{d} is a baseline without a redo log; durable designs: {}",
            DURABLE.map(Design::name).join(", ")
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
    let local = tokio::task::LocalSet::new();
    let o = args.clone();
    let (design, form, config) = (args.opts.design, args.opts.flush.form, args.config);
    local
        .block_on(
            &rt,
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
                let _ = o.flush();
            }),
        )
        .map_err(|e| e.to_string())
}

/// `rpc-serve`'s second line: what start-up recovery did to every connection's log,
/// watermarks per connection (in node-id order) and the rest summed, e.g. `recovery:
/// watermark 3/0 before, 2 re-executed, watermark 5/0 after, 0 stale operators cleared,
/// torn: none` (the crash loop reads it, [`parse_recovery`]).
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

#[allow(clippy::disallowed_methods)] // wall-clock latency of real calls
fn wall() -> std::time::Instant {
    std::time::Instant::now()
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
    let rt = crate::killloop::runtime()?;
    let local = tokio::task::LocalSet::new();
    let batch = batch.max(1);
    local.block_on(&rt, async {
        let settings = ClientSettings {
            design,
            batch,
            ..ClientSettings::default()
        };
        let mut c = RealClient::connect(addr, profile, &settings)
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
                        let got = done.reply.map(|r| r.value).unwrap_or_default();
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
        let replies = c.client.drain().await.map_err(|e| e.to_string())?;
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
        for (name, hist) in [("Put (until durable)", &puts), ("Get (until the reply)", &gets)] {
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
/// the servers' execution journal shows).
pub fn rpc_targets(negative: bool) -> Vec<RpcTarget> {
    let mut v = Vec::new();
    for c in RPC_CONFIGS {
        for d in DURABLE {
            v.push(RpcTarget {
                name: format!("{d}/emulated/{c}"),
                config: c.parse().expect("valid configuration"),
                design: d,
                fault: None,
            });
        }
    }
    if negative {
        for (c, f) in [
            ("DMP+noDDIO+PM-RQWRB", Fault::AckOnWriteCompletion),
            ("DMP+DDIO+PM-RQWRB", Fault::SkipResponderCpuFlush),
            ("DMP+noDDIO+PM-RQWRB", Fault::OperatorBeforeData),
        ] {
            v.push(RpcTarget {
                name: format!("WFlush-RPC/{}/{c}", fault_name(f)),
                config: c.parse().expect("valid configuration"),
                design: Design::WFlushRpc,
                fault: Some(f),
            });
        }
        let c = "DMP+noDDIO+PM-RQWRB";
        v.push(RpcTarget {
            name: format!(
                "W-RFlush-RPC/{}/{c}",
                fault_name(Fault::IgnoreStampOnRecovery)
            ),
            config: c.parse().expect("valid configuration"),
            design: Design::WRFlushRpc,
            fault: Some(Fault::IgnoreStampOnRecovery),
        });
    }
    v
}

/// Settings of the real loop.
#[derive(Clone, Debug)]
pub struct RpcCrashArgs {
    /// SIGKILLs per target.
    pub kills: u64,
    /// Longest life of a server before its SIGKILL, in ms (uniform in 1..=this).
    pub max_life_ms: u64,
    /// Seed of the kill times.
    pub seed: u64,
    /// Where pool files go.
    pub dir: PathBuf,
    /// Latency profile.
    pub profile: LatencyProfile,
    /// Its name or path, handed to the server processes.
    pub profile_arg: String,
    /// Address the servers listen on (port 0 picks one).
    pub server_listen: String,
    /// Injected processing time per request, µs: a backlog of logged, unprocessed
    /// requests widens the window in which a wrongly acknowledged one can be lost.
    pub processing_us: u64,
}

/// What the real loop found for one target.
#[derive(Clone, Debug)]
pub struct RpcCrashReport {
    /// Target name.
    pub name: String,
    /// A negative control.
    pub wrong: bool,
    /// Server processes killed with SIGKILL.
    pub kills: u64,
    /// Puts acknowledged as durable.
    pub acked: u64,
    /// Committed entries recovery re-executed, over all restarts.
    pub reexecuted: u64,
    /// Lives after which a rule broke.
    pub violations: u64,
    /// The first violation.
    pub example: Option<String>,
}

impl RpcCrashReport {
    /// Correct designs break no rule; negative controls must be caught.
    pub fn passed(&self) -> bool {
        crashcheck::passed(self.wrong, self.violations)
    }
}

const OBJECTS: u64 = 4;
const MAX_VALUE: u32 = 96;
const CAPACITY: u32 = 8;
/// Longest a single call, drain or reconnect may take before the loop calls it hung.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// Most operations per life (a bound, should a kill never land).
const MAX_OPS_PER_LIFE: u64 = 100_000;

fn journal_path(pool: &Path) -> PathBuf {
    pool.with_extension("journal")
}

/// Starts `remora rpc-serve` on `pool` for `t`; its second line says what start-up
/// recovery did.
fn start_server(
    exe: &Path,
    pool: &Path,
    t: &RpcTarget,
    args: &RpcCrashArgs,
) -> Result<(ServerProc, String), String> {
    let mut cmd = Command::new(exe);
    cmd.args(["rpc-serve", "--listen", &args.server_listen, "--pool"])
        .arg(pool)
        .args(["--pool-bytes", &(4u64 << 20).to_string()])
        .args(["--config", &t.config.name()])
        .args(["--design", t.design.name(), "--form", "emulated"])
        .args(["--capacity", &CAPACITY.to_string()])
        .args(["--objects", &OBJECTS.to_string()])
        .args(["--max-value", &MAX_VALUE.to_string()])
        .args(["--profile", &args.profile_arg])
        .args(["--processing-us", &args.processing_us.to_string()])
        .arg("--execution-journal")
        .arg(journal_path(pool));
    if let Some(f) = t.fault {
        cmd.args(["--fault", fault_name(f)]);
    }
    let server = ServerProc::start(&mut cmd, exe, "rpc-serve", 1)?;
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

/// Reads `key`'s object from the pool file (stamp sequence number and value).
fn object_in_pool(pool: &Path, kv: &KvLayout, key: u64) -> Result<Option<(u64, Vec<u8>)>, String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(pool).map_err(|e| format!("{}: {e}", pool.display()))?;
    let at = remora_soft::pool::HEADER_BYTES + kv.slot(key).map_err(|e| e.to_string())? - PM_BASE;
    let mut slot = vec![0u8; kv.slot_bytes() as usize];
    f.seek(SeekFrom::Start(at))
        .and_then(|_| f.read_exact(&mut slot))
        .map_err(|e| format!("{}: {e}", pool.display()))?;
    Ok(parse_object(&slot, kv.max_value).map(|(s, v)| (s.seq, v)))
}

/// What the client did, kept across server lives.
#[derive(Default)]
struct History {
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
}

async fn timed<T, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| format!("{what}: {e}")),
        Err(_) => Err(format!("{what} hung for {CALL_TIMEOUT:?}")),
    }
}

/// After a (re)connection and drain: every issued Put was executed exactly once (the
/// servers' execution journal), its result is known to the client, and each object in the
/// pool holds the last issued Put to its key, stamped with its sequence number.
fn judge(h: &History, pool: &Path, kv: &KvLayout, conn: u32) -> Result<Option<String>, String> {
    // Executions, as the servers' journal counts them (it survives their kills).
    let ex = remora_rpc::real::read_journal(&journal_path(pool))?;
    for (&(c, s), &n) in ex.borrow().iter() {
        if c != conn || !matches!(h.ops.get(&s), Some(Op::Put { .. })) {
            return Ok(Some(format!(
                "executed ({c}, {s}), which was never issued as a Put"
            )));
        }
        if n > 1 {
            return Ok(Some(format!("Put seq {s} executed {n} times")));
        }
    }
    for (s, op) in &h.ops {
        if matches!(op, Op::Put { .. }) && !ex.borrow().contains_key(&(conn, *s)) {
            return Ok(Some(format!("issued Put seq {s} never executed")));
        }
    }
    for (s, op) in &h.ops {
        if matches!(op, Op::Put { .. }) && !h.replied.contains(s) {
            return Ok(Some(format!(
                "the client never learned the result of Put seq {s}"
            )));
        }
    }
    for key in 0..kv.objects {
        let want = h.last_put(key, u64::MAX);
        let got = object_in_pool(pool, kv, key)?;
        match (want, &got) {
            (None, None) => {}
            (Some((s, v)), Some((gs, gv))) if s == *gs && v == gv => {}
            (want, got) => {
                return Ok(Some(format!(
                    "key {key} holds {:?} in the pool, expected the Put of seq {:?}",
                    got.as_ref().map(|(s, v)| (s, v.len())),
                    want.map(|w| w.0)
                )))
            }
        }
    }
    Ok(None)
}

/// Runs the real loop on one target: start `remora rpc-serve`, issue Puts and Gets until a
/// SIGKILL lands, restart on the same pool (it recovers), reconnect the same client
/// (which learns recovered results and re-sends what was never durable), check, repeat.
pub fn rpc_real_crash(
    target: &RpcTarget,
    args: &RpcCrashArgs,
    exe: &Path,
    index: u64,
) -> Result<RpcCrashReport, String> {
    let pool = args.dir.join(format!("rpc-pool-{index}.pm"));
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(journal_path(&pool));
    let mut rng = Prng::from_seed(args.seed ^ index.wrapping_mul(0x9e37_79b9));
    let mut report = RpcCrashReport {
        name: target.name.clone(),
        wrong: target.wrong(),
        kills: 0,
        acked: 0,
        reexecuted: 0,
        violations: 0,
        example: None,
    };
    let rt = crate::killloop::runtime()?;
    let local = tokio::task::LocalSet::new();
    let mut h = History::default();
    let mut client: Option<RealClient> = None;
    for life in 0..=args.kills {
        let (mut server, recovery) = start_server(exe, &pool, target, args)?;
        let (reexecuted, torn) = parse_recovery(&recovery);
        report.reexecuted += reexecuted;
        let verdict = local.block_on(&rt, async {
            if let Some(t) = torn {
                return Ok((Some(format!("life {life}: recovery found a committed entry over torn data: {t}")), false));
            }
            let c = match client.as_mut() {
                None => {
                    let settings = ClientSettings {
                        design: Some(target.design),
                        ..ClientSettings::default()
                    };
                    let c = timed("connect", RealClient::connect(&server.addr, &args.profile, &settings)).await?;
                    client.insert(c)
                }
                Some(c) => {
                    if let Err(e) = timed("reconnect", c.reconnect(&server.addr)).await {
                        return Ok((Some(format!("life {life}: {e}")), false));
                    }
                    c
                }
            };
            match timed("drain", c.client.drain()).await {
                Ok(r) => h.replied.extend(r.iter().map(|r| r.seq)),
                Err(e) => return Ok((Some(format!("life {life}: {e}")), false)),
            }
            if let Some(v) = judge(&h, &pool, &c.hello.kv_layout(), c.hello.opts.conn)? {
                return Ok((Some(format!("life {life}: {v}")), false));
            }
            if life == args.kills {
                return Ok((None, false));
            }
            // Issue until the server dies; the kill lands at a random moment.
            let killer = server.kill_after(life_ms(&mut rng, args.max_life_ms));
            let mut verdict = None;
            for _ in 0..MAX_OPS_PER_LIFE {
                let op = op_of(h.next, OBJECTS, MAX_VALUE);
                h.next += 1;
                let seq = c.client.issued() + 1;
                let r = tokio::time::timeout(CALL_TIMEOUT, c.client.call(op.clone())).await;
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
                            let want = h.last_put(key, done.seq).map(|(_, v)| v.clone()).unwrap_or_default();
                            let got = done.reply.map(|r| r.value).unwrap_or_default();
                            if got != want {
                                verdict = Some(format!("life {life}: Get seq {} of key {key} read {} bytes, not the last Put's {}", done.seq, got.len(), want.len()));
                                break;
                            }
                        }
                        Op::Scan { .. } => unreachable!("no Scans"),
                    },
                    Ok(Err(_)) => break,
                    Err(_) => {
                        verdict = Some(format!("life {life}: a call hung for {CALL_TIMEOUT:?}"));
                        break;
                    }
                }
            }
            let killed = killer.join();
            Ok::<_, String>((verdict, killed))
        })?;
        let (verdict, killed) = verdict;
        drop(server);
        if killed {
            report.kills += 1;
        }
        if let Some(v) = verdict {
            report.violations += 1;
            report.example.get_or_insert(v);
            // The history no longer says what the server must hold.
            break;
        }
    }
    report.acked = h.acked.len() as u64;
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(journal_path(&pool));
    Ok(report)
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
            killloop::result_cell(r.wrong, r.violations, r.example.as_deref()),
        ]
    });
    let summary = format!(
        "{} targets, {} SIGKILLs, {} acknowledged Puts checked, {} requests re-executed from redo logs",
        rs.len(),
        rs.iter().map(|r| r.kills).sum::<u64>(),
        rs.iter().map(|r| r.acked).sum::<u64>(),
        rs.iter().map(|r| r.reexecuted).sum::<u64>()
    );
    killloop::table(&header, rows, &summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_durable("wflush-rpc"), Ok(Design::WFlushRpc));
        assert!(parse_durable("DaRPC").unwrap_err().contains("baseline"));
        assert!(parse_durable("nope")
            .unwrap_err()
            .contains("unknown RPC design"));
        for t in rpc_targets(true) {
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
