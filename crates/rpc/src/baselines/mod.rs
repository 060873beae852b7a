//! The eight earlier RPC designs seed 003 compares with (§3, Figure 2; §5.1 "RPC Systems
//! for Comparison"), as their communication patterns on a key-value service.
//!
//! | design | request | server notices it by | reply | Figure 2 |
//! |---|---|---|---|---|
//! | DaRPC | SEND | receive completion | SEND | (a) |
//! | FaRM | RC WRITE into a ring | polling the ring | WRITE into the client's ring (polled) | (b) |
//! | HERD | UC WRITE into a ring | polling the ring | UD SEND | (c) |
//! | FaSST | UD SEND | receive completion | UD SEND | (d) |
//! | L5 | WRITE of the message, WRITE of a mailbox | polling the mailboxes | WRITE (polled) | (e) |
//! | RFP | WRITE into a ring | polling the ring | the client READs the server's response buffer until the reply is there | (f) |
//! | ScaleRPC | warm-up: WRITE of the data's address, the server READs the data; process: as FaRM | polling | WRITE (polled) | (g) |
//! | Octopus | WRITE_WITH_IMM | receive completion | WRITE_WITH_IMM | (h) |
//!
//! Every server is durable the way seed 003 §3 says these designs are: "the sender has to
//! wait for a completion event from the remote CPU", and the server replies only after
//! [`KvStore::apply`](crate::kv::KvStore::apply) copied the data to its object in PM and
//! ran `clwb`+`sfence`. Each request costs the server [`ServerCosts::processing`](crate::api::ServerCosts::processing)
//! (0 = light load, 100 µs = heavy load, §5.2) plus the CPU time to notice it, dispatch it
//! and copy the object.
//!
//! **Service types** ([`qp_types`]). HERD's requests are UC WRITEs and its replies UD
//! SENDs; FaSST's requests and replies are UD SENDs; every other baseline runs over RC.
//! A UD message is one datagram of at most [`UD_MTU`] = 4096 bytes, cell and frame
//! headers included: FaSST refuses a request or reply that does not fit one
//! ([`Design::max_object`]: a Put value of at most 4040 bytes, §5.1 "we only show
//! experimental results of FaSST for objects smaller than 4KB"). HERD's replies to reads of
//! larger objects are cut into datagrams of at most 4096 bytes (the immediate numbers
//! them, the client reassembles them in its reply slot): HERD itself targets small values,
//! and this keeps it in the large-object experiments at one datagram per 4 KB. Each
//! connection has its own server UD QP (FaSST shares one per thread among its peers; on
//! this fabric the number of QPs changes nothing). FaSST's connected pair, which
//! [`BaselineServer::accept`] returns for the caller to connect like every design's, is an
//! idle UC pair standing for the connection manager's session: no message uses it.
//!
//! **Drops.** UC and UD drop, silently, a message that finds no receive posted (or, for a
//! UC WRITE, a bad key); on the simulated fabric nothing else is lost. Servers post their
//! UD receives when the connection is accepted, before any client can send, and repost
//! each after handling its message; clients post theirs before sending and repost each as
//! it completes, and have one RPC outstanding, so in these designs no message is dropped.
//! If one were (a server that stopped serving), HERD and FaSST rely on the application's
//! retry, as the originals do: the client's call fails with [`crate::RpcError::Timeout`]
//! after [`Polling::timeout`] and the caller may retry.
//!
//! Messages travel in [`cell`]s (sequence number, length, status, then the request or
//! reply frames of [`crate::proto`], then the sequence number again). A cell may carry
//! several requests: that is the batching of §5.5 (Figure 19). A cell WRITTEN into a
//! polled ring (FaRM, HERD, RFP and ScaleRPC requests; FaRM, L5 and ScaleRPC replies) is
//! followed, on the same queue pair, by an 8-byte WRITE of its sequence number into the
//! slot's completion flag, and the poller waits for the flag, not for the cell's own
//! bytes: see [`cell`] for why the cell's trailer cannot be the signal.

pub mod cell;
pub mod client;
pub mod server;

pub use client::BaselineClient;
pub use server::{BaselineServer, ServerStats};

use crate::design::Design;
use crate::proto::{REPLY_HEADER, REQUEST_HEADER};
use remora_model::time::Duration;
use remora_verbs::QpType;

/// The UD MTU FaSST's messages must fit (seed 003 §5.1: "the maximum transmission unit of
/// the RDMA UD connection in FaSST is 4KB"): the model's [`remora_verbs::UD_MTU`].
pub const UD_MTU: u64 = remora_verbs::UD_MTU;

/// Bytes of one ring slot's completion flag (the sequence number of the cell last
/// written into the slot; see [`cell`]).
pub const FLAG_BYTES: u64 = 8;

