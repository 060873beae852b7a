//! The eight baselines of seed 003 Figure 2 on the simulator: correct results, persistence
//! before the reply, FaSST's MTU, determinism, and the workload generators.

use remora_model::time::Instant;
use remora_rpc::baselines::{transport_substituted, BASELINES};
use remora_rpc::harness::{dmp, BaselineDeployment, Deployment, SimEnv, SimSetup};
use remora_rpc::workload::{check_value, value_for};
use remora_rpc::{Design, Op, RpcClient, RpcError};

fn env(design: Design, seed: u64, objects: u64, max_value: u64) -> (SimEnv, BaselineDeployment) {
    let setup = SimSetup::new(seed, objects, max_value);
    let env = SimEnv::new(setup);
    let dep = BaselineDeployment::new(design, &env.setup);
    (env, dep)
}

#[test]
fn every_baseline_reads_what_it_wrote() {
    for design in BASELINES {
        let (env, dep) = env(design, 1, 16, 1024);
        env.preload(0..16, 64);
        let mut clients = dep.deploy(&env).unwrap();
        let mut c = clients.pop().unwrap();
        let out = env.sim.block_on(Instant::NEVER, async move {
            let mut log = Vec::new();
            for round in 1..=3u64 {
                for key in [3u64, 7, 11] {
                    let value = value_for(key, round, 100 + key * 10);
                    let done = c.call(Op::Put { key, value }).await.unwrap();
                    assert!(done.durable_at.is_some());
                    let got = c.call(Op::Get { key }).await.unwrap();
                    log.push((key, round, got.reply.unwrap().value));
                }
            }
            let untouched = c.call(Op::Get { key: 5 }).await.unwrap();
            (log, untouched.reply.unwrap().value)
        });
        let (log, untouched) = out.unwrap_or_else(|| panic!("{design}: the run stalled"));
        for (key, round, got) in log {
            assert_eq!(
                check_value(key, 100 + key * 10, &got),
                Ok(round),
                "{design}"
            );
        }
        assert_eq!(check_value(5, 64, &untouched), Ok(0), "{design}");
        let stats = dep.server_stats().unwrap();
        assert_eq!(stats.requests, 19, "{design}: {stats:?}");
        assert_eq!(transport_substituted(design), None, "{design}: real UC/UD");
    }
}

/// A Put on `design` on a DMP server with `ddio`, then a power failure of the server: right
/// after the Put's reply (`crash_after = None`) or `Some(d)` after issuing it.
fn put_then_power_fail(
    design: Design,
    ddio: bool,
    heavy: bool,
    crash_after: Option<u64>,
) -> Option<Vec<u8>> {
    let mut setup = SimSetup::new(11, 8, 4096);
    setup.server_config = dmp(ddio);
    if heavy {
        setup.costs.processing = remora_model::time::Duration::from_micros(100);
    }
    let env = SimEnv::new(setup);
    let dep = BaselineDeployment::new(design, &env.setup);
    env.preload(0..8, 1024);
    let mut c = dep.deploy(&env).unwrap().pop().unwrap();
    let limit = match crash_after {
        Some(ns) => Instant::from_nanos(env.sim.now().as_nanos() + ns),
        None => Instant::NEVER,
    };
    let replied = env.sim.block_on(limit, async move {
        c.call(Op::Put {
            key: 3,
            value: value_for(3, 9, 1024),
        })
        .await
        .unwrap()
    });
    assert_eq!(replied.is_some(), crash_after.is_none(), "{design}");
    env.sim.crash_now(env.server.id());
    env.sim.restart(env.server.id());
    env.server_object(3)
}

#[test]
fn every_baseline_persists_a_put_before_replying() {
    for design in BASELINES {
        for ddio in [false, true] {
            let got = put_then_power_fail(design, ddio, false, None)
                .unwrap_or_else(|| panic!("{design} ddio={ddio}: object lost"));
            assert_eq!(check_value(3, 1024, &got), Ok(9), "{design} ddio={ddio}");
        }
    }
}

#[test]
fn a_crash_before_the_reply_can_lose_the_put() {
    // Negative control for the test above: under heavy load the server is still
    // processing 50 µs after the request left, so the Put is not yet in PM and the crash
    // check sees the old object.
    for design in [Design::DaRpc, Design::Farm, Design::Rfp] {
        let got = put_then_power_fail(design, true, true, Some(50_000)).unwrap();
        assert_eq!(check_value(3, 1024, &got), Ok(0), "{design}");
    }
}

