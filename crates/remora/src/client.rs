//! The requester side: a client connects, learns the server's configuration from its
//! Hello, and runs the correct method for each update, step by step as the taxonomy says.

use crate::taxonomy::{Item, Method, Primitive, Shape, Step, Taxonomy, Update};
use crate::wire::{imm, Frame, FrameError, Hello, MAX_ENTRIES};
use remora_verbs::*;
use std::sync::Arc;

/// Why an update could not be made persistent. Nothing is claimed persistent when one is
/// returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersistError {
    /// A verb was refused.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// An operation completed with an error status.
    #[error("{what} completed with {status}")]
    Completion {
        /// The operation.
        what: &'static str,
        /// Its status.
        status: WcStatus,
    },
    /// The server sent something that is not a valid frame.
    #[error("bad message from server: {0}")]
    BadFrame(#[from] FrameError),
    /// The server sent a valid frame at the wrong time.
    #[error("protocol error: {0}")]
    Protocol(&'static str),
    /// The update does not fit the server's region.
    #[error("update of {len} bytes at offset {offset} is outside the {region_len}-byte region")]
    OutOfRange {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Region length.
        region_len: u64,
    },
    /// The method cannot carry this update (e.g. ATOMIC WRITE of more than 8 bytes, a
    /// WRITE_WITH_IMM target the immediate cannot encode, a message larger than a slot).
    #[error("method {method} cannot carry this update: {why}")]
    Unsuitable {
        /// The method.
        method: String,
        /// Why.
        why: &'static str,
    },
    /// [`Client::connect`] has not run.
    #[error("not connected")]
    NotConnected,
    /// The server's Hello names another configuration than the one it announced when the
    /// connection was made ([`Client::expect_config`]): the methods picked for one are not
    /// correct for the other, so the client goes no further.
    #[error(
        "the server announced configuration {announced} when connecting but {hello} in its \
         Hello; refusing to pick a persistence method for either"
    )]
    ConfigMismatch {
        /// What the connection handshake said.
        announced: ServerConfig,
        /// What the Hello says.
        hello: ServerConfig,
    },
}

/// A FLUSH posted by [`Client::post_flush_writes`], to wait for with
/// [`Client::wait_flush`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[must_use = "a posted FLUSH proves nothing until it is waited for"]
pub struct FlushTicket(u64);

const ACK_SLOTS: u64 = 8;
/// Large enough for a Hello, the largest server-to-client frame.
const ACK_SLOT_BYTES: u64 = 128;

/// The client side of one connection.
pub struct Client<V: Verbs> {
    v: V,
    qp: QpNum,
    scq: CqId,
    rcq: CqId,
    scratch: MrInfo,
    hello: Option<Hello>,
    taxonomy: Taxonomy,
    methods: Option<[Arc<Method>; 2]>,
    flush: FlushMethod,
    /// For [`write_nowait`](Self::write_nowait), decided once at connect (a streaming
    /// writer calls it per WRITE): `None` if the server's singleton WRITE method is
    /// one-sided, else that method's name.
    two_sided_write: Option<String>,
    seq: u64,
    next_wr: u64,
    /// See [`expect_config`](Self::expect_config).
    announced: Option<ServerConfig>,
    /// Send completions taken off their CQ while looking for why the connection failed,
    /// in order, for `wait_wr` to see first.
    taken_sends: std::collections::VecDeque<WorkCompletion>,
}

impl<V: Verbs> Client<V> {
    /// Creates the queue pair (connect it to the server's, then call
    /// [`connect`](Self::connect)) and posts receive buffers for the server's messages.
    pub fn create(v: V) -> Result<Self, VerbsError> {
        let pd = v.alloc_pd()?;
        let len = 4096 + ACK_SLOTS * ACK_SLOT_BYTES;
        let base = v.alloc(Space::Dram, len, 4096);
        let scratch = v.reg_mr(pd, Space::Dram, base, len, Access::LOCAL_WRITE)?;
        // Room for a completion per request the send queue holds (a failed connection
        // flushes them all with one).
        let scq = v.create_cq(QpAttr::default().sq_depth)?;
        let rcq = v.create_cq(ACK_SLOTS as usize + 1)?;
        let qp = v.create_qp(pd, scq, rcq, QpAttr::default())?;
        let c = Client {
            v,
            qp,
            scq,
            rcq,
            scratch,
            hello: None,
            taxonomy: Taxonomy::shipped(),
            methods: None,
            flush: FlushMethod::Native,
            two_sided_write: None,
            seq: 1,
            next_wr: 1,
            announced: None,
            taken_sends: std::collections::VecDeque::new(),
        };
        for i in 0..ACK_SLOTS {
            c.post_ack_slot(i)?;
        }
        Ok(c)
    }

