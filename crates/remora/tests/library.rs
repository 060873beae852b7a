//! The library end to end on the simulator: the planner's candidates and ranking, the
//! client's refusals (which must write nothing), the responder's robustness against bad
//! messages, recovery from a PM receive ring across two crashes, and the handshake.

use remora::client::{Client, PersistError};
use remora::harness::SimPair;
use remora::planner;
use remora::responder::{CpuCosts, Footprint, Responder, ServerSetup};
use remora::taxonomy::{Primitive, Shape, Taxonomy, Update};
use remora::wire::{Frame, FrameError, Hello};
use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_sim::{NodeHandle, Sim};
use remora_verbs::*;

mod common;
use common::{cfg, drive, slow_responder, RawQp};

fn profile() -> LatencyProfile {
    LatencyProfile::default_profile()
}

/// What a power failure of `node` now would leave at `addr`.
fn durable(sim: &Sim, node: &NodeHandle, addr: u64, len: usize) -> Vec<u8> {
    sim.with_rnic(node.id(), |r, now| r.crash_image(now).read_vec(addr, len))
}

/// A pair whose client is connected with `primitive` and `shape`.
fn connected(
    config: ServerConfig,
    setup: ServerSetup,
    primitive: Primitive,
    shape: Shape,
) -> (SimPair, Client<NodeHandle>, MrInfo) {
    let pair = SimPair::new(11, profile(), config, setup);
    let (mut client, region) = pair.open().expect("open");
    let client = drive(&pair.sim, async move {
        client.connect(primitive, shape).await.expect("connect");
        client
    });
    (pair, client, region)
}

// ------------------------------------------------------------------------------ planner

#[test]
fn planner_lists_every_correct_method_and_picks_a_one_sided_one_without_ddio() {
    let t = Taxonomy::shipped();
    let config = cfg("DMP+noDDIO+DRAM-RQWRB");
    let cands = planner::candidates(&t, &config, Update::Singleton, Shape::default());
    let has =
        |name: &str, f: FlushMethod| cands.iter().any(|(m, fl, _)| m.name == name && *fl == f);
    assert!(has("write-flush", FlushMethod::Native), "{cands:?}");
    assert!(has("write-flush", FlushMethod::ReadAfterWrite), "{cands:?}");
    assert!(has("writeimm-flush", FlushMethod::Native), "{cands:?}");
    assert!(has("send-copy-flush", FlushMethod::Native), "{cands:?}");
    assert!(
        has("write-msg", FlushMethod::Native),
        "∗ alternative: {cands:?}"
    );
    for (m, f, why) in &cands {
        assert_eq!(m.update(), Update::Singleton, "{}", m.name);
        assert!(!why.is_empty(), "{} has no reason", m.name);
        if *f == FlushMethod::ReadAfterWrite {
            assert!(
                m.uses_flush(),
                "{} emulates a FLUSH it does not issue",
                m.name
            );
        }
    }
    let mut keys: Vec<_> = cands
        .iter()
        .map(|(m, f, _)| format!("{}/{f:?}", m.name))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), cands.len(), "duplicate candidates: {keys:?}");

    let p = profile();
    let plan = planner::plan(&config, Update::Singleton, Shape::default(), &p);
    assert_eq!(
        plan.len(),
        cands.len(),
        "every candidate gets a prediction (none fails on the simulator)"
    );
    for w in plan.windows(2) {
        assert!(
            w[0].mean <= w[1].mean,
            "not sorted: {} {} then {} {}",
            w[0].method.name,
            w[0].mean,
            w[1].method.name,
            w[1].mean
        );
    }
    for c in &plan {
        assert!(
            c.mean.as_nanos() > p.network.nic_rtt_ns / 2,
            "{} predicted {} below half a NIC round trip",
            c.method.name,
            c.mean
        );
    }
    let best = &plan[0];
    assert!(
        !best.method.two_sided(),
        "chose the two-sided {} without DDIO",
        best.method.name
    );
    // Two-sided methods pay the responder's CPU on top: they are slower than the best.
    let msg = plan.iter().find(|c| c.method.name == "write-msg").unwrap();
    assert!(msg.mean > best.mean);

    let text = planner::explain(&config, Update::Singleton, Shape::default(), &p);
    assert!(
        text.contains(&format!("Chosen: {}", best.method.name)),
        "{text}"
    );
}

