//! Error paths of the verbs: remote access violations (RemAccessErr, memory untouched, the
//! QP flushed, other QPs unaffected), local protection and length errors, requests that
//! `ibv_post_send` refuses at once, receive-side errors, and a server that loses power
//! while requests are outstanding (RetryExcErr after the ACK timeout, no hang).

mod common;

use common::*;
use proptest::prelude::*;
use remora_model::rnic::Objects;
use remora_model::time::{Duration, Instant};
use remora_sim::{CrashAt, FaultPlan};
use remora_verbs::*;

const PERSIST: FlushPlacement = FlushPlacement::Persistence;
const VISIBLE: FlushPlacement = FlushPlacement::Visibility;

fn statuses(wcs: &[(WorkCompletion, Instant)]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|(wc, _)| (wc.wr_id, wc.status)).collect()
}

/// Another PM region of the server, 4 KiB, registered with `access` in `pd`.
fn extra_mr(p: &Pair, pd: PdId, access: Access) -> MrInfo {
    let addr = p.server.alloc(Space::Pm, 4096, 4096);
    p.server.reg_mr(pd, Space::Pm, addr, 4096, access).unwrap()
}

fn at_mr(mr: &MrInfo, off: u64) -> Option<Remote> {
    Some(Remote {
        addr: mr.addr + off,
        rkey: mr.rkey,
    })
}

/// Checks that `p`'s first connection works no longer and that a second connection to
/// the same server does.
fn other_qps_keep_working(p: &Pair) {
    assert!(
        matches!(
            p.client.post_send(p.cqp, p.write(50, p.mr.addr, vec![1; 8])),
            Err(VerbsError::QpState(q, "ERROR")) if q == p.cqp
        ),
        "the failed QP is in the error state"
    );
    let (qp2, cq2, _, _) = p.second_connection();
    let a = p.mr.addr + 3 * 4096;
    let data = pattern(128, 0x3c);
    let l = p.lmr.addr + 8192;
    p.client
        .post_send(qp2, p.write(60, a, data.clone()).signaled(false))
        .unwrap();
    p.client.post_send(qp2, p.read(61, a, 128, l)).unwrap();
    let wcs = collect(&p.sim, &p.client, cq2);
    p.sim.run();
    assert_eq!(
        statuses(&wcs.borrow()),
        vec![(61, WcStatus::Success)],
        "another QP on the same server still works"
    );
    assert_eq!(p.client_bytes(l, 128), data);
    assert_eq!(p.pm(a, 128), data);
}

// ================================================================ remote access violations

struct Violation {
    name: &'static str,
    /// Builds the offending request and names the server PM bytes it targets.
    make: fn(&Pair) -> (SendWr, u64, usize),
    status: WcStatus,
}

