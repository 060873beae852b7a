//! A baseline's server (seed 003 §5.1: "We deploy each RPC service in a single server"):
//! one dispatcher thread notices requests of every connection the way its design does
//! (receive completions, or polling rings or mailboxes) and hands each to a worker of the
//! server's pool ([`crate::workers`], [`ServerCosts::workers`] threads, as every design's
//! server has), which processes it, persists a Put through [`KvStore::apply`] and only then
//! replies (§3: "When the RPC is completed, the sender can validate that the data has been
//! persisted by the receiver"). A connection has one request cell in service at a time.

use super::cell::{self, Header, Kind, Status, WarmUp};
use super::client::{BaselineClient, ServerSide};
use super::{
    chunk_imm, BaselineParams, ReplyPath, RequestPath, ServerCpu, FLAG_BYTES, QKEY, UD_MTU,
};
use crate::api::{Op, RpcError, ServerCosts};
use crate::design::Design;
use crate::kv::{KvLayout, KvStore};
use crate::proto::{ReplyFrame, REPLY_HEADER};
use crate::workers::{Tasks, WorkerPool};
use remora_model::time::Instant;
use remora_verbs::{
    next_completion, Access, CqId, MrInfo, Opcode, Payload, PdId, QpAttr, QpNum, QpType, RecvWr,
    Remote, SendWr, Sge, Space, UdDest, Verbs, WcStatus,
};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

/// What a server did, readable while it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Requests executed.
    pub requests: u64,
    /// Cells (RPCs) answered, including rejections.
    pub cells: u64,
    /// Cells refused as malformed (the sender got a `Rejected` reply).
    pub rejected: u64,
    /// Requests refused as beyond the design (FaSST's UD MTU).
    pub unsupported: u64,
    /// ScaleRPC warm-up phases served.
    pub warmups: u64,
    /// The most recent errors, oldest first (at most [`ServerStats::ERRORS_KEPT`]).
    pub errors: Vec<String>,
}

impl ServerStats {
    /// Errors kept.
    pub const ERRORS_KEPT: usize = 16;

    fn error(&mut self, e: String) {
        if self.errors.len() == Self::ERRORS_KEPT {
            self.errors.remove(0);
        }
        self.errors.push(e);
    }
}

/// One client connection as the server sees it.
struct Conn {
    id: u32,
    qp: QpNum,
    /// The connection's UD queue pair (HERD: replies; FaSST: requests and replies).
    ud: Option<QpNum>,
    /// The client's UD queue pair.
    peer_ud: Option<UdDest>,
    /// Request receives are posted (UD ones when the connection is accepted).
    posted: bool,
    mr: MrInfo,
    /// Request ring (also the receive buffers of SEND designs).
    ring: u64,
    /// L5 mailbox.
    mailbox: u64,
    /// Completion flags of the request ring, one per slot.
    flags: u64,
    /// Reply staging; RFP's response buffer.
    replies: u64,
    /// ScaleRPC: where the server READs a warm-up's message body.
    fetch: u64,
    /// The client's reply ring and its rkey.
    peer_replies: Remote,
    /// The completion flags of the client's reply ring.
    peer_flags: Remote,
    /// The next cell's sequence number.
    expect: u64,
    /// The connection failed; it is no longer polled.
    dead: bool,
    /// Its current cell is with a worker (noticed, not yet answered).
    busy: bool,
}

/// A baseline server over node `V`.
pub struct BaselineServer<V: Verbs> {
    v: V,
    p: BaselineParams,
    cpu: ServerCpu,
    costs: ServerCosts,
    kv: KvStore<V>,
    pd: PdId,
    scq: CqId,
    rcq: CqId,
    conns: RefCell<Vec<Conn>>,
    stats: Rc<RefCell<ServerStats>>,
    req: RequestPath,
    rep: ReplyPath,
    next_poll: Cell<usize>,
    /// When a worker last answered a cell (the dispatcher's polling restarts then).
    answered: Cell<Instant>,
    /// Wakes the dispatcher when a connection's cell was answered.
    freed: Rc<Cell<Option<std::task::Waker>>>,
    /// Completed ScaleRPC warm-up READs, by connection index.
    reads: RefCell<BTreeMap<usize, WcStatus>>,
    workers: Option<WorkerPool>,
    /// Records the CPU work of each request (seed 003 Figure 20's breakdown), if set.
    work_log: Option<crate::account::WorkLog>,
}

