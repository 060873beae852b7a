//! Retransmission (the RNR go-back) and duplicate handling: two RNICs
//! driven by hand, packets delivered, duplicated, held back or sorted by departure (as the
//! soft runtime sends them) at will. The last three tests failed before their fixes (found
//! by review): an iWARP RNR NAK for a SEND already completed was taken and the data lost
//! silently; a NAK that fails the QP departed before an earlier READ's response, which the
//! requester then flushed although it was executed; and the RNR retry budget was reset
//! only by a plain ACK.

use remora_model::hierarchy::Space;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{MrInfo, QpAttr, Rnic};
use remora_model::time::{Duration, Instant};
use remora_model::verbs::*;
use remora_model::wire::Packet;

const A: NodeId = 1;
const B: NodeId = 2;
const REGION: u64 = 1 << 16;

struct Node {
    rnic: Rnic,
    qp: QpNum,
    cq: CqId,
    mr: MrInfo,
}

fn node(id: NodeId, config: &str) -> Node {
    let mut rnic = Rnic::new(
        id,
        config.parse().unwrap(),
        &LatencyProfile::default_profile(),
        Prng::from_seed(id as u64),
    );
    let pd = rnic.alloc_pd();
    let a = rnic.alloc(Space::Pm, REGION, 4096);
    let mr = rnic.reg_mr(pd, Space::Pm, a, REGION, Access::ALL).unwrap();
    let cq = rnic.create_cq(256).unwrap();
    let qp = rnic.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    Node { rnic, qp, cq, mr }
}

fn pair(config: &str) -> (Node, Node) {
    let mut a = node(A, config);
    let mut b = node(B, config);
    a.rnic.connect(a.qp, B, b.qp).unwrap();
    b.rnic.connect(b.qp, A, a.qp).unwrap();
    (a, b)
}

/// Everything `n` transmits by `now` (timers run first).
fn sent(n: &mut Node, now: Instant) -> Vec<Packet> {
    settle(n, now);
    n.rnic.process_doorbells(now);
    std::iter::from_fn(|| n.rnic.poll_transmit().map(|(_, p)| p)).collect()
}

fn settle(n: &mut Node, until: Instant) {
    while let Some(t) = n.rnic.poll_timeout().filter(|&t| t <= until) {
        n.rnic.handle_timeout(t);
    }
}

