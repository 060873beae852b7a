//! `remora bench soft`: the soft RNIC next to the floor it stands on, measured side by side
//! in one run between the same two processes over loopback:
//!
//! - raw TCP ping-pong of a 64-byte record (the floor) versus RemoteLog singleton appends
//!   per method (p50, p99, and the ratio of p50s), with each side's CPU time per round trip;
//! - raw TCP streaming versus pipelined 64-byte RDMA WRITEs, a FLUSH per batch and a few
//!   batches in flight (throughput ratio, and each side's CPU per message). Both are timed
//!   until the receiver has taken everything in: the raw stream ends with an
//!   acknowledgement once the echo process has read every byte, as the last FLUSH's
//!   response ends the RDMA stream; the raw messages are as long as a 64-byte WRITE's
//!   packet ([`WRITE64_WIRE_BYTES`]) and, at equal bytes, as a WRITE inside the write
//!   train the stream travels in ([`WRITE64_TRAIN_BYTES`]); raw and soft RNIC runs
//!   alternate, so the shared machine's load falls on both;
//! - a model check: a `loopback` profile whose NIC round trip is the measured ping-pong's
//!   mean, run on the simulator, predicted mean versus measured mean per method.

use remora::{Primitive, Shape, Update};
use remora_model::profile::LatencyProfile;
use remora_model::ServerConfig;
use remora_remotelog::log::{LogClient, LogShape, RECORDS_OFF};
use remora_verbs::Verbs as _;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

#[allow(clippy::disallowed_methods)] // wall-clock benchmark
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

/// Bytes on the wire of one 64-byte RDMA WRITE as a packet: the 32-byte packet header,
/// address, rkey, immediate, data length, and the data.
pub const WRITE64_WIRE_BYTES: usize = 32 + 8 + 4 + 4 + 4 + 64;

/// Bytes on the wire of one 64-byte RDMA WRITE inside a write train, as the stream sends
/// them: its entry (address, length, flags) and the data. The train's own 40 bytes are
/// shared by the batch's WRITEs and left out, which favours the raw stream.
pub const WRITE64_TRAIN_BYTES: usize = remora_model::wire::TRAIN_ENTRY + 64;

/// First byte of a raw streaming connection: then the stream's length (u64, little-endian),
/// the stream, and, once all of it was read, one byte back followed by the receiving
/// thread's CPU time in ns (u64, little-endian).
const STREAM_LEAD: u8 = 0xFE;

