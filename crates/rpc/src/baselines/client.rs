//! A baseline's client: sends each RPC the design's way and returns once the reply
//! arrived, which the server sends only after persisting the data (seed 003 §3).

use super::cell::{self, Header, Kind, Status, WarmUp};
use super::{chunk_of, BaselineParams, ReplyPath, RequestPath, FLAG_BYTES, QKEY, UD_MTU};
use crate::api::{Completion, Op, Reply, RpcClient, RpcError};
use crate::design::Design;
use crate::proto::{Request, REPLY_HEADER};
use remora_verbs::{
    next_completion, Access, CqId, Duration, MrInfo, Opcode, Payload, QpAttr, QpNum, QpType,
    RecvWr, Remote, SendWr, Sge, Space, UdDest, Verbs, WcStatus,
};

/// Where the server's buffers of one connection are (what a connection manager tells
/// the client).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ServerSide {
    /// The request ring.
    pub ring: u64,
    /// L5's mailbox.
    pub mailbox: u64,
    /// RFP's response buffers.
    pub replies: u64,
    /// One completion flag per request ring slot ([`super::FLAG_BYTES`] each): the
    /// sequence number of the cell last written there, written by a separate WRITE after
    /// the cell (see [`super::cell`]).
    pub flags: u64,
    /// The rkey of all four.
    pub rkey: u32,
    /// The server's UD queue pair of this connection (HERD, FaSST).
    pub ud: Option<UdDest>,
}

/// The client side of one baseline connection.
pub struct BaselineClient<V: Verbs> {
    v: V,
    p: BaselineParams,
    conn: u32,
    qp: QpNum,
    /// The UD queue pair (HERD: replies; FaSST: requests and replies).
    ud: Option<QpNum>,
    scq: CqId,
    rcq: CqId,
    mr: MrInfo,
    /// UD receive buffers, [`UD_MTU`] bytes each, enough for the largest reply plus one.
    ud_bufs: u64,
    requests: u64,
    replies: u64,
    control: u64,
    fetch: u64,
    /// Completion flags of the reply ring, one per slot.
    flags: u64,
    server: ServerSide,
    req: RequestPath,
    rep: ReplyPath,
    next_seq: u64,
    next_cell: u64,
    corrupt_next: bool,
    /// Scans of more than `max_scan` objects are sent, not refused ([`Self::exceed_scan_bound`]).
    unbounded_scans: bool,
}

const READ_TAG: u64 = u64::MAX - 1;

/// The most bytes the replies to `ops` can take: a reply header each, and the values a Get
/// or a Scan can return, each object up to `max_value` bytes.
fn reply_bound(ops: &[Op], max_value: u64) -> u64 {
    ops.iter()
        .map(|op| {
            let objects = match op {
                Op::Get { .. } => 1,
                Op::Put { .. } => 0,
                Op::Scan { count, .. } => u64::from(*count),
            };
            REPLY_HEADER as u64 + objects * max_value
        })
        .sum()
}

