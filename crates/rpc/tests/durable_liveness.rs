//! Liveness of the durable RPCs: a client whose server's RPC threads died while its RNIC
//! lives fails with a clear error within its reply time-out instead of waiting forever,
//! and a server whose queue pair failed returns from `serve` with the reason.

use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_rpc::durable::{DurableClient, DurableOptions, DurablePair, DurableServer};
use remora_rpc::harness::dmp;
use remora_rpc::{Design, Op, RpcClient, RpcError};
use remora_verbs::Verbs;
use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;

/// `a` until `b` finishes: `Some(a's output)`, or `None` when `b` finished first.
async fn until<T>(a: impl Future<Output = T>, b: impl Future<Output = ()>) -> Option<T> {
    let (mut a, mut b) = (pin!(a), pin!(b));
    poll_fn(|cx| {
        if let Poll::Ready(x) = a.as_mut().poll(cx) {
            return Poll::Ready(Some(x));
        }
        b.as_mut().poll(cx).map(|_| None)
    })
    .await
}

fn opts(design: Design) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.capacity = 8;
    o.objects = 4;
    o.max_value = 64;
    o.reply_timeout = Duration::from_millis(2);
    o
}

/// Sets up a server and a connected client like `DurablePair::open`, without serving.
fn connect(
    pair: &DurablePair,
) -> (
    DurableServer<remora_sim::NodeHandle>,
    DurableClient<remora_sim::NodeHandle>,
) {
    let server = pair.fresh_server().unwrap();
    let mut client = DurableClient::create(pair.client.clone(), &pair.opts).unwrap();
    pair.sim
        .connect((&pair.client, client.qp()), (&pair.server, server.qp()))
        .unwrap();
    client.attach(server.conn_info()).unwrap();
    (server, client)
}

#[test]
fn a_client_whose_server_threads_died_fails_within_its_reply_timeout() {
    for design in Design::DURABLE {
        let pair = DurablePair::new(
            3,
            LatencyProfile::default_profile(),
            dmp(false),
            opts(design),
        );
        let (server, mut client) = connect(&pair);
        // The server's threads serve for 100 µs, then die; its RNIC stays up.
        let start = pair.sim.now();
        let killed = Instant::from_nanos(start.as_nanos() + 100_000);
        let node = pair.server.clone();
        pair.sim.spawn_on(&pair.server, async move {
            let _ = until(server.serve(), node.compute(Duration::from_micros(100))).await;
        });
        let c = pair.client.clone();
        // Without the fix this never returns: every probe READ is answered.
        let limit = Instant::from_nanos(start.as_nanos() + 1_000_000_000);
        let (ok, err, at) = pair
            .sim
            .block_on(limit, async move {
                let mut ok = 0u64;
                for i in 0.. {
                    let op = if i % 2 == 0 {
                        Op::Put {
                            key: i % 4,
                            value: vec![i as u8; 32],
                        }
                    } else {
                        Op::Get { key: (i - 1) % 4 }
                    };
                    match client.call(op).await {
                        Ok(_) => ok += 1,
                        Err(e) => return (ok, e, c.now()),
                    }
                }
                unreachable!()
            })
            .unwrap_or_else(|| panic!("{design}: the client waited forever"));
        assert!(
            ok > 0,
            "{design}: no call succeeded before the threads died"
        );
        assert!(
            matches!(err, RpcError::ServerStalled(_)),
            "{design}: {err:?}"
        );
        assert!(err.to_string().contains("no progress"), "{design}: {err}");
        // Bounded: within the reply time-out (2 ms) plus a probe interval of the death.
        let late = at.saturating_since(killed);
        assert!(
            late <= Duration::from_micros(2_100),
            "{design}: failed {late} after"
        );
    }
}

/// A client and server of `design` on DMP without DDIO (seed 4), nothing made yet.
fn pair_on_dmp(design: Design) -> DurablePair {
    DurablePair::new(
        4,
        LatencyProfile::default_profile(),
        dmp(false),
        opts(design),
    )
}

/// The RNIC objects alive on `pair`'s server.
fn server_objects(pair: &DurablePair) -> remora_model::rnic::Objects {
    pair.sim
        .with_rnic(pair.server.id(), |r, _| r.live_objects())
}

