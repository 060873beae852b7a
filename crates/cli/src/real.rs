//! The soft RNIC from the command line: `remora serve`, RemoteLog against a server
//! (`remora remotelog --server`), and the real crash loop (`remora crashcheck --real`),
//! which SIGKILLs a server process at random moments and checks that no acknowledged
//! append was lost.

use crate::killloop::{
    self, early_kill, failed_of_early_kill, life_ms, runtime, server_command, wall, KillArgs,
    ServerProc,
};
use remora::{Primitive, Scenario, ServerSetup, Shape, Update};
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::ServerConfig;
use remora_remotelog::check::{
    log_violation, negative_controls, reuse_targets, scenario_target, Ring, Target,
};
use remora_remotelog::log::{
    collect_garbage, collect_garbage_head_visible_first, is_log_full, read_records, recover,
    LogClient, LogShape, Recovered, RECORDS_OFF,
};
use remora_sim::crashcheck;
use remora_soft::pool::PoolBytes;
use remora_soft::server::{serve, ServeFault, ServeOptions, SlotTask};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Settings of `remora serve`.
#[derive(Clone, Debug)]
pub struct ServeArgs {
    /// Listen address.
    pub listen: String,
    /// Pool file.
    pub pool: PathBuf,
    /// What PM the pool must have.
    pub pool_bytes: PoolBytes,
    /// Server configuration.
    pub config: ServerConfig,
    /// Latency profile.
    pub profile: LatencyProfile,
    /// Bytes of PM each connection gets to update.
    pub region_bytes: u64,
    /// How long a slot stays its client's after the client leaves (and after start-up).
    pub lease: std::time::Duration,
    /// How many connections may be in their handshake at once.
    pub admission: remora_soft::server::Admission,
    /// A negative control (for the crash checker only).
    pub fault: Option<ServeFault>,
    /// RemoteLog's garbage collector in each client's region, if asked for.
    pub gc: Option<LogCollector>,
}

/// RemoteLog's garbage collector as `serve` runs it in each client's region (`serve
/// --gc`): [`collect_garbage`] on the server's CPU while the client is connected.
#[derive(Copy, Clone, Debug)]
pub struct LogCollector {
    /// The log's update kind (a compound log's tail is its tail pointer).
    pub update: Update,
    /// The ring, the collector's interval and its pause.
    pub shape: LogShape,
    /// A negative control: [`collect_garbage_head_visible_first`] instead.
    pub head_visible_first: bool,
}

impl LogCollector {
    /// The task `serve` runs beside each connection's responder.
    pub fn slot_task(self) -> SlotTask {
        let LogCollector {
            update,
            shape,
            head_visible_first,
        } = self;
        SlotTask {
            name: "RemoteLog garbage collector".into(),
            make: std::sync::Arc::new(move |node, region, running| {
                let running = move || running.get();
                if head_visible_first {
                    Box::pin(collect_garbage_head_visible_first(
                        node,
                        region.addr,
                        shape,
                        update,
                        running,
                    ))
                } else {
                    Box::pin(collect_garbage(node, region.addr, shape, update, running))
                }
            }),
        }
    }

    /// `serve`'s flags for this collector.
    pub fn args(&self) -> Vec<String> {
        let mut v = vec![
            "--gc".to_string(),
            self.update.name().to_string(),
            "--gc-records".into(),
            self.shape.capacity.to_string(),
            "--gc-interval-us".into(),
            (self.shape.gc_interval.as_nanos() / 1000).to_string(),
            "--gc-pause-us".into(),
            (self.shape.gc_pause.as_nanos() / 1000).to_string(),
        ];
        if self.head_visible_first {
            v.push("--gc-head-visible-first".into());
        }
        v
    }
}

/// What the platform says about its persistent memory: `/sys/bus/nd/devices/region*/
/// persistence_domain` on a machine with real PM (e.g. `cpu_cache` for eADR, `memory_controller` for ADR).
pub fn platform_persistence_domains() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/sys/bus/nd/devices") else {
        return out;
    };
    let mut names: Vec<String> = dir
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("region"))
        .collect();
    names.sort();
    for n in names {
        if let Ok(d) =
            std::fs::read_to_string(format!("/sys/bus/nd/devices/{n}/persistence_domain"))
        {
            out.push((n, d.trim().to_string()));
        }
    }
    out
}

