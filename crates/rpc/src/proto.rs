//! The request and reply frames every design carries, one typed struct each with `emit`
//! and `parse`. Requests sit in PM (a durable RPC's redo log, a baseline's receive ring)
//! where recovery reads them after a crash, so `parse` trusts nothing: it rejects
//! truncation, unknown operators, lengths past the buffer, and any flipped byte
//! (CRC-32C over the whole frame).
//!
//! Request layout (little-endian), 32-byte header then the value:
//!
//! | bytes | field |
//! |---|---|
//! | 0..2 | magic `RQ` |
//! | 2 | operator: 1 Get, 2 Put, 3 Scan |
//! | 3 | flags (must be 0) |
//! | 4..8 | connection id |
//! | 8..16 | sequence number (per connection, from 1) |
//! | 16..24 | key |
//! | 24..28 | Put: value length; Scan: object count; Get: 0 |
//! | 28..32 | CRC-32C of header and value with this field zero |
//!
//! Reply layout: magic `RP`, status ([`ReplyStatus`]: 0 executed, 1 key outside the store,
//! 2 value larger than a slot, 3 Scan beyond the connection's `max_scan`), 1 reserved byte (0), connection id u32, sequence u64, value
//! length u32, CRC-32C u32 (24 bytes), then the value (none when refused).

use crate::api::{Op, Reply, ReplyStatus};

/// Request header bytes.
pub const REQUEST_HEADER: usize = 32;
/// Reply header bytes.
pub const REPLY_HEADER: usize = 24;

/// Why a frame was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than the frame needs.
    #[error("truncated frame: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// Not a frame of this kind.
    #[error("bad magic {0:02x?}")]
    BadMagic([u8; 2]),
    /// Unknown operator or flag bits.
    #[error("unknown {what} {value}")]
    Unknown {
        /// Field name.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// The checksum does not match: torn or corrupt.
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// Stored CRC.
        stored: u32,
        /// Computed CRC.
        computed: u32,
    },
}

/// One request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The sender's connection.
    pub conn: u32,
    /// Sequence number on that connection (from 1; 0 is never used, so a zeroed log slot
    /// is never a request).
    pub seq: u64,
    /// The operation.
    pub op: Op,
}

fn crc_with_zero_field(bytes: &[u8], field: std::ops::Range<usize>) -> u32 {
    let mut crc = remora::checksum::crc32c(&bytes[..field.start]);
    crc = remora::checksum::crc32c_append(crc, &[0; 4]);
    remora::checksum::crc32c_append(crc, &bytes[field.end..])
}

fn need(have: usize, need: usize) -> Result<(), FrameError> {
    if have < need {
        Err(FrameError::Truncated { need, have })
    } else {
        Ok(())
    }
}

/// A request's header as read before its value: whose request it is and how long its frame
/// is. Its checksum is not checked (it covers the value too): a frame is trusted only once
/// [`Request::parse`] has read it whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// The operator byte (1 Get, 2 Put, 3 Scan; not checked here).
    pub code: u8,
    /// The connection.
    pub conn: u32,
    /// The sequence number.
    pub seq: u64,
    /// Bytes of the whole frame, header and value.
    pub frame_len: usize,
}

impl RequestHead {
    /// The header at the start of `b`: refused if truncated or without the magic.
    pub fn parse(b: &[u8]) -> Result<RequestHead, FrameError> {
        need(b.len(), REQUEST_HEADER)?;
        if &b[0..2] != b"RQ" {
            return Err(FrameError::BadMagic([b[0], b[1]]));
        }
        let arg = u32::from_le_bytes(b[24..28].try_into().unwrap());
        Ok(RequestHead {
            code: b[2],
            conn: u32::from_le_bytes(b[4..8].try_into().unwrap()),
            seq: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            frame_len: REQUEST_HEADER + if b[2] == 2 { arg as usize } else { 0 },
        })
    }
}

