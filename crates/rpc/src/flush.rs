//! The RDMA Flush primitives of seed 003 §4.1 at library level: what each durable RPC
//! does to make a request durable, in the native form the paper proposes and in the
//! emulated form it measured (§4.1.3), and the responder-CPU flush DDIO requires (§4.4.2).
//!
//! | primitive | native (§4.1.1–4.1.2) | emulated (§4.1.3) |
//! |---|---|---|
//! | WFlush | IBTA RDMA FLUSH of the written range ([`SendWr::wflush`]) | RDMA READ of the last byte after the WRITE |
//! | SFlush | the SFlush opcode after the SENDs ([`SendWr::sflush`]): the responder's RNIC looks up where the SEND landed (`rnic.sflush_lookup_ns`), persists and answers | wait the address-lookup time (~7 µs), then an RDMA READ |
//! | RFlush | the receiver posts the RFlush opcode ([`SendWr::rflush`]): its RNIC persists the entry and sends the zero-length notification | receiver CPU polls, `clwb`+`sfence`, then notifies the sender |
//!
//! **Native SFlush** ([`SenderFlush::NativeSFlush`]) is posted once after the last SEND of
//! a batch. It is non-posted, so it executes after every earlier SEND of the queue pair
//! landed, and the responder's RNIC persists the landing buffers of every SEND since the
//! QP's previous SFlush (`rnic/flush.rs`): one SFlush covers the batch, as one WFlush per
//! ring run covers a batch of WRITEs (§4.3, Figure 6(b)); the lookup is paid once per
//! batch, as in the emulation.
//!
//! **Native RFlush** ([`FlushPlan::receiver_rflush`]): the responder's CPU still polls for
//! arrivals (§4.1.2: the receiver "issues an RDMA RFlush primitive") but neither writes
//! back the data nor writes the operator; its RNIC persists the entries and its
//! notification is the durability acknowledgement. The entry's own frame (conn, seq,
//! CRC-32C) is then the commit record ([`FlushPlan::frame_commits`]): a CPU-written
//! operator could only be made durable after the RNIC reported the data durable, which on
//! RC costs the responder a round trip before it could notify. A partially persisted
//! frame fails its checksum, so recovery never takes torn data for a request.
//!
//! **DDIO.** Every RNIC-side flush (native FLUSH, SFlush, RFlush or an emulating READ)
//! pushes data out of the RNIC and IIO buffers, but with DDIO on it lands in the LLC,
//! which a DMP (ADR) server loses (seed 000 Table 2). "To guarantee data persistence, the
//! receiver's CPUs should perform a clflush instruction to flush the data from the L3
//! cache to the PM" (§4.4.2): under DMP+DDIO every plan therefore adds the responder-CPU
//! step ([`FlushPlan::responder_cpu`]), native forms included; native RFlush then still
//! carries the notification (posted after the CPU's `clwb`+`sfence` and operator).

use crate::api::RpcError;
use crate::design::{Design, Family, FlushForm};
use remora_model::config::{PersistenceDomain, ServerConfig};
use remora_model::time::Duration;
use remora_verbs::{Opcode, Payload, Remote, SendWr, Sge};

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
    /// Native SFlush: the SFlush opcode after the SENDs; no address (the responder's RNIC
    /// looks up where the last SEND landed).
    NativeSFlush,
}

impl SenderFlush {
    /// The wait before the work request (the emulated SFlush's address lookup).
    pub fn lookup(self) -> Option<Duration> {
        match self {
            SenderFlush::LookupThenRead(d) => Some(d),
            _ => None,
        }
    }

    /// True when one work request covers every range (native SFlush names none).
    pub fn covers_all(self) -> bool {
        self == SenderFlush::NativeSFlush
    }

