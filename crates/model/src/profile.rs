//! Latency profiles: named hardware parameters loaded from TOML (see `profiles/`).
//!
//! A profile is data, not code: the simulator predicts latency from it, and a real-time
//! calibration run can write a new one. Unknown or missing keys are errors, so a typo
//! cannot silently fall back to a default.

use crate::time::Duration;
use serde::{Deserialize, Serialize};

/// The profile shipped with remora, cited value by value in `profiles/default.toml`.
pub const DEFAULT_TOML: &str = include_str!("../../../profiles/default.toml");
/// seed 000 §4.2's 100 Gb/s ConnectX-4 network with the default host.
pub const CX4_100G_TOML: &str = include_str!("../../../profiles/cx4-100g.toml");
/// The default with a data path slow enough for its windows to be seen over TCP.
pub const SLOW_DATA_PATH_TOML: &str = include_str!("../../../profiles/slow-data-path.toml");

/// Every latency and size the model uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyProfile {
    /// Profile name, printed in reports.
    pub name: String,
    /// The wire.
    pub network: Network,
    /// The RNIC and PCIe.
    pub rnic: Rnic,
    /// IIO, LLC, memory controller and DRAM.
    pub host: Host,
    /// Persistent memory geometry and timing.
    pub pm: Pm,
    /// Server software and CPU instruction costs.
    pub cpu: Cpu,
}

/// Network parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// Round trip of a minimal message between two NICs (propagation + switching).
    pub nic_rtt_ns: u64,
    /// Link bandwidth in Gb/s.
    pub link_gbps: u64,
    /// Header bytes added to every message on the wire.
    pub header_bytes: u64,
}

/// RNIC parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rnic {
    /// Per-message processing time in the RNIC pipeline.
    pub proc_ns: u64,
    /// PCIe DMA bandwidth in Gb/s.
    pub pcie_gbps: u64,
    /// One-way PCIe latency between the RNIC and the IIO.
    pub pcie_ns: u64,
    /// Delay before a requester retries after a receiver-not-ready NAK; positive, since it
    /// is all that separates a refused request from its retry.
    pub rnr_retry_delay_ns: u64,
    /// How long a requester waits for an ACK before declaring the peer dead.
    pub ack_timeout_ns: u64,
    /// One in this many inbound DMAs misses the RNIC's translation cache (0: never).
    pub translation_miss_every: u64,
    /// Extra DMA start delay of a translation miss.
    pub translation_miss_ns: u64,
    /// Time the responder's RNIC takes to find where a SEND landed (the buffer of the
    /// receive it consumed) before an SFlush can persist it (seed 003 §4.1.3).
    pub sflush_lookup_ns: u64,
}

/// Host memory-system parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// IIO buffer time before an inbound write becomes globally visible.
    pub iio_ns: u64,
    /// LLC access time.
    pub llc_ns: u64,
    /// Time from IIO/LLC to a memory controller's write-pending queue.
    pub imc_ns: u64,
    /// Upper bound of the seeded extra delay on that path, per write.
    pub imc_jitter_ns: u64,
    /// Mean residency of a dirty DDIO line in the LLC before eviction.
    pub llc_residency_ns: u64,
    /// Capacity of the DDIO share of the LLC, in 64-byte lines.
    pub ddio_lines: u64,
    /// DRAM access time.
    pub dram_ns: u64,
}

/// Persistent-memory parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pm {
    /// Memory channels with PM DIMMs.
    pub channels: u64,
    /// Banks per channel.
    pub banks_per_channel: u64,
    /// Row size in bytes.
    pub row_bytes: u64,
    /// Channel interleave granularity in bytes.
    pub interleave_bytes: u64,
    /// Write-pending-queue entries per channel (the ADR-protected buffer).
    pub wpq_entries: u64,
    /// Read latency seen by a reader.
    pub read_ns: u64,
    /// Write latency seen by a writer that waits for the media.
    ///
    /// Not used by the model, kept so the cited figure stays with its source: no writer
    /// waits for the medium (a write is durable once in the ADR-protected WPQ, or earlier
    /// under eADR and WSP, seed 000 §2), and the WPQ's drain to the medium is paced by the
    /// banks' busy times, `row_hit_ns` and `write_conflict_ns` (seed 004 Table III), which
    /// stand for the media write. Changing it changes no prediction.
    pub write_ns: u64,
    /// Bank busy time for an access that hits the open row.
    pub row_hit_ns: u64,
    /// Bank busy time for a read that must open a new row.
    ///
    /// Not used by the model, kept so the cited figure stays with its source: only writes
    /// book the PM banks (their drain from the WPQ); a read takes `read_ns` and occupies no
    /// bank, so no read meets a row conflict. Changing it changes no prediction.
    pub read_conflict_ns: u64,
    /// Bank busy time for a write that must open a new row.
    pub write_conflict_ns: u64,
}

