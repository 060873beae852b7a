//! The durable RPCs on the soft RNIC (`remora_soft`): [`DurableServer`] and
//! [`DurableClient`], unchanged, between real processes over TCP, with the redo log and the
//! object store in a memory-mapped PM pool file, so a `kill -9` of the server loses exactly
//! what the model says a power failure loses and the restarted server recovers from the
//! log (seed 003 §4.2: "the RPC can be re-executed with the operation log, without
//! re-sending the data from the client").
//!
//! **Connecting.** The client follows the soft connection manager's `Hello` with a
//! [`DurableClaim`] (0 for a new client, or the node id it has when it reconnects); the
//! server answers `Assign` (the claimed or a free connection's node id, and the server's
//! configuration) and one [`DurableHello`] frame: the options both
//! sides must agree on (design, Flush form, connection id, log capacity, object store
//! shape) and the [`ConnInfo`] of its log (address, remote key, processed watermark before
//! and after recovery). The client adopts those options, creates its queue pair, and the
//! connection manager's `Ready`/`Accepted` connect the two. On real hardware the same bytes
//! would travel in RDMA CM's private data.
//!
//! **Server** ([`serve_durable`]). Several durable-RPC connections at once, each with a
//! redo log of its own (the log is per connection, §4.2): connection `k` (0-based) is
//! client node `k + 1`, whose requests carry connection id `k + 1`. At start-up the server
//! allocates, at fixed PM addresses, every connection's log and then the one object store,
//! formats a fresh pool, runs [`DurableServer::settle`] on every log, then
//! [`DurableServer::recover`] on every log: committed but unprocessed entries are
//! executed before anyone connects, and their replies go to the next client of that
//! connection. When a connection closes, its server tasks stop; the
//! next client of that connection (a reconnecting one claims it; a new one takes the first
//! free connection) gets a new [`DurableServer`] over the same PM (recovering anything the
//! old one logged but did not process).
//!
//! Connections share the store, and the idempotency stamp of an object names only the
//! last connection that wrote it. So a Put's object and its connection's watermark become
//! durable under one [`StoreLock`] shared by the connections: no other connection can
//! overwrite the object before the watermark covers the Put, and recovery never re-runs
//! a Put over another connection's later one. A crash then leaves at most one Put between
//! its object and its watermark; start-up settles it ([`DurableServer::settle`]) before
//! any log re-executes a Put, so another log's recovery cannot overwrite its object first.
//!
//! **Client** ([`RealClient`]). [`RealClient::connect`] opens a connection; after the
//! server died and restarted, [`RealClient::reconnect`] gives the same [`DurableClient`] a
//! new queue pair on the same node and runs [`DurableClient::resume`]: it learns the results
//! of recovered requests and re-sends only those never acknowledged durable.

use crate::api::{RpcError, ServerCosts};
use crate::design::{Design, FlushForm};
use crate::durable::{
    ConnInfo, DurableClient, DurableOptions, DurableServer, Fault, RecoveryReport, StoreLock,
};
use crate::flush::FlushParams;
use crate::kv::KvLayout;
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::MrInfo;
use remora_model::time::{Duration, Instant};
use remora_soft::client::{ConnectError, Opening};
use remora_soft::cm::RefuseCode;
use remora_soft::runtime::RtNode;
use remora_soft::server::{PoolNode, ServeError};
use remora_verbs::*;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ------------------------------------------------------------------ the hello frame

/// Bytes of a [`DurableHello`] frame.
pub const HELLO_BYTES: usize = 96;
/// Version of the [`DurableHello`] frame.
pub const HELLO_VERSION: u16 = 2;
const HELLO_MAGIC: &[u8; 4] = b"RDRH";
/// Bytes of a [`DurableClaim`] frame.
pub const CLAIM_BYTES: usize = 16;
const CLAIM_MAGIC: &[u8; 4] = b"RDRC";

/// What the server tells a connecting client after the connection manager's `Assign`:
/// the connection options both sides must share and where its redo log is.
///
/// Layout (96 bytes, little-endian):
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | magic `RDRH` |
/// | 4..6 | version (2: the handshake has a [`DurableClaim`]) |
/// | 6 | design: 1 SFlush-RPC, 2 WFlush-RPC, 3 S-RFlush-RPC, 4 W-RFlush-RPC |
/// | 7 | Flush form: 1 emulated, 2 native |
/// | 8..12 | connection id |
/// | 12..16 | log capacity (entries) |
/// | 16..20 | largest value |
/// | 20..24 | largest Scan count |
/// | 24..32 | objects in the store |
/// | 32..40 | emulated SFlush's address lookup, ns |
/// | 40 | negative control: 0 none, 1..5 ([`Fault`] in declaration order) |
/// | 41..46 | server configuration (`ServerConfig::to_bytes`) |
/// | 46..48 | reserved (0) |
/// | 48..56 | log base address |
/// | 56..60 | log entry bytes |
/// | 60..64 | log remote key |
/// | 64..72 | processed watermark after recovery |
/// | 72..80 | processed watermark before recovery |
/// | 80..88 | object store base address (for checkers reading the pool) |
/// | 88..92 | CRC-32C of bytes 0..88 |
/// | 92..96 | reserved (0) |
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableHello {
    /// The options the server runs (the fields both sides share; the server's costs and
    /// the client's batch and time-outs are each side's own).
    pub opts: DurableOptions,
    /// The server's log.
    pub info: ConnInfo,
    /// PM address of the object store.
    pub kv_base: u64,
}

