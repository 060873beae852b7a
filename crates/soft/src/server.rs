//! `remora serve`: a server process that owns a PM pool file and runs, for each client
//! connection, the library's responder (receive, copy, flush, acknowledge) in a slot of
//! the pool, recovered (the messages a crash or the slot's previous connection left in a
//! PM receive ring are applied) before the client may send.
//!
//! A slot is its client's: a new client is given a key, kept in the slot's PM, and a
//! client that comes back with its key (after its connection or the server went down) is
//! given its own slot again, its region as it left it. A slot stays reserved for its
//! client for a lease after the client's connection ends and after the server starts;
//! after that a new client may take it (when no slot without a client is free), cleared:
//! no client sees another's region or receive ring.

use crate::cm::{Cm, RefuseCode, CLEARING_KEY, CM_FRAME, HANDSHAKE_TIMEOUT};
use crate::pinned::PinnedNode;
use crate::pool::{Durability, Pool, PoolBytes, PoolError};
use crate::runtime::RtNode;
use remora::{CpuCosts, Footprint, Responder, ServerSetup};
use remora_exec::net::{TcpListener, TcpStream};
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{MrInfo, Objects, Rnic};
use remora_model::verbs::{NodeId, QpNum};
use remora_model::{RqwrbPlacement, ServerConfig, Space};
use remora_verbs::Verbs;
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;

mod accept;
pub use accept::{accept_until_shutdown, counted_as, Admission, Admitter, Handshaking};

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
    /// How long a slot stays reserved for its client after the client's connection ends
    /// (and, for every slot that has a client, after start-up): meanwhile a new client is
    /// given another slot, or refused if none is free.
    pub lease: std::time::Duration,
    /// How many connections may be in their handshake at once, in all and from one
    /// address; one more is refused as busy.
    pub admission: Admission,
    /// A negative control, for the crash checker only.
    pub fault: Option<ServeFault>,
    /// An application's own server work in each client's region (RemoteLog's garbage
    /// collector), if any.
    pub slot_task: Option<SlotTask>,
}

/// The future a [`SlotTask`] makes for one connection.
pub type SlotTaskFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

/// What makes a [`SlotTask`]'s future: from the slot's node, the client's region, and a
/// flag that turns false once the client's connection has ended.
pub type SlotTaskFn = dyn Fn(PinnedNode, MrInfo, Rc<Cell<bool>>) -> SlotTaskFuture + Send + Sync;

/// Server work an application runs on the server's CPU in each client's region while the
/// client is connected, beside the responder: RemoteLog's garbage collector (seed 000
/// §4.1), which reads the log and persists its head so the client can reuse the ring.
/// `serve` itself knows no application; this is how one brings its own. Its loads, stores
/// and persists go through the model (`PinnedNode`'s CPU verbs), so a SIGKILL loses of
/// them what a power failure would.
#[derive(Clone)]
pub struct SlotTask {
    /// What the task is, for logs.
    pub name: String,
    /// Makes one connection's task. Its future must end soon after the flag turns false:
    /// the slot goes to no other connection before it has.
    pub make: std::sync::Arc<SlotTaskFn>,
}

impl std::fmt::Debug for SlotTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotTask")
            .field("name", &self.name)
            .finish()
    }
}

/// A deliberately wrong server: the crash checker's negative control for client identity
/// (`crashcheck --real --clients N` must catch it).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ServeFault {
    /// Slots go by connection order (the lowest free one), whatever key a client claims:
    /// what `serve` did before clients had keys. After a crash with several clients, a
    /// client may be given another's slot.
    SlotsByConnectionOrder,
    /// A slot goes to a new client as its last client left it: the new client reads the
    /// old one's region.
    NoClear,
    /// A slot is cleared for a new client with its old key still in the keys' table (no
    /// [`CLEARING_KEY`] meanwhile): a crash in the middle gives the old client back a
    /// region cleared in part or whole, its acknowledged data gone.
    ClearInPlace,
    /// A slot is cleared for a new client except for its receive ring: messages its last
    /// client left unapplied there (a SIGKILL between a SEND's arrival and its
    /// application) are applied into the new client's region when its connection
    /// recovers the ring.
    KeepRing,
    /// A slot's clear for a new client stops as soon as that client is found gone (its
    /// connection closed), and the slot is left nobody's (key 0), as a clear finished for
    /// a client that left is: the next new client gets the slot with no clear, and reads
    /// what the clear did not reach of the old client's region.
    AbandonClear,
}

