//! Numbers that make a run meaningless (no appends, no threads, no crash points, no kills)
//! are refused with the flag named, not run as an empty success or silently raised to 1.

mod common;
use common::{refused_naming, QUICK_BENCH_RPC};

#[test]
fn zero_appends_are_refused() {
    let dir = common::scratch("numeric-flags");
    let d = dir.path().to_str().unwrap();
    refused_naming(&["demo", "--appends", "0"], "--appends");
    refused_naming(
        &["remotelog", "--appends", "0", "--threads", "1", "--out", d],
        "--appends",
    );
    // Nothing written: no figure of 0.00 µs latencies.
    assert!(!dir.path().join("figure2.md").exists());
    refused_naming(
        &["remotelog", "--server", "127.0.0.1:1", "--appends", "0"],
        "--appends",
    );
}

#[test]
fn zero_threads_are_refused() {
    let dir = common::scratch("numeric-flags");
    let d = dir.path().to_str().unwrap();
    refused_naming(
        &["remotelog", "--appends", "1", "--threads", "0", "--out", d],
        "--threads",
    );
    refused_naming(
        &[
            "crashcheck",
            "--points",
            "1",
            "--appends",
            "1",
            "--threads",
            "0",
            "--only",
            "singleton/DMP+noDDIO+PM-RQWRB/WRITE",
            "--no-variants",
            "--no-reuse",
        ],
        "--threads",
    );
    let mut a = QUICK_BENCH_RPC.to_vec();
    a.extend(["--threads", "0", "--out", d]);
    refused_naming(&a, "--threads");
}

#[test]
fn zero_durable_rpc_operations_are_refused() {
    refused_naming(&["rpc", "--server", "127.0.0.1:1", "--ops", "0"], "--ops");
}

#[test]
fn a_checker_that_checks_nothing_is_refused() {
    let base = [
        "crashcheck",
        "--threads",
        "1",
        "--only",
        "singleton/DMP+noDDIO+PM-RQWRB/WRITE",
        "--no-variants",
        "--no-reuse",
    ];
    let mut a = base.to_vec();
    a.extend(["--points", "0", "--appends", "1"]);
    refused_naming(&a, "--points");
    let mut a = base.to_vec();
    a.extend(["--points", "1", "--appends", "0"]);
    refused_naming(&a, "--appends");
}

#[test]
fn real_loops_refuse_zero_kills_and_zero_lives() {
    for cmd in [&["crashcheck", "--real"][..], &["rpc-crashcheck"]] {
        for flag in ["--kills", "--max-life-ms"] {
            let mut a = cmd.to_vec();
            a.extend([flag, "0", "--only", "no-such-target"]);
            refused_naming(&a, flag);
        }
    }
}

#[test]
fn bench_rpc_refuses_what_it_used_to_clamp() {
    let dir = common::scratch("numeric-flags");
    let d = dir.path().to_str().unwrap();
    for (flag, v) in [
        ("--divisor", "0"),
        ("--server-threads", "0"),
        ("--net-load", "0"),
        ("--cpu-load", "0"),
        ("--cpu-load", "100"),
        ("--cpu-load", "500"),
        ("--cpu-period-us", "0"),
    ] {
        let mut a = QUICK_BENCH_RPC.to_vec();
        a.extend([flag, v, "--out", d]);
        refused_naming(&a, flag);
    }
}

#[test]
fn rpc_serve_refuses_empty_objects() {
    refused_naming(
        &[
            "rpc-serve",
            "--pool",
            "/nonexistent/never-made.pm",
            "--config",
            "DMP+noDDIO+PM-RQWRB",
            "--design",
            "WFlush-RPC",
            "--max-value",
            "0",
        ],
        "--max-value",
    );
}

#[test]
fn serve_refuses_a_collector_slower_than_a_returning_clients_wait() {
    // A connection's end waits for its collector's step (an interval and two pauses); past
    // 100 ms each, that step could outlast the 2 s a returning client waits for its slot.
    for (flag, v) in [
        ("--gc-interval-us", "0"),
        ("--gc-interval-us", "100001"),
        ("--gc-pause-us", "100001"),
    ] {
        refused_naming(
            &[
                "serve",
                "--pool",
                "/nonexistent/never-made.pm",
                "--config",
                "DMP+noDDIO+PM-RQWRB",
                "--gc",
                "singleton",
                flag,
                v,
            ],
            flag,
        );
    }
}
