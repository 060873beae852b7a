//! `remora`: the command-line front end. Every scenario lives in the `remora_cli` library;
//! this file parses arguments, prints, and turns errors into a message and exit code 1.

use clap::{Parser, Subcommand};
use remora::Update;
use remora_cli::{bench, configs, demo, interrupt, killloop, paper, profiles, real, rpcreal};
use remora_model::time::Duration;
use remora_model::ServerConfig;
use remora_soft::pool::PoolBytes;
use remora_soft::server::Admission;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "remora",
    version,
    about = "Correct, fast remote persistence over RDMA: a hardware model of RNICs and persistent memory, run on a deterministic simulator."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// How many connections a server lets be in their handshake at once (`serve`,
/// `rpc-serve`).
#[derive(clap::Args, Debug, Clone, Copy)]
struct AdmissionArgs {
    /// Connections in their handshake at once, from all clients: one more is refused at
    /// once as busy (each holds a socket until it is served or its handshake times out).
    #[arg(long, default_value_t = Admission::DEFAULT.handshakes as u64,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_handshakes: u64,
    /// The same from one address (an IPv6 client's /64), so that one client's burst does
    /// not shut out the others.
    #[arg(long, default_value_t = Admission::DEFAULT.per_address as u64,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_handshakes_per_address: u64,
}

impl From<AdmissionArgs> for Admission {
    fn from(a: AdmissionArgs) -> Admission {
        // Both are at most 2^20 (clap's range), so they fit.
        Admission {
            handshakes: a.max_handshakes as usize,
            per_address: a.max_handshakes_per_address as usize,
        }
    }
}

/// `serve`'s RemoteLog garbage collector (seed 000 §4.1), off unless `--gc` is given.
#[derive(clap::Args, Debug, Clone, Copy)]
struct GcArgs {
    /// Run RemoteLog's garbage collector in each client's region while the client is
    /// connected, for a log of `singleton` or `compound` appends: the server persists the
    /// log's head, then publishes it, so a client appends past the ring's capacity into the
    /// slots collected. Off by default: `serve` serves any application.
    #[arg(long, value_name = "UPDATE", value_parser = parse_update)]
    gc: Option<Update>,
    /// With --gc: the ring's records, 64 bytes each, after the log's 64-byte header
    /// [default: as many as the region holds].
    #[arg(long, requires = "gc", value_parser = clap::value_parser!(u64).range(1..))]
    gc_records: Option<u64>,
    /// With --gc: how often the collector runs, µs (at most 100 ms: a connection's end
    /// waits for its collector's step, and a returning client waits 2 s for its slot).
    #[arg(long, default_value_t = 100, requires = "gc",
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    gc_interval_us: u64,
    /// With --gc: how long the collector is descheduled between each store of the head and
    /// its persist, µs (a preempted thread; the crash loop widens that window with it; at
    /// most 100 ms).
    #[arg(long, default_value_t = 0, requires = "gc",
          value_parser = clap::value_parser!(u64).range(0..=100_000))]
    gc_pause_us: u64,
    /// With --gc: a negative control (for the crash checker only): publish the head before
    /// making it durable.
    #[arg(long, hide = true, requires = "gc")]
    gc_head_visible_first: bool,
}