/// Work request ids of warm-up READs: this plus the connection index.
const READ_TAG: u64 = 1 << 63;

impl<V: Verbs + Clone> BaselineServer<V> {
    /// A server for `p.design` with its objects at `layout` in PM (allocate it with
    /// [`KvLayout`] on this node first; a recovered server passes the same layout).
    pub fn create(
        v: V,
        p: BaselineParams,
        cpu: ServerCpu,
        costs: ServerCosts,
        layout: KvLayout,
    ) -> Result<Self, RpcError> {
        let (req, rep) = super::paths(p.design).expect("a baseline design");
        assert!(
            layout.max_value >= p.max_value,
            "slots hold the largest object"
        );
        let pd = v.alloc_pd()?;
        let scq = v.create_cq(4096)?;
        let rcq = v.create_cq(4096)?;
        let kv = KvStore::new(v.clone(), layout);
        Ok(BaselineServer {
            v,
            p,
            cpu,
            costs,
            kv,
            pd,
            scq,
            rcq,
            conns: RefCell::new(Vec::new()),
            stats: Rc::default(),
            req,
            rep,
            next_poll: Cell::new(0),
            answered: Cell::new(Instant::ZERO),
            freed: Rc::default(),
            reads: RefCell::new(BTreeMap::new()),
            workers: None,
            work_log: None,
        })
    }

    /// Records the CPU work done for each request cell in `log` (seed 003 §5.6, Figure
    /// 20): noticing and dispatching it, then handling it up to the reply.
    pub fn set_work_log(&mut self, log: crate::account::WorkLog) {
        self.work_log = Some(log);
    }

    /// Records `start..now` as work for cell `seq` of connection `ci` (if logging).
    fn account(&self, ci: usize, seq: u64, start: Instant) {
        if let Some(log) = &self.work_log {
            let id = self.conns.borrow()[ci].id;
            log.record(id, seq, start, self.v.now());
        }
    }

    /// Executes requests on `pool` instead of a pool of its own of
    /// [`ServerCosts::workers`] threads.
    pub fn set_workers(&mut self, pool: WorkerPool) {
        self.workers = Some(pool);
    }

    /// The design served.
    pub fn design(&self) -> Design {
        self.p.design
    }

    /// Counters shared with whoever holds the handle.
    pub fn stats(&self) -> Rc<RefCell<ServerStats>> {
        self.stats.clone()
    }

    /// The object store (to preload objects before serving, or inspect them).
    pub fn kv(&mut self) -> &mut KvStore<V> {
        &mut self.kv
    }

    /// Sets up connection `conn_id` on both sides: the server's queue pair and buffers,
    /// and a client on node `client`. Returns the client and the server's QP; the caller
    /// connects the two QPs (the connection manager's job; `Sim::connect` on the
    /// simulator) before either side sends.
    pub fn accept<C: Verbs>(
        &mut self,
        client: C,
        conn_id: u32,
    ) -> Result<(BaselineClient<C>, QpNum), RpcError> {
        assert!(conn_id != 0, "connection 0 is the preloader");
        let slots = self.p.ring_slots as u64;
        let (rq, rp) = (self.p.request_slot(), self.p.reply_slot());
        let len = slots * rq + slots * rp + rq + 64 + slots * FLAG_BYTES;
        let base = self.v.alloc(Space::Dram, len, 64);
        let mr = self.v.reg_mr(
            self.pd,
            Space::Dram,
            base,
            len,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )?;
        let qp = self.v.create_qp(
            self.pd,
            self.scq,
            self.rcq,
            QpAttr {
                rq_depth: self.p.ring_slots as usize * 2,
                qp_type: super::connected_qp_type(self.p.design),
                ..QpAttr::default()
            },
        )?;
        let (req_type, rep_type) = super::qp_types(self.p.design);
        let ud = if req_type == QpType::Ud || rep_type == QpType::Ud {
            Some(self.v.create_qp(
                self.pd,
                self.scq,
                self.rcq,
                QpAttr {
                    rq_depth: self.p.ring_slots as usize * 2,
                    qp_type: QpType::Ud,
                    qkey: QKEY,
                    ..QpAttr::default()
                },
            )?)
        } else {
            None
        };
        let (ring, replies) = (base, base + slots * rq);
        let (fetch, mailbox) = (replies + slots * rp, replies + slots * rp + rq);
        let flags = mailbox + 64;
        let side = ServerSide {
            ring,
            mailbox,
            replies,
            flags,
            rkey: mr.rkey,
            ud: ud.map(|qpn| UdDest {
                node: self.v.node(),
                qpn,
                qkey: QKEY,
            }),
        };
        let c = BaselineClient::create(client, self.p, conn_id, side)?;
        self.conns.get_mut().push(Conn {
            id: conn_id,
            qp,
            ud,
            peer_ud: c.ud_dest(),
            posted: false,
            mr,
            ring,
            mailbox,
            flags,
            replies,
            fetch,
            peer_replies: c.reply_ring(),
            peer_flags: c.reply_flags(),
            expect: 1,
            dead: false,
            busy: false,
        });
        if req_type == QpType::Ud {
            // A datagram finding no receive is dropped: post before the client can send.
            let ci = self.conns.get_mut().len() - 1;
            for s in 0..slots {
                self.post_slot(ci, s)?;
            }
            self.conns.get_mut()[ci].posted = true;
        }
        Ok((c, qp))
    }

