//! RDMA operation ordering and completion semantics (seed 000 §2 "RDMA Operation
//! Ordering", §3.1.3, and the iWARP paragraph of §3.2), observed through the simulator:
//! completions and their times at the client, what a CPU load on the server sees and when,
//! the server's crash image, and the requester RNIC's transmit events.

mod common;

use common::*;
use proptest::prelude::*;
use remora_model::rnic::{EventKind, NodeEvent};
use remora_model::time::{Duration, Instant};
use remora_verbs::*;
use std::cell::RefCell;
use std::rc::Rc;

const PERSIST: FlushPlacement = FlushPlacement::Persistence;
const VISIBLE: FlushPlacement = FlushPlacement::Visibility;

fn ids(wcs: &[(WorkCompletion, Instant)]) -> Vec<u64> {
    wcs.iter().map(|(wc, _)| wc.wr_id).collect()
}

fn all_ok(wcs: &[(WorkCompletion, Instant)]) {
    for (wc, t) in wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?} at {t}");
    }
}

fn time_of(wcs: &[(WorkCompletion, Instant)], id: u64) -> Instant {
    wcs.iter()
        .find(|(wc, _)| wc.wr_id == id)
        .unwrap_or_else(|| panic!("no completion for wr {id} in {wcs:?}"))
        .1
}

fn transmitted(events: &[NodeEvent], id: u64) -> Instant {
    events
        .iter()
        .find(|e| e.kind == EventKind::Transmitted && e.id == id)
        .unwrap_or_else(|| panic!("wr {id} was never transmitted"))
        .at
}

// ================================================================ a. posted ops in order

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

// ================================================================ b. non-posted after all

/// A READ after pipelined WRITEs returns their data (non-posted operations are ordered
/// after every earlier operation), whatever the server configuration and memory.
#[test]
fn a_read_after_pipelined_writes_returns_the_written_data() {
    for name in [
        "DMP+DDIO+PM-RQWRB",
        "DMP+noDDIO+PM-RQWRB",
        "MHP+DDIO+PM-RQWRB",
        "WSP+noDDIO+PM-RQWRB",
    ] {
        for seed in 0..3 {
            let p = Pair::new(seed, cfg(name));
            let a = p.mr.addr + 512;
            let mut expect = Vec::new();
            let mut wrs = Vec::new();
            for i in 0..16u64 {
                let d = pattern(256, i as u8);
                expect.extend_from_slice(&d);
                wrs.push(p.write(i, a + i * 256, d).signaled(false));
            }
            let l = p.lmr.addr;
            wrs.push(p.read(100, a, 4096, l));
            let wcs = p.run_ops(wrs);
            assert_eq!(ids(&wcs), vec![100]);
            all_ok(&wcs);
            assert_eq!(wcs[0].0.opcode, WcOpcode::RdmaRead);
            assert_eq!(wcs[0].0.byte_len, 4096);
            assert!(p.client_bytes(l, 4096) == expect, "{name} seed {seed}");
        }
    }
}

/// A READ immediately after a single large WRITE to the same bytes returns the new data,
/// even though the WRITE is far from visible when the READ reaches the server.
#[test]
fn a_read_right_behind_a_large_write_sees_all_of_it() {
    for seed in 0..4 {
        let p = Pair::new(seed, cfg("DMP+DDIO+PM-RQWRB"));
        let a = p.mr.addr;
        let big = pattern(32 * 1024, 3);
        let l = p.lmr.addr;
        let wcs = p.run_ops(vec![
            p.write(1, a, big.clone()).signaled(false),
            p.read(2, a + 32 * 1024 - 64, 64, l),
        ]);
        assert_eq!(ids(&wcs), vec![2]);
        all_ok(&wcs);
        assert_eq!(p.client_bytes(l, 64), big[big.len() - 64..].to_vec());
    }
}

