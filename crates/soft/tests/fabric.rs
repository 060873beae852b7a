//! The seed 003 flush primitives and the UC/UD service types on the soft RNIC: two
//! real-time nodes in one process joined by a loopback TCP connection, exchanging
//! `Packet::emit` bytes (SFlush and UD datagram frames included).

use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::Rnic;
use remora_soft::runtime::{real_time_profile, RtNode};
use remora_verbs::*;

struct Side {
    node: RtNode,
    pd: PdId,
    pm: MrInfo,
    dram: MrInfo,
    scq: CqId,
    rcq: CqId,
}

impl Side {
    fn new(id: NodeId, config: &str, profile: &LatencyProfile) -> Side {
        let profile = real_time_profile(profile);
        let rnic = Rnic::new(
            id,
            config.parse().unwrap(),
            &profile,
            Prng::from_seed(id as u64),
        );
        let node = RtNode::new(rnic);
        remora_exec::spawn_local(node.clone().drive());
        let pd = node.alloc_pd().unwrap();
        let a = node.alloc(Space::Pm, 1 << 16, 4096);
        let pm = node.reg_mr(pd, Space::Pm, a, 1 << 16, Access::ALL).unwrap();
        let a = node.alloc(Space::Dram, 1 << 16, 4096);
        let dram = node
            .reg_mr(pd, Space::Dram, a, 1 << 16, Access::ALL)
            .unwrap();
        let scq = node.create_cq(256).unwrap();
        let rcq = node.create_cq(256).unwrap();
        Side {
            node,
            pd,
            pm,
            dram,
            scq,
            rcq,
        }
    }
    fn qp(&self, qp_type: QpType) -> QpNum {
        let attr = QpAttr {
            qp_type,
            qkey: 0x77,
            ..QpAttr::default()
        };
        self.node
            .create_qp(self.pd, self.scq, self.rcq, attr)
            .unwrap()
    }
    fn pm_sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.pm.addr + off,
            len,
            lkey: self.pm.lkey,
        }
    }
    fn dram_sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.dram.addr + off,
            len,
            lkey: self.dram.lkey,
        }
    }
    /// What a power failure now would leave at `addr`.
    fn durable(&self, addr: u64, len: usize) -> Vec<u8> {
        self.node
            .with(|r, now| r.crash_image(now).read_vec(addr, len))
    }
}

/// A QP of `qp_type` on each side, connected to each other: (server's, client's).
fn connected(s: &Side, c: &Side, qp_type: QpType) -> (QpNum, QpNum) {
    let (sqp, cqp) = (s.qp(qp_type), c.qp(qp_type));
    s.node.connect(sqp, 1, cqp).unwrap();
    c.node.connect(cqp, 0, sqp).unwrap();
    (sqp, cqp)
}

/// Takes `rounds` messages on `qp`, one receive posted at a time, answering each with a
/// message of its own if `answer`; returns the side for its counters.
async fn receive(s: Side, qp: QpNum, rounds: u64, answer: bool) -> Side {
    for i in 0..rounds {
        let buf = s.dram_sge(0, 64);
        s.node.post_recv(qp, RecvWr { wr_id: i, sge: buf }).unwrap();
        let wc = next_completion(&s.node, s.rcq).await;
        assert_eq!(wc.status, WcStatus::Success);
        if answer {
            let msg = SendWr::new(i, Opcode::Send, Payload::inline(vec![i as u8; 8]), None);
            s.node.post_send(qp, msg.signaled(false)).unwrap();
        }
    }
    s
}

/// A server (node 0) and a client (node 1) over one loopback TCP connection.
async fn pair(config: &str) -> (Side, Side) {
    pair_with(config, &LatencyProfile::default_profile()).await
}

/// [`pair`] with another latency profile.
async fn pair_with(config: &str, profile: &LatencyProfile) -> (Side, Side) {
    let listener = remora_exec::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (a, b) = remora_exec::join(
        listener.accept(),
        remora_exec::net::TcpStream::connect(addr),
    )
    .await;
    let (a, b) = (a.unwrap().0, b.unwrap());
    // As the connection manager sets them: Nagle would hold a small write behind another.
    a.set_nodelay(true).unwrap();
    b.set_nodelay(true).unwrap();
    let (server, client) = (Side::new(0, config, profile), Side::new(1, config, profile));
    let (r, w) = a.into_split();
    server.node.attach(1, r, w, |_| {});
    let (r, w) = b.into_split();
    client.node.attach(0, r, w, |_| {});
    (server, client)
}

