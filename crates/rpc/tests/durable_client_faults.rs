//! The durable-RPC client under faults: crash loops with calls continuing after resume
//! (Get and Scan values checked against a model that replays every request in sequence
//! order; across sequence numbers near 2^32 too), and servers that lie or go backwards,
//! and a call dropped half-way. The last five tests failed before their fixes (found by
//! review): a zero-length notification vouched for requests never sent, another
//! connection's reply was taken, resume missed a lost request that had been answered and
//! took a log processed past what it sent, and a call dropped between its data and its
//! operator left the next durable call unexecuted.

use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_rpc::durable::{DurableOptions, DurablePair};
use remora_rpc::harness::dmp;
use remora_rpc::{Design, FlushForm, Op, Reply, RpcClient};
use std::collections::{BTreeMap, BTreeSet};

const OBJECTS: u64 = 4;
/// Every durable design in both Flush forms.
const DESIGNS: [(Design, FlushForm); 8] = [
    (Design::SFlushRpc, FlushForm::Emulated),
    (Design::WFlushRpc, FlushForm::Emulated),
    (Design::SRFlushRpc, FlushForm::Emulated),
    (Design::WRFlushRpc, FlushForm::Emulated),
    (Design::SRFlushRpc, FlushForm::Native),
    (Design::WRFlushRpc, FlushForm::Native),
    (Design::WFlushRpc, FlushForm::Native),
    (Design::SFlushRpc, FlushForm::Native),
];
/// Seeds per design, batch and configuration.
const SEEDS: u64 = 6;