fn outcomes(n: &mut Node) -> Vec<(u64, WcStatus)> {
    let mut out = Vec::new();
    n.rnic.poll_cq(n.cq, usize::MAX, &mut out);
    out.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn remote(n: &Node, off: u64) -> Option<Remote> {
    Some(Remote {
        addr: n.mr.addr + off,
        rkey: n.mr.rkey,
    })
}

fn local(n: &Node, off: u64, len: u32) -> Payload {
    Payload::Sge(Sge {
        addr: n.mr.addr + off,
        len,
        lkey: n.mr.lkey,
    })
}

fn word(n: &mut Node, off: u64, at: Instant) -> u64 {
    let mut got = [0u8; 8];
    n.rnic.cpu_load(at, Space::Pm, n.mr.addr + off, &mut got);
    u64::from_le_bytes(got)
}

fn us(n: u64) -> Instant {
    Instant::from_nanos(1_000 * n)
}

/// Delivers every packet in `pkts` to `to` at `at`.
fn deliver(to: &mut Node, at: Instant, pkts: &[Packet]) {
    settle(to, at);
    for p in pkts {
        to.rnic.handle_packet(at, p);
    }
}

/// Runs both nodes, delivering each one's packets to the other 2 µs after they leave,
/// until nothing moves before `until`.
fn run(a: &mut Node, b: &mut Node, from: Instant, until: Instant) {
    let mut t = from;
    while t <= until {
        let pa = sent(a, t);
        let pb = sent(b, t);
        t += Duration::from_micros(2);
        deliver(b, t, &pa);
        deliver(a, t, &pb);
    }
}

// ------------------------------------------------------------------ sanity: duplicates

/// A FETCH_ADD request delivered twice is executed once (the duplicate is out of sequence).
#[test]
fn a_duplicated_fetch_add_is_executed_once() {
    let (mut a, mut b) = pair("DMP+noDDIO+PM-RQWRB");
    let t = us(1);
    let wr = SendWr::new(
        1,
        Opcode::FetchAdd { add: 5 },
        local(&a, 0, 8),
        remote(&b, 0),
    );
    a.rnic.post_send(t, a.qp, wr).unwrap();
    let req = sent(&mut a, t);
    deliver(&mut b, us(2), &req);
    deliver(&mut b, us(3), &req);
    run(&mut a, &mut b, us(3), us(100));
    assert_eq!(word(&mut b, 0, us(100)), 5);
    assert_eq!(outcomes(&mut a), vec![(1, WcStatus::Success)]);
}

/// A WRITE delivered again after a later WRITE to the same bytes does not roll them back.
#[test]
fn a_duplicated_write_after_a_later_write_is_not_reapplied() {
    let (mut a, mut b) = pair("DMP+noDDIO+PM-RQWRB");
    let t = us(1);
    let w1 = SendWr::new(
        1,
        Opcode::Write,
        Payload::inline(1u64.to_le_bytes().to_vec()),
        remote(&b, 0),
    );
    let w2 = SendWr::new(
        2,
        Opcode::Write,
        Payload::inline(2u64.to_le_bytes().to_vec()),
        remote(&b, 0),
    );
    a.rnic.post_send(t, a.qp, w1).unwrap();
    a.rnic.post_send(t, a.qp, w2).unwrap();
    let req = sent(&mut a, t);
    assert_eq!(req.len(), 2);
    deliver(&mut b, us(2), &req);
    deliver(&mut b, us(3), &req[..1]);
    run(&mut a, &mut b, us(3), us(100));
    assert_eq!(word(&mut b, 0, us(100)), 2);
}

// ------------------------------------------------------------------ iWARP + RNR NAK

/// On iWARP a posted request completes when the transport takes it (seed 000 §3.2), so
/// a refusal of it can only come afterwards; the model's own rule (requester.rs,
/// `handle_response`) is that such a refusal fails the connection, "never silently".
/// That rule only runs when the refused request has already left the send queue. If an
/// earlier READ is still outstanding, the refused SEND is still in the queue, marked
/// done: the RNR branch takes it, rewinds nothing (only requests not done are rewound),
/// and the QP stays in RTS while the responder waits for ever for the refused PSN:
/// the SEND, and every later request, complete with Success and are silently dropped.
#[test]
fn iwarp_rnr_nak_for_a_completed_send_behind_an_outstanding_read_is_not_silent() {
    let (mut a, mut b) = pair("DMP+noDDIO+PM-RQWRB@iwarp");
    let t = us(1);
    // READ 1 executes at once at B; READ 2 waits behind it (non-posted barrier);
    // SEND 3 finds no receive (RNR NAK, sent at once); WRITE 4 is dropped behind it.
    let r1 = SendWr::new(1, Opcode::Read, local(&a, 0, 8), remote(&b, 0));
    let r2 = SendWr::new(2, Opcode::Read, local(&a, 8, 8), remote(&b, 8));
    let s3 = SendWr::new(3, Opcode::Send, Payload::inline(b"hello".to_vec()), None);
    let w4 = SendWr::new(
        4,
        Opcode::Write,
        Payload::inline(7u64.to_le_bytes().to_vec()),
        remote(&b, 64),
    );
    for wr in [r1, r2, s3, w4] {
        a.rnic.post_send(t, a.qp, wr).unwrap();
    }
    let reqs = sent(&mut a, t);
    assert_eq!(reqs.len(), 4);
    deliver(&mut b, us(2), &reqs);
    assert_eq!(b.rnic.stats().rnr_naks, 1, "B refused the SEND");
    // B's answers in the order it made them: READ 1's response, the RNR NAK, then (once
    // READ 1's barrier passes) READ 2's response.
    let first = sent(&mut b, us(2));
    let kinds: Vec<_> = first.iter().map(|p| (p.psn, p.body.clone())).collect();
    eprintln!("B's first answers: {kinds:?}");
    deliver(&mut a, us(4), &first);
    let later = sent(&mut b, us(50));
    eprintln!(
        "B's later answers: {:?}",
        later.iter().map(|p| p.psn).collect::<Vec<_>>()
    );
    deliver(&mut a, us(52), &later);
    // Let everything run out (RNR retry timers, ack time-outs, ...).
    run(&mut a, &mut b, us(52), us(20_000));
    let got = outcomes(&mut a);
    eprintln!("A's completions: {got:?}");
    // A later WRITE after all that.
    let w5 = SendWr::new(
        5,
        Opcode::Write,
        Payload::inline(9u64.to_le_bytes().to_vec()),
        remote(&b, 128),
    );
    let posted = a.rnic.post_send(us(20_000), a.qp, w5);
    eprintln!("post of WRITE 5: {posted:?}");
    run(&mut a, &mut b, us(20_000), us(40_000));
    let got5 = outcomes(&mut a);
    eprintln!("A's completions after: {got5:?}");
    let at_b = word(&mut b, 128, us(40_000));
    eprintln!(
        "B's word at +128: {at_b}, at +64: {}",
        word(&mut b, 64, us(40_000))
    );
    // The SEND was never delivered: the application must learn of it from the SEND or a
    // later request (an error status or a QP in error), not see every request succeed
    // while the responder drops them.
    let silent = got.contains(&(3, WcStatus::Success))
        && posted.is_ok()
        && got5.contains(&(5, WcStatus::Success))
        && at_b != 9;
    assert!(
        !silent,
        "SEND 3 and WRITE 5 completed with Success, yet B never received either"
    );
}

// ------------------------------------------------------------------ NAK departs before
// an earlier request's response

/// Everything `n` transmits by `now`, with departure times.
fn sent_timed(n: &mut Node, now: Instant) -> Vec<(Instant, Packet)> {
    settle(n, now);
    n.rnic.process_doorbells(now);
    std::iter::from_fn(|| n.rnic.poll_transmit()).collect()
}

/// IBTA: a responder answers in PSN order, and the model's `nak` says a refusal behind
/// waiting non-posted requests goes out "only after they execute". But the NAK is given
/// a departure time (`now + proc`) earlier than the earlier READ's response (when its
/// DMA read is done), so a runtime that sends by departure time (the soft runtime's
/// held queue, `hold_transmitted`, sorts by it) puts the NAK first; the requester then
/// fails the QP and flushes the READ the responder executed and answered.
#[test]
fn a_nak_never_departs_before_the_response_of_an_earlier_request() {
    let mut failed = Vec::new();
    for deferred in [false, true] {
        let (mut a, mut b) = pair("DMP+noDDIO+PM-RQWRB");
        let t = us(1);
        let r1 = SendWr::new(1, Opcode::Read, local(&a, 0, 8), remote(&b, 0));
        let r2 = SendWr::new(2, Opcode::Read, local(&a, 8, 8), remote(&b, 8));
        let bad = Some(Remote {
            addr: b.mr.addr,
            rkey: 0xdead,
        });
        let w3 = SendWr::new(3, Opcode::Write, Payload::inline(vec![1u8; 8]), bad);
        a.rnic.post_send(t, a.qp, r1).unwrap();
        if deferred {
            a.rnic.post_send(t, a.qp, r2).unwrap();
        }
        a.rnic.post_send(t, a.qp, w3).unwrap();
        let reqs = sent(&mut a, t);
        deliver(&mut b, us(2), &reqs);
        let mut out = sent_timed(&mut b, us(2));
        out.extend(sent_timed(&mut b, us(50)));
        eprintln!(
            "deferred={deferred}: B's answers as made: {:?}",
            out.iter()
                .map(|(at, p)| (at.as_nanos(), p.psn, p.body.clone()))
                .collect::<Vec<_>>()
        );
        // Made in PSN order: each must not depart before the one made before it.
        let departs: Vec<_> = out.iter().map(|(at, _)| *at).collect();
        // What a runtime sending by departure time delivers.
        let mut by_departure = out.clone();
        by_departure.sort_by_key(|(at, _)| *at);
        let pkts: Vec<Packet> = by_departure.into_iter().map(|(_, p)| p).collect();
        deliver(&mut a, us(60), &pkts);
        settle(&mut a, us(100));
        let got = outcomes(&mut a);
        eprintln!("deferred={deferred}: A's completions: {got:?}");
        let reads_ok = got
            .iter()
            .filter(|(id, _)| *id != 3)
            .all(|(_, s)| *s == WcStatus::Success);
        if !(departs.windows(2).all(|w| w[0] <= w[1]) || reads_ok) {
            failed.push(format!(
                "deferred={deferred}: the NAK departs before an earlier READ's response \
                 ({departs:?}), so the READs, executed and answered, complete {got:?}"
            ));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

// ------------------------------------------------------------------ RNR retry budget

/// The RNR retry budget is per message (requester.rs: "as rxe's reset_retry_counters"),
/// reset by progress. rxe resets it on a READ response and an atomic acknowledge too
/// (`check_ack`), not only on a plain ACK: here SEND 0 used its one retry, then got
/// through, acknowledged implicitly by READ 1's response; SEND 2 is a new message and
/// must get its own retry, but the model still counts SEND 0's and fails SEND 2 with
/// `RnrRetryExcErr` at its first RNR NAK.
#[test]
fn a_read_response_after_an_rnr_retried_send_resets_the_rnr_budget() {
    let mut a = node(A, "DMP+noDDIO+PM-RQWRB");
    let mut b = node(B, "DMP+noDDIO+PM-RQWRB");
    // Recreate A's QP with rnr_retry = 1.
    a.rnic.destroy_qp(us(0), a.qp).unwrap();
    let pd = remora_model::verbs::PdId(1);
    a.qp = a
        .rnic
        .create_qp(
            pd,
            a.cq,
            a.cq,
            QpAttr {
                rnr_retry: 1,
                ..QpAttr::default()
            },
        )
        .unwrap();
    a.rnic.connect(a.qp, B, b.qp).unwrap();
    b.rnic.connect(b.qp, A, a.qp).unwrap();
    let t = us(1);
    let s0 = SendWr::new(10, Opcode::Send, Payload::inline(b"m0".to_vec()), None).signaled(false);
    let r1 = SendWr::new(11, Opcode::Read, local(&a, 0, 8), remote(&b, 0));
    let s2 = SendWr::new(12, Opcode::Send, Payload::inline(b"m2".to_vec()), None);
    for wr in [s0, r1, s2] {
        a.rnic.post_send(t, a.qp, wr).unwrap();
    }
    // Round 1: SEND 0 finds no receive.
    let reqs = sent(&mut a, t);
    deliver(&mut b, us(2), &reqs);
    assert_eq!(b.rnic.stats().rnr_naks, 1);
    // One receive for SEND 0 (none for SEND 2).
    let rsge = Sge {
        addr: b.mr.addr + 1024,
        len: 64,
        lkey: b.mr.lkey,
    };
    b.rnic
        .post_recv(
            us(2),
            b.qp,
            RecvWr {
                wr_id: 99,
                sge: rsge,
            },
        )
        .unwrap();
    run(&mut a, &mut b, us(2), us(10_000));
    let got = outcomes(&mut a);
    eprintln!(
        "A's completions: {got:?}; B's RNR NAKs: {}",
        b.rnic.stats().rnr_naks
    );
    // SEND 2 got one RNR NAK so far: with a fresh budget of 1 it is retried, not failed.
    assert!(
        !got.contains(&(12, WcStatus::RnrRetryExcErr)) || b.rnic.stats().rnr_naks > 2,
        "SEND 2 failed at its first RNR NAK: {got:?}"
    );
}