#[allow(clippy::disallowed_methods)] // a real-time test: its clock is the wall clock
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    remora_exec::block_on(f)
}

#[test]
fn sflush_wflush_and_rflush_over_tcp() {
    run(async {
        let (s, c) = pair("DMP+noDDIO+PM-RQWRB").await;
        let (sqp, cqp) = connected(&s, &c, QpType::Rc);
        // SEND + SFlush into a PM receive buffer.
        let buf = s.pm_sge(0, 512);
        s.node
            .post_recv(sqp, RecvWr { wr_id: 1, sge: buf })
            .unwrap();
        let data = vec![0x5a; 512];
        c.node
            .post_send(
                cqp,
                SendWr::new(1, Opcode::Send, Payload::inline(data.clone()), None),
            )
            .unwrap();
        c.node.post_send(cqp, SendWr::sflush(2)).unwrap();
        let a = next_completion(&c.node, c.scq).await;
        let b = next_completion(&c.node, c.scq).await;
        assert_eq!(
            (a.status, b.status, b.opcode),
            (WcStatus::Success, WcStatus::Success, WcOpcode::SFlush)
        );
        assert_eq!(
            s.durable(buf.addr, 512),
            data,
            "durable when the SFlush completes"
        );
        // WRITE + WFlush.
        let r = Remote {
            addr: s.pm.addr + 4096,
            rkey: s.pm.rkey,
        };
        let d2 = vec![0x6b; 1024];
        c.node
            .post_send(
                cqp,
                SendWr::new(3, Opcode::Write, Payload::inline(d2.clone()), Some(r)),
            )
            .unwrap();
        c.node.post_send(cqp, SendWr::wflush(4, r, 1024)).unwrap();
        for _ in 0..2 {
            assert_eq!(
                next_completion(&c.node, c.scq).await.status,
                WcStatus::Success
            );
        }
        assert_eq!(s.durable(r.addr, 1024), d2);
        // RFlush from the server, notification to the client.
        c.node
            .post_recv(
                cqp,
                RecvWr {
                    wr_id: 9,
                    sge: c.dram_sge(0, 16),
                },
            )
            .unwrap();
        s.node
            .post_send(sqp, SendWr::rflush(5, s.pm_sge(4096, 1024), 0xF1))
            .unwrap();
        let note = next_completion(&c.node, c.rcq).await;
        assert_eq!(
            (note.status, note.imm, note.byte_len),
            (WcStatus::Success, Some(0xF1), 0)
        );
        let done = next_completion(&s.node, s.scq).await;
        assert_eq!(
            (done.status, done.opcode),
            (WcStatus::Success, WcOpcode::RFlush)
        );
        assert_eq!(
            s.node.net_stats().malformed + c.node.net_stats().malformed,
            0
        );
    });
}

