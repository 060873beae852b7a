//! The cell every baseline message travels in: a 16-byte header, the body, an 8-byte
//! trailer.
//!
//! **When a polled cell is complete.** A poller (FaRM's ring, seed 003 Figure 2(b)) must
//! not take a cell whose header has landed while its body is still arriving. Checking
//! that the trailer carries the expected sequence number is not enough, and was a bug
//! here: the trailer's offset comes from the header's length, so the poller reads
//! whatever an earlier, longer cell left at that offset in the reused slot, and object
//! bytes can hold exactly that number (a scan reply's objects start with their keys, and
//! the trailer of an `n`-object reply sits where an older reply had object `n`'s key).
//! Nor may a poller rely on the order in which one WRITE's bytes become visible, which
//! RDMA does not define. What the model and RC (and UC) do guarantee is that posted
//! requests of one queue pair are executed in order and become visible in order
//! (`remora_model::rnic`, "posted operations are executed in order on arrival";
//! `remora_model::hierarchy`, "Visibility is in IIO order"). So the sender follows the
//! cell's WRITE with an 8-byte WRITE of the sequence number into the slot's completion
//! flag (L5's mailbox pattern, Figure 2(e)), the poller waits for the flag, and the
//! header and trailer are then checked as a consistency test (a mismatch is a torn or
//! misplaced cell and is rejected). A flag only ever holds sequence numbers of cells
//! written into its slot, so a stale flag is never the expected value.
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | sequence number (≥ 1) |
//! | 8..12 | body length |
//! | 12 | status: 0 ok, 1 rejected (body: the reason), 2 unsupported (body: the reason) |
//! | 13 | kind: 0 message (request or reply frames), 1 ScaleRPC warm-up pointer |
//! | 14..16 | magic `CL` |
//! | 16.. | body, padded to 8 bytes |
//! | then 8 | sequence number again |
//!
//! A message body is one or more [`crate::proto`] frames back to back (several for a
//! batch, §5.5); a warm-up body is the client's address (u64), rkey (u32) and length (u32)
//! of the message body, which the server READs (Figure 2(g)).

use crate::proto::{ReplyFrame, Request};
use remora_verbs::{Opcode, Payload, QpNum, Remote, SendWr, Verbs, VerbsError};

/// Header bytes.
pub const CELL_HEADER: u64 = 16;
/// Trailer bytes.
pub const CELL_TRAILER: u64 = 8;

/// Posts, unsignaled, the 8-byte WRITE of `seq` into the completion flag (or mailbox)
/// at `word` that marks a cell complete: after the cell's own WRITE on the same queue
/// pair, so it becomes visible after the whole cell (see the module's notes).
pub fn post_seq_word<V: Verbs>(v: &V, qp: QpNum, seq: u64, word: Remote) -> Result<(), VerbsError> {
    let wr = SendWr::new(
        seq,
        Opcode::Write,
        Payload::inline(seq.to_le_bytes()),
        Some(word),
    );
    v.post_send(qp, wr.signaled(false))
}

/// Bytes of a cell with `body` bytes of body.
pub fn cell_bytes(body: u64) -> u64 {
    CELL_HEADER + body.next_multiple_of(8) + CELL_TRAILER
}

/// What a cell says about its request(s).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Processed; the body holds the replies.
    Ok = 0,
    /// Refused as malformed; the body holds the reason.
    Rejected = 1,
    /// Well-formed but beyond the design (e.g. a FaSST reply over the UD MTU).
    Unsupported = 2,
}

/// What a cell's body is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Request or reply frames.
    Message = 0,
    /// A ScaleRPC warm-up: where the server READs the message body.
    WarmUp = 1,
}

/// A parsed cell header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Sequence number.
    pub seq: u64,
    /// Body bytes.
    pub len: u32,
    /// Status.
    pub status: Status,
    /// Kind.
    pub kind: Kind,
}

