//! `remora serve`: a server process that owns a PM pool file and runs, for each client
//! connection, the library's responder (receive, copy, flush, acknowledge) in a slot of
//! the pool: the lowest free one, recovered (the messages a crash or the slot's previous
//! connection left in a PM receive ring are applied) before the client may send.

use crate::cm::{Cm, RefuseCode, CM_FRAME, HANDSHAKE_TIMEOUT};
use crate::pinned::PinnedNode;
use crate::pool::{Durability, Pool, PoolBytes, PoolError};
use crate::runtime::RtNode;
use remora::{CpuCosts, Footprint, Responder, ServerSetup};
use remora_exec::net::{TcpListener, TcpStream};
use remora_exec::Either;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{Objects, Rnic};
use remora_model::verbs::{NodeId, QpNum};
use remora_model::{RqwrbPlacement, ServerConfig, Space};
use remora_verbs::Verbs;
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// How to run a server.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Address to listen on (`host:port`, IPv4 or IPv6; port 0 picks one).
    pub listen: String,
    /// The PM pool file.
    pub pool: PathBuf,
    /// Bytes of PM: what a new pool gets, and what an existing one must hold.
    pub pool_bytes: PoolBytes,
    /// The server's configuration.
    pub config: ServerConfig,
    /// Latency profile of the model.
    pub profile: LatencyProfile,
    /// Per-connection setup.
    pub setup: ServerSetup,
}

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The pool file could not be used.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The pool cannot hold one client's region and receive ring.
    #[error("pool {}: it holds {have} bytes of PM past its header; one client needs {need} (a larger --pool-bytes, or a smaller --region-bytes); the pool is left as it was", path.display())]
    PoolTooSmall {
        /// The pool file.
        path: std::path::PathBuf,
        /// Bytes one connection needs.
        need: u64,
        /// Bytes the pool has for connections.
        have: u64,
    },
    /// The client region's size is outside what a pool can hold.
    #[error(
        "a client region of {0} bytes: it must be 64 bytes to 16 TiB (MAX_POOL_BYTES); \
         the pool was not touched"
    )]
    RegionBytes(u64),
    /// The listening socket failed.
    #[error("cannot listen on {addr}: {err}")]
    Listen {
        /// Address.
        addr: String,
        /// Error.
        err: std::io::Error,
    },
}

/// What the server reports when it is up.
#[derive(Clone, Debug)]
pub struct Started {
    /// The bound address.
    pub addr: SocketAddr,
    /// True if the pool file was created by this start.
    pub created: bool,
    /// How the pool makes writes durable (msync, in memory, or MAP_SYNC on DAX), and why.
    pub durability: Durability,
    /// Clients the pool can serve at once (one slot each).
    pub slots: usize,
    /// Bytes of PM per slot.
    pub slot_bytes: u64,
    /// The RNIC's live objects, as of the last connection that ended.
    pub objects: LiveObjects,
    /// The server's node, for its counters ([`RtNode::net_stats`]) when the server ends.
    pub node: RtNode,
}

/// The server RNIC's live objects, updated whenever a connection ends: with every
/// connection's objects freed as it ends, they stay bounded however many clients a server
/// serves. Readable from any thread.
#[derive(Clone, Debug, Default)]
pub struct LiveObjects(std::sync::Arc<std::sync::Mutex<Objects>>);

impl LiveObjects {
    /// The counts as of the last connection's end.
    pub fn get(&self) -> Objects {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn set(&self, v: Objects) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = v;
    }
}

