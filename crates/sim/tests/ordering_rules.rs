//! The RDMA ordering rules and completion semantics of seed 000 §2, each observed through
//! the simulator: completions, the server's visible memory (CPU loads) and timing.

use remora_model::config::{ServerConfig, Transport};
use remora_model::profile::LatencyProfile;
use remora_model::rnic::QpAttr;
use remora_model::time::{Duration, Instant};
use remora_sim::{NodeHandle, Sim};
use remora_verbs::*;

struct Pair {
    sim: Sim,
    server: NodeHandle,
    client: NodeHandle,
    mr: MrInfo,
    sqp: QpNum,
    scq: CqId,
    cqp: QpNum,
    ccq: CqId,
    local: MrInfo,
}

fn pair(server_cfg: &str, client_transport: Transport, attr: QpAttr) -> Pair {
    pair_with(
        LatencyProfile::default_profile(),
        server_cfg,
        client_transport,
        attr,
    )
}

fn pair_with(
    profile: LatencyProfile,
    server_cfg: &str,
    client_transport: Transport,
    attr: QpAttr,
) -> Pair {
    let sim = Sim::new(11, profile);
    let mut ccfg: ServerConfig = server_cfg.parse().unwrap();
    let scfg: ServerConfig = server_cfg.parse().unwrap();
    ccfg.transport = client_transport;
    let server = sim.add_node("server", scfg);
    let client = sim.add_node("client", ccfg);
    let spd = server.alloc_pd().unwrap();
    let base = server.alloc(Space::Pm, 1 << 16, 4096);
    let mr = server
        .reg_mr(spd, Space::Pm, base, 1 << 16, Access::ALL)
        .unwrap();
    let scq = server.create_cq(256).unwrap();
    let sqp = server.create_qp(spd, scq, scq, attr).unwrap();
    let cpd = client.alloc_pd().unwrap();
    let lbase = client.alloc(Space::Dram, 4096, 64);
    let local = client
        .reg_mr(cpd, Space::Dram, lbase, 4096, Access::ALL)
        .unwrap();
    let ccq = client.create_cq(256).unwrap();
    let cqp = client.create_qp(cpd, ccq, ccq, attr).unwrap();
    sim.connect((&client, cqp), (&server, sqp)).unwrap();
    Pair {
        sim,
        server,
        client,
        mr,
        sqp,
        scq,
        cqp,
        ccq,
        local,
    }
}

fn at(p: &Pair, off: u64) -> Option<Remote> {
    Some(Remote {
        addr: p.mr.addr + off,
        rkey: p.mr.rkey,
    })
}

fn write(id: u64, data: Vec<u8>, r: Option<Remote>) -> SendWr {
    SendWr::new(id, Opcode::Write, Payload::inline(data), r)
}

fn flush(id: u64, r: Option<Remote>) -> SendWr {
    SendWr::new(
        id,
        Opcode::Flush {
            placement: FlushPlacement::Visibility,
            len: 64,
        },
        Payload::None,
        r,
    )
}

/// Lets virtual time pass (time only moves with events, so a task sleeps).
fn pass_time(p: &Pair, d: Duration) {
    let n = p.client.clone();
    p.sim
        .block_on(Instant::NEVER, async move { n.sleep(d).await });
}

fn server_bytes(p: &Pair, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    p.server.load(Space::Pm, p.mr.addr + off, &mut b);
    b
}

