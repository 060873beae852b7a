//! What recovery leaves of a redo log past its watermark, and under which rule it reads
//! the log: nothing uncommitted-by-acknowledgement survives to be run as a later client's
//! request, and a log is never read by another commit rule than the one that wrote it.

use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_rpc::durable::{read_entry_with, DurableClient, DurableOptions, DurablePair};
use remora_rpc::harness::dmp;
use remora_rpc::proto::Request;
use remora_rpc::redolog::{EntryState, Operator};
use remora_rpc::{Design, FlushForm, Op, RpcClient};
use remora_verbs::{Space, Verbs};

fn opts(design: Design) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.capacity = 4;
    o.objects = 4;
    o.max_value = 64;
    o
}

/// Recovery's truncation clears every slot past the watermark, the slot of `processed`
/// too: it is also the slot of `processed + capacity`, which a client may have written (a
/// batch of `capacity` requests whose operators persisted out of order, or what an earlier
/// client of the log left there). Left committed, a new client of the log (rpc-serve gives
/// a log whose client is gone to the next one, starting at `processed + 1`) would have the
/// processor run that stale entry as its own request `processed + capacity`, and its own
/// Put with that sequence number, acknowledged durable, never executed (found by review;
/// the range stopped one short).
#[test]
fn recovery_clears_a_committed_entry_in_the_slot_of_processed() {
    stale_entry_in_slot_of_processed(Design::WFlushRpc, FlushForm::Emulated);
}

/// The same with native RFlush, where the frame alone commits the entry.
#[test]
fn recovery_clears_a_self_committing_frame_in_the_slot_of_processed() {
    stale_entry_in_slot_of_processed(Design::WRFlushRpc, FlushForm::Native);
}

/// The log's first client: two Puts, processed; gives the last sequence number.
fn two_processed_puts(pair: &DurablePair) -> u64 {
    let mut old = pair.open().unwrap();
    pair.sim
        .block_on(Instant::NEVER, async move {
            for i in 0..2u8 {
                old.call(Op::Put {
                    key: 0,
                    value: vec![i; 8],
                })
                .await
                .unwrap();
            }
            old.drain().await.unwrap();
            old.issued()
        })
        .unwrap()
}

/// A new client takes the recovered log (from `processed + 1`), which `server` then
/// serves, and makes `puts`: each one's sequence number and whether it was acknowledged
/// durable.
fn new_client_puts(
    pair: &DurablePair,
    server: remora_rpc::durable::DurableServer<remora_sim::NodeHandle>,
    puts: Vec<Op>,
) -> Vec<(u64, bool)> {
    let mut fresh = DurableClient::create(pair.client.clone(), &pair.opts).unwrap();
    pair.sim
        .connect((&pair.client, fresh.qp()), (&pair.server, server.qp()))
        .unwrap();
    fresh.attach(server.conn_info()).unwrap();
    pair.sim.spawn_on(&pair.server, async move {
        let _ = server.serve().await;
    });
    pair.sim
        .block_on(Instant::NEVER, async move {
            let mut acked = Vec::new();
            for op in puts {
                let c = fresh.call(op).await.unwrap();
                acked.push((c.seq, c.durable_at.is_some()));
            }
            fresh.drain().await.unwrap();
            acked
        })
        .unwrap()
}

fn stale_entry_in_slot_of_processed(design: Design, form: FlushForm) {
    let mut o = opts(design);
    o.flush.form = form;
    let frames = o.plan(&dmp(false)).unwrap().frame_commits();
    let pair = DurablePair::new(7, LatencyProfile::default_profile(), dmp(false), o);
    let cap = pair.opts.capacity as u64;
    let conn = pair.opts.conn;
    let p = two_processed_puts(&pair);
    assert_eq!(p, 2);
    // The state a crash can leave: entry p+cap (same slot as p) committed, p+1 not.
    // Written here as the old client's RDMA WRITE + flush would leave it.
    let layout = pair.opts.log_layout(remora_model::rnic::PM_BASE).unwrap();
    let stale_seq = p + cap;
    let stale = Request {
        conn,
        seq: stale_seq,
        op: Op::Put {
            key: 1,
            value: vec![0xEE; 8],
        },
    };
    let s = pair.server.clone();
    let frame = stale.to_bytes();
    let op = Operator::of(&stale).to_word();
    pair.sim
        .block_on(Instant::NEVER, async move {
            s.store(Space::Pm, layout.data_addr(stale_seq), &frame);
            s.persist_local(layout.data_addr(stale_seq), frame.len() as u64)
                .await;
            if !frames {
                s.store(Space::Pm, layout.entry_addr(stale_seq), &op.to_le_bytes());
                s.persist_local(layout.entry_addr(stale_seq), 8).await;
            }
        })
        .unwrap();
    pair.sim.crash_now(pair.server.id());
    let (server, report) = pair.recover_server().unwrap();
    assert_eq!(
        server.conn_info().layout,
        layout,
        "the log is where assumed"
    );
    assert_eq!(report.processed, p);
    let left = read_entry_with(&pair.server, &layout, conn, stale_seq, frames);
    // A new client takes the log, from processed + 1, and writes key 1 four times.
    let puts = (1..=cap as u8)
        .map(|i| Op::Put {
            key: 1,
            value: vec![i; 8],
        })
        .collect();
    let acked = new_client_puts(&pair, server, puts);
    assert_eq!(acked.last(), Some(&(stale_seq, true)), "{acked:?}");
    let got = pair.store().unwrap().read(1).unwrap();
    assert!(
        !matches!(left, EntryState::Committed(_)),
        "after recovery entry {stale_seq} is still committed ({left:?}); key 1 then holds {got:?}"
    );
    assert_eq!(
        got.map(|(st, v)| (st.seq, v)),
        Some((stale_seq, vec![cap as u8; 8])),
        "key 1 must hold the new client's acknowledged Put {stale_seq}"
    );
}

