//! What a peer sends cannot stop a node: a response of the wrong kind fails only its QP
//! (`BadRespErr`), a full completion queue loses completions and fails the QP they were
//! for instead of panicking, and a READ longer than the node's largest message is refused
//! with a NAK, as is a request posted beyond it. (A soft RNIC server runs one node for all
//! its clients: a panic in the model would stop every connection.)

use remora_model::hierarchy::Space;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{MrInfo, QpAttr, Rnic};
use remora_model::time::{Duration, Instant};
use remora_model::verbs::*;
use remora_model::wire::{Body, NakCode, Packet, PACKET_OVERHEAD};

const A: NodeId = 1;
const B: NodeId = 2;
const REGION: u64 = 1 << 16;

struct Node {
    rnic: Rnic,
    qp: QpNum,
    cq: CqId,
    mr: MrInfo,
}

fn node(id: NodeId, cq_depth: usize) -> Node {
    let mut rnic = Rnic::new(
        id,
        "DMP+noDDIO+PM-RQWRB".parse().unwrap(),
        &LatencyProfile::default_profile(),
        Prng::from_seed(id as u64),
    );
    let pd = rnic.alloc_pd();
    let a = rnic.alloc(Space::Pm, REGION, 4096);
    let mr = rnic.reg_mr(pd, Space::Pm, a, REGION, Access::ALL).unwrap();
    let cq = rnic.create_cq(cq_depth).unwrap();
    let qp = rnic.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    Node { rnic, qp, cq, mr }
}

fn pair(a_cq: usize) -> (Node, Node) {
    let mut a = node(A, a_cq);
    let mut b = node(B, 64);
    a.rnic.connect(a.qp, B, b.qp).unwrap();
    b.rnic.connect(b.qp, A, a.qp).unwrap();
    (a, b)
}

fn sent(n: &mut Node, now: Instant) -> Vec<Packet> {
    n.rnic.process_doorbells(now);
    std::iter::from_fn(|| n.rnic.poll_transmit().map(|(_, p)| p)).collect()
}

fn completions(n: &mut Node) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    n.rnic.poll_cq(n.cq, usize::MAX, &mut out);
    out
}

/// Posts an 8-byte READ of `b`'s region into `a`'s (work request 1) and returns its
/// request as it left `a`.
fn post_read(a: &mut Node, b: &Node, t: Instant) -> Packet {
    let sge = Sge {
        addr: a.mr.addr,
        len: 8,
        lkey: a.mr.lkey,
    };
    let remote = Remote {
        addr: b.mr.addr,
        rkey: b.mr.rkey,
    };
    let read = SendWr::new(1, Opcode::Read, Payload::Sge(sge), Some(remote));
    a.rnic.post_send(t, a.qp, read).unwrap();
    sent(a, t).pop().unwrap()
}

/// The completions `n`'s CQ holds, as (work request id, status).
fn outcomes(n: &mut Node) -> Vec<(u64, WcStatus)> {
    completions(n).iter().map(|c| (c.wr_id, c.status)).collect()
}

/// The first 8 bytes of `n`'s region, as a load at `at` sees them (where READs land).
fn region_head(n: &mut Node, at: Instant) -> [u8; 8] {
    let mut got = [0u8; 8];
    n.rnic.cpu_load(at, Space::Pm, n.mr.addr, &mut got);
    got
}

/// Runs `n`'s timers until nothing is due before `until`.
fn settle(n: &mut Node, until: Instant) {
    while let Some(t) = n.rnic.poll_timeout().filter(|&t| t <= until) {
        n.rnic.handle_timeout(t);
    }
}

/// A response for the request's PSN with `body`, as the peer would address it.
fn answer(req: &Packet, body: Body) -> Packet {
    Packet {
        src: req.dst,
        dst: req.src,
        src_qp: req.dst_qp,
        dst_qp: req.src_qp,
        psn: req.psn,
        body,
    }
}