/// The Q_Key of every baseline UD queue pair.
pub const QKEY: u32 = 0x0003_1111;

/// Whether the model has UC and UD queue pairs: it does, and HERD and FaSST use them.
pub const UC_UD_AVAILABLE: bool = true;

/// The transports `design` runs over here instead of the paper's, if any. `None` for every
/// design now that HERD and FaSST run over UC and UD ([`qp_types`]); kept so reports can
/// still print a substitution should one be needed again.
pub fn transport_substituted(design: Design) -> Option<&'static str> {
    if UC_UD_AVAILABLE {
        return None;
    }
    match design {
        Design::Herd => Some("UC WRITE request and UD SEND reply run over RC"),
        Design::Fasst => Some("UD SEND request and reply run over RC"),
        _ => None,
    }
}

/// The service types of a baseline's request and reply messages (seed 003 §3, Figure 2:
/// "FaRM, Herd, and FaSST use RC-based RDMA write, UC-based RDMA write, and UD-based RDMA
/// send"): HERD (UC, UD), FaSST (UD, UD), the others (RC, RC).
pub fn qp_types(design: Design) -> (QpType, QpType) {
    match design {
        Design::Herd => (QpType::Uc, QpType::Ud),
        Design::Fasst => (QpType::Ud, QpType::Ud),
        _ => (QpType::Rc, QpType::Rc),
    }
}

/// True when `design`'s replies are UD datagrams.
pub fn ud_replies(design: Design) -> bool {
    qp_types(design).1 == QpType::Ud
}

/// The immediate of reply datagram `index` of `total` (HERD cuts a reply over the UD MTU
/// into several).
pub fn chunk_imm(index: u32, total: u32) -> u32 {
    (index << 16) | total
}

/// (index, total) from a reply datagram's immediate.
pub fn chunk_of(imm: u32) -> (u32, u32) {
    (imm >> 16, imm & 0xffff)
}

/// The connected queue pair's service type: UC for HERD (its requests) and FaSST (an idle
/// session pair, see the module documentation), RC otherwise.
pub(crate) fn connected_qp_type(design: Design) -> QpType {
    match design {
        Design::Herd | Design::Fasst => QpType::Uc,
        _ => QpType::Rc,
    }
}

/// The eight baselines, in the order of seed 003's figures.
pub const BASELINES: [Design; 8] = [
    Design::L5,
    Design::Rfp,
    Design::Octopus,
    Design::Farm,
    Design::ScaleRpc,
    Design::Herd,
    Design::DaRpc,
    Design::Fasst,
];

/// How a request reaches the server (seed 003 Figure 2).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RequestPath {
    /// A SEND into a posted receive buffer (DaRPC, FaSST).
    Send,
    /// A WRITE into the server's ring, which the server polls (FaRM, HERD, RFP).
    Write,
    /// A WRITE of the message, then a WRITE of the sequence number to a mailbox the server
    /// polls (L5).
    WriteMailbox,
    /// Warm-up phases (a WRITE of the data's address, the server READs the data) between
    /// process phases as [`RequestPath::Write`] (ScaleRPC).
    WarmUpThenWrite,
    /// A WRITE_WITH_IMM into the ring; the immediate names the slot (Octopus).
    WriteImm,
}

/// How the reply reaches the client.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ReplyPath {
    /// A SEND into a posted receive buffer (DaRPC, HERD, FaSST).
    Send,
    /// A WRITE into the client's ring, which the client polls (FaRM, L5, ScaleRPC).
    Write,
    /// A WRITE_WITH_IMM into the client's ring (Octopus).
    WriteImm,
    /// The server stores the reply in its own response buffer; the client READs it until it
    /// is there (RFP).
    RemoteRead,
}

/// The request and reply paths of a baseline; `None` for the durable RPCs.
pub fn paths(design: Design) -> Option<(RequestPath, ReplyPath)> {
    Some(match design {
        Design::DaRpc | Design::Fasst => (RequestPath::Send, ReplyPath::Send),
        Design::Farm => (RequestPath::Write, ReplyPath::Write),
        Design::Herd => (RequestPath::Write, ReplyPath::Send),
        Design::L5 => (RequestPath::WriteMailbox, ReplyPath::Write),
        Design::Rfp => (RequestPath::Write, ReplyPath::RemoteRead),
        Design::ScaleRpc => (RequestPath::WarmUpThenWrite, ReplyPath::Write),
        Design::Octopus => (RequestPath::WriteImm, ReplyPath::WriteImm),
        _ => return None,
    })
}

