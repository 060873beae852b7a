//! Remote access violations (bad rkey, out of bounds, missing rights, misaligned atomics,
//! another PD, a deregistered MR): RemAccessErr, memory untouched, other QPs unaffected.

use super::*;

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
