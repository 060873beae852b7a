//! The durable-RPC client: calls, batches, resume after a restart (see the module above).

use super::*;

const WR_DATA: u64 = 1 << 60;
const WR_FLUSH: u64 = 2 << 60;
const WR_OP: u64 = 3 << 60;
const WR_DOORBELL: u64 = 4 << 60;
const WR_PROBE: u64 = 5 << 60;

/// How long [`DurableClient::reopen`] waits for the receives of the failed queue pair to
/// complete (an RNIC completes them within microseconds; the simulator's time is free).
pub const REOPEN_DRAIN: Duration = Duration::from_millis(100);

/// The client side of one durable-RPC connection. See the module documentation.
pub struct DurableClient<V: Verbs> {
    v: V,
    opts: DurableOptions,
    pd: PdId,
    staging: MrInfo,
    scratch: MrInfo,
    recv: MrInfo,
    nrecv: u64,
    qp: QpNum,
    cq: CqId,
    /// Receives posted on `qp` that have not completed yet: each completes, with a
    /// message or flushed, before `reopen` lets `cq` go.
    recvs_out: u64,
    /// A replaced queue pair's CQ that `reopen` has not finished draining (it was
    /// cancelled, or timed out), with the receives still to complete into it: the next
    /// `reopen` drains it first.
    stale: Option<(CqId, u64)>,
    info: Option<ConnInfo>,
    plan: Option<FlushPlan>,
    next_seq: u64,
    /// Issued, no reply yet.
    pending: BTreeMap<u64, Op>,
    /// Issued, not acknowledged durable.
    unacked: BTreeMap<u64, Op>,
    replies: BTreeMap<u64, Reply>,
    processed_known: u64,
    durable_known: u64,
    slow: bool,
    done: BTreeSet<u64>,
    probing: bool,
    wr_seq: u64,
    /// A `send_entries` began posting and has not posted everything yet: a call dropped
    /// there (a caller's time-out) left entries without their operator or doorbell, and
    /// the server's processor stops at the first of them. Cleared by a new queue pair
    /// (`resume` then re-sends them).
    posting: bool,
}

impl<V: Verbs> DurableClient<V> {
    /// Registers the client's buffers and creates its queue pair (connect it to the
    /// server's, then [`attach`](Self::attach)).
    pub fn create(v: V, opts: &DurableOptions) -> Result<Self, RpcError> {
        let layout = opts.log_layout(0)?;
        let pd = v.alloc_pd()?;
        let st_len = layout.capacity as u64 * layout.entry_bytes as u64;
        let st = v.alloc(Space::Dram, st_len, 4096);
        let staging = v.reg_mr(pd, Space::Dram, st, st_len, Access::ALL)?;
        let sc = v.alloc(Space::Dram, 64, 64);
        let scratch = v.reg_mr(pd, Space::Dram, sc, 64, Access::ALL)?;
        let nrecv = 2 * opts.capacity as u64 + 8;
        let rl = nrecv * opts.recv_bytes();
        let ra = v.alloc(Space::Dram, rl, 4096);
        let recv = v.reg_mr(pd, Space::Dram, ra, rl, Access::ALL)?;
        let mut c = DurableClient {
            v,
            opts: opts.clone(),
            pd,
            staging,
            scratch,
            recv,
            nrecv,
            qp: QpNum(0),
            cq: CqId(0),
            recvs_out: 0,
            stale: None,
            info: None,
            plan: None,
            next_seq: 1,
            pending: BTreeMap::new(),
            unacked: BTreeMap::new(),
            replies: BTreeMap::new(),
            processed_known: 0,
            durable_known: 0,
            slow: false,
            done: BTreeSet::new(),
            probing: false,
            wr_seq: 0,
            posting: false,
        };
        c.open_qp()?;
        Ok(c)
    }

