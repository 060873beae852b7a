//! The server data path of seed 000 §2 / Figure 1, as explicit stages with state:
//!
//! ```text
//!  inbound DMA ─► RNIC buffer ─► PCIe/IIO ─► commit (globally visible) ─┬─► LLC (DDIO on) ──evict/clwb─┐
//!  CPU store  ─────────────────────────────────────────────────────────┘   (CPU stores too)           │
//!                                              DDIO off ─► mesh to IMC (jitter per channel) ◄─────────┘
//!                                                            └─► WPQ per channel (ADR) ─► PM banks
//! ```
//!
//! Every write is split into cache-line *records*. When a record is created the model
//! computes, once, the times at which it leaves each stage (`t_arrive` at the RNIC buffer,
//! `t_visible` when the IIO commits it or the CPU stores it, `t_wpq` when it enters a
//! memory controller's write-pending queue). The state at any later time follows from
//! those times, so the model needs no event per stage, and a power failure at `T` keeps
//! exactly the records the persistence domain protects at `T`:
//!
//! | domain | a record survives when |
//! |---|---|
//! | DMP (ADR) | `t_wpq <= T` (in the WPQ or PM) |
//! | MHP (eADR) | `t_visible <= T` (caches and the mesh are flushed) |
//! | WSP | `t_arrive <= T` (even the RNIC buffer is flushed) |
//!
//! Visibility (what a load or an RDMA READ returns) is kept apart from persistence: the
//! `visible` image is updated at `t_visible`, the `durable` image at `t_wpq`. Visibility is in
//! IIO order; persistence is not: DDIO lines leave the LLC in a seeded random order, and the
//! mesh to the memory controllers adds a seeded per-write delay and per-channel WPQ
//! back-pressure, so under DMP a later write can become durable before an earlier one
//! (seed 000 §2: "they may become persistent out-of-order"). Writes to the same line always
//! persist in order.
//!
//! Simplifications, stated so nobody relies on more: the WPQ and bank model serves writes
//! in the order they are scheduled (no FR-FCFS reordering); natural LLC evictions are
//! background traffic and do not occupy WPQ slots; an RNIC FLUSH waits for every earlier
//! inbound DMA to its range, and a READ for every earlier one, of any QP of the node, not
//! only its own QP's (correct, conservative); nothing pushes back on the RNIC: a WPQ that
//! backs up delays when lines persist, not when the RNIC takes the next packet, so a stream into a data path slower than the link builds an
//! unbounded backlog where PCIe credits and link flow control would slow the sender.
//!
//! Where each part is: this file has the state, time ([`advance`](MemoryHierarchy::advance)),
//! the RNIC's side (DMA writes and reads, FLUSH) and the records' bookkeeping; `memctl` the
//! way to PM (LLC write-backs, the mesh, each channel's WPQ, the banks); `cpu` the CPU's
//! loads, stores, `clwb` and `sfence`; `crash` power failure; `held` the writes WSP holds in
//! the RNIC buffer; `persist_queue` the queue to the WPQ; `lines` the table of per-line
//! state; `clear` a server's clearing of memory nothing writes any more.

use crate::config::PersistenceDomain;
use crate::mem::{PmMedia, SparseMem};
use crate::prng::{Prng, Span};
use crate::profile::LatencyProfile;
use crate::time::{Duration, Instant};
use std::collections::VecDeque;

mod clear;
mod cpu;
mod crash;
mod held;
mod lines;
mod memctl;
mod persist_queue;
mod queue;
use held::HeldWrites;
use lines::LineTable;
use persist_queue::PersistQueue;
use queue::SliceQueue;

/// Cache-line size.
pub const LINE: u64 = 64;

/// Which memory an address is in. DRAM is always volatile.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Space {
    /// Volatile memory.
    Dram,
    /// Persistent memory.
    Pm,
}

/// When an inbound DMA write reaches each point of the data path.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DmaTiming {
    /// The last line became globally visible.
    pub visible: Instant,
}

/// Which guarantee an RNIC FLUSH (or READ used as one) waits for (IBTA FLUSH placement
/// types; rdma-core `IBV_FLUSH_GLOBAL` / `IBV_FLUSH_PERSISTENT`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FlushPlacement {
    /// Prior writes are globally visible.
    Visibility,
    /// Prior writes have reached memory. The RNIC cannot write back CPU caches, so with
    /// DDIO on this is the LLC, which is not persistent under DMP (seed 000 §3.2).
    Persistence,
}

/// The bytes an RNIC FLUSH names (see [`MemoryHierarchy::flush_done`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlushRange {
    /// The memory the range is in.
    pub space: Space,
    /// Its first byte.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
}

impl FlushRange {
    /// Every byte of `space`: a FLUSH that covers every earlier write there.
    pub const fn all(space: Space) -> FlushRange {
        FlushRange {
            space,
            addr: 0,
            len: u64::MAX,
        }
    }
}

/// Counters for reports and tests.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HierarchyStats {
    /// Line records created by DMA.
    pub dma_lines: u64,
    /// Line records created by CPU stores.
    pub cpu_lines: u64,
    /// Lines evicted from the LLC because the DDIO share was full.
    pub forced_evictions: u64,
    /// Line records that were written back by `clwb`.
    pub clwb_lines: u64,
}

#[derive(Clone, Debug)]
struct Record {
    seq: u64,
    space: Space,
    line: u64,
    off: u8,
    len: u8,
    data: [u8; LINE as usize],
    t_arrive: Instant,
    t_visible: Instant,
    t_wpq: Instant,
    in_llc: bool,
    /// Already written to the medium (it entered the persistence domain).
    in_media: bool,
    /// Made by an inbound DMA (what an RNIC FLUSH waits for), not a CPU store.
    dma: bool,
}