#[test]
fn planner_offers_no_flush_method_under_dmp_with_ddio() {
    let t = Taxonomy::shipped();
    let config = cfg("DMP+DDIO+DRAM-RQWRB");
    for update in Update::ALL {
        let cands = planner::candidates(&t, &config, update, Shape::default());
        assert!(cands.len() >= 3, "{cands:?}");
        for (m, _, _) in &cands {
            assert!(
                !m.uses_flush(),
                "{}: one-sided {} offered although DDIO keeps data in the LLC",
                update.name(),
                m.name
            );
            assert!(m.two_sided(), "{} is not two-sided", m.name);
        }
    }
    let plan = planner::plan(&config, Update::Singleton, Shape::default(), &profile());
    assert!(!plan.is_empty() && plan.iter().all(|c| !c.method.uses_flush()));
}

#[test]
fn planner_offers_atomic_write_only_for_an_eight_byte_b() {
    // The ATOMIC WRITE verb carries exactly 8 bytes: for any other b the plan must not
    // offer `write-flush-atomic-flush`, which the client would refuse on every update.
    let config = cfg("DMP+noDDIO+PM-RQWRB");
    let atomic = |c: &planner::Candidate| {
        c.method
            .steps
            .iter()
            .any(|s| matches!(s, remora::taxonomy::Step::RqWriteAtomic(_)))
    };
    let eight = planner::plan(&config, Update::Compound, Shape { b_len: 8 }, &profile());
    assert!(eight.iter().any(atomic), "8 bytes: ATOMIC WRITE is correct");
    for b_len in [4, 16] {
        let plan = planner::plan(&config, Update::Compound, Shape { b_len }, &profile());
        assert!(!plan.is_empty());
        assert!(!plan.iter().any(atomic), "b of {b_len} bytes");
        assert!(plan
            .iter()
            .any(|c| c.method.name == "write-flush-wait-write-flush"));
    }
}

#[test]
fn planner_emulates_flush_by_read_when_the_nic_lacks_it() {
    let t = Taxonomy::shipped();
    for name in ["DMP+noDDIO+DRAM-RQWRB", "MHP+DDIO+PM-RQWRB"] {
        let mut config = cfg(name);
        config.caps.native_flush = false;
        for update in Update::ALL {
            let cands = planner::candidates(&t, &config, update, Shape::default());
            let flushing: Vec<_> = cands.iter().filter(|(m, _, _)| m.uses_flush()).collect();
            assert!(!flushing.is_empty(), "{name} {}", update.name());
            for (m, f, why) in flushing {
                assert_eq!(
                    *f,
                    FlushMethod::ReadAfterWrite,
                    "{name} {}: {} uses a native FLUSH the NIC lacks",
                    update.name(),
                    m.name
                );
                assert!(why.contains("READ"), "{why}");
            }
        }
    }
    let mut config = cfg("DMP+noDDIO+DRAM-RQWRB");
    config.caps.native_flush = false;
    let cands = planner::candidates(&t, &config, Update::Singleton, Shape::default());
    let plan = planner::plan(&config, Update::Singleton, Shape::default(), &profile());
    assert_eq!(plan.len(), cands.len());
    assert!(plan
        .iter()
        .all(|c| !c.method.uses_flush() || c.flush == FlushMethod::ReadAfterWrite));
}

// ------------------------------------------------------------------------- client errors

const SMALL: ServerSetup = ServerSetup {
    region_len: 4096,
    rq_slots: 64,
    rq_slot_bytes: 256,
};

#[test]
fn out_of_range_updates_are_refused_and_write_nothing() {
    let (pair, client, region) = connected(
        cfg("DMP+noDDIO+DRAM-RQWRB"),
        SMALL,
        Primitive::Write,
        Shape::default(),
    );
    let client = drive(&pair.sim, async move {
        let mut client = client;
        assert_eq!(
            client.persist(4096 - 32, &[0xAB; 64]).await,
            Err(PersistError::OutOfRange {
                offset: 4064,
                len: 64,
                region_len: 4096
            })
        );
        assert!(matches!(
            client.persist(u64::MAX - 8, &[0xAB; 16]).await,
            Err(PersistError::OutOfRange { .. })
        ));
        // The second item out of range: the first must not be written either.
        assert!(matches!(
            client
                .persist_ordered((0, &[0xAB; 64]), (4096, &[0xAB; 8]))
                .await,
            Err(PersistError::OutOfRange { offset: 4096, .. })
        ));
        client
    });
    pair.sim.run();
    assert_eq!(pair.server_read(region.addr, 4096), vec![0u8; 4096]);
    assert_eq!(
        durable(&pair.sim, &pair.server, region.addr, 4096),
        vec![0u8; 4096]
    );
    // The client still works.
    drive(&pair.sim, async move {
        let mut client = client;
        client.persist(4096 - 64, &[0x5A; 64]).await.unwrap();
    });
    assert_eq!(
        durable(&pair.sim, &pair.server, region.addr + 4096 - 64, 64),
        vec![0x5A; 64]
    );
}

