//! The streaming comparison: raw TCP streams at a WRITE's packet size and at its size in a
//! write train, the soft RNIC's frames without its model, and pipelined RDMA WRITEs with a
//! FLUSH per batch on the soft RNIC, run in turns; and its part of the report.

use super::peers::{start_server, Proc, FRAMES_LEAD, FRAMES_RKEY, STREAM_LEAD};
use super::{per_msg, thread_cpu_ns, wall, CpuMark};
use remora::{Primitive, Shape};
use remora_model::profile::LatencyProfile;
use remora_remotelog::log::RECORDS_OFF;
use remora_verbs::Verbs as _;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

/// Bytes on the wire of one 64-byte RDMA WRITE as a packet: the 32-byte packet header,
/// address, rkey, immediate, data length, and the data.
pub const WRITE64_WIRE_BYTES: usize = 32 + 8 + 4 + 4 + 4 + 64;

/// Bytes on the wire of one 64-byte RDMA WRITE inside a write train, as the stream sends
/// them: its entry (address, length, flags) and the data. The train's own 40 bytes are
/// shared by the batch's WRITEs and left out, which favours the raw stream.
pub const WRITE64_TRAIN_BYTES: usize = remora_model::wire::TRAIN_ENTRY + 64;

/// Streaming rounds: in each, every stream runs once, back to back. Each side's rate is the
/// median of its runs, and the soft RNIC's ratio to raw TCP the median of the rounds'
/// ratios: raw TCP's own rate varies from run to run on a shared machine more than the
/// soft RNIC's, and a round's two runs share the machine's state.
const STREAM_RUNS: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// WRITEs per FLUSH in the RDMA stream (256 and 500 were measured too: a little slower,
/// per-batch wake-ups against fewer FLUSHes in flight).
const STREAM_BATCH: u64 = 340;
/// FLUSHes the RDMA stream keeps in flight: the client posts the next batches while the
/// server still works on earlier ones (as the raw stream's writer never waits for its
/// reader), within the send queue's 1024 entries (3 × (340 + 1) = 1023).
const STREAM_WINDOW: usize = 3;

/// One side of the streaming comparison: messages per second (median of `STREAM_RUNS`)
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

/// The ratio of one side's rate to another's, round by round: median, lowest, highest.
#[derive(Copy, Clone, Debug, Default)]
pub struct Paired {
    /// Median of the rounds' ratios.
    pub median: f64,
    /// Lowest.
    pub lo: f64,
    /// Highest.
    pub hi: f64,
}

