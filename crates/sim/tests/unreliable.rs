//! The unreliable service types `IBV_QPT_UC` and `IBV_QPT_UD` through the simulator: which
//! operations they carry, completion at transmit (seed 003 §2.4), no acknowledgements, no
//! retransmission, silent drops at the responder (counted in `RnicStats`), Q_Keys, the
//! 4096-byte UD MTU, and one UD QP talking to many peers.

mod fabric_common;

use fabric_common::*;
use proptest::prelude::*;
use remora_model::time::Instant;
use remora_sim::Sim;
use remora_verbs::*;
use std::rc::Rc;

const CONFIG: &str = "DMP+noDDIO+PM-RQWRB";

fn write(id: u64, n: &Net, off: u64, data: Vec<u8>) -> SendWr {
    SendWr::new(
        id,
        Opcode::Write,
        Payload::inline(data),
        Some(n.server.remote_pm(off)),
    )
}

fn send(id: u64, data: Vec<u8>) -> SendWr {
    SendWr::new(id, Opcode::Send, Payload::inline(data), None)
}

/// Packets node `from` put on the wire (needs `record_trace(true)`).
fn packets_from(sim: &Sim, from: NodeId) -> usize {
    sim.with_trace(|t| {
        t.events()
            .iter()
            .filter(|e| e.node == from && e.lane.starts_with("wire→"))
            .count()
    })
}

/// Posts `wrs` on the client and returns its send completions with their times.
fn run_client(net: &Rc<Net>, wrs: Vec<SendWr>) -> Vec<(WorkCompletion, Instant)> {
    let n = net.clone();
    let count = wrs.iter().filter(|w| w.signaled).count();
    net.block_on(async move {
        let c = &n.client;
        for wr in wrs {
            c.h.post_send(n.cqp, wr).unwrap();
        }
        let mut out = Vec::new();
        for _ in 0..count {
            out.push((next_completion(&c.h, c.scq).await, c.h.now()));
        }
        out
    })
}

// ------------------------------------------------------------------ what each type carries

#[test]
fn each_service_type_refuses_the_operations_it_lacks() {
    let r = Remote { addr: 0, rkey: 1 };
    let remote = Some(r);
    let local8 = |n: &Net| Payload::Sge(n.client.sge(false, 0, 8));
    for t in [QpType::Uc, QpType::Ud] {
        let net = Net::new(1, cfg(CONFIG), t);
        let dest = |wr: SendWr| {
            if t == QpType::Ud {
                wr.to(net.to_server())
            } else {
                wr
            }
        };
        let ops = [
            SendWr::new(1, Opcode::Read, local8(&net), remote),
            SendWr::new(
                1,
                Opcode::CompareSwap {
                    compare: 0,
                    swap: 1,
                },
                local8(&net),
                remote,
            ),
            SendWr::new(1, Opcode::FetchAdd { add: 1 }, local8(&net), remote),
            SendWr::wflush(1, r, 8),
            SendWr::new(1, Opcode::AtomicWrite { value: 1 }, Payload::None, remote),
            SendWr::new(1, Opcode::NonPostedWrite, Payload::inline(vec![1]), remote),
        ];
        for wr in ops {
            let op = wr.opcode.name();
            let e = net.client.h.post_send(net.cqp, dest(wr)).unwrap_err();
            assert_eq!(
                e,
                VerbsError::NotOnQpType {
                    op,
                    qp_type: t.name()
                },
                "{t:?}"
            );
            assert!(e.to_string().contains(t.name()), "{e}");
        }
        let writes = [
            SendWr::new(1, Opcode::Write, Payload::inline(vec![1]), remote),
            SendWr::new(1, Opcode::WriteWithImm(1), Payload::inline(vec![1]), remote),
        ];
        for wr in writes {
            let r = net.client.h.post_send(net.cqp, dest(wr));
            if t == QpType::Ud {
                assert!(matches!(r, Err(VerbsError::NotOnQpType { .. })), "{r:?}");
            } else {
                r.unwrap();
            }
        }
    }
}

