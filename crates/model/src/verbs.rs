//! Verbs-shaped types, named after rdma-core's `libibverbs/verbs.h` so a reader of either
//! recognises the other: work requests (`ibv_send_wr`, `ibv_recv_wr`), completions
//! (`ibv_wc`, `enum ibv_wc_status`), access flags (`enum ibv_access_flags`).

use crate::bytes::Bytes;
use crate::hierarchy::FlushPlacement;
use std::fmt;

/// A node (machine) on the fabric.
pub type NodeId = u32;

/// A queue-pair number, unique per node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QpNum(pub u32);

/// A completion queue, unique per node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CqId(pub u32);

/// A protection domain, unique per node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PdId(pub u32);

/// Memory-region access rights (`enum ibv_access_flags`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    /// Local writes by the RNIC (READ responses, received messages).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote RDMA WRITE (and WRITE_WITH_IMM, ATOMIC WRITE, non-posted WRITE).
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    /// Remote RDMA READ.
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// Remote CAS and FETCH_ADD.
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    /// Remote FLUSH with global-visibility placement (`IBV_ACCESS_FLUSH_GLOBAL`).
    pub const FLUSH_GLOBAL: Access = Access(1 << 4);
    /// Remote FLUSH with persistence placement (`IBV_ACCESS_FLUSH_PERSISTENT`).
    pub const FLUSH_PERSISTENT: Access = Access(1 << 5);
    /// Every right.
    pub const ALL: Access = Access(0x3f);
    /// No rights.
    pub const NONE: Access = Access(0);

    /// True when every right in `other` is granted.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// A local buffer: address, length and local key (`ibv_sge`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Start address in the node's memory (inside the MR).
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// The MR's local key.
    pub lkey: u32,
}

/// A remote buffer: address and remote key.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Address in the responder's memory.
    pub addr: u64,
    /// The responder MR's remote key.
    pub rkey: u32,
}

/// Transport service type of a queue pair (`enum ibv_qp_type`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum QpType {
    /// `IBV_QPT_RC`, reliable connection: acknowledged, retried, every operation.
    #[default]
    Rc,
    /// `IBV_QPT_UC`, unreliable connection: WRITE, WRITE_WITH_IMM and SEND (+imm) only;
    /// no ACKs and no retransmission; a request completes once its last byte is
    /// transmitted; the responder silently drops what it cannot place.
    Uc,
    /// `IBV_QPT_UD`, unreliable datagram: SEND (+imm) of at most [`UD_MTU`] bytes, each
    /// work request naming its destination ([`UdDest`]); no ACKs; completion at transmit;
    /// one QP talks to many peers, filtered by Q_Key.
    Ud,
}

impl QpType {
    /// The libibverbs name (`IBV_QPT_RC`, ...), for messages.
    pub fn name(self) -> &'static str {
        match self {
            QpType::Rc => "IBV_QPT_RC",
            QpType::Uc => "IBV_QPT_UC",
            QpType::Ud => "IBV_QPT_UD",
        }
    }
}

/// Largest UD message: one packet of the path MTU, 4096 bytes (InfiniBand's largest MTU;
/// a UD message is never segmented).
pub const UD_MTU: u64 = 4096;

/// Where a UD send goes: the `wr.ud` part of `ibv_send_wr` (`ah`, `remote_qpn`,
/// `remote_qkey`). On remora's flat fabric the address handle (`ibv_ah`, made by
/// `ibv_create_ah` from a LID/GID) is just the node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// The destination node (the address handle).
    pub node: NodeId,
    /// The destination QP (`remote_qpn`).
    pub qpn: QpNum,
    /// The Q_Key the destination QP must hold (`remote_qkey`); a mismatch is dropped.
    pub qkey: u32,
}

/// Where a send work request's payload comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// No payload (READ target buffers use `Sge` too; FLUSH has none).
    None,
    /// Copied into the work request at post time (`IBV_SEND_INLINE`); build it with
    /// [`Payload::inline`].
    Inline(Bytes),
    /// Read by the RNIC from registered local memory; READ and atomics write their
    /// results here.
    Sge(Sge),
}