    /// The work request flushing `len` bytes at `remote`; `scratch` is a local buffer of
    /// at least one byte the READ forms read into. A native SFlush ignores the range.
    pub fn work_request(self, wr_id: u64, remote: Remote, len: u64, scratch: Sge) -> SendWr {
        assert!(len > 0, "a flush covers at least one byte");
        match self {
            SenderFlush::NativeWFlush => SendWr::wflush(wr_id, remote, len),
            SenderFlush::NativeSFlush => SendWr::sflush(wr_id),
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
    /// Native RFlush: the responder posts the RFlush opcode over the arrived entries and
    /// its RNIC's zero-length notification (immediate: the last sequence number covered)
    /// acknowledges durability.
    pub receiver_rflush: bool,
}

impl FlushPlan {
    /// The plan of `design` with `params` on a server with `config`. Refuses baselines and
    /// any native form on a NIC without RDMA FLUSH (the model's SFlush and RFlush extend
    /// its FLUSH machinery).
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
                    "native Flush primitives: the server's RNIC has no RDMA FLUSH",
                ));
            }
            SenderFlush::NativeWFlush
        } else {
            SenderFlush::ReadLastByte
        };
        let (data_flush, responder_cpu, receiver_rflush) = match primitive {
            Primitive::WFlush => (Some(wflush), false, false),
            Primitive::SFlush if native => (Some(SenderFlush::NativeSFlush), false, false),
            Primitive::SFlush => (
                Some(SenderFlush::LookupThenRead(params.sflush_lookup)),
                false,
                false,
            ),
            Primitive::RFlush => (None, !native, native),
        };
        let responder_cpu = responder_cpu || needs_responder_cpu_flush(config);
        Ok(FlushPlan {
            design,
            primitive,
            carrier: design.family(),
            data_flush,
            operator_flush: (!responder_cpu && !receiver_rflush).then_some(wflush),
            responder_cpu,
            receiver_rflush,
        })
    }

    /// True when the server, not the sender's flush completion, acknowledges durability
    /// (a `Durable` message or an RFlush notification).
    pub fn server_acknowledges(&self) -> bool {
        self.responder_cpu || self.receiver_rflush
    }

    /// True when no operator is written and an entry is committed by its own frame
    /// (conn, seq and CRC-32C): native RFlush without the responder-CPU step.
    pub fn frame_commits(&self) -> bool {
        self.receiver_rflush && !self.responder_cpu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(s: &str) -> ServerConfig {
        s.parse().unwrap()
    }

    #[test]
    fn native_plans_use_the_opcodes() {
        let native = FlushParams {
            form: FlushForm::Native,
            ..FlushParams::default()
        };
        let c = cfg("DMP+noDDIO+PM-RQWRB");
        let s = FlushPlan::new(Design::SFlushRpc, native, &c).unwrap();
        assert_eq!(s.data_flush, Some(SenderFlush::NativeSFlush));
        assert_eq!(s.operator_flush, Some(SenderFlush::NativeWFlush));
        assert!(!s.server_acknowledges());
        for d in [Design::SRFlushRpc, Design::WRFlushRpc] {
            let r = FlushPlan::new(d, native, &c).unwrap();
            assert!(r.receiver_rflush && !r.responder_cpu && r.frame_commits());
            assert!(r.data_flush.is_none() && r.operator_flush.is_none());
            // DMP+DDIO: the CPU's write-back stays (§4.4.2); the operator commits again.
            let r = FlushPlan::new(d, native, &cfg("DMP+DDIO+PM-RQWRB")).unwrap();
            assert!(r.receiver_rflush && r.responder_cpu && !r.frame_commits());
        }
        assert!(FlushPlan::new(Design::WFlushRpc, native, &c).is_ok());
        assert!(FlushPlan::new(Design::DaRpc, FlushParams::default(), &c).is_err());
        let wr = SenderFlush::NativeSFlush.work_request(
            9,
            Remote { addr: 0, rkey: 1 },
            8,
            Sge {
                addr: 0,
                len: 8,
                lkey: 1,
            },
        );
        assert_eq!(wr.opcode, Opcode::SFlush);
        assert!(wr.remote.is_none());
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
