//! A torn entry (an operator over data that is not its request) in a design whose client
//! writes the operator ends the connection with the reason (the test speaks for the client
//! over a bare queue pair).

use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_model::verbs::{Opcode, Payload, Remote, SendWr};
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

/// A server over a fresh log and a bare queue pair of the client node connected to it.
fn setup(
    o: DurableOptions,
) -> (
    DurablePair,
    DurableServer<remora_sim::NodeHandle>,
    remora_model::verbs::QpNum,
) {
    let pair = DurablePair::new(3, LatencyProfile::default_profile(), dmp(false), o);
    let server = pair.fresh_server().unwrap();
    let c = &pair.client;
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(64).unwrap();
    let qp = c
        .create_qp(pd, cq, cq, remora_model::rnic::QpAttr::default())
        .unwrap();
    pair.sim
        .connect((&pair.client, qp), (&pair.server, server.qp()))
        .unwrap();
    (pair, server, qp)
}

/// Runs the server with the client's `posts` made first; `serve`'s result if it came
/// within `ns` of simulated time.
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
        Some(Remote {
            addr: info.layout.entries_addr(),
            rkey: info.log_rkey,
        }),
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
        Some(Remote {
            addr: info.layout.data_addr(seq),
            rkey: info.log_rkey,
        }),
    )
}

/// WFlush-RPC: the client commits an entry with its own operator. An operator over data
/// that is not its request (here a frame with a byte off) is torn: never executed. The
/// server polled it for a minute and then waited forever, the connection neither served
/// (every later request stuck behind it, acknowledged durable by the client's own Flush)
/// nor ended; it now ends with the reason once the polling gives up.
#[test]
fn a_torn_entry_ends_the_connection_with_its_reason() {
    let (pair, server, qp) = setup(opts(Design::WFlushRpc, FlushForm::Emulated));
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
        Some(Remote {
            addr: info.layout.entry_addr(1),
            rkey: info.log_rkey,
        }),
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