#[test]
fn uc_and_ud_over_tcp() {
    run(async {
        let (s, c) = pair("DMP+noDDIO+PM-RQWRB").await;
        // UC: a WRITE_WITH_IMM, and a SEND with no receive posted (dropped, counted).
        let (sqp, cqp) = connected(&s, &c, QpType::Uc);
        s.node
            .post_recv(
                sqp,
                RecvWr {
                    wr_id: 1,
                    sge: s.dram_sge(0, 16),
                },
            )
            .unwrap();
        let r = Remote {
            addr: s.pm.addr,
            rkey: s.pm.rkey,
        };
        c.node
            .post_send(
                cqp,
                SendWr::new(
                    1,
                    Opcode::WriteWithImm(3),
                    Payload::inline(vec![7; 64]),
                    Some(r),
                ),
            )
            .unwrap();
        c.node
            .post_send(
                cqp,
                SendWr::new(2, Opcode::Send, Payload::inline(vec![8; 8]), None),
            )
            .unwrap();
        for _ in 0..2 {
            assert_eq!(
                next_completion(&c.node, c.scq).await.status,
                WcStatus::Success
            );
        }
        let got = next_completion(&s.node, s.rcq).await;
        assert_eq!((got.opcode, got.imm), (WcOpcode::RecvRdmaWithImm, Some(3)));
        while s.node.with(|r, _| r.stats().unreliable_no_recv) == 0 {
            remora_exec::yield_now().await;
        }
        // UD: a datagram, and an RFlush notification back to its sender.
        let (sud, cud) = (s.qp(QpType::Ud), c.qp(QpType::Ud));
        let buf = s.pm_sge(8192, 4096);
        s.node
            .post_recv(sud, RecvWr { wr_id: 2, sge: buf })
            .unwrap();
        c.node
            .post_recv(
                cud,
                RecvWr {
                    wr_id: 3,
                    sge: c.dram_sge(0, 16),
                },
            )
            .unwrap();
        let dest = UdDest {
            node: 0,
            qpn: sud,
            qkey: 0x77,
        };
        let data = vec![0x42; 4096];
        c.node
            .post_send(
                cud,
                SendWr::new(4, Opcode::Send, Payload::inline(data.clone()), None).to(dest),
            )
            .unwrap();
        let big = SendWr::new(5, Opcode::Send, Payload::inline(vec![0; 4097]), None).to(dest);
        assert!(matches!(
            c.node.post_send(cud, big),
            Err(VerbsError::TooLong { .. })
        ));
        let got = next_completion(&s.node, s.rcq).await;
        assert_eq!((got.byte_len, got.src), (4096, Some((1, cud))));
        let back = UdDest {
            node: 1,
            qpn: cud,
            qkey: 0x77,
        };
        s.node
            .post_send(sud, SendWr::rflush(6, buf, 0xAB).to(back))
            .unwrap();
        let note = next_completion(&c.node, c.rcq).await;
        assert_eq!((note.imm, note.src), (Some(0xAB), Some((0, sud))));
        assert_eq!(s.durable(buf.addr, 4096), data);
    });
}

/// A driver that parked with no deadline must be woken by the next packet whose handling
/// leaves work for later. Under `slow-data-path` a READ behind a WRITE waits for the
/// WRITE's visibility (a 250 µs PCIe crossing, past the runtime's 200 µs jump horizon),
/// so nothing leaves at once and only the driver's timer sends the READ's response. The
/// driver used to remember a timer it had stopped waiting for (a kick and an expired
/// timer at once: the kick won, the step found nothing left, the driver parked on kicks
/// alone), so the reader, seeing an "armed" timer earlier than the new deadline, did not
/// wake it: the response never left and the requester failed with `RetryExcErr` after
/// its ACK time-out (the durable RPCs' first request after a reconnect, whose server had
/// just been busy recovering).
#[test]
fn a_parked_driver_wakes_for_a_deferred_response() {
    run(async {
        let slow = LatencyProfile::builtin("slow-data-path").unwrap();
        let (s, c) = pair_with("DMP+noDDIO+PM-RQWRB", &slow).await;
        let (_, cqp) = connected(&s, &c, QpType::Rc);
        let r = Remote {
            addr: s.pm.addr,
            rkey: s.pm.rkey,
        };
        let write = |id| {
            SendWr::new(
                id,
                Opcode::Write,
                Payload::inline(vec![id as u8; 64]),
                Some(r),
            )
        };
        // A WRITE whose data path keeps the server's driver waiting on a timer (visibility
        // and WPQ entry come long after its ACK).
        c.node.post_send(cqp, write(1)).unwrap();
        assert_eq!(
            next_completion(&c.node, c.scq).await.status,
            WcStatus::Success
        );
        for _ in 0..16 {
            remora_exec::yield_now().await;
        }
        // The thread is busy (as a server recovering at start-up) past every deadline of
        // that WRITE; then a local call kicks the driver, which finds the kick and its
        // expired timer at once, does what is due and parks with nothing left.
        std::thread::sleep(std::time::Duration::from_millis(20));
        s.node.with(|_, _| ());
        for _ in 0..16 {
            remora_exec::yield_now().await;
        }
        // A WRITE and a READ behind it: the READ's response leaves only once the WRITE is
        // visible, a deadline the server's driver must wake for.
        c.node.post_send(cqp, write(2).signaled(false)).unwrap();
        let read = SendWr::new(3, Opcode::Read, Payload::Sge(c.dram_sge(0, 64)), Some(r));
        c.node.post_send(cqp, read).unwrap();
        // Well inside the 2 s ACK time-out: the response takes about a millisecond.
        let done = remora_exec::time::timeout(std::time::Duration::from_millis(500), async {
            loop {
                let wc = next_completion(&c.node, c.scq).await;
                if wc.wr_id == 3 {
                    return wc;
                }
            }
        })
        .await
        .expect("the READ's response never left the server");
        assert_eq!(done.status, WcStatus::Success);
        assert_eq!(
            c.node.with(|r, now| {
                let mut b = vec![0; 64];
                r.cpu_load(now, Space::Dram, c.dram.addr, &mut b);
                b
            }),
            vec![2; 64]
        );
    });
}

