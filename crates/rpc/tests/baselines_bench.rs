//! The benchmark driver and report in quick mode (what CI runs), and determinism.

use remora_rpc::bench::{self, BenchOptions};

#[test]
fn quick_mode_runs_every_set_and_writes_the_report() {
    let o = BenchOptions::quick();
    let rs = bench::run_all(&o);
    for r in rs.runs() {
        if let Some(why) = &r.skipped {
            assert!(
                r.design == "FaSST" && why.contains("UD MTU"),
                "{} {} {}: {why}",
                r.experiment,
                r.design,
                r.workload
            );
            continue;
        }
        assert!(r.ops > 0 && r.mean_ns > 0.0, "{r:?}");
        assert!(r.p99_ns as f64 >= r.p50_ns as f64, "{r:?}");
    }
    assert!(!rs.recovery.is_empty());
    let scratch = tempfile::Builder::new()
        .prefix("remora-rpc-report-")
        .tempdir()
        .unwrap();
    let dir = scratch.path();
    let files = bench::write_report(&rs, dir).unwrap();
    assert!(files.iter().any(|f| f.ends_with("rpc.md")));
    let md = std::fs::read_to_string(dir.join("rpc.md")).unwrap();
    // HERD and FaSST run over real UC/UD: no transport substitution is reported.
    assert!(!md.contains("run over RC"), "{md}");
    eprintln!("{md}");
}