#[test]
fn only_ud_work_requests_name_a_destination_and_ud_qps_are_not_connected() {
    for t in [QpType::Rc, QpType::Uc] {
        let net = Net::new(1, cfg(CONFIG), t);
        let dest = UdDest {
            node: 0,
            qpn: QpNum(0),
            qkey: 0,
        };
        let e = net
            .client
            .h
            .post_send(net.cqp, send(1, vec![1]).to(dest))
            .unwrap_err();
        assert!(matches!(e, VerbsError::Invalid(_)), "{e}");
    }
    let net = Net::new(1, cfg(CONFIG), QpType::Ud);
    let e = net
        .client
        .h
        .post_send(net.cqp, send(1, vec![1]))
        .unwrap_err();
    assert!(
        matches!(e, VerbsError::Invalid(m) if m.contains("destination")),
        "{e}"
    );
    let e = net
        .sim
        .connect((&net.client.h, net.cqp), (&net.server.h, net.sqp))
        .unwrap_err();
    assert!(
        matches!(e, VerbsError::Invalid(m) if m.contains("UD")),
        "{e}"
    );
}

// ------------------------------------------------------------------ UC

#[test]
fn uc_completes_at_transmit_without_acknowledgements() {
    let data = pattern(1024, 3);
    let rc = Rc::new(Net::new(1, cfg(CONFIG), QpType::Rc));
    let uc = Rc::new(Net::new(1, cfg(CONFIG), QpType::Uc));
    uc.sim.record_trace(true);
    let t_rc = run_client(&rc, vec![write(1, &rc, 0, data.clone())])[0].1;
    let wcs = run_client(&uc, vec![write(1, &uc, 0, data.clone())]);
    let (wc, t_uc) = &wcs[0];
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let p = remora_model::LatencyProfile::default_profile();
    // Completion once the last byte left: before the data could even reach the server.
    assert!(
        *t_uc < Instant::ZERO + p.one_way(),
        "UC completed at {t_uc}, RC at {t_rc}"
    );
    assert!(*t_uc < t_rc);
    uc.sim.run();
    assert_eq!(
        uc.load(&uc.server, Space::Pm, uc.server.pm.addr, 1024),
        data
    );
    assert_eq!(
        packets_from(&uc.sim, uc.server.id()),
        0,
        "a UC responder never answers"
    );
    assert_eq!(packets_from(&uc.sim, uc.client.id()), 1);
}

#[test]
fn uc_drops_what_it_cannot_place_and_keeps_going() {
    let net = Rc::new(Net::new(2, cfg(CONFIG), QpType::Uc));
    net.sim.record_trace(true);
    let bad = SendWr::new(
        1,
        Opcode::Write,
        Payload::inline(vec![0xaa; 64]),
        Some(Remote {
            addr: net.server.pm.addr,
            rkey: 0xbad,
        }),
    );
    let imm_no_recv = SendWr::new(
        2,
        Opcode::WriteWithImm(7),
        Payload::inline(vec![0xbb; 64]),
        Some(net.server.remote_pm(4096)),
    );
    let send_no_recv = send(3, vec![0xcc; 64]);
    let good = write(4, &net, 8192, vec![0xdd; 64]);
    let wcs = run_client(&net, vec![bad, imm_no_recv, send_no_recv, good]);
    // The requester never learns: everything "succeeded" when it was transmitted.
    assert!(
        wcs.iter().all(|(w, _)| w.status == WcStatus::Success),
        "{wcs:?}"
    );
    net.sim.run();
    let pm = |off: u64| net.load(&net.server, Space::Pm, net.server.pm.addr + off, 64);
    assert_eq!(pm(0), vec![0; 64], "bad rkey: nothing written");
    assert_eq!(
        pm(4096),
        vec![0; 64],
        "WRITE_WITH_IMM without a receive: whole message dropped"
    );
    assert_eq!(pm(8192), vec![0xdd; 64], "the QP still works");
    let s = net.stats(&net.server);
    assert_eq!((s.unreliable_access, s.unreliable_no_recv), (1, 2), "{s:?}");
    assert_eq!((s.rnr_naks, s.requests_executed), (0, 1));
    assert_eq!(packets_from(&net.sim, net.server.id()), 0, "no NAKs either");
    // No retransmission: a receive posted now never sees the dropped SEND.
    net.server.recv(net.sqp, 9, net.server.sge(true, 0, 64));
    net.sim.run();
    assert_eq!(net.server.h.poll_one(net.server.rcq), None);
    let wcs = run_client(&net, vec![send(5, vec![0xee; 32])]);
    assert_eq!(wcs[0].0.status, WcStatus::Success);
    net.sim.run();
    let r = net.server.h.poll_one(net.server.rcq).unwrap();
    assert_eq!(
        (r.wr_id, r.status, r.byte_len, r.src),
        (9, WcStatus::Success, 32, None)
    );
    assert_eq!(pm(0)[..32], [0xee; 32]);
}