#[test]
fn an_unpersisted_store_does_not_survive_the_crash() {
    // The crash check itself can fail: a CPU store to an object, never flushed, is lost
    // under DMP with and without DDIO.
    use remora_verbs::{Space, Verbs};
    for ddio in [false, true] {
        let mut setup = SimSetup::new(5, 4, 256);
        setup.server_config = dmp(ddio);
        let env = SimEnv::new(setup);
        env.preload(0..4, 64);
        let slot = env.layout.slot(2).unwrap();
        env.server.store(Space::Pm, slot + 64, &[0xee; 64]);
        assert_ne!(
            check_value(2, 64, &env.server_object(2).unwrap_or_default()),
            Ok(0)
        );
        env.sim.crash_now(env.server.id());
        env.sim.restart(env.server.id());
        assert_eq!(check_value(2, 64, &env.server_object(2).unwrap()), Ok(0));
    }
}

#[test]
fn a_corrupt_request_gets_a_clear_error_and_the_server_keeps_serving() {
    for design in BASELINES {
        let (env, dep) = env(design, 2, 8, 256);
        env.preload(0..8, 64);
        let mut c = dep.deploy(&env).unwrap().pop().unwrap();
        let out = env.sim.block_on(Instant::NEVER, async move {
            c.call(Op::Get { key: 1 }).await.unwrap();
            c.corrupt_next_request();
            let bad = c
                .call(Op::Put {
                    key: 1,
                    value: value_for(1, 5, 64),
                })
                .await;
            let after = c.call(Op::Get { key: 1 }).await.unwrap();
            (bad, after.reply.unwrap().value)
        });
        let (bad, after) = out.unwrap();
        match bad {
            Err(RpcError::Malformed(m)) => assert!(m.contains("checksum"), "{design}: {m}"),
            other => panic!("{design}: corrupt request gave {other:?}"),
        }
        assert_eq!(
            check_value(1, 64, &after),
            Ok(0),
            "{design}: the corrupt Put applied"
        );
        let s = dep.server_stats().unwrap();
        assert_eq!((s.rejected, s.requests), (1, 2), "{design}: {s:?}");
        assert!(s.errors[0].contains("checksum"), "{design}: {s:?}");
    }
}

#[test]
fn fasst_refuses_objects_over_the_ud_mtu() {
    // One 4096-byte datagram holds the 16-byte cell header, the 32-byte request header,
    // the value and the 8-byte trailer.
    assert_eq!(Design::Fasst.max_object(), Some(4040));
    let (env, dep) = env(Design::Fasst, 3, 8, 8192);
    env.preload(0..4, 8192);
    let mut c = dep.deploy(&env).unwrap().pop().unwrap();
    let out = env.sim.block_on(Instant::NEVER, async move {
        let big = c
            .call(Op::Put {
                key: 6,
                value: value_for(6, 1, 4041),
            })
            .await;
        let fits = c
            .call(Op::Put {
                key: 6,
                value: value_for(6, 2, 4040),
            })
            .await;
        // An 8 KB object already in the store cannot travel back in one UD message.
        let big_read = c.call(Op::Get { key: 1 }).await;
        let small_read = c.call(Op::Get { key: 6 }).await;
        (big, fits, big_read, small_read)
    });
    let (big, fits, big_read, small_read) = out.unwrap();
    assert!(
        matches!(&big, Err(RpcError::Unsupported { design: "FaSST", what }) if what.contains("4041")),
        "{big:?}"
    );
    assert!(fits.is_ok(), "{fits:?}");
    assert!(
        matches!(&big_read, Err(RpcError::Unsupported { what, .. }) if what.contains("UD MTU")),
        "{big_read:?}"
    );
    assert_eq!(
        check_value(6, 4040, &small_read.unwrap().reply.unwrap().value),
        Ok(2)
    );
    // The benchmark skips FaSST where the paper does.
    use remora_rpc::bench::unsupported;
    use remora_rpc::workload::{MicroSpec, Workload};
    let w = |object_bytes| {
        Workload::Micro(MicroSpec {
            object_bytes,
            ..MicroSpec::default()
        })
    };
    assert!(unsupported(Design::Fasst, &w(65536), 1).is_some());
    assert!(unsupported(Design::Fasst, &w(1024), 1).is_none());
    assert!(unsupported(Design::Fasst, &w(1024), 8).is_some());
    assert!(unsupported(Design::DaRpc, &w(65536), 16).is_none());
}