impl Record {
    fn bytes(&self) -> &[u8] {
        &self.data[self.off as usize..self.off as usize + self.len as usize]
    }
    fn addr(&self) -> u64 {
        self.line + self.off as u64
    }
}

#[derive(Default, Debug)]
struct LineState {
    /// Pending PM records of this line (alive in the slab).
    pending: u32,
    /// Latest `t_wpq` of the line's pending records: later writes may not persist earlier.
    floor_wpq: Instant,
    /// Records of this line currently dirty in the LLC; they are written back together.
    llc: Vec<(u32, u64)>,
    /// The line's latest inbound DMA that bypasses the LLC (DDIO off), while in flight.
    last_dma: Option<(u32, u64)>,
}

#[derive(Debug)]
struct Channel {
    /// Times at which admitted WPQ entries drain to a bank, ascending. Only the earliest
    /// and the count are asked for, as of a min-heap; a new entry's time is most often the
    /// latest (a bank's row hits in a stream), and a sorted queue takes it at its back
    /// where a heap would sift twice per line through its levels.
    draining: SliceQueue<Instant>,
    banks: Vec<(Instant, u64)>, // (free at, open row)
}

/// A record's slot and sequence number (the sequence detects a reused slot).
type RecRef = (u32, u64);

/// One server's memory system: RNIC buffer and PCIe timing, IIO, LLC with DDIO, the
/// memory controllers' WPQs under ADR, PM banks, and DRAM.
#[derive(Debug)]
pub struct MemoryHierarchy {
    domain: PersistenceDomain,
    ddio: bool,
    p: Params,
    rng: Prng,
    /// What survives a crash: each line is written here when it enters the domain.
    media: Box<dyn PmMedia>,
    /// Lines visible since the last restart, over `media` (copy-on-write pages).
    pm_visible: SparseMem,
    dram: SparseMem,
    records: Vec<Option<Record>>,
    free: Vec<u32>,
    next_seq: u64,
    /// Records waiting to become visible, in `t_visible` order, each with its `t_visible`
    /// (so [`advance`](Self::advance) sees whether one is due without looking it up).
    vis_fifo: SliceQueue<(Instant, u32, u64)>,
    /// PM records waiting to reach the WPQ (lazy deletion on change).
    persist: PersistQueue,
    lines: LineTable<LineState>,
    llc_fifo: VecDeque<(u32, u64)>,
    llc_count: u64,
    /// Writes waiting in the RNIC buffer under WSP (see [`hold`](Self::hold)), in arrival
    /// order. Almost always empty.
    held: HeldWrites,
    /// Reused by `clwb` for the records it writes back (no allocation per line).
    clwb_scratch: Vec<RecRef>,
    /// Emptied LLC groups kept for reuse (no allocation per dirty line).
    spare_groups: Vec<Vec<RecRef>>,
    channels: Vec<Channel>,
    rnic_dma_free: Instant,
    /// The last inbound write's length and PCIe time (see `pcie_time_of_write`).
    pcie_memo: (u64, Duration),
    last_visible: Instant,
    max_dma_visible: Instant,
    max_dma_wpq: Instant,
    fence_until: Instant,
    now: Instant,
    stats: HierarchyStats,
}

#[derive(Clone, Debug)]
struct Params {
    proc: Duration,
    pcie: Duration,
    iio: Duration,
    llc: Duration,
    imc: Duration,
    ddio_lines: u64,
    dram: Duration,
    pm_read: Duration,
    channels: Divisor,
    banks: Divisor,
    row_bytes: Divisor,
    interleave: Divisor,
    wpq: usize,
    row_hit: Duration,
    write_conflict: Duration,
    clwb: Duration,
    sfence: Duration,
    pcie_gbps: u64,
    miss: Duration,
    /// What a translation miss is drawn from (`0..miss_every`; a miss is a 0), if misses
    /// happen.
    miss_span: Option<Span>,
    /// The mesh's jitter (`0..=imc_jitter`), if there is any.
    jitter_span: Option<Span>,
    /// An LLC residency's spread (`0..=2 * residency`).
    evict_span: Span,
    /// The geometry as shifts and masks when every divisor is a power of two, as in every
    /// shipped profile (see `pm_location`).
    pow2: Option<Pow2Geometry>,
}

/// The PM geometry's shifts and masks (see [`MemoryHierarchy::pm_location`]).
#[derive(Copy, Clone, Debug)]
struct Pow2Geometry {
    /// log2 of the interleave, channels, row bytes and banks.
    shifts: [u32; 4],
    /// Interleave, channels and banks, less one.
    masks: [u64; 3],
}

impl MemoryHierarchy {
    /// A fresh, all-zero memory system for a server in `domain`, with DDIO on or off.
    pub fn new(domain: PersistenceDomain, ddio: bool, profile: &LatencyProfile, rng: Prng) -> Self {
        Self::with_media(domain, ddio, profile, rng, Box::new(SparseMem::new()))
    }

