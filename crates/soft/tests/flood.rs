//! Peers that send well-formed requests as fast as TCP carries them: one real-time node
//! (a server on a thread of its own) and raw peers that write packets straight into its
//! sockets, without a send queue to hold them back, reading what comes back.

use remora_model::bytes::Bytes;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::Rnic;
use remora_model::wire::{Body, Packet, TrainTail};
use remora_soft::runtime::{real_time_profile, Limits, NetStats, RtNode};
use remora_verbs::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

#[allow(clippy::disallowed_methods)] // a real-time test: its clock is the wall clock
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

/// The server's configuration unless a test needs another.
const DMP: &str = "DMP+noDDIO+PM-RQWRB";

/// The QP number every raw peer claims for itself.
const PEER_QP: QpNum = QpNum(7);

/// What the server reports at the end, sampled every millisecond: its counters, the most
/// bytes peer 1's requests waiting in its RNIC ever held ([`Rnic::waiting_bytes`]), and
/// the most its model's clock was ahead of the wall clock.
struct Report {
    stats: NetStats,
    most_waiting: u64,
    most_ahead: Duration,
    /// The most writes the server's memory hierarchy held at once (WSP's waiting writes).
    most_held: usize,
    /// Peer 1's connection was still attached at the end.
    first_stayed: bool,
}

/// The default limits with one peer's `backlog` and `held` set.
fn limits(backlog: u64, held: u64) -> Limits {
    Limits {
        backlog,
        held,
        ..Limits::default()
    }
}

/// A server node of configuration `config` on `profile` with a 64 KiB PM region and backlog limits `limits`, on a
/// thread of its own, that accepts `peers` raw peers as nodes 1, 2, … and serves them
/// until `stop`. The peers connect in turn from this thread; then the server says its QP
/// for each and its region. Peers that connect later are attached too, as idle nodes
/// (they make the connections share the node's limits).
fn server(
    config: &str,
    profile: &LatencyProfile,
    limits: Limits,
    peers: usize,
    stop: Arc<AtomicBool>,
) -> (Vec<Raw>, Remote, std::thread::JoinHandle<Report>) {
    let profile = real_time_profile(profile);
    let config: remora_model::ServerConfig = config.parse().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        remora_exec::block_on(async move {
            let rnic = Rnic::new(0, config, &profile, Prng::from_seed(5));
            let node = RtNode::new(rnic);
            // The node's clock starts at 0 now (give or take the moment this takes).
            let born = wall();
            node.set_limits(limits);
            remora_exec::spawn_local(node.clone().drive());
            let pd = node.alloc_pd().unwrap();
            let a = node.alloc(Space::Pm, 1 << 16, 4096);
            let mr = node.reg_mr(pd, Space::Pm, a, 1 << 16, Access::ALL).unwrap();
            let cq = node.create_cq(16).unwrap();
            let mut qps = Vec::new();
            for id in 1..=peers as NodeId {
                let s = listener.accept().unwrap().0;
                let s = remora_exec::net::TcpStream::from_std(s).unwrap();
                s.set_nodelay(true).unwrap();
                let (r, w) = s.into_split();
                node.attach(id, r, w, |_| {});
                let qp = node.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
                node.connect(qp, id, PEER_QP).unwrap();
                qps.push(qp);
            }
            let region = Remote {
                addr: mr.addr,
                rkey: mr.rkey,
            };
            tx.send((qps, region)).unwrap();
            listener.set_nonblocking(true).unwrap();
            let mut late = peers as NodeId;
            let (mut most_waiting, mut most_ahead, mut most_held) = (0, Duration::ZERO, 0);
            while !stop.load(Ordering::SeqCst) {
                while let Ok((s, _)) = listener.accept() {
                    let (r, w) = remora_exec::net::TcpStream::from_std(s)
                        .unwrap()
                        .into_split();
                    late += 1;
                    node.attach(late, r, w, |_| {});
                }
                most_waiting = most_waiting.max(node.with(|r, _| r.waiting_bytes(1)));
                most_held = most_held.max(node.with(|r, _| r.hierarchy().held_writes()));
                let model = Duration::from_nanos(node.now().as_nanos());
                most_ahead = most_ahead.max(model.saturating_sub(born.elapsed()));
                remora_exec::time::sleep(Duration::from_millis(1)).await;
            }
            let stats = node.net_stats();
            let first_stayed = node.attached(1);
            node.close();
            Report {
                stats,
                most_waiting,
                most_ahead,
                most_held,
                first_stayed,
            }
        })
    });
    let socks: Vec<TcpStream> = (0..peers)
        .map(|_| {
            let s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            s
        })
        .collect();
    let (qps, region) = rx.recv().unwrap();
    let raws = socks
        .into_iter()
        .zip(qps)
        .enumerate()
        .map(|(i, (s, qp))| Raw {
            s,
            me: i as NodeId + 1,
            qp,
            psn: 0,
            buf: Vec::new(),
        })
        .collect();
    (raws, region, h)
}