    /// The queue pair to connect to the server's.
    pub fn qp(&self) -> QpNum {
        self.qp
    }

    /// The configuration the server announced when the connection was made (a real
    /// backend's connection manager sends it before the Hello): [`connect`](Self::connect)
    /// refuses a Hello that names another.
    pub fn expect_config(&mut self, announced: ServerConfig) {
        self.announced = Some(announced);
    }

    /// The completion queue the server's messages arrive on (its Hello first).
    pub fn recv_cq(&self) -> CqId {
        self.rcq
    }

    fn post_ack_slot(&self, i: u64) -> Result<(), VerbsError> {
        let sge = Sge {
            addr: self.scratch.addr + 4096 + i * ACK_SLOT_BYTES,
            len: ACK_SLOT_BYTES as u32,
            lkey: self.scratch.lkey,
        };
        self.v.post_recv(self.qp, RecvWr { wr_id: i, sge })
    }

    /// Waits for the server's Hello and picks, for singleton and compound updates, the
    /// table method of `primitive` corrected by the text's rules ([`Taxonomy::method_for`]),
    /// and the FLUSH method the server's NIC supports.
    pub async fn connect(
        &mut self,
        primitive: Primitive,
        shape: Shape,
    ) -> Result<Hello, PersistError> {
        let frame = self.next_frame().await?;
        let Frame::Hello(hello) = frame else {
            return Err(PersistError::Protocol("expected Hello"));
        };
        let config = hello.config;
        if let Some(announced) = self.announced.filter(|a| *a != config) {
            return Err(PersistError::ConfigMismatch {
                announced,
                hello: config,
            });
        }
        self.methods = Some([
            Arc::new(
                self.taxonomy
                    .method_for(&config, primitive, Update::Singleton, shape)
                    .clone(),
            ),
            Arc::new(
                self.taxonomy
                    .method_for(&config, primitive, Update::Compound, shape)
                    .clone(),
            ),
        ]);
        self.flush = FlushMethod::for_caps(config.caps);
        let write = self.taxonomy.method_for(
            &config,
            Primitive::Write,
            Update::Singleton,
            Shape::default(),
        );
        self.two_sided_write = write.two_sided().then(|| write.name.clone());
        self.seq = hello.seq_base;
        self.hello = Some(hello);
        Ok(hello)
    }

    /// The server's Hello, once connected.
    pub fn hello(&self) -> Option<Hello> {
        self.hello
    }

    /// The method used for `update`.
    pub fn method(&self, update: Update) -> Option<&Method> {
        self.methods.as_ref().map(|m| &*m[update as usize])
    }

    /// Replaces the method used for `update`, if it is correct for the server
    /// ([`Taxonomy::check_method`]): a method that is not is refused (`Unsuitable`) and the
    /// one in use stays. Refused before [`connect`](Self::connect) (`NotConnected`).
    pub fn use_method(&mut self, update: Update, method: Method) -> Result<(), PersistError> {
        let hello = self.hello.ok_or(PersistError::NotConnected)?;
        self.taxonomy
            .check_method(&hello.config, update, &method)
            .map_err(|why| PersistError::Unsuitable {
                method: method.name.clone(),
                why,
            })?;
        self.use_method_unchecked(update, method);
        Ok(())
    }

    /// [`use_method`](Self::use_method) without the check: for the crash checker's negative
    /// controls (wrong methods it must catch) and experiments. A wrong method loses
    /// updates it acknowledged.
    pub fn use_method_unchecked(&mut self, update: Update, method: Method) {
        if let Some(m) = &mut self.methods {
            m[update as usize] = Arc::new(method);
        }
    }

