//! The responder side of a reliable connection: PSN checking, protection checks
//! (rkey, bounds, rights), posted requests executed on arrival, non-posted ones behind
//! every earlier request (seed 000 §2), receive-queue consumption with RNR NAKs, and
//! write trains (the soft RNIC's batch of WRITEs handled as its packets would be).

use super::*;

impl Rnic {
    /// A [`WriteTrain`] arrived from the wire at `now`. Its WRITEs are handled in PSN
    /// order exactly as [`handle_packet`](Self::handle_packet) handles the packets they
    /// stand for at `now` (PSN, bounds and execution checked per WRITE), with two savings:
    /// what cannot differ between them is looked up once per train (the QP's routing and
    /// state, the MR's key, protection domain and rights), and the acknowledgements they
    /// ask for are coalesced into the last one (as RC responders coalesce ACKs): the
    /// earlier ones would leave at the same instant, and an ACK acknowledges every earlier
    /// request. From the first WRITE that is not plainly executed (out of sequence,
    /// refused, or any other service type or state) on, the rest goes through
    /// `handle_packet` one by one, behind the coalesced ACK.
    pub fn handle_write_train(&mut self, now: Instant, train: &WriteTrain<'_>) {
        let mut writes = train.writes();
        let mut rest = None;
        let mut acked = None;
        if let Some((space, lo, hi)) = self.train_target(train) {
            self.hier.advance(now);
            let qpn = train.dst_qp;
            let q = &self.qps[qpn.0 as usize];
            // Only the hierarchy runs between the train's WRITEs: the QP's expected PSN is
            // kept here and its refusal looked at once, and both (and the count of executed
            // requests) are written back before anything else can look at them.
            if q.deferred_nak.is_none() {
                let mut expected = q.expected_psn;
                let mut executed = 0;
                for w in writes.by_ref() {
                    let in_bounds = w.addr >= lo
                        && w.addr
                            .checked_add(w.data.len() as u64)
                            .is_some_and(|end| end <= hi);
                    if w.psn != expected || !in_bounds {
                        rest = Some(w);
                        break;
                    }
                    expected = expected.wrapping_add(1);
                    self.hier.dma_write_inlined(now, space, w.addr, w.data);
                    if w.ack_req {
                        acked = Some(w.psn);
                    }
                    executed += 1;
                    self.event(now, EventKind::Executed, qpn, w.psn as u64);
                }
                self.qps[qpn.0 as usize].expected_psn = expected;
                self.stats.requests_executed += executed;
            } else {
                rest = writes.next();
            }
        } else {
            rest = writes.next();
        }
        if let Some(psn) = acked {
            let ack = Packet {
                src: self.id,
                dst: train.src,
                src_qp: train.dst_qp,
                dst_qp: train.src_qp,
                psn,
                body: Body::Ack,
            };
            self.outbox.push(now + self.proc, ack);
        }
        for w in rest.into_iter().chain(writes) {
            self.handle_packet(now, &w.to_packet(train));
        }
    }

    /// For a train whose WRITEs `handle_packet` would route to an RC responder in a
    /// working state and whose MR grants remote writes on the QP's protection domain: the
    /// MR's space and address range.
    pub(super) fn train_target(&self, train: &WriteTrain<'_>) -> Option<(Space, u64, u64)> {
        let q = self.qps.get(train.dst_qp.0 as usize)?;
        let routed = self.up
            && q.attr.qp_type == QpType::Rc
            && q.remote == Some((train.src, train.src_qp))
            && q.state != QpState::Error;
        let mr = self.mrs.get(&train.rkey)?;
        (routed && mr.pd == q.pd && mr.access.contains(Access::REMOTE_WRITE))
            .then(|| (mr.space, mr.addr, mr.addr + mr.len))
    }

    pub(super) fn drop_packet(&mut self, now: Instant, pkt: &Packet) {
        self.stats.dropped += 1;
        self.event(now, EventKind::Dropped, pkt.dst_qp, pkt.psn as u64);
    }

    pub(super) fn respond(&mut self, at: Instant, req: &Packet, body: Body) {
        self.outbox.push(
            at,
            Packet {
                src: self.id,
                dst: req.src,
                src_qp: req.dst_qp,
                dst_qp: req.src_qp,
                psn: req.psn,
                body,
            },
        );
    }

