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

/// Everything a server's data path answers for one workload, in order: DMA writes to one
/// bank's rows (row conflicts on the way to PM), FLUSHes, READs of PM, CPU write-backs, and
/// how many of the lines are persistent as the queues drain.
fn data_path_answers(p: &LatencyProfile, domain: PersistenceDomain, ddio: bool) -> Vec<u64> {
    use remora_model::hierarchy::{FlushPlacement, FlushRange, Space};
    use remora_model::rnic::PM_BASE;
    use remora_model::time::Instant;
    let mut h = MemoryHierarchy::new(domain, ddio, p, Prng::from_seed(7));
    let row = p.pm.row_bytes * p.pm.channels * p.pm.banks_per_channel;
    let mut out = Vec::new();
    let mut t = Instant::from_nanos(1_000);
    for i in 0..64u64 {
        // Alternate rows of one bank: every access opens a new row.
        let addr = PM_BASE + (i % 4) * row + (i / 4) * 64;
        out.push(
            h.dma_write(t, Space::Pm, addr, &[i as u8; 64])
                .visible
                .as_nanos(),
        );
        if i % 8 == 7 {
            let f = h.flush_done(t, FlushPlacement::Persistence, FlushRange::all(Space::Pm));
            out.push(f.as_nanos());
            let (data, r) = h.dma_read(t, Space::Pm, addr, 64);
            out.push(r.as_nanos());
            out.push(data[0] as u64);
            let issue = h.clwb(t, addr, 64);
            let fenced = h.sfence(t + issue);
            out.push(fenced.as_nanos());
            // The hierarchy's clock only goes forward.
            t = t.max(fenced).max(f).max(r);
        }
        t = Instant::from_nanos(t.as_nanos() + 150);
    }
    for k in 0..40u64 {
        let at = Instant::from_nanos(t.as_nanos() + k * 50);
        let kept = (0..64u64)
            .filter(|&i| {
                let addr = PM_BASE + (i % 4) * row + (i / 4) * 64;
                h.is_persistent(at, addr, 64)
            })
            .count();
        out.push(kept as u64);
    }
    out
}

/// `pm.write_ns` and `pm.read_conflict_ns` are loaded (and cited) but the model reads
/// neither: no writer waits for the medium, and PM reads take `pm.read_ns` without
/// occupying a bank. Changing them changes no answer of the data path; the profile's
/// documentation says so (`profile.rs`, `every_field_the_model_does_not_read_says_so`).
#[test]
fn the_pm_fields_the_model_does_not_read_change_nothing() {
    let base = LatencyProfile::default_profile();
    let mut tuned = base.clone();
    tuned.pm.write_ns = 400_000;
    tuned.pm.read_conflict_ns = 100_000;
    // The fields the model does read change the answers: the workload can tell.
    let mut slower = base.clone();
    slower.pm.write_conflict_ns *= 100;
    slower.pm.read_ns *= 100;
    for (domain, ddio) in [
        (PersistenceDomain::Dmp, false),
        (PersistenceDomain::Dmp, true),
        (PersistenceDomain::Mhp, false),
        (PersistenceDomain::Wsp, false),
    ] {
        let a = data_path_answers(&base, domain, ddio);
        assert_eq!(
            a,
            data_path_answers(&tuned, domain, ddio),
            "{domain:?} {ddio}"
        );
        if domain == PersistenceDomain::Dmp && !ddio {
            assert_ne!(a, data_path_answers(&slower, domain, ddio));
        }
    }
}
