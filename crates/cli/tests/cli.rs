//! The built `remora` binary: exit codes and the messages a user sees.

mod common;
use common::{remora, text};

#[test]
fn configs_prints_table1_as_markdown() {
    let out = remora(&["configs"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.starts_with("| # | Configuration |"), "{s}");
    let rows = s
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains("-RQWRB`"))
        .count();
    assert_eq!(rows, 12, "{s}");
    assert!(s.contains("`DMP+DDIO+DRAM-RQWRB`") && s.contains("`WSP+noDDIO+PM-RQWRB`"));
}

#[test]
fn configs_parse_echoes_a_good_name() {
    let out = remora(&["configs", "--parse", "dmp+noddio+pm"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("DMP+noDDIO+PM-RQWRB\n"));
}

#[test]
fn configs_parse_rejects_a_bad_name_with_the_parsers_reason() {
    let out = remora(&["configs", "--parse", "XMP+DDIO+DRAM-RQWRB"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("bad server configuration") && err.contains("persistence domain"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn profile_prints_toml_and_refuses_unknown_names() {
    let out = remora(&["profile", "--name", "cx4-100g"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let p = remora_model::LatencyProfile::from_toml(&text(&out.stdout)).unwrap();
    assert_eq!(p.name, "cx4-100g");
    let bad = remora(&["profile", "--name", "nope"]);
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("unknown latency profile"));
    let missing = remora(&["profile", "--file", "/nonexistent/profile.toml"]);
    assert!(!missing.status.success());
    assert!(text(&missing.stderr).contains("/nonexistent/profile.toml"));
}

#[test]
fn demo_runs_and_writes_a_perfetto_trace() {
    let dir = common::scratch("cli-test");
    let path = dir.path().join("demo.trace.json");
    let p = path.to_str().unwrap();
    let out = remora(&["demo", "--appends", "50", "--seed", "3", "--trace", p]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("all 50 acknowledged appends survive a power failure now"),
        "{s}"
    );
    assert!(
        s.contains("fingerprint") && s.contains("ui.perfetto.dev"),
        "{s}"
    );
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(json.contains("traceEvents"));
}

/// A trace that cannot be written is said before the run, not after it (with a large
/// `--appends`, minutes later), and nothing of the run is printed.
#[test]
fn demo_refuses_an_unwritable_trace_before_it_runs() {
    let out = remora(&[
        "demo",
        "--appends",
        "50",
        "--trace",
        "/nonexistent/dir/demo.trace.json",
    ]);
    assert!(!out.status.success());
    let e = text(&out.stderr);
    assert!(
        e.contains("cannot write trace /nonexistent/dir/demo.trace.json"),
        "{e}"
    );
    let s = text(&out.stdout);
    assert!(!s.contains("acknowledged appends"), "it ran first: {s}");
}

#[test]
fn demo_warns_under_dmp_with_ddio_and_rejects_bad_configs() {
    let out = remora(&["demo", "--appends", "50", "--config", "DMP+DDIO+PM-RQWRB"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("NOT a correct persistence method"));
    let bad = remora(&["demo", "--config", "DMP+DDIO"]);
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("bad server configuration"));
}

#[test]
fn bench_sim_runs_small() {
    let out = remora(&["bench", "sim", "--ops", "500", "--batch", "50"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("510 (500 WRITEs + 10 FLUSHes)"), "{s}");
    assert!(
        s.contains("simulated RDMA ops per wall-clock second"),
        "{s}"
    );
    let bad = remora(&["bench", "sim", "--batch", "0"]);
    assert!(!bad.status.success());
}

#[test]
fn an_unknown_profile_lists_every_built_in_one() {
    // `slow-data-path` is built in (the crash loops' help suggests it) and must be offered.
    let out = remora(&["demo", "--appends", "1", "--profile", "slow-data-pth"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    for name in ["default", "cx4-100g", "slow-data-path"] {
        assert!(err.contains(name), "{name} missing: {err}");
    }
}
