//! A durable-RPC client that breaks the protocol stops only its own connection, at once
//! and with the reason, and cannot damage the log: a doorbell beyond the log's window (it
//! made the server persist up to 2^32 entries that cannot exist, holding its only
//! thread), a SEND where a doorbell belongs, a corrupt entry (it was acknowledged as
//! durable, and recovery then dropped every entry acknowledged after it), and a WRITE to
//! the log's header or watermark (it made the pool unrecoverable). A request the store
//! cannot hold is refused in its reply, and a send the client's RNIC refuses ends the
//! connection under its own name.

use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_model::verbs::{Opcode, Payload, Remote, SendWr, WcStatus};
use remora_rpc::durable::{DurableClient, DurableOptions, DurablePair, DurableServer};
use remora_rpc::harness::dmp;
use remora_rpc::proto::Request;
use remora_rpc::{Design, Op, Reply, ReplyStatus, RpcClient, RpcError};
use remora_verbs::Verbs;

fn opts(design: Design) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.capacity = 8;
    o.objects = 4;
    o.max_value = 64;
    o
}

/// A server over a fresh log and the client node's QP connected to it (no library client:
/// the test speaks for the client).
fn setup(
    design: Design,
) -> (
    DurablePair,
    DurableServer<remora_sim::NodeHandle>,
    remora_model::verbs::QpNum,
    remora_model::verbs::CqId,
) {
    let pair = DurablePair::new(
        3,
        LatencyProfile::default_profile(),
        dmp(false),
        opts(design),
    );
    let server = pair.fresh_server().unwrap();
    let (qp, cq) = raw_qp(&pair, &server);
    (pair, server, qp, cq)
}

/// A queue pair (and its CQ) of the pair's client node, with no receive posted, connected
/// to `server`'s.
fn raw_qp(
    pair: &DurablePair,
    server: &DurableServer<remora_sim::NodeHandle>,
) -> (remora_model::verbs::QpNum, remora_model::verbs::CqId) {
    let (qp, cq, _) = pair.bare_qp(server.qp()).unwrap();
    (qp, cq)
}

/// Runs the server with the client's `posts` made first; the server's `serve` result, which
/// must come within 10 ms of simulated time.
fn serve_after(
    pair: &DurablePair,
    server: DurableServer<remora_sim::NodeHandle>,
    qp: remora_model::verbs::QpNum,
    posts: Vec<SendWr>,
) -> RpcError {
    let c = pair.client.clone();
    for wr in posts {
        c.post_send(qp, wr).unwrap();
    }
    let limit = Instant::from_nanos(pair.sim.now().as_nanos() + 10_000_000);
    pair.sim
        .block_on(limit, server.serve())
        .expect("the server stopped within 10 ms")
}

fn doorbell(seq: u32, info: &remora_rpc::durable::ConnInfo) -> SendWr {
    SendWr::new(
        1,
        Opcode::WriteWithImm(seq),
        Payload::None,
        Some(info.entries_remote()),
    )
}

/// Request 1 of the pair's connection: a Put of 16 bytes to key 1.
fn put_frame(pair: &DurablePair) -> Vec<u8> {
    Request {
        conn: pair.opts.conn,
        seq: 1,
        op: Op::Put {
            key: 1,
            value: vec![7; 16],
        },
    }
    .to_bytes()
}

/// A WRITE of `frame` to entry 1's data.
fn entry_write(frame: Vec<u8>, info: &remora_rpc::durable::ConnInfo) -> SendWr {
    SendWr::new(
        2,
        Opcode::Write,
        Payload::inline(frame),
        Some(info.data_remote(1)),
    )
}

#[test]
fn a_doorbell_beyond_the_window_stops_the_connection_at_once() {
    for design in [Design::WFlushRpc, Design::WRFlushRpc] {
        let (pair, server, qp, _) = setup(design);
        let info = server.conn_info();
        let e = serve_after(&pair, server, qp, vec![doorbell(0xFFFF_FFF0, &info)]);
        assert!(
            e.to_string().contains("beyond the log's window"),
            "{design}: {e}"
        );
    }
}

#[test]
fn a_send_where_a_doorbell_belongs_stops_the_connection() {
    let (pair, server, qp, _) = setup(Design::WRFlushRpc);
    let send = SendWr::new(1, Opcode::SendWithImm(3), Payload::inline(vec![0; 8]), None);
    let e = serve_after(&pair, server, qp, vec![send]);
    assert!(e.to_string().contains("doorbell: a Recv completion"), "{e}");
}

