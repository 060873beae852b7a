//! Durable RPCs without faults: every design and server configuration runs a small
//! workload to the end, replies arrive, the store holds the last Put of each key.

use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::Duration;
use remora_rpc::durable::{DurableClient, DurableOptions, DurablePair, RecoveryReport};
use remora_rpc::{Design, FlushForm, Op, RpcClient};
use std::cell::RefCell;
use std::rc::Rc;

/// Options for `design` with a log of `capacity` entries, four objects, values up to
/// `max_value` bytes and batches of `batch`.
fn options(design: Design, capacity: u32, max_value: u32, batch: u32) -> DurableOptions {
    let mut opts = DurableOptions::new(design);
    opts.capacity = capacity;
    opts.objects = 4;
    opts.max_value = max_value;
    opts.batch = batch;
    opts
}

/// A simulated client and server on `config`, and the client's connection.
fn pair_on(
    config: &str,
    opts: DurableOptions,
) -> (DurablePair, DurableClient<remora_sim::NodeHandle>) {
    let config: ServerConfig = config.parse().unwrap();
    let pair = DurablePair::new(7, LatencyProfile::default_profile(), config, opts);
    let client = pair.open().unwrap();
    (pair, client)
}

fn run(design: Design, config: &str, batch: u32, heavy: bool) -> (u64, Vec<u64>, u64) {
    let mut opts = options(design, 8, 200, batch);
    if heavy {
        opts.costs.processing = Duration::from_micros(100);
        opts.costs.backlog_threshold = 2;
    }
    let (pair, client) = pair_on(config, opts);
    let out = Rc::new(RefCell::new(None));
    let o = out.clone();
    pair.sim.spawn_on(&pair.client, async move {
        let mut c = client;
        let mut puts = Vec::new();
        for i in 0..12u64 {
            let op = Op::Put {
                key: i % 4,
                value: vec![i as u8; 50 + i as usize],
            };
            if batch > 1 {
                puts.push(op);
                continue;
            }
            let comp = c.call(op).await.unwrap();
            assert!(comp.durable_at.is_some());
        }
        if batch > 1 {
            let comps = c.call_batch(puts).await.unwrap();
            assert_eq!(comps.len(), 12);
        }
        let g = c.call(Op::Get { key: 3 }).await.unwrap();
        assert_eq!(g.reply.unwrap().value, vec![11u8; 61]);
        let replies = c.drain().await.unwrap();
        *o.borrow_mut() = Some(replies.iter().map(|r| r.seq).collect::<Vec<_>>());
    });
    pair.sim.run();
    let seqs = out.borrow_mut().take().expect("client finished");
    let store = pair.store().unwrap();
    for k in 0..4u64 {
        let (_, v) = store.read(k).unwrap().expect("written");
        let last = 8 + k;
        assert_eq!(v, vec![last as u8; 50 + last as usize], "{design} key {k}");
    }
    for (k, n) in pair.executions.borrow().iter() {
        assert_eq!(*n, 1, "{design}: {k:?} executed {n} times");
    }
    let st = pair.server_stats();
    assert_eq!(st.processed, 13, "{design}");
    (pair.sim.now().as_nanos(), seqs, st.slow_downs)
}

#[test]
fn every_design_runs_on_dmp_ddio_and_mhp() {
    for d in Design::DURABLE {
        for c in [
            "DMP+noDDIO+PM-RQWRB",
            "DMP+DDIO+PM-RQWRB",
            "MHP+DDIO+PM-RQWRB",
        ] {
            let (_, seqs, _) = run(d, c, 1, false);
            assert_eq!(seqs, (1..=12).collect::<Vec<_>>(), "{d} {c}");
        }
    }
}

#[test]
fn batching_and_heavy_load_with_slow_down() {
    for d in Design::DURABLE {
        let (_, seqs, slow) = run(d, "DMP+noDDIO+PM-RQWRB", 4, true);
        assert_eq!(seqs.len(), 12, "{d}");
        assert!(
            slow > 0,
            "{d}: a backlog over 2 never asked the client to slow down"
        );
    }
}