/// Why bytes are not a durable-RPC handshake frame ([`DurableHello`], [`DurableClaim`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// Not exactly [`HELLO_BYTES`] bytes.
    #[error("durable-RPC hello of {0} bytes (need {HELLO_BYTES})")]
    Length(usize),
    /// Not exactly [`CLAIM_BYTES`] bytes.
    #[error("durable-RPC claim of {0} bytes (need {CLAIM_BYTES})")]
    ClaimLength(usize),
    /// Not a durable-RPC frame of the kind expected.
    #[error("not a durable-RPC hello or claim (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// Another version.
    #[error("peer speaks durable-RPC handshake version {0}, this is {HELLO_VERSION}")]
    Version(u16),
    /// The checksum does not match.
    #[error("durable-RPC handshake frame checksum mismatch")]
    Checksum,
    /// A field holds a value this build does not know, or fields disagree.
    #[error("bad durable-RPC handshake frame: {0}")]
    BadValue(String),
}

fn design_code(d: Design) -> Option<u8> {
    Some(match d {
        Design::SFlushRpc => 1,
        Design::WFlushRpc => 2,
        Design::SRFlushRpc => 3,
        Design::WRFlushRpc => 4,
        _ => return None,
    })
}

const DESIGNS: [Design; 4] = [
    Design::SFlushRpc,
    Design::WFlushRpc,
    Design::SRFlushRpc,
    Design::WRFlushRpc,
];
const FAULTS: [Fault; 5] = [
    Fault::AckOnWriteCompletion,
    Fault::SkipResponderCpuFlush,
    Fault::OperatorBeforeData,
    Fault::IgnoreStampOnRecovery,
    Fault::UnlockedStore,
];