/// CAS, FETCH_ADD, ATOMIC WRITE and READ after WRITEs see the WRITEs' values.
#[test]
fn atomics_after_writes_see_the_written_values() {
    for seed in 0..4 {
        let p = Pair::new(seed, cfg("DMP+noDDIO+PM-RQWRB"));
        let a = p.mr.addr + 1024;
        let l = p.lmr.addr;
        let w = |id, off: u64, v: u64| p.write(id, a + off, v.to_le_bytes().to_vec());
        let wcs = p.run_ops(vec![
            w(1, 0, 0x1111).signaled(false),
            p.cas(2, a, 0x1111, 0x2222, l),
            w(3, 8, 0x2000).signaled(false),
            p.faa(4, a + 8, 5, l + 8),
            w(5, 16, 0x3333).signaled(false),
            p.cas(6, a + 16, 0x1111, 0x9999, l + 16),
            w(7, 24, 0x4444).signaled(false),
            p.atomic_write(8, a + 24, 0x6666),
            p.read(9, a, 32, l + 64),
        ]);
        assert_eq!(ids(&wcs), vec![2, 4, 6, 8, 9], "seed {seed}");
        all_ok(&wcs);
        let opcodes: Vec<WcOpcode> = wcs.iter().map(|(wc, _)| wc.opcode).collect();
        assert_eq!(
            opcodes,
            vec![
                WcOpcode::CompSwap,
                WcOpcode::FetchAdd,
                WcOpcode::CompSwap,
                WcOpcode::AtomicWrite,
                WcOpcode::RdmaRead
            ]
        );
        let res = p.client_bytes(l, 24);
        assert_eq!(u64_at(&res[0..]), 0x1111, "CAS returns the WRITE's value");
        assert_eq!(
            u64_at(&res[8..]),
            0x2000,
            "FETCH_ADD returns the WRITE's value"
        );
        assert_eq!(
            u64_at(&res[16..]),
            0x3333,
            "failed CAS returns the WRITE's value"
        );
        let read = p.client_bytes(l + 64, 32);
        let words: Vec<u64> = read.chunks(8).map(u64_at).collect();
        assert_eq!(words, vec![0x2222, 0x2005, 0x3333, 0x6666], "seed {seed}");
        let srv: Vec<u64> = p.pm(a, 32).chunks(8).map(u64_at).collect();
        assert_eq!(srv, words);
    }
}

/// At a FLUSH's completion every earlier WRITE is visible at the server; with persistence
/// placement, and where the RNIC can reach the persistence domain, also durable.
#[test]
fn a_flush_completion_implies_earlier_writes_are_visible() {
    for (name, placement, durable) in [
        ("DMP+DDIO+PM-RQWRB", VISIBLE, false),
        ("DMP+noDDIO+PM-RQWRB", PERSIST, true),
        ("MHP+DDIO+PM-RQWRB", PERSIST, true),
        ("WSP+DDIO+PM-RQWRB", PERSIST, true),
    ] {
        for seed in 0..3 {
            let p = Pair::new(seed, cfg(name));
            let a = p.mr.addr;
            let data = pattern(4096, 9);
            let (c, sim, sid, cq, qp) =
                (p.client.clone(), p.sim.clone(), p.server.id(), p.ccq, p.cqp);
            let wrs = vec![
                p.write(1, a, data.clone()).signaled(false),
                p.flush(2, a, 4096, placement),
            ];
            let d = data.clone();
            let (wc, vis, dur) = p
                .sim
                .block_on(Instant::NEVER, async move {
                    for wr in wrs {
                        c.post_send(qp, wr).unwrap();
                    }
                    let wc = next_completion(&c, cq).await;
                    let vis = peek(&sim, sid, Space::Pm, a, 4096) == d;
                    let dur =
                        sim.with_rnic(sid, |r, now| r.crash_image(now).read_vec(a, 4096)) == d;
                    (wc, vis, dur)
                })
                .unwrap();
            assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
            assert_eq!(wc.opcode, WcOpcode::Flush);
            assert!(vis, "{name} seed {seed}: visible at the FLUSH completion");
            if durable {
                assert!(dur, "{name} seed {seed}: durable at the FLUSH completion");
            }
        }
    }
}

// ================================================================ c. posted may pass non-posted

