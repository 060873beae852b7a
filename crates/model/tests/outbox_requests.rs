//! A reliable connection's WRITE without immediate data waits in the RNIC's outbox as a
//! reference to its work request and is built (or encoded where it lies) when the runtime
//! takes it. These tests
//! check that what the runtime gets is the packet the request stands for, however it takes
//! it, and also when the send queue drops the request before it is taken.

use remora_model::hierarchy::Space;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{QpAttr, Rnic, Tx};
use remora_model::time::Instant;
use remora_model::verbs::*;
use remora_model::wire::{Body, Packet, WriteRef};

/// A requester connected to QP 1 of node 2, with a DRAM region, and the remote address
/// and key it writes to.
fn requester() -> (Rnic, QpNum, Remote) {
    let mut rnic = Rnic::new(
        1,
        "DMP+noDDIO+PM-RQWRB".parse().unwrap(),
        &LatencyProfile::default_profile(),
        Prng::from_seed(9),
    );
    let pd = rnic.alloc_pd();
    let a = rnic.alloc(Space::Dram, 1 << 12, 4096);
    rnic.reg_mr(pd, Space::Dram, a, 1 << 12, Access::ALL)
        .unwrap();
    let cq = rnic.create_cq(1024).unwrap();
    let qp = rnic.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    rnic.connect(qp, 2, QpNum(1)).unwrap();
    let remote = Remote {
        addr: 0x10_0000,
        rkey: 77,
    };
    (rnic, qp, remote)
}

/// A run of requests of several kinds, each with its own payload.
fn post_mix(rnic: &mut Rnic, qp: QpNum, remote: Remote) {
    let now = Instant::from_nanos(100);
    for i in 0..40u64 {
        let data: Vec<u8> = (0..(i as usize % 70) + 1)
            .map(|j| (i + j as u64) as u8)
            .collect();
        let at = Remote {
            addr: remote.addr + i * 64,
            ..remote
        };
        let (op, remote) = match i % 5 {
            0 | 1 => (Opcode::Write, Some(at)),
            2 => (Opcode::WriteWithImm(i as u32), Some(at)),
            3 => (Opcode::Send, None),
            _ => (Opcode::Write, Some(at)),
        };
        let wr = SendWr::new(i, op, Payload::inline(data), remote).signaled(i % 7 == 0);
        rnic.post_send(now, qp, wr).unwrap();
    }
    rnic.process_doorbells(now);
}

/// A requester (see [`requester`]) with [`post_mix`]'s requests in its outbox; every one
/// made this way holds the same packets.
fn posted() -> (Rnic, QpNum, Remote) {
    let (mut rnic, qp, remote) = requester();
    post_mix(&mut rnic, qp, remote);
    (rnic, qp, remote)
}

/// Everything the outbox holds, as `poll_transmit` gives it.
fn polled(rnic: &mut Rnic) -> Vec<(Instant, Packet)> {
    std::iter::from_fn(|| rnic.poll_transmit()).collect()
}

/// Everything the outbox holds, as a runtime that encodes in place takes it.
fn peeked(rnic: &mut Rnic) -> Vec<(Instant, Packet)> {
    let mut out = Vec::new();
    while let Some((at, _)) = rnic.next_departure() {
        let p = match rnic.peek_transmit().unwrap() {
            Tx::Packet(p) => p.clone(),
            Tx::Write(w) => w.to_packet(),
        };
        out.push((at, p));
        rnic.discard_transmit();
    }
    out
}

#[test]
fn a_request_taken_where_it_lies_is_the_packet_it_stands_for() {
    let ((mut a, _, remote), (mut b, _, _)) = (posted(), posted());
    let (by_poll, by_peek) = (polled(&mut a), peeked(&mut b));
    assert_eq!(by_poll.len(), 40);
    assert_eq!(by_poll, by_peek);
    // Each WRITE carries its own payload (not another request's).
    for (i, (_, p)) in by_poll.iter().enumerate() {
        let len = (i % 70) + 1;
        let want: Vec<u8> = (0..len).map(|j| (i + j) as u8).collect();
        match &p.body {
            Body::Write { data, addr, .. } => {
                assert_eq!(&data[..], &want[..], "request {i}");
                assert_eq!(*addr, remote.addr + i as u64 * 64);
            }
            Body::Send { data, .. } => assert_eq!(&data[..], &want[..], "request {i}"),
            other => panic!("request {i}: {other:?}"),
        }
        assert_eq!(p.psn, by_poll[0].1.psn.wrapping_add(i as u32));
    }
    // A WRITE without immediate data is shown where it lies.
    let (c, _, _) = posted();
    match c.peek_transmit().unwrap() {
        Tx::Write(w) => assert_eq!(Some(w), WriteRef::of(&by_poll[0].1)),
        Tx::Packet(p) => panic!("a WRITE made whole before it was taken: {p:?}"),
    }
}

#[test]
fn a_request_its_send_queue_dropped_before_it_was_taken_still_leaves_whole() {
    let ((mut a, qp, _), (mut b, _, _)) = (posted(), posted());
    // The QP fails while every request is still in the outbox: the send queue completes
    // and drops them all (flushed), and the outbox must have made their packets whole.
    a.fail_qp(Instant::from_nanos(200), qp).unwrap();
    let mut wcs = Vec::new();
    while let Some(wc) = a.poll_one(CqId(0)) {
        wcs.push(wc);
    }
    assert!(
        wcs.iter().all(|wc| wc.status == WcStatus::WrFlushErr),
        "{wcs:?}"
    );
    assert_eq!(peeked(&mut a), polled(&mut b));
}
