//! The soft RNIC's frame decoder, as its read loop uses it: `Packet::frame_len` on whatever
//! bytes a peer sent, then `Frame::parse` on one frame. It must refuse, never panic; a
//! packet it accepts must re-encode to the same bytes, and a write train's WRITEs must
//! stay inside the frame. Each input also runs with its magic, version and body length
//! made valid, so the body decoders are explored and not only the header check.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora_model::wire::{Frame, Packet, TrainTail, WIRE_HEADER};

fn check(data: &[u8]) {
    let Ok(Some(len)) = Packet::frame_len(data) else {
        return;
    };
    if len > data.len() {
        return; // the read loop waits for more bytes
    }
    match Frame::parse(&data[..len]) {
        Ok(Frame::Packet(p)) => assert_eq!(p.emit(), &data[..len]),
        Ok(Frame::WriteTrain(t)) => {
            let mut bytes = 0;
            // Encoding the train's WRITEs again, as a sender does, gives the same bytes.
            let mut out = Vec::new();
            let mut tail: Option<TrainTail> = None;
            for w in t.writes() {
                bytes += w.data.len();
                // Each WRITE also stands alone as a packet (how a rejected one is handled).
                let p = w.to_packet(&t);
                assert_eq!(Packet::parse(&p.emit()).as_ref(), Ok(&p));
                match tail.as_mut() {
                    Some(tail) => assert!(tail.push(&p, &mut out)),
                    None => tail = Some(TrainTail::start(&p, &mut out).expect("a WRITE")),
                }
            }
            assert!(bytes <= len);
            assert_eq!(out, &data[..len]);
        }
        Err(_) => {}
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= WIRE_HEADER {
        let mut b = data.to_vec();
        b[..3].copy_from_slice(b"DR\x01");
        let body = (b.len() - WIRE_HEADER) as u32;
        b[28..32].copy_from_slice(&body.to_le_bytes());
        check(&b);
    }
});