/// A client whose loop is the future `block_on` drives (not a spawned task) acknowledges
/// each answer in the same write as its next request, as a spawned task does. (Under the
/// runtime used before `remora-exec`, the driver let the spawned tasks run a few slices and
/// then wrote the acknowledgement alone, before the main future ever ran: two writes per
/// round trip, and a server woken twice.)
#[test]
fn a_main_future_client_acknowledges_an_answer_with_its_next_request() {
    const ROUNDS: u64 = 50;
    run(async {
        let (s, c) = pair("DMP+DDIO+DRAM-RQWRB").await;
        let (sqp, cqp) = connected(&s, &c, QpType::Rc);
        // The server answers every message with one of its own, from a spawned task.
        let server_before = s.node.net_stats();
        let server = remora_exec::spawn_local(receive(s, sqp, ROUNDS, true));
        let before = c.node.net_stats();
        for i in 0..ROUNDS {
            let buf = c.dram_sge(0, 64);
            c.node
                .post_recv(cqp, RecvWr { wr_id: i, sge: buf })
                .unwrap();
            let ask = SendWr::new(i, Opcode::Send, Payload::inline(vec![i as u8; 8]), None);
            c.node.post_send(cqp, ask.signaled(false)).unwrap();
            let wc = next_completion(&c.node, c.rcq).await;
            assert_eq!(wc.status, WcStatus::Success);
            let mut got = [0u8; 8];
            c.node.load(Space::Dram, c.dram.addr, &mut got);
            assert_eq!(got, [i as u8; 8]);
        }
        let after = c.node.net_stats();
        let server = server.await.unwrap();
        // The server steps its RNIC once for each request it reads and once for the
        // answer its task posts.
        let steps = server.node.net_stats().steps - server_before.steps;
        assert!(
            steps <= 2 * ROUNDS + 2,
            "{steps} server steps for {ROUNDS} round trips"
        );
        // Every answer asks for an acknowledgement, and each round sends a request: both
        // leave together, one write per round (the last acknowledgement may be on its own).
        let (writes, sent) = (after.writes - before.writes, after.sent - before.sent);
        assert!(sent >= 2 * ROUNDS - 1, "{sent} packets sent");
        assert!(
            writes <= ROUNDS + 1,
            "{writes} writes for {ROUNDS} round trips ({sent} packets)"
        );
    });
}

/// A read that wakes a task costs the server one step of its RNIC when the task only
/// takes the message (reposting a receive changes nothing the RNIC must act on): the
/// reader steps for what it read, and the driver it wakes to coalesce the acknowledgement
/// with a possible answer does not step again (it used to: two steps per message).
#[test]
fn a_message_that_wakes_a_quiet_task_costs_one_step() {
    const ROUNDS: u64 = 40;
    run(async {
        let (s, c) = pair("WSP+noDDIO+PM-RQWRB").await;
        let (sqp, cqp) = connected(&s, &c, QpType::Rc);
        let before = s.node.net_stats();
        let server = remora_exec::spawn_local(receive(s, sqp, ROUNDS, false));
        // Let the server post its first receive before the first message comes.
        remora_exec::yield_now().await;
        for i in 0..ROUNDS {
            let msg = SendWr::new(i, Opcode::Send, Payload::inline(vec![i as u8; 8]), None);
            c.node.post_send(cqp, msg).unwrap();
            let wc = next_completion(&c.node, c.scq).await;
            assert_eq!(wc.status, WcStatus::Success);
        }
        let server = server.await.unwrap();
        let steps = server.node.net_stats().steps - before.steps;
        assert!(
            steps <= ROUNDS + ROUNDS / 4,
            "{steps} server steps for {ROUNDS} messages"
        );
    });
}

