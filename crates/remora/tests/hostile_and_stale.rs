//! What one connection's own mistakes, or another client's, must not do to updates the
//! library reported durable: a later WRITE rolled back by an older SEND, a slot's sequence
//! numbers pushed out of range, an empty update that breaks the connection; and recovery
//! crashed in the middle. (Found by an adversarial review; each of the first three failed
//! before its fix.)

use remora::client::Client;
use remora::harness::SimPair;
use remora::responder::ServerSetup;
use remora::taxonomy::{Primitive, Shape, Update};
use remora_model::profile::LatencyProfile;
use remora_sim::NodeHandle;

mod common;
use common::{cfg, drive, slow_responder, RawQp};

/// persist() with a one-sided SEND method (send-flush: the message is durable in the PM
/// ring, applied later), then a WRITE of the same bytes with write_nowait + flush_writes,
/// which the client allows and reports durable. The older SEND is applied after it (in the
/// background, or by recovery after a crash) and rolls the newer, durable value back.
#[test]
fn a_write_is_refused_where_an_older_send_could_roll_it_back() {
    for crash in [true, false] {
        let pair = SimPair::new(
            3,
            slow_responder(),
            cfg("MHP+DDIO+PM-RQWRB"),
            ServerSetup::default(),
        );
        let (mut client, region) = pair.open().unwrap();
        let (sim, server) = (pair.sim.clone(), pair.server.id());
        let r = drive(&pair.sim, async move {
            client
                .connect(Primitive::Send, Shape::default())
                .await
                .unwrap();
            assert_eq!(client.method(Update::Singleton).unwrap().name, "send-flush");
            client.persist(0, &[1; 64]).await.unwrap(); // reported durable
                                                        // Refusing the WRITE is a correct answer; accepting it and reporting it
                                                        // durable is a promise that the newest value is 2s.
            if let Err(e @ remora::PersistError::Unsuitable { .. }) =
                client.write_nowait(0, &[2; 64])
            {
                return Err(e);
            }
            client.flush_writes().await.unwrap(); // reported durable
            if crash {
                sim.crash_now(server);
            }
            Ok::<Client<NodeHandle>, remora::PersistError>(client)
        });
        if let Err(e) = r {
            eprintln!("refused: {e}");
            continue;
        }
        if crash {
            pair.recover_server().unwrap();
        } else {
            pair.sim.run();
        }
        assert_eq!(
            pair.server_read(region.addr, 64),
            vec![2u8; 64],
            "crash={crash}: the newer durable WRITE was overwritten by the older SEND"
        );
    }
}

/// serve() refuses an Apply with seq >= MAX_SEQ_BASE, but accepts and records
/// MAX_SEQ_BASE - 1. The slot's next Hello then says seq_base = MAX_SEQ_BASE (which
/// Hello::parse accepts), and the next, honest client's every Apply (seq >= MAX_SEQ_BASE)
/// is dropped as a bad frame, by serve and by recovery, while send-flush reports it durable.
#[test]
fn one_bad_client_cannot_make_a_later_clients_durable_sends_vanish() {
    use remora::responder::{CpuCosts, Responder};
    use remora::wire::{Frame, MAX_SEQ_BASE};
    let p = LatencyProfile::default_profile();
    let pair = SimPair::new(
        3,
        p.clone(),
        cfg("MHP+DDIO+PM-RQWRB"),
        ServerSetup::default(),
    );
    let mut responder =
        Responder::create(pair.server.clone(), pair.setup, CpuCosts::from_profile(&p)).unwrap();
    let region = responder.region();
    let bad = RawQp::new(&pair.client);
    pair.sim
        .connect((&pair.client, bad.qp), (&pair.server, responder.qp()))
        .unwrap();
    pair.sim.spawn_on(&pair.server, async move {
        responder.serve().await;
    });
    drive(&pair.sim, async move {
        let _hello = bad.recv().await;
        let f = Frame::Apply {
            seq: MAX_SEQ_BASE - 1,
            ack: true,
            entries: vec![(0, vec![9; 8])],
        };
        bad.send(1, f.emit());
        bad
    });
    pair.sim.run(); // the responder acknowledges (and records) seq MAX_SEQ_BASE - 1
                    // The server restarts (its PM, ring and watermark stay) and serves an honest client.
    pair.sim.crash_now(pair.server.id());
    let (recovered, _) = pair.recover_server().unwrap();
    let (mut client, _) = pair.serve(recovered).unwrap();
    let hello = drive(&pair.sim, async move {
        let hello = client
            .connect(Primitive::Send, Shape::default())
            .await
            .unwrap();
        assert_eq!(client.method(Update::Singleton).unwrap().name, "send-flush");
        client.persist(64, &[7; 64]).await.unwrap(); // reported durable
        hello
    });
    eprintln!(
        "the honest client's seq_base: {} (MAX_SEQ_BASE {MAX_SEQ_BASE})",
        hello.seq_base
    );
    pair.sim.run();
    assert_eq!(
        pair.server_read(region.addr + 64, 64),
        vec![7u8; 64],
        "an update reported durable was never applied (served)"
    );
}

