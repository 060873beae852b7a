//! HERD and FaSST over the model's real UC and UD queue pairs (seed 003 §3, Figure 2(c),
//! (d)): the queue pairs that carry their messages are of the service types the paper
//! names, as the RNIC itself reports them; FaSST's datagrams respect the 4 KB UD MTU; HERD
//! cuts large replies into datagrams; and a dropped datagram ends a call with a time-out.

use remora_model::rnic::EventKind;
use remora_model::time::{Duration, Instant};
use remora_rpc::baselines::{qp_types, BaselineParams, BaselineServer, ServerCpu};
use remora_rpc::harness::{BaselineDeployment, Deployment, SimEnv, SimSetup};
use remora_rpc::workload::{check_value, value_for};
use remora_rpc::{Design, Op, RpcClient, RpcError};
use remora_sim::NodeHandle;
use remora_verbs::{Opcode, Payload, QpNum, QpType, SendWr, Verbs, VerbsError};
use std::collections::BTreeSet;

/// The service type of `qp` on `node`, as the RNIC reports it: a READ is refused on UC and
/// UD with an error naming the type (on RC it passes that check and fails later for want
/// of a target, so nothing is posted).
fn probe_type(env: &SimEnv, node: &NodeHandle, qp: QpNum) -> &'static str {
    env.sim.with_rnic(node.id(), |r, now| {
        match r.post_send(now, qp, SendWr::new(0, Opcode::Read, Payload::None, None)) {
            Err(VerbsError::NotOnQpType { qp_type, .. }) => qp_type,
            Ok(()) => panic!("probe READ posted on {qp:?}"),
            Err(_) => "IBV_QPT_RC",
        }
    })
}

/// The QPs of `node` that transmitted request packets since events were switched on.
fn transmitting(env: &SimEnv, node: &NodeHandle) -> BTreeSet<QpNum> {
    env.sim.with_rnic(node.id(), |r, _| {
        r.take_events()
            .into_iter()
            .filter(|e| e.kind == EventKind::Transmitted)
            .map(|e| e.qp)
            .collect()
    })
}

fn name(t: QpType) -> &'static str {
    t.name()
}

#[test]
fn herd_and_fasst_send_on_uc_and_ud_queue_pairs() {
    for design in [Design::Herd, Design::Fasst, Design::DaRpc, Design::Farm] {
        let max_value = if design == Design::Fasst {
            2048
        } else {
            10_000
        };
        let setup = SimSetup::new(5, 8, max_value);
        let env = SimEnv::new(setup);
        env.preload(0..8, 64);
        let dep = BaselineDeployment::new(design, &env.setup);
        let mut c = dep.deploy(&env).unwrap().pop().unwrap();
        let client_qps = c.qps();
        for n in [&env.server, &env.senders[0]] {
            env.sim.with_rnic(n.id(), |r, _| r.record_events(true));
        }
        let out = env.sim.block_on(Instant::NEVER, async move {
            let mut got = Vec::new();
            for (key, len) in [(1u64, 100u64), (2, max_value)] {
                c.call(Op::Put {
                    key,
                    value: value_for(key, 1, len),
                })
                .await
                .unwrap();
                let g = c.call(Op::Get { key }).await.unwrap();
                got.push((key, len, g.reply.unwrap().value));
            }
            got
        });
        for (key, len, v) in out.expect("the run finished") {
            assert_eq!(check_value(key, len, &v), Ok(1), "{design} key {key}");
        }
        let (req, rep) = qp_types(design);
        // Every QP that sent on the client's side is of the request type...
        let sent = transmitting(&env, &env.senders[0]);
        assert!(!sent.is_empty(), "{design}");
        for qp in &sent {
            assert_eq!(
                probe_type(&env, &env.senders[0], *qp),
                name(req),
                "{design}: client {qp:?}"
            );
            assert!(client_qps.iter().any(|(q, t)| q == qp && *t == req));
        }
        // ... and on the server's side of the reply type.
        let sent = transmitting(&env, &env.server);
        assert!(!sent.is_empty(), "{design}");
        for qp in &sent {
            assert_eq!(
                probe_type(&env, &env.server, *qp),
                name(rep),
                "{design}: server {qp:?}"
            );
        }
        let st = env.sim.with_rnic(env.server.id(), |r, _| r.stats());
        assert_eq!(st.unreliable_no_recv, 0, "{design}: receives kept posted");
        let st = env.sim.with_rnic(env.senders[0].id(), |r, _| r.stats());
        assert_eq!(st.unreliable_no_recv, 0, "{design}: receives kept posted");
    }
    assert_eq!(qp_types(Design::Herd), (QpType::Uc, QpType::Ud));
    assert_eq!(qp_types(Design::Fasst), (QpType::Ud, QpType::Ud));
}

