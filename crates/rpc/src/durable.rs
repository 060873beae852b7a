//! Seed 003's durable RPCs (§4.2, Figure 4): SFlush-RPC, WFlush-RPC, S-RFlush-RPC and
//! W-RFlush-RPC, client and server, generic over [`Verbs`].
//!
//! **Client** ([`DurableClient`]). A call places the request frame in the next entry of the
//! connection's redo log ([`crate::redolog`]) by RDMA WRITE or SEND, makes it durable with
//! the design's Flush primitive ([`crate::flush::FlushPlan`]), then commits it with the
//! 8-byte operator: "the data is always persisted before the RPC operator" (§4.2). The
//! call returns as soon as the entry is durable: "the sender can initiate another RPC
//! request earlier without waiting for the completion event of the former RPC" (§4.2). A
//! read waits for its result. [`DurableClient::call_batch`] sends up to
//! [`DurableOptions::batch`] requests with one Flush (§4.3, Figure 6(b)).
//!
//! With a sender-initiated Flush (SFlush, WFlush) and no DDIO under DMP, the sender
//! writes the operator itself (RDMA ATOMIC WRITE, or a fenced 8-byte WRITE on a NIC
//! without it) and flushes it; its completion is the durability acknowledgement. With
//! emulated RFlush, and with every design under DMP+DDIO (§4.4.2), the responder's CPU
//! persists the entry (`clwb`+`sfence`), writes and persists the operator, and notifies
//! the sender with a `Durable` message. With native RFlush the responder's CPU only posts
//! the RFlush opcode over the arrived entries; its RNIC persists them and sends the
//! zero-length notification (immediate: the last sequence number covered), and the
//! entry's frame is its own commit record ([`FlushPlan::frame_commits`]); under DMP+DDIO
//! the CPU step runs first and the RFlush carries the notification.
//!
//! **Server** ([`DurableServer`]). Two threads: the *dispatcher* takes receive completions
//! (SENDs into log entries, doorbells after WRITEs), runs the responder-CPU step when the
//! plan has one, and wakes the *processor*, which executes committed entries in FIFO
//! order (`ServerCosts::processing` of compute, then [`KvStore::apply`]), advances and
//! persists the processed watermark ("the corresponding log entry is removed"), and
//! replies. Every message to the client carries the backlog in its immediate; past
//! `backlog_threshold` the slow-down bit is set and the client waits before issuing more
//! ("the receiver should notify the sender to slow down", §4.2).
//!
//! **Recovery** ([`DurableServer::recover`]). After a power failure, entries committed
//! but not processed are executed from the log, in order, without the client re-sending
//! (§4.2, §5.4); the kv store's (connection, sequence) stamp makes an entry executed just
//! before the crash (watermark not yet advanced) a no-op. The log is truncated at the
//! first uncommitted entry. On reconnect the server sends the re-executed requests'
//! replies, and the client ([`DurableClient::resume`]) re-sends only requests that were
//! never acknowledged durable and did not survive.

use crate::account::{timed, WorkLog};
use crate::api::{Completion, Op, Reply, RpcClient, RpcError, ServerCosts};
use crate::baselines::ServerCpu;
use crate::design::{Design, Family};
use crate::flush::{FlushParams, FlushPlan, SenderFlush};
use crate::kv::{ExecutionLog, KvLayout, KvStore};
use crate::proto::{ReplyFrame, Request, REPLY_HEADER, REQUEST_HEADER};
use crate::redolog::{judge_entry, EntryState, LogHeader, LogLayout, Operator, HEADER_BYTES};
use crate::workers::{Tasks, Worker, WorkerPool};
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_sim::{NodeHandle, Sim};
use remora_verbs::*;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// A deliberate protocol error, for the crash checker's negative controls. Each must be
/// caught; none is ever set by default.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// The client acknowledges once its WRITEs and operator complete, without any Flush.
    AckOnWriteCompletion,
    /// The plan ignores §4.4.2: under DMP+DDIO the sender's flush (which only reaches the
    /// LLC) is taken as durability, with no responder-CPU flush.
    SkipResponderCpuFlush,
    /// The client writes and persists the operator before the data.
    OperatorBeforeData,
    /// Recovery re-executes logged entries without the kv store's idempotency stamp.
    IgnoreStampOnRecovery,
    /// A server's connections update their shared store without the [`StoreLock`] (only
    /// a server of several connections, `remora_rpc::real`, has one to leave out).
    UnlockedStore,
}

/// Everything both sides of a durable-RPC connection agree on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableOptions {
    /// One of the four durable designs.
    pub design: Design,
    /// Flush form and emulation parameters.
    pub flush: FlushParams,
    /// Connection id (stamped into every request and the log header).
    pub conn: u32,
    /// Redo-log entries (the ring's capacity).
    pub capacity: u32,
    /// Objects in the server's store.
    pub objects: u64,
    /// Largest value.
    pub max_value: u32,
    /// Largest Scan count (sizes the client's receive buffers).
    pub max_scan: u32,
    /// Requests per Flush in [`DurableClient::call_batch`] (§4.3).
    pub batch: u32,
    /// Server processing time and backlog threshold.
    pub costs: ServerCosts,
    /// The server CPU's per-message costs: handling a request and copying its object
    /// from the log to its slot (and a read's objects into the reply), the same charges
    /// the baselines' servers pay, so designs are compared on equal CPU terms.
    pub cpu: ServerCpu,
    /// Busy-poll period of a server thread that expects an operator (SFlush-RPC's SEND
    /// arrives before its operator).
    pub poll_interval: Duration,
    /// Client idle time after which it probes the server with a READ (a dead server then
    /// shows as an error completion).
    pub probe_interval: Duration,
    /// How long a client waits without progress from the server (an acknowledgement, a
    /// reply, or a completion of its own requests; answered probes do not count) before
    /// the wait fails: with [`RpcError::ServerStalled`] when the server's RNIC answered a
    /// probe meanwhile (the RPC threads died or hang), with [`RpcError::Timeout`]
    /// otherwise. It must exceed the longest legitimate wait (a read behind a full log of
    /// requests, each [`ServerCosts::processing`] long).
    pub reply_timeout: Duration,
    /// A negative control, or `None`.
    pub fault: Option<Fault>,
}