fn violations() -> Vec<Violation> {
    use WcStatus::RemAccessErr as E;
    vec![
        Violation {
            name: "WRITE with a bad rkey",
            make: |p| {
                let mut wr = p.write(1, p.mr.addr + 256, pattern(64, 1));
                wr.remote = Some(Remote {
                    addr: p.mr.addr + 256,
                    rkey: p.mr.rkey + 1000,
                });
                (wr, p.mr.addr + 256, 64)
            },
            status: E,
        },
        Violation {
            name: "WRITE past the end of the MR",
            make: |p| {
                let a = p.mr.addr + PM_LEN - 32;
                (p.write(1, a, pattern(64, 1)), a, 32)
            },
            status: E,
        },
        Violation {
            name: "WRITE starting before the MR",
            make: |p| {
                let x = extra_mr(p, p.spd, Access::ALL);
                let wr = SendWr::new(1, Opcode::Write, Payload::inline(vec![9; 16]), None);
                let wr = SendWr {
                    remote: Some(Remote {
                        addr: x.addr - 8,
                        rkey: x.rkey,
                    }),
                    ..wr
                };
                (wr, x.addr - 8, 16)
            },
            status: E,
        },
        Violation {
            name: "READ past the end of the MR",
            make: |p| {
                let a = p.mr.addr + PM_LEN - 64;
                (p.read(1, a, 128, p.lmr.addr), a, 64)
            },
            status: E,
        },
        Violation {
            name: "WRITE without REMOTE_WRITE",
            make: |p| {
                let x = extra_mr(p, p.spd, Access::REMOTE_READ | Access::REMOTE_ATOMIC);
                let wr = SendWr::new(1, Opcode::Write, Payload::inline(vec![9; 64]), at_mr(&x, 0));
                (wr, x.addr, 64)
            },
            status: E,
        },
        Violation {
            name: "WRITE_WITH_IMM without REMOTE_WRITE",
            make: |p| {
                let x = extra_mr(p, p.spd, Access::REMOTE_READ);
                let op = Opcode::WriteWithImm(5);
                let wr = SendWr::new(1, op, Payload::inline(vec![9; 64]), at_mr(&x, 0));
                (wr, x.addr, 64)
            },
            status: E,
        },
        Violation {
            name: "ATOMIC WRITE without REMOTE_WRITE",
            make: |p| {
                let x = extra_mr(p, p.spd, Access::REMOTE_READ | Access::REMOTE_ATOMIC);
                let op = Opcode::AtomicWrite { value: 77 };
                (SendWr::new(1, op, Payload::None, at_mr(&x, 8)), x.addr, 64)
            },
            status: E,
        },
        Violation {
            name: "READ without REMOTE_READ",
            make: |p| {
                let x = extra_mr(p, p.spd, Access::REMOTE_WRITE | Access::REMOTE_ATOMIC);
                let sge = Payload::Sge(p.local(p.lmr.addr, 64));
                (SendWr::new(1, Opcode::Read, sge, at_mr(&x, 0)), x.addr, 64)
            },
            status: E,
        },
        Violation {
            name: "CAS without REMOTE_ATOMIC",
            make: |p| {
                let x = extra_mr(p, p.spd, Access::REMOTE_READ | Access::REMOTE_WRITE);
                let op = Opcode::CompareSwap {
                    compare: 0,
                    swap: 1,
                };
                let sge = Payload::Sge(p.local(p.lmr.addr, 8));
                (SendWr::new(1, op, sge, at_mr(&x, 16)), x.addr, 64)
            },
            status: E,
        },
        Violation {
            name: "FETCH_ADD without REMOTE_ATOMIC",
            make: |p| {
                let x = extra_mr(p, p.spd, Access::REMOTE_READ | Access::REMOTE_WRITE);
                let op = Opcode::FetchAdd { add: 1 };
                let sge = Payload::Sge(p.local(p.lmr.addr, 8));
                (SendWr::new(1, op, sge, at_mr(&x, 16)), x.addr, 64)
            },
            status: E,
        },
        Violation {
            name: "FLUSH(persistence) without FLUSH_PERSISTENT",
            make: |p| {
                let acc = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::FLUSH_GLOBAL;
                let x = extra_mr(p, p.spd, acc);
                let op = Opcode::Flush {
                    placement: PERSIST,
                    len: 64,
                };
                (SendWr::new(1, op, Payload::None, at_mr(&x, 0)), x.addr, 64)
            },
            status: E,
        },
        Violation {
            name: "FLUSH(visibility) without FLUSH_GLOBAL",
            make: |p| {
                let acc = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::FLUSH_PERSISTENT;
                let x = extra_mr(p, p.spd, acc);
                let op = Opcode::Flush {
                    placement: VISIBLE,
                    len: 64,
                };
                (SendWr::new(1, op, Payload::None, at_mr(&x, 0)), x.addr, 64)
            },
            status: E,
        },
        Violation {
            name: "misaligned CAS",
            make: |p| {
                let a = p.mr.addr + 1024;
                (p.cas(1, a + 4, 0, 1, p.lmr.addr), a, 16)
            },
            status: E,
        },
        Violation {
            name: "misaligned FETCH_ADD",
            make: |p| {
                let a = p.mr.addr + 1024;
                (p.faa(1, a + 2, 1, p.lmr.addr), a, 16)
            },
            status: E,
        },
        Violation {
            name: "misaligned ATOMIC WRITE",
            make: |p| {
                let a = p.mr.addr + 1024;
                (p.atomic_write(1, a + 4, u64::MAX), a, 16)
            },
            status: E,
        },
        Violation {
            name: "MR of another protection domain",
            make: |p| {
                let pd2 = p.server.alloc_pd().unwrap();
                let x = extra_mr(p, pd2, Access::ALL);
                let wr = SendWr::new(1, Opcode::Write, Payload::inline(vec![9; 64]), at_mr(&x, 0));
                (wr, x.addr, 64)
            },
            status: E,
        },
        Violation {
            name: "deregistered MR",
            make: |p| {
                let x = extra_mr(p, p.spd, Access::ALL);
                let wr = SendWr::new(1, Opcode::Write, Payload::inline(vec![9; 64]), at_mr(&x, 0));
                p.sim
                    .with_rnic(p.server.id(), |r, _| r.dereg_mr(x.rkey))
                    .unwrap();
                (wr, x.addr, 64)
            },
            status: E,
        },
    ]
}

