//! The server side: [`serve_durable`], its connection slots and its handshake.

use crate::api::RpcError;
use crate::design::Design;
use crate::durable::{
    ConnInfo, DurableOptions, DurableServer, Fault, RecoveryReport, StoreLock, SERVER_DRAM_BYTES,
};
use crate::kv::KvLayout;
use remora_exec::net::TcpStream;
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_soft::cm::RefuseCode;
use remora_soft::server::{PoolNode, ServeError};
use remora_verbs::*;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;

use super::hello::{design_code, DurableClaim, DurableHello, HelloError, CLAIM_BYTES};
use super::pinned::{log_stride, pm_bytes_needed};
use super::HANDSHAKE_TIMEOUT;
use remora_soft::pinned::PinnedNode;
use remora_soft::server::wall_now;

/// How to run a durable-RPC server on the soft RNIC.
#[derive(Clone, Debug)]
pub struct RealServeOptions {
    /// Address to listen on (`host:port`, IPv4 or IPv6; port 0 picks one).
    pub listen: String,
    /// The PM pool file (created if missing; a wrong or damaged file is refused).
    pub pool: PathBuf,
    /// Bytes of PM: what a new pool gets, and what an existing one must hold.
    pub pool_bytes: remora_soft::pool::PoolBytes,
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
    /// How long a connection's log stays its client's after the client leaves (and after
    /// start-up): within the lease only that client, with its key, gets the log back, with
    /// the replies of requests recovery executed for it; after it a new client may take
    /// the log, and those replies are dropped.
    pub lease: std::time::Duration,
    /// How many connections may be in their handshake at once, in all and from one
    /// address; one more is refused as busy (`remora_soft::server::Admission`).
    pub admission: remora_soft::server::Admission,
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
    /// The server RNIC's live objects, updated whenever a connection or a handshake
    /// ends (readable from any thread).
    pub objects: remora_soft::server::LiveObjects,
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
    /// The execution journal could not be read or opened.
    #[error("{0}")]
    Journal(String),
    /// The pool holds something else where a log belongs, or setup failed.
    #[error("durable-RPC server: {0}")]
    Rpc(#[from] RpcError),
}

/// How long a client waits for a connection slot (its own, when it reconnects) to free up
/// before it is refused: its previous connection may still be closing.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// One connection's place on the server: its log (at a fixed PM address) and its client's
/// node id (the slot's index + 1).
struct Slot {
    /// The server built (and recovered) at start-up, for the slot's first connection.
    ready: Option<DurableServer<PinnedNode>>,
    busy: bool,
    /// The log's owner key, as in its PM (0: the log is nobody's).
    key: u64,
    /// Until when the log stays its client's although nobody is connected: the lease after
    /// the client's last connection ended (or after start-up).
    reserved_until: remora_exec::time::Instant,
    /// Replies of requests recovery executed that never reached the client (a broken
    /// handshake, or SENDs its RNIC never acknowledged): kept for its next connection.
    undelivered: Vec<crate::api::Reply>,
}

/// A log's state before a new client took it: its owner key, the replies recovery kept
/// for that owner, and the owner's lease.
struct Previous {
    key: u64,
    replies: Vec<crate::api::Reply>,
    reserved_until: remora_exec::time::Instant,
}

/// Why a claim gets no connection (the connection manager's refusal code and the server's
/// log line).
struct Refusal {
    code: RefuseCode,
    why: String,
}

struct ServerState {
    pinned: PinnedNode,
    /// Bytes between two slots' logs.
    stride: u64,
    /// Each slot's DRAM (its server's scratch), [`SERVER_DRAM_BYTES`] apart from here: a
    /// reconnection reuses it instead of allocating more.
    dram_base: u64,
    kv: KvLayout,
    journal: Option<(crate::kv::ExecutionLog, crate::kv::ExecutionHook)>,
    opts: DurableOptions,
    config: ServerConfig,
    slots: RefCell<Vec<Slot>>,
    idle: remora_exec::sync::Notify,
    /// The connections share the store: their updates are serialised (see [`StoreLock`]).
    store_lock: Rc<StoreLock>,
    /// How long a log stays its client's after the client leaves.
    lease: std::time::Duration,
    /// The RNIC's live objects, for [`RealStarted::objects`].
    objects: remora_soft::server::LiveObjects,
}

impl ServerState {
    /// A server for slot `k` over its log and the shared store; the log is formatted if
    /// PM holds none.
    fn build(&self, k: usize) -> Result<DurableServer<PinnedNode>, RpcError> {
        let mut opts = self.opts.clone();
        opts.conn = slot_node(k);
        let pm = self.pinned.pm();
        let (pm_at, dram_at) = (
            pm.start + k as u64 * self.stride,
            self.dram_base + k as u64 * SERVER_DRAM_BYTES,
        );
        let mut s = DurableServer::create_in(
            PinnedNode::new(
                self.pinned.node().clone(),
                pm_at..pm_at + self.stride,
                Some(dram_at..dram_at + SERVER_DRAM_BYTES),
            ),
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

    /// Takes the slot `claim` asks for: its node id, if the claim has the log's key; or,
    /// for a new client (node 0), the first free one not in `passed`. Waits up to
    /// [`BUSY_WAIT`] for one to free up.
    async fn take(&self, claim: &DurableClaim, passed: &BTreeSet<usize>) -> Result<usize, Refusal> {
        let n = self.slots.borrow().len();
        if claim.node != 0 {
            let k = claim.node as usize - 1;
            if k >= n {
                return Err(Refusal {
                    code: RefuseCode::Resources,
                    why: format!("no connection {} (the server has {n})", claim.node),
                });
            }
            // Before any wait: a stranger learns nothing about the connection's use.
            self.check_key(k, claim)?;
        }
        let free = || {
            let slots = self.slots.borrow();
            match claim.node {
                0 => (0..n).find(|k| !slots[*k].busy && !passed.contains(k)),
                c => Some(c as usize - 1).filter(|&k| !slots[k].busy),
            }
        };
        let k = remora_exec::time::timeout(BUSY_WAIT, async {
            loop {
                if let Some(k) = free() {
                    return k;
                }
                // Single-threaded: nothing runs between the check and this registration.
                self.idle.notified().await;
            }
        })
        .await
        .map_err(|_| Refusal {
            code: RefuseCode::Resources,
            why: match claim.node {
                0 if passed.is_empty() => format!("all {n} connections are in use"),
                0 => format!(
                    "of {n} connections, {} are in use and {} hold replies of requests \
                     recovery executed for their clients, kept for them (for the lease of \
                     {:?} after they leave)",
                    n - passed.len(),
                    passed.len(),
                    self.lease
                ),
                _ => "its connection is still in use".into(),
            },
        })?;
        // And again now: while the claim waited, the log may have gone to a new client.
        if claim.node != 0 {
            self.check_key(k, claim)?;
        }
        self.slots.borrow_mut()[k].busy = true;
        Ok(k)
    }

    /// Whether `claim` has the key of slot `k`'s log.
    fn check_key(&self, k: usize, claim: &DurableClaim) -> Result<(), Refusal> {
        if self.slots.borrow()[k].key == claim.key {
            return Ok(());
        }
        Err(Refusal {
            code: RefuseCode::NotOwner,
            why: "its key is not the connection's (the connection was given to another \
                  client, or to none yet)"
                .into(),
        })
    }

    /// Frees slot `k` after its client's connection; should the log hold work the client
    /// has not seen the end of, it stays the client's for the lease.
    fn release(&self, k: usize) {
        self.slots.borrow_mut()[k].reserved_until = wall_now().saturating_add(self.lease);
        self.unclaim(k);
    }

    /// Frees slot `k`, which a new client took and whose handshake broke, as it was before:
    /// the previous client's key, the replies kept for it, and its lease, not renewed
    /// ([`release`](Self::release) would renew it: breaking handshakes must not keep a log
    /// from new clients). The key in PM is the caller's to restore.
    fn give_back(&self, k: usize, previous: Previous) {
        let mut slots = self.slots.borrow_mut();
        let slot = &mut slots[k];
        slot.key = previous.key;
        slot.reserved_until = previous.reserved_until;
        let mine = std::mem::replace(&mut slot.undelivered, previous.replies);
        slot.undelivered.extend(mine);
        drop(slots);
        self.unclaim(k);
    }

    /// Frees slot `k` that no connection used.
    fn unclaim(&self, k: usize) {
        self.slots.borrow_mut()[k].busy = false;
        self.objects.update(self.pinned.node());
        self.idle.notify_waiters();
    }

    /// Whether a new client may not take slot `k`'s log, whose server is `server`: the log
    /// is a client's (it has a key), that client has not had the replies of requests
    /// recovery executed for it, and the lease since it left has not run out.
    fn kept_for_its_client(&self, k: usize, server: &DurableServer<PinnedNode>) -> bool {
        let slots = self.slots.borrow();
        let s = &slots[k];
        s.key != 0
            && (server.holds_recovered_replies() || !s.undelivered.is_empty())
            && wall_now() < s.reserved_until
    }
}

/// The client node id of slot `k` (the server is node 0).
fn slot_node(k: usize) -> NodeId {
    k as NodeId + 1
}

/// What `rpc-serve` keeps where in the pool, from the options that decide it: the pool's
/// layout record, so a restart with options that would place the logs or the store
/// elsewhere (or with another design, or another rule for committing entries: the Flush
/// form and the configuration's DDIO decide it) is refused before recovery reads anything.
fn layout(
    opts: &DurableOptions,
    config: &ServerConfig,
    connections: u32,
) -> Result<String, RealServeError> {
    let commit = crate::redolog::Commit::of(&opts.plan(config)?).what();
    Ok(format!(
        "rpc-serve {}: a redo log per connection for {connections} connections, {} entries each, {} bytes apart, each entry committed by {commit}, then a store of {} objects of up to {} bytes",
        opts.design,
        opts.capacity,
        log_stride(opts)?,
        opts.objects,
        opts.max_value,
    ))
}

/// Builds a durable-RPC server over the pool with a redo log for each of
/// `o.connections` connections and one object store, recovers every log (committed but
/// unprocessed entries are executed before anyone connects), listens, and serves up to
/// `o.connections` clients at once until SIGTERM or Ctrl-C (returns `Ok`). `started` is
/// called once the socket listens. Must run inside `remora_exec::block_on`.
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
    let admitter =
        remora_soft::server::Admitter::new(o.admission.validate().map_err(ServeError::Admission)?);
    // Listening first: a server that cannot listen leaves its pool as it was. (Nobody is
    // accepted before every log is recovered.)
    let (listener, addr) = remora_soft::server::bind(&o.listen).await?;
    let need = pm_bytes_needed(&o.opts, connections)?;
    let PoolNode {
        node,
        created,
        durability,
        pm_bytes,
        ..
    } = remora_soft::server::open_node(
        &o.pool,
        o.pool_bytes,
        o.config,
        &o.profile,
        &layout(&o.opts, &o.config, connections)?,
        // The logs and the store start where the pool does.
        need,
    )?;
    let base = node.alloc(Space::Pm, need, 4096);
    // `open_node` refused a pool without `need` bytes at its start.
    assert!(
        base + need <= remora_model::rnic::PM_BASE + pm_bytes,
        "the pool holds the logs and the store"
    );
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
        pinned: PinnedNode::new(node.clone(), base..base + need, None),
        stride,
        dram_base: node.alloc(Space::Dram, SERVER_DRAM_BYTES * connections as u64, 64),
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
        slots: RefCell::new(
            (0..connections)
                .map(|_| Slot {
                    ready: None,
                    busy: false,
                    key: 0,
                    reserved_until: wall_now().saturating_add(o.lease),
                    undelivered: Vec::new(),
                })
                .collect(),
        ),
        idle: remora_exec::sync::Notify::new(),
        store_lock: Rc::new(StoreLock::default()),
        lease: o.lease,
        objects: Default::default(),
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
        let mut slots = state.slots.borrow_mut();
        slots[k].key = server.owner_key();
        slots[k].ready = Some(server);
    }
    started(&RealStarted {
        addr,
        created,
        durability,
        recovery: logs[0].1.clone(),
        info: logs[0].0,
        logs,
        kv: state.kv,
        objects: {
            state.objects.update(&node);
            state.objects.clone()
        },
    });
    remora_soft::server::accept_until_shutdown(listener, admitter, move |stream, place| {
        let state = state.clone();
        async move {
            // A failed or malformed handshake only ends this connection.
            if let Err(e) = handle(stream, place, state.clone()).await {
                eprintln!("durable-RPC connection: {e}");
            }
            state.objects.update(state.pinned.node());
        }
    })
    .await;
    Ok(())
}

async fn handle(
    mut stream: TcpStream,
    place: remora_soft::server::Handshaking,
    st: Rc<ServerState>,
) -> Result<(), String> {
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
        match remora_soft::server::cm_hello(&mut stream)
            .await
            .map_err(io)?
        {
            None => return Ok(None),
            Some(0) => {}
            // The durable RPCs identify a client by its claim, below, not by a CM key.
            Some(_) => {
                remora_soft::server::cm_refuse(&mut stream, RefuseCode::NotOwner)
                    .await
                    .map_err(io)?;
                return Ok(None);
            }
        }
        let mut b = [0u8; CLAIM_BYTES];
        stream.read_exact(&mut b).await.map_err(io)?;
        match DurableClaim::parse(&b) {
            Ok(c) => Ok(Some(c)),
            Err(e) => {
                let code = match e {
                    // A claim of a connection without its key (or of none with one).
                    HelloError::ClaimKey { .. } => RefuseCode::NotOwner,
                    _ => RefuseCode::Version,
                };
                let _ = remora_soft::server::cm_refuse(&mut stream, code).await;
                Err(e.to_string())
            }
        }
    };
    let claim = match remora_exec::time::timeout(HANDSHAKE_TIMEOUT, claimed).await {
        Ok(Ok(Some(c))) => c,
        Ok(Ok(None)) => return Ok(()),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err("handshake timed out".into()),
    };
    let mut passed = BTreeSet::new();
    let (k, mut server) = loop {
        let k = match st.take(&claim, &passed).await {
            Ok(k) => k,
            Err(r) => {
                let _ = remora_exec::time::timeout(
                    HANDSHAKE_TIMEOUT,
                    remora_soft::server::cm_refuse(&mut stream, r.code),
                )
                .await;
                return Err(match claim.node {
                    0 => format!("refused a new client: {}", r.why),
                    c => format!("refused a client claiming node {c}: {}", r.why),
                });
            }
        };
        taken.set(Some(k));
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
        if claim.node == 0 && st.kept_for_its_client(k, &server) {
            st.slots.borrow_mut()[k].ready = Some(server);
            taken.set(None);
            st.unclaim(k);
            passed.insert(k);
            continue;
        }
        break (k, server);
    };
    let undelivered = std::mem::take(&mut st.slots.borrow_mut()[k].undelivered);
    // What a new client takes from the log's previous client, given back should its
    // handshake not complete: a broken handshake changes nothing.
    let mut previous = None;
    let key = if claim.node != 0 {
        // The log's client is back: it gets the replies that never reached it.
        server.restore_recovered(undelivered);
        claim.key
    } else {
        // A new client: the log is nobody's, its client had everything, or its client has
        // been gone for the lease. Its key is drawn first: a failure leaves the log as it
        // was, the previous client's replies included.
        let key = match remora_soft::cm::fresh_key() {
            Ok(key) => key,
            Err(e) => {
                server.restore_recovered(undelivered);
                st.slots.borrow_mut()[k].ready = Some(server);
                // Freed without `release`: the previous client's lease is not renewed.
                st.unclaim(k);
                let _ = remora_soft::server::cm_refuse(&mut stream, RefuseCode::Resources).await;
                return Err(format!(
                    "cannot draw a connection key from /dev/urandom: {e}"
                ));
            }
        };
        // The previous client's replies are its own, never sent to another.
        let mut replies = undelivered;
        replies.extend(server.take_recovered());
        previous = Some(Previous {
            key: st.slots.borrow()[k].key,
            replies,
            reserved_until: st.slots.borrow()[k].reserved_until,
        });
        key
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
            key,
        };
        stream.write_all(&hello.emit()).await.map_err(io)?;
        if !remora_soft::server::cm_ready(&mut stream, st.pinned.node(), client, server.qp())
            .await
            .map_err(io)?
        {
            return Err("client broke off the handshake".into());
        }
        if claim.node == 0 {
            // A new client's key is durable before the client is told the connection is
            // its own: after a server crash too, only that client can claim it back. Not
            // before its Ready: a client that breaks off earlier (or a crash then) leaves
            // the log its previous client's.
            server.set_owner_key(key).await;
            st.slots.borrow_mut()[k].key = key;
        }
        remora_soft::server::cm_accepted(&mut stream, server.qp(), 0)
            .await
            .map_err(io)?;
        Ok(())
    };
    let broke_off = match remora_exec::time::timeout(HANDSHAKE_TIMEOUT, accepted).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(_) => Some("handshake timed out".into()),
    };
    let qp = server.qp();
    if let Some(e) = broke_off {
        // The connection, recovered and ready, waits for the slot's next client (with the
        // replies recovery kept for it) unless its QP was connected to this one: then it
        // is freed, so an aborted handshake leaks nothing.
        let node = st.pinned.node();
        if let Some(p) = &previous {
            // The log goes back to its previous client, durably, as it was: whether or not
            // the new key got there (the time-out may have cut its store short).
            server.set_owner_key(p.key).await;
        }
        if node.with(|r, _| r.qp_peer(qp)).is_none() {
            st.slots.borrow_mut()[k].ready = Some(server);
        } else {
            st.slots.borrow_mut()[k].undelivered = server.take_recovered();
            if let Err(err) = server.close() {
                eprintln!(
                    "durable-RPC server: freeing an aborted connection's objects failed: {err}"
                );
            }
        }
        let Some(p) = previous else {
            return failed(e);
        };
        st.give_back(k, p);
        return Err(format!(
            "a new client's handshake failed: {e}; connection {} is left as it was",
            slot_node(k)
        ));
    }
    place.served();
    if let Some(p) = previous {
        let dropped = p.replies.len();
        if dropped > 0 {
            eprintln!(
                "durable-RPC connection {}: given to a new client; {dropped} replies of \
                 requests recovery executed for its previous client are dropped (the log \
                 was nobody's, or its client stayed away for the lease)",
                slot_node(k)
            );
        }
    }
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
            .node()
            .clone()
            .attach(slot_node(k), read, write, move |n| {
                // The client went away: fail its QP, which stops this connection's
                // threads. They are not aborted: a Put between its object and its
                // watermark finishes both under the store lock first (`serve`), or
                // another connection could overwrite the object and this log's recovery
                // would run the Put again over the later one.
                let _ = n.with(|r, now| r.fail_qp(now, qp));
                done(&pending);
            });
    }
    let h = remora_exec::spawn_local(server.serve_keeping());
    let node = st.pinned.node().clone();
    // A bug in the protocol code must not leave a server that accepts requests and never
    // processes them: a panic of the connection's threads ends the process.
    remora_exec::spawn_local(async move {
        match h.await {
            Ok((why, undelivered)) => {
                // Replies recovery kept for the client that its RNIC never acknowledged
                // (the client vanished right after the handshake): still the client's.
                st.slots.borrow_mut()[k].undelivered = undelivered;
                // Its QP failed. Said only while the TCP connection is open; after a
                // close it is the expected end. The connection then ends from this side
                // (it can carry nothing more), which counts as its close.
                if pending.get() == 2 {
                    eprintln!("durable-RPC connection stopped serving: {why}; connection closed");
                    if node.detach(slot_node(k)) {
                        done(&pending);
                    }
                }
            }
            Err(e) => {
                eprintln!("durable-RPC server: the connection's threads panicked ({e}); exiting");
                std::process::exit(101);
            }
        }
        done(&pending);
    });
    Ok(())
}