impl DurableOptions {
    /// Defaults for `design`: emulated Flush, 64 entries, 64 objects of up to 1 KB, no
    /// batching, light load, backlog threshold half the ring.
    pub fn new(design: Design) -> DurableOptions {
        DurableOptions {
            design,
            flush: FlushParams::default(),
            conn: 1,
            capacity: 64,
            objects: 64,
            max_value: 1024,
            max_scan: 4,
            batch: 1,
            costs: ServerCosts {
                processing: Duration::ZERO,
                backlog_threshold: 32,
                workers: 1,
            },
            cpu: ServerCpu::from_profile(&remora_model::LatencyProfile::default_profile()),
            poll_interval: Duration::from_nanos(500),
            probe_interval: Duration::from_micros(50),
            reply_timeout: Duration::from_millis(50),
            fault: None,
        }
    }

    /// The log layout at `base`.
    pub fn log_layout(&self, base: u64) -> Result<LogLayout, RpcError> {
        LogLayout::new(base, self.capacity, self.max_value)
    }

    fn recv_bytes(&self) -> u64 {
        (REPLY_HEADER as u64 + self.max_value as u64 * self.max_scan.max(1) as u64).max(64)
    }

    /// The plan this connection runs on `config`, with the fault applied.
    pub fn plan(&self, config: &ServerConfig) -> Result<FlushPlan, RpcError> {
        let mut plan = FlushPlan::new(self.design, self.flush, config)?;
        if self.fault == Some(Fault::SkipResponderCpuFlush)
            && (plan.data_flush.is_some() || plan.receiver_rflush)
        {
            plan.responder_cpu = false;
            if !plan.receiver_rflush {
                plan.operator_flush = plan.data_flush.map(|f| match f {
                    SenderFlush::LookupThenRead(_) => SenderFlush::ReadLastByte,
                    SenderFlush::NativeSFlush => SenderFlush::NativeWFlush,
                    f => f,
                });
            }
        }
        Ok(plan)
    }
}

/// What a client needs to reach a server's log (a connection manager would exchange it;
/// the harness passes it directly, as `remora::harness::SimPair` passes the region).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// The server's configuration.
    pub config: ServerConfig,
    /// The log.
    pub layout: LogLayout,
    /// Remote key of the log's memory region.
    pub log_rkey: u32,
    /// Every sequence number up to this one is processed; the server expects the next.
    pub processed: u64,
    /// The processed watermark the log held before recovery (equal to `processed` on a
    /// server that did not crash).
    pub processed_before_recovery: u64,
}

// ------------------------------------------------------------------ messages

/// A message from server to client (RDMA SEND_WITH_IMM; the immediate is a [`Notice`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerMsg {
    /// Every entry up to `upto` is durable (responder-CPU path).
    Durable {
        /// Highest durable sequence number.
        upto: u64,
    },
    /// A processed request's result.
    Reply(ReplyFrame),
}

impl ServerMsg {
    /// The message's bytes: a `Durable` is `DA`, 6 zero bytes, the sequence number.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            ServerMsg::Durable { upto } => {
                let mut b = b"DA\0\0\0\0\0\0".to_vec();
                b.extend_from_slice(&upto.to_le_bytes());
                b
            }
            ServerMsg::Reply(r) => r.to_bytes(),
        }
    }
    /// Parses a message.
    pub fn parse(b: &[u8]) -> Result<ServerMsg, RpcError> {
        if b.len() == 16 && &b[0..8] == b"DA\0\0\0\0\0\0" {
            return Ok(ServerMsg::Durable {
                upto: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            });
        }
        ReplyFrame::parse(b)
            .map(|(r, _)| ServerMsg::Reply(r))
            .map_err(|e| RpcError::Malformed(format!("server message: {e}")))
    }
}

/// The immediate of every server message: the server's backlog and the slow-down bit.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The backlog passed the threshold: do not issue until it clears (§4.2).
    pub slow: bool,
    /// Entries arrived but not processed (saturating at 2^31 - 1).
    pub backlog: u32,
}

impl Notice {
    /// The immediate.
    pub fn to_imm(self) -> u32 {
        self.slow as u32 | self.backlog.min(u32::MAX >> 1) << 1
    }
    /// Decodes an immediate.
    pub fn from_imm(imm: u32) -> Notice {
        Notice {
            slow: imm & 1 == 1,
            backlog: imm >> 1,
        }
    }
}

// ------------------------------------------------------------------ small futures

/// A wake-up between the server's two threads, usable on any executor.
#[derive(Default)]
struct Notify {
    generation: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Notify {
    fn notify(&self) {
        self.generation.set(self.generation.get() + 1);
        for w in self.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }
    async fn wait(&self, seen: u64) {
        poll_fn(|cx| {
            if self.generation.get() != seen {
                Poll::Ready(())
            } else {
                self.wakers.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// Serialises the store updates of several connections that share one store: a Put's
/// object and its connection's watermark become durable while no other connection writes.
/// Without it, another connection could overwrite the object between the two, and after
/// a crash in that instant recovery would find the Put above its watermark with the
/// object's stamp naming the other connection, and re-run it over the later Put.
#[derive(Default)]
pub struct StoreLock {
    held: Cell<bool>,
    released: Notify,
}

impl StoreLock {
    async fn acquire(&self) -> StoreGuard<'_> {
        loop {
            let seen = self.released.generation.get();
            if !self.held.get() {
                self.held.set(true);
                return StoreGuard(self);
            }
            self.released.wait(seen).await;
        }
    }
}

/// Holds a [`StoreLock`] until dropped.
struct StoreGuard<'a>(&'a StoreLock);

impl Drop for StoreGuard<'_> {
    fn drop(&mut self) {
        self.0.held.set(false);
        self.0.released.notify();
    }
}

/// Takes `lock` when there is one.
async fn lock_store(lock: &Option<Rc<StoreLock>>) -> Option<StoreGuard<'_>> {
    match lock {
        Some(l) => Some(l.acquire().await),
        None => None,
    }
}

fn wc_error(wc: &WorkCompletion) -> RpcError {
    RpcError::Connection(format!(
        "{:?} work request {} completed with {}",
        wc.opcode, wc.wr_id, wc.status
    ))
}

// ------------------------------------------------------------------ server

/// What recovery did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The processed watermark found in PM.
    pub processed_before: u64,
    /// Committed entries executed from the log.
    pub reexecuted: u64,
    /// The watermark after recovery: the last committed entry.
    pub processed: u64,
    /// An entry whose operator is durable but whose data is not (the data-before-operator
    /// invariant broke); it was not executed.
    pub torn: Option<String>,
    /// Stale operators cleared past the recovered end of the log.
    pub truncated: u64,
}

/// Server counters.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Entries processed.
    pub processed: u64,
    /// Entries persisted by the responder's CPU.
    pub cpu_persisted: u64,
    /// Times a reply carried the slow-down bit.
    pub slow_downs: u64,
    /// Receive completions that did not name a parsable entry.
    pub bad_entries: u64,
    /// Native RFlush work requests posted (one per ring run of arrived entries).
    pub rflushes: u64,
}

