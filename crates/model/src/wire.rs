//! The messages RNICs exchange over the fabric. [`Packet`] is the parsed representation
//! (`Repr` in smoltcp's terms): the simulator carries it as a value, and a byte transport
//! uses [`Packet::emit`] and [`Packet::parse`], which refuses truncated, oversized or
//! unknown input with a [`WireError`] and never panics.

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
    /// SFlush (seed 003 §4.1.1): persist where the SEND with PSN `send_psn` of this QP
    /// landed, then answer with [`Body::Done`].
    SFlush {
        /// PSN of the SEND the SFlush follows.
        send_psn: Psn,
    },
    /// A UD datagram (SEND on an `IBV_QPT_UD` QP): one packet, at most
    /// [`UD_MTU`](crate::verbs::UD_MTU) bytes, never acknowledged. The PSN is unused.
    Datagram {
        /// The Q_Key the sender named (the DETH Q_Key); the receiving QP must hold it.
        qkey: u32,
        /// Message.
        data: Bytes,
        /// Immediate data.
        imm: Option<u32>,
    },
}

impl Packet {
    /// The bytes the packet carries, if it carries a byte payload.
    #[inline]
    fn data(&self) -> Option<&Bytes> {
        match &self.body {
            Body::Write { data, .. }
            | Body::Send { data, .. }
            | Body::NonPostedWrite { data, .. }
            | Body::Datagram { data, .. }
            | Body::ReadResp(data) => Some(data),
            _ => None,
        }
    }

    /// Payload bytes on the wire (headers are added by the link model).
    #[inline]
    pub fn payload_len(&self) -> u64 {
        match (&self.body, self.data()) {
            (_, Some(data)) => data.len() as u64,
            (Body::Atomic { .. } | Body::AtomicResp(_), None) => 8,
            _ => 0,
        }
    }

    /// True when the payload lives in a heap buffer (longer than [`crate::bytes::INLINE`]);
    /// a packet without one owns nothing but its own bytes.
    #[inline]
    pub fn holds_heap(&self) -> bool {
        self.data().is_some_and(Bytes::is_shared)
    }

    /// True for the requests a responder executes only after every earlier request of
    /// their QP took effect, and answers with more than an acknowledgement or with one of
    /// their own (READ, ATOMIC, FLUSH, non-posted WRITE, SFlush): what IBTA's responder
    /// resources (IRD) count.
    #[inline]
    pub fn is_non_posted(&self) -> bool {
        matches!(
            self.body,
            Body::Read { .. }
                | Body::Atomic { .. }
                | Body::Flush { .. }
                | Body::NonPostedWrite { .. }
                | Body::SFlush { .. }
        )
    }

    /// Bytes a READ request asks to be sent back; 0 for any other packet.
    #[inline]
    pub fn read_len(&self) -> u64 {
        match self.body {
            Body::Read { len, .. } => len as u64,
            _ => 0,
        }
    }

    /// True for requester → responder packets.
    #[inline]
    pub fn is_request(&self) -> bool {
        matches!(
            self.body,
            Body::Write { .. }
                | Body::Send { .. }
                | Body::Read { .. }
                | Body::Atomic { .. }
                | Body::Flush { .. }
                | Body::NonPostedWrite { .. }
                | Body::SFlush { .. }
                | Body::Datagram { .. }
        )
    }
}

/// Why bytes are not a valid packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the header or body needs.
    #[error("truncated packet: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// Not a remora RNIC packet, or another version.
    #[error("bad magic or version")]
    BadMagic,
    /// Unknown opcode.
    #[error("unknown opcode {0}")]
    UnknownOpcode(u8),
    /// A field outside its range (flags, NAK code, placement, lengths).
    #[error("bad value for {0}")]
    BadValue(&'static str),
    /// Bytes after the declared body.
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

const WIRE_MAGIC: u16 = 0x5244; // "RD"
const WIRE_VERSION: u8 = 1;
/// Header bytes of an encoded packet.
pub const WIRE_HEADER: usize = 32;
/// What a packet counts for beyond its payload where memory it holds is bounded (a
/// runtime's backlog of output owed to a peer, the RNIC's waiting requests): its header
/// and body fields, rounded up to one cache line. An estimate, the same everywhere.
pub const PACKET_OVERHEAD: u64 = 64;
/// Largest body [`Packet::parse`] accepts (bounded so a peer cannot make us allocate 4 GiB).
pub const MAX_WIRE_BODY: usize = 1 << 24;

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.at + n;
        if end > self.b.len() {
            return Err(WireError::Truncated {
                need: end,
                have: self.b.len(),
            });
        }
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn bytes(&mut self) -> Result<crate::bytes::Bytes, WireError> {
        let n = self.u32()? as usize;
        if n > MAX_WIRE_BODY {
            return Err(WireError::BadValue("payload length"));
        }
        Ok(crate::bytes::Bytes::copy_from(self.take(n)?))
    }
}