/// A READ response, an atomic's or a FLUSH's for a SEND (and the like) fails the SEND with
/// `BadRespErr` and its QP, and nothing else happens: before, a READ or atomic response
/// for a SEND reached the code that places returned data, which panicked.
#[test]
fn a_response_of_the_wrong_kind_fails_the_request_not_the_node() {
    let wrong = [
        Body::ReadResp(remora_model::bytes::Bytes::copy_from(b"12345678")),
        Body::AtomicResp(7),
        Body::Done,
    ];
    for body in wrong {
        let (mut a, _b) = pair(64);
        let t = Instant::from_nanos(1_000);
        let wr = SendWr::new(9, Opcode::Send, Payload::inline(b"hi".to_vec()), None);
        a.rnic.post_send(t, a.qp, wr).unwrap();
        let req = sent(&mut a, t).pop().expect("the SEND left");
        a.rnic.handle_packet(t, &answer(&req, body.clone()));
        settle(&mut a, t + Duration::from_micros(10));
        assert_eq!(
            outcomes(&mut a),
            vec![(9, WcStatus::BadRespErr)],
            "{body:?}"
        );
        let next = SendWr::new(10, Opcode::Send, Payload::inline(b"x".to_vec()), None);
        assert!(
            matches!(
                a.rnic.post_send(t, a.qp, next),
                Err(VerbsError::QpState(..))
            ),
            "the QP is in the error state after {body:?}"
        );
    }
}

/// A second response for a READ already done is a duplicate: dropped, with no second
/// completion and no change to the READ's result.
#[test]
fn a_duplicate_read_response_is_dropped() {
    let (mut a, mut b) = pair(64);
    let t = Instant::from_nanos(1_000);
    let req = post_read(&mut a, &b, t);
    let resp = answer(
        &req,
        Body::ReadResp(remora_model::bytes::Bytes::copy_from(&[5u8; 8])),
    );
    b.rnic.handle_packet(t, &req); // the responder sees it too (nothing else is checked)
    a.rnic.handle_packet(t, &resp);
    let dup = answer(
        &req,
        Body::ReadResp(remora_model::bytes::Bytes::copy_from(&[6u8; 8])),
    );
    a.rnic.handle_packet(t, &dup);
    settle(&mut a, t + Duration::from_micros(10));
    let wcs = completions(&mut a);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(region_head(&mut a, t + Duration::from_micros(10)), [5u8; 8]);
}

/// A CQ smaller than what its queues complete overruns when a failed connection flushes
/// every request: the completions beyond its depth are lost and counted, the QP stays in
/// the error state, and the node goes on (before, an assertion stopped it).
#[test]
fn a_full_completion_queue_loses_completions_instead_of_stopping_the_node() {
    let (mut a, _b) = pair(4);
    let t = Instant::from_nanos(1_000);
    for i in 0..10 {
        let wr = SendWr::new(i, Opcode::Send, Payload::inline(vec![1; 8]), None).signaled(false);
        a.rnic.post_send(t, a.qp, wr).unwrap();
    }
    sent(&mut a, t);
    // The peer never answers: the QP fails and flushes its ten requests into a CQ of four.
    a.rnic.fail_qp(t, a.qp).unwrap();
    settle(&mut a, t + Duration::from_millis(10_000));
    assert_eq!(completions(&mut a).len(), 4);
    assert_eq!(a.rnic.stats().cq_overruns, 6);
    // The node still serves: another QP on another CQ works.
    let pd = a.rnic.alloc_pd();
    let cq = a.rnic.create_cq(8).unwrap();
    let qp = a.rnic.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    a.rnic.connect(qp, B, QpNum(7)).unwrap();
    let wr = SendWr::new(1, Opcode::Send, Payload::inline(vec![1; 8]), None);
    a.rnic.post_send(t, qp, wr).unwrap();
}

/// A completion lost to a full CQ while the QP works moves the QP to the error state, so
/// its application learns of it from its next request.
#[test]
fn an_overrun_fails_the_queue_pair_it_was_for() {
    let (mut a, mut b) = pair(2);
    let t = Instant::from_nanos(1_000);
    for i in 0..3 {
        let wr = SendWr::new(i, Opcode::Send, Payload::inline(vec![1; 8]), None);
        a.rnic.post_send(t, a.qp, wr).unwrap();
    }
    for i in 0..3 {
        let sge = Sge {
            addr: b.mr.addr + i * 64,
            len: 64,
            lkey: b.mr.lkey,
        };
        b.rnic.post_recv(t, b.qp, RecvWr { wr_id: i, sge }).unwrap();
    }
    let reqs = sent(&mut a, t);
    for r in &reqs {
        b.rnic.handle_packet(t, r);
    }
    settle(&mut b, t + Duration::from_micros(50));
    let acks: Vec<Packet> = std::iter::from_fn(|| b.rnic.poll_transmit().map(|(_, p)| p)).collect();
    let later = t + Duration::from_micros(50);
    for p in &acks {
        a.rnic.handle_packet(later, p);
    }
    settle(&mut a, later + Duration::from_micros(50));
    assert_eq!(a.rnic.stats().cq_overruns, 1);
    assert_eq!(completions(&mut a).len(), 2);
    let next = SendWr::new(9, Opcode::Send, Payload::inline(b"x".to_vec()), None);
    assert!(matches!(
        a.rnic.post_send(later, a.qp, next),
        Err(VerbsError::QpState(..))
    ));
}

