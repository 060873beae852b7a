//! The PM pool file's header and layout record (what `serve` and `rpc-serve` read before
//! they map a pool, and what a crash or a stray write may have damaged): refused, never a
//! panic, on any bytes; an accepted header re-encodes to one that reads back the same. Each
//! input also becomes the text of a valid header's layout record, and is laid over a valid
//! header whose checksums are then recomputed (`Header::reseal`), so what lies behind the
//! checksums (the fields' checks, the text's own decoding) is explored too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora_soft::pool::{Header, LAYOUT_MAX, MIN_POOL_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::parse(data) {
        assert_eq!(Header::parse(&h.emit()), Ok(h));
    }
    // Over a valid header with a layout record, its checksums made to match.
    let mut b = Header {
        data_len: MIN_POOL_BYTES,
        layout: Some("layout".into()),
    }
    .emit();
    for (i, x) in data.iter().enumerate() {
        b[i % b.len()] ^= x;
    }
    Header::reseal(&mut b);
    if let Ok(h) = Header::parse(&b) {
        assert_eq!(Header::parse(&h.emit()), Ok(h));
    }
    let text = String::from_utf8_lossy(&data[..data.len().min(LAYOUT_MAX)]);
    let mut text = text.into_owned();
    while text.len() > LAYOUT_MAX {
        text.pop();
    }
    if !text.is_empty() {
        let h = Header {
            data_len: MIN_POOL_BYTES,
            layout: Some(text),
        };
        assert_eq!(Header::parse(&h.emit()), Ok(h));
    }
});
