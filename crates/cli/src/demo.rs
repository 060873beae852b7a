//! The demo scenario: a client appends records to a log in a server's persistent memory,
//! each append a singleton update made durable with RDMA WRITE + RDMA FLUSH (seed 000
//! Table 2, "Rq Write(a), Rq Flush, Rq CompFlush"), on the deterministic simulator.
//!
//! It measures each append's latency in virtual time (post of the WRITE to the FLUSH's
//! completion), then asks the server's memory model what a power failure at that instant
//! would keep, and checks that every acknowledged append is in that image. Under a
//! configuration where WRITE + FLUSH is not a correct method (DMP with DDIO on: the FLUSH
//! stops in the LLC, outside the persistence domain) it counts the appends that would be
//! lost instead.

use remora_model::{LatencyProfile, PersistenceDomain, ServerConfig};
use remora_sim::{Sim, TraceSummary};
use remora_verbs::*;
use std::fmt;

/// The configuration the demo runs on unless told otherwise.
pub const DEFAULT_CONFIG: &str = "DMP+noDDIO+PM-RQWRB";
/// Bytes per log record (one cache line).
pub const RECORD_BYTES: u64 = 64;

/// What to run.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Simulation seed.
    pub seed: u64,
    /// Configuration of both nodes (the server's matters; the client's transport and NIC
    /// extensions decide which operations it may post).
    pub config: ServerConfig,
    /// Latency profile.
    pub profile: LatencyProfile,
    /// Number of appends.
    pub appends: u64,
    /// Record the timeline (needed for per-name event counts and the Chrome trace).
    pub record_trace: bool,
    /// Also export the timeline as Chrome trace-event JSON (implies `record_trace`).
    pub chrome_trace: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            seed: 1,
            config: DEFAULT_CONFIG.parse().expect("default config parses"),
            profile: LatencyProfile::default_profile(),
            appends: 1000,
            record_trace: true,
            chrome_trace: false,
        }
    }
}

/// Latency distribution of the appends, in nanoseconds of virtual time.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyStats {
    /// Mean, rounded down.
    pub mean_ns: u64,
    /// Median (nearest rank).
    pub p50_ns: u64,
    /// 99th percentile (nearest rank).
    pub p99_ns: u64,
    /// Smallest.
    pub min_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

impl LatencyStats {
    /// Statistics of `samples` (all zero when empty).
    pub fn of(samples: &[u64]) -> Self {
        if samples.is_empty() {
            return LatencyStats::default();
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        let rank = |p: u64| s[((s.len() as u64 * p).div_ceil(100) as usize).clamp(1, s.len()) - 1];
        let sum: u128 = s.iter().map(|&x| x as u128).sum();
        LatencyStats {
            mean_ns: (sum / s.len() as u128) as u64,
            p50_ns: rank(50),
            p99_ns: rank(99),
            min_ns: s[0],
            max_ns: s[s.len() - 1],
        }
    }
}

/// What a power failure of the server right after the last acknowledgement would keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashCheck {
    /// The instant of the hypothetical power failure.
    pub at: Instant,
    /// Appends the client saw acknowledged (FLUSH completed).
    pub acknowledged: u64,
    /// Acknowledged appends present, intact, in the surviving PM image.
    pub survived: u64,
    /// Indices of acknowledged appends missing from the image, in order.
    pub lost: Vec<u64>,
    /// Whether WRITE + FLUSH is a correct persistence method under the configuration.
    pub method_is_correct: bool,
}

impl CrashCheck {
    /// True when every acknowledged append survives.
    pub fn all_survive(&self) -> bool {
        self.lost.is_empty()
    }
    /// True when the model lost an acknowledged append under a configuration where the
    /// method is correct: a bug in the model or the scenario.
    pub fn is_violation(&self) -> bool {
        self.method_is_correct && !self.all_survive()
    }
}

/// The outcome of [`run_demo`].
#[derive(Clone, Debug)]
pub struct DemoReport {
    /// The configuration run.
    pub config: ServerConfig,
    /// The latency profile's name.
    pub profile: String,
    /// The seed.
    pub seed: u64,
    /// Appends performed.
    pub appends: u64,
    /// How the FLUSH was issued (native, or an RDMA READ on NICs without FLUSH).
    pub flush_method: FlushMethod,
    /// Per-append latency.
    pub latency: LatencyStats,
    /// Every append's latency in nanoseconds, in order.
    pub latencies_ns: Vec<u64>,
    /// Virtual time at the end of the workload (the last acknowledgement).
    pub sim_time: Instant,
    /// Simulator events processed by then.
    pub events: u64,
    /// The run's fingerprint by then (equal for equal seeds and programs).
    pub fingerprint: u64,
    /// Counts of the recorded timeline, if it was recorded.
    pub trace: Option<TraceSummary>,
    /// The timeline as Chrome trace-event JSON, if asked for.
    pub chrome_trace: Option<String>,
    /// The power-failure check.
    pub crash: CrashCheck,
}

