//! The library's frames sit in receive buffers that recovery reads after a crash: the
//! decoder must refuse any damaged bytes without panicking, and what it accepts must
//! re-encode to an equal frame, and to the same bytes. Each input also runs with a valid
//! magic, version, body length and checksum, so the body decoders behind the CRC check
//! are explored too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora::wire::{Frame, HEADER, VERSION};

fn check(data: &[u8]) {
    if let Ok(f) = Frame::parse(data) {
        let b = f.emit();
        assert_eq!(Frame::parse(&b).as_ref(), Ok(&f));
        // One encoding per frame: a frame of this version re-encodes to the bytes it was
        // read from (what follows it in a receive slot is not part of it; a version-1
        // Apply, Notify or Ack re-encodes as version 2).
        if data[4] == VERSION {
            assert_eq!(&b[..], &data[..b.len()]);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= HEADER {
        let mut b = data.to_vec();
        b[..4].copy_from_slice(b"RMRA");
        b[4] = VERSION;
        let body = (b.len() - HEADER) as u32;
        b[16..20].copy_from_slice(&body.to_le_bytes());
        b[20..24].fill(0);
        let crc = crc32c::crc32c(&b);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        check(&b);
    }
});