#[test]
fn every_native_form_runs_and_a_nic_without_flush_refuses_them() {
    let config: ServerConfig = "DMP+noDDIO+PM-RQWRB".parse().unwrap();
    for d in Design::DURABLE {
        let mut opts = DurableOptions::new(d);
        opts.flush.form = FlushForm::Native;
        let pair = DurablePair::new(1, LatencyProfile::default_profile(), config, opts.clone());
        let client = pair.open().unwrap();
        pair.sim.spawn_on(&pair.client, async move {
            let mut c = client;
            c.call(Op::Put {
                key: 1,
                value: vec![1; 8],
            })
            .await
            .unwrap();
            c.drain().await.unwrap();
        });
        pair.sim.run();
        assert_eq!(pair.executions.borrow().len(), 1, "{d}");
        let mut no_flush = config;
        no_flush.caps.native_flush = false;
        let pair = DurablePair::new(1, LatencyProfile::default_profile(), no_flush, opts);
        assert!(
            matches!(pair.open(), Err(remora_rpc::RpcError::Unsupported { .. })),
            "{d}"
        );
    }
}

/// Seed 003 §4.2/§5.4: requests acknowledged durable but not yet processed when the
/// server loses power are executed from the redo log after restart, without the client
/// re-sending them, exactly once; the reconnected client learns their results.
#[test]
fn durable_but_unprocessed_requests_are_reexecuted_from_the_log() {
    use remora_sim::{CrashAt, FaultPlan};
    for d in Design::DURABLE {
        let config: ServerConfig = "DMP+noDDIO+PM-RQWRB".parse().unwrap();
        let mut opts = DurableOptions::new(d);
        opts.capacity = 8;
        opts.costs.processing = Duration::from_micros(100);
        let run = |crash: Option<remora_model::time::Instant>| {
            let pair = DurablePair::new(3, LatencyProfile::default_profile(), config, opts.clone());
            let client = pair.open().unwrap();
            if let Some(t) = crash {
                pair.sim
                    .set_faults(&FaultPlan::crash(pair.server.id(), CrashAt::Time(t)));
            }
            let acked_at = Rc::new(RefCell::new(None));
            let slot = Rc::new(RefCell::new(None));
            let (a, s, node) = (acked_at.clone(), slot.clone(), pair.client.clone());
            pair.sim.spawn_on(&pair.client, async move {
                let mut c = client;
                for k in 0..4u64 {
                    c.call(Op::Put {
                        key: k,
                        value: vec![k as u8 + 1; 32],
                    })
                    .await
                    .unwrap();
                }
                *a.borrow_mut() = Some(remora_verbs::Verbs::now(&node));
                let _ = c.drain().await;
                *s.borrow_mut() = Some(c);
            });
            pair.sim.run();
            let t = acked_at
                .borrow()
                .expect("all four acknowledged before the crash");
            (pair, t, slot)
        };
        let (_, t, _) = run(None);
        let (pair, _, slot) = run(Some(t + Duration::from_micros(1)));
        assert!(!pair.sim.crashed().is_empty());
        let client = slot
            .borrow_mut()
            .take()
            .expect("drain failed, client returned");
        assert!(client.unacknowledged().is_empty());
        let (server, report) = pair.recover_server().unwrap();
        assert!(report.reexecuted >= 3, "{d}: {report:?}");
        assert_eq!(report.processed, 4, "{d}: {report:?}");
        let mut client = pair.reconnect(server, client).unwrap();
        let replies = pair
            .sim
            .block_on(remora_model::time::Instant::NEVER, async move {
                client.resume().await.unwrap();
                client.drain().await.unwrap()
            })
            .unwrap();
        assert_eq!(
            replies.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4],
            "{d}"
        );
        let ex = pair.executions.borrow();
        assert_eq!(ex.len(), 4, "{d}");
        assert!(ex.values().all(|&n| n == 1), "{d}: {ex:?}");
        let store = pair.store().unwrap();
        for k in 0..4u64 {
            assert_eq!(store.read(k).unwrap().unwrap().1, vec![k as u8 + 1; 32]);
        }
    }
}

