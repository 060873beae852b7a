//! The model check: the simulator's RemoteLog in every scenario (seed 000 §4), with a
//! `loopback` profile calibrated from the raw ping-pong alone, against the means the soft
//! RNIC measured in the same run; and, where the two differ by more than ±25%, what the
//! miss is made of.

use super::latency::ScenarioRow;
use super::{quantiles, rank};
use remora::Scenario;
use remora_model::profile::LatencyProfile;
use std::fmt::Write as _;

/// Appends per scenario in the simulator's prediction: a run is deterministic, and its mean
/// settles within a few hundred appends.
const PREDICT_APPENDS: u64 = 1000;

/// How much longer the probe profile's round trip is than the calibrated one's: the
/// difference of the two predictions, divided by this, is how many network round trips an
/// append of the scenario waits for in the model.
const PROBE_RTT_NS: u64 = 100_000;

/// The model check's one allowed deviation (issue 5: within ±25% for every scenario).
const TOLERANCE: f64 = 0.25;

/// What the model check is calibrated with, all measured in the same run.
pub(super) struct Calibration {
    /// The raw ping-pong's mean round trip, µs: the only input of the `loopback` profile.
    pub(super) raw_mean_us: f64,
    /// The both-sides executor ping-pong's mean, µs: the soft RNIC's own I/O path.
    pub(super) io_mean_us: f64,
    /// Both sides' CPU per round trip of that ping-pong, µs.
    pub(super) io_cpu_us: f64,
}

/// The default profile with its NIC round trip set to `rtt_us`, validated as a profile
/// file is: a round trip past the default's ACK time-out (a loopback loaded enough for
/// a millisecond's mean) would fail every simulated request with RetryExcErr, not
/// predict it.
fn loopback(rtt_us: f64) -> Result<LatencyProfile, String> {
    let ns = rtt_us * 1e3;
    // `as` would make a NaN 0 ns and saturate an overflowing one.
    if !(ns.is_finite() && ns >= 0.0 && ns < u64::MAX as f64) {
        return Err(format!(
            "a measured round trip of {rtt_us} µs is not a duration in nanoseconds"
        ));
    }
    let mut profile = LatencyProfile::default_profile();
    profile.name = "loopback".into();
    profile.network.nic_rtt_ns = ns as u64;
    profile.validate().map_err(|e| {
        format!(
            "the `loopback` profile from a measured round trip of {rtt_us:.1} µs is not \
             one the model can run: {e}"
        )
    })?;
    Ok(profile)
}

/// The simulator's RemoteLog in each of `scenarios` with `profile`, in their order: the
/// method it ran and its mean latency in µs.
fn predict_scenarios(
    profile: &LatencyProfile,
    scenarios: &[Scenario],
) -> Result<Vec<(String, f64)>, String> {
    let opts = remora_remotelog::eval::EvalOptions {
        appends: PREDICT_APPENDS,
        seed: 1,
        profile: profile.clone(),
        shape: remora_remotelog::log::LogShape::default(),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let results = remora_remotelog::eval::run_all(&opts, scenarios, &|_, _| {})?;
    Ok(results
        .into_iter()
        .map(|r| (r.method, r.mean_ns / 1e3))
        .collect())
}

/// One scenario's line of the model check.
struct Verdict {
    name: String,
    /// Measured mean over the strict prediction.
    ratio: f64,
    /// What the I/O-path prediction misses, µs.
    miss_us: f64,
    /// Both sides' CPU per append beyond the I/O path's for as many round trips, µs.
    model_cpu_us: f64,
    /// The mean's share of appends that took a millisecond or more (the process lost its
    /// CPU for a scheduler slice), beyond the median: µs per append.
    preempted_us: f64,
}

impl Verdict {
    fn within(&self) -> bool {
        (self.ratio - 1.0).abs() <= TOLERANCE
    }

    /// Whether the soft RNIC's CPU accounts for what the I/O-path prediction misses: then
    /// the stage the model gets wrong is the RNIC's (and the responder's) processing, which
    /// here is software on the same CPUs.
    fn cpu_covers_miss(&self) -> bool {
        self.model_cpu_us >= self.miss_us
    }

    /// Whether that CPU and the preempted appends together account for the miss.
    fn cpu_and_preemption_cover_miss(&self) -> bool {
        self.model_cpu_us + self.preempted_us >= self.miss_us
    }

    fn column(&self) -> &'static str {
        Cause::of(self).column()
    }

    /// Measured faster than the model allows: no cost of the soft RNIC explains that.
    fn faster(&self) -> bool {
        self.ratio < 1.0 - TOLERANCE
    }
}