impl DurableHello {
    /// The frame's bytes. Panics if `opts.design` is not a durable design (a server is
    /// never built for one).
    pub fn emit(&self) -> [u8; HELLO_BYTES] {
        let o = &self.opts;
        let mut b = [0u8; HELLO_BYTES];
        b[0..4].copy_from_slice(HELLO_MAGIC);
        b[4..6].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        b[6] = design_code(o.design).expect("a durable design");
        b[7] = match o.flush.form {
            FlushForm::Emulated => 1,
            FlushForm::Native => 2,
        };
        b[8..12].copy_from_slice(&o.conn.to_le_bytes());
        b[12..16].copy_from_slice(&o.capacity.to_le_bytes());
        b[16..20].copy_from_slice(&o.max_value.to_le_bytes());
        b[20..24].copy_from_slice(&o.max_scan.to_le_bytes());
        b[24..32].copy_from_slice(&o.objects.to_le_bytes());
        b[32..40].copy_from_slice(&o.flush.sflush_lookup.as_nanos().to_le_bytes());
        b[40] = o.fault.map_or(0, |f| {
            FAULTS.iter().position(|&x| x == f).unwrap() as u8 + 1
        });
        b[41..46].copy_from_slice(&self.info.config.to_bytes());
        b[48..56].copy_from_slice(&self.info.layout.base.to_le_bytes());
        b[56..60].copy_from_slice(&self.info.layout.entry_bytes.to_le_bytes());
        b[60..64].copy_from_slice(&self.info.log_rkey.to_le_bytes());
        b[64..72].copy_from_slice(&self.info.processed.to_le_bytes());
        b[72..80].copy_from_slice(&self.info.processed_before_recovery.to_le_bytes());
        b[80..88].copy_from_slice(&self.kv_base.to_le_bytes());
        let crc = crc32c::crc32c(&b[..88]);
        b[88..92].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses exactly one frame. Rejects truncation, another magic or version, a flipped
    /// byte (CRC-32C), unknown codes, non-zero reserved bytes, and a log layout that does
    /// not follow from the options.
    pub fn parse(b: &[u8]) -> Result<DurableHello, HelloError> {
        if b.len() != HELLO_BYTES {
            return Err(HelloError::Length(b.len()));
        }
        if &b[0..4] != HELLO_MAGIC {
            return Err(HelloError::BadMagic(b[0..4].try_into().unwrap()));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != HELLO_VERSION {
            return Err(HelloError::Version(version));
        }
        if crc32c::crc32c(&b[..88]).to_le_bytes() != b[88..92] {
            return Err(HelloError::Checksum);
        }
        let bad = |s: String| Err(HelloError::BadValue(s));
        if b[46..48] != [0, 0] || b[92..96] != [0; 4] {
            return bad("reserved bytes".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let Some(&design) = (b[6] as usize).checked_sub(1).and_then(|i| DESIGNS.get(i)) else {
            return bad(format!("design code {}", b[6]));
        };
        let form = match b[7] {
            1 => FlushForm::Emulated,
            2 => FlushForm::Native,
            x => return bad(format!("Flush form code {x}")),
        };
        let fault = match b[40] {
            0 => None,
            x => match FAULTS.get(x as usize - 1) {
                Some(&f) => Some(f),
                None => return bad(format!("fault code {x}")),
            },
        };
        let config = ServerConfig::from_bytes(b[41..46].try_into().unwrap())
            .map_err(|e| HelloError::BadValue(e.to_string()))?;
        let mut opts = DurableOptions::new(design);
        opts.flush = FlushParams {
            form,
            sflush_lookup: Duration::from_nanos(u64_at(32)),
        };
        opts.conn = u32_at(8);
        opts.capacity = u32_at(12);
        opts.max_value = u32_at(16);
        opts.max_scan = u32_at(20);
        opts.objects = u64_at(24);
        opts.fault = fault;
        let layout = opts
            .log_layout(u64_at(48))
            .map_err(|e| HelloError::BadValue(e.to_string()))?;
        if layout.entry_bytes != u32_at(56) {
            return bad(format!(
                "log entries of {} bytes, but capacity {} and values up to {} make {}",
                u32_at(56),
                opts.capacity,
                opts.max_value,
                layout.entry_bytes
            ));
        }
        let (processed, before) = (u64_at(64), u64_at(72));
        if before > processed {
            return bad(format!(
                "watermark {before} before recovery past {processed} after"
            ));
        }
        Ok(DurableHello {
            opts,
            info: ConnInfo {
                config,
                layout,
                log_rkey: u32_at(60),
                processed,
                processed_before_recovery: before,
            },
            kv_base: u64_at(80),
        })
    }

    /// The object store's layout.
    pub fn kv_layout(&self) -> KvLayout {
        KvLayout {
            base: self.kv_base,
            objects: self.opts.objects,
            max_value: self.opts.max_value as u64,
        }
    }

    /// `mine` with the fields both sides share replaced by the server's (the client keeps
    /// its batch, probe interval and reply time-out).
    pub fn adopt(&self, mine: &DurableOptions) -> DurableOptions {
        DurableOptions {
            batch: mine.batch,
            probe_interval: mine.probe_interval,
            reply_timeout: mine.reply_timeout,
            costs: mine.costs,
            poll_interval: mine.poll_interval,
            ..self.opts.clone()
        }
    }
}

/// What a client sends right after the connection manager's `Hello`, before the server
/// assigns its node id: which connection it is. A new client claims node 0 and gets a
/// free connection; a client reconnecting after its server restarted claims the node id it
/// has, and gets that connection's redo log back (its `DurableClient` resumes on it). A
/// server serves several connections, so it cannot tell them apart otherwise.
///
/// Layout (16 bytes, little-endian): magic `RDRC` (0..4), version (4..6, the
/// [`HELLO_VERSION`]), reserved zero (6..8), node id (8..12; 0: a new client), CRC-32C of
/// bytes 0..12 (12..16).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DurableClaim {
    /// The node id the client has, or 0 for a new client.
    pub node: NodeId,
}

impl DurableClaim {
    /// The frame's bytes.
    pub fn emit(&self) -> [u8; CLAIM_BYTES] {
        let mut b = [0u8; CLAIM_BYTES];
        b[0..4].copy_from_slice(CLAIM_MAGIC);
        b[4..6].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        b[8..12].copy_from_slice(&self.node.to_le_bytes());
        let crc = crc32c::crc32c(&b[..12]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses exactly one frame: rejects truncation, another magic or version, a flipped
    /// byte (CRC-32C) and non-zero reserved bytes.
    pub fn parse(b: &[u8]) -> Result<DurableClaim, HelloError> {
        if b.len() != CLAIM_BYTES {
            return Err(HelloError::ClaimLength(b.len()));
        }
        if &b[0..4] != CLAIM_MAGIC {
            return Err(HelloError::BadMagic(b[0..4].try_into().unwrap()));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != HELLO_VERSION {
            return Err(HelloError::Version(version));
        }
        if crc32c::crc32c(&b[..12]).to_le_bytes() != b[12..16] {
            return Err(HelloError::Checksum);
        }
        if b[6..8] != [0, 0] {
            return Err(HelloError::BadValue("reserved bytes".into()));
        }
        Ok(DurableClaim {
            node: u32::from_le_bytes(b[8..12].try_into().unwrap()),
        })
    }
}

// ------------------------------------------------------------------ PM at fixed addresses

/// A server node whose PM allocations come from one region reserved at start-up, so every
/// [`DurableServer`] built over it (one per connection) finds the log and the store at the
/// same addresses, as a restarted one does after a crash.
#[derive(Clone)]
struct Pinned {
    node: RtNode,
    base: u64,
    end: u64,
    next: Rc<Cell<u64>>,
}

impl Pinned {
    /// A fresh view whose PM allocation starts `offset` bytes into the region.
    fn at(&self, offset: u64) -> Pinned {
        Pinned {
            next: Rc::new(Cell::new(self.base + offset)),
            ..self.clone()
        }
    }
}

impl Verbs for Pinned {
    fn node(&self) -> NodeId {
        self.node.node()
    }
    fn now(&self) -> Instant {
        self.node.now()
    }
    fn config(&self) -> ServerConfig {
        self.node.config()
    }
    fn alloc(&self, space: Space, len: u64, align: u64) -> u64 {
        match space {
            Space::Pm => {
                let addr = self.next.get().next_multiple_of(align);
                assert!(
                    addr + len <= self.end,
                    "durable-RPC server PM allocation past its reserved region"
                );
                self.next.set(addr + len);
                addr
            }
            Space::Dram => self.node.alloc(space, len, align),
        }
    }
    fn alloc_pd(&self) -> Result<PdId, VerbsError> {
        self.node.alloc_pd()
    }
    fn reg_mr(
        &self,
        pd: PdId,
        space: Space,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<MrInfo, VerbsError> {
        self.node.reg_mr(pd, space, addr, len, access)
    }
    fn create_cq(&self, depth: usize) -> Result<CqId, VerbsError> {
        self.node.create_cq(depth)
    }
    fn create_qp(
        &self,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        attr: remora_model::rnic::QpAttr,
    ) -> Result<QpNum, VerbsError> {
        self.node.create_qp(pd, send_cq, recv_cq, attr)
    }
    fn post_send(&self, qp: QpNum, wr: SendWr) -> Result<(), VerbsError> {
        self.node.post_send(qp, wr)
    }
    fn post_recv(&self, qp: QpNum, wr: RecvWr) -> Result<(), VerbsError> {
        self.node.post_recv(qp, wr)
    }
    fn poll_cq(&self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        self.node.poll_cq(cq, max, out)
    }
    fn poll_one(&self, cq: CqId) -> Option<WorkCompletion> {
        self.node.poll_one(cq)
    }
    fn wait_cq(&self, cq: CqId) -> impl Future<Output = ()> {
        self.node.wait_cq(cq)
    }
    fn load(&self, space: Space, addr: u64, buf: &mut [u8]) {
        self.node.load(space, addr, buf)
    }
    fn store(&self, space: Space, addr: u64, data: &[u8]) {
        self.node.store(space, addr, data)
    }
    fn persist_local(&self, addr: u64, len: u64) -> impl Future<Output = ()> {
        self.node.persist_local(addr, len)
    }
    fn compute(&self, d: Duration) -> impl Future<Output = ()> {
        self.node.compute(d)
    }
    fn memcpy(&self, dst: (Space, u64), src: (Space, u64), len: u64) -> impl Future<Output = ()> {
        self.node.memcpy(dst, src, len)
    }
}

/// PM bytes a durable-RPC server with `opts` needs for `connections` connections: one log
/// each, then the store, each 4096-aligned (the order [`serve_durable`] lays them out in).
pub fn pm_bytes_needed(opts: &DurableOptions, connections: u32) -> Result<u64, RpcError> {
    Ok(log_stride(opts)? * connections as u64 + store_bytes(opts))
}

/// Bytes between two connections' logs: one log, 4096-aligned.
fn log_stride(opts: &DurableOptions) -> Result<u64, RpcError> {
    Ok(opts.log_layout(0)?.bytes().next_multiple_of(4096))
}

fn store_bytes(opts: &DurableOptions) -> u64 {
    KvLayout {
        base: 0,
        objects: opts.objects,
        max_value: opts.max_value as u64,
    }
    .bytes()
}

// ------------------------------------------------------------------ server

/// How to run a durable-RPC server on the soft RNIC.
#[derive(Clone, Debug)]
pub struct RealServeOptions {
    /// Address to listen on (`host:port`, IPv4 or IPv6; port 0 picks one).
    pub listen: String,
    /// The PM pool file (created if missing; a wrong or damaged file is refused).
    pub pool: PathBuf,
    /// Bytes of PM (a new pool is created this large; an existing one must be at least).
    pub pool_bytes: u64,
    /// The server's configuration.
    pub config: ServerConfig,
    /// Latency profile of the model.
    pub profile: LatencyProfile,
    /// The connections' options (design, Flush form, log and store shape, costs); each
    /// connection's `conn` is its client's node id.
    pub opts: DurableOptions,
    /// Connections served at once, each with a redo log of its own in the pool (at least
    /// one).
    pub connections: u32,
    /// An execution journal for checkers: a text file of `conn seq` lines, one appended
    /// (a single `write`) each time a Put is executed, and loaded at start-up, so counts
    /// survive a `kill -9` and "executed exactly once" can be judged from outside.
    pub journal: Option<PathBuf>,
}

/// Reads an execution journal in order: one (connection, sequence number) per counted
/// execution, in the order the server counted them (the file is only appended to, across
/// the server's lives, and the server is single-threaded, so with the [`StoreLock`] this is
/// the order the store saw the Puts). A missing file is empty; a line that does not parse
/// is an error (a torn line cannot happen: each is one `write`).
pub fn read_journal_entries(path: &std::path::Path) -> Result<Vec<(u32, u64)>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("journal {}: {e}", path.display())),
    };
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut f = line.split(' ');
        let parsed = match (f.next(), f.next(), f.next()) {
            (Some(c), Some(s), None) => c.parse::<u32>().ok().zip(s.parse::<u64>().ok()),
            _ => None,
        };
        let Some(e) = parsed else {
            return Err(format!(
                "journal {} line {}: {line:?}",
                path.display(),
                i + 1
            ));
        };
        entries.push(e);
    }
    Ok(entries)
}

/// Reads an execution journal into counts per (connection, sequence number) (see
/// [`read_journal_entries`]).
pub fn read_journal(path: &std::path::Path) -> Result<crate::kv::ExecutionLog, String> {
    let log = crate::kv::ExecutionLog::default();
    for e in read_journal_entries(path)? {
        *log.borrow_mut().entry(e).or_default() += 1;
    }
    Ok(log)
}

/// What [`serve_durable`] reports once it listens.
#[derive(Clone, Debug)]
pub struct RealStarted {
    /// The bound address.
    pub addr: SocketAddr,
    /// True if the pool file was created by this start.
    pub created: bool,
    /// How the pool makes writes durable (msync, in memory, or MAP_SYNC on DAX), and why.
    pub durability: remora_soft::pool::Durability,
    /// What start-up recovery did to the first connection's log (client node 1).
    pub recovery: RecoveryReport,
    /// Where the first connection's log is.
    pub info: ConnInfo,
    /// Every connection's log and what start-up recovery did to it, in node-id order.
    pub logs: Vec<(ConnInfo, RecoveryReport)>,
    /// The store's layout.
    pub kv: KvLayout,
}

/// Why a durable-RPC server could not start.
#[derive(Debug, thiserror::Error)]
pub enum RealServeError {
    /// The pool or the socket.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The options are not a durable design.
    #[error(
        "{0} is not a durable RPC design (SFlush-RPC, WFlush-RPC, S-RFlush-RPC, W-RFlush-RPC)"
    )]
    NotDurable(Design),
    /// The pool is too small for the logs and the store.
    #[error("the pool holds {have} bytes of PM past what is allocated; the logs and the store need {need}")]
    PoolTooSmall {
        /// Bytes needed.
        need: u64,
        /// Bytes available.
        have: u64,
    },
    /// The execution journal could not be read or opened.
    #[error("{0}")]
    Journal(String),
    /// The pool holds something else where a log belongs, or setup failed.
    #[error("durable-RPC server: {0}")]
    Rpc(#[from] RpcError),
}

/// How long a connection may take for its handshake before the server drops it.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a client waits for a connection slot (its own, when it reconnects) to free up
/// before it is refused: its previous connection may still be closing.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// One connection's place on the server: its log (at a fixed PM address) and its client's
/// node id (the slot's index + 1).
#[derive(Default)]
struct Slot {
    /// The server built (and recovered) at start-up, for the slot's first connection.
    ready: Option<DurableServer<Pinned>>,
    busy: bool,
}

struct ServerState {
    pinned: Pinned,
    /// Bytes between two slots' logs.
    stride: u64,
    kv: KvLayout,
    journal: Option<(crate::kv::ExecutionLog, crate::kv::ExecutionHook)>,
    opts: DurableOptions,
    config: ServerConfig,
    slots: RefCell<Vec<Slot>>,
    idle: tokio::sync::Notify,
    /// The connections share the store: their updates are serialised (see [`StoreLock`]).
    store_lock: Rc<StoreLock>,
}

impl ServerState {
    /// A server for slot `k` over its log and the shared store; the log is formatted if
    /// PM holds none.
    fn build(&self, k: usize) -> Result<DurableServer<Pinned>, RpcError> {
        let mut opts = self.opts.clone();
        opts.conn = slot_node(k);
        let mut s = DurableServer::create_in(
            self.pinned.at(k as u64 * self.stride),
            &opts,
            self.journal.as_ref().map(|j| j.0.clone()),
            Some(self.kv),
        )?;
        if let Some((_, hook)) = &self.journal {
            s.set_execution_hook(hook.clone());
        }
        // The negative control leaves the connections' store updates unserialised.
        if opts.fault != Some(Fault::UnlockedStore) {
            s.set_store_lock(self.store_lock.clone());
        }
        Ok(s)
    }

    /// Takes the slot `claim` asks for (its node id), or with 0 the first free one,
    /// waiting up to [`BUSY_WAIT`] for it to free up.
    async fn take(&self, claim: NodeId) -> Option<usize> {
        let n = self.slots.borrow().len();
        if claim as usize > n {
            return None;
        }
        let free = || {
            let slots = self.slots.borrow();
            match claim {
                0 => slots.iter().position(|s| !s.busy),
                c => Some(c as usize - 1).filter(|&k| !slots[k].busy),
            }
        };
        let k = tokio::time::timeout(BUSY_WAIT, async {
            loop {
                if let Some(k) = free() {
                    return k;
                }
                // Single-threaded: nothing runs between the check and this registration.
                self.idle.notified().await;
            }
        })
        .await
        .ok()?;
        self.slots.borrow_mut()[k].busy = true;
        Some(k)
    }

    fn release(&self, k: usize) {
        self.slots.borrow_mut()[k].busy = false;
        self.idle.notify_waiters();
    }
}

/// The client node id of slot `k` (the server is node 0).
fn slot_node(k: usize) -> NodeId {
    k as NodeId + 1
}

/// Builds a durable-RPC server over the pool with a redo log for each of
/// `o.connections` connections and one object store, recovers every log (committed but
/// unprocessed entries are executed before anyone connects), listens, and serves up to
/// `o.connections` clients at once until SIGTERM or Ctrl-C (returns `Ok`). `started` is
/// called once the socket listens. Must run inside a `tokio::task::LocalSet`.
pub async fn serve_durable(
    o: RealServeOptions,
    started: impl FnOnce(&RealStarted),
) -> Result<(), RealServeError> {
    if design_code(o.opts.design).is_none() {
        return Err(RealServeError::NotDurable(o.opts.design));
    }
    // Refuse impossible plans (e.g. native SFlush) before touching the pool.
    o.opts.plan(&o.config)?;
    let connections = o.connections.max(1);
    let PoolNode {
        node,
        created,
        durability,
        pm_bytes,
        ..
    } = remora_soft::server::open_node(&o.pool, o.pool_bytes, o.config, &o.profile)?;
    let need = pm_bytes_needed(&o.opts, connections)?;
    let base = node.alloc(Space::Pm, need, 4096);
    let have = (remora_model::rnic::PM_BASE + pm_bytes).saturating_sub(base);
    if need > have {
        return Err(RealServeError::PoolTooSmall { need, have });
    }
    let stride = log_stride(&o.opts)?;
    let journal = match &o.journal {
        None => None,
        Some(p) => {
            let log = read_journal(p).map_err(RealServeError::Journal)?;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| RealServeError::Journal(format!("journal {}: {e}", p.display())))?;
            let file = RefCell::new(file);
            let hook: crate::kv::ExecutionHook = Rc::new(move |c, s| {
                use std::io::Write;
                // One write per line: a kill never leaves half a line.
                file.borrow_mut()
                    .write_all(format!("{c} {s}\n").as_bytes())
                    .expect("execution journal write failed");
            });
            Some((log, hook))
        }
    };
    let state = Rc::new(ServerState {
        pinned: Pinned {
            node: node.clone(),
            base,
            end: base + need,
            next: Rc::new(Cell::new(base)),
        },
        stride,
        // The store follows the logs (with one connection: where `DurableServer::create`
        // puts it, after its log).
        kv: KvLayout {
            base: base + stride * connections as u64,
            objects: o.opts.objects,
            max_value: o.opts.max_value as u64,
        },
        journal,
        opts: o.opts.clone(),
        config: o.config,
        slots: RefCell::new((0..connections).map(|_| Slot::default()).collect()),
        idle: tokio::sync::Notify::new(),
        store_lock: Rc::new(StoreLock::default()),
    });
    // Every connection's log is recovered before anyone connects: a client that never
    // comes back still has its acknowledged requests executed.
    let mut servers = Vec::new();
    for k in 0..connections as usize {
        let server = state.build(k)?;
        // A fresh log's header and watermark are durable before anyone connects.
        node.persist_local(server.conn_info().layout.base, 128)
            .await;
        servers.push(server);
    }
    // The Put the crash caught between its object and its watermark (one at most, under
    // the store lock) is settled before any log re-executes a Put over its object.
    for server in &mut servers {
        server.settle().await?;
    }
    let mut logs = Vec::new();
    for (k, mut server) in servers.into_iter().enumerate() {
        let recovery = server.recover().await?;
        logs.push((server.conn_info(), recovery));
        state.slots.borrow_mut()[k].ready = Some(server);
    }
    let (listener, addr) = remora_soft::server::bind(&o.listen).await?;
    started(&RealStarted {
        addr,
        created,
        durability,
        recovery: logs[0].1.clone(),
        info: logs[0].0,
        logs,
        kv: state.kv,
    });
    remora_soft::server::accept_until_shutdown(listener, move |stream| {
        let state = state.clone();
        async move {
            // A failed or malformed handshake only ends this connection.
            if let Err(e) = handle(stream, state).await {
                eprintln!("durable-RPC connection: {e}");
            }
        }
    })
    .await;
    Ok(())
}

async fn handle(mut stream: TcpStream, st: Rc<ServerState>) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    // The slot this handshake took, so a failure frees that one and no other.
    let taken: Cell<Option<usize>> = Cell::new(None);
    let failed = |e: String| {
        if let Some(k) = taken.get() {
            st.release(k);
        }
        Err(e)
    };
    // The handshake's socket steps have a time limit; recovering the slot's log between
    // them has none: dropped mid-Put, it would free the store lock between the Put's
    // object and its watermark (see `DurableServer::serve`).
    let claimed = async {
        if !remora_soft::server::cm_hello(&mut stream)
            .await
            .map_err(io)?
        {
            return Ok(None);
        }
        let mut b = [0u8; CLAIM_BYTES];
        stream.read_exact(&mut b).await.map_err(io)?;
        let claim = match DurableClaim::parse(&b) {
            Ok(c) => c,
            Err(e) => {
                let _ = remora_soft::server::cm_refuse(&mut stream, RefuseCode::Version).await;
                return Err(e.to_string());
            }
        };
        let Some(k) = st.take(claim.node).await else {
            remora_soft::server::cm_refuse(&mut stream, RefuseCode::Resources)
                .await
                .map_err(io)?;
            return Err(match claim.node {
                0 => format!(
                    "refused a client: all {} connections are in use",
                    st.slots.borrow().len()
                ),
                n => format!(
                    "refused a client claiming node {n}: no such connection, or it is in use"
                ),
            });
        };
        taken.set(Some(k));
        Ok(Some(k))
    };
    let k = match tokio::time::timeout(HANDSHAKE_TIMEOUT, claimed).await {
        Ok(Ok(Some(k))) => k,
        Ok(Ok(None)) => return Ok(()),
        Ok(Err(e)) => return failed(e),
        Err(_) => return failed("handshake timed out".into()),
    };
    let ready = st.slots.borrow_mut()[k].ready.take();
    let server = match ready {
        Some(s) => Ok(s),
        // The slot's previous connection's threads have stopped; recover whatever it
        // logged but did not process, over the same PM.
        None => match st.build(k) {
            Ok(mut s) => match s.settle().await {
                Ok(_) => s.recover().await.map(|_| s),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
    };
    let server = match server {
        Ok(s) => s,
        Err(e) => {
            let _ = remora_soft::server::cm_refuse(&mut stream, RefuseCode::Resources).await;
            return failed(format!("cannot set up the connection: {e}"));
        }
    };
    let accepted = async {
        let client = slot_node(k);
        remora_soft::server::cm_assign(&mut stream, client, st.config)
            .await
            .map_err(io)?;
        let hello = DurableHello {
            opts: DurableOptions {
                conn: client,
                ..st.opts.clone()
            },
            info: server.conn_info(),
            kv_base: server.kv_layout().base,
        };
        stream.write_all(&hello.emit()).await.map_err(io)?;
        if !remora_soft::server::cm_accept(&mut stream, &st.pinned.node, client, server.qp())
            .await
            .map_err(io)?
        {
            return Err("client broke off the handshake".into());
        }
        Ok(())
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, accepted).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return failed(e),
        Err(_) => return failed("handshake timed out".into()),
    }
    let qp = server.qp();
    // The slot frees once the connection's TCP connection closed and its threads stopped,
    // whichever comes last: a reconnecting client then recovers a log no thread of the
    // old connection still writes, and the old connection's close cannot free a slot a
    // new connection already holds.
    let pending = Rc::new(Cell::new(2u8));
    let done = {
        let st = st.clone();
        move |pending: &Cell<u8>| {
            pending.set(pending.get() - 1);
            if pending.get() == 0 {
                st.release(k);
            }
        }
    };
    let (read, write) = stream.into_split();
    {
        let (pending, done) = (pending.clone(), done.clone());
        st.pinned
            .node
            .clone()
            .attach(slot_node(k), read, write, move |n| {
                // The client went away: fail its QP, which stops this connection's
                // threads. They are not aborted: a Put between its object and its
                // watermark finishes both under the store lock first (`serve`), or
                // another connection could overwrite the object and this log's recovery
                // would run the Put again over the later one.
                let _ = n.with(|r, now| r.destroy_qp(now, qp));
                done(&pending);
            });
    }
    let h = tokio::task::spawn_local(server.serve());
    // A bug in the protocol code must not leave a server that accepts requests and never
    // processes them: a panic of the connection's threads ends the process.
    tokio::task::spawn_local(async move {
        match h.await {
            Ok(why) => {
                // Its QP failed. Said only while the TCP connection is open (the client
                // sees errors and closes, which frees the slot); after a close it is the
                // expected end.
                if pending.get() == 2 {
                    eprintln!("durable-RPC connection stopped serving: {why}");
                }
            }
            Err(e) if e.is_panic() => {
                eprintln!("durable-RPC server: the connection's threads panicked; exiting");
                std::process::exit(101);
            }
            // Cancelled: the runtime is shutting down.
            Err(_) => {}
        }
        done(&pending);
    });
    Ok(())
}

// ------------------------------------------------------------------ client

/// Why a real client could not connect.
#[derive(Debug, thiserror::Error)]
pub enum RealConnectError {
    /// The soft connection manager failed.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The server's hello did not parse.
    #[error("from {addr}: {err}")]
    Hello {
        /// Server address.
        addr: String,
        /// What was wrong.
        err: HelloError,
    },
    /// The server runs another design than the client asked for.
    #[error("{addr} runs {server}, not {asked}")]
    Design {
        /// Server address.
        addr: String,
        /// The server's design.
        server: Design,
        /// The client's.
        asked: Design,
    },
    /// The server changed the connection's options across a restart.
    #[error("{addr} came back with other connection options: {what}")]
    Changed {
        /// Server address.
        addr: String,
        /// What changed.
        what: String,
    },
    /// Socket I/O during the handshake.
    #[error("{addr}: {err}")]
    Io {
        /// Server address.
        addr: String,
        /// The error.
        err: std::io::Error,
    },
    /// The handshake took too long.
    #[error("{0}: handshake timed out")]
    Timeout(String),
    /// The durable-RPC client failed to set up or resume.
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

/// A [`DurableClient`] connected to a soft-RNIC server.
pub struct RealClient {
    /// The durable-RPC client: call it through [`crate::RpcClient`].
    pub client: DurableClient<RtNode>,
    /// The local node.
    pub node: RtNode,
    /// What the server said on the last (re)connection.
    pub hello: DurableHello,
    profile: LatencyProfile,
}

/// A connection up to the server's [`DurableHello`]: the connection manager's handshake
/// with a [`DurableClaim`] right after `Hello`, then the server's hello.
struct Opened {
    opening: Opening,
    hello: DurableHello,
}

/// Connects to `addr`, claims `node`'s id (a new node, with the assigned id, when `None`)
/// and reads the server's hello.
async fn open(
    addr: &str,
    profile: &LatencyProfile,
    node: Option<RtNode>,
) -> Result<Opened, RealConnectError> {
    let claim = DurableClaim {
        node: node.as_ref().map_or(0, |n| n.node()),
    };
    let mut opening = remora_soft::client::open_with(addr, profile, node, &claim.emit()).await?;
    let mut b = [0u8; HELLO_BYTES];
    opening
        .stream()
        .read_exact(&mut b)
        .await
        .map_err(|err| RealConnectError::Io {
            addr: addr.to_string(),
            err,
        })?;
    let hello = DurableHello::parse(&b).map_err(|err| RealConnectError::Hello {
        addr: addr.to_string(),
        err,
    })?;
    Ok(Opened { opening, hello })
}

/// Client-side settings of a real connection.
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// The design the client expects (`None`: whatever the server runs).
    pub design: Option<Design>,
    /// Requests per Flush (§4.3).
    pub batch: u32,
    /// Idle time after which the client probes the server.
    pub probe_interval: Duration,
    /// Idle time after which a wait fails.
    pub reply_timeout: Duration,
}

impl Default for ClientSettings {
    /// Any design, no batching, a 1 ms probe and a 10 s time-out: wall-clock values (the
    /// simulator's defaults are microseconds).
    fn default() -> Self {
        ClientSettings {
            design: None,
            batch: 1,
            probe_interval: Duration::from_millis(1),
            reply_timeout: Duration::from_millis(10_000),
        }
    }
}

impl RealClient {
    /// Connects to a durable-RPC server at `addr` (`host:port`; IPv4, IPv6 or a name),
    /// adopts its connection options, and attaches. Must run inside a
    /// `tokio::task::LocalSet`.
    pub async fn connect(
        addr: &str,
        profile: &LatencyProfile,
        settings: &ClientSettings,
    ) -> Result<RealClient, RealConnectError> {
        let hs = async {
            let o = open(addr, profile, None).await?;
            let hello = o.hello.clone();
            if let Some(asked) = settings.design {
                if asked != hello.opts.design {
                    return Err(RealConnectError::Design {
                        addr: addr.to_string(),
                        server: hello.opts.design,
                        asked,
                    });
                }
            }
            let mut mine = DurableOptions::new(hello.opts.design);
            mine.batch = settings.batch;
            mine.probe_interval = settings.probe_interval;
            mine.reply_timeout = settings.reply_timeout;
            let opts = hello.adopt(&mine);
            let node = o.opening.node().clone();
            let mut client = DurableClient::create(node.clone(), &opts)?;
            o.opening.finish(client.qp()).await?;
            client.attach(hello.info)?;
            Ok(RealClient {
                client,
                node,
                hello,
                profile: profile.clone(),
            })
        };
        tokio::time::timeout(HANDSHAKE_TIMEOUT, hs)
            .await
            .map_err(|_| RealConnectError::Timeout(addr.to_string()))?
    }