impl GcArgs {
    /// The collector these flags ask for in `region_bytes`-byte regions, if any.
    fn collector(self, region_bytes: u64) -> Result<Option<real::LogCollector>, String> {
        let Some(update) = self.gc else {
            return Ok(None);
        };
        let mut shape = real::shape_for(region_bytes);
        if let Some(n) = self.gc_records {
            if n > shape.capacity {
                return Err(format!(
                    "--gc-records {n}: a region of {region_bytes} bytes holds {} records of 64 \
                     bytes after the log's header (raise --region-bytes)",
                    shape.capacity
                ));
            }
            shape.capacity = n;
        }
        if shape.capacity == 0 {
            return Err(format!(
                "--gc: a region of {region_bytes} bytes has no room for a record after the \
                 log's 64-byte header (raise --region-bytes)"
            ));
        }
        shape.gc_interval = Duration::from_micros(self.gc_interval_us);
        shape.gc_pause = Duration::from_micros(self.gc_pause_us);
        Ok(Some(real::LogCollector {
            update,
            shape,
            head_visible_first: self.gc_head_visible_first,
        }))
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the twelve server configurations of seed 000 Table 1 as a Markdown table.
    Configs {
        /// Instead, check a configuration name and explain it (e.g. DMP+noDDIO+PM-RQWRB).
        #[arg(long, value_name = "NAME")]
        parse: Option<String>,
    },
    /// Print a latency profile as TOML.
    Profile {
        /// A built-in profile: default, cx4-100g or slow-data-path.
        #[arg(long, value_name = "NAME", conflicts_with = "file")]
        name: Option<String>,
        /// A profile file to load and validate.
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
    },
    /// Log appends with RDMA WRITE + RDMA FLUSH on the simulator: latency, a run summary,
    /// and what a power failure would keep.
    Demo {
        /// Simulation seed (equal seeds give identical runs).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Server configuration (see `remora configs`).
        #[arg(long, value_name = "NAME", default_value = demo::DEFAULT_CONFIG, value_parser = parse_config)]
        config: ServerConfig,
        /// Latency profile: a built-in name (default, cx4-100g, slow-data-path) or a TOML file.
        #[arg(long, value_name = "NAME|PATH", default_value = "default")]
        profile: String,
        /// Write the timeline as Chrome trace-event JSON to PATH (open it in <https://ui.perfetto.dev>).
        #[arg(long, value_name = "PATH")]
        trace: Option<PathBuf>,
        /// Number of appends.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
        appends: u64,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: BenchCmd,
    },
    /// Run a soft-RNIC server: the model in real time over TCP, PM as a memory-mapped pool
    /// file, the library's responder for every client. Stops on SIGTERM or Ctrl-C.
    Serve {
        /// Address to listen on (host:port; IPv4 or IPv6; port 0 picks one).
        #[arg(long, default_value = "127.0.0.1:7471")]
        listen: String,
        /// The PM pool file (created if missing; a wrong or damaged file is refused).
        #[arg(long)]
        pool: PathBuf,
        /// Bytes of PM in a new pool [default: 67108864]. An existing pool keeps its size;
        /// given, this flag also refuses one smaller than asked.
        #[arg(long)]
        pool_bytes: Option<u64>,
        /// Server configuration (see `remora configs`).
        #[arg(long, value_name = "NAME", value_parser = parse_config, conflicts_with = "config_file")]
        config: Option<ServerConfig>,
        /// Server configuration as a TOML file (domain, ddio, rqwrb, transport, caps).
        #[arg(long, value_name = "PATH")]
        config_file: Option<PathBuf>,
        /// Latency profile of the model: a built-in name or a TOML file.
        #[arg(long, value_name = "NAME|PATH", default_value = "default")]
        profile: String,
        /// Bytes of PM each client connection updates (64 bytes to 16 TiB, the largest
        /// pool).
        #[arg(long, default_value_t = 4 << 20,
              value_parser = clap::value_parser!(u64).range(64..=remora_soft::pool::MAX_POOL_BYTES))]
        region_bytes: u64,
        /// Seconds a client's slot (its region and receive ring) stays its own after its
        /// connection ends, and after the server starts: meanwhile a new client is given
        /// another slot, and the client comes back to its own with its key. After it a new
        /// client may take the slot (when no unused one is free).
        #[arg(long, default_value_t = 60)]
        lease_secs: u64,
        #[command(flatten)]
        admission: AdmissionArgs,
        /// A negative control (for the crash checker only).
        #[arg(long, hide = true)]
        fault: Option<remora_soft::server::ServeFault>,
        #[command(flatten)]
        gc: GcArgs,
    },
    /// Print seed 000 Tables 2 and 3 (every method of remote persistence), generated from
    /// taxonomy/methods.toml, in Markdown.
    Taxonomy,
    /// Explain which methods are correct for a server and which one the library picks:
    /// each is run on the simulator with the profile and ranked by latency.
    Plan {
        /// Server configuration (see `remora configs`), e.g. DMP+noDDIO+PM-RQWRB@iwarp,no-flush.
        #[arg(long, value_name = "NAME", value_parser = parse_config)]
        config: ServerConfig,
        /// singleton or compound.
        #[arg(long, default_value = "singleton", value_parser = parse_update)]
        update: Update,
        /// Length of the second update of a compound update (ATOMIC WRITE carries 8
        /// bytes) [default: 8]; 1 byte to 960 KiB (the simulated region's room).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=paper::MAX_B_LEN))]
        b_len: Option<u64>,
        /// Latency profile: a built-in name or a TOML file.
        #[arg(long, value_name = "NAME|PATH", default_value = "default")]
        profile: String,
    },
    /// RemoteLog (seed 000 §4): all 72 scenarios on the simulator; mean, p50 and p99 append
    /// latency laid out like Figure 2, with CSV, JSON and an SVG plot.
    Remotelog {
        /// Appends per scenario (the paper ran 10,000,000; the default is a quick run).
        #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
        appends: u64,
        /// Simulation seed.
        #[arg(long, default_value_t = 1, conflicts_with = "server")]
        seed: u64,
        /// Latency profile: a built-in name or a TOML file.
        #[arg(long, value_name = "NAME|PATH", default_value = "default")]
        profile: String,
        /// Worker threads (scenarios run in parallel).
        #[arg(long, default_value_t = default_threads(), value_parser = threads_parser(),
              conflicts_with = "server")]
        threads: usize,
        /// Directory for remotelog.csv, remotelog.json, remotelog.svg and figure2.md.
        #[arg(long, default_value = "out", conflicts_with = "server")]
        out: PathBuf,
        /// Also write the results page with the paper's claims beside the model's here
        /// (docs/results/remotelog.md), with the plot and data beside it.
        #[arg(long, value_name = "PATH", conflicts_with = "server")]
        results: Option<PathBuf>,
        /// Run against a soft-RNIC server (`remora serve`) instead of the simulator: the six
        /// scenarios of the server's configuration, wall-clock latency.
        #[arg(long, value_name = "HOST:PORT")]
        server: Option<String>,
        /// With --server: only the scenarios whose method has this name (e.g. write-msg),
        /// to time or profile one method.
        #[arg(long, value_name = "NAME", requires = "server")]
        method: Option<String>,
    },
    /// The crash checker: cut the server's power at many points of RemoteLog runs, recover,
    /// and check that no acknowledged append was lost; wrong methods must be caught.
    Crashcheck {
        /// Crash points per target (at least).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..),
              conflicts_with = "real")]
        points: u64,
        /// Appends per run.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..),
              conflicts_with = "real")]
        appends: u64,
        /// First seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Only targets whose name contains this.
        #[arg(long)]
        only: Option<String>,
        /// Skip the text's alternatives, READ-emulated FLUSH and iWARP variants.
        #[arg(long, conflicts_with = "real")]
        no_variants: bool,
        /// Skip the runs that reuse RemoteLog's ring (`ring-reuse/…`: a four-record ring
        /// through 24 appends, or with --real a four-record ring the server's collector
        /// frees for the whole life; the collector descheduled between its stores and
        /// persists).
        #[arg(long)]
        no_reuse: bool,
        /// Latency profile: a built-in name or a TOML file.
        #[arg(long, value_name = "NAME|PATH", default_value = "default")]
        profile: String,
        /// Worker threads.
        #[arg(long, default_value_t = default_threads(), value_parser = threads_parser(),
              conflicts_with = "real")]
        threads: usize,
        /// Real crashes: start `remora serve` processes and SIGKILL them at random moments,
        /// restart on the same pool file, recover, and check over TCP.
        #[arg(long)]
        real: bool,
        /// With --real: SIGKILLs per target.
        #[arg(long, default_value_t = 14, value_parser = clap::value_parser!(u64).range(1..))]
        kills: u64,
        /// With --real: longest life of a server before its SIGKILL, ms.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
        max_life_ms: u64,
        /// With --real: which targets: correct, negative, or all.
        #[arg(long, default_value = "all")]
        targets: String,
        /// With --real: start servers through this command, e.g. "ip netns exec NS" (split at
        /// whitespace). A server is SIGKILLed with its process group, so a prefix may fork
        /// it (timeout, strace -f); one that moves it out of the group (setsid, sudo with a
        /// pty) is refused, or cannot be seen doing so if it runs it as another user.
        #[arg(long, default_value = "")]
        server_prefix: String,
        /// With --real: address the servers listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        server_listen: String,
        /// With --real: keep the servers' standard error in this file (by default it goes
        /// to a scratch file, removed at the end; a failed run shows its last lines).
        #[arg(long, value_name = "PATH")]
        server_log: Option<PathBuf>,
        /// With --real: clients appending at once, each to its own log; after each restart
        /// they come back in a random order, each to its own slot by its key.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        clients: u32,
    },
    /// Serve seed 003's durable RPCs on the soft RNIC: the redo log and the key-value
    /// store live in the PM pool file; start-up recovery re-executes logged requests.
    /// Stops on SIGTERM or Ctrl-C.
    RpcServe {
        /// Address to listen on (host:port; IPv4 or IPv6; port 0 picks one).
        #[arg(long, default_value = "127.0.0.1:7472")]
        listen: String,
        /// The PM pool file (created if missing; a wrong or damaged file is refused).
        #[arg(long)]
        pool: PathBuf,
        /// Bytes of PM in a new pool [default: 16777216]. An existing pool keeps its size;
        /// given, this flag also refuses one smaller than asked.
        #[arg(long)]
        pool_bytes: Option<u64>,
        /// Server configuration (see `remora configs`).
        #[arg(long, value_name = "NAME", value_parser = parse_config)]
        config: ServerConfig,
        /// Durable design: SFlush-RPC, WFlush-RPC, S-RFlush-RPC or W-RFlush-RPC.
        #[arg(long, value_parser = rpcreal::parse_durable)]
        design: remora_rpc::Design,
        /// Flush form: emulated (seed 003 §4.1.3) or native (the proposed primitives, §4.1,
        /// for every design; refused on an RNIC without RDMA FLUSH).
        #[arg(long, default_value = "emulated", value_parser = rpcreal::parse_form)]
        form: remora_rpc::FlushForm,
        /// Redo-log entries.
        #[arg(long, default_value_t = 64)]
        capacity: u32,
        /// Objects in the store (keys 0..objects; at least one).
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
        objects: u64,
        /// Largest value, bytes (at least one: a store of empty objects holds nothing).
        #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
        max_value: u32,
        /// Injected processing time per request, µs (seed 003 §5.2's heavy load: 100).
        #[arg(long, default_value_t = 0)]
        processing_us: u64,
        /// Clients served at once, each with its own redo log in the pool (client node ids
        /// 1..=N; a reconnecting client gets its own log back). The connections share the
        /// store; their updates are serialised so recovery never re-runs one connection's
        /// Put over another's later one.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        connections: u32,
        /// Latency profile of the model: a built-in name or a TOML file.
        #[arg(long, value_name = "NAME|PATH", default_value = "default")]
        profile: String,
        /// A negative control (for the crash checker only).
        #[arg(long, hide = true, value_parser = rpcreal::parse_fault)]
        fault: Option<remora_rpc::durable::Fault>,
        /// Append `conn seq` to this file at each executed Put (for the crash checker: the
        /// counts survive a kill -9).
        #[arg(long, hide = true)]
        execution_journal: Option<PathBuf>,
        /// Seconds a connection stays its client's after the client left with replies it
        /// never got (requests recovery executed for it): a new client is given another
        /// connection meanwhile, and after it this one, without those replies.
        #[arg(long, default_value_t = 60)]
        lease_secs: u64,
        #[command(flatten)]
        admission: AdmissionArgs,
    },
    /// Durable RPCs against a `remora rpc-serve` server: Puts (returning once durable) and
    /// Gets over the soft RNIC, wall-clock latency.
    Rpc {
        /// The server (host:port).
        #[arg(long, value_name = "HOST:PORT")]
        server: String,
        /// The design the client expects (default: whatever the server runs).
        #[arg(long, value_parser = rpcreal::parse_durable)]
        design: Option<remora_rpc::Design>,
        /// Operations (every fourth a Get, the rest Puts).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
        ops: u64,
        /// Requests per RPC: up to N operations share one Flush (seed 003 §4.3, Figure
        /// 6(b)); a batch's latency counts for each of its operations.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
        batch: u32,
        /// Latency profile of the client's model: a built-in name or a TOML file.
        #[arg(long, value_name = "NAME|PATH", default_value = "default")]
        profile: String,
    },
    /// The real crash loop for durable RPCs: start `remora rpc-serve` processes, SIGKILL
    /// them at random moments, restart on the same pool (recovery), reconnect the same
    /// clients, and check every acknowledged Put; negative controls must be caught.
    RpcCrashcheck {
        /// SIGKILLs per target.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
        kills: u64,
        /// Longest life of a server before its SIGKILL, ms.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
        max_life_ms: u64,
        /// Seed of the kill times.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Which targets: correct, negative, or all.
        #[arg(long, default_value = "all")]
        targets: String,
        /// Only targets whose name contains this.
        #[arg(long)]
        only: Option<String>,
        /// Latency profile (slow-data-path stretches the volatile windows the negative
        /// controls need past a loopback round trip).
        #[arg(long, value_name = "NAME|PATH", default_value = "default")]
        profile: String,
        /// Start servers through this command, e.g. "ip netns exec NS" (split at whitespace;
        /// the checker and its clients stay here). A server is SIGKILLed with its process
        /// group, so a prefix may fork it (timeout, strace -f); one that moves it out of the
        /// group (setsid, sudo with a pty) is refused, or cannot be seen doing so if it runs
        /// it as another user.
        #[arg(long, default_value = "")]
        server_prefix: String,
        /// Address the servers listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        server_listen: String,
        /// Keep the servers' standard error in this file (by default it goes to a scratch
        /// file, removed at the end; a failed run shows its last lines).
        #[arg(long, value_name = "PATH")]
        server_log: Option<PathBuf>,
        /// Injected processing time per request, µs (a backlog of logged, unprocessed
        /// requests widens the windows the negative controls need).
        #[arg(long, default_value_t = 0)]
        processing_us: u64,
        /// Clients issuing at once, each on its own connection and redo log of one server
        /// (`rpc-serve --connections N`), all over the same keys; every one is checked for
        /// exactly-once execution, and the objects against the serial order the server
        /// executed the Puts in. From 2 on, a server without the lock that serialises the
        /// connections' store updates joins the negative controls.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
        clients: u32,
    },
}

