//! The library's messages, one typed frame each, with `emit` and `parse`. Frames travel in
//! SENDs and sit in receive buffers, possibly in PM where recovery reads them after a
//! crash, so `parse` trusts nothing: it rejects truncation, unknown kinds and values, and
//! any byte flipped (CRC-32C over the whole frame).
//!
//! Layout (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `RMRA` |
//! | 4 | version (2; Apply, Notify and Ack frames of version 1 parse too: only Hello changed) |
//! | 5 | kind: 1 Hello, 2 Apply, 3 Notify, 4 Ack |
//! | 6 | flags: bit 0 = the sender wants an Ack |
//! | 7 | entry count |
//! | 8..16 | sequence number |
//! | 16..20 | body length |
//! | 20..24 | CRC-32C of the frame with this field zero |
//! | 24.. | body |
//!
//! Bodies: Hello = the server's configuration, its region descriptor, the client's first
//! sequence number, then its receive ring's address, whether it can be FLUSHed (a byte,
//! zero or one) and its rkey (zero when it cannot; version 2 added the ring); Apply = entries of
//! (offset u64, length u32, data); Notify = entries of (offset u64, length u32); Ack = none.

use remora_model::config::ServerConfig;

const MAGIC: [u8; 4] = *b"RMRA";
/// Wire version; a peer with another version is refused. Version 2 added the receive
/// ring's descriptor to [`Hello`], so a client can FLUSH what its SENDs wrote there; the
/// other frames are as in version 1, whose frames a PM receive ring may still hold.
pub const VERSION: u8 = 2;
/// Header bytes before the body.
pub const HEADER: usize = 24;
/// Where the header's checksum field starts (it runs to the end of the header).
const CRC_AT: usize = 20;
/// Most entries a frame may carry.
pub const MAX_ENTRIES: usize = 16;
/// Bytes of an entry's offset (u64) and length (u32) fields, before an Apply entry's data.
pub const ENTRY_HEAD: usize = 12;
const FLAG_ACK: u8 = 1;

/// What the server tells a client when it connects: enough to pick a correct method.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The server's configuration (persistence domain, DDIO, RQWRB placement, transport,
    /// NIC capabilities).
    pub config: ServerConfig,
    /// Address of the persistent region clients update.
    pub region_addr: u64,
    /// Its length.
    pub region_len: u64,
    /// Its rkey.
    pub region_rkey: u32,
    /// Receive slots the server keeps posted.
    pub rq_slots: u32,
    /// Bytes per receive slot: the largest message.
    pub rq_slot_bytes: u32,
    /// The first sequence number the client may use: above every message the server
    /// recovered, so a replay after another crash keeps new updates last.
    pub seq_base: u64,
    /// Address of the receive ring (`rq_slots` slots of `rq_slot_bytes`).
    pub ring_addr: u64,
    /// Its rkey for a FLUSH (a SEND's data lands there, and an IBTA FLUSH names a range of
    /// a memory region); `None` when the ring is in DRAM, where nothing persists.
    pub ring_rkey: Option<u32>,
}

/// The largest first sequence number a [`Hello`] may give: a connection counts up from
/// it, and 2^62 leaves more room than any connection uses.
pub const MAX_SEQ_BASE: u64 = 1 << 62;

/// A library frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Server → client at connection.
    Hello(Hello),
    /// Client → server: write these bytes at these region offsets, in order.
    Apply {
        /// Sequence number, increasing per connection (recovery replays in this order).
        seq: u64,
        /// The client waits for an [`Frame::Ack`].
        ack: bool,
        /// (offset, data) pairs.
        entries: Vec<(u64, Vec<u8>)>,
    },
    /// Client → server: these ranges were just written by RDMA; make them durable.
    Notify {
        /// Sequence number.
        seq: u64,
        /// The client waits for an [`Frame::Ack`].
        ack: bool,
        /// (offset, length) pairs.
        entries: Vec<(u64, u32)>,
    },
    /// Server → client: the update with this sequence number is durable.
    Ack {
        /// Sequence number acknowledged.
        seq: u64,
    },
}