/// Runs a server until SIGTERM or Ctrl-C. Its first output line is `listening on ADDR`.
pub fn serve_blocking(args: &ServeArgs) -> Result<(), String> {
    let rt = crate::killloop::runtime()?;
    let opts = ServeOptions {
        listen: args.listen.clone(),
        pool: args.pool.clone(),
        pool_bytes: args.pool_bytes,
        config: args.config,
        profile: args.profile.clone(),
        setup: ServerSetup {
            region_len: args.region_bytes,
            ..ServerSetup::default()
        },
        lease: args.lease,
        admission: args.admission,
        fault: args.fault,
        slot_task: args.gc.map(LogCollector::slot_task),
    };
    let config = args.config;
    let node = std::cell::RefCell::new(None);
    rt
        .block_on(async {
            let served = serve(opts, |s| {
            *node.borrow_mut() = Some(s.node.clone());
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "listening on {}", s.addr);
            let _ = writeln!(o, "pool {}: {}; {}", args.pool.display(), if s.created { "created" } else { "reopened" }, s.durability);
            let _ = writeln!(o, "server configuration {config}");
            let _ = writeln!(o, "{} connection slots of {} KiB of PM: as many clients at once; a client's slot is kept for it for {:?} after it leaves (and after this start), and it comes back to it with its key; then a new client may have it, cleared", s.slots, s.slot_bytes / 1024, args.lease);
            let _ = writeln!(o, "{}", args.admission);
            if let Some(gc) = &args.gc {
                let _ = writeln!(o, "RemoteLog garbage collector in each client's region: a {} log of {} records, every {} µs, paused {} µs between each store of its head and the persist{}", gc.update.name(), gc.shape.capacity, gc.shape.gc_interval.as_nanos() / 1000, gc.shape.gc_pause.as_nanos() / 1000, if gc.head_visible_first { "; NEGATIVE CONTROL: the head is published before it is durable" } else { "" });
            }
            let domains = platform_persistence_domains();
            if domains.is_empty() {
                let _ = writeln!(o, "platform: no persistent-memory regions under /sys/bus/nd; the configured domain is modeled");
            }
            for (r, d) in domains {
                let _ = writeln!(o, "platform: {r} reports persistence_domain {d}");
            }
            let _ = o.flush();
        })
        .await;
            // How the executor waited (a blocking receive per round trip when one client
            // is busy; see remora_exec::net), for whoever tunes or measures the server.
            // Not after a refused start: the error alone says what happened.
            if served.is_ok() {
                eprintln!("executor waits: {}", remora_exec::wait_stats());
                if let Some(node) = node.borrow().as_ref() {
                    // The RNIC drops a packet as hardware does, unanswered: for a queue pair
                    // that is gone or failed, or out of sequence. Said here, not per packet.
                    let dropped = node.with(|r, _| r.stats().dropped);
                    eprintln!(
                        "soft RNIC: {}; {dropped} packets dropped (for no live queue pair, or \
                         out of sequence)",
                        node.net_stats()
                    );
                }
            }
            served
        })
        .map_err(|e| e.to_string())
}

/// The log shape that fits a server's region.
pub fn shape_for(region_len: u64) -> LogShape {
    LogShape {
        capacity: (region_len - RECORDS_OFF) / 64,
        ..LogShape::default()
    }
}

/// One row of `remotelog --server`.
#[derive(Clone, Debug)]
pub struct RealRow {
    /// Update kind.
    pub update: Update,
    /// Primitive.
    pub primitive: Primitive,
    /// Method the library ran.
    pub method: String,
    /// Mean, p50, p99 in µs.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
}

/// RemoteLog against a running server: the six scenarios of its configuration
/// (3 primitives × singleton/compound), `appends` each, wall-clock latency. With `only`,
/// just the scenarios whose method has that name; naming a method none of them runs is
/// an error that lists the ones they do.
pub fn remotelog_against(
    addr: &str,
    appends: u64,
    profile: &LatencyProfile,
    only: Option<&str>,
) -> Result<(ServerConfig, Vec<RealRow>), String> {
    remotelog_against_within(addr, appends, profile, only, APPEND_TIMEOUT)
}