/// A completion lost to a full CQ fails the QP it was for, not another: when the
/// application destroys that QP before the RNIC next runs its timers (it gave up on the
/// connection) and a new connection's QP takes the number, the new QP works. Before the
/// fix the overrun was remembered by QP number only, and the new QP was moved to the
/// error state at the next `handle_timeout` (found by review).
#[test]
fn an_overrun_does_not_fail_a_new_queue_pair_that_took_the_number() {
    let (mut a, mut b) = pair(1);
    let t = Instant::from_nanos(1_000);
    let remote = Remote {
        addr: b.mr.addr,
        rkey: b.mr.rkey,
    };
    for i in 0..2 {
        let wr = SendWr::new(i, Opcode::Write, Payload::inline(vec![7; 8]), Some(remote));
        a.rnic.post_send(t, a.qp, wr).unwrap();
    }
    for r in sent(&mut a, t) {
        b.rnic.handle_packet(t + Duration::from_micros(2), &r);
    }
    let later = t + Duration::from_micros(10);
    settle(&mut b, later);
    // The ACK completes both WRITEs at once: the second completion finds the CQ full.
    for p in sent(&mut b, later) {
        a.rnic.handle_packet(later, &p);
    }
    assert_eq!(a.rnic.stats().cq_overruns, 1);
    let old = a.qp;
    a.rnic.destroy_qp(later, old).unwrap();
    let pd = a.rnic.alloc_pd();
    let cq = a.rnic.create_cq(16).unwrap();
    let qp = a.rnic.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    assert_eq!(qp, old, "the new QP takes the destroyed one's number");
    a.rnic.connect(qp, B, QpNum(9)).unwrap();
    settle(&mut a, later + Duration::from_micros(10));
    let wr = SendWr::new(5, Opcode::Send, Payload::inline(vec![1; 8]), None);
    a.rnic
        .post_send(later + Duration::from_micros(10), qp, wr)
        .expect("the new connection's QP is not failed by the old one's overrun");
}

/// With a largest message set (the soft wire's frame bound), a READ beyond it is answered
/// with NAK invalid request (not a response the peer's wire would refuse), and a request
/// posted beyond it is refused at once.
#[test]
fn a_message_beyond_the_largest_is_refused() {
    let (mut a, mut b) = pair(64);
    b.rnic.set_max_message(1024);
    a.rnic.set_max_message(1024);
    let t = Instant::from_nanos(1_000);
    let read = Packet {
        src: A,
        dst: B,
        src_qp: a.qp,
        dst_qp: b.qp,
        psn: 0,
        body: Body::Read {
            addr: b.mr.addr,
            rkey: b.mr.rkey,
            len: 1025,
        },
    };
    b.rnic.handle_packet(t, &read);
    settle(&mut b, t + Duration::from_micros(50));
    let out: Vec<Packet> = std::iter::from_fn(|| b.rnic.poll_transmit().map(|(_, p)| p)).collect();
    assert_eq!(
        out.iter().map(|p| &p.body).collect::<Vec<_>>(),
        vec![&Body::Nak(NakCode::InvalidRequest)]
    );
    let wr = SendWr::new(1, Opcode::Send, Payload::inline(vec![0; 1025]), None);
    assert!(matches!(
        a.rnic.post_send(t, a.qp, wr),
        Err(VerbsError::TooLong {
            len: 1025,
            max: 1024,
            ..
        })
    ));
    let wr = SendWr::new(2, Opcode::Send, Payload::inline(vec![0; 1024]), None);
    a.rnic.post_send(t, a.qp, wr).unwrap();
}

/// A request the node refuses (a key it never registered) fails the QP, and the node's own
/// requests still outstanding on it complete with an error, as on every other way into the
/// error state: an application waiting for one of them learns of the failure. (They used
/// to be flushed without a completion, and a client waiting for its FLUSH waited for ever.)
#[test]
fn a_refused_request_completes_the_nodes_own_outstanding_requests() {
    let (mut a, b) = pair(64);
    let t = Instant::from_nanos(1_000);
    let remote = Remote {
        addr: b.mr.addr,
        rkey: b.mr.rkey,
    };
    let wr = SendWr::new(7, Opcode::Write, Payload::inline(vec![1; 8]), Some(remote));
    a.rnic.post_send(t, a.qp, wr.signaled(true)).unwrap();
    assert_eq!(sent(&mut a, t).len(), 1, "the WRITE left, unacknowledged");
    let bad = Packet {
        src: B,
        dst: A,
        src_qp: b.qp,
        dst_qp: a.qp,
        psn: 0,
        body: Body::Write {
            addr: a.mr.addr,
            rkey: a.mr.rkey ^ 0x5a5a,
            data: remora_model::bytes::Bytes::copy_from(&[9u8; 8]),
            imm: None,
            ack_req: true,
        },
    };
    a.rnic.handle_packet(t, &bad);
    settle(&mut a, t + Duration::from_micros(50));
    let naks: Vec<Body> = std::iter::from_fn(|| a.rnic.poll_transmit().map(|(_, p)| p.body))
        .filter(|b| matches!(b, Body::Nak(_)))
        .collect();
    assert_eq!(naks, vec![Body::Nak(NakCode::RemoteAccess)]);
    assert_eq!(outcomes(&mut a), vec![(7, WcStatus::WrFlushErr)]);
}