    /// Looks up a remote access: the MR must exist, belong to the QP's PD, grant `need`,
    /// and contain the whole range.
    pub(super) fn check_remote(
        &self,
        qpn: QpNum,
        rkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Space, NakCode> {
        let mr = self.mrs.get(&rkey).ok_or(NakCode::RemoteAccess)?;
        if mr.pd != self.qps[qpn.0 as usize].pd || !mr.access.contains(need) {
            return Err(NakCode::RemoteAccess);
        }
        let end = addr.checked_add(len).ok_or(NakCode::RemoteAccess)?;
        if addr < mr.addr || end > mr.addr + mr.len {
            return Err(NakCode::RemoteAccess);
        }
        Ok(mr.space)
    }

    /// A WRITE_WITH_IMM of `len` bytes landed (visible at `visible`): it consumes the
    /// receive at the head of the QP's receive queue (the caller checked there is one).
    pub(super) fn complete_write_imm(
        &mut self,
        now: Instant,
        qpn: QpNum,
        len: usize,
        imm: u32,
        visible: Instant,
    ) {
        let q = &mut self.qps[qpn.0 as usize];
        let r = q.rq.pop_front().expect("a receive is posted");
        let cq = q.recv_cq;
        let wc = WorkCompletion {
            wr_id: r.wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: len as u32,
            imm: Some(imm),
            qp: qpn,
            src: None,
        };
        self.push_cqe(now, visible + self.proc, cq, wc);
    }

    #[cold]
    #[inline(never)]
    pub(super) fn nak(&mut self, now: Instant, req: &Packet, code: NakCode) {
        let q = &mut self.qps[req.dst_qp.0 as usize];
        // Only a request *behind* the waiting ones waits (PSNs compared modulo 2^32); a
        // deferred request that fails is the earliest and is refused at once.
        let behind = q
            .deferred
            .front()
            .is_some_and(|d| (req.psn.wrapping_sub(d.psn) as i32) > 0);
        if code != NakCode::Rnr && behind {
            q.deferred_nak = Some((req.clone(), code));
            return;
        }
        let kind = if code == NakCode::Rnr {
            EventKind::RnrNak
        } else {
            EventKind::AccessNak
        };
        self.event(now, kind, req.dst_qp, req.psn as u64);
        // Responses go in PSN order: a refusal that fails the QP must not depart before
        // the response of an earlier non-posted request (its departure is the QP's
        // `np_barrier`), or a runtime sending by departure time delivers it first and the
        // requester flushes a request that was executed and answered. (An RNR NAK fails
        // nothing: it may pass them, as ACKs do.)
        let mut at = now + self.proc;
        if code != NakCode::Rnr {
            at = at.max(self.qps[req.dst_qp.0 as usize].np_barrier);
        }
        self.respond(at, req, Body::Nak(code));
        if code != NakCode::Rnr {
            // A responder that NAKs an access violation also stops executing the QP, and
            // the QP's own outstanding requests complete in error, as on every way into the
            // error state.
            self.enter_error(now, req.dst_qp);
            self.retire(now, req.dst_qp);
        }
    }

    pub(super) fn handle_request(&mut self, now: Instant, pkt: &Packet) {
        let qpn = pkt.dst_qp;
        let q = &mut self.qps[qpn.0 as usize];
        if pkt.psn != q.expected_psn || q.deferred_nak.is_some() {
            // Out of sequence: after an RNR NAK, requests behind the refused one are
            // dropped until the requester goes back and resends them.
            return self.drop_packet(now, pkt);
        }
        if pkt.is_non_posted() {
            if q.np_barrier > now || !q.deferred.is_empty() {
                if q.deferred.len() >= MAX_WAITING_NP {
                    // The responder's resources for non-posted requests (IBTA's IRD) are
                    // exceeded: NAK invalid request, and the QP fails.
                    return self.nak(now, pkt, NakCode::InvalidRequest);
                }
                q.expected_psn = q.expected_psn.wrapping_add(1);
                let at = q.np_barrier;
                q.deferred.push_back(pkt.clone());
                self.note_waiting(pkt, true);
                let q = &mut self.qps[qpn.0 as usize];
                if !q.deferred_timer_armed {
                    q.deferred_timer_armed = true;
                    self.push_timer(at.max(now), Timer::Deferred(qpn));
                }
                if self.config.domain == PersistenceDomain::Wsp {
                    self.hold_deferred(qpn, pkt);
                }
            } else {
                q.expected_psn = q.expected_psn.wrapping_add(1);
                self.execute_np(now, pkt);
            }
            return;
        }
        let ack_at = now + self.proc;
        match &pkt.body {
            Body::Write {
                addr,
                rkey,
                data,
                imm,
                ack_req,
            } => {
                let space = match self.check_remote(
                    qpn,
                    *rkey,
                    *addr,
                    data.len() as u64,
                    Access::REMOTE_WRITE,
                ) {
                    Ok(s) => s,
                    Err(code) => return self.nak(now, pkt, code),
                };
                if imm.is_some() && self.qps[qpn.0 as usize].rq.is_empty() {
                    self.stats.rnr_naks += 1;
                    return self.nak(now, pkt, NakCode::Rnr);
                }
                let q = &mut self.qps[qpn.0 as usize];
                q.expected_psn = q.expected_psn.wrapping_add(1);
                let t = self.hier.dma_write(now, space, *addr, data);
                if let Some(imm) = imm {
                    self.complete_write_imm(now, qpn, data.len(), *imm, t.visible);
                }
                if *ack_req {
                    self.respond(ack_at, pkt, Body::Ack);
                }
            }
            Body::Send { data, imm, ack_req } => {
                let Some(&r) = self.qps[qpn.0 as usize].rq.front() else {
                    self.stats.rnr_naks += 1;
                    return self.nak(now, pkt, NakCode::Rnr);
                };
                let space = match self.check_local(qpn, r.sge, Access::LOCAL_WRITE) {
                    Ok(s) if data.len() <= r.sge.len as usize => s,
                    bad => {
                        // The message does not fit the posted buffer (or the buffer is bad):
                        // the receive completes with an error and the sender is refused.
                        let status = match bad {
                            Err(local) => local,
                            Ok(_) => WcStatus::LocLenErr,
                        };
                        let q = &mut self.qps[qpn.0 as usize];
                        q.rq.pop_front();
                        let cq = q.recv_cq;
                        let wc = WorkCompletion {
                            wr_id: r.wr_id,
                            status,
                            opcode: WcOpcode::Recv,
                            byte_len: data.len() as u32,
                            imm: *imm,
                            qp: qpn,
                            src: None,
                        };
                        self.push_cqe(now, now + self.proc, cq, wc);
                        return self.nak(now, pkt, NakCode::InvalidRequest);
                    }
                };
                let q = &mut self.qps[qpn.0 as usize];
                q.rq.pop_front();
                q.expected_psn = q.expected_psn.wrapping_add(1);
                let cq = q.recv_cq;
                let t = self.hier.dma_write(now, space, r.sge.addr, data);
                self.qps[qpn.0 as usize].flush.landed(
                    pkt.psn,
                    space,
                    r.sge.addr,
                    data.len() as u64,
                );
                // The receive completion follows the buffer's visibility (seed 000 §3.1.3).
                let wc = WorkCompletion {
                    wr_id: r.wr_id,
                    status: WcStatus::Success,
                    opcode: WcOpcode::Recv,
                    byte_len: data.len() as u32,
                    imm: *imm,
                    qp: qpn,
                    src: None,
                };
                self.push_cqe(now, t.visible + self.proc, cq, wc);
                if *ack_req {
                    self.respond(ack_at, pkt, Body::Ack);
                }
            }
            _ => unreachable!("non-posted handled above"),
        }
        self.stats.requests_executed += 1;
        self.event(now, EventKind::Executed, qpn, pkt.psn as u64);
    }

    pub(super) fn run_deferred(&mut self, now: Instant, qpn: QpNum) {
        loop {
            let q = &mut self.qps[qpn.0 as usize];
            if q.state == QpState::Error {
                return;
            }
            if q.deferred.is_empty() {
                if let Some((pkt, code)) = q.deferred_nak.take() {
                    self.nak(now, &pkt, code);
                }
                return;
            }
            if q.np_barrier > now {
                q.deferred_timer_armed = true;
                let at = q.np_barrier;
                self.push_timer(at, Timer::Deferred(qpn));
                return;
            }
            let pkt = q.deferred.pop_front().unwrap();
            self.note_waiting(&pkt, false);
            // Executed now, it reaches the medium as any write does (or is refused); only
            // then does the hierarchy let it go, so the medium holds it throughout.
            self.execute_np(now, &pkt);
            self.hier.release_held(held_key(qpn, pkt.psn));
        }
    }

    /// Under WSP the RNIC buffer is in the persistence domain: a write waiting there is
    /// durable, so the medium holds it until it leaves the buffer. Out of line: it is rare,
    /// and the request path is every packet's.
    #[cold]
    #[inline(never)]
    fn hold_deferred(&mut self, qpn: QpNum, pkt: &Packet) {
        if let Some((space, addr, data)) = self.deferred_write(qpn, pkt) {
            self.hier.hold(held_key(qpn, pkt.psn), space, addr, data);
        }
    }

    /// Where a deferred non-posted write of `qpn` would write if it executed now: `None`
    /// if it is no write or would be refused (the checks of [`execute_np`](Self::execute_np)).
    pub(super) fn deferred_write<'p>(
        &self,
        qpn: QpNum,
        pkt: &'p Packet,
    ) -> Option<(Space, u64, &'p [u8])> {
        let Body::NonPostedWrite {
            addr,
            rkey,
            data,
            atomic,
        } = &pkt.body
        else {
            return None;
        };
        if !self.implements(&pkt.body) {
            return None;
        }
        let space = self.check_np_write(qpn, *addr, *rkey, data, *atomic).ok()?;
        Some((space, *addr, &data[..]))
    }

