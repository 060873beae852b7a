//! What the crash checkers share (RemoteLog's, `remora_remotelog::check`, and the durable
//! RPCs', `remora_rpc::check`): the per-target [`CheckReport`], and the [`sweep`] over
//! crash points. A checker supplies one run without a crash (how many events it took and
//! when it ended) and one run with a power failure at a given [`CrashAt`] (whether the
//! failure landed and which rule the recovered state broke); the sweep picks the points
//! (every event boundary, then random instants, where stages of the data path change),
//! counts them and keeps the first violation. What a run does and how it is judged stays
//! with each checker.
//!
//! The verdict rule and the table cells are here too, so the simulator's checkers and the
//! real SIGKILL loops (`remora crashcheck --real`, `remora rpc-crashcheck`) state a
//! result the same way.

use crate::CrashAt;
use remora_model::prng::Prng;
use remora_model::time::Instant;
use serde::Serialize;

/// A correct target passes with no violation; a negative control (`wrong`) passes only
/// when caught.
pub fn passed(wrong: bool, violations: u64) -> bool {
    if wrong {
        violations > 0
    } else {
        violations == 0
    }
}

/// The `kind` cell of a checker's table: `negative control`, or `correct` (e.g. `correct
/// method`).
pub fn kind_cell(wrong: bool, correct: &'static str) -> &'static str {
    if wrong {
        "negative control"
    } else {
        correct
    }
}

/// The `result` cell: `pass`, `caught: <first violation>`, `**FAIL** <first violation>`,
/// or `not_caught` for a negative control that broke no rule (tables word that
/// differently).
pub fn result_cell(
    wrong: bool,
    violations: u64,
    example: Option<&str>,
    not_caught: &str,
) -> String {
    match (wrong, passed(wrong, violations)) {
        (false, true) => "pass".to_string(),
        (true, true) => format!("caught: {}", example.unwrap_or("")),
        (true, false) => not_caught.to_string(),
        (false, false) => format!("**FAIL** {}", example.unwrap_or("")),
    }
}

/// What a checker found for one target.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// Target name.
    pub name: String,
    /// The method or design run.
    pub method: String,
    /// True for a negative control.
    pub wrong: bool,
    /// Runs in which the server lost power (crash points tried).
    pub crash_points: u64,
    /// Runs whose recovered state broke a rule.
    pub violations: u64,
    /// The first violation, described with its seed and crash point.
    pub example: Option<String>,
}

impl CheckReport {
    /// An empty report.
    pub fn new(name: &str, method: &str, wrong: bool) -> CheckReport {
        CheckReport {
            name: name.to_string(),
            method: method.to_string(),
            wrong,
            crash_points: 0,
            violations: 0,
            example: None,
        }
    }

    /// A correct target passes with no violation; a negative control when caught.
    pub fn passed(&self) -> bool {
        passed(self.wrong, self.violations)
    }
}

/// How a [`sweep`] picks crash points.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// Crash points wanted (at least, unless `spread` caps them).
    pub crash_points: u64,
    /// First seed; each round of points uses the next.
    pub seed: u64,
    /// Mixed into `seed` for the stream of random instants, so checkers draw apart.
    pub salt: u64,
    /// A round adds `events / random_divisor` random instants to its event boundaries.
    pub random_divisor: u64,
    /// Spread a round's points evenly over the run when it has more than are still
    /// wanted, and stop at exactly `crash_points`; otherwise every point of a round runs.
    pub spread: bool,
    /// Stop at the first violation (a negative control needs only one).
    pub stop_at_first: bool,
}

/// A run without a crash, as the sweep needs it.
#[derive(Copy, Clone, Debug)]
pub struct DryRun {
    /// Index of the first event worth crashing at (events before it, e.g. of the set-up,
    /// are passed over).
    pub first_event: u64,
    /// Events from there to the end.
    pub events: u64,
    /// Virtual time at the end.
    pub end: Instant,
}

/// A run with a power failure planned.
#[derive(Clone, Debug)]
pub struct CrashRun {
    /// Whether the failure happened (a point past the run's end does not).
    pub crashed: bool,
    /// The rule the recovered state broke, if any.
    pub violation: Option<String>,
}

