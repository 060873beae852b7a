//! Flags of one mode are refused in the other, not silently ignored: `crashcheck` with and
//! without `--real`, `remotelog` with and without `--server`.

mod common;
use common::{refused_naming, remora, text};

/// The one-target selection of the simulator's checker used below (quick).
const ONE: [&str; 10] = [
    "crashcheck",
    "--points",
    "1",
    "--appends",
    "1",
    "--only",
    "singleton/DMP+noDDIO+PM-RQWRB/WRITE",
    "--no-variants",
    "--no-reuse",
    "--threads=1",
];

#[test]
fn real_only_flags_are_refused_without_real() {
    for extra in [
        ["--kills", "5"],
        ["--max-life-ms", "50"],
        ["--clients", "3"],
        ["--targets", "negative"],
        ["--server-listen", "[::1]:0"],
        ["--server-prefix", "nice"],
    ] {
        let mut args = ONE.to_vec();
        args.extend(extra);
        refused_naming(&args, extra[0]);
    }
}

#[test]
fn simulator_only_flags_are_refused_with_real() {
    for extra in [
        &["--points", "5"][..],
        &["--appends", "5"],
        &["--threads", "1"],
        &["--no-variants"],
    ] {
        let mut args = vec!["crashcheck", "--real", "--only", "no-such-target"];
        args.extend(extra);
        refused_naming(&args, extra[0]);
    }
}

#[test]
fn simulator_only_flags_are_refused_with_server() {
    let dir = common::scratch("mode-flags");
    let d = dir.path().to_str().unwrap().to_string();
    let page = format!("{d}/page.md");
    for extra in [
        ["--out", d.as_str()],
        ["--results", page.as_str()],
        ["--seed", "5"],
        ["--threads", "1"],
    ] {
        let mut args = vec!["remotelog", "--server", "127.0.0.1:1", "--appends", "1"];
        args.extend(extra);
        refused_naming(&args, extra[0]);
    }
    assert!(!std::path::Path::new(&page).exists());
}

#[test]
fn the_simulators_checker_still_runs_with_its_own_flags() {
    let out = remora(&ONE);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn no_reuse_also_leaves_out_the_real_loops_reused_rings() {
    // With --real, `--no-reuse` drops the `ring-reuse/…` targets (which then match nothing).
    let out = remora(&[
        "crashcheck",
        "--real",
        "--only",
        "ring-reuse/",
        "--no-reuse",
    ]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(err.contains("no target matches"), "{err}");
}

#[test]
fn serve_refuses_collector_flags_without_gc_and_a_ring_past_its_region() {
    let dir = std::env::temp_dir().join(format!("gc-flags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pool = dir.join("pool.pm");
    let pool = pool.to_str().unwrap();
    let serve = ["serve", "--pool", pool, "--config", "DMP+noDDIO+PM-RQWRB"];
    for extra in [
        &["--gc-interval-us", "5"][..],
        &["--gc-pause-us", "5"],
        &["--gc-records", "4"],
    ] {
        let mut args = serve.to_vec();
        args.extend(extra);
        refused_naming(&args, "--gc");
    }
    // A region of 576 bytes holds the log's header and 8 records.
    let mut args = serve.to_vec();
    args.extend([
        "--gc",
        "singleton",
        "--region-bytes",
        "576",
        "--gc-records",
        "9",
    ]);
    refused_naming(&args, "holds 8 records");
    let mut args = serve.to_vec();
    args.extend(["--gc", "compound", "--region-bytes", "64"]);
    refused_naming(&args, "no room for a record");
    // Refused before the pool is made.
    assert!(!std::path::Path::new(pool).exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench rpc --quick` has sizes of its own, and `bench soft --stream-only` measures only
/// the stream, unpinned: the flags they would ignore are refused.
#[test]
fn bench_flags_their_mode_ignores_are_refused() {
    let dir = common::scratch("mode-flags-bench");
    let out = dir.path().to_str().unwrap();
    let mut args = common::QUICK_BENCH_RPC.to_vec();
    args.extend(["--out", out, "--divisor", "10"]);
    refused_naming(&args, "--divisor");
    for extra in [
        ["--n", "100"],
        ["--placement", "shared"],
        ["--scenarios", "latency"],
    ] {
        let stream_only = ["bench", "soft", "--stream-only", "--stream", "1000"];
        let args = [&stream_only[..], &["--pool-dir", out], &extra[..]].concat();
        refused_naming(&args, extra[0]);
    }
}
