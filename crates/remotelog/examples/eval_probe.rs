use remora::Scenario;
use remora_model::profile::LatencyProfile;
use remora_remotelog::eval::*;
use remora_remotelog::LogShape;
#[allow(clippy::disallowed_methods)]
fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(100_000);
    let opts = EvalOptions {
        appends: n,
        seed: 1,
        profile: LatencyProfile::default_profile(),
        shape: LogShape::default(),
        threads: 2,
    };
    let all = Scenario::all();
    let pick: Vec<Scenario> = vec![all[6], all[36 + 6], all[0], all[36], all[14], all[24]];
    let t0 = std::time::Instant::now();
    let rs = run_all(&opts, &pick, &|_, _| {}).unwrap();
    let el = t0.elapsed().as_secs_f64();
    for r in &rs {
        println!(
            "{:45} {:30} mean {:8.1} p50 {:6} p99 {:6} ev {}",
            r.scenario, r.method, r.mean_ns, r.p50_ns, r.p99_ns, r.events
        );
    }
    let total = n as f64 * pick.len() as f64;
    println!(
        "{:.0} appends/s wall over {} threads ({el:.2}s)",
        total / el,
        opts.threads
    );
}