/// How long [`remotelog_against`] waits for one append: the transport's own time-out
/// catches a server that stops answering packets, not one whose transport answers but
/// whose method's acknowledgement never comes (a two-sided method's Ack), or one that
/// refuses every message as not ready (an RNR NAK is retried for ever, as InfiniBand's
/// `rnr_retry` 7 is).
pub const APPEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `work` unless `done` (a count of finished operations it keeps) stays the same for
/// a whole `stall`: then gives that count, the operation left unfinished. The clock is
/// watched by a task of its own, which wakes once per `stall` and, on a stall, wakes
/// `work`'s task: a time-out around each append cost the client about 1,000 instructions
/// per append, and a timer polled beside `work` about 100. A stall is noticed after
/// `stall` to twice that.
async fn unless_stalled<T>(
    done: std::rc::Rc<std::cell::Cell<u64>>,
    stall: std::time::Duration,
    work: impl std::future::Future<Output = T>,
) -> Result<T, u64> {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;
    use std::task::{Poll, Waker};
    let (stalled, finished) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(false)));
    let waker: Rc<RefCell<Option<Waker>>> = Rc::default();
    {
        let (done, stalled, finished, waker) = (
            done.clone(),
            stalled.clone(),
            finished.clone(),
            waker.clone(),
        );
        remora_exec::spawn_local(async move {
            loop {
                let seen = done.get();
                remora_exec::time::sleep(stall).await;
                if finished.get() {
                    return;
                }
                if done.get() == seen {
                    stalled.set(true);
                    if let Some(w) = waker.borrow_mut().take() {
                        w.wake();
                    }
                    return;
                }
            }
        });
    }
    let mut work = std::pin::pin!(work);
    let r = std::future::poll_fn(|cx| {
        if stalled.get() {
            return Poll::Ready(Err(done.get()));
        }
        let mut w = waker.borrow_mut();
        if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *w = Some(cx.waker().clone());
        }
        drop(w);
        work.as_mut().poll(cx).map(Ok)
    })
    .await;
    finished.set(true);
    r
}

/// [`remotelog_against`] with another wait per append.
pub fn remotelog_against_within(
    addr: &str,
    appends: u64,
    profile: &LatencyProfile,
    only: Option<&str>,
    append_timeout: std::time::Duration,
) -> Result<(ServerConfig, Vec<RealRow>), String> {
    let (addr, profile, only) = (addr.to_string(), profile.clone(), only.map(str::to_string));
    crate::killloop::run_client(async move {
        let mut rows = Vec::new();
        let mut config = None;
        let mut skipped = Vec::new();
        // One client: every scenario's connection comes back to the slot of the first.
        let mut key = 0;
        for update in Update::ALL {
            for primitive in Primitive::ALL {
                let remora_soft::client::Connection {
                    node,
                    config: cfg,
                    mut client,
                    key: k,
                    cleared,
                } = remora_soft::client::connect_as(&addr, &profile, key)
                    .await
                    .map_err(|e| e.to_string())?;
                if cleared > 0 {
                    eprintln!(
                        "the server cleared {} MiB (a slot another client had) before it \
                         accepted this connection",
                        cleared.div_ceil(1 << 20)
                    );
                }
                (config, key) = (Some(cfg), k);
                let hello = client
                    .connect(primitive, Shape::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let shape = shape_for(hello.region_len);
                if appends > shape.capacity {
                    return Err(format!("{appends} appends do not fit the server's {}-record region (raise serve --region-bytes)", shape.capacity));
                }
                let method = client
                    .method(update)
                    .map(|m| m.name.clone())
                    .unwrap_or_default();
                if only.as_ref().is_some_and(|m| *m != method) {
                    skipped.push(method);
                    node.close();
                    continue;
                }
                let mut log = LogClient::new(client, shape, update);
                let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
                let done = std::rc::Rc::new(std::cell::Cell::new(0u64));
                let appending = async {
                    for _ in 0..appends {
                        let t0 = wall();
                        log.append().await.map_err(|e| e.to_string())?;
                        h.record(t0.elapsed().as_nanos() as u64)
                            .expect("latency fits");
                        done.set(done.get() + 1);
                    }
                    Ok::<(), String>(())
                };
                unless_stalled(done.clone(), append_timeout, appending)
                    .await
                    .map_err(|n| {
                        format!(
                            "{update} {primitive} append {n} ({method}): {addr} did not \
                             complete it within {append_timeout:?} (its transport answers; \
                             the method's acknowledgement never came)",
                            update = update.name(),
                            primitive = primitive.name()
                        )
                    })??;
                rows.push(RealRow {
                    update,
                    primitive,
                    method,
                    mean_us: h.mean() / 1e3,
                    p50_us: h.value_at_quantile(0.5) as f64 / 1e3,
                    p99_us: h.value_at_quantile(0.99) as f64 / 1e3,
                });
                // Done with this scenario's connection: the server frees its slot now, not
                // when this process exits.
                node.close();
            }
        }
        let config = config.expect("connected at least once");
        if rows.is_empty() {
            return Err(format!(
                "no scenario runs method {:?} against this server ({config}); its methods are {}",
                only.unwrap_or_default(),
                skipped.join(", ")
            ));
        }
        Ok((config, rows))
    })
}

/// The rows as Markdown.
pub fn real_table(config: &ServerConfig, rows: &[RealRow]) -> String {
    let mut s = format!("RemoteLog against a soft-RNIC server ({config}), wall-clock latency\n\n| update | primitive | method | mean µs | p50 µs | p99 µs |\n|---|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} |",
            r.update.name(),
            r.primitive.name(),
            r.method,
            r.mean_us,
            r.p50_us,
            r.p99_us
        );
    }
    s
}