#[test]
fn compound_write_uses_atomic_write_for_8_bytes_and_waits_for_the_flush_for_16() {
    let config = cfg("DMP+noDDIO+DRAM-RQWRB");
    let (pair, client, region) = connected(config, SMALL, Primitive::Write, Shape::default());
    assert_eq!(
        client.method(Update::Compound).unwrap().name,
        "write-flush-atomic-flush"
    );
    drive(&pair.sim, async move {
        let mut client = client;
        client
            .persist_ordered((0, &[0x11; 64]), (128, &7u64.to_le_bytes()))
            .await
            .unwrap();
    });
    assert_eq!(
        durable(&pair.sim, &pair.server, region.addr, 64),
        vec![0x11; 64]
    );
    assert_eq!(
        durable(&pair.sim, &pair.server, region.addr + 128, 8),
        7u64.to_le_bytes()
    );

    let (pair, client, region) = connected(config, SMALL, Primitive::Write, Shape { b_len: 16 });
    assert_eq!(
        client.method(Update::Compound).unwrap().name,
        "write-flush-wait-write-flush"
    );
    drive(&pair.sim, async move {
        let mut client = client;
        client
            .persist_ordered((0, &[0x22; 64]), (128, &[0x33; 16]))
            .await
            .unwrap();
    });
    assert_eq!(
        durable(&pair.sim, &pair.server, region.addr, 64),
        vec![0x22; 64]
    );
    assert_eq!(
        durable(&pair.sim, &pair.server, region.addr + 128, 16),
        vec![0x33; 16]
    );
}

#[test]
fn an_atomic_write_too_long_for_b_is_refused_before_anything_is_written() {
    // Connected for 8-byte b's, then given a 16-byte b: the method cannot carry it.
    let (pair, client, region) = connected(
        cfg("DMP+noDDIO+DRAM-RQWRB"),
        SMALL,
        Primitive::Write,
        Shape::default(),
    );
    drive(&pair.sim, async move {
        let mut client = client;
        let r = client
            .persist_ordered((0, &[0x44; 64]), (128, &[0x55; 16]))
            .await;
        assert!(
            matches!(&r, Err(PersistError::Unsuitable { method, .. }) if method == "write-flush-atomic-flush"),
            "{r:?}"
        );
    });
    pair.sim.run();
    assert_eq!(
        pair.server_read(region.addr, 256),
        vec![0u8; 256],
        "a refused update wrote to the region"
    );
}

#[test]
fn writeimm_needs_an_offset_the_immediate_can_address() {
    let (pair, client, region) = connected(
        cfg("MHP+DDIO+DRAM-RQWRB"),
        SMALL,
        Primitive::WriteImm,
        Shape::default(),
    );
    assert_eq!(
        client.method(Update::Singleton).unwrap().name,
        "writeimm-flush"
    );
    let client = drive(&pair.sim, async move {
        let mut client = client;
        let r = client.persist(100, &[0x66; 32]).await;
        assert!(
            matches!(&r, Err(PersistError::Unsuitable { method, .. }) if method == "writeimm-flush"),
            "{r:?}"
        );
        client
    });
    pair.sim.run();
    assert_eq!(pair.server_read(region.addr, 4096), vec![0u8; 4096]);
    drive(&pair.sim, async move {
        let mut client = client;
        client.persist(128, &[0x66; 32]).await.unwrap();
    });
    assert_eq!(
        durable(&pair.sim, &pair.server, region.addr + 128, 32),
        vec![0x66; 32]
    );
}

#[test]
fn a_message_larger_than_the_receive_slot_is_refused() {
    let setup = ServerSetup {
        rq_slot_bytes: 64,
        ..SMALL
    };
    let (pair, client, region) = connected(
        cfg("DMP+DDIO+DRAM-RQWRB"),
        setup,
        Primitive::Send,
        Shape::default(),
    );
    assert_eq!(client.hello().unwrap().rq_slot_bytes, 64);
    assert_eq!(
        client.method(Update::Singleton).unwrap().name,
        "send-copy-flush"
    );
    let client = drive(&pair.sim, async move {
        let mut client = client;
        let r = client.persist(0, &[0x77; 100]).await;
        assert!(
            matches!(&r, Err(PersistError::Unsuitable { method, .. }) if method == "send-copy-flush"),
            "{r:?}"
        );
        client
    });
    pair.sim.run();
    assert_eq!(pair.server_read(region.addr, 4096), vec![0u8; 4096]);
    // A frame that fits (24-byte header + 12-byte entry header + 28 bytes) still goes.
    drive(&pair.sim, async move {
        let mut client = client;
        client.persist(0, &[0x78; 28]).await.unwrap();
    });
    assert_eq!(
        durable(&pair.sim, &pair.server, region.addr, 28),
        vec![0x78; 28]
    );
}

