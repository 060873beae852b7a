//! What a durable-RPC server reads back from PM after a crash, and what its client reads
//! from the network: the redo log's header (`LogHeader`), its entries (operator word and
//! request frame, judged by `judge_entry`), and the server's messages (`ServerMsg`). Each
//! must refuse damaged or hostile bytes without panicking; an accepted header, operator or
//! message re-encodes to the bytes it was read from; and an entry is executed
//! (`Committed`) only when its operator and its whole frame agree. Each input also runs
//! as a header with a valid magic and checksum, and as a valid operator over its bytes, so
//! the checks behind them are explored too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use remora_rpc::durable::ServerMsg;
use remora_rpc::proto::Request;
use remora_rpc::redolog::{judge_entry, EntryState, LogHeader, Operator, HEADER_BYTES};

fn check_header(data: &[u8]) {
    if let Ok(h) = LogHeader::parse(data) {
        let b = h.emit();
        assert_eq!(&b[..], &data[..HEADER_BYTES]);
        assert_eq!(LogHeader::parse(&b), Ok(h));
    }
}

fn check_entry(conn: u32, seq: u64, word: u64, data: &[u8]) {
    match judge_entry(conn, seq, word, data) {
        EntryState::Committed(r) => {
            let op = Operator::from_word(word).expect("a committed entry has an operator");
            assert_eq!((r.conn, r.seq), (conn, seq));
            assert_eq!(op, Operator::of(&r));
            assert_eq!(r.to_bytes(), &data[..op.frame_len as usize]);
        }
        EntryState::Uncommitted => {
            assert!(Operator::from_word(word).is_none_or(|o| o.seq_lo != seq as u16))
        }
        EntryState::Torn(_) => {}
    }
}

fuzz_target!(|data: &[u8]| {
    check_header(data);
    if data.len() >= HEADER_BYTES {
        let mut b = data[..HEADER_BYTES].to_vec();
        b[0..4].copy_from_slice(b"RLOG");
        b[4..6].copy_from_slice(&remora_rpc::redolog::LOG_VERSION.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..24]);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        check_header(&b);
    }

    if let Some(w) = Operator::from_word(u64::from_le_bytes(
        data.get(..8).map_or([0; 8], |b| b.try_into().unwrap()),
    )) {
        assert_eq!(Operator::from_word(w.to_word()), Some(w));
    }
    if data.len() >= 20 {
        let conn = u32::from_le_bytes(data[0..4].try_into().unwrap());
        let seq = u64::from_le_bytes(data[4..12].try_into().unwrap()).max(1);
        let word = u64::from_le_bytes(data[12..20].try_into().unwrap());
        let frame = &data[20..];
        check_entry(conn, seq, word, frame);
        // The operator a client would write over these bytes, and a valid frame of this
        // connection and sequence number with the bytes as its value, flipped by one.
        if let Ok((r, used)) = Request::parse(frame) {
            check_entry(
                r.conn,
                r.seq.max(1),
                Operator::of(&r).to_word(),
                &frame[..used],
            );
        }
        let r = Request {
            conn,
            seq,
            op: remora_rpc::Op::Put {
                key: word,
                value: frame.to_vec(),
            },
        };
        let mut b = r.to_bytes();
        let w = Operator::of(&r).to_word();
        assert_eq!(judge_entry(conn, seq, w, &b), EntryState::Committed(r));
        let i = (word as usize) % b.len();
        b[i] ^= (word >> 56) as u8 | 1;
        assert!(!matches!(
            judge_entry(conn, seq, w, &b),
            EntryState::Committed(_)
        ));
    }

    if let Ok(m) = ServerMsg::parse(data) {
        let b = m.to_bytes();
        assert_eq!(b, data, "a server message is the whole receive");
        assert_eq!(ServerMsg::parse(&b).ok(), Some(m));
    }
});