/// Native RFlush (frames commit themselves): recovery's truncation clears a non-zero word
/// in an entry's operator slot and the frame beside it too. A client can WRITE anything
/// into its log's entries (its region covers them); a frame for `processed + 2` under a
/// junk operator word (not an operator) survived recovery as a committed entry once the
/// word was cleared, and was run as the next client's request (found by review).
#[test]
fn recovery_clears_a_frame_whose_operator_word_was_not_zero() {
    let mut o = opts(Design::WRFlushRpc);
    o.flush.form = FlushForm::Native;
    assert!(o.plan(&dmp(false)).unwrap().frame_commits());
    let pair = DurablePair::new(7, LatencyProfile::default_profile(), dmp(false), o);
    let conn = pair.opts.conn;
    let p = two_processed_puts(&pair);
    let layout = pair.opts.log_layout(remora_model::rnic::PM_BASE).unwrap();
    let planted = p + 2;
    let stale = Request {
        conn,
        seq: planted,
        op: Op::Put {
            key: 3,
            value: vec![0xEE; 8],
        },
    };
    let s = pair.server.clone();
    let frame = stale.to_bytes();
    pair.sim
        .block_on(Instant::NEVER, async move {
            // What the old client's RDMA WRITEs (and an RFlush) leave: a junk word where an
            // operator would go, the frame in the data.
            s.store(Space::Pm, layout.entry_addr(planted), &[1u8; 8]);
            s.store(Space::Pm, layout.data_addr(planted), &frame);
            s.persist_local(layout.entry_addr(planted), layout.entry_bytes as u64)
                .await;
        })
        .unwrap();
    pair.sim.crash_now(pair.server.id());
    let (server, report) = pair.recover_server().unwrap();
    assert_eq!(server.conn_info().layout, layout);
    assert_eq!(report.processed, p);
    let left = read_entry_with(&pair.server, &layout, conn, planted, true);
    // The next client of the log: Put key 1, then Put key 3 (its request `planted`).
    let puts = [1u64, 3]
        .map(|key| Op::Put {
            key,
            value: vec![9; 8],
        })
        .to_vec();
    let acked = new_client_puts(&pair, server, puts);
    assert_eq!(acked.last(), Some(&(planted, true)), "{acked:?}");
    let got = pair.store().unwrap().read(3).unwrap();
    assert!(
        !matches!(left, EntryState::Committed(_)),
        "after recovery entry {planted} is still committed ({left:?}); key 3 then holds {got:?}"
    );
    assert_eq!(
        got.map(|(st, v)| (st.seq, v)),
        Some((planted, vec![9; 8])),
        "key 3 must hold the new client's acknowledged Put {planted}"
    );
}

/// A log written under native RFlush (entries commit by their frame, no operator) is not
/// read under emulated RFlush (entries commit by their operator): that would cut off every
/// entry acknowledged durable and not yet processed. The log's header names its rule, and
/// a server with the other is refused; with its own rule, recovery keeps every
/// acknowledged Put. (rpc-serve's pool layout record names the rule too.)
#[test]
fn a_log_is_never_recovered_under_another_commit_rule() {
    let mut native = opts(Design::WRFlushRpc);
    native.flush.form = FlushForm::Native;
    native.costs.processing = remora_model::time::Duration::from_micros(200);
    assert!(native.plan(&dmp(false)).unwrap().frame_commits());
    let pair = DurablePair::new(7, LatencyProfile::default_profile(), dmp(false), native);
    let mut c = pair.open().unwrap();
    let acked = pair
        .sim
        .block_on(Instant::NEVER, async move {
            let mut acked = Vec::new();
            for i in 0..3u8 {
                let d = c
                    .call(Op::Put {
                        key: i as u64,
                        value: vec![i; 8],
                    })
                    .await
                    .unwrap();
                assert!(d.durable_at.is_some());
                acked.push(d.seq);
            }
            acked
        })
        .unwrap();
    // Acknowledged durable, processing still under way: power fails.
    pair.sim.crash_now(pair.server.id());
    pair.sim.restart(pair.server.id());
    let mut emulated = pair.opts.clone();
    emulated.flush.form = FlushForm::Emulated;
    assert!(!emulated.plan(&dmp(false)).unwrap().frame_commits());
    let e = remora_rpc::durable::DurableServer::create(pair.server.clone(), &emulated, None)
        .err()
        .expect("a server with another commit rule is refused");
    assert!(
        e.to_string().contains("commits its entries by Frame"),
        "{e}"
    );
    // The refusal changed nothing: the log's own rule, in the next server (the refused
    // one's allocations are gone with it), recovers every acknowledged Put.
    pair.sim.crash_now(pair.server.id());
    let (_, report) = pair.recover_server().unwrap();
    assert!(
        report.processed >= *acked.last().unwrap(),
        "acknowledged {acked:?}, recovered up to {} ({report:?})",
        report.processed
    );
}
