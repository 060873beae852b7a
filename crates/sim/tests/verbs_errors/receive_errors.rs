//! Receive-side errors: a SEND larger than the receive buffer, a receive with a bad lkey,
//! and a failed QP flushing its posted receives.

use super::*;

/// A SEND longer than the posted receive buffer: the receive completes with LocLenErr,
/// the sender with RemInvReqErr, the buffer is untouched, later requests are flushed.
#[test]
fn a_send_larger_than_the_receive_buffer_fails_on_both_sides() {
    let p = Pair::new(0, cfg("DMP+DDIO+DRAM-RQWRB"));
    let buf_before = pattern(128, 0x99);
    p.server.store(Space::Dram, p.rmr.addr, &buf_before);
    p.server.post_recv(p.sqp, p.recv(7, 0, 64)).unwrap();
    let recvs = collect(&p.sim, &p.server, p.scq);
    let wcs = p.run_ops(vec![
        p.send(1, pattern(128, 1)),
        p.write(2, p.mr.addr, vec![2; 8]),
    ]);
    assert_eq!(
        statuses(&wcs),
        vec![(1, WcStatus::RemInvReqErr), (2, WcStatus::WrFlushErr)]
    );
    let r = recvs.borrow();
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].0.wr_id, r[0].0.status), (7, WcStatus::LocLenErr));
    assert_eq!(r[0].0.opcode, WcOpcode::Recv);
    assert_eq!(
        p.server_bytes(Space::Dram, p.rmr.addr, 128),
        buf_before,
        "nothing written into the too-small buffer"
    );
    assert_eq!(p.pm(p.mr.addr, 8), vec![0; 8]);
}

/// A SEND that fits exactly is fine; so is an empty SEND.
#[test]
fn sends_up_to_the_receive_buffer_size_succeed() {
    let p = Pair::new(0, cfg("DMP+DDIO+DRAM-RQWRB"));
    p.server.post_recv(p.sqp, p.recv(1, 0, 64)).unwrap();
    p.server.post_recv(p.sqp, p.recv(2, 64, 64)).unwrap();
    let recvs = collect(&p.sim, &p.server, p.scq);
    let wcs = p.run_ops(vec![p.send(1, pattern(64, 1)), p.send(2, vec![])]);
    assert_eq!(
        statuses(&wcs),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let lens: Vec<(WcStatus, u32)> = recvs
        .borrow()
        .iter()
        .map(|(w, _)| (w.status, w.byte_len))
        .collect();
    assert_eq!(lens, vec![(WcStatus::Success, 64), (WcStatus::Success, 0)]);
    assert_eq!(p.server_bytes(Space::Dram, p.rmr.addr, 64), pattern(64, 1));
}

/// A receive whose buffer has a bad lkey: the receive completes with a local protection
/// error (IBTA), not a length error; the sender gets an error too.
#[test]
fn a_receive_with_a_bad_lkey_fails_with_a_protection_error() {
    let p = Pair::new(0, cfg("DMP+DDIO+DRAM-RQWRB"));
    let mut r = p.recv(7, 0, 64);
    r.sge.lkey += 1000;
    p.server.post_recv(p.sqp, r).unwrap();
    let recvs = collect(&p.sim, &p.server, p.scq);
    let wcs = p.run_ops(vec![p.send(1, pattern(16, 1))]);
    assert_eq!(wcs.len(), 1);
    assert_ne!(wcs[0].0.status, WcStatus::Success);
    let r = recvs.borrow();
    assert_eq!((r[0].0.wr_id, r[0].0.status), (7, WcStatus::LocProtErr));
}

/// When a QP fails, its posted receives are flushed with WrFlushErr and further receives
/// are refused.
#[test]
fn a_failed_qp_flushes_its_posted_receives() {
    let p = Pair::new(0, cfg("DMP+DDIO+DRAM-RQWRB"));
    for i in 0..3 {
        p.server.post_recv(p.sqp, p.recv(i, i * 64, 64)).unwrap();
    }
    let recvs = collect(&p.sim, &p.server, p.scq);
    let mut bad = p.write(1, p.mr.addr, vec![1; 8]);
    bad.remote = Some(Remote {
        addr: p.mr.addr,
        rkey: 0,
    });
    let wcs = p.run_ops(vec![bad]);
    assert_eq!(statuses(&wcs), vec![(1, WcStatus::RemAccessErr)]);
    let got: Vec<(u64, WcStatus)> = recvs
        .borrow()
        .iter()
        .map(|(w, _)| (w.wr_id, w.status))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, WcStatus::WrFlushErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr)
        ]
    );
    assert!(matches!(
        p.server.post_recv(p.sqp, p.recv(9, 0, 64)),
        Err(VerbsError::QpState(_, "ERROR"))
    ));
}
