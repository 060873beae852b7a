//! Teardown: destroyed QPs, CQs, MRs and PDs free their numbers for reuse, a reused QP
//! ignores its old peer, and a destroyed CQ drops its pending completions.

use super::*;
use remora_model::rnic::Objects;
use remora_model::time::Duration;

/// `ibv_destroy_qp` / `ibv_destroy_cq` / `ibv_dereg_mr`: a CQ in use is refused, a
/// destroyed object is gone for every verb, its number is reused by the next create (so a
/// server's tables stay bounded over any number of connections), and a reused QP number
/// connected to a new peer ignores what its old peer still sends.
#[test]
fn destroyed_objects_free_their_numbers_and_a_reused_qp_ignores_its_old_peer() {
    let p = Pair::new(7, cfg("DMP+noDDIO+PM-RQWRB"));
    let live = || p.sim.with_rnic(p.server.id(), |r, _| r.live_objects());
    let before = live();
    assert!(
        matches!(p.server.destroy_cq(p.scq), Err(VerbsError::Invalid(_))),
        "a CQ its QP still uses cannot go"
    );
    // The first connection works, then the server destroys its end.
    let a = p.mr.addr + 4096;
    p.client
        .post_send(p.cqp, p.write(1, a, pattern(64, 1)))
        .unwrap();
    let wcs = collect(&p.sim, &p.client, p.ccq);
    p.sim.run();
    assert_eq!(statuses(&wcs.borrow()), vec![(1, WcStatus::Success)]);
    p.server.destroy_qp(p.sqp).unwrap();
    assert!(matches!(
        p.server.destroy_qp(p.sqp),
        Err(VerbsError::NoSuch("queue pair"))
    ));
    assert!(matches!(
        p.server.post_send(p.sqp, p.send(2, vec![0; 8])),
        Err(VerbsError::NoSuch("queue pair"))
    ));
    p.server.destroy_cq(p.scq).unwrap();
    assert!(matches!(
        p.server.destroy_cq(p.scq),
        Err(VerbsError::NoSuch("completion queue"))
    ));
    assert_eq!(
        live(),
        Objects {
            qps: before.qps - 1,
            cqs: before.cqs - 1,
            ..before
        }
    );
    // A new connection gets the same numbers on the server.
    let scq = p.server.create_cq(64).unwrap();
    let sqp = p
        .server
        .create_qp(p.spd, scq, scq, QpAttr::default())
        .unwrap();
    assert_eq!((sqp, scq), (p.sqp, p.scq), "numbers are reused");
    let ccq2 = p.client.create_cq(64).unwrap();
    let cqp2 = p
        .client
        .create_qp(p.cpd, ccq2, ccq2, QpAttr::default())
        .unwrap();
    p.sim.connect((&p.client, cqp2), (&p.server, sqp)).unwrap();
    // The old client QP still believes it is connected: its WRITE reaches the reused
    // number, which drops it (and the old QP gives up after its retries).
    let b = p.mr.addr + 8192;
    let dropped = p.sim.with_rnic(p.server.id(), |r, _| r.stats().dropped);
    p.client
        .post_send(p.cqp, p.write(3, b, pattern(64, 3)))
        .unwrap();
    let wcs2 = collect(&p.sim, &p.client, ccq2);
    p.client
        .post_send(cqp2, p.write(4, a, pattern(64, 4)))
        .unwrap();
    p.sim.run();
    assert!(p.sim.with_rnic(p.server.id(), |r, _| r.stats().dropped) > dropped);
    assert_eq!(
        p.pm(b, 64),
        vec![0; 64],
        "the old peer's WRITE did not land"
    );
    assert_eq!(
        statuses(&wcs.borrow())[1..],
        [(3, WcStatus::RetryExcErr)],
        "the old peer's QP gives up"
    );
    assert_eq!(statuses(&wcs2.borrow()), vec![(4, WcStatus::Success)]);
    assert_eq!(p.pm(a, 64), pattern(64, 4), "the new peer's WRITE landed");
    // Deregistered regions refuse remote access.
    p.server.dereg_mr(&p.mr).unwrap();
    assert!(matches!(
        p.server.dereg_mr(&p.mr),
        Err(VerbsError::NoSuch("memory region"))
    ));
    p.client
        .post_send(cqp2, p.write(5, a, pattern(64, 5)))
        .unwrap();
    p.sim.run();
    assert_eq!(statuses(&wcs2.borrow())[1..], [(5, WcStatus::RemAccessErr)]);
    assert_eq!(p.pm(a, 64), pattern(64, 4));
    // Connection after connection: the server's tables do not grow.
    let steady = live();
    for _ in 0..50 {
        let scq = p.server.create_cq(64).unwrap();
        let sqp = p
            .server
            .create_qp(p.spd, scq, scq, QpAttr::default())
            .unwrap();
        p.server.destroy_qp(sqp).unwrap();
        p.server.destroy_cq(scq).unwrap();
        assert_eq!(live(), steady);
    }
    // A protection domain goes only once nothing belongs to it, and its number is reused.
    assert!(
        matches!(p.server.dealloc_pd(p.spd), Err(VerbsError::Invalid(_))),
        "the QP {sqp:?} and the ring's region still belong to it"
    );
    let pd = p.server.alloc_pd().unwrap();
    let mr = p
        .server
        .reg_mr(pd, Space::Dram, p.rmr.addr, 64, Access::ALL)
        .unwrap();
    assert!(matches!(
        p.server.dealloc_pd(pd),
        Err(VerbsError::Invalid(_))
    ));
    p.server.dereg_mr(&mr).unwrap();
    p.server.dealloc_pd(pd).unwrap();
    assert!(matches!(
        p.server.dealloc_pd(pd),
        Err(VerbsError::NoSuch("protection domain"))
    ));
    assert!(matches!(
        p.server
            .reg_mr(pd, Space::Dram, p.rmr.addr, 64, Access::ALL),
        Err(VerbsError::NoSuch("protection domain"))
    ));
    assert_eq!(live(), steady);
    assert_eq!(p.server.alloc_pd().unwrap(), pd, "numbers are reused");
}