impl Body {
    fn opcode(&self) -> u8 {
        match self {
            Body::Write { .. } => 1,
            Body::Send { .. } => 2,
            Body::Read { .. } => 3,
            Body::Atomic { .. } => 4,
            Body::Flush { .. } => 5,
            Body::NonPostedWrite { .. } => 6,
            Body::Ack => 7,
            Body::Nak(_) => 8,
            Body::ReadResp(_) => 9,
            Body::AtomicResp(_) => 10,
            Body::Done => 11,
            Body::SFlush { .. } => 12,
            Body::Datagram { .. } => 13,
        }
    }
}

impl Packet {
    /// Encodes the packet: a 32-byte header (magic, version, opcode, flags, PSN, nodes,
    /// QPs, body length) and the body, little-endian.
    pub fn emit(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(WIRE_HEADER + 20 + self.payload_len() as usize);
        self.emit_into(&mut out);
        out
    }

    /// Appends the encoding of [`emit`](Self::emit) to `out` without allocating anything
    /// but `out`'s growth (a runtime encodes every packet of a step into one buffer).
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        // The header's flags and body length are patched once the body is written.
        out.extend_from_slice(&WIRE_MAGIC.to_le_bytes());
        out.extend_from_slice(&[WIRE_VERSION, self.body.opcode(), 0, 0, 0, 0]);
        out.extend_from_slice(&self.psn.to_le_bytes());
        out.extend_from_slice(&self.src.to_le_bytes());
        out.extend_from_slice(&self.dst.to_le_bytes());
        out.extend_from_slice(&self.src_qp.0.to_le_bytes());
        out.extend_from_slice(&self.dst_qp.0.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        debug_assert_eq!(out.len() - start, WIRE_HEADER);
        let body = out;
        let mut flags = 0u8;
        let put_bytes = |body: &mut Vec<u8>, d: &[u8]| {
            body.extend_from_slice(&(d.len() as u32).to_le_bytes());
            body.extend_from_slice(d);
        };
        match &self.body {
            Body::Write {
                addr,
                rkey,
                data,
                imm,
                ack_req,
            } => {
                flags |= (*ack_req as u8) | (imm.is_some() as u8) << 1;
                body.extend_from_slice(&addr.to_le_bytes());
                body.extend_from_slice(&rkey.to_le_bytes());
                body.extend_from_slice(&imm.unwrap_or(0).to_le_bytes());
                put_bytes(body, data);
            }
            Body::Send { data, imm, ack_req } => {
                flags |= (*ack_req as u8) | (imm.is_some() as u8) << 1;
                body.extend_from_slice(&imm.unwrap_or(0).to_le_bytes());
                put_bytes(body, data);
            }
            Body::Read { addr, rkey, len } => {
                body.extend_from_slice(&addr.to_le_bytes());
                body.extend_from_slice(&rkey.to_le_bytes());
                body.extend_from_slice(&len.to_le_bytes());
            }
            Body::Atomic {
                addr,
                rkey,
                compare,
                operand,
            } => {
                flags |= compare.is_some() as u8;
                body.extend_from_slice(&addr.to_le_bytes());
                body.extend_from_slice(&rkey.to_le_bytes());
                body.extend_from_slice(&compare.unwrap_or(0).to_le_bytes());
                body.extend_from_slice(&operand.to_le_bytes());
            }
            Body::Flush {
                addr,
                rkey,
                len,
                placement,
            } => {
                flags |= (*placement == crate::hierarchy::FlushPlacement::Persistence) as u8;
                body.extend_from_slice(&addr.to_le_bytes());
                body.extend_from_slice(&rkey.to_le_bytes());
                body.extend_from_slice(&len.to_le_bytes());
            }
            Body::NonPostedWrite {
                addr,
                rkey,
                data,
                atomic,
            } => {
                flags |= *atomic as u8;
                body.extend_from_slice(&addr.to_le_bytes());
                body.extend_from_slice(&rkey.to_le_bytes());
                put_bytes(body, data);
            }
            Body::Ack | Body::Done => {}
            Body::Nak(code) => body.push(match code {
                NakCode::Rnr => 0,
                NakCode::RemoteAccess => 1,
                NakCode::InvalidRequest => 2,
            }),
            Body::ReadResp(d) => put_bytes(body, d),
            Body::AtomicResp(v) => body.extend_from_slice(&v.to_le_bytes()),
            Body::SFlush { send_psn } => body.extend_from_slice(&send_psn.to_le_bytes()),
            Body::Datagram { qkey, data, imm } => {
                flags |= imm.is_some() as u8;
                body.extend_from_slice(&qkey.to_le_bytes());
                body.extend_from_slice(&imm.unwrap_or(0).to_le_bytes());
                put_bytes(body, data);
            }
        }
        let body_len = (body.len() - start - WIRE_HEADER) as u32;
        body[start + 4] = flags;
        body[start + 28..start + WIRE_HEADER].copy_from_slice(&body_len.to_le_bytes());
    }