struct Wfw {
    /// When the second update became visible at the server (server CPU polling).
    b_visible: Instant,
    /// Whether the first WRITE was durable at that moment.
    a_durable_then: bool,
    /// Client completions (all three signaled) with the step at which they were polled.
    wcs: Vec<(WorkCompletion, Instant)>,
    /// When the second update left the client's RNIC.
    b_sent: Instant,
}

/// WRITE(x) to A, FLUSH(A), then a second update of B, posted back to back; the
/// simulation is run in 10 ns steps with `run_until`, and after each step the server's
/// visible B and the client's CQ are inspected.
fn write_flush_then(seed: u64, second: impl Fn(&Pair, u64) -> SendWr, expect_b: &[u8]) -> Wfw {
    let p = Pair::new(seed, cfg("DMP+noDDIO+PM-RQWRB"));
    let (a, b) = (p.mr.addr, p.mr.addr + 8192);
    let x = pattern(64, 1);
    p.sim.with_rnic(p.client.id(), |r, _| r.record_events(true));
    p.post_all(vec![
        p.write(1, a, x.clone()),
        p.flush(2, a, 64, PERSIST),
        second(&p, b),
    ]);
    let step = ns(10);
    let stop = ticker(&p.sim, &p.client, step);
    let mut t = Instant::ZERO;
    let mut wcs = Vec::new();
    let mut b_visible = None;
    let mut a_durable_then = false;
    while wcs.len() < 3 || b_visible.is_none() {
        t += step;
        assert!(t < at(1_000_000), "seed {seed}: stuck: {wcs:?}");
        p.sim.run_until(t);
        assert_eq!(p.sim.now(), t, "the ticker keeps time moving");
        if b_visible.is_none() && p.pm(b, expect_b.len()) == expect_b {
            b_visible = Some(t);
            a_durable_then = p.durable(a, 64) == x;
        }
        let mut out = Vec::new();
        p.sim
            .with_rnic(p.client.id(), |r, _| r.poll_cq(p.ccq, 16, &mut out));
        wcs.extend(out.into_iter().map(|wc| (wc, t)));
    }
    stop.set(true);
    p.sim.run();
    let events = p.sim.with_rnic(p.client.id(), |r, _| r.take_events());
    assert_eq!(
        ids(&wcs),
        vec![1, 2, 3],
        "seed {seed}: completions in order"
    );
    all_ok(&wcs);
    Wfw {
        b_visible: b_visible.unwrap(),
        a_durable_then,
        wcs,
        b_sent: transmitted(&events, 3),
    }
}

/// Seed 000 §2: "posted operations can be ordered at the responder before prior
/// non-posted operations": an unfenced WRITE after a FLUSH becomes visible at the server
/// before the FLUSH's completion reaches the client, and (for some seed) while the WRITE
/// before the FLUSH is not yet persistent.
#[test]
fn an_unfenced_write_can_take_effect_before_an_earlier_flush_completes() {
    let y = pattern(64, 2);
    let (mut b_before_flush, mut b_before_a_durable) = (0, 0);
    for seed in 0..6 {
        let r = write_flush_then(seed, |p, b| p.write(3, b, y.clone()), &y);
        let flush_done = time_of(&r.wcs, 2);
        assert!(
            r.b_sent < flush_done,
            "seed {seed}: pipelined, not held back"
        );
        b_before_flush += (r.b_visible < flush_done) as u32;
        b_before_a_durable += !r.a_durable_then as u32;
    }
    // A translation miss can delay B's DMA past the FLUSH's completion, so this is a
    // "can", checked over several seeds.
    assert!(
        b_before_flush >= 3,
        "B became visible before the FLUSH completed in only {b_before_flush} of 6 runs"
    );
    assert!(
        b_before_a_durable > 0,
        "the later WRITE never became visible before the earlier one was persistent"
    );
}