/// Runs the server until SIGTERM or Ctrl-C (returns `Ok`) or a fatal error. `started` is
/// called once the socket listens. Must run inside `remora_exec::block_on`.
pub async fn serve(opts: ServeOptions, started: impl FnOnce(&Started)) -> Result<(), ServeError> {
    // Sizes beyond any pool would wrap the footprint's sums.
    let region = opts.setup.region_len;
    if !(64..=crate::pool::MAX_POOL_BYTES).contains(&region) {
        return Err(ServeError::RegionBytes(region));
    }
    // Listening first: a server that cannot listen leaves its pool as it was.
    let (listener, addr) = bind(&opts.listen).await?;
    let footprint = opts.setup.footprint(opts.config.rqwrb);
    let PoolNode {
        node,
        created,
        durability,
        pm_bytes,
    } = open_node(
        &opts.pool,
        opts.pool_bytes,
        opts.config,
        &opts.profile,
        &layout(&opts),
        // The slots start where the pool does (the node allocates nothing before them).
        pm_stride(&footprint),
    )?;
    let slots = Rc::new(Slots::new(&node, footprint, pm_bytes));
    let objects = LiveObjects::default();
    objects.set(node.with(|r, _| r.live_objects()));
    started(&Started {
        addr,
        created,
        durability,
        slots: slots.count(),
        slot_bytes: slots.pm_stride,
        objects: objects.clone(),
        node: node.clone(),
    });
    let next_id = Rc::new(Cell::new(1u32));
    let costs = CpuCosts::from_profile(&opts.profile);
    accept_until_shutdown(listener, move |stream| {
        let id = next_id.get();
        next_id.set(id + 1);
        let (node, setup, config, slots) = (node.clone(), opts.setup, opts.config, slots.clone());
        let objects = objects.clone();
        async move {
            // A failed or malformed handshake only ends this connection.
            let _ = handle(stream, node.clone(), id, config, setup, costs, slots).await;
            objects.set(node.with(|r, _| r.live_objects()));
        }
    })
    .await;
    Ok(())
}

/// The pool's connection slots, one responder's [`Footprint`] each, reserved at start-up
/// after what the node allocated before. A connection takes the lowest free slot and
/// gives it back when it ends, so the first connection of every life of the server has
/// slot 0 (its region and PM receive ring at the addresses they had before a crash), and a
/// server serves any number of clients in turn, as many at once as there are slots.
struct Slots {
    node: RtNode,
    pm_base: u64,
    pm_stride: u64,
    dram_base: u64,
    dram_stride: u64,
    busy: RefCell<Vec<bool>>,
    /// Woken when a slot is given back.
    freed: remora_exec::sync::Notify,
}

/// How long a connection waits for a slot before it is refused: a client that reconnects
/// as soon as its last connection closed races the server's noticing the close.
pub const SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Slots {
    fn new(node: &RtNode, footprint: Footprint, pm_bytes: u64) -> Slots {
        let pm_stride = pm_stride(&footprint);
        let dram_stride = footprint.dram.next_multiple_of(4096);
        // A zero-length allocation reads the cursor: where the slots start.
        let pm_base = node.alloc(Space::Pm, 0, 4096);
        let have = (remora_model::rnic::PM_BASE + pm_bytes).saturating_sub(pm_base);
        let count = have / pm_stride;
        // `open_node` refused a pool without room for one slot at its start.
        assert!(count > 0, "the pool holds no connection slot");
        node.alloc(Space::Pm, count * pm_stride, 4096);
        let dram_base = node.alloc(Space::Dram, count * dram_stride, 4096);
        Slots {
            node: node.clone(),
            pm_base,
            pm_stride,
            dram_base,
            dram_stride,
            busy: RefCell::new(vec![false; count as usize]),
            freed: remora_exec::sync::Notify::new(),
        }
    }

    fn count(&self) -> usize {
        self.busy.borrow().len()
    }

    /// The lowest free slot, now busy until the returned guard is dropped.
    fn take(self: &Rc<Self>) -> Option<Slot> {
        let mut busy = self.busy.borrow_mut();
        let i = busy.iter().position(|b| !b)?;
        busy[i] = true;
        Some(Slot {
            slots: self.clone(),
            i,
        })
    }

    /// [`Slots::take`], waiting up to `wait` for a slot to be given back.
    async fn take_within(self: &Rc<Self>, wait: std::time::Duration) -> Option<Slot> {
        remora_exec::time::timeout(wait, async {
            loop {
                // Begun before the check, so a slot freed in between still wakes us.
                let freed = self.freed.notified();
                if let Some(slot) = self.take() {
                    return slot;
                }
                freed.await;
            }
        })
        .await
        .ok()
    }
}

