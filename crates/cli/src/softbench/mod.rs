//! `remora bench soft`: the soft RNIC next to the floor it stands on, measured side by side
//! in one run between the same two processes over loopback:
//!
//! - raw TCP ping-pong of a 64-byte record (the floor) versus RemoteLog singleton appends
//!   per one-round-trip method (p50, p99, and the ratio of p50s), with each side's CPU time
//!   per round trip;
//! - raw TCP streaming versus pipelined 64-byte RDMA WRITEs, a FLUSH per batch and a few
//!   batches in flight (throughput ratio, and each side's CPU per message). Both are timed
//!   until the receiver has taken everything in: the raw stream ends with an
//!   acknowledgement once the echo process has read every byte, as the last FLUSH's
//!   response ends the RDMA stream; the raw messages are as long as a 64-byte WRITE's
//!   packet ([`WRITE64_WIRE_BYTES`]) and, at equal bytes, as a WRITE inside the write
//!   train the stream travels in ([`WRITE64_TRAIN_BYTES`]); between them and the soft
//!   RNIC, the soft RNIC's own frames without its model (its encoder and decoder, each
//!   WRITE checked and copied into memory, no queue pairs and no memory hierarchy), so
//!   the report shows what the framing costs and what the model costs; the series
//!   alternate, so the shared machine's load falls on all of them;
//! - a model check: a `loopback` profile whose NIC round trip is the measured ping-pong's
//!   mean, run on the simulator, predicted mean versus measured mean in every RemoteLog
//!   scenario measured (all 72 by default, each in the latency phase's rounds).
//!
//! The parts, one file each besides this one (the entry points, the report, the CPU-time
//! helpers):
//!
//! - `peers`: the echo process, the child processes and servers, and their CPU placement;
//! - `latency`: the interleaved ping-pong and per-scenario append series;
//! - `model`: the model check and what its misses are made of;
//! - `stream`: the streaming comparison (raw TCP, the soft RNIC's frames, the soft RNIC);
//! - `page`: rewriting one placement's section of the results page.

mod latency;
mod model;
mod page;
mod peers;
mod stream;

pub use latency::Scenarios;
pub use page::{check_results, replace_section, write_results};
pub use peers::{echo_server, Placement};
pub use stream::{Stream, WRITE64_TRAIN_BYTES, WRITE64_WIRE_BYTES};

use latency::{latency_side_by_side, ROUND};
use peers::{pin_to, PEER_CPU};
use std::fmt::Write as _;
use std::path::Path;
use stream::{stream_report, stream_side_by_side};

#[allow(clippy::disallowed_methods)] // wall-clock benchmark
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

/// The name a flag's value `v` takes on the command line (clap's own).
fn flag_value(v: &impl clap::ValueEnum) -> String {
    v.to_possible_value()
        .expect("no value is skipped")
        .get_name()
        .to_string()
}

/// The index, among `len` sorted samples, of their nearest-rank `pct`th percentile: the
/// smallest sample with at least `pct`% of them at or below it (`hdrhistogram`'s
/// `value_at_quantile`, which the simulator's percentiles come from). 0 when `len` is 0.
fn rank(len: usize, pct: usize) -> usize {
    (len * pct).div_ceil(100).max(1) - 1
}

/// Mean, p50 and p99 in µs (nearest rank), and how many samples took a millisecond or more
/// (on a shared machine: the process was preempted for a scheduler time slice; they weigh
/// on the mean).
fn quantiles(mut v: Vec<u64>) -> (f64, f64, f64, usize) {
    v.sort_unstable();
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
    (
        mean / 1e3,
        v[rank(v.len(), 50)] as f64 / 1e3,
        v[rank(v.len(), 99)] as f64 / 1e3,
        v.iter().filter(|&&x| x >= 1_000_000).count(),
    )
}

/// The CPU time so far of the calling thread and of a peer process, to measure both
/// sides' CPU over a phase.
struct CpuMark {
    thread: u64,
    peer: u64,
    pid: u32,
}