impl<V: Verbs> BaselineClient<V> {
    /// Sets up the client's queue pair and buffers and posts its receive buffers. Called by
    /// [`super::BaselineServer::accept`].
    pub(crate) fn create(
        v: V,
        p: BaselineParams,
        conn: u32,
        server: ServerSide,
    ) -> Result<Self, RpcError> {
        let (req, rep) = super::paths(p.design).expect("a baseline design");
        let slots = p.ring_slots as u64;
        let (rq, rp) = (p.request_slot(), p.reply_slot());
        let (req_type, rep_type) = super::qp_types(p.design);
        let ud_used = req_type == QpType::Ud || rep_type == QpType::Ud;
        // Enough datagram buffers for the largest reply, plus one.
        let chunks = if ud_used { rp.div_ceil(UD_MTU) + 1 } else { 0 };
        let len = slots * rq + slots * rp + slots * 64 + rp + slots * FLAG_BYTES + chunks * UD_MTU;
        let pd = v.alloc_pd()?;
        let base = v.alloc(Space::Dram, len, 64);
        let mr = v.reg_mr(
            pd,
            Space::Dram,
            base,
            len,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )?;
        let scq = v.create_cq(1024)?;
        let rcq = v.create_cq(1024)?;
        let qp = v.create_qp(
            pd,
            scq,
            rcq,
            QpAttr {
                rq_depth: p.ring_slots as usize * 2,
                qp_type: super::connected_qp_type(p.design),
                ..QpAttr::default()
            },
        )?;
        let ud = if ud_used {
            Some(v.create_qp(
                pd,
                scq,
                rcq,
                QpAttr {
                    rq_depth: chunks as usize,
                    qp_type: QpType::Ud,
                    qkey: QKEY,
                    ..QpAttr::default()
                },
            )?)
        } else {
            None
        };
        let requests = base;
        let replies = requests + slots * rq;
        let control = replies + slots * rp;
        let fetch = control + slots * 64;
        let flags = fetch + rp;
        let ud_bufs = flags + slots * FLAG_BYTES;
        let c = BaselineClient {
            v,
            p,
            conn,
            qp,
            ud,
            scq,
            rcq,
            mr,
            ud_bufs,
            requests,
            replies,
            control,
            fetch,
            flags,
            server,
            req,
            rep,
            next_seq: 1,
            next_cell: 1,
            corrupt_next: false,
            unbounded_scans: false,
        };
        if c.ud.is_some() {
            for i in 0..chunks {
                c.post_chunk(i)?;
            }
        } else if matches!(rep, ReplyPath::Send | ReplyPath::WriteImm) {
            for s in 0..slots {
                c.post_slot(s)?;
            }
        }
        Ok(c)
    }

    /// The queue pairs this client uses and their service types (the connected one first,
    /// then the UD one, if any).
    pub fn qps(&self) -> Vec<(QpNum, QpType)> {
        let mut v = vec![(self.qp, super::connected_qp_type(self.p.design))];
        v.extend(self.ud.map(|q| (q, QpType::Ud)));
        v
    }

    /// Where the server sends this client's UD replies (HERD, FaSST).
    pub fn ud_dest(&self) -> Option<UdDest> {
        self.ud.map(|qpn| UdDest {
            node: self.v.node(),
            qpn,
            qkey: QKEY,
        })
    }

    fn post_chunk(&self, i: u64) -> Result<(), RpcError> {
        let sge = Sge {
            addr: self.ud_bufs + i * UD_MTU,
            len: UD_MTU as u32,
            lkey: self.mr.lkey,
        };
        let qp = self.ud.expect("a UD queue pair");
        Ok(self.v.post_recv(qp, RecvWr { wr_id: i, sge })?)
    }

    /// The design.
    pub fn design(&self) -> Design {
        self.p.design
    }

    /// The connection id (the first field of every request frame).
    pub fn conn(&self) -> u32 {
        self.conn
    }

    /// The client's queue pair (to connect to the server's).
    pub fn qp(&self) -> QpNum {
        self.qp
    }

    /// The client's reply ring, where WRITE replies land.
    pub fn reply_ring(&self) -> Remote {
        Remote {
            addr: self.replies,
            rkey: self.mr.rkey,
        }
    }

    /// The completion flags of the client's reply ring: the server WRITEs a reply cell's
    /// sequence number to `flags + slot × FLAG_BYTES` after the cell.
    pub fn reply_flags(&self) -> Remote {
        Remote {
            addr: self.flags,
            rkey: self.mr.rkey,
        }
    }

    /// Flips one byte of the next request frame after its checksum was computed, as a
    /// corrupted message would arrive; the server must reject it and keep serving (tests).
    pub fn corrupt_next_request(&mut self) {
        self.corrupt_next = true;
    }

    /// Sends Scans of more than `max_scan` objects from now on, as a client built with a
    /// larger bound (or a hostile one) would; the server must refuse them and keep
    /// serving (tests).
    pub fn exceed_scan_bound(&mut self) {
        self.unbounded_scans = true;
    }