/// Why a frame was refused.
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
    /// Not a remora frame.
    #[error("bad magic")]
    BadMagic,
    /// Another wire version.
    #[error("unsupported wire version {0} (this is {VERSION})")]
    BadVersion(u8),
    /// Unknown frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// The checksum does not match: torn or corrupt.
    #[error("checksum mismatch")]
    BadChecksum,
    /// A field holds a value outside its range.
    #[error("bad value for {0}")]
    BadValue(&'static str),
    /// Bytes after the frame in a message of known length ([`FrameRef::parse_exact`]).
    #[error("{0} bytes after the frame")]
    Trailing(usize),
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(FrameError::BadValue("length"))?;
        if end > self.b.len() {
            return Err(FrameError::Truncated {
                need: end,
                have: self.b.len(),
            });
        }
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
}

impl Frame {
    /// Bytes [`emit`](Self::emit) produces.
    pub fn buffer_len(&self) -> usize {
        HEADER
            + match self {
                Frame::Hello(_) => 5 + 8 + 8 + 4 + 4 + 4 + 8 + 8 + 1 + 4,
                Frame::Apply { entries, .. } => {
                    Self::apply_buffer_len(entries.iter().map(|(_, d)| d.len())) - HEADER
                }
                Frame::Notify { entries, .. } => Self::notify_buffer_len(entries.len()) - HEADER,
                Frame::Ack { .. } => 0,
            }
    }

    /// Bytes an Apply frame carrying data of these lengths takes (checked before building
    /// one, so a refused update costs no copy).
    pub fn apply_buffer_len(lens: impl Iterator<Item = usize>) -> usize {
        HEADER + lens.map(|n| ENTRY_HEAD + n).sum::<usize>()
    }

    /// Bytes a Notify frame of `entries` ranges takes.
    pub fn notify_buffer_len(entries: usize) -> usize {
        HEADER + entries * ENTRY_HEAD
    }

    /// Serializes the frame into a payload for a work request: written in place, so
    /// frames up to the inline size need no allocation and larger ones one.
    pub fn emit_payload(&self) -> remora_model::bytes::Bytes {
        remora_model::bytes::Bytes::filled(self.buffer_len(), |b| self.emit_into(b))
    }

    /// An Apply frame of borrowed entries as a payload, the same bytes as
    /// [`emit_payload`](Self::emit_payload) of the [`Frame::Apply`] that owns copies of them:
    /// what a client sends for an update, without copying the data twice. Panics past
    /// [`MAX_ENTRIES`] (a programming error).
    pub fn apply_payload(
        seq: u64,
        ack: bool,
        entries: &[(u64, &[u8])],
    ) -> remora_model::bytes::Bytes {
        let len = Self::apply_buffer_len(entries.iter().map(|(_, d)| d.len()));
        remora_model::bytes::Bytes::filled(len, |b| {
            write_frame(b, KIND_APPLY, seq, ack, entries.len(), |w| {
                put_apply(w, entries.iter().copied())
            })
        })
    }

    /// A Notify frame of borrowed entries as a payload (see [`apply_payload`](Self::apply_payload)).
    pub fn notify_payload(
        seq: u64,
        ack: bool,
        entries: &[(u64, u32)],
    ) -> remora_model::bytes::Bytes {
        remora_model::bytes::Bytes::filled(Self::notify_buffer_len(entries.len()), |b| {
            write_frame(b, KIND_NOTIFY, seq, ack, entries.len(), |w| {
                put_notify(w, entries.iter().copied())
            })
        })
    }