#[test]
fn uc_message_longer_than_the_receive_buffer() {
    let net = Rc::new(Net::new(3, cfg(CONFIG), QpType::Uc));
    net.server.recv(net.sqp, 1, net.server.sge(true, 0, 16));
    run_client(&net, vec![send(1, vec![1; 64])]);
    net.sim.run();
    let r = net.server.h.poll_one(net.server.rcq).unwrap();
    assert_eq!((r.wr_id, r.status), (1, WcStatus::LocLenErr));
    assert_eq!(net.stats(&net.server).unreliable_too_long, 1);
    assert_eq!(
        net.load(&net.server, Space::Pm, net.server.pm.addr, 16),
        vec![0; 16]
    );
}

/// A receive whose buffer fails the local check (here a bad lkey) is a local QP error on
/// UC and UD as on RC: the receive completes with `LocProtErr`, the QP moves to the error
/// state, the receives behind it are flushed and later messages are not placed.
#[test]
fn a_receive_with_a_bad_lkey_fails_an_unreliable_qp() {
    for t in [QpType::Uc, QpType::Ud] {
        let net = Rc::new(Net::new(6, cfg(CONFIG), t));
        let mut bad = net.server.sge(false, 0, 64);
        bad.lkey += 1000;
        net.server.recv(net.sqp, 1, bad);
        net.server.recv(net.sqp, 2, net.server.sge(false, 64, 64));
        let to = |wr: SendWr| {
            if t == QpType::Ud {
                wr.to(net.to_server())
            } else {
                wr
            }
        };
        run_client(
            &net,
            vec![to(send(1, vec![1; 32])), to(send(2, vec![2; 32]))],
        );
        net.sim.run();
        let mut got = Vec::new();
        while let Some(w) = net.server.h.poll_one(net.server.rcq) {
            got.push((w.wr_id, w.status));
        }
        assert_eq!(
            got,
            vec![(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)],
            "{t:?}"
        );
        assert_eq!(
            net.load(&net.server, Space::Dram, net.server.dram.addr + 64, 32),
            vec![0; 32],
            "{t:?}: nothing placed after the error"
        );
        assert!(
            net.server
                .h
                .post_recv(
                    net.sqp,
                    RecvWr {
                        wr_id: 3,
                        sge: net.server.sge(false, 0, 8)
                    }
                )
                .is_err(),
            "{t:?}: a QP in the error state takes no receives"
        );
    }
}

#[test]
fn uc_write_with_imm_consumes_a_receive() {
    let net = Rc::new(Net::new(4, cfg(CONFIG), QpType::Uc));
    net.server.recv(net.sqp, 1, net.server.sge(false, 0, 16));
    let wr = SendWr::new(
        1,
        Opcode::WriteWithImm(0x77),
        Payload::inline(vec![5; 100]),
        Some(net.server.remote_pm(512)),
    );
    run_client(&net, vec![wr]);
    net.sim.run();
    let r = net.server.h.poll_one(net.server.rcq).unwrap();
    assert_eq!(
        (r.status, r.opcode, r.imm, r.byte_len),
        (
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            Some(0x77),
            100
        )
    );
    assert_eq!(
        net.load(&net.server, Space::Pm, net.server.pm.addr + 512, 100),
        vec![5; 100]
    );
}

// ------------------------------------------------------------------ UD

