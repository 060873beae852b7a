//! The server configurations of seed 000 Table 1, with what each axis means (seed 000 §3.1).

use remora_model::{NicCaps, PersistenceDomain, RqwrbPlacement, ServerConfig, Transport};
use std::fmt::Write;

/// What a persistence domain keeps through a power failure (seed 000 §3.1.1).
pub fn domain_meaning(d: PersistenceDomain) -> &'static str {
    match d {
        PersistenceDomain::Dmp => {
            "DMP: PM DIMMs + memory-controller write-pending queues (ADR); caches, IIO and RNIC buffers are lost"
        }
        PersistenceDomain::Mhp => {
            "MHP: the memory hierarchy including CPU caches (eADR); IIO and RNIC buffers are lost"
        }
        PersistenceDomain::Wsp => "WSP: the whole system, even what is still in the RNIC",
    }
}

/// Where inbound DMA lands with DDIO on or off (seed 000 §3.1.2).
pub fn ddio_meaning(ddio: bool) -> &'static str {
    if ddio {
        "DDIO on: inbound RDMA writes land in the last-level cache"
    } else {
        "DDIO off: inbound RDMA writes go to the memory controller"
    }
}

/// What the placement of receive-queue work-request buffers implies (seed 000 §3.1.3).
pub fn rqwrb_meaning(r: RqwrbPlacement) -> &'static str {
    match r {
        RqwrbPlacement::Dram => "DRAM-RQWRB: received messages are volatile",
        RqwrbPlacement::Pm => {
            "PM-RQWRB: received messages live in PM and survive once in the persistence domain"
        }
    }
}

/// The transport's completion semantics (seed 000 §3.2).
pub fn transport_meaning(t: Transport) -> &'static str {
    match t {
        Transport::InfiniBand => {
            "InfiniBand: a posted operation completes once the responder's RNIC received it"
        }
        Transport::RoCE => "RoCE: as InfiniBand",
        Transport::IWarp => {
            "iWARP: a posted operation may complete once the requester's transport accepted it"
        }
    }
}

/// The optional RNIC operations present.
pub fn caps_meaning(c: NicCaps) -> String {
    let mut have = Vec::new();
    let mut lack = Vec::new();
    for (on, name) in [
        (c.native_flush, "RDMA FLUSH"),
        (c.atomic_write, "RDMA ATOMIC WRITE"),
        (c.non_posted_write, "non-posted RDMA WRITE"),
    ] {
        if on {
            have.push(name);
        } else {
            lack.push(name);
        }
    }
    let mut s = if have.is_empty() {
        "no extensions".to_string()
    } else {
        have.join(", ")
    };
    if !lack.is_empty() {
        let _ = write!(s, " (without {})", lack.join(", "));
    }
    if !c.native_flush {
        s.push_str("; FLUSH is emulated by an RDMA READ (seed 000 §3.4)");
    }
    s
}

/// Seed 000 Table 1 as a Markdown table, followed by a legend of the three axes.
pub fn table1_markdown() -> String {
    let mut s = String::new();
    s.push_str("| # | Configuration | Persistence domain | DDIO | RQWRB |\n");
    s.push_str("|---|---|---|---|---|\n");
    for (i, c) in ServerConfig::table1().iter().enumerate() {
        let domain = match c.domain {
            PersistenceDomain::Dmp => "DMP (PM + IMC queues)",
            PersistenceDomain::Mhp => "MHP (+ CPU caches)",
            PersistenceDomain::Wsp => "WSP (whole system)",
        };
        let ddio = if c.ddio {
            "on (DMA → LLC)"
        } else {
            "off (DMA → memory controller)"
        };
        let rqwrb = match c.rqwrb {
            RqwrbPlacement::Dram => "DRAM (volatile)",
            RqwrbPlacement::Pm => "PM (persistent)",
        };
        let _ = writeln!(
            s,
            "| {} | `{}` | {domain} | {ddio} | {rqwrb} |",
            i + 1,
            c.name()
        );
    }
    s.push_str("\nSeed 000 Table 1, on InfiniBand with every NIC extension. The axes:\n\n");
    for d in [
        PersistenceDomain::Dmp,
        PersistenceDomain::Mhp,
        PersistenceDomain::Wsp,
    ] {
        let _ = writeln!(s, "- {}", domain_meaning(d));
    }
    for ddio in [true, false] {
        let _ = writeln!(s, "- {}", ddio_meaning(ddio));
    }
    for r in [RqwrbPlacement::Dram, RqwrbPlacement::Pm] {
        let _ = writeln!(s, "- {}", rqwrb_meaning(r));
    }
    s.push_str(
        "\nA name may add a transport and missing NIC extensions, e.g. \
         `MHP+noDDIO+PM-RQWRB@iwarp,no-flush` (check one with `remora configs --parse NAME`).\n",
    );
    s
}

/// A parsed configuration: its canonical name and every axis explained.
pub fn describe(c: &ServerConfig) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", c.name());
    let _ = writeln!(s, "  persistence domain  {}", domain_meaning(c.domain));
    let _ = writeln!(s, "  DDIO                {}", ddio_meaning(c.ddio));
    let _ = writeln!(s, "  receive buffers     {}", rqwrb_meaning(c.rqwrb));
    let _ = writeln!(
        s,
        "  transport           {}",
        transport_meaning(c.transport)
    );
    let _ = writeln!(s, "  NIC extensions      {}", caps_meaning(c.caps));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_lists_all_twelve_in_order() {
        let md = table1_markdown();
        let rows: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with("| ") && l.contains('`'))
            .collect();
        assert_eq!(rows.len(), 12);
        assert!(rows[0].contains("`DMP+DDIO+DRAM-RQWRB`"), "{}", rows[0]);
        assert!(rows[11].contains("`WSP+noDDIO+PM-RQWRB`"), "{}", rows[11]);
    }

    #[test]
    fn describe_names_the_axes() {
        let c: ServerConfig = "mhp+noddio+pm@iwarp,no-flush".parse().unwrap();
        let d = describe(&c);
        assert!(d.starts_with("MHP+noDDIO+PM-RQWRB@iwarp,no-flush\n"), "{d}");
        assert!(
            d.contains("eADR") && d.contains("iWARP") && d.contains("emulated"),
            "{d}"
        );
    }
}
