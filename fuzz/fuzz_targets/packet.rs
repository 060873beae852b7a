//! The soft RNIC's packet decoder must refuse, never panic, on any bytes a peer sends; and
//! what it accepts must re-encode to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora_model::wire::Packet;

fuzz_target!(|data: &[u8]| {
    let _ = Packet::frame_len(data);
    if let Ok(p) = Packet::parse(data) {
        assert_eq!(p.emit(), data);
    }
});