impl Header {
    /// Parses 16 header bytes; `None` for anything that is not a cell header (a slot not
    /// yet written, a zeroed slot, garbage).
    pub fn parse(b: &[u8]) -> Option<Header> {
        if b.len() < CELL_HEADER as usize || &b[14..16] != b"CL" {
            return None;
        }
        let seq = u64::from_le_bytes(b[0..8].try_into().ok()?);
        let len = u32::from_le_bytes(b[8..12].try_into().ok()?);
        let status = match b[12] {
            0 => Status::Ok,
            1 => Status::Rejected,
            2 => Status::Unsupported,
            _ => return None,
        };
        let kind = match b[13] {
            0 => Kind::Message,
            1 => Kind::WarmUp,
            _ => return None,
        };
        (seq != 0).then_some(Header {
            seq,
            len,
            status,
            kind,
        })
    }

    /// Offset of the trailer in the cell.
    pub fn trailer_at(&self) -> u64 {
        CELL_HEADER + (self.len as u64).next_multiple_of(8)
    }
}

/// Encodes a cell.
pub fn encode(seq: u64, kind: Kind, status: Status, body: &[u8]) -> Vec<u8> {
    assert!(seq != 0, "sequence numbers start at 1");
    let mut v = Vec::with_capacity(cell_bytes(body.len() as u64) as usize);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(body.len() as u32).to_le_bytes());
    v.push(status as u8);
    v.push(kind as u8);
    v.extend_from_slice(b"CL");
    v.extend_from_slice(body);
    v.resize(
        (CELL_HEADER + (body.len() as u64).next_multiple_of(8)) as usize,
        0,
    );
    v.extend_from_slice(&seq.to_le_bytes());
    v
}

/// The request frames of a message body, or why they are malformed.
pub fn parse_requests(mut body: &[u8]) -> Result<Vec<Request>, String> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let (r, used) = Request::parse(body).map_err(|e| e.to_string())?;
        out.push(r);
        body = &body[used..];
    }
    if out.is_empty() {
        return Err("empty request cell".into());
    }
    Ok(out)
}

/// The reply frames of a message body.
pub fn parse_replies(mut body: &[u8]) -> Result<Vec<ReplyFrame>, String> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let (r, used) = ReplyFrame::parse(body).map_err(|e| e.to_string())?;
        out.push(r);
        body = &body[used..];
    }
    Ok(out)
}

/// A ScaleRPC warm-up body: where the message body is in the client's memory.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WarmUp {
    /// Address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Bytes.
    pub len: u32,
}

impl WarmUp {
    /// Body bytes.
    pub fn to_bytes(self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(&self.addr.to_le_bytes());
        v.extend_from_slice(&self.rkey.to_le_bytes());
        v.extend_from_slice(&self.len.to_le_bytes());
        v
    }

    /// Parses a body.
    pub fn parse(b: &[u8]) -> Result<WarmUp, String> {
        if b.len() != 16 {
            return Err(format!("warm-up body of {} bytes, expected 16", b.len()));
        }
        Ok(WarmUp {
            addr: u64::from_le_bytes(b[0..8].try_into().expect("8")),
            rkey: u32::from_le_bytes(b[8..12].try_into().expect("4")),
            len: u32::from_le_bytes(b[12..16].try_into().expect("4")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Op;

    #[test]
    fn cells_round_trip_and_reject_garbage() {
        let body = Request {
            conn: 1,
            seq: 5,
            op: Op::Put {
                key: 3,
                value: vec![7; 13],
            },
        }
        .to_bytes();
        let c = encode(5, Kind::Message, Status::Ok, &body);
        assert_eq!(c.len() as u64, cell_bytes(body.len() as u64));
        let h = Header::parse(&c).unwrap();
        assert_eq!((h.seq, h.len as usize), (5, body.len()));
        let t = h.trailer_at() as usize;
        assert_eq!(u64::from_le_bytes(c[t..t + 8].try_into().unwrap()), 5);
        let reqs = parse_requests(&c[16..16 + body.len()]).unwrap();
        assert_eq!(reqs.len(), 1);
        assert!(Header::parse(&[0; 16]).is_none());
        let mut bad = body.clone();
        bad[40] ^= 1;
        assert!(parse_requests(&bad).unwrap_err().contains("checksum"));
        assert!(parse_requests(&[]).is_err());
    }
}
