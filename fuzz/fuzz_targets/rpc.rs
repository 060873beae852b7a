//! The durable RPCs' request and reply frames (seed 003): requests come from the network
//! and from redo-log slots a crash may have torn, so the decoders must refuse any damaged
//! bytes without panicking, and what they accept must re-encode to an equal frame. Each
//! input also runs with a valid magic and checksum, so the decoding behind the CRC check
//! is explored too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora_rpc::proto::{ReplyFrame, Request, REPLY_HEADER, REQUEST_HEADER};

fn check(data: &[u8]) {
    if let Ok((r, used)) = Request::parse(data) {
        assert!(used <= data.len() && used == r.frame_len());
        let mut b = Vec::new();
        r.emit(&mut b);
        assert_eq!(Request::parse(&b), Ok((r, used)));
    }
    if let Ok((r, used)) = ReplyFrame::parse(data) {
        assert!(used <= data.len() && used == r.frame_len());
        let mut b = Vec::new();
        r.emit(&mut b);
        assert_eq!(ReplyFrame::parse(&b), Ok((r, used)));
    }
}

/// Writes the CRC-32C of `b[..len]` (with the field zero) into `field`.
fn seal(b: &mut [u8], len: usize, field: std::ops::Range<usize>) {
    b[field.clone()].fill(0);
    let crc = crc32c::crc32c(&b[..len]);
    b[field].copy_from_slice(&crc.to_le_bytes());
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= REQUEST_HEADER {
        let mut b = data.to_vec();
        b[..2].copy_from_slice(b"RQ");
        b[3] = 0;
        let arg = u32::from_le_bytes(b[24..28].try_into().unwrap()) as usize;
        let len = REQUEST_HEADER + if b[2] == 2 { arg } else { 0 };
        if len <= b.len() {
            seal(&mut b, len, 28..32);
        }
        check(&b);
    }
    if data.len() >= REPLY_HEADER {
        let mut b = data.to_vec();
        // Every status, known (0..=2) or not.
        b[..2].copy_from_slice(b"RP");
        b[2] %= 4;
        b[3] = 0;
        let vlen = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
        let len = REPLY_HEADER + vlen;
        if len <= b.len() {
            seal(&mut b, len, 20..24);
        }
        check(&b);
    }
});
