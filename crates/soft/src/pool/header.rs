//! The pool file's header: its typed [`Header`], parsed and emitted here only (as the
//! wire frames are), so a wrong, damaged or truncated file is refused with a clear error.

use super::PoolError;
use std::path::Path;

const MAGIC: &[u8; 8] = b"REMORAPM";
/// Pool format version.
pub const POOL_VERSION: u32 = 1;
/// Bytes of the header (and offset of the data area).
pub const HEADER_BYTES: u64 = 4096;
/// Where the layout record starts in the header (see [`Header`]).
pub(super) const LAYOUT_AT: usize = 128;
/// Longest layout text the header holds.
pub const LAYOUT_MAX: usize = 2048;

/// The pool file's header, its first [`HEADER_BYTES`]: bytes 0..8 the magic, 8..12 the
/// format version, 16..24 the data offset, 24..32 the data length, 64..68 a CRC-32C of
/// bytes 0..64; from byte 128 (`LAYOUT_AT`) the layout record: its text's length (u32), a CRC-32C
/// of the length and the text (u32), the text (UTF-8, at most [`LAYOUT_MAX`] bytes);
/// length and checksum both zero mean no record. Everything else is zero. Parsed and
/// emitted here only, as the wire frames are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the data area.
    pub data_len: u64,
    /// The layout record, if a server wrote one ([`Pool::claim_layout`](super::Pool::claim_layout)).
    pub layout: Option<String>,
}

/// Why bytes are not a usable pool header.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Too short, or the magic is wrong: not a pool at all.
    #[error("not a remora PM pool")]
    NotAPool,
    /// A format version this build does not read.
    #[error("format version {0}")]
    Version(u32),
    /// A checksum or a field is wrong.
    #[error("damaged header ({0})")]
    Damaged(&'static str),
}

impl Header {
    /// Whether `b` starts with the pool's magic (a file too short for a header may still
    /// be a pool cut short).
    pub fn parse_magic(b: &[u8]) -> bool {
        b.starts_with(MAGIC)
    }

    /// Reads a header from the first [`HEADER_BYTES`] of `b`.
    pub fn parse(b: &[u8]) -> Result<Header, HeaderError> {
        let h = b
            .get(..HEADER_BYTES as usize)
            .ok_or(HeaderError::NotAPool)?;
        let u32_at = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8"));
        if &h[..8] != MAGIC {
            return Err(HeaderError::NotAPool);
        }
        if u32_at(8) != POOL_VERSION {
            return Err(HeaderError::Version(u32_at(8)));
        }
        if crc32c::crc32c(&h[..64]) != u32_at(64) {
            return Err(HeaderError::Damaged("header checksum mismatch"));
        }
        if u64_at(16) != HEADER_BYTES {
            return Err(HeaderError::Damaged("unknown data offset"));
        }
        if !(super::MIN_POOL_BYTES..=super::MAX_POOL_BYTES).contains(&u64_at(24)) {
            return Err(HeaderError::Damaged("data length out of range"));
        }
        let (len, crc) = (u32_at(LAYOUT_AT) as usize, u32_at(LAYOUT_AT + 4));
        let layout = if (len, crc) == (0, 0) {
            None
        } else if len == 0 || len > LAYOUT_MAX {
            // Empty text with a checksum is no record `emit` writes: a zero length with a
            // valid checksum of it (CRC-32C of four zero bytes) is damage, not a layout.
            return Err(HeaderError::Damaged("layout record length out of range"));
        } else {
            let text = &h[LAYOUT_AT + 8..LAYOUT_AT + 8 + len];
            if layout_crc(text) != crc {
                return Err(HeaderError::Damaged("layout record checksum mismatch"));
            }
            let text = std::str::from_utf8(text)
                .map_err(|_| HeaderError::Damaged("layout record not text"))?;
            Some(text.to_string())
        };
        Ok(Header {
            data_len: u64_at(24),
            layout,
        })
    }

    /// The header's bytes. Panics on a layout text longer than [`LAYOUT_MAX`] or empty
    /// (a caller's bug: the servers' texts are a few hundred bytes).
    pub fn emit(&self) -> [u8; HEADER_BYTES as usize] {
        let mut h = [0u8; HEADER_BYTES as usize];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&POOL_VERSION.to_le_bytes());
        h[16..24].copy_from_slice(&HEADER_BYTES.to_le_bytes());
        h[24..32].copy_from_slice(&self.data_len.to_le_bytes());
        let crc = crc32c::crc32c(&h[..64]);
        h[64..68].copy_from_slice(&crc.to_le_bytes());
        if let Some(text) = &self.layout {
            let text = text.as_bytes();
            assert!(
                !text.is_empty() && text.len() <= LAYOUT_MAX,
                "layout text of {} bytes",
                text.len()
            );
            h[LAYOUT_AT..LAYOUT_AT + 4].copy_from_slice(&(text.len() as u32).to_le_bytes());
            h[LAYOUT_AT + 4..LAYOUT_AT + 8].copy_from_slice(&layout_crc(text).to_le_bytes());
            h[LAYOUT_AT + 8..LAYOUT_AT + 8 + text.len()].copy_from_slice(text);
        }
        h
    }

    /// Recomputes the checksums of the header bytes `h` (at least [`HEADER_BYTES`]) over
    /// whatever its fields say: the fixed fields' and, if its stated length is at most
    /// [`LAYOUT_MAX`], the layout record's. For fuzzing: random bytes almost never pass a
    /// CRC, and this lets a fuzzer reach the checks behind them (the `pool_header`
    /// target found a header `parse` accepted and `emit` could not write this way).
    #[doc(hidden)]
    pub fn reseal(h: &mut [u8]) {
        let crc = crc32c::crc32c(&h[..64]);
        h[64..68].copy_from_slice(&crc.to_le_bytes());
        let len = u32::from_le_bytes(h[LAYOUT_AT..LAYOUT_AT + 4].try_into().expect("4"));
        if len as usize <= LAYOUT_MAX {
            let text = &h[LAYOUT_AT + 8..LAYOUT_AT + 8 + len as usize];
            let crc = layout_crc(text);
            h[LAYOUT_AT + 4..LAYOUT_AT + 8].copy_from_slice(&crc.to_le_bytes());
        }
    }
}

/// The layout record's checksum: over its length and its text, so a flipped bit in the
/// length (even one that makes it zero) is caught, as one in the text is.
pub(super) fn layout_crc(text: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&(text.len() as u32).to_le_bytes());
    crc32c::crc32c_append(crc, text)
}

impl HeaderError {
    /// The pool error this header error is for the file at `path`.
    pub(super) fn at(self, path: &Path) -> PoolError {
        let path = path.to_path_buf();
        match self {
            HeaderError::NotAPool => PoolError::NotAPool(path),
            HeaderError::Version(found) => PoolError::Version { path, found },
            HeaderError::Damaged(why) => PoolError::Damaged { path, why },
        }
    }
}
