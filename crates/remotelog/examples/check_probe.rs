use remora_remotelog::check::*;
#[allow(clippy::disallowed_methods)]
fn main() {
    let opts = CheckOptions { crash_points: 300, ..CheckOptions::default() };
    let t0 = std::time::Instant::now();
    let mut targets = negative_controls();
    targets.extend(scenario_targets().into_iter().step_by(7));
    for t in &targets {
        let r = check(t, &opts).unwrap();
        println!("{:70} {:28} pts {:5} viol {:4} pass {} {:?}", r.name, r.method, r.crash_points, r.violations, r.passed(), r.example);
    }
    println!("{:?}", t0.elapsed());
}