/// Starts a `remora serve` child for a crash loop on `pool`, through `args.server_prefix`,
/// listening on `args.server_listen`: `config`, `region`-byte regions, a pool of
/// `pool_bytes`, the server's negative control `fault` if any, and a lease of `lease`
/// seconds (`serve`'s default if `None`).
#[allow(clippy::too_many_arguments)]
pub fn start_server(
    exe: &Path,
    pool: &Path,
    config: &ServerConfig,
    region: u64,
    pool_bytes: u64,
    args: &KillArgs,
    fault: Option<ServeFault>,
    lease: Option<u64>,
    gc: Option<&LogCollector>,
) -> Result<ServerProc, String> {
    let mut cmd = server_command(exe, &args.server_prefix);
    cmd.args(["serve", "--listen", &args.server_listen, "--pool"])
        .arg(pool)
        .args(["--profile", &args.profile_arg])
        .args([
            "--config",
            &config.name(),
            "--region-bytes",
            &region.to_string(),
            "--pool-bytes",
            &pool_bytes.to_string(),
        ]);
    if let Some(f) = fault {
        cmd.args(["--fault", f.name()]);
    }
    if let Some(secs) = lease {
        cmd.args(["--lease-secs", &secs.to_string()]);
    }
    if let Some(gc) = gc {
        cmd.args(gc.args());
    }
    ServerProc::start(&mut cmd, exe, "server", 0, &args.server_log)
}

/// What the real crash loop found for one target.
#[derive(Clone, Debug)]
pub struct RealCrashReport {
    /// Target name.
    pub name: String,
    /// Method.
    pub method: String,
    /// A negative control.
    pub wrong: bool,
    /// Server processes killed with SIGKILL.
    pub kills: u64,
    /// Appends acknowledged in all.
    pub acked: u64,
    /// Lives after which an acknowledged append was missing (or a tail pointer pointed past a lost record).
    pub violations: u64,
    /// The first violation.
    pub example: Option<String>,
    /// New clients that left in the middle of their handshake (the takeover targets').
    pub left: u64,
    /// SIGKILLs that landed while the clients came back (the server's recovery of their
    /// rings, the handshakes, the reads of what survived), before any append of the life.
    pub early: u64,
}

impl RealCrashReport {
    /// A report on `target` before its first life.
    pub fn new(target: &Target) -> RealCrashReport {
        RealCrashReport {
            name: target.name.clone(),
            method: target.method.name.clone(),
            wrong: target.wrong,
            kills: 0,
            acked: 0,
            violations: 0,
            example: None,
            left: 0,
            early: 0,
        }
    }

    /// Correct methods lose nothing; negative controls must be caught.
    pub fn passed(&self) -> bool {
        crashcheck::passed(self.wrong, self.violations)
    }
}

