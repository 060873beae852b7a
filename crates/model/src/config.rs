//! Server configurations: the three axes of seed 000 §3.1 (persistence domain, DDIO, where
//! receive-queue work-request buffers live) plus the transport and NIC capabilities that
//! decide which RDMA operations exist (seed 000 §2, §3.2 "iWARP", §3.4).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The part of the machine that survives a power failure (seed 000 §3.1.1).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PersistenceDomain {
    /// DIMM and memory-controller persistence: PM DIMMs plus the IMC write-pending queues,
    /// drained by ADR on power failure. Caches, IIO and RNIC buffers are lost.
    Dmp,
    /// Memory-hierarchy persistence (eADR): caches too. IIO and RNIC buffers are lost.
    Mhp,
    /// Whole-system persistence: everything that reached the RNIC survives.
    Wsp,
}

/// Where the responder's receive-queue work-request buffers (RQWRBs) live (seed 000 §3.1.3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum RqwrbPlacement {
    /// Volatile: a received message is lost in a power failure.
    Dram,
    /// Persistent: a received message in the persistence domain survives and can be replayed.
    Pm,
}

/// The RDMA transport. It changes completion semantics (seed 000 §3.2, "WSP").
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// A posted operation completes once the responder's RNIC received it.
    InfiniBand,
    /// As InfiniBand.
    RoCE,
    /// A posted operation may complete once the requester's transport (TCP/SCTP) accepted
    /// it, possibly before it left the requester.
    IWarp,
}

impl Transport {
    /// True when a posted operation's completion proves it reached the responder's RNIC.
    pub fn completion_implies_arrival(self) -> bool {
        !matches!(self, Transport::IWarp)
    }
}

/// Optional RNIC operations: the IBTA extensions discussed in seed 000 §2.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicCaps {
    /// RDMA FLUSH exists; without it FLUSH is emulated by an RDMA READ (seed 000 §3.4).
    pub native_flush: bool,
    /// RDMA ATOMIC WRITE (8 bytes, non-posted ordering).
    pub atomic_write: bool,
    /// Non-posted RDMA WRITE of any size.
    pub non_posted_write: bool,
}

impl NicCaps {
    /// Every extension present: the setting the taxonomy of seed 000 assumes.
    pub const ALL: NicCaps = NicCaps {
        native_flush: true,
        atomic_write: true,
        non_posted_write: true,
    };
    /// Today's hardware as seed 000 §4 ran it: no FLUSH, no ATOMIC WRITE.
    pub const LEGACY: NicCaps = NicCaps {
        native_flush: false,
        atomic_write: false,
        non_posted_write: false,
    };
}

impl Default for NicCaps {
    fn default() -> Self {
        NicCaps::ALL
    }
}

/// A responder's configuration: what a client must know to persist an update correctly.
/// As data (`serve --config-file`) an unknown key is refused: a misspelt `caps` table
/// would otherwise leave every NIC extension on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Persistence domain.
    pub domain: PersistenceDomain,
    /// Data Direct I/O: inbound DMA lands in the LLC instead of the memory controller.
    pub ddio: bool,
    /// Where receive buffers live.
    pub rqwrb: RqwrbPlacement,
    /// The fabric's transport.
    pub transport: Transport,
    /// The RNIC's optional operations.
    #[serde(default)]
    pub caps: NicCaps,
}

impl ServerConfig {
    /// The twelve configurations of seed 000 Table 1, in the table's order, on InfiniBand
    /// with every NIC extension (the setting Tables 2 and 3 assume).
    pub fn table1() -> Vec<ServerConfig> {
        let mut out = Vec::with_capacity(12);
        for domain in [
            PersistenceDomain::Dmp,
            PersistenceDomain::Mhp,
            PersistenceDomain::Wsp,
        ] {
            for ddio in [true, false] {
                for rqwrb in [RqwrbPlacement::Dram, RqwrbPlacement::Pm] {
                    out.push(ServerConfig {
                        domain,
                        ddio,
                        rqwrb,
                        transport: Transport::InfiniBand,
                        caps: NicCaps::ALL,
                    });
                }
            }
        }
        out
    }