    /// Serializes the frame. Panics if it has more than [`MAX_ENTRIES`] entries (a
    /// programming error: the library never builds one).
    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.buffer_len()];
        self.emit_into(&mut b);
        b
    }

    /// Serializes the frame into `out`, exactly [`buffer_len`](Self::buffer_len) bytes.
    fn emit_into(&self, out: &mut [u8]) {
        assert_eq!(
            out.len(),
            self.buffer_len(),
            "frame buffer of the wrong size"
        );
        match self {
            Frame::Hello(h) => write_frame(out, KIND_HELLO, 0, false, 0, |w| {
                w.put(&h.config.to_bytes());
                w.put(&h.region_addr.to_le_bytes());
                w.put(&h.region_len.to_le_bytes());
                w.put(&h.region_rkey.to_le_bytes());
                w.put(&h.rq_slots.to_le_bytes());
                w.put(&h.rq_slot_bytes.to_le_bytes());
                w.put(&h.seq_base.to_le_bytes());
                w.put(&h.ring_addr.to_le_bytes());
                w.put(&[u8::from(h.ring_rkey.is_some())]);
                w.put(&h.ring_rkey.unwrap_or(0).to_le_bytes());
            }),
            Frame::Apply { seq, ack, entries } => {
                write_frame(out, KIND_APPLY, *seq, *ack, entries.len(), |w| {
                    put_apply(w, entries.iter().map(|(o, d)| (*o, &d[..])))
                })
            }
            Frame::Notify { seq, ack, entries } => {
                write_frame(out, KIND_NOTIFY, *seq, *ack, entries.len(), |w| {
                    put_notify(w, entries.iter().copied())
                })
            }
            Frame::Ack { seq } => write_frame(out, KIND_ACK, *seq, false, 0, |_| {}),
        }
    }

    /// Parses a frame at the start of `buf` into one that owns its entries (see
    /// [`FrameRef::parse`], which checks the same and copies nothing).
    pub fn parse(buf: &[u8]) -> Result<Frame, FrameError> {
        FrameRef::parse(buf).map(|f| f.to_frame())
    }

    /// As [`parse`](Self::parse), for a message whose length is known (a received SEND):
    /// the frame must be all of `buf` ([`FrameRef::parse_exact`]).
    pub fn parse_exact(buf: &[u8]) -> Result<Frame, FrameError> {
        FrameRef::parse_exact(buf).map(|f| f.to_frame())
    }
}

const KIND_HELLO: u8 = 1;
const KIND_APPLY: u8 = 2;
const KIND_NOTIFY: u8 = 3;
const KIND_ACK: u8 = 4;

/// Where [`write_frame`] puts the next bytes of a frame.
struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.out[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
}

/// Writes a frame into `out` (exactly its length): the header, the body `body` writes, and
/// the checksum over both.
fn write_frame(
    out: &mut [u8],
    kind: u8,
    seq: u64,
    ack: bool,
    count: usize,
    body: impl FnOnce(&mut Writer<'_>),
) {
    assert!(count <= MAX_ENTRIES, "frame with {count} entries");
    let body_len = (out.len() - HEADER) as u32;
    let mut w = Writer { out, at: 0 };
    w.put(&MAGIC);
    w.put(&[VERSION, kind, if ack { FLAG_ACK } else { 0 }, count as u8]);
    w.put(&seq.to_le_bytes());
    w.put(&body_len.to_le_bytes());
    w.put(&[0; 4]);
    body(&mut w);
    let Writer { out, at } = w;
    debug_assert_eq!(at, out.len());
    let crc = crate::checksum::crc32c(out);
    out[CRC_AT..HEADER].copy_from_slice(&crc.to_le_bytes());
}

fn put_apply<'d>(w: &mut Writer<'_>, entries: impl Iterator<Item = (u64, &'d [u8])>) {
    for (off, data) in entries {
        w.put(&off.to_le_bytes());
        w.put(&(data.len() as u32).to_le_bytes());
        w.put(data);
    }
}

fn put_notify(w: &mut Writer<'_>, entries: impl Iterator<Item = (u64, u32)>) {
    for (off, len) in entries {
        w.put(&off.to_le_bytes());
        w.put(&len.to_le_bytes());
    }
}

/// A frame read in place: what a [`Frame`] holds, with an Apply's data and a Notify's
/// ranges left where they lie in the buffer, so a server handling a message allocates
/// nothing for it. [`parse`](Self::parse) checks everything [`Frame::parse`] does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameRef<'a> {
    /// Server → client at connection.
    Hello(Hello),
    /// Client → server: write these bytes at these region offsets, in order.
    Apply {
        /// Sequence number.
        seq: u64,
        /// The client waits for an Ack.
        ack: bool,
        /// (offset, data) pairs.
        entries: ApplyEntries<'a>,
    },
    /// Client → server: these ranges were just written by RDMA; make them durable.
    Notify {
        /// Sequence number.
        seq: u64,
        /// The client waits for an Ack.
        ack: bool,
        /// (offset, length) pairs.
        entries: NotifyEntries<'a>,
    },
    /// Server → client: the update with this sequence number is durable.
    Ack {
        /// Sequence number acknowledged.
        seq: u64,
    },
}