/// Reads and drops everything the server sends on `s` until it closes; returns how many
/// bytes that was.
fn drain(s: &TcpStream) -> std::thread::JoinHandle<u64> {
    let mut s = s.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut b = vec![0u8; 1 << 20];
        let mut n = 0;
        while let Ok(k) = s.read(&mut b) {
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        n
    })
}

/// A raw peer: node `me`, speaking for [`PEER_QP`] to the server's `qp`, numbering its
/// requests from 0.
struct Raw {
    s: TcpStream,
    me: NodeId,
    qp: QpNum,
    psn: u32,
    buf: Vec<u8>,
}

/// How a [`Raw::flood`] ended.
struct Flood {
    /// The server closed the connection.
    closed: bool,
    /// Bytes the server took.
    sent: u64,
}

impl Raw {
    /// Sends requests of `body(i)` for i = 0, 1, …, 1,000 to a write, as fast as the
    /// server takes them, until `until` or until the server closes the connection. A write
    /// the server does not take whole is finished before the next (waiting 100 ms at a
    /// time), so no frame is ever cut in two: the connection ends for the server's reasons,
    /// never for a malformed frame.
    fn flood(&mut self, until: std::time::Instant, mut body: impl FnMut(u64) -> Body) -> Flood {
        self.s
            .set_write_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let (mut out, mut done, mut i) = (Vec::with_capacity(64 << 10), 0, 0u64);
        let mut sent = 0;
        while wall() < until {
            if done == out.len() {
                out.clear();
                done = 0;
                for _ in 0..1000 {
                    self.request(body(i)).emit_into(&mut out);
                    i += 1;
                }
            }
            match self.s.write(&out[done..]) {
                Ok(0) => return Flood { closed: true, sent },
                Ok(n) => {
                    done += n;
                    sent += n as u64;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return Flood { closed: true, sent },
            }
        }
        Flood {
            closed: false,
            sent,
        }
    }

    fn request(&mut self, body: Body) -> Packet {
        let p = Packet {
            src: self.me,
            dst: 0,
            src_qp: PEER_QP,
            dst_qp: self.qp,
            psn: self.psn,
            body,
        };
        self.psn = self.psn.wrapping_add(1);
        p
    }

    fn next_packet(&mut self) -> Packet {
        loop {
            if let Some(len) = Packet::frame_len(&self.buf).unwrap() {
                if self.buf.len() >= len {
                    let p = Packet::parse(&self.buf[..len]).unwrap();
                    self.buf.drain(..len);
                    return p;
                }
            }
            let mut b = [0u8; 1 << 16];
            let n = self.s.read(&mut b).unwrap();
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&b[..n]);
        }
    }
}

