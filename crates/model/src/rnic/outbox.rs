//! The RNIC's outbox: the packets it made and the runtime has not taken yet, each with the
//! earliest time it may leave, in the order they were made.

use crate::time::Instant;
use crate::wire::Packet;
use std::collections::VecDeque;

/// Packets waiting for the runtime, first made first. It also knows whether their
/// departure times never decrease from front to back (a request's leave in posting order,
/// one serialized after the other; a response may be made for a later time than a request
/// made after it): a runtime that sends by departure time may then take the front without
/// looking further, where it lies.
#[derive(Debug)]
pub(super) struct Outbox {
    q: VecDeque<(Instant, Packet)>,
    /// No packet leaves earlier than one made before it. Conservative: once broken, it
    /// holds again only when the outbox is empty.
    in_order: bool,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            q: VecDeque::new(),
            in_order: true,
        }
    }
}

impl Outbox {
    pub(super) fn push(&mut self, at: Instant, pkt: Packet) {
        if self.q.back().is_some_and(|(b, _)| *b > at) {
            self.in_order = false;
        }
        self.q.push_back((at, pkt));
    }

    pub(super) fn pop(&mut self) -> Option<(Instant, Packet)> {
        let p = self.q.pop_front();
        self.emptied();
        p
    }

    /// The front packet, and whether the outbox is in departure order.
    pub(super) fn front(&self) -> Option<(Instant, &Packet, bool)> {
        self.q.front().map(|(t, p)| (*t, p, self.in_order))
    }

    /// Drops the front packet where it lies.
    pub(super) fn discard_front(&mut self) {
        self.q.pop_front();
        self.emptied();
    }

    pub(super) fn retain(&mut self, keep: impl FnMut(&(Instant, Packet)) -> bool) {
        self.q.retain(keep);
        self.emptied();
    }

    pub(super) fn clear(&mut self) {
        self.q.clear();
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
    use crate::verbs::QpNum;
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
        assert!(o
            .front()
            .is_some_and(|(at, p, ordered)| at == t(10) && p.psn == 0 && ordered));
        // A packet made later that leaves earlier: the front is no longer known to be first.
        o.push(t(15), pkt(3));
        assert!(o.front().is_some_and(|(_, _, ordered)| !ordered));
        o.discard_front();
        assert_eq!(o.pop().map(|(_, p)| p.psn), Some(1));
        assert!(o.front().is_some_and(|(_, _, ordered)| !ordered));
        o.pop();
        o.pop();
        assert!(o.front().is_none());
        // Emptied, it is in order again.
        o.push(t(5), pkt(4));
        assert!(o.front().is_some_and(|(_, _, ordered)| ordered));
    }
}