#[test]
fn nothing_works_before_connect() {
    let pair = SimPair::new(1, profile(), cfg("MHP+DDIO+PM-RQWRB"), SMALL);
    let mut client = Client::create(pair.client.clone()).unwrap();
    assert!(client.method(Update::Singleton).is_none());
    assert!(client.hello().is_none());
    drive(&pair.sim, async move {
        assert_eq!(
            client.persist(0, &[1; 8]).await,
            Err(PersistError::NotConnected)
        );
        assert_eq!(
            client.persist_ordered((0, &[1; 8]), (64, &[2; 8])).await,
            Err(PersistError::NotConnected)
        );
        assert_eq!(client.read(0, 8).await, Err(PersistError::NotConnected));
    });
}

// ---------------------------------------------------------------- responder robustness

#[test]
fn bad_messages_get_no_effect_and_the_responder_keeps_serving() {
    let p = profile();
    let config = cfg("DMP+DDIO+DRAM-RQWRB");
    let sim = Sim::new(7, p.clone());
    let server = sim.add_node("server", config);
    let client = sim.add_node("client", config);
    let setup = ServerSetup {
        region_len: 8192,
        ..ServerSetup::default()
    };
    let mut responder =
        Responder::create(server.clone(), setup, CpuCosts::from_profile(&p)).unwrap();
    let region = responder.region();
    let raw = RawQp::new(&client);
    sim.connect((&client, raw.qp), (&server, responder.qp()))
        .unwrap();
    sim.spawn_on(&server, async move {
        responder.serve().await;
    });
    let len = setup.region_len;
    let (raw, good_seq) = drive(&sim, async move {
        let Ok(Frame::Hello(hello)) = Frame::parse(&raw.recv().await) else {
            panic!("no Hello first")
        };
        assert_eq!(hello.region_len, len);
        let s = hello.seq_base;
        // (a) garbage, and nothing at all.
        raw.send(1, vec![0xEE; 40]);
        raw.send(2, Vec::new());
        // (b) an Apply whose second entry runs past the region: neither entry may land.
        let out = Frame::Apply {
            seq: s,
            ack: true,
            entries: vec![(0, vec![0xBB; 32]), (len - 4, vec![0xBB; 64])],
        };
        raw.send(3, out.emit());
        // An offset whose end overflows.
        let wrap = Frame::Apply {
            seq: s + 1,
            ack: true,
            entries: vec![(u64::MAX - 3, vec![0xBB; 16])],
        };
        raw.send(4, wrap.emit());
        // A Notify naming a range outside the region.
        let note = Frame::Notify {
            seq: s + 2,
            ack: true,
            entries: vec![(len, 1)],
        };
        raw.send(5, note.emit());
        // A valid frame with one byte flipped in its data (checksum mismatch).
        let mut torn = Frame::Apply {
            seq: s + 3,
            ack: true,
            entries: vec![(512, vec![0xDD; 16])],
        }
        .emit();
        *torn.last_mut().unwrap() ^= 0x40;
        raw.send(6, torn);
        // Sequence numbers past any Hello's range: recorded as applied in a PM ring, one
        // made the slot's next Hello one that every client must refuse.
        for (i, seq) in [(60, remora::wire::MAX_SEQ_BASE), (61, u64::MAX)] {
            let far = Frame::Apply {
                seq,
                ack: true,
                entries: vec![(768, vec![0xAB; 8])],
            };
            raw.send(i, far.emit());
        }
        // (c) a valid Apply.
        let good = Frame::Apply {
            seq: s + 4,
            ack: true,
            entries: vec![(256, vec![0xCC; 48])],
        };
        raw.send(7, good.emit());
        let ack = Frame::parse(&raw.recv().await);
        assert_eq!(
            ack,
            Ok(Frame::Ack { seq: s + 4 }),
            "first reply after Hello"
        );
        (raw, s + 4)
    });
    sim.run();
    // No other reply (no ack for a refused message), and no send failed.
    assert_eq!(
        raw.node.poll_one(raw.rcq),
        None,
        "a refused message was acknowledged"
    );
    assert_eq!(
        raw.node.poll_one(raw.scq),
        None,
        "a send completed with an error"
    );
    let load = |off: u64, n: usize| {
        let mut b = vec![0u8; n];
        server.load(Space::Pm, region.addr + off, &mut b);
        b
    };
    assert_eq!(
        load(256, 48),
        vec![0xCC; 48],
        "Apply {good_seq} not applied"
    );
    assert_eq!(
        durable(&sim, &server, region.addr + 256, 48),
        vec![0xCC; 48],
        "acknowledged but not durable under DMP"
    );
    assert_eq!(
        load(0, 32),
        vec![0; 32],
        "in-range entry of a refused Apply written"
    );
    assert_eq!(load(len - 4, 4), vec![0; 4], "out-of-range entry written");
    assert_eq!(load(512, 16), vec![0; 16], "corrupt frame applied");
    // Everything but the good bytes is untouched.
    let mut all = load(0, len as usize);
    all[256..304].fill(0);
    assert!(all.iter().all(|&b| b == 0));
    // And the server still serves a later message.
    let seq = good_seq + 1;
    drive(&sim, async move {
        raw.send(
            8,
            Frame::Apply {
                seq,
                ack: true,
                entries: vec![(1024, vec![0x99; 8])],
            }
            .emit(),
        );
        assert_eq!(Frame::parse(&raw.recv().await), Ok(Frame::Ack { seq }));
    });
    assert_eq!(load(1024, 8), vec![0x99; 8]);
}