    /// The configuration's name as in seed 000 Table 1, e.g. `DMP+DDIO+DRAM-RQWRB`
    /// (transport and capabilities are shown only when they differ from the table's).
    pub fn name(&self) -> String {
        let mut s = format!(
            "{}+{}+{}-RQWRB",
            match self.domain {
                PersistenceDomain::Dmp => "DMP",
                PersistenceDomain::Mhp => "MHP",
                PersistenceDomain::Wsp => "WSP",
            },
            if self.ddio { "DDIO" } else { "noDDIO" },
            match self.rqwrb {
                RqwrbPlacement::Dram => "DRAM",
                RqwrbPlacement::Pm => "PM",
            }
        );
        match self.transport {
            Transport::InfiniBand => {}
            Transport::RoCE => s.push_str("@roce"),
            Transport::IWarp => s.push_str("@iwarp"),
        }
        if self.caps != NicCaps::ALL {
            if !self.caps.native_flush {
                s.push_str(",no-flush");
            }
            if !self.caps.atomic_write {
                s.push_str(",no-atomic-write");
            }
            if !self.caps.non_posted_write {
                s.push_str(",no-np-write");
            }
        }
        s
    }
}

impl ServerConfig {
    /// The 5-byte encoding wire formats carry: domain, DDIO, RQWRB placement, transport,
    /// capability bits (FLUSH, ATOMIC WRITE, non-posted WRITE).
    pub fn to_bytes(&self) -> [u8; 5] {
        [
            match self.domain {
                PersistenceDomain::Dmp => 0,
                PersistenceDomain::Mhp => 1,
                PersistenceDomain::Wsp => 2,
            },
            self.ddio as u8,
            match self.rqwrb {
                RqwrbPlacement::Dram => 0,
                RqwrbPlacement::Pm => 1,
            },
            match self.transport {
                Transport::InfiniBand => 0,
                Transport::RoCE => 1,
                Transport::IWarp => 2,
            },
            self.caps.native_flush as u8
                | (self.caps.atomic_write as u8) << 1
                | (self.caps.non_posted_write as u8) << 2,
        ]
    }

    /// Decodes [`to_bytes`](Self::to_bytes); names the first field out of range.
    pub fn from_bytes(b: [u8; 5]) -> Result<ServerConfig, &'static str> {
        let domain = match b[0] {
            0 => PersistenceDomain::Dmp,
            1 => PersistenceDomain::Mhp,
            2 => PersistenceDomain::Wsp,
            _ => return Err("persistence domain"),
        };
        let ddio = match b[1] {
            0 => false,
            1 => true,
            _ => return Err("ddio"),
        };
        let rqwrb = match b[2] {
            0 => RqwrbPlacement::Dram,
            1 => RqwrbPlacement::Pm,
            _ => return Err("rqwrb"),
        };
        let transport = match b[3] {
            0 => Transport::InfiniBand,
            1 => Transport::RoCE,
            2 => Transport::IWarp,
            _ => return Err("transport"),
        };
        if b[4] & !7 != 0 {
            return Err("capabilities");
        }
        let caps = NicCaps {
            native_flush: b[4] & 1 != 0,
            atomic_write: b[4] & 2 != 0,
            non_posted_write: b[4] & 4 != 0,
        };
        Ok(ServerConfig {
            domain,
            ddio,
            rqwrb,
            transport,
            caps,
        })
    }
}

impl fmt::Display for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Why a configuration name did not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad server configuration {input:?}: {why} (expected e.g. DMP+DDIO+DRAM-RQWRB, MHP+noDDIO+PM-RQWRB@iwarp,no-flush)")]
pub struct ParseConfigError {
    input: String,
    why: &'static str,
}

impl FromStr for ServerConfig {
    type Err = ParseConfigError;

