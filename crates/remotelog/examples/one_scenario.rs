use remora::Scenario;
use remora_model::profile::LatencyProfile;
use remora_remotelog::eval::*;
use remora_remotelog::LogShape;
fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(20_000);
    let i: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(0);
    let opts = EvalOptions {
        appends: n,
        seed: 1,
        profile: LatencyProfile::default_profile(),
        shape: LogShape::default(),
        threads: 1,
    };
    let r = run_scenario(&Scenario::all()[i], &opts).unwrap();
    println!(
        "{} {} mean {:.1} events {}",
        r.scenario, r.method, r.mean_ns, r.events
    );
}