/// A client of `pair` whose four Puts were acknowledged durable before the server lost
/// power without processing them; the server recovered, and the client reconnected and
/// resumed (the recovered Puts' replies then on their way). Gives the client, the
/// recovery's report and when the resume returned.
fn resumed_after_a_crash(
    pair: &DurablePair,
) -> (
    DurableClient<remora_sim::NodeHandle>,
    RecoveryReport,
    remora_model::time::Instant,
) {
    use remora_model::time::Instant;
    use remora_sim::{CrashAt, FaultPlan};
    let mut client = pair.open().unwrap();
    let node = pair.client.clone();
    let (client, acked) = pair
        .sim
        .block_on(Instant::NEVER, async move {
            for k in 0..4u64 {
                let value = vec![k as u8 + 1; 32];
                client.call(Op::Put { key: k, value }).await.unwrap();
            }
            (client, remora_verbs::Verbs::now(&node))
        })
        .unwrap();
    let crash = acked + Duration::from_micros(1);
    pair.sim
        .set_faults(&FaultPlan::crash(pair.server.id(), CrashAt::Time(crash)));
    pair.sim.run();
    assert!(!pair.sim.crashed().is_empty());
    let (server, report) = pair.recover_server().unwrap();
    let mut client = pair.reconnect(server, client).unwrap();
    let node = pair.client.clone();
    let (client, resumed) = pair
        .sim
        .block_on(Instant::NEVER, async move {
            client.resume().await.unwrap();
            (client, remora_verbs::Verbs::now(&node))
        })
        .unwrap();
    (client, report, resumed)
}

