//! The requester side of a reliable connection: fetching and transmitting posted work
//! requests (fence, non-posted ordering, RFlush before a SEND), the ACK timer (on a
//! lossless fabric a time-out means a dead peer: `RetryExcErr`, no retransmission; see the
//! `rnic` module's header), acknowledgements and NAKs (RNR retry), and completions in
//! posting order (seed 000 §2; §3.2 for the completion points of IB/RoCE and iWARP).

use super::*;

impl Rnic {
    pub(super) fn pump(&mut self, now: Instant, qpn: QpNum) {
        let iwarp = self.config.transport == Transport::IWarp;
        // Whether the requests before the next one may all be done (see `idle` below).
        let mut idle_possible = true;
        loop {
            let q = &self.qps[qpn.0 as usize];
            if q.state != QpState::Rts || q.rnr_waiting {
                break;
            }
            let idx = q.next_send;
            let Some(w) = q.sq.get(idx) else { break };
            if w.wr.fence && q.outstanding_np > 0 {
                break;
            }
            let (op, len, fetched) = (w.wr.opcode, w.len, w.fetched);
            // Fetch the payload from local memory (a DMA read over PCIe) unless inline.
            let fetch = if fetched {
                Duration::ZERO
            } else {
                let Some(fetch) = self.fetch_payload(now, qpn, idx) else {
                    return;
                };
                fetch
            };
            let flushed = match op {
                Opcode::RFlush { range, .. } => {
                    let Some(flushed) = self.rflush_before_send(now, qpn, idx, range) else {
                        return;
                    };
                    flushed
                }
                _ => Instant::ZERO,
            };
            let ready = (now + self.proc + fetch).max(self.tx_free).max(flushed);
            self.tx_free = ready;
            // The responder places a message only once it has all of it (one packet in
            // this model), over its PCIe: an answer behind it (the ACK of a FLUSH or READ
            // after a large WRITE) is that much later. A real RNIC places MTU packets as
            // they arrive, and its time-out runs per packet.
            let placing = self.hier.pcie_time_of_write(len);
            let tx_done = ready + self.ext.wire_time(len);
            let q = &mut self.qps[qpn.0 as usize];
            let unreliable = q.attr.qp_type != QpType::Rc;
            let last = idx + 1 == q.sq.len();
            let connected = q.remote;
            // The transport timer runs from when the last byte left, and a request sent
            // while nothing else was outstanding is judged from its own departure, not by
            // progress made before an idle period. Nothing in this loop finishes an
            // earlier request and goes on, so once one is outstanding it stays so for the
            // rest of the call, and the queue need not be looked at again.
            idle_possible = idle_possible && q.sq.range(..idx).all(|w| w.done.is_some());
            let idle = idle_possible;
            let w = &mut q.sq[idx];
            let (remote_node, remote_qp) = match w.wr.ud {
                Some(d) => (d.node, d.qpn),
                None => connected.expect("RTS QP is connected"),
            };
            let ack_req = w.wr.signaled || last || w.psn % ACK_EVERY == ACK_EVERY - 1;
            w.sent = true;
            let (psn, wr_id) = (w.psn, w.wr.wr_id);
            if iwarp && !op.is_non_posted() {
                // iWARP: complete once the local transport has the data (seed 000 §3.2).
                w.done = Some((WcStatus::Success, ready));
            } else if unreliable && !op.is_non_posted() {
                // UC/UD: complete once the last byte is transmitted (seed 003 §2.4).
                w.done = Some((WcStatus::Success, tx_done));
            }
            // This request counts for the next one's `idle` from now on.
            idle_possible = idle_possible && w.done.is_some();
            // A WRITE without immediate data that stays in the send queue until it is
            // acknowledged is built from it when taken (a runtime encodes it where it
            // lies: a stream's WRITEs); anything else, and a request that may leave the
            // queue before it is taken, is built now, as a packet that is only encoded and
            // dropped costs less than a second look at the queue.
            let by_ref = op == Opcode::Write && w.done.is_none() && w.wr.ud.is_none();
            let body = (!by_ref).then(|| request_body(w, ack_req));
            if op.is_non_posted() {
                q.outstanding_np += 1;
            }
            q.next_send += 1;
            match body {
                Some(body) => self.outbox.push(
                    ready,
                    Packet {
                        src: self.id,
                        dst: remote_node,
                        src_qp: qpn,
                        dst_qp: remote_qp,
                        psn,
                        body,
                    },
                ),
                None => self.outbox.push_request(ready, qpn, psn, ack_req),
            }
            self.stats.requests_sent += 1;
            self.event(ready, EventKind::Transmitted, qpn, wr_id);
            self.arm_ack_timer(tx_done + placing, idle, qpn);
        }
        self.retire(now, qpn);
    }