/// CPU and server-software parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    /// Time for a busy-polling thread to notice a completion.
    pub poll_ns: u64,
    /// Time to dispatch one received message.
    pub msg_handle_ns: u64,
    /// Issue cost of one cache-line write-back.
    pub clwb_ns: u64,
    /// Cost of a store fence once its write-backs are done.
    pub sfence_ns: u64,
    /// memcpy bandwidth, bytes per nanosecond.
    pub memcpy_bytes_per_ns: u64,
}

/// A profile that failed to load.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Not valid TOML, or a key missing, unknown or of the wrong type.
    #[error("latency profile is not valid: {0}")]
    Toml(#[from] toml::de::Error),
    /// A value outside its range.
    #[error("latency profile {profile:?}: {field} {why}")]
    Invalid {
        /// Profile name.
        profile: String,
        /// The offending key.
        field: &'static str,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl LatencyProfile {
    /// Most memory channels a profile may give (the hierarchy keeps one entry per channel).
    pub const MAX_PM_CHANNELS: u64 = 64;
    /// Most banks per channel a profile may give (the hierarchy keeps one entry per bank).
    pub const MAX_PM_BANKS: u64 = 1024;
    /// Largest per-message header (an InfiniBand one is under 100 bytes).
    pub const MAX_HEADER_BYTES: u64 = 65536;

    /// Parses and validates a profile.
    pub fn from_toml(text: &str) -> Result<Self, ProfileError> {
        let p: LatencyProfile = toml::from_str(text)?;
        p.validate()?;
        Ok(p)
    }

    /// The shipped default profile (seed 001 Table 5, seed 004 Table III).
    pub fn default_profile() -> Self {
        Self::from_toml(DEFAULT_TOML).expect("shipped default profile is valid")
    }

    /// Looks up a shipped profile by name.
    pub fn builtin(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Self::default_profile()),
            "cx4-100g" => Some(Self::from_toml(CX4_100G_TOML).expect("shipped profile is valid")),
            "slow-data-path" => {
                Some(Self::from_toml(SLOW_DATA_PATH_TOML).expect("shipped profile is valid"))
            }
            _ => None,
        }
    }

    /// The profile as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("profile serializes")
    }

    /// Checks every value's range, as [`from_toml`](Self::from_toml) does: for a profile
    /// made or changed in code (a calibration from a measurement).
    pub fn validate(&self) -> Result<(), ProfileError> {
        let bad = |field, why| {
            Err(ProfileError::Invalid {
                profile: self.name.clone(),
                field,
                why,
            })
        };
        let pow2 = |v: u64| v.is_power_of_two();
        if self.network.link_gbps == 0 {
            return bad("network.link_gbps", "must be positive");
        }
        if self.rnic.pcie_gbps == 0 {
            return bad("rnic.pcie_gbps", "must be positive");
        }
        if self.network.header_bytes > Self::MAX_HEADER_BYTES {
            // Beyond this `wire_time` of a largest message overflows.
            return bad("network.header_bytes", "must be at most 65536");
        }
        if self.pm.channels == 0 {
            return bad("pm.channels", "must be positive");
        }
        if self.pm.banks_per_channel == 0 {
            return bad("pm.banks_per_channel", "must be positive");
        }
        // The memory system keeps an entry per channel and per bank.
        if self.pm.channels > Self::MAX_PM_CHANNELS {
            return bad("pm.channels", "must be at most 64");
        }
        if self.pm.banks_per_channel > Self::MAX_PM_BANKS {
            return bad("pm.banks_per_channel", "must be at most 1024");
        }
        if !pow2(self.pm.row_bytes) || !pow2(self.pm.interleave_bytes) {
            return bad("pm.row_bytes/interleave_bytes", "must be powers of two");
        }
        if self.pm.interleave_bytes < 64 {
            return bad("pm.interleave_bytes", "must be at least one 64-byte line");
        }
        if self.pm.wpq_entries == 0 || self.host.ddio_lines == 0 {
            return bad("pm.wpq_entries/host.ddio_lines", "must be positive");
        }
        if self.cpu.memcpy_bytes_per_ns == 0 {
            return bad("cpu.memcpy_bytes_per_ns", "must be positive");
        }
        if self.rnic.rnr_retry_delay_ns == 0 {
            // The only wait between an RNR NAK and the retry it causes: with none, a SEND
            // refused on a free data path is retried at the instant it was refused, for
            // ever, and the simulator's clock never reaches the receive it waits for.
            return bad(
                "rnic.rnr_retry_delay_ns",
                "must be positive: a requester refused with an RNR NAK waits this long \
                 before it retries, and with 0 it retries at once, back to back \
                 (InfiniBand's shortest min_rnr_timer is 0.01 ms, 10000 ns)",
            );
        }
        if self.rnic.ack_timeout_ns == 0 {
            return bad("rnic.ack_timeout_ns", "must be positive");
        }
        // The simulator's requester never retransmits (a lossless fabric): a response later
        // than the time-out fails its request. A FLUSH waits for a line's way to the WPQ
        // (with a translation miss on the way in, if any) and answers over PCIe; a READ used
        // as a FLUSH then reads the medium, and an SFlush first looks up its landing buffer.
        let miss = if self.rnic.translation_miss_every > 0 {
            self.rnic.translation_miss_ns
        } else {
            0
        };
        let flush_wait = [
            self.network.nic_rtt_ns,
            self.rnic.proc_ns,
            miss,
            self.rnic.pcie_ns.saturating_mul(2),
            self.host.iio_ns,
            self.host.imc_ns,
            self.host.imc_jitter_ns,
            [
                self.pm.read_ns,
                self.host.dram_ns,
                self.host.llc_ns,
                self.rnic.sflush_lookup_ns,
            ]
            .into_iter()
            .max()
            .unwrap_or(0),
        ]
        .into_iter()
        .fold(0u64, u64::saturating_add);
        if self.rnic.ack_timeout_ns <= flush_wait {
            return bad(
                "rnic.ack_timeout_ns",
                "must exceed the longest a FLUSH can wait on this profile's data path \
                 (network.nic_rtt_ns + rnic.proc_ns + rnic.translation_miss_ns + \
                 2 x rnic.pcie_ns + host.iio_ns + host.imc_ns + host.imc_jitter_ns + the \
                 largest of pm.read_ns, host.dram_ns, host.llc_ns and rnic.sflush_lookup_ns): \
                 the simulator's requester never retransmits, so a later response fails its \
                 request (RetryExcErr)",
            );
        }
        Ok(())
    }

    /// One-way propagation between two NICs: half the round trip.
    pub fn one_way(&self) -> Duration {
        Duration::from_nanos(self.network.nic_rtt_ns / 2)
    }

    /// Time to serialize `bytes` of payload (plus headers) onto a link, rounded up.
    pub fn wire_time(&self, bytes: u64) -> Duration {
        let bits = (bytes + self.network.header_bytes) * 8;
        Duration::from_nanos(bits.div_ceil(self.network.link_gbps))
    }

    /// Time to move `bytes` across PCIe at its bandwidth (latency excluded), rounded up.
    pub fn pcie_time(&self, bytes: u64) -> Duration {
        Duration::from_nanos((bytes * 8).div_ceil(self.rnic.pcie_gbps))
    }

    /// CPU time to copy `bytes`.
    pub fn memcpy_time(&self, bytes: u64) -> Duration {
        Duration::from_nanos(bytes.div_ceil(self.cpu.memcpy_bytes_per_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_profiles_load_and_carry_seed_values() {
        let p = LatencyProfile::default_profile();
        assert_eq!(p.network.nic_rtt_ns, 1000);
        assert_eq!(p.network.link_gbps, 200);
        assert_eq!((p.pm.read_ns, p.pm.write_ns), (140, 400));
        assert_eq!(p.host.dram_ns, 100);
        assert_eq!((p.pm.banks_per_channel, p.pm.row_bytes), (8, 2048));
        let cx4 = LatencyProfile::builtin("cx4-100g").unwrap();
        assert_eq!(cx4.network.link_gbps, 100);
        assert!(LatencyProfile::builtin("nope").is_none());
    }

    #[test]
    fn every_shipped_value_has_a_cited_source() {
        // Each key line must follow a comment naming a seed or saying "assumption".
        for text in [DEFAULT_TOML, CX4_100G_TOML, SLOW_DATA_PATH_TOML] {
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let is_key = line.contains(" = ") && !line.starts_with('#');
                if is_key && !line.starts_with("name") {
                    let prev = lines[i - 1];
                    assert!(
                        prev.starts_with('#')
                            && (prev.contains("seed") || prev.contains("assumption")),
                        "value without a source: {line}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_field_the_model_does_not_read_says_so() {
        // A user tuning one of these must not believe it changes a prediction: its comment
        // in every shipped profile says the model does not use it.
        for text in [DEFAULT_TOML, CX4_100G_TOML, SLOW_DATA_PATH_TOML] {
            let lines: Vec<&str> = text.lines().collect();
            for key in ["write_ns", "read_conflict_ns"] {
                let at = lines
                    .iter()
                    .position(|l| l.starts_with(&format!("{key} = ")))
                    .unwrap_or_else(|| panic!("no {key} in a shipped profile"));
                let start = lines[..at]
                    .iter()
                    .rposition(|l| !l.starts_with('#'))
                    .map_or(0, |i| i + 1);
                let comment = lines[start..at].join(" ");
                assert!(
                    comment.to_lowercase().contains("not used by the model"),
                    "pm.{key}: its comment does not say the model ignores it: {comment}"
                );
            }
        }
    }

    #[test]
    fn an_ack_time_out_shorter_than_the_data_path_is_refused() {
        // The slow profile as it shipped before: its FLUSHes outlasted its 1 ms time-out.
        let old =
            SLOW_DATA_PATH_TOML.replace("ack_timeout_ns = 1073741824", "ack_timeout_ns = 1048576");
        assert_ne!(old, SLOW_DATA_PATH_TOML);
        match LatencyProfile::from_toml(&old) {
            Err(ProfileError::Invalid { field, .. }) => assert_eq!(field, "rnic.ack_timeout_ns"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_wait_of_a_flush_counts_against_the_ack_time_out() {
        // Each alone outlasts the default's 1 ms time-out: a translation miss on the way
        // in, a READ used as a FLUSH reading the medium, an SFlush's lookup.
        for (from, to) in [
            ("translation_miss_ns = 800", "translation_miss_ns = 2000000"),
            ("read_ns = 140", "read_ns = 2000000"),
            ("sflush_lookup_ns = 7000", "sflush_lookup_ns = 2000000"),
        ] {
            let t = DEFAULT_TOML.replace(from, to);
            assert_ne!(t, DEFAULT_TOML);
            match LatencyProfile::from_toml(&t) {
                Err(ProfileError::Invalid { field, .. }) => {
                    assert_eq!(field, "rnic.ack_timeout_ns", "{to}")
                }
                other => panic!("{to}: {other:?}"),
            }
        }
        // A miss that never happens does not count.
        let never = DEFAULT_TOML
            .replace("translation_miss_every = 16", "translation_miss_every = 0")
            .replace("translation_miss_ns = 800", "translation_miss_ns = 2000000");
        LatencyProfile::from_toml(&never).unwrap();
    }

    #[test]
    fn round_trips_through_toml_and_rejects_typos() {
        let p = LatencyProfile::default_profile();
        assert_eq!(LatencyProfile::from_toml(&p.to_toml()).unwrap(), p);
        let typo = DEFAULT_TOML.replace("nic_rtt_ns", "nic_rtt_nss");
        assert!(LatencyProfile::from_toml(&typo).is_err());
        let zero = DEFAULT_TOML.replace("link_gbps = 200", "link_gbps = 0");
        let e = LatencyProfile::from_toml(&zero).unwrap_err().to_string();
        assert!(e.contains("link_gbps"), "{e}");
    }

    #[test]
    fn wire_time_rounds_up() {
        let p = LatencyProfile::default_profile();
        // (64 + 64 header) bytes * 8 / 200 Gb/s = 5.12 ns -> 6 ns.
        assert_eq!(p.wire_time(64), Duration::from_nanos(6));
    }
}
