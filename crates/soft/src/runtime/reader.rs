//! What comes in from a peer: frames parsed in place and handed to the RNIC, and the
//! bound on what one peer can make this node buffer (its requests wait while the output
//! owed to it is backed up; its socket is left unread past a limit; a peer that sends
//! and never reads is closed).

use super::conn::Conn;
use super::{wall, RtNode, Wall};
use remora_exec::net::OwnedReadHalf;
use remora_model::time::Instant;
use remora_model::verbs::NodeId;
use remora_model::wire::{Frame, Packet, WireError};

/// Output pending for one peer (queued on its connection, waiting for its departure, or
/// owed by its requests the RNIC holds or has just taken) beyond which its requests wait:
/// a peer that does not read what it is sent, or that asks faster than the model's data
/// path answers, must not make this process buffer without bound (a READ asks for up to
/// a region's bytes in a 60-byte frame). Its responses are still taken, so two peers that
/// each wait for the other to read go on reading each other.
pub const BACKLOG_HIGH: u64 = 64 << 20;
/// Bytes a reader hands to the RNIC before it lets the executor look at its other sockets
/// and timers: the executor's budget counts polls, and a poll of a socket that never runs
/// dry brings 64 KiB, so one streaming peer would otherwise delay everyone else by
/// hundreds of megabytes' worth of work.
const YIELD_BYTES: usize = 256 << 10;
/// How often a reader holding a peer's requests looks again at what the RNIC owes the peer
/// (it drains with the model's time, not with a write).
const RECHECK: std::time::Duration = std::time::Duration::from_millis(1);
/// How long a reader that stopped reading a peer waits for the output to the peer to
/// shrink before it reads once more anyway: two nodes that each stopped reading the other
/// would otherwise wait for ever.
const STALL: std::time::Duration = std::time::Duration::from_millis(10);
/// Bytes of held requests, beyond twice [`HELD_HIGH`], that those reads may add before the
/// connection is closed as a peer that sends and does not read.
const HELD_SLACK: usize = 1 << 20;
/// Bytes of a peer's requests held while its output is backed up beyond which its socket
/// is no longer read until the output drains (TCP then holds the peer's sends back).
pub const HELD_HIGH: usize = 64 << 20;
/// Non-posted requests of one peer waiting in the RNIC behind an earlier one of their QP
/// beyond which its requests wait, as a link's credits hold a sender back: under WSP each
/// waiting write is held in the memory hierarchy, whose bookkeeping for a write grows with
/// how many are held (a burst of 65,536 ATOMIC WRITEs, which the RNIC's own bound lets
/// through, kept the node busy for seconds). Above a durable-RPC batch (one ATOMIC WRITE
/// per request, a thousand behind one FLUSH), so honest batches are not slowed while a
/// connection's share is its own limit; with more than 14 connections the share is below
/// a batch of 1,100, which is then paced (its requests wait for earlier ones to execute),
/// not refused.
pub const WAITING_HIGH: u64 = 4096;
/// What all of a node's connections together may have backed up, held and waiting: each
/// connection's limits are an equal share of these, or its own if that is less (see
/// [`Limits::share`]), so a node serving many peers that do not read needs no more memory
/// than one such peer may make it use, times four.
pub const NODE_FACTOR: u64 = 4;
/// A connection's share of the node's limits is never less than its own limits over this:
/// a node with very many connections still lets each make progress.
pub const SHARE_FLOOR: u64 = 64;

/// What one peer may make this node buffer before its requests wait (its output backed
/// up, its requests waiting in the RNIC) or its socket is left unread (its requests held),
/// and what all of the node's connections together may ([`RtNode::set_limits`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Output pending for one peer beyond which its requests wait ([`BACKLOG_HIGH`]).
    pub backlog: u64,
    /// Bytes of one peer's requests held beyond which its socket is not read
    /// ([`HELD_HIGH`]).
    pub held: u64,
    /// Non-posted requests of one peer waiting in the RNIC beyond which its requests
    /// wait ([`WAITING_HIGH`]).
    pub waiting: u64,
    /// All connections' backlog, held bytes and waiting requests together, each as a
    /// multiple of one connection's ([`NODE_FACTOR`]).
    pub node_factor: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            backlog: BACKLOG_HIGH,
            held: HELD_HIGH as u64,
            waiting: WAITING_HIGH,
            node_factor: NODE_FACTOR,
        }
    }
}

