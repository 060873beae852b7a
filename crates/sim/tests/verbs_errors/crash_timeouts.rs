//! A server that loses power while requests are outstanding (RetryExcErr after the ACK
//! timeout, no hang), and live servers whose requests must not time out.

use super::*;
use remora_model::time::Duration;
use remora_sim::{CrashAt, FaultPlan};

/// A server loses power at various moments while a WRITE, a READ, an unsignaled WRITE and
/// a signaled WRITE are outstanding. Each request completes exactly once: a successful
/// prefix, then RetryExcErr for the first unanswered one (no earlier than the ACK timeout)
/// and WrFlushErr for the rest; the simulation ends by itself.
#[test]
fn a_crashed_server_fails_outstanding_requests_after_the_ack_timeout() {
    let mut failed_runs = 0;
    for crash_ns in [100u64, 300, 560, 600, 800, 1200, 1600, 2000, 5000] {
        let p = Pair::new(crash_ns, cfg("DMP+noDDIO+PM-RQWRB"));
        let timeout = Duration::from_nanos(p.profile.rnic.ack_timeout_ns);
        p.sim.set_faults(&FaultPlan::crash(
            p.server.id(),
            CrashAt::Time(at(crash_ns)),
        ));
        let a = p.mr.addr;
        let wrs = vec![
            p.write(0, a, vec![1; 64]),
            p.read(1, a, 64, p.lmr.addr),
            p.write(2, a + 64, vec![2; 64]).signaled(false),
            p.write(3, a + 128, vec![3; 64]),
        ];
        let wcs_rc = p.client_completions();
        p.post_all(wrs);
        let events = p.sim.run();
        assert!(events < 10_000, "crash at {crash_ns}: {events} events");
        assert_eq!(p.sim.crashed(), vec![(p.server.id(), at(crash_ns))]);
        let wcs = wcs_rc.borrow().clone();
        let ok = wcs
            .iter()
            .take_while(|(w, _)| w.status == WcStatus::Success)
            .count();
        if ok == wcs.len() {
            assert_eq!(statuses(&wcs).len(), 3, "crash at {crash_ns}: {wcs:?}");
            continue;
        }
        failed_runs += 1;
        let (first, t_first) = &wcs[ok];
        assert_eq!(first.status, WcStatus::RetryExcErr, "crash at {crash_ns}");
        assert!(*t_first >= Instant::ZERO + timeout, "crash at {crash_ns}");
        assert!(
            *t_first < Instant::ZERO + timeout.mul(2),
            "crash at {crash_ns}"
        );
        let mut all_ids: Vec<u64> = wcs.iter().map(|(w, _)| w.wr_id).collect();
        let rest: Vec<WcStatus> = wcs[ok + 1..].iter().map(|(w, _)| w.status).collect();
        assert!(
            rest.iter().all(|s| *s == WcStatus::WrFlushErr),
            "crash at {crash_ns}: {wcs:?}"
        );
        // Exactly once each: successful unsignaled requests do not appear, every request
        // from the failed one on does.
        all_ids.dedup();
        assert_eq!(all_ids.len(), wcs.len());
        let expect: Vec<u64> = (0..4).filter(|&i| i >= first.wr_id || i != 2).collect();
        assert_eq!(all_ids, expect, "crash at {crash_ns}: {wcs:?}");
        assert!(matches!(
            p.client.post_send(p.cqp, p.write(9, a, vec![9; 8])),
            Err(VerbsError::QpState(_, "ERROR"))
        ));
    }
    assert!(
        failed_runs >= 5,
        "most crash times hit outstanding requests"
    );
}

/// A client waiting on its CQ for a request to a dead server wakes up with the error.
#[test]
fn a_waiting_client_is_woken_by_the_timeout() {
    let p = Pair::new(0, cfg("DMP+noDDIO+PM-RQWRB"));
    p.sim.crash_now(p.server.id());
    let (c, cq, qp) = (p.client.clone(), p.ccq, p.cqp);
    let wr = p.read(1, p.mr.addr, 8, p.lmr.addr);
    let got = p.sim.block_on(Instant::NEVER, async move {
        c.post_send(qp, wr).unwrap();
        (next_completion(&c, cq).await, c.now())
    });
    let (wc, t) = got.expect("the client is not left hanging");
    assert_eq!(wc.status, WcStatus::RetryExcErr);
    assert!(t >= at(p.profile.rnic.ack_timeout_ns));
    assert!(matches!(
        p.server.post_send(p.sqp, p.write(1, 0, vec![])),
        Err(VerbsError::NodeDown(_))
    ));
}

/// A live server never causes RetryExcErr: after an idle period, a READ posted shortly
/// before the ACK timer (armed by an earlier request) fires must still succeed.
#[test]
fn a_request_after_an_idle_period_does_not_time_out() {
    for before in [100u64, 300, 500, 800] {
        let p = Pair::new(0, cfg("DMP+noDDIO+PM-RQWRB"));
        let timeout = p.profile.rnic.ack_timeout_ns;
        let (c, cq, qp) = (p.client.clone(), p.ccq, p.cqp);
        let (w, r) = (
            p.write(1, p.mr.addr, vec![1; 8]),
            p.read(2, p.mr.addr, 8, p.lmr.addr),
        );
        let got = p
            .sim
            .block_on(Instant::NEVER, async move {
                c.post_send(qp, w).unwrap();
                let a = next_completion(&c, cq).await.status;
                c.sleep_until(at(timeout - before)).await;
                c.post_send(qp, r).unwrap();
                let b = next_completion(&c, cq).await.status;
                (a, b)
            })
            .unwrap();
        assert_eq!(
            got,
            (WcStatus::Success, WcStatus::Success),
            "READ posted {before} ns before the first ACK timer"
        );
    }
}

/// A single WRITE whose transmission alone takes longer than the ACK timeout (32 MiB at
/// 200 Gb/s is 1.3 ms; the timeout is 1.05 ms) to a live server must succeed: the
/// transport timer runs from the end of the transmission, not from the doorbell.
#[test]
fn a_write_longer_than_the_ack_timeout_succeeds() {
    let p = Pair::new(0, cfg("DMP+noDDIO+PM-RQWRB"));
    let len = 32u64 << 20;
    let base = p.server.alloc(Space::Dram, len, 4096);
    let m = p
        .server
        .reg_mr(p.spd, Space::Dram, base, len, Access::REMOTE_WRITE)
        .unwrap();
    let wr = SendWr::new(
        1,
        Opcode::Write,
        Payload::inline(vec![7; len as usize]),
        Some(Remote {
            addr: base,
            rkey: m.rkey,
        }),
    );
    let wcs = p.run_ops(vec![wr]);
    assert_eq!(statuses(&wcs), vec![(1, WcStatus::Success)]);
    // The ACK of a posted WRITE says the data reached the responder's RNIC, not memory:
    // give its DMA (32 MiB over PCIe) time to land before looking.
    let c = p.client.clone();
    p.sim.block_on(Instant::NEVER, async move {
        c.sleep(Duration::from_millis(10)).await
    });
    assert_eq!(p.server_bytes(Space::Dram, base + len - 8, 8), vec![7; 8]);
}