    fn post_slot(&self, ci: usize, slot: u64) -> Result<(), RpcError> {
        let conns = self.conns.borrow();
        let c = &conns[ci];
        let sge = Sge {
            addr: c.ring + slot * self.p.request_slot(),
            len: self.p.request_slot() as u32,
            lkey: c.mr.lkey,
        };
        let wr_id = ((ci as u64) << 32) | slot;
        let qp = match self.req {
            // FaSST's requests arrive as datagrams on the UD queue pair.
            RequestPath::Send => c.ud.unwrap_or(c.qp),
            _ => c.qp,
        };
        Ok(self.v.post_recv(qp, RecvWr { wr_id, sge })?)
    }

    /// Serves until every connection failed or the node lost power; returns why it
    /// stopped. A malformed request gets a `Rejected` reply naming the problem and the
    /// server goes on serving.
    pub async fn serve(mut self) -> RpcError {
        match self.serve_inner().await {
            Ok(never) => match never {},
            Err(e) => e,
        }
    }

    async fn serve_inner(&mut self) -> Result<std::convert::Infallible, RpcError> {
        if matches!(self.req, RequestPath::Send | RequestPath::WriteImm) {
            for ci in 0..self.conns.get_mut().len() {
                if self.conns.get_mut()[ci].posted {
                    continue;
                }
                for s in 0..self.p.ring_slots as u64 {
                    self.post_slot(ci, s)?;
                }
                self.conns.get_mut()[ci].posted = true;
            }
        }
        let pool = self
            .workers
            .clone()
            .unwrap_or_else(|| WorkerPool::new(self.costs.workers));
        let this = &*self;
        let tasks: Tasks<'_, RpcError> = Tasks::default();
        let dispatcher = async {
            loop {
                if this.conns.borrow().iter().all(|c| c.dead) {
                    return Err(RpcError::Malformed("every connection failed".into()));
                }
                let (ci, slot) = this.next_request().await?;
                let worker = pool.acquire().await;
                tasks.start(async move {
                    let _worker = worker;
                    this.handle(ci, slot).await?;
                    if this.req == RequestPath::Send {
                        // The buffer is reposted once its message was handled.
                        this.post_slot(ci, slot)?;
                    }
                    Ok(())
                });
            }
        };
        tasks.run(dispatcher).await?
    }

