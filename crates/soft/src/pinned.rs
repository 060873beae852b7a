//! A server node seen through a reserved range of its memory: what one connection (or one
//! log) of a server allocates comes from the range, so it lies at the same addresses in
//! every life of the server and the range can serve the next connection once this one
//! closed. The node's own allocator hands out what no range reserved.

use crate::runtime::RtNode;
use remora_model::config::ServerConfig;
use remora_model::rnic::{MrInfo, QpAttr};
use remora_model::time::{Duration, Instant};
use remora_verbs::*;
use std::cell::Cell;
use std::future::Future;
use std::ops::Range;
use std::rc::Rc;

/// An [`RtNode`] whose PM allocations (and, if given, DRAM allocations) come from reserved
/// ranges; every other verb is the node's. Clones share the allocation cursors.
#[derive(Clone)]
pub struct PinnedNode {
    node: RtNode,
    pm: Range<u64>,
    dram: Option<Range<u64>>,
    next_pm: Rc<Cell<u64>>,
    next_dram: Rc<Cell<u64>>,
}

impl PinnedNode {
    /// Allocates PM from `pm` and DRAM from `dram` (from the node's allocator if `None`).
    pub fn new(node: RtNode, pm: Range<u64>, dram: Option<Range<u64>>) -> Self {
        let next_dram = dram.as_ref().map_or(0, |d| d.start);
        PinnedNode {
            next_pm: Rc::new(Cell::new(pm.start)),
            next_dram: Rc::new(Cell::new(next_dram)),
            node,
            pm,
            dram,
        }
    }

    /// The node itself.
    pub fn node(&self) -> &RtNode {
        &self.node
    }

    /// The reserved PM range.
    pub fn pm(&self) -> Range<u64> {
        self.pm.clone()
    }
}

/// Bump allocation inside `range`. Running past it is a bug of whoever sized the range
/// (the server reserves a responder's exact footprint), so it stops the server loudly
/// rather than let two users share memory.
fn bump(next: &Cell<u64>, range: &Range<u64>, len: u64, align: u64, what: &str) -> u64 {
    let addr = next.get().next_multiple_of(align);
    assert!(
        addr.checked_add(len).is_some_and(|end| end <= range.end),
        "{what} allocation of {len} bytes at {addr:#x} past its reserved range {range:#x?}"
    );
    next.set(addr + len);
    addr
}

impl Verbs for PinnedNode {
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
        match (space, &self.dram) {
            (Space::Pm, _) => bump(&self.next_pm, &self.pm, len, align, "PM"),
            (Space::Dram, Some(d)) => bump(&self.next_dram, d, len, align, "DRAM"),
            (Space::Dram, None) => self.node.alloc(space, len, align),
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
        attr: QpAttr,
    ) -> Result<QpNum, VerbsError> {
        self.node.create_qp(pd, send_cq, recv_cq, attr)
    }
    fn dereg_mr(&self, mr: &MrInfo) -> Result<(), VerbsError> {
        self.node.dereg_mr(mr)
    }
    fn dealloc_pd(&self, pd: PdId) -> Result<(), VerbsError> {
        self.node.dealloc_pd(pd)
    }
    fn destroy_qp(&self, qp: QpNum) -> Result<(), VerbsError> {
        self.node.destroy_qp(qp)
    }
    fn destroy_cq(&self, cq: CqId) -> Result<(), VerbsError> {
        self.node.destroy_cq(cq)
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
