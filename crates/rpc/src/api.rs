//! What every design offers, so one benchmark and one checker drive them all.

use remora_model::time::{Duration, Instant};
use remora_verbs::VerbsError;
use std::future::Future;

/// One key-value operation (seed 003 §5.1: objects in the server's PM, the index at the
/// client).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read one object.
    Get {
        /// Object key.
        key: u64,
    },
    /// Write (insert or overwrite) one object.
    Put {
        /// Object key.
        key: u64,
        /// New contents.
        value: Vec<u8>,
    },
    /// Read `count` objects from `key` upward (YCSB E).
    Scan {
        /// First key.
        key: u64,
        /// Objects to read.
        count: u32,
    },
}

/// Whether the server executed a request, or why it refused it. A refused request changed
/// nothing; its reply carries no objects. The reply frame's status byte
/// ([`crate::proto::ReplyFrame`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyStatus {
    /// Executed.
    #[error("executed")]
    Ok,
    /// A Get or Put named a key outside the store (`key >= objects`).
    #[error("refused: the key is outside the store")]
    KeyOutsideStore,
    /// A Put's value is larger than an object slot holds.
    #[error("refused: the value is larger than an object slot")]
    ValueTooLarge,
    /// A Scan asked for more objects than the connection's `max_scan`: its reply would not
    /// fit the client's receive buffers (the library client never sends one; a client
    /// writing its log directly can).
    #[error("refused: the Scan asks for more objects than the connection allows")]
    ScanTooLarge,
}

impl ReplyStatus {
    /// The status byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            ReplyStatus::Ok => 0,
            ReplyStatus::KeyOutsideStore => 1,
            ReplyStatus::ValueTooLarge => 2,
            ReplyStatus::ScanTooLarge => 3,
        }
    }

    /// The status a byte encodes; `None` for a value this build does not know.
    pub fn from_code(b: u8) -> Option<ReplyStatus> {
        Some(match b {
            0 => ReplyStatus::Ok,
            1 => ReplyStatus::KeyOutsideStore,
            2 => ReplyStatus::ValueTooLarge,
            3 => ReplyStatus::ScanTooLarge,
            _ => return None,
        })
    }
}

/// A processed request's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The request's sequence number on its connection.
    pub seq: u64,
    /// Executed, or refused and why.
    pub status: ReplyStatus,
    /// The objects read (empty for a Put and for a refused request).
    pub value: Vec<u8>,
}

impl Reply {
    /// An executed request's reply.
    pub fn ok(seq: u64, value: Vec<u8>) -> Reply {
        Reply {
            seq,
            status: ReplyStatus::Ok,
            value,
        }
    }

    /// A refused request's reply.
    pub fn refused(seq: u64, why: ReplyStatus) -> Reply {
        Reply {
            seq,
            status: why,
            value: Vec::new(),
        }
    }

    /// The reply, or [`RpcError::Refused`] if the server refused the request: for callers
    /// whose requests the store should always execute.
    pub fn executed(self) -> Result<Reply, RpcError> {
        match self.status {
            ReplyStatus::Ok => Ok(self),
            why => Err(RpcError::Refused { seq: self.seq, why }),
        }
    }

    /// [`executed`](Self::executed) for every reply (what [`RpcClient::drain`] returns):
    /// the replies, or the first refusal.
    pub fn all_executed(replies: Vec<Reply>) -> Result<Vec<Reply>, RpcError> {
        replies.into_iter().map(Reply::executed).collect()
    }
}

/// What [`RpcClient::call`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The request's sequence number on its connection.
    pub seq: u64,
    /// When the request was durable in the server's PM, as far as the client knows
    /// (`None` for an operation that changes nothing, i.e. a read).
    pub durable_at: Option<Instant>,
    /// The result, when the design waits for it before returning (a baseline always does;
    /// a durable RPC does for reads and returns Puts as soon as they are durable).
    pub reply: Option<Reply>,
}

/// Server-side costs the benchmark sets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ServerCosts {
    /// Injected processing time per request: zero for "light load", 100 µs for "heavy
    /// load" (seed 003 §5.2, after DaRPC).
    pub processing: Duration,
    /// Backlog (logged, unprocessed requests) at which a durable-RPC server tells its
    /// senders to slow down (seed 003 §4.2).
    pub backlog_threshold: u32,
    /// Server threads that execute requests, shared by every connection of the server
    /// and the same for every design ([`crate::workers`]). Seed 003 does not state the
    /// number; its servers have 2 × 20 cores (§5.1) and its durable server creates a
    /// thread per logged request (§4.2).
    pub workers: u32,
}

/// Why an RPC failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// A verb failed (error completion, node down, ...).
    #[error("verbs: {0}")]
    Verbs(#[from] VerbsError),
    /// The design cannot carry this request (e.g. a FaSST object over the 4 KB UD MTU).
    #[error("{design} cannot carry {what}")]
    Unsupported {
        /// The design.
        design: &'static str,
        /// What it cannot carry.
        what: String,
    },
    /// A reply or log record failed validation.
    #[error("malformed {0}")]
    Malformed(String),
    /// The connection failed: an error completion (peer down, retries exhausted).
    #[error("connection failed: {0}")]
    Connection(String),
    /// A recovered server lost a request it had acknowledged as durable: its log was
    /// processed up to `processed`, short of `seq`, which the client holds as durable. A
    /// verdict on the server's persistence, not on the connection.
    #[error(
        "the recovered server processed up to {processed} but seq {seq} was acknowledged durable"
    )]
    LostDurable {
        /// How far the recovered server's log was processed.
        processed: u64,
        /// The first request acknowledged durable beyond that.
        seq: u64,
    },
    /// The server refused request `seq` and changed nothing (its reply's status).
    #[error("the server refused request {seq}: {why}")]
    Refused {
        /// The request.
        seq: u64,
        /// Why.
        why: ReplyStatus,
    },
    /// The server did not answer in time.
    #[error("timed out after {0}")]
    Timeout(Duration),
    /// The server's node is up (its RNIC completed the client's probe READs) but its RPC
    /// service made no progress (no acknowledgement, reply or completion of the client's
    /// own requests) for this long: its threads died or hang.
    #[error(
        "the server's RNIC answers but its RPC service made no progress for {0} \
         (its threads died or hang)"
    )]
    ServerStalled(Duration),
}

/// The client side of one design on one connection.
pub trait RpcClient {
    /// Issues `op` and returns once the sender may issue its next request: for a baseline
    /// when the reply arrived (the reply is sent after the server persisted the data,
    /// seed 003 §3); for a durable RPC when the request is durable in the redo log (and,
    /// for a read, when its result arrived).
    fn call(&mut self, op: Op) -> impl Future<Output = Result<Completion, RpcError>>;
    /// Waits until every issued request was processed and returns the replies not yet
    /// returned by [`call`](Self::call), in sequence order.
    fn drain(&mut self) -> impl Future<Output = Result<Vec<Reply>, RpcError>>;

    /// Issues `ops` as one RPC where the design batches (seed 003 §5.5, Figure 19: "multiple
    /// RDMA requests are batched into one RPC"); by default one [`call`](Self::call) each.
    fn call_batch(
        &mut self,
        ops: Vec<Op>,
    ) -> impl Future<Output = Result<Vec<Completion>, RpcError>> {
        async move {
            let mut out = Vec::with_capacity(ops.len());
            for op in ops {
                out.push(self.call(op).await?);
            }
            Ok(out)
        }
    }
}
