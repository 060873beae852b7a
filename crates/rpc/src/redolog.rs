//! The per-connection redo log of seed 003 §4.2 (Figure 5): a ring buffer in the server's
//! PM holding every durable RPC until it is processed.
//!
//! "We maintain a ring buffer in the PM to store the redo log. For each RDMA connection,
//! the corresponding connection information is recorded in the log header. A log entry
//! contains the RPC operator and the data. To guarantee failure atomicity, the data is
//! always persisted before the RPC operator in the logging buffer. Because the size of the
//! RPC operator is very small, it can be persisted with an atomic write. Once an RPC is
//! successfully processed, the corresponding log entry is removed from the ring buffer."
//!
//! Layout (little-endian; `base` 4096-aligned):
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `RLOG` |
//! | 4..6 | version (2) |
//! | 6 | how entries commit ([`Commit`]): 0 by their operator, 1 by their frame |
//! | 7 | reserved (0) |
//! | 8..12 | connection id |
//! | 12..16 | capacity (entries) |
//! | 16..20 | entry bytes (a multiple of 64) |
//! | 20..24 | offset of the data inside an entry (64) |
//! | 24..28 | CRC-32C of bytes 0..24 |
//! | 64..72 | processed watermark: every sequence number up to it is processed (8-byte store) |
//! | 72..80 | owner key: the key of the client the log belongs to, 0 for none (`rpc-serve`) |
//! | 128.. | `capacity` entries |
//!
//! An entry for sequence number `s` lives in slot `(s - 1) % capacity`. Its first 8 bytes
//! are the **operator** ([`Operator`], one 8-byte atomic write: a commit tag, the opcode,
//! the low 16 bits of `s`, the frame length); its data, from byte 64, is the request frame
//! ([`Request`], CRC-32C protected). A slot is an entry for `s` only when the operator
//! carries `s`'s low bits and the frame parses with this connection and `s`; anything else
//! is a free slot or an older lap. Removing an entry is advancing the watermark.
//!
//! An operator that commits `s` over data that does not parse is a broken invariant (the
//! data must be durable first): [`judge_entry`] reports it as [`EntryState::Torn`] and it is
//! never executed.

use crate::api::{Op, RpcError};
use crate::proto::{FrameError, Request};

/// Header magic.
pub const LOG_MAGIC: [u8; 4] = *b"RLOG";
/// Layout version (2: the header names how entries commit, [`Commit`]; a version-1 log
/// did not, so which rule wrote it cannot be told and it is refused).
pub const LOG_VERSION: u16 = 2;
/// Offset of the watermark word from the log base.
pub const WATERMARK_OFFSET: u64 = 64;
/// Offset of the owner key from the log base: `rpc-serve` keeps there the key of the client
/// the log belongs to (0: nobody's yet), which that client presents when it reconnects, so
/// no other client can take the log and its recovered replies.
pub const OWNER_KEY_OFFSET: u64 = 72;
/// Offset of entry 0 from the log base.
pub const ENTRIES_OFFSET: u64 = 128;
/// Offset of an entry's data from the entry's start (the operator has its own line).
pub const DATA_OFFSET: u64 = 64;
/// Largest capacity: the operator carries 16 bits of the sequence number, so every slot
/// of one lap has distinct low bits and an older lap never passes for a newer one.
pub const MAX_CAPACITY: u32 = 1 << 15;
/// Commit tag in the operator's low byte.
const COMMIT_TAG: u8 = 0xC3;

/// Where a connection's log lives and how it is cut into entries.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LogLayout {
    /// PM address of the header.
    pub base: u64,
    /// Entries in the ring.
    pub capacity: u32,
    /// Bytes per entry: the operator's line plus the largest request frame, rounded up to
    /// a cache line.
    pub entry_bytes: u32,
}