    /// Whether this RNIC implements the request's operation (FLUSH, ATOMIC WRITE and the
    /// non-posted write are extensions; a legacy responder refuses them).
    fn implements(&self, body: &Body) -> bool {
        let caps = self.config.caps;
        match body {
            Body::Flush { .. } | Body::SFlush { .. } => caps.native_flush,
            Body::NonPostedWrite { atomic: true, .. } => caps.atomic_write,
            Body::NonPostedWrite { atomic: false, .. } => caps.non_posted_write,
            _ => true,
        }
    }

    /// The checks of a non-posted write of `data` to `addr`: an ATOMIC WRITE is one
    /// aligned 8-byte word, and the region must grant remote writes. Returns the target's
    /// space, or the NAK code.
    fn check_np_write(
        &self,
        qpn: QpNum,
        addr: u64,
        rkey: u32,
        data: &[u8],
        atomic: bool,
    ) -> Result<Space, NakCode> {
        if atomic && (data.len() != 8 || !addr.is_multiple_of(8)) {
            return Err(NakCode::RemoteAccess);
        }
        self.check_remote(qpn, rkey, addr, data.len() as u64, Access::REMOTE_WRITE)
    }

    /// Lets go of the held writes (see [`MemoryHierarchy::hold`]) that would no longer
    /// execute: their region went. (A failed queue pair lets go of its own.)
    pub(super) fn recheck_held(&mut self) {
        if self.hier.held_writes() == 0 {
            return;
        }
        let mut gone = Vec::new();
        for (n, q) in self.qps.iter().enumerate() {
            for p in &q.deferred {
                let key = held_key(QpNum(n as u32), p.psn);
                if self.hier.is_held(key) && self.deferred_write(QpNum(n as u32), p).is_none() {
                    gone.push(key);
                }
            }
        }
        for key in gone {
            self.hier.release_held(key);
        }
    }