/// The targets of the real loop: one correct method per configuration and update kind
/// (the WRITE column of the tables, as the library picks it), plus the negative controls.
pub fn real_targets(negative: bool, clients: u32, reuse: bool) -> Vec<RealTarget> {
    let t = remora::Taxonomy::shipped();
    let mut v: Vec<Target> = Vec::new();
    for config in ServerConfig::table1() {
        for update in Update::ALL {
            for primitive in Primitive::ALL {
                let sc = Scenario {
                    config,
                    primitive,
                    update,
                };
                v.push(scenario_target(&t, sc));
            }
        }
    }
    if negative {
        v.extend(negative_controls());
    }
    if reuse {
        v.extend(reuse_targets().into_iter().filter(|t| negative || !t.wrong));
    }
    let mut v: Vec<RealTarget> = v
        .into_iter()
        .map(|t| RealTarget {
            t,
            serve_fault: None,
            takeover: false,
        })
        .collect();
    // With several clients, a server that gives slots by connection order must be caught
    // (with one, the order is the client's own slot).
    if negative && clients > 1 {
        let sc = Scenario {
            config: "DMP+noDDIO+PM-RQWRB".parse().expect("a Table 1 name"),
            primitive: Primitive::Write,
            update: Update::Singleton,
        };
        let correct = scenario_target(&t, sc);
        v.push(RealTarget {
            t: Target {
                name: format!("slots-by-connection-order/{}", correct.name),
                wrong: true,
                ..correct
            },
            serve_fault: Some(ServeFault::SlotsByConnectionOrder),
            takeover: false,
        });
    }
    v.extend(takeover_targets(&t, negative));
    v
}

/// The takeover targets ([`crate::takeover`]): the correct server in three configurations
/// (the WPQ path with a PM receive ring; the LLC under DDIO with a DRAM ring; WSP), and with
/// `negative` the four wrong servers in the first. Their method is the library's for a
/// WRITE, with which (or with its method for a SEND) the clients' marks are made durable.
fn takeover_targets(t: &remora::Taxonomy, negative: bool) -> Vec<RealTarget> {
    let target = |config: &str, fault: Option<ServeFault>| {
        let sc = Scenario {
            config: config.parse().expect("a Table 1 name"),
            primitive: Primitive::Write,
            update: Update::Singleton,
        };
        let correct = scenario_target(t, sc);
        let name = match fault {
            None => format!("takeover/{config}"),
            Some(f) => format!("{}/takeover/{config}", f.name()),
        };
        RealTarget {
            t: Target {
                name,
                wrong: fault.is_some(),
                ..correct
            },
            serve_fault: fault,
            takeover: true,
        }
    };
    let mut v: Vec<RealTarget> = [
        "DMP+noDDIO+PM-RQWRB",
        "DMP+DDIO+DRAM-RQWRB",
        "WSP+DDIO+PM-RQWRB",
    ]
    .into_iter()
    .map(|c| target(c, None))
    .collect();
    if negative {
        for f in [
            ServeFault::NoClear,
            ServeFault::ClearInPlace,
            ServeFault::KeepRing,
            ServeFault::AbandonClear,
        ] {
            v.push(target("DMP+noDDIO+PM-RQWRB", Some(f)));
        }
    }
    v
}

/// A client's mark on its region in a several-client crash loop: this, with the client's
/// index in the low bits.
/// Records in the ring of a reused-ring target (`ring-reuse/…`): a life of the real loop
/// goes round it many times.
pub const REAL_RING: u64 = 4;
/// How long `serve`'s collector is descheduled between each store of the head and its
/// persist in the reused-ring targets, µs: long enough that a good share of SIGKILLs land
/// there (where the negative control's published head is not yet durable).
pub const REAL_GC_PAUSE_US: u64 = 500;
/// How long a client of the real loop waits for the collector to free a slot of a full
/// ring before it calls the collector stopped: as long as it gives an append
/// ([`APPEND_TIMEOUT`]), so a loaded machine is not taken for a stopped collector.
pub const RING_FULL_GIVE_UP: std::time::Duration = APPEND_TIMEOUT;

const OWNER_TAG: u64 = 0x6f77_6e65_7200_0000;

/// A target of the real crash loop: a RemoteLog target, and the server's negative control
/// if it is one of the server's (the client's method is then correct).
#[derive(Clone, Debug)]
pub struct RealTarget {
    /// The RemoteLog target.
    pub t: Target,
    /// A wrong server (`serve --fault`).
    pub serve_fault: Option<ServeFault>,
    /// A takeover target ([`crate::takeover`]), not a RemoteLog one.
    pub takeover: bool,
}