/// Crash during recovery, at every 20 ns of it, then recover again: the region must hold
/// the newest value at each offset (DMP without DDIO, PM ring: send-flush).
#[test]
fn a_crash_during_recovery_then_recovery_again_keeps_the_newest_values() {
    use remora::responder::{CpuCosts, Responder};
    use remora_model::time::Duration;
    use remora_sim::{CrashAt, FaultPlan};
    let updates: Vec<(u64, Vec<u8>)> = vec![
        (0, vec![1; 64]),
        (64, vec![2; 64]),
        (128, vec![3; 100]),
        (0, vec![4; 64]),
        (256, vec![5; 8]),
        (64, vec![6; 64]),
    ];
    let mut want = vec![0u8; 512];
    for (off, d) in &updates {
        want[*off as usize..*off as usize + d.len()].copy_from_slice(d);
    }
    for config in [
        "DMP+noDDIO+PM-RQWRB",
        "MHP+DDIO+PM-RQWRB",
        "MHP+noDDIO+PM-RQWRB",
    ] {
        let mut dur = None;
        let mut k = 0u64;
        let mut crashes = 0;
        loop {
            let p = slow_responder();
            let pair = SimPair::new(3, p.clone(), cfg(config), ServerSetup::default());
            let (mut client, region) = pair.open().unwrap();
            let (sim, server) = (pair.sim.clone(), pair.server.id());
            let u = updates.clone();
            drive(&pair.sim, async move {
                client
                    .connect(Primitive::Send, Shape::default())
                    .await
                    .unwrap();
                for (off, d) in &u {
                    client.persist(*off, d).await.unwrap();
                }
                sim.crash_now(server);
            });
            pair.sim.restart(pair.server.id());
            let mut r =
                Responder::create(pair.server.clone(), pair.setup, CpuCosts::from_profile(&p))
                    .unwrap();
            let t0 = pair.sim.now();
            if let Some(d) = dur {
                if k * 20 > d {
                    break;
                }
                pair.sim.set_faults(&FaultPlan::crash(
                    pair.server.id(),
                    CrashAt::Time(t0 + Duration::from_nanos(k * 20)),
                ));
            }
            let done = std::rc::Rc::new(std::cell::Cell::new(None));
            let d2 = done.clone();
            let node = pair.server.clone();
            pair.sim.spawn_on(&pair.server, async move {
                r.recover().await;
                d2.set(Some(remora_verbs::Verbs::now(&node)));
            });
            pair.sim.run();
            if dur.is_none() {
                dur = Some((done.get().expect("recovery finished") - t0).as_nanos());
                continue;
            }
            k += 1;
            if done.get().is_none() {
                crashes += 1;
                pair.recover_server().unwrap();
            }
            assert_eq!(
                pair.server_read(region.addr, 512),
                want,
                "{config}: crash {k}x20 ns into recovery (of {dur:?} ns), then recovery"
            );
        }
        eprintln!("{config}: {crashes} crashes during recovery checked");
        assert!(crashes > 0);
    }
}

/// An empty update at the region's end passes the client's range check (offset + 0 <=
/// region_len), but write-flush then FLUSHes one byte *past* the region (RqFlush's
/// "a byte of the update's first item" when nothing was written).
#[test]
fn an_empty_update_at_the_regions_end_does_not_break_the_connection() {
    let setup = ServerSetup {
        region_len: 4096,
        ..ServerSetup::default()
    };
    let pair = SimPair::new(
        3,
        LatencyProfile::default_profile(),
        cfg("MHP+DDIO+DRAM-RQWRB"),
        setup,
    );
    let (mut client, _) = pair.open().unwrap();
    let (first, second) = drive(&pair.sim, async move {
        client
            .connect(Primitive::Write, Shape::default())
            .await
            .unwrap();
        assert_eq!(
            client.method(Update::Singleton).unwrap().name,
            "write-flush"
        );
        let first = client.persist(4096, &[]).await;
        let second = client.persist(0, &[1; 8]).await;
        (first, second)
    });
    assert!(
        first.is_ok() || matches!(first, Err(remora::PersistError::OutOfRange { .. })),
        "empty update at the end: {first:?}"
    );
    assert!(second.is_ok(), "the next, valid update failed: {second:?}");
}

/// send-flush with fewer receive slots than updates in flight at a slow responder: the
/// SENDs meet an empty receive queue (RNR). Every update reported durable must survive a
/// crash right after the last one.
#[test]
fn send_flush_with_a_full_receive_ring_keeps_every_durable_update() {
    for config in [
        "MHP+DDIO+PM-RQWRB",
        "DMP+noDDIO+PM-RQWRB",
        "WSP+noDDIO+PM-RQWRB",
    ] {
        let setup = ServerSetup {
            rq_slots: 2,
            ..ServerSetup::default()
        };
        let pair = SimPair::new(3, slow_responder(), cfg(config), setup);
        let (mut client, region) = pair.open().unwrap();
        let (sim, server) = (pair.sim.clone(), pair.server.id());
        let n = drive(&pair.sim, async move {
            client
                .connect(Primitive::Send, Shape::default())
                .await
                .unwrap();
            let mut n = 0u8;
            for i in 0..6u8 {
                match client.persist(i as u64 * 64, &[i + 1; 64]).await {
                    Ok(()) => n += 1,
                    Err(e) => {
                        eprintln!("{i}: {e}");
                        break;
                    }
                }
            }
            sim.crash_now(server);
            n
        });
        pair.recover_server().unwrap();
        for i in 0..n {
            assert_eq!(
                pair.server_read(region.addr + i as u64 * 64, 64),
                vec![i + 1; 64],
                "{config}: update {i} of {n} reported durable, lost"
            );
        }
        eprintln!("{config}: {n} durable updates checked");
    }
}