/// Replies the client's RNIC received, and so acknowledged (the server counts them
/// delivered and never sends them again), but the client had not polled when it opened a
/// new queue pair are not lost with the old one: `reopen` takes them in first. (It left the
/// old completion queue behind, and the replies with it.)
#[test]
fn replies_received_before_a_reopen_are_not_lost_with_the_old_queue_pair() {
    let config: ServerConfig = "DMP+noDDIO+PM-RQWRB".parse().unwrap();
    let mut opts = DurableOptions::new(Design::WFlushRpc);
    opts.capacity = 8;
    opts.costs.processing = Duration::from_micros(100);
    let pair = DurablePair::new(3, LatencyProfile::default_profile(), config, opts);
    let (mut client, report, _) = resumed_after_a_crash(&pair);
    assert_eq!(report.processed, 4, "{report:?}");
    // The recovered Puts' replies reach the client's RNIC, unpolled; then the client
    // opens a new queue pair (its connection broke) and nothing more arrives.
    pair.sim.run();
    let replies = pair
        .sim
        .block_on(remora_model::time::Instant::NEVER, async move {
            client.reopen().await.unwrap();
            client.drain().await.unwrap()
        })
        .unwrap();
    assert_eq!(
        replies.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
}

/// Recovery counts as cut off only operators that commit an entry past the log's end,
/// not the operators older laps left in the ring: it counted every one of those.
#[test]
fn recovery_of_a_wrapped_log_counts_no_cut_off_entry() {
    use remora_sim::{CrashAt, FaultPlan};
    let config: ServerConfig = "DMP+noDDIO+PM-RQWRB".parse().unwrap();
    let mut opts = DurableOptions::new(Design::WFlushRpc);
    opts.capacity = 8;
    let pair = DurablePair::new(3, LatencyProfile::default_profile(), config, opts);
    let mut c = pair.open().unwrap();
    let node = pair.client.clone();
    let done = pair
        .sim
        .block_on(remora_model::time::Instant::NEVER, async move {
            for i in 0..20u64 {
                c.call(Op::Put {
                    key: i % 4,
                    value: vec![i as u8; 32],
                })
                .await
                .unwrap();
            }
            c.drain().await.unwrap();
            remora_verbs::Verbs::now(&node)
        })
        .unwrap();
    pair.sim.set_faults(&FaultPlan::crash(
        pair.server.id(),
        CrashAt::Time(done + Duration::from_micros(1)),
    ));
    pair.sim.run();
    assert!(!pair.sim.crashed().is_empty());
    let (_, report) = pair.recover_server().unwrap();
    assert_eq!(
        (report.processed, report.reexecuted, report.truncated),
        (20, 0, 0),
        "{report:?}"
    );
}

/// A reply whose completion the client's RNIC had not yet delivered when the client
/// opened a new queue pair is not lost either: the RNIC acknowledged it (so the server
/// never sends it again) a little before its completion reached the queue, and `reopen`
/// keeps the old queue until every receive posted on the old queue pair has completed.
/// (It destroyed the queue at once, with such a completion on its way: the message was
/// discarded with it.) Swept over the replies' arrival, a reopen every 50 ns; and the same
/// with a first reopen given up while it waits (the next one finishes its drain).
#[test]
fn a_reply_whose_completion_is_on_its_way_at_a_reopen_is_not_lost() {
    use remora_model::time::Instant;
    let config: ServerConfig = "DMP+noDDIO+PM-RQWRB".parse().unwrap();
    let mut opts = DurableOptions::new(Design::WFlushRpc);
    opts.capacity = 8;
    opts.costs.processing = Duration::from_micros(2);
    // The client, resumed after the server's recovery with the recovered Puts' replies on
    // their way, reopens at `stop`. Gives the messages its RNIC discarded and when the
    // resume returned; without a stop, it takes the replies instead, and gives when the
    // last was in.
    let run = |stop: Option<Instant>, cancel: bool| {
        let pair = DurablePair::new(3, LatencyProfile::default_profile(), config, opts.clone());
        let (mut client, _, resumed) = resumed_after_a_crash(&pair);
        let node = pair.client.clone();
        let Some(t) = stop else {
            // No reopen: when every reply is in.
            let all_in = pair.sim.block_on(Instant::NEVER, async move {
                assert_eq!(client.drain().await.unwrap().len(), 4);
                remora_verbs::Verbs::now(&node)
            });
            return (0, resumed, all_in.unwrap());
        };
        pair.sim.run_until(t);
        let client = pair
            .sim
            .block_on(Instant::NEVER, async move {
                if cancel {
                    // A reopen given up a nanosecond in (a caller's time-out), then another.
                    let give_up = remora_verbs::Verbs::compute(&node, Duration::from_nanos(1));
                    let _ = remora_exec::first(client.reopen(), give_up).await;
                }
                client.reopen().await.unwrap();
                client
            })
            .unwrap();
        let (discarded, objects) = pair.sim.with_rnic(pair.client.id(), |r, _| {
            (r.stats().messages_discarded, r.live_objects())
        });
        // The old queue pair and its CQ are gone, none left behind undrained.
        assert_eq!((objects.qps, objects.cqs), (1, 1), "reopened at {t:?}");
        // Every reply is the client's now or still the server's (its SEND to the old
        // queue pair failed, so it goes out again on the next connection), never neither
        // nor both. The server's connection ends once its unacknowledged SENDs run out of
        // retries; with none, it serves on and has nothing undelivered.
        pair.sim.run();
        let held = client.replies_held();
        let left: Vec<u64> = pair
            .undelivered()
            .unwrap_or_default()
            .iter()
            .map(|r| r.seq)
            .collect();
        let mut all = [held.clone(), left.clone()].concat();
        all.sort_unstable();
        assert_eq!(
            all,
            vec![1, 2, 3, 4],
            "reopened at {t:?}: the client holds {held:?}, the server kept {left:?}"
        );
        (discarded, resumed, t)
    };
    let (_, resumed, end) = run(None, false);
    let mut t = resumed;
    let mut stops = 0;
    while t <= end {
        assert_eq!(
            run(Some(t), false).0,
            0,
            "messages discarded by a reopen at {t:?}"
        );
        assert_eq!(
            run(Some(t), true).0,
            0,
            "messages discarded by a reopen at {t:?} after one given up"
        );
        t += Duration::from_nanos(50);
        stops += 1;
    }
    assert!(stops > 10, "the replies' arrival spans {stops} stops");
}

/// A batch posts one ATOMIC WRITE operator per request behind the data's FLUSH: thousands
/// of non-posted requests wait at the responder, and none is refused (the responder's
/// bound on waiting requests is the deepest send queue; at 1,024 a batch of 1,100 failed
/// its connection, found by a review).
#[test]
fn a_batch_of_thousands_of_requests_runs() {
    for design in [Design::WFlushRpc, Design::SFlushRpc] {
        let n = 2048;
        let (pair, client) = pair_on("DMP+noDDIO+PM-RQWRB", options(design, n, 64, n));
        let out = Rc::new(RefCell::new(None));
        let o = out.clone();
        pair.sim.spawn_on(&pair.client, async move {
            let mut c = client;
            let puts: Vec<Op> = (0..n as u64)
                .map(|i| Op::Put {
                    key: i % 4,
                    value: vec![i as u8; 16],
                })
                .collect();
            *o.borrow_mut() = Some(c.call_batch(puts).await.map(|v| v.len()));
        });
        pair.sim.run();
        let r = out.borrow_mut().take().expect("the client finished");
        assert_eq!(r.map_err(|e| e.to_string()), Ok(n as usize), "{design}");
    }
}