    /// After the server restarted (its old connection failed): connects the same client,
    /// on a new queue pair of the same node, to `addr`, and runs
    /// [`DurableClient::resume`], which fails if the recovered server lost a request it
    /// had acknowledged as durable. Then [`crate::RpcClient::drain`] returns the replies
    /// of requests recovery executed.
    pub async fn reconnect(&mut self, addr: &str) -> Result<(), RealConnectError> {
        let hs = async {
            let o = open(addr, &self.profile, Some(self.node.clone())).await?;
            let hello = o.hello.clone();
            if hello.opts != self.hello.opts || hello.kv_base != self.hello.kv_base {
                return Err(RealConnectError::Changed {
                    addr: addr.to_string(),
                    what: format!("{:?} then {:?}", self.hello.opts, hello.opts),
                });
            }
            let qp = self.client.reopen()?;
            o.opening.finish(qp).await?;
            self.client.attach(hello.info)?;
            self.hello = hello;
            Ok::<_, RealConnectError>(())
        };
        tokio::time::timeout(HANDSHAKE_TIMEOUT, hs)
            .await
            .map_err(|_| RealConnectError::Timeout(addr.to_string()))??;
        self.client.resume().await?;
        Ok(())
    }
}

/// Default server options for the real backend: `DurableOptions::new(design)` with the
/// costs of `costs`.
pub fn server_options(design: Design, form: FlushForm, costs: ServerCosts) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.flush.form = form;
    o.costs = costs;
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(design: Design, fault: Option<Fault>) -> DurableHello {
        let mut opts = DurableOptions::new(design);
        opts.fault = fault;
        opts.capacity = 16;
        DurableHello {
            info: ConnInfo {
                config: "DMP+DDIO+PM-RQWRB".parse().unwrap(),
                layout: opts.log_layout(0x1_0000_0000).unwrap(),
                log_rkey: 77,
                processed: 9,
                processed_before_recovery: 7,
            },
            kv_base: 0x1_0000_8000,
            opts,
        }
    }

