//! Two durable-RPC connections over one store (as `rpc-serve --connections 2`): a power
//! failure while a Put of connection 2 writes its object back (`clwb` of the header's line
//! done, the value's not yet) leaves the object torn: its checksum fails, and it reads as
//! never written. Start-up settles every log first (`DurableServer::settle`), but settled
//! only a Put whose object carries its stamp, and a torn one carries none; connection 1's
//! recovery then ran before connection 2's (`rpc-serve` recovers the logs in node order),
//! and a Get of the key logged on connection 1 answered "no value": a value the key never
//! held since it was first written, in any order of the requests. Settling must leave no
//! object torn for another log's recovery to read, and execute no Put twice.

use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_rpc::durable::{DurableClient, DurableOptions, DurableServer, StoreLock};
use remora_rpc::kv::{ExecutionLog, KvStore};
use remora_rpc::{Design, Op, Reply, RpcClient};
use remora_sim::{CrashAt, FaultPlan, NodeHandle, Sim};
use remora_verbs::Verbs;
use std::rc::Rc;

fn opts(conn: u32) -> DurableOptions {
    let mut o = DurableOptions::new(Design::WFlushRpc);
    o.conn = conn;
    o.capacity = 4;
    o.objects = 1;
    o.max_value = 256;
    if conn == 1 {
        // Connection 1's Get stays in its log, not yet processed, while connection 2 Puts.
        o.costs.processing = Duration::from_millis(1);
    }
    o
}

/// The two connections' servers over one store, in a fixed allocation order.
fn servers(
    node: &NodeHandle,
    exec: &ExecutionLog,
    lock: &Rc<StoreLock>,
) -> Vec<DurableServer<NodeHandle>> {
    let mut first = DurableServer::create(node.clone(), &opts(1), Some(exec.clone())).unwrap();
    let kv = first.kv_layout();
    let mut second =
        DurableServer::create_in(node.clone(), &opts(2), Some(exec.clone()), Some(kv)).unwrap();
    first.set_store_lock(lock.clone());
    second.set_store_lock(lock.clone());
    vec![first, second]
}

/// The value connection 2's `j`-th Put writes (the first line of the value differs from
/// every other Put's, so a value line left from another Put fails the checksum).
fn value(j: u64) -> Vec<u8> {
    vec![0x10 + j as u8; 200]
}

/// Crash points are this many nanoseconds apart.
const STEP_NS: usize = 16;

/// The value key 0 holds before the run.
const BEFORE: u8 = 0x77;

/// Runs connection 1's Get of key 0 and connection 2's Puts to it, with the server's power
/// cut `crash` nanoseconds into the run; the server restarts, settles every log, then
/// recovers them in order. Returns when connection 2's Puts were done (nanoseconds into
/// the run, for a run without a crash), and connection 1's Get's reply if recovery
/// executed it.
fn run(seed: u64, crash: Option<u64>) -> (u64, Option<Reply>) {
    let sim = Sim::new(seed, LatencyProfile::default_profile());
    let server = sim.add_node("server", "DMP+noDDIO+PM-RQWRB".parse().unwrap());
    let exec = ExecutionLog::default();
    let lock = Rc::new(StoreLock::default());
    let live = servers(&server, &exec, &lock);
    let kv = live[0].kv_layout();
    {
        let (n, bases) = (
            server.clone(),
            live.iter()
                .map(|s| s.conn_info().layout.base)
                .collect::<Vec<_>>(),
        );
        sim.block_on(Instant::NEVER, async move {
            for b in bases {
                n.persist_local(b, 128).await;
            }
            // The key's value before the run, durable (as an earlier connection's Put).
            let mut store = KvStore::new(n.clone(), kv);
            let put = Op::Put {
                key: 0,
                value: vec![BEFORE; 200],
            };
            store.apply(9, 1, &put).await;
        })
        .unwrap();
    }
    let puts_done = Rc::new(std::cell::Cell::new(Instant::ZERO));
    for (i, s) in live.into_iter().enumerate() {
        let done = puts_done.clone();
        let conn = i as u32 + 1;
        let node = sim.add_node(&format!("client{conn}"), server.config());
        let mut c = DurableClient::create(node.clone(), &opts(conn)).unwrap();
        sim.connect((&node, c.qp()), (&server, s.qp())).unwrap();
        c.attach(s.conn_info()).unwrap();
        let n = node.clone();
        sim.spawn_on(&node, async move {
            if conn == 1 {
                let _ = c.call(Op::Get { key: 0 }).await;
            } else {
                for j in 0..4 {
                    if c.call(Op::Put {
                        key: 0,
                        value: value(j),
                    })
                    .await
                    .is_err()
                    {
                        break;
                    }
                }
                done.set(n.now());
            }
        });
        sim.spawn_on(&server, async move {
            let _why = s.serve().await;
        });
    }
    let start = sim.now().as_nanos();
    if let Some(at) = crash {
        let at = CrashAt::Time(Instant::from_nanos(start + at));
        sim.set_faults(&FaultPlan::crash(server.id(), at));
    }
    sim.run();
    if sim.crashed().is_empty() {
        return (puts_done.get().as_nanos() - start, None);
    }
    sim.restart(server.id());
    let mut again = servers(&server, &exec, &lock);
    let got = sim
        .block_on(Instant::NEVER, async move {
            // As `rpc-serve` starts: settle every log, then recover them in node order.
            for s in &mut again {
                s.settle().await.unwrap();
            }
            for s in &mut again {
                s.recover().await.unwrap();
            }
            again[0].take_recovered()
        })
        .expect("recovery finished");
    let twice = exec
        .borrow()
        .iter()
        .find(|(_, &n)| n > 1)
        .map(|(k, n)| (*k, *n));
    assert_eq!(twice, None, "crash {crash:?}: a Put executed twice");
    (
        puts_done.get().as_nanos().saturating_sub(start),
        got.into_iter().find(|r| r.seq == 1),
    )
}

#[test]
fn a_get_recovered_on_one_log_never_reads_an_object_torn_by_another_logs_put() {
    let mut recovered_gets = 0;
    for seed in 1..=3 {
        let (done, _) = run(seed, None);
        // Every few nanoseconds until connection 2's Puts are done (and a little after):
        // a crash point between the write-backs of one object's lines.
        for t in (0..done + 2_000).step_by(STEP_NS) {
            let (_, get) = run(seed, Some(t));
            let Some(get) = get else { continue };
            recovered_gets += 1;
            let v = get.value.clone();
            let valid = v == vec![BEFORE; 200] || (0..4).any(|j| v == value(j));
            assert!(
                valid,
                "seed {seed}, crash {t} ns in: connection 1's Get of key 0 answered \
                 {} bytes {:02x?}, a value the key never held",
                v.len(),
                &v[..v.len().min(4)]
            );
        }
    }
    assert!(
        recovered_gets > 0,
        "no crash point left the Get to recovery"
    );
}
