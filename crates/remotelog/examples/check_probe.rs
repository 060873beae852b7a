use remora_remotelog::check::*;
#[allow(clippy::disallowed_methods)]
fn main() {
    let opts = CheckOptions {
        crash_points: 1000,
        ..CheckOptions::default()
    };
    let t0 = std::time::Instant::now();
    let mut targets = negative_controls();
    targets.extend(scenario_targets());
    targets.extend(variant_targets());
    for t in &targets {
        let r = check(t, &opts).unwrap();
        println!(
            "{:70} {:28} pts {:5} viol {:4} pass {} {:?}",
            r.name,
            r.method,
            r.crash_points,
            r.violations,
            r.passed(),
            r.example
        );
    }
    println!("{:?}", t0.elapsed());
}