/// With the fence flag the second WRITE is not even transmitted until the FLUSH
/// completed, so it becomes visible only after that, and only once A is persistent.
#[test]
fn a_fenced_write_after_a_flush_waits_for_the_flush() {
    let y = pattern(64, 2);
    for seed in 0..6 {
        let r = write_flush_then(seed, |p, b| p.write(3, b, y.clone()).fenced(true), &y);
        let flush_done = time_of(&r.wcs, 2);
        // The CQ is polled every 10 ns: the true completion time lies in the step before.
        assert!(
            r.b_sent + ns(10) >= flush_done,
            "seed {seed}: fenced WRITE sent at {} before the FLUSH completed at {flush_done}",
            r.b_sent
        );
        assert!(r.b_visible > flush_done, "seed {seed}");
        assert!(
            r.a_durable_then,
            "seed {seed}: A persistent before B visible"
        );
        let rtt = Duration::from_nanos(
            remora_model::profile::LatencyProfile::default_profile()
                .network
                .nic_rtt_ns,
        );
        assert!(
            time_of(&r.wcs, 3) >= flush_done + rtt,
            "seed {seed}: the fenced WRITE needs its own round trip after the FLUSH"
        );
    }
}

/// An ATOMIC WRITE is non-posted: ordered after the FLUSH without a fence, so A is
/// persistent before B is visible (seed 000 §2), and it is pipelined (sent before the
/// FLUSH completes).
#[test]
fn an_atomic_write_after_a_flush_is_ordered_without_a_fence() {
    let v = 0x5a5a_1234_u64;
    for seed in 0..6 {
        let r = write_flush_then(seed, |p, b| p.atomic_write(3, b, v), &v.to_le_bytes());
        let flush_done = time_of(&r.wcs, 2);
        assert!(
            r.a_durable_then,
            "seed {seed}: A persistent before B visible"
        );
        assert!(r.b_sent < flush_done, "seed {seed}: pipelined");
        assert_eq!(r.wcs[2].0.opcode, WcOpcode::AtomicWrite);
    }
}

// ================================================================ d. fence after non-posted

/// Returns (READ completion, WRITE completion, WRITE transmit time).
fn read_then_write(seed: u64, fence: bool) -> (Instant, Instant, Instant, Duration) {
    let p = Pair::new(seed, cfg("DMP+noDDIO+PM-RQWRB"));
    p.sim.with_rnic(p.client.id(), |r, _| r.record_events(true));
    let (a, b) = (p.mr.addr, p.mr.addr + 4096);
    let wcs = p.run_ops(vec![
        p.read(1, a, 64, p.lmr.addr),
        p.write(2, b, pattern(64, 4)).fenced(fence),
    ]);
    assert_eq!(ids(&wcs), vec![1, 2], "seed {seed} fence {fence}");
    all_ok(&wcs);
    assert_eq!(p.pm(b, 64), pattern(64, 4));
    let events = p.sim.with_rnic(p.client.id(), |r, _| r.take_events());
    (wcs[0].1, wcs[1].1, transmitted(&events, 2), p.rtt())
}

/// A fenced WRITE after a READ is transmitted only once the READ's result is back at
/// the requester (a round trip after the unfenced WRITE would have left), and completes
/// after the READ: its latency is the READ's round trip plus its own.
#[test]
fn a_fenced_write_waits_for_an_earlier_read() {
    for seed in 0..4 {
        let (r0, w0, tx0, rtt) = read_then_write(seed, false);
        let (r1, w1, tx1, _) = read_then_write(seed, true);
        assert_eq!(r0, r1, "seed {seed}: the fence does not slow the READ");
        assert!(tx0 < r0, "seed {seed}: unfenced WRITE is pipelined");
        assert!(
            tx1 >= tx0 + rtt,
            "seed {seed}: fenced WRITE sent at {tx1}, unfenced at {tx0}"
        );
        assert!(w1 > r1, "seed {seed}: fenced WRITE done {w1}, READ {r1}");
        assert!(w1 > w0, "seed {seed}");
        assert!(
            w1 >= Instant::ZERO + rtt.mul(2),
            "seed {seed}: two round trips in sequence, done at {w1}"
        );
    }
}

