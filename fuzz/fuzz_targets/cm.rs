//! The soft RNIC's connection-manager frames (the handshake before any packet): refused,
//! never a panic, on any bytes; an accepted frame re-encodes to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora_soft::cm::Cm;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = Cm::parse(data) {
        let b = c.emit();
        assert_eq!(Cm::parse(&b), Ok(c));
        assert_eq!(&b[..], &data[..b.len()]);
    }
});