    /// Total length of the encoded packet at the start of `buf`, once its header is there
    /// (for framing a byte stream); `Ok(None)` if the header is incomplete.
    pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
        if buf.len() < WIRE_HEADER {
            return Ok(None);
        }
        if u16::from_le_bytes([buf[0], buf[1]]) != WIRE_MAGIC || buf[2] != WIRE_VERSION {
            return Err(WireError::BadMagic);
        }
        let len = u32::from_le_bytes(buf[28..32].try_into().expect("4 bytes")) as usize;
        if len > MAX_WIRE_BODY + 64 {
            return Err(WireError::BadValue("body length"));
        }
        Ok(Some(WIRE_HEADER + len))
    }

    /// Checks that `buf` holds exactly one frame: a valid header and its whole body, and
    /// nothing after it. Returns the frame's length.
    fn check_exact_frame(buf: &[u8]) -> Result<usize, WireError> {
        let total = Packet::frame_len(buf)?.ok_or(WireError::Truncated {
            need: WIRE_HEADER,
            have: buf.len(),
        })?;
        if buf.len() < total {
            return Err(WireError::Truncated {
                need: total,
                have: buf.len(),
            });
        }
        if buf.len() > total {
            return Err(WireError::Trailing(buf.len() - total));
        }
        Ok(total)
    }

    /// Decodes exactly one packet; rejects truncation, trailing bytes, unknown opcodes and
    /// out-of-range fields. Never panics on any input.
    pub fn parse(buf: &[u8]) -> Result<Packet, WireError> {
        let total = Packet::check_exact_frame(buf)?;
        let mut c = Cursor { b: buf, at: 3 };
        let opcode = c.u8()?;
        let flags = c.u8()?;
        if c.take(3)? != [0, 0, 0] {
            return Err(WireError::BadValue("reserved"));
        }
        let psn = c.u32()?;
        let src = c.u32()?;
        let dst = c.u32()?;
        let src_qp = QpNum(c.u32()?);
        let dst_qp = QpNum(c.u32()?);
        let _len = c.u32()?;
        let allowed_flags = match opcode {
            1 | 2 => 3,
            4..=6 | 13 => 1,
            _ => 0,
        };
        if flags & !allowed_flags != 0 {
            return Err(WireError::BadValue("flags"));
        }
        let body = match opcode {
            1 => {
                let (addr, rkey, imm) = (c.u64()?, c.u32()?, c.u32()?);
                Body::Write {
                    addr,
                    rkey,
                    imm: present(flags & 2 != 0, imm, "immediate")?,
                    ack_req: flags & 1 != 0,
                    data: c.bytes()?,
                }
            }
            2 => {
                let imm = c.u32()?;
                Body::Send {
                    imm: present(flags & 2 != 0, imm, "immediate")?,
                    ack_req: flags & 1 != 0,
                    data: c.bytes()?,
                }
            }
            3 => Body::Read {
                addr: c.u64()?,
                rkey: c.u32()?,
                len: c.u32()?,
            },
            4 => {
                let (addr, rkey, compare, operand) = (c.u64()?, c.u32()?, c.u64()?, c.u64()?);
                Body::Atomic {
                    addr,
                    rkey,
                    compare: present(flags & 1 != 0, compare, "compare")?,
                    operand,
                }
            }
            5 => {
                let placement = if flags & 1 != 0 {
                    crate::hierarchy::FlushPlacement::Persistence
                } else {
                    crate::hierarchy::FlushPlacement::Visibility
                };
                Body::Flush {
                    addr: c.u64()?,
                    rkey: c.u32()?,
                    len: c.u64()?,
                    placement,
                }
            }
            6 => Body::NonPostedWrite {
                addr: c.u64()?,
                rkey: c.u32()?,
                data: c.bytes()?,
                atomic: flags & 1 != 0,
            },
            7 => Body::Ack,
            8 => Body::Nak(match c.u8()? {
                0 => NakCode::Rnr,
                1 => NakCode::RemoteAccess,
                2 => NakCode::InvalidRequest,
                _ => return Err(WireError::BadValue("NAK code")),
            }),
            9 => Body::ReadResp(c.bytes()?),
            10 => Body::AtomicResp(c.u64()?),
            11 => Body::Done,
            12 => Body::SFlush { send_psn: c.u32()? },
            13 => {
                let (qkey, imm) = (c.u32()?, c.u32()?);
                let data = c.bytes()?;
                if data.len() as u64 > crate::verbs::UD_MTU {
                    return Err(WireError::BadValue("datagram longer than the UD MTU"));
                }
                Body::Datagram {
                    qkey,
                    imm: present(flags & 1 != 0, imm, "immediate")?,
                    data,
                }
            }
            other => return Err(WireError::UnknownOpcode(other)),
        };
        if c.at != total {
            return Err(WireError::BadValue("body length"));
        }
        Ok(Packet {
            src,
            dst,
            src_qp,
            dst_qp,
            psn,
            body,
        })
    }
}