/// Why a scenario's measured mean is where it is against the prediction.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Cause {
    Within,
    /// Below the band: measured faster than predicted.
    Faster,
    /// Outside; the soft RNIC's CPU covers the miss.
    Cpu,
    /// Outside; the soft RNIC's CPU and the preempted appends together cover it.
    CpuAndPreemption,
    /// Outside, and neither covers it.
    NotCovered,
}

impl Cause {
    const OUTSIDE: [Cause; 4] = [
        Cause::Cpu,
        Cause::CpuAndPreemption,
        Cause::NotCovered,
        Cause::Faster,
    ];

    fn of(v: &Verdict) -> Cause {
        if v.within() {
            Cause::Within
        } else if v.faster() {
            Cause::Faster
        } else if v.cpu_covers_miss() {
            Cause::Cpu
        } else if v.cpu_and_preemption_cover_miss() {
            Cause::CpuAndPreemption
        } else {
            Cause::NotCovered
        }
    }

    fn column(self) -> &'static str {
        match self {
            Cause::Within => "within",
            Cause::Faster => "outside: faster than the model",
            Cause::Cpu => "outside: soft RNIC CPU",
            Cause::CpuAndPreemption => "outside: soft RNIC CPU + preemptions",
            Cause::NotCovered => "outside: not covered",
        }
    }

    /// The summary's words for the scenarios outside with this cause.
    fn summary(self) -> &'static str {
        match self {
            Cause::Within => "within",
            Cause::Faster => "faster than the model",
            Cause::Cpu => "the soft RNIC's CPU covering the miss",
            Cause::CpuAndPreemption => "the soft RNIC's CPU and preempted appends covering it",
            Cause::NotCovered => "not covered by either",
        }
    }
}

/// The mean's share, in µs per sample, of the samples of `ns` that took a millisecond or
/// more, beyond the median: what preemptions of a process add to a mean.
fn preempted_us(ns: &[u64]) -> f64 {
    let mut sorted = ns.to_vec();
    sorted.sort_unstable();
    let Some(&p50) = sorted.get(rank(sorted.len(), 50)) else {
        return 0.0;
    };
    let excess: u64 = sorted
        .iter()
        .filter(|&&x| x >= 1_000_000)
        .map(|&x| x - p50.min(x))
        .sum();
    excess as f64 / sorted.len() as f64 / 1e3
}