/// The server side of one durable-RPC connection.
pub struct DurableServer<V: Verbs + Clone + 'static> {
    v: V,
    opts: DurableOptions,
    config: ServerConfig,
    plan: FlushPlan,
    layout: LogLayout,
    log_mr: MrInfo,
    scratch: MrInfo,
    kv: KvStore<V>,
    qp: QpNum,
    rcq: CqId,
    processed: u64,
    processed_before: u64,
    /// Entries [`settle`](Self::settle) advanced the watermark over.
    settled: u64,
    recovered: Vec<Reply>,
    stats: Rc<Cell<ServerStats>>,
    workers: Option<WorkerPool>,
    store_lock: Option<Rc<StoreLock>>,
    work_log: Option<WorkLog>,
}

impl<V: Verbs + Clone + 'static> DurableServer<V> {
    /// Allocates (in a fixed order, so a restarted server finds them at the same
    /// addresses) the redo log and the object store in PM, formats the log if PM holds
    /// none, and creates the queue pair. Fails on a corrupt header or one of another
    /// connection or layout.
    pub fn create(
        v: V,
        opts: &DurableOptions,
        executions: Option<ExecutionLog>,
    ) -> Result<Self, RpcError> {
        Self::create_in(v, opts, executions, None)
    }

    /// [`create`](Self::create) over an object store that already exists at `kv` (the
    /// benchmark's: one store, preloaded, shared by every connection); only the log is
    /// allocated.
    pub fn create_in(
        v: V,
        opts: &DurableOptions,
        executions: Option<ExecutionLog>,
        kv: Option<KvLayout>,
    ) -> Result<Self, RpcError> {
        let config = v.config();
        let plan = opts.plan(&config)?;
        let pd = v.alloc_pd()?;
        let probe = opts.log_layout(0)?;
        let base = v.alloc(Space::Pm, probe.bytes(), 4096);
        let layout = opts.log_layout(base)?;
        let log_mr = v.reg_mr(pd, Space::Pm, base, layout.bytes(), Access::ALL)?;
        let kv_layout = kv.unwrap_or_else(|| {
            let l = KvLayout {
                base: 0,
                objects: opts.objects,
                max_value: opts.max_value as u64,
            };
            KvLayout {
                base: v.alloc(Space::Pm, l.bytes(), 4096),
                ..l
            }
        });
        let mut kv = KvStore::new(v.clone(), kv_layout);
        if let Some(log) = executions {
            kv = kv.with_execution_log(log);
        }
        let scratch_addr = v.alloc(Space::Dram, 64, 64);
        let scratch = v.reg_mr(pd, Space::Dram, scratch_addr, 64, Access::ALL)?;
        let rq = opts.capacity as usize + 8;
        let rcq = v.create_cq(rq + 1)?;
        let scq = v.create_cq(4 * opts.capacity as usize + 64)?;
        let qp = v.create_qp(
            pd,
            scq,
            rcq,
            QpAttr {
                sq_depth: 4 * opts.capacity as usize + 64,
                rq_depth: rq,
                ..QpAttr::default()
            },
        )?;
        let want = LogHeader {
            conn: opts.conn,
            capacity: layout.capacity,
            entry_bytes: layout.entry_bytes,
        };
        let mut hb = [0u8; HEADER_BYTES];
        v.load(Space::Pm, base, &mut hb);
        let processed = if hb.iter().all(|&b| b == 0) {
            // Fresh PM: format. The header is durable before any client connects.
            v.store(Space::Pm, base, &want.emit());
            v.store(Space::Pm, layout.watermark_addr(), &0u64.to_le_bytes());
            0
        } else {
            let h = LogHeader::parse(&hb)?;
            if h != want {
                return Err(RpcError::Malformed(format!(
                    "redo log in PM is {h:?}, this connection needs {want:?}"
                )));
            }
            let mut w = [0u8; 8];
            v.load(Space::Pm, layout.watermark_addr(), &mut w);
            u64::from_le_bytes(w)
        };
        Ok(DurableServer {
            v,
            opts: opts.clone(),
            config,
            plan,
            layout,
            log_mr,
            scratch,
            kv,
            qp,
            rcq,
            processed,
            processed_before: processed,
            settled: 0,
            recovered: Vec::new(),
            stats: Rc::new(Cell::new(ServerStats::default())),
            workers: None,
            store_lock: None,
            work_log: None,
        })
    }

    /// Records the CPU work done for each request in `log` (seed 003 §5.6, Figure 20):
    /// the receiver CPU's persist of an RFlush design, the injected processing, and the
    /// store access with its copy and persist.
    pub fn set_work_log(&mut self, log: WorkLog) {
        self.work_log = Some(log);
    }

    /// Executes requests on `pool` (shared with the server's other connections) instead
    /// of a pool of its own of [`ServerCosts::workers`] threads.
    pub fn set_workers(&mut self, pool: WorkerPool) {
        self.workers = Some(pool);
    }

    /// Shares `lock` with the other connections of the same store (see [`StoreLock`]).
    pub fn set_store_lock(&mut self, lock: Rc<StoreLock>) {
        self.store_lock = Some(lock);
    }

    /// The queue pair to connect to the client's.
    pub fn qp(&self) -> QpNum {
        self.qp
    }
    /// Calls `hook` whenever the store's execution log counts an execution (see
    /// [`crate::kv::ExecutionHook`]); only with an execution log.
    pub fn set_execution_hook(&mut self, hook: crate::kv::ExecutionHook) {
        self.kv.set_execution_hook(hook);
    }
    /// Where the object store lives.
    pub fn kv_layout(&self) -> KvLayout {
        self.kv.layout()
    }
    /// The plan the server runs.
    pub fn plan(&self) -> FlushPlan {
        self.plan
    }
    /// Counters, shared with the running server.
    pub fn stats(&self) -> Rc<Cell<ServerStats>> {
        self.stats.clone()
    }

    /// What a client needs to connect.
    pub fn conn_info(&self) -> ConnInfo {
        ConnInfo {
            config: self.config,
            layout: self.layout,
            log_rkey: self.log_mr.rkey,
            processed: self.processed,
            processed_before_recovery: self.processed_before,
        }
    }

    /// The first step of recovering connections that share a store, run on every one of
    /// them before [`recover`](Self::recover) runs on any: if the entry after the
    /// watermark is a Put whose object already carries its stamp, the Put was executed and
    /// only its watermark is missing, so the watermark advances over it (and the execution
    /// is counted, should the crash have cut that short) without executing it again. Under
    /// the [`StoreLock`] that Put was the last store update before the crash; were another
    /// connection's recovery to run first, it could overwrite the object with a later
    /// logged Put of its own, and this connection's recovery would then find the stamp gone
    /// and execute the Put a second time, over the later one. Returns true if it settled
    /// an entry; its reply goes to the reconnecting client and [`recover`](Self::recover)
    /// counts it as re-executed.
    pub async fn settle(&mut self) -> Result<bool, RpcError> {
        if self.opts.fault == Some(Fault::IgnoreStampOnRecovery) {
            return Ok(false);
        }
        let seq = self.processed + 1;
        let frames = self.plan.frame_commits();
        let EntryState::Committed(r) =
            read_entry_with(&self.v, &self.layout, self.opts.conn, seq, frames)
        else {
            return Ok(false);
        };
        let Op::Put { key, .. } = &r.op else {
            return Ok(false);
        };
        let lock = self.store_lock.clone();
        let guard = lock_store(&lock).await;
        // Under the lock, nothing changes the object between this look and the apply, which
        // then skips the Put (and counts it if it was not counted).
        match self.kv.read(*key) {
            Ok(Some((st, _))) if st.conn == self.opts.conn && st.seq == seq => {}
            _ => return Ok(false),
        }
        let reply = self
            .kv
            .apply(self.opts.conn, seq, &r.op)
            .await
            .unwrap_or(Reply { seq, value: vec![] });
        self.advance_watermark(seq).await;
        drop(guard);
        self.recovered.push(reply);
        self.settled += 1;
        Ok(true)
    }

    /// Executes, in order, every committed entry past the processed watermark (seed 003
    /// §4.2: "the RPC can be re-executed with the operation log, without re-sending the
    /// data from the client"), keeps their replies for the reconnecting client, and
    /// truncates the log at the first uncommitted entry. Run it after a restart, before
    /// [`serve`](Self::serve).
    pub async fn recover(&mut self) -> Result<RecoveryReport, RpcError> {
        let mut report = RecoveryReport {
            processed_before: self.processed_before,
            reexecuted: self.settled,
            ..RecoveryReport::default()
        };
        let frames = self.plan.frame_commits();
        loop {
            let seq = self.processed + 1;
            match read_entry_with(&self.v, &self.layout, self.opts.conn, seq, frames) {
                EntryState::Committed(r) => {
                    let lock = self.store_lock.clone();
                    let guard = lock_store(&lock).await;
                    let reply = if self.opts.fault == Some(Fault::IgnoreStampOnRecovery) {
                        self.kv
                            .apply_ignoring_stamp(self.opts.conn, seq, &r.op)
                            .await
                    } else {
                        self.kv.apply(self.opts.conn, seq, &r.op).await
                    };
                    let reply = reply.unwrap_or(Reply { seq, value: vec![] });
                    self.advance_watermark(seq).await;
                    drop(guard);
                    self.recovered.push(reply);
                    report.reexecuted += 1;
                }
                EntryState::Uncommitted => break,
                EntryState::Torn(why) => {
                    report.torn = Some(why);
                    break;
                }
            }
        }
        // Operators past the end may be committed out of order (a batch's operators
        // persist in any order); none was acknowledged, so clear them before the client
        // re-sends those sequence numbers.
        for seq in self.processed + 1..self.processed + self.layout.capacity as u64 {
            let at = self.layout.entry_addr(seq);
            let mut w = [0u8; 8];
            self.v.load(Space::Pm, at, &mut w);
            if u64::from_le_bytes(w) != 0 {
                self.v.store(Space::Pm, at, &[0u8; 8]);
                self.v.persist_local(at, 8).await;
                report.truncated += 1;
            } else if frames
                && matches!(
                    read_entry_with(&self.v, &self.layout, self.opts.conn, seq, true),
                    EntryState::Committed(_)
                )
            {
                // A self-committing frame past the end (never acknowledged: an RFlush
                // notification covers every earlier entry): clear its magic.
                let d = self.layout.data_addr(seq);
                self.v.store(Space::Pm, d, &[0u8; 8]);
                self.v.persist_local(d, 8).await;
                report.truncated += 1;
            }
        }
        report.processed = self.processed;
        Ok(report)
    }

    async fn advance_watermark(&mut self, seq: u64) {
        let at = self.layout.watermark_addr();
        self.v.store(Space::Pm, at, &seq.to_le_bytes());
        self.v.persist_local(at, 8).await;
        self.processed = seq;
    }

    /// Posts receives and runs the dispatcher and processor threads until the connection
    /// fails, and returns why (an error completion on the queue pair, a verb refused).
    /// First sends the replies of entries recovery executed. When either thread stops,
    /// the other is stopped too, but only after a Put inside its store critical section
    /// (object written, watermark not yet durable) has finished it: so a connection torn
    /// down mid-Put never frees the [`StoreLock`] between the two. Entries already logged
    /// but not processed stay in the redo log, where [`recover`](Self::recover) executes
    /// them on the next start (or reconnection). Dropping the returned future is a crash,
    /// not a teardown.
    pub async fn serve(self) -> RpcError {
        let core = Rc::new(Core {
            v: self.v.clone(),
            opts: self.opts.clone(),
            plan: self.plan,
            layout: self.layout,
            log_lkey: self.log_mr.lkey,
            scratch: self.scratch,
            qp: self.qp,
            processed: Cell::new(self.processed),
            arrived: Cell::new(self.processed),
            durable: Cell::new(self.processed),
            notify: Notify::default(),
            turn: Notify::default(),
            stats: self.stats.clone(),
            kv: Cell::new(None),
            store_lock: self.store_lock.clone(),
            work_log: self.work_log.clone(),
            stopping: Cell::new(false),
            in_store: Cell::new(false),
        });
        if let Err(e) = core.post_initial_receives() {
            return e.into();
        }
        for r in &self.recovered {
            if let Err(e) = core.send(ServerMsg::Reply(r_frame(self.opts.conn, r))) {
                return e.into();
            }
        }
        let rcq = self.rcq;
        core.kv.set(Some(self.kv));
        let pool = self
            .workers
            .unwrap_or_else(|| WorkerPool::new(self.opts.costs.workers));
        let p = core.clone();
        let mut dispatch = pin!(core.clone().dispatch(rcq));
        let mut process = pin!(async move { p.process(pool).await });
        let (why, process_done) = poll_fn(|cx| {
            if let Poll::Ready(x) = dispatch.as_mut().poll(cx) {
                return Poll::Ready((x, false));
            }
            process.as_mut().poll(cx).map(|x| (x, true))
        })
        .await;
        // Teardown waits for a Put inside its store critical section: dropped between its
        // object and its watermark, it would free the store lock with the Put executed but
        // not recorded; another connection could then overwrite the object, and recovering
        // this log would find the stamp gone and run the Put again over the later one.
        // Entries not yet in the store stay in the log for recovery.
        core.stopping.set(true);
        if !process_done {
            poll_fn(|cx| {
                if !core.in_store.get() {
                    return Poll::Ready(());
                }
                match process.as_mut().poll(cx) {
                    Poll::Ready(_) => Poll::Ready(()),
                    Poll::Pending if core.in_store.get() => Poll::Pending,
                    Poll::Pending => Poll::Ready(()),
                }
            })
            .await;
        }
        why
    }
}

