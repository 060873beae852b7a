//! Failure recovery (seed 003 §5.4, Figure 12): total execution time of a long run of RPCs
//! while the RPC service fails at a given availability.
//!
//! The paper's scenario: the service runs in a unikernel that restarts in about 300 ms;
//! "we simulate unexpected failures ... with different probabilities of server
//! availability"; "the re-transfer interval of RDMA packets \[is\] 100 ms"; RPCs are
//! performed 10^9 times. "For traditional RPCs, the sender has to re-send RPC requests
//! upon a system failure"; a durable RPC's request already persisted in the log "can be
//! re-executed ... without re-sending the data from clients".
//!
//! 10^9 simulated RPCs are out of reach, so this is a timeline model fed by simulated
//! latencies (the mean read and write latency a design measured in the read/write runs,
//! §5.5): outages of `restart` arrive with exponentially distributed up-times whose mean
//! gives the availability (`A = up / (up + restart)`). Up-times advance in bulk at the mean
//! operation latency; each outage is walked operation by operation with a seeded stream:
//!
//! * a **baseline** ([`FailureSide::baseline`]) loses the RPC in flight (the failure falls
//!   inside it, after it was sent); its sender re-transmits every `retransfer` interval
//!   from the send and the first re-transmission after the restart is served; later
//!   operations wait for it (one RPC outstanding).
//! * a **durable RPC** ([`FailureSide::durable`], supplied with measured numbers by the
//!   durable-RPC code) keeps completing writes during the outage (the RNIC persists them in
//!   the redo log without the service's CPU) until a read; the read is in the log too, so
//!   it is served when the restarted service has re-executed the log, without waiting for
//!   a re-transfer.

use super::RunResult;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// The failure scenario.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecoveryParams {
    /// RPCs per run (§5.4: 10^9).
    pub rpcs: u64,
    /// Service availabilities to run (fraction of time up). The paper does not list its
    /// values; these are assumptions.
    pub availability: Vec<f64>,
    /// Restart time of the service, ns (§5.4: "about 300 ms").
    pub restart_ns: u64,
    /// RDMA re-transfer interval, ns (§5.4: 100 ms).
    pub retransfer_ns: u64,
}

impl RecoveryParams {
    /// The paper's scenario (availabilities 90%, 95%, 99% are assumptions).
    pub fn paper() -> Self {
        RecoveryParams {
            rpcs: 1_000_000_000,
            availability: vec![0.90, 0.95, 0.99],
            restart_ns: 300_000_000,
            retransfer_ns: 100_000_000,
        }
    }

    /// 10^7 RPCs (still several outages at 90-99% availability).
    pub fn quick() -> Self {
        RecoveryParams {
            rpcs: 10_000_000,
            ..Self::paper()
        }
    }
}

/// How one design behaves across an outage.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailureSide {
    /// Design name.
    pub design: String,
    /// "baseline (re-send)" or "durable (re-execute from log)".
    pub side: String,
    /// Mean read latency, ns.
    pub read_ns: f64,
    /// Mean write latency, ns.
    pub write_ns: f64,
    /// Writes complete during an outage (a durable RPC's log is written without the
    /// service's CPU).
    pub writes_during_outage: bool,
    /// Requests sent during an outage are already in the log and are re-executed after the
    /// restart without being re-sent (no wait for a re-transfer).
    pub reexecute_from_log: bool,
    /// Time to re-execute one logged request after the restart, ns.
    pub replay_ns: f64,
}

impl FailureSide {
    /// A baseline measured in `r` (its read and write means).
    pub fn baseline(r: &RunResult) -> Self {
        FailureSide {
            design: r.design.clone(),
            side: "baseline (re-send)".into(),
            read_ns: nan_or(r.read_mean_ns, r.mean_ns),
            write_ns: nan_or(r.write_mean_ns, r.mean_ns),
            writes_during_outage: false,
            reexecute_from_log: false,
            replay_ns: 0.0,
        }
    }

    /// A durable RPC: writes return at durability (`write_ns`) and survive the outage in
    /// the log; each logged write costs `replay_ns` to re-execute after the restart.
    pub fn durable(design: &str, read_ns: f64, write_ns: f64, replay_ns: f64) -> Self {
        FailureSide {
            design: design.into(),
            side: "durable (re-execute from log)".into(),
            read_ns,
            write_ns,
            writes_during_outage: true,
            reexecute_from_log: true,
            replay_ns,
        }
    }
}

fn nan_or(x: f64, y: f64) -> f64 {
    if x.is_nan() {
        y
    } else {
        x
    }
}

/// One row of Figure 12.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecoveryResult {
    /// Design.
    pub design: String,
    /// Baseline or durable.
    pub side: String,
    /// Read percentage.
    pub read_percent: u32,
    /// Availability.
    pub availability: f64,
    /// RPCs.
    pub rpcs: u64,
    /// Outages the run met.
    pub outages: u64,
    /// Total execution time, s.
    pub total_s: f64,
    /// The same run with no failure, s.
    pub failure_free_s: f64,
}