/// Appends the model check to `out`: the calibration, a row per scenario of `rows` and the
/// verdict; only a line saying why, if a measured round trip makes no valid `loopback`
/// profile. Fails if the simulator ran another method than the soft RNIC did in some
/// scenario.
pub(super) fn model_check(
    out: &mut String,
    rows: &[ScenarioRow],
    cal: &Calibration,
) -> Result<(), String> {
    // The model's round trip is a constant, so the constant that reproduces the raw
    // ping-pong's *mean* is its mean; calibrating it from the p50 would make the model
    // miss the floor's own mean by the ping-pong's tail, before any of remora's cost.
    let scenarios: Vec<Scenario> = rows.iter().map(|r| r.scenario).collect();
    // The prediction's round trip; then, for the attribution of the model's miss, the
    // round trip of the I/O path the soft RNIC's packets actually take (the executor on
    // both sides): what that prediction still misses is the soft RNIC's own CPU per packet
    // and per message, which a model of a hardware RNIC does not have; the rest of the
    // strict miss is the I/O path. Last, the probe that counts round trips.
    let rtts = [
        cal.raw_mean_us,
        cal.io_mean_us,
        cal.raw_mean_us + PROBE_RTT_NS as f64 / 1e3,
    ];
    let profiles = match rtts
        .map(loopback)
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(p) => p,
        Err(e) => {
            // What was measured stays on the page; only the prediction cannot be made.
            let _ = writeln!(out, "Model check (seed 000 §4): not run: {e}\n");
            return Ok(());
        }
    };
    let strict = predict_scenarios(&profiles[0], &scenarios)?;
    let via_io = predict_scenarios(&profiles[1], &scenarios)?;
    let probe = predict_scenarios(&profiles[2], &scenarios)?;
    let _ = writeln!(
        out,
        "Model check, {} (seed 000 §4; each measured in the same rounds as the ping-pongs): the `loopback` profile is the default one with its NIC round trip set to the raw ping-pong's mean, {:.1} µs (the only measured input); the simulator runs RemoteLog in each scenario with it ({PREDICT_APPENDS} appends, the method the soft RNIC ran) and predicts its mean latency. Round trips: how many network round trips an append waits for in the model (how much its prediction grows when the round trip is {} µs longer, over {} µs). Attribution (the I/O-path columns): the same profile with the round trip of the soft RNIC's own I/O path, the both-sides executor ping-pong's mean {:.1} µs; what that still misses is the soft RNIC's CPU per packet and message, which a model of hardware does not have. Beside that miss: the CPU both sides spent per append beyond what they spent on as many round trips of the both-sides executor ping-pong (the same I/O path without the model, {:.2} µs per round trip). Where that CPU covers the miss (verdict `outside: soft RNIC CPU`), the stage the model gets wrong is the RNIC's own processing, and the responder's, which here are software on the same two CPUs. Preemptions: the mean's share of appends that took a millisecond or more (the process lost its CPU to another for a scheduler slice), beyond the median; where that and the CPU together cover the miss, the verdict says so.\n",
        if rows.len() == remora::Scenario::all().len() {
            format!("every RemoteLog scenario ({})", rows.len())
        } else {
            format!("{} of the {} RemoteLog scenarios (`--scenarios latency`)", rows.len(), remora::Scenario::all().len())
        },
        cal.raw_mean_us,
        PROBE_RTT_NS / 1000,
        PROBE_RTT_NS / 1000,
        cal.io_mean_us,
        cal.io_cpu_us,
    );
    let _ = writeln!(out, "| update | server | primitive | method | round trips | mean µs | ≥ 1 ms | simulator (loopback profile) mean µs | measured / predicted | simulator, I/O-path round trip, mean µs | measured / that | mean − that µs | soft RNIC CPU per append µs | preemptions µs | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut verdicts = Vec::new();
    for (((row, (method, strict)), (_, io)), (_, probed)) in
        rows.iter().zip(&strict).zip(&via_io).zip(&probe)
    {
        let sc = &row.scenario;
        if *method != row.method {
            return Err(format!(
                "{}: the soft RNIC ran {} and the simulator {method}",
                sc.name(),
                row.method
            ));
        }
        let round_trips = ((probed - strict) * 1e3 / PROBE_RTT_NS as f64).round();
        let (mean, _, _, slow) = quantiles(row.series.ns.clone());
        let (client_cpu, server_cpu) = row.series.cpu_us();
        let v = Verdict {
            name: sc.name(),
            ratio: mean / strict,
            miss_us: mean - io,
            model_cpu_us: client_cpu + server_cpu - round_trips * cal.io_cpu_us,
            preempted_us: preempted_us(&row.series.ns),
        };
        let _ = writeln!(out, "| {} | {} | {} | {method} | {round_trips} | {mean:.1} | {slow} | {strict:.1} | {:.2} | {io:.1} | {:.2} | {:.1} | {:.2} | {:.2} | {} |", sc.update.name(), sc.config, sc.primitive.name(), v.ratio, mean / io, v.miss_us, v.model_cpu_us, v.preempted_us, v.column());
        verdicts.push(v);
    }
    let _ = writeln!(out, "\n{}\n", summary(&verdicts));
    Ok(())
}