#[test]
fn ud_refuses_messages_over_the_mtu_at_post_time() {
    let net = Rc::new(Net::new(5, cfg(CONFIG), QpType::Ud));
    let big = send(1, vec![1; UD_MTU as usize + 1]).to(net.to_server());
    let e = net.client.h.post_send(net.cqp, big).unwrap_err();
    assert_eq!(
        e,
        VerbsError::TooLong {
            len: 4097,
            max: 4096,
            what: "a UD message (one packet of the path MTU)"
        }
    );
    // An SGE payload is measured the same way.
    let sge = Payload::Sge(net.client.sge(false, 0, 5000));
    let e = net
        .client
        .h
        .post_send(
            net.cqp,
            SendWr::new(2, Opcode::Send, sge, None).to(net.to_server()),
        )
        .unwrap_err();
    assert!(matches!(e, VerbsError::TooLong { len: 5000, .. }), "{e}");
    // Exactly one MTU goes through intact.
    net.server.recv(net.sqp, 1, net.server.sge(true, 0, 4096));
    let data = pattern(4096, 9);
    let wcs = run_client(&net, vec![send(3, data.clone()).to(net.to_server())]);
    assert_eq!(wcs[0].0.status, WcStatus::Success);
    net.sim.run();
    let r = net.server.h.poll_one(net.server.rcq).unwrap();
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 4096));
    assert_eq!(
        net.load(&net.server, Space::Pm, net.server.pm.addr, 4096),
        data
    );
}

#[test]
fn ud_checks_the_qkey_and_drops_without_a_receive() {
    let net = Rc::new(Net::new(6, cfg(CONFIG), QpType::Ud));
    net.sim.record_trace(true);
    let wrong = UdDest {
        qkey: net.qkey + 1,
        ..net.to_server()
    };
    let wcs = run_client(
        &net,
        vec![
            send(1, vec![1; 8]).to(wrong),
            send(2, vec![2; 8]).to(net.to_server()),
        ],
    );
    assert!(wcs.iter().all(|(w, _)| w.status == WcStatus::Success));
    net.sim.run();
    let s = net.stats(&net.server);
    assert_eq!(
        (s.ud_bad_qkey, s.unreliable_no_recv, s.rnr_naks),
        (1, 1, 0),
        "{s:?}"
    );
    assert_eq!(packets_from(&net.sim, net.server.id()), 0);
    // With a receive posted and the right Q_Key it arrives, naming its sender.
    net.server.recv(net.sqp, 7, net.server.sge(false, 0, 64));
    run_client(
        &net,
        vec![SendWr::new(
            3,
            Opcode::SendWithImm(0xabc),
            Payload::inline(vec![3; 8]),
            None,
        )
        .to(net.to_server())],
    );
    net.sim.run();
    let r = net.server.h.poll_one(net.server.rcq).unwrap();
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.imm, r.byte_len, r.src),
        (
            7,
            WcStatus::Success,
            WcOpcode::Recv,
            Some(0xabc),
            8,
            Some((net.client.id(), net.cqp))
        )
    );
}

#[test]
fn ud_completes_at_transmit() {
    let net = Rc::new(Net::new(7, cfg(CONFIG), QpType::Ud));
    net.server.recv(net.sqp, 1, net.server.sge(false, 0, 4096));
    let wcs = run_client(&net, vec![send(1, vec![1; 4096]).to(net.to_server())]);
    let p = remora_model::LatencyProfile::default_profile();
    assert!(wcs[0].1 < Instant::ZERO + p.one_way(), "{:?}", wcs[0].1);
    // ... and no later than the serialization of its last byte.
    assert!(wcs[0].1 >= Instant::ZERO + p.wire_time(4096));
}

