//! PM at fixed addresses: every connection's redo log, then the one object store, at the
//! same place in every life of the server.

use crate::api::RpcError;
use crate::durable::DurableOptions;
use crate::kv::KvLayout;
use remora_model::config::ServerConfig;
use remora_model::rnic::MrInfo;
use remora_model::time::{Duration, Instant};
use remora_soft::runtime::RtNode;
use remora_verbs::*;
use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

/// A server node whose PM allocations come from one region reserved at start-up, so every
/// [`DurableServer`](crate::durable::DurableServer) built over it (one per connection) finds the log and the store at the
/// same addresses, as a restarted one does after a crash.
#[derive(Clone)]
pub(super) struct Pinned {
    pub(super) node: RtNode,
    pub(super) base: u64,
    pub(super) end: u64,
    pub(super) next: Rc<Cell<u64>>,
}

impl Pinned {
    /// A fresh view whose PM allocation starts `offset` bytes into the region.
    pub(super) fn at(&self, offset: u64) -> Pinned {
        Pinned {
            next: Rc::new(Cell::new(self.base + offset)),
            ..self.clone()
        }
    }
}

impl Verbs for Pinned {
    fn node(&self) -> NodeId {
        self.node.node()
    }
    fn now(&self) -> Instant {
        self.node.now()
    }
    fn config(&self) -> ServerConfig {
        self.node.config()
    }
    fn alloc(&self, space: Space, len: u64, align: u64) -> u64 {
        match space {
            Space::Pm => {
                let addr = self.next.get().next_multiple_of(align);
                assert!(
                    addr + len <= self.end,
                    "durable-RPC server PM allocation past its reserved region"
                );
                self.next.set(addr + len);
                addr
            }
            Space::Dram => self.node.alloc(space, len, align),
        }
    }
    fn alloc_pd(&self) -> Result<PdId, VerbsError> {
        self.node.alloc_pd()
    }
    fn reg_mr(
        &self,
        pd: PdId,
        space: Space,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<MrInfo, VerbsError> {
        self.node.reg_mr(pd, space, addr, len, access)
    }
    fn create_cq(&self, depth: usize) -> Result<CqId, VerbsError> {
        self.node.create_cq(depth)
    }
    fn create_qp(
        &self,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        attr: remora_model::rnic::QpAttr,
    ) -> Result<QpNum, VerbsError> {
        self.node.create_qp(pd, send_cq, recv_cq, attr)
    }
    fn post_send(&self, qp: QpNum, wr: SendWr) -> Result<(), VerbsError> {
        self.node.post_send(qp, wr)
    }
    fn post_recv(&self, qp: QpNum, wr: RecvWr) -> Result<(), VerbsError> {
        self.node.post_recv(qp, wr)
    }
    fn poll_cq(&self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        self.node.poll_cq(cq, max, out)
    }
    fn poll_one(&self, cq: CqId) -> Option<WorkCompletion> {
        self.node.poll_one(cq)
    }
    fn wait_cq(&self, cq: CqId) -> impl Future<Output = ()> {
        self.node.wait_cq(cq)
    }
    fn load(&self, space: Space, addr: u64, buf: &mut [u8]) {
        self.node.load(space, addr, buf)
    }
    fn store(&self, space: Space, addr: u64, data: &[u8]) {
        self.node.store(space, addr, data)
    }
    fn persist_local(&self, addr: u64, len: u64) -> impl Future<Output = ()> {
        self.node.persist_local(addr, len)
    }
    fn compute(&self, d: Duration) -> impl Future<Output = ()> {
        self.node.compute(d)
    }
    fn memcpy(&self, dst: (Space, u64), src: (Space, u64), len: u64) -> impl Future<Output = ()> {
        self.node.memcpy(dst, src, len)
    }
}

/// PM bytes a durable-RPC server with `opts` needs for `connections` connections: one log
/// each, then the store, each 4096-aligned (the order [`serve_durable`](super::serve_durable) lays them out in).
pub fn pm_bytes_needed(opts: &DurableOptions, connections: u32) -> Result<u64, RpcError> {
    Ok(log_stride(opts)? * connections as u64 + store_bytes(opts))
}

/// Bytes between two connections' logs: one log, 4096-aligned.
pub(super) fn log_stride(opts: &DurableOptions) -> Result<u64, RpcError> {
    Ok(opts.log_layout(0)?.bytes().next_multiple_of(4096))
}

fn store_bytes(opts: &DurableOptions) -> u64 {
    KvLayout {
        base: 0,
        objects: opts.objects,
        max_value: opts.max_value as u64,
    }
    .bytes()
}
