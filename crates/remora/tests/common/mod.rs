//! What the library's integration tests share: configurations by name, a driver for one
//! task, a slow responder's profile, and a client queue pair built by hand (a peer that
//! sends whatever bytes a test gives it).

#![allow(dead_code)] // each test file uses its own part

use remora_model::config::ServerConfig;
use remora_model::profile::LatencyProfile;
use remora_model::time::Instant;
use remora_sim::{NodeHandle, Sim};
use remora_verbs::*;
use std::future::Future;

/// A Table 1 configuration by name.
pub fn cfg(s: &str) -> ServerConfig {
    s.parse().expect("configuration name")
}

/// Runs `fut` (with every other task) until it finishes.
pub fn drive<T: 'static>(sim: &Sim, fut: impl Future<Output = T> + 'static) -> T {
    sim.block_on(Instant::NEVER, fut)
        .expect("the simulation ran out of work before the task finished")
}

/// The default profile with a responder that takes 50 µs per message, so messages wait in
/// its receive ring.
pub fn slow_responder() -> LatencyProfile {
    let mut p = LatencyProfile::default_profile();
    p.cpu.msg_handle_ns = 50_000;
    p
}

/// A client QP built by hand: receive slots in registered DRAM.
pub struct RawQp {
    pub node: NodeHandle,
    pub qp: QpNum,
    pub scq: CqId,
    pub rcq: CqId,
    pub buf: MrInfo,
}

/// Receive slots of a [`RawQp`], and their size.
pub const RAW_SLOTS: u64 = 8;
pub const RAW_SLOT_BYTES: u64 = 256;

impl RawQp {
    /// A QP on `node` with [`RAW_SLOTS`] receives posted.
    pub fn new(node: &NodeHandle) -> RawQp {
        let pd = node.alloc_pd().unwrap();
        let len = RAW_SLOTS * RAW_SLOT_BYTES;
        let base = node.alloc(Space::Dram, len, 4096);
        let buf = node
            .reg_mr(pd, Space::Dram, base, len, Access::LOCAL_WRITE)
            .unwrap();
        let scq = node.create_cq(64).unwrap();
        let rcq = node.create_cq(64).unwrap();
        let qp = node.create_qp(pd, scq, rcq, QpAttr::default()).unwrap();
        let raw = RawQp {
            node: node.clone(),
            qp,
            scq,
            rcq,
            buf,
        };
        for i in 0..RAW_SLOTS {
            raw.post_slot(i);
        }
        raw
    }

    fn post_slot(&self, i: u64) {
        let sge = Sge {
            addr: self.buf.addr + i * RAW_SLOT_BYTES,
            len: RAW_SLOT_BYTES as u32,
            lkey: self.buf.lkey,
        };
        self.node
            .post_recv(self.qp, RecvWr { wr_id: i, sge })
            .unwrap();
    }

    /// SENDs `bytes`, unsignaled.
    pub fn send(&self, wr_id: u64, bytes: Vec<u8>) {
        self.node
            .post_send(
                self.qp,
                SendWr::new(wr_id, Opcode::Send, Payload::inline(bytes), None).signaled(false),
            )
            .unwrap();
    }

    /// The next message, or `None` if none has come (poll once).
    pub fn try_recv(&self) -> Option<Vec<u8>> {
        Some(self.take(self.node.poll_one(self.rcq)?))
    }

    /// The bytes of the next message received.
    pub async fn recv(&self) -> Vec<u8> {
        self.take(next_completion(&self.node, self.rcq).await)
    }

    /// The bytes a receive completion placed in its slot; the slot is posted again.
    fn take(&self, wc: WorkCompletion) -> Vec<u8> {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        let mut b = vec![0u8; wc.byte_len as usize];
        self.node.load(
            Space::Dram,
            self.buf.addr + wc.wr_id * RAW_SLOT_BYTES,
            &mut b,
        );
        self.post_slot(wc.wr_id);
        b
    }
}
