//! The RDMA Flush primitives of seed 003 §4.1 at library level: what each durable RPC
//! does to make a request durable, in the native form the paper proposes and in the
//! emulated form it measured (§4.1.3), and the responder-CPU flush DDIO requires (§4.4.2).
//!
//! | primitive | native (§4.1.1–4.1.2) | emulated (§4.1.3) |
//! |---|---|---|
//! | WFlush | IBTA RDMA FLUSH of the written range | RDMA READ of the last byte after the WRITE |
//! | SFlush | RNIC looks up the SEND's destination and persists it: **not in the model yet** | wait the address-lookup time (~7 µs), then an RDMA READ |
//! | RFlush | receiver RNIC persists and notifies: **not in the model yet** | receiver CPU polls, `clwb`+`sfence`, then notifies the sender |
//!
//! Native SFlush and RFlush need RNIC opcodes the model does not have yet;
//! [`FlushPlan::new`] refuses them with [`RpcError::Unsupported`] rather than faking them.
//! Wiring them is local to this module: add the opcode to [`SenderFlush`] (SFlush) or a
//! `ReceiverNic` arm next to the responder-CPU path (RFlush).
//!
//! **DDIO.** Every sender-side flush (native FLUSH or READ) pushes data out of the RNIC
//! and IIO buffers, but with DDIO on it lands in the LLC, which a DMP (ADR) server loses
//! (seed 000 Table 2). "To guarantee data persistence, the receiver's CPUs should perform
//! a clflush instruction to flush the data from the L3 cache to the PM" (§4.4.2): under
//! DMP+DDIO every plan therefore adds the responder-CPU step ([`FlushPlan::responder_cpu`]).

use crate::api::RpcError;
use crate::design::{Design, Family, FlushForm};
use remora_model::config::{PersistenceDomain, ServerConfig};
use remora_model::time::Duration;
use remora_verbs::{FlushPlacement, Opcode, Payload, Remote, SendWr, Sge};

/// Default SFlush address-lookup time: "we use a function sleep(0) to simulate the latency
/// (about 7 us) of addressing conservatively" (seed 003 §4.1.3).
pub const SFLUSH_LOOKUP: Duration = Duration::from_micros(7);

/// The three Flush primitives (seed 003 §4.1, Figure 3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Primitive {
    /// Sender-initiated, follows an RDMA WRITE (§4.1.1, Figure 3(b)).
    WFlush,
    /// Sender-initiated, follows an RDMA SEND; the RNIC must find the destination (§4.1.1,
    /// Figure 3(a)).
    SFlush,
    /// Receiver-initiated: the receiver persists and notifies (§4.1.2, Figure 3(c)).
    RFlush,
}

impl Primitive {
    /// The primitive a durable design is built on; `None` for a baseline.
    pub fn of(design: Design) -> Option<Primitive> {
        match design {
            Design::WFlushRpc => Some(Primitive::WFlush),
            Design::SFlushRpc => Some(Primitive::SFlush),
            Design::SRFlushRpc | Design::WRFlushRpc => Some(Primitive::RFlush),
            _ => None,
        }
    }
}

/// Parameters of the Flush primitives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlushParams {
    /// Native or emulated.
    pub form: FlushForm,
    /// Emulated SFlush's address-lookup wait (§4.1.3).
    pub sflush_lookup: Duration,
}

impl Default for FlushParams {
    fn default() -> Self {
        FlushParams {
            form: FlushForm::Emulated,
            sflush_lookup: SFLUSH_LOOKUP,
        }
    }
}

/// A flush the sender issues after its WRITEs or SENDs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SenderFlush {
    /// Native WFlush: IBTA RDMA FLUSH (persistence placement) of the written range.
    NativeWFlush,
    /// Emulated WFlush: RDMA READ of the last written byte (§4.1.3).
    ReadLastByte,
    /// Emulated SFlush: wait the address lookup, then RDMA READ of the last byte (§4.1.3).
    LookupThenRead(Duration),
}

impl SenderFlush {
    /// The wait before the work request (the emulated SFlush's address lookup).
    pub fn lookup(self) -> Option<Duration> {
        match self {
            SenderFlush::LookupThenRead(d) => Some(d),
            _ => None,
        }
    }

    /// The work request flushing `len` bytes at `remote`; `scratch` is a local buffer of
    /// at least one byte the READ forms read into.
    pub fn work_request(self, wr_id: u64, remote: Remote, len: u64, scratch: Sge) -> SendWr {
        assert!(len > 0, "a flush covers at least one byte");
        match self {
            SenderFlush::NativeWFlush => SendWr::new(
                wr_id,
                Opcode::Flush {
                    placement: FlushPlacement::Persistence,
                    len,
                },
                Payload::None,
                Some(remote),
            ),
            SenderFlush::ReadLastByte | SenderFlush::LookupThenRead(_) => {
                assert!(scratch.len >= 1, "READ emulation needs a scratch byte");
                let last = Remote {
                    addr: remote.addr + len - 1,
                    rkey: remote.rkey,
                };
                SendWr::new(
                    wr_id,
                    Opcode::Read,
                    Payload::Sge(Sge { len: 1, ..scratch }),
                    Some(last),
                )
            }
        }
    }
}

/// True when a server's CPU must write back the LLC before data is durable: DMP with
/// DDIO on (seed 003 §4.4.2; seed 000 Table 2).
pub fn needs_responder_cpu_flush(config: &ServerConfig) -> bool {
    config.domain == PersistenceDomain::Dmp && config.ddio
}

