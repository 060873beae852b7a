//! Determinism: the same seed and program give the same run, bit for bit (fingerprint,
//! Chrome trace, final memory), with and without a crash; another seed gives another run.

use remora_model::config::ServerConfig;
use remora_model::mem::SparseMem;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_sim::{CrashAt, FaultPlan, NodeHandle, Sim};
use remora_verbs::*;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

const REGION: u64 = 64 * 1024;
const RECV_BUF: u64 = 256;
const RECVS_PER_QP: u64 = 16;

struct Server {
    node: NodeHandle,
    pd: PdId,
    mr: MrInfo,
    rmr: MrInfo,
    cq: CqId,
}

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    fingerprint: u64,
    trace: String,
    durable: Vec<u64>,
    visible: Vec<u64>,
    /// Per operation kind: (successes, failures).
    ops: BTreeMap<&'static str, (u32, u32)>,
    events: u64,
    end: Instant,
    crashed: Vec<(NodeId, Instant)>,
}

fn add_server(sim: &Sim, i: usize, config: ServerConfig) -> Server {
    let node = sim.add_node(&format!("server{i}"), config);
    let pd = node.alloc_pd().unwrap();
    let base = node.alloc(Space::Pm, REGION, 4096);
    let mr = node
        .reg_mr(pd, Space::Pm, base, REGION, Access::ALL)
        .unwrap();
    let rlen = 3 * RECVS_PER_QP * RECV_BUF;
    let rbase = node.alloc(Space::Pm, rlen, 4096);
    let rmr = node
        .reg_mr(pd, Space::Pm, rbase, rlen, Access::LOCAL_WRITE)
        .unwrap();
    let cq = node.create_cq(4096).unwrap();
    Server {
        node,
        pd,
        mr,
        rmr,
        cq,
    }
}

/// The server's CPU: takes each received message, copies its first 8 bytes into a PM log
/// slot, persists it, and reposts the buffer.
fn serve(sim: &Sim, s: &Server) {
    let (node, cq, lkey, log) = (s.node.clone(), s.cq, s.rmr.lkey, s.mr.addr + REGION - 4096);
    sim.spawn_on(&s.node, async move {
        let mut n = 0u64;
        loop {
            node.wait_cq(cq).await;
            while let Some(wc) = node.poll_one(cq) {
                if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
                    continue;
                }
                let slot = log + (n % 512) * 8;
                n += 1;
                node.memcpy((Space::Pm, slot), (Space::Pm, wc.wr_id), 8)
                    .await;
                node.persist_local(slot, 8).await;
                let sge = Sge {
                    addr: wc.wr_id,
                    len: RECV_BUF as u32,
                    lkey,
                };
                let _ = node.post_recv(
                    wc.qp,
                    RecvWr {
                        wr_id: sge.addr,
                        sge,
                    },
                );
            }
        }
    });
}

