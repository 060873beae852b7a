//! The receive queue and RNR: a SEND without a receive is retried after the RNR delay, the
//! retry budget (per message, `rnr_retry: 0`), iWARP without RNR, and the queue's depth.

use super::*;
use remora_model::time::Duration;
use std::cell::RefCell;
use std::rc::Rc;

/// A SEND finds no receive: it is refused with an RNR NAK and retried after the profile's
/// delay; once the server posts a receive the SEND is delivered and completes.
#[test]
fn a_send_without_a_receive_is_retried_after_the_rnr_delay() {
    for (post_at_us, kind) in [(5u64, 0), (25, 0), (5, 1), (25, 2)] {
        let p = Pair::new(post_at_us, cfg("DMP+DDIO+DRAM-RQWRB"));
        let rnr = Duration::from_nanos(p.profile.rnic.rnr_retry_delay_ns);
        let msg = pattern(32, 0x21);
        let target = p.mr.addr + 256;
        let got = Rc::new(RefCell::new(None));
        let (g, srv, sim, scq, sqp) = (got.clone(), p.server.clone(), p.sim.clone(), p.scq, p.sqp);
        let rwr = p.recv(9, 0, 64);
        p.sim.spawn_on(&p.server, async move {
            srv.sleep(Duration::from_micros(post_at_us)).await;
            srv.post_recv(sqp, rwr).unwrap();
            let wc = next_completion(&srv, scq).await;
            let buf = peek(&sim, srv.id(), Space::Dram, rwr.sge.addr, 32);
            *g.borrow_mut() = Some((wc, buf, srv.now()));
        });
        let wr = match kind {
            0 => p.send(1, msg.clone()),
            1 => p.send_imm(1, msg.clone(), 77),
            _ => p.write_imm(1, target, msg.clone(), 78),
        };
        let wcs = p.run_ops(vec![wr]);
        assert_eq!(ids(&wcs), vec![1]);
        all_ok(&wcs);
        let t = wcs[0].1;
        let posted = at(post_at_us * 1000);
        assert!(
            t >= Instant::ZERO + rnr,
            "kind {kind}: done at {t}, before the delay"
        );
        assert!(
            t > posted,
            "kind {kind}: done at {t}, before a receive existed"
        );
        assert!(
            t <= posted + rnr + p.rtt().mul(3),
            "kind {kind}: retried promptly after the receive was posted ({t})"
        );
        let naks = p.server_stats().rnr_naks;
        assert_eq!(
            naks,
            post_at_us / 10 + 1,
            "kind {kind}: one NAK per attempt"
        );
        let (wc, buf, _) = got.borrow_mut().take().expect("receive completed");
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (9, WcStatus::Success, 32)
        );
        match kind {
            0 => {
                assert_eq!((wc.opcode, wc.imm), (WcOpcode::Recv, None));
                assert_eq!(buf, msg);
            }
            1 => {
                assert_eq!((wc.opcode, wc.imm), (WcOpcode::Recv, Some(77)));
                assert_eq!(buf, msg);
            }
            _ => {
                assert_eq!((wc.opcode, wc.imm), (WcOpcode::RecvRdmaWithImm, Some(78)));
                assert_eq!(p.pm(target, 32), msg);
            }
        }
    }
}

/// With `rnr_retry: 0` the first RNR NAK fails the request with RnrRetryExcErr (SEND and
/// WRITE_WITH_IMM alike); a WRITE_WITH_IMM refused this way writes nothing.
#[test]
fn rnr_retry_zero_fails_at_the_first_rnr_nak() {
    for kind in 0..2 {
        let p = Opts::new(0, cfg("DMP+DDIO+DRAM-RQWRB"))
            .client_attr(QpAttr {
                rnr_retry: 0,
                ..QpAttr::default()
            })
            .build();
        let target = p.mr.addr + 64;
        let first = if kind == 0 {
            p.send(1, pattern(16, 1))
        } else {
            p.write_imm(1, target, pattern(16, 1), 5)
        };
        let wcs = p.run_ops(vec![first, p.write(2, p.mr.addr, pattern(8, 2))]);
        let got: Vec<(u64, WcStatus)> = wcs.iter().map(|(w, _)| (w.wr_id, w.status)).collect();
        assert_eq!(
            got,
            vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)],
            "kind {kind}"
        );
        assert_eq!(p.server_stats().rnr_naks, 1, "no retry");
        assert!(wcs[0].1 < Instant::ZERO + p.rtt().mul(2), "fails at once");
        assert_eq!(p.pm(p.mr.addr, 128), vec![0; 128], "nothing written");
    }
}

/// A finite retry budget: `rnr_retry: 3` against a server that never posts a receive
/// means exactly four attempts, three delays apart, then RnrRetryExcErr.
#[test]
fn the_rnr_retry_count_bounds_the_attempts() {
    let p = Opts::new(0, cfg("DMP+DDIO+DRAM-RQWRB"))
        .client_attr(QpAttr {
            rnr_retry: 3,
            ..QpAttr::default()
        })
        .build();
    let rnr = Duration::from_nanos(p.profile.rnic.rnr_retry_delay_ns);
    let wcs = p.run_ops(vec![p.send(1, pattern(16, 1))]);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].0.status, WcStatus::RnrRetryExcErr);
    assert_eq!(p.server_stats().rnr_naks, 4);
    assert!(wcs[0].1 >= Instant::ZERO + rnr.mul(3));
    assert!(wcs[0].1 < Instant::ZERO + rnr.mul(4));
}