/// Runs rounds of crash points into `report` until it holds `s.crash_points`: each round
/// asks `dry(seed)` for a run without a crash, then runs `crash(seed, at)` at each of its
/// event boundaries and `events / random_divisor` random instants in `1..=end`.
pub fn sweep(
    report: &mut CheckReport,
    s: &Sweep,
    mut dry: impl FnMut(u64) -> Result<DryRun, String>,
    mut crash: impl FnMut(u64, CrashAt) -> Result<CrashRun, String>,
) -> Result<(), String> {
    let mut seed = s.seed;
    let mut rng = Prng::from_seed(s.seed ^ s.salt);
    while report.crash_points < s.crash_points {
        let d = dry(seed)?;
        let mut points: Vec<CrashAt> = (d.first_event..d.first_event + d.events)
            .map(CrashAt::Event)
            .collect();
        for _ in 0..d.events / s.random_divisor.max(1) {
            points.push(CrashAt::Time(Instant::from_nanos(
                rng.range_inclusive(1, d.end.as_nanos().max(1)),
            )));
        }
        let stride = if s.spread {
            (points.len() as u64 / (s.crash_points - report.crash_points)).max(1)
        } else {
            1
        };
        for at in points.into_iter().step_by(stride as usize) {
            if s.spread && report.crash_points >= s.crash_points {
                break;
            }
            let run = crash(seed, at)?;
            if !run.crashed {
                continue;
            }
            report.crash_points += 1;
            if let Some(v) = run.violation {
                report.violations += 1;
                if report.example.is_none() {
                    report.example = Some(format!("seed {seed}, crash at {at:?}: {v}"));
                }
                if s.stop_at_first {
                    return Ok(());
                }
            }
        }
        seed += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_state_the_verdict() {
        assert!(passed(false, 0) && !passed(false, 1));
        assert!(passed(true, 2) && !passed(true, 0));
        assert_eq!(result_cell(false, 0, None, "x"), "pass");
        assert_eq!(result_cell(true, 1, Some("lost"), "x"), "caught: lost");
        assert_eq!(
            result_cell(true, 0, None, "**not caught**"),
            "**not caught**"
        );
        assert_eq!(result_cell(false, 1, Some("lost"), "x"), "**FAIL** lost");
        assert_eq!(kind_cell(true, "correct method"), "negative control");
    }

    #[test]
    fn a_spread_sweep_stops_at_the_count_and_at_the_first_violation() {
        let dry = |_| {
            Ok(DryRun {
                first_event: 3,
                events: 40,
                end: Instant::from_nanos(1000),
            })
        };
        let mut r = CheckReport::new("t", "m", false);
        let s = Sweep {
            crash_points: 25,
            seed: 1,
            salt: 7,
            random_divisor: 4,
            spread: true,
            stop_at_first: false,
        };
        let mut seen = Vec::new();
        sweep(&mut r, &s, dry, |_, at| {
            seen.push(at);
            Ok(CrashRun {
                crashed: true,
                violation: None,
            })
        })
        .unwrap();
        assert_eq!(r.crash_points, 25);
        assert_eq!(seen[0], CrashAt::Event(3));
        // Unspread: every point of a round runs, past the count.
        let mut r = CheckReport::new("t", "m", true);
        let s = Sweep {
            spread: false,
            random_divisor: 1,
            ..s
        };
        sweep(&mut r, &s, dry, |seed, _| {
            Ok(CrashRun {
                crashed: true,
                violation: Some(format!("bad {seed}")),
            })
        })
        .unwrap();
        assert_eq!((r.crash_points, r.violations), (80, 80));
        assert!(r
            .example
            .as_deref()
            .unwrap()
            .starts_with("seed 1, crash at Event(3): bad 1"));
        let mut r = CheckReport::new("t", "m", true);
        let s = Sweep {
            stop_at_first: true,
            ..s
        };
        sweep(&mut r, &s, dry, |_, _| {
            Ok(CrashRun {
                crashed: true,
                violation: Some("bad".into()),
            })
        })
        .unwrap();
        assert_eq!(r.crash_points, 1);
        assert!(r.passed());
    }
}
