//! The simulated fabric at scale: many nodes, per-port queueing, CPU time on servers.

use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_sim::{NodeHandle, Sim};
use remora_verbs::*;
use std::cell::RefCell;
use std::rc::Rc;

struct Server {
    node: NodeHandle,
    pd: PdId,
    mr: MrInfo,
}

fn server(sim: &Sim, name: &str, len: u64) -> Server {
    let node = sim.add_node(name, ServerConfig::table1()[3]);
    let pd = node.alloc_pd().unwrap();
    let base = node.alloc(Space::Pm, len, 4096);
    let mr = node.reg_mr(pd, Space::Pm, base, len, Access::ALL).unwrap();
    Server { node, pd, mr }
}

fn connect(sim: &Sim, client: &NodeHandle, server: &Server) -> (QpNum, CqId) {
    let (spd, server) = (server.pd, &server.node);
    let scq = server.create_cq(16).unwrap();
    let sqp = server.create_qp(spd, scq, scq, QpAttr::default()).unwrap();
    let cpd = client.alloc_pd().unwrap();
    let ccq = client.create_cq(1024).unwrap();
    let cqp = client.create_qp(cpd, ccq, ccq, QpAttr::default()).unwrap();
    sim.connect((client, cqp), (server, sqp)).unwrap();
    (cqp, ccq)
}

/// Seed 001 §6 runs 5 servers with 20 clients each: every client appends to its server
/// with WRITE + FLUSH and all of them finish.
#[test]
fn five_servers_and_a_hundred_clients() {
    let sim = Sim::new(5, LatencyProfile::default_profile());
    let servers: Vec<Server> = (0..5)
        .map(|i| server(&sim, &format!("s{i}"), 1 << 20))
        .collect();
    let done = Rc::new(RefCell::new(0u32));
    for c in 0..100u32 {
        let client = sim.add_node(&format!("c{c}"), ServerConfig::table1()[3]);
        let s = &servers[(c % 5) as usize];
        let (qp, cq) = connect(&sim, &client, s);
        let (mr, done) = (s.mr, done.clone());
        let cl = client.clone();
        sim.spawn_on(&client, async move {
            for i in 0..20u64 {
                let addr = mr.addr + ((c as u64 / 5) * 20 + i) * 64;
                let remote = Some(Remote {
                    addr,
                    rkey: mr.rkey,
                });
                cl.post_send(
                    qp,
                    SendWr::new(i, Opcode::Write, Payload::inline(vec![c as u8; 64]), remote)
                        .signaled(false),
                )
                .unwrap();
                let flush = Opcode::Flush {
                    placement: FlushPlacement::Persistence,
                    len: 64,
                };
                cl.post_send(qp, SendWr::new(i, flush, Payload::None, remote))
                    .unwrap();
                assert_eq!(next_completion(&cl, cq).await.status, WcStatus::Success);
            }
            *done.borrow_mut() += 1;
        });
    }
    sim.run();
    assert_eq!(*done.borrow(), 100);
    for (i, s) in servers.iter().enumerate() {
        let img = sim.with_rnic(s.node.id(), |r, now| r.crash_image(now));
        // Every client's 20 records are durable with the client's byte.
        for c in (i as u32..100).step_by(5) {
            let off = (c as u64 / 5) * 20 * 64;
            assert_eq!(
                img.read_vec(s.mr.addr + off, 20 * 64),
                vec![c as u8; 20 * 64],
                "server {i} client {c}"
            );
        }
    }
}

/// Per-port queueing: one server port is the bottleneck, so twice the clients streaming
/// large WRITEs take about twice as long, and the achieved rate stays at the link rate.
#[test]
fn a_shared_port_limits_throughput() {
    let elapsed = |clients: u32| {
        let sim = Sim::new(9, LatencyProfile::default_profile());
        let s = server(&sim, "s", 64 << 20);
        let last = Rc::new(RefCell::new(Instant::ZERO));
        for c in 0..clients {
            let client = sim.add_node("c", ServerConfig::table1()[3]);
            let (qp, cq) = connect(&sim, &client, &s);
            let (mr, cl, last) = (s.mr, client.clone(), last.clone());
            sim.spawn_on(&client, async move {
                for i in 0..16u64 {
                    let addr = mr.addr + (c as u64 * 16 + i) * 65536;
                    let remote = Some(Remote {
                        addr,
                        rkey: mr.rkey,
                    });
                    cl.post_send(
                        qp,
                        SendWr::new(i, Opcode::Write, Payload::inline(vec![1; 65536]), remote)
                            .signaled(i == 15),
                    )
                    .unwrap();
                }
                assert_eq!(next_completion(&cl, cq).await.status, WcStatus::Success);
                let t = cl.now().max(*last.borrow());
                *last.borrow_mut() = t;
            });
        }
        sim.run();
        let t = *last.borrow();
        t
    };
    let (one, four) = (elapsed(1), elapsed(4));
    let bytes_four = 4.0 * 16.0 * 65536.0 * 8.0;
    let gbps = bytes_four / four.as_nanos() as f64;
    let profile = LatencyProfile::default_profile();
    assert!(
        four.as_nanos() > 3 * one.as_nanos(),
        "one {one} four {four}"
    );
    assert!(
        gbps <= profile.network.link_gbps as f64 && gbps > 0.8 * profile.network.link_gbps as f64,
        "{gbps} Gb/s"
    );
}