#[test]
fn batches_and_scans_return_every_result_in_order() {
    for design in BASELINES {
        let mut setup = SimSetup::new(4, 32, 512);
        setup.max_batch = 4;
        setup.max_scan = 4;
        let env = SimEnv::new(setup);
        let dep = BaselineDeployment::new(design, &env.setup);
        env.preload(0..32, 64);
        let mut c = dep.deploy(&env).unwrap().pop().unwrap();
        let out = env.sim.block_on(Instant::NEVER, async move {
            let done = c
                .call_batch(vec![
                    Op::Put {
                        key: 9,
                        value: value_for(9, 3, 64),
                    },
                    Op::Get { key: 9 },
                    Op::Get { key: 10 },
                ])
                .await
                .unwrap();
            let scan = if design == Design::Fasst {
                None
            } else {
                Some(c.call(Op::Scan { key: 8, count: 4 }).await.unwrap())
            };
            (done, scan)
        });
        let (done, scan) = out.unwrap();
        assert_eq!(done.len(), 3, "{design}");
        let v = |i: usize| done[i].reply.clone().unwrap().value;
        assert!(done[0].durable_at.is_some() && done[1].durable_at.is_none());
        assert_eq!(check_value(9, 64, &v(1)), Ok(3), "{design}");
        assert_eq!(check_value(10, 64, &v(2)), Ok(0), "{design}");
        if let Some(scan) = scan {
            let bytes = scan.reply.unwrap().value;
            let versions: Vec<_> = bytes
                .chunks(64)
                .enumerate()
                .map(|(i, ch)| check_value(8 + i as u64, 64, ch).unwrap())
                .collect();
            assert_eq!(versions, [0, 3, 0, 0], "{design}");
        }
    }
}

fn small_spec(design: Design, seed: u64, senders: u32) -> remora_rpc::bench::RunSpec {
    use remora_rpc::bench::{Load, RunSpec};
    use remora_rpc::workload::{MicroSpec, Workload};
    RunSpec {
        experiment: "test",
        design,
        workload: Workload::Micro(MicroSpec {
            objects: 64,
            operations: 30,
            object_bytes: 512,
            ..MicroSpec::default()
        }),
        senders,
        batch: 1,
        load: Load::Light,
        heavy_processing: remora_rpc::bench::HEAVY_PROCESSING,
        server_threads: 1,
        flush: remora_rpc::design::FlushForm::Emulated,
        server_config: dmp(false),
        seed,
        profile: remora_model::profile::LatencyProfile::default_profile(),
        conditions: Default::default(),
        breakdown: false,
    }
}

#[test]
fn same_seed_same_results() {
    use remora_rpc::bench::run;
    for design in BASELINES {
        for senders in [1, 3] {
            let a = run(&small_spec(design, 21, senders), None).unwrap();
            let b = run(&small_spec(design, 21, senders), None).unwrap();
            assert_eq!(a, b, "{design}");
            assert!(a.skipped.is_none() && a.ops == 30 * senders as u64, "{a:?}");
            assert!(a.reads_checked > 0, "{design}: no read was checked");
            let c = run(&small_spec(design, 22, senders), None).unwrap();
            assert_ne!(
                a.fingerprint, c.fingerprint,
                "{design}: the seed changed nothing"
            );
        }
    }
}

#[test]
fn durable_designs_run_through_the_same_driver() {
    let r = remora_rpc::bench::run(&small_spec(Design::WFlushRpc, 1, 1), None).unwrap();
    assert!(
        r.skipped.is_none() && r.ops == 30 && r.reads_checked > 0,
        "{r:?}"
    );
}

mod generators {
    use remora_rpc::workload::{
        KeyDist, MicroSpec, OpKind, Workload, YcsbKind, YcsbSpec, ZIPF_THETA,
    };
    use std::collections::BTreeMap;

    fn ycsb(kind: YcsbKind, operations: u64) -> Workload {
        Workload::Ycsb(YcsbSpec {
            operations,
            ..YcsbSpec::paper(kind)
        })
    }

