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

#[test]
fn the_ack_on_write_completion_control_is_caught_for_every_seed() {
    use remora_rpc::check::ack_on_write_completion;
    // The window is structural with 64 KB values: every seed catches it with a few crash
    // points, not only the seeds whose WPQ contention happened to delay the data.
    let wrong = ack_on_write_completion();
    for seed in 1..=6 {
        let opts = CheckOptions {
            crash_points: 40,
            stop_at_first: true,
            seed,
            ..CheckOptions::default()
        };
        let r = check(&wrong, &opts).unwrap();
        assert!(
            r.passed(),
            "seed {seed}: not caught in {} points",
            r.crash_points
        );
        assert!(r.crash_points <= 40, "seed {seed}");
    }
    // The same design with its Flush and the same values is correct: the control is
    // caught for the missing Flush, not for the size.
    let mut right = wrong.clone();
    right.opts.fault = None;
    right.wrong = false;
    let opts = CheckOptions {
        crash_points: 60,
        ..CheckOptions::default()
    };
    let r = check(&right, &opts).unwrap();
    assert!(r.passed(), "{:?}", r.example);
}
