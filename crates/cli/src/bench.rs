//! How fast the simulator runs: a client posts batches of unsignaled 64-byte RDMA WRITEs,
//! each batch closed by one signaled RDMA FLUSH it waits for, and the wall clock measures
//! how many simulated RDMA operations per second the simulator gets through.

use crate::demo::DEFAULT_CONFIG;
use remora_model::rnic::MAX_QUEUE_DEPTH;
use remora_model::{LatencyProfile, ServerConfig};
use remora_sim::Sim;
use remora_verbs::*;
use std::fmt;

/// Bytes per WRITE.
pub const WRITE_BYTES: u64 = 64;
/// The WRITEs cycle through a PM ring of this many bytes.
pub const RING_BYTES: u64 = 1 << 20;

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// WRITEs in total.
    pub ops: u64,
    /// WRITEs per FLUSH.
    pub batch: u64,
    /// Simulation seed.
    pub seed: u64,
    /// Configuration of both nodes.
    pub config: ServerConfig,
    /// Latency profile.
    pub profile: LatencyProfile,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            ops: 2_000_000,
            batch: 64,
            seed: 1,
            config: DEFAULT_CONFIG.parse().expect("default config parses"),
            profile: LatencyProfile::default_profile(),
        }
    }
}

/// The outcome of [`run_sim_bench`].
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// The options run.
    pub config: ServerConfig,
    /// Profile name.
    pub profile: String,
    /// Seed.
    pub seed: u64,
    /// WRITEs per FLUSH.
    pub batch: u64,
    /// WRITEs simulated.
    pub writes: u64,
    /// FLUSHes simulated.
    pub flushes: u64,
    /// Wall-clock time of the run (setup excluded).
    pub wall: std::time::Duration,
    /// Virtual time the run covered.
    pub sim_time: Instant,
    /// Simulator events processed.
    pub events: u64,
    /// The run's fingerprint.
    pub fingerprint: u64,
    /// True when built with debug assertions (the figures then mean little).
    pub debug_build: bool,
}