#[test]
fn posted_operations_take_effect_in_order() {
    let p = pair(
        "DMP+noDDIO+PM-RQWRB",
        Transport::InfiniBand,
        QpAttr::default(),
    );
    let (c, cqp, ccq, r) = (p.client.clone(), p.cqp, p.ccq, at(&p, 0));
    p.sim.block_on(Instant::NEVER, async move {
        for v in 1..=50u8 {
            c.post_send(cqp, write(v as u64, vec![v; 64], r).signaled(v == 50))
                .unwrap();
        }
        assert_eq!(next_completion(&c, ccq).await.wr_id, 50);
    });
    pass_time(&p, Duration::from_micros(10));
    assert_eq!(server_bytes(&p, 0, 64), vec![50; 64], "the last WRITE wins");

    // A WRITE then a SEND: when the SEND's receive completes, the WRITE is visible.
    let p = pair(
        "MHP+DDIO+DRAM-RQWRB",
        Transport::InfiniBand,
        QpAttr::default(),
    );
    let rbuf = p.server.alloc(Space::Dram, 64, 64);
    let rpd = p.server.alloc_pd().unwrap();
    let _ = rpd;
    let (c, cqp, r) = (p.client.clone(), p.cqp, at(&p, 128));
    let sge = Sge {
        addr: p.mr.addr + 4096,
        len: 64,
        lkey: p.mr.lkey,
    };
    let _ = rbuf;
    p.server.post_recv(p.sqp, RecvWr { wr_id: 9, sge }).unwrap();
    c.post_send(cqp, write(1, vec![0xAB; 64], r).signaled(false))
        .unwrap();
    c.post_send(
        cqp,
        SendWr::new(2, Opcode::Send, Payload::inline(vec![1; 8]), None).signaled(false),
    )
    .unwrap();
    let (s, scq) = (p.server.clone(), p.scq);
    let seen = p
        .sim
        .block_on(Instant::NEVER, async move {
            let wc = next_completion(&s, scq).await;
            assert_eq!((wc.wr_id, wc.opcode), (9, WcOpcode::Recv));
            let mut b = vec![0u8; 64];
            s.load(Space::Pm, p.mr.addr + 128, &mut b);
            b
        })
        .unwrap();
    assert_eq!(seen, vec![0xAB; 64]);
}

#[test]
fn non_posted_operations_see_every_earlier_write() {
    let p = pair(
        "DMP+DDIO+DRAM-RQWRB",
        Transport::InfiniBand,
        QpAttr::default(),
    );
    let (c, cqp, ccq, r, l) = (p.client.clone(), p.cqp, p.ccq, at(&p, 256), p.local);
    let (read, old) = p
        .sim
        .block_on(Instant::NEVER, async move {
            for v in 1..=10u8 {
                c.post_send(cqp, write(v as u64, vec![v; 8], r).signaled(false))
                    .unwrap();
            }
            let sge = Sge {
                addr: l.addr,
                len: 8,
                lkey: l.lkey,
            };
            c.post_send(cqp, SendWr::new(100, Opcode::Read, Payload::Sge(sge), r))
                .unwrap();
            let cas = Sge {
                addr: l.addr + 8,
                len: 8,
                lkey: l.lkey,
            };
            c.post_send(
                cqp,
                SendWr::new(
                    101,
                    Opcode::CompareSwap {
                        compare: u64::from_le_bytes([10; 8]),
                        swap: 7,
                    },
                    Payload::Sge(cas),
                    r,
                ),
            )
            .unwrap();
            assert_eq!(next_completion(&c, ccq).await.wr_id, 100);
            assert_eq!(next_completion(&c, ccq).await.wr_id, 101);
            let mut a = vec![0u8; 16];
            c.load(Space::Dram, l.addr, &mut a);
            (a[..8].to_vec(), a[8..].to_vec())
        })
        .unwrap();
    assert_eq!(read, vec![10; 8], "the READ is ordered after the WRITEs");
    assert_eq!(old, vec![10; 8], "the CAS saw the last WRITE and swapped");
    assert_eq!(server_bytes(&p, 256, 8), 7u64.to_le_bytes().to_vec());
}

/// WRITE(a), FLUSH, WRITE(b) back to back: b may take effect before the FLUSH completes
/// (a posted op can pass a non-posted one), unless b is fenced. Returns (when b became
/// visible at the server, when the FLUSH completed at the client).
fn b_visible_vs_flush_completion(fence: bool) -> (Instant, Instant) {
    // Without translation misses, so b's DMA is not delayed by chance.
    let mut profile = LatencyProfile::default_profile();
    profile.rnic.translation_miss_every = 0;
    let p = pair_with(
        profile,
        "DMP+noDDIO+PM-RQWRB",
        Transport::InfiniBand,
        QpAttr::default(),
    );
    let (c, cqp, ccq) = (p.client.clone(), p.cqp, p.ccq);
    let (ra, rb) = (at(&p, 0), at(&p, 64));
    // A task watches b's line from the server's CPU every 10 ns.
    let (s, addr) = (p.server.clone(), p.mr.addr + 64);
    let seen = std::rc::Rc::new(std::cell::Cell::new(Instant::NEVER));
    let seen2 = seen.clone();
    p.sim.spawn(async move {
        for _ in 0..2_000 {
            let mut b = [0u8; 64];
            s.load(Space::Pm, addr, &mut b);
            if b == [3; 64] {
                seen2.set(s.now());
                return;
            }
            s.sleep(Duration::from_nanos(10)).await;
        }
    });
    let done = p
        .sim
        .block_on(Instant::NEVER, async move {
            c.post_send(cqp, write(1, vec![1; 64], ra).signaled(false))
                .unwrap();
            c.post_send(cqp, flush(2, ra)).unwrap();
            c.post_send(cqp, write(3, vec![3; 64], rb).signaled(false).fenced(fence))
                .unwrap();
            assert_eq!(next_completion(&c, ccq).await.wr_id, 2);
            c.now()
        })
        .unwrap();
    p.sim.run();
    (seen.get(), done)
}

