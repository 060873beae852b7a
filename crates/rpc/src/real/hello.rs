//! The durable-RPC handshake frames that follow the connection manager's `Hello`:
//! [`DurableClaim`] (client to server) and [`DurableHello`] (server to client).

use crate::design::{Design, FlushForm};
use crate::durable::{ConnInfo, DurableOptions, Fault};
use crate::flush::FlushParams;
use crate::kv::KvLayout;
use remora_model::config::ServerConfig;
use remora_model::time::Duration;
use remora_verbs::*;

/// Bytes of a [`DurableHello`] frame.
pub const HELLO_BYTES: usize = 104;
/// Version of the [`DurableHello`] frame (and of the [`DurableClaim`]).
pub const HELLO_VERSION: u16 = 3;
const HELLO_MAGIC: &[u8; 4] = b"RDRH";
/// Bytes of a [`DurableClaim`] frame.
pub const CLAIM_BYTES: usize = 24;
const CLAIM_MAGIC: &[u8; 4] = b"RDRC";

/// What the server tells a connecting client after the connection manager's `Assign`:
/// the connection options both sides must share and where its redo log is.
///
/// Layout (104 bytes, little-endian):
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | magic `RDRH` |
/// | 4..6 | version (3: the hello carries the connection's key) |
/// | 6 | design: 1 SFlush-RPC, 2 WFlush-RPC, 3 S-RFlush-RPC, 4 W-RFlush-RPC |
/// | 7 | Flush form: 1 emulated, 2 native |
/// | 8..12 | connection id |
/// | 12..16 | log capacity (entries) |
/// | 16..20 | largest value |
/// | 20..24 | largest Scan count |
/// | 24..32 | objects in the store |
/// | 32..40 | emulated SFlush's address lookup, ns |
/// | 40 | negative control: 0 none, 1..5 ([`Fault`] in declaration order) |
/// | 41..46 | server configuration (`ServerConfig::to_bytes`) |
/// | 46..48 | reserved (0) |
/// | 48..56 | log base address |
/// | 56..60 | log entry bytes |
/// | 60..64 | log remote key |
/// | 64..72 | processed watermark after recovery |
/// | 72..80 | processed watermark before recovery |
/// | 80..88 | object store base address (for checkers reading the pool) |
/// | 88..96 | the connection's key ([`crate::redolog::OWNER_KEY_OFFSET`]) |
/// | 96..100 | CRC-32C of bytes 0..96 |
/// | 100..104 | reserved (0) |
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableHello {
    /// The options the server runs (the fields both sides share; the server's costs and
    /// the client's batch and time-outs are each side's own).
    pub opts: DurableOptions,
    /// The server's log.
    pub info: ConnInfo,
    /// PM address of the object store.
    pub kv_base: u64,
    /// The connection's key: drawn when a new client takes the log, and presented in the
    /// [`DurableClaim`] of every reconnection. A claim with another key is refused
    /// (`RefuseCode::NotOwner`), so no other client gets the log, its recovered replies or
    /// its sequence numbers.
    pub key: u64,
}

/// Why bytes are not a durable-RPC handshake frame ([`DurableHello`], [`DurableClaim`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// Not exactly [`HELLO_BYTES`] bytes.
    #[error("durable-RPC hello of {0} bytes (need {HELLO_BYTES})")]
    Length(usize),
    /// Not exactly [`CLAIM_BYTES`] bytes.
    #[error("durable-RPC claim of {0} bytes (need {CLAIM_BYTES})")]
    ClaimLength(usize),
    /// Not a durable-RPC frame of the kind expected.
    #[error("not a durable-RPC hello or claim (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// Another version.
    #[error("peer speaks durable-RPC handshake version {0}, this is {HELLO_VERSION}")]
    Version(u16),
    /// The checksum does not match.
    #[error("durable-RPC handshake frame checksum mismatch")]
    Checksum,
    /// A field holds a value this build does not know, or fields disagree.
    #[error("bad durable-RPC handshake frame: {0}")]
    BadValue(String),
    /// A claim of a connection without its key, or of no connection with one.
    #[error("a claim of node {node} with key {key:#x} (a new client claims node 0 with no key)")]
    ClaimKey {
        /// The node id claimed.
        node: u32,
        /// The key given.
        key: u64,
    },
}