fn r_frame(conn: u32, r: &Reply) -> ReplyFrame {
    ReplyFrame {
        conn,
        reply: r.clone(),
    }
}

/// Reads and judges `seq`'s entry as the server's CPU sees it.
pub fn read_entry<V: Verbs>(v: &V, layout: &LogLayout, conn: u32, seq: u64) -> EntryState {
    read_entry_with(v, layout, conn, seq, false)
}

/// As [`read_entry`]; with `frames` (a native-RFlush log, [`FlushPlan::frame_commits`]) an
/// entry without an operator is committed when its data area holds an intact frame
/// (magic, CRC-32C) of `conn` and `seq`, and uncommitted otherwise.
pub fn read_entry_with<V: Verbs>(
    v: &V,
    layout: &LogLayout,
    conn: u32,
    seq: u64,
    frames: bool,
) -> EntryState {
    let mut w = [0u8; 8];
    v.load(Space::Pm, layout.entry_addr(seq), &mut w);
    let word = u64::from_le_bytes(w);
    let Some(op) = Operator::from_word(word) else {
        if frames {
            let mut data = vec![0u8; layout.max_frame() as usize];
            v.load(Space::Pm, layout.data_addr(seq), &mut data);
            return match Request::parse(&data) {
                Ok((r, _)) if r.conn == conn && r.seq == seq => EntryState::Committed(r),
                _ => EntryState::Uncommitted,
            };
        }
        return EntryState::Uncommitted;
    };
    let len = (op.frame_len as u64).min(layout.max_frame()) as usize;
    let mut data = vec![0u8; len];
    v.load(Space::Pm, layout.data_addr(seq), &mut data);
    judge_entry(conn, seq, word, &data)
}

