//! # remora-rpc: durable RPCs on RDMA Flush primitives (seed 003)
//!
//! Seed `003_d77a249f8cd673dc` proposes three RDMA Flush primitives (SFlush, WFlush,
//! RFlush, §4.1) and durable RPCs built on them (§4.2): the request is persisted in a
//! per-connection redo log in the server's PM before the server processes it, so the
//! sender may go on as soon as the request is durable and a crashed server re-executes
//! logged requests without the client re-sending. It compares them with eight earlier
//! RPC designs (§3, Figure 2) on a key-value service (§5).
//!
//! Every design here is ordinary async code generic over [`remora_verbs::Verbs`], so it
//! runs on the simulator and on the real-time backend (the soft RNIC, [`real`]).
//!
//! | module | what |
//! |---|---|
//! | [`account`] | server CPU work per request, for the latency breakdown of §5.6 (Figure 20) |
//! | [`design`] | the twelve designs as data: name, primitive family, transport, flush form |
//! | [`api`] | what every design's client and server offer, so one benchmark drives all |
//! | [`proto`] | the request and reply frames (typed `emit`/`parse`, CRC-32C) |
//! | [`kv`] | the key-value service: objects in the server's PM, idempotent re-execution |
//! | [`flush`] | the WFlush/SFlush/RFlush primitives, native and emulated (§4.1), DDIO's CPU flush (§4.4.2) |
//! | [`redolog`] | the per-connection redo log in PM: header, operator word, entries (§4.2) |
//! | [`durable`] | the four durable RPCs: client, server, recovery, simulator harness (§4.2–4.3) |
//! | [`check`] | the crash checker for the durable RPCs, with negative controls |
//! | [`baselines`] | the eight earlier designs of §3 Figure 2 (DaRPC, FaRM, HERD, FaSST, L5, RFP, ScaleRPC, Octopus): clients, servers |
//! | [`bench`](mod@bench) | the §5 evaluation: a design-agnostic driver, the experiment sets, recovery model, report |
//! | [`harness`] | a server and its senders on the simulator for any design ([`harness::Deployment`]) |
//! | [`workload`] | §5.1 micro-benchmark and YCSB A–F operation streams (seeded, YCSB's Zipfian) |
//! | [`workers`] | the server's worker threads (a pool every design's server shares the same way) |
//! | [`real`] | the durable RPCs on the soft RNIC: a server over a PM pool file, the handshake, a reconnecting client |

pub mod account;
pub mod api;
pub mod baselines;
pub mod bench;
pub mod check;
pub mod design;
pub mod durable;
pub mod flush;
pub mod harness;
pub mod kv;
pub mod proto;
pub mod real;
pub mod redolog;
pub mod workers;
pub mod workload;

pub use api::{Completion, Op, Reply, ReplyStatus, RpcClient, RpcError, ServerCosts};
pub use design::{Design, Family, FlushForm};