    #[test]
    fn the_paper_sizes_are_the_defaults() {
        let m = MicroSpec::default();
        assert_eq!(
            (m.objects, m.operations, m.read_percent, m.object_bytes),
            (50_000, 300_000, 50, 65_536)
        );
        assert_eq!(m.dist, KeyDist::Zipfian(0.99));
        let y = YcsbSpec::paper(YcsbKind::A);
        assert_eq!(
            (y.records, y.operations, y.value_bytes, y.theta),
            (50_000, 300_000, 4096, ZIPF_THETA)
        );
    }

    #[test]
    fn streams_are_deterministic_per_seed() {
        for w in [
            Workload::Micro(MicroSpec::default()),
            ycsb(YcsbKind::E, 1000),
        ] {
            let a: Vec<_> = w.generator(5).take(1000).collect();
            let b: Vec<_> = w.generator(5).take(1000).collect();
            let c: Vec<_> = w.generator(6).take(1000).collect();
            assert_eq!(a, b);
            assert_ne!(a, c);
        }
    }

    #[test]
    fn micro_ratios_and_skew() {
        for reads in [95u32, 50, 5] {
            let w = Workload::Micro(MicroSpec {
                read_percent: reads,
                operations: 20_000,
                ..MicroSpec::default()
            });
            let ops: Vec<_> = w.generator(1).collect();
            assert_eq!(ops.len(), 20_000);
            let r = ops.iter().filter(|o| o.kind == OpKind::Read).count() as f64 / 20_000.0;
            assert!((r - reads as f64 / 100.0).abs() < 0.02, "{reads}: {r}");
            assert!(ops.iter().all(|o| o.key < 50_000));
            let mut freq: BTreeMap<u64, u64> = BTreeMap::new();
            for o in &ops {
                *freq.entry(o.key).or_default() += 1;
            }
            // Zipf 0.99 over 50K: the hottest object draws ~8.8% of the requests and is
            // scrambled away from key 0.
            let (&hot, &n) = freq.iter().max_by_key(|(_, &n)| n).unwrap();
            assert!(n as f64 / 20_000.0 > 0.06, "hottest key {hot}: {n}");
            assert_ne!(hot, 0);
        }
    }

    #[test]
    fn ycsb_mixes() {
        let n = 20_000u64;
        let count = |w: &Workload, f: &dyn Fn(OpKind) -> bool| {
            w.generator(3).filter(|o| f(o.kind)).count() as f64 / n as f64
        };
        let a = ycsb(YcsbKind::A, n);
        assert!((count(&a, &|k| k == OpKind::Update) - 0.5).abs() < 0.02);
        let b = ycsb(YcsbKind::B, n);
        assert!((count(&b, &|k| k == OpKind::Update) - 0.05).abs() < 0.01);
        let c = ycsb(YcsbKind::C, n);
        assert_eq!(count(&c, &|k| k == OpKind::Read), 1.0);
        let f = ycsb(YcsbKind::F, n);
        assert!((count(&f, &|k| k == OpKind::ReadModifyWrite) - 0.5).abs() < 0.02);
        let e = ycsb(YcsbKind::E, n);
        assert!((count(&e, &|k| matches!(k, OpKind::Scan { .. })) - 0.95).abs() < 0.01);
        assert!(e.generator(3).all(|o| match o.kind {
            OpKind::Scan { count } => (1..=100).contains(&count),
            OpKind::Insert => o.key >= 50_000,
            _ => false,
        }));
    }

    #[test]
    fn d_inserts_fresh_keys_and_reads_the_latest() {
        let d = ycsb(YcsbKind::D, 20_000);
        let ops: Vec<_> = d.generator(9).collect();
        let inserts: Vec<u64> = ops
            .iter()
            .filter(|o| o.kind == OpKind::Insert)
            .map(|o| o.key)
            .collect();
        assert!((inserts.len() as f64 / 20_000.0 - 0.05).abs() < 0.01);
        let want: Vec<u64> = (50_000..50_000 + inserts.len() as u64).collect();
        assert_eq!(inserts, want, "inserts take the next keys in order");
        assert!(d.key_space(1) > *inserts.last().unwrap());
        // Reads cluster at the newest records: most within the last 1% of keys.
        let mut newest = 49_999u64;
        let mut recent = 0;
        let mut reads = 0;
        for o in &ops {
            match o.kind {
                OpKind::Insert => newest = o.key,
                OpKind::Read => {
                    assert!(o.key <= newest);
                    reads += 1;
                    if newest - o.key < 500 {
                        recent += 1;
                    }
                }
                _ => unreachable!(),
            }
        }
        assert!(recent as f64 / reads as f64 > 0.5, "{recent} of {reads}");
    }
}