/// An optional field the flags say is `there`: its value, or, when absent, nothing, and
/// then its bytes must be zero (as `emit` writes them), so every accepted packet has one
/// encoding (the frame fuzzer found a fetch-and-add carrying a compare value).
fn present<T: Default + PartialEq>(
    there: bool,
    value: T,
    what: &'static str,
) -> Result<Option<T>, WireError> {
    if there {
        Ok(Some(value))
    } else if value == T::default() {
        Ok(None)
    } else {
        Err(WireError::BadValue(what))
    }
}

/// Opcode of a [`WriteTrain`] frame (never a [`Packet`] opcode).
const OP_WRITE_TRAIN: u8 = 14;
/// Bytes of a [`WriteTrain`] after the common header: rkey and count.
const TRAIN_HEADER: usize = 8;
/// Bytes of one train entry before its data: address, data length, flags, reserved.
pub const TRAIN_ENTRY: usize = 16;
/// Most WRITEs one [`WriteTrain`] carries (a bound on the work one frame asks for).
pub const MAX_TRAIN: u32 = 1024;
/// Largest WRITE a [`WriteTrain`] carries: framing is what trains save, and it only
/// matters for small WRITEs (larger ones travel as packets).
pub const MAX_TRAIN_WRITE: usize = 4096;

/// A run of RDMA WRITEs (no immediate data) of one QP to one rkey with consecutive PSNs,
/// framed once: the soft wire's doorbell batch. It is only a framing: each WRITE keeps
/// its own PSN (`first_psn + i`), address, data and AckReq bit, and a responder executes
/// and checks each exactly as the [`Packet`] it stands for
/// ([`Rnic::handle_write_train`](crate::rnic::Rnic::handle_write_train)). The simulator
/// never uses it.
///
/// Layout: the 32-byte [`Packet`] header (opcode 14, flags 0, `first_psn`), then the rkey
/// and the number of WRITEs (u32 each), then per WRITE: address (u64), data length (u32),
/// flags (u8, bit 0 AckReq), three zero bytes, and the data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WriteTrain<'a> {
    /// Sending node.
    pub src: NodeId,
    /// Receiving node.
    pub dst: NodeId,
    /// Sending QP.
    pub src_qp: QpNum,
    /// Receiving QP.
    pub dst_qp: QpNum,
    /// PSN of the first WRITE.
    pub first_psn: Psn,
    /// Remote key of every WRITE.
    pub rkey: u32,
    count: u32,
    /// The entries, validated by [`parse`](Self::parse).
    entries: &'a [u8],
}

/// One WRITE of a [`WriteTrain`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TrainWrite<'a> {
    /// Its PSN.
    pub psn: Psn,
    /// Remote address.
    pub addr: u64,
    /// AckReq bit.
    pub ack_req: bool,
    /// Data.
    pub data: &'a [u8],
}

impl<'a> TrainWrite<'a> {
    /// The [`Packet`] this WRITE stands for.
    pub fn to_packet(&self, train: &WriteTrain<'_>) -> Packet {
        Packet {
            src: train.src,
            dst: train.dst,
            src_qp: train.src_qp,
            dst_qp: train.dst_qp,
            psn: self.psn,
            body: Body::Write {
                addr: self.addr,
                rkey: train.rkey,
                data: Bytes::copy_from(self.data),
                imm: None,
                ack_req: self.ack_req,
            },
        }
    }
}

impl<'a> WriteTrain<'a> {
    /// Number of WRITEs.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// True if it carries no WRITE (never for a parsed train).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The WRITEs in PSN order. Never panics: [`parse`](Self::parse) validated them.
    pub fn writes(&self) -> impl Iterator<Item = TrainWrite<'a>> + 'a {
        let (first, mut rest, count) = (self.first_psn, self.entries, self.count);
        (0..count).map(move |i| {
            let addr = u64::from_le_bytes(rest[..8].try_into().expect("validated"));
            let len = u32::from_le_bytes(rest[8..12].try_into().expect("validated")) as usize;
            let ack_req = rest[12] & 1 != 0;
            let data = &rest[TRAIN_ENTRY..TRAIN_ENTRY + len];
            rest = &rest[TRAIN_ENTRY + len..];
            TrainWrite {
                psn: first.wrapping_add(i),
                addr,
                ack_req,
                data,
            }
        })
    }