// ------------------------------------------------------------------------------ recovery

/// Persists `updates` with `client`, then (if `crash`) cuts the server's power the
/// instant the last persist returns. Returns the client and the sequence numbers used.
fn persist_then_crash(
    pair: &SimPair,
    client: Client<NodeHandle>,
    updates: Vec<(u64, Vec<u8>)>,
    crash: bool,
) -> (Client<NodeHandle>, u64) {
    let (sim, server) = (pair.sim.clone(), pair.server.id());
    let out = drive(&pair.sim, async move {
        let mut client = client;
        let n = updates.len() as u64;
        for (off, data) in &updates {
            client.persist(*off, data).await.unwrap();
        }
        if crash {
            sim.crash_now(server);
        }
        (client, n)
    });
    if !crash {
        pair.sim.run();
    }
    out
}

fn first_updates() -> Vec<(u64, Vec<u8>)> {
    vec![
        (0, vec![1; 64]),
        (64, vec![2; 64]),
        (128, vec![3; 100]),
        (0, vec![4; 64]), // overwrites the first: replay order matters
        (256, vec![5; 8]),
    ]
}

fn second_updates() -> Vec<(u64, Vec<u8>)> {
    vec![(0, vec![6; 64]), (128, vec![7; 100])]
}

/// The newest value at each offset.
fn expect_region(pair: &SimPair, region: u64, updates: &[(u64, Vec<u8>)], when: &str) {
    let mut want = vec![0u8; 512];
    for (off, data) in updates {
        want[*off as usize..*off as usize + data.len()].copy_from_slice(data);
    }
    assert_eq!(pair.server_read(region, 512), want, "{when}");
}

fn connect_send(pair: &SimPair, mut client: Client<NodeHandle>) -> (Client<NodeHandle>, Hello) {
    drive(&pair.sim, async move {
        let hello = client
            .connect(Primitive::Send, Shape::default())
            .await
            .unwrap();
        assert_eq!(client.method(Update::Singleton).unwrap().name, "send-flush");
        (client, hello)
    })
}

fn connect_send_any(pair: &SimPair, mut client: Client<NodeHandle>) -> Client<NodeHandle> {
    drive(&pair.sim, async move {
        client
            .connect(Primitive::Send, Shape::default())
            .await
            .unwrap();
        client
    })
}

#[test]
fn recovery_replays_unapplied_messages_from_a_pm_ring() {
    let pair = SimPair::new(
        3,
        slow_responder(),
        cfg("MHP+DDIO+PM-RQWRB"),
        ServerSetup::default(),
    );
    let (client, region) = pair.open().unwrap();
    let (client, hello) = connect_send(&pair, client);
    let first = first_updates();
    let (_, n) = persist_then_crash(&pair, client, first.clone(), true);
    assert_eq!(pair.sim.crashed().len(), 1);
    // The responder had applied none of them: the region has none of the bytes.
    assert_eq!(
        pair.server_read(region.addr, 512),
        vec![0u8; 512],
        "the responder was not slow enough for this test"
    );
    let (_, report) = pair.recover_server().unwrap();
    assert_eq!(report.found, n, "{report:?}");
    assert_eq!(report.max_seq, hello.seq_base + n - 1, "{report:?}");
    expect_region(&pair, region.addr, &first, "after recovery");
    assert_eq!(
        durable(&pair.sim, &pair.server, region.addr, 512),
        pair.server_read(region.addr, 512),
        "recovered state is not durable"
    );
}

#[test]
fn recovery_skips_messages_already_applied() {
    let pair = SimPair::new(
        3,
        profile(),
        cfg("MHP+DDIO+PM-RQWRB"),
        ServerSetup::default(),
    );
    let (client, region) = pair.open().unwrap();
    let (client, hello) = connect_send(&pair, client);
    let first = first_updates();
    // Let the responder apply everything, then overwrite a value behind the library's
    // back: a replay of already-applied messages would restore the old bytes.
    let (_, n) = persist_then_crash(&pair, client, first.clone(), false);
    expect_region(&pair, region.addr, &first, "applied before the crash");
    pair.server.store(Space::Pm, region.addr + 256, &[9; 8]);
    pair.sim.crash_now(pair.server.id());
    let (_, report) = pair.recover_server().unwrap();
    assert_eq!(report.found, 0, "{report:?}");
    assert_eq!(report.max_seq, hello.seq_base + n - 1, "{report:?}");
    let mut want = first.clone();
    want.push((256, vec![9; 8]));
    expect_region(&pair, region.addr, &want, "after recovery");
}

