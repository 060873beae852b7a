//! The native RDMA Flush primitives of seed 003 §4.1 (Figure 3):
//!
//! - **WFlush** (sender-initiated, after a WRITE, RC only) is the IBTA FLUSH with
//!   persistence placement over the written range ([`SendWr::wflush`]); it needs nothing
//!   here.
//! - **SFlush** (sender-initiated, after a SEND, RC only, [`Opcode::SFlush`]): the SFlush
//!   packet names the PSN of the SEND it follows; the responder's RNIC remembers where its
//!   recent SENDs landed, spends `rnic.sflush_lookup_ns` finding this one (seed 003
//!   §4.1.3), persists its landing buffer and those of the SENDs since the QP's previous
//!   SFlush (one SFlush after a batch, §4.3), and answers. Non-posted: it executes after
//!   every earlier request of the QP took effect. A SEND the responder no longer remembers, or one that landed in
//!   DRAM (nothing an RNIC can make durable), is refused with an invalid-request NAK.
//! - **RFlush** (receiver-initiated, any service type, [`Opcode::RFlush`]): the receiver's
//!   RNIC persists a local PM range, then sends the peer a zero-length notification with
//!   immediate data (a SEND, or a datagram on UD). The RFlush occupies the RNIC's send
//!   pipeline until its flush is done, so later requests never overtake the notification.
//!
//! What "persists" means is the RNIC FLUSH of [`MemoryHierarchy::flush_done`] with
//! persistence placement: every earlier inbound write to the bytes it names has reached the
//! WPQ (DMP without DDIO) or is globally visible (MHP, WSP: visibility is persistence).
//! **Under DMP with DDIO the lines sit in the LLC, which an RNIC cannot write back** (seed 000 §3.1.2: "extra work
//! needs to be done by the responder's processor"; seed 003 §4.4.2: "the receiver's CPUs
//! should perform a clflush"): the native primitives then guarantee visibility only, the
//! same as IBTA FLUSH, and a power failure after their completion can lose the data until
//! the LLC evicts it. Durable flushes on such a server need the receiver's CPU (the
//! emulated RFlush: `clwb` + `sfence`, then a notification) or DDIO off for the region
//! (seed 003 §4.4.2: non-cacheable regions, per-root-port DDIO).

use super::*;
use crate::hierarchy::{FlushPlacement, FlushRange};

/// Landing buffers an RC responder remembers per QP for SFlush.
const LANDINGS: usize = 1024;

/// Per-QP state of the flush primitives.
#[derive(Debug, Default)]
pub(super) struct QpFlush {
    /// Requester: PSN of the last SEND posted.
    last_send: Option<Psn>,
    /// Responder: where recent SENDs landed (ordinal, PSN, space, address, length),
    /// oldest first.
    landings: VecDeque<(u64, Psn, Space, u64, u64)>,
    /// Responder: SENDs landed so far (the next landing's ordinal).
    landed: u64,
    /// Responder: ordinals below this were covered by an earlier SFlush.
    sflushed: u64,
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
        self.landings
            .push_back((self.landed, psn, space, addr, len));
        self.landed += 1;
    }

    /// The SFlush after SEND `psn` covers that SEND's landing buffer and those of the
    /// SENDs since the QP's previous SFlush (a batch's SENDs, then one SFlush; seed 003
    /// §4.3): their PM ranges (DRAM landings of the batch have nothing to persist), or
    /// `None` if the named SEND is not remembered or landed in DRAM. When a SEND of the
    /// batch is no longer remembered (more than [`LANDINGS`] since the previous SFlush),
    /// the SFlush covers all of PM: the RNIC cannot name what it forgot, and persisting
    /// everything is correct.
    fn sflush_ranges(&mut self, psn: Psn) -> Option<Vec<FlushRange>> {
        let &(last, _, space, _, _) = self.landings.iter().rev().find(|l| l.1 == psn)?;
        if space != Space::Pm {
            return None;
        }
        let forgot = self.landings.front().is_some_and(|f| f.0 > self.sflushed);
        let ranges = if forgot {
            vec![FlushRange::all(Space::Pm)]
        } else {
            self.landings
                .iter()
                .filter(|l| (self.sflushed..=last).contains(&l.0) && l.2 == Space::Pm)
                .map(|&(_, _, space, addr, len)| FlushRange { space, addr, len })
                .collect()
        };
        self.sflushed = self.sflushed.max(last + 1);
        Some(ranges)
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
        let Some(ranges) = self.qps[pkt.dst_qp.0 as usize]
            .flush
            .sflush_ranges(send_psn)
        else {
            self.nak(now, pkt, NakCode::InvalidRequest);
            return None;
        };
        // The lookup comes first; the flush then waits for the earlier inbound writes to
        // the landing buffers.
        let looked_up = now + self.ext.sflush_lookup + self.proc + self.pcie + self.pcie;
        let t = self
            .hier
            .flush_done_ranges(now, FlushPlacement::Persistence, &ranges)
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
            Ok(Space::Pm) => {
                let range = FlushRange {
                    space: Space::Pm,
                    addr: range.addr,
                    len: range.len as u64,
                };
                Some(
                    self.hier
                        .flush_done(now, FlushPlacement::Persistence, range),
                )
            }
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
