//! Two durable-RPC connections sharing one object store (as `rpc-serve --connections 2`
//! runs them, with a `StoreLock`), Putting the same key, with the server's power cut at
//! every event boundary of the run. Recovery settles the Put caught between its object and
//! its watermark on every log before any log re-executes (`DurableServer::settle`), so no
//! Put runs twice; recovering the logs one after the other without that first step
//! re-runs such a Put over the other connection's later one, which the sweep must find
//! (so it is known to reach the window).
//!
//! And a client that goes away mid-Put: its connection is torn down (its queue pair
//! fails, as when its TCP connection closes) at every poll of that connection's server,
//! the other connection keeps Putting the key, and the server restarts and recovers. The
//! teardown must let a Put that wrote its object finish its watermark under the lock:
//! dropping the connection's tasks there (as the soft server's `abort` did) frees the lock
//! with the Put executed but not recorded, the other connection overwrites the object, and
//! recovery runs the Put again over the later one.

use remora_model::profile::LatencyProfile;
use remora_rpc::durable::{DurableClient, DurableOptions, DurableServer, StoreLock};
use remora_rpc::kv::{ExecutionLog, KvStore};
use remora_rpc::{Design, Op, RpcClient};
use remora_sim::{CrashAt, FaultPlan, NodeHandle, Sim};
use remora_verbs::Verbs;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Puts per client.
const PUTS: u64 = 6;

/// The simulator seeds each sweep runs with. One seed's interleaving reaches the window a
/// negative control needs only as long as the simulated timings stay as they are (one more
/// PM store at log format once moved seed 3's out of reach); several keep the sweep
/// meaningful when a change shifts them.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=6;

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

/// A server node with the two connections' servers, their store laid out and both logs'
/// headers durable.
struct World {
    sim: Sim,
    server: NodeHandle,
    exec: ExecutionLog,
    lock: Rc<StoreLock>,
    kv: remora_rpc::kv::KvLayout,
}

fn world(seed: u64) -> (World, Vec<DurableServer<NodeHandle>>) {
    let sim = Sim::new(seed, LatencyProfile::default_profile());
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
    let w = World {
        sim,
        server,
        exec,
        lock,
        kv,
    };
    (w, live)
}

impl World {
    /// Client `conn` on a node of its own, connected to server `s`, Putting key 0
    /// [`PUTS`] times (until its connection fails).
    fn client(&self, s: &DurableServer<NodeHandle>, conn: u32) {
        let node = self
            .sim
            .add_node(&format!("client{conn}"), self.server.config());
        let mut c = DurableClient::create(node.clone(), &opts(conn)).unwrap();
        self.sim
            .connect((&node, c.qp()), (&self.server, s.qp()))
            .unwrap();
        c.attach(s.conn_info()).unwrap();
        self.sim.spawn_on(&node, async move {
            for j in 0..PUTS {
                let value = vec![conn as u8; 8 + j as usize];
                if c.call(Op::Put { key: 0, value }).await.is_err() {
                    break;
                }
            }
        });
    }

