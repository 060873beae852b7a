//! The server bounds a Scan by the connection's `max_scan`, not only the library client:
//! a client that writes a larger Scan into its log (hostile, or built with other options)
//! gets a refusal in its reply, and the connection goes on serving. The client's receive
//! buffers are sized for `max_scan` objects (`DurableOptions::recv_bytes`), so a larger
//! reply could not be delivered: the client's RNIC refused it and the connection ended.

use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_model::verbs::{Access, Opcode, Payload, RecvWr, SendWr, Sge, WcOpcode, WcStatus};
use remora_rpc::durable::{ConnInfo, DurableOptions, DurablePair, ServerMsg};
use remora_rpc::harness::dmp;
use remora_rpc::kv::KvStore;
use remora_rpc::proto::{Request, REPLY_HEADER};
use remora_rpc::{Design, Op, Reply, ReplyStatus, RpcClient, RpcError};
use remora_verbs::{Space, Verbs};
use std::cell::RefCell;
use std::rc::Rc;

fn opts(design: Design) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.capacity = 8;
    o.objects = 4;
    o.max_value = 64;
    o.max_scan = 1;
    o
}

/// A library client built with a larger `max_scan` than the server's: its Scan of four
/// objects reaches the server, which refuses it; the connection serves the next requests.
#[test]
fn a_scan_beyond_max_scan_is_refused_by_the_server() {
    for design in Design::DURABLE {
        let pair = DurablePair::new(
            3,
            LatencyProfile::default_profile(),
            dmp(false),
            opts(design),
        );
        let server = pair.fresh_server().unwrap();
        let mut wide = pair.opts.clone();
        wide.max_scan = 4;
        let mut client = pair.serve_client(server, &wide).unwrap();
        let got = pair
            .sim
            .block_on(Instant::NEVER, async move {
                for key in 0..4u64 {
                    let value = vec![key as u8 + 1; 64];
                    client.call(Op::Put { key, value }).await?;
                }
                let scan = client.call(Op::Scan { key: 0, count: 4 }).await?;
                let one = client.call(Op::Scan { key: 2, count: 1 }).await?;
                Ok::<_, RpcError>((scan.reply, one.reply, client.drain().await?.len()))
            })
            .unwrap();
        let (scan, one, puts) = got.unwrap_or_else(|e| panic!("{design}: {e}"));
        assert_eq!(
            scan,
            Some(Reply::refused(5, ReplyStatus::ScanTooLarge)),
            "{design}"
        );
        assert_eq!(one, Some(Reply::ok(6, vec![3; 64])), "{design}");
        assert_eq!(puts, 4, "{design}: the Puts' replies");
        assert!(matches!(
            scan.unwrap().executed(),
            Err(RpcError::Refused {
                seq: 5,
                why: ReplyStatus::ScanTooLarge
            })
        ));
    }
}

/// A client speaking for itself (no library client) with receive buffers of the agreed
/// size writes a Scan of four objects and a Get into its log (W-RFlush-RPC: a WRITE and a
/// doorbell each). Both are answered; without the server's bound the Scan's reply did not
/// fit the client's buffer and its RNIC ended the connection, the Get unanswered.
#[test]
fn an_oversized_scan_written_into_the_log_does_not_end_the_connection() {
    let pair = DurablePair::new(
        3,
        LatencyProfile::default_profile(),
        dmp(false),
        opts(Design::WRFlushRpc),
    );
    let server = pair.fresh_server().unwrap();
    let info = server.conn_info();
    // A store whose four objects are full, so a Scan of all of them is 256 bytes of values.
    let mut kv = KvStore::new(pair.server.clone(), server.kv_layout());
    pair.sim
        .block_on(Instant::NEVER, async move {
            for key in 0..4u64 {
                kv.apply(
                    99,
                    key + 1,
                    &Op::Put {
                        key,
                        value: vec![9; 64],
                    },
                )
                .await;
            }
        })
        .unwrap();
    let c = pair.client.clone();
    let (qp, cq, pd) = pair.bare_qp(server.qp()).unwrap();
    // Receive buffers as the library client sizes them: one reply of `max_scan` objects.
    let recv_bytes = (REPLY_HEADER as u64 + 64).max(64);
    let bufs = c.alloc(Space::Dram, 8 * recv_bytes, 64);
    let mr = c
        .reg_mr(pd, Space::Dram, bufs, 8 * recv_bytes, Access::ALL)
        .unwrap();
    for i in 0..8u64 {
        let sge = Sge {
            addr: bufs + i * recv_bytes,
            len: recv_bytes as u32,
            lkey: mr.lkey,
        };
        c.post_recv(qp, RecvWr { wr_id: i, sge }).unwrap();
    }
    let ended = Rc::new(RefCell::new(None));
    let e = ended.clone();
    pair.sim.spawn_on(&pair.server, async move {
        *e.borrow_mut() = Some(server.serve().await.to_string());
    });
    let conn = pair.opts.conn;
    for (seq, op) in [
        (1u64, Op::Scan { key: 0, count: 4 }),
        (2, Op::Get { key: 1 }),
    ] {
        let frame = Request { conn, seq, op }.to_bytes();
        c.post_send(qp, entry_write(seq, frame, &info)).unwrap();
        c.post_send(qp, doorbell(seq as u32, &info)).unwrap();
    }
    let limit = Instant::from_nanos(pair.sim.now().as_nanos() + 10_000_000);
    pair.sim.run_until(limit);
    let (mut replies, mut failed) = (Vec::new(), Vec::new());
    while let Some(wc) = c.poll_one(cq) {
        if wc.status != WcStatus::Success {
            failed.push(format!("{:?} {}", wc.opcode, wc.status));
            continue;
        }
        if wc.opcode != WcOpcode::Recv {
            continue;
        }
        let mut b = vec![0u8; wc.byte_len as usize];
        c.load(Space::Dram, bufs + wc.wr_id * recv_bytes, &mut b);
        if let ServerMsg::Reply(f) = ServerMsg::parse(&b).unwrap() {
            replies.push(f.reply);
        }
    }
    assert_eq!(
        replies,
        vec![
            Reply::refused(1, ReplyStatus::ScanTooLarge),
            Reply::ok(2, vec![9; 64])
        ],
        "the connection ended: {:?}; the client's failed work requests: {failed:?}",
        ended.borrow()
    );
    assert_eq!(*ended.borrow(), None, "the connection still serves");
}

fn doorbell(seq: u32, info: &ConnInfo) -> SendWr {
    SendWr::new(
        1,
        Opcode::WriteWithImm(seq),
        Payload::None,
        Some(info.entries_remote()),
    )
}

fn entry_write(seq: u64, frame: Vec<u8>, info: &ConnInfo) -> SendWr {
    SendWr::new(
        2,
        Opcode::Write,
        Payload::inline(frame),
        Some(info.data_remote(seq)),
    )
}
