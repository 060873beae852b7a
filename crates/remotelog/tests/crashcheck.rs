//! Acceptance of seed 000's taxonomy on the model: every scenario's method survives at
//! least 1,000 injected power failures without losing an acknowledged append, and every
//! negative control (a wrong method) is caught.

use remora_remotelog::check::*;

fn run(targets: &[Target], points: u64) -> Vec<CheckReport> {
    let opts = CheckOptions {
        crash_points: points,
        ..CheckOptions::default()
    };
    targets
        .iter()
        .map(|t| check(t, &opts).unwrap_or_else(|e| panic!("{}: {e}", t.name)))
        .collect()
}

#[test]
fn all_72_scenarios_survive_1000_crashes_each() {
    let targets = scenario_targets();
    assert_eq!(targets.len(), 72);
    for r in run(&targets, 1000) {
        assert!(
            r.crash_points >= 1000,
            "{}: only {} crash points",
            r.name,
            r.crash_points
        );
        assert_eq!(
            r.violations, 0,
            "{} ({}): {:?}",
            r.name, r.method, r.example
        );
    }
}

#[test]
fn text_alternatives_and_read_emulated_flush_survive_too() {
    let targets = variant_targets();
    assert!(targets.len() >= 20);
    for r in run(&targets, 1000) {
        assert_eq!(
            r.violations, 0,
            "{} ({}): {:?}",
            r.name, r.method, r.example
        );
    }
}

#[test]
fn every_negative_control_is_caught() {
    let targets = negative_controls();
    assert_eq!(targets.len(), 7);
    for r in run(&targets, 1000) {
        assert!(
            r.violations > 0,
            "wrong method not caught: {} ({})",
            r.name,
            r.method
        );
        assert!(r.passed());
    }
}
