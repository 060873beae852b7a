//! # remora-cli: the `remora` command as a library
//!
//! The binary (`src/main.rs`) only parses arguments and prints; every scenario lives here so
//! tests can run it without a process:
//!
//! - [`configs`]: the twelve server configurations of seed 000 Table 1, explained.
//! - [`profiles`]: finding a latency profile by built-in name or file.
//! - [`demo`]: the README's main command: singleton log appends with RDMA WRITE + RDMA
//!   FLUSH on the deterministic simulator, their latency, and a power-failure check.
//! - [`bench`](mod@bench): how fast the simulator itself runs (wall clock).
//! - [`rpcbench`]: seed 003's evaluation of the RPC designs (`remora bench rpc`).
//! - [`paper`]: seed 000: the taxonomy tables, the planner, RemoteLog (Figure 2) and the
//!   crash checker.
//! - [`real`]: the soft RNIC: `serve`, RemoteLog against a server, the real SIGKILL loop.
//! - [`rpcreal`]: seed 003's durable RPCs on the soft RNIC: `rpc-serve`, `rpc`, and their
//!   real SIGKILL loop (`rpc-crashcheck`).
//! - [`killloop`]: what both real SIGKILL loops share: server processes, timed kills,
//!   scratch directories, target selection.

pub mod bench;
pub mod configs;
pub mod demo;
pub mod killloop;
pub mod paper;
pub mod profiles;
pub mod real;
pub mod rpcbench;
pub mod rpcreal;
pub mod softbench;
pub mod takeover;

/// Formats nanoseconds as microseconds with three decimals (`2345` → `2.345`).
pub fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000, ns % 1_000)
}

#[cfg(test)]
mod tests {
    #[test]
    fn micros_keeps_nanosecond_digits() {
        assert_eq!(super::micros(2_345), "2.345");
        assert_eq!(super::micros(7), "0.007");
        assert_eq!(super::micros(12_000_001), "12000.001");
    }
}