/// The largest processed watermark a [`DurableHello`] may carry (2^62: more requests than
/// any connection makes).
pub const MAX_WATERMARK: u64 = 1 << 62;

pub(super) fn design_code(d: Design) -> Option<u8> {
    Some(match d {
        Design::SFlushRpc => 1,
        Design::WFlushRpc => 2,
        Design::SRFlushRpc => 3,
        Design::WRFlushRpc => 4,
        _ => return None,
    })
}

const FAULTS: [Fault; 5] = [
    Fault::AckOnWriteCompletion,
    Fault::SkipResponderCpuFlush,
    Fault::OperatorBeforeData,
    Fault::IgnoreStampOnRecovery,
    Fault::UnlockedStore,
];

impl DurableHello {
    /// The frame's bytes. Panics if `opts.design` is not a durable design (a server is
    /// never built for one).
    pub fn emit(&self) -> [u8; HELLO_BYTES] {
        let o = &self.opts;
        let mut b = [0u8; HELLO_BYTES];
        b[0..4].copy_from_slice(HELLO_MAGIC);
        b[4..6].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        b[6] = design_code(o.design).expect("a durable design");
        b[7] = match o.flush.form {
            FlushForm::Emulated => 1,
            FlushForm::Native => 2,
        };
        b[8..12].copy_from_slice(&o.conn.to_le_bytes());
        b[12..16].copy_from_slice(&o.capacity.to_le_bytes());
        b[16..20].copy_from_slice(&o.max_value.to_le_bytes());
        b[20..24].copy_from_slice(&o.max_scan.to_le_bytes());
        b[24..32].copy_from_slice(&o.objects.to_le_bytes());
        b[32..40].copy_from_slice(&o.flush.sflush_lookup.as_nanos().to_le_bytes());
        b[40] = o.fault.map_or(0, |f| {
            FAULTS.iter().position(|&x| x == f).unwrap() as u8 + 1
        });
        b[41..46].copy_from_slice(&self.info.config.to_bytes());
        b[48..56].copy_from_slice(&self.info.layout.base.to_le_bytes());
        b[56..60].copy_from_slice(&self.info.layout.entry_bytes.to_le_bytes());
        b[60..64].copy_from_slice(&self.info.log_rkey.to_le_bytes());
        b[64..72].copy_from_slice(&self.info.processed.to_le_bytes());
        b[72..80].copy_from_slice(&self.info.processed_before_recovery.to_le_bytes());
        b[80..88].copy_from_slice(&self.kv_base.to_le_bytes());
        b[88..96].copy_from_slice(&self.key.to_le_bytes());
        let crc = remora::checksum::crc32c(&b[..96]);
        b[96..100].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses exactly one frame. Rejects truncation, another magic or version, a flipped
    /// byte (CRC-32C), unknown codes, non-zero reserved bytes, a log layout that does not
    /// follow from the options, and a log or object store past the end of the address
    /// space.
    pub fn parse(b: &[u8]) -> Result<DurableHello, HelloError> {
        if b.len() != HELLO_BYTES {
            return Err(HelloError::Length(b.len()));
        }
        if &b[0..4] != HELLO_MAGIC {
            return Err(HelloError::BadMagic(b[0..4].try_into().unwrap()));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != HELLO_VERSION {
            return Err(HelloError::Version(version));
        }
        if remora::checksum::crc32c(&b[..96]).to_le_bytes() != b[96..100] {
            return Err(HelloError::Checksum);
        }
        let bad = |s: String| Err(HelloError::BadValue(s));
        if b[46..48] != [0, 0] || b[100..104] != [0; 4] {
            return bad("reserved bytes".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let Some(&design) = (b[6] as usize)
            .checked_sub(1)
            .and_then(|i| Design::DURABLE.get(i))
        else {
            return bad(format!("design code {}", b[6]));
        };
        let form = match b[7] {
            1 => FlushForm::Emulated,
            2 => FlushForm::Native,
            x => return bad(format!("Flush form code {x}")),
        };
        let fault = match b[40] {
            0 => None,
            x => match FAULTS.get(x as usize - 1) {
                Some(&f) => Some(f),
                None => return bad(format!("fault code {x}")),
            },
        };
        let config = ServerConfig::from_bytes(b[41..46].try_into().unwrap())
            .map_err(|e| HelloError::BadValue(e.to_string()))?;
        let mut opts = DurableOptions::new(design);
        opts.flush = FlushParams {
            form,
            sflush_lookup: Duration::from_nanos(u64_at(32)),
        };
        opts.conn = u32_at(8);
        opts.capacity = u32_at(12);
        opts.max_value = u32_at(16);
        opts.max_scan = u32_at(20);
        opts.objects = u64_at(24);
        opts.fault = fault;
        // A reply (up to `max_scan` values) travels in one message: a hello that asks for
        // more names receive buffers no wire carries, and their total would overflow.
        if opts.recv_bytes() > remora_model::wire::MAX_WIRE_BODY as u64 {
            return bad(format!(
                "replies of up to {} values of {} bytes: more than a message carries",
                opts.max_scan, opts.max_value
            ));
        }
        let layout = opts
            .log_layout(u64_at(48))
            .map_err(|e| HelloError::BadValue(e.to_string()))?;
        if layout.entry_bytes != u32_at(56) {
            return bad(format!(
                "log entries of {} bytes, but capacity {} and values up to {} make {}",
                u32_at(56),
                opts.capacity,
                opts.max_value,
                layout.entry_bytes
            ));
        }
        // Every entry's address is `base` plus its offset, every object's `kv_base` plus
        // its: a log or a store that runs past the address space would overflow them.
        if layout.base.checked_add(layout.bytes()).is_none() {
            return bad(format!(
                "a redo log at {:#x} of {} bytes runs past the address space",
                layout.base,
                layout.bytes()
            ));
        }
        let kv_base = u64_at(80);
        let kv = KvLayout {
            base: kv_base,
            objects: opts.objects,
            max_value: opts.max_value as u64,
        };
        if kv
            .checked_bytes()
            .and_then(|n| kv_base.checked_add(n))
            .is_none()
        {
            return bad(format!(
                "an object store at {kv_base:#x} of {} objects of {} bytes runs past the \
                 address space",
                kv.objects,
                kv.slot_bytes()
            ));
        }
        let (processed, before) = (u64_at(64), u64_at(72));
        // A connection numbers its requests from `processed + 1` up: no watermark near the
        // top of the range is real, and one there would wrap the client's count.
        if processed > MAX_WATERMARK {
            return bad(format!("watermark {processed} (at most {MAX_WATERMARK})"));
        }
        if before > processed {
            return bad(format!(
                "watermark {before} before recovery past {processed} after"
            ));
        }
        Ok(DurableHello {
            opts,
            info: ConnInfo {
                config,
                layout,
                log_rkey: u32_at(60),
                processed,
                processed_before_recovery: before,
            },
            kv_base,
            key: u64_at(88),
        })
    }

    /// The object store's layout.
    pub fn kv_layout(&self) -> KvLayout {
        KvLayout {
            base: self.kv_base,
            objects: self.opts.objects,
            max_value: self.opts.max_value as u64,
        }
    }

    /// `mine` with the fields both sides share replaced by the server's (the client keeps
    /// its batch, probe interval and reply time-out).
    pub fn adopt(&self, mine: &DurableOptions) -> DurableOptions {
        DurableOptions {
            batch: mine.batch,
            probe_interval: mine.probe_interval,
            reply_timeout: mine.reply_timeout,
            costs: mine.costs,
            poll_interval: mine.poll_interval,
            ..self.opts.clone()
        }
    }
}

/// What a client sends right after the connection manager's `Hello`, before the server
/// assigns its node id: which connection it is. A new client claims node 0 and gets a
/// free connection; a client reconnecting after its server restarted claims the node id it
/// has, with the connection's key ([`DurableHello::key`]), and gets that connection's redo
/// log back (its `DurableClient` resumes on it). A server serves several connections, so
/// it cannot tell them apart otherwise.
///
/// Layout (24 bytes, little-endian): magic `RDRC` (0..4), version (4..6, the
/// [`HELLO_VERSION`]), reserved zero (6..8), node id (8..12; 0: a new client), key
/// (12..20; 0 for a new client), CRC-32C of bytes 0..20 (20..24).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DurableClaim {
    /// The node id the client has, or 0 for a new client.
    pub node: NodeId,
    /// The connection's key the client was given, or 0 for a new client.
    pub key: u64,
}

impl DurableClaim {
    /// The frame's bytes.
    pub fn emit(&self) -> [u8; CLAIM_BYTES] {
        let mut b = [0u8; CLAIM_BYTES];
        b[0..4].copy_from_slice(CLAIM_MAGIC);
        b[4..6].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        b[8..12].copy_from_slice(&self.node.to_le_bytes());
        b[12..20].copy_from_slice(&self.key.to_le_bytes());
        let crc = remora::checksum::crc32c(&b[..20]);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses exactly one frame: rejects truncation, another magic or version, a flipped
    /// byte (CRC-32C) and non-zero reserved bytes.
    pub fn parse(b: &[u8]) -> Result<DurableClaim, HelloError> {
        if b.len() != CLAIM_BYTES {
            return Err(HelloError::ClaimLength(b.len()));
        }
        if &b[0..4] != CLAIM_MAGIC {
            return Err(HelloError::BadMagic(b[0..4].try_into().unwrap()));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != HELLO_VERSION {
            return Err(HelloError::Version(version));
        }
        if remora::checksum::crc32c(&b[..20]).to_le_bytes() != b[20..24] {
            return Err(HelloError::Checksum);
        }
        if b[6..8] != [0, 0] {
            return Err(HelloError::BadValue("reserved bytes".into()));
        }
        let node = u32::from_le_bytes(b[8..12].try_into().unwrap());
        let key = u64::from_le_bytes(b[12..20].try_into().unwrap());
        if (node == 0) != (key == 0) {
            return Err(HelloError::ClaimKey { node, key });
        }
        Ok(DurableClaim { node, key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(design: Design, fault: Option<Fault>) -> DurableHello {
        let mut opts = DurableOptions::new(design);
        opts.fault = fault;
        opts.capacity = 16;
        DurableHello {
            info: ConnInfo {
                config: "DMP+DDIO+PM-RQWRB".parse().unwrap(),
                layout: opts.log_layout(0x1_0000_0000).unwrap(),
                log_rkey: 77,
                processed: 9,
                processed_before_recovery: 7,
            },
            kv_base: 0x1_0000_8000,
            key: 0x5eed_0000_0000_0003,
            opts,
        }
    }

    #[test]
    fn hello_round_trips_and_rejects_bad_bytes() {
        for d in Design::DURABLE {
            for f in [None, Some(Fault::OperatorBeforeData)] {
                let h = hello(d, f);
                let b = h.emit();
                assert_eq!(DurableHello::parse(&b), Ok(h.clone()));
                assert_eq!(
                    DurableHello::parse(&b[..HELLO_BYTES - 1]),
                    Err(HelloError::Length(HELLO_BYTES - 1))
                );
                for i in 0..HELLO_BYTES {
                    let mut x = b;
                    x[i] ^= 0x10;
                    assert!(DurableHello::parse(&x).is_err(), "{d}: byte {i} flipped");
                }
            }
        }
        // A valid checksum over unknown values is still refused.
        let mut b = hello(Design::WFlushRpc, None).emit();
        b[6] = 9;
        let crc = remora::checksum::crc32c(&b[..96]);
        b[96..100].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            DurableHello::parse(&b),
            Err(HelloError::BadValue(_))
        ));
        let mut b = hello(Design::WFlushRpc, None).emit();
        b[4] = 2;
        assert_eq!(DurableHello::parse(&b), Err(HelloError::Version(2)));
        // A watermark with no room above it (a client counts up from it) is refused: at
        // u64::MAX the client's next sequence number wrapped to 0 and it panicked.
        for (processed, ok) in [
            (MAX_WATERMARK, true),
            (MAX_WATERMARK + 1, false),
            (u64::MAX, false),
        ] {
            let mut h = hello(Design::WFlushRpc, None);
            h.info.processed = processed;
            let parsed = DurableHello::parse(&h.emit());
            assert_eq!(parsed.is_ok(), ok, "{processed}: {parsed:?}");
        }
        // Replies larger than a message are refused: with values near 4 GiB and scans as
        // long, a client's receive buffers came to more than 2^64 bytes (a panic in a debug
        // build, a wrapped size in a release one).
        for (max_value, max_scan, ok) in [
            (1 << 20, 15, true),
            (1 << 20, 16, false),
            (u32::MAX - 256, u32::MAX, false),
        ] {
            let mut h = hello(Design::WFlushRpc, None);
            h.opts.max_value = max_value;
            h.opts.max_scan = max_scan;
            h.info.layout = h.opts.log_layout(0x1_0000_0000).unwrap();
            let parsed = DurableHello::parse(&h.emit());
            assert_eq!(parsed.is_ok(), ok, "{max_value} x {max_scan}: {parsed:?}");
        }
    }

    #[test]
    fn claim_round_trips_and_rejects_bad_bytes() {
        for (node, key) in [(0, 0), (1, 9), (7, u64::MAX), (u32::MAX, 1)] {
            let c = DurableClaim { node, key };
            let b = c.emit();
            assert_eq!(DurableClaim::parse(&b), Ok(c));
            assert_eq!(
                DurableClaim::parse(&b[..CLAIM_BYTES - 1]),
                Err(HelloError::ClaimLength(CLAIM_BYTES - 1))
            );
            assert!(DurableClaim::parse(&[b.as_slice(), &[0]].concat()).is_err());
            for i in 0..CLAIM_BYTES {
                let mut x = b;
                x[i] ^= 0x04;
                assert!(DurableClaim::parse(&x).is_err(), "byte {i} flipped");
            }
        }
        // A hello is not a claim, and a valid checksum over reserved bytes is refused.
        let h = hello(Design::WFlushRpc, None).emit();
        assert!(DurableClaim::parse(&h[..CLAIM_BYTES]).is_err());
        let reseal = |b: &mut [u8; CLAIM_BYTES]| {
            let crc = remora::checksum::crc32c(&b[..20]);
            b[20..24].copy_from_slice(&crc.to_le_bytes());
        };
        let mut b = DurableClaim { node: 2, key: 5 }.emit();
        b[6] = 1;
        reseal(&mut b);
        assert!(matches!(
            DurableClaim::parse(&b),
            Err(HelloError::BadValue(_))
        ));
        let mut b = DurableClaim { node: 2, key: 5 }.emit();
        b[4] = 2;
        reseal(&mut b);
        assert_eq!(DurableClaim::parse(&b), Err(HelloError::Version(2)));
        // A new client names no key, and a reconnecting one always does.
        for (node, key) in [(0, 5), (2, 0)] {
            let b = DurableClaim { node, key }.emit();
            assert_eq!(
                DurableClaim::parse(&b),
                Err(HelloError::ClaimKey { node, key })
            );
        }
    }
}