#[test]
fn a_posted_write_may_pass_a_flush_unless_fenced() {
    let (b, flushed) = b_visible_vs_flush_completion(false);
    assert!(
        b < flushed,
        "unfenced: b visible at {b}, FLUSH completed at {flushed}"
    );
    let (b, flushed) = b_visible_vs_flush_completion(true);
    assert!(
        b > flushed && b != Instant::NEVER,
        "fenced: b visible at {b}, FLUSH completed at {flushed}"
    );
}

#[test]
fn a_fence_waits_for_earlier_non_posted_operations() {
    let latency = |fence: bool| {
        let p = pair(
            "MHP+DDIO+DRAM-RQWRB",
            Transport::InfiniBand,
            QpAttr::default(),
        );
        let (c, cqp, ccq, r, l) = (p.client.clone(), p.cqp, p.ccq, at(&p, 0), p.local);
        p.sim
            .block_on(Instant::NEVER, async move {
                let sge = Sge {
                    addr: l.addr,
                    len: 8,
                    lkey: l.lkey,
                };
                c.post_send(cqp, SendWr::new(1, Opcode::Read, Payload::Sge(sge), r))
                    .unwrap();
                c.post_send(cqp, write(2, vec![1; 8], r).fenced(fence))
                    .unwrap();
                let first = next_completion(&c, ccq).await;
                let second = next_completion(&c, ccq).await;
                assert_eq!(
                    (first.wr_id, second.wr_id),
                    (1, 2),
                    "completions in posting order"
                );
                c.now()
            })
            .unwrap()
    };
    let (plain, fenced) = (latency(false), latency(true));
    let rtt = LatencyProfile::default_profile().network.nic_rtt_ns;
    // Unfenced, the WRITE travels with the READ: one round trip. Fenced, it waits for the
    // READ's response: two round trips in sequence.
    assert!(plain.as_nanos() < 2 * rtt, "unfenced {plain}");
    assert!(fenced.as_nanos() >= 2 * rtt, "fenced {fenced}");
}

#[test]
fn completion_means_arrival_on_infiniband_and_acceptance_on_iwarp() {
    let profile = LatencyProfile::default_profile();
    for (transport, slow) in [
        (Transport::InfiniBand, true),
        (Transport::RoCE, true),
        (Transport::IWarp, false),
    ] {
        let p = pair("WSP+noDDIO+PM-RQWRB", transport, QpAttr::default());
        let (c, cqp, ccq, r) = (p.client.clone(), p.cqp, p.ccq, at(&p, 0));
        let done = p
            .sim
            .block_on(Instant::NEVER, async move {
                c.post_send(cqp, write(1, vec![5; 64], r)).unwrap();
                next_completion(&c, ccq).await;
                c.now()
            })
            .unwrap();
        if slow {
            assert!(
                done.as_nanos() >= profile.network.nic_rtt_ns,
                "{transport:?}: {done}"
            );
        } else {
            assert!(
                done.as_nanos() < profile.network.nic_rtt_ns / 2,
                "{transport:?}: completed at {done}, before one hop"
            );
            // ...and the data had not reached the server then.
            assert_ne!(server_bytes(&p, 0, 64), vec![5; 64]);
        }
    }
}