/// Runs the real crash loop on one target: start a server, append until a SIGKILL lands,
/// restart on the same pool, reconnect, check every acknowledged append, repeat. With
/// `clients` above 1, that many clients append at once, each to its own log; after each
/// restart they come back in a seeded random order, each with its key, and each checks its
/// own appends (a client given another's slot would find its appends lost).
pub fn real_crash(
    real: &RealTarget,
    args: &KillArgs,
    exe: &Path,
    index: u64,
    clients: u32,
) -> Result<RealCrashReport, String> {
    if real.takeover {
        return crate::takeover::takeover_crash(real, args, exe, index, clients);
    }
    let target = &real.t;
    let pool = args.dir.join(format!("pool-{index}.pm"));
    let _ = std::fs::remove_file(&pool);
    let many = clients > 1;
    let reused = target.ring != Ring::Fresh;
    // A reused ring is small, so that every life goes round it (and a mark's slot more).
    let region: u64 = if reused {
        RECORDS_OFF + (REAL_RING + u64::from(many)) * 64
    } else {
        16 << 20
    };
    // A slot per client: its region, its receive ring and its key fit in 4 MiB more.
    let pool_bytes = u64::from(clients.max(1)) * (region + (4 << 20));
    let mut shape = shape_for(region);
    let mut rng = Prng::from_seed(args.seed ^ index);
    let mut report = RealCrashReport::new(target);
    // Each client's key (0 until the server gives it one), acknowledged appends, and one
    // past the highest record it has begun to write: a reused ring's slots below that less
    // the capacity hold newer records, by design.
    let mut who: Vec<(u64, Vec<u64>, u64)> = vec![(0, Vec::new(), 0); clients.max(1) as usize];
    // With several clients, each marks its region as its own in the region's last 64 bytes
    // (a record's place, 64-byte aligned as WRITE-with-immediate methods need), which the
    // log then leaves alone.
    let mark_off = shape.slot(shape.capacity - 1);
    if many {
        shape.capacity -= 1;
    }
    // The server collects a reused ring, descheduled between each store of the head and
    // its persist for long enough that SIGKILLs land there (the simulator's checker's
    // pause, stretched to the wall clock's scale).
    let gc = reused.then(|| LogCollector {
        update: target.update,
        shape: LogShape {
            gc_interval: remora_model::time::Duration::from_micros(100),
            gc_pause: remora_model::time::Duration::from_micros(REAL_GC_PAUSE_US),
            ..shape
        },
        head_visible_first: target.ring == Ring::ReusedHeadVisibleFirst,
    });
    for life in 0..=args.kills {
        let mut server = start_server(
            exe,
            &pool,
            &target.config,
            region,
            pool_bytes,
            args,
            real.serve_fault,
            None,
            gc.as_ref(),
        )?;
        // The order the clients come back in (seeded; with one client no draw is made).
        let mut order: Vec<usize> = (0..who.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.range_inclusive(0, i as u64) as usize);
        }
        // In some lives the SIGKILL lands while the clients come back: in the server's
        // recovery of their rings, in their handshakes, in their reads of what survived.
        let mut early = early_kill(&mut rng, life, args.kills, &mut server);
        // A fresh executor per life: the last life's client tasks end with it.
        let rt = runtime()?;
        let cut_short = std::cell::Cell::new(false);
        let (verdicts, next_acked, killed) = rt.block_on(async {
            let mut verdicts = Vec::new();
            let mut logs = Vec::new();
            // The nodes, each with its connection, live until the life ends.
            let mut nodes = Vec::new();
            for &c in &order {
                let back = async {
                    let (key, acked, started) = &mut who[c];
                    let conn = remora_soft::client::connect_as(&server.addr, &args.profile, *key)
                        .await
                        .map_err(|e| format!("client {c}: {e}"))?;
                    let mut client = conn.client;
                    *key = conn.key;
                    client
                        .connect(target.primitive, Shape::default())
                        .await
                        .map_err(|e| e.to_string())?;
                    // With several clients each marks its region as its own (by the library's
                    // correct method) before its first append, and checks the mark whenever it
                    // comes back: its records alone would not tell its log from another's.
                    let mut tag = [0u8; 64];
                    tag[..8].copy_from_slice(&(OWNER_TAG | c as u64).to_le_bytes());
                    let found = match (many, life) {
                        (false, _) => None,
                        (true, 0) => {
                            client
                                .persist(mark_off, &tag)
                                .await
                                .map_err(|e| e.to_string())?;
                            None
                        }
                        (true, _) => {
                            Some(client.read(mark_off, 64).await.map_err(|e| e.to_string())?)
                        }
                    };
                    if target.wrong {
                        client.use_method_unchecked(target.update, target.method.clone());
                    } else {
                        client
                            .use_method(target.update, target.method.clone())
                            .map_err(|e| e.to_string())?;
                    }
                    client.use_flush_method(target.flush);
                    // Check what survived the previous life.
                    // Read what the log can hold so far: every acknowledged record and room for
                    // records that persisted without an acknowledgement.
                    let upto = acked.last().map_or(0, |i| i + 1) + 256;
                    let image = read_records(&mut client, &shape, upto)
                        .await
                        .map_err(|e| e.to_string())?;
                    let read =
                        |off: u64, len: u64| image[off as usize..(off + len) as usize].to_vec();
                    let rec = recover(read, &shape, target.update);
                    // What a correct log still holds: a reused ring's older records were
                    // overwritten by newer ones.
                    acked.retain(|&i| i + shape.capacity >= *started);
                    let client_name = if many {
                        format!("client {c}, ")
                    } else {
                        String::new()
                    };
                    if let Some(found) = found.filter(|f| f[..] != tag[..]) {
                        verdicts.push(format!(
                            "{client_name}life {life}: given a region not its own (its mark reads \
                             {:#018x})",
                            u64::from_le_bytes(found[..8].try_into().expect("8 bytes"))
                        ));
                    } else if let Some(v) =
                        return_violation(&read, &shape, target.update, &rec, acked, *started)
                    {
                        verdicts.push(format!("{client_name}life {life}: {v}"));
                    }
                    let next = rec.tail.max(acked.last().map_or(0, |i| i + 1));
                    nodes.push(conn.node);
                    logs.push((
                        c,
                        LogClient::resume(client, shape, target.update, next, rec.head),
                    ));
                    Ok::<_, String>(())
                }
                .await;
                if let Err(e) = back {
                    // Only a SIGKILL sent before the failure may cut a client's return
                    // short; the life ends there.
                    if !failed_of_early_kill(&mut early) {
                        return Err(e);
                    }
                    cut_short.set(true);
                    return Ok((verdicts, Vec::new(), true));
                }
            }
            if life == args.kills {
                return Ok::<_, String>((verdicts, Vec::new(), false));
            }
            // Append until the server dies; the kill lands at a random moment (or when
            // drawn above). Every client appends until the server is gone (its connection
            // closes, the append fails).
            // A reused ring goes round once in full before the first SIGKILL can land, so
            // that every target reuses its slots however short its lives are.
            let mut lap = std::collections::BTreeMap::new();
            if reused && life == 0 && early.is_none() {
                for (c, log) in &mut logs {
                    let acked: &mut Vec<u64> = lap.entry(*c).or_default();
                    while log.next_index() < 2 * shape.capacity {
                        match append_waiting(log, *c).await? {
                            Some(i) => acked.push(i),
                            None => {
                                return Err(format!(
                                    "client {c}: an append failed before any SIGKILL"
                                ))
                            }
                        }
                    }
                }
            }
            let killer = match early.take() {
                Some(k) => k,
                None => server.kill_after(life_ms(&mut rng, args.max_life_ms)),
            };
            let tasks: Vec<_> = logs
                .into_iter()
                .map(|(c, mut log)| {
                    let mut now_acked = lap.remove(&c).unwrap_or_default();
                    remora_exec::spawn_local(async move {
                        // A fresh ring is never filled; a reused one is gone round until
                        // the server dies.
                        while reused || log.next_index() < shape.capacity {
                            let begun = log.next_index() + 1;
                            match append_waiting(&mut log, c).await? {
                                Some(i) => now_acked.push(i),
                                None => return Ok((c, now_acked, begun)),
                            }
                        }
                        Ok::<_, String>((c, now_acked, log.next_index()))
                    })
                })
                .collect();
            let mut next_acked = Vec::new();
            for t in tasks {
                next_acked.push(
                    t.await
                        .map_err(|e| format!("a client's appends: {e:?}"))??,
                );
            }
            let killed = killer.join();
            Ok((verdicts, next_acked, killed))
        })?;
        if !verdicts.is_empty() {
            report.violations += 1;
            report.example.get_or_insert(verdicts.join("; "));
        }
        drop(server);
        if killed {
            report.kills += 1;
        }
        if cut_short.get() {
            report.early += 1;
        }
        for (c, now, begun) in next_acked {
            report.acked += now.len() as u64;
            who[c].1.extend(now);
            who[c].2 = begun;
        }
        // A lost acknowledged append stays lost; keep only what a correct log must still hold.
        if report.violations > 0 && target.wrong {
            break;
        }
    }
    let _ = std::fs::remove_file(&pool);
    Ok(report)
}