impl Payload {
    /// An inline payload: up to 64 bytes are held in place, without an allocation.
    pub fn inline(data: impl Into<Bytes>) -> Payload {
        Payload::Inline(data.into())
    }
    /// Payload length in bytes.
    // Always inlined: `post_send`'s call of it cost as much as its work.
    #[inline(always)]
    pub fn len(&self) -> u64 {
        match self {
            Payload::None => 0,
            Payload::Inline(v) => v.len() as u64,
            Payload::Sge(s) => s.len as u64,
        }
    }
    /// True when there is no payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The operation of a send work request (`enum ibv_wr_opcode`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// `IBV_WR_RDMA_WRITE`: posted.
    Write,
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`: posted; consumes a receive at the responder.
    WriteWithImm(u32),
    /// `IBV_WR_SEND`: posted; consumes a receive.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`.
    SendWithImm(u32),
    /// `IBV_WR_RDMA_READ`: non-posted.
    Read,
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` on 8 aligned bytes: non-posted.
    CompareSwap {
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` on 8 aligned bytes: non-posted.
    FetchAdd {
        /// Addend.
        add: u64,
    },
    /// `IBV_WR_FLUSH` (14) over `len` bytes at the remote address: non-posted.
    Flush {
        /// Placement type.
        placement: FlushPlacement,
        /// Bytes covered.
        len: u64,
    },
    /// `IBV_WR_ATOMIC_WRITE` (15): 8 bytes, all or nothing, ordered like a non-posted
    /// operation (seed 000 §2).
    AtomicWrite {
        /// The value written.
        value: u64,
    },
    /// Non-posted RDMA WRITE of any size (an IBTA proposal, seed 000 §2).
    NonPostedWrite,
    /// SFlush (seed 003 §4.1.1, Figure 3(a)): follows a SEND on an RC QP. The responder's
    /// RNIC looks up where that SEND landed (the buffer of the receive it consumed; the
    /// lookup costs the profile's `rnic.sflush_lookup_ns`), persists that range and then
    /// answers, so the completion means the SEND's data is durable. Non-posted, like FLUSH.
    /// Under DMP with DDIO on the RNIC cannot write the LLC back (seed 000 §3.1.2, seed 003
    /// §4.4.2), so there it proves visibility only. No remote address: see
    /// [`SendWr::sflush`].
    SFlush,
    /// RFlush (seed 003 §4.1.2, Figure 3(c)): posted by the *receiver* of data. Its RNIC,
    /// without the CPU, persists the local range `range` (data that arrived earlier), and
    /// only then sends the peer a zero-length notification carrying `imm`, which consumes a
    /// receive there (the peer's CPU polls a `Recv` completion with `imm`). Works on RC, UC
    /// and UD (on UD the work request names its destination). The poster's completion
    /// follows the notification's (RC: acknowledged; UC/UD: transmitted), so it, too, comes
    /// after the data is in the persistence domain. As [`Opcode::SFlush`], LLC-resident
    /// lines under DMP with DDIO are not written back. See [`SendWr::rflush`].
    RFlush {
        /// The local range to persist (its `lkey` must name a local MR of the QP's PD).
        range: Sge,
        /// Immediate data of the notification.
        imm: u32,
    },
}

impl Opcode {
    /// Non-posted operations return a value and are ordered after all prior operations
    /// at the responder (seed 000 §2, "RDMA Operation Ordering").
    pub fn is_non_posted(self) -> bool {
        !matches!(
            self,
            Opcode::Write
                | Opcode::WriteWithImm(_)
                | Opcode::Send
                | Opcode::SendWithImm(_)
                | Opcode::RFlush { .. }
        )
    }

    /// Whether a QP of service type `t` can carry this operation: RC all of them, UC
    /// WRITE, WRITE_WITH_IMM, SEND (+imm) and RFlush, UD SEND (+imm) and RFlush (seed 003
    /// §4.1.1: the sender-initiated flushes wait for the responder's ACK, so RC only).
    pub fn allowed_on(self, t: QpType) -> bool {
        match t {
            QpType::Rc => true,
            QpType::Uc => matches!(
                self,
                Opcode::Write
                    | Opcode::WriteWithImm(_)
                    | Opcode::Send
                    | Opcode::SendWithImm(_)
                    | Opcode::RFlush { .. }
            ),
            QpType::Ud => matches!(
                self,
                Opcode::Send | Opcode::SendWithImm(_) | Opcode::RFlush { .. }
            ),
        }
    }