fn scenario(seed: u64, crash: Option<Instant>, record: bool) -> Outcome {
    let sim = Sim::new(seed, LatencyProfile::default_profile());
    sim.record_trace(record);
    let table = ServerConfig::table1();
    let servers: Vec<Server> = [table[3], table[5]]
        .into_iter()
        .enumerate()
        .map(|(i, c)| add_server(&sim, i, c))
        .collect();
    let stats: Rc<RefCell<BTreeMap<&'static str, (u32, u32)>>> = Rc::default();
    for c in 0..3u64 {
        let client = sim.add_node(&format!("client{c}"), table[3]);
        let cpd = client.alloc_pd().unwrap();
        let ccq = client.create_cq(64).unwrap();
        let local = client.alloc(Space::Dram, 4096, 4096);
        let lmr = client
            .reg_mr(cpd, Space::Dram, local, 4096, Access::ALL)
            .unwrap();
        let mut targets = Vec::new();
        for s in &servers {
            let qp = client.create_qp(cpd, ccq, ccq, QpAttr::default()).unwrap();
            let sqp = s
                .node
                .create_qp(s.pd, s.cq, s.cq, QpAttr::default())
                .unwrap();
            sim.connect((&client, qp), (&s.node, sqp)).unwrap();
            for j in 0..RECVS_PER_QP {
                let addr = s.rmr.addr + (c * RECVS_PER_QP + j) * RECV_BUF;
                let sge = Sge {
                    addr,
                    len: RECV_BUF as u32,
                    lkey: s.rmr.lkey,
                };
                s.node.post_recv(sqp, RecvWr { wr_id: addr, sge }).unwrap();
            }
            targets.push((qp, s.mr));
        }
        let (cl, stats) = (client.clone(), stats.clone());
        sim.spawn_on(&client, async move {
            let mut rng = Prng::from_seed(seed.wrapping_mul(1_000_003) + c);
            let mut dead = [false; 2];
            for i in 0..40u64 {
                let s = rng.range_inclusive(0, 1) as usize;
                if dead[s] {
                    continue;
                }
                let (qp, mr) = targets[s];
                let remote = |off: u64| {
                    Some(Remote {
                        addr: mr.addr + off,
                        rkey: mr.rkey,
                    })
                };
                let local = |len: u64| {
                    Payload::Sge(Sge {
                        addr: lmr.addr,
                        len: len as u32,
                        lkey: lmr.lkey,
                    })
                };
                let off = 8 * rng.range_inclusive(0, (REGION - 8192) / 8);
                let len = 8 * rng.range_inclusive(1, 32);
                let (name, wr) = match rng.range_inclusive(0, 4) {
                    0 => {
                        let data: Vec<u8> = (0..len).map(|j| (i + j + c) as u8).collect();
                        (
                            "write",
                            SendWr::new(i, Opcode::Write, Payload::inline(data), remote(off)),
                        )
                    }
                    1 => (
                        "read",
                        SendWr::new(i, Opcode::Read, local(len), remote(off)),
                    ),
                    2 => {
                        let data = vec![(i * 7 + c) as u8; len as usize];
                        (
                            "send",
                            SendWr::new(i, Opcode::Send, Payload::inline(data), None),
                        )
                    }
                    3 => {
                        let op = Opcode::Flush {
                            placement: FlushPlacement::Persistence,
                            len,
                        };
                        ("flush", SendWr::new(i, op, Payload::None, remote(off)))
                    }
                    _ => {
                        let op = Opcode::CompareSwap {
                            compare: rng.range_inclusive(0, 1),
                            swap: i + 1,
                        };
                        let off = 8 * rng.range_inclusive(0, 15);
                        ("cas", SendWr::new(i, op, local(8), remote(off)))
                    }
                };
                let ok = if cl.post_send(qp, wr).is_ok() {
                    let wc = next_completion(&cl, ccq).await;
                    assert_eq!(wc.wr_id, i);
                    wc.status == WcStatus::Success
                } else {
                    false
                };
                {
                    let mut st = stats.borrow_mut();
                    let e = st.entry(name).or_default();
                    if ok {
                        e.0 += 1;
                    } else {
                        e.1 += 1;
                        dead[s] = true;
                    }
                }
                cl.sleep(Duration::from_nanos(rng.range_inclusive(0, 3_000)))
                    .await;
            }
        });
    }
    for s in &servers {
        serve(&sim, s);
    }
    if let Some(t) = crash {
        sim.set_faults(&FaultPlan::crash(servers[1].node.id(), CrashAt::Time(t)));
    }
    let events = sim.run();
    let mut durable = Vec::new();
    let mut visible = Vec::new();
    for s in &servers {
        durable.push(sim.with_rnic(s.node.id(), |r, now| r.crash_image(now).digest()));
        let mut img = SparseMem::new();
        for base in [s.mr.addr, s.rmr.addr] {
            let mut buf = vec![0u8; REGION as usize];
            sim.with_rnic(s.node.id(), |r, now| {
                r.cpu_load(now, Space::Pm, base, &mut buf)
            });
            img.write(base, &buf);
        }
        visible.push(img.digest());
    }
    let ops = stats.borrow().clone();
    Outcome {
        fingerprint: sim.fingerprint(),
        trace: sim.chrome_trace(),
        durable,
        visible,
        ops,
        events,
        end: sim.now(),
        crashed: sim.crashed(),
    }
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let a = scenario(7, None, true);
    let b = scenario(7, None, true);
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_eq!(a.trace, b.trace, "the Chrome trace is byte-identical");
    assert_eq!(a.durable, b.durable);
    assert_eq!(a.visible, b.visible);
    assert_eq!(a, b);
    // The scenario exercised every operation, and all of them succeeded without a crash.
    for kind in ["write", "read", "send", "flush", "cas"] {
        let (ok, err) = a.ops.get(kind).copied().unwrap_or_default();
        assert!(ok > 0, "no successful {kind}: {:?}", a.ops);
        assert_eq!(err, 0, "{kind} failed without a crash: {:?}", a.ops);
    }
    assert!(a.crashed.is_empty());
}