/// Worker threads: at least one (none would be raised to one without a word).
fn threads_parser() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096)
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

fn parse_update(s: &str) -> Result<Update, String> {
    match s {
        "singleton" => Ok(Update::Singleton),
        "compound" => Ok(Update::Compound),
        _ => Err(format!("unknown update kind {s:?}: singleton or compound")),
    }
}

/// A progress bar on standard error (hidden when it is not a terminal).
/// [`killloop::run_all`] over `targets` with a progress bar.
fn run_with_bar<T, R>(
    targets: &[T],
    one: impl FnMut(&T, u64) -> Result<R, String>,
) -> Result<Vec<R>, String> {
    let bar = progress_bar("targets");
    bar.set_length(targets.len() as u64);
    let reports = killloop::run_all(targets, &|done, _| bar.set_position(done as u64), one);
    bar.finish_and_clear();
    reports
}

fn progress_bar(what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {pos}/{len} ({elapsed}, eta {eta})",
        )
        .expect("progress template")
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

#[derive(Subcommand)]
enum BenchCmd {
    /// The soft RNIC next to raw TCP over loopback, side by side: RemoteLog append latency
    /// per method against a ping-pong, streaming WRITEs against TCP streaming, and the
    /// simulator's prediction, with a profile calibrated from the ping-pong, for every
    /// RemoteLog scenario.
    Soft {
        /// Ping-pongs per series, and appends in each RemoteLog scenario measured.
        #[arg(long, default_value_t = 5000, conflicts_with = "stream_only")]
        n: u64,
        /// 64-byte WRITEs streamed.
        #[arg(long, default_value_t = 100_000)]
        stream: u64,
        /// Directory for the pool files: /dev/shm emulates PM with DRAM as seed 000 §4.2
        /// did; a disk-backed directory adds the disk's msync cost.
        #[arg(long, default_value = "/dev/shm")]
        pool_dir: PathBuf,
        /// Only the streaming comparison (for profiling its path; unpinned, whatever
        /// --placement says, so that flag is refused with it).
        #[arg(long)]
        stream_only: bool,
        /// CPU placement: `split` (this process's thread on CPU 0, the echo process and the
        /// servers on CPU 1, as two hosts), `shared` (all on CPU 0) or `free`.
        #[arg(
            long,
            value_enum,
            default_value = "split",
            conflicts_with = "stream_only"
        )]
        placement: remora_cli::softbench::Placement,
        /// Also write the output into this results page (docs/results/soft-rnic.md), in the
        /// placement's section between its two markers; the rest of the page is kept.
        #[arg(long, conflicts_with = "stream_only")]
        results: Option<PathBuf>,
        /// RemoteLog scenarios to measure: `all` 72 (the model check), or `latency`, the
        /// latency table's nine (a shorter run; the model check covers those nine).
        #[arg(
            long,
            value_enum,
            default_value = "all",
            conflicts_with = "stream_only"
        )]
        scenarios: remora_cli::softbench::Scenarios,
    },
    /// A raw TCP echo server (the other process of `bench soft`'s ping-pong).
    #[command(hide = true)]
    Echo {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
    },
    /// Seed 003's evaluation (§5): the eight baseline RPCs and the four durable RPCs on
    /// the simulator; tables, CSV, JSON and SVG plots, and optionally the results page with
    /// the paper's claims beside the model's (run with --release).
    Rpc {
        /// Small sizes that run in seconds (what CI runs).
        #[arg(long)]
        quick: bool,
        /// Divide the paper's sizes (50K objects, 300K operations, 30K per sender) by N
        /// (not with --quick, which has sizes of its own).
        #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..),
              conflicts_with = "quick")]
        divisor: u64,
        /// Designs: comma-separated names, or all, baselines, durable.
        #[arg(long, default_value = "all", value_parser = remora_cli::rpcbench::parse_designs)]
        designs: std::vec::Vec<remora_rpc::Design>,
        /// Experiment sets: comma-separated, or all (micro, ycsb, sizes, senders,
        /// read-write, batch, load, breakdown, pagerank); the page leaves the others' tables
        /// empty.
        #[arg(long, default_value = "all", value_parser = remora_cli::rpcbench::parse_sets)]
        sets: std::vec::Vec<remora_rpc::bench::Set>,
        /// Worker threads (each simulation is single-threaded).
        #[arg(long, default_value_t = default_threads(), value_parser = threads_parser())]
        threads: usize,
        /// Flush primitives of the durable RPCs: emulated (what the paper measured) or native.
        #[arg(long, default_value = "emulated", value_parser = remora_cli::rpcbench::parse_flush)]
        flush: remora_rpc::FlushForm,
        /// Processing time per request under heavy load, µs (§5.2: 100).
        #[arg(long, default_value_t = 100)]
        processing_us: u64,
        /// Server worker threads executing requests, the same for every design (default:
        /// the 40 cores of seed 003's server, §5.1).
        #[arg(long, default_value_t = remora_rpc::bench::SERVER_THREADS,
              value_parser = clap::value_parser!(u32).range(1..))]
        server_threads: u32,
        /// Busy link of Figure 14: the background sender's offered load, percent of the
        /// link bandwidth.
        #[arg(long, default_value_t = 100, value_name = "PERCENT",
              value_parser = clap::value_parser!(u32).range(1..))]
        net_load: u32,
        /// Busy CPU of Figures 15-16: the background program's share of the CPU, percent
        /// (1 to 99).
        #[arg(long, default_value_t = remora_rpc::bench::CPU_LOAD.percent, value_name = "PERCENT",
              value_parser = clap::value_parser!(u32).range(1..=99))]
        cpu_load: u32,
        /// Busy CPU of Figures 15-16: mean scheduling period, µs.
        #[arg(long, default_value_t = 100, value_name = "US", value_parser = clap::value_parser!(u64).range(1..))]
        cpu_period_us: u64,
        /// Simulation seed.
        #[arg(long, default_value_t = 3)]
        seed: u64,
        /// Latency profile: a built-in name or a TOML file.
        #[arg(long, value_name = "NAME|PATH", default_value = "default")]
        profile: String,
        /// Directory for rpc.md, rpc.csv, rpc.json and rpc-*.svg.
        #[arg(long, default_value = "out")]
        out: PathBuf,
        /// Also write the results page here (docs/results/rpc.md), data and plots beside it.
        #[arg(long, value_name = "PATH")]
        results: Option<PathBuf>,
    },
    /// Simulator speed: simulated RDMA operations per wall-clock second (run with --release).
    Sim {
        /// RDMA WRITEs in total.
        #[arg(long, default_value_t = 2_000_000)]
        ops: u64,
        /// WRITEs per FLUSH.
        #[arg(long, default_value_t = 64)]
        batch: u64,
        /// Simulation seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Server configuration.
        #[arg(long, value_name = "NAME", default_value = demo::DEFAULT_CONFIG, value_parser = parse_config)]
        config: ServerConfig,
        /// Latency profile: a built-in name or a TOML file.
        #[arg(long, value_name = "NAME|PATH", default_value = "default")]
        profile: String,
    },
}

