//! The durable RPCs on the soft RNIC (`remora_soft`): [`DurableServer`] and
//! [`DurableClient`], unchanged, between real processes over TCP, with the redo log and the
//! object store in a memory-mapped PM pool file, so a `kill -9` of the server loses exactly
//! what the model says a power failure loses and the restarted server recovers from the
//! log (seed 003 §4.2: "the RPC can be re-executed with the operation log, without
//! re-sending the data from the client").
//!
//! **Connecting.** The client follows the soft connection manager's `Hello` with a
//! [`DurableClaim`] (0 for a new client, or the node id it has and the connection's key
//! when it reconnects); the server answers `Assign` (the claimed or a free connection's
//! node id, and the server's configuration) and one [`DurableHello`] frame: the options both
//! sides must agree on (design, Flush form, connection id, log capacity, object store
//! shape) and the [`ConnInfo`] of its log (address, remote key, processed watermark before
//! and after recovery), and the connection's key. A new client gets a new key, drawn from
//! the OS and made durable in the log's PM ([`crate::redolog::OWNER_KEY_OFFSET`]) once the
//! client is `Ready`, before it is `Accepted`; a claim of a connection with another key is
//! refused (`RefuseCode::NotOwner`), when it arrives and again when it gets the connection
//! (it may have waited while the log went to a new client). Should a new client's
//! handshake break, the log goes back to its previous client as it was: its key (in PM
//! too), the replies kept for it and its lease. The client adopts those
//! options, creates its queue pair, and the
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
//! next client of that connection (a reconnecting one claims it with its key; a new one
//! takes the first free connection whose log holds no replies waiting for its client, or
//! whose client has stayed away for [`RealServeOptions::lease`]) gets a new
//! [`DurableServer`] over the same PM (recovering anything the old one logged but did not
//! process).
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

// Items the module documentation above links to.
#[cfg(doc)]
use crate::durable::{ConnInfo, DurableClient, DurableServer, StoreLock};

/// How long a connection may take for its handshake (the server drops it then; a client
/// gives up): the soft RNIC connection manager's.
use remora_soft::cm::HANDSHAKE_TIMEOUT;

mod client;
mod hello;
mod pinned;
mod server;

pub use client::*;
pub use hello::*;
pub use pinned::pm_bytes_needed;
pub use server::*;