/// A raw TCP echo server (the other process of the ping-pong), until the peer closes.
/// A connection that starts with [`STREAM_LEAD`] is a stream to sink instead.
pub fn echo_server(listen: &str) -> Result<(), String> {
    let l = std::net::TcpListener::bind(listen).map_err(|e| e.to_string())?;
    println!(
        "listening on {}",
        l.local_addr().map_err(|e| e.to_string())?
    );
    std::io::stdout().flush().ok();
    for s in l.incoming() {
        let Ok(mut s) = s else { continue };
        let _ = s.set_nodelay(true);
        std::thread::spawn(move || {
            let mut b = [0u8; 65536];
            if s.peek(&mut b[..1]).is_ok_and(|n| n == 1) && b[0] == STREAM_LEAD {
                // Streaming: sink the announced bytes, then acknowledge with one byte.
                let mut head = [0u8; 9];
                if s.read_exact(&mut head).is_err() {
                    return;
                }
                let mut left = u64::from_le_bytes(head[1..].try_into().expect("8 bytes"));
                while left > 0 {
                    match s.read(&mut b[..(left.min(65536) as usize)]) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => left -= n as u64,
                    }
                }
                // The acknowledgement carries the thread's CPU time, for the report's
                // per-message CPU of each side.
                let mut ack = [1u8; 9];
                ack[1..].copy_from_slice(&thread_cpu_ns().to_le_bytes());
                let _ = s.write_all(&ack);
                return;
            }
            loop {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if s.write_all(&b[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    Ok(())
}

struct Proc(Child, String);
impl Proc {
    fn start(exe: &Path, args: &[&str]) -> Result<Proc, String> {
        let mut c = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut line = String::new();
        BufReader::new(c.stdout.take().expect("piped"))
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or("peer did not start")?
            .to_string();
        Ok(Proc(c, addr))
    }
}
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Streaming runs per side; the median is reported.
const STREAM_RUNS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Mean, p50 and p99 in µs, and how many samples took a millisecond or more (on a shared
/// machine: the process was preempted for a scheduler time slice; they weigh on the mean).
fn quantiles(mut v: Vec<u64>) -> (f64, f64, f64, usize) {
    v.sort_unstable();
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
    (
        mean / 1e3,
        v[v.len() / 2] as f64 / 1e3,
        v[v.len() * 99 / 100] as f64 / 1e3,
        v.iter().filter(|&&x| x >= 1_000_000).count(),
    )
}

/// Runs the benchmark; returns a Markdown report.
pub fn run(exe: &Path, n: u64, stream_writes: u64, pool_dir: &Path) -> Result<String, String> {
    let mut out =
        String::from("# Soft RNIC versus raw TCP (loopback, side by side in one run)\n\n");
    // 1. Raw ping-pong: the floor.
    let echo = Proc::start(exe, &["bench", "echo"])?;
    let mut s = TcpStream::connect(&echo.1).map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let msg = [0x11u8; 64 + 32];
    let mut back = [0u8; 96];
    let mut raw = Vec::with_capacity(n as usize);
    let cpu = CpuMark::now(echo.0.id());
    for _ in 0..n {
        let t0 = wall();
        s.write_all(&msg).map_err(|e| e.to_string())?;
        s.read_exact(&mut back).map_err(|e| e.to_string())?;
        raw.push(t0.elapsed().as_nanos() as u64);
    }
    let raw_cpu = cpu.per_msg_us(n);
    let (raw_mean, raw_p50, raw_p99, raw_slow) = quantiles(raw);
    // The same ping-pong through the soft RNIC's I/O path without the model: a task of a
    // LocalSet on a current-thread tokio runtime (epoll wake-ups), to tell the runtime's
    // share of the overhead from the model's.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let addr = echo.1.clone();
    let via_tokio = tokio::task::LocalSet::new()
        .block_on(&rt, async move {
            tokio::task::spawn_local(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut s = tokio::net::TcpStream::connect(&addr).await?;
                s.set_nodelay(true)?;
                let mut back = [0u8; 96];
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let t0 = wall();
                    s.write_all(&msg).await?;
                    s.read_exact(&mut back).await?;
                    v.push(t0.elapsed().as_nanos() as u64);
                }
                Ok::<_, std::io::Error>(v)
            })
            .await
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let (tokio_mean, tokio_p50, tokio_p99, tokio_slow) = quantiles(via_tokio);
    drop(echo);
    let _ = writeln!(out, "Raw TCP ping-pong, 96 bytes: mean {raw_mean:.1} µs, p50 {raw_p50:.1} µs, p99 {raw_p99:.1} µs, {raw_slow} of {n} ≥ 1 ms; CPU per round trip (user + system) {:.2} µs client, {:.2} µs echo\n", raw_cpu.0, raw_cpu.1);
    let _ = writeln!(out, "The same ping-pong as a tokio task (the soft RNIC's I/O path, no model): mean {tokio_mean:.1} µs, p50 {tokio_p50:.1} µs ({:.2}x the raw p50), p99 {tokio_p99:.1} µs, {tokio_slow} of {n} ≥ 1 ms\n", tokio_p50 / raw_p50);
    // 2. RemoteLog singleton appends per method.
    let mut rows = Vec::new();
    let pool_dir = pool_dir.join(format!("remora-softbench-{}", std::process::id()));
    std::fs::create_dir_all(&pool_dir).map_err(|e| e.to_string())?;
    for (ci, config) in [
        "WSP+noDDIO+PM-RQWRB",
        "DMP+noDDIO+PM-RQWRB",
        "DMP+DDIO+DRAM-RQWRB",
    ]
    .iter()
    .enumerate()
    {
        let server = start_server(exe, &pool_dir.join(format!("{ci}.pm")), config)?;
        let server_pid = server.0.id();
        let local = tokio::task::LocalSet::new();
        let addr = server.1.clone();
        let config = *config;
        // The client runs as a task of the node's LocalSet, as an application would: its
        // wake-ups are the LocalSet's, not a `block_on` future's (which costs the runtime a
        // non-blocking poll of the reactor per wake-up).
        let measure = async move {
            let mut rows = Vec::new();
            for p in Primitive::ALL {
                let (_n, _c, mut client) =
                    remora_soft::client::connect(&addr, &LatencyProfile::default_profile())
                        .await
                        .map_err(|e| e.to_string())?;
                let hello = client
                    .connect(p, Shape::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let method = client
                    .method(Update::Singleton)
                    .map(|m| m.name.clone())
                    .unwrap_or_default();
                let shape = LogShape {
                    capacity: (hello.region_len - RECORDS_OFF) / 64,
                    ..LogShape::default()
                };
                let mut log = LogClient::new(client, shape, Update::Singleton);
                let mut v = Vec::with_capacity(n as usize);
                // Each side's CPU (user + system) over the appends: where a method's time
                // goes besides the network (the server's share includes its responder).
                let cpu = CpuMark::now(server_pid);
                for _ in 0..n.min(shape.capacity) {
                    let t0 = wall();
                    log.append().await.map_err(|e| e.to_string())?;
                    v.push(t0.elapsed().as_nanos() as u64);
                }
                let cpu = cpu.per_msg_us(v.len() as u64);
                rows.push((config.to_string(), method, quantiles(v), cpu));
            }
            Ok::<_, String>(rows)
        };
        let r = local.block_on(&rt, async {
            tokio::task::spawn_local(measure)
                .await
                .map_err(|e| e.to_string())?
        })?;
        rows.extend(r);
        drop(server);
    }
    // 3. Streaming, raw and soft RNIC runs interleaved.
    // The latency phases' runtime is done: its tasks and sockets go before the stream.
    drop(rt);
    let streams = stream_side_by_side(exe, stream_writes, &pool_dir);
    let _ = std::fs::remove_dir_all(&pool_dir);
    let (raw_streams, soft_stream) = streams?;
    // 4. Model check: the simulator with a loopback profile calibrated from the ping-pong.
    let mut profile = LatencyProfile::default_profile();
    profile.name = "loopback".into();
    // The model's round trip is a constant, so the constant that reproduces the raw
    // ping-pong's *mean* is its mean; calibrating it from the p50 would make the model
    // miss the floor's own mean by the ping-pong's tail, before any of remora's cost.
    profile.network.nic_rtt_ns = (raw_mean * 1e3) as u64;
    let _ = writeln!(
        out,
        "Model check: the `loopback` profile is the default one with its NIC round trip set to the raw ping-pong's mean, {raw_mean:.1} µs (the only measured input); the simulator runs each method with it and predicts its mean latency.\n"
    );
    let _ = writeln!(out, "Client and server CPU: each process's CPU time (user + system) per append, to compare with the raw ping-pong's per round trip.\n");
    let _ = writeln!(out, "| server | method | mean µs | p50 µs | p99 µs | ≥ 1 ms | p50 / raw p50 | client CPU µs | server CPU µs | simulator (loopback profile) mean µs | measured / predicted |\n|---|---|---|---|---|---|---|---|---|---|---|");
    for (config, method, (mean, p50, p99, slow), (client_cpu, server_cpu)) in &rows {
        let cfg: ServerConfig = config
            .parse()
            .map_err(|e: remora_model::config::ParseConfigError| e.to_string())?;
        let m = remora::Taxonomy::shipped()
            .method(method)
            .cloned()
            .ok_or("method")?;
        let predicted = remora::planner::predict(
            &cfg,
            &profile,
            &m,
            remora_verbs::FlushMethod::Native,
            200,
            1,
        )
        .map_or(f64::NAN, |d| d.as_nanos() as f64 / 1e3);
        let _ = writeln!(out, "| {config} | {method} | {mean:.1} | {p50:.1} | {p99:.1} | {slow} | {:.2} | {client_cpu:.2} | {server_cpu:.2} | {predicted:.1} | {:.2} |", p50 / raw_p50, mean / predicted);
    }
    let _ = writeln!(out);
    stream_report(&mut out, stream_writes, &raw_streams, &soft_stream);
    let _ = writeln!(out, "Targets (issue 5): one-round-trip methods within 1.3x of the raw p50; streaming at least 0.7x of raw TCP; simulator within ±25% of the measured mean.");
    Ok(out)
}

/// WRITEs per FLUSH in the RDMA stream (256 and 500 were measured too: a little slower,
/// per-batch wake-ups against fewer FLUSHes in flight).
const STREAM_BATCH: u64 = 340;
/// FLUSHes the RDMA stream keeps in flight: the client posts the next batches while the
/// server still works on earlier ones (as the raw stream's writer never waits for its
/// reader), within the send queue's 1024 entries (3 × (340 + 1) = 1023).
const STREAM_WINDOW: usize = 3;

/// One side of the streaming comparison: messages per second (median of [`STREAM_RUNS`])
/// and CPU per message of each side (ns, over all runs; `NAN` where the platform cannot
/// tell).
#[derive(Copy, Clone, Debug, Default)]
pub struct Stream {
    /// Messages per second.
    pub rate: f64,
    /// CPU of the sending process (the benchmark's thread) per message, ns.
    pub sender_cpu_ns: f64,
    /// CPU of the receiving process (the echo thread or the soft RNIC server) per message, ns.
    pub receiver_cpu_ns: f64,
}

/// Runs of one side: (messages per second, sender CPU ns, receiver CPU ns, messages).
#[derive(Default)]
struct Runs(Vec<(f64, u64, u64, u64)>);

impl Runs {
    fn summary(&self) -> Stream {
        let msgs: u64 = self.0.iter().map(|r| r.3).sum();
        let tx: u64 = self.0.iter().map(|r| r.1).sum();
        let rx: u64 = self.0.iter().map(|r| r.2).sum();
        Stream {
            rate: median(self.0.iter().map(|r| r.0).collect()),
            sender_cpu_ns: per_msg(tx, msgs),
            receiver_cpu_ns: per_msg(rx, msgs),
        }
    }
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

    /// CPU µs per message of (this thread, the peer) since the mark, over `msgs` messages.
    fn per_msg_us(&self, msgs: u64) -> (f64, f64) {
        let (t, p) = self.since();
        (per_msg(t, msgs) / 1e3, per_msg(p, msgs) / 1e3)
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

/// One run of raw TCP streaming of `msg_bytes`-byte messages (as long as a 64-byte WRITE
/// on the wire), written 64 at a time, timed until the echo process acknowledges having
/// read them all.
fn raw_stream_run(
    echo: &str,
    writes: u64,
    msg_bytes: usize,
) -> Result<(f64, u64, u64, u64), String> {
    let chunk = vec![0x5au8; msg_bytes * 64];
    let chunks = writes.div_ceil(64);
    // Nagle's algorithm stays on: it merges the writes into larger segments, which makes
    // this stream about twice as fast as with TCP_NODELAY here (the stronger floor); the
    // rare run it stalls for a delayed ACK is what the median of runs is for.
    let mut s = TcpStream::connect(echo).map_err(|e| e.to_string())?;
    let mut head = vec![STREAM_LEAD];
    head.extend_from_slice(&(chunks * chunk.len() as u64).to_le_bytes());
    let cpu0 = thread_cpu_ns();
    let t0 = wall();
    s.write_all(&head).map_err(|e| e.to_string())?;
    for _ in 0..chunks {
        s.write_all(&chunk).map_err(|e| e.to_string())?;
    }
    let mut ack = [0u8; 9];
    s.read_exact(&mut ack).map_err(|e| e.to_string())?;
    let rate = ((chunks * 64) as f64) / t0.elapsed().as_secs_f64();
    let tx = thread_cpu_ns().saturating_sub(cpu0);
    let rx = u64::from_le_bytes(ack[1..].try_into().expect("8 bytes"));
    Ok((rate, tx, rx, chunks * 64))
}

/// One run of streaming over the soft RNIC: pipelined unsignaled 64-byte WRITEs, a FLUSH
/// every [`STREAM_BATCH`] with up to [`STREAM_WINDOW`] FLUSHes in flight, timed until the
/// last FLUSH completed (every WRITE persistent). Runs in a task of the node's `LocalSet`.
async fn soft_stream_run(
    node: &remora_soft::runtime::RtNode,
    client: &mut remora::Client<remora_soft::runtime::RtNode>,
    server_pid: u32,
    writes: u64,
) -> Result<(f64, u64, u64, u64), String> {
    let data = [0x5au8; 64];
    let cpu = CpuMark::now(server_pid);
    let t0 = wall();
    let mut posted = 0u64;
    let mut in_flight = std::collections::VecDeque::new();
    while posted < writes {
        let batch = (writes - posted).min(STREAM_BATCH);
        for i in 0..batch {
            let off = RECORDS_OFF + ((posted + i) % 1024) * 64;
            client.write_nowait(off, &data).map_err(|e| e.to_string())?;
        }
        posted += batch;
        in_flight.push_back(client.post_flush_writes().map_err(|e| e.to_string())?);
        // Ring the doorbell: let the node transmit the batch now, so the server works on
        // it while the next one is posted (a single-threaded runtime runs its RNIC only
        // when the application yields, and a FLUSH that completed already does not make
        // it yield).
        node.compute(remora_model::time::Duration::ZERO).await;
        if in_flight.len() >= STREAM_WINDOW {
            let t = in_flight.pop_front().expect("in flight");
            client.wait_flush(t).await.map_err(|e| e.to_string())?;
        }
    }
    for t in in_flight {
        client.wait_flush(t).await.map_err(|e| e.to_string())?;
    }
    let rate = writes as f64 / t0.elapsed().as_secs_f64();
    let (tx, rx) = cpu.since();
    Ok((rate, tx, rx, writes))
}

/// The streaming comparison, side by side: an echo process and a `DMP+noDDIO+PM-RQWRB`
/// soft RNIC server run together, and each round streams raw TCP at both message sizes
/// and then the soft RNIC, so a change of the shared machine's load falls on both.
/// Returns the raw streams ([`WRITE64_WIRE_BYTES`], [`WRITE64_TRAIN_BYTES`]) and the soft
/// RNIC's.
/// Starts `remora serve` for `config` on a fresh pool file at `pool`, on a loopback port.
fn start_server(exe: &Path, pool: &Path, config: &str) -> Result<Proc, String> {
    let _ = std::fs::remove_file(pool);
    Proc::start(
        exe,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--pool",
            pool.to_str().unwrap_or(""),
            "--config",
            config,
        ],
    )
}

fn stream_side_by_side(
    exe: &Path,
    writes: u64,
    pool_dir: &Path,
) -> Result<([Stream; 2], Stream), String> {
    let echo = Proc::start(exe, &["bench", "echo"])?;
    let pool = pool_dir.join("stream.pm");
    let server = start_server(exe, &pool, "DMP+noDDIO+PM-RQWRB")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (echo_addr, addr, pid) = (echo.1.clone(), server.1.clone(), server.0.id());
    let runs = tokio::task::LocalSet::new().block_on(&rt, async move {
        tokio::task::spawn_local(async move {
            let (node, _c, mut client) =
                remora_soft::client::connect(&addr, &LatencyProfile::default_profile())
                    .await
                    .map_err(|e| e.to_string())?;
            client
                .connect(Primitive::Write, Shape::default())
                .await
                .map_err(|e| e.to_string())?;
            let (mut packet, mut train, mut soft) =
                (Runs::default(), Runs::default(), Runs::default());
            for _ in 0..STREAM_RUNS {
                // The raw runs block this thread; nothing of the soft RNIC is in flight.
                packet
                    .0
                    .push(raw_stream_run(&echo_addr, writes, WRITE64_WIRE_BYTES)?);
                train
                    .0
                    .push(raw_stream_run(&echo_addr, writes, WRITE64_TRAIN_BYTES)?);
                soft.0
                    .push(soft_stream_run(&node, &mut client, pid, writes).await?);
            }
            Ok::<_, String>(([packet.summary(), train.summary()], soft.summary()))
        })
        .await
        .map_err(|e| e.to_string())?
    })?;
    drop(server);
    drop(echo);
    let _ = std::fs::remove_file(&pool);
    Ok(runs)
}

/// `raw`: streams of [`WRITE64_WIRE_BYTES`]- and [`WRITE64_TRAIN_BYTES`]-byte messages.
fn stream_report(out: &mut String, writes: u64, raw: &[Stream; 2], soft: &Stream) {
    let [packet, train] = raw;
    let _ = writeln!(
        out,
        "Streaming {writes} 64-byte messages (median of {STREAM_RUNS} runs each): raw TCP, {WRITE64_WIRE_BYTES}-byte messages (a WRITE's packet) {:.0} k/s; raw TCP, {WRITE64_TRAIN_BYTES}-byte messages (a WRITE in a write train, equal bytes) {:.0} k/s; pipelined RDMA WRITEs + FLUSH (DMP+noDDIO+PM-RQWRB, a FLUSH every {STREAM_BATCH}, {STREAM_WINDOW} in flight) {:.0} k/s; ratio {:.2} ({:.2} at equal bytes)\n",
        packet.rate / 1e3,
        train.rate / 1e3,
        soft.rate / 1e3,
        soft.rate / packet.rate,
        soft.rate / train.rate,
    );
    let _ = writeln!(
        out,
        "CPU per message (ns, user + system, all runs): raw TCP ({WRITE64_WIRE_BYTES} bytes) sender {:.0}, receiver {:.0}; raw TCP ({WRITE64_TRAIN_BYTES} bytes) sender {:.0}, receiver {:.0}; soft RNIC client {:.0}, server {:.0}\n",
        packet.sender_cpu_ns,
        packet.receiver_cpu_ns,
        train.sender_cpu_ns,
        train.receiver_cpu_ns,
        soft.sender_cpu_ns,
        soft.receiver_cpu_ns
    );
}

/// Only the streaming comparison (for profiling the streaming path).
pub fn run_stream_only(exe: &Path, writes: u64, pool_dir: &Path) -> Result<String, String> {
    let pool_dir = pool_dir.join(format!("remora-softbench-{}", std::process::id()));
    std::fs::create_dir_all(&pool_dir).map_err(|e| e.to_string())?;
    let r = stream_side_by_side(exe, writes, &pool_dir);
    let _ = std::fs::remove_dir_all(&pool_dir);
    let (raw, soft) = r?;
    let mut out = String::new();
    stream_report(&mut out, writes, &raw, &soft);
    Ok(out)
}
