//! A library frame has one encoding: the header fields a Hello or an Ack does not use
//! (the entry count, the Ack-wanted flag, and for a Hello the sequence number) must be
//! zero, as `emit` writes them. Accepting other values under a valid checksum takes in
//! bytes this build does not understand (a peer's newer or broken encoder) as if they
//! were something else.

use remora::wire::{Frame, FrameError, Hello, HEADER};
use remora_model::config::ServerConfig;

/// `b` with its checksum (bytes 20..24, over the frame with the field zero) recomputed.
fn resealed(mut b: Vec<u8>) -> Vec<u8> {
    b[20..24].fill(0);
    let crc = remora::checksum::crc32c(&b);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
    b
}

fn hello() -> Frame {
    Frame::Hello(Hello {
        config: ServerConfig::table1()[0],
        region_addr: 4096,
        region_len: 4096,
        region_rkey: 1,
        rq_slots: 4,
        rq_slot_bytes: 256,
        seq_base: 1,
        ring_addr: 8192,
        ring_rkey: Some(2),
    })
}

#[test]
fn unused_header_fields_of_hello_and_ack_must_be_zero() {
    for f in [hello(), Frame::Ack { seq: 7 }] {
        let good = f.emit();
        assert_eq!(Frame::parse(&good), Ok(f.clone()));
        // (byte, value, what): the Ack-wanted flag, the entry count.
        for (at, value) in [(6usize, 1u8), (7, 1), (7, 16)] {
            let mut b = good.clone();
            b[at] = value;
            let b = resealed(b);
            let got = Frame::parse(&b);
            assert!(
                matches!(got, Err(FrameError::BadValue(_))),
                "{f:?} with byte {at} = {value} under a valid checksum: {got:?}"
            );
        }
    }
    // A Hello carries no sequence number.
    let mut b = hello().emit();
    b[8] = 5;
    let got = Frame::parse(&resealed(b));
    assert!(
        matches!(got, Err(FrameError::BadValue(_))),
        "Hello with a sequence number: {got:?}"
    );
}

#[test]
fn every_accepted_frame_re_encodes_to_its_bytes() {
    // What the fuzz target now asserts, over the header bytes a frame without entries
    // could vary in.
    for f in [hello(), Frame::Ack { seq: 7 }] {
        let good = f.emit();
        for at in 5..HEADER - 4 {
            for value in [1u8, 0x80, 0xff] {
                let mut b = good.clone();
                b[at] ^= value;
                let b = resealed(b);
                if let Ok(g) = Frame::parse(&b) {
                    assert_eq!(g.emit(), b, "byte {at} ^ {value:#x} of {f:?}");
                }
            }
        }
    }
}