    /// A memory system whose PM starts as, and persists into, `media` (e.g. a pool file
    /// that survived an earlier run).
    pub fn with_media(
        domain: PersistenceDomain,
        ddio: bool,
        profile: &LatencyProfile,
        rng: Prng,
        media: Box<dyn PmMedia>,
    ) -> Self {
        let mut p = Params {
            proc: Duration::from_nanos(profile.rnic.proc_ns),
            pcie: Duration::from_nanos(profile.rnic.pcie_ns),
            iio: Duration::from_nanos(profile.host.iio_ns),
            llc: Duration::from_nanos(profile.host.llc_ns),
            imc: Duration::from_nanos(profile.host.imc_ns),
            ddio_lines: profile.host.ddio_lines,
            dram: Duration::from_nanos(profile.host.dram_ns),
            pm_read: Duration::from_nanos(profile.pm.read_ns),
            channels: Divisor::new(profile.pm.channels),
            banks: Divisor::new(profile.pm.banks_per_channel),
            row_bytes: Divisor::new(profile.pm.row_bytes),
            interleave: Divisor::new(profile.pm.interleave_bytes),
            wpq: profile.pm.wpq_entries as usize,
            row_hit: Duration::from_nanos(profile.pm.row_hit_ns),
            write_conflict: Duration::from_nanos(profile.pm.write_conflict_ns),
            clwb: Duration::from_nanos(profile.cpu.clwb_ns),
            sfence: Duration::from_nanos(profile.cpu.sfence_ns),
            pcie_gbps: profile.rnic.pcie_gbps,
            miss: Duration::from_nanos(profile.rnic.translation_miss_ns),
            miss_span: (profile.rnic.translation_miss_every > 0)
                .then(|| Span::below(profile.rnic.translation_miss_every)),
            jitter_span: (profile.host.imc_jitter_ns > 0)
                .then(|| Span::upto(profile.host.imc_jitter_ns)),
            evict_span: Span::upto(2 * profile.host.llc_residency_ns),
            pow2: None,
        };
        p.pow2 = match [p.interleave, p.channels, p.row_bytes, p.banks].map(|d| d.shift) {
            [Some(i), Some(c), Some(r), Some(b)] => Some(Pow2Geometry {
                shifts: [i, c, r, b],
                masks: [p.interleave.d - 1, p.channels.d - 1, p.banks.d - 1],
            }),
            _ => None,
        };
        let channels = (0..p.channels.d)
            .map(|_| Channel {
                draining: SliceQueue::default(),
                banks: vec![(Instant::ZERO, u64::MAX); p.banks.d as usize],
            })
            .collect();
        MemoryHierarchy {
            domain,
            ddio,
            p,
            rng,
            media,
            pm_visible: SparseMem::new(),
            dram: SparseMem::new(),
            records: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
            vis_fifo: SliceQueue::default(),
            persist: PersistQueue::default(),
            lines: LineTable::default(),
            llc_fifo: VecDeque::new(),
            llc_count: 0,
            held: HeldWrites::default(),
            clwb_scratch: Vec::new(),
            spare_groups: Vec::new(),
            channels,
            rnic_dma_free: Instant::ZERO,
            pcie_memo: (0, Duration::ZERO),
            last_visible: Instant::ZERO,
            max_dma_visible: Instant::ZERO,
            max_dma_wpq: Instant::ZERO,
            fence_until: Instant::ZERO,
            now: Instant::ZERO,
            stats: HierarchyStats::default(),
        }
    }

    /// The persistence domain.
    pub fn domain(&self) -> PersistenceDomain {
        self.domain
    }
    /// Whether DDIO is on.
    pub fn ddio(&self) -> bool {
        self.ddio
    }
    /// Counters.
    pub fn stats(&self) -> HierarchyStats {
        self.stats
    }

    /// PM channel and bank of a byte address (for bank-aware schedulers, seed 004).
    /// Inlined always: it runs once per line a stream writes, and a call cost more than
    /// its arithmetic.
    #[inline(always)]
    pub fn pm_location(&self, addr: u64) -> PmLocation {
        if let Some(Pow2Geometry {
            shifts: [i, c, r, b],
            masks: [im, cm, bm],
        }) = self.p.pow2
        {
            // The same arithmetic as `pm_location_div` in shifts and masks, without a
            // branch per step.
            let unit = addr >> i;
            let local = ((unit >> c) << i) + (addr & im);
            let row_global = local >> r;
            return PmLocation {
                channel: (unit & cm) as u32,
                bank: (row_global & bm) as u32,
                row: row_global >> b,
            };
        }
        self.pm_location_div(addr)
    }

    /// [`pm_location`](Self::pm_location) of a geometry not all in powers of two.
    #[inline(never)]
    fn pm_location_div(&self, addr: u64) -> PmLocation {
        let p = &self.p;
        let unit = p.interleave.div(addr);
        let channel = p.channels.rem(unit);
        let local = p.channels.div(unit) * p.interleave.d + p.interleave.rem(addr);
        let row_global = p.row_bytes.div(local);
        PmLocation {
            channel: channel as u32,
            bank: p.banks.rem(row_global) as u32,
            row: p.banks.div(row_global),
        }
    }

    // ---------------------------------------------------------------- time

    /// Moves the hierarchy's state forward to `now`: records whose `t_visible` has passed
    /// become visible, records whose `t_wpq` has passed become durable.
    #[inline]
    pub fn advance(&mut self, now: Instant) {
        assert!(now >= self.now, "hierarchy time went backwards");
        self.now = now;
        // Nothing due is the common case (nothing in flight between a real-time server's
        // round trips; the WRITEs of one train arrive at one instant), and the call sites
        // are many: no call, no frame, for it. (A queue's stale entry, whose record is
        // gone, keeps its time and is dropped once that time comes.)
        let due =
            self.vis_fifo.front().is_some_and(|&(t, _, _)| t <= now) || self.persist.any_due(now);
        if due {
            self.advance_records(now);
        }
    }