#[test]
fn another_seed_gives_another_run() {
    let a = scenario(7, None, false);
    for seed in [8, 9, 1 << 40] {
        let b = scenario(seed, None, false);
        assert_ne!(a.fingerprint, b.fingerprint, "seed {seed}");
        assert_ne!(
            a.durable, b.durable,
            "seed {seed}: the servers' PM differs too"
        );
    }
}

#[test]
fn a_run_with_a_crash_is_deterministic_too() {
    let t = Some(Instant::from_nanos(25_000));
    let a = scenario(11, t, true);
    let b = scenario(11, t, true);
    assert_eq!(a, b);
    assert_eq!(a.crashed.len(), 1);
    assert!(
        a.ops.values().any(|&(_, err)| err > 0),
        "some client saw the crashed server fail: {:?}",
        a.ops
    );
    assert!(a.trace.contains("power failure"));
    let no_crash = scenario(11, None, true);
    assert_ne!(a.fingerprint, no_crash.fingerprint);
    assert!(!no_crash.trace.contains("power failure"));
    // A different crash time is a different run.
    let c = scenario(11, Some(Instant::from_nanos(26_000)), true);
    assert_ne!(a.fingerprint, c.fingerprint);
}

/// Recording the timeline observes the run without changing it.
#[test]
fn recording_a_trace_does_not_change_the_run() {
    for crash in [None, Some(Instant::from_nanos(25_000))] {
        let on = scenario(12, crash, true);
        let off = scenario(12, crash, false);
        assert_eq!(on.fingerprint, off.fingerprint);
        assert_eq!(on.durable, off.durable);
        assert_eq!(on.ops, off.ops);
        assert_eq!(on.end, off.end);
        assert!(!on.trace.is_empty());
    }
}

#[test]
fn the_chrome_trace_is_valid_json() {
    let out = scenario(7, Some(Instant::from_nanos(25_000)), true);
    let v: serde_json::Value = serde_json::from_str(&out.trace).expect("valid JSON");
    let events = v["traceEvents"].as_array().expect("a traceEvents array");
    let mut spans = 0;
    let mut names = BTreeMap::<String, u32>::new();
    for e in events {
        let ph = e["ph"].as_str().expect("every event has a phase");
        assert!(e["pid"].is_u64(), "{e}");
        assert!(e["ts"].is_number(), "{e}");
        if ph == "X" {
            spans += 1;
            let ts = e["ts"].as_f64().expect("numeric ts");
            let dur = e["dur"].as_f64().expect("numeric dur");
            assert!(ts >= 0.0 && dur >= 0.0, "{e}");
            assert!(e["name"].is_string() && e["tid"].is_u64(), "{e}");
            *names
                .entry(
                    e["name"]
                        .as_str()
                        .unwrap()
                        .split(' ')
                        .next()
                        .unwrap()
                        .to_string(),
                )
                .or_default() += 1;
        }
    }
    assert!(spans > 100, "only {spans} spans");
    for n in ["WRITE", "READ", "SEND", "FLUSH", "CAS", "wr"] {
        assert!(names.contains_key(n), "no {n} span: {names:?}");
    }
    assert!(events
        .iter()
        .any(|e| e["ph"] == "i" && e["name"] == "power failure"));
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["args"]["name"] == "server1"));
}
