//! Posted operations take effect in posting order (seed 000 §2): pipelined WRITEs become
//! visible in order, and a receive completion implies that earlier WRITEs are visible.

use super::*;
use std::cell::RefCell;
use std::rc::Rc;

/// Many pipelined WRITEs of increasing values to one address: a server CPU polling the
/// address every 5 ns never sees the value go back, and the last WRITE's value stays.
#[test]
fn pipelined_writes_to_one_address_become_visible_in_posting_order() {
    for seed in 0..4 {
        let p = Pair::new(seed, cfg("DMP+noDDIO+PM-RQWRB"));
        let a = p.mr.addr + 128;
        let n = 32u64;
        let seen = Rc::new(RefCell::new(Vec::<u64>::new()));
        let (s, srv, sim) = (seen.clone(), p.server.clone(), p.sim.clone());
        p.sim.spawn(async move {
            loop {
                let v = u64_at(&peek(&sim, srv.id(), Space::Pm, a, 8));
                if s.borrow().last() != Some(&v) {
                    s.borrow_mut().push(v);
                }
                if v == n || srv.now() > at(200_000) {
                    return;
                }
                srv.sleep(ns(5)).await;
            }
        });
        let wrs = (1..=n)
            .map(|i| p.write(i, a, i.to_le_bytes().to_vec()).signaled(i == n))
            .collect();
        let wcs = p.run_ops(wrs);
        assert_eq!(
            ids(&wcs),
            vec![n],
            "seed {seed}: only the signaled WRITE completes"
        );
        all_ok(&wcs);
        let seen = seen.borrow();
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "seed {seed}: visible values went backwards: {seen:?}"
        );
        assert_eq!(seen.last(), Some(&n), "seed {seed}");
        assert!(
            seen.len() > 3,
            "seed {seed}: the poller saw intermediate states"
        );
        assert_eq!(u64_at(&p.pm(a, 8)), n, "seed {seed}: the last WRITE wins");
    }
}

/// A 64 KiB WRITE followed by a small SEND / SEND_WITH_IMM / WRITE_WITH_IMM: when the
/// server's receive completion arrives, the whole earlier WRITE is visible (posted
/// operations take effect in order; the receive completion follows visibility, §3.1.3).
#[test]
fn a_receive_completion_implies_that_earlier_writes_are_visible() {
    for seed in 0..3 {
        for kind in 0..3 {
            let p = Pair::new(seed, cfg("DMP+DDIO+PM-RQWRB"));
            let a = p.mr.addr;
            let big = pattern(64 * 1024, seed as u8);
            let msg = pattern(40, 0x77);
            let imm_target = p.mr.addr + 128 * 1024;
            p.server.post_recv(p.sqp, p.recv(7, 256, 128)).unwrap();
            let got = Rc::new(RefCell::new(None));
            let (g, srv, sim, scq) = (got.clone(), p.server.clone(), p.sim.clone(), p.scq);
            let (rbuf, blen) = (p.rmr.addr + 256, big.len());
            p.sim.spawn_on(&p.server, async move {
                let wc = next_completion(&srv, scq).await;
                let data = peek(&sim, srv.id(), Space::Pm, a, blen);
                let inbox = peek(&sim, srv.id(), Space::Dram, rbuf, 40);
                let imm_data = peek(&sim, srv.id(), Space::Pm, imm_target, 40);
                *g.borrow_mut() = Some((wc, data, inbox, imm_data));
            });
            let second = match kind {
                0 => p.send(2, msg.clone()),
                1 => p.send_imm(2, msg.clone(), 0xabcd),
                _ => p.write_imm(2, imm_target, msg.clone(), 0x1234),
            };
            let wcs = p.run_ops(vec![p.write(1, a, big.clone()).signaled(false), second]);
            assert_eq!(ids(&wcs), vec![2]);
            all_ok(&wcs);
            let (wc, data, inbox, imm_data) = got.borrow_mut().take().expect("receive");
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(wc.wr_id, 7);
            assert_eq!(wc.byte_len, 40, "receive completions carry the length");
            assert_eq!(wc.qp, p.sqp);
            match kind {
                0 => {
                    assert_eq!((wc.opcode, wc.imm), (WcOpcode::Recv, None));
                    assert_eq!(inbox, msg, "the message is in the receive buffer");
                }
                1 => {
                    assert_eq!((wc.opcode, wc.imm), (WcOpcode::Recv, Some(0xabcd)));
                    assert_eq!(inbox, msg);
                }
                _ => {
                    assert_eq!(
                        (wc.opcode, wc.imm),
                        (WcOpcode::RecvRdmaWithImm, Some(0x1234))
                    );
                    assert_eq!(imm_data, msg, "WRITE_WITH_IMM data is visible");
                    assert_eq!(inbox, vec![0; 40], "WRITE_WITH_IMM leaves the buffer");
                }
            }
            assert!(
                data == big,
                "seed {seed} kind {kind}: at the receive completion the earlier 64 KiB \
                 WRITE is not entirely visible"
            );
        }
    }
}