thread_local! {
    /// Runs a crash during the final drain left without a verdict.
    static INCONCLUSIVE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Fails if more than half of `runs` runs were inconclusive.
fn mostly_conclusive(runs: u64) {
    let n = INCONCLUSIVE.with(|n| n.get());
    assert!(n * 2 <= runs, "{n} of {runs} runs inconclusive");
}

fn op_at(i: u64) -> Op {
    match i % 5 {
        0..=2 => Op::Put {
            key: (i * 7) % OBJECTS,
            value: vec![(i % 251) as u8 + 1; 8 + (i % 24) as usize],
        },
        3 => Op::Get { key: i % OBJECTS },
        _ => Op::Scan {
            key: i % OBJECTS,
            count: 2,
        },
    }
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Runs `lives` crash/recover/resume rounds with calls continuing after each resume, then
/// drains and judges. Returns a violation, if any.
fn stress(design: Design, form: FlushForm, batch: u32, seed: u64, lives: u32) -> Option<String> {
    stress_on(
        design,
        form,
        batch,
        seed,
        lives,
        "DMP+noDDIO+PM-RQWRB",
        300_000,
    )
}

fn stress_on(
    design: Design,
    form: FlushForm,
    batch: u32,
    seed: u64,
    lives: u32,
    config: &str,
    window: u64,
) -> Option<String> {
    stress_from(design, form, batch, seed, lives, config, window, 0)
}

#[allow(clippy::too_many_arguments)]
fn stress_from(
    design: Design,
    form: FlushForm,
    batch: u32,
    seed: u64,
    lives: u32,
    config: &str,
    window: u64,
    start: u64,
) -> Option<String> {
    let mut o = DurableOptions::new(design);
    o.flush.form = form;
    o.capacity = 8;
    o.objects = OBJECTS;
    o.max_value = 64;
    o.batch = batch;
    o.costs.processing = Duration::from_micros(3 * (seed % 4));
    let pair = DurablePair::new(
        seed,
        LatencyProfile::default_profile(),
        config.parse().unwrap(),
        o,
    );
    let conn = pair.opts.conn;
    let mut rng = Lcg(seed ^ 0x5eed);
    let mut client = Some(if start == 0 {
        pair.open().unwrap()
    } else {
        // A log whose watermark is `start` (an earlier client's), then a new client.
        let s = pair.fresh_server().unwrap();
        let layout = s.conn_info().layout;
        drop(s);
        let n = pair.server.clone();
        pair.sim
            .block_on_node(&pair.server, Instant::NEVER, async move {
                n.store(Space::Pm, layout.watermark_addr(), &start.to_le_bytes());
                n.persist_local(layout.watermark_addr(), 8).await;
            })
            .unwrap();
        pair.sim.crash_now(pair.server.id());
        let (server, _) = pair.recover_server().unwrap();
        let c = DurableClient::create(pair.client.clone(), &pair.opts).unwrap();
        pair.reconnect(server, c).unwrap()
    });
    // seq -> op, replies by seq, acked Puts.
    let mut ops: BTreeMap<u64, Op> = BTreeMap::new();
    let mut replies: BTreeMap<u64, Reply> = BTreeMap::new();
    let mut acked: BTreeSet<u64> = BTreeSet::new();
    let mut next_op = 0u64;
    for _life in 0..lives {
        let crashes = pair.sim.crashed().len();
        let at = pair.sim.now() + Duration::from_nanos(1 + rng.next(window));
        pair.sim.set_faults(&remora_sim::FaultPlan::crash(
            pair.server.id(),
            remora_sim::CrashAt::Time(at),
        ));
        // Calls until one fails (the crash).
        let mut c = client.take().unwrap();
        let start = next_op;
        let out = pair
            .sim
            .block_on(Instant::NEVER, async move {
                let mut log = Vec::new();
                let mut i = start;
                loop {
                    let chunk: Vec<Op> = (i..i + batch as u64).map(op_at).collect();
                    let before = c.issued();
                    let r = c.call_batch(chunk.clone()).await;
                    let after = c.issued();
                    i += batch as u64;
                    let failed = r.is_err();
                    log.push((before, after, chunk, r));
                    if failed {
                        return (c, log, i);
                    }
                }
            })
            .expect("client loop finished");
        let (c, log, i) = out;
        next_op = i;
        for (before, after, chunk, r) in log {
            for (k, s) in (before + 1..=after).enumerate() {
                ops.insert(s, chunk[k].clone());
            }
            if let Ok(done) = r {
                for d in done {
                    if d.durable_at.is_some() {
                        acked.insert(d.seq);
                    }
                    if let Some(rep) = d.reply {
                        replies.insert(rep.seq, rep);
                    }
                }
            }
        }
        assert!(
            pair.sim.crashed().len() > crashes,
            "the loop only ends by a crash"
        );
        let mut c = Some(c);
        // Recover, reconnect, resume; a crash during resume (sometimes planned) starts over.
        let mut tries = 0;
        loop {
            tries += 1;
            if tries > 10 {
                return Some("no successful resume in 10 tries".into());
            }
            let (server, _rep) = match pair.recover_server() {
                Ok(x) => x,
                Err(e) => return Some(format!("recovery: {e}")),
            };
            let cl = match pair.reconnect(server, c.take().unwrap()) {
                Ok(cl) => cl,
                Err(e) => return Some(format!("reconnect: {e}")),
            };
            let crashes = pair.sim.crashed().len();
            if rng.next(3) == 0 {
                let at = pair.sim.now() + Duration::from_nanos(1 + rng.next(20_000));
                pair.sim.set_faults(&remora_sim::FaultPlan::crash(
                    pair.server.id(),
                    remora_sim::CrashAt::Time(at),
                ));
            }
            let (cl, r) = pair
                .sim
                .block_on(Instant::NEVER, async move {
                    let mut cl = cl;
                    let r = cl.resume().await;
                    (cl, r)
                })
                .unwrap();
            c = Some(cl);
            match r {
                Ok(()) => {
                    if pair.sim.crashed().len() > crashes {
                        // Crashed after resume returned: treat as the next crash.
                        continue;
                    }
                    break;
                }
                Err(e) if pair.sim.crashed().len() > crashes => {
                    let _ = e;
                    // Let any queued crash land before recovering.
                    continue;
                }
                Err(e) => return Some(format!("resume: {e}")),
            }
        }
        client = c;
    }
    // Let any planned crash that did not land pass harmlessly: none is planned past now
    // when the last resume was clean (a planned one in the future would break the drain).
    let mut c = client.take().unwrap();
    let crashes = pair.sim.crashed().len();
    let drained = pair
        .sim
        .block_on(Instant::NEVER, async move { c.drain().await })
        .unwrap();
    if pair.sim.crashed().len() > crashes {
        // Inconclusive: a crash during the final drain.
        INCONCLUSIVE.with(|n| n.set(n.get() + 1));
        return None;
    }
    let drained = match drained {
        Ok(d) => d,
        Err(e) => return Some(format!("final drain: {e}")),
    };
    for r in drained {
        if replies.insert(r.seq, r.clone()).is_some() {
            return Some(format!("reply for seq {} returned twice", r.seq));
        }
    }
    // Judge: every issued Put executed once; every read's value is the sequence-order one.
    let ex = pair.executions.borrow();
    for (&(c, s), &n) in ex.iter() {
        if c != conn || !matches!(ops.get(&s), Some(Op::Put { .. })) {
            return Some(format!("executed ({c},{s}) never issued as a Put"));
        }
        if n != 1 {
            return Some(format!("Put {s} executed {n} times"));
        }
    }
    let mut store: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for (&s, op) in &ops {
        match op {
            Op::Put { key, value } => {
                if ex.get(&(conn, s)).copied().unwrap_or(0) != 1 {
                    return Some(format!(
                        "issued Put {s} not executed (acked: {})",
                        acked.contains(&s)
                    ));
                }
                if !replies.contains_key(&s) {
                    return Some(format!("no reply for Put {s}"));
                }
                store.insert(*key, value.clone());
            }
            Op::Get { key } => {
                if let Some(r) = replies.get(&s) {
                    let want = store.get(key).cloned().unwrap_or_default();
                    if r.value != want {
                        return Some(format!(
                            "Get {s} of key {key}: {:?}, want {:?}",
                            r.value, want
                        ));
                    }
                }
            }
            Op::Scan { key, count } => {
                if let Some(r) = replies.get(&s) {
                    let mut want = Vec::new();
                    for k in *key..(*key + *count as u64).min(OBJECTS) {
                        if let Some(v) = store.get(&k) {
                            want.extend_from_slice(v);
                        }
                    }
                    if r.value != want {
                        return Some(format!(
                            "Scan {s} from {key}: {:?}, want {:?}",
                            r.value, want
                        ));
                    }
                }
            }
        }
    }
    None
}

#[test]
fn crash_loops_with_calls_after_resume_lose_and_repeat_nothing() {
    let designs = DESIGNS;
    let seeds = SEEDS;
    let mut bad = Vec::new();
    for (d, f) in designs {
        for batch in [1u32, 3, 8] {
            for seed in 0..seeds {
                if let Some(v) = stress(d, f, batch, seed, 4) {
                    bad.push(format!("{d}/{f:?}/batch{batch}/seed{seed}: {v}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{} violations: {bad:#?}", bad.len());
    mostly_conclusive(designs.len() as u64 * 3 * seeds);
}

#[test]
fn crash_loops_on_the_other_configurations_lose_and_repeat_nothing() {
    let designs = DESIGNS;
    let seeds = SEEDS;
    let mut bad = Vec::new();
    for config in [
        "DMP+DDIO+PM-RQWRB",
        "MHP+DDIO+PM-RQWRB",
        "MHP+noDDIO+PM-RQWRB",
        "DMP+noDDIO+PM-RQWRB",
    ] {
        for (d, f) in designs {
            for batch in [1u32, 2, 5, 8] {
                for seed in 0..seeds {
                    for window in [20_000u64, 80_000] {
                        match std::panic::catch_unwind(|| {
                            stress_on(d, f, batch, seed, 5, config, window)
                        }) {
                            Ok(Some(v)) => bad.push(format!(
                                "{config}/{d}/{f:?}/batch{batch}/seed{seed}/w{window}: {v}"
                            )),
                            Ok(None) => {}
                            Err(_) => bad.push(format!(
                                "{config}/{d}/{f:?}/batch{batch}/seed{seed}/w{window}: panic"
                            )),
                        }
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{} violations: {bad:#?}", bad.len());
    mostly_conclusive(4 * designs.len() as u64 * 4 * seeds * 2);
}

// ---------------------------------------------------------------- hostile messages

use remora_model::verbs::{Access, Opcode, Payload, RecvWr, SendWr, Sge};
use remora_rpc::durable::{DurableClient, ServerMsg};
use remora_rpc::proto::ReplyFrame;
use remora_rpc::RpcError;
use remora_verbs::{Space, Verbs};

/// A client of `design` (its Flush primitives in `form`) connected to a bare server queue
/// pair the test speaks for: once the client's first request arrives (a SEND into a posted
/// receive), the server sends `msgs` (bytes, immediate). Returns what `op` returned.
fn bare_server_says(
    design: Design,
    form: FlushForm,
    msgs: Vec<(Vec<u8>, u32)>,
    op: Op,
) -> Result<remora_rpc::Completion, RpcError> {
    let mut o = DurableOptions::new(design);
    o.flush.form = form;
    o.capacity = 8;
    o.objects = 4;
    o.max_value = 64;
    let pair = DurablePair::new(3, LatencyProfile::default_profile(), dmp(false), o);
    let server = pair.fresh_server().unwrap();
    let mut client = DurableClient::create(pair.client.clone(), &pair.opts).unwrap();
    let s = pair.server.clone();
    let pd = s.alloc_pd().unwrap();
    let cq = s.create_cq(64).unwrap();
    let qp = s
        .create_qp(pd, cq, cq, remora_model::rnic::QpAttr::default())
        .unwrap();
    let buf = s.alloc(Space::Dram, 16 * 4096, 4096);
    let mr = s
        .reg_mr(pd, Space::Dram, buf, 16 * 4096, Access::ALL)
        .unwrap();
    for i in 0..16u64 {
        s.post_recv(
            qp,
            RecvWr {
                wr_id: i,
                sge: Sge {
                    addr: buf + i * 4096,
                    len: 4096,
                    lkey: mr.lkey,
                },
            },
        )
        .unwrap();
    }
    pair.sim
        .connect((&pair.client, client.qp()), (&s, qp))
        .unwrap();
    client.attach(server.conn_info()).unwrap();
    let s2 = s.clone();
    pair.sim.spawn_on(&s, async move {
        // Wait for the client's request (its SEND), then speak.
        loop {
            if let Some(wc) = s2.poll_one(cq) {
                if wc.opcode.is_receive() {
                    break;
                }
            }
            s2.compute(Duration::from_nanos(200)).await;
        }
        for (i, (bytes, imm)) in msgs.into_iter().enumerate() {
            let payload = if bytes.is_empty() {
                Payload::None
            } else {
                Payload::inline(bytes)
            };
            s2.post_send(
                qp,
                SendWr::new(100 + i as u64, Opcode::SendWithImm(imm), payload, None),
            )
            .unwrap();
        }
    });
    pair.sim
        .block_on(Instant::NEVER, async move { client.call(op).await })
        .unwrap()
}

/// What a Put of `design` (in `form`) returns when the server's only answer is a
/// zero-length message with immediate `imm`.
fn put_answered_by_zero_length(
    design: Design,
    form: FlushForm,
    imm: u32,
) -> Result<remora_rpc::Completion, RpcError> {
    let put = Op::Put {
        key: 1,
        value: vec![1; 16],
    };
    bare_server_says(design, form, vec![(vec![], imm)], put)
}

/// A zero-length message (a native RFlush's notification) whose immediate names a
/// sequence number beyond what the client sent: the client takes every request it sent
/// as durable, though the server persisted nothing. (A `Durable` message saying the same
/// is refused as Malformed: `a_server_cannot_vouch_for_requests_never_sent`.)
#[test]
fn a_zero_length_notification_cannot_vouch_for_requests_never_sent() {
    let got = put_answered_by_zero_length(Design::SRFlushRpc, FlushForm::Native, 1_000_000);
    assert!(
        matches!(&got, Err(RpcError::Malformed(_))),
        "a Put acknowledged durable by a notification for request 1000000 of 1 sent: {got:?}"
    );
}

/// A zero-length message is a native RFlush's notification; under a plan without one (the
/// client flushes its requests itself, or the emulated RFlush's responder CPU answers) it
/// is malformed, whatever it names.
#[test]
fn a_zero_length_notification_is_refused_where_the_plan_has_no_receiver_rflush() {
    for (design, form) in [
        (Design::SFlushRpc, FlushForm::Emulated),
        (Design::SRFlushRpc, FlushForm::Emulated),
    ] {
        let got = put_answered_by_zero_length(design, form, 1);
        assert!(
            matches!(&got, Err(RpcError::Malformed(_))),
            "{design} ({form:?}) took a zero-length notification: {got:?}"
        );
    }
}

/// A reply frame names its connection; one for another connection's request 1 is taken as
/// this connection's request 1: a Get returns another connection's value.
#[test]
fn a_reply_for_another_connection_is_not_taken() {
    let other = ReplyFrame {
        conn: 99,
        reply: Reply::ok(1, b"another connection's".to_vec()),
    };
    let msgs = vec![
        (ServerMsg::Durable { upto: 1 }.to_bytes(), 0),
        (ServerMsg::Reply(other).to_bytes(), 0),
    ];
    let got = bare_server_says(
        Design::SRFlushRpc,
        FlushForm::Emulated,
        msgs,
        Op::Get { key: 1 },
    );
    assert!(
        matches!(&got, Err(RpcError::Malformed(_))),
        "connection 1's Get took connection 99's reply: {got:?}"
    );
}

// ---------------------------------------------------------------- LostDurable

/// Three Puts acknowledged durable and answered; then the server's PM comes back with the
/// watermark at `watermark` and the operators of entries past it gone (the server lost
/// requests it had acknowledged, or the log is not this client's). Recovers, reconnects
/// and resumes; returns what resume said, and whether a fourth Put, if resume let the
/// client go on, was reported durable and yet never executed.
fn server_regresses_to(watermark: u64) -> (Result<(), RpcError>, Option<String>) {
    let mut o = DurableOptions::new(Design::WFlushRpc);
    o.capacity = 8;
    o.objects = 4;
    o.max_value = 64;
    let pair = DurablePair::new(3, LatencyProfile::default_profile(), dmp(false), o);
    let mut client = pair.open().unwrap();
    let client = pair
        .sim
        .block_on(Instant::NEVER, async move {
            for k in 0..3u64 {
                let c = client
                    .call(Op::Put {
                        key: k,
                        value: vec![k as u8 + 1; 16],
                    })
                    .await
                    .unwrap();
                assert!(c.durable_at.is_some());
            }
            let r = client.drain().await.unwrap();
            assert_eq!(r.len(), 3, "all three answered");
            client
        })
        .unwrap();
    // A first restart only to learn the log's layout (same addresses every start).
    pair.sim.crash_now(pair.server.id());
    let (s, _) = pair.recover_server().unwrap();
    let layout = s.conn_info().layout;
    drop(s);
    let n = pair.server.clone();
    pair.sim
        .block_on_node(&pair.server, Instant::NEVER, async move {
            n.store(Space::Pm, layout.watermark_addr(), &watermark.to_le_bytes());
            n.persist_local(layout.watermark_addr(), 8).await;
            for seq in watermark + 1..=3 {
                n.store(Space::Pm, layout.entry_addr(seq), &[0u8; 8]);
                n.persist_local(layout.entry_addr(seq), 8).await;
            }
        })
        .unwrap();
    pair.sim.crash_now(pair.server.id());
    let (server, report) = pair.recover_server().unwrap();
    assert_eq!(report.processed, watermark, "{report:?}");
    let mut client = pair.reconnect(server, client).unwrap();
    let r = pair
        .sim
        .block_on(Instant::NEVER, async move {
            let r = client.resume().await;
            (client, r)
        })
        .unwrap();
    let (mut client, resumed) = r;
    if resumed.is_err() {
        return (resumed, None);
    }
    let put = pair
        .sim
        .block_on(Instant::NEVER, async move {
            client
                .call(Op::Put {
                    key: 3,
                    value: vec![9; 16],
                })
                .await
        })
        .unwrap();
    // Give the server ample time.
    let until = pair.sim.now() + Duration::from_millis(5);
    pair.sim.run_until(until);
    let executed = pair
        .executions
        .borrow()
        .get(&(pair.opts.conn, 4))
        .copied()
        .unwrap_or(0);
    let follow = match put {
        Ok(c) if c.durable_at.is_some() && executed == 0 => Some(format!(
            "Put seq {} reported durable at {:?}, executed {executed} times",
            c.seq, c.durable_at
        )),
        other => Some(format!("next Put: {other:?}, executed {executed} times")),
    };
    (resumed, follow)
}

/// The server lost two Puts the client holds as durable and answered (not pending): resume
/// must say LostDurable; it checks only pending requests.
#[test]
fn resume_detects_a_lost_request_whose_reply_had_arrived() {
    let (resumed, follow) = server_regresses_to(1);
    assert!(
        matches!(
            resumed,
            Err(RpcError::LostDurable {
                processed: 1,
                seq: 2
            })
        ),
        "resume: {resumed:?}; then: {follow:?}"
    );
}

/// The server's log says it processed requests this client never sent (10 of 3): the
/// client would number its next request 4, which the server never executes.
#[test]
fn resume_refuses_a_log_processed_past_what_was_sent() {
    let (resumed, follow) = server_regresses_to(10);
    assert!(resumed.is_err(), "resume: {resumed:?}; then: {follow:?}");
}

/// Sequence numbers across 2^32 (a native RFlush notification carries the low 32 bits).
#[test]
fn crash_loops_across_sequence_number_2_pow_32() {
    let mut bad = Vec::new();
    for (d, f) in [
        (Design::SRFlushRpc, FlushForm::Native),
        (Design::SRFlushRpc, FlushForm::Emulated),
        (Design::SFlushRpc, FlushForm::Emulated),
        (Design::SFlushRpc, FlushForm::Native),
    ] {
        for batch in [1u32, 3, 8] {
            for seed in 0..8 {
                let start = (1u64 << 32) - 20 - seed;
                match std::panic::catch_unwind(|| {
                    stress_from(d, f, batch, seed, 4, "DMP+noDDIO+PM-RQWRB", 100_000, start)
                }) {
                    Ok(Some(v)) => bad.push(format!("{d}/{f:?}/batch{batch}/seed{seed}: {v}")),
                    Ok(None) => {}
                    Err(_) => bad.push(format!("{d}/{f:?}/batch{batch}/seed{seed}: panic")),
                }
            }
        }
    }
    assert!(bad.is_empty(), "{} violations: {bad:#?}", bad.len());
}

// ---------------------------------------------------------------- cancellation

/// A call dropped while it waits (a caller's time-out: `rpcreal` wraps every call in
/// one) after its data was posted and before its operator was: the entry is never
/// committed, the server's processor waits for it for good, and the next call, reported
/// durable, is never executed (and after a crash recovery cuts the log at the dropped
/// entry, so the acknowledged one is lost).
#[test]
fn a_call_dropped_half_way_leaves_no_later_durable_call_unexecuted() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::Poll;
    let mut o = DurableOptions::new(Design::SFlushRpc);
    o.capacity = 8;
    o.objects = 4;
    o.max_value = 64;
    let pair = DurablePair::new(3, LatencyProfile::default_profile(), dmp(false), o);
    let mut client = pair.open().unwrap();
    let second = pair
        .sim
        .block_on(Instant::NEVER, async move {
            {
                // Poll the first call once (it posts its data, then awaits the emulated
                // SFlush's lookup), then drop it, as a time-out would.
                let mut first = pin!(client.call(Op::Put {
                    key: 0,
                    value: vec![1; 16],
                }));
                std::future::poll_fn(|cx| {
                    assert!(first.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
            }
            let issued = client.issued();
            let second = client
                .call(Op::Put {
                    key: 1,
                    value: vec![2; 16],
                })
                .await;
            (issued, second)
        })
        .unwrap();
    let until = pair.sim.now() + Duration::from_millis(20);
    pair.sim.run_until(until);
    let ex = pair.executions.borrow();
    let executed = ex.get(&(pair.opts.conn, 2)).copied().unwrap_or(0);
    let (issued_after_drop, second) = second;
    assert_eq!(issued_after_drop, 1, "the dropped call took seq 1");
    match second {
        Ok(c) if c.durable_at.is_some() => assert_eq!(
            executed, 1,
            "Put seq {} reported durable at {:?} but not executed 20 ms later",
            c.seq, c.durable_at
        ),
        other => {
            let _ = other; // refusing the call is fine
        }
    }
}