/// The model check's verdict: how many scenarios are within ±25% of the prediction, the
/// ratios' range and median, and the scenarios outside, worst first, grouped by
/// [`Cause`].
fn summary(verdicts: &[Verdict]) -> String {
    let mut ratios: Vec<f64> = verdicts.iter().map(|v| v.ratio).collect();
    ratios.sort_by(f64::total_cmp);
    let mut outside: Vec<&Verdict> = verdicts.iter().filter(|v| !v.within()).collect();
    outside.sort_by(|a, b| (b.ratio - 1.0).abs().total_cmp(&(a.ratio - 1.0).abs()));
    let mut s = format!(
        "Within ±{:.0}% of the prediction: {} of {} scenarios (measured / predicted {:.2}–{:.2}, median {:.2}).",
        TOLERANCE * 100.0,
        verdicts.len() - outside.len(),
        verdicts.len(),
        ratios.first().copied().unwrap_or(f64::NAN),
        ratios.last().copied().unwrap_or(f64::NAN),
        ratios.get(rank(ratios.len(), 50)).copied().unwrap_or(f64::NAN),
    );
    for cause in Cause::OUTSIDE {
        let these: Vec<String> = outside
            .iter()
            .filter(|v| Cause::of(v) == cause)
            .map(|v| format!("{} {:.2}", v.name, v.ratio))
            .collect();
        if !these.is_empty() {
            let _ = write!(
                s,
                " Outside, {} ({}): {}.",
                cause.summary(),
                these.len(),
                these.join(", ")
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calibrated_profile_is_a_valid_one_or_refused() {
        // A loaded loopback's mean round trip can reach a millisecond (the page counts
        // samples of 1 ms and more): past the default's ACK time-out, the profile made from
        // it failed every simulated append with RetryExcErr, and the run with it.
        let p = loopback(20.0).unwrap();
        assert_eq!(LatencyProfile::from_toml(&p.to_toml()).unwrap(), p);
        let e = loopback(2_000.0).unwrap_err();
        assert!(
            e.contains("2000.0 µs") && e.contains("rnic.ack_timeout_ns"),
            "{e}"
        );
        for bad in [f64::NAN, f64::INFINITY, -1.0, 1e30] {
            let e = loopback(bad).unwrap_err();
            assert!(e.contains("not a duration"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_model_check_without_a_valid_profile_keeps_the_page() {
        // The probe's round trip (the mean plus 100 µs) is the first past the time-out.
        let mut out = String::new();
        let cal = Calibration {
            raw_mean_us: 960.0,
            io_mean_us: 40.0,
            io_cpu_us: 1.0,
        };
        model_check(&mut out, &[], &cal).unwrap();
        assert!(
            out.starts_with("Model check (seed 000 §4): not run: the `loopback` profile")
                && out.contains("1060.0 µs"),
            "{out}"
        );
    }

    fn verdict(name: &str, ratio: f64, miss_us: f64, model_cpu_us: f64) -> Verdict {
        Verdict {
            name: name.into(),
            ratio,
            miss_us,
            model_cpu_us,
            preempted_us: 0.0,
        }
    }

    #[test]
    fn the_summary_counts_the_scenarios_within_and_sorts_the_rest_by_cause() {
        let mut vs = [
            verdict("a", 1.10, 1.0, 0.5),
            verdict("b", 1.40, 8.0, 9.0),
            verdict("c", 0.70, -6.0, 1.0),
            verdict("d", 1.26, 5.0, 0.0),
            verdict("g", 1.25, 5.0, 0.0),
            verdict("e", 1.60, 12.0, 13.0),
            verdict("f", 1.30, 6.0, 5.0),
        ];
        // f's CPU (5 µs) leaves a 1 µs of its miss that its preempted appends cover.
        vs[6].preempted_us = 1.5;
        let s = summary(&vs);
        assert!(s.starts_with("Within ±25% of the prediction: 2 of 7 scenarios (measured / predicted 0.70–1.60, median 1.26)."), "{s}");
        // Worst first within each list; d's CPU (none) does not cover its 5 µs miss.
        assert!(
            s.contains("CPU covering the miss (2): e 1.60, b 1.40."),
            "{s}"
        );
        assert!(
            s.contains("preempted appends covering it (1): f 1.30."),
            "{s}"
        );
        assert!(s.contains("not covered by either (1): d 1.26."), "{s}");
        // Faster than the model (its miss is negative): no cost of the soft RNIC explains
        // it, whatever its CPU.
        assert!(s.contains("faster than the model (1): c 0.70."), "{s}");
        assert_eq!(vs[4].column(), "within");
        assert_eq!(vs[1].column(), "outside: soft RNIC CPU");
        assert_eq!(vs[6].column(), "outside: soft RNIC CPU + preemptions");
        assert_eq!(vs[2].column(), "outside: faster than the model");
        assert_eq!(vs[3].column(), "outside: not covered");
    }

    #[test]
    fn preemptions_count_what_the_slow_samples_add_beyond_the_median() {
        // Ten samples of 20 µs and two of 2 ms: (2 × (2000 − 20)) / 12 µs per sample.
        let mut ns = vec![20_000u64; 10];
        ns.extend([2_000_000, 2_000_000]);
        assert!((preempted_us(&ns) - 2.0 * 1980.0 / 12.0).abs() < 1e-9);
        assert_eq!(preempted_us(&[20_000; 5]), 0.0);
        assert_eq!(preempted_us(&[]), 0.0);
    }

    #[test]
    fn a_round_trip_longer_shows_in_every_prediction() {
        // The probe that counts round trips, over every scenario: one round trip, or two
        // for the compound methods that wait for a first completion.
        let (base, probe) = (
            predict_scenarios(&loopback(20.0).unwrap(), &Scenario::all()).unwrap(),
            predict_scenarios(
                &loopback(20.0 + PROBE_RTT_NS as f64 / 1e3).unwrap(),
                &Scenario::all(),
            )
            .unwrap(),
        );
        let trips: Vec<f64> = base
            .iter()
            .zip(&probe)
            .map(|((_, a), (_, b))| (b - a) * 1e3 / PROBE_RTT_NS as f64)
            .collect();
        // Whole round trips, each scenario at least one.
        assert!(
            trips
                .iter()
                .all(|t| (t - t.round()).abs() < 0.05 && *t >= 0.95),
            "{trips:?}"
        );
        assert!(trips.iter().any(|t| t.round() >= 2.0), "{trips:?}");
    }
}