    /// Decodes exactly one train; rejects truncation, trailing bytes, another opcode,
    /// nonzero flags or reserved bytes, an empty or oversized train, and entries whose
    /// lengths do not add up to the body. Never panics on any input.
    pub fn parse(buf: &'a [u8]) -> Result<WriteTrain<'a>, WireError> {
        let total = Packet::check_exact_frame(buf)?;
        let mut c = Cursor { b: buf, at: 3 };
        let opcode = c.u8()?;
        if opcode != OP_WRITE_TRAIN {
            return Err(WireError::UnknownOpcode(opcode));
        }
        if c.take(4)? != [0, 0, 0, 0] {
            return Err(WireError::BadValue("flags"));
        }
        let first_psn = c.u32()?;
        let src = c.u32()?;
        let dst = c.u32()?;
        let src_qp = QpNum(c.u32()?);
        let dst_qp = QpNum(c.u32()?);
        let _len = c.u32()?;
        let rkey = c.u32()?;
        let count = c.u32()?;
        if count == 0 || count > MAX_TRAIN {
            return Err(WireError::BadValue("train length"));
        }
        let entries_at = c.at;
        for _ in 0..count {
            let _addr = c.u64()?;
            let len = c.u32()? as usize;
            if len > MAX_TRAIN_WRITE {
                return Err(WireError::BadValue("payload length"));
            }
            let flags = c.take(4)?;
            if flags[0] & !1 != 0 || flags[1..] != [0, 0, 0] {
                return Err(WireError::BadValue("train entry flags"));
            }
            c.take(len)?;
        }
        if c.at != total {
            return Err(WireError::BadValue("body length"));
        }
        Ok(WriteTrain {
            src,
            dst,
            src_qp,
            dst_qp,
            first_psn,
            rkey,
            count,
            entries: &buf[entries_at..],
        })
    }
}

/// The open end of a [`WriteTrain`] being encoded at the end of an output buffer: where it
/// starts and which WRITE may join it next. Valid only while nothing else is appended to
/// (or removed from) the buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TrainTail {
    start: usize,
    src: NodeId,
    dst: NodeId,
    src_qp: QpNum,
    dst_qp: QpNum,
    rkey: u32,
    next_psn: Psn,
    count: u32,
}

/// A WRITE without immediate data as a write train encodes it, borrowed from wherever it
/// lies: a [`Packet`] ([`WriteRef::of`]) or the requester's work request, which a runtime
/// encodes without building a packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WriteRef<'a> {
    /// Sending node.
    pub src: NodeId,
    /// Receiving node.
    pub dst: NodeId,
    /// Sending QP.
    pub src_qp: QpNum,
    /// Receiving QP.
    pub dst_qp: QpNum,
    /// The request's PSN.
    pub psn: Psn,
    /// Remote address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Payload.
    pub data: &'a [u8],
    /// Asks for an acknowledgement.
    pub ack_req: bool,
}

impl<'a> WriteRef<'a> {
    /// `pkt` if it is a WRITE without immediate data.
    pub fn of(pkt: &'a Packet) -> Option<WriteRef<'a>> {
        match &pkt.body {
            Body::Write {
                addr,
                rkey,
                data,
                imm: None,
                ack_req,
            } => Some(WriteRef {
                src: pkt.src,
                dst: pkt.dst,
                src_qp: pkt.src_qp,
                dst_qp: pkt.dst_qp,
                psn: pkt.psn,
                addr: *addr,
                rkey: *rkey,
                data,
                ack_req: *ack_req,
            }),
            _ => None,
        }
    }

    /// The packet it stands for.
    pub fn to_packet(&self) -> Packet {
        Packet {
            src: self.src,
            dst: self.dst,
            src_qp: self.src_qp,
            dst_qp: self.dst_qp,
            psn: self.psn,
            body: Body::Write {
                addr: self.addr,
                rkey: self.rkey,
                data: Bytes::copy_from(self.data),
                imm: None,
                ack_req: self.ack_req,
            },
        }
    }
}

impl TrainTail {
    /// Appends to `out` a train holding only `pkt` and returns its open end; `None` (and
    /// nothing written) unless `pkt` is a WRITE without immediate data.
    pub fn start(pkt: &Packet, out: &mut Vec<u8>) -> Option<TrainTail> {
        TrainTail::start_write(&WriteRef::of(pkt)?, out)
    }

    /// [`start`](Self::start) for a WRITE where it lies; `None` (and nothing written) if
    /// its payload is too long for a train.
    pub fn start_write(w: &WriteRef<'_>, out: &mut Vec<u8>) -> Option<TrainTail> {
        if w.data.len() > MAX_TRAIN_WRITE {
            return None;
        }
        let start = out.len();
        // The frame's header and the train's, built apart and appended at once (one
        // capacity check, not ten).
        let mut head = [0u8; WIRE_HEADER + TRAIN_HEADER];
        let mut at = 0;
        for field in [
            &WIRE_MAGIC.to_le_bytes()[..],
            &[WIRE_VERSION, OP_WRITE_TRAIN, 0, 0, 0, 0],
            &w.psn.to_le_bytes(),
            &w.src.to_le_bytes(),
            &w.dst.to_le_bytes(),
            &w.src_qp.0.to_le_bytes(),
            &w.dst_qp.0.to_le_bytes(),
            &(TRAIN_HEADER as u32).to_le_bytes(),
            &w.rkey.to_le_bytes(),
            &0u32.to_le_bytes(),
        ] {
            head[at..at + field.len()].copy_from_slice(field);
            at += field.len();
        }
        debug_assert_eq!(at, head.len());
        out.extend_from_slice(&head);
        let mut tail = TrainTail {
            start,
            src: w.src,
            dst: w.dst,
            src_qp: w.src_qp,
            dst_qp: w.dst_qp,
            rkey: w.rkey,
            next_psn: w.psn,
            count: 0,
        };
        let joined = tail.push_write(w, out);
        debug_assert!(joined);
        Some(tail)
    }