impl ServeFault {
    /// Its name, as `serve --fault` takes it.
    pub fn name(self) -> &'static str {
        match self {
            ServeFault::SlotsByConnectionOrder => "slots-by-connection-order",
            ServeFault::NoClear => "no-clear",
            ServeFault::ClearInPlace => "clear-in-place",
            ServeFault::KeepRing => "keep-ring",
            ServeFault::AbandonClear => "abandon-clear",
        }
    }
}

impl std::str::FromStr for ServeFault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let all = [
            ServeFault::SlotsByConnectionOrder,
            ServeFault::NoClear,
            ServeFault::ClearInPlace,
            ServeFault::KeepRing,
            ServeFault::AbandonClear,
        ];
        all.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|f| f.name()).collect();
            format!(
                "unknown serve fault {s:?} (those there are: {})",
                names.join(", ")
            )
        })
    }
}

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The pool file could not be used.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The pool cannot hold one client's region and receive ring.
    #[error("pool {}: it holds {have} bytes of PM past its header; the server needs {need} (a larger --pool-bytes, or less to hold: serve's --region-bytes, rpc-serve's --connections, --capacity, --objects or --max-value); the pool is left as it was", path.display())]
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
    /// The admission bounds admit nobody.
    #[error("{0}; the pool was not touched")]
    Admission(String),
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
    /// Takes the counts from `node` now (for servers of other protocols, as their
    /// connections end).
    pub fn update(&self, node: &RtNode) {
        self.set(node.with(|r, _| r.live_objects()));
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
    let admitter = Admitter::new(opts.admission.validate().map_err(ServeError::Admission)?);
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
        // The keys' table and the slots start where the pool does (the node allocates
        // nothing before them): one page of keys and one slot at least.
        KEY_PAGE + pm_stride(&footprint),
    )?;
    let slots = Rc::new(Slots::new(
        &node,
        footprint,
        opts.setup.pm_ring_offset(),
        pm_bytes,
        opts.lease,
        opts.fault,
    ));
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
    accept_until_shutdown(listener, admitter, move |stream, place| {
        let id = free_peer_id(&next_id, |id| node.attached(id));
        let (node, setup, config, slots) = (node.clone(), opts.setup, opts.config, slots.clone());
        let (objects, task) = (objects.clone(), opts.slot_task.clone());
        async move {
            // A failed or malformed handshake only ends this connection.
            let conn = Conn {
                node: node.clone(),
                id,
                config,
                setup,
                costs,
                task,
            };
            let _ = handle(stream, place, conn, slots).await;
            objects.set(node.with(|r, _| r.live_objects()));
        }
    })
    .await;
    Ok(())
}

/// The next node id for a new connection, counting up from `next` and skipping 0 (the
/// server's own) and any id a live connection still has: a server that runs long enough
/// to count past `u32::MAX` goes round again instead of wrapping onto a live peer's id,
/// whose packets would then be routed to the newcomer.
fn free_peer_id(next: &Cell<u32>, in_use: impl Fn(u32) -> bool) -> u32 {
    loop {
        let id = next.get();
        next.set(id.wrapping_add(1));
        if id != 0 && !in_use(id) {
            return id;
        }
    }
}

/// The pool's connection slots, one responder's [`Footprint`] and its client's key each,
/// reserved at start-up after what the node allocated before. A server serves any number of
/// clients in turn, as many at once as there are slots; a client that comes back with its
/// key gets its own slot (its region and PM receive ring where a crash, or its last
/// connection, left them).
struct Slots {
    node: RtNode,
    /// Where the slots' keys are in PM: 8 bytes a slot, in slot order, before the slots
    /// (one table, so that start-up reads a page per 512 slots, not one per slot).
    keys_at: u64,
    pm_base: u64,
    pm_stride: u64,
    /// Bytes at the start of a slot's PM that are its client's region (a PM receive ring
    /// follows them).
    region_pm: u64,
    dram_base: u64,
    dram_stride: u64,
    state: RefCell<Vec<SlotState>>,
    /// How long a slot stays its client's after the client left (see [`ServeOptions`]).
    lease: std::time::Duration,
    fault: Option<ServeFault>,
    /// Woken when a slot is given back.
    freed: remora_exec::sync::Notify,
}