/// Server CPU work takes simulated time: a two-sided exchange costs the responder's
/// message handling on top of the round trip.
#[test]
fn server_cpu_time_is_charged() {
    let rtt = |handle_ns: u64| {
        let sim = Sim::new(3, LatencyProfile::default_profile());
        let s = server(&sim, "s", 4096);
        let client = sim.add_node("c", ServerConfig::table1()[3]);
        let spd = s.node.alloc_pd().unwrap();
        let buf = s.node.alloc(Space::Dram, 4096, 64);
        let smr = s
            .node
            .reg_mr(spd, Space::Dram, buf, 4096, Access::ALL)
            .unwrap();
        let scq = s.node.create_cq(16).unwrap();
        let sqp = s.node.create_qp(spd, scq, scq, QpAttr::default()).unwrap();
        let cpd = client.alloc_pd().unwrap();
        let cbuf = client.alloc(Space::Dram, 4096, 64);
        let cmr = client
            .reg_mr(cpd, Space::Dram, cbuf, 4096, Access::ALL)
            .unwrap();
        let ccq = client.create_cq(16).unwrap();
        let cqp = client.create_qp(cpd, ccq, ccq, QpAttr::default()).unwrap();
        sim.connect((&client, cqp), (&s.node, sqp)).unwrap();
        s.node
            .post_recv(
                sqp,
                RecvWr {
                    wr_id: 1,
                    sge: Sge {
                        addr: smr.addr,
                        len: 64,
                        lkey: smr.lkey,
                    },
                },
            )
            .unwrap();
        client
            .post_recv(
                cqp,
                RecvWr {
                    wr_id: 2,
                    sge: Sge {
                        addr: cmr.addr,
                        len: 64,
                        lkey: cmr.lkey,
                    },
                },
            )
            .unwrap();
        let sn = s.node.clone();
        sim.spawn_on(&s.node, async move {
            let wc = next_completion(&sn, scq).await;
            assert_eq!(wc.opcode, WcOpcode::Recv);
            sn.compute(Duration::from_nanos(handle_ns)).await;
            sn.post_send(
                sqp,
                SendWr::new(3, Opcode::Send, Payload::inline(vec![0; 8]), None).signaled(false),
            )
            .unwrap();
        });
        let c = client.clone();
        sim.block_on(Instant::NEVER, async move {
            let t0 = c.now();
            c.post_send(
                cqp,
                SendWr::new(4, Opcode::Send, Payload::inline(vec![0; 64]), None).signaled(false),
            )
            .unwrap();
            loop {
                let wc = next_completion(&c, ccq).await;
                if wc.opcode == WcOpcode::Recv {
                    return c.now() - t0;
                }
            }
        })
        .unwrap()
    };
    let (fast, slow) = (rtt(0), rtt(5_000));
    assert_eq!(
        slow.as_nanos() - fast.as_nanos(),
        5_000,
        "fast {fast} slow {slow}"
    );
    assert!(fast.as_nanos() >= LatencyProfile::default_profile().network.nic_rtt_ns);
}

/// The server CPU copies from a receive buffer in DRAM to PM: the copy takes the
/// profile's memcpy time, lands in the cache (volatile under DMP), and is durable after
/// clwb + sfence.
#[test]
fn memcpy_then_persist_local() {
    let sim = Sim::new(4, LatencyProfile::default_profile());
    let node = sim.add_node("s", ServerConfig::table1()[0]); // DMP + DDIO
    let dram = node.alloc(Space::Dram, 4096, 64);
    let pm = node.alloc(Space::Pm, 4096, 64);
    node.store(Space::Dram, dram, &[9; 1000]);
    let (n, sim2, id) = (node.clone(), sim.clone(), node.id());
    let (copied_at, durable_after) = sim
        .block_on(Instant::NEVER, async move {
            let t0 = n.now();
            n.memcpy((Space::Pm, pm), (Space::Dram, dram), 1000).await;
            let copied = n.now() - t0;
            let mut buf = vec![0; 1000];
            n.load(Space::Pm, pm, &mut buf);
            assert_eq!(buf, vec![9; 1000]);
            let lost = sim2
                .with_rnic(id, |r, now| r.crash_image(now))
                .read_vec(pm, 1000);
            assert_ne!(lost, vec![9; 1000], "copied lines are still in the cache");
            n.persist_local(pm, 1000).await;
            (copied, n.now())
        })
        .unwrap();
    let profile = LatencyProfile::default_profile();
    assert_eq!(copied_at, profile.memcpy_time(1000));
    let img = sim.with_rnic(node.id(), |r, _| r.crash_image(durable_after));
    assert_eq!(img.read_vec(pm, 1000), vec![9; 1000]);
}

/// `block_on` returns as soon as its future is done: later events (an idle ACK timer)
/// stay unprocessed, so `now()` is the completion time.
#[test]
fn block_on_stops_when_its_future_finishes() {
    let sim = Sim::new(2, LatencyProfile::default_profile());
    let s = server(&sim, "s", 4096);
    let client = sim.add_node("c", ServerConfig::table1()[3]);
    let (qp, cq) = connect(&sim, &client, &s);
    let (mr, c) = (s.mr, client.clone());
    let done_at = sim
        .block_on(Instant::NEVER, async move {
            let remote = Some(Remote {
                addr: mr.addr,
                rkey: mr.rkey,
            });
            c.post_send(
                qp,
                SendWr::new(1, Opcode::Write, Payload::inline(vec![1; 8]), remote),
            )
            .unwrap();
            next_completion(&c, cq).await;
            c.now()
        })
        .unwrap();
    assert_eq!(sim.now(), done_at);
    assert!(done_at.as_nanos() < 10_000, "{done_at}");
}