fn parse_config(s: &str) -> Result<ServerConfig, String> {
    s.parse::<ServerConfig>().map_err(|e| e.to_string())
}

/// Above this many appends the demo does not record its timeline unless `--trace` asks.
const TIMELINE_LIMIT: u64 = 100_000;

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Configs { parse: None } => print!("{}", configs::table1_markdown()),
        Cmd::Configs { parse: Some(name) } => {
            let c = parse_config(&name)?;
            print!("{}", configs::describe(&c));
        }
        Cmd::Profile { name, file } => {
            let p = match file {
                Some(path) => profiles::from_file(&path)?,
                None => profiles::builtin(name.as_deref().unwrap_or("default"))?,
            };
            print!("{}", p.to_toml());
        }
        Cmd::Demo {
            seed,
            config,
            profile,
            trace,
            appends,
        } => {
            let profile = profiles::load(&profile)?;
            // Opened before the run, so a path that cannot be written is said before it.
            let trace_file = match &trace {
                Some(path) => Some(
                    std::fs::File::create(path)
                        .map_err(|e| format!("cannot write trace {}: {e}", path.display()))?,
                ),
                None => None,
            };
            let opts = demo::DemoOptions {
                seed,
                config,
                profile,
                appends,
                record_trace: trace.is_some() || appends <= TIMELINE_LIMIT,
                chrome_trace: trace.is_some(),
            };
            let report = demo::run_demo(&opts);
            print!("{report}");
            if report.trace.is_none() {
                println!(
                    "  (the timeline is not recorded above {TIMELINE_LIMIT} appends unless --trace asks for it)"
                );
            }
            if let (Some(path), Some(mut file), Some(json)) =
                (&trace, trace_file, &report.chrome_trace)
            {
                use std::io::Write as _;
                file.write_all(json.as_bytes())
                    .map_err(|e| format!("cannot write trace {}: {e}", path.display()))?;
                println!(
                    "trace written to {} ({} bytes): open it in https://ui.perfetto.dev (or chrome://tracing)",
                    path.display(),
                    json.len()
                );
            }
            if report.crash.is_violation() {
                return Err(format!(
                    "{} acknowledged appends lost under {}, where WRITE + FLUSH is correct: a bug",
                    report.crash.lost.len(),
                    report.config.name()
                ));
            }
        }
        Cmd::Bench {
            what:
                BenchCmd::Sim {
                    ops,
                    batch,
                    seed,
                    config,
                    profile,
                },
        } => {
            let opts = bench::BenchOptions {
                ops,
                batch,
                seed,
                config,
                profile: profiles::load(&profile)?,
            };
            let report = bench::run_sim_bench(&opts)?;
            print!("{report}");
        }
        Cmd::Bench {
            what:
                BenchCmd::Soft {
                    n,
                    stream,
                    pool_dir,
                    stream_only,
                    placement,
                    results,
                    scenarios,
                },
        } => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            // A page that cannot take the output is said before a run of minutes, not after.
            if let Some(page) = &results {
                remora_cli::softbench::check_results(page, placement)?;
            }
            let report = if stream_only {
                remora_cli::softbench::run_stream_only(&exe, stream, &pool_dir)?
            } else {
                remora_cli::softbench::run(&exe, n, stream, &pool_dir, placement, scenarios)?
            };
            print!("{report}");
            if let Some(page) = results {
                let command = format!(
                    "remora bench soft --n {n} --stream {stream} --placement {} --scenarios {} --pool-dir {}",
                    placement.name(),
                    scenarios.name(),
                    pool_dir.display()
                );
                remora_cli::softbench::write_results(&page, placement, &command, &report)?;
                eprintln!("wrote {}", page.display());
            }
        }
        Cmd::Bench {
            what: BenchCmd::Echo { listen },
        } => remora_cli::softbench::echo_server(&listen)?,
        Cmd::Bench {
            what:
                BenchCmd::Rpc {
                    quick,
                    divisor,
                    designs,
                    sets,
                    threads,
                    flush,
                    processing_us,
                    server_threads,
                    net_load,
                    cpu_load,
                    cpu_period_us,
                    seed,
                    profile,
                    out,
                    results,
                },
        } => {
            let mut command = vec!["remora".to_string()];
            command.extend(std::env::args().skip(1));
            let args = remora_cli::rpcbench::RpcBenchArgs {
                quick,
                divisor,
                designs,
                sets,
                threads,
                flush,
                processing_us,
                server_threads,
                net_load_percent: net_load,
                cpu_load_percent: cpu_load,
                cpu_period_us,
                seed,
                profile: profiles::load(&profile)?,
                out: out.clone(),
                results_page: results.clone(),
                command: command.join(" "),
            };
            let bar = progress_bar("runs");
            let b2 = bar.clone();
            let rs = remora_cli::rpcbench::run(
                &args,
                std::sync::Arc::new(move |done, total| {
                    b2.set_length(total as u64);
                    b2.set_position(done as u64);
                }),
            )?;
            bar.finish_and_clear();
            print!("{}", remora_cli::rpcbench::summary(&rs));
            println!(
                "\n{} runs in {:.1} s; wrote {}/rpc.md, rpc.csv, rpc.json, rpc-*.svg",
                rs.runs().count(),
                rs.wall_s,
                out.display()
            );
            if let Some(p) = results {
                println!("wrote {}", p.display());
            }
        }
        Cmd::Taxonomy => print!("{}", paper::taxonomy()),
        Cmd::Plan {
            config,
            update,
            b_len,
            profile,
        } => {
            // A singleton update has no second part: the flag would be ignored.
            if update == Update::Singleton && b_len.is_some() {
                return Err(
                    "--b-len is the length of a compound update's second part; a singleton \
                     update has none (add --update compound)"
                        .into(),
                );
            }
            let b_len = b_len.unwrap_or(8);
            print!(
                "{}",
                paper::plan(&config, update, b_len, &profiles::load(&profile)?)?
            );
        }
        Cmd::Serve {
            listen,
            pool,
            pool_bytes,
            config,
            config_file,
            profile,
            region_bytes,
            lease_secs,
            admission,
            fault,
            gc,
        } => {
            let config = match (config, config_file) {
                (Some(c), _) => c,
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    toml::from_str::<ServerConfig>(&text)
                        .map_err(|e| format!("bad configuration file {}: {e}", path.display()))?
                }
                (None, None) => {
                    return Err(
                        "give the server's configuration: --config NAME or --config-file PATH"
                            .into(),
                    )
                }
            };
            let args = real::ServeArgs {
                listen,
                pool,
                pool_bytes: pool_bytes_arg(pool_bytes, 64 << 20),
                config,
                profile: profiles::load(&profile)?,
                region_bytes,
                lease: std::time::Duration::from_secs(lease_secs),
                admission: admission.into(),
                fault,
                gc: gc.collector(region_bytes)?,
            };
            real::serve_blocking(&args)?;
        }
        Cmd::Remotelog {
            server: Some(addr),
            appends,
            profile,
            method,
            ..
        } => {
            let (config, rows) = real::remotelog_against(
                &addr,
                appends,
                &profiles::load(&profile)?,
                method.as_deref(),
            )?;
            print!("{}", real::real_table(&config, &rows));
        }
        Cmd::Remotelog {
            appends,
            seed,
            profile,
            threads,
            out,
            results,
            server: None,
            method: _,
        } => {
            let command = std::env::args().collect::<Vec<_>>().join(" ");
            let args = paper::RemoteLogArgs {
                appends,
                seed,
                profile_name: profile.clone(),
                profile: profiles::load(&profile)?,
                threads,
                out: out.clone(),
                results_page: results.clone(),
                command,
            };
            let bar = progress_bar("scenarios");
            let rs = paper::remotelog(&args, &|done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            })?;
            bar.finish_and_clear();
            print!("{}", remora_remotelog::report::figure2_markdown(&rs));
            println!(
                "\nwrote {}/remotelog.csv, remotelog.json, remotelog.svg, figure2.md",
                out.display()
            );
            if let Some(p) = results {
                println!("wrote {}", p.display());
            }
        }
        Cmd::Crashcheck {
            real: true,
            targets: targets_sel,
            server_prefix,
            server_listen,
            server_log,
            kills,
            max_life_ms,
            seed,
            only,
            profile,
            clients,
            no_reuse,
            ..
        } => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let scratch = killloop::Scratch::new("remora-crashcheck")?;
            let args = killloop::KillArgs::from_flags(
                kills,
                max_life_ms,
                seed,
                &scratch.dir,
                &profile,
                &server_prefix,
                server_listen,
                server_log.as_deref(),
            )?;
            let mut targets = real::real_targets(true, clients, !no_reuse);
            killloop::select(
                &mut targets,
                &targets_sel,
                only.as_deref(),
                |t| t.t.wrong,
                |t| &t.t.name,
            )?;
            let reports = run_with_bar(&targets, |t, i| {
                real::real_crash(t, &args, &exe, i, clients)
            })
            .map_err(|e| killloop::with_server_tail(e, &args.server_log))?;
            print!("{}", real::real_table_crash(&reports));
            let failed = reports.iter().filter(|r| !r.passed()).count();
            if failed > 0 {
                return Err(killloop::with_server_tail(
                    format!("{failed} targets failed the real crash loop"),
                    &args.server_log,
                ));
            }
            drop(scratch);
        }
        Cmd::Crashcheck {
            points,
            appends,
            seed,
            only,
            no_variants,
            no_reuse,
            profile,
            threads,
            real: false,
            ..
        } => {
            let opts = remora_remotelog::check::CheckOptions {
                appends,
                crash_points: points,
                seed,
                profile: profiles::load(&profile)?,
                ..Default::default()
            };
            let sel = paper::CrashSelection {
                scenarios: true,
                variants: !no_variants,
                negative: true,
                reuse: !no_reuse,
            };
            let bar = progress_bar("targets");
            let rs = paper::crashcheck(sel, &opts, only.as_deref(), threads, &|done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            })?;
            bar.finish_and_clear();
            print!("{}", paper::crashcheck_table(&rs));
            let failed = rs.iter().filter(|r| !r.passed()).count();
            if failed > 0 {
                // A wrong method loses data only in a window a few events wide: fewer
                // crash points than the default may miss it, which is not a checker bug.
                let missed = rs.iter().filter(|r| r.wrong && !r.passed()).count();
                let default = remora_remotelog::check::CheckOptions::default().crash_points;
                let hint = if missed > 0 && points < default {
                    format!(
                        " ({missed} of them negative controls not caught: with --points \
                         {points}, fewer than the default {default}, a wrong method's window \
                         of a few events may be missed)"
                    )
                } else {
                    String::new()
                };
                return Err(format!("{failed} checker targets failed{hint}"));
            }
        }
        Cmd::RpcServe {
            listen,
            pool,
            pool_bytes,
            config,
            design,
            form,
            capacity,
            objects,
            max_value,
            processing_us,
            connections,
            profile,
            fault,
            execution_journal,
            lease_secs,
            admission,
        } => {
            let args = rpcreal::RpcServeArgs {
                listen,
                pool,
                pool_bytes: pool_bytes_arg(pool_bytes, 16 << 20),
                config,
                profile: profiles::load(&profile)?,
                opts: rpcreal::serve_options(
                    design,
                    form,
                    capacity,
                    objects,
                    max_value,
                    processing_us,
                    fault,
                ),
                connections,
                journal: execution_journal,
                lease: std::time::Duration::from_secs(lease_secs),
                admission: admission.into(),
            };
            rpcreal::rpc_serve_blocking(&args)?;
        }
        Cmd::Rpc {
            server,
            design,
            ops,
            batch,
            profile,
        } => print!(
            "{}",
            rpcreal::rpc_against(&server, design, ops, batch, &profiles::load(&profile)?)?
        ),
        Cmd::RpcCrashcheck {
            kills,
            max_life_ms,
            seed,
            targets: sel,
            only,
            profile,
            server_prefix,
            server_listen,
            server_log,
            processing_us,
            clients,
        } => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let scratch = killloop::Scratch::new("remora-rpc-crashcheck")?;
            let args = rpcreal::RpcCrashArgs {
                kill: killloop::KillArgs::from_flags(
                    kills,
                    max_life_ms,
                    seed,
                    &scratch.dir,
                    &profile,
                    &server_prefix,
                    server_listen,
                    server_log.as_deref(),
                )?,
                processing_us,
                clients,
            };
            let mut targets = rpcreal::rpc_targets(true, clients);
            killloop::select(
                &mut targets,
                &sel,
                only.as_deref(),
                |t| t.wrong(),
                |t| &t.name,
            )?;
            let reports = run_with_bar(&targets, |t, i| {
                rpcreal::rpc_real_crash(t, &args, &exe, i).map_err(|e| format!("{}: {e}", t.name))
            })
            .map_err(|e| killloop::with_server_tail(e, &args.kill.server_log))?;
            print!("{}", rpcreal::rpc_crash_table(&reports));
            let failed = reports.iter().filter(|r| !r.passed()).count();
            if failed > 0 {
                return Err(killloop::with_server_tail(
                    format!("{failed} targets failed the real durable-RPC crash loop"),
                    &args.kill.server_log,
                ));
            }
            drop(scratch);
        }
    }
    Ok(())
}

