//! One peer's TCP connection: the output the driver encodes packets into and writes at
//! the end of a step, the writer task that waits for room when the socket is full, and
//! what happens when the connection ends. What comes in on it is [`reader`](super::reader)'s.

use super::{wall, NetStats, RtNode};
use remora_exec::net::{OwnedReadHalf, OwnedWriteHalf};
use remora_exec::sync::Notify;
use remora_model::verbs::NodeId;
use remora_model::wire::{Packet, TrainTail, WriteRef};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

/// How long an ended connection's writer goes on sending what is left to a peer that does
/// not take it, before it drops it and closes the socket.
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// What a packet held for its departure counts toward its peer's backlog: its payload and
/// a frame's head (the same figure when it is held and when it leaves).
pub(super) fn held_bytes(pkt: &Packet) -> u64 {
    pkt.payload_len() + remora_model::wire::PACKET_OVERHEAD
}

/// [`State::queue`](super::State::queue) on the state's connections and counters (borrowed apart from its RNIC).
#[inline]
pub(super) fn queue_on(peers: &BTreeMap<NodeId, Rc<Conn>>, stats: &mut NetStats, pkt: &Packet) {
    to_peer(peers, stats, pkt.dst, |c| c.queue(pkt));
}

/// Queues on the connection to `dst`, counted; a peer not (or no longer) connected gets
/// nothing.
#[inline]
fn to_peer(
    peers: &BTreeMap<NodeId, Rc<Conn>>,
    stats: &mut NetStats,
    dst: NodeId,
    queue: impl FnOnce(&Conn),
) {
    if let Some(conn) = peers.get(&dst) {
        queue(conn);
        stats.sent += 1;
    }
}

/// One peer's TCP connection. The driver appends every packet of a step to `out` and
/// writes it with one non-blocking `write` at the end of the step; only when the socket's
/// buffer is full does the connection's writer task take over and wait for room.
pub(super) struct Conn {
    pub(super) out: RefCell<Vec<u8>>,
    /// The write train that ends `out`, while WRITEs may still join it.
    pub(super) train: Cell<Option<TrainTail>>,
    pub(super) write: OwnedWriteHalf,
    /// Wakes the writer task (the socket was full, or the connection is closing).
    pub(super) writer: Notify,
    pub(super) closing: Cell<bool>,
    /// A task posted a send on one of this connection's QPs (during a coalescing round).
    pub(super) posted: Cell<bool>,
    /// Whether tasks posted on this connection during the last coalescing round in which
    /// it had output waiting, so its output waits for them.
    pub(super) answers: Cell<bool>,
    /// The connection had output when the current coalescing round began.
    pub(super) in_round: Cell<bool>,
    /// Bytes of packets to this peer held for a later departure (see [`held_bytes`]).
    pub(super) later: Cell<u64>,
    /// The backlog limit of this connection's share ([`Limits::share`](super::Limits::share)),
    /// as its reader last worked it out.
    pub(super) high: Cell<u64>,
    /// The reader holds requests until the backlog is at most half of `high`; the writer
    /// then wakes it through `drained`.
    pub(super) backed: Cell<bool>,
    pub(super) drained: Notify,
    /// The most [`backlog`](Self::backlog) a write left behind.
    pub(super) peak: Cell<u64>,
}

impl Conn {
    /// Appends a due packet to the output: a WRITE without immediate data joins the write
    /// train ending the output if it is the next one of the same QP and rkey (one frame
    /// per run of WRITEs, as a doorbell batch), or starts one; anything else is a packet.
    pub(super) fn queue(&self, pkt: &Packet) {
        self.queue_frame(WriteRef::of(pkt).as_ref(), |out| pkt.emit_into(out));
    }

    /// [`queue`](Self::queue) for a WRITE without immediate data where it lies.
    pub(super) fn queue_write(&self, w: &WriteRef<'_>) {
        self.queue_frame(Some(w), |out| w.to_packet().emit_into(out));
    }

    /// Appends `write` (a WRITE that may join a train) to the train ending the output, or
    /// starts one with it; anything else, and a WRITE too long for a train, `emit`s itself
    /// as a packet.
    pub(super) fn queue_frame(
        &self,
        write: Option<&WriteRef<'_>>,
        emit: impl FnOnce(&mut Vec<u8>),
    ) {
        let mut out = self.out.borrow_mut();
        let mut train = self.train.take();
        let joined =
            write.is_some_and(|w| train.as_mut().is_some_and(|t| t.push_write(w, &mut out)));
        if !joined {
            train = write.and_then(|w| TrainTail::start_write(w, &mut out));
            if train.is_none() {
                emit(&mut out);
            }
        }
        self.train.set(train);
    }

    /// Output pending for the peer on this side of the RNIC: queued here, and held for its
    /// departure. (What the RNIC owes it besides, see `RtNode::pending`.)
    #[inline]
    pub(super) fn backlog(&self) -> u64 {
        self.out.borrow().len() as u64 + self.later.get()
    }

    /// Writes what the socket takes without blocking; true if nothing is left.
    pub(super) fn try_flush(&self) -> bool {
        let mut out = self.out.borrow_mut();
        let mut done = 0;
        while done < out.len() {
            match self.write.try_write(&out[done..]) {
                Ok(n) if n > 0 => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // A broken connection: the reader sees it too and closes the peer.
                _ => {
                    done = out.len();
                }
            }
        }
        if done > 0 {
            // What is written is gone: a train partly written is closed.
            self.train.set(None);
        }
        out.drain(..done);
        let empty = out.is_empty();
        drop(out);
        if !empty || self.backed.get() {
            self.after_short_write();
        }
        empty
    }

