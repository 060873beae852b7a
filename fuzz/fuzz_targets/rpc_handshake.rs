//! The durable RPCs' handshake frames after the connection manager's: the client's
//! `DurableClaim` (which connection it is, and its key) reaches the server from the
//! network, and the server's `DurableHello` (options, log, watermarks, key) reaches the
//! client. Both decoders must refuse any damaged or hostile bytes without panicking (a
//! watermark with no room above it once panicked the client), and what they accept must
//! re-encode to an equal frame. Each input also runs with a valid magic, version and
//! checksum, so the checks behind the CRC are explored too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora_rpc::real::{DurableClaim, DurableHello, CLAIM_BYTES, HELLO_BYTES, HELLO_VERSION};

fn check(data: &[u8]) {
    if let Ok(h) = DurableHello::parse(data) {
        assert_eq!(DurableHello::parse(&h.emit()), Ok(h));
    }
    if let Ok(c) = DurableClaim::parse(data) {
        assert_eq!(DurableClaim::parse(&c.emit()), Ok(c));
    }
}

/// `b` with `magic` and this build's version, and the CRC-32C of `b[..crc.start]` at `crc`.
fn sealed(b: &[u8], magic: &[u8; 4], crc: std::ops::Range<usize>) -> Vec<u8> {
    let mut b = b.to_vec();
    b[..4].copy_from_slice(magic);
    b[4..6].copy_from_slice(&HELLO_VERSION.to_le_bytes());
    let sum = crc32c::crc32c(&b[..crc.start]);
    b[crc].copy_from_slice(&sum.to_le_bytes());
    b
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= HELLO_BYTES {
        check(&sealed(&data[..HELLO_BYTES], b"RDRH", 96..100));
    }
    if data.len() >= CLAIM_BYTES {
        check(&sealed(&data[..CLAIM_BYTES], b"RDRC", 20..24));
    }
});
