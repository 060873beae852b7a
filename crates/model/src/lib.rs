//! # remora-model: the one hardware model
//!
//! Everything here is deterministic, sans-IO state: no clock (every call takes `now`), no
//! threads, no sockets, no global randomness (a seeded [`prng::Prng`] is passed in). The
//! simulator (`remora-sim`) and the real-time backends drive the same code.
//!
//! - [`config`]: the server configurations of seed 000 Table 1, transports, NIC capabilities.
//! - [`profile`]: latency profiles (TOML data, cited value by value).
//! - [`mem`]: sparse memory images.
//! - [`hierarchy`]: the server data path (RNIC buffer → IIO → LLC/DDIO or IMC → WPQ → PM)
//!   with visibility kept apart from persistence, and power failure.
//! - [`verbs`]: verbs-shaped types (work requests, completions, access flags).
//! - [`wire`]: the messages RNICs exchange.
//! - [`rnic`]: one node's RNIC: queue pairs, completion queues, memory regions, the RDMA
//!   ordering rules and completion semantics, as a `handle_packet`/`poll_transmit` machine.

pub mod bytes;
pub mod config;
pub mod hierarchy;
pub mod mem;
pub mod prng;
pub mod profile;
pub mod rnic;
pub mod time;
pub mod verbs;
pub mod wire;

pub use config::{NicCaps, PersistenceDomain, RqwrbPlacement, ServerConfig, Transport};
pub use hierarchy::{FlushPlacement, MemoryHierarchy, Space};
pub use profile::LatencyProfile;
pub use time::{Duration, Instant};