/// Every remote access violation completes with RemAccessErr at the requester (signaled
/// or not), leaves the target memory as it was, flushes every later request of the QP
/// (which do not execute either), and leaves other QPs of the server working. An earlier
/// WRITE in the same batch takes effect.
#[test]
fn remote_access_violations_fail_without_touching_memory() {
    for v in violations() {
        for signaled in [true, false] {
            let p = Pair::new(0, cfg("DMP+DDIO+PM-RQWRB"));
            let (bad, target, tlen) = (v.make)(&p);
            let before = pattern(tlen, 0xe1);
            p.server.store(Space::Pm, target, &before);
            let local_before = pattern(256, 0xd2);
            p.client.store(Space::Dram, p.lmr.addr, &local_before);
            let (h, g) = (p.mr.addr + 8192, p.mr.addr + 12288);
            let wcs = p.run_ops(vec![
                p.write(0, h, pattern(64, 0x11)),
                bad.signaled(signaled),
                p.write(2, g, pattern(64, 0x22)).signaled(false),
                p.read(3, g, 64, p.lmr.addr + 4096),
            ]);
            assert_eq!(
                statuses(&wcs),
                vec![
                    (0, WcStatus::Success),
                    (1, v.status),
                    (2, WcStatus::WrFlushErr),
                    (3, WcStatus::WrFlushErr)
                ],
                "{} (signaled {signaled})",
                v.name
            );
            assert_eq!(p.pm(target, tlen), before, "{}: target changed", v.name);
            assert_eq!(p.pm(h, 64), pattern(64, 0x11), "{}: earlier WRITE", v.name);
            assert_eq!(
                p.pm(g, 64),
                vec![0; 64],
                "{}: flushed WRITE executed",
                v.name
            );
            assert_eq!(
                p.client_bytes(p.lmr.addr, 256),
                local_before,
                "{}: local buffer changed",
                v.name
            );
            if signaled {
                other_qps_keep_working(&p);
            }
        }
    }
}

/// Requests posted before a failing one complete normally (IBTA: the responder handles
/// requests in PSN order, and a NAK acknowledges every earlier request). Here a READ or
/// CAS waits at the responder behind an earlier FLUSH when the request after it is refused.
#[test]
fn requests_before_a_failing_one_complete_normally() {
    for with_cas in [false, true] {
        let p = Pair::new(0, cfg("DMP+noDDIO+PM-RQWRB"));
        let a = p.mr.addr + 64;
        p.server.store(Space::Pm, a, &41u64.to_le_bytes());
        let second = if with_cas {
            p.cas(2, a, 41, 42, p.lmr.addr)
        } else {
            p.read(2, a, 8, p.lmr.addr)
        };
        let mut bad = p.write(3, a + 64, vec![1; 8]);
        bad.remote = Some(Remote {
            addr: a + 64,
            rkey: p.mr.rkey ^ 0xffff,
        });
        let wcs = p.run_ops(vec![p.flush(1, a, 8, PERSIST), second, bad]);
        assert_eq!(
            statuses(&wcs),
            vec![
                (1, WcStatus::Success),
                (2, WcStatus::Success),
                (3, WcStatus::RemAccessErr)
            ],
            "cas {with_cas}: the request before the failing one completes normally"
        );
        assert_eq!(u64_at(&p.client_bytes(p.lmr.addr, 8)), 41);
        let server_now = u64_at(&p.pm(a, 8));
        assert_eq!(server_now, if with_cas { 42 } else { 41 });
    }
}