/// The fence waits only for earlier non-posted operations: after a large WRITE it
/// changes nothing.
#[test]
fn a_fence_does_not_wait_for_earlier_posted_operations() {
    let run = |fence: bool| {
        let p = Pair::new(1, cfg("DMP+noDDIO+PM-RQWRB"));
        p.sim.with_rnic(p.client.id(), |r, _| r.record_events(true));
        let wcs = p.run_ops(vec![
            p.write(1, p.mr.addr, pattern(16 * 1024, 1)),
            p.write(2, p.mr.addr + 65536, pattern(64, 2)).fenced(fence),
        ]);
        assert_eq!(ids(&wcs), vec![1, 2]);
        all_ok(&wcs);
        let events = p.sim.with_rnic(p.client.id(), |r, _| r.take_events());
        (transmitted(&events, 2), wcs[0].1, wcs[1].1)
    };
    let (tx0, _, w0) = run(false);
    let (tx1, first_done, w1) = run(true);
    assert_eq!(tx0, tx1);
    assert!(tx1 < first_done, "not held back by the posted WRITE");
    assert_eq!(w0, w1);
}

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

// ================================================================ g. receive queue and RNR

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

// ================================================================ h. FLUSH emulated by READ

/// Without native FLUSH (a legacy RNIC) a READ after the WRITEs stands in for it. Under
/// DMP without DDIO that READ makes the WRITE persistent by its completion.
#[test]
fn a_read_after_a_write_persists_it_under_dmp_without_ddio() {
    for seed in 0..6 {
        let p = Opts::new(seed, cfg("DMP+noDDIO+PM-RQWRB"))
            .client(cfg("DMP+noDDIO+PM-RQWRB,legacy"))
            .build();
        let caps = p.client.config().caps;
        assert_eq!(FlushMethod::for_caps(caps), FlushMethod::ReadAfterWrite);
        let (a, data) = (p.mr.addr, pattern(4096, seed as u8));
        let flush = FlushMethod::for_caps(caps).work_request(
            2,
            PERSIST,
            p.remote(a).unwrap(),
            4096,
            p.local(p.lmr.addr, 8),
        );
        let (wc, durable, visible) = write_then_observe(&p, data.clone(), flush);
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
        assert_eq!(wc.opcode, WcOpcode::RdmaRead);
        assert!(visible, "seed {seed}");
        assert!(durable, "seed {seed}: durable at the READ's completion");
        assert_eq!(p.client_bytes(p.lmr.addr, 8), data[..8].to_vec());
    }
}

/// Under DMP with DDIO the READ completes once the data is in the LLC, which is not
/// persistent: at the READ's completion the WRITE is visible but (for some seed) not in
/// the crash image.
#[test]
fn a_read_after_a_write_does_not_persist_it_under_dmp_with_ddio() {
    let mut lost = 0;
    for seed in 0..6 {
        let p = Opts::new(seed, cfg("DMP+DDIO+PM-RQWRB"))
            .client(cfg("DMP+DDIO+PM-RQWRB,legacy"))
            .build();
        let (a, data) = (p.mr.addr, pattern(4096, seed as u8));
        let flush = FlushMethod::ReadAfterWrite.work_request(
            2,
            PERSIST,
            p.remote(a).unwrap(),
            4096,
            p.local(p.lmr.addr, 8),
        );
        let (wc, durable, visible) = write_then_observe(&p, data, flush);
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
        assert!(visible, "seed {seed}: the READ pushed the WRITE to the LLC");
        lost += !durable as u32;
    }
    assert!(
        lost > 0,
        "the READ never left the data outside the crash image"
    );
}

