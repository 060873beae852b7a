//! The responder side of every method: what the server's CPU does for two-sided methods
//! (receive, copy, flush, acknowledge, seed 000 Tables 2–3 "Rsp" steps), the background
//! application of one-sided SENDs into PM receive buffers, and recovery, which replays the
//! messages a crash left in PM-resident receive buffers (seed 000 §3.2: "the enclosing
//! application's recovery subsystem can be designed to access these messages and persist
//! their effects").

use crate::wire::{imm, Frame, FrameRef, Hello, MAX_SEQ_BASE};
use remora_model::config::{PersistenceDomain, RqwrbPlacement, ServerConfig};
use remora_model::time::Duration;
use remora_verbs::*;

/// How far above the next expected sequence number a message's may be (serve and
/// recovery both hold a connection's messages to it).
const SEQ_GAP: u64 = 1 << 16;

/// Whether a message numbered `seq` may follow when `next` is expected: at or above it,
/// less than [`SEQ_GAP`] above, and in the Hello's range (recorded as applied, a number
/// past it would give every later client of the slot a first sequence number it must
/// refuse). Serve takes only such messages, and recovery replays only such a chain.
fn follows(seq: u64, next: u64) -> bool {
    seq >= next && seq - next < SEQ_GAP && seq < MAX_SEQ_BASE
}

/// Sizes of what a server sets up for one client.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ServerSetup {
    /// Bytes of the persistent region clients update.
    pub region_len: u64,
    /// Receive buffers kept posted.
    pub rq_slots: u32,
    /// Bytes per receive buffer (the largest message).
    pub rq_slot_bytes: u32,
}

impl Default for ServerSetup {
    fn default() -> Self {
        ServerSetup {
            region_len: 1 << 20,
            rq_slots: 64,
            rq_slot_bytes: 256,
        }
    }
}

/// Memory one client's [`Responder`] allocates: what a server reserves per connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes of PM from a 4096-aligned start: the region, and the receive ring and its
    /// applied watermark when the ring is in PM.
    pub pm: u64,
    /// Bytes of DRAM from a 4096-aligned start: the receive ring when it is in DRAM.
    pub dram: u64,
}

impl ServerSetup {
    /// What [`Responder::create`] allocates under `rqwrb`, in its order and alignments.
    pub fn footprint(&self, rqwrb: RqwrbPlacement) -> Footprint {
        let ring = self.rq_slots as u64 * self.rq_slot_bytes as u64;
        match rqwrb {
            RqwrbPlacement::Pm => Footprint {
                pm: (self.pm_ring_offset() + ring).next_multiple_of(64) + 64,
                dram: 0,
            },
            RqwrbPlacement::Dram => Footprint {
                pm: self.region_len,
                dram: ring,
            },
        }
    }

    /// Where a receive ring in PM starts in the [`footprint`](Self::footprint): after the
    /// region, at the page the ring is aligned to (the region and its padding before it).
    pub fn pm_ring_offset(&self) -> u64 {
        self.region_len.next_multiple_of(4096)
    }
}

/// What the responder did, for tests and reports.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponderStats {
    /// Apply messages executed.
    pub applied: u64,
    /// Notify messages and WRITE_WITH_IMMs handled.
    pub notified: u64,
    /// Acks sent.
    pub acks: u64,
    /// Messages refused as malformed (the connection keeps going).
    pub bad_frames: u64,
}

/// What recovery found.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Valid update messages found in PM receive buffers.
    pub found: u64,
    /// Highest sequence number among them (0 if none).
    pub max_seq: u64,
}

/// The server side of one connection.
pub struct Responder<V: Verbs> {
    v: V,
    config: ServerConfig,
    setup: ServerSetup,
    /// Every RNIC object of the connection, freed together by [`close`](Self::close).
    owned: Owned,
    region: MrInfo,
    ring: MrInfo,
    /// PM word holding the highest sequence number whose effects are durable (PM rings).
    applied_at: Option<u64>,
    qp: QpNum,
    rcq: CqId,
    seq_base: u64,
    costs: CpuCosts,
    stats: ResponderStats,
}