    /// Reads request `idx`'s SGE payload from local memory into the request (a DMA read
    /// over PCIe), once, before it is first sent; READ and atomics keep their SGE, where the
    /// results go. Returns the fetch's time, or `None` after failing the request.
    fn fetch_payload(&mut self, now: Instant, qpn: QpNum, idx: usize) -> Option<Duration> {
        let w = &self.qps[qpn.0 as usize].sq[idx];
        let op = w.wr.opcode;
        let mut fetch = Duration::ZERO;
        if let Payload::Sge(sge) = w.wr.local {
            if !op.is_non_posted() || op == Opcode::NonPostedWrite {
                match self.check_local(qpn, sge, Access::NONE) {
                    Ok(space) => {
                        fetch = self.pcie + self.pcie;
                        let hier = &mut self.hier;
                        let bytes = Bytes::filled(sge.len as usize, |buf| {
                            hier.read_ordered_into(space, sge.addr, buf)
                        });
                        self.qps[qpn.0 as usize].sq[idx].wr.local = Payload::Inline(bytes);
                    }
                    Err(status) => {
                        self.complete_with_error(now, qpn, idx, status);
                        return None;
                    }
                }
            }
        }
        self.qps[qpn.0 as usize].sq[idx].fetched = true;
        Some(fetch)
    }

    pub(super) fn check_local(
        &self,
        qpn: QpNum,
        sge: Sge,
        need: Access,
    ) -> Result<Space, WcStatus> {
        let pd = self.qps[qpn.0 as usize].pd;
        let mr = self.mrs.get(&sge.lkey).ok_or(WcStatus::LocProtErr)?;
        if mr.pd != pd || !mr.access.contains(need) {
            return Err(WcStatus::LocProtErr);
        }
        let end = sge
            .addr
            .checked_add(sge.len as u64)
            .ok_or(WcStatus::LocLenErr)?;
        if sge.addr < mr.addr || end > mr.addr + mr.len {
            return Err(WcStatus::LocLenErr);
        }
        Ok(mr.space)
    }

    /// Starts (or extends) the ACK timer for a request whose last byte leaves at `sent`;
    /// `idle` when no earlier request of the QP is outstanding.
    pub(super) fn arm_ack_timer(&mut self, sent: Instant, idle: bool, qpn: QpNum) {
        let q = &mut self.qps[qpn.0 as usize];
        if q.ack_timer_armed {
            // The pending timer re-arms itself from `last_progress` when it fires.
            if idle {
                q.last_progress = q.last_progress.max(sent);
            }
            return;
        }
        q.ack_timer_armed = true;
        q.last_progress = q.last_progress.max(sent);
        let at = q.last_progress + self.ack_timeout;
        self.push_timer(at, Timer::AckTimeout(qpn));
    }

    pub(super) fn ack_timeout(&mut self, now: Instant, qpn: QpNum) {
        let timeout = self.ack_timeout;
        let q = &mut self.qps[qpn.0 as usize];
        q.ack_timer_armed = false;
        if q.state != QpState::Rts {
            return;
        }
        let waiting = q.sq.iter().position(|w| w.sent && w.done.is_none());
        let Some(idx) = waiting else { return };
        if now < q.last_progress + timeout {
            q.ack_timer_armed = true;
            let at = q.last_progress + timeout;
            self.push_timer(at, Timer::AckTimeout(qpn));
            return;
        }
        self.complete_with_error(now, qpn, idx, WcStatus::RetryExcErr);
    }

