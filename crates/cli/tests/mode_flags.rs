//! Flags of one mode are refused in the other, not silently ignored: `crashcheck` with and
//! without `--real`, `remotelog` with and without `--server`.

mod common;
use common::{remora, text};

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

fn refused_naming(args: &[&str], flag: &str) {
    let out = remora(args);
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "{args:?} succeeded, {flag} ignored: {}",
        text(&out.stdout)
    );
    assert!(err.contains(flag), "{args:?}: {err}");
}

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
        &["--no-reuse"],
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