impl<V: Verbs> Responder<V> {
    /// Sets up the region, the receive ring (in PM or DRAM as the configuration says) and
    /// a queue pair. Allocation order is fixed, so a restarted server that calls this again
    /// finds its PM region and PM receive ring at the same addresses; what it allocates is
    /// [`ServerSetup::footprint`].
    pub fn create(v: V, setup: ServerSetup, costs: CpuCosts) -> Result<Self, VerbsError> {
        let config = v.config();
        let mut owned = Owned::default();
        let (region, ring, applied_at, rcq, qp) = made_or_freed(&v, &mut owned, |o| {
            o.pd(&v)?;
            let base = v.alloc(Space::Pm, setup.region_len, 4096);
            let region = o.mr(&v, Space::Pm, base, setup.region_len, Access::ALL)?;
            let ring_space = match config.rqwrb {
                RqwrbPlacement::Pm => Space::Pm,
                RqwrbPlacement::Dram => Space::Dram,
            };
            let ring_len = setup.rq_slots as u64 * setup.rq_slot_bytes as u64;
            let ring_base = v.alloc(ring_space, ring_len, 4096);
            // A client FLUSHes what its SENDs put in a PM ring (an IBTA FLUSH names a range
            // of a memory region): the ring allows a remote FLUSH, and nothing else.
            let ring_access = match ring_space {
                Space::Pm => Access::LOCAL_WRITE | Access::FLUSH_GLOBAL | Access::FLUSH_PERSISTENT,
                Space::Dram => Access::LOCAL_WRITE,
            };
            let ring = o.mr(&v, ring_space, ring_base, ring_len, ring_access)?;
            // Messages in a PM ring outlive a crash; recovery must replay only those whose
            // effects may not be durable yet, or it would roll newer updates back.
            let applied_at = (ring_space == Space::Pm).then(|| v.alloc(Space::Pm, 64, 64));
            let attr = QpAttr {
                rq_depth: setup.rq_slots as usize,
                ..QpAttr::default()
            };
            let rcq = o.cq(&v, setup.rq_slots as usize + 1)?;
            // The answers are unsignaled and make no completions, but a failed connection
            // flushes every request in the send queue with one: room for all of them.
            let scq = o.cq(&v, attr.sq_depth)?;
            let qp = o.qp(&v, scq, rcq, attr)?;
            Ok::<_, VerbsError>((region, ring, applied_at, rcq, qp))
        })?;
        let mut r = Responder {
            v,
            config,
            setup,
            owned,
            region,
            ring,
            applied_at,
            qp,
            rcq,
            seq_base: 1,
            costs,
            stats: ResponderStats::default(),
        };
        // A restarted server continues above every message it has applied, so a later
        // replay can never put an older update over a newer one.
        r.seq_base = r.applied_seq() + 1;
        Ok(r)
    }

    /// Frees what [`create`](Self::create) set up on the RNIC (the queue pair, both
    /// completion queues, both memory regions, the protection domain), e.g. once the
    /// client's connection ended, so a server serving client after client does not
    /// accumulate them. The memory and what it holds stay: a later responder over the same
    /// allocation finds them.
    pub fn close(self) -> Result<(), VerbsError> {
        self.owned.free(&self.v)
    }

    /// The queue pair to connect to the client's.
    pub fn qp(&self) -> QpNum {
        self.qp
    }
    /// The persistent region.
    pub fn region(&self) -> MrInfo {
        self.region
    }
    /// Counters.
    pub fn stats(&self) -> ResponderStats {
        self.stats
    }

    fn slot_addr(&self, i: u64) -> u64 {
        self.ring.addr + i * self.setup.rq_slot_bytes as u64
    }

