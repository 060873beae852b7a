//! The native RDMA Flush primitives of seed 003 §4.1 (Figure 3):
//!
//! - **WFlush** (sender-initiated, after a WRITE, RC only) is the IBTA FLUSH with
//!   persistence placement over the written range ([`SendWr::wflush`]); it needs nothing
//!   here.
//! - **SFlush** (sender-initiated, after a SEND, RC only, [`Opcode::SFlush`]): the SFlush
//!   packet names the PSN of the SEND it follows; the responder's RNIC remembers where its
//!   recent SENDs landed, spends `rnic.sflush_lookup_ns` finding this one (seed 003
//!   §4.1.3), persists and answers. Non-posted: it executes after every earlier request of
//!   the QP took effect. A SEND the responder no longer remembers, or one that landed in
//!   DRAM (nothing an RNIC can make durable), is refused with an invalid-request NAK.
//! - **RFlush** (receiver-initiated, any service type, [`Opcode::RFlush`]): the receiver's
//!   RNIC persists a local PM range, then sends the peer a zero-length notification with
//!   immediate data (a SEND, or a datagram on UD). The RFlush occupies the RNIC's send
//!   pipeline until its flush is done, so later requests never overtake the notification.
//!
//! What "persists" means is the RNIC FLUSH of [`MemoryHierarchy::flush_done`] with
//! persistence placement: every earlier inbound write has reached the WPQ (DMP without
//! DDIO) or is globally visible (MHP, WSP: visibility is persistence). **Under DMP with DDIO
//! the lines sit in the LLC, which an RNIC cannot write back** (seed 000 §3.1.2: "extra work
//! needs to be done by the responder's processor"; seed 003 §4.4.2: "the receiver's CPUs
//! should perform a clflush"): the native primitives then guarantee visibility only, the
//! same as IBTA FLUSH, and a power failure after their completion can lose the data until
//! the LLC evicts it. Durable flushes on such a server need the receiver's CPU (the
//! emulated RFlush: `clwb` + `sfence`, then a notification) or DDIO off for the region
//! (seed 003 §4.4.2: non-cacheable regions, per-root-port DDIO).

use super::*;
use crate::hierarchy::FlushPlacement;

/// Landing buffers an RC responder remembers per QP for SFlush.
const LANDINGS: usize = 1024;

/// Per-QP state of the flush primitives.
#[derive(Debug, Default)]
pub(super) struct QpFlush {
    /// Requester: PSN of the last SEND posted.
    last_send: Option<Psn>,
    /// Responder: where recent SENDs landed (PSN, space, address, length), oldest first.
    landings: VecDeque<(Psn, Space, u64, u64)>,
}

impl QpFlush {
    /// A work request got PSN `psn`: remembers SENDs; for an SFlush returns the PSN of the
    /// SEND it follows (`post_send` checked there is one).
    pub(super) fn posted(&mut self, op: Opcode, psn: Psn) -> Psn {
        match op {
            Opcode::Send | Opcode::SendWithImm(_) => {
                self.last_send = Some(psn);
                0
            }
            Opcode::SFlush => self.last_send.unwrap_or(0),
            _ => 0,
        }
    }

    /// An RC SEND with PSN `psn` landed at `addr`.
    pub(super) fn landed(&mut self, psn: Psn, space: Space, addr: u64, len: u64) {
        if self.landings.len() == LANDINGS {
            self.landings.pop_front();
        }
        self.landings.push_back((psn, space, addr, len));
    }

    fn landing(&self, psn: Psn) -> Option<(Space, u64, u64)> {
        self.landings
            .iter()
            .rev()
            .find(|l| l.0 == psn)
            .map(|&(_, s, a, n)| (s, a, n))
    }
}

impl Rnic {
    /// Post-time checks of SFlush and RFlush.
    pub(super) fn check_post_flush(&self, qp: QpNum, wr: &SendWr) -> Result<(), VerbsError> {
        if !matches!(wr.opcode, Opcode::SFlush | Opcode::RFlush { .. }) {
            return Ok(());
        }
        if !self.config.caps.native_flush {
            // The seed 003 primitives extend the RNIC's FLUSH machinery.
            return Err(VerbsError::Unsupported(wr.opcode.name()));
        }
        if !wr.local.is_empty() || wr.remote.is_some() {
            return Err(VerbsError::Invalid(
                "SFlush and RFlush carry no payload and no remote address",
            ));
        }
        let q = &self.qps[qp.0 as usize];
        match wr.opcode {
            Opcode::SFlush if q.flush.last_send.is_none() => Err(VerbsError::Invalid(
                "SFlush must follow a SEND posted on the same queue pair",
            )),
            Opcode::RFlush { range, .. } => match self.check_local(qp, range, Access::NONE) {
                Ok(Space::Pm) => Ok(()),
                _ => Err(VerbsError::Invalid(
                    "RFlush names a range inside a local PM memory region of the QP's PD",
                )),
            },
            _ => Ok(()),
        }
    }

    /// Executes an SFlush (every earlier request of the QP took effect): finds where the
    /// SEND `send_psn` landed, persists, and answers. Returns when the answer leaves, or
    /// `None` after refusing it.
    pub(super) fn execute_sflush(
        &mut self,
        now: Instant,
        pkt: &Packet,
        send_psn: Psn,
    ) -> Option<Instant> {
        match self.qps[pkt.dst_qp.0 as usize].flush.landing(send_psn) {
            Some((Space::Pm, _, _)) => {}
            _ => {
                self.nak(now, pkt, NakCode::InvalidRequest);
                return None;
            }
        }
        // The lookup comes first; the flush then waits for every earlier inbound write
        // (the model's FLUSH is node-wide, so the range is covered).
        let looked_up = now + self.ext.sflush_lookup + self.proc + self.pcie + self.pcie;
        let t = self
            .hier
            .flush_done(now, FlushPlacement::Persistence)
            .max(looked_up);
        self.respond(t, pkt, Body::Done);
        Some(t)
    }

    /// Before the notification of RFlush request `idx` leaves: persists its `range`.
    /// Returns the earliest departure, or `None` after completing the request with an error
    /// (the range is no longer a local PM region).
    pub(super) fn rflush_before_send(
        &mut self,
        now: Instant,
        qpn: QpNum,
        idx: usize,
        range: Sge,
    ) -> Option<Instant> {
        match self.check_local(qpn, range, Access::NONE) {
            Ok(Space::Pm) => Some(self.hier.flush_done(now, FlushPlacement::Persistence)),
            Ok(Space::Dram) => {
                self.complete_with_error(now, qpn, idx, WcStatus::LocProtErr);
                None
            }
            Err(status) => {
                self.complete_with_error(now, qpn, idx, status);
                None
            }
        }
    }
}