/// WRITE(data) then `second` at time 0; at the second's completion returns whether the
/// data is durable and visible at the server.
fn write_then_observe(p: &Pair, data: Vec<u8>, second: SendWr) -> (WorkCompletion, bool, bool) {
    let (c, sim, sid, cq, qp) = (p.client.clone(), p.sim.clone(), p.server.id(), p.ccq, p.cqp);
    let a = p.mr.addr;
    let wrs = vec![p.write(1, a, data.clone()).signaled(false), second];
    p.sim
        .block_on(Instant::NEVER, async move {
            for wr in wrs {
                c.post_send(qp, wr).unwrap();
            }
            let wc = next_completion(&c, cq).await;
            let len = data.len();
            let dur = sim.with_rnic(sid, |r, now| r.crash_image(now).read_vec(a, len)) == data;
            let vis = peek(&sim, sid, Space::Pm, a, len) == data;
            (wc, dur, vis)
        })
        .unwrap()
}

// ================================================================ properties

const REGION: u64 = 1024;

#[derive(Clone, Debug)]
struct W {
    off: u64,
    len: u64,
    signaled: bool,
    inline: bool,
    salt: u8,
}

fn writes() -> impl Strategy<Value = Vec<W>> {
    prop::collection::vec(
        (
            0..REGION,
            1..=300u64,
            any::<bool>(),
            any::<bool>(),
            any::<u8>(),
        )
            .prop_map(|(off, len, signaled, inline, salt)| W {
                off,
                len: len.min(REGION - off),
                signaled,
                inline,
                salt,
            }),
        1..24,
    )
}

const CONFIGS: [&str; 5] = [
    "DMP+DDIO+PM-RQWRB",
    "DMP+noDDIO+PM-RQWRB",
    "MHP+noDDIO+DRAM-RQWRB",
    "WSP+DDIO+PM-RQWRB",
    "DMP+noDDIO+PM-RQWRB@iwarp",
];

fn config() -> impl Strategy<Value = &'static str> {
    prop::sample::select(CONFIGS.to_vec())
}

fn prop_config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        off: u64,
        len: u64,
        salt: u8,
    },
    WriteImm {
        off: u64,
        len: u64,
        salt: u8,
        imm: u32,
    },
    Send {
        len: u64,
        salt: u8,
        imm: Option<u32>,
    },
    ReadP {
        off: u64,
        len: u64,
    },
    ReadQ,
    Cas {
        slot: u64,
        hit: bool,
        swap: u64,
    },
    Faa {
        slot: u64,
        add: u64,
    },
    AtomicWrite {
        slot: u64,
        value: u64,
    },
    Flush {
        persist: bool,
    },
}

/// Posted writes go to region P (512 bytes); atomics to region Q (8 slots of 8 bytes):
/// P is written only by posted operations and Q only by non-posted ones, so each region
/// has an exact sequential reference.
const P_LEN: u64 = 512;
const Q_OFF: u64 = 4096;

fn op() -> impl Strategy<Value = Op> {
    let span = (0..P_LEN, 1..=96u64).prop_map(|(off, len)| (off, len.min(P_LEN - off)));
    prop_oneof![
        3 => (span.clone(), any::<u8>()).prop_map(|((off, len), salt)| Op::Write { off, len, salt }),
        1 => (span.clone(), any::<u8>(), any::<u32>())
            .prop_map(|((off, len), salt, imm)| Op::WriteImm { off, len, salt, imm }),
        1 => (1..=64u64, any::<u8>(), prop::option::of(any::<u32>()))
            .prop_map(|(len, salt, imm)| Op::Send { len, salt, imm }),
        2 => span.prop_map(|(off, len)| Op::ReadP { off, len }),
        1 => Just(Op::ReadQ),
        1 => (0..8u64, any::<bool>(), any::<u64>()).prop_map(|(slot, hit, swap)| Op::Cas { slot, hit, swap }),
        1 => (0..8u64, any::<u64>()).prop_map(|(slot, add)| Op::Faa { slot, add }),
        1 => (0..8u64, any::<u64>()).prop_map(|(slot, value)| Op::AtomicWrite { slot, value }),
        1 => any::<bool>().prop_map(|persist| Op::Flush { persist }),
    ]
}

/// A receive completion the server should see: opcode, byte_len, imm, and for a SEND the
/// payload in the buffer.
type ExpectRecv = (WcOpcode, u32, Option<u32>, Option<Vec<u8>>);

