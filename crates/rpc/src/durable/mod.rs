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
use crate::kv::{ExecutionLog, KvLayout, KvStore, SlotState};
use crate::proto::{ReplyFrame, Request, RequestHead, REPLY_HEADER, REQUEST_HEADER};
use crate::redolog::{
    judge_entry, Commit, EntryState, LogHeader, LogLayout, Operator, HEADER_BYTES,
};
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

mod client;
mod server;

pub use client::*;
pub use server::*;

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

    pub(crate) fn recv_bytes(&self) -> u64 {
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

impl ConnInfo {
    /// The log's entries area, where a WRITE design's doorbells (WRITE_WITH_IMM, the
    /// immediate naming the entry) and operators go.
    pub fn entries_remote(&self) -> Remote {
        Remote {
            addr: self.layout.entries_addr(),
            rkey: self.log_rkey,
        }
    }

    /// Entry `seq`'s operator word in the log (the commit record of the WRITE designs).
    pub fn entry_remote(&self, seq: u64) -> Remote {
        Remote {
            addr: self.layout.entry_addr(seq),
            rkey: self.log_rkey,
        }
    }

    /// Entry `seq`'s data area in the log.
    pub fn data_remote(&self, seq: u64) -> Remote {
        Remote {
            addr: self.layout.data_addr(seq),
            rkey: self.log_rkey,
        }
    }
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
    /// Parses a message: `b` is the whole receive, so bytes after the frame are an error.
    pub fn parse(b: &[u8]) -> Result<ServerMsg, RpcError> {
        if b.len() == 16 && &b[0..8] == b"DA\0\0\0\0\0\0" {
            return Ok(ServerMsg::Durable {
                upto: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            });
        }
        let (r, used) = ReplyFrame::parse(b)
            .map_err(|e| RpcError::Malformed(format!("server message: {e}")))?;
        if used != b.len() {
            return Err(RpcError::Malformed(format!(
                "server message: {} bytes after a {used}-byte reply",
                b.len() - used
            )));
        }
        Ok(ServerMsg::Reply(r))
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
    /// How many connections were started, and the replies of requests recovery executed
    /// that the last one ended with undelivered (`None` while it serves): an earlier
    /// connection that ends later does not count.
    undelivered: Rc<RefCell<(u64, Option<Vec<Reply>>)>>,
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
            undelivered: Rc::default(),
        }
    }

    /// A server over a fresh log, formatted and its header and watermark persisted, not
    /// yet serving (what [`open`](Self::open) starts with).
    pub fn fresh_server(&self) -> Result<DurableServer<NodeHandle>, RpcError> {
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
        Ok(server)
    }

    /// Sets up a fresh server (log formatted and persisted), connects a new client and
    /// starts serving. Run the client in a task on [`client`](Self::client).
    pub fn open(&self) -> Result<DurableClient<NodeHandle>, RpcError> {
        let server = self.fresh_server()?;
        self.serve_client(server, &self.opts.clone())
    }

    /// Connects a new client built with `opts` to `server` and starts serving. `opts` may
    /// differ from the server's: a client that believes another store, log or scan bound
    /// (the tests of what the server does with requests it did not agree to).
    pub fn serve_client(
        &self,
        server: DurableServer<NodeHandle>,
        opts: &DurableOptions,
    ) -> Result<DurableClient<NodeHandle>, RpcError> {
        let mut client = DurableClient::create(self.client.clone(), opts)?;
        self.sim
            .connect((&self.client, client.qp()), (&self.server, server.qp()))?;
        client.attach(server.conn_info())?;
        self.start_serving(server);
        Ok(client)
    }

    /// A bare queue pair of the client node (its CQ and protection domain too), connected
    /// to the server's queue pair `server_qp`: for tests that speak for the client
    /// themselves, request by request.
    pub fn bare_qp(&self, server_qp: QpNum) -> Result<(QpNum, CqId, PdId), RpcError> {
        let c = &self.client;
        let pd = c.alloc_pd()?;
        let cq = c.create_cq(64)?;
        let qp = c.create_qp(pd, cq, cq, remora_model::rnic::QpAttr::default())?;
        self.sim
            .connect((&self.client, qp), (&self.server, server_qp))?;
        Ok((qp, cq, pd))
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
        // A task of the server: a power failure during recovery stops it there.
        self.sim
            .block_on_node(&self.server, Instant::NEVER, async move {
                let rep = s.recover().await;
                rep.map(|r| (s, r))
            })
            .ok_or_else(|| RpcError::Connection("server down during recovery".into()))?
    }

    /// Connects `client` (whose old connection failed) to the recovered `server` and
    /// starts serving; then run [`DurableClient::resume`] in a task on the client it
    /// gives back.
    pub fn reconnect(
        &self,
        server: DurableServer<NodeHandle>,
        mut client: DurableClient<NodeHandle>,
    ) -> Result<DurableClient<NodeHandle>, RpcError> {
        let (mut client, qp) = self
            .sim
            .block_on(Instant::NEVER, async move {
                let qp = client.reopen().await;
                (client, qp)
            })
            .ok_or_else(|| RpcError::Connection("the client's reopen never finished".into()))?;
        let qp = qp?;
        self.sim
            .connect((&self.client, qp), (&self.server, server.qp()))?;
        client.attach(server.conn_info())?;
        self.start_serving(server);
        Ok(client)
    }

    /// Runs `server`'s connection in a task of the server node; what it ends with
    /// undelivered is [`undelivered`](Self::undelivered)'s.
    fn start_serving(&self, server: DurableServer<NodeHandle>) {
        *self.stats.borrow_mut() = Some(server.stats());
        let undelivered = self.undelivered.clone();
        let generation = {
            let mut u = undelivered.borrow_mut();
            *u = (u.0 + 1, None);
            u.0
        };
        self.sim.spawn_on(&self.server, async move {
            let (_why, left) = server.serve_keeping().await;
            let mut u = undelivered.borrow_mut();
            if u.0 == generation {
                u.1 = Some(left);
            }
        });
    }

    /// Once the connection serving last has ended: the replies of requests recovery
    /// executed that the client's RNIC never acknowledged (still the client's, for its
    /// next connection). `None` while it serves, or if a crash ended it.
    pub fn undelivered(&self) -> Option<Vec<Reply>> {
        self.undelivered.borrow().1.clone()
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
            reply: Reply::ok(4, vec![1, 2]),
        });
        assert_eq!(ServerMsg::parse(&r.to_bytes()).unwrap(), r);
        assert!(ServerMsg::parse(&[0u8; 16]).is_err());
    }
}
