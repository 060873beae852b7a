//! The fingerprint tells runs apart by what the packets carry, not only by when they
//! travel: a run that writes other bytes, or asks another question, is another run.

#[path = "common/mod.rs"]
mod common;

use common::*;
use remora_verbs::*;

/// Runs the same schedule on the same seed; the client writes `fill` and then reads a
/// word back with the given opcode. Returns the fingerprint and what server PM holds.
fn run(fill: u8, add: u64) -> (u64, Vec<u8>, Vec<u8>) {
    let p = Pair::new(7, cfg("DMP+noDDIO+PM-RQWRB"));
    let wcs = p.run_ops(vec![
        p.write(1, p.mr.addr, vec![fill; 256]),
        p.faa(2, p.mr.addr + 4096, add, p.lmr.addr),
    ]);
    assert!(wcs.iter().all(|(wc, _)| wc.status == WcStatus::Success));
    (
        p.sim.fingerprint(),
        p.pm(p.mr.addr, 256),
        p.pm(p.mr.addr + 4096, 8),
    )
}

#[test]
fn the_same_program_gives_the_same_fingerprint() {
    assert_eq!(run(0xab, 1), run(0xab, 1));
}

#[test]
fn other_bytes_on_the_wire_give_another_fingerprint() {
    let (fa, pa, _) = run(0xab, 1);
    let (fb, pb, _) = run(0xcd, 1);
    assert_ne!(pa, pb, "the runs differ in what they wrote");
    assert_ne!(
        fa, fb,
        "two runs that wrote different bytes share a fingerprint"
    );
}

#[test]
fn another_operand_gives_another_fingerprint() {
    let (fa, _, wa) = run(0xab, 1);
    let (fb, _, wb) = run(0xab, 2);
    assert_ne!(wa, wb, "the runs differ in what they added");
    assert_ne!(
        fa, fb,
        "two runs that added different values share a fingerprint"
    );
}