impl Request {
    /// Bytes [`emit`](Self::emit) writes.
    pub fn frame_len(&self) -> usize {
        REQUEST_HEADER
            + match &self.op {
                Op::Put { value, .. } => value.len(),
                _ => 0,
            }
    }

    /// Appends the frame to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let (code, key, arg, value): (u8, u64, u32, &[u8]) = match &self.op {
            Op::Get { key } => (1, *key, 0, &[]),
            Op::Put { key, value } => (2, *key, value.len() as u32, value),
            Op::Scan { key, count } => (3, *key, *count, &[]),
        };
        out.extend_from_slice(b"RQ");
        out.push(code);
        out.push(0);
        out.extend_from_slice(&self.conn.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&key.to_le_bytes());
        out.extend_from_slice(&arg.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(value);
        let crc = crc_with_zero_field(&out[start..], 28..32);
        out[start + 28..start + 32].copy_from_slice(&crc.to_le_bytes());
    }

    /// The frame as a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.frame_len());
        self.emit(&mut v);
        v
    }

    /// Parses a frame at the start of `b`; returns it and the bytes it used.
    pub fn parse(b: &[u8]) -> Result<(Request, usize), FrameError> {
        let RequestHead {
            conn,
            seq,
            frame_len: len,
            ..
        } = RequestHead::parse(b)?;
        if b[3] != 0 {
            return Err(FrameError::Unknown {
                what: "request flags",
                value: b[3] as u64,
            });
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let key = u64::from_le_bytes(b[16..24].try_into().unwrap());
        let arg = u32_at(24);
        need(b.len(), len)?;
        let stored = u32_at(28);
        let computed = crc_with_zero_field(&b[..len], 28..32);
        if stored != computed {
            return Err(FrameError::Checksum { stored, computed });
        }
        let op = match b[2] {
            1 if arg == 0 => Op::Get { key },
            2 => Op::Put {
                key,
                value: b[REQUEST_HEADER..len].to_vec(),
            },
            3 => Op::Scan { key, count: arg },
            1 => {
                return Err(FrameError::Unknown {
                    what: "Get argument",
                    value: arg as u64,
                })
            }
            other => {
                return Err(FrameError::Unknown {
                    what: "operator",
                    value: other as u64,
                })
            }
        };
        Ok((Request { conn, seq, op }, len))
    }
}

/// A reply on a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyFrame {
    /// The connection.
    pub conn: u32,
    /// The result.
    pub reply: Reply,
}

impl ReplyFrame {
    /// Bytes [`emit`](Self::emit) writes.
    pub fn frame_len(&self) -> usize {
        REPLY_HEADER + self.reply.value.len()
    }

    /// Appends the frame to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(b"RP");
        out.extend_from_slice(&[self.reply.status.code(), 0]);
        out.extend_from_slice(&self.conn.to_le_bytes());
        out.extend_from_slice(&self.reply.seq.to_le_bytes());
        out.extend_from_slice(&(self.reply.value.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.reply.value);
        let crc = crc_with_zero_field(&out[start..], 20..24);
        out[start + 20..start + 24].copy_from_slice(&crc.to_le_bytes());
    }