/// Appends the state after a posted write of `data` at `off`.
fn apply_p(states: &mut Vec<Vec<u8>>, off: u64, data: &[u8]) {
    let mut s = states.last().unwrap().clone();
    s[off as usize..off as usize + data.len()].copy_from_slice(data);
    states.push(s);
}

fn data_of(len: u64, salt: u8, i: usize) -> Vec<u8> {
    pattern(len as usize, salt ^ (i as u8).wrapping_mul(17))
}

proptest! {
    #![proptest_config(prop_config())]

    /// Random WRITEs (offsets, lengths, inline or SGE payloads, signaled or not) then a
    /// READ over the region: the READ returns exactly what a flat array model says, the
    /// server holds it too, and only the signaled requests complete, in posting order.
    #[test]
    fn writes_then_a_read_match_a_flat_array_model(
        ws in writes(),
        name in config(),
        seed in 0..1000u64,
    ) {
        let p = Pair::new(seed, cfg(name));
        let base = p.mr.addr + 64;
        let mut model = vec![0u8; REGION as usize];
        let mut wrs = Vec::new();
        let mut expect_ids = Vec::new();
        for (i, w) in ws.iter().enumerate() {
            let data = data_of(w.len, w.salt, i);
            model[w.off as usize..(w.off + w.len) as usize].copy_from_slice(&data);
            let mut wr = p.write(i as u64, base + w.off, data.clone()).signaled(w.signaled);
            if !w.inline {
                let src = p.lmr.addr + 4096 + i as u64 * 512;
                p.client.store(Space::Dram, src, &data);
                wr.local = Payload::Sge(p.local(src, w.len as u32));
            }
            if w.signaled {
                expect_ids.push(i as u64);
            }
            wrs.push(wr);
        }
        expect_ids.push(999);
        wrs.push(p.read(999, base, REGION as u32, p.lmr.addr));
        let wcs = p.run_ops(wrs);
        prop_assert_eq!(ids(&wcs), expect_ids);
        for (wc, _) in &wcs {
            prop_assert_eq!(wc.status, WcStatus::Success);
        }
        prop_assert_eq!(p.client_bytes(p.lmr.addr, REGION as usize), model.clone());
        prop_assert_eq!(p.pm(base, REGION as usize), model);
        prop_assert!(wcs.windows(2).all(|w| w[0].1 <= w[1].1), "completion times go forward");
    }

    /// Random mixtures of posted and non-posted operations (random signaled and fence
    /// flags; non-posted ones always signaled): every signaled request completes exactly
    /// once, successfully, in posting order; receives complete in order with their length
    /// and immediate; atomics and READs of Q return the sequential values; a READ of P
    /// returns a prefix of the posted writes that includes every earlier one; the final
    /// memory equals the sequential model.
    #[test]
    fn mixed_operations_complete_in_posting_order(
        ops in prop::collection::vec((op(), any::<bool>(), any::<bool>()), 1..32),
        name in config(),
        seed in 0..1000u64,
    ) {
        let p = Pair::new(seed, cfg(name));
        let pbase = p.mr.addr;
        let qbase = p.mr.addr + Q_OFF;
        let mut pstates = vec![vec![0u8; P_LEN as usize]];
        let mut q = [0u64; 8];
        let mut wrs = Vec::new();
        let mut expect_wcs = Vec::new();
        let mut expect_recvs: Vec<ExpectRecv> = Vec::new();
        // READs of P: (local addr, off, len, posted writes before it)
        let mut p_reads = Vec::new();
        // Exact results: (local addr, bytes)
        let mut exact = Vec::new();
        for (i, (op, signaled, fence)) in ops.iter().enumerate() {
            let id = i as u64;
            let l = p.lmr.addr + id * 1024;
            let wr = match *op {
                Op::Write { off, len, salt } => {
                    let d = data_of(len, salt, i);
                    apply_p(&mut pstates, off, &d);
                    p.write(id, pbase + off, d)
                }
                Op::WriteImm { off, len, salt, imm } => {
                    let d = data_of(len, salt, i);
                    apply_p(&mut pstates, off, &d);
                    expect_recvs.push((WcOpcode::RecvRdmaWithImm, len as u32, Some(imm), None));
                    p.write_imm(id, pbase + off, d, imm)
                }
                Op::Send { len, salt, imm } => {
                    let d = data_of(len, salt, i);
                    expect_recvs.push((WcOpcode::Recv, len as u32, imm, Some(d.clone())));
                    match imm {
                        Some(v) => p.send_imm(id, d, v),
                        None => p.send(id, d),
                    }
                }
                Op::ReadP { off, len } => {
                    p_reads.push((l, off, len, pstates.len() - 1));
                    p.read(id, pbase + off, len as u32, l)
                }
                Op::ReadQ => {
                    exact.push((l, q.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()));
                    p.read(id, qbase, 64, l)
                }
                Op::Cas { slot, hit, swap } => {
                    let old = q[slot as usize];
                    let compare = if hit { old } else { old.wrapping_add(1) };
                    if hit {
                        q[slot as usize] = swap;
                    }
                    exact.push((l, old.to_le_bytes().to_vec()));
                    p.cas(id, qbase + slot * 8, compare, swap, l)
                }
                Op::Faa { slot, add } => {
                    let old = q[slot as usize];
                    q[slot as usize] = old.wrapping_add(add);
                    exact.push((l, old.to_le_bytes().to_vec()));
                    p.faa(id, qbase + slot * 8, add, l)
                }
                Op::AtomicWrite { slot, value } => {
                    q[slot as usize] = value;
                    p.atomic_write(id, qbase + slot * 8, value)
                }
                Op::Flush { persist } => {
                    let placement = if persist { PERSIST } else { VISIBLE };
                    p.flush(id, pbase, P_LEN, placement)
                }
            };
            let non_posted = wr.opcode.is_non_posted();
            let signaled = *signaled || non_posted;
            if signaled {
                expect_wcs.push((id, WcOpcode::of(wr.opcode)));
            }
            wrs.push(wr.signaled(signaled).fenced(*fence));
        }
        for k in 0..expect_recvs.len() as u64 {
            p.server.post_recv(p.sqp, p.recv(k, k * 64, 64)).unwrap();
        }
        let recvs = collect(&p.sim, &p.server, p.scq);
        let wcs = p.run_ops(wrs);
        let got: Vec<(u64, WcOpcode)> = wcs.iter().map(|(w, _)| (w.wr_id, w.opcode)).collect();
        prop_assert_eq!(got, expect_wcs);
        for (wc, _) in &wcs {
            prop_assert_eq!(wc.status, WcStatus::Success, "{:?}", wc);
        }
        let recvs = recvs.borrow();
        prop_assert_eq!(recvs.len(), expect_recvs.len());
        for (k, ((wc, _), (opc, len, imm, payload))) in recvs.iter().zip(&expect_recvs).enumerate() {
            prop_assert_eq!(wc.wr_id, k as u64);
            prop_assert_eq!(wc.status, WcStatus::Success);
            prop_assert_eq!((wc.opcode, wc.byte_len, wc.imm), (*opc, *len, *imm));
            if let Some(d) = payload {
                let got = p.server_bytes(Space::Dram, p.rmr.addr + k as u64 * 64, d.len());
                prop_assert_eq!(&got, d);
            }
        }
        for (l, want) in &exact {
            prop_assert_eq!(&p.client_bytes(*l, want.len()), want);
        }
        for (l, off, len, before) in p_reads {
            let got = p.client_bytes(l, len as usize);
            let (o, e) = (off as usize, (off + len) as usize);
            prop_assert!(
                pstates[before..].iter().any(|s| s[o..e] == got[..]),
                "a READ of P after {} posted writes returned a state that is not a \
                 prefix including them",
                before
            );
        }
        prop_assert_eq!(&p.pm(pbase, P_LEN as usize), pstates.last().unwrap());
        let qfinal: Vec<u8> = q.iter().flat_map(|v| v.to_le_bytes()).collect();
        prop_assert_eq!(p.pm(qbase, 64), qfinal);
    }
}
