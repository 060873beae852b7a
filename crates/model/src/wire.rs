//! The messages RNICs exchange over the fabric, as parsed representations (`Repr` in
//! smoltcp's terms). The simulator carries them as values; the soft RNIC will give each a
//! byte layout with `parse`/`emit`.

use crate::bytes::Bytes;
use crate::hierarchy::FlushPlacement;
use crate::verbs::{NodeId, QpNum};

/// Packet sequence number, per QP direction.
pub type Psn = u32;

/// Why a responder refused a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// Receiver not ready: no receive posted; the requester retries after a delay.
    Rnr,
    /// Bad rkey, out of bounds, missing rights, misaligned atomic.
    RemoteAccess,
    /// The request cannot be executed (message too long, unsupported operation).
    InvalidRequest,
}

/// One message between two RNICs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Sending node.
    pub src: NodeId,
    /// Receiving node.
    pub dst: NodeId,
    /// Sending QP.
    pub src_qp: QpNum,
    /// Receiving QP.
    pub dst_qp: QpNum,
    /// Sequence number of the request (or of the request a response answers).
    pub psn: Psn,
    /// What it carries.
    pub body: Body,
}

/// Packet bodies: requests (requester → responder) and responses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// RDMA WRITE, with immediate data for WRITE_WITH_IMM.
    Write {
        /// Remote address.
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// Data.
        data: Bytes,
        /// Immediate data.
        imm: Option<u32>,
        /// Ask the responder to acknowledge (AckReq bit of the BTH).
        ack_req: bool,
    },
    /// SEND, with optional immediate data.
    Send {
        /// Message.
        data: Bytes,
        /// Immediate data.
        imm: Option<u32>,
        /// AckReq bit.
        ack_req: bool,
    },
    /// RDMA READ request.
    Read {
        /// Remote address.
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// Bytes to read.
        len: u32,
    },
    /// CAS or FETCH_ADD.
    Atomic {
        /// Remote address (8-byte aligned).
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// `Some(compare)` for CAS, `None` for FETCH_ADD.
        compare: Option<u64>,
        /// Swap value (CAS) or addend (FETCH_ADD).
        operand: u64,
    },
    /// RDMA FLUSH.
    Flush {
        /// Remote address.
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// Bytes covered.
        len: u64,
        /// Placement type.
        placement: FlushPlacement,
    },
    /// ATOMIC WRITE (8 bytes) or non-posted WRITE (any size).
    NonPostedWrite {
        /// Remote address.
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// Data.
        data: Bytes,
        /// True for ATOMIC WRITE (8 bytes, aligned).
        atomic: bool,
    },
    /// Cumulative acknowledgement of posted requests up to and including `psn`.
    Ack,
    /// Negative acknowledgement of `psn`.
    Nak(NakCode),
    /// READ response data.
    ReadResp(Bytes),
    /// Atomic response: the original value.
    AtomicResp(u64),
    /// FLUSH, ATOMIC WRITE or non-posted WRITE done.
    Done,
}

impl Packet {
    /// Payload bytes on the wire (headers are added by the link model).
    pub fn payload_len(&self) -> u64 {
        match &self.body {
            Body::Write { data, .. } | Body::Send { data, .. } | Body::NonPostedWrite { data, .. } => {
                data.len() as u64
            }
            Body::ReadResp(d) => d.len() as u64,
            Body::Atomic { .. } | Body::AtomicResp(_) => 8,
            _ => 0,
        }
    }

    /// True for requester → responder packets.
    pub fn is_request(&self) -> bool {
        matches!(
            self.body,
            Body::Write { .. }
                | Body::Send { .. }
                | Body::Read { .. }
                | Body::Atomic { .. }
                | Body::Flush { .. }
                | Body::NonPostedWrite { .. }
        )
    }
}