/// Without a request waiting at the responder, the READ before a failing WRITE does
/// complete normally: its response leaves the responder before the NAK.
#[test]
fn a_read_before_a_failing_write_completes_normally() {
    for with_cas in [false, true] {
        let p = Pair::new(0, cfg("DMP+noDDIO+PM-RQWRB"));
        let a = p.mr.addr + 64;
        p.server.store(Space::Pm, a, &41u64.to_le_bytes());
        let first = if with_cas {
            p.cas(1, a, 41, 42, p.lmr.addr)
        } else {
            p.read(1, a, 8, p.lmr.addr)
        };
        let mut bad = p.write(2, a + 64, vec![1; 8]);
        bad.remote = Some(Remote {
            addr: a + 64,
            rkey: p.mr.rkey ^ 0xffff,
        });
        let wcs = p.run_ops(vec![first, bad]);
        assert_eq!(
            statuses(&wcs),
            vec![(1, WcStatus::Success), (2, WcStatus::RemAccessErr)],
            "cas {with_cas}"
        );
        assert_eq!(u64_at(&p.client_bytes(p.lmr.addr, 8)), 41);
        assert_eq!(u64_at(&p.pm(a, 8)), if with_cas { 42 } else { 41 });
    }
}

/// On iWARP a posted WRITE completes before the responder checks it; when the responder
/// then refuses it, the requester's QP must still learn of it (RDMAP Terminate): later
/// requests may not "succeed" without ever executing.
#[test]
fn an_iwarp_access_error_is_not_silently_lost() {
    let p = Opts::new(0, cfg("DMP+noDDIO+PM-RQWRB"))
        .client(cfg("DMP+noDDIO+PM-RQWRB@iwarp"))
        .build();
    let a = p.mr.addr + 512;
    let data = pattern(64, 0x44);
    let mut bad = p.write(1, a, vec![1; 8]);
    bad.remote = Some(Remote {
        addr: a,
        rkey: p.mr.rkey + 7,
    });
    let good = p.write(2, a, data.clone());
    let (c, cq, qp) = (p.client.clone(), p.ccq, p.cqp);
    let (first, posted, second) = p
        .sim
        .block_on(Instant::NEVER, async move {
            c.post_send(qp, bad).unwrap();
            let first = next_completion(&c, cq).await.status;
            // Long after the NAK came back.
            c.sleep(Duration::from_micros(20)).await;
            let posted = c.post_send(qp, good);
            let second = match posted {
                Ok(()) => Some(next_completion(&c, cq).await.status),
                Err(_) => None,
            };
            (first, posted, second)
        })
        .unwrap();
    p.sim.run();
    let landed = p.pm(a, 64) == data;
    assert!(
        first != WcStatus::Success
            || posted.is_err()
            || second != Some(WcStatus::Success)
            || landed,
        "first {first:?}, later post {posted:?} completed {second:?}, but its data never \
         reached the server"
    );
}

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

// ================================================================ receive-side errors

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

// ================================================================ server crash and timeouts

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

// ================================================================ property

#[derive(Clone, Debug)]
enum Bad {
    WriteRkey,
    WriteOob,
    ReadOob,
    CasMisaligned,
    AwMisaligned,
    FaaRkey,
}

#[derive(Clone, Debug)]
enum After {
    Write(u64, bool),
    Read(u64),
    Cas(u64),
    Faa(u64),
    Flush,
    AtomicWrite(u64),
    Send(bool),
}

fn bad() -> impl Strategy<Value = Bad> {
    prop_oneof![
        Just(Bad::WriteRkey),
        Just(Bad::WriteOob),
        Just(Bad::ReadOob),
        Just(Bad::CasMisaligned),
        Just(Bad::AwMisaligned),
        Just(Bad::FaaRkey),
    ]
}

fn after() -> impl Strategy<Value = After> {
    prop_oneof![
        (0..8u64, any::<bool>()).prop_map(|(s, sig)| After::Write(s, sig)),
        (0..8u64).prop_map(After::Read),
        (0..8u64).prop_map(After::Cas),
        (0..8u64).prop_map(After::Faa),
        Just(After::Flush),
        (0..8u64).prop_map(After::AtomicWrite),
        any::<bool>().prop_map(After::Send),
    ]
}