impl LogLayout {
    /// A layout for requests whose values are at most `max_value` bytes.
    pub fn new(base: u64, capacity: u32, max_value: u32) -> Result<LogLayout, RpcError> {
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(RpcError::Malformed(format!(
                "log capacity {capacity} outside 1..={MAX_CAPACITY}"
            )));
        }
        let entry = (DATA_OFFSET + crate::proto::REQUEST_HEADER as u64 + max_value as u64)
            .div_ceil(64)
            * 64;
        let entry_bytes = u32::try_from(entry)
            .map_err(|_| RpcError::Malformed(format!("entry of {entry} bytes too large")))?;
        Ok(LogLayout {
            base,
            capacity,
            entry_bytes,
        })
    }
    /// Bytes of header, watermark and entries.
    pub fn bytes(&self) -> u64 {
        ENTRIES_OFFSET + self.capacity as u64 * self.entry_bytes as u64
    }
    /// Largest request frame an entry holds.
    pub fn max_frame(&self) -> u64 {
        self.entry_bytes as u64 - DATA_OFFSET
    }
    /// Slot index of sequence number `seq` (from 1).
    pub fn slot(&self, seq: u64) -> u64 {
        assert!(seq >= 1, "sequence numbers start at 1");
        (seq - 1) % self.capacity as u64
    }
    /// Address of `seq`'s entry (its operator word).
    pub fn entry_addr(&self, seq: u64) -> u64 {
        self.base + ENTRIES_OFFSET + self.slot(seq) * self.entry_bytes as u64
    }
    /// Address of `seq`'s data (the request frame).
    pub fn data_addr(&self, seq: u64) -> u64 {
        self.entry_addr(seq) + DATA_OFFSET
    }
    /// Address of the watermark word.
    pub fn watermark_addr(&self) -> u64 {
        self.base + WATERMARK_OFFSET
    }
    /// Address of the owner key ([`OWNER_KEY_OFFSET`]).
    pub fn owner_key_addr(&self) -> u64 {
        self.base + OWNER_KEY_OFFSET
    }
    /// Start of the entries: the part of the log a client may write (its memory region
    /// covers the entries only, so no client can touch the header or the watermark) and
    /// where its probes READ and its doorbells land.
    pub fn entries_addr(&self) -> u64 {
        self.base + ENTRIES_OFFSET
    }
    /// Bytes of the entries.
    pub fn entries_bytes(&self) -> u64 {
        self.capacity as u64 * self.entry_bytes as u64
    }
}

/// How a log's entries are committed, fixed when the log is formatted (seed 003 §4.2: an
/// entry is committed by its operator; with native RFlush and no responder-CPU step, by its
/// frame's own checksum, `FlushPlan::frame_commits`). Recovery must read a log by the rule
/// that wrote it: read by the other, an entry acknowledged durable counts as uncommitted
/// and is cut off.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Commit {
    /// By the 8-byte operator beside the entry.
    Operator,
    /// By the request frame alone.
    Frame,
}

impl Commit {
    /// The rule `plan`'s entries are written by.
    pub fn of(plan: &crate::flush::FlushPlan) -> Commit {
        if plan.frame_commits() {
            Commit::Frame
        } else {
            Commit::Operator
        }
    }

    /// What commits an entry, in words (`rpc-serve`'s pool layout record names it).
    pub fn what(self) -> &'static str {
        match self {
            Commit::Operator => "its operator",
            Commit::Frame => "its frame",
        }
    }
}

/// The log header: the connection's information (seed 003 §4.2).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LogHeader {
    /// Connection id the log belongs to.
    pub conn: u32,
    /// Entries.
    pub capacity: u32,
    /// Bytes per entry.
    pub entry_bytes: u32,
    /// How its entries are committed.
    pub commit: Commit,
}

/// Header bytes [`LogHeader::emit`] writes.
pub const HEADER_BYTES: usize = 28;