    /// [`advance`](Self::advance) with records in flight.
    fn advance_records(&mut self, now: Instant) {
        while let Some(&(_, id, seq)) = self.vis_fifo.front() {
            // Field by field, so the record is looked up once and its bytes are borrowed,
            // not copied.
            let Some(r) = self.records[id as usize].as_ref().filter(|r| r.seq == seq) else {
                self.vis_fifo.pop_front();
                continue;
            };
            if r.t_visible > now {
                break;
            }
            self.vis_fifo.pop_front();
            match r.space {
                Space::Pm => {
                    self.pm_visible
                        .write_over(r.addr(), r.bytes(), &*self.media);
                    // Under MHP visibility is entry into the persistence domain.
                    if self.domain == PersistenceDomain::Mhp {
                        self.write_media(id);
                    }
                }
                Space::Dram => {
                    self.dram.write(r.addr(), r.bytes());
                    self.release(id);
                }
            }
        }
        while let Some((t, _, seq, id)) = self.persist.pop_due(now) {
            let Some(r) = self.rec(id, seq) else { continue };
            if r.t_wpq != t {
                continue; // rescheduled; a newer queue entry stands for it
            }
            debug_assert!(r.t_visible <= t, "persisted before visible");
            let (line, in_llc) = (r.line, r.in_llc);
            if !in_llc {
                self.persist_one(line, id);
                continue;
            }
            // The line's write-back: every record still dirty in it shares this `t_wpq`
            // (see `enter_llc`) and enters the WPQ now, in version order.
            let ls = self.lines.get_mut(line).expect("pending line has state");
            let mut group = std::mem::take(&mut ls.llc);
            // Version order is visibility order (a CPU store can be created after, yet
            // become visible before, an inbound DMA still crossing PCIe).
            let records = &self.records;
            group.sort_by_key(|&(gid, gseq)| {
                let r = records[gid as usize].as_ref().filter(|r| r.seq == gseq);
                (r.map(|r| r.t_visible), gseq)
            });
            for &(gid, gseq) in &group {
                debug_assert!(self.rec(gid, gseq).is_some_and(|r| r.t_wpq == t));
                self.llc_count -= 1;
                self.persist_one(line, gid);
            }
            self.recycle_group(group);
        }
    }

    /// Makes the medium's writes so far durable against a machine crash (see
    /// [`PmMedia::sync`]).
    pub fn sync_media(&mut self) {
        self.media.sync();
    }

