//! The latency phase: the raw TCP ping-pong (the floor), the same through the soft RNIC's
//! executor (client only, then both sides), and RemoteLog appends in every scenario (seed
//! 000 §4: 12 server configurations × 3 primitives × singleton and compound; or only the
//! latency table's nine), interleaved round by round between the same processes.

use super::peers::{start_server, Proc, EXEC_LEAD};
use super::{per_msg, wall, CpuMark};
use remora::{Scenario, Shape, Update};
use remora_model::profile::LatencyProfile;
use remora_remotelog::log::{LogClient, RECORDS_OFF};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

/// Samples each series takes in one round of the latency phase. Every series (the raw
/// ping-pong, the same through the executor, each scenario) takes this many in turn, round
/// after round: the VM's state moves the raw round trip between 12 and 40 µs for seconds at
/// a time, and a series measured after another would see a different machine.
pub(super) const ROUND: u64 = 100;

/// The latency table's servers: one configuration per family of one-round-trip methods
/// (seed 000 Table 2), whose three singleton scenarios run three different methods. Every
/// other scenario is measured too, for the model check.
pub(super) const LATENCY_CONFIGS: [&str; 3] = [
    "WSP+noDDIO+PM-RQWRB",
    "DMP+noDDIO+PM-RQWRB",
    "DMP+DDIO+DRAM-RQWRB",
];

/// Which RemoteLog scenarios the latency phase measures (and the model check covers).
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenarios {
    /// All 72 (seed 000 §4): the model check issue 5 asks for.
    All,
    /// Only the latency table's nine one-round-trip methods: a shorter run, for latency
    /// work (the model check then covers those nine).
    Latency,
}

impl Scenarios {
    /// The scenarios, in [`Scenario::all`] order.
    pub(super) fn list(self) -> Vec<Scenario> {
        let mut v = Scenario::all();
        if self == Scenarios::Latency {
            v.retain(in_latency_table);
        }
        v
    }

    /// The name `--scenarios` takes (clap's, so the two cannot drift apart).
    pub fn name(self) -> String {
        super::flag_value(&self)
    }
}

/// Connections each server of the latency phase takes at once: one per scenario of its
/// configuration (3 primitives × 2 updates), and room for two more.
const SLOTS_PER_SERVER: u64 = 8;

/// One latency series gathered over the rounds: round-trip times in ns and each side's
/// CPU time over them.
#[derive(Default)]
pub(super) struct Series {
    pub(super) ns: Vec<u64>,
    cpu_self: u64,
    cpu_peer: u64,
}

impl Series {
    /// Adds both sides' CPU since `mark` (taken before this series' samples of a round).
    fn add_cpu(&mut self, mark: &CpuMark) {
        let (t, p) = mark.since();
        self.cpu_self += t;
        self.cpu_peer += p;
    }

    /// CPU µs per sample of (this thread, the peer process).
    pub(super) fn cpu_us(&self) -> (f64, f64) {
        let k = self.ns.len() as u64;
        (
            per_msg(self.cpu_self, k) / 1e3,
            per_msg(self.cpu_peer, k) / 1e3,
        )
    }
}

/// A RemoteLog client of one scenario on its configuration's server, with what keeps its
/// node alive and its series.
struct ScenarioRun {
    scenario: Scenario,
    method: String,
    server_pid: u32,
    log: LogClient<remora_soft::runtime::RtNode>,
    series: Series,
    _keep: Box<dyn std::any::Any>,
}

/// One scenario's measured series, and the method the library ran in it.
pub(super) struct ScenarioRow {
    pub(super) scenario: Scenario,
    pub(super) method: String,
    pub(super) series: Series,
}

impl ScenarioRow {
    /// Whether the latency table shows this row.
    pub(super) fn in_latency_table(&self) -> bool {
        in_latency_table(&self.scenario)
    }
}

/// Whether the latency table shows `scenario`: a singleton append against one of
/// [`LATENCY_CONFIGS`] (the nine one-round-trip methods).
fn in_latency_table(scenario: &Scenario) -> bool {
    scenario.update == Update::Singleton
        && LATENCY_CONFIGS.contains(&scenario.config.name().as_str())
}