/// How one durable design makes a request durable on one server.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlushPlan {
    /// The design.
    pub design: Design,
    /// The primitive it is built on.
    pub primitive: Primitive,
    /// What carries the request's data: RDMA SEND or RDMA WRITE.
    pub carrier: Family,
    /// The sender's flush of the data, if the design has one (SFlush, WFlush).
    pub data_flush: Option<SenderFlush>,
    /// The sender's flush of the 8-byte operator it writes after the data is durable
    /// (the WFlush form, since the operator's address is known); `None` when the
    /// responder's CPU writes the operator.
    pub operator_flush: Option<SenderFlush>,
    /// The responder's CPU persists the entry (`clwb`+`sfence`), writes and persists the
    /// operator, then notifies the sender: emulated RFlush (§4.1.3), and every design
    /// under DMP+DDIO (§4.4.2).
    pub responder_cpu: bool,
}

impl FlushPlan {
    /// The plan of `design` with `params` on a server with `config`. Refuses baselines,
    /// native SFlush and RFlush (no such RNIC opcode in the model yet), and a native
    /// WFlush on a NIC without RDMA FLUSH.
    pub fn new(
        design: Design,
        params: FlushParams,
        config: &ServerConfig,
    ) -> Result<FlushPlan, RpcError> {
        let unsupported = |what: &str| RpcError::Unsupported {
            design: design.name(),
            what: what.to_string(),
        };
        let primitive =
            Primitive::of(design).ok_or_else(|| unsupported("a Flush primitive (a baseline)"))?;
        let native = params.form == FlushForm::Native;
        let wflush = if native {
            if !config.caps.native_flush {
                return Err(unsupported(
                    "native WFlush: the server's RNIC has no RDMA FLUSH",
                ));
            }
            SenderFlush::NativeWFlush
        } else {
            SenderFlush::ReadLastByte
        };
        let (data_flush, responder_cpu) = match primitive {
            Primitive::WFlush => (Some(wflush), false),
            Primitive::SFlush if native => {
                // Wire here once the model's RNIC has the SFlush opcode (branch `fabric`).
                return Err(unsupported(
                    "native SFlush: the RNIC model has no SFlush opcode yet",
                ));
            }
            Primitive::SFlush => (
                Some(SenderFlush::LookupThenRead(params.sflush_lookup)),
                false,
            ),
            Primitive::RFlush if native => {
                // Wire here once the model's RNIC has the RFlush opcode (branch `fabric`).
                return Err(unsupported(
                    "native RFlush: the RNIC model has no RFlush opcode yet",
                ));
            }
            Primitive::RFlush => (None, true),
        };
        let responder_cpu = responder_cpu || needs_responder_cpu_flush(config);
        Ok(FlushPlan {
            design,
            primitive,
            carrier: design.family(),
            data_flush,
            operator_flush: (!responder_cpu).then_some(wflush),
            responder_cpu,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(s: &str) -> ServerConfig {
        s.parse().unwrap()
    }

    #[test]
    fn native_sflush_and_rflush_are_refused_not_faked() {
        let native = FlushParams {
            form: FlushForm::Native,
            ..FlushParams::default()
        };
        let c = cfg("DMP+noDDIO+PM-RQWRB");
        for d in [Design::SFlushRpc, Design::SRFlushRpc, Design::WRFlushRpc] {
            let e = FlushPlan::new(d, native, &c).unwrap_err();
            assert!(
                matches!(&e, RpcError::Unsupported { what, .. } if what.contains("native")),
                "{e}"
            );
        }
        assert!(FlushPlan::new(Design::WFlushRpc, native, &c).is_ok());
        assert!(FlushPlan::new(Design::DaRpc, FlushParams::default(), &c).is_err());
    }

    #[test]
    fn ddio_under_dmp_adds_the_responder_cpu_flush() {
        let p = FlushParams::default();
        let plain = FlushPlan::new(Design::WFlushRpc, p, &cfg("DMP+noDDIO+PM-RQWRB")).unwrap();
        assert!(!plain.responder_cpu);
        assert_eq!(plain.data_flush, Some(SenderFlush::ReadLastByte));
        let ddio = FlushPlan::new(Design::WFlushRpc, p, &cfg("DMP+DDIO+PM-RQWRB")).unwrap();
        assert!(ddio.responder_cpu && ddio.operator_flush.is_none());
        let mhp = FlushPlan::new(Design::SFlushRpc, p, &cfg("MHP+DDIO+PM-RQWRB")).unwrap();
        assert!(!mhp.responder_cpu);
        assert_eq!(
            mhp.data_flush,
            Some(SenderFlush::LookupThenRead(SFLUSH_LOOKUP))
        );
        let rf = FlushPlan::new(Design::WRFlushRpc, p, &cfg("MHP+noDDIO+PM-RQWRB")).unwrap();
        assert!(rf.responder_cpu && rf.data_flush.is_none());
    }

    #[test]
    fn read_emulation_reads_the_last_byte() {
        let scratch = Sge {
            addr: 0,
            len: 8,
            lkey: 1,
        };
        let wr = SenderFlush::ReadLastByte.work_request(
            1,
            Remote {
                addr: 1000,
                rkey: 2,
            },
            100,
            scratch,
        );
        assert_eq!(wr.opcode, Opcode::Read);
        assert_eq!(wr.remote.unwrap().addr, 1099);
        assert_eq!(wr.local.len(), 1);
    }
}