    /// The frame as a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.frame_len());
        self.emit(&mut v);
        v
    }

    /// Parses a frame at the start of `b`; returns it and the bytes it used.
    pub fn parse(b: &[u8]) -> Result<(ReplyFrame, usize), FrameError> {
        need(b.len(), REPLY_HEADER)?;
        if &b[0..2] != b"RP" {
            return Err(FrameError::BadMagic([b[0], b[1]]));
        }
        let status = match ReplyStatus::from_code(b[2]) {
            Some(s) if b[3] == 0 => s,
            _ => {
                return Err(FrameError::Unknown {
                    what: "reply status",
                    value: u16::from_le_bytes([b[2], b[3]]) as u64,
                })
            }
        };
        let conn = u32::from_le_bytes(b[4..8].try_into().unwrap());
        let seq = u64::from_le_bytes(b[8..16].try_into().unwrap());
        let vlen = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
        if status != ReplyStatus::Ok && vlen != 0 {
            return Err(FrameError::Unknown {
                what: "value length of a refusal",
                value: vlen as u64,
            });
        }
        let len = REPLY_HEADER + vlen;
        need(b.len(), len)?;
        let stored = u32::from_le_bytes(b[20..24].try_into().unwrap());
        let computed = crc_with_zero_field(&b[..len], 20..24);
        if stored != computed {
            return Err(FrameError::Checksum { stored, computed });
        }
        Ok((
            ReplyFrame {
                conn,
                reply: Reply {
                    seq,
                    status,
                    value: b[REPLY_HEADER..len].to_vec(),
                },
            },
            len,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u64>().prop_map(|key| Op::Get { key }),
            (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..200))
                .prop_map(|(key, value)| Op::Put { key, value }),
            (any::<u64>(), any::<u32>()).prop_map(|(key, count)| Op::Scan { key, count }),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip_and_reject_truncation_and_flips(
            conn in any::<u32>(), seq in any::<u64>(), op in op(), flip in any::<prop::sample::Index>()
        ) {
            let r = Request { conn, seq, op };
            let b = r.to_bytes();
            prop_assert_eq!(b.len(), r.frame_len());
            prop_assert_eq!(Request::parse(&b).unwrap(), (r.clone(), b.len()));
            for cut in [0, 1, REQUEST_HEADER - 1, b.len() - 1] {
                if cut < b.len() {
                    prop_assert!(Request::parse(&b[..cut]).is_err());
                }
            }
            let mut bad = b.clone();
            let i = flip.index(bad.len());
            bad[i] ^= 0x40;
            prop_assert!(Request::parse(&bad).is_err());
        }

        #[test]
        fn replies_round_trip_and_reject_flips(
            conn in any::<u32>(), seq in any::<u64>(),
            value in proptest::collection::vec(any::<u8>(), 0..200), flip in any::<prop::sample::Index>(),
            status in 0u8..4
        ) {
            let reply = match ReplyStatus::from_code(status).unwrap() {
                ReplyStatus::Ok => Reply::ok(seq, value),
                why => Reply::refused(seq, why),
            };
            let r = ReplyFrame { conn, reply };
            let b = r.to_bytes();
            prop_assert_eq!(ReplyFrame::parse(&b).unwrap(), (r.clone(), b.len()));
            prop_assert!(ReplyFrame::parse(&b[..b.len() - 1]).is_err());
            let mut bad = b.clone();
            let i = flip.index(bad.len());
            bad[i] ^= 0x01;
            prop_assert!(ReplyFrame::parse(&bad).is_err());
        }
    }

    /// A reply whose status this build does not know, or a refusal that carries objects,
    /// is refused even when its checksum is right.
    #[test]
    fn unknown_statuses_and_refusals_with_objects_are_rejected() {
        let resealed = |mut b: Vec<u8>| {
            let crc = crc_with_zero_field(&b, 20..24);
            b[20..24].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let ok = ReplyFrame {
            conn: 3,
            reply: Reply::ok(9, vec![7; 5]),
        }
        .to_bytes();
        for (at, byte) in [(2, 4u8), (2, 0xff), (3, 1)] {
            let mut b = ok.clone();
            b[at] = byte;
            assert!(matches!(
                ReplyFrame::parse(&resealed(b)),
                Err(FrameError::Unknown {
                    what: "reply status",
                    ..
                })
            ));
        }
        let mut b = ok.clone();
        b[2] = ReplyStatus::KeyOutsideStore.code();
        assert!(matches!(
            ReplyFrame::parse(&resealed(b)),
            Err(FrameError::Unknown {
                what: "value length of a refusal",
                value: 5
            })
        ));
    }

    #[test]
    fn a_zeroed_slot_is_not_a_request() {
        assert!(matches!(
            Request::parse(&[0; 64]),
            Err(FrameError::BadMagic(_))
        ));
    }
}