/// An Apply frame's (offset, data) entries as they lie in its checked body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyEntries<'a> {
    body: &'a [u8],
    left: usize,
}

impl<'a> Iterator for ApplyEntries<'a> {
    type Item = (u64, &'a [u8]);
    fn next(&mut self) -> Option<(u64, &'a [u8])> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // `parse` checked that every entry lies within the body.
        let (head, rest) = self.body.split_at(ENTRY_HEAD);
        let off = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(head[8..].try_into().expect("4 bytes")) as usize;
        let (data, rest) = rest.split_at(len);
        self.body = rest;
        Some((off, data))
    }
}

/// A Notify frame's (offset, length) entries as they lie in its checked body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyEntries<'a> {
    body: &'a [u8],
}

impl Iterator for NotifyEntries<'_> {
    type Item = (u64, u32);
    fn next(&mut self) -> Option<(u64, u32)> {
        let (head, rest) = self.body.split_at_checked(ENTRY_HEAD)?;
        self.body = rest;
        Some((
            u64::from_le_bytes(head[..8].try_into().expect("8 bytes")),
            u32::from_le_bytes(head[8..].try_into().expect("4 bytes")),
        ))
    }
}

impl<'a> FrameRef<'a> {
    /// A [`Frame`] that owns copies of the entries.
    pub fn to_frame(&self) -> Frame {
        match self {
            FrameRef::Hello(h) => Frame::Hello(*h),
            FrameRef::Apply { seq, ack, entries } => Frame::Apply {
                seq: *seq,
                ack: *ack,
                entries: entries.clone().map(|(o, d)| (o, d.to_vec())).collect(),
            },
            FrameRef::Notify { seq, ack, entries } => Frame::Notify {
                seq: *seq,
                ack: *ack,
                entries: entries.clone().collect(),
            },
            FrameRef::Ack { seq } => Frame::Ack { seq: *seq },
        }
    }