    pub(super) fn push_timer(&mut self, at: Instant, t: Timer) {
        self.seq += 1;
        self.timers.push(Reverse((at, self.seq, t)));
    }

    pub(super) fn handle_response(&mut self, now: Instant, pkt: &Packet) {
        let qpn = pkt.dst_qp;
        // The profile's NIC-to-NIC round trip includes the requester RNIC's handling of
        // the response, so the work request is done when the response arrives.
        let done_at = now;
        let q = &mut self.qps[qpn.0 as usize];
        q.last_progress = now;
        // A NAK for a request already done (on iWARP, every posted request is done once
        // transmitted) is as late as one for a retired request: it must not reach the RNR
        // branch, which rewinds only requests not done and would leave the responder
        // waiting for ever for the refused PSN while the QP stays in RTS.
        let nak = matches!(pkt.body, Body::Nak(_));
        // The queue's PSNs are distinct (consecutive, fewer than 2^32 queued): the one
        // request with the response's PSN, found by its place.
        let Some(idx) = sq_position(q, pkt.psn).filter(|&i| {
            let w = &q.sq[i];
            w.sent && !(nak && w.done.is_some())
        }) else {
            // A late response for a retired or rewound request. On iWARP, requests are
            // retired (completed) when the transport has them, so a refusal can only come
            // afterwards: like an RDMAP Terminate it fails the connection, and the
            // application learns of it from every later request, never silently.
            if self.config.transport == Transport::IWarp && matches!(pkt.body, Body::Nak(_)) {
                self.enter_error(now, qpn);
                self.retire(now, qpn);
            }
            return;
        };
        // A response must be of the kind its request asks for (IBTA: an unexpected
        // response opcode fails the request with a bad-response error). The peer is not
        // trusted: a READ response for a SEND must not reach `finish_np`. A second
        // response for a non-posted request already done is a duplicate and is dropped.
        if !matches!(pkt.body, Body::Ack | Body::Nak(_)) {
            let w = &q.sq[idx];
            let op = w.wr.opcode;
            let fits = match &pkt.body {
                // A READ's response carries exactly the bytes asked for: a short one would
                // complete the READ with bytes it never read.
                Body::ReadResp(d) => op == Opcode::Read && d.len() as u64 == w.len,
                Body::AtomicResp(_) => {
                    matches!(op, Opcode::CompareSwap { .. } | Opcode::FetchAdd { .. })
                }
                Body::Done => matches!(
                    op,
                    Opcode::Flush { .. }
                        | Opcode::AtomicWrite { .. }
                        | Opcode::NonPostedWrite
                        | Opcode::SFlush
                ),
                _ => false,
            };
            if !fits {
                self.complete_with_error(now, qpn, idx, WcStatus::BadRespErr);
                return;
            }
            if w.done.is_some() {
                return;
            }
        }
        // Responses come in PSN order, so any response implicitly acknowledges every
        // posted request before it (an ACK also acknowledges its own).
        let acked = if pkt.body == Body::Ack { idx + 1 } else { idx };
        for w in q.sq.iter_mut().take(acked) {
            if w.sent && w.done.is_none() && !w.wr.opcode.is_non_posted() {
                w.done = Some((WcStatus::Success, done_at));
            }
        }
        // Progress: the RNR retry budget is per message (as rxe's reset_retry_counters,
        // which a READ response and an atomic acknowledge call as an ACK does).
        if !matches!(pkt.body, Body::Nak(_)) {
            q.rnr_left = q.attr.rnr_retry;
        }
        match &pkt.body {
            Body::Ack => {}
            Body::Nak(NakCode::Rnr) => {
                if q.rnr_left == 0 {
                    self.complete_with_error(now, qpn, idx, WcStatus::RnrRetryExcErr);
                    return;
                }
                if q.rnr_left != RNR_RETRY_INFINITE {
                    q.rnr_left -= 1;
                }
                // Go back to the refused request: it and everything after it is resent.
                for w in q.sq.iter_mut().skip(idx) {
                    if w.sent && w.done.is_none() {
                        w.sent = false;
                    }
                }
                q.outstanding_np =
                    q.sq.iter()
                        .filter(|w| w.sent && w.done.is_none() && w.wr.opcode.is_non_posted())
                        .count() as u32;
                q.next_send =
                    q.sq.iter()
                        .position(|w| !w.sent && w.done.is_none())
                        .unwrap_or(q.sq.len());
                q.rnr_waiting = true;
                let at = now + self.rnr_delay;
                self.push_timer(at, Timer::RnrRetry(qpn));
            }
            &Body::Nak(code) => {
                let status = match code {
                    NakCode::RemoteAccess => WcStatus::RemAccessErr,
                    _ => WcStatus::RemInvReqErr,
                };
                self.complete_with_error(now, qpn, idx, status);
                return;
            }
            Body::ReadResp(data) => self.finish_np(now, qpn, idx, Some(data.clone())),
            &Body::AtomicResp(orig) => {
                self.finish_np(now, qpn, idx, Some(Bytes::copy_from(&orig.to_le_bytes())))
            }
            Body::Done => self.finish_np(now, qpn, idx, None),
            _ => unreachable!("other bodies were refused above"),
        }
        self.retire(now, qpn);
        self.pump(now, qpn);
    }