    /// A new queue pair (after the old one failed); connect it, then
    /// [`attach`](Self::attach) and [`resume`](Self::resume).
    ///
    /// The new queue pair is made first: a failure leaves the client with the old one,
    /// and a later `reopen` can try again. Then the old one is destroyed, which completes
    /// every receive still posted on it (flushed) into its completion queue, and
    /// everything the old queue pair received is taken in before that queue goes: its
    /// RNIC acknowledged those messages, so the server counts them delivered and never
    /// sends them again (replies of requests recovery executed, say, that arrived after
    /// the last poll). That includes a message whose completion the RNIC had not yet
    /// delivered when the connection failed (it acknowledges a message a little before
    /// its completion reaches the queue): the old queue is kept until every receive posted
    /// on it has completed, for up to [`REOPEN_DRAIN`]. A `reopen` cancelled (or timed
    /// out) while it waits leaves that queue to the next `reopen`, which drains it before
    /// anything else and keeps the queue pair the first one made (never connected, since
    /// the first did not return it).
    pub async fn reopen(&mut self) -> Result<QpNum, RpcError> {
        if self.stale.is_none() {
            let (old_qp, old_cq, out) = (self.qp, self.cq, self.recvs_out);
            self.open_qp()?;
            self.stale = Some((old_cq, out));
            self.v.destroy_qp(old_qp)?;
        }
        let (old_cq, mut out) = self
            .stale
            .expect("set above, or left by an unfinished reopen");
        let give_up = self.v.now() + REOPEN_DRAIN;
        let mut taken = Ok(());
        loop {
            while let Some(wc) = self.v.poll_one(old_cq) {
                // The old connection's sends end with it.
                if !wc.opcode.is_receive() {
                    continue;
                }
                out = out.saturating_sub(1);
                self.stale = Some((old_cq, out));
                if wc.status == WcStatus::Success && taken.is_ok() {
                    taken = self.received(&wc);
                }
            }
            let now = self.v.now();
            if out == 0 || now >= give_up {
                break;
            }
            remora_verbs::wait_cq_or(&self.v, old_cq, give_up - now).await;
        }
        if out > 0 {
            // Its RNIC never completed them: the queue is kept (a completion still on its
            // way lands there, not in a reused one) for the next `reopen`, and the loss is
            // the caller's to see.
            return Err(RpcError::Connection(format!(
                "{out} receives of the failed queue pair did not complete within \
                 {REOPEN_DRAIN:?}: replies they took may be lost"
            )));
        }
        self.stale = None;
        self.v.destroy_cq(old_cq)?;
        taken?;
        Ok(self.qp)
    }

    /// Creates the client's queue pair and its completion queue (both or neither).
    fn open_qp(&mut self) -> Result<QpNum, RpcError> {
        let sq = 4 * self.opts.capacity as usize + 64;
        let cq = self.v.create_cq(sq + self.nrecv as usize + 1)?;
        let attr = QpAttr {
            sq_depth: sq,
            rq_depth: self.nrecv as usize,
            ..QpAttr::default()
        };
        let qp = match self.v.create_qp(self.pd, cq, cq, attr) {
            Ok(qp) => qp,
            Err(e) => {
                // Nothing uses the new CQ yet, so it goes; the error is the one to tell.
                let _ = self.v.destroy_cq(cq);
                return Err(e.into());
            }
        };
        (self.qp, self.cq) = (qp, cq);
        self.recvs_out = 0;
        self.done.clear();
        self.probing = false;
        self.slow = false;
        self.posting = false;
        Ok(self.qp)
    }

    /// The queue pair to connect to the server's.
    pub fn qp(&self) -> QpNum {
        self.qp
    }

    /// The sequence numbers of the replies this client holds (received, or known from a
    /// resume) and [`drain`](RpcClient::drain) has not handed out yet.
    pub fn replies_held(&self) -> Vec<u64> {
        self.replies.keys().copied().collect()
    }

    /// Learns the server's log and posts receives. On a first connection the server
    /// must not have processed anything yet.
    pub fn attach(&mut self, info: ConnInfo) -> Result<(), RpcError> {
        let plan = self.opts.plan(&info.config)?;
        for i in 0..self.nrecv {
            self.post_recv(i)?;
        }
        if self.info.is_none() {
            self.next_seq = info.processed + 1;
            self.processed_known = info.processed;
            self.durable_known = info.processed;
        }
        self.info = Some(info);
        self.plan = Some(plan);
        Ok(())
    }

    fn post_recv(&mut self, i: u64) -> Result<(), RpcError> {
        let b = self.opts.recv_bytes();
        self.v.post_recv(
            self.qp,
            RecvWr {
                wr_id: i,
                sge: Sge {
                    addr: self.recv.addr + i * b,
                    len: b as u32,
                    lkey: self.recv.lkey,
                },
            },
        )?;
        self.recvs_out += 1;
        Ok(())
    }