    /// Parses a frame at the start of `buf` (trailing bytes, e.g. the rest of a receive
    /// slot whose message length recovery does not know, are ignored).
    pub fn parse(buf: &'a [u8]) -> Result<FrameRef<'a>, FrameError> {
        FrameRef::parse_prefix(buf).map(|(f, _)| f)
    }

    /// Parses a message of known length (a received SEND, its completion's byte count):
    /// the frame must be all of `buf`, and bytes after it are refused
    /// ([`FrameError::Trailing`]) rather than ignored.
    pub fn parse_exact(buf: &'a [u8]) -> Result<FrameRef<'a>, FrameError> {
        let (f, used) = FrameRef::parse_prefix(buf)?;
        if used != buf.len() {
            return Err(FrameError::Trailing(buf.len() - used));
        }
        Ok(f)
    }

    /// The frame at the start of `buf` and its length.
    fn parse_prefix(buf: &'a [u8]) -> Result<(FrameRef<'a>, usize), FrameError> {
        let mut r = Reader { b: buf, at: 0 };
        if r.take(4)? != MAGIC {
            return Err(FrameError::BadMagic);
        }
        let version = r.u8()?;
        let kind = r.u8()?;
        // Version 2 changed only Hello.
        if version != VERSION && (version != 1 || kind == KIND_HELLO) {
            return Err(FrameError::BadVersion(version));
        }
        let flags = r.u8()?;
        let count = r.u8()? as usize;
        let seq = r.u64()?;
        let body_len = r.u32()? as usize;
        let crc = r.u32()?;
        if !(KIND_HELLO..=KIND_ACK).contains(&kind) {
            return Err(FrameError::UnknownKind(kind));
        }
        if flags & !FLAG_ACK != 0 {
            return Err(FrameError::BadValue("flags"));
        }
        if count > MAX_ENTRIES {
            return Err(FrameError::BadValue("entry count"));
        }
        // A Hello or an Ack has no entries and wants no Ack, and a Hello has no sequence
        // number: `emit` writes zero there, and one encoding per frame leaves no bytes
        // this build would take in without understanding them.
        if matches!(kind, KIND_HELLO | KIND_ACK) {
            if count != 0 {
                return Err(FrameError::BadValue("entry count"));
            }
            if flags != 0 {
                return Err(FrameError::BadValue("flags"));
            }
            if kind == KIND_HELLO && seq != 0 {
                return Err(FrameError::BadValue("sequence number of a Hello"));
            }
        }
        let total = HEADER
            .checked_add(body_len)
            .ok_or(FrameError::BadValue("body length"))?;
        if buf.len() < total {
            return Err(FrameError::Truncated {
                need: total,
                have: buf.len(),
            });
        }
        // The checksum covers the frame with its own field zeroed: the header with the
        // field cleared, then the body.
        let mut head = [0u8; HEADER];
        head[..CRC_AT].copy_from_slice(&buf[..CRC_AT]);
        if crate::checksum::crc32c_append(crate::checksum::crc32c(&head), &buf[HEADER..total])
            != crc
        {
            return Err(FrameError::BadChecksum);
        }
        let mut body = Reader {
            b: &buf[..total],
            at: HEADER,
        };
        let ack = flags & FLAG_ACK != 0;
        let frame = match kind {
            KIND_HELLO => {
                let bytes: [u8; 5] = body.take(5)?.try_into().expect("5 bytes");
                let config = ServerConfig::from_bytes(bytes).map_err(FrameError::BadValue)?;
                let hello = Hello {
                    config,
                    region_addr: body.u64()?,
                    region_len: body.u64()?,
                    region_rkey: body.u32()?,
                    rq_slots: body.u32()?,
                    rq_slot_bytes: body.u32()?,
                    seq_base: body.u64()?,
                    ring_addr: body.u64()?,
                    ring_rkey: match (body.u8()?, body.u32()?) {
                        (0, 0) => None,
                        (1, k) => Some(k),
                        _ => return Err(FrameError::BadValue("receive ring's rkey")),
                    },
                };
                // A region that wraps the address space, or sequence numbers with no room
                // left to count up, would make the client's arithmetic overflow.
                if hello.region_addr.checked_add(hello.region_len).is_none() {
                    return Err(FrameError::BadValue("region (its end overflows)"));
                }
                let ring = u64::from(hello.rq_slots) * u64::from(hello.rq_slot_bytes);
                if hello.ring_addr.checked_add(ring).is_none() {
                    return Err(FrameError::BadValue("receive ring (its end overflows)"));
                }
                if hello.seq_base == 0 || hello.seq_base > MAX_SEQ_BASE {
                    return Err(FrameError::BadValue("first sequence number"));
                }
                FrameRef::Hello(hello)
            }
            KIND_APPLY => {
                // Checked here, entry by entry, so iterating them cannot fail.
                for _ in 0..count {
                    body.take(8)?;
                    let len = body.u32()? as usize;
                    body.take(len)?;
                }
                FrameRef::Apply {
                    seq,
                    ack,
                    entries: ApplyEntries {
                        body: &buf[HEADER..body.at],
                        left: count,
                    },
                }
            }
            KIND_NOTIFY => FrameRef::Notify {
                seq,
                ack,
                entries: NotifyEntries {
                    body: body.take(count * ENTRY_HEAD)?,
                },
            },
            _ => FrameRef::Ack { seq },
        };
        if body.at != total {
            return Err(FrameError::BadValue("body length"));
        }
        Ok((frame, total))
    }
}

/// WRITE_WITH_IMM carries the target in its 32-bit immediate (seed 000 §3.2: "the target
/// address must be identifiable using just the 32-bit immediate data"): bit 31 asks for an
/// Ack, bits 0..31 hold the region offset in 64-byte units (so 128 GiB are addressable).
pub mod imm {
    const ACK: u32 = 1 << 31;
    /// Granularity of addressable offsets.
    pub const UNIT: u64 = 64;

    /// The immediate for a write at `offset`, or `None` if the offset cannot be encoded.
    pub fn encode(offset: u64, ack: bool) -> Option<u32> {
        if !offset.is_multiple_of(UNIT) || offset / UNIT >= ACK as u64 {
            return None;
        }
        Some((offset / UNIT) as u32 | if ack { ACK } else { 0 })
    }

    /// (offset, wants an Ack).
    pub fn decode(imm: u32) -> (u64, bool) {
        ((imm & !ACK) as u64 * UNIT, imm & ACK != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frames() -> impl Strategy<Value = Frame> {
        let entries = prop::collection::vec(
            (any::<u64>(), prop::collection::vec(any::<u8>(), 0..100)),
            0..4,
        );
        let notes = prop::collection::vec((any::<u64>(), any::<u32>()), 0..4);
        prop_oneof![
            (any::<u64>(), any::<bool>(), entries).prop_map(|(seq, ack, entries)| Frame::Apply {
                seq,
                ack,
                entries
            }),
            (any::<u64>(), any::<bool>(), notes).prop_map(|(seq, ack, entries)| Frame::Notify {
                seq,
                ack,
                entries
            }),
            any::<u64>().prop_map(|seq| Frame::Ack { seq }),
            (0usize..12, any::<u64>(), any::<u32>()).prop_map(|(i, a, k)| {
                let mut config = ServerConfig::table1()[i];
                config.transport = remora_model::config::Transport::IWarp;
                config.caps.atomic_write = k % 2 == 0;
                // Any region whose end is in the address space, any first sequence
                // number in 1..=MAX_SEQ_BASE.
                Frame::Hello(Hello {
                    config,
                    region_addr: a >> 1,
                    region_len: a >> 2,
                    region_rkey: k,
                    rq_slots: 64,
                    rq_slot_bytes: 256,
                    seq_base: (a >> 2) % MAX_SEQ_BASE + 1,
                    ring_addr: a >> 3,
                    ring_rkey: (k % 3 != 0).then(|| k.rotate_left(7)),
                })
            }),
        ]
    }

    proptest! {
        #[test]
        fn round_trips(f in frames(), pad in 0usize..8) {
            let mut b = f.emit();
            prop_assert_eq!(b.len(), f.buffer_len());
            prop_assert_eq!(Frame::parse_exact(&b), Ok(f.clone()));
            b.extend(std::iter::repeat_n(0xAA, pad));
            prop_assert_eq!(Frame::parse(&b).unwrap(), f.clone());
            if pad > 0 {
                prop_assert_eq!(Frame::parse_exact(&b), Err(FrameError::Trailing(pad)));
            }
        }

        #[test]
        fn borrowed_entries_make_the_same_bytes_and_read_back_in_place(f in frames()) {
            let b = f.emit();
            match &f {
                Frame::Apply { seq, ack, entries } => {
                    let borrowed: Vec<(u64, &[u8])> =
                        entries.iter().map(|(o, d)| (*o, &d[..])).collect();
                    prop_assert_eq!(&*Frame::apply_payload(*seq, *ack, &borrowed), &b[..]);
                    let Ok(FrameRef::Apply { entries: read, .. }) = FrameRef::parse(&b) else {
                        panic!("not an Apply");
                    };
                    prop_assert_eq!(read.collect::<Vec<_>>(), borrowed);
                }
                Frame::Notify { seq, ack, entries } => {
                    prop_assert_eq!(&*Frame::notify_payload(*seq, *ack, entries), &b[..]);
                    let Ok(FrameRef::Notify { entries: read, .. }) = FrameRef::parse(&b) else {
                        panic!("not a Notify");
                    };
                    prop_assert_eq!(&read.collect::<Vec<_>>(), entries);
                }
                _ => prop_assert_eq!(FrameRef::parse(&b).unwrap().to_frame(), f),
            }
        }

        #[test]
        fn every_truncation_is_refused(f in frames()) {
            let b = f.emit();
            for n in 0..b.len() {
                prop_assert!(Frame::parse(&b[..n]).is_err(), "accepted {} of {} bytes", n, b.len());
            }
        }

        #[test]
        fn every_flipped_bit_is_refused(f in frames(), bit in any::<prop::sample::Index>()) {
            let mut b = f.emit();
            let i = bit.index(b.len() * 8);
            b[i / 8] ^= 1 << (i % 8);
            prop_assert!(Frame::parse(&b).is_err());
        }
    }

    #[test]
    fn immediates_round_trip_and_refuse_unaddressable_offsets() {
        assert_eq!(
            imm::decode(imm::encode(64 * 1000, true).unwrap()),
            (64_000, true)
        );
        assert_eq!(imm::decode(imm::encode(0, false).unwrap()), (0, false));
        assert_eq!(imm::encode(65, false), None);
        assert_eq!(imm::encode(64 << 31, false), None);
    }

    /// `f` emitted as version 1 would have (same layout, that version byte, its checksum).
    fn as_version_1(f: &Frame) -> Vec<u8> {
        let mut b = f.emit();
        b[4] = 1;
        b[CRC_AT..HEADER].fill(0);
        let crc = crate::checksum::crc32c(&b);
        b[CRC_AT..HEADER].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn version_1_frames_other_than_hello_still_parse() {
        // A PM receive ring written by a version-1 server holds Apply and Notify frames
        // that recovery must still replay; only Hello changed.
        let apply = Frame::Apply {
            seq: 9,
            ack: true,
            entries: vec![(64, vec![1, 2, 3])],
        };
        let notify = Frame::Notify {
            seq: 10,
            ack: false,
            entries: vec![(128, 8)],
        };
        for f in [apply, notify, Frame::Ack { seq: 11 }] {
            assert_eq!(Frame::parse(&as_version_1(&f)), Ok(f));
        }
        let hello = Frame::Hello(Hello {
            config: ServerConfig::table1()[0],
            region_addr: 4096,
            region_len: 4096,
            region_rkey: 1,
            rq_slots: 4,
            rq_slot_bytes: 256,
            seq_base: 1,
            ring_addr: 8192,
            ring_rkey: Some(2),
        });
        assert_eq!(Frame::parse(&hello.emit()), Ok(hello.clone()));
        assert_eq!(
            Frame::parse(&as_version_1(&hello)),
            Err(FrameError::BadVersion(1))
        );
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let mut b = Frame::Ack { seq: 3 }.emit();
        b[4] = 9;
        assert_eq!(Frame::parse(&b), Err(FrameError::BadVersion(9)));
        assert_eq!(
            Frame::parse(b"RMR"),
            Err(FrameError::Truncated { need: 4, have: 3 })
        );
        assert_eq!(Frame::parse(&[0u8; 64]), Err(FrameError::BadMagic));
        let mut k = Frame::Ack { seq: 3 }.emit();
        k[5] = 77;
        assert_eq!(Frame::parse(&k), Err(FrameError::UnknownKind(77)));
    }
}