    /// A non-posted request's response arrived: place any returned data locally, then
    /// the request is done.
    pub(super) fn finish_np(&mut self, now: Instant, qpn: QpNum, idx: usize, data: Option<Bytes>) {
        let mut done_at = now;
        if let Some(data) = data {
            let Payload::Sge(sge) = self.qps[qpn.0 as usize].sq[idx].wr.local else {
                unreachable!("post_send requires an SGE for results")
            };
            match self.check_local(qpn, sge, Access::LOCAL_WRITE) {
                Ok(space) => {
                    let n = data.len().min(sge.len as usize);
                    done_at = done_at.max(
                        self.hier
                            .dma_write(now, space, sge.addr, &data[..n])
                            .visible,
                    );
                }
                Err(status) => return self.complete_with_error(now, qpn, idx, status),
            }
        }
        let q = &mut self.qps[qpn.0 as usize];
        q.sq[idx].done = Some((WcStatus::Success, done_at));
        q.outstanding_np -= 1;
    }

    /// Pops finished requests off the send queue in order and schedules their completions.
    pub(super) fn retire(&mut self, now: Instant, qpn: QpNum) {
        loop {
            let q = &mut self.qps[qpn.0 as usize];
            // The run of finished requests at the front, up to and including the first that
            // makes a completion (unsignaled successes make none), goes in one drain:
            // dropped where they lie, which for a stream is most requests at once.
            let mut run = 0;
            let mut wc = None;
            for w in &q.sq {
                let Some((status, at)) = w.done else { break };
                run += 1;
                if w.wr.signaled || status != WcStatus::Success {
                    let c = WorkCompletion {
                        wr_id: w.wr.wr_id,
                        status,
                        opcode: WcOpcode::of(w.wr.opcode),
                        byte_len: w.len as u32,
                        imm: None,
                        qp: qpn,
                        src: None,
                    };
                    wc = Some((c, at));
                    break;
                }
            }
            if run == 0 {
                return;
            }
            // Requests the outbox still refers to are built before their work requests go.
            if self.outbox.holds_requests() {
                let (first, id) = (q.sq[0].psn, self.id);
                let q_ref = &*q;
                self.outbox.make_whole(qpn, |psn, ack_req| {
                    (psn.wrapping_sub(first) < run as u32)
                        .then(|| request_packet(id, q_ref, qpn, psn, ack_req))
                });
            }
            let q = &mut self.qps[qpn.0 as usize];
            q.sq.drain(..run);
            q.next_send = q.next_send.saturating_sub(run);
            let cq = q.send_cq;
            let Some((c, at)) = wc else { return };
            self.push_cqe(now, at, cq, c);
        }
    }