    fn post_slot(&self, slot: u64) -> Result<(), RpcError> {
        let sge = Sge {
            addr: self.replies + slot * self.p.reply_slot(),
            len: self.p.reply_slot() as u32,
            lkey: self.mr.lkey,
        };
        Ok(self.v.post_recv(self.qp, RecvWr { wr_id: slot, sge })?)
    }

    fn unsupported(&self, what: String) -> RpcError {
        RpcError::Unsupported {
            design: self.p.design.name(),
            what,
        }
    }

    /// Sends `ops` as one RPC (one cell; several ops is §5.5's batching) and waits for the
    /// reply.
    pub async fn call_batch(&mut self, ops: Vec<Op>) -> Result<Vec<Completion>, RpcError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        if ops.len() > self.p.max_batch as usize {
            return Err(self.unsupported(format!(
                "a batch of {} (limit {})",
                ops.len(),
                self.p.max_batch
            )));
        }
        let limit = self.p.design.max_object().unwrap_or(u64::MAX);
        let mut put_bytes = 0u64;
        for op in &ops {
            if let Op::Put { value, .. } = op {
                if value.len() as u64 > limit {
                    return Err(self.unsupported(format!(
                        "a {}-byte object (the UD MTU is {} bytes)",
                        value.len(),
                        UD_MTU
                    )));
                }
                if value.len() as u64 > self.p.max_value {
                    return Err(self.unsupported(format!(
                        "a {}-byte object (slots hold {})",
                        value.len(),
                        self.p.max_value
                    )));
                }
                put_bytes += value.len() as u64;
            }
            if let Op::Scan { count, .. } = op {
                if *count > self.p.max_scan && !self.unbounded_scans {
                    return Err(self.unsupported(format!("a scan of {count} objects")));
                }
            }
        }
        if put_bytes > limit {
            return Err(self.unsupported(format!(
                "{put_bytes} bytes in one message (the UD MTU is {UD_MTU})"
            )));
        }
        // The reply buffer holds `max_batch` Get replies or one full Scan, not a batch of
        // Scans: a batch whose replies could outgrow it is refused here, as the server
        // would refuse its reply after running it.
        let replies = reply_bound(&ops, self.p.max_value);
        if replies > self.p.max_reply_body() && !self.unbounded_scans {
            return Err(self.unsupported(format!(
                "a batch whose replies may take {replies} bytes (the reply buffer holds {})",
                self.p.max_reply_body()
            )));
        }
        if self.req == RequestPath::Send && self.ud.is_some() {
            let cell = cell::cell_bytes(
                ops.iter()
                    .map(|op| {
                        let r = Request {
                            conn: self.conn,
                            seq: 0,
                            op: op.clone(),
                        };
                        r.to_bytes().len() as u64
                    })
                    .sum(),
            );
            if cell > UD_MTU {
                return Err(self.unsupported(format!(
                    "a {cell}-byte request in one datagram (the UD MTU is {UD_MTU} bytes)"
                )));
            }
        }
        let first = self.next_seq;
        self.next_seq += ops.len() as u64;
        let mut body = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            Request {
                conn: self.conn,
                seq: first + i as u64,
                op: op.clone(),
            }
            .emit(&mut body);
        }
        if std::mem::take(&mut self.corrupt_next) {
            body[16] ^= 0x10;
        }
        let seq = self.next_cell;
        self.next_cell += 1;
        self.transmit(seq, &body)?;
        let reply = self.wait_reply(seq).await?;
        let done = self.v.now();
        let header = Header::parse(&reply)
            .ok_or_else(|| RpcError::Malformed(format!("reply cell {seq} has no header")))?;
        let body = &reply[cell::CELL_HEADER as usize..][..header.len as usize];
        match header.status {
            Status::Ok => {}
            Status::Rejected => {
                return Err(RpcError::Malformed(format!(
                    "{} server rejected RPC {seq}: {}",
                    self.p.design,
                    String::from_utf8_lossy(body)
                )))
            }
            Status::Unsupported => {
                return Err(self.unsupported(String::from_utf8_lossy(body).into_owned()))
            }
        }
        let frames = cell::parse_replies(body).map_err(RpcError::Malformed)?;
        if frames.len() != ops.len() {
            return Err(RpcError::Malformed(format!(
                "RPC {seq}: {} replies to {} requests",
                frames.len(),
                ops.len()
            )));
        }
        let mut out = Vec::with_capacity(ops.len());
        for (i, (f, op)) in frames.into_iter().zip(&ops).enumerate() {
            let want = first + i as u64;
            if f.conn != self.conn || f.reply.seq != want {
                return Err(RpcError::Malformed(format!(
                    "reply for connection {} request {}, expected {} request {want}",
                    f.conn, f.reply.seq, self.conn
                )));
            }
            out.push(Completion {
                seq: want,
                durable_at: matches!(op, Op::Put { .. }).then_some(done),
                reply: Some(f.reply),
            });
        }
        Ok(out)
    }

    /// Posts request cell `seq` the design's way.
    fn transmit(&mut self, seq: u64, body: &[u8]) -> Result<(), RpcError> {
        let p = self.p;
        let slot = seq % p.ring_slots as u64;
        let staging = self.requests + slot * p.request_slot();
        let ring = Remote {
            addr: self.server.ring + slot * p.request_slot(),
            rkey: self.server.rkey,
        };
        // ScaleRPC: cell 1, then one warm-up every `process_per_warmup + 1` cells.
        let warm_up = self.req == RequestPath::WarmUpThenWrite
            && (seq - 1).is_multiple_of(p.process_per_warmup as u64 + 1);
        let (bytes, src) = if warm_up {
            // The body stays in client memory; the server READs it.
            self.v.store(Space::Dram, staging, body);
            let w = WarmUp {
                addr: staging,
                rkey: self.mr.rkey,
                len: body.len() as u32,
            };
            let c = cell::encode(seq, Kind::WarmUp, Status::Ok, &w.to_bytes());
            (c, self.control + slot * 64)
        } else {
            (cell::encode(seq, Kind::Message, Status::Ok, body), staging)
        };
        self.v.store(Space::Dram, src, &bytes);
        let sge = Payload::Sge(Sge {
            addr: src,
            len: bytes.len() as u32,
            lkey: self.mr.lkey,
        });
        let wr = match (self.req, self.server.ud) {
            (RequestPath::Send, Some(dest)) => {
                let wr = SendWr::new(seq, Opcode::Send, sge, None).to(dest);
                let ud = self.ud.expect("a UD queue pair");
                self.v.post_send(ud, wr.signaled(false))?;
                return Ok(());
            }
            _ => self.request_wr(seq, slot, sge, ring),
        };
        self.v.post_send(self.qp, wr.signaled(false))?;
        if matches!(self.req, RequestPath::Write | RequestPath::WarmUpThenWrite) {
            // The cell is complete once this flag, WRITTEN after it on the same queue pair,
            // holds its sequence number (see `cell`).
            let flag = Remote {
                addr: self.server.flags + slot * FLAG_BYTES,
                rkey: self.server.rkey,
            };
            cell::post_seq_word(&self.v, self.qp, seq, flag)?;
        }
        if self.req == RequestPath::WriteMailbox {
            let mailbox = Remote {
                addr: self.server.mailbox,
                rkey: self.server.rkey,
            };
            cell::post_seq_word(&self.v, self.qp, seq, mailbox)?;
        }
        Ok(())
    }

    /// The request work request on the connected queue pair.
    fn request_wr(&self, seq: u64, slot: u64, sge: Payload, ring: Remote) -> SendWr {
        match self.req {
            RequestPath::Send => SendWr::new(seq, Opcode::Send, sge, None),
            RequestPath::WriteImm => {
                SendWr::new(seq, Opcode::WriteWithImm(slot as u32), sge, Some(ring))
            }
            _ => SendWr::new(seq, Opcode::Write, sge, Some(ring)),
        }
    }

    /// Waits for reply cell `seq` as UD datagrams: each is copied from its receive buffer
    /// to its place in the reply slot (the immediate numbers it) and the buffer reposted.
    /// A lost datagram shows as [`RpcError::Timeout`] after `polling.timeout`.
    async fn wait_datagrams(&mut self, seq: u64) -> Result<Vec<u8>, RpcError> {
        let p = self.p;
        let at = self.replies + (seq % p.ring_slots as u64) * p.reply_slot();
        let start = self.v.now();
        let (mut got, mut total) = (0u32, None);
        loop {
            while let Some(wc) = self.v.poll_one(self.rcq) {
                if wc.status != WcStatus::Success {
                    return Err(RpcError::Malformed(format!(
                        "reply datagram receive failed ({})",
                        wc.status
                    )));
                }
                let (idx, n) = chunk_of(wc.imm.unwrap_or(0));
                let off = idx as u64 * UD_MTU;
                if n == 0 || idx >= n || off + wc.byte_len as u64 > p.reply_slot() {
                    self.post_chunk(wc.wr_id)?;
                    return Err(RpcError::Malformed(format!(
                        "reply datagram {idx} of {n} ({} bytes) does not fit the reply slot",
                        wc.byte_len
                    )));
                }
                let mut buf = vec![0u8; wc.byte_len as usize];
                self.v
                    .load(Space::Dram, self.ud_bufs + wc.wr_id * UD_MTU, &mut buf);
                self.post_chunk(wc.wr_id)?;
                self.v.store(Space::Dram, at + off, &buf);
                got += 1;
                total = Some(n);
            }
            if total.is_some_and(|n| got >= n) {
                return match self.read_cell(at) {
                    Some(b) if cell_seq(&b) == seq => Ok(b),
                    Some(b) => Err(RpcError::Malformed(format!(
                        "expected reply {seq}, got reply {}",
                        cell_seq(&b)
                    ))),
                    None => Err(RpcError::Malformed(format!(
                        "reply {seq} is not a complete cell"
                    ))),
                };
            }
            let waited = self.v.now().saturating_since(start);
            if waited >= p.polling.timeout {
                return Err(RpcError::Timeout(waited));
            }
            let left = Duration::from_nanos(p.polling.timeout.as_nanos() - waited.as_nanos());
            remora_verbs::wait_cq_or(&self.v, self.rcq, left).await;
        }
    }

    /// Waits for reply cell `seq` and returns its bytes.
    async fn wait_reply(&mut self, seq: u64) -> Result<Vec<u8>, RpcError> {
        let p = self.p;
        let slot = seq % p.ring_slots as u64;
        let at = self.replies + slot * p.reply_slot();
        if self.ud.is_some() {
            return self.wait_datagrams(seq).await;
        }
        match self.rep {
            ReplyPath::Send | ReplyPath::WriteImm => {
                let wc = next_completion(&self.v, self.rcq).await;
                if wc.status != WcStatus::Success {
                    return Err(RpcError::Malformed(format!(
                        "reply receive failed ({})",
                        wc.status
                    )));
                }
                // A SEND lands in the oldest posted buffer; a WRITE_WITH_IMM where the
                // server wrote it, named by the immediate.
                let got = match self.rep {
                    ReplyPath::WriteImm => wc.imm.unwrap_or(0) as u64 % p.ring_slots as u64,
                    _ => wc.wr_id,
                };
                let bytes = self.read_cell(self.replies + got * p.reply_slot());
                self.post_slot(wc.wr_id)?;
                match bytes {
                    Some(b) if cell_seq(&b) == seq => Ok(b),
                    Some(b) => Err(RpcError::Malformed(format!(
                        "expected reply {seq}, got reply {}",
                        cell_seq(&b)
                    ))),
                    None => Err(RpcError::Malformed(format!(
                        "reply {seq} is not a complete cell"
                    ))),
                }
            }
            ReplyPath::Write => {
                let start = self.v.now();
                let flag = self.flags + slot * FLAG_BYTES;
                loop {
                    let mut f = [0u8; 8];
                    self.v.load(Space::Dram, flag, &mut f);
                    if u64::from_le_bytes(f) == seq {
                        // The flag's WRITE followed the cell's: every byte of it is there.
                        return match self.read_cell(at) {
                            Some(b) if cell_seq(&b) == seq => Ok(b),
                            _ => Err(RpcError::Malformed(format!(
                                "reply {seq} flagged but not a complete cell"
                            ))),
                        };
                    }
                    let waited = self.v.now().saturating_since(start);
                    if waited >= p.polling.timeout {
                        return Err(RpcError::Timeout(waited));
                    }
                    self.v.compute(p.polling.gap(waited)).await;
                }
            }
            ReplyPath::RemoteRead => {
                let start = self.v.now();
                let remote = self.server.replies + slot * p.reply_slot();
                loop {
                    let first = (p.rfp_fetch_bytes as u64).min(p.reply_slot());
                    self.read_remote(remote, self.fetch, first).await?;
                    let mut hb = [0u8; 16];
                    self.v.load(Space::Dram, self.fetch, &mut hb);
                    if let Some(h) = Header::parse(&hb).filter(|h| h.seq == seq) {
                        let total = cell::cell_bytes(h.len as u64);
                        if total > p.reply_slot() {
                            return Err(RpcError::Malformed(format!(
                                "reply {seq} claims {total} bytes"
                            )));
                        }
                        if total > first {
                            self.read_remote(remote + first, self.fetch + first, total - first)
                                .await?;
                        }
                        if let Some(b) = self.read_cell(self.fetch).filter(|b| cell_seq(b) == seq) {
                            return Ok(b);
                        }
                    }
                    let waited = self.v.now().saturating_since(start);
                    if waited >= p.polling.timeout {
                        return Err(RpcError::Timeout(waited));
                    }
                }
            }
        }
    }

    /// An RDMA READ of `len` bytes of the server's memory into local `dst`.
    async fn read_remote(&mut self, remote: u64, dst: u64, len: u64) -> Result<(), RpcError> {
        let wr = SendWr::new(
            READ_TAG,
            Opcode::Read,
            Payload::Sge(Sge {
                addr: dst,
                len: len as u32,
                lkey: self.mr.lkey,
            }),
            Some(Remote {
                addr: remote,
                rkey: self.server.rkey,
            }),
        );
        self.v.post_send(self.qp, wr)?;
        loop {
            let wc = next_completion(&self.v, self.scq).await;
            if wc.status != WcStatus::Success {
                return Err(RpcError::Malformed(format!(
                    "RDMA {:?} failed ({})",
                    wc.opcode, wc.status
                )));
            }
            if wc.wr_id == READ_TAG {
                return Ok(());
            }
        }
    }

    /// The complete cell at `at` (header and matching trailer), if there is one.
    fn read_cell(&self, at: u64) -> Option<Vec<u8>> {
        let mut hb = [0u8; 16];
        self.v.load(Space::Dram, at, &mut hb);
        let h = Header::parse(&hb)?;
        let total = cell::cell_bytes(h.len as u64);
        if total > self.p.reply_slot() {
            return None;
        }
        let mut b = vec![0u8; total as usize];
        self.v.load(Space::Dram, at, &mut b);
        let t = h.trailer_at() as usize;
        (u64::from_le_bytes(b[t..t + 8].try_into().expect("8")) == h.seq).then_some(b)
    }
}

fn cell_seq(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[0..8].try_into().expect("header"))
}

impl<V: Verbs> RpcClient for BaselineClient<V> {
    async fn call(&mut self, op: Op) -> Result<Completion, RpcError> {
        let mut c = self.call_batch(vec![op]).await?;
        Ok(c.pop().expect("one reply per request"))
    }

    async fn drain(&mut self) -> Result<Vec<Reply>, RpcError> {
        // A baseline returns every reply from `call`: nothing is outstanding.
        Ok(Vec::new())
    }

    async fn call_batch(&mut self, ops: Vec<Op>) -> Result<Vec<Completion>, RpcError> {
        BaselineClient::call_batch(self, ops).await
    }
}
