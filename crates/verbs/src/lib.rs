//! # remora-verbs: the API applications are written against
//!
//! Application code (the persistence library, RemoteLog, the systems of the seeds) is
//! ordinary `async` Rust, generic over [`Verbs`], so the same code runs on the simulator
//! (`remora_sim::NodeHandle`) and on the soft RNIC (`remora_soft::runtime::RtNode`), as it
//! would on an rdma-core backend. The names follow rdma-core's
//! `libibverbs` (`ibv_post_send`, `ibv_poll_cq`, ...); the types are those of
//! [`remora_model::verbs`], re-exported here.

use std::future::Future;

pub use remora_model::hierarchy::{FlushPlacement, Space};
pub use remora_model::rnic::{MrInfo, QpAttr};
pub use remora_model::time::{Duration, Instant};
pub use remora_model::verbs::*;
pub use remora_model::ServerConfig;

/// One node's view of its RNIC, its CPU and its memory.
///
/// Verb calls return at once like their libibverbs counterparts; the `async` methods are
/// the only places a program waits, so a runtime decides what waiting means (virtual time
/// in the simulator, a real clock elsewhere).
pub trait Verbs {
    /// This node.
    fn node(&self) -> NodeId;
    /// Current time on this node's runtime.
    fn now(&self) -> Instant;
    /// The node's own configuration (a server advertises it to clients).
    fn config(&self) -> ServerConfig;

    /// Reserves `len` bytes of DRAM or PM aligned to `align`.
    fn alloc(&self, space: Space, len: u64, align: u64) -> u64;
    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<PdId, VerbsError>;
    /// `ibv_reg_mr`.
    fn reg_mr(
        &self,
        pd: PdId,
        space: Space,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<MrInfo, VerbsError>;
    /// `ibv_create_cq`.
    fn create_cq(&self, depth: usize) -> Result<CqId, VerbsError>;
    /// `ibv_create_qp` (reliable connection).
    fn create_qp(
        &self,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        attr: QpAttr,
    ) -> Result<QpNum, VerbsError>;
    /// `ibv_dereg_mr`: later accesses with the region's keys fail.
    fn dereg_mr(&self, mr: &MrInfo) -> Result<(), VerbsError>;
    /// `ibv_dealloc_pd`: refused while a memory region or queue pair belongs to it.
    fn dealloc_pd(&self, pd: PdId) -> Result<(), VerbsError>;
    /// `ibv_destroy_qp`: outstanding work completes with `WrFlushErr`, packets still on
    /// their way to the QP are dropped, and its number may be reused.
    fn destroy_qp(&self, qp: QpNum) -> Result<(), VerbsError>;
    /// `ibv_destroy_cq`: refused while a live queue pair uses it; pending completions are
    /// discarded.
    fn destroy_cq(&self, cq: CqId) -> Result<(), VerbsError>;
    /// `ibv_post_send`.
    fn post_send(&self, qp: QpNum, wr: SendWr) -> Result<(), VerbsError>;
    /// `ibv_post_recv`.
    fn post_recv(&self, qp: QpNum, wr: RecvWr) -> Result<(), VerbsError>;
    /// `ibv_poll_cq`: appends up to `max` completions to `out`, returns how many.
    fn poll_cq(&self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize;
    /// Takes the oldest completion of `cq`, if any (`ibv_poll_cq` with one entry).
    fn poll_one(&self, cq: CqId) -> Option<WorkCompletion> {
        let mut out = Vec::with_capacity(1);
        self.poll_cq(cq, 1, &mut out);
        out.pop()
    }
    /// Waits until `cq` holds at least one completion (busy-polling on real hardware).
    fn wait_cq(&self, cq: CqId) -> impl Future<Output = ()>;

    /// A CPU load from local memory.
    fn load(&self, space: Space, addr: u64, buf: &mut [u8]);
    /// A CPU store to local memory (it lands in the cache).
    fn store(&self, space: Space, addr: u64, data: &[u8]);
    /// `clwb` of every line in the range, then `sfence`: returns once the lines are in the
    /// memory controller (the ADR domain), having spent the CPU time that takes.
    fn persist_local(&self, addr: u64, len: u64) -> impl Future<Output = ()>;
    /// Spends `d` of this CPU thread's time (message handling, polling, computation).
    fn compute(&self, d: Duration) -> impl Future<Output = ()>;
    /// A CPU `memcpy` of `len` bytes between local memories (e.g. from a receive buffer to
    /// its target in PM), taking the copy's CPU time; the stores land in the cache.
    fn memcpy(&self, dst: (Space, u64), src: (Space, u64), len: u64) -> impl Future<Output = ()>;
}

/// How a requester makes earlier writes reach the responder's memory (rpma's
/// `rpma_flush_new` picks one per connection the same way).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FlushMethod {
    /// RDMA FLUSH (`IBV_WR_FLUSH`), where the RNIC has it.
    Native,
    /// An RDMA READ after the writes (seed 000 §3.4, §4.2): the READ's PCIe read pushes the
    /// RNIC and IIO buffers to memory. Under DDIO that memory is the LLC, so on a DMP
    /// server this is visibility, not persistence.
    ReadAfterWrite,
}

impl FlushMethod {
    /// The best method a NIC with `caps` offers.
    pub fn for_caps(caps: remora_model::NicCaps) -> FlushMethod {
        if caps.native_flush {
            FlushMethod::Native
        } else {
            FlushMethod::ReadAfterWrite
        }
    }

