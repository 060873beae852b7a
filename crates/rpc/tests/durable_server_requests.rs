//! The durable-RPC server's processing loop against a client that breaks the protocol,
//! request by request (the test speaks for the client over a bare queue pair): entries a
//! native RFlush would acknowledge unchecked, and a torn entry a client committed itself.

use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_model::verbs::{Opcode, Payload, SendWr};
use remora_rpc::durable::{DurableOptions, DurablePair, DurableServer};
use remora_rpc::harness::dmp;
use remora_rpc::proto::Request;
use remora_rpc::redolog::Operator;
use remora_rpc::{Design, FlushForm, Op, RpcError};
use remora_verbs::Verbs;

fn opts(design: Design, form: FlushForm) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.flush.form = form;
    o.capacity = 8;
    o.objects = 4;
    o.max_value = 64;
    o
}

/// A server over a fresh log and a bare queue pair (its CQ, its protection domain) of the
/// client node connected to it.
fn setup(
    o: DurableOptions,
) -> (
    DurablePair,
    DurableServer<remora_sim::NodeHandle>,
    remora_model::verbs::QpNum,
    remora_model::verbs::CqId,
    remora_model::verbs::PdId,
) {
    let pair = DurablePair::new(3, LatencyProfile::default_profile(), dmp(false), o);
    let server = pair.fresh_server().unwrap();
    let (qp, cq, pd) = pair.bare_qp(server.qp()).unwrap();
    (pair, server, qp, cq, pd)
}

/// Runs the server with the client's `posts` made first; `serve`'s result if it came
/// within 10 ms of simulated time.
fn serve_after(
    pair: &DurablePair,
    server: DurableServer<remora_sim::NodeHandle>,
    qp: remora_model::verbs::QpNum,
    posts: Vec<SendWr>,
) -> Option<RpcError> {
    serve_within(pair, server, qp, posts, 10_000_000)
}

/// [`serve_after`] within `ns` of simulated time.
fn serve_within(
    pair: &DurablePair,
    server: DurableServer<remora_sim::NodeHandle>,
    qp: remora_model::verbs::QpNum,
    posts: Vec<SendWr>,
    ns: u64,
) -> Option<RpcError> {
    let c = pair.client.clone();
    for wr in posts {
        c.post_send(qp, wr).unwrap();
    }
    let limit = Instant::from_nanos(pair.sim.now().as_nanos() + ns);
    pair.sim.block_on(limit, server.serve())
}

fn doorbell(seq: u32, info: &remora_rpc::durable::ConnInfo) -> SendWr {
    SendWr::new(
        1,
        Opcode::WriteWithImm(seq),
        Payload::None,
        Some(info.entries_remote()),
    )
}

fn put(pair: &DurablePair, seq: u64) -> Vec<u8> {
    Request {
        conn: pair.opts.conn,
        seq,
        op: Op::Put {
            key: 1,
            value: vec![seq as u8; 16],
        },
    }
    .to_bytes()
}

/// A WRITE of `frame` to `seq`'s entry data.
fn entry_write(seq: u64, frame: Vec<u8>, info: &remora_rpc::durable::ConnInfo) -> SendWr {
    SendWr::new(
        2,
        Opcode::Write,
        Payload::inline(frame),
        Some(info.data_remote(seq)),
    )
}

/// Native RFlush (W-RFlush-RPC, no DDIO): the frame is its own commit record, and the
/// server's RFlush notification acknowledges every entry up to the doorbell's. A corrupt
/// entry 1 under a good entry 2 was RFlushed and acknowledged all the same (the server's
/// CPU never looked at the entries), though recovery stops at entry 1 and cuts off entry
/// 2, acknowledged durable; and the processor then polled entry 1 for a minute and waited
/// forever, the connection neither served nor ended. The emulated RFlush refuses the same
/// entries (`durable_hostile.rs`, `a_corrupt_entry_is_never_acknowledged`).
#[test]
fn a_corrupt_entry_is_never_acknowledged_by_a_native_rflush() {
    for design in [Design::WRFlushRpc, Design::SRFlushRpc] {
        let (pair, server, qp, _, _) = setup(opts(design, FlushForm::Native));
        assert!(server.plan().frame_commits(), "{design}");
        let info = server.conn_info();
        let mut one = put(&pair, 1);
        let last = one.len() - 1;
        one[last] ^= 0xFF; // a value byte off: the frame's checksum no longer holds
        let posts = if design == Design::WRFlushRpc {
            vec![
                entry_write(1, one, &info),
                entry_write(2, put(&pair, 2), &info),
                doorbell(2, &info),
            ]
        } else {
            [one, put(&pair, 2)]
                .into_iter()
                .map(|f| SendWr::new(3, Opcode::Send, Payload::inline(f), None))
                .collect()
        };
        let stats = server.stats();
        let e = serve_after(&pair, server, qp, posts);
        assert_eq!(
            stats.get().rflushes,
            0,
            "{design}: an RFlush acknowledged the corrupt entry 1 durable"
        );
        let e = e.expect("the server stopped within 10 ms");
        assert!(
            e.to_string().contains("entry 1: not a well-formed request"),
            "{design}: {e}"
        );
    }
}