#[test]
fn unsignaled_successes_are_silent_and_errors_always_complete() {
    let p = pair(
        "MHP+DDIO+DRAM-RQWRB",
        Transport::InfiniBand,
        QpAttr::default(),
    );
    let (c, cqp, ccq, r) = (p.client.clone(), p.cqp, p.ccq, at(&p, 0));
    let bad = Some(Remote {
        addr: p.mr.addr,
        rkey: p.mr.rkey + 99,
    });
    let wcs = p
        .sim
        .block_on(Instant::NEVER, async move {
            for i in 0..5 {
                c.post_send(cqp, write(i, vec![1; 8], r).signaled(false))
                    .unwrap();
            }
            c.post_send(cqp, write(5, vec![2; 8], r)).unwrap();
            let ok = next_completion(&c, ccq).await;
            c.post_send(cqp, write(6, vec![3; 8], bad).signaled(false))
                .unwrap();
            c.post_send(cqp, write(7, vec![4; 8], r).signaled(false))
                .unwrap();
            let err = next_completion(&c, ccq).await;
            let flushed = next_completion(&c, ccq).await;
            vec![ok, err, flushed]
        })
        .unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (5, WcStatus::Success),
        "only the signaled success completes"
    );
    assert_eq!(
        (wcs[1].wr_id, wcs[1].status),
        (6, WcStatus::RemAccessErr),
        "an unsignaled error still completes"
    );
    assert_eq!(
        (wcs[2].wr_id, wcs[2].status),
        (7, WcStatus::WrFlushErr),
        "later requests are flushed"
    );
    assert_eq!(
        server_bytes(&p, 0, 8),
        vec![2; 8],
        "the refused WRITE changed nothing"
    );
}

#[test]
fn a_send_without_a_receive_is_retried_after_rnr_and_then_delivered() {
    let profile = LatencyProfile::default_profile();
    let p = pair(
        "MHP+DDIO+DRAM-RQWRB",
        Transport::InfiniBand,
        QpAttr::default(),
    );
    let (c, cqp, ccq) = (p.client.clone(), p.cqp, p.ccq);
    let (s, sqp, scq) = (p.server.clone(), p.sqp, p.scq);
    let sge = Sge {
        addr: p.mr.addr + 1024,
        len: 64,
        lkey: p.mr.lkey,
    };
    p.sim.spawn_on(&p.server, async move {
        s.sleep(Duration::from_micros(25)).await;
        s.post_recv(sqp, RecvWr { wr_id: 1, sge }).unwrap();
        let wc = next_completion(&s, scq).await;
        assert_eq!(
            (wc.opcode, wc.byte_len, wc.imm),
            (WcOpcode::Recv, 16, Some(77))
        );
    });
    let done = p
        .sim
        .block_on(Instant::NEVER, async move {
            c.post_send(
                cqp,
                SendWr::new(
                    1,
                    Opcode::SendWithImm(77),
                    Payload::inline(vec![9; 16]),
                    None,
                ),
            )
            .unwrap();
            let wc = next_completion(&c, ccq).await;
            assert_eq!(wc.status, WcStatus::Success);
            c.now()
        })
        .unwrap();
    assert!(
        done.as_nanos() >= 25_000
            && done.as_nanos() < 25_000 + 2 * profile.rnic.rnr_retry_delay_ns + 5_000,
        "{done}"
    );
    assert!(p.sim.with_rnic(p.server.id(), |r, _| r.stats().rnr_naks) >= 2);

    // With no RNR retries allowed, the sender gets an error.
    let p = pair(
        "MHP+DDIO+DRAM-RQWRB",
        Transport::InfiniBand,
        QpAttr {
            rnr_retry: 0,
            ..QpAttr::default()
        },
    );
    let (c, cqp, ccq) = (p.client.clone(), p.cqp, p.ccq);
    let st = p
        .sim
        .block_on(Instant::NEVER, async move {
            c.post_send(
                cqp,
                SendWr::new(1, Opcode::Send, Payload::inline(vec![9; 16]), None),
            )
            .unwrap();
            next_completion(&c, ccq).await.status
        })
        .unwrap();
    assert_eq!(st, WcStatus::RnrRetryExcErr);
}