/// IBTA: the RNR retry counter is reloaded whenever the requester makes forward progress;
/// it bounds the retries of one message, not of the QP's lifetime. With `rnr_retry: 1`,
/// two SENDs that each meet one RNR NAK both succeed.
#[test]
fn the_rnr_retry_budget_is_per_message() {
    let p = Opts::new(0, cfg("DMP+DDIO+DRAM-RQWRB"))
        .client_attr(QpAttr {
            rnr_retry: 1,
            ..QpAttr::default()
        })
        .build();
    let (srv, scq, sqp) = (p.server.clone(), p.scq, p.sqp);
    let (r1, r2) = (p.recv(1, 0, 64), p.recv(2, 64, 64));
    p.sim.spawn_on(&p.server, async move {
        // Each receive is posted 5 us after the previous message: each SEND meets exactly
        // one RNR NAK (the retry comes 10 us later).
        srv.sleep(Duration::from_micros(5)).await;
        srv.post_recv(sqp, r1).unwrap();
        next_completion(&srv, scq).await;
        srv.sleep(Duration::from_micros(5)).await;
        srv.post_recv(sqp, r2).unwrap();
        next_completion(&srv, scq).await;
    });
    let (c, cq, qp) = (p.client.clone(), p.ccq, p.cqp);
    let (s1, s2) = (p.send(1, pattern(16, 1)), p.send(2, pattern(16, 2)));
    let got = p
        .sim
        .block_on(Instant::NEVER, async move {
            c.post_send(qp, s1).unwrap();
            let a = next_completion(&c, cq).await.status;
            c.post_send(qp, s2).unwrap();
            let b = next_completion(&c, cq).await.status;
            (a, b)
        })
        .unwrap();
    assert_eq!(p.server_stats().rnr_naks, 2, "one RNR NAK per SEND");
    assert_eq!(got, (WcStatus::Success, WcStatus::Success));
}

/// On iWARP a SEND completes as soon as the requester's transport has it, before the
/// responder can refuse it. A SEND that found no receive must then either be delivered
/// once a receive is posted or surface at the requester: iWARP has no RNR retry, the
/// refusal fails the connection (RDMAP Terminate), so later requests are refused. It may
/// not "succeed" and vanish while the connection carries on.
#[test]
fn an_iwarp_send_that_finds_no_receive_is_not_silently_lost() {
    let p = Opts::new(0, cfg("DMP+DDIO+DRAM-RQWRB"))
        .client(cfg("DMP+DDIO+DRAM-RQWRB@iwarp"))
        .build();
    let (srv, sqp, rwr) = (p.server.clone(), p.sqp, p.recv(1, 0, 64));
    p.sim.spawn_on(&p.server, async move {
        srv.sleep(Duration::from_micros(5)).await;
        srv.post_recv(sqp, rwr).unwrap();
    });
    let recvs = collect(&p.sim, &p.server, p.scq);
    let wcs = p.run_ops(vec![p.send(1, pattern(16, 1))]);
    assert_eq!(ids(&wcs), vec![1]);
    let delivered = recvs.borrow().len() == 1;
    let later = p.client.post_send(p.cqp, p.send(2, pattern(16, 2)));
    assert!(
        delivered || wcs[0].0.status != WcStatus::Success || later.is_err(),
        "the SEND completed {:?}, no receive ever completed ({} RNR NAKs) and the \
         connection still accepts requests",
        wcs[0].0.status,
        p.server_stats().rnr_naks
    );
}

/// A receive queue of depth 2: a third receive is refused with QueueFull; three SENDs
/// fill both receives, and the third waits (RNR) until a receive is posted again.
#[test]
fn the_receive_queue_has_a_finite_depth() {
    let p = Opts::new(0, cfg("DMP+DDIO+DRAM-RQWRB"))
        .server_attr(QpAttr {
            rq_depth: 2,
            ..QpAttr::default()
        })
        .build();
    p.server.post_recv(p.sqp, p.recv(1, 0, 64)).unwrap();
    p.server.post_recv(p.sqp, p.recv(2, 64, 64)).unwrap();
    assert_eq!(
        p.server.post_recv(p.sqp, p.recv(3, 128, 64)),
        Err(VerbsError::QueueFull("receive", p.sqp, 2))
    );
    let recvs = Rc::new(RefCell::new(Vec::new()));
    let (rv, srv, scq, sqp, r3) = (
        recvs.clone(),
        p.server.clone(),
        p.scq,
        p.sqp,
        p.recv(3, 128, 64),
    );
    p.sim.spawn_on(&p.server, async move {
        for _ in 0..2 {
            let wc = next_completion(&srv, scq).await;
            rv.borrow_mut().push(wc);
        }
        srv.sleep(Duration::from_micros(30)).await;
        srv.post_recv(sqp, r3).unwrap();
        let wc = next_completion(&srv, scq).await;
        rv.borrow_mut().push(wc);
    });
    let wcs = p.run_ops((1..=3).map(|i| p.send(i, pattern(16, i as u8))).collect());
    assert_eq!(ids(&wcs), vec![1, 2, 3]);
    all_ok(&wcs);
    assert!(p.server_stats().rnr_naks >= 3, "the third SEND waited");
    assert!(wcs[2].1 > at(30_000));
    let rids: Vec<u64> = recvs.borrow().iter().map(|w| w.wr_id).collect();
    assert_eq!(rids, vec![1, 2, 3]);
    for i in 0..3u64 {
        assert_eq!(
            p.server_bytes(Space::Dram, p.rmr.addr + i * 64, 16),
            pattern(16, i as u8 + 1)
        );
    }
}