/// What a client of the real loop, back after a restart, finds wrong with its log, if
/// anything: `rec` is what it recovered from the region it read (`read`), `acked` the
/// acknowledged appends a correct log still holds, and `started` one past the highest
/// record it had begun to write.
///
/// A compound log's tail pointer is judged from `started` less the ring's capacity, not
/// from the head `rec` holds: the server's collector runs as soon as the client is
/// accepted, and may already have moved the head up to the tail pointer (over a record
/// that did not survive) before the client reads the region. Every record from there to
/// the tail pointer was written after its slot's last reuse, and a correct log made it
/// durable before the tail pointer that covers it.
pub fn return_violation(
    read: &dyn Fn(u64, u64) -> Vec<u8>,
    shape: &LogShape,
    update: Update,
    rec: &Recovered,
    acked: &[u64],
    started: u64,
) -> Option<String> {
    let judged = Recovered {
        head: rec.head.min(started.saturating_sub(shape.capacity)),
        ..rec.clone()
    };
    if let Some(v) = log_violation(read, shape, update, &judged, acked) {
        return Some(v.describe(rec));
    }
    (rec.head > rec.tail).then(|| format!("head {} is past the tail {}", rec.head, rec.tail))
}

/// One append of a real loop's client: `Some(i)` once record `i` is acknowledged, `None`
/// if the append failed (the server is gone). While the ring is full it waits for the
/// server's collector, for so long that only a collector that stopped outlasts it (an
/// error).
async fn append_waiting<V: remora_verbs::Verbs>(
    log: &mut LogClient<V>,
    c: usize,
) -> Result<Option<u64>, String> {
    let mut full_since = None;
    loop {
        match log.append().await {
            Ok(i) => return Ok(Some(i)),
            Err(e) if is_log_full(&e) => {
                let since = *full_since.get_or_insert_with(wall);
                if wall().duration_since(since) > RING_FULL_GIVE_UP {
                    return Err(format!(
                        "client {c}: the ring stayed full for {RING_FULL_GIVE_UP:?}: the \
                         server's collector stopped"
                    ));
                }
                remora_exec::time::sleep(std::time::Duration::from_micros(50)).await;
            }
            Err(_) => return Ok(None),
        }
    }
}