/// Polled rings: a cell whose header has landed but whose body is still arriving must not
/// look complete, even when the bytes an earlier, longer cell left in the slot hold the
/// new cell's sequence number exactly where its trailer will go. A reply cell's trailer
/// sits at `40 + n × object` for a scan of `n` objects, which is where an older scan of
/// more objects from key `k` left the key `k + n`: cell 2 scans 10 objects from key 0 into
/// reply slot 2, cells 3–5 update objects 0–2, and cell 6 (slot 2 again, 4 slots) scans 6
/// objects, whose trailer offset holds the stale key 6. Before the fix the client took the
/// half-written reply (a checksum mismatch); it must return the new versions.
#[test]
fn a_stale_word_at_the_trailer_offset_does_not_complete_a_reply() {
    const OBJ: u64 = 4096;
    for design in [Design::Farm, Design::L5, Design::ScaleRpc] {
        let mut setup = SimSetup::new(6, 16, OBJ);
        setup.max_scan = 10;
        let env = SimEnv::new(setup);
        let dep = BaselineDeployment::new(design, &env.setup);
        env.preload(0..16, OBJ);
        let mut c = dep.deploy(&env).unwrap().pop().unwrap();
        let out = env.sim.block_on(Instant::NEVER, async move {
            c.call(Op::Get { key: 15 }).await?;
            c.call(Op::Scan { key: 0, count: 10 }).await?;
            for key in 0..3 {
                let value = value_for(key, 1, OBJ);
                c.call(Op::Put { key, value }).await?;
            }
            c.call(Op::Scan { key: 0, count: 6 }).await
        });
        let scan = out
            .expect("the run finished")
            .unwrap_or_else(|e| panic!("{design}: {e}"));
        let bytes = scan.reply.unwrap().value;
        let versions: Vec<u64> = bytes
            .chunks(OBJ as usize)
            .enumerate()
            .map(|(i, ch)| check_value(i as u64, OBJ, ch).unwrap())
            .collect();
        assert_eq!(versions, [1, 1, 1, 0, 0, 0], "{design}");
    }
}

/// The same hazard on the request rings the server polls: request cell 2 is two Puts, the
/// second one's object (key 6) starting exactly where request cell 6's trailer goes (one
/// Put of 64 KB). Before the fix the server took cell 6 when its header landed and
/// rejected it as corrupt.
#[test]
fn a_stale_word_at_the_trailer_offset_does_not_complete_a_request() {
    const OBJ: u64 = 65536;
    for design in [Design::Farm, Design::Herd, Design::Rfp, Design::ScaleRpc] {
        let mut setup = SimSetup::new(6, 16, OBJ);
        setup.max_batch = 2;
        let env = SimEnv::new(setup);
        let dep = BaselineDeployment::new(design, &env.setup);
        env.preload(0..16, 64);
        let mut c = dep.deploy(&env).unwrap().pop().unwrap();
        let out = env.sim.block_on(Instant::NEVER, async move {
            c.call(Op::Get { key: 15 }).await?;
            // Request frames have a 32-byte header: the second value starts at cell
            // offset 16 + 32 + 65504 + 32 = 65584 = 16 + 32 + 65536.
            c.call_batch(vec![
                Op::Put {
                    key: 1,
                    value: value_for(1, 1, OBJ - 32),
                },
                Op::Put {
                    key: 6,
                    value: value_for(6, 1, 64),
                },
            ])
            .await?;
            for key in 3..6 {
                c.call(Op::Get { key }).await?;
            }
            c.call(Op::Put {
                key: 2,
                value: value_for(2, 7, OBJ),
            })
            .await
        });
        out.expect("the run finished")
            .unwrap_or_else(|e| panic!("{design}: {e}"));
        let stats = dep.server_stats().unwrap();
        assert_eq!(stats.rejected, 0, "{design}: {stats:?}");
        assert_eq!(
            check_value(2, OBJ, &env.server_object(2).unwrap()),
            Ok(7),
            "{design}"
        );
    }
}