    /// Waits for the next request cell: (connection index, ring slot); the connection is
    /// then busy until its reply is sent.
    async fn next_request(&self) -> Result<(usize, u64), RpcError> {
        match self.req {
            RequestPath::Send | RequestPath::WriteImm => loop {
                let wc = next_completion(&self.v, self.rcq).await;
                let ci = (wc.wr_id >> 32) as usize;
                if wc.status != WcStatus::Success {
                    let all_dead = {
                        let mut conns = self.conns.borrow_mut();
                        if let Some(c) = conns.get_mut(ci) {
                            c.dead = true;
                        }
                        conns.iter().all(|c| c.dead)
                    };
                    self.stats
                        .borrow_mut()
                        .error(format!("connection {ci}: receive failed ({})", wc.status));
                    if all_dead {
                        return Err(RpcError::Malformed("every connection failed".into()));
                    }
                    continue;
                }
                let noticed = self.v.now();
                self.v.compute(self.cpu.poll + self.cpu.handle).await;
                let expect = self.conns.borrow()[ci].expect;
                self.account(ci, expect, noticed);
                let slot = match self.req {
                    RequestPath::WriteImm => {
                        // The receive buffer is not used: repost it at once.
                        self.post_slot(ci, wc.wr_id & 0xffff_ffff)?;
                        wc.imm.unwrap_or(0) as u64 % self.p.ring_slots as u64
                    }
                    _ => wc.wr_id & 0xffff_ffff,
                };
                self.conns.borrow_mut()[ci].busy = true;
                return Ok((ci, slot));
            },
            _ => {
                let mut start = self.v.now();
                loop {
                    let n = self.conns.borrow().len();
                    for k in 0..n {
                        let ci = (self.next_poll.get() + k) % n;
                        if self.arrived(ci) {
                            self.next_poll.set((ci + 1) % n);
                            self.conns.borrow_mut()[ci].busy = true;
                            let noticed = self.v.now();
                            self.v.compute(self.cpu.handle).await;
                            let expect = self.conns.borrow()[ci].expect;
                            self.account(ci, expect, noticed);
                            let slot = self.conns.borrow()[ci].expect % self.p.ring_slots as u64;
                            return Ok((ci, slot));
                        }
                    }
                    if self.conns.borrow().iter().all(|c| c.dead || c.busy) {
                        // Nothing can arrive before a worker answers a cell.
                        std::future::poll_fn(|cx| {
                            if self.conns.borrow().iter().all(|c| c.dead || c.busy) {
                                self.freed.set(Some(cx.waker().clone()));
                                std::task::Poll::Pending
                            } else {
                                std::task::Poll::Ready(())
                            }
                        })
                        .await;
                        start = self.v.now();
                        continue;
                    }
                    // A poller re-reads continuously; the probes thin out only for the
                    // simulation's sake (see `Polling`), from the last answer on.
                    let since = if self.answered.get() > start {
                        self.answered.get()
                    } else {
                        start
                    };
                    let waited = self.v.now().saturating_since(since);
                    self.v.compute(self.p.polling.gap(waited)).await;
                }
            }
        }
    }

    /// One probe of connection `ci`: has its next cell landed?
    fn arrived(&self, ci: usize) -> bool {
        let conns = self.conns.borrow();
        let c = &conns[ci];
        if c.dead || c.busy {
            return false;
        }
        if self.req == RequestPath::WriteMailbox {
            let mut b = [0u8; 8];
            self.v.load(Space::Dram, c.mailbox, &mut b);
            return u64::from_le_bytes(b) >= c.expect;
        }
        // The cell's own trailer is no completion signal: its offset comes from the
        // header, and bytes an earlier, longer cell left there can hold this sequence
        // number. The flag is WRITTEN after the cell (see `cell`).
        let slot = c.expect % self.p.ring_slots as u64;
        let mut f = [0u8; 8];
        self.v
            .load(Space::Dram, c.flags + slot * FLAG_BYTES, &mut f);
        u64::from_le_bytes(f) == c.expect
    }