    /// The libibverbs-style name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Opcode::Write => "RDMA WRITE",
            Opcode::WriteWithImm(_) => "RDMA WRITE_WITH_IMM",
            Opcode::Send => "SEND",
            Opcode::SendWithImm(_) => "SEND_WITH_IMM",
            Opcode::Read => "RDMA READ",
            Opcode::CompareSwap { .. } => "ATOMIC CMP_AND_SWP",
            Opcode::FetchAdd { .. } => "ATOMIC FETCH_AND_ADD",
            Opcode::Flush { .. } => "RDMA FLUSH",
            Opcode::AtomicWrite { .. } => "RDMA ATOMIC WRITE",
            Opcode::NonPostedWrite => "non-posted RDMA WRITE",
            Opcode::SFlush => "SFlush",
            Opcode::RFlush { .. } => "RFlush",
        }
    }
}

/// A send work request (`ibv_send_wr` with one SGE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: Opcode,
    /// Local data (source for writes/sends, destination for READ/atomics).
    pub local: Payload,
    /// Remote target (not used by SEND).
    pub remote: Option<Remote>,
    /// `IBV_SEND_SIGNALED`: generate a completion on success.
    pub signaled: bool,
    /// `IBV_SEND_FENCE`: wait for all prior non-posted operations to complete first.
    pub fence: bool,
    /// The destination of a work request on a UD QP (`wr.ud`); `None` on RC and UC.
    pub ud: Option<UdDest>,
}

impl SendWr {
    /// A signaled, unfenced request.
    pub fn new(wr_id: u64, opcode: Opcode, local: Payload, remote: Option<Remote>) -> Self {
        SendWr {
            wr_id,
            opcode,
            local,
            remote,
            signaled: true,
            fence: false,
            ud: None,
        }
    }
    /// WFlush (seed 003 §4.1.1, Figure 3(b)): after a WRITE of `len` bytes to `remote` on
    /// an RC QP, makes the responder's RNIC persist that range and acknowledge. This is
    /// the IBTA FLUSH with persistence placement (`IBV_WR_FLUSH`, `IBV_FLUSH_PERSISTENT`)
    /// over the written range: a WRITE carries its target address, so the RNIC needs no
    /// lookup and WFlush has nothing FLUSH lacks. Needs `Access::FLUSH_PERSISTENT` on the
    /// responder's MR and an RNIC with native FLUSH. Under DMP with DDIO on, the data stops
    /// in the LLC, outside the domain (seed 000 §3.1.2, seed 003 §4.4.2).
    pub fn wflush(wr_id: u64, remote: Remote, len: u64) -> Self {
        SendWr::new(
            wr_id,
            Opcode::Flush {
                placement: FlushPlacement::Persistence,
                len,
            },
            Payload::None,
            Some(remote),
        )
    }
    /// SFlush (see [`Opcode::SFlush`]): persists the landing buffer of the most recent SEND
    /// posted before it on this RC QP. Signaled; `post_send` refuses it on a QP that has not
    /// posted a SEND.
    pub fn sflush(wr_id: u64) -> Self {
        SendWr::new(wr_id, Opcode::SFlush, Payload::None, None)
    }
    /// RFlush (see [`Opcode::RFlush`]): persists the local `range`, then notifies the peer
    /// with `imm`. On a UD QP add the destination with [`SendWr::to`].
    pub fn rflush(wr_id: u64, range: Sge, imm: u32) -> Self {
        SendWr::new(wr_id, Opcode::RFlush { range, imm }, Payload::None, None)
    }
    /// Sets the UD destination (`wr.ud.ah`, `remote_qpn`, `remote_qkey`).
    pub fn to(mut self, dest: UdDest) -> Self {
        self.ud = Some(dest);
        self
    }
    /// Sets `IBV_SEND_SIGNALED`.
    pub fn signaled(mut self, on: bool) -> Self {
        self.signaled = on;
        self
    }
    /// Sets `IBV_SEND_FENCE`.
    pub fn fenced(mut self, on: bool) -> Self {
        self.fence = on;
        self
    }
}

/// A receive work request (`ibv_recv_wr` with one SGE).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier.
    pub wr_id: u64,
    /// The buffer a message is placed in (its MR says DRAM or PM).
    pub sge: Sge,
}