/// A slot's use, in memory (its key is also in the keys' table in PM).
#[derive(Copy, Clone, Debug)]
struct SlotState {
    busy: bool,
    /// The slot's client's key, as in its PM (0: nobody's and clean: the slot has had no
    /// client, or was cleared for a new client that left before it learned its key).
    key: u64,
    /// Until when only its client may take the slot.
    reserved_until: remora_exec::time::Instant,
}

/// How long a connection waits for a slot before it is refused: a client that reconnects
/// as soon as its last connection closed races the server's noticing the close.
pub const SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long clearing a slot for a new client waits, each time it meets writes still in
/// flight to the slot, for them to land.
const CLEAR_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// How often it looks again, at least.
const CLEAR_POLL: std::time::Duration = std::time::Duration::from_micros(100);
/// Bytes a slot's clear zeroes (and syncs) before it lets other connections run.
const CLEAR_CHUNK: u64 = crate::cm::CLEAR_STEP;

/// The keys' table is allocated in whole pages of this size (out of every slot, so out of
/// any client's reach: no client's RDMA can write it).
const KEY_PAGE: u64 = 4096;

/// Bytes of the keys' table for `count` slots.
fn keys_bytes(count: u64) -> u64 {
    (count * 8).next_multiple_of(KEY_PAGE)
}

/// Why a connection gets no slot: the refusal code and the server's log line.
struct NoSlot {
    code: RefuseCode,
    why: String,
}

impl Slots {
    fn new(
        node: &RtNode,
        footprint: Footprint,
        ring_offset: u64,
        pm_bytes: u64,
        lease: std::time::Duration,
        fault: Option<ServeFault>,
    ) -> Slots {
        let pm_stride = pm_stride(&footprint);
        let dram_stride = footprint.dram.next_multiple_of(4096);
        // A zero-length allocation reads the cursor: where the keys' table starts, the slots
        // after it.
        let keys_at = node.alloc(Space::Pm, 0, KEY_PAGE);
        let have = (remora_model::rnic::PM_BASE + pm_bytes).saturating_sub(keys_at);
        let fits = |n: u64| keys_bytes(n) + n * pm_stride <= have;
        let mut count = have / (pm_stride + 8);
        while fits(count + 1) {
            count += 1;
        }
        while count > 0 && !fits(count) {
            count -= 1;
        }
        // `open_node` refused a pool without room for a page of keys and one slot.
        assert!(count > 0, "the pool holds no connection slot");
        node.alloc(Space::Pm, keys_bytes(count), KEY_PAGE);
        let pm_base = node.alloc(Space::Pm, count * pm_stride, 4096);
        let dram_base = node.alloc(Space::Dram, count * dram_stride, 4096);
        // Every slot that has a client is kept for it for a lease from start-up: after a
        // crash its client comes back for it.
        let now = wall_now();
        let until = now.saturating_add(lease);
        let mut keys = vec![0u8; count as usize * 8];
        node.load(Space::Pm, keys_at, &mut keys);
        let state = keys
            .chunks_exact(8)
            .map(|b| {
                let key = u64::from_le_bytes(b.try_into().expect("8 bytes"));
                // A slot being cleared when the server stopped is nobody's, and is cleared
                // again before a new client gets it.
                let nobodys = key == 0 || key == CLEARING_KEY;
                SlotState {
                    busy: false,
                    key,
                    reserved_until: if nobodys { now } else { until },
                }
            })
            .collect();
        Slots {
            node: node.clone(),
            keys_at,
            pm_base,
            pm_stride,
            region_pm: ring_offset.min(pm_stride),
            dram_base,
            dram_stride,
            state: RefCell::new(state),
            lease,
            fault,
            freed: remora_exec::sync::Notify::new(),
        }
    }

    fn count(&self) -> usize {
        self.state.borrow().len()
    }

    /// Where slot `i`'s key is in PM (an aligned 8-byte word: a crash keeps all of it or
    /// none).
    fn key_addr(&self, i: usize) -> u64 {
        self.keys_at + i as u64 * 8
    }