#[test]
fn access_violations_fail_alone_and_other_qps_keep_working() {
    let p = pair(
        "MHP+DDIO+DRAM-RQWRB",
        Transport::InfiniBand,
        QpAttr::default(),
    );
    // A second QP pair between the same nodes.
    let spd = p.server.alloc_pd().unwrap();
    let base = p.server.alloc(Space::Pm, 4096, 4096);
    let mr2 = p
        .server
        .reg_mr(spd, Space::Pm, base, 4096, Access::REMOTE_READ)
        .unwrap();
    let scq2 = p.server.create_cq(16).unwrap();
    let sqp2 = p
        .server
        .create_qp(spd, scq2, scq2, QpAttr::default())
        .unwrap();
    let cpd2 = p.client.alloc_pd().unwrap();
    let ccq2 = p.client.create_cq(16).unwrap();
    let cqp2 = p
        .client
        .create_qp(cpd2, ccq2, ccq2, QpAttr::default())
        .unwrap();
    p.sim.connect((&p.client, cqp2), (&p.server, sqp2)).unwrap();
    let (c, cqp, ccq, r) = (p.client.clone(), p.cqp, p.ccq, at(&p, 0));
    let no_write = Some(Remote {
        addr: mr2.addr,
        rkey: mr2.rkey,
    });
    let out_of_bounds = Some(Remote {
        addr: p.mr.addr + (1 << 16) - 4,
        rkey: p.mr.rkey,
    });
    let misaligned = Some(Remote {
        addr: p.mr.addr + 3,
        rkey: p.mr.rkey,
    });
    let l = p.local;
    let statuses = p
        .sim
        .block_on(Instant::NEVER, async move {
            let mut st = Vec::new();
            // Each violation on QP 2 (after the first, QP 2 is in error: reconnecting is the
            // application's job), the good writes on QP 1.
            c.post_send(cqp2, write(1, vec![1; 8], no_write)).unwrap();
            st.push(next_completion(&c, ccq2).await.status);
            c.post_send(cqp, write(2, vec![2; 8], out_of_bounds))
                .unwrap();
            st.push(next_completion(&c, ccq).await.status);
            st.push(
                c.post_send(cqp, write(3, vec![3; 8], r))
                    .map(|_| WcStatus::Success)
                    .unwrap_or(WcStatus::WrFlushErr),
            );
            let _ = misaligned;
            let _ = l;
            st
        })
        .unwrap();
    assert_eq!(statuses[0], WcStatus::RemAccessErr, "no REMOTE_WRITE right");
    assert_eq!(statuses[1], WcStatus::RemAccessErr, "out of bounds");
    assert_eq!(
        server_bytes(&p, (1 << 16) - 8, 8),
        vec![0; 8],
        "nothing written"
    );

    // A fresh QP pair still works after the errors.
    let p2 = pair(
        "MHP+DDIO+DRAM-RQWRB",
        Transport::InfiniBand,
        QpAttr::default(),
    );
    let (c, cqp, ccq, r) = (p2.client.clone(), p2.cqp, p2.ccq, at(&p2, 0));
    let mis = Some(Remote {
        addr: p2.mr.addr + 3,
        rkey: p2.mr.rkey,
    });
    let l = p2.local;
    let st = p2
        .sim
        .block_on(Instant::NEVER, async move {
            let sge = Sge {
                addr: l.addr,
                len: 8,
                lkey: l.lkey,
            };
            c.post_send(
                cqp,
                SendWr::new(1, Opcode::FetchAdd { add: 1 }, Payload::Sge(sge), mis),
            )
            .unwrap();
            let a = next_completion(&c, ccq).await.status;
            let _ = r;
            a
        })
        .unwrap();
    assert_eq!(
        st,
        WcStatus::RemAccessErr,
        "a misaligned atomic is an access error"
    );
}

#[test]
fn post_send_refuses_what_the_rnic_cannot_do() {
    let p = pair(
        "MHP+DDIO+DRAM-RQWRB,no-flush",
        Transport::InfiniBand,
        QpAttr {
            sq_depth: 2,
            ..QpAttr::default()
        },
    );
    let r = at(&p, 0);
    assert!(matches!(
        p.client.post_send(p.cqp, flush(1, r)),
        Err(VerbsError::Unsupported(_))
    ));
    p.client.post_send(p.cqp, write(2, vec![1; 8], r)).unwrap();
    p.client.post_send(p.cqp, write(3, vec![1; 8], r)).unwrap();
    assert!(matches!(
        p.client.post_send(p.cqp, write(4, vec![1; 8], r)),
        Err(VerbsError::QueueFull(..))
    ));
    let pd = p.client.alloc_pd().unwrap();
    let cq = p.client.create_cq(4).unwrap();
    let lonely = p.client.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    assert!(matches!(
        p.client.post_send(lonely, write(5, vec![1; 8], r)),
        Err(VerbsError::QpState(..))
    ));
}
