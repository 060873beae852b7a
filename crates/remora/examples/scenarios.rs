use remora::planner::predict;
use remora::{Scenario, Shape, Taxonomy};
use remora_model::profile::LatencyProfile;
use remora_verbs::FlushMethod;
fn main() {
    let t = Taxonomy::shipped();
    let p = LatencyProfile::default_profile();
    for sc in Scenario::all() {
        let m = t.method_for(&sc.config, sc.primitive, sc.update, Shape::default());
        let lat = predict(&sc.config, &p, m, FlushMethod::Native, 200, 1);
        println!(
            "{:50} {:32} {:?}",
            sc.name(),
            m.name,
            lat.map(|d| d.to_string())
        );
    }
}