#[test]
fn fasst_datagrams_fit_the_ud_mtu() {
    let setup = SimSetup {
        max_batch: 4,
        ..SimSetup::new(2, 8, 4040)
    };
    let env = SimEnv::new(setup);
    env.preload(0..8, 64);
    let dep = BaselineDeployment::new(Design::Fasst, &env.setup);
    let mut c = dep.deploy(&env).unwrap().pop().unwrap();
    let out = env.sim.block_on(Instant::NEVER, async move {
        let fits = c
            .call(Op::Put {
                key: 1,
                value: value_for(1, 1, 4040),
            })
            .await;
        let read = c.call(Op::Get { key: 1 }).await;
        let over = c
            .call(Op::Put {
                key: 1,
                value: value_for(1, 2, 4041),
            })
            .await;
        // Two 2 KB Puts in one cell do not fit one datagram.
        let batch = c
            .call_batch(vec![
                Op::Put {
                    key: 2,
                    value: value_for(2, 1, 2048),
                },
                Op::Put {
                    key: 3,
                    value: value_for(3, 1, 2048),
                },
            ])
            .await;
        (fits, read, over, batch)
    });
    let (fits, read, over, batch) = out.unwrap();
    assert!(fits.is_ok(), "{fits:?}");
    assert_eq!(
        check_value(1, 4040, &read.unwrap().reply.unwrap().value),
        Ok(1)
    );
    assert!(
        matches!(&over, Err(RpcError::Unsupported { design: "FaSST", what }) if what.contains("4041")),
        "{over:?}"
    );
    assert!(
        matches!(&batch, Err(RpcError::Unsupported { what, .. }) if what.contains("UD MTU")),
        "{batch:?}"
    );
}

/// UD drops a datagram that finds no receive posted, silently (an RC responder would send
/// an RNR NAK and the requester retry). A FaSST server that stopped serving has its four
/// request receives consumed by four requests; the fifth is dropped at its RNIC; every
/// call ends with a time-out, and none hangs.
#[test]
fn a_dropped_datagram_ends_the_call_with_a_time_out() {
    let env = SimEnv::new(SimSetup::new(3, 8, 256));
    let mut params = BaselineParams::new(Design::Fasst, 256, &env.setup.profile);
    params.polling.timeout = Duration::from_micros(200);
    let mut server = BaselineServer::create(
        env.server.clone(),
        params,
        ServerCpu::from_profile(&env.setup.profile),
        env.setup.costs,
        env.layout,
    )
    .unwrap();
    let (mut c, sqp) = server.accept(env.senders[0].clone(), 1).unwrap();
    env.sim
        .connect((&env.senders[0], c.qp()), (&env.server, sqp))
        .unwrap();
    // The server is never served.
    let node = env.senders[0].clone();
    let out = env.sim.block_on(Instant::NEVER, async move {
        let mut r = Vec::new();
        for k in 0..5u64 {
            let t0 = node.now();
            let e = c.call(Op::Get { key: k }).await;
            r.push((e, node.now().saturating_since(t0)));
        }
        r
    });
    for (e, took) in out.expect("no call hangs") {
        assert!(matches!(e, Err(RpcError::Timeout(_))), "{e:?}");
        assert!(took >= Duration::from_micros(200) && took < Duration::from_micros(300));
    }
    let st = env.sim.with_rnic(env.server.id(), |r, _| r.stats());
    assert_eq!(st.unreliable_no_recv, 1, "{st:?}");
    assert_eq!(st.rnr_naks, 0);
    drop(server);
}