    /// Overrides how FLUSH is performed (native, or READ-after-WRITE emulation).
    pub fn use_flush_method(&mut self, f: FlushMethod) {
        self.flush = f;
    }

    /// Makes `data` persistent at `offset` of the server's region; returns once the
    /// method's last step says it is.
    pub async fn persist(&mut self, offset: u64, data: &[u8]) -> Result<(), PersistError> {
        let m = self.methods.as_ref().ok_or(PersistError::NotConnected)?
            [Update::Singleton as usize]
            .clone();
        self.run(&m, [(offset, data), (0, &[][..])]).await
    }

    /// Makes `first` and then `second` persistent, in that order: no crash can leave
    /// `second` persistent without `first`.
    pub async fn persist_ordered(
        &mut self,
        first: (u64, &[u8]),
        second: (u64, &[u8]),
    ) -> Result<(), PersistError> {
        let m = self.methods.as_ref().ok_or(PersistError::NotConnected)?[Update::Compound as usize]
            .clone();
        self.run(&m, [first, second]).await
    }

    /// Starts an RDMA WRITE of `data` at `offset` without waiting: for streaming many
    /// independent updates and then [`flush_writes`](Self::flush_writes) once. Refused
    /// (`Unsuitable`) unless the server's singleton WRITE method is one-sided
    /// (`write-flush` or `write-comp`), because only then does a FLUSH (or completion)
    /// make the writes persistent; the writes are not ordered among themselves.
    pub fn write_nowait(&mut self, offset: u64, data: &[u8]) -> Result<(), PersistError> {
        let hello = self.hello.ok_or(PersistError::NotConnected)?;
        if let Some(method) = &self.two_sided_write {
            return Err(PersistError::Unsuitable {
                method: method.clone(),
                why: "WRITE is not one-sided on this server",
            });
        }
        // A one-sided SEND (send-flush, send-comp, ...) is durable in the PM receive ring
        // and applied later (or by recovery): a WRITE posted now would be overwritten by
        // an older update applied after it.
        if let Some(m) = self
            .methods
            .iter()
            .flatten()
            .find(|m| m.primitive() == crate::taxonomy::Primitive::Send && !m.two_sided())
        {
            return Err(PersistError::Unsuitable {
                method: m.name.clone(),
                why: "updates go through one-sided SENDs the server applies later",
            });
        }
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > hello.region_len)
        {
            return Err(PersistError::OutOfRange {
                offset,
                len: data.len() as u64,
                region_len: hello.region_len,
            });
        }
        let id = self.wr_id();
        let remote = Remote {
            addr: hello.region_addr + offset,
            rkey: hello.region_rkey,
        };
        self.v.post_send(
            self.qp,
            SendWr::new(id, Opcode::Write, Payload::inline(data), Some(remote)).signaled(false),
        )?;
        Ok(())
    }

    /// Makes every [`write_nowait`](Self::write_nowait) so far persistent: one FLUSH (or
    /// its READ emulation) and its completion.
    pub async fn flush_writes(&mut self) -> Result<(), PersistError> {
        let ticket = self.post_flush_writes()?;
        self.wait_flush(ticket).await
    }

    /// Posts the FLUSH (or its READ emulation) that makes every
    /// [`write_nowait`](Self::write_nowait) so far persistent, without waiting: a streaming
    /// writer keeps posting WRITEs while it travels, and learns with
    /// [`wait_flush`](Self::wait_flush) that the writes before it are persistent. Tickets
    /// must be waited for in the order they were posted (completions arrive in order).
    pub fn post_flush_writes(&mut self) -> Result<FlushTicket, PersistError> {
        let hello = self.hello.ok_or(PersistError::NotConnected)?;
        let r = Remote {
            addr: hello.region_addr,
            rkey: hello.region_rkey,
        };
        Ok(FlushTicket(self.post_flush(r, hello.region_len)?))
    }

    /// Posts a FLUSH of `len` bytes at `at` (or its READ emulation) with persistence
    /// placement; returns its work request's id.
    fn post_flush(&mut self, at: Remote, len: u64) -> Result<u64, VerbsError> {
        let id = self.wr_id();
        let scratch = Sge {
            addr: self.scratch.addr,
            len: 8,
            lkey: self.scratch.lkey,
        };
        let wr = self
            .flush
            .work_request(id, FlushPlacement::Persistence, at, len, scratch);
        self.v.post_send(self.qp, wr)?;
        Ok(id)
    }

    /// Waits until the FLUSH of `ticket` completed: every WRITE posted before it is
    /// persistent.
    pub async fn wait_flush(&mut self, ticket: FlushTicket) -> Result<(), PersistError> {
        self.wait_wr(ticket.0, "FLUSH").await
    }

    /// Reads `len` bytes (at most 4 KiB) at `offset` of the server's region with an RDMA
    /// READ: what is visible there, which is not necessarily persistent.
    pub async fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, PersistError> {
        let hello = self.hello.ok_or(PersistError::NotConnected)?;
        if len > 4096
            || offset
                .checked_add(len as u64)
                .is_none_or(|e| e > hello.region_len)
        {
            return Err(PersistError::OutOfRange {
                offset,
                len: len as u64,
                region_len: hello.region_len,
            });
        }
        let id = self.wr_id();
        let sge = Sge {
            addr: self.scratch.addr,
            len,
            lkey: self.scratch.lkey,
        };
        let remote = Remote {
            addr: hello.region_addr + offset,
            rkey: hello.region_rkey,
        };
        self.v.post_send(
            self.qp,
            SendWr::new(id, Opcode::Read, Payload::Sge(sge), Some(remote)),
        )?;
        self.wait_wr(id, "READ").await?;
        let mut out = vec![0u8; len as usize];
        self.v.load(Space::Dram, self.scratch.addr, &mut out);
        Ok(out)
    }

    fn wr_id(&mut self) -> u64 {
        self.next_wr += 1;
        self.next_wr
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    async fn run(&mut self, m: &Method, items: [(u64, &[u8]); 2]) -> Result<(), PersistError> {
        let hello = self.hello.ok_or(PersistError::NotConnected)?;
        let unsuitable = |why| PersistError::Unsuitable {
            method: m.name.clone(),
            why,
        };
        for (off, data) in items {
            if off
                .checked_add(data.len() as u64)
                .is_none_or(|e| e > hello.region_len)
            {
                return Err(PersistError::OutOfRange {
                    offset: off,
                    len: data.len() as u64,
                    region_len: hello.region_len,
                });
            }
        }
        let item = |x: Item| items[x as usize];
        // The bytes a FLUSH (or READ) names for an item: the item's own, or for an empty
        // item a byte inside the region (an empty update may sit at the region's very end;
        // a checked item's start is below it otherwise, so the clamp changes nothing).
        let flush_span = |(off, data): (u64, &[u8])| {
            (
                off.min(hello.region_len.saturating_sub(1)),
                (data.len() as u64).max(1),
            )
        };
        // Refuse an update the method cannot carry before posting anything, so a refused
        // call has no effect on the server.
        for step in &m.steps {
            match step {
                Step::RqWriteImm(x) if imm::encode(item(*x).0, false).is_none() => {
                    return Err(unsuitable("the immediate cannot address this offset"));
                }
                Step::RqWriteAtomic(x) if item(*x).1.len() != 8 => {
                    return Err(unsuitable("ATOMIC WRITE carries exactly 8 bytes"));
                }
                // The RNIC executes an ATOMIC WRITE on one aligned 8-byte word only and
                // fails the connection otherwise, after the earlier steps took effect.
                Step::RqWriteAtomic(x)
                    if !hello.region_addr.wrapping_add(item(*x).0).is_multiple_of(8) =>
                {
                    return Err(unsuitable(
                        "ATOMIC WRITE needs an 8-byte-aligned target (write-flush-wait-write-flush does not)",
                    ));
                }
                Step::RqSend(xs) if xs.len() > MAX_ENTRIES => {
                    return Err(unsuitable("more entries than one message carries"));
                }
                Step::RqSend(xs) => {
                    let len = Frame::apply_buffer_len(xs.iter().map(|x| item(*x).1.len()));
                    if len > hello.rq_slot_bytes as usize {
                        return Err(unsuitable(
                            "the message is larger than the server's receive buffers",
                        ));
                    }
                }
                _ => {}
            }
        }
        let remote = |off: u64| {
            Some(Remote {
                addr: hello.region_addr + off,
                rkey: hello.region_rkey,
            })
        };
        let two_sided = m.two_sided();
        let mut last_wr = 0;
        let mut last_flush = 0;
        let mut last_msg = 0;
        // What the next FLUSH must name: the region's bytes RDMA wrote since the last one
        // (as one range around them), and whether a SEND put data in the receive ring.
        let mut written: Option<(u64, u64)> = None;
        let mut sent = false;
        fn wrote(written: &mut Option<(u64, u64)>, off: u64, len: usize) {
            if len > 0 {
                let (lo, hi) = written.unwrap_or((off, off));
                *written = Some((lo.min(off), hi.max(off + len as u64)));
            }
        }
        for (i, step) in m.steps.iter().enumerate() {
            let wait_next = matches!(m.steps.get(i + 1), Some(Step::RqComp));
            match step {
                Step::RqWrite(x) => {
                    let (off, data) = item(*x);
                    wrote(&mut written, off, data.len());
                    last_wr = self.wr_id();
                    let wr =
                        SendWr::new(last_wr, Opcode::Write, Payload::inline(data), remote(off))
                            .signaled(wait_next);
                    self.v.post_send(self.qp, wr)?;
                }
                Step::RqWriteImm(x) => {
                    let (off, data) = item(*x);
                    wrote(&mut written, off, data.len());
                    let imm = imm::encode(off, two_sided)
                        .ok_or_else(|| unsuitable("the immediate cannot address this offset"))?;
                    last_wr = self.wr_id();
                    last_msg = imm as u64;
                    let wr = SendWr::new(
                        last_wr,
                        Opcode::WriteWithImm(imm),
                        Payload::inline(data),
                        remote(off),
                    )
                    .signaled(wait_next);
                    self.v.post_send(self.qp, wr)?;
                }
                Step::RqSend(xs) => {
                    sent = true;
                    let seq = self.next_seq();
                    last_msg = seq;
                    // Borrowed into the frame's bytes: the data is copied once, there.
                    let mut entries = [(0, &[][..]); MAX_ENTRIES];
                    for (e, x) in entries.iter_mut().zip(xs) {
                        *e = item(*x);
                    }
                    // At most MAX_ENTRIES: checked with the message's size above.
                    let entries = &entries[..xs.len()];
                    last_wr = self.wr_id();
                    let payload = Payload::Inline(Frame::apply_payload(seq, two_sided, entries));
                    self.v.post_send(
                        self.qp,
                        SendWr::new(last_wr, Opcode::Send, payload, None).signaled(wait_next),
                    )?;
                }
                Step::RqSendAddr(x) => {
                    sent = true;
                    let seq = self.next_seq();
                    last_msg = seq;
                    let (off, data) = item(*x);
                    last_wr = self.wr_id();
                    let payload = Payload::Inline(Frame::notify_payload(
                        seq,
                        true,
                        &[(off, data.len() as u32)],
                    ));
                    self.v.post_send(
                        self.qp,
                        SendWr::new(last_wr, Opcode::Send, payload, None).signaled(false),
                    )?;
                }
                Step::RqFlush => {
                    // An IBTA FLUSH names a range of one memory region (`ibv_wr_flush`), and
                    // covers the earlier writes to it only: so one FLUSH of the region's
                    // bytes written since the last, and one of the receive ring if a SEND
                    // put data there (seed 000's "Rq Send(a); Rq Flush"). Completions come
                    // in order: waiting for the last waits for both. A READ used as a FLUSH
                    // orders every earlier write (seed 000 §3.4): one READ of the region.
                    let after_send = std::mem::take(&mut sent);
                    let ring = hello
                        .ring_rkey
                        .filter(|_| after_send && self.flush == FlushMethod::Native)
                        .map(|rkey| {
                            let len = u64::from(hello.rq_slots) * u64::from(hello.rq_slot_bytes);
                            let at = Remote {
                                addr: hello.ring_addr,
                                rkey,
                            };
                            (at, len)
                        });
                    let region = match written.take() {
                        Some((lo, hi)) => Some((lo, hi - lo)),
                        None if ring.is_some() => None,
                        // Nothing written (no method does that), or a READ: the update's
                        // first item (a READ orders every earlier write anyway).
                        None => Some(flush_span(items[0])),
                    };
                    let region = region.map(|(off, len)| {
                        let at = Remote {
                            addr: hello.region_addr + off,
                            rkey: hello.region_rkey,
                        };
                        (at, len)
                    });
                    for (at, len) in region.into_iter().chain(ring) {
                        last_flush = self.post_flush(at, len)?;
                    }
                }
                Step::RqFlushOf(x) => {
                    let (off, len) = flush_span(item(*x));
                    (written, sent) = (None, false);
                    let at = Remote {
                        addr: hello.region_addr + off,
                        rkey: hello.region_rkey,
                    };
                    last_flush = self.post_flush(at, len)?;
                }
                Step::RqCompFlush => self.wait_wr(last_flush, "FLUSH").await?,
                Step::RqWriteAtomic(x) => {
                    let (off, data) = item(*x);
                    wrote(&mut written, off, data.len());
                    let value: [u8; 8] = data
                        .try_into()
                        .map_err(|_| unsuitable("ATOMIC WRITE carries exactly 8 bytes"))?;
                    last_wr = self.wr_id();
                    let wr = SendWr::new(
                        last_wr,
                        Opcode::AtomicWrite {
                            value: u64::from_le_bytes(value),
                        },
                        Payload::None,
                        remote(off),
                    )
                    .signaled(false);
                    self.v.post_send(self.qp, wr)?;
                }
                Step::RqComp => self.wait_wr(last_wr, "update").await?,
                Step::RqReceiveAck => self.wait_ack(last_msg).await?,
                Step::RspReceive | Step::RspCopy { .. } | Step::RspFlush | Step::RspSendAck => {}
            }
        }
        Ok(())
    }

    async fn wait_wr(&mut self, wr_id: u64, what: &'static str) -> Result<(), PersistError> {
        loop {
            let wc = match self.taken_sends.pop_front() {
                Some(wc) => wc,
                None => next_completion(&self.v, self.scq).await,
            };
            if wc.status != WcStatus::Success {
                return Err(PersistError::Completion {
                    what,
                    status: wc.status,
                });
            }
            if wc.wr_id == wr_id {
                return Ok(());
            }
        }
    }

    async fn next_frame(&mut self) -> Result<Frame, PersistError> {
        let wc = next_completion(&self.v, self.rcq).await;
        if wc.status == WcStatus::WrFlushErr {
            // The connection failed; a flushed receive says only that. The send that failed
            // it (the server unreachable, a request it refused) says why. What is taken off
            // the send queue's CQ to find it stays for `wait_wr` (a FLUSH that completed
            // before the failure still proves its writes persistent).
            while let Some(s) = self.v.poll_one(self.scq) {
                self.taken_sends.push_back(s);
            }
            let cause = self
                .taken_sends
                .iter()
                .find(|s| !matches!(s.status, WcStatus::Success | WcStatus::WrFlushErr));
            if let Some(cause) = cause {
                return Err(PersistError::Completion {
                    what: "a request (the connection failed)",
                    status: cause.status,
                });
            }
        }
        if wc.status != WcStatus::Success {
            return Err(PersistError::Completion {
                what: "receive",
                status: wc.status,
            });
        }
        let mut slot = [0u8; ACK_SLOT_BYTES as usize];
        let buf = &mut slot[..wc.byte_len.min(ACK_SLOT_BYTES as u32) as usize];
        self.v.load(
            Space::Dram,
            self.scratch.addr + 4096 + wc.wr_id * ACK_SLOT_BYTES,
            buf,
        );
        self.post_ack_slot(wc.wr_id)?;
        // A message of known length: bytes after its frame are refused, not ignored.
        Ok(Frame::parse_exact(buf)?)
    }

    async fn wait_ack(&mut self, seq: u64) -> Result<(), PersistError> {
        loop {
            match self.next_frame().await? {
                Frame::Ack { seq: s } if s == seq => return Ok(()),
                Frame::Ack { seq: s } if s < seq => continue, // a late ack of an earlier update
                _ => {
                    return Err(PersistError::Protocol(
                        "unexpected message while waiting for an ack",
                    ))
                }
            }
        }
    }
}