#[test]
fn a_flood_of_reads_into_a_slow_data_path_keeps_a_bounded_queue() {
    // On slow-data-path every READ waits for the one before (half a millisecond), so READs
    // queue in the RNIC as fast as TCP brings them: 60 bytes each asking for 4 KiB. The
    // reader stops handing them over once what they ask for passes the limit.
    const LIMIT: u64 = 1 << 20;
    const ASK: u32 = 4096;
    let stop = Arc::new(AtomicBool::new(false));
    let slow = LatencyProfile::builtin("slow-data-path").unwrap();
    let (mut peers, region, h) = server(DMP, &slow, limits(LIMIT, 64 << 10), 1, stop.clone());
    let mut a = peers.remove(0);
    let answers = drain(&a.s);
    // The server stops reading once it holds 64 KiB of requests: a write then waits.
    let Flood { sent, .. } = a.flood(wall() + Duration::from_millis(1500), |i| Body::Read {
        addr: region.addr + (i % 16) * ASK as u64,
        rkey: region.rkey,
        len: ASK,
    });
    stop.store(true, Ordering::SeqCst);
    let Report {
        stats,
        most_waiting: most,
        ..
    } = h.join().unwrap();
    drop(a);
    answers.join().unwrap();
    // Each waiting READ counts 64 bytes and the 4 KiB it asks for: at most the limit's
    // worth and one more READ wait. (Without the count, they waited by the hundred
    // megabytes.)
    assert!(
        most <= LIMIT + 64 + ASK as u64,
        "{most} bytes waited in the RNIC ({sent} bytes sent); {stats}"
    );
    assert!(stats.held_back > 0, "{stats}");
    assert!(stats.paused > 0, "{stats}");
}

