//! The verdict that judges the paper's numeric claims (seed 003 §5) against the model:
//! it must be able to fail. A claim of a reduction is not met by no change or an increase,
//! and a claim of a few percent is not met by nothing.

use remora_rpc::bench::report::verdict;

#[test]
fn a_change_of_the_opposite_sign_never_agrees() {
    // Figure 10: S-RFlush-RPC about 8% faster than DaRPC. A model where it is 2% slower
    // (or exactly as fast) contradicts the claim.
    assert_eq!(verdict((2.0, 2.0), (-8.0, -8.0)), "disagrees");
    assert_ne!(verdict((0.0, 0.0), (-10.0, -10.0)), "agrees");
    // Figure 11: "−7% to −23%"; a durable design 3% slower is not a reduction.
    assert_ne!(verdict((3.0, 3.0), (-23.0, -7.0)), "agrees");
    // An increase claim: +42% is not met by −5%.
    assert_eq!(verdict((-5.0, -5.0), (42.0, 42.0)), "disagrees");
}

#[test]
fn a_small_claim_is_not_met_by_a_tenth_of_it() {
    // "about −8%" against a model −1%: the effect the paper reports is absent.
    assert_ne!(verdict((-1.0, -1.0), (-8.0, -8.0)), "agrees");
    // But a model figure close to it agrees.
    assert_eq!(verdict((-7.0, -6.0), (-8.0, -8.0)), "agrees");
}

#[test]
fn large_claims_keep_ten_points_of_slack() {
    assert_eq!(verdict((12.0, 95.0), (20.0, 90.0)), "agrees");
    assert_eq!(verdict((1.0, 35.0), (20.0, 90.0)), "partly");
    assert_eq!(verdict((1.0, 7.0), (42.0, 42.0)), "disagrees");
    assert_eq!(verdict((-55.0, -40.0), (-49.0, -49.0)), "agrees");
    assert_eq!(verdict((5.0, 30.0), (0.0, 7.0)), "partly");
}