    /// Handles the cell in slot `slot` of connection `ci`.
    async fn handle(&self, ci: usize, slot: u64) -> Result<(), RpcError> {
        let (at, expect, id) = {
            let c = &self.conns.borrow()[ci];
            (c.ring + slot * self.p.request_slot(), c.expect, c.id)
        };
        // CPU work from here to the reply, except a warm-up's READ (the network's).
        let mut start = self.v.now();
        // Requests of different connections run on different workers: each has its own
        // view of the shared store (no execution log on a baseline server). A Scan of
        // more than `max_scan` objects is refused before any is read: its reply would not
        // fit the reply buffers, and the client need not keep to the bound.
        let mut kv = KvStore::new(self.v.clone(), self.kv.layout()).with_max_scan(self.p.max_scan);
        let mut hb = [0u8; 16];
        self.v.load(Space::Dram, at, &mut hb);
        let header = match Header::parse(&hb) {
            Some(h) if h.len as u64 <= self.p.max_request_body() => h,
            Some(h) => {
                let why = format!(
                    "cell of {} bytes exceeds the {}-byte limit",
                    h.len,
                    self.p.max_request_body()
                );
                return self.reject(ci, expect, Status::Rejected, why).await;
            }
            None => {
                return self
                    .reject(ci, expect, Status::Rejected, "not a request cell".into())
                    .await
            }
        };
        if header.seq != expect {
            let why = format!("cell {} out of order (expected {expect})", header.seq);
            return self.reject(ci, expect, Status::Rejected, why).await;
        }
        let mut t = [0u8; 8];
        self.v.load(Space::Dram, at + header.trailer_at(), &mut t);
        if u64::from_le_bytes(t) != expect {
            let why = format!("cell {expect} is torn (its trailer does not match)");
            return self.reject(ci, expect, Status::Rejected, why).await;
        }
        let mut body = vec![0u8; header.len as usize];
        self.v.load(Space::Dram, at + cell::CELL_HEADER, &mut body);
        if header.kind == Kind::WarmUp {
            match WarmUp::parse(&body) {
                Ok(w) if w.len as u64 <= self.p.max_request_body() => {
                    self.account(ci, expect, start);
                    body = self.fetch(ci, w).await?;
                    start = self.v.now();
                    self.stats.borrow_mut().warmups += 1;
                }
                Ok(w) => {
                    let why = format!("warm-up of {} bytes exceeds the limit", w.len);
                    return self.reject(ci, expect, Status::Rejected, why).await;
                }
                Err(why) => return self.reject(ci, expect, Status::Rejected, why).await,
            }
        }
        let requests = match cell::parse_requests(&body) {
            Ok(r) => r,
            Err(why) => return self.reject(ci, expect, Status::Rejected, why).await,
        };
        let mut out = Vec::new();
        for r in &requests {
            if r.conn != id {
                let why = format!("request names connection {}, arrived on {id}", r.conn);
                return self.reject(ci, expect, Status::Rejected, why).await;
            }
            if let (Some(limit), Op::Put { value, .. }) = (self.p.design.max_object(), &r.op) {
                if value.len() as u64 > limit {
                    let why = format!(
                        "a {}-byte object does not fit a {UD_MTU}-byte UD datagram (max {limit})",
                        value.len()
                    );
                    return self.reject(ci, expect, Status::Unsupported, why).await;
                }
            }
            self.v.compute(self.costs.processing).await;
            if let Op::Put { value, .. } = &r.op {
                // The CPU copies the object from the message buffer to its slot.
                self.v.compute(self.cpu.copy(value.len() as u64)).await;
            }
            // A refusal (a key outside the store, a value over a slot) is this request's
            // reply; the message's other requests are executed.
            let reply = kv.apply(r.conn, r.seq, &r.op).await;
            if !reply.value.is_empty() {
                // ... and a read's objects into the reply.
                self.v
                    .compute(self.cpu.copy(reply.value.len() as u64))
                    .await;
            }
            self.stats.borrow_mut().requests += 1;
            ReplyFrame { conn: id, reply }.emit(&mut out);
        }
        let reply_cell = cell::cell_bytes(out.len() as u64);
        if self.p.design == Design::Fasst && reply_cell > UD_MTU {
            let why = format!(
                "a {reply_cell}-byte reply exceeds the {UD_MTU}-byte UD MTU (one datagram)"
            );
            return self.reject(ci, expect, Status::Unsupported, why).await;
        }
        debug_assert!(out.len() >= requests.len() * REPLY_HEADER);
        self.account(ci, expect, start);
        self.reply(ci, expect, Status::Ok, &out)?;
        Ok(())
    }

    /// ScaleRPC's warm-up: READs the message body from the client.
    async fn fetch(&self, ci: usize, w: WarmUp) -> Result<Vec<u8>, RpcError> {
        let (qp, fetch, lkey) = {
            let c = &self.conns.borrow()[ci];
            (c.qp, c.fetch, c.mr.lkey)
        };
        let wr = SendWr::new(
            READ_TAG + ci as u64,
            Opcode::Read,
            Payload::Sge(Sge {
                addr: fetch,
                len: w.len,
                lkey,
            }),
            Some(Remote {
                addr: w.addr,
                rkey: w.rkey,
            }),
        );
        self.v.post_send(qp, wr)?;
        // Workers share the send CQ: each takes every completion there is and keeps the
        // other workers' READs for them.
        let status = loop {
            while let Some(wc) = self.v.poll_one(self.scq) {
                if wc.wr_id >= READ_TAG {
                    let owner = (wc.wr_id - READ_TAG) as usize;
                    self.reads.borrow_mut().insert(owner, wc.status);
                } else {
                    // An unsignaled reply that failed: its connection is gone.
                    self.stats
                        .borrow_mut()
                        .error(format!("send failed ({})", wc.status));
                }
            }
            if let Some(st) = self.reads.borrow_mut().remove(&ci) {
                break st;
            }
            self.v.wait_cq(self.scq).await;
        };
        if status != WcStatus::Success {
            return Err(RpcError::Malformed(format!(
                "warm-up READ failed ({status})"
            )));
        }
        let mut body = vec![0u8; w.len as usize];
        self.v.load(Space::Dram, fetch, &mut body);
        Ok(body)
    }

