//! # remora: correct, fast remote persistence
//!
//! The library an application calls to make updates durable in a remote server's
//! persistent memory. It knows every method of seed 000's taxonomy ([`taxonomy`]), learns
//! the server's configuration in the connection handshake ([`wire::Hello`]), runs the
//! correct method for each update ([`Client::persist`], [`Client::persist_ordered`]), and
//! provides the server's side of two-sided methods and recovery ([`Responder`]). Frames
//! and the records built on them carry a CRC-32C ([`checksum`]).
//! [`planner`] predicts each correct method's latency on the simulator and picks the
//! fastest. Application code is generic over [`remora_verbs::Verbs`], so it runs on any
//! backend.

pub mod checksum;
pub mod client;
pub mod harness;
pub mod planner;
pub mod responder;
pub mod taxonomy;
pub mod wire;

pub use client::{Client, FlushTicket, PersistError};
pub use responder::{CpuCosts, Footprint, RecoveryReport, Responder, ServerSetup};
pub use taxonomy::{Method, Primitive, Scenario, Shape, Step, Taxonomy, Update};