#[test]
fn a_datagram_for_a_connected_qp_is_dropped() {
    // A UD client aimed at an RC server QP: the RC QP ignores it.
    let sim = Sim::new(8, remora_model::LatencyProfile::default_profile());
    let server = Node::new(&sim, "server", cfg(CONFIG));
    let client = Node::new(&sim, "client", cfg(CONFIG));
    let sqp = server.qp(QpType::Rc, 0);
    let peer = client.qp(QpType::Rc, 0);
    sim.connect((&client.h, peer), (&server.h, sqp)).unwrap();
    let ud = client.qp(QpType::Ud, 0);
    server.recv(sqp, 1, server.sge(false, 0, 64));
    let dest = UdDest {
        node: server.id(),
        qpn: sqp,
        qkey: 0,
    };
    client
        .h
        .post_send(ud, send(1, vec![1; 8]).to(dest))
        .unwrap();
    sim.run();
    assert_eq!(server.h.poll_one(server.rcq), None);
    assert_eq!(sim.with_rnic(server.id(), |r, _| r.stats().dropped), 1);
}

/// One UD QP serves many peers: three clients send to one server QP, and the server replies
/// to each through the source its receive completion names.
#[test]
fn one_ud_qp_talks_to_many_peers() {
    let sim = Sim::new(9, remora_model::LatencyProfile::default_profile());
    let server = Node::new(&sim, "server", cfg(CONFIG));
    let sqp = server.qp(QpType::Ud, 42);
    let clients: Vec<(Node, QpNum)> = (0..3)
        .map(|i| {
            let c = Node::new(&sim, &format!("client{i}"), cfg(CONFIG));
            let qp = c.qp(QpType::Ud, 42);
            c.recv(qp, 100, c.sge(false, 0, 64));
            (c, qp)
        })
        .collect();
    for i in 0..3 {
        server.recv(sqp, i, server.sge(false, 64 * i, 64));
    }
    {
        let s = server.clone();
        sim.spawn(async move {
            for _ in 0..3 {
                let wc = next_completion(&s.h, s.rcq).await;
                let (node, qpn) = wc.src.expect("UD receives name their sender");
                let mut msg = vec![0u8; wc.byte_len as usize];
                s.h.load(Space::Dram, s.dram.addr + 64 * wc.wr_id, &mut msg);
                msg.reverse();
                let reply = send(wc.wr_id, msg).to(UdDest {
                    node,
                    qpn,
                    qkey: 42,
                });
                s.h.post_send(sqp, reply).unwrap();
            }
        });
    }
    for (i, (c, qp)) in clients.iter().enumerate() {
        let dest = UdDest {
            node: server.id(),
            qpn: sqp,
            qkey: 42,
        };
        c.h.post_send(*qp, send(1, vec![i as u8, 1, 2]).to(dest))
            .unwrap();
    }
    sim.run();
    for (i, (c, qp)) in clients.iter().enumerate() {
        let r = c.h.poll_one(c.rcq).expect("a reply");
        assert_eq!(
            (r.status, r.src),
            (WcStatus::Success, Some((server.id(), sqp)))
        );
        assert_eq!(r.qp, *qp);
        let mut got = vec![0u8; 3];
        c.h.load(Space::Dram, c.dram.addr, &mut got);
        assert_eq!(got, vec![2, 1, i as u8]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any UD message up to the MTU arrives intact and complete; anything longer is
    /// refused at post time and never reaches the wire.
    #[test]
    fn ud_sizes(len in 0usize..6000, seed in 0u64..1000) {
        let net = Rc::new(Net::new(seed, cfg(CONFIG), QpType::Ud));
        net.server.recv(net.sqp, 1, net.server.sge(true, 0, UD_MTU as u32));
        let data = pattern(len, seed as u8);
        let wr = send(1, data.clone()).to(net.to_server());
        let r = net.client.h.post_send(net.cqp, wr);
        net.sim.run();
        if len as u64 > UD_MTU {
            let refused = matches!(r, Err(VerbsError::TooLong { .. }));
            prop_assert!(refused);
            prop_assert_eq!(net.client.h.poll_one(net.client.scq), None);
            prop_assert_eq!(net.server.h.poll_one(net.server.rcq), None);
        } else {
            prop_assert!(r.is_ok());
            prop_assert_eq!(net.client.h.poll_one(net.client.scq).unwrap().status, WcStatus::Success);
            let wc = net.server.h.poll_one(net.server.rcq).unwrap();
            prop_assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, len as u32));
            prop_assert_eq!(net.load(&net.server, Space::Pm, net.server.pm.addr, len), data);
        }
    }
}
