//! Errors found at the requester (LocProtErr, LocLenErr) and requests refused at once by
//! `ibv_post_send` (unsupported, malformed, unconnected QP, full send queue).

use super::*;

// ================================================================ local errors

struct LocalCase {
    name: &'static str,
    make: fn(&Pair) -> SendWr,
    status: WcStatus,
    /// Whether the responder never sees the request (checked locally before sending).
    local_only: bool,
}

fn local_cases() -> Vec<LocalCase> {
    vec![
        LocalCase {
            name: "WRITE from a bad lkey",
            make: |p| {
                let sge = Sge {
                    lkey: p.lmr.lkey + 100,
                    ..p.local(p.lmr.addr, 64)
                };
                SendWr::new(1, Opcode::Write, Payload::Sge(sge), p.remote(p.mr.addr))
            },
            status: WcStatus::LocProtErr,
            local_only: true,
        },
        LocalCase {
            name: "WRITE from an MR of another PD",
            make: |p| {
                let pd2 = p.client.alloc_pd().unwrap();
                let b = p.client.alloc(Space::Dram, 4096, 4096);
                let m = p
                    .client
                    .reg_mr(pd2, Space::Dram, b, 4096, Access::ALL)
                    .unwrap();
                let sge = Sge {
                    addr: b,
                    len: 64,
                    lkey: m.lkey,
                };
                SendWr::new(1, Opcode::Write, Payload::Sge(sge), p.remote(p.mr.addr))
            },
            status: WcStatus::LocProtErr,
            local_only: true,
        },
        LocalCase {
            name: "WRITE from past the end of the local MR",
            make: |p| {
                let sge = p.local(p.lmr.addr + LOCAL_LEN - 32, 64);
                SendWr::new(1, Opcode::Write, Payload::Sge(sge), p.remote(p.mr.addr))
            },
            status: WcStatus::LocLenErr,
            local_only: true,
        },
        LocalCase {
            name: "READ into a bad lkey",
            make: |p| {
                let sge = Sge {
                    lkey: 0xdead,
                    ..p.local(p.lmr.addr, 64)
                };
                SendWr::new(1, Opcode::Read, Payload::Sge(sge), p.remote(p.mr.addr))
            },
            status: WcStatus::LocProtErr,
            local_only: false,
        },
        LocalCase {
            name: "READ into an MR without LOCAL_WRITE",
            make: |p| {
                let m = p
                    .client
                    .reg_mr(p.cpd, Space::Dram, p.lmr.addr, 4096, Access::REMOTE_READ)
                    .unwrap();
                let sge = Sge {
                    addr: p.lmr.addr,
                    len: 64,
                    lkey: m.lkey,
                };
                SendWr::new(1, Opcode::Read, Payload::Sge(sge), p.remote(p.mr.addr))
            },
            status: WcStatus::LocProtErr,
            local_only: false,
        },
    ]
}

/// Local errors complete with LocProtErr / LocLenErr, the local buffer is not written,
/// and later requests are flushed.
#[test]
fn local_errors_complete_with_local_statuses() {
    for c in local_cases() {
        let p = Pair::new(0, cfg("DMP+DDIO+PM-RQWRB"));
        let remote_before = pattern(64, 0x5e);
        p.server.store(Space::Pm, p.mr.addr, &remote_before);
        let local_before = pattern(64, 0x6f);
        p.client.store(Space::Dram, p.lmr.addr, &local_before);
        let g = p.mr.addr + 4096;
        let wcs = p.run_ops(vec![
            (c.make)(&p).signaled(false),
            p.write(2, g, pattern(64, 2)),
        ]);
        assert_eq!(
            statuses(&wcs),
            vec![(1, c.status), (2, WcStatus::WrFlushErr)],
            "{}",
            c.name
        );
        assert_eq!(p.client_bytes(p.lmr.addr, 64), local_before, "{}", c.name);
        assert_eq!(p.pm(p.mr.addr, 64), remote_before, "{}", c.name);
        let executed = p.server_stats().requests_executed;
        if c.local_only {
            // Refused before anything left the client: nothing behind it executes.
            assert_eq!(p.pm(g, 64), vec![0; 64], "{}", c.name);
            assert_eq!(executed, 0, "{}", c.name);
        } else {
            // Found when the response came back: the responder executed the request
            // (and the pipelined WRITE behind it, which is flushed all the same).
            assert!(executed >= 1, "{}", c.name);
        }
    }
}

// ================================================================ post_send refusals

#[test]
fn post_send_refuses_operations_the_nic_lacks() {
    let p = Opts::new(0, cfg("DMP+noDDIO+PM-RQWRB"))
        .client(cfg("DMP+noDDIO+PM-RQWRB,legacy"))
        .build();
    let a = p.mr.addr;
    assert_eq!(
        p.client.post_send(p.cqp, p.flush(1, a, 64, PERSIST)),
        Err(VerbsError::Unsupported("RDMA FLUSH"))
    );
    assert_eq!(
        p.client.post_send(p.cqp, p.atomic_write(2, a, 1)),
        Err(VerbsError::Unsupported("RDMA ATOMIC WRITE"))
    );
    let npw = SendWr::new(
        3,
        Opcode::NonPostedWrite,
        Payload::inline(vec![1; 8]),
        p.remote(a),
    );
    assert_eq!(
        p.client.post_send(p.cqp, npw),
        Err(VerbsError::Unsupported("non-posted RDMA WRITE"))
    );
    // Refusals leave the QP usable.
    let wcs = p.run_ops(vec![p.write(4, a, vec![4; 8])]);
    assert_eq!(statuses(&wcs), vec![(4, WcStatus::Success)]);
    assert_eq!(p.pm(a, 8), vec![4; 8]);
}