    /// Appends `pkt` to the train if it may join (a WRITE without immediate data of the
    /// same QPs and rkey with the next PSN, and room left); `false` (nothing written)
    /// otherwise.
    pub fn push(&mut self, pkt: &Packet, out: &mut Vec<u8>) -> bool {
        WriteRef::of(pkt).is_some_and(|w| self.push_write(&w, out))
    }

    /// [`push`](Self::push) for a WRITE where it lies.
    // Inlined into the runtime's encoder: a streamed WRITE's call cost as much as its
    // checks.
    #[inline]
    pub fn push_write(&mut self, w: &WriteRef<'_>, out: &mut Vec<u8>) -> bool {
        if self.count >= MAX_TRAIN
            || w.data.len() > MAX_TRAIN_WRITE
            || w.rkey != self.rkey
            || w.psn != self.next_psn
            || (w.src, w.dst, w.src_qp, w.dst_qp) != (self.src, self.dst, self.src_qp, self.dst_qp)
        {
            return false;
        }
        if let Ok(line) = <&[u8; 64]>::try_from(w.data) {
            // A cache line (a stream's WRITE): its entry (address, length, flags) and data
            // built in place and copied into the buffer as one array of a known size,
            // which takes a few moves where appending slices takes two calls of `memcpy`.
            let mut entry = [0u8; TRAIN_ENTRY + 64];
            entry[..TRAIN_ENTRY].copy_from_slice(&entry_head(w));
            entry[TRAIN_ENTRY..].copy_from_slice(line);
            out.reserve(entry.len());
            let len = out.len();
            // SAFETY: the `entry.len()` bytes after `len` are reserved (above), a local
            // array does not overlap them, and all of them are written before `set_len`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    entry.as_ptr(),
                    out.as_mut_ptr().add(len),
                    entry.len(),
                );
                out.set_len(len + entry.len());
            }
        } else {
            // The entry's head built apart and appended with its data after one
            // reservation: one capacity check, not four.
            let head = entry_head(w);
            out.reserve(head.len() + w.data.len());
            out.extend_from_slice(&head);
            out.extend_from_slice(w.data);
        }
        self.count += 1;
        self.next_psn = self.next_psn.wrapping_add(1);
        let start = self.start;
        let body_len = (out.len() - start - WIRE_HEADER) as u32;
        // The frame's length and the train's count, under one bounds check.
        let h = &mut out[start..start + WIRE_HEADER + 8];
        h[28..WIRE_HEADER].copy_from_slice(&body_len.to_le_bytes());
        h[WIRE_HEADER + 4..].copy_from_slice(&self.count.to_le_bytes());
        true
    }
}

/// A train entry's head for `w`: its address, its length and its flags (see
/// [`WriteTrain`]).
#[inline(always)]
fn entry_head(w: &WriteRef<'_>) -> [u8; TRAIN_ENTRY] {
    let mut head = [0u8; TRAIN_ENTRY];
    head[..8].copy_from_slice(&w.addr.to_le_bytes());
    head[8..12].copy_from_slice(&(w.data.len() as u32).to_le_bytes());
    head[12] = w.ack_req as u8;
    head
}

/// One frame of the soft wire: a [`Packet`] or a [`WriteTrain`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// One packet.
    Packet(Packet),
    /// A run of WRITEs.
    WriteTrain(WriteTrain<'a>),
}