impl CpuMark {
    fn now(pid: u32) -> Self {
        CpuMark {
            thread: thread_cpu_ns(),
            peer: process_cpu_ns(pid),
            pid,
        }
    }

    /// CPU ns of (this thread, the peer) since the mark.
    fn since(&self) -> (u64, u64) {
        (
            thread_cpu_ns().saturating_sub(self.thread),
            process_cpu_ns(self.pid).saturating_sub(self.peer),
        )
    }
}

/// On-CPU time of the calling thread in ns (Linux `schedstat`; 0 elsewhere).
fn thread_cpu_ns() -> u64 {
    schedstat("/proc/thread-self/schedstat")
}

/// On-CPU time of every live thread of process `pid` in ns (0 where unknown).
fn process_cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .map(|t| schedstat(&t.path().join("schedstat").to_string_lossy()))
        .sum()
}

fn schedstat(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn per_msg(ns: u64, msgs: u64) -> f64 {
    if ns == 0 {
        f64::NAN
    } else {
        ns as f64 / msgs as f64
    }
}

/// How this binary was built, for the report: `scripts/pgo-build.sh` sets `REMORA_BUILD`
/// (a profile-guided build lays the hot path out differently, which moves the figures).
pub fn build() -> &'static str {
    option_env!("REMORA_BUILD").unwrap_or("plain release (cargo build --release)")
}

/// The idle state of this machine's CPUs, for the report: in a KVM guest whose vCPUs
/// halt when idle (`haltpoll.guest_halt_poll_ns=0`), waking the peer's vCPU for each packet
/// goes through the hypervisor, which on a busy host put the split placement's raw p50 at
/// 95–358 µs (the fifteenth to seventeenth sessions) against 16 µs with the guest polling
/// for 200 µs before it halts. The benchmark reads the setting; it never changes it.
fn cpu_idle() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let dir = "/sys/devices/system/cpu/cpuidle";
    describe_idle(
        read(&format!("{dir}/current_driver")).as_deref(),
        read(&format!("{dir}/current_governor"))
            .or_else(|| read(&format!("{dir}/current_governor_ro")))
            .as_deref(),
        read("/sys/module/haltpoll/parameters/guest_halt_poll_ns").as_deref(),
    )
}

/// The report's words for the idle state: the cpuidle driver (`none`: no driver
/// registered, so an idle vCPU simply halts and no governor or halt-polling setting
/// applies), the governor, and the guest's halt polling, which applies only under the
/// haltpoll governor (it is the longest a vCPU polls; the poll time adapts up to it).
fn describe_idle(driver: Option<&str>, governor: Option<&str>, poll: Option<&str>) -> String {
    match (driver, governor, poll) {
        (Some("none"), _, _) => "no cpuidle driver (current_driver none): an idle vCPU halts at once, without guest halt polling, whatever the governor and guest_halt_poll_ns say".to_string(),
        (_, Some("haltpoll"), Some(ns)) => format!("cpuidle governor haltpoll, guest halt polling up to {ns} ns (/sys/module/haltpoll/parameters/guest_halt_poll_ns)"),
        (_, Some(g), _) => format!("cpuidle governor {g}"),
        (_, None, _) => "not reported by this kernel".to_string(),
    }
}

/// Refuses a count of zero samples before anything is started: a series without samples
/// has no mean or percentile (and would leave the run's pool files behind), and a stream of
/// no messages has no rate.
fn check_counts(n: Option<u64>, stream_writes: u64) -> Result<(), String> {
    if n == Some(0) {
        return Err(
            "--n must be at least 1 (ping-pongs per series and appends per scenario)".into(),
        );
    }
    if stream_writes == 0 {
        return Err("--stream must be at least 1 (64-byte WRITEs streamed)".into());
    }
    Ok(())
}

