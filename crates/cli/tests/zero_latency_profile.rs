//! A profile with every data-path latency zero is valid: the simulator still advances
//! (every transfer takes its serialization time, rounded up to a nanosecond, and an RNR
//! retry its positive delay), so each command finishes and every prediction is positive.
//! This pins that down; a zero that stalled the clock would hang these runs.

mod common;
use common::{remora, scratch, text};
use remora_model::LatencyProfile;

/// The default profile with every latency of the data path and the CPU at zero; only
/// the RNR retry delay and the ACK time-out, which must be positive, are kept.
fn zero_profile() -> LatencyProfile {
    let mut p = LatencyProfile::default_profile();
    p.name = "zero".into();
    let n = &mut p.network;
    n.nic_rtt_ns = 0;
    let r = &mut p.rnic;
    (
        r.proc_ns,
        r.pcie_ns,
        r.translation_miss_ns,
        r.sflush_lookup_ns,
    ) = (0, 0, 0, 0);
    let h = &mut p.host;
    (h.iio_ns, h.llc_ns, h.imc_ns, h.imc_jitter_ns) = (0, 0, 0, 0);
    (h.llc_residency_ns, h.dram_ns) = (0, 0);
    let m = &mut p.pm;
    (m.read_ns, m.write_ns, m.row_hit_ns) = (0, 0, 0);
    (m.read_conflict_ns, m.write_conflict_ns) = (0, 0);
    let c = &mut p.cpu;
    (c.poll_ns, c.msg_handle_ns, c.clwb_ns, c.sfence_ns) = (0, 0, 0, 0);
    p.validate().expect("a zero data path is a valid profile");
    p
}

#[test]
fn a_zero_latency_profile_runs_to_the_end_with_positive_times() {
    let dir = scratch("zero-profile");
    let file = dir.path().join("zero.toml");
    std::fs::write(&file, zero_profile().to_toml()).unwrap();
    let f = file.to_str().unwrap();
    let out = dir.path().join("out");
    for args in [
        vec!["plan", "--config", "DMP+noDDIO+PM-RQWRB", "--profile", f],
        vec![
            "plan",
            "--config",
            "DMP+DDIO+PM-RQWRB",
            "--update",
            "compound",
            "--profile",
            f,
        ],
        vec!["demo", "--appends", "50", "--profile", f],
        vec!["bench", "sim", "--ops", "2000", "--profile", f],
        vec![
            "remotelog",
            "--appends",
            "2",
            "--threads",
            "1",
            "--profile",
            f,
        ],
    ] {
        let mut args = args;
        if args[0] == "remotelog" {
            args.extend(["--out", out.to_str().unwrap()]);
        }
        let o = remora(&args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        let s = text(&o.stdout);
        assert!(
            !s.contains("| 0ns |"),
            "{args:?}: a prediction of 0 ns: {s}"
        );
    }
    // Every scenario's mean append latency is positive.
    let csv = std::fs::read_to_string(out.join("remotelog.csv")).unwrap();
    for line in csv.lines().skip(1) {
        let mean: f64 = line.split(',').nth(6).unwrap().parse().unwrap();
        assert!(mean > 0.0, "{line}");
    }
}