impl<'a> Frame<'a> {
    /// Decodes exactly one frame (see [`Packet::parse`] and [`WriteTrain::parse`]).
    pub fn parse(buf: &'a [u8]) -> Result<Frame<'a>, WireError> {
        if buf.len() > 3 && buf[3] == OP_WRITE_TRAIN {
            WriteTrain::parse(buf).map(Frame::WriteTrain)
        } else {
            Packet::parse(buf).map(Frame::Packet)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::Bytes;
    use crate::hierarchy::FlushPlacement;
    use proptest::prelude::*;

    /// The general encoding of a train entry (`push_write`'s path for any length), which
    /// its cache-line path must match byte for byte.
    fn entry_bytes(addr: u64, data: &[u8], ack_req: bool) -> Vec<u8> {
        let mut e = addr.to_le_bytes().to_vec();
        e.extend_from_slice(&(data.len() as u32).to_le_bytes());
        e.extend_from_slice(&[ack_req as u8, 0, 0, 0]);
        e.extend_from_slice(data);
        e
    }

    proptest! {
        #[test]
        fn a_train_of_lines_and_other_writes_encodes_as_its_entries(
            writes in prop::collection::vec(
                (any::<u64>(), prop_oneof![Just(64usize), 0..200usize], any::<u8>(), any::<bool>()),
                1..40,
            ),
            lead in 0..100usize,
        ) {
            // A buffer that starts short, so lines are appended across its reallocations,
            // after unrelated bytes.
            let mut out = vec![0xa5u8; lead];
            out.shrink_to_fit();
            let mut expect = out.clone();
            fn w(i: usize, (addr, _, _, ack_req): (u64, usize, u8, bool), data: &[u8]) -> WriteRef<'_> {
                WriteRef { src: 1, dst: 2, src_qp: QpNum(3), dst_qp: QpNum(4), psn: 7 + i as u32, addr, rkey: 9, data, ack_req }
            }
            let datas: Vec<Vec<u8>> = writes.iter().map(|&(_, len, fill, _)| vec![fill; len]).collect();
            let mut tail = TrainTail::start_write(&w(0, writes[0], &datas[0]), &mut out).expect("a WRITE");
            for (i, (&x, d)) in writes.iter().zip(&datas).enumerate().skip(1) {
                prop_assert!(tail.push_write(&w(i, x, d), &mut out));
            }
            // The frame: its header and the train's, then the entries.
            let body: usize = TRAIN_HEADER + datas.iter().map(|d| TRAIN_ENTRY + d.len()).sum::<usize>();
            expect.extend_from_slice(&WIRE_MAGIC.to_le_bytes());
            expect.extend_from_slice(&[WIRE_VERSION, OP_WRITE_TRAIN, 0, 0, 0, 0]);
            for v in [7u32, 1, 2, 3, 4, body as u32, 9, writes.len() as u32] {
                expect.extend_from_slice(&v.to_le_bytes());
            }
            for (&(addr, _, _, ack_req), d) in writes.iter().zip(&datas) {
                expect.extend_from_slice(&entry_bytes(addr, d, ack_req));
            }
            prop_assert_eq!(&out, &expect);
            let train = WriteTrain::parse(&out[lead..]).expect("parses");
            let got: Vec<(u64, bool, Vec<u8>)> = train.writes().map(|t| (t.addr, t.ack_req, t.data.to_vec())).collect();
            let want: Vec<(u64, bool, Vec<u8>)> = writes.iter().zip(&datas).map(|(&(a, _, _, k), d)| (a, k, d.clone())).collect();
            prop_assert_eq!(got, want);
        }
    }

    fn bodies() -> impl Strategy<Value = Body> {
        let data = prop::collection::vec(any::<u8>(), 0..200).prop_map(Bytes::from);
        prop_oneof![
            (
                any::<u64>(),
                any::<u32>(),
                data.clone(),
                any::<Option<u32>>(),
                any::<bool>()
            )
                .prop_map(|(addr, rkey, data, imm, ack_req)| Body::Write {
                    addr,
                    rkey,
                    data,
                    imm,
                    ack_req
                }),
            (data.clone(), any::<Option<u32>>(), any::<bool>())
                .prop_map(|(data, imm, ack_req)| Body::Send { data, imm, ack_req }),
            (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(addr, rkey, len)| Body::Read {
                addr,
                rkey,
                len
            }),
            (
                any::<u64>(),
                any::<u32>(),
                any::<Option<u64>>(),
                any::<u64>()
            )
                .prop_map(|(addr, rkey, compare, operand)| Body::Atomic {
                    addr,
                    rkey,
                    compare,
                    operand
                }),
            (any::<u64>(), any::<u32>(), any::<u64>(), any::<bool>()).prop_map(
                |(addr, rkey, len, p)| Body::Flush {
                    addr,
                    rkey,
                    len,
                    placement: if p {
                        FlushPlacement::Persistence
                    } else {
                        FlushPlacement::Visibility
                    }
                }
            ),
            (any::<u64>(), any::<u32>(), data.clone(), any::<bool>()).prop_map(
                |(addr, rkey, data, atomic)| Body::NonPostedWrite {
                    addr,
                    rkey,
                    data,
                    atomic
                }
            ),
            Just(Body::Ack),
            Just(Body::Done),
            prop_oneof![
                Just(NakCode::Rnr),
                Just(NakCode::RemoteAccess),
                Just(NakCode::InvalidRequest)
            ]
            .prop_map(Body::Nak),
            data.clone().prop_map(Body::ReadResp),
            any::<u64>().prop_map(Body::AtomicResp),
            any::<u32>().prop_map(|send_psn| Body::SFlush { send_psn }),
            (any::<u32>(), data, any::<Option<u32>>())
                .prop_map(|(qkey, data, imm)| Body::Datagram { qkey, data, imm }),
        ]
    }

    fn packets() -> impl Strategy<Value = Packet> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            bodies(),
        )
            .prop_map(|(src, dst, sq, dq, psn, body)| Packet {
                src,
                dst,
                src_qp: QpNum(sq),
                dst_qp: QpNum(dq),
                psn,
                body,
            })
    }

