//! # RemoteLog
//!
//! The log-replication benchmark of seed 000 §4.1 on the remora library: a client appends
//! records to a contiguous log in a server's PM, with singleton updates (checksummed
//! records; the server finds the tail by the first record whose checksum fails) or
//! compound updates (the record, then the tail pointer). The server garbage-collects
//! applied records in the background.
//!
//! - [`log`]: layout, appends, garbage collection, recovery.
//! - [`eval`]: the 72-scenario evaluation (Figure 2).
//! - [`check`]: the crash checker, with negative controls.

pub mod check;
pub mod eval;
pub mod log;
pub mod report;

pub use log::{LogClient, LogShape, Recovered};