    /// Makes a completion available at `at`: at once if that is now, else when the
    /// runtime next calls [`handle_timeout`](Self::handle_timeout).
    pub(super) fn push_cqe(&mut self, now: Instant, at: Instant, cq: CqId, wc: WorkCompletion) {
        // A completion never overtakes an earlier one of the same CQ (a READ that places
        // data locally finishes later than the WRITE acknowledged after it).
        let serial = self.qps[wc.qp.0 as usize].serial;
        let c = &mut self.cqs[cq.0 as usize];
        let at = at.max(c.last_at);
        c.last_at = at;
        if at <= now && self.cqe_pending.is_empty() {
            self.deliver_cqe(at, cq.0, wc, serial);
            return;
        }
        self.seq += 1;
        self.cqe_pending.push(Reverse(PendingCqe {
            at,
            seq: self.seq,
            cq: cq.0,
            wc,
            serial,
        }));
    }

    /// Completes request `idx` with an error and moves the QP to ERROR: every later
    /// request and every posted receive is flushed with `WrFlushErr`.
    pub(super) fn complete_with_error(
        &mut self,
        now: Instant,
        qpn: QpNum,
        idx: usize,
        status: WcStatus,
    ) {
        let at = now + self.proc;
        let q = &mut self.qps[qpn.0 as usize];
        for (i, w) in q.sq.iter_mut().enumerate() {
            if w.done.is_none() {
                let s = if i == idx {
                    status
                } else if i > idx {
                    WcStatus::WrFlushErr
                } else {
                    continue;
                };
                w.done = Some((s, at));
            }
        }
        self.enter_error(now, qpn);
        self.retire(now, qpn);
    }

    pub(super) fn enter_error(&mut self, now: Instant, qpn: QpNum) {
        let at = now + self.proc;
        let q = &mut self.qps[qpn.0 as usize];
        q.state = QpState::Error;
        let deferred = std::mem::take(&mut q.deferred);
        q.deferred_nak = None;
        // Requests waiting in the RNIC buffer are dropped, held writes with them.
        for p in &deferred {
            self.hier
                .release_held(super::responder::held_key(qpn, p.psn));
            self.note_waiting(p, false);
        }
        let q = &mut self.qps[qpn.0 as usize];
        for w in q.sq.iter_mut() {
            if w.done.is_none() {
                w.done = Some((WcStatus::WrFlushErr, at));
            }
        }
        let rq: Vec<RecvWr> = q.rq.drain(..).collect();
        let cq = q.recv_cq;
        for r in rq {
            let wc = WorkCompletion {
                wr_id: r.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm: None,
                qp: qpn,
                src: None,
            };
            self.push_cqe(now, at, cq, wc);
        }
    }
}

/// Where work request `psn` is in `q`'s send queue (found by its place: the queue's PSNs
/// are consecutive), if it is there.
#[inline]
fn sq_position(q: &Qp, psn: Psn) -> Option<usize> {
    let first = q.sq.front()?.psn;
    let at = psn.wrapping_sub(first) as usize;
    match q.sq.get(at) {
        Some(w) if w.psn == psn => Some(at),
        _ => q.sq.iter().position(|w| w.psn == psn),
    }
}

/// Work request `psn` of `q`'s send queue.
#[inline]
fn request_wqe(q: &Qp, psn: Psn) -> &Wqe {
    let at = sq_position(q, psn).expect("a request the outbox holds is in its send queue");
    &q.sq[at]
}

