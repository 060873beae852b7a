//! The unreliable service types, `IBV_QPT_UC` and `IBV_QPT_UD` (seed 003 §2.2, §2.4).
//!
//! - **UC** (unreliable connection): a connected QP like RC, but only WRITE,
//!   WRITE_WITH_IMM and SEND (+imm) (and the RFlush notification). Nothing is acknowledged
//!   or retransmitted: a request completes when its last byte is on the wire. A message the
//!   responder cannot place (no receive posted, a bad rkey, range or rights) is dropped
//!   silently and counted in [`RnicStats`]; the QP stays usable.
//! - **UD** (unreliable datagram): an unconnected QP (ready to send when created, as the
//!   INIT → RTR → RTS sequence of a UD QP names no peer). SEND (+imm) only, each work
//!   request naming its destination ([`UdDest`]: node, QP, Q_Key); at most [`UD_MTU`]
//!   bytes, refused at post time above that; completion at transmit; a datagram naming
//!   another Q_Key than the receiving QP's, or finding no receive posted, is dropped and
//!   counted. One UD QP sends to, and receives from, any number of peers; a receive
//!   completion names the sender (`WorkCompletion::src`).
//!
//! A message longer than the posted receive buffer consumes the receive, which completes
//! with `LocLenErr`, and is dropped (counted too). Simplification: a responder-side error
//! never moves a UC/UD QP to the error state.

use super::*;

/// RNIC-wide parameters of the service types and flush primitives.
#[derive(Debug)]
pub(super) struct RnicExt {
    /// SFlush's lookup of where a SEND landed (profile `rnic.sflush_lookup_ns`).
    pub(super) sflush_lookup: Duration,
    link_gbps: u64,
    header_bytes: u64,
}

impl RnicExt {
    pub(super) fn new(profile: &LatencyProfile) -> Self {
        RnicExt {
            sflush_lookup: Duration::from_nanos(profile.rnic.sflush_lookup_ns),
            link_gbps: profile.network.link_gbps,
            header_bytes: profile.network.header_bytes,
        }
    }

    /// Time to serialize a message of `bytes` onto the link (as `LatencyProfile::wire_time`):
    /// an unreliable request completes when its last byte has left.
    pub(super) fn wire_time(&self, bytes: u64) -> Duration {
        Duration::from_nanos(((bytes + self.header_bytes) * 8).div_ceil(self.link_gbps))
    }
}

/// On a UD QP a SEND (or an RFlush notification) leaves as a datagram to `ud`.
pub(super) fn datagram(body: Body, ud: Option<UdDest>) -> Body {
    match (body, ud) {
        (Body::Send { data, imm, .. }, Some(d)) => Body::Datagram {
            qkey: d.qkey,
            data,
            imm,
        },
        (b, _) => b,
    }
}

impl Rnic {
    /// A new QP: a UD QP is ready to send at once (it has no peer to be connected to).
    pub(super) fn created_qp(&mut self, qpn: QpNum) {
        let q = &mut self.qps[qpn.0 as usize];
        if q.attr.qp_type == QpType::Ud {
            q.state = QpState::Rts;
        }
    }

    /// The checks `ibv_post_send` makes for the service types and flush primitives.
    pub(super) fn check_post(&self, qp: QpNum, wr: &SendWr) -> Result<(), VerbsError> {
        let q = &self.qps[qp.0 as usize];
        let t = q.attr.qp_type;
        if !wr.opcode.allowed_on(t) {
            return Err(VerbsError::NotOnQpType {
                op: wr.opcode.name(),
                qp_type: t.name(),
            });
        }
        match (t, wr.ud) {
            (QpType::Ud, None) => {
                return Err(VerbsError::Invalid(
                    "a work request on a UD queue pair names its destination (SendWr::to)",
                ))
            }
            (QpType::Ud, Some(_)) if wr.local.len() > UD_MTU => {
                return Err(VerbsError::TooLong {
                    len: wr.local.len(),
                    max: UD_MTU,
                    what: "a UD message (one packet of the path MTU)",
                })
            }
            (QpType::Rc | QpType::Uc, Some(_)) => {
                return Err(VerbsError::Invalid(
                    "only work requests on a UD queue pair name a destination",
                ))
            }
            _ => {}
        }
        self.check_post_flush(qp, wr)
    }

