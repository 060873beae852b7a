use remora_model::config::*;
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_sim::Sim;
use remora_verbs::*;

#[test]
fn write_then_flush_completes() {
    let sim = Sim::new(1, LatencyProfile::default_profile());
    sim.record_trace(true);
    let cfg = ServerConfig::table1()[2]; // DMP noDDIO DRAM
    let server = sim.add_node("server", cfg);
    let client = sim.add_node("client", cfg);
    let spd = server.alloc_pd().unwrap();
    let base = server.alloc(Space::Pm, 4096, 4096);
    let mr = server
        .reg_mr(spd, Space::Pm, base, 4096, Access::ALL)
        .unwrap();
    let scq = server.create_cq(64).unwrap();
    let sqp = server.create_qp(spd, scq, scq, QpAttr::default()).unwrap();
    let cpd = client.alloc_pd().unwrap();
    let ccq = client.create_cq(64).unwrap();
    let cqp = client.create_qp(cpd, ccq, ccq, QpAttr::default()).unwrap();
    sim.connect((&client, cqp), (&server, sqp)).unwrap();
    let c = client.clone();
    let lat = sim
        .block_on(Instant::NEVER, async move {
            let t0 = c.now();
            c.post_send(
                cqp,
                SendWr::new(
                    1,
                    Opcode::Write,
                    Payload::inline(vec![7; 64]),
                    Some(Remote {
                        addr: mr.addr,
                        rkey: mr.rkey,
                    }),
                )
                .signaled(false),
            )
            .unwrap();
            c.post_send(
                cqp,
                SendWr::new(
                    2,
                    Opcode::Flush {
                        placement: FlushPlacement::Persistence,
                        len: 64,
                    },
                    Payload::None,
                    Some(Remote {
                        addr: mr.addr,
                        rkey: mr.rkey,
                    }),
                ),
            )
            .unwrap();
            let wc = next_completion(&c, ccq).await;
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(wc.wr_id, 2);
            c.now() - t0
        })
        .unwrap();
    println!("latency {lat}");
    let img = sim.with_rnic(server.id(), |r, now| r.crash_image(now));
    assert_eq!(img.read_vec(mr.addr, 64), vec![7; 64]);
    println!("{}", &sim.chrome_trace()[..300]);
}

/// Endless tasks (servers, garbage collectors) hold the world through their node handles;
/// dropping the last `Sim` handle must drop them, and with them the world, instead of
/// leaking both.
#[test]
fn dropping_the_last_sim_handle_drops_its_endless_tasks() {
    use remora_model::time::Duration;
    use std::rc::Rc;
    let sim = Sim::new(1, remora_model::LatencyProfile::default_profile());
    let node = sim.add_node("server", "DMP+noDDIO+PM-RQWRB".parse().unwrap());
    let alive = Rc::new(());
    let token = alive.clone();
    let n = node.clone();
    sim.spawn_on(&node, async move {
        let _token = token;
        loop {
            remora_verbs::Verbs::compute(&n, Duration::from_nanos(1000)).await;
        }
    });
    drop(node);
    let second = sim.clone();
    sim.run_until(remora_model::time::Instant::from_nanos(10_000));
    drop(sim);
    assert_eq!(
        Rc::strong_count(&alive),
        2,
        "a handle is left: the task lives on"
    );
    drop(second);
    assert_eq!(
        Rc::strong_count(&alive),
        1,
        "the endless task outlived its simulation"
    );
}