impl Paired {
    fn of(a: &Runs, b: &Runs) -> Paired {
        let r: Vec<f64> = a.0.iter().zip(&b.0).map(|(x, y)| x.0 / y.0).collect();
        Paired {
            median: median(r.clone()),
            lo: r.iter().copied().fold(f64::INFINITY, f64::min),
            hi: r.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// What the streaming comparison measured: the raw streams ([`WRITE64_WIRE_BYTES`],
/// [`WRITE64_TRAIN_BYTES`], the model-free frames), the soft RNIC's, and the soft RNIC's
/// rate over each raw stream's, round by round (packet-sized and train-sized messages).
pub(super) struct Streams {
    pub raw: [Stream; 3],
    pub soft: Stream,
    pub soft_over_packet: Paired,
    pub soft_over_train: Paired,
}

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

/// Sends a stream's last, partial segment now. Nagle's algorithm stays on during a
/// stream (it merges writes into full segments), but it holds the tail until the
/// receiver acknowledges what is in flight, and a delayed acknowledgement holds that for
/// up to 40 ms: a run would end in a stall that says nothing about either side. Setting
/// `TCP_NODELAY` pushes what is pending at once (Linux `tcp(7)`).
fn push_tail(s: &TcpStream) -> Result<(), String> {
    s.set_nodelay(true).map_err(|e| e.to_string())
}

/// One run of raw TCP streaming of `msg_bytes`-byte messages (as long as a 64-byte WRITE
/// on the wire), written 64 at a time, timed until the echo process acknowledges having
/// read them all.
// Not inlined: `scripts/callgrind.sh stream` takes its instructions out of the client's.
#[inline(never)]
fn raw_stream_run(
    echo: &str,
    writes: u64,
    msg_bytes: usize,
) -> Result<(f64, u64, u64, u64), String> {
    let chunk = vec![0x5au8; msg_bytes * 64];
    let chunks = writes.div_ceil(64);
    // Nagle's algorithm stays on: it merges the writes into larger segments, which makes
    // this stream about twice as fast as with TCP_NODELAY here (the stronger floor); its
    // tail is pushed at the end (`push_tail`).
    let mut s = TcpStream::connect(echo).map_err(|e| e.to_string())?;
    let mut head = vec![STREAM_LEAD];
    head.extend_from_slice(&(chunks * chunk.len() as u64).to_le_bytes());
    let cpu0 = thread_cpu_ns();
    let t0 = wall();
    s.write_all(&head).map_err(|e| e.to_string())?;
    for _ in 0..chunks {
        s.write_all(&chunk).map_err(|e| e.to_string())?;
    }
    push_tail(&s)?;
    let mut ack = [0u8; 9];
    s.read_exact(&mut ack).map_err(|e| e.to_string())?;
    let rate = ((chunks * 64) as f64) / t0.elapsed().as_secs_f64();
    let tx = thread_cpu_ns().saturating_sub(cpu0);
    let rx = u64::from_le_bytes(ack[1..].try_into().expect("8 bytes"));
    Ok((rate, tx, rx, chunks * 64))
}

/// Appends to `out` the packets of WRITEs `first..first + n` of a stream (each `data` to
/// line `i % 1024`, PSN `i`, the last asking for an acknowledgement) as the soft RNIC
/// builds them, encoded by its write-train encoder.
pub(super) fn encode_frames(
    first: u64,
    n: u64,
    rkey: u32,
    data: &remora_model::bytes::Bytes,
    out: &mut Vec<u8>,
) {
    use remora_model::wire::{Body, Packet, TrainTail};
    let mut tail: Option<TrainTail> = None;
    for i in first..first + n {
        let pkt = Packet {
            src: 1,
            dst: 0,
            src_qp: remora_model::verbs::QpNum(1),
            dst_qp: remora_model::verbs::QpNum(1),
            psn: i as u32,
            body: Body::Write {
                addr: (i % 1024) * 64,
                rkey,
                data: data.clone(),
                imm: None,
                ack_req: i + 1 == first + n,
            },
        };
        if !tail.as_mut().is_some_and(|t| t.push(&pkt, out)) {
            tail = TrainTail::start(&pkt, out);
        }
    }
}

/// One run of the model-free frame stream: the soft RNIC's packets for pipelined 64-byte
/// WRITEs, built and encoded into write trains by the soft RNIC's own encoder
/// ([`TrainTail`](remora_model::wire::TrainTail)), one train per [`STREAM_BATCH`] written
/// at once as the soft RNIC's doorbell does, to
/// [`sink_frames`](super::peers::sink_frames); timed until the sink acknowledges the last
/// WRITE. What is left out of the soft RNIC is its model: queue pairs, work requests and
/// completions, PSNs and acknowledgements, and the memory hierarchy.
// Not inlined: `scripts/callgrind.sh stream` takes its instructions out of the client's.
#[inline(never)]
fn frames_stream_run(echo: &str, writes: u64) -> Result<(f64, u64, u64, u64), String> {
    let data = remora_model::bytes::Bytes::copy_from(&[0x5au8; 64]);
    let mut s = TcpStream::connect(echo).map_err(|e| e.to_string())?;
    let mut head = vec![FRAMES_LEAD];
    head.extend_from_slice(&writes.to_le_bytes());
    head.extend_from_slice(&FRAMES_RKEY.to_le_bytes());
    let mut out = Vec::with_capacity(STREAM_BATCH as usize * 96);
    let cpu0 = thread_cpu_ns();
    let t0 = wall();
    s.write_all(&head).map_err(|e| e.to_string())?;
    let mut posted = 0u64;
    while posted < writes {
        let batch = (writes - posted).min(STREAM_BATCH);
        out.clear();
        encode_frames(posted, batch, FRAMES_RKEY, &data, &mut out);
        s.write_all(&out).map_err(|e| e.to_string())?;
        posted += batch;
    }
    push_tail(&s)?;
    let mut ack = [0u8; 9];
    s.read_exact(&mut ack).map_err(|e| e.to_string())?;
    let rate = writes as f64 / t0.elapsed().as_secs_f64();
    let tx = thread_cpu_ns().saturating_sub(cpu0);
    let rx = u64::from_le_bytes(ack[1..].try_into().expect("8 bytes"));
    Ok((rate, tx, rx, writes))
}

/// One run of streaming over the soft RNIC: pipelined unsignaled 64-byte WRITEs, a FLUSH
/// every [`STREAM_BATCH`] with up to [`STREAM_WINDOW`] FLUSHes in flight, timed until the
/// last FLUSH completed (every WRITE persistent). Runs in a task of the node's executor.
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
/// soft RNIC server run together, and each round streams raw TCP at both message sizes,
/// the soft RNIC's frames without its model, and then the soft RNIC, so a change of the
/// shared machine's load falls on all of them.
pub(super) fn stream_side_by_side(
    exe: &Path,
    writes: u64,
    pool_dir: &Path,
) -> Result<Streams, String> {
    let echo = Proc::start(exe, &["bench", "echo"])?;
    let pool = pool_dir.join("stream.pm");
    let server = start_server(exe, &pool, "DMP+noDDIO+PM-RQWRB", &[])?;
    let (echo_addr, addr, pid) = (
        echo.addr().to_string(),
        server.addr().to_string(),
        server.pid(),
    );
    let runs = crate::killloop::run_client(async move {
        let (node, _c, mut client) =
            remora_soft::client::connect(&addr, &LatencyProfile::default_profile())
                .await
                .map_err(|e| e.to_string())?;
        client
            .connect(Primitive::Write, Shape::default())
            .await
            .map_err(|e| e.to_string())?;
        let (mut packet, mut train, mut frames, mut soft) = (
            Runs::default(),
            Runs::default(),
            Runs::default(),
            Runs::default(),
        );
        for _ in 0..STREAM_RUNS {
            // The raw runs block this thread; nothing of the soft RNIC is in flight.
            packet
                .0
                .push(raw_stream_run(&echo_addr, writes, WRITE64_WIRE_BYTES)?);
            train
                .0
                .push(raw_stream_run(&echo_addr, writes, WRITE64_TRAIN_BYTES)?);
            frames.0.push(frames_stream_run(&echo_addr, writes)?);
            soft.0
                .push(soft_stream_run(&node, &mut client, pid, writes).await?);
        }
        Ok::<_, String>(Streams {
            raw: [packet.summary(), train.summary(), frames.summary()],
            soft: soft.summary(),
            soft_over_packet: Paired::of(&soft, &packet),
            soft_over_train: Paired::of(&soft, &train),
        })
    })?;
    drop(server);
    drop(echo);
    let _ = std::fs::remove_file(&pool);
    Ok(runs)
}

/// The streaming comparison's two lines of the report.
pub(super) fn stream_report(out: &mut String, writes: u64, streams: &Streams) {
    let [packet, train, frames] = &streams.raw;
    let (soft, by_packet, by_train) = (
        &streams.soft,
        streams.soft_over_packet,
        streams.soft_over_train,
    );
    let _ = writeln!(
        out,
        "Streaming {writes} 64-byte messages ({STREAM_RUNS} rounds, each stream once per round; rates are medians): raw TCP, {WRITE64_WIRE_BYTES}-byte messages (a WRITE's packet) {:.0} k/s; raw TCP, {WRITE64_TRAIN_BYTES}-byte messages (a WRITE in a write train, equal bytes) {:.0} k/s; the soft RNIC's frames without its model (its encoder and decoder, each WRITE's data copied into memory) {:.0} k/s ({:.2} of raw); pipelined RDMA WRITEs + FLUSH (DMP+noDDIO+PM-RQWRB, a FLUSH every {STREAM_BATCH}, {STREAM_WINDOW} in flight) {:.0} k/s; ratio {:.2}: the median over the rounds of the soft RNIC's rate over raw TCP's in the same round ({:.2}–{:.2}; {:.2} at equal bytes)\n",
        packet.rate / 1e3,
        train.rate / 1e3,
        frames.rate / 1e3,
        frames.rate / packet.rate,
        soft.rate / 1e3,
        by_packet.median,
        by_packet.lo,
        by_packet.hi,
        by_train.median,
    );
    let _ = writeln!(
        out,
        "CPU per message (ns, user + system, all runs): raw TCP ({WRITE64_WIRE_BYTES} bytes) sender {:.0}, receiver {:.0}; raw TCP ({WRITE64_TRAIN_BYTES} bytes) sender {:.0}, receiver {:.0}; frames without the model sender {:.0}, receiver {:.0}; soft RNIC client {:.0}, server {:.0}\n",
        packet.sender_cpu_ns,
        packet.receiver_cpu_ns,
        train.sender_cpu_ns,
        train.receiver_cpu_ns,
        frames.sender_cpu_ns,
        frames.receiver_cpu_ns,
        soft.sender_cpu_ns,
        soft.receiver_cpu_ns
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_taken_round_by_round() {
        // Raw TCP fast in the second round, slow in the third; the soft RNIC steady: each
        // round's ratio sets its own rates against each other, not against another round's.
        let soft = Runs(vec![(5.0, 0, 0, 1), (5.0, 0, 0, 1), (4.0, 0, 0, 1)]);
        let raw = Runs(vec![(10.0, 0, 0, 1), (20.0, 0, 0, 1), (8.0, 0, 0, 1)]);
        let p = Paired::of(&soft, &raw);
        assert_eq!((p.median, p.lo, p.hi), (0.5, 0.25, 0.5));
        // The medians' ratio would say 0.5 too here, but not in general:
        let raw = Runs(vec![(10.0, 0, 0, 1), (20.0, 0, 0, 1), (40.0, 0, 0, 1)]);
        let soft = Runs(vec![(1.0, 0, 0, 1), (8.0, 0, 0, 1), (10.0, 0, 0, 1)]);
        let p = Paired::of(&soft, &raw);
        assert_eq!((p.median, p.lo, p.hi), (0.25, 0.1, 0.4));
        assert_eq!(soft.summary().rate / raw.summary().rate, 0.4);
    }
}