impl Limits {
    /// One connection's limits while `peers` connections share the node's: each its own
    /// limit, or the node's divided among them if that is less, but at least its own
    /// over [`SHARE_FLOOR`] (and at least 1).
    pub fn share(&self, peers: usize) -> Limits {
        let peers = (peers as u64).max(1);
        let part = |own: u64| {
            let node = own.saturating_mul(self.node_factor.max(1));
            (node / peers).min(own).max(own / SHARE_FLOOR).max(1)
        };
        Limits {
            backlog: part(self.backlog),
            held: part(self.held),
            waiting: part(self.waiting),
            node_factor: self.node_factor,
        }
    }
}

/// For a non-posted request, what it asks to be sent back beyond an acknowledgement (a
/// READ's length; 0 for the others, which the RNIC may queue: the backlog is looked at
/// again after each); `None` for any other frame.
#[inline]
fn non_posted_asks(frame: &Frame<'_>) -> Option<u64> {
    match frame {
        Frame::Packet(p) if p.is_non_posted() => Some(p.read_len()),
        _ => None,
    }
}

/// Whether a frame asks something of this node's responder (a write train always does).
fn frame_is_request(frame: &Frame<'_>) -> bool {
    match frame {
        Frame::Packet(p) => p.is_request(),
        Frame::WriteTrain(_) => true,
    }
}

impl RtNode {
    /// Sets what one peer, and all together, may make this node buffer ([`Limits`];
    /// [`Limits::default`] unless set). For tests, which show the mechanism with
    /// megabytes instead of a hundred.
    pub fn set_limits(&self, limits: Limits) {
        self.inner.limits.set(limits);
    }

    /// The limits of each connection now ([`Limits::share`] among the connections
    /// attached); the connection's writer wakes its reader by `conn`'s copy.
    fn limits_now(&self, conn: &Conn) -> Limits {
        let peers = self.inner.st.borrow().peers.len();
        let lim = self.inner.limits.get().share(peers);
        conn.high.set(lim.backlog);
        lim
    }

    /// Whether `peer`'s requests must wait: its backlog (with `promised`) or its requests
    /// waiting in the RNIC are over the limits.
    #[inline]
    fn over(&self, peer: NodeId, conn: &Conn, promised: u64, lim: &Limits) -> bool {
        let (bytes, requests) = self.pending(peer, conn, promised);
        bytes > lim.backlog || requests > lim.waiting
    }

    /// Whether what waits for `peer` has drained to half the limits: held requests go on.
    fn drained(&self, peer: NodeId, conn: &Conn, lim: &Limits) -> bool {
        let (bytes, requests) = self.pending(peer, conn, 0);
        bytes <= lim.backlog / 2 && requests <= lim.waiting / 2
    }