    /// Executes a non-posted request once every earlier request of its QP took effect.
    pub(super) fn execute_np(&mut self, now: Instant, pkt: &Packet) {
        let qpn = pkt.dst_qp;
        // The responder's own RNIC must implement the operation: a requester that assumed
        // FLUSH or ATOMIC WRITE of a legacy responder gets NAK invalid request (IBTA),
        // never a silent success.
        if !self.implements(&pkt.body) {
            return self.nak(now, pkt, NakCode::InvalidRequest);
        }
        let done = match &pkt.body {
            Body::Read { addr, rkey, len } => {
                if *len as u64 > self.max_message {
                    return self.nak(now, pkt, NakCode::InvalidRequest);
                }
                let space =
                    match self.check_remote(qpn, *rkey, *addr, *len as u64, Access::REMOTE_READ) {
                        Ok(s) => s,
                        Err(code) => return self.nak(now, pkt, code),
                    };
                let (data, t) = self.hier.dma_read(now, space, *addr, *len as usize);
                self.respond(t, pkt, Body::ReadResp(Bytes::from(data)));
                t
            }
            Body::Atomic {
                addr,
                rkey,
                compare,
                operand,
            } => {
                if addr % 8 != 0 {
                    return self.nak(now, pkt, NakCode::RemoteAccess);
                }
                let space = match self.check_remote(qpn, *rkey, *addr, 8, Access::REMOTE_ATOMIC) {
                    Ok(s) => s,
                    Err(code) => return self.nak(now, pkt, code),
                };
                let old =
                    u64::from_le_bytes(self.hier.read_ordered(space, *addr, 8).try_into().unwrap());
                let new = match compare {
                    Some(c) if *c == old => Some(*operand),
                    Some(_) => None,
                    None => Some(old.wrapping_add(*operand)),
                };
                let t = match new {
                    Some(v) => {
                        self.hier
                            .dma_write(now, space, *addr, &v.to_le_bytes())
                            .visible
                    }
                    // A failed compare still read the word after every earlier write.
                    None => self.hier.ordered_read_done(now),
                } + self.pcie;
                self.respond(t, pkt, Body::AtomicResp(old));
                t
            }
            Body::Flush {
                addr,
                rkey,
                len,
                placement,
            } => {
                let need = match placement {
                    crate::hierarchy::FlushPlacement::Visibility => Access::FLUSH_GLOBAL,
                    crate::hierarchy::FlushPlacement::Persistence => Access::FLUSH_PERSISTENT,
                };
                let space = match self.check_remote(qpn, *rkey, *addr, *len, need) {
                    // DRAM cannot be made persistent: a region there never holds the
                    // persistence-placement right, whatever its registration says (rxe
                    // refuses `IB_ACCESS_FLUSH_PERSISTENT` on non-pmem memory), as SFlush
                    // refuses a SEND that landed in DRAM and RFlush a DRAM range.
                    Ok(Space::Dram)
                        if *placement == crate::hierarchy::FlushPlacement::Persistence =>
                    {
                        return self.nak(now, pkt, NakCode::RemoteAccess)
                    }
                    Ok(s) => s,
                    Err(code) => return self.nak(now, pkt, code),
                };
                let range = FlushRange {
                    space,
                    addr: *addr,
                    len: *len,
                };
                let t = self.hier.flush_done(now, *placement, range);
                self.respond(t, pkt, Body::Done);
                t
            }
            Body::NonPostedWrite {
                addr,
                rkey,
                data,
                atomic,
            } => {
                let space = match self.check_np_write(qpn, *addr, *rkey, data, *atomic) {
                    Ok(s) => s,
                    Err(code) => return self.nak(now, pkt, code),
                };
                let t = self.hier.dma_write(now, space, *addr, data).visible + self.pcie;
                self.respond(t, pkt, Body::Done);
                t
            }
            Body::SFlush { send_psn } => match self.execute_sflush(now, pkt, *send_psn) {
                Some(t) => t,
                None => return,
            },
            _ => unreachable!("posted requests do not come here"),
        };
        self.qps[qpn.0 as usize].np_barrier = done;
        self.stats.requests_executed += 1;
        self.event(now, EventKind::Executed, qpn, pkt.psn as u64);
    }
}

/// The key a deferred request is held by in the hierarchy: its QP and PSN (unique while it
/// waits).
pub(super) fn held_key(qpn: QpNum, psn: Psn) -> u64 {
    (qpn.0 as u64) << 32 | psn as u64
}