/// The reports as Markdown.
pub fn real_table_crash(rs: &[RealCrashReport]) -> String {
    let header = [
        "target",
        "method",
        "kind",
        "SIGKILLs",
        "acked appends",
        "violations",
        "result",
    ];
    let rows = rs.iter().map(|r| {
        vec![
            r.name.clone(),
            r.method.clone(),
            crashcheck::kind_cell(r.wrong, "correct method").to_string(),
            r.kills.to_string(),
            r.acked.to_string(),
            r.violations.to_string(),
            killloop::result_cell(r.wrong, r.violations, r.example.as_deref()),
        ]
    });
    let mut summary = format!(
        "{} targets, {} SIGKILLs, {} acknowledged appends checked",
        rs.len(),
        rs.iter().map(|r| r.kills).sum::<u64>(),
        rs.iter().map(|r| r.acked).sum::<u64>()
    );
    let early = rs.iter().map(|r| r.early).sum::<u64>();
    if early > 0 {
        summary += &format!(
            "; {early} SIGKILLs landed while the clients came back (before the life's appends)"
        );
    }
    let left = rs.iter().map(|r| r.left).sum::<u64>();
    if left > 0 {
        summary +=
            &format!("; {left} new clients of the takeover targets left before they were accepted");
    }
    killloop::table(&header, rows, &summary)
}