/// Completion status (`enum ibv_wc_status`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    Success,
    /// `IBV_WC_LOC_LEN_ERR`: a message longer than the receive buffer, or a bad SGE length.
    LocLenErr,
    /// `IBV_WC_LOC_PROT_ERR`: bad local key or missing local rights.
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR`: flushed because the QP entered the error state
    /// (not related to RDMA FLUSH).
    WrFlushErr,
    /// `IBV_WC_REM_INV_REQ_ERR`: the responder rejected the request (e.g. too long for
    /// the receive buffer, unsupported operation).
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR`: bad rkey, out of bounds, missing rights, misaligned atomic.
    RemAccessErr,
    /// `IBV_WC_RETRY_EXC_ERR`: no response from the peer within the retry budget.
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: receiver not ready more times than allowed.
    RnrRetryExcErr,
    /// `IBV_WC_BAD_RESP_ERR`: the responder answered with a response of the wrong kind
    /// for the request (e.g. READ data for a SEND).
    BadRespErr,
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What a completion is for (`enum ibv_wc_opcode`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (either flavour).
    Send,
    /// A WRITE (either flavour).
    RdmaWrite,
    /// A READ.
    RdmaRead,
    /// A compare-and-swap.
    CompSwap,
    /// A fetch-and-add.
    FetchAdd,
    /// An RDMA FLUSH.
    Flush,
    /// An ATOMIC WRITE.
    AtomicWrite,
    /// A non-posted WRITE.
    NonPostedWrite,
    /// A received SEND.
    Recv,
    /// A received WRITE_WITH_IMM.
    RecvRdmaWithImm,
    /// An SFlush (seed 003 §4.1.1).
    SFlush,
    /// An RFlush (seed 003 §4.1.2), at the receiver that posted it.
    RFlush,
}

impl WcOpcode {
    /// Whether the completion is of a receive work request (a message took it).
    pub fn is_receive(self) -> bool {
        matches!(self, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
    }

    /// The requester-side completion opcode of a send opcode.
    pub fn of(op: Opcode) -> WcOpcode {
        match op {
            Opcode::Write | Opcode::WriteWithImm(_) => WcOpcode::RdmaWrite,
            Opcode::Send | Opcode::SendWithImm(_) => WcOpcode::Send,
            Opcode::Read => WcOpcode::RdmaRead,
            Opcode::CompareSwap { .. } => WcOpcode::CompSwap,
            Opcode::FetchAdd { .. } => WcOpcode::FetchAdd,
            Opcode::Flush { .. } => WcOpcode::Flush,
            Opcode::AtomicWrite { .. } => WcOpcode::AtomicWrite,
            Opcode::NonPostedWrite => WcOpcode::NonPostedWrite,
            Opcode::SFlush => WcOpcode::SFlush,
            Opcode::RFlush { .. } => WcOpcode::RFlush,
        }
    }
}

/// A work completion (`ibv_wc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// Immediate data of a received `*_WITH_IMM`.
    pub imm: Option<u32>,
    /// The local QP.
    pub qp: QpNum,
    /// The sender of a message received on a UD QP (`ibv_wc.slid`/`src_qp`: node and QP);
    /// `None` otherwise.
    pub src: Option<(NodeId, QpNum)>,
}

/// Why a verb call was refused at once (the `errno` of `ibv_post_send` and friends).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    /// The object does not exist on this node.
    #[error("no such {0}")]
    NoSuch(&'static str),
    /// The QP is not connected and ready to send.
    #[error("queue pair {0:?} is not ready to send (state {1})")]
    QpState(QpNum, &'static str),
    /// The send or receive queue is full.
    #[error("{0} queue of {1:?} is full ({2} entries)")]
    QueueFull(&'static str, QpNum, usize),
    /// The RNIC lacks this operation.
    #[error("the RNIC does not support {0}")]
    Unsupported(&'static str),
    /// The request is malformed (missing remote address, wrong payload, too long).
    #[error("invalid work request: {0}")]
    Invalid(&'static str),
    /// The node is down (crashed and not restarted).
    #[error("node {0} is down")]
    NodeDown(NodeId),
    /// A memory registration outside the node's memory or of zero length.
    #[error("bad memory registration: {0}")]
    BadRegistration(&'static str),
    /// The operation does not exist on this QP's transport service type (e.g. an RDMA
    /// READ on an `IBV_QPT_UC` QP; `ibv_post_send` returns `EINVAL`).
    #[error("{op} is not available on an {qp_type} queue pair")]
    NotOnQpType {
        /// The operation.
        op: &'static str,
        /// The QP's service type (`IBV_QPT_UC`, ...).
        qp_type: &'static str,
    },
    /// The message exceeds a size limit (a UD message is one MTU-sized packet).
    #[error("message of {len} bytes exceeds the {max}-byte limit of {what}")]
    TooLong {
        /// Message length.
        len: u64,
        /// The limit.
        max: u64,
        /// Whose limit.
        what: &'static str,
    },
}