#[test]
fn a_peer_streaming_writes_does_not_keep_the_server_from_another() {
    // Peer 1 streams 64-byte WRITEs in trains of 1,024 as fast as TCP takes them; peer 2
    // asks for 8 bytes at a time. Each of peer 2's READs is answered within a fraction of
    // the ACK time-out (without the reader's yields, seconds passed).
    let stop = Arc::new(AtomicBool::new(false));
    let (mut peers, region, h) = server(
        DMP,
        &LatencyProfile::default_profile(),
        Limits::default(),
        2,
        stop.clone(),
    );
    let mut b = peers.pop().unwrap();
    let mut a = peers.pop().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let streaming = {
        let done = done.clone();
        std::thread::spawn(move || {
            let answers = drain(&a.s);
            let data = Bytes::from(vec![0xab; 64]);
            let mut trains = 0u64;
            while !done.load(Ordering::SeqCst) {
                let mut out = Vec::with_capacity(96 << 10);
                let mut tail: Option<TrainTail> = None;
                for i in 0..1024u64 {
                    let p = a.request(Body::Write {
                        addr: region.addr + (i % 64) * 64,
                        rkey: region.rkey,
                        data: data.clone(),
                        imm: None,
                        ack_req: i == 1023,
                    });
                    match tail.as_mut() {
                        Some(t) => assert!(t.push(&p, &mut out)),
                        None => tail = TrainTail::start(&p, &mut out),
                    }
                }
                a.s.write_all(&out).unwrap();
                trains += 1;
            }
            // The server sees the end, closes its side, and the reader sees that.
            a.s.shutdown(std::net::Shutdown::Write).unwrap();
            answers.join().unwrap();
            trains
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let mut worst = Duration::ZERO;
    let mut reads = 0;
    let end = wall() + Duration::from_secs(2);
    while wall() < end {
        let p = b.request(Body::Read {
            addr: region.addr,
            rkey: region.rkey,
            len: 8,
        });
        let t = wall();
        b.s.write_all(&p.emit()).unwrap();
        loop {
            let r = b.next_packet();
            if r.psn == p.psn && matches!(r.body, Body::ReadResp(_)) {
                break;
            }
        }
        worst = worst.max(t.elapsed());
        reads += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    done.store(true, Ordering::SeqCst);
    let trains = streaming.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    let stats = h.join().unwrap().stats;
    assert!(trains > 100, "the stream went on: {trains} trains; {stats}");
    assert!(
        worst < Duration::from_millis(500),
        "{reads} READs, the slowest {worst:?}, while {trains} trains streamed; {stats}"
    );
}

#[test]
fn a_chain_of_waiting_requests_does_not_run_the_clock_ahead() {
    // 1,000 FETCH_ADDs at once, each waiting 100 µs for the one before (an atomic takes two
    // PCIe crossings, here 50 µs each): 100 ms of model time in deadlines each within the
    // runtime's 200 µs jump, while a second peer's READs, back to back, make the server
    // step at every packet. The model's clock stays with the wall clock. (Before, one step
    // ran through the whole chain and put it 100 ms ahead, and every ACK time-out with it;
    // with jumps measured from the model's clock, each step went a jump further.)
    let mut slow = LatencyProfile::default_profile();
    slow.rnic.pcie_ns = 50_000;
    let stop = Arc::new(AtomicBool::new(false));
    let (mut peers, region, h) = server(DMP, &slow, Limits::default(), 2, stop.clone());
    let mut b = peers.pop().unwrap();
    let mut a = peers.pop().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let pinger = {
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let p = b.request(Body::Read {
                    addr: region.addr,
                    rkey: region.rkey,
                    len: 8,
                });
                b.s.write_all(&p.emit()).unwrap();
                while b.next_packet().psn != p.psn {}
            }
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let mut out = Vec::new();
    for _ in 0..1000 {
        let p = a.request(Body::Atomic {
            addr: region.addr,
            rkey: region.rkey,
            compare: None,
            operand: 1,
        });
        p.emit_into(&mut out);
    }
    let t = wall();
    a.s.write_all(&out).unwrap();
    let mut answered = 0;
    while answered < 1000 {
        if matches!(a.next_packet().body, Body::AtomicResp(_)) {
            answered += 1;
        }
    }
    let took = t.elapsed();
    done.store(true, Ordering::SeqCst);
    pinger.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    let report = h.join().unwrap();
    assert!(
        report.most_ahead < Duration::from_millis(20),
        "the model's clock ran {:?} ahead; {}",
        report.most_ahead,
        report.stats
    );
    assert!(
        took >= Duration::from_millis(90),
        "the chain takes its time on the wall clock: {took:?}"
    );
}

#[test]
fn a_peer_that_sends_requests_and_never_reads_loses_its_connection() {
    // READs of 4 KiB, sent on and on by a peer that reads nothing. The server holds its
    // requests and stops reading it; reading once more every few milliseconds (in case
    // the peer waits for it in turn) brings more requests, and past twice the held limit
    // and a megabyte the server closes the connection instead of holding more.
    let stop = Arc::new(AtomicBool::new(false));
    let (mut peers, region, h) = server(
        DMP,
        &LatencyProfile::default_profile(),
        limits(1 << 20, 8 << 10),
        1,
        stop.clone(),
    );
    let mut a = peers.remove(0);
    let Flood { closed, .. } = a.flood(wall() + Duration::from_secs(20), |i| Body::Read {
        addr: region.addr + (i % 16) * 4096,
        rkey: region.rkey,
        len: 4096,
    });
    stop.store(true, Ordering::SeqCst);
    let report = h.join().unwrap();
    assert!(
        closed,
        "the server kept the connection for 20 s; {}",
        report.stats
    );
    assert!(report.stats.paused > 0, "{}", report.stats);
    assert_eq!(
        report.stats.malformed, 0,
        "closed for what it sent, not for how"
    );
}

#[test]
fn a_burst_of_atomic_writes_on_wsp_is_held_back_at_the_waiting_limit() {
    // Under WSP a non-posted write waiting behind an earlier one is held in the memory
    // hierarchy, and each ATOMIC WRITE waits for the one before: a peer that sends them as
    // fast as TCP carries them would have the RNIC hold every one (the RNIC's own bound
    // is 65,536 a QP, which took the node seconds to hold and let go). The reader stops
    // handing the peer's requests over past the waiting limit, as credits would.
    const WAITING: u64 = 256;
    let stop = Arc::new(AtomicBool::new(false));
    let mut slow = LatencyProfile::default_profile();
    // Each ATOMIC WRITE takes 20 µs: a chain builds faster than it runs.
    slow.rnic.pcie_ns = 10_000;
    let lim = Limits {
        waiting: WAITING,
        ..Limits::default()
    };
    let (mut peers, region, h) = server("WSP+noDDIO+PM-RQWRB", &slow, lim, 1, stop.clone());
    let mut a = peers.remove(0);
    let answers = drain(&a.s);
    a.flood(wall() + Duration::from_millis(1000), |i| {
        Body::NonPostedWrite {
            addr: region.addr + (i % 512) * 8,
            rkey: region.rkey,
            data: Bytes::from(i.to_le_bytes().to_vec()),
            atomic: true,
        }
    });
    stop.store(true, Ordering::SeqCst);
    let report = h.join().unwrap();
    drop(a);
    answers.join().unwrap();
    // One request may go over before the reader looks again.
    assert!(
        report.most_held as u64 <= WAITING + 1,
        "{} writes held at once; {}",
        report.most_held,
        report.stats
    );
    assert!(report.most_held > 0, "writes were held: {}", report.stats);
    assert!(report.stats.held_back > 0, "{}", report.stats);
}

#[test]
fn peers_that_do_not_read_share_the_nodes_limit() {
    // Two peers send 4 KiB READs and read nothing. The node's limits are one peer's
    // (factor 1), so each gets half: neither has more than half the limit and a READ's
    // response owed to it. (Alone, either could have the whole limit, as the one left
    // has once the other is closed: the held limit keeps both connected for the second.)
    const LIMIT: u64 = 1 << 20;
    const ASK: u32 = 4096;
    let stop = Arc::new(AtomicBool::new(false));
    let lim = Limits {
        backlog: LIMIT,
        held: 16 << 20,
        node_factor: 1,
        ..Limits::default()
    };
    let (peers, region, h) = server(
        DMP,
        &LatencyProfile::default_profile(),
        lim,
        2,
        stop.clone(),
    );
    let senders: Vec<_> = peers
        .into_iter()
        .map(|mut a| {
            std::thread::spawn(move || {
                // Closed, if at all, as a peer that sends and never reads.
                a.flood(wall() + Duration::from_millis(1000), |i| Body::Read {
                    addr: region.addr + (i % 16) * ASK as u64,
                    rkey: region.rkey,
                    len: ASK,
                });
                a
            })
        })
        .collect();
    let peers: Vec<Raw> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, Ordering::SeqCst);
    let stats = h.join().unwrap().stats;
    drop(peers);
    assert!(
        stats.peak_backlog <= LIMIT / 2 + 2 * (ASK as u64 + 64),
        "at most half the limit and a READ's response pending for either: {stats}"
    );
    assert!(
        stats.peak_backlog > LIMIT / 4,
        "the output backed up: {stats}"
    );
}

#[test]
fn a_peer_that_reads_is_not_closed_when_others_arrive_and_its_share_shrinks() {
    // Peer 1 asks for 4 KiB READs faster than a slow data path answers, and reads every
    // answer: the server holds its requests (up to 8 MiB of them while its share is its
    // own limit). Then 60 idle peers connect, and the share of the held limit drops to a
    // 16th. The socket is left unread past the share, but the connection stays: it is
    // closed only past twice its own limit (against the share, it was closed as a peer
    // that sends and never reads).
    const ASK: u32 = 4096;
    let stop = Arc::new(AtomicBool::new(false));
    let slow = LatencyProfile::builtin("slow-data-path").unwrap();
    let (mut peers, region, h) = server(DMP, &slow, limits(1 << 20, 8 << 20), 1, stop.clone());
    let mut a = peers.remove(0);
    let answers = drain(&a.s);
    let at = a.s.peer_addr().unwrap();
    let sender = std::thread::spawn(move || {
        let flood = a.flood(wall() + Duration::from_millis(1500), |i| Body::Read {
            addr: region.addr + (i % 16) * ASK as u64,
            rkey: region.rkey,
            len: ASK,
        });
        (a, flood)
    });
    std::thread::sleep(Duration::from_millis(700));
    let idle: Vec<TcpStream> = (0..60).map(|_| TcpStream::connect(at).unwrap()).collect();
    let (a, flood) = sender.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    let report = h.join().unwrap();
    drop((a, idle));
    answers.join().unwrap();
    assert!(!flood.closed, "peer 1 was closed; {}", report.stats);
    assert!(report.first_stayed, "peer 1 was closed; {}", report.stats);
    assert!(report.stats.held_back > 0, "{}", report.stats);
}