    /// After a write that left output behind, or while the reader holds requests: notes
    /// the backlog, and wakes the reader once it drained enough.
    #[cold]
    pub(super) fn after_short_write(&self) {
        let backlog = self.backlog();
        self.peak.set(self.peak.get().max(backlog));
        // A hint: the reader looks at the whole backlog again.
        if self.backed.get() && backlog <= self.high.get() / 2 {
            self.backed.set(false);
            self.drained.notify_waiters();
        }
    }

    /// Sends what is queued now, leaving any rest to the writer task; false if nothing was
    /// queued (no write started).
    pub(super) fn flush(&self) -> bool {
        if self.out.borrow().is_empty() {
            return false;
        }
        if !self.try_flush() {
            self.writer.notify_one();
        }
        true
    }
}

impl RtNode {
    /// Starts exchanging packets with `peer` over a TCP connection: spawns its reader and
    /// writer. When the connection ends, `on_close` runs (e.g. to fail the peer's QPs).
    pub fn attach(
        &self,
        peer: NodeId,
        read: OwnedReadHalf,
        write: OwnedWriteHalf,
        on_close: impl FnOnce(&RtNode) + 'static,
    ) {
        let conn = Rc::new(Conn {
            out: RefCell::new(Vec::with_capacity(1 << 12)),
            train: Cell::new(None),
            write,
            writer: Notify::new(),
            closing: Cell::new(false),
            posted: Cell::new(false),
            answers: Cell::new(true),
            in_round: Cell::new(false),
            later: Cell::new(0),
            high: Cell::new(self.inner.limits.get().backlog),
            backed: Cell::new(false),
            drained: Notify::new(),
            peak: Cell::new(0),
        });
        self.inner.st.borrow_mut().peers.insert(peer, conn.clone());
        remora_exec::spawn_local(write_loop(conn.clone()));
        // The connection's end runs also if the reader unwinds (a bug of the model's,
        // caught by the executor): its socket and buffers are released, and the peer's
        // QPs fail, as when the connection ends.
        let end = ConnEnd {
            node: self.clone(),
            peer,
            conn,
            on_close: Some(Box::new(on_close)),
        };
        remora_exec::spawn_local(async move {
            if let Err(e) = end.node.read_loop(peer, &end.conn, read).await {
                eprintln!("peer {peer}: {e}; connection closed");
            }
            drop(end);
        });
    }

    /// Whether a connection to `peer` is attached and has not ended.
    pub fn attached(&self, peer: NodeId) -> bool {
        self.inner.st.borrow().peers.contains_key(&peer)
    }

    /// Ends the connection to `peer` from this side: what its socket takes now is
    /// written, then the connection is shut down in both directions (the peer sees its
    /// end, the reader stops), and the `on_close` given to [`attach`](Self::attach) does
    /// not run. For a peer whose QP failed: a connection that can carry nothing more
    /// must not keep the server's socket and buffers. False if the connection had ended
    /// already.
    pub fn detach(&self, peer: NodeId) -> bool {
        let conn = self.inner.st.borrow_mut().peers.remove(&peer);
        let Some(conn) = conn else { return false };
        conn.closing.set(true);
        conn.try_flush();
        let _ = conn.write.shutdown_both();
        conn.writer.notify_one();
        true
    }
}

/// The end of an attached connection (see [`RtNode::attach`]), run when its reader
/// stops or unwinds: the connection leaves the node's peers, its writer finishes, and
/// `on_close` runs, unless [`RtNode::detach`] ended the connection first.
struct ConnEnd {
    node: RtNode,
    peer: NodeId,
    conn: Rc<Conn>,
    on_close: Option<OnClose>,
}

/// What runs when an attached connection ends (see [`RtNode::attach`]).
type OnClose = Box<dyn FnOnce(&RtNode)>;

impl Drop for ConnEnd {
    fn drop(&mut self) {
        let mine = {
            let Ok(mut st) = self.node.inner.st.try_borrow_mut() else {
                return; // unwinding with the node's state borrowed: nothing safe to do
            };
            st.stats.peak_backlog = st.stats.peak_backlog.max(self.conn.peak.get());
            let mine = st
                .peers
                .get(&self.peer)
                .is_some_and(|c| Rc::ptr_eq(c, &self.conn));
            if mine {
                st.peers.remove(&self.peer);
            }
            mine
        };
        self.conn.closing.set(true);
        self.conn.writer.notify_one();
        if mine {
            if let Some(f) = self.on_close.take() {
                f(&self.node);
            }
        }
        self.node.inner.kick();
    }
}

/// A connection's writer: sends what the driver could not write at once, waiting for room
/// in the socket; on close, sends what is left and shuts the connection down (dropping the
/// write half).
async fn write_loop(conn: Rc<Conn>) {
    loop {
        conn.writer.notified().await;
        let mut closing_since = None;
        while !conn.try_flush() {
            if conn.closing.get() {
                let since = *closing_since.get_or_insert_with(wall);
                if wall().nanos_since(since) >= LINGER.as_nanos() as u64 {
                    // A peer that takes nothing more of an ended connection: what it did
                    // not take is dropped, and the socket with it.
                    let _ = conn.write.shutdown_both();
                    return;
                }
            }
            // Room in the socket, or the connection's end (which starts the linger), or
            // a look at the linger's clock.
            let woke = remora_exec::first(
                conn.write.writable(),
                remora_exec::first(
                    conn.writer.notified(),
                    remora_exec::time::sleep(LINGER / 10),
                ),
            )
            .await;
            if let remora_exec::Either::Left(Err(_)) = woke {
                return;
            }
        }
        if conn.closing.get() {
            return;
        }
    }
}