/// Runs the benchmark; returns a Markdown report.
pub fn run(
    exe: &Path,
    n: u64,
    stream_writes: u64,
    pool_dir: &Path,
    placement: Placement,
    scenarios: Scenarios,
) -> Result<String, String> {
    check_counts(Some(n), stream_writes)?;
    let mut out =
        String::from("# Soft RNIC versus raw TCP (loopback, side by side in one run)\n\n");
    let pinned = placement.cpus().filter(|&(me, _)| pin_to(me));
    PEER_CPU.with(|c| c.set(pinned.map(|p| p.1)));
    let _ = writeln!(out, "Build: {}\n", build());
    let _ = writeln!(
        out,
        "Placement: {}\n",
        match pinned {
            Some((a, b)) if a != b => format!(
                "the benchmark's thread on CPU {a}, the echo process and the servers on CPU {b}"
            ),
            Some((a, _)) => format!("every process on CPU {a}"),
            None => "unpinned (wherever the scheduler puts them)".to_string(),
        }
    );
    let _ = writeln!(out, "CPU idle: {}\n", cpu_idle());
    let scratch = crate::killloop::Scratch::under(pool_dir, "remora-softbench")?;
    let pool_dir = &scratch.dir;
    // 1–2. The raw ping-pong (the floor), the same through the executor, and RemoteLog appends
    // in each scenario measured, interleaved round by round.
    let (raw, via_exec, both_exec, rows, waits) =
        latency_side_by_side(exe, n, pool_dir, scenarios)?;
    // Round trips of the executor in this process: its two ping-pongs and the appends.
    let round_trips = (via_exec.ns.len()
        + both_exec.ns.len()
        + rows.iter().map(|r| r.series.ns.len()).sum::<usize>()) as u64;
    let (raw_mean, raw_p50, raw_p99, raw_slow) = quantiles(raw.ns.clone());
    let raw_cpu = raw.cpu_us();
    let (exec_mean, exec_p50, exec_p99, exec_slow) = quantiles(via_exec.ns);
    let both_cpu = both_exec.cpu_us();
    let (both_mean, both_p50, both_p99, both_slow) = quantiles(both_exec.ns);
    let _ = writeln!(out, "Interleaved: {} rounds; in each, the raw ping-pong, the same through the soft RNIC's executor (client, then both sides) and each of the {} RemoteLog scenarios take {ROUND} samples in turn, so a change of the machine's state falls on all of them alike.\n", n.div_ceil(ROUND), rows.len());
    let _ = writeln!(out, "Raw TCP ping-pong, 96 bytes: mean {raw_mean:.1} µs, p50 {raw_p50:.1} µs, p99 {raw_p99:.1} µs, {raw_slow} of {} ≥ 1 ms; CPU per round trip (user + system) {:.2} µs client, {:.2} µs echo\n", raw.ns.len(), raw_cpu.0, raw_cpu.1);
    let _ = writeln!(out, "The same ping-pong as a task of the soft RNIC's executor (remora-exec: its I/O path, no model): mean {exec_mean:.1} µs, p50 {exec_p50:.1} µs ({:.2}x the raw p50), p99 {exec_p99:.1} µs, {exec_slow} of {n} ≥ 1 ms\n", exec_p50 / raw_p50);
    let _ = writeln!(out, "The same with the echo on the executor too (both sides' I/O paths are the soft RNIC's, no model): mean {both_mean:.1} µs, p50 {both_p50:.1} µs ({:.2}x the raw p50), p99 {both_p99:.1} µs, {both_slow} of {n} ≥ 1 ms; CPU per round trip {:.2} µs client, {:.2} µs echo\n", both_p50 / raw_p50, both_cpu.0, both_cpu.1);
    let _ = writeln!(out, "How this process's executor waited over the {round_trips} round trips of the executor's ping-pongs and the appends: {waits}\n");
    // 3. Streaming, raw and soft RNIC runs interleaved.
    let streams = stream_side_by_side(exe, stream_writes, pool_dir);
    drop(scratch);
    let streams = streams?;
    let _ = writeln!(out, "Client and server CPU: each process's CPU time (user + system) per append, to compare with the raw ping-pong's per round trip. The added microseconds (p50 − raw p50) are what the stack costs per round trip over the floor; the ratio also moves with the floor itself.\n");
    let _ = writeln!(
        out,
        "RemoteLog singleton appends, one-round-trip methods (the target's rows):\n"
    );
    let _ = writeln!(out, "| server | method | mean µs | p50 µs | p99 µs | ≥ 1 ms | p50 / raw p50 | p50 − raw p50 µs | client CPU µs | server CPU µs |\n|---|---|---|---|---|---|---|---|---|---|");
    for row in rows.iter().filter(|r| r.in_latency_table()) {
        let (mean, p50, p99, slow) = quantiles(row.series.ns.clone());
        let (client_cpu, server_cpu) = row.series.cpu_us();
        let _ = writeln!(out, "| {} | {} | {mean:.1} | {p50:.1} | {p99:.1} | {slow} | {:.2} | {:.1} | {client_cpu:.2} | {server_cpu:.2} |", row.scenario.config, row.method, p50 / raw_p50, p50 - raw_p50);
    }
    let _ = writeln!(out);
    // 4. Model check: the simulator with a loopback profile calibrated from the ping-pong.
    model::model_check(
        &mut out,
        &rows,
        &model::Calibration {
            raw_mean_us: raw_mean,
            io_mean_us: both_mean,
            io_cpu_us: both_cpu.0 + both_cpu.1,
        },
    )?;
    stream_report(&mut out, stream_writes, &streams);
    let _ = writeln!(out, "Targets (issue 5): one-round-trip methods within 1.3x of the raw p50; streaming at least 0.7x of raw TCP; the model check's ratio, measured / predicted, within ±25% (0.75–1.25) for every scenario.");
    Ok(out)
}

