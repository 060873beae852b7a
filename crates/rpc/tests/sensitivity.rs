//! Seed 003 §5.5 load studies (Figures 14–16) and §5.6's latency breakdown (Figure 20) on
//! small runs: loading the link or a CPU slows a design down, the breakdown's parts add up
//! to the measured latency, and measuring the breakdown does not change the run.

use remora_model::profile::LatencyProfile;
use remora_model::time::Duration;
use remora_rpc::bench::{run, Load, RunResult, RunSpec, CPU_LOAD, HEAVY_PROCESSING};
use remora_rpc::harness::{dmp, Conditions, NetLoad};
use remora_rpc::workload::{MicroSpec, Workload, YcsbKind, YcsbSpec};
use remora_rpc::{Design, FlushForm};

fn spec(design: Design, conditions: Conditions) -> RunSpec {
    RunSpec {
        experiment: "test",
        design,
        workload: Workload::Micro(MicroSpec {
            objects: 64,
            operations: 60,
            object_bytes: 16 * 1024,
            read_percent: 50,
            ..MicroSpec::default()
        }),
        senders: 1,
        batch: 1,
        load: Load::Light,
        heavy_processing: HEAVY_PROCESSING,
        server_threads: 4,
        flush: FlushForm::Emulated,
        server_config: dmp(false),
        seed: 11,
        profile: LatencyProfile::default_profile(),
        conditions,
        breakdown: false,
    }
}

fn measured(s: &RunSpec) -> RunResult {
    let r = run(s, None).unwrap();
    assert!(r.skipped.is_none(), "{:?}", r.skipped);
    assert_eq!(r.ops, 60);
    r
}

#[test]
fn a_busy_link_slows_every_kind_of_design() {
    let busy = Conditions {
        net_load: Some(NetLoad::busy(100)),
        ..Conditions::default()
    };
    for d in [
        Design::DaRpc,
        Design::Farm,
        Design::WFlushRpc,
        Design::SRFlushRpc,
    ] {
        let idle = measured(&spec(d, Conditions::default()));
        let b = measured(&spec(d, busy));
        assert_eq!(b.condition, "busy link");
        // Every packet toward the server waits behind about a microsecond of queue.
        assert!(
            b.mean_ns > idle.mean_ns + 500.0,
            "{d}: idle {} ns, busy {} ns",
            idle.mean_ns,
            b.mean_ns
        );
        // The background packets are simulated, and deterministic.
        assert!(b.events > 10 * idle.events);
        assert_eq!(b.fingerprint, measured(&spec(d, busy)).fingerprint);
    }
    // A lighter background load queues less.
    let half = Conditions {
        net_load: Some(NetLoad::busy(50)),
        ..Conditions::default()
    };
    let d = Design::WFlushRpc;
    assert!(measured(&spec(d, half)).mean_ns < measured(&spec(d, busy)).mean_ns);
}

#[test]
fn a_busy_cpu_on_either_side_slows_rpcs() {
    for d in [Design::Farm, Design::DaRpc, Design::WRFlushRpc] {
        let idle = measured(&spec(d, Conditions::default()));
        let server = measured(&spec(
            d,
            Conditions {
                server_cpu: Some(CPU_LOAD),
                ..Conditions::default()
            },
        ));
        let sender = measured(&spec(
            d,
            Conditions {
                sender_cpu: Some(CPU_LOAD),
                ..Conditions::default()
            },
        ));
        assert!(server.mean_ns > 1.1 * idle.mean_ns, "{d} server");
        assert!(sender.mean_ns > 1.1 * idle.mean_ns, "{d} sender");
    }
    // More of the CPU taken, slower.
    let at = |percent| {
        let c = Conditions {
            server_cpu: Some(remora_rpc::bench::CpuLoad {
                percent,
                period: Duration::from_micros(100),
            }),
            ..Conditions::default()
        };
        measured(&spec(Design::Farm, c)).mean_ns
    };
    assert!(at(20) < at(80));
}

#[test]
fn the_breakdown_adds_up_and_changes_nothing() {
    let mut y = YcsbSpec::paper(YcsbKind::A);
    (y.records, y.operations) = (128, 80);
    for d in [
        Design::DaRpc,
        Design::Farm,
        Design::Rfp,
        Design::WFlushRpc,
        Design::SRFlushRpc,
        Design::SFlushRpc,
    ] {
        let mut s = spec(d, Conditions::default());
        s.workload = Workload::Ycsb(y);
        let plain = run(&s, None).unwrap();
        s.breakdown = true;
        let r = run(&s, None).unwrap();
        // Recording work spans reads the clock only: the run is the same.
        assert_eq!(r.fingerprint, plain.fingerprint, "{d}");
        assert_eq!(r.mean_ns, plain.mean_ns, "{d}");
        assert!(plain.breakdown.is_none());
        let b = r.breakdown.expect("breakdown");
        let sum = b.sender_ns + b.network_ns + b.receiver_ns;
        // The histogram's mean has 3 significant digits.
        assert!(
            (sum - r.mean_ns).abs() <= 0.005 * r.mean_ns,
            "{d}: parts {sum} ns, mean {} ns",
            r.mean_ns
        );
        assert_eq!(b.sender_ns, 0.0);
        assert!(
            b.receiver_ns > 0.0 && b.network_ns > b.receiver_ns,
            "{d}: {b:?}"
        );
    }
    // A baseline waits for its server's work on every RPC; a durable Put does not.
    let recv = |d| {
        let mut s = spec(d, Conditions::default());
        s.workload = Workload::Ycsb(y);
        s.breakdown = true;
        run(&s, None).unwrap().breakdown.unwrap().receiver_ns
    };
    assert!(recv(Design::WFlushRpc) < recv(Design::Farm));
}

#[test]
fn the_breakdown_needs_one_sender() {
    let mut s = spec(Design::DaRpc, Conditions::default());
    s.senders = 2;
    s.breakdown = true;
    assert!(run(&s, None).is_err());
}