/// A connection's slot; free again when dropped.
struct Slot {
    slots: Rc<Slots>,
    i: usize,
}

impl Slot {
    /// The server node, allocating from this slot only.
    fn node(&self) -> PinnedNode {
        let s = &self.slots;
        let (i, pm, dram) = (self.i as u64, s.pm_stride, s.dram_stride);
        PinnedNode::new(
            s.node.clone(),
            s.pm_base + i * pm..s.pm_base + (i + 1) * pm,
            Some(s.dram_base + i * dram..s.dram_base + (i + 1) * dram),
        )
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.busy.borrow_mut()[self.i] = false;
        self.slots.freed.notify_waiters();
    }
}

/// How long the accept loop waits after a failed `accept` before it tries again.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// Accepts connections until SIGTERM or Ctrl-C, each served by `handle` in a task of its
/// own. Must run inside `remora_exec::block_on`.
pub async fn accept_until_shutdown<F, Fut>(listener: TcpListener, mut handle: F)
where
    F: FnMut(TcpStream) -> Fut + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let mut shutdown = std::pin::pin!(remora_exec::signal::shutdown());
    // Failed accepts since the last one that worked (said once per run of failures: a
    // stderr nobody reads must not fill up and block the server).
    let mut failing = 0u64;
    loop {
        match remora_exec::first(shutdown.as_mut(), listener.accept()).await {
            Either::Left(()) => return,
            Either::Right(Ok((stream, _))) => {
                if failing > 0 {
                    eprintln!("accepting connections again after {failing} failed attempts");
                    failing = 0;
                }
                remora_exec::spawn_local(handle(stream));
            }
            Either::Right(Err(e)) => {
                // Out of file descriptors or memory: the listener stays ready, so retrying
                // at once would spin (and starve the connections being served).
                if failing == 0 {
                    eprintln!("accept failed: {e}; retrying every {ACCEPT_BACKOFF:?}");
                }
                failing += 1;
                remora_exec::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// A server node over a pool file, started by [`open_node`].
pub struct PoolNode {
    /// The node: the RNIC with the pool file as its persistent memory.
    pub node: RtNode,
    /// True if the pool file was created by this start.
    pub created: bool,
    /// How the pool makes writes durable (msync, in memory, or MAP_SYNC on DAX), and why.
    pub durability: Durability,
    /// Bytes of PM in the pool.
    pub pm_bytes: u64,
}

/// What `serve` keeps where in the pool, from the options that decide it: the pool's
/// layout record ([`Pool::claim_layout`]), so a restart with options that would place the
/// slots elsewhere is refused instead of reading one slot's bytes as another's.
pub fn layout(opts: &ServeOptions) -> String {
    let s = &opts.setup;
    let ring = match opts.config.rqwrb {
        RqwrbPlacement::Pm => "in PM, with its watermark",
        RqwrbPlacement::Dram => "in DRAM",
    };
    format!(
        "serve: a slot per connection of a {}-byte region and a {} x {}-byte receive ring {ring} ({} bytes of PM)",
        s.region_len,
        s.rq_slots,
        s.rq_slot_bytes,
        pm_stride(&s.footprint(opts.config.rqwrb)),
    )
}

/// Bytes of PM a connection's slot takes: its footprint's PM, in whole pages.
fn pm_stride(footprint: &Footprint) -> u64 {
    footprint.pm.next_multiple_of(4096).max(4096)
}

/// Opens (or creates) the pool file, records or checks its `layout` (what the server keeps
/// where; see [`Pool::claim_layout`]) and starts a server node (node id 0) whose PM is the
/// pool: what `serve` does once it listens, for servers of other protocols. `need`: the
/// bytes of PM from the pool's start that the server cannot start without; a pool (or a
/// size asked for a new one) below it is refused before the file is created or its layout
/// recorded, so a refused start leaves the pool as it was. Must run inside
/// `remora_exec::block_on`.
pub fn open_node(
    path: &Path,
    pool_bytes: PoolBytes,
    config: ServerConfig,
    profile: &LatencyProfile,
    layout: &str,
    need: u64,
) -> Result<PoolNode, ServeError> {
    let too_small = |have| ServeError::PoolTooSmall {
        path: path.to_path_buf(),
        need,
        have,
    };
    let missing = matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    if missing && pool_bytes.new_len() < need {
        return Err(too_small(pool_bytes.new_len()));
    }
    let mut pool = Pool::open(path, pool_bytes)?;
    if pool.len() < need {
        return Err(too_small(pool.len()));
    }
    pool.claim_layout(layout)?;
    let (created, durability, pm_bytes) = (pool.created(), pool.durability().clone(), pool.len());
    let profile = crate::runtime::real_time_profile(profile);
    let rnic = Rnic::with_media(0, config, &profile, Prng::from_seed(0x5eed), Box::new(pool));
    let node = RtNode::new(rnic);
    remora_exec::spawn_local(node.clone().drive());
    Ok(PoolNode {
        node,
        created,
        durability,
        pm_bytes,
    })
}

/// Binds a listening socket (`host:port`, IPv4 or IPv6; port 0 picks one) and returns it
/// with the bound address.
pub async fn bind(listen: &str) -> Result<(TcpListener, SocketAddr), ServeError> {
    let err = |err| ServeError::Listen {
        addr: listen.to_string(),
        err,
    };
    let listener = TcpListener::bind(listen).await.map_err(err)?;
    let addr = listener.local_addr().map_err(err)?;
    Ok((listener, addr))
}

/// Server side of the connection manager, step 1: reads the client's `Hello`. Anything
/// else (another protocol or version) is answered with `Refused { Version }` and gives
/// `false`.
pub async fn cm_hello(stream: &mut TcpStream) -> std::io::Result<bool> {
    stream.set_nodelay(true)?;
    crate::cm::watch_peer(stream)?;
    if let Some(Cm::Hello) = read_cm(stream).await? {
        return Ok(true);
    }
    cm_refuse(stream, RefuseCode::Version).await?;
    Ok(false)
}

/// Refuses the connection with `code`.
pub async fn cm_refuse(stream: &mut TcpStream, code: RefuseCode) -> std::io::Result<()> {
    stream.write_all(&Cm::Refused { code }.emit()).await
}

/// Step 2: assigns the client its node id (the server is node 0) and sends the server's
/// configuration.
pub async fn cm_assign(
    stream: &mut TcpStream,
    client: NodeId,
    config: ServerConfig,
) -> std::io::Result<()> {
    stream
        .write_all(
            &Cm::Assign {
                client,
                server: 0,
                config,
            }
            .emit(),
        )
        .await
}

/// Step 3: reads the client's `Ready` and connects `qp` to the client's QP. Gives `false`
/// (after `Refused`, where it can) if the client sent anything else or the QP cannot be
/// connected. The client counts itself connected only once [`cm_accepted`] answers, so
/// what the server must have done before the client may rely on the connection goes
/// between the two.
pub async fn cm_ready(
    stream: &mut TcpStream,
    node: &RtNode,
    client: NodeId,
    qp: QpNum,
) -> std::io::Result<bool> {
    let Some(Cm::Ready { qp: client_qp }) = read_cm(stream).await? else {
        cm_refuse(stream, RefuseCode::Version).await?;
        return Ok(false);
    };
    if node.connect(qp, client, client_qp).is_err() {
        cm_refuse(stream, RefuseCode::Resources).await?;
        return Ok(false);
    }
    Ok(true)
}

/// Step 4: answers `Accepted` with the server's `qp`. Then exchange application frames, if
/// any, and [`RtNode::attach`] the stream.
pub async fn cm_accepted(stream: &mut TcpStream, qp: QpNum) -> std::io::Result<()> {
    stream.write_all(&Cm::Accepted { qp }.emit()).await
}

async fn read_cm(s: &mut TcpStream) -> std::io::Result<Option<Cm>> {
    let mut b = [0u8; CM_FRAME];
    s.read_exact(&mut b).await?;
    Ok(Cm::parse(&b).ok())
}

async fn handle(
    mut stream: TcpStream,
    node: RtNode,
    id: u32,
    config: ServerConfig,
    setup: ServerSetup,
    costs: CpuCosts,
    slots: Rc<Slots>,
) -> std::io::Result<()> {
    let handshake = async {
        if !cm_hello(&mut stream).await? {
            return Ok(None);
        }
        cm_assign(&mut stream, id, config).await?;
        match read_cm(&mut stream).await? {
            Some(Cm::Ready { qp }) => Ok::<_, std::io::Error>(Some(qp)),
            // Another frame than the handshake's next is another protocol's, as a wrong
            // first frame is.
            _ => cm_refuse(&mut stream, RefuseCode::Version)
                .await
                .map(|()| None),
        }
    };
    // A silent peer would hold its socket (and this task) for ever.
    let Ok(step) = remora_exec::time::timeout(HANDSHAKE_TIMEOUT, handshake).await else {
        eprintln!("client {id}: no handshake within {HANDSHAKE_TIMEOUT:?}; connection closed");
        return Ok(());
    };
    let Some(client_qp) = step? else {
        return Ok(());
    };
    // Declared before the responder, so it is freed after the responder is gone.
    let Some(slot) = slots.take_within(SLOT_WAIT).await else {
        eprintln!(
            "client {id} refused: all {} connection slots of the pool ({} bytes of PM each) stayed in use for {:?}",
            slots.count(),
            slots.pm_stride,
            SLOT_WAIT
        );
        return cm_refuse(&mut stream, RefuseCode::Resources).await;
    };
    let Ok(mut responder) = Responder::create(slot.node(), setup, costs) else {
        return cm_refuse(&mut stream, RefuseCode::Resources).await;
    };
    let qp = responder.qp();
    if node.connect(qp, id, client_qp).is_err() {
        close(responder, id);
        return cm_refuse(&mut stream, RefuseCode::Resources).await;
    }
    // Recover the slot's receive ring (what a crash, or the slot's previous connection,
    // left there) before the client can send anything.
    responder.recover().await;
    if let Err(e) = cm_accepted(&mut stream, qp).await {
        close(responder, id);
        return Err(e);
    }
    let (read, write) = stream.into_split();
    node.attach(id, read, write, move |n| {
        // The client went away mid-operation: fail its QP so the responder stops.
        let _ = n.with(|r, now| r.fail_qp(now, qp));
    });
    let _ = node.now();
    responder.serve().await;
    // The QP failed. If the connection is still up, the client made it fail (a request
    // its RNIC refused, a bad response): the connection ends too, since it can carry
    // nothing more, so that it keeps no socket or buffers beyond its slot.
    if node.detach(id) {
        eprintln!(
            "client {id}: its queue pair entered the error state (a request or response \
             the RNIC refused); connection closed"
        );
    }
    close(responder, id);
    Ok(())
}

/// Frees a connection's RNIC objects (its slot's memory is freed when the slot drops).
fn close<V: remora_verbs::Verbs>(responder: Responder<V>, id: u32) {
    if let Err(e) = responder.close() {
        eprintln!("client {id}: freeing its queue pair, CQs and regions failed: {e}");
    }
}