    /// Reads and handles `peer`'s frames until the connection ends (`Ok`) or a frame is
    /// malformed (the connection is closed: a byte stream cannot be resynchronised).
    ///
    /// While the peer's output is backed up (see [`BACKLOG_HIGH`]), or too many of its
    /// requests wait in the RNIC ([`WAITING_HIGH`]), its requests are held, in order, and
    /// its responses still go to the RNIC: a peer that does not read gets no more answers
    /// queued for it, and one that waits for this node to read goes on being read. The
    /// held requests go to the RNIC once both have drained to half the limit, as if the
    /// network had delayed them; past [`HELD_HIGH`] bytes of them the socket is left
    /// unread, and TCP holds the peer back. The limits are the connection's share of the
    /// node's ([`Limits::share`]), looked at again at every read.
    pub(super) async fn read_loop(
        &self,
        peer: NodeId,
        conn: &Conn,
        mut read: OwnedReadHalf,
    ) -> Result<(), WireError> {
        // Frames are parsed in place; consumed bytes are dropped once per read, not per
        // frame (a 64 KiB buffer of small frames would otherwise be shifted per frame).
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
        let mut at = 0;
        // Requests held while the output is backed up: whole frames, first come first.
        let mut held: Vec<u8> = Vec::new();
        // Bytes handled since the executor last looked at its other sockets and timers.
        let mut since_yield = 0;
        // While the socket is left unread: since when the output has not shrunk, and to what.
        let mut pause: Option<(Wall, u64)> = None;
        loop {
            // Every frame of one read arrived by the time the read returned: one clock read
            // per read, at the loop's edge, not one per frame.
            let mut arrived = None;
            let mut handled = false;
            // What the READs handed to the RNIC since the last step ask for: their
            // responses are made, but in no count yet (the step after the read moves
            // them onto the connection).
            let mut promised = 0;
            let lim = self.limits_now(conn);
            if !held.is_empty() && self.drained(peer, conn, &lim) {
                handled =
                    self.release_held(peer, conn, &lim, &mut held, &mut arrived, &mut promised);
            }
            let mut backed = !held.is_empty() || self.over(peer, conn, promised, &lim);
            while let Some(len) = Packet::frame_len(&buf[at..])
                .inspect_err(|_| self.inner.st.borrow_mut().stats.malformed += 1)?
            {
                if buf.len() - at < len {
                    break;
                }
                let bytes = &buf[at..at + len];
                let frame = Frame::parse(bytes)
                    .inspect_err(|_| self.inner.st.borrow_mut().stats.malformed += 1)?;
                at += len;
                if backed && frame_is_request(&frame) {
                    held.extend_from_slice(bytes);
                    self.inner.st.borrow_mut().stats.held_back += 1;
                    continue;
                }
                handled |= self.deliver(peer, &frame, &mut arrived);
                if let Some(asks) = non_posted_asks(&frame) {
                    promised += asks;
                    backed = self.over(peer, conn, promised, &lim);
                }
            }
            if handled {
                self.after_receive();
            }
            since_yield += at;
            buf.drain(..at);
            at = 0;
            if buf.capacity() - buf.len() < 1 << 14 {
                buf.reserve(1 << 16);
            }
            if since_yield >= YIELD_BYTES {
                // A peer whose socket never runs dry must not keep the executor from the
                // other connections and the timers (its budget counts polls, not bytes).
                since_yield = 0;
                remora_exec::yield_now().await;
            }
            // A failed socket (a reset: the peer was killed) ends the connection as its
            // orderly end does; only a malformed frame is an error.
            let n = if held.is_empty() {
                pause = None;
                read.read_buf(&mut buf).await.unwrap_or(0)
            } else {
                if self.drained(peer, conn, &lim) {
                    continue;
                }
                let owed = self.pending(peer, conn, 0).0;
                conn.peak.set(conn.peak.get().max(owed));
                // The writer wakes this once the connection's output drained (see
                // `Conn::try_flush`); what the RNIC owes drains with the model's time,
                // looked at again every `RECHECK`.
                conn.backed.set(true);
                let wake =
                    remora_exec::first(conn.drained.notified(), remora_exec::time::sleep(RECHECK));
                let bytes = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
                // The share stops the reading; only the connection's own limit closes it:
                // requests it held under a larger share are no fault of the peer's (other
                // connections arriving shrink the share).
                let own = bytes(self.inner.limits.get().held);
                if held.len() < bytes(lim.held) {
                    pause = None;
                } else if held.len() >= own.saturating_mul(2).saturating_add(HELD_SLACK) {
                    // Past the trickle's allowance too: a peer that goes on sending
                    // requests and takes none of their answers is broken or hostile.
                    eprintln!(
                        "peer {peer}: {} bytes of its requests held and {owed} bytes owed to \
                         it, which it does not read; connection closed",
                        held.len()
                    );
                    // What it did not take is dropped with the connection.
                    let _ = conn.write.shutdown_both();
                    return Ok(());
                } else {
                    // Not read until the output drains. But if the peer does the same,
                    // each waits for the other: after `STALL` without the output
                    // shrinking, one more read (its responses are taken, its requests
                    // held), which lets a peer that waits for this node to read go on.
                    let (since, was) = *pause.get_or_insert_with(|| {
                        self.inner.st.borrow_mut().stats.paused += 1;
                        (wall(), owed)
                    });
                    let stalled =
                        owed >= was && wall().nanos_since(since) >= STALL.as_nanos() as u64;
                    if owed < was || stalled {
                        // Progress, or a read about to be made: the clock starts again.
                        pause = Some((wall(), owed));
                    }
                    if !stalled {
                        wake.await;
                        continue;
                    }
                }
                match remora_exec::first(read.read_buf(&mut buf), wake).await {
                    remora_exec::Either::Left(n) => n.unwrap_or(0),
                    remora_exec::Either::Right(_) => continue,
                }
            };
            if n == 0 {
                return Ok(());
            }
        }
    }

    /// What waits for `peer`, in one look at the RNIC: the output pending for it (queued on
    /// its connection, held for its departure, owed by the requests it has waiting in the
    /// RNIC ([`Rnic::waiting_bytes`](remora_model::rnic::Rnic::waiting_bytes)), and
    /// `promised` by READs handed to the RNIC since the last step), and how many of its
    /// non-posted requests wait in the RNIC.
    #[inline]
    fn pending(&self, peer: NodeId, conn: &Conn, promised: u64) -> (u64, u64) {
        let st = self.inner.st.borrow();
        let rnic = &st.rnic;
        (
            conn.backlog() + rnic.waiting_bytes(peer) + promised,
            rnic.waiting_requests(peer),
        )
    }

