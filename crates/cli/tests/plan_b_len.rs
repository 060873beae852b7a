//! `remora plan --b-len`: a length no method can carry is refused with a reason, never a
//! panic, a run out of memory, or an empty plan that exits as a success; and the flag is
//! refused where it means nothing (singleton updates).

mod common;
use common::{remora, text};

fn plan(b_len: &str, update: &str) -> std::process::Output {
    remora(&[
        "plan",
        "--config",
        "DMP+DDIO+PM-RQWRB",
        "--update",
        update,
        "--b-len",
        b_len,
    ])
}

#[test]
fn a_huge_b_len_is_an_error_not_a_panic() {
    let out = plan("18446744073709551615", "compound");
    assert_ne!(out.status.code(), Some(101), "{}", text(&out.stderr));
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("--b-len"), "{err}");
}

#[test]
fn a_b_len_past_the_simulated_region_is_not_an_empty_successful_plan() {
    let out = plan("2000000", "compound");
    assert!(!out.status.success(), "exit 0 with: {}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("--b-len"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn b_len_is_refused_for_singleton_updates_it_does_not_apply_to() {
    let out = plan("4096", "singleton");
    assert!(
        !out.status.success(),
        "--b-len ignored: {}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains("--b-len"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_compound_b_len_in_range_still_plans() {
    let out = plan("4096", "compound");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("Chosen:"),
        "{}",
        text(&out.stdout)
    );
    let out = remora(&["plan", "--config", "DMP+DDIO+PM-RQWRB"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}