#[test]
fn a_second_crash_after_recovery_keeps_the_newest_values() {
    let pair = SimPair::new(
        5,
        slow_responder(),
        cfg("MHP+DDIO+PM-RQWRB"),
        ServerSetup::default(),
    );
    let (client, region) = pair.open().unwrap();
    let (client, _) = connect_send(&pair, client);
    let first = first_updates();
    persist_then_crash(&pair, client, first.clone(), true);
    let (responder, report1) = pair.recover_server().unwrap();
    assert_eq!(report1.found, first.len() as u64);
    assert_eq!(
        (responder.region().addr, responder.region().len),
        (region.addr, region.len),
        "recovered at another address"
    );
    // Serve the recovered responder to a new client (what SimPair::open does for a new
    // responder).
    let mut responder = responder;
    let client = Client::create(pair.client.clone()).unwrap();
    pair.sim
        .connect((&pair.client, client.qp()), (&pair.server, responder.qp()))
        .unwrap();
    pair.sim.spawn_on(&pair.server, async move {
        responder.serve().await;
    });
    let (client, hello) = connect_send(&pair, client);
    assert!(
        hello.seq_base > report1.max_seq,
        "seq_base {} does not exceed the recovered {}",
        hello.seq_base,
        report1.max_seq
    );
    let second = second_updates();
    persist_then_crash(&pair, client, second.clone(), true);
    let (_, report2) = pair.recover_server().unwrap();
    assert_eq!(
        report2.found,
        second.len() as u64,
        "old frames replayed again: {report2:?}"
    );
    assert_eq!(report2.max_seq, hello.seq_base + second.len() as u64 - 1);
    let all: Vec<_> = first.into_iter().chain(second).collect();
    expect_region(&pair, region.addr, &all, "after the second recovery");
}

#[test]
fn a_second_crash_after_recovery_and_serving_the_recovered_responder_keeps_the_newest_values() {
    let pair = SimPair::new(
        5,
        profile(),
        cfg("MHP+DDIO+PM-RQWRB"),
        ServerSetup::default(),
    );
    let (client, region) = pair.open().unwrap();
    let (client, _) = connect_send(&pair, client);
    let first = first_updates();
    persist_then_crash(&pair, client, first.clone(), false);
    pair.sim.crash_now(pair.server.id());
    let (recovered, report1) = pair.recover_server().unwrap();
    expect_region(&pair, region.addr, &first, "after the first recovery");
    // Let time pass too (the restart-at-the-crash-instant case has its own test).
    pass_time(&pair);
    // A new client, served by the recovered responder through the harness.
    let (client, region2) = pair.serve(recovered).unwrap();
    let (client, hello) = connect_send(&pair, client);
    assert_eq!(
        (region2.addr, hello.region_addr),
        (region.addr, region.addr),
        "the restarted server serves another region"
    );
    assert!(
        hello.seq_base > report1.max_seq,
        "seq_base {} does not exceed the recovered {}",
        hello.seq_base,
        report1.max_seq
    );
    let second = second_updates();
    persist_then_crash(&pair, client, second.clone(), false);
    pair.sim.crash_now(pair.server.id());
    pair.recover_server().unwrap();
    let all: Vec<_> = first.into_iter().chain(second).collect();
    expect_region(&pair, region.addr, &all, "after the second recovery");
}

/// Lets 1 µs of virtual time pass.
fn pass_time(pair: &SimPair) {
    let node = pair.client.clone();
    drive(&pair.sim, async move {
        node.sleep(remora_model::time::Duration::from_micros(1))
            .await;
    });
}

#[test]
fn a_server_restarted_at_the_instant_of_its_crash_can_send() {
    for wait in [true, false] {
        let pair = SimPair::new(5, profile(), cfg("MHP+DDIO+DRAM-RQWRB"), SMALL);
        let (client, _) = pair.open().unwrap();
        connect_send_any(&pair, client);
        pair.sim.crash_now(pair.server.id());
        pair.sim.restart(pair.server.id());
        if wait {
            // Control: the same restart 1 µs later works.
            pass_time(&pair);
        }
        let (mut client, _) = pair.open().unwrap();
        let hello = pair.sim.block_on(Instant::NEVER, async move {
            client.connect(Primitive::Write, Shape::default()).await
        });
        assert!(
            matches!(hello, Some(Ok(_))),
            "restarted {}: the Hello never arrived ({hello:?})",
            if wait { "1 µs later" } else { "at once" }
        );
    }
}