    /// The next instant a line changes stage (becomes visible, or enters the WPQ). The
    /// simulator never needs it (stages are computed lazily); a real-time runtime wakes
    /// then, so a stage lasts as long on the wall clock as in the model.
    pub fn next_transition(&self) -> Option<Instant> {
        let vis = self
            .vis_fifo
            .iter()
            .find_map(|&(_, id, seq)| self.rec(id, seq).map(|r| r.t_visible));
        let per = self.persist.peek().map(|(t, _, _, _)| t);
        match (vis, per) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ---------------------------------------------------------------- RNIC side

    /// An inbound RDMA write of `data` to `addr` in `space` arrived in the RNIC buffer at
    /// `arrive`; the RNIC DMAs it over PCIe through the IIO. Returns when it is visible.
    pub fn dma_write(
        &mut self,
        arrive: Instant,
        space: Space,
        addr: u64,
        data: &[u8],
    ) -> DmaTiming {
        self.dma_write_inlined(arrive, space, addr, data)
    }

    /// [`dma_write`](Self::dma_write), inlined into a responder's loop over a train's
    /// WRITEs (one call per streamed line: its saved registers were a noticeable part of
    /// the line's cost).
    #[inline(always)]
    pub(crate) fn dma_write_inlined(
        &mut self,
        arrive: Instant,
        space: Space,
        addr: u64,
        data: &[u8],
    ) -> DmaTiming {
        self.advance(arrive);
        let mut start = (arrive + self.p.proc).max(self.rnic_dma_free);
        // `chance(1 / miss_every)`, the same draw through a span worked out once.
        if self.p.miss_span.is_some_and(|s| self.rng.draw(s) == 0) {
            // A translation-cache miss: the DMA (and those queued behind it) waits.
            start += self.p.miss;
        }
        let whole = self.pcie_time_of_write(data.len() as u64);
        self.rnic_dma_free = start + whole;
        // A stream's WRITE is one whole line: no split, and the line's PCIe time is the
        // whole write's.
        if data.len() == LINE as usize && addr.is_multiple_of(LINE) {
            let visible = self.dma_line(arrive, space, addr, data, start + whole);
            return DmaTiming { visible };
        }
        let mut done = 0usize;
        let mut visible = self.last_visible;
        while done < data.len() {
            let addr_i = addr + done as u64;
            let n = ((LINE - addr_i % LINE) as usize).min(data.len() - done);
            // The last line's is the whole write's, already known (one division, not two).
            let crossed = if done + n == data.len() {
                whole
            } else {
                self.pcie_time((done + n) as u64)
            };
            visible = self.dma_line(
                arrive,
                space,
                addr_i,
                &data[done..done + n],
                start + crossed,
            );
            done += n;
        }
        DmaTiming { visible }
    }

    /// The line of an inbound DMA write at `addr` (`bytes`, within one line) that has
    /// crossed PCIe by `crossed`: its record and its way to visibility and to the WPQ.
    /// Returns when it is visible.
    #[inline(always)]
    fn dma_line(
        &mut self,
        arrive: Instant,
        space: Space,
        addr_i: u64,
        bytes: &[u8],
        crossed: Instant,
    ) -> Instant {
        let t_iio = crossed + self.p.pcie;
        let visible = (t_iio + self.p.iio).max(self.last_visible);
        self.last_visible = visible;
        self.max_dma_visible = self.max_dma_visible.max(visible);
        if space == Space::Pm && !self.ddio {
            // The streaming path (DDIO off): the record's `t_wpq` is known before it
            // is made, so it is written once, in its slot; its line is looked up once.
            let t_imc = self.imc_arrival(visible, addr_i);
            let (id, seq) = self.alloc_record();
            let line = addr_i / LINE * LINE;
            let t_wpq = self.schedule_wpq(id, seq, line, visible, t_imc);
            self.put_record(
                (id, seq),
                space,
                addr_i,
                bytes,
                arrive,
                visible,
                t_wpq,
                true,
            );
            self.vis_fifo.push_back((visible, id, seq));
            self.stats.dma_lines += 1;
            // Under WSP reaching the RNIC is entry into the persistence domain. (The
            // medium and the visible image are no part of the WPQ's scheduling, so
            // writing it after that changes nothing.)
            if self.domain == PersistenceDomain::Wsp {
                self.write_media(id);
            }
            self.max_dma_wpq = self.max_dma_wpq.max(t_wpq);
            return visible;
        }
        let (id, seq) = self.new_record(space, addr_i, bytes, arrive, visible, true);
        self.vis_fifo.push_back((visible, id, seq));
        if space == Space::Pm {
            self.stats.dma_lines += 1;
            // Under WSP reaching the RNIC is entry into the persistence domain.
            if self.domain == PersistenceDomain::Wsp {
                self.write_media(id);
            }
            // DDIO on (off is the path above).
            self.pend(addr_i);
            self.enter_llc(id, visible + self.p.llc);
        }
        visible
    }

    /// When an RNIC FLUSH of `range` that the RNIC starts at `now` has pushed every
    /// earlier inbound write to those bytes as far as `placement` asks.
    ///
    /// Only writes that overlap the range count: an IBTA FLUSH names a range of one memory
    /// region (rdma-core `ibv_wr_flush`; rxe writes back that range and no other), and so
    /// do seed 003's SFlush (the SEND's landing buffer) and RFlush (a local range). The
    /// weakest guarantee the verbs give is the one the checkers must hold methods to: a
    /// method whose FLUSH names other bytes than it wrote is caught. (Seed 000 §2 describes
    /// a FLUSH of "all prior RDMA update operations" of the connection; a method correct
    /// here is correct there too. An RDMA READ used as a FLUSH orders every earlier write,
    /// [`dma_read`](Self::dma_read).)
    pub fn flush_done(
        &mut self,
        now: Instant,
        placement: FlushPlacement,
        range: FlushRange,
    ) -> Instant {
        self.flush_done_ranges(now, placement, &[range])
    }

    /// [`flush_done`](Self::flush_done) of a FLUSH that names several ranges (seed 003's
    /// SFlush after a batch of SENDs covers each one's landing buffer).
    pub fn flush_done_ranges(
        &mut self,
        now: Instant,
        placement: FlushPlacement,
        ranges: &[FlushRange],
    ) -> Instant {
        self.advance(now);
        let wait_for_imc = match placement {
            FlushPlacement::Visibility => false,
            // Under MHP and WSP visibility is persistence; under DMP without DDIO the
            // data must reach the ADR-protected WPQ. With DDIO it stops in the LLC.
            FlushPlacement::Persistence => self.domain == PersistenceDomain::Dmp && !self.ddio,
        };
        let t = (now + self.p.proc + self.p.pcie).max(self.inflight_dma(now, ranges, wait_for_imc));
        t + self.p.pcie
    }

    /// The latest instant an inbound DMA write to one of `ranges` that is in flight at
    /// `now` becomes visible (and, with `wpq`, enters the WPQ); `Instant::ZERO` if none is.
    fn inflight_dma(&self, now: Instant, ranges: &[FlushRange], wpq: bool) -> Instant {
        let hits = |r: &Record| {
            let (a, b) = (r.addr(), r.addr() + r.len as u64);
            // An empty range covers nothing.
            let covers = |g: &FlushRange| {
                g.len > 0 && g.space == r.space && a < g.addr.saturating_add(g.len) && g.addr < b
            };
            r.dma && ranges.iter().any(covers)
        };
        // Not yet visible: in `vis_fifo`, in `t_visible` order, so the last that hits is
        // the latest. Visible, not yet in the WPQ: in `persist` (a stale entry's record is
        // gone or has another `t_wpq`). Once per FLUSH, over the lines in flight: a FLUSH
        // after a stream's writes finds its answer at the back of both.
        let vis = self
            .vis_fifo
            .iter()
            .rev()
            .find_map(|&(_, id, seq)| self.rec(id, seq).filter(|r| hits(r)))
            .map_or(Instant::ZERO, |r| r.t_visible);
        let wpq = wpq
            .then(|| {
                self.persist.latest(|&(t_wpq, _, seq, id)| {
                    t_wpq > now
                        && self
                            .rec(id, seq)
                            .is_some_and(|r| r.t_wpq == t_wpq && hits(r))
                })
            })
            .flatten()
            .unwrap_or(Instant::ZERO);
        vis.max(wpq)
    }

    /// An RDMA READ the RNIC starts at `now`: the PCIe read is ordered after every earlier
    /// inbound write and pushes it to memory (seed 000 §3.4), so it doubles as a FLUSH.
    /// Returns the data and when the response leaves the RNIC.
    pub fn dma_read(
        &mut self,
        now: Instant,
        space: Space,
        addr: u64,
        len: usize,
    ) -> (Vec<u8>, Instant) {
        self.advance(now);
        let mut t = (now + self.p.proc + self.p.pcie).max(self.max_dma_visible);
        if !self.ddio {
            t = t.max(self.max_dma_wpq);
        }
        let media = match (space, self.ddio) {
            (Space::Dram, _) => self.p.dram,
            (Space::Pm, true) => self.p.llc,
            (Space::Pm, false) => self.p.pm_read,
        };
        let data = self.read_ordered(space, addr, len);
        (data, t + media + self.p.pcie + self.pcie_time(len as u64))
    }

    /// When an atomic's read that the RNIC starts at `now` (a failed compare, which writes
    /// nothing) is ordered after every earlier inbound write: once they are visible, as a
    /// successful one's write is (its visibility is in IIO order after theirs).
    pub fn ordered_read_done(&mut self, now: Instant) -> Instant {
        self.advance(now);
        (now + self.p.proc + self.p.pcie).max(self.max_dma_visible)
    }

    /// The bytes a read ordered after every inbound DMA so far sees (pending DMA records
    /// are applied over the visible image).
    pub fn read_ordered(&mut self, space: Space, addr: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.read_ordered_into(space, addr, &mut out);
        out
    }

    /// [`read_ordered`](Self::read_ordered) into `out` (no allocation).
    pub fn read_ordered_into(&mut self, space: Space, addr: u64, out: &mut [u8]) {
        let len = out.len();
        self.read_visible(space, addr, out);
        let end = addr + len as u64;
        for &(_, id, seq) in self.vis_fifo.as_slice() {
            let Some(r) = self.records[id as usize].as_ref().filter(|r| r.seq == seq) else {
                continue;
            };
            if r.space != space {
                continue;
            }
            let (ra, rb) = (r.addr(), r.addr() + r.len as u64);
            let (lo, hi) = (ra.max(addr), rb.min(end));
            if lo < hi {
                out[(lo - addr) as usize..(hi - addr) as usize]
                    .copy_from_slice(&r.bytes()[(lo - ra) as usize..(hi - ra) as usize]);
            }
        }
    }

    // ---------------------------------------------------------------- internals

    /// Reads what is visible in `space` (PM reads fall through to the medium).
    fn read_visible(&self, space: Space, addr: u64, buf: &mut [u8]) {
        match space {
            Space::Dram => self.dram.read(addr, buf),
            Space::Pm => self.pm_visible.read_over(addr, buf, &*self.media),
        }
    }

    /// Writes a record into the medium: it has entered the persistence domain.
    #[inline]
    fn write_media(&mut self, id: u32) {
        let now = self.now;
        let r = self.records[id as usize].as_mut().expect("live record");
        if r.in_media {
            return;
        }
        r.in_media = true;
        if r.t_visible <= now && self.held.is_empty() {
            // A line visible before it persists, with nothing held (every line of a DMP
            // stream): written as it is, inline, with no second look at the record.
            self.media.write(r.addr(), r.bytes());
            return;
        }
        self.write_media_unusual(id);
    }

    /// [`write_media`](Self::write_media) of a record durable before it is visible (WSP),
    /// or written under held writes. Out of line, so that the common case saves no
    /// registers for it.
    #[inline(never)]
    fn write_media_unusual(&mut self, id: u32) {
        let now = self.now;
        let r = self.records[id as usize].as_ref().expect("live record");
        let (addr, len, early) = (r.addr(), r.len as usize, r.t_visible > now);
        if early {
            // Durable before visible (WSP).
            self.pin_visible(addr, len);
        }
        let r = self.records[id as usize].as_ref().unwrap();
        if self.held.is_empty() {
            self.media.write(addr, r.bytes());
        } else {
            let bytes = r.bytes().to_vec();
            self.write_under_held(addr, &bytes);
        }
    }

    /// Copies what is visible at `addr..addr+len` into the visible image, so that loads
    /// keep seeing those bytes while the medium below takes bytes not yet visible (the
    /// image copies a page from the medium only when it first writes it). One line at a
    /// time, through a buffer on the stack.
    fn pin_visible(&mut self, addr: u64, len: usize) {
        let mut buf = [0u8; LINE as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(LINE as usize);
            let (a, old) = (addr + done as u64, &mut buf[..n]);
            self.pm_visible.read_over(a, old, &*self.media);
            self.pm_visible.write_over(a, old, &*self.media);
            done += n;
        }
    }

    /// Inbound DMA records of `line` not yet visible at `now`, oldest first.
    fn inflight_dmas(&self, line: u64, now: Instant) -> Vec<u32> {
        let Some(ls) = self.lines.get(line) else {
            return Vec::new();
        };
        let in_flight = |&(id, seq): &RecRef| {
            self.rec(id, seq)
                .filter(|r| r.t_visible > now)
                .map(|_| (seq, id))
        };
        let mut out: Vec<(u64, u32)> = ls.llc.iter().filter_map(in_flight).collect();
        // The line keeps only its latest DMA that bypasses the cache (one entry per line on
        // the streaming path). Visibility is in IIO order, so if that one is in flight the
        // line's earlier ones may be too, and the records waiting to become visible (a
        // suffix of `vis_fifo`: those after `now`) hold them all; two partial-line DMAs of
        // other bytes of the line can be. Else none is.
        if ls.last_dma.iter().any(|d| in_flight(d).is_some()) {
            out.extend(
                self.vis_fifo
                    .iter()
                    .rev()
                    .take_while(|&&(t, _, _)| t > now)
                    .filter_map(|&(_, id, seq)| {
                        let r = self.rec(id, seq)?;
                        (r.space == Space::Pm && r.line == line && !r.in_llc).then_some((seq, id))
                    }),
            );
        }
        out.sort_unstable();
        out.dedup();
        out.into_iter().map(|(_, id)| id).collect()
    }

    /// Queues record `id`'s entry into the WPQ at `t`.
    fn schedule_persist(&mut self, t: Instant, id: u32) {
        let r = self.records[id as usize].as_ref().expect("live record");
        self.persist.push((t, r.t_visible, r.seq, id));
    }

    /// Record `id` of `line` reached the WPQ: durable under every domain (DMP's entry
    /// point); its bookkeeping ends. Inlined always into `advance_records`, where every
    /// line of a stream ends (a plain `#[inline]` was not taken).
    #[inline(always)]
    fn persist_one(&mut self, line: u64, id: u32) {
        self.write_media(id);
        let ls = self.lines.get_mut(line).expect("pending line has state");
        // Every PM record is counted once when it is made (`pend`, `schedule_wpq`).
        ls.pending = ls
            .pending
            .checked_sub(1)
            .expect("a persisted record was counted");
        if ls.pending == 0 {
            let group = self
                .lines
                .remove_with(line, |ls| std::mem::take(&mut ls.llc));
            self.recycle_group(group.unwrap());
        }
        self.release(id);
    }

    /// Record `(id, seq)` leaves the LLC, written back to reach the WPQ by `t` (or its
    /// earlier eviction time). Out of its LLC group the record needs its own queue entry:
    /// only the group's newest record had one. False if the record is no longer alive.
    fn leave_llc(&mut self, id: u32, seq: u64, t: Instant) -> bool {
        let Some(r) = self.records[id as usize].as_mut().filter(|r| r.seq == seq) else {
            return false;
        };
        r.in_llc = false;
        r.t_wpq = r.t_wpq.min(t);
        let t_wpq = r.t_wpq;
        self.llc_count -= 1;
        self.schedule_persist(t_wpq, id);
        true
    }

    /// Keeps an emptied LLC group's allocation for the next dirty line (a bounded pool).
    fn recycle_group(&mut self, mut group: Vec<RecRef>) {
        if group.capacity() > 0 && self.spare_groups.len() < 1024 {
            group.clear();
            self.spare_groups.push(group);
        }
    }

    /// Time to move `bytes` across PCIe at its bandwidth (latency excluded), rounded up.
    fn pcie_time(&self, bytes: u64) -> Duration {
        Duration::from_nanos((bytes * 8).div_ceil(self.p.pcie_gbps))
    }

    /// [`pcie_time`](Self::pcie_time) of an inbound write, remembered for the next write
    /// of the same length: a stream's writes all have one length, and a 64-bit division
    /// per write is a noticeable part of the line's cost.
    pub(crate) fn pcie_time_of_write(&mut self, bytes: u64) -> Duration {
        if self.pcie_memo.0 != bytes {
            self.pcie_memo = (bytes, self.pcie_time(bytes));
        }
        self.pcie_memo.1
    }

    fn rec(&self, id: u32, seq: u64) -> Option<&Record> {
        self.records[id as usize].as_ref().filter(|r| r.seq == seq)
    }

    #[inline]
    fn release(&mut self, id: u32) {
        self.records[id as usize] = None;
        self.free.push(id);
    }

    /// Counts a new pending PM record of `addr`'s line (a record that is not yet in the
    /// medium keeps its line's state alive).
    fn pend(&mut self, addr: u64) {
        self.lines.get_or_default(addr / LINE * LINE).pending += 1;
    }

    /// A record of `bytes` at `addr` (within one line) in a free slot, made by an inbound
    /// DMA if `dma` (else a CPU store), not yet scheduled into a WPQ (`t_wpq` is
    /// `Instant::NEVER`). Returns its slot and sequence number. A PM record's line counts
    /// it through [`pend`](Self::pend) or [`schedule_wpq`](Self::schedule_wpq).
    fn new_record(
        &mut self,
        space: Space,
        addr: u64,
        bytes: &[u8],
        arrive: Instant,
        visible: Instant,
        dma: bool,
    ) -> RecRef {
        let at = self.alloc_record();
        let t_wpq = Instant::NEVER;
        self.put_record(at, space, addr, bytes, arrive, visible, t_wpq, dma);
        at
    }

    /// A free slot for a new record and the record's sequence number; the slot stays
    /// empty until [`put_record`](Self::put_record) fills it.
    #[inline]
    fn alloc_record(&mut self) -> RecRef {
        let seq = self.next_seq;
        self.next_seq += 1;
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.records.push(None);
                (self.records.len() - 1) as u32
            }
        };
        (id, seq)
    }

    /// Fills slot `id` from [`alloc_record`](Self::alloc_record) (see
    /// [`new_record`](Self::new_record)).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn put_record(
        &mut self,
        (id, seq): RecRef,
        space: Space,
        addr: u64,
        bytes: &[u8],
        arrive: Instant,
        visible: Instant,
        t_wpq: Instant,
        dma: bool,
    ) {
        let line = addr / LINE * LINE;
        let off = (addr - line) as usize;
        assert!(off + bytes.len() <= LINE as usize, "record crosses a line");
        // Built in its slot: no 100-byte record moved about. A whole line (every write of
        // a stream) is its data as it is; a part of one is copied over zeros.
        let data = match <&[u8; LINE as usize]>::try_from(bytes) {
            Ok(whole) => *whole,
            Err(_) => {
                let mut data = [0u8; LINE as usize];
                data[off..off + bytes.len()].copy_from_slice(bytes);
                data
            }
        };
        self.records[id as usize] = Some(Record {
            seq,
            space,
            line,
            off: off as u8,
            len: bytes.len() as u8,
            data,
            t_arrive: arrive,
            t_visible: visible,
            t_wpq,
            in_llc: false,
            in_media: false,
            dma,
        });
    }
}