/// What the acknowledgement of a corrupt entry costs: the client's RNIC is told entries
/// up to 2 are durable, the server loses power, and recovery stops at entry 1 and cuts
/// off entry 2. Every acknowledged entry must survive.
#[test]
fn no_entry_a_native_rflush_acknowledged_is_lost_in_a_crash() {
    use remora_model::verbs::{Access, RecvWr, Sge};
    use remora_verbs::Space;
    let (pair, server, qp, cq, pd) = setup(opts(Design::WRFlushRpc, FlushForm::Native));
    let info = server.conn_info();
    let c = pair.client.clone();
    let at = c.alloc(Space::Dram, 64, 64);
    let mr = c.reg_mr(pd, Space::Dram, at, 64, Access::ALL).unwrap();
    let sge = Sge {
        addr: at,
        len: 64,
        lkey: mr.lkey,
    };
    c.post_recv(qp, RecvWr { wr_id: 9, sge }).unwrap();
    let mut one = put(&pair, 1);
    let last = one.len() - 1;
    one[last] ^= 0xFF;
    for wr in [
        entry_write(1, one, &info),
        entry_write(2, put(&pair, 2), &info),
        doorbell(2, &info),
    ] {
        c.post_send(qp, wr).unwrap();
    }
    pair.sim.spawn_on(&pair.server, async move {
        let _why = server.serve().await;
    });
    pair.sim
        .run_until(Instant::from_nanos(pair.sim.now().as_nanos() + 1_000_000));
    // The client's receive CQ: a zero-length notification whose immediate is the last
    // sequence number the RNIC made durable.
    let mut wcs = Vec::new();
    c.poll_cq(cq, 16, &mut wcs);
    let acked = wcs
        .iter()
        .filter(|wc| wc.wr_id == 9 && wc.status == remora_model::verbs::WcStatus::Success)
        .filter_map(|wc| wc.imm)
        .max()
        .unwrap_or(0) as u64;
    pair.sim.crash_now(pair.server.id());
    let (_server, report) = pair.recover_server().unwrap();
    assert!(
        acked <= report.processed,
        "entries up to {acked} acknowledged durable, recovery kept up to {}: {report:?}",
        report.processed
    );
}

/// WFlush-RPC: the client commits an entry with its own operator. An operator over data
/// that is not its request (here a frame with a byte off) is torn: never executed. The
/// server polled it for a minute and then waited forever, the connection neither served
/// (every later request stuck behind it, acknowledged durable by the client's own Flush)
/// nor ended; it now ends with the reason once the polling gives up.
#[test]
fn a_torn_entry_ends_the_connection_with_its_reason() {
    let (pair, server, qp, _, _) = setup(opts(Design::WFlushRpc, FlushForm::Emulated));
    let info = server.conn_info();
    let good = Request {
        conn: pair.opts.conn,
        seq: 1,
        op: Op::Put {
            key: 1,
            value: vec![1; 16],
        },
    };
    let mut one = good.to_bytes();
    let last = one.len() - 1;
    one[last] ^= 0xFF;
    let operator = SendWr::new(
        4,
        Opcode::Write,
        Payload::inline(Operator::of(&good).to_word().to_le_bytes().to_vec()),
        Some(info.entry_remote(1)),
    );
    let posts = vec![
        entry_write(1, one, &info),
        operator,
        entry_write(2, put(&pair, 2), &info),
        doorbell(1, &info),
    ];
    let stats = server.stats();
    let e = serve_within(&pair, server, qp, posts, 120_000_000_000)
        .expect("the server stopped within two minutes");
    assert!(
        e.to_string().contains("entry 1") && e.to_string().contains("corrupt data"),
        "{e}"
    );
    assert_eq!(stats.get().processed, 0);
}