    async fn reject(
        &self,
        ci: usize,
        seq: u64,
        status: Status,
        why: String,
    ) -> Result<(), RpcError> {
        {
            let mut s = self.stats.borrow_mut();
            match status {
                Status::Unsupported => s.unsupported += 1,
                _ => s.rejected += 1,
            }
            s.error(format!(
                "connection {}: cell {seq}: {why}",
                self.conns.borrow()[ci].id
            ));
        }
        self.reply(ci, seq, status, why.as_bytes())
    }

    /// Sends the reply cell `seq` of connection `ci` the design's way.
    fn reply(&self, ci: usize, seq: u64, status: Status, body: &[u8]) -> Result<(), RpcError> {
        let p = self.p;
        let (mut body, mut status) = (body, status);
        if body.len() as u64 > p.max_reply_body() {
            // Not a reply the client can parse: it learns why, as for any refusal.
            (body, status) = (b"the reply exceeds the reply buffer", Status::Unsupported);
        }
        let bytes = cell::encode(seq, Kind::Message, status, body);
        let mut conns = self.conns.borrow_mut();
        let c = &mut conns[ci];
        c.expect = seq + 1;
        c.busy = false;
        self.answered.set(self.v.now());
        if let Some(w) = self.freed.take() {
            w.wake();
        }
        let slot = seq % p.ring_slots as u64;
        let staging = c.replies + slot * p.reply_slot();
        self.v.store(Space::Dram, staging, &bytes);
        let sge = Sge {
            addr: staging,
            len: bytes.len() as u32,
            lkey: c.mr.lkey,
        };
        let remote = Remote {
            addr: c.peer_replies.addr + slot * p.reply_slot(),
            rkey: c.peer_replies.rkey,
        };
        if let (Some(ud), Some(dest)) = (c.ud, c.peer_ud) {
            // UD: datagrams of at most the MTU, numbered in the immediate.
            let total = (bytes.len() as u64).div_ceil(UD_MTU);
            for i in 0..total {
                let off = i * UD_MTU;
                let len = (bytes.len() as u64 - off).min(UD_MTU);
                let wr = SendWr::new(
                    seq,
                    Opcode::SendWithImm(chunk_imm(i as u32, total as u32)),
                    Payload::Sge(Sge {
                        addr: staging + off,
                        len: len as u32,
                        lkey: c.mr.lkey,
                    }),
                    None,
                )
                .to(dest);
                self.v.post_send(ud, wr.signaled(false))?;
            }
            self.stats.borrow_mut().cells += 1;
            return Ok(());
        }
        let wr = match self.rep {
            ReplyPath::RemoteRead => None,
            ReplyPath::Send => Some(SendWr::new(seq, Opcode::Send, Payload::Sge(sge), None)),
            ReplyPath::Write => Some(SendWr::new(
                seq,
                Opcode::Write,
                Payload::Sge(sge),
                Some(remote),
            )),
            ReplyPath::WriteImm => Some(SendWr::new(
                seq,
                Opcode::WriteWithImm(slot as u32),
                Payload::Sge(sge),
                Some(remote),
            )),
        };
        if let Some(wr) = wr {
            self.v.post_send(c.qp, wr.signaled(false))?;
        }
        if self.rep == ReplyPath::Write {
            // The client polls this flag, WRITTEN after the cell on the same queue pair.
            let flag = Remote {
                addr: c.peer_flags.addr + slot * FLAG_BYTES,
                rkey: c.peer_flags.rkey,
            };
            cell::post_seq_word(&self.v, c.qp, seq, flag)?;
        }
        let mut s = self.stats.borrow_mut();
        s.cells += 1;
        Ok(())
    }
}