    fn info(&self) -> Result<(ConnInfo, FlushPlan), RpcError> {
        match (self.info, self.plan) {
            (Some(i), Some(p)) => Ok((i, p)),
            _ => Err(RpcError::Connection("not attached to a server".into())),
        }
    }

    /// Sequence numbers issued so far (requests `1..=issued()` of this connection).
    pub fn issued(&self) -> u64 {
        self.next_seq - 1
    }

    /// Requests issued but not yet acknowledged durable, in sequence order.
    pub fn unacknowledged(&self) -> Vec<u64> {
        self.unacked.keys().copied().collect()
    }

    fn handle(&mut self, wc: WorkCompletion) -> Result<(), RpcError> {
        if wc.opcode.is_receive() {
            self.recvs_out = self.recvs_out.saturating_sub(1);
        }
        if wc.status != WcStatus::Success {
            return Err(wc_error(&wc));
        }
        match wc.opcode {
            WcOpcode::Recv => {
                // The buffer is posted again whatever it held: its bytes are copied out.
                let taken = self.received(&wc);
                self.post_recv(wc.wr_id)?;
                taken
            }
            _ if wc.wr_id == WR_PROBE => {
                self.probing = false;
                Ok(())
            }
            _ => {
                self.done.insert(wc.wr_id);
                Ok(())
            }
        }
    }

