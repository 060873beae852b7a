//! Loading a latency profile: a value that the model cannot use must be refused by
//! `LatencyProfile::from_toml` with an error naming the field, not accepted and then
//! overflow or abort where the model uses it.

use remora_model::config::PersistenceDomain;
use remora_model::hierarchy::MemoryHierarchy;
use remora_model::prng::Prng;
use remora_model::profile::{LatencyProfile, ProfileError, DEFAULT_TOML};

fn refused_naming(text: &str, field: &str) {
    match LatencyProfile::from_toml(text) {
        Err(e @ ProfileError::Invalid { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(field), "error does not name {field}: {msg}");
        }
        Err(e) => panic!("refused, but not naming {field}: {e}"),
        Ok(p) => panic!(
            "accepted {field} = huge (wire_time(64) = {:?})",
            p.wire_time(64)
        ),
    }
}

#[test]
fn a_huge_header_is_refused_not_wrapped_in_wire_time() {
    // (64 + 2^61) * 8 wraps a u64 to 512 bits: a 2-EiB header was serialized in 3 ns,
    // less than the default's 64-byte one.
    let t = DEFAULT_TOML.replace("header_bytes = 64", "header_bytes = 2305843009213693952");
    refused_naming(&t, "network.header_bytes");
}

#[test]
fn a_huge_pm_geometry_is_refused_before_the_hierarchy_allocates_it() {
    // 2^40 channels (or banks) validated, and `MemoryHierarchy::new` then allocated one
    // entry per channel and bank: the process aborted on allocation failure.
    let t = DEFAULT_TOML.replace("channels = 2", "channels = 1099511627776");
    refused_naming(&t, "pm.channels");
    let t = DEFAULT_TOML.replace("banks_per_channel = 8", "banks_per_channel = 1099511627776");
    refused_naming(&t, "pm.banks_per_channel");
}

#[test]
fn each_zero_geometry_field_is_named_alone() {
    let t = DEFAULT_TOML.replace("banks_per_channel = 8", "banks_per_channel = 0");
    let e = LatencyProfile::from_toml(&t).unwrap_err().to_string();
    assert!(
        e.contains("pm.banks_per_channel") && !e.contains("pm.channels"),
        "{e}"
    );
}

#[test]
fn the_largest_accepted_geometry_builds_a_hierarchy() {
    let t = DEFAULT_TOML
        .replace("channels = 2", "channels = 64")
        .replace("banks_per_channel = 8", "banks_per_channel = 1024");
    let p = LatencyProfile::from_toml(&t).unwrap();
    let _ = MemoryHierarchy::new(PersistenceDomain::Dmp, false, &p, Prng::from_seed(1));
}