    /// The restarted server's recovery: settles every log first when `settle`, then
    /// recovers every log.
    fn recover(&self, settle: bool) {
        self.sim.restart(self.server.id());
        let mut again = servers(&self.server, &self.exec, &self.lock);
        self.sim
            .block_on(remora_model::time::Instant::NEVER, async move {
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

    /// What broke: a Put executed twice, or an object whose stamp names a Put that never
    /// ran.
    fn broken(&self) -> Option<String> {
        let counts = self.exec.borrow().clone();
        if let Some(((c, s), n)) = counts.iter().find(|(_, &n)| n > 1) {
            return Some(format!("Put seq {s} of connection {c} executed {n} times"));
        }
        let object = KvStore::new(self.server.clone(), self.kv).read(0).unwrap();
        match object {
            Some((st, _)) if !counts.contains_key(&(st.conn, st.seq)) => {
                Some(format!("key 0 holds {st:?}, never executed"))
            }
            _ => None,
        }
    }
}

/// Runs both clients' Puts to key 0 on a simulator seeded `seed`, cutting the server's power before the run's event
/// `crash` (if any), and recovers (settling every log first when `settle` is true). Returns the
/// events the run processed and what broke: a Put executed twice, or an object whose
/// stamp names a Put that never ran.
fn run(seed: u64, crash: Option<u64>, settle: bool) -> (u64, Option<String>) {
    let (w, live) = world(seed);
    for (i, s) in live.into_iter().enumerate() {
        w.client(&s, i as u32 + 1);
        w.sim.spawn_on(&w.server, async move {
            let _why = s.serve().await;
        });
    }
    if let Some(at) = crash {
        let at = w.sim.events_processed() + at;
        w.sim
            .set_faults(&FaultPlan::crash(w.server.id(), CrashAt::Event(at)));
    }
    let events = w.sim.run();
    if w.sim.crashed().is_empty() {
        assert!(
            crash.is_none() || crash >= Some(events),
            "crash {crash:?} missed"
        );
    } else {
        w.recover(settle);
    }
    (events, w.broken())
}

#[test]
fn settling_every_log_first_executes_no_shared_key_put_twice_at_any_crash_point() {
    let (mut points, mut caught_without) = (0, 0);
    for seed in SEEDS {
        let (events, v) = run(seed, None, true);
        assert_eq!(v, None, "seed {seed}");
        assert!(events > 100, "seed {seed}: {events} events");
        points += events;
        for at in 0..events {
            let (_, v) = run(seed, Some(at), true);
            assert_eq!(v, None, "seed {seed}: crash before event {at}");
            if run(seed, Some(at), false).1.is_some() {
                caught_without += 1;
            }
        }
    }
    eprintln!("{points} crash points; {caught_without} break recovery without settling");
    // The sweep reaches the window: recovering the logs in node order without settling
    // re-runs a Put over the other connection's later one at some crash point.
    assert!(
        caught_without > 0,
        "no crash point of {points} (seeds {SEEDS:?}) needed settling"
    );
}

/// How a connection is torn down when its client goes away.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Teardown {
    /// Fail its queue pair and let `serve` return (what `rpc-serve` does).
    Wait,
    /// Fail its queue pair and drop `serve` at once (an aborted task).
    Abort,
}

/// A connection's `serve`, torn down before its `at`-th poll; counts its polls.
struct Disconnect {
    serve: Option<Pin<Box<dyn Future<Output = ()>>>>,
    node: NodeHandle,
    qp: remora_verbs::QpNum,
    at: u64,
    how: Teardown,
    polls: Rc<Cell<u64>>,
}

impl Future for Disconnect {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let polls = self.polls.get();
        if polls == self.at {
            self.node.fail_qp(self.qp).unwrap();
            if self.how == Teardown::Abort {
                self.serve = None;
                return Poll::Ready(());
            }
        }
        self.polls.set(polls + 1);
        match self.serve.as_mut() {
            Some(f) => f.as_mut().poll(cx),
            None => Poll::Ready(()),
        }
    }
}

/// Both clients Put key 0 while connection 1 is torn down before its server's `at`-th
/// poll, on a simulator seeded `seed`; then the server restarts and settles and recovers
/// both logs. Returns how often connection 1's server was polled and what broke (as
/// [`run`]).
fn run_disconnect(seed: u64, at: u64, how: Teardown) -> (u64, Option<String>) {
    let (w, live) = world(seed);
    let polls = Rc::new(Cell::new(0));
    for (i, s) in live.into_iter().enumerate() {
        let conn = i as u32 + 1;
        w.client(&s, conn);
        let (qp, server) = (s.qp(), w.server.clone());
        let serve = Box::pin(async move {
            let _why = s.serve().await;
        });
        if conn == 1 {
            let d = Disconnect {
                serve: Some(serve),
                node: server,
                qp,
                at,
                how,
                polls: polls.clone(),
            };
            w.sim.spawn_on(&w.server, d);
        } else {
            w.sim.spawn_on(&w.server, serve);
        }
    }
    w.sim.run();
    // The server restarts (a reconnecting client's connection recovers its log the same
    // way, `rpc-serve`'s `handle`): settle every log, then recover every log.
    w.sim.crash_now(w.server.id());
    w.recover(true);
    (polls.get(), w.broken())
}

#[test]
fn a_client_going_away_mid_put_never_gets_its_put_run_twice() {
    let (mut points, mut caught_aborting) = (0, 0);
    for seed in SEEDS {
        let (polls, v) = run_disconnect(seed, u64::MAX, Teardown::Wait);
        assert_eq!(v, None, "seed {seed}");
        assert!(polls > 20, "seed {seed}: {polls} polls");
        points += polls;
        for at in 0..polls {
            let (_, v) = run_disconnect(seed, at, Teardown::Wait);
            assert_eq!(v, None, "seed {seed}: torn down before poll {at}");
            if run_disconnect(seed, at, Teardown::Abort).1.is_some() {
                caught_aborting += 1;
            }
        }
    }
    eprintln!(
        "{points} teardown points; {caught_aborting} break recovery when the teardown aborts"
    );
    // The sweep reaches the window: dropping the connection's tasks mid-Put lets the other
    // connection overwrite the object before the Put's watermark, and recovery runs it again.
    assert!(
        caught_aborting > 0,
        "no teardown point of {points} (seeds {SEEDS:?}) fell inside a Put"
    );
}
