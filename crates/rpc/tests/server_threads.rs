//! The server's worker threads (`ServerCosts::workers`) are the same for every design:
//! under heavy load (seed 003 §5.2, 100 µs of processing per request) a single-threaded
//! server caps every design at one request per processing time, a baseline sender with
//! one RPC outstanding gains nothing from more threads, several baseline senders do, and
//! the durable RPCs' gain with several threads comes from issuing the next request once
//! the previous one is durable (§4.2, §5.2).

use remora_model::profile::LatencyProfile;
use remora_rpc::bench::{run, Load, RunSpec, HEAVY_PROCESSING};
use remora_rpc::harness::dmp;
use remora_rpc::workload::{MicroSpec, Workload};
use remora_rpc::{Design, FlushForm};

fn heavy(design: Design, threads: u32, senders: u32) -> f64 {
    let spec = RunSpec {
        experiment: "test",
        design,
        workload: Workload::Micro(MicroSpec {
            objects: 64,
            operations: 200,
            object_bytes: 1024,
            read_percent: 50,
            ..MicroSpec::default()
        }),
        senders,
        batch: 1,
        load: Load::Heavy,
        heavy_processing: HEAVY_PROCESSING,
        server_threads: threads,
        flush: FlushForm::Emulated,
        server_config: dmp(false),
        seed: 9,
        profile: LatencyProfile::default_profile(),
        conditions: Default::default(),
        breakdown: false,
    };
    let r = run(&spec, None).unwrap();
    assert!(r.skipped.is_none(), "{r:?}");
    r.throughput_ops_s
}

const BOUND: f64 = 1e6 / 100.0; // one request per 100 µs

#[test]
fn one_worker_thread_caps_every_design_at_one_request_per_processing_time() {
    for d in [
        Design::Farm,
        Design::DaRpc,
        Design::WFlushRpc,
        Design::SRFlushRpc,
    ] {
        for senders in [1, 3] {
            let t = heavy(d, 1, senders);
            assert!(t <= BOUND * 1.01, "{d} with {senders} senders: {t}");
        }
    }
}

#[test]
fn worker_threads_serve_every_design_alike() {
    for d in [Design::Farm, Design::DaRpc, Design::L5] {
        // One sender, one RPC outstanding: more threads change nothing.
        let (one, many) = (heavy(d, 1, 1), heavy(d, 8, 1));
        assert!((many / one - 1.0).abs() < 0.01, "{d}: {one} vs {many}");
        // Three senders use three threads.
        let three = heavy(d, 8, 3);
        assert!(three > 2.8 * one, "{d}: {one} vs {three} with 3 senders");
    }
}

#[test]
fn durable_rpcs_overlap_processing_when_the_server_has_threads() {
    let farm = heavy(Design::Farm, 8, 1);
    let darpc = heavy(Design::DaRpc, 8, 1);
    for (d, base) in [
        (Design::WFlushRpc, farm),
        (Design::WRFlushRpc, farm),
        (Design::SFlushRpc, darpc),
        (Design::SRFlushRpc, darpc),
    ] {
        let t = heavy(d, 8, 1);
        // A 1:1 mix: Puts return at durability, reads wait for their processing.
        assert!(t > 1.5 * base && t < 2.1 * base, "{d}: {t} vs {base}");
        // One durable server's connections share its threads: with one thread, three
        // senders still get one request per processing time.
        assert!(heavy(d, 1, 3) <= BOUND * 1.01, "{d}");
    }
}