    /// The slot a client with `key` (0: a new client) may take now: its own; or, for a new
    /// client, a free slot that is nobody's (key 0: clean), else the free slot whose lease
    /// ran out first. `Err` if no slot has `key`.
    fn pick(&self, key: u64) -> Result<Option<usize>, ()> {
        let state = self.state.borrow();
        if self.fault == Some(ServeFault::SlotsByConnectionOrder) {
            return Ok(state.iter().position(|s| !s.busy));
        }
        if key == CLEARING_KEY {
            return Err(());
        }
        if key != 0 {
            let i = state.iter().position(|s| s.key == key).ok_or(())?;
            return Ok((!state[i].busy).then_some(i));
        }
        let now = wall_now();
        let unused = state.iter().position(|s| !s.busy && s.key == 0);
        Ok(unused.or_else(|| {
            (0..state.len())
                .filter(|&i| !state[i].busy && state[i].reserved_until <= now)
                .min_by_key(|&i| state[i].reserved_until)
        }))
    }

    /// When the next lease of a free slot runs out, if one is running.
    fn next_expiry(&self) -> Option<remora_exec::time::Instant> {
        let now = wall_now();
        self.state
            .borrow()
            .iter()
            .filter(|s| !s.busy && s.key != 0 && s.reserved_until > now)
            .map(|s| s.reserved_until)
            .min()
    }

    /// The slot a client with `key` (0: a new client) is given, now busy until the returned
    /// guard is dropped; waits up to `wait` for one to be given back (or for a lease to
    /// run out).
    async fn take_within(
        self: &Rc<Self>,
        key: u64,
        wait: std::time::Duration,
    ) -> Result<Slot, NoSlot> {
        let not_owner = || NoSlot {
            code: RefuseCode::NotOwner,
            why: "no slot of the pool has the key it claimed (its slot went to another \
                  client after its lease ran out, or the pool is not the one it used)"
                .into(),
        };
        let waited = remora_exec::time::timeout(wait, async {
            loop {
                // Begun before the check, so a slot freed in between still wakes us.
                let freed = self.freed.notified();
                if let Some(i) = self.pick(key)? {
                    self.state.borrow_mut()[i].busy = true;
                    return Ok(Slot {
                        slots: self.clone(),
                        i,
                        leased: false,
                    });
                }
                match self.next_expiry().filter(|_| key == 0) {
                    Some(t) => {
                        remora_exec::first(freed, remora_exec::time::sleep_until(t)).await;
                    }
                    None => freed.await,
                }
            }
        })
        .await;
        match waited {
            Ok(Ok(slot)) => Ok(slot),
            Ok(Err(())) => Err(not_owner()),
            Err(_) if key != 0 => Err(NoSlot {
                code: RefuseCode::Resources,
                why: format!(
                    "its slot stayed in use for {wait:?} (its last connection still open)"
                ),
            }),
            Err(_) => {
                let held = self.state.borrow().iter().filter(|s| !s.busy).count();
                Err(NoSlot {
                    code: RefuseCode::Resources,
                    why: format!(
                        "of the pool's {} connection slots ({} bytes of PM each), {} stayed \
                         in use and {held} kept for their clients (a lease of {:?} after \
                         they leave or the server starts) for {wait:?}",
                        self.count(),
                        self.pm_stride,
                        self.count() - held,
                        self.lease,
                    ),
                })
            }
        }
    }
}

/// The wall clock, for leases of connection slots (`serve`'s, and `rpc-serve`'s).
#[allow(clippy::disallowed_methods)] // a real-time server: leases are wall-clock time
pub fn wall_now() -> remora_exec::time::Instant {
    remora_exec::time::now()
}

/// A connection's slot; free again when dropped.
struct Slot {
    slots: Rc<Slots>,
    i: usize,
    /// Whether its client has it (was told its key): then the slot is kept for it for the
    /// lease once the connection ends.
    leased: bool,
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

