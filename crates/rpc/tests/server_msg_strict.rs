//! A server message is the whole receive: a reply (or a `Durable` notice) followed by
//! bytes it does not account for is malformed, not a reply with garbage ignored.

use remora_rpc::durable::ServerMsg;
use remora_rpc::proto::ReplyFrame;
use remora_rpc::Reply;

#[test]
fn a_reply_with_trailing_bytes_is_rejected() {
    let msg = ServerMsg::Reply(ReplyFrame {
        conn: 1,
        reply: Reply::ok(4, vec![1, 2, 3]),
    });
    let good = msg.to_bytes();
    assert_eq!(ServerMsg::parse(&good).unwrap(), msg);
    for extra in [&[0u8][..], &[0xde, 0xad, 0xbe, 0xef], &good[..]] {
        let mut b = good.clone();
        b.extend_from_slice(extra);
        let r = ServerMsg::parse(&b);
        assert!(
            r.is_err(),
            "{} trailing bytes after a reply were accepted: {r:?}",
            extra.len()
        );
    }
}

#[test]
fn a_durable_notice_is_exactly_sixteen_bytes() {
    let d = ServerMsg::Durable { upto: 7 }.to_bytes();
    let mut long = d.clone();
    long.push(0);
    assert!(ServerMsg::parse(&long).is_err());
    assert!(ServerMsg::parse(&d[..15]).is_err());
}

#[test]
fn every_strict_prefix_of_a_message_is_rejected() {
    for msg in [
        ServerMsg::Durable { upto: u64::MAX },
        ServerMsg::Reply(ReplyFrame {
            conn: 9,
            reply: Reply::ok(u64::MAX, vec![5; 40]),
        }),
    ] {
        let b = msg.to_bytes();
        for cut in 0..b.len() {
            assert!(
                ServerMsg::parse(&b[..cut]).is_err(),
                "prefix {cut} of {msg:?}"
            );
        }
    }
}