/// `serve` returns with the reason when its queue pair fails, and as it returns frees the
/// connection's queue pair, CQs and regions.
#[test]
fn serve_returns_with_the_reason_when_its_queue_pair_fails() {
    for design in Design::DURABLE {
        let pair = pair_on_dmp(design);
        let live = || server_objects(&pair);
        let before = live();
        let (server, mut client) = connect(&pair);
        assert_ne!(live(), before, "{design}: the connection has RNIC objects");
        let qp = server.qp();
        let why: Rc<RefCell<Option<RpcError>>> = Rc::default();
        let w = why.clone();
        pair.sim.spawn_on(&pair.server, async move {
            *w.borrow_mut() = Some(server.serve().await);
        });
        let done = pair.sim.block_on(Instant::NEVER, async move {
            client
                .call(Op::Put {
                    key: 1,
                    value: vec![7; 32],
                })
                .await
                .unwrap();
            client.call(Op::Get { key: 1 }).await.unwrap()
        });
        assert!(done.is_some(), "{design}");
        assert!(why.borrow().is_none(), "{design}: serve returned early");
        // The connection manager tears the connection down (the soft RNIC does this when
        // the client's TCP connection closes).
        pair.sim
            .with_rnic(pair.server.id(), |r, now| r.fail_qp(now, qp))
            .unwrap();
        pair.sim
            .run_until(Instant::from_nanos(pair.sim.now().as_nanos() + 1_000_000));
        let why = why.borrow_mut().take();
        match why {
            Some(RpcError::Connection(m)) => assert!(m.contains("WrFlushErr"), "{design}: {m}"),
            other => panic!("{design}: serve did not return with the QP error: {other:?}"),
        }
        assert_eq!(
            live(),
            before,
            "{design}: serve freed what the connection had"
        );
    }
}

/// A connection whose queue pair failed before `serve` started (its client went away
/// right after the handshake, as the soft RNIC sees it) frees its RNIC objects too: `serve`
/// returned at once and left them all behind, a leak per such connection.
#[test]
fn serve_frees_a_connection_whose_queue_pair_failed_before_it_started() {
    for design in Design::DURABLE {
        let pair = pair_on_dmp(design);
        let live = || server_objects(&pair);
        let before = live();
        let (server, _client) = connect(&pair);
        let qp = server.qp();
        pair.sim
            .with_rnic(pair.server.id(), |r, now| r.fail_qp(now, qp))
            .unwrap();
        let why = pair
            .sim
            .block_on(Instant::NEVER, async move { server.serve().await })
            .expect("serve returned");
        assert!(
            matches!(why, RpcError::Verbs(_) | RpcError::Connection(_)),
            "{design}: {why:?}"
        );
        assert_eq!(
            live(),
            before,
            "{design}: serve freed what the connection had"
        );
    }
}

#[test]
fn serve_returns_when_the_client_dies_while_a_reply_is_due() {
    // The client's node loses power with a read queued behind 100 µs of processing: the
    // server's reply is never acknowledged, its QP fails after the transport's retries,
    // and `serve` returns instead of waiting for requests forever.
    for design in Design::DURABLE {
        let mut o = opts(design);
        o.costs.processing = Duration::from_micros(100);
        let pair = DurablePair::new(5, LatencyProfile::default_profile(), dmp(false), o);
        let (server, mut client) = connect(&pair);
        let why: Rc<RefCell<Option<RpcError>>> = Rc::default();
        let w = why.clone();
        pair.sim.spawn_on(&pair.server, async move {
            *w.borrow_mut() = Some(server.serve().await);
        });
        pair.sim.spawn_on(&pair.client, async move {
            let _ = client.call(Op::Get { key: 1 }).await;
        });
        pair.sim
            .run_until(Instant::from_nanos(pair.sim.now().as_nanos() + 50_000));
        pair.sim.crash_now(pair.client.id());
        pair.sim.run_until(Instant::from_nanos(
            pair.sim.now().as_nanos() + 10_000_000_000,
        ));
        let why = why.borrow_mut().take();
        assert!(
            matches!(why, Some(RpcError::Connection(_))),
            "{design}: serve did not return: {why:?}"
        );
    }
}

