//! The ten RPC designs of seed 003 (§3 Figure 2 and §4 Figure 4) as data.

use std::fmt;
use std::str::FromStr;

/// Which RDMA primitive carries the request; seed 003 §5.1 compares designs only within a
/// family ("We only compare SFlush-RPC, S-RFlush-RPC with DaRPC and FaSST ...").
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Requests travel as RDMA SENDs.
    Send,
    /// Requests travel as RDMA WRITEs (or WRITE_WITH_IMM).
    Write,
}

/// Whether a Flush primitive runs natively in the responder's RNIC (as seed 003 §4.1
/// proposes) or in the emulated form the paper measured on today's hardware (§4.1.3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FlushForm {
    /// The proposed RNIC primitive.
    Native,
    /// WFlush as a READ of the last byte, SFlush as an address-lookup delay plus a READ,
    /// RFlush by the responder's CPU (seed 003 §4.1.3).
    Emulated,
}

/// One RPC design.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Design {
    /// DaRPC: SEND request, SEND reply (Figure 2(a)).
    DaRpc,
    /// FaRM: RC WRITE into a polled ring, WRITE reply (Figure 2(b)).
    Farm,
    /// HERD: UC WRITE request, UD SEND reply (Figure 2(c)).
    Herd,
    /// FaSST: UD SEND request and reply (Figure 2(d)); objects up to the 4 KB UD MTU.
    Fasst,
    /// L5: WRITE of the message plus a WRITE to a polled mailbox, WRITE reply (Figure 2(e)).
    L5,
    /// RFP: WRITE request; the client READs the result (Figure 2(f)).
    Rfp,
    /// ScaleRPC: warm-up phase (WRITE of the address, server READs the data) then process
    /// phases as FaRM; one warm-up per 100 process phases (§5.1) (Figure 2(g)).
    ScaleRpc,
    /// Octopus: WRITE_WITH_IMM request, reply by WRITE_WITH_IMM (Figure 2(h)).
    Octopus,
    /// SFlush-RPC: SEND + SFlush into the redo log (Figure 4(a)).
    SFlushRpc,
    /// WFlush-RPC: WRITE into the redo log + WFlush (Figure 4(b)).
    WFlushRpc,
    /// S-RFlush-RPC: SEND; the receiver persists and notifies (Figure 4(c)).
    SRFlushRpc,
    /// W-RFlush-RPC: WRITE; the receiver persists and notifies (Figure 4(c)).
    WRFlushRpc,
}

impl Design {
    /// Every design, baselines first, in the order of seed 003's figures.
    pub const ALL: [Design; 12] = [
        Design::L5,
        Design::Rfp,
        Design::Octopus,
        Design::Farm,
        Design::ScaleRpc,
        Design::Herd,
        Design::DaRpc,
        Design::Fasst,
        Design::SRFlushRpc,
        Design::SFlushRpc,
        Design::WRFlushRpc,
        Design::WFlushRpc,
    ];

    /// Seed 003's four durable RPCs (§4.2): a PM redo log, early durability
    /// acknowledgement.
    pub const DURABLE: [Design; 4] = [
        Design::SFlushRpc,
        Design::WFlushRpc,
        Design::SRFlushRpc,
        Design::WRFlushRpc,
    ];

    /// The name the paper uses.
    pub fn name(self) -> &'static str {
        match self {
            Design::DaRpc => "DaRPC",
            Design::Farm => "FaRM",
            Design::Herd => "HERD",
            Design::Fasst => "FaSST",
            Design::L5 => "L5",
            Design::Rfp => "RFP",
            Design::ScaleRpc => "ScaleRPC",
            Design::Octopus => "Octopus",
            Design::SFlushRpc => "SFlush-RPC",
            Design::WFlushRpc => "WFlush-RPC",
            Design::SRFlushRpc => "S-RFlush-RPC",
            Design::WRFlushRpc => "W-RFlush-RPC",
        }
    }

    /// The primitive family the request travels in.
    pub fn family(self) -> Family {
        match self {
            Design::DaRpc | Design::Fasst | Design::SFlushRpc | Design::SRFlushRpc => Family::Send,
            _ => Family::Write,
        }
    }

    /// True for seed 003's durable RPCs (redo log, early durability acknowledgement).
    pub fn is_durable_rpc(self) -> bool {
        Self::DURABLE.contains(&self)
    }

    /// The largest object the design carries, if limited (FaSST: a Put must fit one 4 KB
    /// UD datagram, §5.1, with its 16-byte cell header, 8-byte trailer and 32-byte request
    /// header: 4040 bytes).
    pub fn max_object(self) -> Option<u64> {
        match self {
            Design::Fasst => Some(4096 - 16 - 8 - 32),
            _ => None,
        }
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Design {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Design::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<_> = Design::ALL.iter().map(|d| d.name()).collect();
                format!(
                    "unknown RPC design {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_families_split_as_the_paper_compares() {
        for d in Design::ALL {
            assert_eq!(d.name().parse::<Design>().unwrap(), d);
        }
        let send: Vec<_> = Design::ALL
            .into_iter()
            .filter(|d| d.family() == Family::Send)
            .map(Design::name)
            .collect();
        assert_eq!(send, ["DaRPC", "FaSST", "S-RFlush-RPC", "SFlush-RPC"]);
        assert!("nope".parse::<Design>().unwrap_err().contains("DaRPC"));
    }
}