/// `k` round trips of `msg` over a socket of the soft RNIC's executor, each one's time
/// into `series`.
async fn exec_ping_pong(
    sock: &mut remora_exec::net::TcpStream,
    k: u64,
    msg: &[u8],
    back: &mut [u8],
    series: &mut Series,
) -> Result<(), String> {
    for _ in 0..k {
        let t0 = wall();
        sock.write_all(msg).await.map_err(|e| e.to_string())?;
        sock.read_exact(back).await.map_err(|e| e.to_string())?;
        series.ns.push(t0.elapsed().as_nanos() as u64);
    }
    Ok(())
}

/// The latency phase's series: raw, executor client, executor on both sides, and each
/// scenario's, in [`Scenario::all`]'s order; and how the benchmark's executor waited meanwhile.
pub(super) type LatencyRuns = (
    Series,
    Series,
    Series,
    Vec<ScenarioRow>,
    remora_exec::WaitStats,
);

/// Bytes of PM each connection of a latency-phase server updates: a log of `n` records.
fn region_bytes(n: u64) -> u64 {
    (RECORDS_OFF + n * 64).next_multiple_of(64 << 10)
}

/// The latency phase, side by side: an echo process and one `remora serve` per server
/// configuration of `scenarios` run together; in every round of [`ROUND`] samples the raw
/// ping-pong, the same through the executor (client only, then both sides), and each
/// scenario's appends take their turn.
pub(super) fn latency_side_by_side(
    exe: &Path,
    n: u64,
    pool_dir: &Path,
    scenarios: Scenarios,
) -> Result<LatencyRuns, String> {
    let scenarios = scenarios.list();
    let echo = Proc::start(exe, &["bench", "echo"])?;
    let region = region_bytes(n);
    // A slot is the region, the receive ring and its watermark, page-aligned: a MiB more
    // than the region holds them.
    let sizes = [
        "--region-bytes".to_string(),
        region.to_string(),
        "--pool-bytes".to_string(),
        (SLOTS_PER_SERVER * (region + (1 << 20))).to_string(),
    ];
    let mut servers = Vec::new();
    let mut configs: Vec<remora_model::ServerConfig> = Vec::new();
    for s in &scenarios {
        if !configs.contains(&s.config) {
            configs.push(s.config);
        }
    }
    for (ci, config) in configs.into_iter().enumerate() {
        let pool = pool_dir.join(format!("{ci}.pm"));
        let server = start_server(exe, &pool, &config.name(), &sizes)?;
        servers.push((config, server));
    }
    let targets: Vec<(remora_model::ServerConfig, String, u32)> = servers
        .iter()
        .map(|(c, s)| (*c, s.addr().to_string(), s.pid()))
        .collect();
    let (echo_addr, echo_pid) = (echo.addr().to_string(), echo.pid());
    // The clients run as tasks of the nodes' executor, as an application would.
    let measure = async move {
        let mut raw_sock = TcpStream::connect(&echo_addr).map_err(|e| e.to_string())?;
        raw_sock.set_nodelay(true).map_err(|e| e.to_string())?;
        // The same ping-pong through the soft RNIC's I/O path without the model (a task
        // of its executor, which waits in a blocking receive or in epoll): the executor's
        // share of the overhead, apart from the model's.
        let mut exec_sock = remora_exec::net::TcpStream::connect(echo_addr.as_str())
            .await
            .map_err(|e| e.to_string())?;
        exec_sock.set_nodelay(true).map_err(|e| e.to_string())?;
        // And with the echo on the executor too: both sides' I/O paths are the soft RNIC's.
        let mut both_sock = remora_exec::net::TcpStream::connect(echo_addr.as_str())
            .await
            .map_err(|e| e.to_string())?;
        both_sock.set_nodelay(true).map_err(|e| e.to_string())?;
        both_sock
            .write_all(&[EXEC_LEAD])
            .await
            .map_err(|e| e.to_string())?;
        let mut runs = Vec::new();
        for scenario in scenarios {
            let (_, addr, server_pid) = targets
                .iter()
                .find(|t| t.0 == scenario.config)
                .ok_or_else(|| format!("no server for {}", scenario.name()))?;
            let (node, conn, mut client) =
                remora_soft::client::connect(addr, &LatencyProfile::default_profile())
                    .await
                    .map_err(|e| e.to_string())?;
            let hello = client
                .connect(scenario.primitive, Shape::default())
                .await
                .map_err(|e| e.to_string())?;
            let method = client
                .method(scenario.update)
                .map(|m| m.name.clone())
                .unwrap_or_default();
            let shape = crate::real::shape_for(hello.region_len);
            if shape.capacity < n {
                return Err(format!(
                    "{}: the server's region holds {} records, not {n}",
                    scenario.name(),
                    shape.capacity
                ));
            }
            runs.push(ScenarioRun {
                scenario,
                method,
                server_pid: *server_pid,
                log: LogClient::new(client, shape, scenario.update),
                series: Series::default(),
                _keep: Box::new((node, conn)),
            });
        }
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|&i| !in_latency_table(&runs[i].scenario));
        let msg = [0x11u8; 64 + 32];
        let mut back = [0u8; 96];
        let (mut raw, mut via_exec, mut both_exec) =
            (Series::default(), Series::default(), Series::default());
        let mut done = 0;
        let waits_before = remora_exec::wait_stats();
        while done < n {
            let k = ROUND.min(n - done);
            // The raw ping-pong blocks this thread; nothing of the soft RNIC is in flight.
            let mark = CpuMark::now(echo_pid);
            for _ in 0..k {
                let t0 = wall();
                raw_sock.write_all(&msg).map_err(|e| e.to_string())?;
                raw_sock.read_exact(&mut back).map_err(|e| e.to_string())?;
                raw.ns.push(t0.elapsed().as_nanos() as u64);
            }
            raw.add_cpu(&mark);
            for (sock, series) in [
                (&mut exec_sock, &mut via_exec),
                (&mut both_sock, &mut both_exec),
            ] {
                let mark = CpuMark::now(echo_pid);
                exec_ping_pong(sock, k, &msg, &mut back, series).await?;
                series.add_cpu(&mark);
            }
            // The latency table's scenarios first, right after the ping-pongs they are set
            // against, as when they were the only ones; the model check's others after them.
            for &i in &order {
                let r = &mut runs[i];
                // Each side's CPU over the appends: where a method's time goes besides the
                // network (the server's share includes its responder).
                let mark = CpuMark::now(r.server_pid);
                for _ in 0..k {
                    let t0 = wall();
                    r.log.append().await.map_err(|e| e.to_string())?;
                    r.series.ns.push(t0.elapsed().as_nanos() as u64);
                }
                r.series.add_cpu(&mark);
            }
            done += k;
        }
        let rows = runs
            .into_iter()
            .map(|r| ScenarioRow {
                scenario: r.scenario,
                method: r.method,
                series: r.series,
            })
            .collect();
        let waits = remora_exec::wait_stats().since(waits_before);
        Ok::<_, String>((raw, via_exec, both_exec, rows, waits))
    };
    // The runtime's tasks and sockets end with it, before the servers they talk to.
    let out = crate::killloop::run_client(measure);
    drop(servers);
    drop(echo);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latency_selection_is_the_nine_one_round_trip_methods() {
        let all = Scenarios::All.list();
        assert_eq!(all.len(), 72);
        let nine = Scenarios::Latency.list();
        assert_eq!(nine.len(), 9);
        // Three servers, each with its three primitives, singleton appends, in the order
        // of all 72.
        for config in LATENCY_CONFIGS {
            assert_eq!(nine.iter().filter(|s| s.config.name() == config).count(), 3);
        }
        assert!(nine.iter().all(|s| s.update == Update::Singleton));
        let positions: Vec<usize> = nine
            .iter()
            .map(|s| all.iter().position(|a| a == s).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Scenarios::Latency.name(), "latency");
    }
}
