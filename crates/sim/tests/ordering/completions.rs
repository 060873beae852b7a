//! What a completion means (InfiniBand and RoCE vs iWARP, decided by the requester) and
//! selective signaling: only signaled requests complete, unless they fail.

use super::*;

// ================================================================ e. completion semantics

/// Posts one signaled WRITE at time 0 and returns (completion, time, whether the server
/// had executed it then, its visible bytes then).
fn one_write(p: &Pair, data: Vec<u8>) -> (WorkCompletion, Instant, u64, Vec<u8>) {
    let (c, sim, sid, cq, qp) = (p.client.clone(), p.sim.clone(), p.server.id(), p.ccq, p.cqp);
    let (a, len) = (p.mr.addr, data.len());
    let wr = p.write(1, a, data);
    p.sim
        .block_on(Instant::NEVER, async move {
            c.post_send(qp, wr).unwrap();
            let wc = next_completion(&c, cq).await;
            let executed = sim.with_rnic(sid, |r, _| r.stats().requests_executed);
            (wc, c.now(), executed, peek(&sim, sid, Space::Pm, a, len))
        })
        .unwrap()
}

/// InfiniBand and RoCE: a signaled WRITE completes when the responder's RNIC has it, so
/// after at least a NIC round trip, and the responder has then executed it.
#[test]
fn on_infiniband_and_roce_a_write_completes_after_a_round_trip() {
    for name in ["DMP+DDIO+PM-RQWRB", "DMP+DDIO+PM-RQWRB@roce"] {
        for seed in 0..3 {
            let p = Pair::new(seed, cfg(name));
            let (wc, t, executed, _) = one_write(&p, pattern(64, 1));
            assert_eq!(
                (wc.status, wc.opcode),
                (WcStatus::Success, WcOpcode::RdmaWrite)
            );
            assert!(t >= Instant::ZERO + p.rtt(), "{name}: completed at {t}");
            assert!(
                t < Instant::ZERO + p.rtt().mul(3),
                "{name}: completed at {t}"
            );
            assert_eq!(executed, 1, "{name}: received at the responder");
        }
    }
}

/// §2: a WRITE completion on InfiniBand does not imply visibility at the responder: the
/// tail of a 4 KiB WRITE is still in the RNIC/IIO when the ACK arrives.
#[test]
fn an_infiniband_write_completion_does_not_imply_visibility() {
    for seed in 0..3 {
        let p = Pair::new(seed, cfg("DMP+noDDIO+PM-RQWRB"));
        let data = pattern(4096, 5);
        let (wc, _, _, seen) = one_write(&p, data.clone());
        assert_eq!(wc.status, WcStatus::Success);
        assert_ne!(
            seen, data,
            "seed {seed}: not (entirely) visible at completion"
        );
        p.sim.run();
        assert_eq!(p.pm(p.mr.addr, 4096), data);
    }
}

/// iWARP (§3.2): the completion comes from the requester's transport, before the data can
/// have crossed the wire; the responder has not executed the WRITE then.
#[test]
fn on_iwarp_a_write_completes_before_it_reaches_the_responder() {
    for seed in 0..3 {
        let p = Opts::new(seed, cfg("DMP+noDDIO+PM-RQWRB"))
            .client(cfg("DMP+noDDIO+PM-RQWRB@iwarp"))
            .build();
        let data = pattern(64, 6);
        let (wc, t, executed, seen) = one_write(&p, data.clone());
        assert_eq!(wc.status, WcStatus::Success);
        assert!(t < Instant::ZERO + p.one_way(), "completed at {t}");
        assert_eq!(executed, 0, "not at the responder yet");
        assert_eq!(seen, vec![0; 64]);
        p.sim.run();
        assert_eq!(p.pm(p.mr.addr, 64), data, "it arrives later");
        assert_eq!(p.server_stats().requests_executed, 1);
    }
}

/// Completion semantics are the requester's: an InfiniBand client talking to an iWARP
/// server still waits a round trip; a non-posted READ on iWARP still needs its response.
#[test]
fn completion_semantics_come_from_the_requester() {
    let p = Opts::new(0, cfg("DMP+noDDIO+PM-RQWRB@iwarp"))
        .client(cfg("DMP+noDDIO+PM-RQWRB"))
        .build();
    let (_, t, executed, _) = one_write(&p, pattern(64, 1));
    assert!(
        t >= Instant::ZERO + p.rtt(),
        "IB requester, completed at {t}"
    );
    assert_eq!(executed, 1);

    let p = Opts::new(0, cfg("DMP+noDDIO+PM-RQWRB"))
        .client(cfg("DMP+noDDIO+PM-RQWRB@iwarp"))
        .build();
    let wcs = p.run_ops(vec![p.read(1, p.mr.addr, 64, p.lmr.addr)]);
    assert_eq!(ids(&wcs), vec![1]);
    assert!(
        wcs[0].1 >= Instant::ZERO + p.rtt(),
        "iWARP READ at {}",
        wcs[0].1
    );
}

// ================================================================ f. selective signaling

/// Unsignaled successful WRITEs produce no completion; a later signaled one does (and
/// only it); the WRITEs all take effect.
#[test]
fn only_signaled_writes_produce_completions() {
    let p = Pair::new(3, cfg("DMP+DDIO+PM-RQWRB"));
    let a = p.mr.addr;
    let wrs = (0..10u64)
        .map(|i| p.write(i, a + i * 64, pattern(64, i as u8)).signaled(false))
        .collect();
    let wcs = p.run_ops(wrs);
    assert!(wcs.is_empty(), "{wcs:?}");
    assert_eq!(p.sim.with_rnic(p.client.id(), |r, _| r.cq_len(p.ccq)), 0);
    for i in 0..10u64 {
        assert_eq!(p.pm(a + i * 64, 64), pattern(64, i as u8));
    }
    let mut wrs: Vec<SendWr> = (10..20u64)
        .map(|i| p.write(i, a + i * 64, pattern(64, i as u8)).signaled(false))
        .collect();
    wrs.push(p.write(20, a + 20 * 64, pattern(64, 20)));
    let wcs = p.run_ops(wrs);
    assert_eq!(ids(&wcs), vec![20]);
    all_ok(&wcs);
    for i in 10..=20u64 {
        assert_eq!(p.pm(a + i * 64, 64), pattern(64, i as u8));
    }
}

/// An error completes even an unsignaled request, and every request behind it.
#[test]
fn an_unsignaled_write_that_fails_still_completes() {
    let p = Pair::new(0, cfg("DMP+DDIO+PM-RQWRB"));
    let mut bad = p.write(1, p.mr.addr, pattern(64, 1)).signaled(false);
    bad.remote = Some(Remote {
        addr: p.mr.addr,
        rkey: p.mr.rkey + 999,
    });
    let wcs = p.run_ops(vec![
        bad,
        p.write(2, p.mr.addr + 64, pattern(64, 2)).signaled(false),
    ]);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|(w, _)| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.pm(p.mr.addr, 128), vec![0; 128]);
}