/// The flags of `crashcheck` that mean something only with `--real` (clap's `requires`
/// cannot say so: a flag's default counts as given).
const REAL_ONLY: [&str; 7] = [
    "kills",
    "max_life_ms",
    "targets",
    "server_prefix",
    "server_listen",
    "server_log",
    "clients",
];

/// Refuses, as clap refuses a conflict, a `crashcheck` without `--real` given a flag that
/// only `--real` uses: it would be ignored, the run not the one asked for.
fn refuse_flags_of_the_other_mode(matches: &clap::ArgMatches) {
    use clap::parser::ValueSource;
    let Some(("crashcheck", m)) = matches.subcommand() else {
        return;
    };
    if m.get_flag("real") {
        return;
    }
    for id in REAL_ONLY {
        if m.value_source(id) == Some(ValueSource::CommandLine) {
            let flag = format!("--{}", id.replace('_', "-"));
            <Cli as clap::CommandFactory>::command()
                .error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    format!(
                        "{flag} is a flag of the real crash loop: it needs --real (without it \
                         the simulator's checker runs, and would ignore {flag})"
                    ),
                )
                .exit();
        }
    }
}

fn main() -> ExitCode {
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    refuse_flags_of_the_other_mode(&matches);
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // The commands that start servers and keep pool files leave none of them behind when
    // interrupted.
    let starts_servers = matches!(
        cli.cmd,
        Cmd::Crashcheck { real: true, .. }
            | Cmd::RpcCrashcheck { .. }
            | Cmd::Bench {
                what: BenchCmd::Soft { .. }
            }
    );
    if starts_servers {
        if let Err(e) = interrupt::clean_up_on_signals() {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    // Refused here, before anything is served, rather than by the first node made; a
    // slice set from the environment is said, since it changes how tasks interleave.
    match remora_soft::runtime::cpu_slice_from_env() {
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        Ok(Some(slice)) => eprintln!(
            "note: {} sets the soft RNIC's CPU slice to {} µs (a measurement setting)",
            remora_soft::runtime::CPU_SLICE_ENV,
            slice.as_micros()
        ),
        Ok(None) => {}
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a server's `--pool-bytes` asks of its pool: given, a new pool that large or an
/// existing one at least that large; not given, a new pool of `default` bytes or an
/// existing one of any size.
fn pool_bytes_arg(given: Option<u64>, default: u64) -> PoolBytes {
    match given {
        Some(n) => PoolBytes::AtLeast(n),
        None => PoolBytes::New(default),
    }
}
