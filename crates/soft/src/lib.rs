//! # remora-soft: the soft RNIC
//!
//! The same RNIC and memory-hierarchy model as the simulator, run in real time between
//! processes: packets travel over TCP, and persistent memory is a memory-mapped pool file
//! into which the model writes each line when it enters the server's persistence domain.
//! So a `kill -9` of the server loses exactly what a power failure would.
//!
//! - [`pool`]: the PM pool file.
//! - [`cm`]: the connection manager's frames.
//! - [`runtime`]: [`runtime::RtNode`], a node in real time over TCP; implements `Verbs`.
//! - [`pinned`]: [`pinned::PinnedNode`], a node whose allocations come from a reserved range
//!   (one connection's slot of the pool).
//! - [`server`]: `remora serve`: the pool, the RNIC, and the library's responder per client.
//! - [`client`]: connecting a library client to a server.

pub mod client;
pub mod cm;
pub mod dax;
pub mod pinned;
pub mod pool;
pub mod runtime;
pub mod server;