/// The packet of reliable-connection request `psn` of QP `qpn` (`q`), on node `id`, as
/// `pump` made it (see `Out::Request`).
pub(super) fn request_packet(id: NodeId, q: &Qp, qpn: QpNum, psn: Psn, ack_req: bool) -> Packet {
    let (dst, dst_qp) = q.remote.expect("RTS QP is connected");
    Packet {
        src: id,
        dst,
        src_qp: qpn,
        dst_qp,
        psn,
        body: request_body(request_wqe(q, psn), ack_req),
    }
}

/// [`request_packet`] for the WRITEs the outbox holds by reference (`pump` holds no other
/// request so), borrowed where it lies.
#[inline]
pub(super) fn request_write(
    id: NodeId,
    q: &Qp,
    qpn: QpNum,
    psn: Psn,
    ack_req: bool,
) -> WriteRef<'_> {
    let w = request_wqe(q, psn);
    debug_assert_eq!(
        w.wr.opcode,
        Opcode::Write,
        "only WRITEs are held by reference"
    );
    let r = w.wr.remote.expect("post_send checked the remote address");
    let (dst, dst_qp) = q.remote.expect("RTS QP is connected");
    WriteRef {
        src: id,
        dst,
        src_qp: qpn,
        dst_qp,
        psn,
        addr: r.addr,
        rkey: r.rkey,
        // As `request_body` reads it (a fetched SGE is inline by now).
        data: match &w.wr.local {
            Payload::Inline(b) => b,
            _ => &[],
        },
        ack_req,
    }
}

/// The packet body that carries request `w` (its payload fetched), with the AckReq bit.
// Always inlined: it was part of `pump`, the latency path, before `request_packet` called
// it too.
#[inline(always)]
fn request_body(w: &Wqe, ack_req: bool) -> Body {
    let data = match &w.wr.local {
        Payload::Inline(b) => b.clone(),
        _ => Bytes::EMPTY,
    };
    let body = match (w.wr.opcode, w.wr.remote) {
        (Opcode::Write, Some(r)) => Body::Write {
            addr: r.addr,
            rkey: r.rkey,
            data,
            imm: None,
            ack_req,
        },
        (Opcode::WriteWithImm(imm), Some(r)) => Body::Write {
            addr: r.addr,
            rkey: r.rkey,
            data,
            imm: Some(imm),
            ack_req,
        },
        (Opcode::Send, _) => Body::Send {
            data,
            imm: None,
            ack_req,
        },
        (Opcode::SendWithImm(imm), _) => Body::Send {
            data,
            imm: Some(imm),
            ack_req,
        },
        (Opcode::Read, Some(r)) => Body::Read {
            addr: r.addr,
            rkey: r.rkey,
            len: w.len as u32,
        },
        (Opcode::CompareSwap { compare, swap }, Some(r)) => Body::Atomic {
            addr: r.addr,
            rkey: r.rkey,
            compare: Some(compare),
            operand: swap,
        },
        (Opcode::FetchAdd { add }, Some(r)) => Body::Atomic {
            addr: r.addr,
            rkey: r.rkey,
            compare: None,
            operand: add,
        },
        (Opcode::Flush { placement, len }, Some(r)) => Body::Flush {
            addr: r.addr,
            rkey: r.rkey,
            len,
            placement,
        },
        (Opcode::AtomicWrite { value }, Some(r)) => Body::NonPostedWrite {
            addr: r.addr,
            rkey: r.rkey,
            data: Bytes::copy_from(&value.to_le_bytes()),
            atomic: true,
        },
        (Opcode::NonPostedWrite, Some(r)) => Body::NonPostedWrite {
            addr: r.addr,
            rkey: r.rkey,
            data,
            atomic: false,
        },
        (Opcode::SFlush, _) => Body::SFlush {
            send_psn: w.sflush_of,
        },
        (Opcode::RFlush { imm, .. }, _) => Body::Send {
            data: Bytes::EMPTY,
            imm: Some(imm),
            ack_req,
        },
        (_, None) => unreachable!("post_send checked the remote address"),
    };
    match w.wr.ud {
        None => body,
        ud => transport::datagram(body, ud),
    }
}