/// A geometry divisor: powers of two (every shipped profile) divide by shifting, since a
/// hardware division per written line is a noticeable share of the simulator's time.
#[derive(Copy, Clone, Debug)]
struct Divisor {
    d: u64,
    shift: Option<u32>,
}

impl Divisor {
    fn new(d: u64) -> Self {
        assert!(d > 0, "zero divisor in the PM geometry");
        let shift = d.is_power_of_two().then(|| d.trailing_zeros());
        Divisor { d, shift }
    }
    #[inline]
    fn div(self, x: u64) -> u64 {
        match self.shift {
            Some(s) => x >> s,
            None => x / self.d,
        }
    }
    #[inline]
    fn rem(self, x: u64) -> u64 {
        match self.shift {
            Some(_) => x & (self.d - 1),
            None => x % self.d,
        }
    }
}

/// Where a PM address lives: channel, bank and row (seed 004 Table III geometry).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PmLocation {
    /// Memory channel.
    pub channel: u32,
    /// Bank within the channel.
    pub bank: u32,
    /// Row within the bank.
    pub row: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::PmMedia;
    use std::sync::{Arc, Mutex};

    /// A medium whose contents the test can see while the hierarchy owns it.
    #[derive(Debug, Clone, Default)]
    struct Shared(Arc<Mutex<SparseMem>>);
    impl PmMedia for Shared {
        fn read(&self, addr: u64, buf: &mut [u8]) {
            self.0.lock().unwrap().read(addr, buf)
        }
        fn write(&mut self, addr: u64, data: &[u8]) {
            self.0.lock().unwrap().write(addr, data)
        }
        fn snapshot(&self) -> SparseMem {
            self.0.lock().unwrap().clone()
        }
    }

    fn hier(domain: PersistenceDomain, ddio: bool) -> (MemoryHierarchy, Shared) {
        let media = Shared::default();
        let h = MemoryHierarchy::with_media(
            domain,
            ddio,
            &LatencyProfile::default_profile(),
            Prng::from_seed(3),
            Box::new(media.clone()),
        );
        (h, media)
    }

    #[test]
    fn each_domain_writes_the_medium_when_a_line_enters_it() {
        let t0 = Instant::from_nanos(1_000);
        for (domain, ddio) in [
            (PersistenceDomain::Wsp, true),
            (PersistenceDomain::Mhp, true),
            (PersistenceDomain::Dmp, false),
        ] {
            let (mut h, media) = hier(domain, ddio);
            let vis = h.dma_write(t0, Space::Pm, 1 << 44, &[7; 64]).visible;
            let in_media = |m: &Shared| m.0.lock().unwrap().read_vec(1 << 44, 64) == vec![7; 64];
            assert_eq!(
                in_media(&media),
                domain == PersistenceDomain::Wsp,
                "{domain:?} at arrival"
            );
            h.advance(vis);
            assert_eq!(
                in_media(&media),
                domain != PersistenceDomain::Dmp,
                "{domain:?} once visible"
            );
            let all = FlushRange::all(Space::Pm);
            let done = h.flush_done(vis, FlushPlacement::Persistence, all);
            h.advance(done);
            assert!(in_media(&media), "{domain:?} after a FLUSH");
        }
    }

    #[test]
    fn bookkeeping_stays_bounded_over_a_long_run() {
        let (mut h, _) = hier(PersistenceDomain::Dmp, true);
        let mut t = Instant::from_nanos(1);
        for i in 0..200_000u64 {
            h.dma_write(t, Space::Pm, (1 << 44) + (i % 4096) * 64, &[1; 64]);
            t += Duration::from_nanos(500);
        }
        h.advance(t + Duration::from_millis(1));
        // Everything has left the cache by now; nothing per write may remain.
        assert!(
            h.llc_fifo.len() < 1_000,
            "LLC queue grew to {}",
            h.llc_fifo.len()
        );
        assert!(h.records.iter().flatten().count() < 1_000);
        assert!(h.lines.len() < 1_000);
    }

    #[test]
    fn a_restart_sees_only_what_the_medium_kept() {
        let (mut h, media) = hier(PersistenceDomain::Dmp, true);
        let t = Instant::from_nanos(10);
        h.cpu_store(t, Space::Pm, 1 << 44, b"cached");
        let mut buf = [0u8; 6];
        h.cpu_load(t, Space::Pm, 1 << 44, &mut buf);
        assert_eq!(&buf, b"cached");
        h.power_fail(t);
        h.cpu_load(t, Space::Pm, 1 << 44, &mut buf);
        assert_eq!(
            buf, [0; 6],
            "an unflushed store in the cache is lost under DMP"
        );
        assert_eq!(media.0.lock().unwrap().read_vec(1 << 44, 6), vec![0; 6]);
    }
}
