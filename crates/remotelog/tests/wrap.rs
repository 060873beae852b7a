//! RemoteLog with the ring reused ([`Ring::Reused`]): a four-record ring, 24 appends, the
//! server's garbage collector freeing records as the client fills it, descheduled for
//! 20 µs between each store and its persist, and a power failure at every event of the
//! run and as many random instants. After each, recovery must find every acknowledged
//! record the client had not begun to overwrite since (the scenarios' checks never fill
//! the ring, so they never read the head or reuse a slot). Under DMP a store is visible at
//! once and durable only after its persist: a head the client could read before it was
//! durable let the client overwrite records a crash then needed (found by review); the
//! negative control runs that collector and must be caught. `remora crashcheck --reuse`
//! runs the same targets.

use remora_remotelog::check::{check, reuse_targets, CheckOptions, Target};

/// One round per target: every event boundary of a run, and as many random instants.
fn check_all(filter: impl Fn(&Target) -> bool) {
    let opts = CheckOptions {
        crash_points: 1,
        ..CheckOptions::default()
    };
    let mut failed = Vec::new();
    let mut points = 0;
    let targets: Vec<Target> = reuse_targets().into_iter().filter(filter).collect();
    assert!(!targets.is_empty());
    for t in &targets {
        let r = check(t, &opts).unwrap();
        points += r.crash_points;
        if !r.passed() {
            failed.push(format!("{} ({}): {:?}", r.name, r.method, r.example));
        }
    }
    assert!(points > 100 * targets.len() as u64, "{points} crash points");
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn a_reused_ring_keeps_every_acknowledged_append_on_the_dmp_servers() {
    check_all(|t| !t.wrong && t.name.contains("DMP"));
}

#[test]
fn a_reused_ring_keeps_every_acknowledged_append_on_the_other_servers() {
    check_all(|t| !t.wrong && !t.name.contains("DMP"));
}

#[test]
fn a_collector_that_publishes_its_head_before_it_is_durable_is_caught() {
    check_all(|t| t.wrong);
}