/// A READ's response carries exactly the bytes asked for. A shorter one (it completed the
/// READ with success, the buffer's tail never read) or a longer one fails the READ with
/// `BadRespErr`, and the buffer keeps what it held.
#[test]
fn a_read_response_of_another_length_fails_the_read() {
    for n in [0usize, 7, 9] {
        let (mut a, b) = pair(64);
        let t = Instant::from_nanos(1_000);
        let req = post_read(&mut a, &b, t);
        let resp = answer(
            &req,
            Body::ReadResp(remora_model::bytes::Bytes::copy_from(&vec![5u8; n])),
        );
        a.rnic.handle_packet(t, &resp);
        settle(&mut a, t + Duration::from_micros(10));
        assert_eq!(
            outcomes(&mut a),
            vec![(1, WcStatus::BadRespErr)],
            "{n} bytes"
        );
        let got = region_head(&mut a, t + Duration::from_micros(10));
        assert_eq!(got, [0u8; 8], "{n} bytes");
    }
}

#[test]
fn a_peer_that_queues_more_non_posted_requests_than_a_send_queue_holds_gets_a_nak() {
    // FETCH_ADDs arriving at one instant: the first executes, each later one waits for the
    // one before (an atomic takes the data path's time), and what they hold is counted for
    // their sender. No requester within a send queue of the default depth has more waiting;
    // one more than MAX_WAITING_NP is refused with NAK invalid request, and the queue goes
    // with the failed QP.
    use remora_model::rnic::MAX_WAITING_NP;
    let (a, mut b) = pair(64);
    let t = Instant::ZERO + Duration::from_micros(1);
    let (a_qp, b_qp, b_mr) = (a.qp, b.qp, b.mr);
    let fetch_add = |psn: u32| Packet {
        src: A,
        dst: B,
        src_qp: a_qp,
        dst_qp: b_qp,
        psn,
        body: Body::Atomic {
            addr: b_mr.addr,
            rkey: b_mr.rkey,
            compare: None,
            operand: 1,
        },
    };
    for psn in 0..=MAX_WAITING_NP as u32 {
        b.rnic.handle_packet(t, &fetch_add(psn));
    }
    let each = b.rnic.waiting_bytes(A) / MAX_WAITING_NP as u64;
    assert_eq!(b.rnic.waiting_bytes(A), MAX_WAITING_NP as u64 * each);
    assert_eq!(each, PACKET_OVERHEAD + 8, "a packet's head and its operand");
    assert_eq!(b.rnic.waiting_bytes(B), 0, "counted for the sender only");
    assert!(sent(&mut b, t)
        .iter()
        .all(|p| !matches!(p.body, Body::Nak(_))));
    b.rnic
        .handle_packet(t, &fetch_add(MAX_WAITING_NP as u32 + 1));
    let naks: Vec<Packet> = std::iter::from_fn(|| b.rnic.poll_transmit().map(|(_, p)| p))
        .filter(|p| matches!(p.body, Body::Nak(_)))
        .collect();
    // The NAK waits for the requests ahead of it: they execute first (IBTA: in order).
    assert!(naks.is_empty(), "{naks:?}");
    settle(&mut b, t + Duration::from_millis(10_000));
    let naks: Vec<Packet> = std::iter::from_fn(|| b.rnic.poll_transmit().map(|(_, p)| p))
        .filter(|p| matches!(p.body, Body::Nak(_)))
        .collect();
    assert_eq!(naks.len(), 1);
    assert_eq!(naks[0].body, Body::Nak(NakCode::InvalidRequest));
    assert_eq!(naks[0].psn, MAX_WAITING_NP as u32 + 1);
    assert_eq!(b.rnic.waiting_bytes(A), 0, "nothing waits any more");
}