impl BenchReport {
    /// Simulated RDMA operations (WRITEs + FLUSHes).
    pub fn operations(&self) -> u64 {
        self.writes + self.flushes
    }
    /// Simulated RDMA operations per wall-clock second.
    pub fn ops_per_sec(&self) -> f64 {
        self.operations() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    /// Simulator events per wall-clock second.
    pub fn events_per_sec(&self) -> f64 {
        self.events as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Checks the options; the message says what is wrong.
pub fn validate(opts: &BenchOptions) -> Result<(), String> {
    let max_batch = MAX_QUEUE_DEPTH as u64 - 1;
    if opts.batch == 0 || opts.batch > max_batch {
        return Err(format!("--batch must be between 1 and {max_batch} (the send queue holds the batch and its FLUSH)"));
    }
    if opts.ops == 0 {
        return Err("--ops must be positive".into());
    }
    if !opts.config.caps.native_flush {
        return Err(format!(
            "{}: the benchmark needs a NIC with native RDMA FLUSH",
            opts.config.name()
        ));
    }
    Ok(())
}

/// Runs the benchmark.
#[allow(clippy::disallowed_methods)] // wall clock measures the simulator itself, not simulated time
pub fn run_sim_bench(opts: &BenchOptions) -> Result<BenchReport, String> {
    validate(opts)?;
    let sim = Sim::new(opts.seed, opts.profile.clone());
    let client = sim.add_node("client", opts.config);
    let server = sim.add_node("server", opts.config);

    let spd = server.alloc_pd().map_err(|e| e.to_string())?;
    let base = server.alloc(Space::Pm, RING_BYTES, 4096);
    let rights = Access::REMOTE_WRITE | Access::FLUSH_PERSISTENT;
    let mr = server
        .reg_mr(spd, Space::Pm, base, RING_BYTES, rights)
        .map_err(|e| e.to_string())?;
    let scq = server.create_cq(16).map_err(|e| e.to_string())?;
    let sqp = server
        .create_qp(spd, scq, scq, QpAttr::default())
        .map_err(|e| e.to_string())?;

    let sq_depth = (opts.batch as usize + 1).max(QpAttr::default().sq_depth);
    let attr = QpAttr {
        sq_depth,
        ..QpAttr::default()
    };
    let cpd = client.alloc_pd().map_err(|e| e.to_string())?;
    let ccq = client.create_cq(16).map_err(|e| e.to_string())?;
    let cqp = client
        .create_qp(cpd, ccq, ccq, attr)
        .map_err(|e| e.to_string())?;
    sim.connect((&client, cqp), (&server, sqp))
        .map_err(|e| e.to_string())?;

    let (ops, batch) = (opts.ops, opts.batch);
    let (c, world) = (client.clone(), sim.clone());
    let start = std::time::Instant::now();
    let done = sim.block_on(Instant::NEVER, async move {
        let ring_slots = RING_BYTES / WRITE_BYTES;
        let (mut written, mut flushes, mut wr_id) = (0u64, 0u64, 0u64);
        while written < ops {
            let n = batch.min(ops - written);
            for _ in 0..n {
                let addr = mr.addr + (written % ring_slots) * WRITE_BYTES;
                let remote = Some(Remote {
                    addr,
                    rkey: mr.rkey,
                });
                let data = Payload::inline([(written & 0xff) as u8; WRITE_BYTES as usize]);
                c.post_send(
                    cqp,
                    SendWr::new(wr_id, Opcode::Write, data, remote).signaled(false),
                )
                .map_err(|e| format!("post WRITE: {e}"))?;
                written += 1;
                wr_id += 1;
            }
            let flush = Opcode::Flush {
                placement: FlushPlacement::Persistence,
                len: RING_BYTES,
            };
            let remote = Some(Remote {
                addr: mr.addr,
                rkey: mr.rkey,
            });
            c.post_send(cqp, SendWr::new(wr_id, flush, Payload::None, remote))
                .map_err(|e| format!("post FLUSH: {e}"))?;
            wr_id += 1;
            flushes += 1;
            let wc = next_completion(&c, ccq).await;
            if wc.status != WcStatus::Success {
                return Err(format!("FLUSH completed with {}", wc.status));
            }
        }
        // The workload ends here; `block_on` may process one more, unrelated event.
        Ok((
            written,
            flushes,
            world.now(),
            world.events_processed(),
            world.fingerprint(),
        ))
    });
    let wall = start.elapsed();
    let (writes, flushes, sim_time, events, fingerprint) =
        done.ok_or("the simulation stopped before the benchmark finished")??;
    Ok(BenchReport {
        config: opts.config,
        profile: opts.profile.name.clone(),
        seed: opts.seed,
        batch: opts.batch,
        writes,
        flushes,
        wall,
        sim_time,
        events,
        fingerprint,
        debug_build: cfg!(debug_assertions),
    })
}

/// `1234567.0` → `1.23 M`.
fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "remora bench sim: {} unsignaled {WRITE_BYTES}-byte RDMA WRITEs in batches of {}, \
             each batch closed by a signaled RDMA FLUSH the client waits for",
            self.writes, self.batch
        )?;
        if self.debug_build {
            writeln!(
                f,
                "\nNOTE: debug build (debug assertions on): these figures are not meaningful. \
                 Run `cargo run --release -p remora-cli -- bench sim`.\n"
            )?;
        }
        writeln!(f, "  config            {}", self.config.name())?;
        writeln!(f, "  profile           {}", self.profile)?;
        writeln!(f, "  seed              {}", self.seed)?;
        writeln!(
            f,
            "  RDMA operations   {} ({} WRITEs + {} FLUSHes)",
            self.operations(),
            self.writes,
            self.flushes
        )?;
        writeln!(f, "  simulated time    {}", self.sim_time)?;
        writeln!(f, "  events processed  {}", self.events)?;
        writeln!(f, "  fingerprint       {:#018x}", self.fingerprint)?;
        writeln!(f, "  wall-clock time   {:.3} s", self.wall.as_secs_f64())?;
        writeln!(
            f,
            "simulator speed: {} simulated RDMA ops per wall-clock second ({} events/s)",
            si(self.ops_per_sec()),
            si(self.events_per_sec())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_counts_writes_and_flushes() {
        let opts = BenchOptions {
            ops: 1_000,
            batch: 64,
            ..BenchOptions::default()
        };
        let r = run_sim_bench(&opts).unwrap();
        assert_eq!((r.writes, r.flushes), (1_000, 16));
        assert_eq!(r.operations(), 1_016);
        assert!(r.events > 0 && r.sim_time > Instant::ZERO);
        let again = run_sim_bench(&opts).unwrap();
        assert_eq!(again.fingerprint, r.fingerprint);
        assert!(r
            .to_string()
            .contains("simulated RDMA ops per wall-clock second"));
    }

    #[test]
    fn bad_options_are_refused() {
        let zero = BenchOptions {
            batch: 0,
            ..BenchOptions::default()
        };
        assert!(run_sim_bench(&zero).unwrap_err().contains("--batch"));
        let huge = BenchOptions {
            batch: 1 << 20,
            ..BenchOptions::default()
        };
        assert!(validate(&huge).is_err());
        let legacy = BenchOptions {
            config: "DMP+noDDIO+PM@ib,no-flush".parse().unwrap(),
            ..BenchOptions::default()
        };
        assert!(validate(&legacy).unwrap_err().contains("FLUSH"));
    }
}