    /// The slot's client's key: `claimed`, or for a new client (0) a fresh one, durable in
    /// the slot's PM before this returns (so that after a server crash too only that
    /// client gets the slot back). A slot that had another client is cleared first, the
    /// client `told` how far the clear got as it goes. `None`: the client left (during the
    /// clear, or before its key was drawn into the slot) and never learns a key; the slot
    /// is left nobody's (key 0) and clean, so the next new client is not made to wait for
    /// the same clear again.
    async fn own(&mut self, claimed: u64, told: &mut Told<'_>) -> Result<Option<u64>, String> {
        if claimed != 0 {
            return Ok(Some(claimed));
        }
        let key = crate::cm::fresh_key()
            .map_err(|e| format!("cannot draw a client key from /dev/urandom: {e}"))?;
        let had = self.slots.state.borrow()[self.i].key != 0;
        if had {
            match self.slots.fault {
                Some(ServeFault::NoClear) => {}
                Some(ServeFault::ClearInPlace) => self.zero(told).await?,
                Some(ServeFault::KeepRing) => {
                    self.set_key(CLEARING_KEY).await;
                    self.zero_region_only(told).await?;
                }
                _ => self.clear(told).await?,
            }
        }
        // Gone during the clear (a report could not be sent), or since (its connection is
        // closed): it never learns a key.
        if told.gone || told.peer_left() {
            if had {
                self.set_key(0).await;
            }
            return Ok(None);
        }
        self.set_key(key).await;
        Ok(Some(key))
    }

    /// Writes `key` into the keys' table, durably, and into the slot's state.
    async fn set_key(&mut self, key: u64) {
        let (node, at) = (&self.slots.node, self.slots.key_addr(self.i));
        node.store(Space::Pm, at, &key.to_le_bytes());
        node.persist_local(at, 8).await;
        self.slots.state.borrow_mut()[self.i].key = key;
        // A returning client waiting for this slot under its old key learns now that the
        // slot is no longer its own (refused with NotOwner, not after the wait).
        self.slots.freed.notify_waiters();
    }

    /// Zeroes the slot's PM and DRAM (its region and receive ring, so neither the old
    /// client's data nor its unapplied messages reach the new one), with the slot marked
    /// as being cleared in the keys' table meanwhile: a crash in the middle leaves the slot
    /// to be cleared again, never a half-cleared region to its old client. Waits for
    /// writes the old connection left in flight (the model's stages take microseconds;
    /// an LLC residency of a slow profile, milliseconds), each wait up to [`CLEAR_WAIT`].
    async fn clear(&mut self, told: &mut Told<'_>) -> Result<(), String> {
        self.set_key(CLEARING_KEY).await;
        self.zero(told).await
    }

    /// The zeroing of [`clear`](Self::clear), durable on return. A [`CLEAR_CHUNK`] at a
    /// time, each synced, with the other connections served in between: the server has
    /// one thread, and a region may be gigabytes.
    async fn zero(&mut self, told: &mut Told<'_>) -> Result<(), String> {
        let (s, i) = (&self.slots, self.i as u64);
        let ranges = [
            (Space::Pm, s.pm_base + i * s.pm_stride, s.pm_stride),
            (Space::Dram, s.dram_base + i * s.dram_stride, s.dram_stride),
        ];
        self.zero_ranges(ranges, told).await
    }

    /// The [`ServeFault::KeepRing`] control's clear: the region alone.
    async fn zero_region_only(&mut self, told: &mut Told<'_>) -> Result<(), String> {
        let (s, i) = (&self.slots, self.i as u64);
        let region = [(Space::Pm, s.pm_base + i * s.pm_stride, s.region_pm)];
        self.zero_ranges(region, told).await
    }