    /// The work request that flushes `len` bytes at `remote`. `scratch` is a local
    /// 8-byte buffer the READ emulation reads into (unused by a native FLUSH).
    pub fn work_request(
        self,
        wr_id: u64,
        placement: FlushPlacement,
        remote: Remote,
        len: u64,
        scratch: Sge,
    ) -> SendWr {
        match self {
            FlushMethod::Native => SendWr::new(
                wr_id,
                Opcode::Flush { placement, len },
                Payload::None,
                Some(remote),
            ),
            FlushMethod::ReadAfterWrite => {
                // At most 8 bytes, and no further than the range: a write in a region's
                // last bytes must not have its READ run past the region.
                let sge = Sge {
                    len: scratch.len.min(8).min(len.min(8) as u32),
                    ..scratch
                };
                SendWr::new(wr_id, Opcode::Read, Payload::Sge(sge), Some(remote))
            }
        }
    }
}

/// Waits until `cq` holds a completion or `d` has passed on this node's clock, whichever
/// comes first; true if the completion queue woke first (a bounded `wait_cq`, for
/// protocols that must notice a silent peer).
pub async fn wait_cq_or<V: Verbs>(v: &V, cq: CqId, d: Duration) -> bool {
    let mut a = std::pin::pin!(v.wait_cq(cq));
    let mut b = std::pin::pin!(v.compute(d));
    std::future::poll_fn(|cx| {
        if a.as_mut().poll(cx).is_ready() {
            std::task::Poll::Ready(true)
        } else if b.as_mut().poll(cx).is_ready() {
            std::task::Poll::Ready(false)
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

/// Waits for the next completion on `cq`.
pub async fn next_completion<V: Verbs>(v: &V, cq: CqId) -> WorkCompletion {
    loop {
        if let Some(wc) = v.poll_one(cq) {
            return wc;
        }
        v.wait_cq(cq).await;
    }
}

/// The RNIC objects one connection made (protection domain, memory regions, completion
/// queues, queue pairs), so they are freed together: when the connection ends, or at once
/// when a later step of setting it up fails, so a server refusing or finishing a client
/// keeps nothing of it on its RNIC.
#[derive(Debug, Default)]
pub struct Owned {
    pd: Option<PdId>,
    mrs: Vec<MrInfo>,
    cqs: Vec<CqId>,
    qps: Vec<QpNum>,
}

impl Owned {
    /// `ibv_alloc_pd`, owned. A set holds one protection domain.
    pub fn pd<V: Verbs>(&mut self, v: &V) -> Result<PdId, VerbsError> {
        assert!(self.pd.is_none(), "one protection domain per object set");
        let pd = v.alloc_pd()?;
        self.pd = Some(pd);
        Ok(pd)
    }
    /// `ibv_reg_mr` in the set's protection domain, owned.
    pub fn mr<V: Verbs>(
        &mut self,
        v: &V,
        space: Space,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<MrInfo, VerbsError> {
        let pd = self.pd.expect("a protection domain first");
        let mr = v.reg_mr(pd, space, addr, len, access)?;
        self.mrs.push(mr);
        Ok(mr)
    }
    /// `ibv_create_cq`, owned.
    pub fn cq<V: Verbs>(&mut self, v: &V, depth: usize) -> Result<CqId, VerbsError> {
        let cq = v.create_cq(depth)?;
        self.cqs.push(cq);
        Ok(cq)
    }
    /// `ibv_create_qp` in the set's protection domain, owned.
    pub fn qp<V: Verbs>(
        &mut self,
        v: &V,
        send_cq: CqId,
        recv_cq: CqId,
        attr: QpAttr,
    ) -> Result<QpNum, VerbsError> {
        let pd = self.pd.expect("a protection domain first");
        let qp = v.create_qp(pd, send_cq, recv_cq, attr)?;
        self.qps.push(qp);
        Ok(qp)
    }
    /// Destroys the set's queue pairs, and only those: their outstanding work requests
    /// are flushed onto their completion queues, still there to be read. Every queue pair
    /// is tried; the first error is returned.
    pub fn free_qps<V: Verbs>(&mut self, v: &V) -> Result<(), VerbsError> {
        let mut first = Ok(());
        for q in self.qps.drain(..) {
            let r = v.destroy_qp(q);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Frees everything, dependents first (queue pairs, then completion queues, memory
    /// regions and the protection domain). Every object is tried; the first error is
    /// returned.
    pub fn free<V: Verbs>(mut self, v: &V) -> Result<(), VerbsError> {
        let mut first = self.free_qps(v);
        let mut note = |r: Result<(), VerbsError>| {
            if first.is_ok() {
                first = r;
            }
        };
        self.cqs.iter().for_each(|&c| note(v.destroy_cq(c)));
        self.mrs.iter().for_each(|m| note(v.dereg_mr(m)));
        if let Some(pd) = self.pd {
            note(v.dealloc_pd(pd));
        }
        first
    }
}

/// Runs `make` (which makes objects into `owned`); if it fails, frees what it made before
/// returning its error.
pub fn made_or_freed<V: Verbs, T, E: From<VerbsError>>(
    v: &V,
    owned: &mut Owned,
    make: impl FnOnce(&mut Owned) -> Result<T, E>,
) -> Result<T, E> {
    make(owned).inspect_err(|_| {
        // The objects were just made and nothing else refers to them; a failure to free
        // one would only hide the error that matters.
        let _ = std::mem::take(owned).free(v);
    })
}