/// How a CPU thread busy-polls memory in the simulator. A real poller re-reads the line
/// continuously; simulating every probe costs one event each, so after `fast_for` of
/// waiting the probes are spaced `slow_gap` apart. The extra delay this adds to noticing a
/// message is at most `slow_gap`, and only for waits longer than `fast_for` (heavy load:
/// ≤ 0.4% of the 100 µs processing time with the defaults).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Polling {
    /// Time between probes while the wait is short (the profile's `cpu.poll_ns`).
    pub interval: Duration,
    /// How long probes stay `interval` apart.
    pub fast_for: Duration,
    /// Time between probes after that.
    pub slow_gap: Duration,
    /// A client waiting this long for a reply gives up with [`crate::RpcError::Timeout`].
    pub timeout: Duration,
}

impl Polling {
    /// Probes every `poll_ns`, slowing to 4 × `poll_ns` after 5 µs; 1 s time-out.
    pub fn from_profile(p: &remora_model::LatencyProfile) -> Self {
        let interval = Duration::from_nanos(p.cpu.poll_ns.max(1));
        Polling {
            interval,
            fast_for: Duration::from_nanos(5_000),
            slow_gap: Duration::from_nanos(interval.as_nanos() * 4),
            timeout: Duration::from_nanos(1_000_000_000),
        }
    }

    /// The gap before the next probe after waiting `waited`.
    pub fn gap(&self, waited: Duration) -> Duration {
        if waited < self.fast_for {
            self.interval
        } else {
            self.slow_gap
        }
    }
}

/// CPU costs of a baseline server thread, from the latency profile.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ServerCpu {
    /// Noticing a completion by busy polling a CQ (`cpu.poll_ns`).
    pub poll: Duration,
    /// Parsing and dispatching one message (`cpu.msg_handle_ns`).
    pub handle: Duration,
    /// Copy bandwidth for moving an object between a message buffer and its slot
    /// (`cpu.memcpy_bytes_per_ns`).
    pub memcpy_bytes_per_ns: u64,
}

impl ServerCpu {
    /// The costs `p` gives.
    pub fn from_profile(p: &remora_model::LatencyProfile) -> Self {
        ServerCpu {
            poll: Duration::from_nanos(p.cpu.poll_ns),
            handle: Duration::from_nanos(p.cpu.msg_handle_ns),
            memcpy_bytes_per_ns: p.cpu.memcpy_bytes_per_ns.max(1),
        }
    }

    /// CPU time to copy `bytes`.
    pub fn copy(&self, bytes: u64) -> Duration {
        Duration::from_nanos(bytes.div_ceil(self.memcpy_bytes_per_ns))
    }
}

/// Sizes and knobs shared by a baseline's clients and server.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BaselineParams {
    /// Which baseline.
    pub design: Design,
    /// Largest object value.
    pub max_value: u64,
    /// Most requests one cell carries (§5.5 batching).
    pub max_batch: u32,
    /// Most objects one Scan returns.
    pub max_scan: u32,
    /// Cells per connection ring (each sender has one RPC outstanding, so a few suffice).
    pub ring_slots: u32,
    /// ScaleRPC: process phases per warm-up phase (§5.1: "we interleave one warm-up phase
    /// with 100 process phases").
    pub process_per_warmup: u32,
    /// RFP: bytes of the first READ of the response buffer; a longer reply takes a second
    /// READ for the rest.
    pub rfp_fetch_bytes: u32,
    /// Busy-polling model.
    pub polling: Polling,
}

impl BaselineParams {
    /// Defaults for `design` with objects up to `max_value` bytes.
    pub fn new(design: Design, max_value: u64, profile: &remora_model::LatencyProfile) -> Self {
        assert!(
            paths(design).is_some(),
            "{design} is not one of the eight baselines"
        );
        BaselineParams {
            design,
            max_value,
            max_batch: 1,
            max_scan: 1,
            ring_slots: 4,
            process_per_warmup: 100,
            rfp_fetch_bytes: 256,
            polling: Polling::from_profile(profile),
        }
    }

    /// Largest request cell body: `max_batch` Put frames.
    pub fn max_request_body(&self) -> u64 {
        self.max_batch as u64 * (REQUEST_HEADER as u64 + self.max_value)
    }

    /// Largest reply cell body: `max_batch` Get replies or one full Scan, or an error text.
    pub fn max_reply_body(&self) -> u64 {
        let one = REPLY_HEADER as u64 + self.max_value;
        (self.max_batch as u64 * one)
            .max(REPLY_HEADER as u64 + self.max_scan as u64 * self.max_value)
            .max(256)
    }

    /// Bytes of one request ring slot.
    pub fn request_slot(&self) -> u64 {
        cell::cell_bytes(self.max_request_body()).next_multiple_of(64)
    }

    /// Bytes of one reply ring slot.
    pub fn reply_slot(&self) -> u64 {
        cell::cell_bytes(self.max_reply_body()).next_multiple_of(64)
    }
}
