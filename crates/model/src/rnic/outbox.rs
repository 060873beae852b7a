//! The RNIC's outbox: the packets it made and the runtime has not taken yet, each with the
//! earliest time it may leave, in the order they were made. A reliable connection's WRITE
//! without immediate data is held as a reference to its work request, which stays in the
//! send queue until it is acknowledged: the packet is built (or, by a runtime, encoded)
//! from it when taken, so a streamed WRITE's payload is not copied into a packet that is
//! only encoded and dropped.

use crate::time::Instant;
use crate::verbs::QpNum;
use crate::wire::{Packet, Psn};
use std::collections::VecDeque;

/// What the outbox holds for one packet.
#[derive(Debug)]
pub(super) enum Out {
    /// A packet made whole (responses, other requests, and WRITEs that may leave the send
    /// queue before they are taken: UC/UD, iWARP).
    Packet(Packet),
    /// WRITE `psn` of reliable connection `qp`, asking for an acknowledgement or not:
    /// built from its work request when taken (`Rnic::request_packet`). Before the send
    /// queue drops a request that is still referred to here, the outbox makes its packet
    /// whole (`Rnic::retire`).
    Request { qp: QpNum, psn: Psn, ack_req: bool },
}

impl Out {
    /// The sending QP.
    pub(super) fn src_qp(&self) -> QpNum {
        match self {
            Out::Packet(p) => p.src_qp,
            Out::Request { qp, .. } => *qp,
        }
    }
}

/// Packets waiting for the runtime, first made first. It also knows whether their
/// departure times never decrease from front to back (a request's leave in posting order,
/// one serialized after the other; a response may be made for a later time than a request
/// made after it): a runtime that sends by departure time may then take the front without
/// looking further, where it lies.
#[derive(Debug)]
pub(super) struct Outbox {
    q: VecDeque<(Instant, Out)>,
    /// No packet leaves earlier than one made before it. Conservative: once broken, it
    /// holds again only when the outbox is empty.
    in_order: bool,
    /// [`Out::Request`] entries held (none: the send queue drops requests freely).
    requests: usize,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            q: VecDeque::new(),
            in_order: true,
            requests: 0,
        }
    }
}

impl Outbox {
    pub(super) fn push(&mut self, at: Instant, pkt: Packet) {
        self.push_out(at, Out::Packet(pkt));
    }

    /// A reliable connection's request, built from its work request when taken.
    pub(super) fn push_request(&mut self, at: Instant, qp: QpNum, psn: Psn, ack_req: bool) {
        self.requests += 1;
        self.push_out(at, Out::Request { qp, psn, ack_req });
    }

    fn push_out(&mut self, at: Instant, out: Out) {
        if self.q.back().is_some_and(|(b, _)| *b > at) {
            self.in_order = false;
        }
        self.q.push_back((at, out));
    }

    #[inline]
    pub(super) fn pop(&mut self) -> Option<(Instant, Out)> {
        let p = self.q.pop_front();
        if let Some((_, Out::Request { .. })) = p {
            self.requests -= 1;
        }
        self.emptied();
        p
    }

    /// The front entry, and whether the outbox is in departure order.
    pub(super) fn front(&self) -> Option<(Instant, &Out, bool)> {
        self.q.front().map(|(t, p)| (*t, p, self.in_order))
    }

    /// Drops the front entry where it lies.
    pub(super) fn discard_front(&mut self) {
        self.pop();
    }

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&(Instant, Out)) -> bool) {
        self.q.retain(|e| keep(e));
        self.requests = self
            .q
            .iter()
            .filter(|(_, o)| matches!(o, Out::Request { .. }))
            .count();
        self.emptied();
    }

    /// Whether it holds a request by reference ([`Out::Request`]).
    #[inline]
    pub(super) fn holds_requests(&self) -> bool {
        self.requests > 0
    }

    /// Makes whole every request of `qp` that `build` builds a packet for (those the send
    /// queue is about to drop); nothing to look at while no request is held.
    pub(super) fn make_whole(
        &mut self,
        qp: QpNum,
        mut build: impl FnMut(Psn, bool) -> Option<Packet>,
    ) {
        if self.requests == 0 {
            return;
        }
        for (_, o) in self.q.iter_mut() {
            if let Out::Request {
                qp: q,
                psn,
                ack_req,
            } = *o
            {
                if q == qp {
                    if let Some(p) = build(psn, ack_req) {
                        *o = Out::Packet(p);
                        self.requests -= 1;
                    }
                }
            }
        }
    }

    pub(super) fn clear(&mut self) {
        self.q.clear();
        self.requests = 0;
        self.emptied();
    }

    fn emptied(&mut self) {
        if self.q.is_empty() {
            self.in_order = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Body;

    fn pkt(psn: u32) -> Packet {
        Packet {
            src: 0,
            dst: 1,
            src_qp: QpNum(1),
            dst_qp: QpNum(1),
            psn,
            body: Body::Ack,
        }
    }

    #[test]
    fn the_outbox_knows_whether_its_front_is_the_earliest_packet() {
        let mut o = Outbox::default();
        let t = Instant::from_nanos;
        o.push(t(10), pkt(0));
        o.push(t(10), pkt(1));
        o.push(t(20), pkt(2));
        assert!(o.front().is_some_and(|(at, p, ordered)| at == t(10)
            && matches!(p, Out::Packet(p) if p.psn == 0)
            && ordered));
        // A packet made later that leaves earlier: the front is no longer known to be first.
        o.push(t(15), pkt(3));
        assert!(o.front().is_some_and(|(_, _, ordered)| !ordered));
        o.discard_front();
        assert!(matches!(o.pop(), Some((_, Out::Packet(p))) if p.psn == 1));
        assert!(o.front().is_some_and(|(_, _, ordered)| !ordered));
        o.pop();
        o.pop();
        assert!(o.front().is_none());
        // Emptied, it is in order again.
        o.push(t(5), pkt(4));
        assert!(o.front().is_some_and(|(_, _, ordered)| ordered));
    }
}