    /// A packet for a UC or UD QP, or a datagram for any QP.
    pub(super) fn handle_unreliable(&mut self, now: Instant, pkt: &Packet) {
        let q = &self.qps[pkt.dst_qp.0 as usize];
        if q.state == QpState::Error || !pkt.is_request() {
            return self.drop_packet(now, pkt);
        }
        match (q.attr.qp_type, &pkt.body) {
            (QpType::Ud, Body::Datagram { qkey, data, imm }) => {
                if *qkey != q.attr.qkey {
                    self.stats.ud_bad_qkey += 1;
                    return self.drop_packet(now, pkt);
                }
                let src = Some((pkt.src, pkt.src_qp));
                self.place_message(now, pkt, data, *imm, src);
            }
            (QpType::Uc, Body::Send { data, imm, .. })
                if q.remote == Some((pkt.src, pkt.src_qp)) =>
            {
                self.place_message(now, pkt, data, *imm, None);
            }
            (
                QpType::Uc,
                Body::Write {
                    addr,
                    rkey,
                    data,
                    imm,
                    ..
                },
            ) if q.remote == Some((pkt.src, pkt.src_qp)) => {
                let qpn = pkt.dst_qp;
                let len = data.len() as u64;
                let space = match self.check_remote(qpn, *rkey, *addr, len, Access::REMOTE_WRITE) {
                    Ok(s) => s,
                    Err(_) => {
                        self.stats.unreliable_access += 1;
                        return self.drop_packet(now, pkt);
                    }
                };
                if imm.is_some() && self.qps[qpn.0 as usize].rq.is_empty() {
                    self.stats.unreliable_no_recv += 1;
                    return self.drop_packet(now, pkt);
                }
                let t = self.hier.dma_write(now, space, *addr, data);
                if let Some(imm) = imm {
                    self.complete_write_imm(now, qpn, data.len(), *imm, t.visible);
                }
                self.executed(now, pkt);
            }
            // A wrong peer, an operation the service type lacks, a datagram for RC or UC.
            _ => self.drop_packet(now, pkt),
        }
    }

    /// Places a UC SEND or a UD datagram in the next posted receive, or drops it.
    ///
    /// A message longer than the buffer completes the receive with `LocLenErr` (as
    /// ConnectX documents) and the QP goes on. A buffer that fails the local check (bad
    /// lkey, rights, bounds) is a local QP error as on every transport: the receive
    /// completes with the error and the QP moves to the error state, flushing the rest
    /// (Soft-RoCE, `rxe_resp.c`, treats it so for UC and UD too; seed 002 §4 ran on it).
    fn place_message(
        &mut self,
        now: Instant,
        pkt: &Packet,
        data: &Bytes,
        imm: Option<u32>,
        src: Option<(NodeId, QpNum)>,
    ) {
        let qpn = pkt.dst_qp;
        let Some(&r) = self.qps[qpn.0 as usize].rq.front() else {
            self.stats.unreliable_no_recv += 1;
            return self.drop_packet(now, pkt);
        };
        let q = &mut self.qps[qpn.0 as usize];
        q.rq.pop_front();
        let cq = q.recv_cq;
        let mut wc = WorkCompletion {
            wr_id: r.wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: data.len() as u32,
            imm,
            qp: qpn,
            src,
        };
        match self.check_local(qpn, r.sge, Access::LOCAL_WRITE) {
            Ok(space) if data.len() <= r.sge.len as usize => {
                let t = self.hier.dma_write(now, space, r.sge.addr, data);
                self.push_cqe(now, t.visible + self.proc, cq, wc);
                self.executed(now, pkt);
            }
            Ok(_) => {
                self.stats.unreliable_too_long += 1;
                wc.status = WcStatus::LocLenErr;
                self.push_cqe(now, now + self.proc, cq, wc);
                self.drop_packet(now, pkt);
            }
            Err(local) => {
                wc.status = local;
                self.push_cqe(now, now + self.proc, cq, wc);
                self.drop_packet(now, pkt);
                self.enter_error(now, qpn);
                self.retire(now, qpn);
            }
        }
    }

    fn executed(&mut self, now: Instant, pkt: &Packet) {
        self.stats.requests_executed += 1;
        self.event(now, EventKind::Executed, pkt.dst_qp, pkt.psn as u64);
    }
}