    #[test]
    fn hello_round_trips_and_rejects_bad_bytes() {
        for d in DESIGNS {
            for f in [None, Some(Fault::OperatorBeforeData)] {
                let h = hello(d, f);
                let b = h.emit();
                assert_eq!(DurableHello::parse(&b), Ok(h.clone()));
                assert_eq!(
                    DurableHello::parse(&b[..HELLO_BYTES - 1]),
                    Err(HelloError::Length(HELLO_BYTES - 1))
                );
                for i in 0..HELLO_BYTES {
                    let mut x = b;
                    x[i] ^= 0x10;
                    assert!(DurableHello::parse(&x).is_err(), "{d}: byte {i} flipped");
                }
            }
        }
        // A valid checksum over unknown values is still refused.
        let mut b = hello(Design::WFlushRpc, None).emit();
        b[6] = 9;
        let crc = crc32c::crc32c(&b[..88]);
        b[88..92].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            DurableHello::parse(&b),
            Err(HelloError::BadValue(_))
        ));
        let mut b = hello(Design::WFlushRpc, None).emit();
        b[4] = 3;
        assert_eq!(DurableHello::parse(&b), Err(HelloError::Version(3)));
    }

    #[test]
    fn claim_round_trips_and_rejects_bad_bytes() {
        for node in [0, 1, 7, u32::MAX] {
            let c = DurableClaim { node };
            let b = c.emit();
            assert_eq!(DurableClaim::parse(&b), Ok(c));
            assert_eq!(
                DurableClaim::parse(&b[..CLAIM_BYTES - 1]),
                Err(HelloError::ClaimLength(CLAIM_BYTES - 1))
            );
            assert!(DurableClaim::parse(&[b.as_slice(), &[0]].concat()).is_err());
            for i in 0..CLAIM_BYTES {
                let mut x = b;
                x[i] ^= 0x04;
                assert!(DurableClaim::parse(&x).is_err(), "byte {i} flipped");
            }
        }
        // A hello is not a claim, and a valid checksum over reserved bytes is refused.
        let h = hello(Design::WFlushRpc, None).emit();
        assert!(DurableClaim::parse(&h[..CLAIM_BYTES]).is_err());
        let mut b = DurableClaim { node: 2 }.emit();
        b[6] = 1;
        let crc = crc32c::crc32c(&b[..12]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            DurableClaim::parse(&b),
            Err(HelloError::BadValue(_))
        ));
        let mut b = DurableClaim { node: 2 }.emit();
        b[4] = 1;
        let crc = crc32c::crc32c(&b[..12]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(DurableClaim::parse(&b), Err(HelloError::Version(1)));
    }
}
