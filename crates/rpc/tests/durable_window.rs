//! A durable-RPC client never writes an entry into a slot whose earlier lap the server has
//! not processed (seed 003 §4.2's ring: "once an RPC is successfully processed, the
//! corresponding log entry is removed"): with a tiny log, a slow server, batches larger
//! than the log and several workers, every design, Flush form and configuration executes
//! each request exactly once, in order, and a crash mid-run loses nothing acknowledged.

use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_rpc::durable::{DurableOptions, DurablePair};
use remora_rpc::{Design, FlushForm, Op, RpcClient};
use remora_sim::{CrashAt, FaultPlan};
use std::cell::RefCell;
use std::rc::Rc;

const CONFIGS: [&str; 3] = [
    "DMP+noDDIO+PM-RQWRB",
    "DMP+DDIO+PM-RQWRB",
    "MHP+DDIO+PM-RQWRB",
];

/// Puts each run issues; the value of Put `i` is `i + 1`, so the store shows which Put of a
/// key came last.
const PUTS: u64 = 24;

fn options(design: Design, form: FlushForm, batch: u32, workers: u32) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.flush.form = form;
    o.capacity = 2;
    o.objects = 4;
    o.max_value = 64;
    o.batch = batch;
    o.costs.processing = Duration::from_micros(30);
    o.costs.backlog_threshold = 64;
    o.costs.workers = workers;
    o
}

fn puts() -> Vec<Op> {
    (0..PUTS)
        .map(|i| Op::Put {
            key: i % 4,
            value: vec![i as u8 + 1; 32],
        })
        .collect()
}

#[test]
fn a_client_far_ahead_of_a_slow_server_never_overwrites_an_unprocessed_entry() {
    for d in Design::DURABLE {
        for form in [FlushForm::Emulated, FlushForm::Native] {
            for config in CONFIGS {
                for (batch, workers) in [(1, 1), (5, 1), (5, 3)] {
                    let what = format!("{d} {form:?} {config} batch {batch} workers {workers}");
                    let config: ServerConfig = config.parse().unwrap();
                    let pair = DurablePair::new(
                        5,
                        LatencyProfile::default_profile(),
                        config,
                        options(d, form, batch, workers),
                    );
                    let client = pair.open().unwrap();
                    let done = Rc::new(RefCell::new(None));
                    let o = done.clone();
                    pair.sim.spawn_on(&pair.client, async move {
                        let mut c = client;
                        let comps = c.call_batch(puts()).await;
                        let replies = c.drain().await;
                        *o.borrow_mut() = Some((comps.map(|v| v.len()), replies));
                    });
                    pair.sim.run();
                    let (comps, replies) = done.borrow_mut().take().expect("client finished");
                    assert_eq!(comps.unwrap(), PUTS as usize, "{what}");
                    let seqs: Vec<u64> = replies.unwrap().iter().map(|r| r.seq).collect();
                    assert_eq!(seqs, (1..=PUTS).collect::<Vec<_>>(), "{what}");
                    for (k, n) in pair.executions.borrow().iter() {
                        assert_eq!(*n, 1, "{what}: {k:?} executed {n} times");
                    }
                    assert_eq!(pair.executions.borrow().len() as u64, PUTS, "{what}");
                    let store = pair.store().unwrap();
                    for k in 0..4u64 {
                        let (st, v) = store.read(k).unwrap().expect("written");
                        let last = PUTS - 4 + k;
                        assert_eq!((st.seq, v), (last + 1, vec![last as u8 + 1; 32]), "{what}");
                    }
                }
            }
        }
    }
}

/// A power failure while the client is a full log ahead of the server: every Put the
/// client was told is durable is executed exactly once after recovery (an entry
/// overwritten by its next lap before it was processed would be missing, or its slot
/// would stop recovery early).
#[test]
fn a_crash_with_a_full_log_loses_no_acknowledged_put() {
    for d in Design::DURABLE {
        for form in [FlushForm::Emulated, FlushForm::Native] {
            for crash_us in [40u64, 95, 170] {
                let what = format!("{d} {form:?} crash at {crash_us} us");
                let config: ServerConfig = "DMP+noDDIO+PM-RQWRB".parse().unwrap();
                let pair = DurablePair::new(
                    9,
                    LatencyProfile::default_profile(),
                    config,
                    options(d, form, 5, 1),
                );
                let mut client = pair.open().unwrap();
                pair.sim.set_faults(&FaultPlan::crash(
                    pair.server.id(),
                    CrashAt::Time(Instant::from_nanos(crash_us * 1000)),
                ));
                let acked = Rc::new(RefCell::new(Vec::new()));
                let a = acked.clone();
                let back = Rc::new(RefCell::new(None));
                let b = back.clone();
                pair.sim.spawn_on(&pair.client, async move {
                    for op in puts() {
                        match client.call(op).await {
                            Ok(comp) => a.borrow_mut().push(comp.seq),
                            Err(_) => break,
                        }
                    }
                    *b.borrow_mut() = Some(client);
                });
                pair.sim.run();
                let client = back.borrow_mut().take().expect("client stopped");
                let acked = acked.borrow().clone();
                assert!(
                    !acked.is_empty(),
                    "{what}: nothing acknowledged before the crash"
                );
                let (server, _report) = pair.recover_server().unwrap();
                let mut client = pair.reconnect(server, client).unwrap();
                pair.sim
                    .block_on(Instant::NEVER, async move {
                        client.resume().await.unwrap();
                        client.drain().await.unwrap();
                    })
                    .expect("resumed");
                for s in &acked {
                    assert_eq!(
                        pair.executions.borrow().get(&(1, *s)).copied(),
                        Some(1),
                        "{what}: acknowledged Put {s} (of {acked:?})"
                    );
                }
            }
        }
    }
}