#[test]
fn a_corrupt_entry_is_never_acknowledged() {
    // W-RFlush-RPC with the emulated RFlush: the server's CPU persists each entry and
    // writes its operator before acknowledging it.
    let (pair, server, qp, _) = setup(Design::WRFlushRpc);
    let info = server.conn_info();
    let mut frame = put_frame(&pair);
    let last = frame.len() - 1;
    frame[last] ^= 0xFF; // one value byte off: the frame's checksum no longer holds
    let write = entry_write(frame, &info);
    let stats = server.stats();
    let e = serve_after(&pair, server, qp, vec![write, doorbell(1, &info)]);
    assert!(
        e.to_string().contains("entry 1: not a well-formed request"),
        "{e}"
    );
    assert_eq!(
        stats.get().cpu_persisted,
        0,
        "no operator for the corrupt entry"
    );
}

#[test]
fn the_log_header_and_watermark_are_out_of_a_clients_reach() {
    for at in ["header", "watermark"] {
        let (pair, server, qp, cq) = setup(Design::WRFlushRpc);
        let info = server.conn_info();
        let addr = match at {
            "header" => info.layout.base,
            _ => info.layout.watermark_addr(),
        };
        let wr = SendWr::new(
            3,
            Opcode::Write,
            Payload::inline(vec![0xFF; 8]),
            Some(Remote {
                addr,
                rkey: info.log_rkey,
            }),
        );
        let c = pair.client.clone();
        let wc = pair
            .sim
            .block_on(Instant::NEVER, async move {
                c.post_send(qp, wr).unwrap();
                remora_verbs::next_completion(&c, cq).await
            })
            .unwrap();
        assert_eq!(wc.status, WcStatus::RemAccessErr, "a WRITE to the {at}");
        drop(server);
    }
}

/// A request the store cannot hold (a key outside it) is refused, with the reason in its
/// reply, and changes nothing. It was answered like an executed request: the client took
/// a Put the server never ran for done. The library client refuses such a request before
/// sending it; here a client that believes the store is larger than it is sends them.
#[test]
fn a_request_the_store_cannot_hold_is_refused_never_answered_as_done() {
    for design in [Design::SFlushRpc, Design::WRFlushRpc] {
        let pair = DurablePair::new(
            3,
            LatencyProfile::default_profile(),
            dmp(false),
            opts(design),
        );
        // The library client with the server's options refuses the key itself.
        let mut honest = pair.open().unwrap();
        let put = |key: u64| Op::Put {
            key,
            value: vec![key as u8; 16],
        };
        let refused = pair
            .sim
            .block_on(Instant::NEVER, async move { honest.call(put(9)).await })
            .unwrap();
        assert!(
            matches!(&refused, Err(RpcError::Unsupported { what, .. }) if what.contains("key 9")),
            "{design}: {refused:?}"
        );

        let server = pair.fresh_server().unwrap();
        let mut wide = pair.opts.clone();
        wide.objects = 16;
        let layout = server.kv_layout();
        let mut client = pair.serve_client(server, &wide).unwrap();
        let (got, replies) = pair
            .sim
            .block_on(Instant::NEVER, async move {
                let beyond = client.call(put(9)).await.unwrap();
                client.call(put(1)).await.unwrap();
                let get = client.call(Op::Get { key: 12 }).await.unwrap();
                (
                    (beyond.durable_at.is_some(), get.reply),
                    client.drain().await.unwrap(),
                )
            })
            .unwrap();
        let (logged, get) = got;
        assert!(logged, "{design}: the request itself is durable in the log");
        assert_eq!(
            get,
            Some(Reply::refused(3, ReplyStatus::KeyOutsideStore)),
            "{design}"
        );
        assert_eq!(
            replies,
            vec![
                Reply::refused(1, ReplyStatus::KeyOutsideStore),
                Reply::ok(2, vec![])
            ],
            "{design}"
        );
        assert!(matches!(
            replies[0].clone().executed(),
            Err(RpcError::Refused {
                seq: 1,
                why: ReplyStatus::KeyOutsideStore
            })
        ));
        let stored = remora_rpc::kv::KvStore::new(pair.server.clone(), layout).read(1);
        assert_eq!(
            stored.unwrap().map(|(_, v)| v),
            Some(vec![1; 16]),
            "{design}"
        );
    }
}

/// When a send of the server fails (here the client's receive buffer is too small for the
/// server's acknowledgement, so the client's RNIC NAKs it), the connection's end names
/// that error, not the flush of the receive queue it caused.
#[test]
fn a_failed_send_is_named_as_the_connections_end() {
    use remora_model::verbs::{Access, RecvWr, Sge};
    use remora_verbs::Space;
    let (pair, server, qp, _) = setup(Design::WRFlushRpc);
    let info = server.conn_info();
    let c = &pair.client;
    let at = c.alloc(Space::Dram, 64, 64);
    let pd = c.alloc_pd().unwrap();
    let mr = c.reg_mr(pd, Space::Dram, at, 64, Access::ALL).unwrap();
    c.post_recv(
        qp,
        RecvWr {
            wr_id: 0,
            sge: Sge {
                addr: at,
                len: 4,
                lkey: mr.lkey,
            },
        },
    )
    .unwrap();
    let write = entry_write(put_frame(&pair), &info);
    let e = serve_after(&pair, server, qp, vec![write, doorbell(1, &info)]);
    let e = e.to_string();
    assert!(
        e.contains("Send work request 0 completed with RemInvReqErr"),
        "{e}"
    );
}

