use remora::Scenario;
use remora_model::profile::LatencyProfile;
use remora_remotelog::eval::*;
use remora_remotelog::report::*;
use remora_remotelog::LogShape;
fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(20_000);
    let opts = EvalOptions {
        appends: n,
        seed: 1,
        profile: LatencyProfile::default_profile(),
        shape: LogShape::default(),
        threads: 2,
    };
    let rs = run_all(&opts, &Scenario::all(), &|_, _| {}).unwrap();
    let info = RunInfo {
        command: "probe".into(),
        appends: n,
        seed: 1,
        profile: "default".into(),
    };
    std::fs::write("/tmp/remotelog.md", results_page(&rs, &info)).unwrap();
    std::fs::write("/tmp/remotelog.svg", svg(&rs).unwrap()).unwrap();
}
