//! A negative control the simulated crash checker misses because the run had fewer crash
//! points than the default is blamed on the points in the error, not left as a bare
//! failure; with the default points the same wrong method is caught.

mod common;
use common::{remora, text};

/// The crash checker on the one target `--only region` names: a negative control (a FLUSH
/// of the region, not the ring), whose loss window is a few events wide.
fn region_target(points: Option<&str>) -> std::process::Output {
    let mut args = vec![
        "crashcheck",
        "--appends",
        "20",
        "--no-reuse",
        "--only",
        "region",
    ];
    if let Some(p) = points {
        args.extend(["--points", p]);
    }
    remora(&args)
}

#[test]
fn a_negative_control_missed_at_few_points_is_blamed_on_the_points() {
    let few = region_target(Some("1"));
    let (out, err) = (text(&few.stdout), text(&few.stderr));
    assert!(!few.status.success(), "{out}");
    assert!(out.contains("wrong method not caught"), "{out}");
    assert!(
        err.contains("1 checker targets failed (1 of them negative controls not caught: with --points 1, fewer than the default"),
        "{err}"
    );
    // At the default the window is found: the miss above was the points' doing.
    let default = region_target(None);
    let out = text(&default.stdout);
    assert!(default.status.success(), "{out}\n{}", text(&default.stderr));
    assert!(out.contains("caught:"), "{out}");
}