/// A FLUSH sent to a responder whose RNIC has no FLUSH cannot be executed there: the
/// responder refuses the unknown operation (IBTA: NAK invalid request).
#[test]
fn a_responder_without_flush_refuses_it() {
    let p = Opts::new(0, cfg("DMP+noDDIO+PM-RQWRB,legacy"))
        .client(cfg("DMP+noDDIO+PM-RQWRB"))
        .build();
    let wcs = p.run_ops(vec![
        p.write(1, p.mr.addr, vec![1; 64]).signaled(false),
        p.flush(2, p.mr.addr, 64, PERSIST),
    ]);
    assert_eq!(statuses(&wcs), vec![(2, WcStatus::RemInvReqErr)]);
}

#[test]
fn post_send_refuses_malformed_requests() {
    let p = Pair::new(0, cfg("DMP+noDDIO+PM-RQWRB"));
    let a = p.mr.addr;
    let invalid = |r: Result<(), VerbsError>| matches!(r, Err(VerbsError::Invalid(_)));
    let no_remote = SendWr::new(1, Opcode::Write, Payload::inline(vec![1; 8]), None);
    assert!(invalid(p.client.post_send(p.cqp, no_remote)));
    let inline_read = SendWr::new(2, Opcode::Read, Payload::inline(vec![0; 8]), p.remote(a));
    assert!(invalid(p.client.post_send(p.cqp, inline_read)));
    let short_cas = SendWr::new(
        3,
        Opcode::CompareSwap {
            compare: 0,
            swap: 1,
        },
        Payload::Sge(p.local(p.lmr.addr, 4)),
        p.remote(a),
    );
    assert!(invalid(p.client.post_send(p.cqp, short_cas)));
    let mut flush_with_data = p.flush(4, a, 64, PERSIST);
    flush_with_data.local = Payload::inline(vec![1]);
    assert!(invalid(p.client.post_send(p.cqp, flush_with_data)));
    // Nothing was queued: the sim has nothing to do.
    assert!(p.run_ops(vec![]).is_empty());
    assert_eq!(p.server_stats().requests_executed, 0);
}

#[test]
fn post_send_on_an_unconnected_qp_is_refused() {
    let p = Pair::new(0, cfg("DMP+noDDIO+PM-RQWRB"));
    let cq = p.client.create_cq(16).unwrap();
    let qp = p
        .client
        .create_qp(p.cpd, cq, cq, QpAttr::default())
        .unwrap();
    assert_eq!(
        p.client.post_send(qp, p.write(1, p.mr.addr, vec![1; 8])),
        Err(VerbsError::QpState(qp, "INIT"))
    );
    assert!(matches!(
        p.client
            .post_send(QpNum(999), p.write(1, p.mr.addr, vec![1; 8])),
        Err(VerbsError::NoSuch(_))
    ));
}

/// A send queue of depth 4 takes four requests and refuses the fifth with QueueFull;
/// once they completed there is room again.
#[test]
fn a_full_send_queue_refuses_more_requests() {
    let p = Opts::new(0, cfg("DMP+noDDIO+PM-RQWRB"))
        .client_attr(QpAttr {
            sq_depth: 4,
            ..QpAttr::default()
        })
        .build();
    let a = p.mr.addr;
    for i in 0..4u64 {
        p.client
            .post_send(p.cqp, p.write(i, a + i * 8, vec![i as u8 + 1; 8]))
            .unwrap();
    }
    assert_eq!(
        p.client.post_send(p.cqp, p.write(4, a, vec![9; 8])),
        Err(VerbsError::QueueFull("send", p.cqp, 4))
    );
    let wcs = p.run_ops(vec![]);
    assert_eq!(wcs.len(), 4);
    let wcs = p.run_ops(vec![p.write(5, a + 64, vec![5; 8])]);
    assert_eq!(statuses(&wcs), vec![(5, WcStatus::Success)]);
    assert_eq!(p.pm(a, 8), vec![1; 8], "the refused WRITE did nothing");
}

/// An unsignaled request still holds its send-queue slot until the RNIC is done with it.
#[test]
fn unsignaled_requests_occupy_the_send_queue_until_done() {
    let p = Opts::new(0, cfg("DMP+noDDIO+PM-RQWRB"))
        .client_attr(QpAttr {
            sq_depth: 2,
            ..QpAttr::default()
        })
        .build();
    let a = p.mr.addr;
    p.post_all(vec![
        p.write(0, a, vec![1; 8]).signaled(false),
        p.write(1, a + 8, vec![2; 8]).signaled(false),
    ]);
    assert!(matches!(
        p.client.post_send(p.cqp, p.write(2, a, vec![3; 8])),
        Err(VerbsError::QueueFull(..))
    ));
    p.sim.run();
    p.client
        .post_send(p.cqp, p.write(3, a + 16, vec![3; 8]))
        .unwrap();
}