struct Core<V: Verbs> {
    v: V,
    opts: DurableOptions,
    plan: FlushPlan,
    layout: LogLayout,
    log_lkey: u32,
    scratch: MrInfo,
    qp: QpNum,
    processed: Cell<u64>,
    arrived: Cell<u64>,
    durable: Cell<u64>,
    notify: Notify,
    /// Wakes executions waiting for their turn to apply (in sequence order).
    turn: Notify,
    stats: Rc<Cell<ServerStats>>,
    /// The store, taken by the execution whose turn it is.
    kv: Cell<Option<KvStore<V>>>,
    /// Shared with the other connections of the store, if any.
    store_lock: Option<Rc<StoreLock>>,
    /// Records CPU work per request (Figure 20's breakdown), if set.
    work_log: Option<WorkLog>,
    /// The connection is being torn down: no execution enters the store any more.
    stopping: Cell<bool>,
    /// An execution is between taking the store lock and releasing it (its object may be
    /// written, its watermark not yet durable): teardown waits for it.
    in_store: Cell<bool>,
}

/// Marks [`Core::in_store`] while alive.
struct InStore<'a>(&'a Cell<bool>);

impl<'a> InStore<'a> {
    fn enter(c: &'a Cell<bool>) -> Self {
        c.set(true);
        InStore(c)
    }
}

