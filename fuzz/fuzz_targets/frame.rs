//! The library's frames sit in receive buffers that recovery reads after a crash: the
//! decoder must refuse any damaged bytes without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora::wire::Frame;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Frame::parse(data) {
        let b = f.emit();
        assert_eq!(Frame::parse(&b).as_ref(), Ok(&f));
    }
});