/// The total execution time of `p.rpcs` RPCs with `read_percent` reads at availability
/// `availability`, for `side`; deterministic in `seed`.
pub fn simulate(
    side: &FailureSide,
    read_percent: u32,
    availability: f64,
    p: &RecoveryParams,
    seed: u64,
) -> RecoveryResult {
    assert!(availability > 0.0 && availability <= 1.0);
    assert!(read_percent <= 100);
    // Two streams, so both sides meet the same up-times whatever they do in an outage.
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut failures = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_fa11);
    let r = read_percent as f64 / 100.0;
    let mean_op = r * side.read_ns + (1.0 - r) * side.write_ns;
    let restart = p.restart_ns as f64;
    let mean_up = if availability >= 1.0 {
        f64::INFINITY
    } else {
        restart * availability / (1.0 - availability)
    };
    let op_ns = |rng: &mut ChaCha8Rng| {
        if rng.gen_range(0..100u32) < read_percent {
            (side.read_ns, false)
        } else {
            (side.write_ns, true)
        }
    };
    let (mut t, mut left, mut outages) = (0.0f64, p.rpcs, 0u64);
    while left > 0 {
        let u: f64 = failures.gen_range(f64::EPSILON..1.0);
        let up = -u.ln() * mean_up;
        let fit = (up / mean_op).floor();
        if fit >= left as f64 {
            t += left as f64 * mean_op;
            break;
        }
        t += fit * mean_op;
        left -= fit as u64;
        // The service fails during the RPC in flight, which was sent at `t`.
        outages += 1;
        let fail = t + (up - fit * mean_op);
        let back = fail + restart;
        let resend_after = |sent: f64| {
            let k = ((back - sent) / p.retransfer_ns as f64).ceil().max(1.0);
            sent + k * p.retransfer_ns as f64
        };
        let mut logged = 0u64;
        // A baseline's RPC in flight was sent before the failure and is re-sent on its own
        // re-transfer schedule; a durable RPC's sender goes on from the failure (its RNIC
        // keeps logging).
        let mut sent = if side.reexecute_from_log { fail } else { t };
        loop {
            let (lat, write) = op_ns(&mut rng);
            if side.writes_during_outage && write && sent < back {
                // Durable in the log without the service: the sender goes on.
                sent += lat;
                logged += 1;
                left -= 1;
                if left == 0 {
                    break;
                }
                continue;
            }
            // Served only after the restart (and the replay of the log), reached by a
            // re-transmission.
            let ready = back + logged as f64 * side.replay_ns;
            let served = if sent < back && !side.reexecute_from_log {
                resend_after(sent).max(ready)
            } else {
                sent.max(ready)
            };
            t = served + lat;
            left -= 1;
            break;
        }
        if left == 0 {
            t = t.max(sent);
        }
    }
    RecoveryResult {
        design: side.design.clone(),
        side: side.side.clone(),
        read_percent,
        availability,
        rpcs: p.rpcs,
        outages,
        total_s: t / 1e9,
        failure_free_s: p.rpcs as f64 * mean_op / 1e9,
    }
}

/// §5.4 for every baseline measured in `read_write` (the §5.5 read/write runs): each read
/// ratio × each availability. Durable RPCs are left out here; [`recovery_of`] takes their
/// [`FailureSide::durable`] rows.
pub fn recovery(read_write: &[RunResult], p: &RecoveryParams, seed: u64) -> Vec<RecoveryResult> {
    let sides: Vec<(FailureSide, u32)> = read_write
        .iter()
        .filter(|r| r.skipped.is_none() && !is_durable(&r.design))
        .map(|r| (FailureSide::baseline(r), r.read_percent))
        .collect();
    recovery_of(&sides, p, seed)
}

/// Whether `design` names one of the durable RPCs.
pub fn is_durable(design: &str) -> bool {
    design
        .parse::<crate::design::Design>()
        .is_ok_and(|d| d.is_durable_rpc())
}

/// §5.4 for each (side, read percentage) × each availability.
pub fn recovery_of(
    sides: &[(FailureSide, u32)],
    p: &RecoveryParams,
    seed: u64,
) -> Vec<RecoveryResult> {
    let mut out = Vec::new();
    for (side, read_percent) in sides {
        for &a in &p.availability {
            out.push(simulate(side, *read_percent, a, p, seed));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sides() -> (FailureSide, FailureSide) {
        let base = FailureSide {
            design: "X".into(),
            side: "baseline (re-send)".into(),
            read_ns: 5_000.0,
            write_ns: 8_000.0,
            writes_during_outage: false,
            reexecute_from_log: false,
            replay_ns: 0.0,
        };
        let dur = FailureSide::durable("Y", 5_000.0, 8_000.0, 1_000.0);
        (base, dur)
    }

    #[test]
    fn failures_cost_time_and_durable_writes_cost_less() {
        let p = RecoveryParams::quick();
        let (base, dur) = sides();
        let ideal = simulate(&base, 50, 1.0, &p, 1);
        assert_eq!(ideal.outages, 0);
        assert!((ideal.total_s - ideal.failure_free_s).abs() < 1e-9);
        let b = simulate(&base, 5, 0.9, &p, 1);
        let d = simulate(&dur, 5, 0.9, &p, 1);
        assert!(b.outages > 0);
        assert!(b.total_s > b.failure_free_s * 1.05, "{b:?}");
        assert!(d.total_s < b.total_s, "{d:?} vs {b:?}");
        assert_eq!(d.outages, b.outages);
        // Read-only: no write progresses during an outage, but a logged read is served
        // at the restart, not at the next re-transfer.
        let br = simulate(&base, 100, 0.9, &p, 1);
        let dr = simulate(&dur, 100, 0.9, &p, 1);
        assert!(dr.total_s <= br.total_s, "{dr:?} vs {br:?}");
        // Deterministic.
        assert_eq!(simulate(&base, 5, 0.9, &p, 1), b);
    }
}
