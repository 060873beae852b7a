//! A durable-RPC client that writes a later lap of the ring (request `s + capacity`) into
//! an entry `s` the server has not processed breaks the protocol (seed 003 §4.2: a log
//! entry is removed, and its slot free again, only once its RPC is processed). The server
//! sees it at once, in the entry's frame, and ends that connection with the reason, after
//! processing every earlier entry. It polled the slot for 60 s (the frame did not commit
//! the entry it expected), holding the connection, and with a self-committing frame (native
//! RFlush) it then waited for ever. By SEND the later lap lands only in a receive the
//! dispatcher sees beyond the log's window; that test passed before the fix too.

use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_model::verbs::{Opcode, Payload, SendWr};
use remora_rpc::durable::{DurableClient, DurableOptions, DurablePair};
use remora_rpc::harness::dmp;
use remora_rpc::proto::Request;
use remora_rpc::{Design, FlushForm, Op, RpcClient, RpcError};
use remora_verbs::Verbs;

const CAPACITY: u64 = 8;

fn opts(design: Design, form: FlushForm) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.flush.form = form;
    o.capacity = CAPACITY as u32;
    o.objects = 4;
    o.max_value = 64;
    // A slow server: the entries the client overwrites are still unprocessed.
    o.costs.processing = Duration::from_micros(100);
    o
}

fn put(conn: u32, seq: u64) -> Request {
    Request {
        conn,
        seq,
        op: Op::Put {
            key: seq % 4,
            value: vec![seq as u8; 16],
        },
    }
}

/// Every durable design in both Flush forms, under DMP with and without DDIO (with DDIO
/// the responder's CPU persists and commits every entry).
fn cases() -> Vec<(Design, FlushForm, bool)> {
    let mut v = Vec::new();
    for ddio in [false, true] {
        for design in Design::DURABLE {
            for form in [FlushForm::Emulated, FlushForm::Native] {
                v.push((design, form, ddio));
            }
        }
    }
    v
}

/// The library client makes requests 1 to 3 durable, then WRITEs request `3 + CAPACITY`'s
/// frame over entry 3's data, before the server (busy with request 1) has read entry 3.
#[test]
fn a_later_lap_written_over_an_unprocessed_entry_ends_the_connection_at_once() {
    let overwritten = 3;
    for (design, form, ddio) in cases() {
        let pair = DurablePair::new(
            5,
            LatencyProfile::default_profile(),
            dmp(ddio),
            opts(design, form),
        );
        let server = pair.fresh_server().unwrap();
        let info = server.conn_info();
        let stats = server.stats();
        let mut client = DurableClient::create(pair.client.clone(), &pair.opts).unwrap();
        pair.sim
            .connect((&pair.client, client.qp()), (&pair.server, server.qp()))
            .unwrap();
        client.attach(info).unwrap();
        let node = pair.client.clone();
        let conn = pair.opts.conn;
        pair.sim.spawn(async move {
            for seq in 1..=overwritten {
                let p = put(conn, seq).op;
                let done = client.call(p).await.unwrap();
                assert!(done.durable_at.is_some());
            }
            let later = overwritten + CAPACITY;
            let wr = SendWr::new(
                99,
                Opcode::Write,
                Payload::inline(put(conn, later).to_bytes()),
                Some(info.data_remote(later)),
            )
            .signaled(false);
            node.post_send(client.qp(), wr).unwrap();
            // The client stays, silent, so that only the server's verdict ends the run.
            node.compute(Duration::from_millis(1_000_000)).await;
            drop(client);
        });
        let start = pair.sim.now();
        let limit =
            Instant::from_nanos(start.as_nanos() + Duration::from_millis(120_000).as_nanos());
        let sim = &pair.sim;
        let why = sim.block_on(limit, server.serve());
        let took = sim.now().saturating_since(start);
        let case = format!("{design} {form:?} ddio={ddio}");
        let why = why.unwrap_or_else(|| {
            panic!("{case}: the server still held the connection after {took:?}")
        });
        assert!(
            took < Duration::from_millis(10),
            "{case}: the connection ended only after {took:?}: {why}"
        );
        assert!(
            matches!(&why, RpcError::Malformed(m) if m.contains("later lap")),
            "{case}: {why}"
        );
        // Nothing before the overwritten entry is lost: requests 1 and 2 were executed.
        assert_eq!(stats.get().processed, overwritten - 1, "{case}");
        let store = pair.store().unwrap();
        for seq in 1..overwritten {
            let got = store.read(seq % 4).unwrap().map(|(_, v)| v);
            assert_eq!(got, Some(vec![seq as u8; 16]), "{case}: request {seq}");
        }
    }
}

/// By SEND a later lap reaches entry `s` only through the receive posted for `s +
/// CAPACITY`, and the dispatcher refuses that receive's completion as beyond the window.
#[test]
fn a_later_lap_sent_over_an_unprocessed_entry_is_beyond_the_window() {
    for design in [Design::SFlushRpc, Design::SRFlushRpc] {
        let pair = DurablePair::new(
            5,
            LatencyProfile::default_profile(),
            dmp(false),
            opts(design, FlushForm::Emulated),
        );
        let server = pair.fresh_server().unwrap();
        let (qp, _, _) = pair.bare_qp(server.qp()).unwrap();
        for seq in 1..=CAPACITY + 1 {
            let frame = put(pair.opts.conn, seq).to_bytes();
            let wr = SendWr::new(seq, Opcode::Send, Payload::inline(frame), None);
            pair.client.post_send(qp, wr.signaled(false)).unwrap();
        }
        let limit = Instant::from_nanos(pair.sim.now().as_nanos() + 10_000_000);
        let why = pair
            .sim
            .block_on(limit, server.serve())
            .expect("the server stopped within 10 ms");
        assert!(
            why.to_string().contains("beyond the log's window"),
            "{design}: {why}"
        );
    }
}