/// SFlush-RPC's request arrives by SEND, its operator later by RDMA, which no completion
/// announces: the server's thread polls for it. A sender that takes longer between the two
/// than the thread's fast polls last (here an address lookup of 30 ms, as a sender
/// descheduled that long would) must still have its request processed and answered; the
/// thread once stopped polling after 20,000 polls and waited for the next arrival, and a
/// client draining its last request then waited forever (seen on the soft RNIC under
/// load, `rpc-crashcheck`).
#[test]
fn a_slow_operator_is_still_found_and_its_request_answered() {
    for config in ["DMP+noDDIO+PM-RQWRB", "MHP+DDIO+PM-RQWRB"] {
        let mut o = opts(Design::SFlushRpc);
        o.flush.sflush_lookup = Duration::from_millis(30);
        o.reply_timeout = Duration::from_millis(200);
        let pair = DurablePair::new(
            5,
            LatencyProfile::default_profile(),
            config.parse().unwrap(),
            o,
        );
        let mut client = pair.open().unwrap();
        let out = Rc::new(RefCell::new(None));
        let o2 = out.clone();
        pair.sim.spawn_on(&pair.client, async move {
            let put = client.call(Op::Put {
                key: 1,
                value: vec![9; 16],
            });
            let comp = put.await.expect("the Put is durable");
            assert!(comp.durable_at.is_some());
            // Nothing else arrives: only polling finds the operator.
            *o2.borrow_mut() = Some(client.drain().await.map(|r| r.len()));
        });
        pair.sim.run();
        let drained = out.borrow_mut().take().expect("client finished");
        assert_eq!(drained.expect("drained"), 1, "{config}");
        assert_eq!(pair.server_stats().processed, 1, "{config}");
    }
}

/// A sender that dies between its SEND and its operator leaves an entry that never
/// commits: the server's thread polls it for a bounded time and then waits for the next
/// arrival, so the simulation comes to rest instead of polling forever.
#[test]
fn an_operator_that_never_comes_is_polled_for_a_bounded_time() {
    let mut o = opts(Design::SFlushRpc);
    o.flush.sflush_lookup = Duration::from_millis(10);
    let pair = DurablePair::new(
        5,
        LatencyProfile::default_profile(),
        "DMP+noDDIO+PM-RQWRB".parse().unwrap(),
        o,
    );
    let mut client = pair.open().unwrap();
    pair.sim.spawn_on(&pair.client, async move {
        let _ = client
            .call(Op::Put {
                key: 1,
                value: vec![9; 16],
            })
            .await;
    });
    // The SEND lands within a millisecond; the client dies before its operator.
    pair.sim.block_on(
        Instant::from_nanos(pair.sim.now().as_nanos() + 1_000_000),
        std::future::pending::<()>(),
    );
    pair.sim.crash_now(pair.client.id());
    // Runs until the world is at rest, or 200 s of virtual time if it never comes to rest.
    pair.sim.block_on(
        Instant::from_nanos(200_000_000_000),
        std::future::pending::<()>(),
    );
    let waited = pair.sim.now().as_nanos();
    assert!(
        (60_000_000_000..61_000_000_000).contains(&waited),
        "the server polled until {waited} ns"
    );
    assert_eq!(pair.server_stats().processed, 0);
}

/// A server whose setup fails half-way (its PM holds another connection's redo log, found
/// after its queue pair, CQs and regions were made) refuses with the reason and leaves
/// nothing on the RNIC (one that served and returned leaves nothing either: see
/// `serve_returns_with_the_reason_when_its_queue_pair_fails`).
#[test]
fn a_refused_server_leaves_no_rnic_objects() {
    let pair = pair_on_dmp(Design::WFlushRpc);
    let live = || server_objects(&pair);
    // A log for connection 0, made durable; then a power cycle (allocation starts over).
    let (server, _client) = connect(&pair);
    drop(server);
    pair.sim.crash_now(pair.server.id());
    pair.sim.restart(pair.server.id());
    assert_eq!(live(), Default::default());
    let mut other = pair.opts.clone();
    other.conn = pair.opts.conn + 1;
    match DurableServer::create(pair.server.clone(), &other, None) {
        Err(RpcError::Malformed(m)) => assert!(m.contains("redo log in PM is"), "{m}"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a log of another connection was taken over"),
    }
    assert_eq!(
        live(),
        Default::default(),
        "nothing of the refused setup is left"
    );
}