impl LogHeader {
    /// The header's bytes.
    pub fn emit(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&LOG_MAGIC);
        b[4..6].copy_from_slice(&LOG_VERSION.to_le_bytes());
        b[6] = match self.commit {
            Commit::Operator => 0,
            Commit::Frame => 1,
        };
        b[8..12].copy_from_slice(&self.conn.to_le_bytes());
        b[12..16].copy_from_slice(&self.capacity.to_le_bytes());
        b[16..20].copy_from_slice(&self.entry_bytes.to_le_bytes());
        b[20..24].copy_from_slice(&(DATA_OFFSET as u32).to_le_bytes());
        let crc = remora::checksum::crc32c(&b[0..24]);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses and validates a header (magic, version, checksum, layout bounds).
    pub fn parse(b: &[u8]) -> Result<LogHeader, RpcError> {
        let bad = |why: String| Err(RpcError::Malformed(format!("redo-log header: {why}")));
        if b.len() < HEADER_BYTES {
            return bad(format!("{} bytes, need {HEADER_BYTES}", b.len()));
        }
        if b[0..4] != LOG_MAGIC {
            return bad(format!("magic {:02x?}", &b[0..4]));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let stored = u32_at(24);
        let computed = remora::checksum::crc32c(&b[0..24]);
        if stored != computed {
            return bad(format!(
                "checksum {stored:#010x}, computed {computed:#010x}"
            ));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != LOG_VERSION || b[7] != 0 {
            return bad(format!("version {version}"));
        }
        let commit = match b[6] {
            0 => Commit::Operator,
            1 => Commit::Frame,
            x => return bad(format!("commit rule {x}")),
        };
        let h = LogHeader {
            conn: u32_at(8),
            capacity: u32_at(12),
            entry_bytes: u32_at(16),
            commit,
        };
        if u32_at(20) as u64 != DATA_OFFSET
            || h.capacity == 0
            || h.capacity > MAX_CAPACITY
            || !h.entry_bytes.is_multiple_of(64)
            || (h.entry_bytes as u64) < DATA_OFFSET + crate::proto::REQUEST_HEADER as u64
        {
            return bad(format!("layout {h:?}"));
        }
        Ok(h)
    }
}

/// The RPC operator: what to run on the entry's data, small enough for one 8-byte atomic
/// write (seed 003 §4.2). Bits: 0..8 commit tag `0xC3`, 8..16 opcode (1 Get, 2 Put,
/// 3 Scan), 16..32 low 16 bits of the sequence number, 32..64 frame length in bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Operator {
    /// Opcode as in the request frame (1 Get, 2 Put, 3 Scan).
    pub code: u8,
    /// Low 16 bits of the sequence number.
    pub seq_lo: u16,
    /// Bytes of the request frame.
    pub frame_len: u32,
}

impl Operator {
    /// The operator of request `r`.
    pub fn of(r: &Request) -> Operator {
        Operator {
            code: op_code(&r.op),
            seq_lo: r.seq as u16,
            frame_len: r.frame_len() as u32,
        }
    }
    /// The 8-byte word.
    pub fn to_word(self) -> u64 {
        COMMIT_TAG as u64
            | (self.code as u64) << 8
            | (self.seq_lo as u64) << 16
            | (self.frame_len as u64) << 32
    }
    /// Decodes a word; `None` for a free slot or anything that is not an operator.
    pub fn from_word(w: u64) -> Option<Operator> {
        let code = (w >> 8) as u8;
        if w as u8 != COMMIT_TAG || !(1..=3).contains(&code) {
            return None;
        }
        Some(Operator {
            code,
            seq_lo: (w >> 16) as u16,
            frame_len: (w >> 32) as u32,
        })
    }
}

/// The frame opcode of `op`.
pub fn op_code(op: &Op) -> u8 {
    match op {
        Op::Get { .. } => 1,
        Op::Put { .. } => 2,
        Op::Scan { .. } => 3,
    }
}

/// What a slot holds for an expected sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// No operator for this sequence number: the entry was never committed (a free slot,
    /// an older lap, or data whose operator did not become durable).
    Uncommitted,
    /// A committed entry: execute it.
    Committed(Request),
    /// An operator commits the entry but its data does not parse, or names another
    /// request: the data was not durable before the operator. Never executed.
    Torn(String),
}