/// Whether RDMA WRITE followed by RDMA FLUSH (persistence placement, or the RDMA READ that
/// stands in for it) makes a write durable under `config` (seed 000 Table 2, WRITE column).
/// It does not under DMP with DDIO on: the RNIC cannot write back the CPU cache the data
/// landed in, and the cache is outside the persistence domain.
pub fn write_flush_is_correct(config: &ServerConfig) -> bool {
    !(config.domain == PersistenceDomain::Dmp && config.ddio)
}

/// The bytes of log record `index` (never all zero, different for every index and seed).
pub fn record(seed: u64, index: u64) -> [u8; RECORD_BYTES as usize] {
    let mut out = [0u8; RECORD_BYTES as usize];
    out[..8].copy_from_slice(&(index + 1).to_le_bytes());
    let mut x = seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for chunk in out[8..].chunks_mut(8) {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
    out
}

/// Runs the demo scenario. Verb failures here would be bugs in the model or the scenario,
/// so they panic with a message rather than being returned.
pub fn run_demo(opts: &DemoOptions) -> DemoReport {
    let record_trace = opts.record_trace || opts.chrome_trace;
    let sim = Sim::new(opts.seed, opts.profile.clone());
    sim.record_trace(record_trace);
    let client = sim.add_node("client", opts.config);
    let server = sim.add_node("server", opts.config);

    // Server: the log is a PM region the client may write, read and flush.
    let spd = server.alloc_pd().expect("server PD");
    let log_len = opts.appends.max(1) * RECORD_BYTES;
    let base = server.alloc(Space::Pm, log_len, 4096);
    let rights = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::FLUSH_PERSISTENT;
    let mr = server
        .reg_mr(spd, Space::Pm, base, log_len, rights)
        .expect("server registers the PM log");
    let scq = server.create_cq(16).expect("server CQ");
    let sqp = server
        .create_qp(spd, scq, scq, QpAttr::default())
        .expect("server QP");

    // Client: one QP, and an 8-byte scratch buffer for the READ that stands in for FLUSH on
    // NICs without it.
    let cpd = client.alloc_pd().expect("client PD");
    let ccq = client.create_cq(16).expect("client CQ");
    let cqp = client
        .create_qp(cpd, ccq, ccq, QpAttr::default())
        .expect("client QP");
    let scratch_addr = client.alloc(Space::Dram, 64, 64);
    let scratch_mr = client
        .reg_mr(cpd, Space::Dram, scratch_addr, 64, Access::LOCAL_WRITE)
        .expect("client scratch MR");
    let scratch = Sge {
        addr: scratch_addr,
        len: 8,
        lkey: scratch_mr.lkey,
    };
    sim.connect((&client, cqp), (&server, sqp))
        .expect("connect client and server");

    let flush_method = FlushMethod::for_caps(opts.config.caps);
    let (n, seed, server_id) = (opts.appends, opts.seed, server.id());
    let (c, world) = (client.clone(), sim.clone());
    let end = sim
        .block_on(Instant::NEVER, async move {
            let mut lat = Vec::with_capacity(n as usize);
            for i in 0..n {
                let remote = Remote {
                    addr: mr.addr + i * RECORD_BYTES,
                    rkey: mr.rkey,
                };
                let t0 = c.now();
                let data = Payload::inline(record(seed, i).to_vec());
                let write = SendWr::new(2 * i, Opcode::Write, data, Some(remote)).signaled(false);
                c.post_send(cqp, write).expect("post WRITE");
                let placement = FlushPlacement::Persistence;
                let flush =
                    flush_method.work_request(2 * i + 1, placement, remote, RECORD_BYTES, scratch);
                c.post_send(cqp, flush).expect("post FLUSH");
                let wc = next_completion(&c, ccq).await;
                assert_eq!(
                    wc.status,
                    WcStatus::Success,
                    "append {i}: FLUSH completion {wc:?}"
                );
                assert_eq!(
                    wc.wr_id,
                    2 * i + 1,
                    "append {i}: unexpected completion {wc:?}"
                );
                let t1 = c.now();
                if record_trace {
                    c.trace_span("log", &format!("append {i}"), t0, t1);
                }
                lat.push((t1 - t0).as_nanos());
            }
            // The workload ends with the last acknowledgement: take the run's figures and
            // the image a power failure of the server would leave at this very instant
            // (the world may process further, unrelated events, e.g. an idle ACK timer,
            // before `block_on` returns).
            let image = world.with_rnic(server_id, |r, now| r.crash_image(now));
            let lost: Vec<u64> = (0..n)
                .filter(|&i| {
                    let got = image.read_vec(mr.addr + i * RECORD_BYTES, RECORD_BYTES as usize);
                    got != record(seed, i)
                })
                .collect();
            let snapshot = (world.now(), world.events_processed(), world.fingerprint());
            (lat, lost, snapshot)
        })
        .expect("the client finishes every append");
    let (latencies_ns, lost, (at, events, fingerprint)) = end;
    let crash = CrashCheck {
        at,
        acknowledged: n,
        survived: n - lost.len() as u64,
        lost,
        method_is_correct: write_flush_is_correct(&opts.config),
    };

    DemoReport {
        config: opts.config,
        profile: opts.profile.name.clone(),
        seed: opts.seed,
        appends: n,
        flush_method,
        latency: LatencyStats::of(&latencies_ns),
        latencies_ns,
        sim_time: at,
        events,
        fingerprint,
        trace: record_trace.then(|| sim.with_trace(|t| t.summary())),
        chrome_trace: opts.chrome_trace.then(|| sim.chrome_trace()),
        crash,
    }
}

impl DemoReport {
    /// The warning printed when WRITE + FLUSH is not a correct method under the config.
    pub fn unsafe_warning(&self) -> Option<String> {
        if self.crash.method_is_correct {
            return None;
        }
        Some(format!(
            "WARNING: under {} RDMA WRITE + RDMA FLUSH is NOT a correct persistence method \
             (seed 000 Table 2): with DDIO on, inbound writes land in the last-level cache, \
             which is outside the DMP persistence domain, and an RDMA FLUSH cannot write CPU \
             caches back. Table 2 uses WRITE + SEND with a responder-side flush instead.",
            self.config.name()
        ))
    }
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = crate::micros;
        let flush = match self.flush_method {
            FlushMethod::Native => "RDMA FLUSH (persistence placement)",
            FlushMethod::ReadAfterWrite => "RDMA READ standing in for FLUSH (the NIC has no FLUSH)",
        };
        writeln!(
            f,
            "remora demo: {} singleton log appends, each an RDMA WRITE of a {RECORD_BYTES}-byte \
             record followed by {flush}, waiting for its completion",
            self.appends
        )?;
        if let Some(w) = self.unsafe_warning() {
            writeln!(f, "\n{w}\n")?;
        }
        writeln!(f, "  config            {}", self.config.name())?;
        writeln!(f, "  profile           {}", self.profile)?;
        writeln!(f, "  seed              {}", self.seed)?;
        writeln!(f, "  appends           {}", self.appends)?;
        let l = &self.latency;
        writeln!(
            f,
            "  latency (µs)      mean {}  p50 {}  p99 {}  max {}",
            us(l.mean_ns),
            us(l.p50_ns),
            us(l.p99_ns),
            us(l.max_ns)
        )?;
        writeln!(f, "  simulated time    {} µs", us(self.sim_time.as_nanos()))?;
        writeln!(f, "  events processed  {}", self.events)?;
        writeln!(f, "  fingerprint       {:#018x}", self.fingerprint)?;
        match &self.trace {
            Some(t) if !t.by_name.is_empty() => {
                let counts: Vec<String> =
                    t.by_name.iter().map(|(k, v)| format!("{k} {v}")).collect();
                writeln!(f, "  trace events      {}", counts.join(", "))?;
            }
            Some(_) => writeln!(f, "  trace events      none recorded")?,
            None => writeln!(f, "  trace events      timeline not recorded")?,
        }
        let c = &self.crash;
        if c.all_survive() {
            writeln!(
                f,
                "crash check at {} µs: all {} acknowledged appends survive a power failure now",
                us(c.at.as_nanos()),
                c.acknowledged
            )?;
            if !c.method_is_correct {
                writeln!(
                    f,
                    "  (by luck of the cache's eviction timing, not by guarantee: see the warning above)"
                )?;
            }
        } else {
            let first: Vec<String> = c.lost.iter().take(8).map(|i| format!("#{i}")).collect();
            let more = if c.lost.len() > 8 { ", ..." } else { "" };
            writeln!(
                f,
                "crash check at {} µs: a power failure now would lose {} of {} acknowledged \
                 appends ({}{more}); {} survive",
                us(c.at.as_nanos()),
                c.lost.len(),
                c.acknowledged,
                first.join(", "),
                c.survived
            )?;
            if c.is_violation() {
                writeln!(
                    f,
                    "  BUG: WRITE + FLUSH is correct under {}, so no acknowledged append may be lost",
                    self.config.name()
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<u64> = (1..=100).collect();
        let l = LatencyStats::of(&s);
        assert_eq!(
            (l.p50_ns, l.p99_ns, l.min_ns, l.max_ns, l.mean_ns),
            (50, 99, 1, 100, 50)
        );
        assert_eq!(LatencyStats::of(&[7]).p99_ns, 7);
        assert_eq!(LatencyStats::of(&[]), LatencyStats::default());
    }

    #[test]
    fn records_differ_and_are_never_zero() {
        assert_ne!(record(1, 0), record(1, 1));
        assert_ne!(record(1, 0), record(2, 0));
        assert!(record(0, 0).iter().any(|&b| b != 0));
    }

    #[test]
    fn only_dmp_with_ddio_makes_write_flush_incorrect() {
        for c in ServerConfig::table1() {
            let expect = !(c.domain == PersistenceDomain::Dmp && c.ddio);
            assert_eq!(write_flush_is_correct(&c), expect, "{c}");
        }
    }
}