/// Replies of requests recovery executed whose SENDs were still unacknowledged when the
/// client broke the protocol come back from `serve_keeping` as undelivered, kept for the
/// client's next connection: the teardown flushes them onto the send CQ before it reads
/// it. (They had no completion yet, so they counted as delivered, and the client's next
/// connection got none of them.)
#[test]
fn recovered_replies_unacknowledged_when_a_client_breaks_the_protocol_stay_undelivered() {
    use remora_sim::{CrashAt, FaultPlan};
    let mut o = opts(Design::WFlushRpc);
    o.costs.processing = remora_model::time::Duration::from_micros(100);
    let pair = DurablePair::new(3, LatencyProfile::default_profile(), dmp(false), o);
    let mut client = pair.open().unwrap();
    let node = pair.client.clone();
    let acked = pair
        .sim
        .block_on(Instant::NEVER, async move {
            for key in 0..4u64 {
                let value = vec![key as u8 + 1; 16];
                client.call(Op::Put { key, value }).await.unwrap();
            }
            node.now()
        })
        .unwrap();
    // The server loses power with the Puts logged, not processed; recovery executes them.
    let crash = Instant::from_nanos(acked.as_nanos() + 1_000);
    pair.sim
        .set_faults(&FaultPlan::crash(pair.server.id(), CrashAt::Time(crash)));
    pair.sim.run();
    let (server, report) = pair.recover_server().unwrap();
    assert!(report.reexecuted >= 3, "{report:?}");
    // A client that posts no receive (so the replies' SENDs wait, unacknowledged) and
    // rings a doorbell beyond the log's window at once.
    let (qp, _) = raw_qp(&pair, &server);
    pair.client
        .post_send(qp, doorbell(0xFFFF_FFF0, &server.conn_info()))
        .unwrap();
    let limit = Instant::from_nanos(pair.sim.now().as_nanos() + 10_000_000);
    let (why, undelivered) = pair
        .sim
        .block_on(limit, server.serve_keeping())
        .expect("the server stopped within 10 ms");
    assert!(why.to_string().contains("beyond the log's window"), "{why}");
    let seqs: Vec<u64> = undelivered.iter().map(|r| r.seq).collect();
    let recovered: Vec<u64> = (5 - report.reexecuted..=4).collect();
    assert_eq!(
        seqs, recovered,
        "every recovered reply is still the client's"
    );
}

/// The other way round: a server that says more than it can know. A `Durable` notice for
/// requests never sent (a client that took it would report its next requests durable at
/// once, though the server never saw them) and a reply for a request never sent each end
/// the client's call with `Malformed`.
#[test]
fn a_server_cannot_vouch_for_requests_never_sent() {
    use remora_rpc::durable::ServerMsg;
    use remora_rpc::proto::ReplyFrame;
    let lies = [
        ServerMsg::Durable { upto: 1_000_000 }.to_bytes(),
        ServerMsg::Reply(ReplyFrame {
            conn: 1,
            reply: Reply::ok(2, vec![]),
        })
        .to_bytes(),
    ];
    for lie in lies {
        let pair = DurablePair::new(
            3,
            LatencyProfile::default_profile(),
            dmp(false),
            opts(Design::SFlushRpc),
        );
        let server = pair.fresh_server().unwrap();
        let mut client = DurableClient::create(pair.client.clone(), &pair.opts).unwrap();
        // The server side is a bare queue pair the test speaks for.
        let s = &pair.server;
        let pd = s.alloc_pd().unwrap();
        let cq = s.create_cq(64).unwrap();
        let qp = s
            .create_qp(pd, cq, cq, remora_model::rnic::QpAttr::default())
            .unwrap();
        pair.sim
            .connect((&pair.client, client.qp()), (s, qp))
            .unwrap();
        client.attach(server.conn_info()).unwrap();
        let send = SendWr::new(1, Opcode::Send, Payload::inline(lie.clone()), None);
        s.post_send(qp, send).unwrap();
        let put = Op::Put {
            key: 1,
            value: vec![1; 16],
        };
        let got = pair
            .sim
            .block_on(Instant::NEVER, async move { client.call(put).await })
            .unwrap();
        assert!(
            matches!(&got, Err(RpcError::Malformed(why)) if why.contains("were sent")),
            "{lie:02x?}: {got:?}"
        );
    }
}