/// Judges the bytes of `seq`'s slot: `op_word` is its operator word, `data` at least
/// the operator's frame length of its data area (more is fine).
pub fn judge_entry(conn: u32, seq: u64, op_word: u64, data: &[u8]) -> EntryState {
    let Some(op) = Operator::from_word(op_word) else {
        return EntryState::Uncommitted;
    };
    if op.seq_lo != seq as u16 {
        return EntryState::Uncommitted;
    }
    let len = op.frame_len as usize;
    if len > data.len() {
        return EntryState::Torn(format!(
            "operator of seq {seq} claims a {len}-byte frame in a {}-byte slot",
            data.len()
        ));
    }
    match Request::parse(&data[..len]) {
        Ok((r, used)) if used == len && r.conn == conn && r.seq == seq && op_code(&r.op) == op.code => {
            EntryState::Committed(r)
        }
        Ok((r, used)) => EntryState::Torn(format!(
            "operator of seq {seq} (code {}, {len} bytes) over a frame of conn {} seq {} ({used} bytes)",
            op.code, r.conn, r.seq
        )),
        Err(e @ (FrameError::Truncated { .. }
        | FrameError::BadMagic(_)
        | FrameError::Unknown { .. }
        | FrameError::Checksum { .. })) => {
            EntryState::Torn(format!("operator of seq {seq} over corrupt data: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn put(seq: u64) -> Request {
        Request {
            conn: 7,
            seq,
            op: Op::Put {
                key: 3,
                value: vec![seq as u8; 40],
            },
        }
    }

    #[test]
    fn header_round_trips_and_rejects_flips() {
        for commit in [Commit::Operator, Commit::Frame] {
            let h = LogHeader {
                conn: 9,
                capacity: 16,
                entry_bytes: 192,
                commit,
            };
            let b = h.emit();
            assert_eq!(LogHeader::parse(&b).unwrap(), h);
            for i in 0..HEADER_BYTES {
                let mut bad = b;
                bad[i] ^= 0x10;
                assert!(LogHeader::parse(&bad).is_err(), "flip at {i} accepted");
            }
        }
        assert!(LogHeader::parse(&[0u8; 64]).is_err());
    }

    #[test]
    fn layout_places_entries_in_a_ring() {
        let l = LogLayout::new(4096, 4, 100).unwrap();
        assert_eq!(l.entry_bytes, 256);
        assert_eq!(l.entry_addr(1), 4096 + 128);
        assert_eq!(l.entry_addr(5), l.entry_addr(1));
        assert_eq!(l.data_addr(2), 4096 + 128 + 256 + 64);
        assert!(LogLayout::new(0, 0, 8).is_err());
        assert!(LogLayout::new(0, MAX_CAPACITY + 1, 8).is_err());
    }

    #[test]
    fn committed_uncommitted_and_torn_entries_are_told_apart() {
        let r = put(5);
        let b = r.to_bytes();
        let w = Operator::of(&r).to_word();
        assert_eq!(judge_entry(7, 5, w, &b), EntryState::Committed(r.clone()));
        // No operator, an older lap's operator, or another connection's frame.
        assert_eq!(judge_entry(7, 5, 0, &b), EntryState::Uncommitted);
        // Same low 16 bits, another request: the frame's full sequence number decides.
        assert!(matches!(
            judge_entry(7, 5 + 65536, w, &b),
            EntryState::Torn(_)
        ));
        assert!(matches!(judge_entry(8, 5, w, &b), EntryState::Torn(_)));
        // Operator durable, data not: torn, never executed.
        let mut torn = b.clone();
        torn[40] ^= 1;
        assert!(matches!(judge_entry(7, 5, w, &torn), EntryState::Torn(_)));
        assert!(matches!(
            judge_entry(7, 5, w, &[0u8; 200]),
            EntryState::Torn(_)
        ));
    }

    proptest! {
        #[test]
        fn operators_round_trip(code in 1u8..=3, seq_lo in any::<u16>(), frame_len in any::<u32>()) {
            let o = Operator { code, seq_lo, frame_len };
            prop_assert_eq!(Operator::from_word(o.to_word()), Some(o));
        }

        #[test]
        fn a_flipped_data_byte_is_never_committed(seq in 1u64..1000, flip in any::<prop::sample::Index>()) {
            let r = put(seq);
            let mut b = r.to_bytes();
            let i = flip.index(b.len());
            b[i] ^= 0x20;
            let s = judge_entry(7, seq, Operator::of(&r).to_word(), &b);
            prop_assert!(matches!(s, EntryState::Torn(_)), "{:?}", s);
        }
    }
}