/// `ibv_destroy_cq` discards the completions still on their way to the CQ: a receive
/// completion that waits for its DMA to become visible when its QP and CQ are destroyed
/// never reaches the CQ that reuses the number. The same run without the teardown shows
/// the completion was indeed pending at that moment.
#[test]
fn a_destroyed_cq_takes_its_pending_completions_with_it() {
    // Runs until the server has executed the client's SEND but not yet delivered its
    // receive completion; then tears the CQ down (or not) and creates one again.
    let run = |teardown: bool| -> usize {
        let p = Pair::new(11, cfg("DMP+noDDIO+PM-RQWRB"));
        p.server.post_recv(p.sqp, p.recv(1, 0, 64)).unwrap();
        p.client
            .post_send(p.cqp, p.send(10, pattern(64, 7)))
            .unwrap();
        let queued = |cq| p.sim.with_rnic(p.server.id(), |r, _| r.cq_len(cq));
        let executed = p.server_stats().requests_executed;
        let mut t = p.sim.now();
        while p.server_stats().requests_executed == executed {
            t += Duration::from_nanos(1);
            assert!(t < Instant::from_nanos(1_000_000), "the SEND never arrived");
            p.sim.run_until(t);
        }
        assert_eq!(queued(p.scq), 0, "not delivered yet");
        let cq = if teardown {
            p.server.destroy_qp(p.sqp).unwrap();
            p.server.destroy_cq(p.scq).unwrap();
            let cq = p.server.create_cq(64).unwrap();
            assert_eq!(cq, p.scq, "the number is reused");
            cq
        } else {
            p.scq
        };
        p.sim.run();
        queued(cq)
    };
    assert_eq!(run(false), 1, "the completion was pending");
    assert_eq!(
        run(true),
        0,
        "a destroyed CQ's completion reached its successor"
    );
}
