//! The demo scenario as a library call: latency, determinism, and the crash check.

use remora_cli::demo::{run_demo, write_flush_is_correct, DemoOptions, DEFAULT_CONFIG};
use remora_model::{LatencyProfile, ServerConfig};

fn opts(seed: u64, config: &str, appends: u64) -> DemoOptions {
    DemoOptions {
        seed,
        config: config.parse().unwrap(),
        appends,
        ..DemoOptions::default()
    }
}

#[test]
fn default_demo_reports_positive_latency_and_all_appends_survive() {
    let r = run_demo(&opts(1, DEFAULT_CONFIG, 300));
    assert_eq!(r.appends, 300);
    assert_eq!(r.latencies_ns.len(), 300);
    assert!(r.latencies_ns.iter().all(|&l| l > 0));
    let l = r.latency;
    assert!(l.min_ns > 0 && l.min_ns <= l.p50_ns && l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns);
    assert!(l.mean_ns >= l.min_ns && l.mean_ns <= l.max_ns);
    // At least a network round trip per append.
    let rtt = LatencyProfile::default_profile().network.nic_rtt_ns;
    assert!(l.min_ns >= rtt, "{l:?}");
    assert!(r.sim_time.as_nanos() >= 300 * l.min_ns);
    assert!(r.events > 0);
    assert!(r.crash.method_is_correct);
    assert!(r.crash.all_survive(), "{:?}", r.crash);
    assert_eq!(r.crash.survived, 300);
    let text = r.to_string();
    assert!(
        text.contains("all 300 acknowledged appends survive a power failure now"),
        "{text}"
    );
    assert!(!text.contains("WARNING"), "{text}");
}

#[test]
fn same_seed_same_run_different_seed_different_run() {
    let a = run_demo(&opts(7, DEFAULT_CONFIG, 200));
    let b = run_demo(&opts(7, DEFAULT_CONFIG, 200));
    let c = run_demo(&opts(8, DEFAULT_CONFIG, 200));
    assert_eq!(a.fingerprint, b.fingerprint);
    assert_eq!(a.latencies_ns, b.latencies_ns);
    assert_eq!(a.sim_time, b.sim_time);
    assert_eq!(a.chrome_trace, b.chrome_trace);
    assert_ne!(a.fingerprint, c.fingerprint);
}

#[test]
fn recording_the_timeline_does_not_change_the_run() {
    let quiet = DemoOptions {
        record_trace: false,
        ..opts(3, DEFAULT_CONFIG, 100)
    };
    let loud = DemoOptions {
        chrome_trace: true,
        ..opts(3, DEFAULT_CONFIG, 100)
    };
    let (q, l) = (run_demo(&quiet), run_demo(&loud));
    assert_eq!(q.fingerprint, l.fingerprint);
    assert_eq!(q.latencies_ns, l.latencies_ns);
    assert!(q.trace.is_none() && q.chrome_trace.is_none());
    let counts = &l.trace.as_ref().unwrap().by_name;
    assert_eq!(counts.get("WRITE"), Some(&100), "{counts:?}");
    assert_eq!(counts.get("FLUSH"), Some(&100), "{counts:?}");
    assert_eq!(counts.get("append"), Some(&100), "{counts:?}");
    let json = l.chrome_trace.unwrap();
    assert!(
        json.starts_with("{") && json.contains("\"traceEvents\""),
        "{}",
        &json[..80]
    );
}

#[test]
fn dmp_with_ddio_does_not_claim_safety() {
    let r = run_demo(&opts(1, "DMP+DDIO+DRAM-RQWRB", 300));
    assert!(!r.crash.method_is_correct);
    assert!(!r.crash.is_violation());
    let text = r.to_string();
    assert!(
        text.contains("WARNING") && text.contains("NOT a correct persistence method"),
        "{text}"
    );
    // Records sit in the LLC for up to tens of microseconds: the latest ones are lost.
    assert!(!r.crash.all_survive(), "{:?}", r.crash);
    assert!(r.crash.lost.iter().any(|&i| i >= 290), "{:?}", r.crash.lost);
    assert_eq!(r.crash.survived + r.crash.lost.len() as u64, 300);
    assert!(text.contains("would lose"), "{text}");
}

#[test]
fn every_table1_config_runs_and_keeps_its_guarantee() {
    let mut configs = ServerConfig::table1();
    // Without native FLUSH the demo flushes with an RDMA READ (seed 000 §3.4).
    configs.push("DMP+noDDIO+PM-RQWRB,no-flush".parse().unwrap());
    configs.push("MHP+DDIO+DRAM-RQWRB@iwarp".parse().unwrap());
    for c in configs {
        let o = DemoOptions {
            config: c,
            appends: 100,
            ..DemoOptions::default()
        };
        let r = run_demo(&o);
        assert_eq!(r.crash.method_is_correct, write_flush_is_correct(&c));
        assert!(!r.crash.is_violation(), "{c}: {:?}", r.crash);
        assert!(r.latency.min_ns > 0, "{c}");
    }
}