    /// Hands one frame of `peer`'s to the RNIC at the time its read arrived (read once, into
    /// `arrived`); false for one that did not come from the peer or is not for this node.
    #[inline]
    fn deliver(&self, peer: NodeId, frame: &Frame<'_>, arrived: &mut Option<Instant>) -> bool {
        let mut st = self.inner.st.borrow_mut();
        let (src, dst, n) = match frame {
            Frame::Packet(p) => (p.src, p.dst, 1),
            Frame::WriteTrain(t) => (t.src, t.dst, t.len() as u64),
        };
        if src != peer || dst != st.rnic.id() {
            // A peer may only speak for itself, and to this node; drop, keep the
            // connection.
            st.stats.spoofed += n;
            return false;
        }
        st.stats.received += n;
        // Never behind the model's clock (a step may have jumped it meanwhile).
        let now = match *arrived {
            Some(t) => st.model_now.max(t),
            None => *arrived.insert(self.inner.now(&mut st)),
        };
        match frame {
            Frame::Packet(pkt) => st.rnic.handle_packet(now, pkt),
            Frame::WriteTrain(train) => st.rnic.handle_write_train(now, train),
        }
        true
    }

    /// Hands the held requests to the RNIC, first held first, while the peer's output
    /// stays within the limit (counting what their READs ask for into `promised`); true if
    /// any went.
    fn release_held(
        &self,
        peer: NodeId,
        conn: &Conn,
        lim: &Limits,
        held: &mut Vec<u8>,
        arrived: &mut Option<Instant>,
        promised: &mut u64,
    ) -> bool {
        let mut at = 0;
        let mut handled = false;
        while at < held.len() && !self.over(peer, conn, *promised, lim) {
            // Each frame parsed whole when it was held.
            let len = match Packet::frame_len(&held[at..]) {
                Ok(Some(len)) if len <= held.len() - at => len,
                _ => unreachable!("a held frame is whole"),
            };
            let frame = Frame::parse(&held[at..at + len]).expect("a held frame parsed before");
            at += len;
            handled |= self.deliver(peer, &frame, arrived);
            *promised += non_posted_asks(&frame).unwrap_or(0);
        }
        held.drain(..at);
        handled
    }

    /// Acts on what a read delivered at once, without a trip through the driver task: steps
    /// the RNIC, wakes the tasks with a completion, and writes the answers if no task was
    /// woken (a woken task may answer too: then the driver coalesces, as after any step).
    /// The driver is kicked only if it has something to do: coalescing, or an earlier timer.
    fn after_receive(&self) {
        // A clock read of its own, not the frames' arrival time: everything that fell due
        // while they were handled is due in this step (an older reading would make the
        // step walk through those deadlines one by one).
        let turn = wall();
        self.step(turn);
        let woken = self.wake_cq_waiters(turn);
        let (unflushed, earlier) = {
            let st = self.inner.st.borrow();
            let earlier = st.next.is_some_and(|t| st.armed.is_none_or(|a| t < a));
            (st.unflushed, earlier)
        };
        if unflushed && woken == 0 {
            self.flush();
        }
        if unflushed && woken > 0 {
            // Before the woken tasks run: what they will not add to leaves now.
            self.start_coalescing();
        }
        if (unflushed && woken > 0) || earlier {
            // Its deadline is in `State::next`: the driver re-arms without stepping again.
            self.inner.wake_driver();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_gets_its_own_limits_or_its_share_of_the_nodes() {
        let own = Limits::default();
        // Up to the node's factor, each connection has its own limits.
        for peers in [0, 1, NODE_FACTOR as usize] {
            assert_eq!(own.share(peers), own, "{peers} connections");
        }
        // Beyond, an equal share of four connections' worth.
        let eight = own.share(8);
        assert_eq!(eight.backlog, BACKLOG_HIGH / 2);
        assert_eq!(eight.held, HELD_HIGH as u64 / 2);
        assert_eq!(eight.waiting, WAITING_HIGH / 2);
        // Never below the floor, however many.
        let many = own.share(1 << 20);
        assert_eq!(many.backlog, BACKLOG_HIGH / SHARE_FLOOR);
        assert_eq!(many.waiting, WAITING_HIGH / SHARE_FLOOR);
        // Tiny limits stay at least 1 (a limit of 0 would hold every request for ever).
        let tiny = Limits {
            backlog: 1,
            held: 1,
            waiting: 1,
            node_factor: 1,
        };
        assert_eq!(tiny.share(1000), tiny);
    }
}