    proptest! {
        #[test]
        fn every_packet_round_trips(p in packets()) {
            let b = p.emit();
            prop_assert_eq!(Packet::frame_len(&b).unwrap(), Some(b.len()));
            prop_assert_eq!(Packet::parse(&b).unwrap(), p);
        }

        #[test]
        fn truncation_and_trailing_bytes_are_refused(p in packets()) {
            let b = p.emit();
            for n in 0..b.len() {
                prop_assert!(Packet::parse(&b[..n]).is_err());
            }
            let mut longer = b.clone();
            longer.push(0);
            prop_assert_eq!(Packet::parse(&longer), Err(WireError::Trailing(1)));
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..128)) {
            let _ = Packet::parse(&b);
            let _ = Packet::frame_len(&b);
        }

        /// A packet has one encoding: flipping any byte of a valid one gives bytes that
        /// are refused or decode to another packet, never to the same one.
        #[test]
        fn every_byte_of_a_packet_matters(p in packets(), at in any::<prop::sample::Index>(), x in 1u8..) {
            let mut b = p.emit();
            let i = at.index(b.len());
            b[i] ^= x;
            if let Ok(q) = Packet::parse(&b) {
                prop_assert_ne!(&q, &p);
                prop_assert_eq!(q.emit(), b);
            }
        }
    }

    /// A packet between two fixed QPs with `body`.
    fn mk(body: Body) -> Packet {
        Packet {
            src: 1,
            dst: 2,
            src_qp: QpNum(3),
            dst_qp: QpNum(4),
            psn: 5,
            body,
        }
    }

    /// The frame fuzzer's find: fields the flags say are absent (a fetch-and-add's compare
    /// value, a WRITE's or SEND's or datagram's immediate) were accepted with any bytes and
    /// re-encoded as zero. They must be zero.
    #[test]
    fn fields_the_flags_leave_out_must_be_zero() {
        // (packet, offset of the absent field from the body's start, what the error names)
        let cases = [
            (
                mk(Body::Atomic {
                    addr: 64,
                    rkey: 7,
                    compare: None,
                    operand: 1,
                }),
                12,
                "compare",
            ),
            (
                mk(Body::Write {
                    addr: 64,
                    rkey: 7,
                    imm: None,
                    ack_req: true,
                    data: Bytes::from(vec![1u8; 8]),
                }),
                12,
                "immediate",
            ),
            (
                mk(Body::Send {
                    imm: None,
                    ack_req: false,
                    data: Bytes::from(vec![1u8; 8]),
                }),
                0,
                "immediate",
            ),
            (
                mk(Body::Datagram {
                    qkey: 9,
                    imm: None,
                    data: Bytes::from(vec![1u8; 8]),
                }),
                4,
                "immediate",
            ),
        ];
        for (p, off, what) in cases {
            let b = p.emit();
            assert_eq!(Packet::parse(&b).unwrap(), p);
            let mut bad = b.clone();
            bad[WIRE_HEADER + off] = 0xff;
            assert_eq!(Packet::parse(&bad), Err(WireError::BadValue(what)), "{p:?}");
        }
    }

    #[test]
    fn unknown_opcodes_and_flags_are_named() {
        let p = Packet {
            src: 1,
            dst: 2,
            src_qp: QpNum(3),
            dst_qp: QpNum(4),
            psn: 5,
            body: Body::Ack,
        };
        let mut b = p.emit();
        b[3] = 99;
        assert_eq!(Packet::parse(&b), Err(WireError::UnknownOpcode(99)));
        let mut b = p.emit();
        b[4] = 1;
        assert_eq!(Packet::parse(&b), Err(WireError::BadValue("flags")));
        let mut b = p.emit();
        b[0] = 0;
        assert_eq!(Packet::parse(&b), Err(WireError::BadMagic));
    }

    #[test]
    fn new_bodies_refuse_bad_flags_and_oversized_datagrams() {
        let mut b = mk(Body::SFlush { send_psn: 9 }).emit();
        b[4] = 1;
        assert_eq!(Packet::parse(&b), Err(WireError::BadValue("flags")));
        let dg = |n: usize| {
            mk(Body::Datagram {
                qkey: 7,
                data: Bytes::from(vec![1u8; n]),
                imm: Some(1),
            })
        };
        let ok = dg(crate::verbs::UD_MTU as usize);
        assert_eq!(Packet::parse(&ok.emit()).unwrap(), ok);
        let mut b = ok.emit();
        b[4] = 3;
        assert_eq!(Packet::parse(&b), Err(WireError::BadValue("flags")));
        assert_eq!(
            Packet::parse(&dg(crate::verbs::UD_MTU as usize + 1).emit()),
            Err(WireError::BadValue("datagram longer than the UD MTU"))
        );
    }
}