fn prop_config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(prop_config())]

    /// Posted WRITEs, one remote access violation, then any requests: the WRITEs before
    /// it take effect (signaled ones complete successfully, in order), the violation
    /// completes with RemAccessErr whether signaled or not, every later request completes
    /// exactly once with WrFlushErr whether signaled or not, and none of them executes.
    #[test]
    fn a_violation_flushes_everything_behind_it(
        before in prop::collection::vec((0..8u64, 1..=64u64, any::<bool>()), 0..8),
        bad in bad(),
        bad_signaled in any::<bool>(),
        later in prop::collection::vec(after(), 0..10),
        name in prop::sample::select(vec![
            "DMP+DDIO+PM-RQWRB", "DMP+noDDIO+PM-RQWRB", "MHP+DDIO+PM-RQWRB", "WSP+noDDIO+PM-RQWRB@roce",
        ]),
        seed in 0..1000u64,
    ) {
        let p = Pair::new(seed, cfg(name));
        let area = p.mr.addr + 4096;
        let mut model = vec![0u8; 1024];
        let mut wrs = Vec::new();
        let mut expect = Vec::new();
        for (i, &(slot, len, signaled)) in before.iter().enumerate() {
            let d = pattern(len as usize, i as u8 + 1);
            model[(slot * 64) as usize..(slot * 64 + len) as usize].copy_from_slice(&d);
            wrs.push(p.write(i as u64, area + slot * 64, d).signaled(signaled));
            if signaled {
                expect.push((i as u64, WcStatus::Success));
            }
        }
        let id = 100;
        let wrong = Some(Remote { addr: area, rkey: p.mr.rkey.wrapping_add(77) });
        let wr = match bad {
            Bad::WriteRkey => SendWr { remote: wrong, ..p.write(id, area, vec![0xee; 32]) },
            Bad::WriteOob => p.write(id, p.mr.addr + PM_LEN - 16, vec![0xee; 32]),
            Bad::ReadOob => p.read(id, p.mr.addr + PM_LEN - 16, 32, p.lmr.addr),
            Bad::CasMisaligned => p.cas(id, area + 4, 0, u64::MAX, p.lmr.addr),
            Bad::AwMisaligned => p.atomic_write(id, area + 12, u64::MAX),
            Bad::FaaRkey => SendWr { remote: wrong, ..p.faa(id, area, 1, p.lmr.addr) },
        };
        wrs.push(wr.signaled(bad_signaled));
        expect.push((id, WcStatus::RemAccessErr));
        for (k, a) in later.iter().enumerate() {
            let id = 200 + k as u64;
            let l = p.lmr.addr + 4096 + k as u64 * 64;
            let wr = match *a {
                After::Write(s, sig) => p.write(id, area + s * 64, vec![0xaa; 64]).signaled(sig),
                After::Read(s) => p.read(id, area + s * 64, 64, l),
                After::Cas(s) => p.cas(id, area + s * 64, 0, u64::MAX, l),
                After::Faa(s) => p.faa(id, area + s * 64, 1, l),
                After::Flush => p.flush(id, area, 1024, PERSIST),
                After::AtomicWrite(s) => p.atomic_write(id, area + s * 64, u64::MAX),
                After::Send(sig) => p.send(id, vec![0xaa; 8]).signaled(sig),
            };
            wrs.push(wr);
            expect.push((id, WcStatus::WrFlushErr));
        }
        p.server.post_recv(p.sqp, p.recv(0, 0, 64)).unwrap();
        let local_before = pattern(64, 0x42);
        p.client.store(Space::Dram, p.lmr.addr, &local_before);
        let wcs = p.run_ops(wrs);
        prop_assert_eq!(statuses(&wcs), expect);
        prop_assert_eq!(p.pm(area, 1024), model);
        prop_assert_eq!(p.pm(p.mr.addr + PM_LEN - 16, 16), vec![0; 16]);
        prop_assert_eq!(p.client_bytes(p.lmr.addr, 64), local_before);
        prop_assert_eq!(p.server_bytes(Space::Dram, p.rmr.addr, 8), vec![0; 8]);
    }
}

// ================================================================ teardown

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
