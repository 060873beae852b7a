//! Two durable-RPC connections sharing one object store (as `rpc-serve --connections 2`
//! runs them, with a `StoreLock`), Putting the same key, with the server's power cut at
//! every event boundary of the run. Recovery settles the Put caught between its object and
//! its watermark on every log before any log re-executes (`DurableServer::settle`), so no
//! Put runs twice; recovering the logs one after the other without that first step
//! re-runs such a Put over the other connection's later one, which the sweep must find
//! (so it is known to reach the window).

use remora_model::profile::LatencyProfile;
use remora_rpc::durable::{DurableClient, DurableOptions, DurableServer, StoreLock};
use remora_rpc::kv::{ExecutionLog, KvStore};
use remora_rpc::{Design, Op, RpcClient};
use remora_sim::{CrashAt, FaultPlan, NodeHandle, Sim};
use remora_verbs::Verbs;
use std::rc::Rc;

/// Puts per client.
const PUTS: u64 = 6;

fn opts(conn: u32) -> DurableOptions {
    let mut o = DurableOptions::new(Design::WFlushRpc);
    o.conn = conn;
    o.capacity = 4;
    o.objects = 1;
    o.max_value = 32;
    o
}

/// The server's two connections over one store, allocated in a fixed order (a restarted
/// server finds the logs and the store at the same addresses), sharing `lock`.
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

/// Runs both clients' Puts to key 0, cutting the server's power before the run's event
/// `crash` (if any), and recovers (settling every log first when `settle` is true). Returns the
/// events the run processed and what broke: a Put executed twice, or an object whose
/// stamp names a Put that never ran.
fn run(crash: Option<u64>, settle: bool) -> (u64, Option<String>) {
    let sim = Sim::new(3, LatencyProfile::default_profile());
    let server = sim.add_node("server", "DMP+noDDIO+PM-RQWRB".parse().unwrap());
    let exec = ExecutionLog::default();
    let lock = Rc::new(StoreLock::default());
    let live = servers(&server, &exec, &lock);
    let kv = live[0].kv_layout();
    for s in &live {
        let (n, base) = (server.clone(), s.conn_info().layout.base);
        sim.block_on(remora_model::time::Instant::NEVER, async move {
            n.persist_local(base, 128).await;
        })
        .unwrap();
    }
    for (i, s) in live.into_iter().enumerate() {
        let conn = i as u32 + 1;
        let node = sim.add_node(&format!("client{conn}"), server.config());
        let mut c = DurableClient::create(node.clone(), &opts(conn)).unwrap();
        sim.connect((&node, c.qp()), (&server, s.qp())).unwrap();
        c.attach(s.conn_info()).unwrap();
        sim.spawn_on(&server, async move {
            let _why = s.serve().await;
        });
        sim.spawn_on(&node, async move {
            for j in 0..PUTS {
                let value = vec![conn as u8; 8 + j as usize];
                if c.call(Op::Put { key: 0, value }).await.is_err() {
                    break;
                }
            }
        });
    }
    if let Some(at) = crash {
        let at = sim.events_processed() + at;
        sim.set_faults(&FaultPlan::crash(server.id(), CrashAt::Event(at)));
    }
    let events = sim.run();
    if sim.crashed().is_empty() {
        assert!(
            crash.is_none() || crash >= Some(events),
            "crash {crash:?} missed"
        );
    } else {
        sim.restart(server.id());
        let mut again = servers(&server, &exec, &lock);
        sim.block_on(remora_model::time::Instant::NEVER, async move {
            if settle {
                for s in &mut again {
                    s.settle().await.unwrap();
                }
            }
            for s in &mut again {
                s.recover().await.unwrap();
            }
        })
        .expect("recovery finished");
    }
    let counts = exec.borrow().clone();
    if let Some(((c, s), n)) = counts.iter().find(|(_, &n)| n > 1) {
        return (
            events,
            Some(format!("Put seq {s} of connection {c} executed {n} times")),
        );
    }
    let object = KvStore::new(server.clone(), kv).read(0).unwrap();
    if let Some((st, _)) = object {
        if !counts.contains_key(&(st.conn, st.seq)) {
            return (events, Some(format!("key 0 holds {st:?}, never executed")));
        }
    }
    (events, None)
}

#[test]
fn settling_every_log_first_executes_no_shared_key_put_twice_at_any_crash_point() {
    let (events, v) = run(None, true);
    assert_eq!(v, None);
    assert!(events > 100, "{events} events");
    let mut caught_without = 0;
    for at in 0..events {
        let (_, v) = run(Some(at), true);
        assert_eq!(v, None, "crash before event {at}");
        if run(Some(at), false).1.is_some() {
            caught_without += 1;
        }
    }
    eprintln!("{events} crash points; {caught_without} break recovery without settling");
    // The sweep reaches the window: recovering the logs in node order without settling
    // re-runs a Put over the other connection's later one at some crash point.
    assert!(
        caught_without > 0,
        "no crash point of {events} needed settling"
    );
}