// ----------------------------------------------------------------------------- handshake

/// A server QP built by hand that sends `bytes` as its first message to a library client;
/// returns what `Client::connect` made of it.
fn handshake_with(bytes: Vec<u8>) -> (Result<Hello, PersistError>, Client<NodeHandle>) {
    handshake_announced(bytes, None)
}

/// [`handshake_with`] by a client that was told the server's configuration when the
/// connection was made (`Client::expect_config`), as a real backend's client is.
fn handshake_announced(
    bytes: Vec<u8>,
    announced: Option<ServerConfig>,
) -> (Result<Hello, PersistError>, Client<NodeHandle>) {
    let config = cfg("MHP+noDDIO+PM-RQWRB");
    let sim = Sim::new(2, profile());
    let server = sim.add_node("server", config);
    let node = sim.add_node("client", config);
    let pd = server.alloc_pd().unwrap();
    let cq = server.create_cq(16).unwrap();
    let sqp = server.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    let mut client = Client::create(node.clone()).unwrap();
    if let Some(c) = announced {
        client.expect_config(c);
    }
    sim.connect((&node, client.qp()), (&server, sqp)).unwrap();
    let s = server.clone();
    sim.spawn_on(&server, async move {
        s.post_send(
            sqp,
            SendWr::new(0, Opcode::Send, Payload::inline(bytes), None),
        )
        .unwrap();
        assert_eq!(next_completion(&s, cq).await.status, WcStatus::Success);
    });
    drive(&sim, async move {
        let mut client = client;
        let r = client.connect(Primitive::Write, Shape::default()).await;
        (r, client)
    })
}

fn a_hello() -> Hello {
    Hello {
        config: cfg("MHP+noDDIO+PM-RQWRB"),
        region_addr: 1 << 44,
        region_len: 4096,
        region_rkey: 1,
        rq_slots: 64,
        rq_slot_bytes: 256,
        seq_base: 1,
        ring_addr: 0,
        ring_rkey: None,
    }
}

#[test]
fn a_hello_of_another_wire_version_is_refused() {
    let mut b = Frame::Hello(a_hello()).emit();
    b[4] = remora::wire::VERSION + 1;
    b[20..24].fill(0);
    let crc = crc32c::crc32c(&b);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
    let (r, client) = handshake_with(b);
    assert_eq!(
        r,
        Err(PersistError::BadFrame(FrameError::BadVersion(
            remora::wire::VERSION + 1
        )))
    );
    assert!(client.hello().is_none() && client.method(Update::Singleton).is_none());

    // Control: the same frame with the right version is accepted.
    let (r, client) = handshake_with(Frame::Hello(a_hello()).emit());
    assert_eq!(r, Ok(a_hello()));
    assert_eq!(
        client.method(Update::Singleton).unwrap().name,
        "write-flush"
    );
}

/// The connection manager of a real backend announces the server's configuration before
/// the Hello; a Hello that names another is refused, since the methods correct for one are
/// not for the other (a server announcing DMP whose Hello said WSP had the client run
/// WSP's methods, which are not durable under DMP).
#[test]
fn a_hello_that_contradicts_the_announced_configuration_is_refused() {
    let announced = cfg("DMP+noDDIO+PM-RQWRB");
    let (r, client) = handshake_announced(Frame::Hello(a_hello()).emit(), Some(announced));
    assert_eq!(
        r,
        Err(PersistError::ConfigMismatch {
            announced,
            hello: a_hello().config
        })
    );
    assert!(client.hello().is_none() && client.method(Update::Singleton).is_none());
    // Control: the configuration the Hello names.
    let (r, _) = handshake_announced(Frame::Hello(a_hello()).emit(), Some(a_hello().config));
    assert_eq!(r, Ok(a_hello()));
}

/// A region whose end lies past the address space, or a first sequence number with no
/// room to count up from, is refused before the client computes with it.
#[test]
fn a_hello_with_a_wrapping_region_or_sequence_is_refused() {
    let bad = [
        Hello {
            region_addr: u64::MAX - 100,
            ..a_hello()
        },
        Hello {
            seq_base: 0,
            ..a_hello()
        },
        Hello {
            seq_base: u64::MAX,
            ..a_hello()
        },
    ];
    for h in bad {
        let (r, client) = handshake_with(Frame::Hello(h).emit());
        assert!(
            matches!(r, Err(PersistError::BadFrame(FrameError::BadValue(_)))),
            "{h:?}: {r:?}"
        );
        assert!(client.hello().is_none());
    }
}