impl Drop for InStore<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl<V: Verbs> Core<V> {
    fn bump(&self, f: impl FnOnce(&mut ServerStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    fn post_receive_for(&self, seq: u64) -> Result<(), VerbsError> {
        let sge = match self.plan.carrier {
            // A SEND lands in the data area of the entry it will be.
            Family::Send => Sge {
                addr: self.layout.data_addr(seq),
                len: self.layout.max_frame() as u32,
                lkey: self.log_lkey,
            },
            // WRITE_WITH_IMM doorbells carry no data.
            Family::Write => Sge {
                addr: self.scratch.addr,
                len: 8,
                lkey: self.scratch.lkey,
            },
        };
        self.v.post_recv(self.qp, RecvWr { wr_id: seq, sge })
    }

    fn post_initial_receives(&self) -> Result<(), VerbsError> {
        let first = self.processed.get() + 1;
        let n = match self.plan.carrier {
            Family::Send => self.layout.capacity as u64,
            Family::Write => self.layout.capacity as u64 + 8,
        };
        for seq in first..first + n {
            self.post_receive_for(seq)?;
        }
        Ok(())
    }

    fn notice(&self) -> Notice {
        // On a real-time runtime the processor may execute an entry whose doorbell the
        // dispatcher has not taken yet, so `processed` can pass `arrived`.
        let backlog = self
            .arrived
            .get()
            .max(self.durable.get())
            .saturating_sub(self.processed.get());
        let backlog = u32::try_from(backlog).unwrap_or(u32::MAX);
        Notice {
            slow: backlog > self.opts.costs.backlog_threshold,
            backlog,
        }
    }

    fn send(&self, msg: ServerMsg) -> Result<(), VerbsError> {
        let notice = self.notice();
        if notice.slow {
            self.bump(|s| s.slow_downs += 1);
        }
        self.v.post_send(
            self.qp,
            SendWr::new(
                0,
                Opcode::SendWithImm(notice.to_imm()),
                Payload::inline(msg.to_bytes()),
                None,
            )
            .signaled(false),
        )
    }

    /// Native RFlush (seed 003 §4.1.2): the RNIC persists the entries `from..=to` (one
    /// work request per ring run) and notifies the client with the run's last sequence
    /// number as immediate. No `clwb`, no operator: the frames commit themselves (under
    /// DMP+DDIO [`cpu_persist`](Self::cpu_persist) ran first).
    fn rflush(&self, from: u64, to: u64) -> Result<(), VerbsError> {
        let mut a = from;
        while a <= to {
            let mut b = a;
            while b < to && self.layout.slot(b + 1) != 0 {
                b += 1;
            }
            let start = self.layout.entry_addr(a);
            let len = self.layout.entry_addr(b) + self.layout.entry_bytes as u64 - start;
            let range = Sge {
                addr: start,
                len: len as u32,
                lkey: self.log_lkey,
            };
            self.v
                .post_send(self.qp, SendWr::rflush(0, range, b as u32).signaled(false))?;
            self.bump(|s| s.rflushes += 1);
            a = b + 1;
        }
        Ok(())
    }

    /// Emulated RFlush, and the §4.4.2 step under DMP+DDIO: the responder's CPU writes
    /// back the entry's data (`clwb`+`sfence`), then writes and persists the operator.
    async fn cpu_persist(&self, seq: u64) -> bool {
        let mut h = [0u8; REQUEST_HEADER];
        self.v.load(Space::Pm, self.layout.data_addr(seq), &mut h);
        let code = h[2];
        let arg = u32::from_le_bytes(h[24..28].try_into().unwrap()) as u64;
        let len = REQUEST_HEADER as u64 + if code == 2 { arg } else { 0 };
        if &h[0..2] != b"RQ" || !(1..=3).contains(&code) || len > self.layout.max_frame() {
            self.bump(|s| s.bad_entries += 1);
            return false;
        }
        // The LLC write-back that DDIO makes necessary, before the operator (§4.2, §4.4.2).
        self.v.persist_local(self.layout.data_addr(seq), len).await;
        let op = Operator {
            code,
            seq_lo: seq as u16,
            frame_len: len as u32,
        };
        let at = self.layout.entry_addr(seq);
        self.v.store(Space::Pm, at, &op.to_word().to_le_bytes());
        self.v.persist_local(at, 8).await;
        self.bump(|s| s.cpu_persisted += 1);
        true
    }

    /// The dispatcher thread; returns why it stopped.
    async fn dispatch(self: Rc<Self>, rcq: CqId) -> RpcError {
        loop {
            let wc = next_completion(&self.v, rcq).await;
            if wc.status != WcStatus::Success {
                return wc_error(&wc);
            }
            let seq = match self.plan.carrier {
                Family::Send => wc.wr_id,
                Family::Write => wc.imm.unwrap_or(0) as u64,
            };
            let again = match self.plan.carrier {
                Family::Send => wc.wr_id + self.layout.capacity as u64,
                Family::Write => wc.wr_id,
            };
            if let Err(e) = self.post_receive_for(again) {
                return e.into();
            }
            if seq == 0 {
                self.bump(|s| s.bad_entries += 1);
                continue;
            }
            if self.plan.server_acknowledges() && seq > self.durable.get() {
                let from = self.durable.get() + 1;
                let mut ok = true;
                if self.plan.responder_cpu {
                    for s in from..=seq {
                        let log = self.work_log.as_ref();
                        ok &= timed(log, &self.v, self.opts.conn, s, self.cpu_persist(s)).await;
                    }
                }
                if ok {
                    self.durable.set(seq);
                    let sent = if self.plan.receiver_rflush {
                        self.rflush(from, seq)
                    } else {
                        self.send(ServerMsg::Durable { upto: seq })
                    };
                    if let Err(e) = sent {
                        return e.into();
                    }
                }
            }
            self.arrived.set(self.arrived.get().max(seq));
            self.notify.notify();
        }
    }

    /// The processor: takes committed entries in FIFO order and executes each on a
    /// worker of `pool` (seed 003 §4.2: "a thread is created to handle the RPC
    /// requests"). The injected processing of several entries may overlap when the pool
    /// has several workers; their effects (store access, watermark, reply) happen in
    /// sequence order ("processed in a FIFO order"). Returns why it stopped.
    async fn process(&self, pool: WorkerPool) -> RpcError {
        const MAX_POLLS: u32 = 20_000;
        let tasks: Tasks<'_, RpcError> = Tasks::default();
        let driver = async {
            let mut polls = 0u32;
            let frames = self.plan.frame_commits();
            let mut next = self.processed.get() + 1;
            loop {
                let seen = self.notify.generation.get();
                match read_entry_with(&self.v, &self.layout, self.opts.conn, next, frames) {
                    EntryState::Committed(r) => {
                        polls = 0;
                        let worker = pool.acquire().await;
                        tasks.start(self.execute(next, r, worker));
                        next += 1;
                    }
                    // Not committed yet (or, live, an operator visible before its data).
                    _ if self.arrived.get() >= next && polls < MAX_POLLS => {
                        polls += 1;
                        self.v.compute(self.opts.poll_interval).await;
                    }
                    _ => {
                        polls = 0;
                        self.notify.wait(seen).await;
                    }
                }
            }
        };
        match tasks.run(driver).await {
            Ok(never) => never,
            Err(e) => e,
        }
    }

    /// Executes entry `seq` holding `worker`: the injected processing, then, once every
    /// earlier entry is processed, the store access, the server CPU's per-message work,
    /// the durable watermark and the reply.
    async fn execute(&self, seq: u64, r: Request, worker: Worker) -> Result<(), RpcError> {
        let _worker = worker;
        let log = self.work_log.as_ref();
        if self.opts.costs.processing > Duration::ZERO {
            let processing = self.v.compute(self.opts.costs.processing);
            timed(log, &self.v, self.opts.conn, seq, processing).await;
        }
        loop {
            let seen = self.turn.generation.get();
            if self.processed.get() + 1 == seq {
                break;
            }
            self.turn.wait(seen).await;
        }
        let guard = lock_store(&self.store_lock).await;
        if self.stopping.get() {
            // Torn down while this entry waited: it stays in the log for recovery.
            return Err(RpcError::Connection("the connection is closing".into()));
        }
        let in_store = InStore::enter(&self.in_store);
        let start = self.v.now();
        let mut kv = self
            .kv
            .take()
            .expect("the store is free on an entry's turn");
        let reply = kv
            .apply(self.opts.conn, seq, &r.op)
            .await
            .unwrap_or(Reply { seq, value: vec![] });
        self.kv.set(Some(kv));
        // The per-message CPU work the baselines' servers also pay: handling the request,
        // copying the object from the log to its slot (or a read's objects into the
        // reply).
        let cpu = self.opts.cpu;
        let copied = match &r.op {
            Op::Put { value, .. } => value.len(),
            _ => reply.value.len(),
        };
        self.v.compute(cpu.handle + cpu.copy(copied as u64)).await;
        let at = self.layout.watermark_addr();
        self.v.store(Space::Pm, at, &seq.to_le_bytes());
        self.v.persist_local(at, 8).await;
        if let Some(log) = log {
            log.record(self.opts.conn, seq, start, self.v.now());
        }
        drop(guard);
        drop(in_store);
        self.processed.set(seq);
        self.bump(|s| s.processed += 1);
        self.turn.notify();
        self.send(ServerMsg::Reply(r_frame(self.opts.conn, &reply)))?;
        Ok(())
    }
}

// ------------------------------------------------------------------ client

const WR_DATA: u64 = 1 << 60;
const WR_FLUSH: u64 = 2 << 60;
const WR_OP: u64 = 3 << 60;
const WR_DOORBELL: u64 = 4 << 60;
const WR_PROBE: u64 = 5 << 60;

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
        };
        c.reopen()?;
        Ok(c)
    }

    /// A new queue pair (after the old one failed); connect it, then
    /// [`attach`](Self::attach) and [`resume`](Self::resume).
    pub fn reopen(&mut self) -> Result<QpNum, RpcError> {
        let sq = 4 * self.opts.capacity as usize + 64;
        self.cq = self.v.create_cq(sq + self.nrecv as usize + 1)?;
        self.qp = self.v.create_qp(
            self.pd,
            self.cq,
            self.cq,
            QpAttr {
                sq_depth: sq,
                rq_depth: self.nrecv as usize,
                ..QpAttr::default()
            },
        )?;
        self.done.clear();
        self.probing = false;
        self.slow = false;
        Ok(self.qp)
    }

    /// The queue pair to connect to the server's.
    pub fn qp(&self) -> QpNum {
        self.qp
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

    fn post_recv(&self, i: u64) -> Result<(), RpcError> {
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
        if wc.status != WcStatus::Success {
            return Err(wc_error(&wc));
        }
        match wc.opcode {
            WcOpcode::Recv if wc.byte_len == 0 => {
                // A native RFlush's notification: the immediate is the low 32 bits of the
                // last durable sequence number (no backlog notice; replies carry it).
                self.post_recv(wc.wr_id)?;
                let issued = self.next_seq - 1;
                let low = wc.imm.unwrap_or(0) as u64;
                let mut upto = (issued & !0xffff_ffff) | low;
                if upto > issued && upto >= 1 << 32 {
                    upto -= 1 << 32;
                }
                self.durable_known = self.durable_known.max(upto.min(issued));
            }
            WcOpcode::Recv => {
                let b = self.opts.recv_bytes();
                let mut buf = vec![0u8; wc.byte_len as usize];
                self.v
                    .load(Space::Dram, self.recv.addr + wc.wr_id * b, &mut buf);
                self.post_recv(wc.wr_id)?;
                let notice = Notice::from_imm(wc.imm.unwrap_or(0));
                self.slow = notice.slow;
                match ServerMsg::parse(&buf)? {
                    ServerMsg::Durable { upto } => {
                        self.durable_known = self.durable_known.max(upto);
                    }
                    ServerMsg::Reply(f) => {
                        let seq = f.reply.seq;
                        self.processed_known = self.processed_known.max(seq);
                        if self.pending.remove(&seq).is_some() {
                            self.replies.insert(seq, f.reply);
                        }
                    }
                }
            }
            _ if wc.wr_id == WR_PROBE => self.probing = false,
            _ => {
                self.done.insert(wc.wr_id);
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
                        Some(Remote {
                            addr: info.layout.base,
                            rkey: info.log_rkey,
                        }),
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
            Family::Write => SendWr::new(
                id,
                Opcode::Write,
                sge,
                Some(Remote {
                    addr: info.layout.data_addr(r.seq),
                    rkey: info.log_rkey,
                }),
            ),
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
        let seqs: Vec<u64> = reqs.iter().map(|r| r.seq).collect();
        let runs = Self::runs(&info.layout, &seqs);
        let mut last = 0;
        for (i, (a, b)) in runs.iter().enumerate() {
            let end_len = reqs.iter().find(|r| r.seq == *b).unwrap().frame_len() as u64;
            let start = info.layout.data_addr(*a);
            let len = info.layout.data_addr(*b) + end_len - start;
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
            let remote = Some(Remote {
                addr: info.layout.entry_addr(r.seq),
                rkey: info.log_rkey,
            });
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
            let seqs: Vec<u64> = reqs.iter().map(|r| r.seq).collect();
            let runs = Self::runs(&info.layout, &seqs);
            for (i, (a, b)) in runs.iter().enumerate() {
                let start = info.layout.entry_addr(*a);
                let len = info.layout.entry_addr(*b) + 8 - start;
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
                self.post(wr.signaled(i + 1 == runs.len()))?;
            }
        }
        Ok(last)
    }

    fn post_doorbell(&mut self, info: &ConnInfo, seq: u64, fenced: bool) -> Result<(), RpcError> {
        let id = self.wr_id(WR_DOORBELL);
        let imm = u32::try_from(seq).map_err(|_| RpcError::Unsupported {
            design: self.opts.design.name(),
            what: format!("sequence number {seq} in a 32-bit doorbell"),
        })?;
        self.post(
            SendWr::new(
                id,
                Opcode::WriteWithImm(imm),
                Payload::None,
                Some(Remote {
                    addr: info.layout.base,
                    rkey: info.log_rkey,
                }),
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
        self.wait_wr(id).await?;
        Ok(self.v.now())
    }

    fn validate(&self, op: &Op) -> Result<(), RpcError> {
        let bad = |what: String| {
            Err(RpcError::Unsupported {
                design: self.opts.design.name(),
                what,
            })
        };
        match op {
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
        if let Some(&lost) = self
            .pending
            .keys()
            .find(|&&s| s > info.processed && !self.unacked.contains_key(&s))
        {
            return Err(RpcError::LostDurable {
                processed: info.processed,
                seq: lost,
            });
        }
        self.processed_known = self.processed_known.max(info.processed.min(issued));
        // Processed before the crash, reply lost: a Put's reply carries nothing; a read's
        // caller already saw its call fail.
        let lost: Vec<u64> = self
            .pending
            .range(..=info.processed_before_recovery)
            .map(|(s, _)| *s)
            .collect();
        for s in lost {
            if let Some(Op::Put { .. }) = self.pending.remove(&s) {
                self.replies.insert(
                    s,
                    Reply {
                        seq: s,
                        value: vec![],
                    },
                );
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

// ------------------------------------------------------------------ harness

/// A durable-RPC server and client on the simulator (like `remora::harness::SimPair`).
pub struct DurablePair {
    /// The simulation.
    pub sim: Sim,
    /// The server node.
    pub server: NodeHandle,
    /// The client node.
    pub client: NodeHandle,
    /// The connection's options.
    pub opts: DurableOptions,
    /// Executions counted outside the simulated machine (they survive its crashes).
    pub executions: ExecutionLog,
    kv: Cell<Option<KvLayout>>,
    stats: RefCell<Option<Rc<Cell<ServerStats>>>>,
}

impl DurablePair {
    /// A server with `config` and a client on the same fabric.
    pub fn new(
        seed: u64,
        profile: LatencyProfile,
        config: ServerConfig,
        mut opts: DurableOptions,
    ) -> DurablePair {
        // The server CPU's costs come from the profile the simulation runs.
        opts.cpu = ServerCpu::from_profile(&profile);
        let sim = Sim::new(seed, profile);
        let server = sim.add_node("server", config);
        let client = sim.add_node("client", config);
        DurablePair {
            sim,
            server,
            client,
            opts,
            executions: ExecutionLog::default(),
            kv: Cell::new(None),
            stats: RefCell::new(None),
        }
    }

    /// Sets up a fresh server (log formatted and persisted), connects a new client and
    /// starts serving. Run the client in a task on [`client`](Self::client).
    pub fn open(&self) -> Result<DurableClient<NodeHandle>, RpcError> {
        let server = DurableServer::create(
            self.server.clone(),
            &self.opts,
            Some(self.executions.clone()),
        )?;
        self.kv.set(Some(server.kv_layout()));
        let s2 = self.server.clone();
        let base = server.conn_info().layout.base;
        self.sim
            .block_on(Instant::NEVER, async move {
                s2.persist_local(base, 128).await;
            })
            .ok_or_else(|| RpcError::Connection("server down while formatting".into()))?;
        let mut client = DurableClient::create(self.client.clone(), &self.opts)?;
        self.sim
            .connect((&self.client, client.qp()), (&self.server, server.qp()))?;
        client.attach(server.conn_info())?;
        *self.stats.borrow_mut() = Some(server.stats());
        self.sim.spawn_on(&self.server, async move {
            let _why = server.serve().await;
        });
        Ok(client)
    }

    /// After a power failure of the server: powers it on, sets it up again at the same
    /// addresses and runs recovery.
    pub fn recover_server(&self) -> Result<(DurableServer<NodeHandle>, RecoveryReport), RpcError> {
        self.sim.restart(self.server.id());
        let mut s = DurableServer::create(
            self.server.clone(),
            &self.opts,
            Some(self.executions.clone()),
        )?;
        self.sim
            .block_on(Instant::NEVER, async move {
                let rep = s.recover().await;
                rep.map(|r| (s, r))
            })
            .ok_or_else(|| RpcError::Connection("server down during recovery".into()))?
    }

    /// Connects `client` (whose old connection failed) to the recovered `server` and
    /// starts serving; then run [`DurableClient::resume`] in a task.
    pub fn reconnect(
        &self,
        server: DurableServer<NodeHandle>,
        client: &mut DurableClient<NodeHandle>,
    ) -> Result<(), RpcError> {
        let qp = client.reopen()?;
        self.sim
            .connect((&self.client, qp), (&self.server, server.qp()))?;
        client.attach(server.conn_info())?;
        *self.stats.borrow_mut() = Some(server.stats());
        self.sim.spawn_on(&self.server, async move {
            let _why = server.serve().await;
        });
        Ok(())
    }

    /// Counters of the server serving now (zero before [`open`](Self::open)).
    pub fn server_stats(&self) -> ServerStats {
        self.stats
            .borrow()
            .as_ref()
            .map(|s| s.get())
            .unwrap_or_default()
    }

    /// The server's object store as its CPU sees it now (for checks); `None` before
    /// [`open`](Self::open).
    pub fn store(&self) -> Option<KvStore<NodeHandle>> {
        self.kv.get().map(|l| KvStore::new(self.server.clone(), l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_lock_admits_one_holder_at_a_time_across_awaits() {
        let sim = remora_sim::Sim::new(1, remora_model::LatencyProfile::default_profile());
        let node = sim.add_node("server", "DMP+noDDIO+PM-RQWRB".parse().unwrap());
        let lock = Rc::new(StoreLock::default());
        let spans = Rc::new(RefCell::new(Vec::new()));
        for task in 0..3u64 {
            let (n, lock, spans) = (node.clone(), Some(lock.clone()), spans.clone());
            sim.spawn(async move {
                for _ in 0..4 {
                    let guard = lock_store(&lock).await;
                    let start = n.now();
                    // A store update and its watermark take simulated time.
                    n.compute(Duration::from_nanos(100 + 10 * task)).await;
                    spans.borrow_mut().push((start, n.now()));
                    drop(guard);
                    n.compute(Duration::from_nanos(5)).await;
                }
            });
        }
        sim.run();
        let mut spans = spans.borrow().clone();
        assert_eq!(spans.len(), 12, "every holder ran");
        spans.sort();
        for w in spans.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "two holders at once: {:?} and {:?}",
                w[0],
                w[1]
            );
        }
    }

    #[test]
    fn notices_and_messages_round_trip() {
        for n in [
            Notice {
                slow: true,
                backlog: 7,
            },
            Notice {
                slow: false,
                backlog: 0,
            },
        ] {
            assert_eq!(Notice::from_imm(n.to_imm()), n);
        }
        let d = ServerMsg::Durable { upto: 99 };
        assert_eq!(ServerMsg::parse(&d.to_bytes()).unwrap(), d);
        let r = ServerMsg::Reply(ReplyFrame {
            conn: 1,
            reply: Reply {
                seq: 4,
                value: vec![1, 2],
            },
        });
        assert_eq!(ServerMsg::parse(&r.to_bytes()).unwrap(), r);
        assert!(ServerMsg::parse(&[0u8; 16]).is_err());
    }
}