/// A server task that never answers (it applies what a SEND carries, which takes its
/// thread a while, and sends nothing) does not hold the requester's acknowledgement: the
/// driver learns that this connection's woken tasks do not answer at once and writes its
/// output before they run. Server and client run on threads of their own, so the client's
/// completion time shows whether the acknowledgement waited for the server's work.
#[test]
fn an_acknowledgement_does_not_wait_for_a_task_that_never_answers() {
    const ROUNDS: usize = 8;
    const APPLY: std::time::Duration = std::time::Duration::from_millis(30);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (to_client, from_server) = std::sync::mpsc::channel();
    let (to_server, from_client) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        run(async move {
            let (sock, _) = listener.accept().unwrap();
            sock.set_nodelay(true).unwrap();
            sock.set_nonblocking(true).unwrap();
            let s = Side::new(0, "WSP+noDDIO+PM-RQWRB", &LatencyProfile::default_profile());
            let (r, w) = remora_exec::net::TcpStream::from_std(sock)
                .unwrap()
                .into_split();
            s.node.attach(1, r, w, |_| {});
            let sqp = s.qp(QpType::Rc);
            for i in 0..ROUNDS as u64 {
                let buf = s.dram_sge(i * 64, 64);
                s.node
                    .post_recv(sqp, RecvWr { wr_id: i, sge: buf })
                    .unwrap();
            }
            to_client.send(sqp).unwrap();
            let cqp = from_client.recv().unwrap();
            s.node.connect(sqp, 1, cqp).unwrap();
            for _ in 0..ROUNDS {
                let wc = next_completion(&s.node, s.rcq).await;
                assert_eq!(wc.status, WcStatus::Success);
                // Applying the update: CPU work that holds this thread.
                std::thread::sleep(APPLY);
            }
            // Let the last acknowledgement leave before the connection goes.
            remora_exec::time::sleep(std::time::Duration::from_millis(50)).await;
        })
    });
    let waits = run(async move {
        let sock = remora_exec::net::TcpStream::connect(addr).await.unwrap();
        sock.set_nodelay(true).unwrap();
        let c = Side::new(1, "WSP+noDDIO+PM-RQWRB", &LatencyProfile::default_profile());
        let (r, w) = sock.into_split();
        c.node.attach(0, r, w, |_| {});
        let cqp = c.qp(QpType::Rc);
        let sqp = from_server.recv().unwrap();
        to_server.send(cqp).unwrap();
        c.node.connect(cqp, 0, sqp).unwrap();
        let mut waits = Vec::new();
        for i in 0..ROUNDS {
            let t0 = wall();
            let wr = SendWr::new(
                i as u64,
                Opcode::Send,
                Payload::inline(vec![i as u8; 32]),
                None,
            );
            c.node.post_send(cqp, wr).unwrap();
            let wc = next_completion(&c.node, c.scq).await;
            assert_eq!(wc.status, WcStatus::Success);
            waits.push(t0.elapsed());
            // The next SEND comes once the server is done applying this one.
            remora_exec::time::sleep(APPLY * 2).await;
        }
        waits
    });
    server.join().unwrap();
    // The first round teaches the server's driver; from then on a completion takes a round
    // trip, not the server's apply (without learning every one takes at least APPLY).
    let mut later: Vec<_> = waits[2..].to_vec();
    later.sort();
    let median = later[later.len() / 2];
    assert!(
        median < APPLY / 2,
        "completions waited for the server's work: {waits:?}"
    );
}