#[test]
fn a_first_frame_that_is_not_a_hello_is_refused() {
    let (r, client) = handshake_with(Frame::Ack { seq: 1 }.emit());
    assert_eq!(r, Err(PersistError::Protocol("expected Hello")));
    assert!(client.hello().is_none());
}

// ------------------------------------------------------------------------------ footprint

/// `ServerSetup::footprint` is exactly what `Responder::create` allocates, for both ring
/// placements and sizes that are and are not multiples of the alignments (a server that
/// reserves one footprint per connection must never see a responder allocate past it).
#[test]
fn a_responders_footprint_is_what_it_allocates() {
    for config in ["DMP+noDDIO+PM-RQWRB", "DMP+DDIO+DRAM-RQWRB"] {
        for (region_len, rq_slots, rq_slot_bytes) in [(1 << 20, 64, 256), (5000, 3, 100)] {
            let setup = ServerSetup {
                region_len,
                rq_slots,
                rq_slot_bytes,
            };
            let sim = Sim::new(1, profile());
            let node = sim.add_node("server", cfg(config));
            // A zero-length allocation reads the cursor (aligned as the responder's first).
            let pm0 = node.alloc(Space::Pm, 0, 4096);
            let dram0 = node.alloc(Space::Dram, 0, 4096);
            let costs = CpuCosts::from_profile(&profile());
            let r = Responder::create(node.clone(), setup, costs).unwrap();
            assert_eq!(r.region().addr, pm0, "the region starts the footprint");
            let used = Footprint {
                pm: node.alloc(Space::Pm, 0, 1) - pm0,
                dram: node.alloc(Space::Dram, 0, 1) - dram0,
            };
            assert_eq!(
                setup.footprint(cfg(config).rqwrb),
                used,
                "{config} {setup:?}"
            );
        }
    }
}

/// A responder whose setup fails half-way (here its receive CQ is deeper than the RNIC
/// allows, after its protection domain and both regions were made) leaves nothing on the
/// RNIC, and one that closes frees everything it made.
#[test]
fn a_responder_that_fails_to_set_up_or_closes_leaves_nothing_behind() {
    let sim = Sim::new(1, profile());
    let node = sim.add_node("server", cfg("DMP+noDDIO+PM-RQWRB"));
    let live = || sim.with_rnic(node.id(), |r, _| r.live_objects());
    let costs = CpuCosts::from_profile(&profile());
    let too_deep = ServerSetup {
        region_len: 4096,
        rq_slots: remora_model::rnic::MAX_QUEUE_DEPTH as u32,
        rq_slot_bytes: 64,
    };
    let e = Responder::create(node.clone(), too_deep, costs).err();
    assert_eq!(e, Some(VerbsError::Invalid("completion queue depth")));
    assert_eq!(
        live(),
        Default::default(),
        "nothing of the failed setup is left"
    );
    let r = Responder::create(node.clone(), ServerSetup::default(), costs).unwrap();
    let one = live();
    assert_eq!((one.qps, one.cqs, one.mrs, one.pds), (1, 2, 2, 1));
    r.close().unwrap();
    assert_eq!(live(), Default::default());
}

/// A two-sided method whose server is gone: the client's SEND is never acknowledged, the
/// connection fails, and the error names why (the transport's retries ran out), not the
/// flushed receive the client was waiting on. The cause is found among the send CQ's
/// completions, which stay for whoever waits for them: a FLUSH that completed before the
/// connection failed still proves its writes persistent (a review found the first
/// version dropping it, and `wait_flush` then reported the FLUSH failed, or waited for
/// ever).
#[test]
fn a_failed_connection_is_reported_by_its_cause_and_keeps_earlier_completions() {
    let pair = SimPair::new(4, profile(), cfg("DMP+DDIO+DRAM-RQWRB"), SMALL);
    let (client, _) = pair.open().unwrap();
    let (sim, server, node) = (pair.sim.clone(), pair.server.id(), pair.client.clone());
    let (failed, flushed) = drive(&pair.sim, async move {
        let mut client = client;
        client
            .connect(Primitive::Write, Shape::default())
            .await
            .unwrap();
        assert_eq!(client.method(Update::Singleton).unwrap().name, "write-msg");
        client.persist(0, &[1; 8]).await.unwrap();
        let ticket = client.post_flush_writes().unwrap();
        node.compute(Duration::from_millis(1)).await;
        sim.crash_now(server);
        let failed = client.persist(0, &[2; 8]).await;
        (failed, client.wait_flush(ticket).await)
    });
    assert_eq!(
        failed,
        Err(PersistError::Completion {
            what: "a request (the connection failed)",
            status: WcStatus::RetryExcErr
        })
    );
    assert_eq!(flushed, Ok(()));
}