/// Only the streaming comparison (for profiling the streaming path).
pub fn run_stream_only(exe: &Path, writes: u64, pool_dir: &Path) -> Result<String, String> {
    check_counts(None, writes)?;
    let scratch = crate::killloop::Scratch::under(pool_dir, "remora-softbench")?;
    let r = stream_side_by_side(exe, writes, &scratch.dir);
    drop(scratch);
    let streams = r?;
    let mut out = format!("CPU idle: {}\n\n", cpu_idle());
    stream_report(&mut out, writes, &streams);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{describe_idle, quantiles};

    #[test]
    fn percentiles_are_nearest_rank() {
        // 1..=100 µs, unsorted: the p50 is the 50th smallest and the p99 the 99th (the
        // nearest-rank percentiles, as the simulator's histogram gives them), not the 51st
        // and the maximum.
        let v: Vec<u64> = (1..=100).rev().map(|k| k * 1000).collect();
        assert_eq!(quantiles(v), (50.5, 50.0, 99.0, 0));
        // The page's 5000 samples: the p99 is the 4950th smallest.
        let v: Vec<u64> = (1..=5000).map(|k| k * 1000).collect();
        let (_, p50, p99, _) = quantiles(v);
        assert_eq!((p50, p99), (2500.0, 4950.0));
        // One sample is every percentile.
        assert_eq!(quantiles(vec![7000]), (7.0, 7.0, 7.0, 0));
    }

    #[test]
    fn the_idle_line_says_when_no_driver_polls() {
        // The twenty-second session's VM: the haltpoll module's setting is there, but no
        // cpuidle driver registered, so it does nothing.
        let none = describe_idle(Some("none"), Some("menu"), Some("200000"));
        assert!(none.contains("no cpuidle driver") && none.contains("without guest halt polling"));
        let polling = describe_idle(Some("haltpoll"), Some("haltpoll"), Some("200000"));
        assert!(
            polling.contains("guest halt polling up to 200000 ns"),
            "{polling}"
        );
        assert_eq!(
            describe_idle(Some("acpi_idle"), Some("menu"), None),
            "cpuidle governor menu"
        );
        assert_eq!(
            describe_idle(None, None, None),
            "not reported by this kernel"
        );
    }
}