    /// Takes in a message a successful receive completion `wc` placed in its buffer (which
    /// is not posted again here).
    fn received(&mut self, wc: &WorkCompletion) -> Result<(), RpcError> {
        match wc.byte_len {
            0 => {
                // A native RFlush's notification: the immediate is the low 32 bits of the
                // last durable sequence number (no backlog notice; replies carry it).
                // Only a plan with a receiver-side RFlush has the server send one.
                if !self.plan.is_some_and(|p| p.receiver_rflush) {
                    return Err(RpcError::Malformed(
                        "a zero-length notification, which only a native RFlush's receiver sends"
                            .into(),
                    ));
                }
                let issued = self.next_seq - 1;
                let low = wc.imm.unwrap_or(0) as u64;
                let mut upto = (issued & !0xffff_ffff) | low;
                if upto > issued {
                    // The latest number at or below `issued` with these low bits; none
                    // (below 2^32) is a notification for requests never sent.
                    if upto < 1 << 32 {
                        return Err(RpcError::Malformed(format!(
                            "a notification that requests up to {upto} are durable; \
                             {issued} were sent"
                        )));
                    }
                    upto -= 1 << 32;
                }
                self.durable_known = self.durable_known.max(upto);
            }
            len => {
                let b = self.opts.recv_bytes();
                let mut buf = vec![0u8; len as usize];
                self.v
                    .load(Space::Dram, self.recv.addr + wc.wr_id * b, &mut buf);
                let notice = Notice::from_imm(wc.imm.unwrap_or(0));
                self.slow = notice.slow;
                // A server cannot have made durable, or answered, a request not yet sent:
                // taken as true, that would tell a caller a request is durable that the
                // server never saw.
                let issued = self.next_seq - 1;
                match ServerMsg::parse(&buf)? {
                    ServerMsg::Durable { upto } => {
                        if upto > issued {
                            return Err(RpcError::Malformed(format!(
                                "the server says requests up to {upto} are durable; {issued} were sent"
                            )));
                        }
                        self.durable_known = self.durable_known.max(upto);
                    }
                    ServerMsg::Reply(f) => {
                        let seq = f.reply.seq;
                        if f.conn != self.opts.conn {
                            return Err(RpcError::Malformed(format!(
                                "a reply for connection {}'s request {seq}; this is connection {}",
                                f.conn, self.opts.conn
                            )));
                        }
                        if seq > issued {
                            return Err(RpcError::Malformed(format!(
                                "a reply for request {seq}; {issued} were sent"
                            )));
                        }
                        self.processed_known = self.processed_known.max(seq);
                        if self.pending.remove(&seq).is_some() {
                            self.replies.insert(seq, f.reply);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes completions until `cond` holds; probes an idle server so a dead one shows.
    /// Fails after [`DurableOptions::reply_timeout`] without progress: a probe's
    /// completion shows only that the server's RNIC is alive, not that its RPC threads
    /// are, so it does not count as progress (a server whose threads died while its RNIC
    /// lived kept a client waiting forever).
    async fn pump_until(&mut self, cond: impl Fn(&Self) -> bool) -> Result<(), RpcError> {
        let mut last_progress = self.v.now();
        let mut probe_answered = false;
        loop {
            while let Some(wc) = self.v.poll_one(self.cq) {
                let probe = wc.wr_id == WR_PROBE && wc.opcode != WcOpcode::Recv;
                self.handle(wc)?;
                if probe {
                    probe_answered = true;
                } else {
                    last_progress = self.v.now();
                    probe_answered = false;
                }
            }
            if cond(self) {
                return Ok(());
            }
            let idle = self.v.now().saturating_since(last_progress);
            if idle >= self.opts.reply_timeout {
                return Err(if probe_answered {
                    RpcError::ServerStalled(idle)
                } else {
                    RpcError::Timeout(idle)
                });
            }
            let left = Duration::from_nanos(self.opts.reply_timeout.as_nanos() - idle.as_nanos());
            let wait = self.opts.probe_interval.min(left);
            if remora_verbs::wait_cq_or(&self.v, self.cq, wait).await {
                continue;
            }
            if !self.probing {
                let (info, _) = self.info()?;
                self.probing = true;
                self.v.post_send(
                    self.qp,
                    SendWr::new(
                        WR_PROBE,
                        Opcode::Read,
                        Payload::Sge(Sge {
                            addr: self.scratch.addr,
                            len: 8,
                            lkey: self.scratch.lkey,
                        }),
                        Some(info.entries_remote()),
                    ),
                )?;
            }
        }
    }

    fn wr_id(&mut self, kind: u64) -> u64 {
        self.wr_seq += 1;
        kind | self.wr_seq
    }

    fn post(&self, wr: SendWr) -> Result<(), RpcError> {
        self.v.post_send(self.qp, wr)?;
        Ok(())
    }

    /// Consecutive sequence numbers whose entries are adjacent in the ring.
    fn runs(layout: &LogLayout, seqs: &[u64]) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &s in seqs {
            match out.last_mut() {
                Some((_, last)) if *last + 1 == s && layout.slot(s) != 0 => *last = s,
                _ => out.push((s, s)),
            }
        }
        out
    }

    fn post_data(
        &mut self,
        info: &ConnInfo,
        plan: &FlushPlan,
        r: &Request,
    ) -> Result<(), RpcError> {
        let bytes = r.to_bytes();
        let at = self.staging.addr + info.layout.slot(r.seq) * info.layout.entry_bytes as u64;
        self.v.store(Space::Dram, at, &bytes);
        let sge = Payload::Sge(Sge {
            addr: at,
            len: bytes.len() as u32,
            lkey: self.staging.lkey,
        });
        let id = self.wr_id(WR_DATA);
        let wr = match plan.carrier {
            Family::Write => SendWr::new(id, Opcode::Write, sge, Some(info.data_remote(r.seq))),
            Family::Send => SendWr::new(id, Opcode::Send, sge, None),
        };
        self.post(wr.signaled(false))
    }

    /// Posts the flushes of the data of `reqs` (one per ring run); the last one is
    /// signaled when `signal`, and its id returned.
    async fn post_data_flush(
        &mut self,
        info: &ConnInfo,
        kind: SenderFlush,
        reqs: &[Request],
        signal: bool,
    ) -> Result<u64, RpcError> {
        if let Some(d) = kind.lookup() {
            // Emulated SFlush: the RNIC's destination lookup (§4.1.3).
            self.v.compute(d).await;
        }
        if kind.covers_all() {
            // Native SFlush: one after the batch's last SEND (see `crate::flush`).
            let id = self.wr_id(WR_FLUSH);
            self.post(SendWr::sflush(id).signaled(signal))?;
            return Ok(id);
        }
        self.post_run_flushes(info, kind, reqs, signal, |layout, a, b| {
            let end_len = reqs.iter().find(|r| r.seq == b).unwrap().frame_len() as u64;
            let start = layout.data_addr(a);
            (start, layout.data_addr(b) + end_len - start)
        })
    }

    /// Posts one flush of `kind` per ring run of `reqs`, over the range `range` gives for
    /// the run's first and last sequence numbers (start, length); the last flush is
    /// signaled when `signal`, and its id returned.
    fn post_run_flushes(
        &mut self,
        info: &ConnInfo,
        kind: SenderFlush,
        reqs: &[Request],
        signal: bool,
        range: impl Fn(&LogLayout, u64, u64) -> (u64, u64),
    ) -> Result<u64, RpcError> {
        let seqs: Vec<u64> = reqs.iter().map(|r| r.seq).collect();
        let runs = Self::runs(&info.layout, &seqs);
        let mut last = 0;
        for (i, &(a, b)) in runs.iter().enumerate() {
            let (start, len) = range(&info.layout, a, b);
            last = self.wr_id(WR_FLUSH);
            let wr = kind.work_request(
                last,
                Remote {
                    addr: start,
                    rkey: info.log_rkey,
                },
                len,
                self.scratch_sge(),
            );
            self.post(wr.signaled(signal && i + 1 == runs.len()))?;
        }
        Ok(last)
    }

    fn scratch_sge(&self) -> Sge {
        Sge {
            addr: self.scratch.addr,
            len: 8,
            lkey: self.scratch.lkey,
        }
    }

    /// Posts the operators of `reqs` (8-byte atomic writes) and their flushes; returns the
    /// id of the last, signaled, work request.
    fn post_operators(
        &mut self,
        info: &ConnInfo,
        kind: Option<SenderFlush>,
        reqs: &[Request],
    ) -> Result<u64, RpcError> {
        let atomic = info.config.caps.atomic_write;
        let n = reqs.len();
        let mut last = 0;
        for (i, r) in reqs.iter().enumerate() {
            let word = Operator::of(r).to_word();
            let remote = Some(info.entry_remote(r.seq));
            last = self.wr_id(WR_OP);
            let wr = if atomic {
                SendWr::new(
                    last,
                    Opcode::AtomicWrite { value: word },
                    Payload::None,
                    remote,
                )
            } else {
                // Without ATOMIC WRITE: an aligned 8-byte WRITE (never torn), fenced so it
                // cannot pass the data's flush.
                SendWr::new(
                    last,
                    Opcode::Write,
                    Payload::inline(word.to_le_bytes()),
                    remote,
                )
                .fenced(true)
            };
            self.post(wr.signaled(kind.is_none() && i + 1 == n))?;
        }
        if let Some(kind) = kind {
            last = self.post_run_flushes(info, kind, reqs, true, |layout, a, b| {
                let start = layout.entry_addr(a);
                (start, layout.entry_addr(b) + 8 - start)
            })?;
        }
        Ok(last)
    }

    /// The doorbell's immediate for `seq`: a WRITE design's doorbell (WRITE_WITH_IMM) names
    /// the last entry written in its 32-bit immediate, whole, so the server never has to
    /// guess a wrapped number. A connection of a WRITE design therefore numbers at most
    /// 2^32 - 1 requests; past that every call is refused with this error (a SEND design
    /// has no doorbell and no such limit).
    fn doorbell_imm(&self, seq: u64) -> Result<u32, RpcError> {
        match self.plan {
            Some(p) if p.carrier == Family::Write => {
                u32::try_from(seq).map_err(|_| RpcError::Unsupported {
                    design: self.opts.design.name(),
                    what: format!("sequence number {seq} in a 32-bit doorbell"),
                })
            }
            _ => Ok(0),
        }
    }

    fn post_doorbell(&mut self, info: &ConnInfo, seq: u64, fenced: bool) -> Result<(), RpcError> {
        let id = self.wr_id(WR_DOORBELL);
        let imm = self.doorbell_imm(seq)?;
        self.post(
            SendWr::new(
                id,
                Opcode::WriteWithImm(imm),
                Payload::None,
                Some(info.entries_remote()),
            )
            .signaled(false)
            .fenced(fenced),
        )
    }

    async fn wait_wr(&mut self, id: u64) -> Result<(), RpcError> {
        self.pump_until(|c| c.done.contains(&id)).await?;
        self.done.remove(&id);
        Ok(())
    }

    /// Places `reqs` (consecutive sequence numbers) in the log and returns once all are
    /// durable (seed 003 §4.2, §4.3).
    async fn send_entries(&mut self, reqs: &[Request]) -> Result<Instant, RpcError> {
        let (info, plan) = self.info()?;
        self.posting = true;
        let last_seq = reqs.last().expect("at least one request").seq;
        let fault = self.opts.fault;
        if fault == Some(Fault::OperatorBeforeData) && !plan.server_acknowledges() {
            let id = self.post_operators(&info, plan.operator_flush, reqs)?;
            self.wait_wr(id).await?;
        }
        for r in reqs {
            self.post_data(&info, &plan, r)?;
        }
        if fault == Some(Fault::AckOnWriteCompletion) {
            let id = self.post_operators(&info, None, reqs)?;
            if plan.carrier == Family::Write {
                self.post_doorbell(&info, last_seq, false)?;
            }
            self.posting = false;
            self.wait_wr(id).await?;
            return Ok(self.v.now());
        }
        if plan.server_acknowledges() {
            if let Some(kind) = plan.data_flush {
                self.post_data_flush(&info, kind, reqs, false).await?;
            }
            if plan.carrier == Family::Write {
                self.post_doorbell(&info, last_seq, plan.data_flush.is_some())?;
            }
            self.posting = false;
            self.pump_until(|c| c.durable_known >= last_seq).await?;
            return Ok(self.v.now());
        }
        let kind = plan
            .data_flush
            .expect("a sender-side plan flushes its data");
        let id = if fault == Some(Fault::OperatorBeforeData) {
            self.post_data_flush(&info, kind, reqs, true).await?
        } else {
            self.post_data_flush(&info, kind, reqs, false).await?;
            self.post_operators(&info, plan.operator_flush, reqs)?
        };
        if plan.carrier == Family::Write {
            // Wakes the server's thread once the operator is durable (fenced behind it).
            self.post_doorbell(&info, last_seq, true)?;
        }
        self.posting = false;
        self.wait_wr(id).await?;
        Ok(self.v.now())
    }

    fn not_half_sent(&self) -> Result<(), RpcError> {
        if self.posting {
            return Err(RpcError::Connection(
                "an earlier call was dropped while posting its requests (some lack their \
                 operator or doorbell): reopen and resume"
                    .into(),
            ));
        }
        Ok(())
    }

    fn validate(&self, op: &Op) -> Result<(), RpcError> {
        let bad = |what: String| {
            Err(RpcError::Unsupported {
                design: self.opts.design.name(),
                what,
            })
        };
        match op {
            Op::Get { key } | Op::Put { key, .. } if *key >= self.opts.objects => bad(format!(
                "key {key} (the store holds keys 0..{})",
                self.opts.objects
            )),
            Op::Put { value, .. } if value.len() > self.opts.max_value as usize => bad(format!(
                "a {}-byte value (max {})",
                value.len(),
                self.opts.max_value
            )),
            Op::Scan { count, .. } if *count > self.opts.max_scan => bad(format!(
                "a Scan of {count} objects (max {})",
                self.opts.max_scan
            )),
            _ => Ok(()),
        }
    }

    /// Issues `ops`, up to [`DurableOptions::batch`] per Flush (§4.3), and returns one
    /// completion per op once every op is durable (reads: once their results arrived).
    pub async fn call_batch(&mut self, ops: Vec<Op>) -> Result<Vec<Completion>, RpcError> {
        self.not_half_sent()?;
        for op in &ops {
            self.validate(op)?;
        }
        let (info, _) = self.info()?;
        let batch = self.opts.batch.clamp(1, info.layout.capacity) as usize;
        let cap = info.layout.capacity as u64;
        let mut out = Vec::with_capacity(ops.len());
        for chunk in ops.chunks(batch) {
            let first = self.next_seq;
            let last = first + chunk.len() as u64 - 1;
            // Before anything of the chunk is posted: refused half-way, at its doorbell,
            // an entry was already committed in the log though its call failed.
            self.doorbell_imm(last)?;
            // Ring space, and the server's slow-down request (§4.2).
            self.pump_until(|c| {
                last <= c.processed_known + cap && (!c.slow || c.pending.is_empty())
            })
            .await?;
            let reqs: Vec<Request> = chunk
                .iter()
                .enumerate()
                .map(|(i, op)| Request {
                    conn: self.opts.conn,
                    seq: first + i as u64,
                    op: op.clone(),
                })
                .collect();
            for r in &reqs {
                self.pending.insert(r.seq, r.op.clone());
                self.unacked.insert(r.seq, r.op.clone());
            }
            self.next_seq = last + 1;
            let at = self.send_entries(&reqs).await?;
            for r in &reqs {
                self.unacked.remove(&r.seq);
            }
            for r in reqs {
                let c = match r.op {
                    Op::Put { .. } => Completion {
                        seq: r.seq,
                        durable_at: Some(at),
                        reply: None,
                    },
                    _ => {
                        self.pump_until(|c| c.replies.contains_key(&r.seq)).await?;
                        Completion {
                            seq: r.seq,
                            durable_at: None,
                            reply: self.replies.remove(&r.seq),
                        }
                    }
                };
                out.push(c);
            }
        }
        Ok(out)
    }

    /// After the server recovered and [`attach`](Self::attach) gave its new
    /// [`ConnInfo`]: learns the results of requests recovery executed (their replies
    /// arrive on the new connection; a Put processed before the crash whose reply was lost
    /// has an empty reply), and re-sends the requests that were never acknowledged durable
    /// and are not in the recovered log. Fails if the server lost a request it had
    /// acknowledged as durable.
    pub async fn resume(&mut self) -> Result<(), RpcError> {
        let (info, _) = self.info()?;
        let issued = self.next_seq - 1;
        if info.processed > issued {
            // The log holds requests this client never sent: its next sequence numbers
            // are ones the server already executed.
            return Err(RpcError::Malformed(format!(
                "the server's log is processed up to {}; this client sent {issued}",
                info.processed
            )));
        }
        // Every request past the log's end that is not unacknowledged was acknowledged
        // durable (answered or not).
        let past = issued - info.processed;
        if (self.unacked.range(info.processed + 1..).count() as u64) < past {
            let lost = (info.processed + 1..=issued)
                .find(|s| !self.unacked.contains_key(s))
                .expect("fewer unacknowledged than issued past the end");
            return Err(RpcError::LostDurable {
                processed: info.processed,
                seq: lost,
            });
        }
        self.processed_known = self.processed_known.max(info.processed.min(issued));
        // Processed before the crash, reply lost: a Put's reply carries nothing (and this
        // client sends no Put the store would refuse: `validate`); a read's caller already
        // saw its call fail.
        let lost: Vec<u64> = self
            .pending
            .range(..=info.processed_before_recovery)
            .map(|(s, _)| *s)
            .collect();
        for s in lost {
            if let Some(Op::Put { .. }) = self.pending.remove(&s) {
                self.replies.insert(s, Reply::ok(s, vec![]));
            }
        }
        // Recovered from the log: durable now; replies follow on the new connection.
        let recovered: Vec<u64> = self
            .unacked
            .range(..=info.processed)
            .map(|(s, _)| *s)
            .collect();
        for s in recovered {
            self.unacked.remove(&s);
        }
        self.durable_known = info.processed;
        // Never durable: send again with the same sequence numbers.
        let again: Vec<Request> = self
            .unacked
            .iter()
            .map(|(s, op)| Request {
                conn: self.opts.conn,
                seq: *s,
                op: op.clone(),
            })
            .collect();
        let batch = self.opts.batch.clamp(1, info.layout.capacity) as usize;
        for chunk in again.chunks(batch) {
            let last = chunk.last().unwrap().seq;
            let cap = info.layout.capacity as u64;
            self.pump_until(|c| last <= c.processed_known + cap).await?;
            self.send_entries(chunk).await?;
            for r in chunk {
                self.unacked.remove(&r.seq);
            }
        }
        Ok(())
    }
}

impl<V: Verbs> RpcClient for DurableClient<V> {
    async fn call(&mut self, op: Op) -> Result<Completion, RpcError> {
        let mut v = self.call_batch(vec![op]).await?;
        Ok(v.pop().expect("one completion per op"))
    }

    async fn drain(&mut self) -> Result<Vec<Reply>, RpcError> {
        self.pump_until(|c| c.pending.is_empty()).await?;
        Ok(std::mem::take(&mut self.replies).into_values().collect())
    }
}