    /// Zeroes `ranges`, as [`zero`](Self::zero) says, and tells the waiting client how far
    /// it got as it goes ([`Told::clearing`]).
    async fn zero_ranges<const N: usize>(
        &mut self,
        ranges: [(Space, u64, u64); N],
        told: &mut Told<'_>,
    ) -> Result<(), String> {
        let s = self.slots.clone();
        let total = ranges.iter().map(|r| r.2).sum();
        let mut done = 0;
        // The wait for writes in flight is bounded from when it begins, not from the
        // clear's start: a clear of gigabytes takes longer than the bound itself.
        let mut give_up = None;
        for (space, start, len) in ranges {
            let end = start + len;
            let mut at = start;
            while at < end {
                let n = CLEAR_CHUNK.min(end - at);
                let cleared = s.node.with(|r, now| {
                    let done = r.hierarchy().zero_idle(now, space, at, n);
                    // Only a chunk written needs its sync.
                    done.map(|()| crate::runtime::sync_or_abort(r))
                        .map_err(|t| (t, now))
                });
                match cleared {
                    Ok(()) => {
                        at += n;
                        done += n;
                        give_up = None;
                        // The write is the yield too, when it waits for the socket; else:
                        // to the sockets, not only to the other tasks (the connections
                        // waiting for input are served only once the executor looks at
                        // them; `yield_local` let the whole clear pass first).
                        told.clearing(done, total).await;
                        if s.fault == Some(ServeFault::AbandonClear)
                            && (told.gone || told.peer_left())
                        {
                            return Ok(());
                        }
                        remora_exec::yield_now().await;
                    }
                    Err((t, now)) => {
                        let limit =
                            *give_up.get_or_insert_with(|| wall_now().saturating_add(CLEAR_WAIT));
                        if wall_now() >= limit {
                            return Err(format!(
                                "its slot (the lease of its last client ran out) still had \
                                 writes in flight to clear after {CLEAR_WAIT:?}"
                            ));
                        }
                        let wait = std::time::Duration::from_nanos((t - now).as_nanos());
                        remora_exec::time::sleep(wait.clamp(CLEAR_POLL, CLEAR_POLL * 100)).await;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The new client a slot is cleared for, told the clear's progress (`Cm::Clearing`):
/// each frame restarts its wait for the handshake's next, so a clear of any size outlasts
/// no client's patience while it makes progress.
struct Told<'a> {
    stream: &'a mut TcpStream,
    /// A frame could not be sent: the client left (its connection is closed or reset).
    gone: bool,
    /// What the last frame said was done.
    reported: u64,
}

impl Told<'_> {
    /// Whether the client closed its connection. It sends nothing between its `Ready` and
    /// the server's `Accepted`, so an end of stream is a client gone; a byte there (a
    /// protocol error, which its connection ends on later) is not, and neither is an
    /// error: without `MSG_DONTWAIT` the look blocked while the executor had the socket
    /// in blocking mode, until a signal interrupted it, which passed for a client gone.
    fn peer_left(&self) -> bool {
        let mut b = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        let sock = socket2::SockRef::from(&*self.stream);
        matches!(
            sock.recv_with_flags(&mut b, libc::MSG_PEEK | libc::MSG_DONTWAIT),
            Ok(0)
        )
    }

    /// Tells the client `done` of `total` bytes are cleared, if that is at least
    /// [`CLEAR_STEP`](crate::cm::CLEAR_STEP) more than it was last told, or the end: the
    /// client refuses smaller steps (a range's last chunk may be short, and the clear's
    /// ranges follow one another).
    async fn clearing(&mut self, done: u64, total: u64) {
        if done < total && done - self.reported < crate::cm::CLEAR_STEP {
            return;
        }
        self.reported = done;
        if !self.gone {
            // A client that stops reading would stall the clear, and hold its slot, once
            // its socket's buffers fill: it gets as long as any handshake step.
            self.gone = send_cm(self.stream, Cm::Clearing { done, total })
                .await
                .is_err();
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.slots.state.borrow_mut();
        let s = &mut state[self.i];
        s.busy = false;
        if self.leased {
            s.reserved_until = wall_now().saturating_add(self.slots.lease);
        }
        drop(state);
        self.slots.freed.notify_waiters();
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
        "serve: a table of client keys, then a slot per client of a {}-byte region and a {} x {}-byte receive ring {ring} ({} bytes of PM)",
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

/// The `--pool-bytes` of a pool with exactly `slots` connection slots for clients of
/// `setup` under `rqwrb` (the keys' table and the slots: a byte less holds one slot
/// fewer). A pool below [`crate::pool::MIN_POOL_BYTES`] is refused all the same.
pub fn pool_bytes_for(slots: u64, setup: &ServerSetup, rqwrb: RqwrbPlacement) -> u64 {
    keys_bytes(slots) + slots * pm_stride(&setup.footprint(rqwrb))
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

/// Server side of the connection manager, step 1: reads the client's `Hello` and gives
/// the key it claims (0: a new client). Anything else (another protocol or version) is
/// answered with `Refused { Version }` and gives `None`.
pub async fn cm_hello(stream: &mut TcpStream) -> std::io::Result<Option<u64>> {
    stream.set_nodelay(true)?;
    crate::cm::watch_peer(stream)?;
    if let Some(Cm::Hello { key }) = read_cm(stream).await? {
        return Ok(Some(key));
    }
    cm_refuse(stream, RefuseCode::Version).await?;
    Ok(None)
}

/// Refuses the connection with `code`. Like every handshake frame the server sends, it
/// gives the client [`HANDSHAKE_TIMEOUT`] to take it (`send_cm`).
pub async fn cm_refuse(stream: &mut TcpStream, code: RefuseCode) -> std::io::Result<()> {
    send_cm(stream, Cm::Refused { code }).await
}

/// Sends one handshake frame, failing with `TimedOut` if the client has not taken it
/// within [`HANDSHAKE_TIMEOUT`], as a client waits for the server's frames. A client that
/// stops reading fills its socket's buffers: a write without a bound would hold the
/// connection, and its handshake place, until TCP gives up on the peer (its user time-out,
/// [`crate::cm::DEAD_PEER_UNACKED`], where the kernel applies it to a closed window).
async fn send_cm(stream: &mut TcpStream, frame: Cm) -> std::io::Result<()> {
    match remora_exec::time::timeout(HANDSHAKE_TIMEOUT, stream.write_all(&frame.emit())).await {
        Ok(sent) => sent,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the client took no handshake frame for {HANDSHAKE_TIMEOUT:?}: it reads nothing"
            ),
        )),
    }
}

/// Step 2: assigns the client its node id (the server is node 0) and sends the server's
/// configuration.
pub async fn cm_assign(
    stream: &mut TcpStream,
    client: NodeId,
    config: ServerConfig,
) -> std::io::Result<()> {
    send_cm(
        stream,
        Cm::Assign {
            client,
            server: 0,
            config,
        },
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

/// Step 4: answers `Accepted` with the server's `qp` and the client's `key` (0 from a
/// server that does not identify clients by key). Then exchange application frames, if
/// any, and [`RtNode::attach`] the stream.
pub async fn cm_accepted(stream: &mut TcpStream, qp: QpNum, key: u64) -> std::io::Result<()> {
    send_cm(stream, Cm::Accepted { qp, key }).await
}

async fn read_cm(s: &mut TcpStream) -> std::io::Result<Option<Cm>> {
    let mut b = [0u8; CM_FRAME];
    s.read_exact(&mut b).await?;
    Ok(Cm::parse(&b).ok())
}

/// One connection's inputs besides its stream and the slots.
struct Conn {
    node: RtNode,
    id: u32,
    config: ServerConfig,
    setup: ServerSetup,
    costs: CpuCosts,
    task: Option<SlotTask>,
}

async fn handle(
    mut stream: TcpStream,
    place: Handshaking,
    conn: Conn,
    slots: Rc<Slots>,
) -> std::io::Result<()> {
    let Conn {
        node,
        id,
        config,
        setup,
        costs,
        task,
    } = conn;
    let handshake = async {
        let Some(key) = cm_hello(&mut stream).await? else {
            return Ok(None);
        };
        cm_assign(&mut stream, id, config).await?;
        match read_cm(&mut stream).await? {
            Some(Cm::Ready { qp }) => Ok::<_, std::io::Error>(Some((key, qp))),
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
    let Some((claimed, client_qp)) = step? else {
        return Ok(());
    };
    // Declared before the responder, so it is freed after the responder is gone.
    let mut slot = match slots.take_within(claimed, SLOT_WAIT).await {
        Ok(slot) => slot,
        Err(NoSlot { code, why }) => {
            let who = if claimed == 0 { "new" } else { "returning" };
            eprintln!("client {id} ({who}) refused: {why}");
            return refuse(&mut stream, id, code).await;
        }
    };
    // A returning client knows its key: however this connection ends (it may break before
    // `Accepted`), its end starts the slot's lease again, as any of its connections' does.
    slot.leased = claimed != 0;
    let mut told = Told {
        stream: &mut stream,
        gone: false,
        reported: 0,
    };
    let key = match slot.own(claimed, &mut told).await {
        Ok(Some(key)) => key,
        Ok(None) => {
            // Where the clear was when the client was found gone is not known (it is
            // noticed at a report, or once the clear is done); what was cleared is.
            let cleared = match told.reported {
                0 => String::new(),
                n => format!(", after {n} bytes of its slot were cleared for it"),
            };
            eprintln!(
                "client {id} (new) left before it was accepted{cleared}; the slot is left \
                 nobody's for the next"
            );
            return Ok(());
        }
        Err(why) => {
            eprintln!("client {id} refused: {why}");
            return refuse(&mut stream, id, RefuseCode::Resources).await;
        }
    };
    let Ok(mut responder) = Responder::create(slot.node(), setup, costs) else {
        return refuse(&mut stream, id, RefuseCode::Resources).await;
    };
    let qp = responder.qp();
    if node.connect(qp, id, client_qp).is_err() {
        close(responder, id);
        return refuse(&mut stream, id, RefuseCode::Resources).await;
    }
    // Recover the slot's receive ring (what a crash, or the slot's previous connection,
    // left there) before the client can send anything.
    responder.recover().await;
    if let Err(e) = cm_accepted(&mut stream, qp, key).await {
        close(responder, id);
        let slot_left = if claimed == 0 {
            // Not all of `Accepted` was sent: the new client never learned its key, and
            // nothing was written into the slot since it was cleared (or found unused).
            slot.set_key(0).await;
            "the slot is left nobody's for the next new client"
        } else {
            "the slot stays its own for its lease"
        };
        eprintln!("client {id}: `Accepted` was not sent ({e}); connection closed, {slot_left}");
        return Err(e);
    }
    // The client knows its key: the slot is kept for it once this connection ends.
    slot.leased = true;
    place.served();
    let (read, write) = stream.into_split();
    node.attach(id, read, write, move |n| {
        // The client went away mid-operation: fail its QP so the responder stops.
        let _ = n.with(|r, now| r.fail_qp(now, qp));
    });
    let _ = node.now();
    // The application's work in the region runs while the client is served, and has ended
    // before the slot can go to anyone else (a new client's region is cleared first).
    let running = Rc::new(Cell::new(true));
    // However this task ends (a panic, or dropped at shutdown), the task beside it is told
    // to stop before the slot is let go (declared after the slot: dropped before it).
    let _stop = StopOnDrop(running.clone());
    let beside = task.map(|t| {
        let run = (t.make)(slot.node(), responder.region(), running.clone());
        (t.name, remora_exec::spawn_local(run))
    });
    responder.serve().await;
    running.set(false);
    if let Some((name, b)) = beside {
        if b.await.is_err() {
            eprintln!("client {id}: the server's {name} in its region panicked");
        }
    }
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

/// Refuses client `id` with `code`; a refusal it does not take (it left, or reads nothing
/// for [`HANDSHAKE_TIMEOUT`]) is logged, and the connection closes all the same.
async fn refuse(stream: &mut TcpStream, id: u32, code: RefuseCode) -> std::io::Result<()> {
    let sent = cm_refuse(stream, code).await;
    if let Err(e) = &sent {
        eprintln!("client {id}: its refusal ({code:?}) was not sent ({e}); connection closed");
    }
    sent
}

/// Turns its flag false when dropped: a [`SlotTask`]'s "the connection is served".
struct StopOnDrop(Rc<Cell<bool>>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Frees a connection's RNIC objects (its slot's memory is freed when the slot drops).
fn close<V: remora_verbs::Verbs>(responder: Responder<V>, id: u32) {
    if let Err(e) = responder.close() {
        eprintln!("client {id}: freeing its queue pair, CQs and regions failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_ids_go_round_past_the_top_skipping_zero_and_ids_in_use() {
        let next = Cell::new(u32::MAX - 1);
        let live = [u32::MAX, 2];
        let in_use = |id| live.contains(&id);
        let ids: Vec<u32> = (0..3).map(|_| free_peer_id(&next, in_use)).collect();
        assert_eq!(ids, [u32::MAX - 1, 1, 3]);
    }
}