    fn read_slot(&self, i: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len.min(self.setup.rq_slot_bytes as usize)];
        self.v.load(self.ring.space, self.slot_addr(i), &mut b);
        b
    }

    /// Replays update messages left in a PM receive ring, in sequence order, and makes
    /// their effects durable. Run it after a restart, before [`serve`](Self::serve).
    /// With a DRAM ring there is nothing to find.
    pub async fn recover(&mut self) -> RecoveryReport {
        let mut report = RecoveryReport::default();
        if self.ring.space != Space::Pm {
            return report;
        }
        let applied = self.applied_seq();
        let mut found = Vec::new();
        for i in 0..self.setup.rq_slots as u64 {
            // A torn or stale-but-corrupt buffer fails its checksum and is skipped.
            if let Ok(Frame::Apply { seq, entries, .. }) =
                Frame::parse(&self.read_slot(i, self.setup.rq_slot_bytes as usize))
            {
                if seq > applied && seq < MAX_SEQ_BASE {
                    found.push((seq, i, entries));
                }
            }
        }
        found.sort_by_key(|(seq, _, _)| *seq);
        // Only the chain serve could have accepted: each within SEQ_GAP of the last.
        let mut expected = applied + 1;
        let chain = found
            .iter()
            .take_while(|(seq, _, _)| {
                let ok = follows(*seq, expected);
                expected = seq + 1;
                ok
            })
            .count();
        found.truncate(chain);
        for (seq, slot, entries) in &found {
            self.apply(*slot, entries.iter().map(|(o, d)| (*o, d.len())))
                .await;
            self.mark_applied(*seq).await;
        }
        report.found = found.len() as u64;
        report.max_seq = found.last().map_or(applied, |f| f.0);
        self.seq_base = report.max_seq + 1;
        report
    }

    /// Copies an Apply frame's entries, (offset, length) in frame order, from receive slot
    /// `slot` to the region ("Rsp copy"), flushing each under DMP ("Rsp flush") so a
    /// compound update persists in order.
    async fn apply(
        &mut self,
        slot: u64,
        entries: impl Iterator<Item = (u64, usize)> + Clone,
    ) -> bool {
        if !entries
            .clone()
            .all(|(off, len)| self.in_region(off, len as u64))
        {
            return false;
        }
        let mut pos = crate::wire::HEADER as u64;
        for (off, len) in entries {
            pos += crate::wire::ENTRY_HEAD as u64;
            let dst = self.region.addr + off;
            self.v
                .memcpy(
                    (Space::Pm, dst),
                    (self.ring.space, self.slot_addr(slot) + pos),
                    len as u64,
                )
                .await;
            pos += len as u64;
            if self.config.domain == PersistenceDomain::Dmp {
                self.v.persist_local(dst, len as u64).await;
            }
        }
        self.stats.applied += 1;
        true
    }

    fn applied_seq(&self) -> u64 {
        let Some(at) = self.applied_at else { return 0 };
        let mut b = [0u8; 8];
        self.v.load(Space::Pm, at, &mut b);
        u64::from_le_bytes(b)
    }

    /// Records durably that the message `seq`'s effects are durable (PM rings only).
    async fn mark_applied(&mut self, seq: u64) {
        if let Some(at) = self.applied_at {
            // The watermark only rises: an older message never lowers it.
            let seq = seq.max(self.applied_seq());
            self.v.store(Space::Pm, at, &seq.to_le_bytes());
            if self.config.domain == PersistenceDomain::Dmp {
                self.v.persist_local(at, 8).await;
            }
        }
    }

    fn in_region(&self, off: u64, len: u64) -> bool {
        off.checked_add(len)
            .is_some_and(|end| end <= self.setup.region_len)
    }

    async fn ack(&mut self, seq: u64) -> Result<(), VerbsError> {
        let frame = Payload::Inline(Frame::Ack { seq }.emit_payload());
        self.v.post_send(
            self.qp,
            SendWr::new(seq, Opcode::Send, frame, None).signaled(false),
        )?;
        self.stats.acks += 1;
        Ok(())
    }

    /// Posts the receive ring, sends the Hello, then serves messages until the connection
    /// fails (returns the error). Malformed messages are counted and dropped; the server
    /// keeps serving.
    pub async fn serve(&mut self) -> VerbsError {
        let costs = self.costs;
        match self.serve_inner(costs).await {
            Ok(never) => match never {},
            Err(e) => e,
        }
    }

    async fn serve_inner(
        &mut self,
        costs: CpuCosts,
    ) -> Result<std::convert::Infallible, VerbsError> {
        for i in 0..self.setup.rq_slots as u64 {
            self.post_slot(i)?;
        }
        let hello = Hello {
            config: self.config,
            region_addr: self.region.addr,
            region_len: self.region.len,
            region_rkey: self.region.rkey,
            rq_slots: self.setup.rq_slots,
            rq_slot_bytes: self.setup.rq_slot_bytes,
            seq_base: self.seq_base,
            ring_addr: self.ring.addr,
            ring_rkey: (self.ring.space == Space::Pm).then_some(self.ring.rkey),
        };
        self.v.post_send(
            self.qp,
            SendWr::new(
                0,
                Opcode::Send,
                Payload::inline(Frame::Hello(hello).emit()),
                None,
            )
            .signaled(false),
        )?;
        let dmp = self.config.domain == PersistenceDomain::Dmp;
        // The next sequence number the client may use: a message must follow it
        // (`follows`), so a client raises the watermark by at most SEQ_GAP per message.
        let mut next_seq = self.seq_base;
        loop {
            let wc = next_completion(&self.v, self.rcq).await;
            if wc.status != WcStatus::Success {
                return Err(VerbsError::QpState(self.qp, "ERROR"));
            }
            // Noticing the completion and dispatching the message are one stretch of CPU
            // time (one simulator event instead of two).
            self.v.compute(costs.poll + costs.handle).await;
            let slot = wc.wr_id;
            match wc.opcode {
                WcOpcode::RecvRdmaWithImm => {
                    let (off, ack) = imm::decode(wc.imm.unwrap_or(0));
                    if self.in_region(off, wc.byte_len as u64) {
                        if dmp {
                            self.v
                                .persist_local(self.region.addr + off, wc.byte_len as u64)
                                .await;
                        }
                        self.stats.notified += 1;
                        if ack {
                            self.ack(wc.imm.unwrap_or(0) as u64).await?;
                        }
                    } else {
                        self.stats.bad_frames += 1;
                    }
                }
                _ => {
                    let len = (wc.byte_len as usize).min(self.setup.rq_slot_bytes as usize);
                    let mut scratch = remora_model::bytes::Scratch::new();
                    let bytes = scratch.get(len);
                    self.v.load(self.ring.space, self.slot_addr(slot), bytes);
                    // Read in place: the data is copied from the slot, not from here. The
                    // message's length is known: bytes after its frame are not ignored.
                    match FrameRef::parse_exact(bytes) {
                        Ok(FrameRef::Apply { seq, .. } | FrameRef::Notify { seq, .. })
                            if !follows(seq, next_seq) =>
                        {
                            self.stats.bad_frames += 1
                        }
                        Ok(FrameRef::Apply { seq, ack, entries }) => {
                            next_seq = seq + 1;
                            if self.apply(slot, entries.map(|(o, d)| (o, d.len()))).await {
                                self.mark_applied(seq).await;
                                if ack {
                                    self.ack(seq).await?;
                                }
                            } else {
                                self.stats.bad_frames += 1;
                            }
                        }
                        Ok(FrameRef::Notify { seq, ack, entries }) => {
                            next_seq = seq + 1;
                            let ok = entries.clone().all(|(o, l)| self.in_region(o, l as u64));
                            if ok {
                                if dmp {
                                    for (o, l) in entries {
                                        self.v.persist_local(self.region.addr + o, l as u64).await;
                                    }
                                }
                                self.stats.notified += 1;
                                if ack {
                                    self.ack(seq).await?;
                                }
                            } else {
                                self.stats.bad_frames += 1;
                            }
                        }
                        _ => self.stats.bad_frames += 1,
                    }
                }
            }
            // The buffer is reposted only after its message's effects are durable, so a
            // PM ring never loses a message that recovery would still need.
            self.post_slot(slot)?;
        }
    }

    fn post_slot(&self, i: u64) -> Result<(), VerbsError> {
        let sge = Sge {
            addr: self.slot_addr(i),
            len: self.setup.rq_slot_bytes,
            lkey: self.ring.lkey,
        };
        self.v.post_recv(self.qp, RecvWr { wr_id: i, sge })
    }
}

/// The responder CPU's software costs (from the latency profile's `[cpu]` section).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CpuCosts {
    /// Noticing a completion by busy polling.
    pub poll: Duration,
    /// Dispatching one message.
    pub handle: Duration,
}

impl CpuCosts {
    /// The costs a latency profile gives.
    pub fn from_profile(p: &remora_model::LatencyProfile) -> Self {
        CpuCosts {
            poll: Duration::from_nanos(p.cpu.poll_ns),
            handle: Duration::from_nanos(p.cpu.msg_handle_ns),
        }
    }
}
