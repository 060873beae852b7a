//! The crash checker on the durable RPCs: every target passes with hundreds of crash
//! points, every negative control is caught.

use remora_rpc::check::{check, negative_controls, targets, CheckOptions};

fn crash_points() -> u64 {
    std::env::var("REMORA_RPC_CRASH_POINTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

#[test]
fn every_durable_design_survives_power_failures() {
    let opts = CheckOptions {
        crash_points: crash_points(),
        ..CheckOptions::default()
    };
    let mut failed = Vec::new();
    for t in targets() {
        let r = check(&t, &opts).unwrap();
        eprintln!(
            "{}: {} crash points, {} violations",
            r.name, r.crash_points, r.violations
        );
        assert!(r.crash_points >= opts.crash_points);
        if !r.passed() {
            failed.push(format!("{}: {:?}", r.name, r.example));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn every_negative_control_is_caught() {
    let opts = CheckOptions {
        crash_points: crash_points(),
        stop_at_first: true,
        ..CheckOptions::default()
    };
    for t in negative_controls() {
        let r = check(&t, &opts).unwrap();
        eprintln!("{}: caught: {:?}", r.name, r.example);
        assert!(r.passed(), "negative control not caught: {}", r.name);
    }
}