    /// Parses the form [`ServerConfig::name`] prints; case-insensitive, `¬DDIO` accepted.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |why| ParseConfigError {
            input: input.to_string(),
            why,
        };
        let lower = input.trim().to_ascii_lowercase();
        let (base, caps_part) = match lower.split_once(',') {
            Some((b, c)) => (b.to_string(), Some(c.to_string())),
            None => (lower.clone(), None),
        };
        let (base, transport) = match base.split_once('@') {
            Some((b, "ib" | "infiniband")) => (b.to_string(), Transport::InfiniBand),
            Some((b, "roce")) => (b.to_string(), Transport::RoCE),
            Some((b, "iwarp")) => (b.to_string(), Transport::IWarp),
            Some(_) => return Err(err("unknown transport (ib, roce, iwarp)")),
            None => (base, Transport::InfiniBand),
        };
        let parts: Vec<&str> = base.split('+').collect();
        let [d, dd, rq] = parts[..] else {
            return Err(err("need three '+'-separated parts"));
        };
        let domain = match d {
            "dmp" => PersistenceDomain::Dmp,
            "mhp" => PersistenceDomain::Mhp,
            "wsp" => PersistenceDomain::Wsp,
            _ => return Err(err("unknown persistence domain (DMP, MHP, WSP)")),
        };
        let ddio = match dd {
            "ddio" => true,
            "noddio" | "¬ddio" | "!ddio" => false,
            _ => return Err(err("DDIO part must be DDIO or noDDIO")),
        };
        let rqwrb = match rq {
            "dram-rqwrb" | "dram" => RqwrbPlacement::Dram,
            "pm-rqwrb" | "pm" => RqwrbPlacement::Pm,
            _ => return Err(err("receive buffers must be DRAM-RQWRB or PM-RQWRB")),
        };
        let mut caps = NicCaps::ALL;
        if let Some(c) = caps_part {
            for flag in c.split(',') {
                match flag {
                    "no-flush" => caps.native_flush = false,
                    "no-atomic-write" => caps.atomic_write = false,
                    "no-np-write" => caps.non_posted_write = false,
                    "legacy" => caps = NicCaps::LEGACY,
                    _ => return Err(err("unknown capability flag")),
                }
            }
        }
        Ok(ServerConfig {
            domain,
            ddio,
            rqwrb,
            transport,
            caps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table1_has_twelve_distinct_configs_in_paper_order() {
        let t = ServerConfig::table1();
        assert_eq!(t.len(), 12);
        let names: Vec<String> = t.iter().map(|c| c.name()).collect();
        assert_eq!(names[0], "DMP+DDIO+DRAM-RQWRB");
        assert_eq!(names[3], "DMP+noDDIO+PM-RQWRB");
        assert_eq!(names[11], "WSP+noDDIO+PM-RQWRB");
        let mut dedup = names.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), 12);
    }

    #[test]
    fn names_round_trip_through_parse() {
        let mut all = ServerConfig::table1();
        let mut odd = all[4];
        odd.transport = Transport::IWarp;
        odd.caps = NicCaps::LEGACY;
        all.push(odd);
        for c in all {
            assert_eq!(c.name().parse::<ServerConfig>().unwrap(), c, "{c}");
        }
        assert_eq!(
            "dmp+¬DDIO+pm".parse::<ServerConfig>().unwrap().name(),
            "DMP+noDDIO+PM-RQWRB"
        );
    }

    #[test]
    fn bad_names_are_rejected_with_a_reason() {
        let e = "XMP+DDIO+DRAM-RQWRB".parse::<ServerConfig>().unwrap_err();
        assert!(e.to_string().contains("persistence domain"), "{e}");
        assert!("DMP+DDIO".parse::<ServerConfig>().is_err());
        assert!("DMP+DDIO+DRAM@carrier-pigeon"
            .parse::<ServerConfig>()
            .is_err());
    }

    #[test]
    fn byte_encoding_round_trips_and_refuses_out_of_range_fields() {
        let mut all = ServerConfig::table1();
        let mut odd = all[7];
        odd.transport = Transport::RoCE;
        odd.caps = NicCaps::LEGACY;
        all.push(odd);
        for c in all {
            assert_eq!(ServerConfig::from_bytes(c.to_bytes()), Ok(c));
        }
        assert_eq!(
            ServerConfig::from_bytes([3, 0, 0, 0, 0]),
            Err("persistence domain")
        );
        assert_eq!(ServerConfig::from_bytes([0, 2, 0, 0, 0]), Err("ddio"));
        assert_eq!(
            ServerConfig::from_bytes([0, 0, 0, 0, 8]),
            Err("capabilities")
        );
    }

    #[test]
    fn config_is_toml_data() {
        let c = ServerConfig::table1()[5];
        let s = toml::to_string(&c).unwrap();
        assert!(s.contains("domain = \"MHP\""), "{s}");
        assert_eq!(toml::from_str::<ServerConfig>(&s).unwrap(), c);
    }
}
