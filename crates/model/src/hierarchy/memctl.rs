//! The way to PM (see [`MemoryHierarchy`]): the LLC under DDIO and its write-backs, the
//! mesh to the memory controllers, each channel's write-pending queue under ADR, and the
//! PM banks the queue drains to (seed 000 §2, seed 004 Table III's geometry).

use super::MemoryHierarchy;
use crate::time::{Duration, Instant};

impl MemoryHierarchy {
    /// The record sits dirty in the LLC from `t`; it is written back with its line's other
    /// dirty records at a seeded eviction time (or earlier by `clwb` or capacity pressure).
    pub(super) fn enter_llc(&mut self, id: u32, t: Instant) -> Instant {
        let evict = t + Duration::from_nanos(self.rng.draw(self.p.evict_span));
        let r = self.records[id as usize].as_mut().unwrap();
        let (line, seq) = (r.line, r.seq);
        r.in_llc = true;
        self.llc_count += 1;
        let ls = self.lines.get_mut(line).unwrap();
        // A dirty line is written back whole: earlier dirty records of the line go with it,
        // which includes an inbound DMA still crossing PCIe (it lands in the line first).
        let landed = ls
            .llc
            .iter()
            .filter_map(|&(gid, _)| self.records[gid as usize].as_ref())
            .filter(|r| r.t_visible > t)
            .map(|r| r.t_visible + self.p.llc)
            .max()
            .unwrap_or(Instant::ZERO);
        let t_wpq = evict.max(ls.floor_wpq).max(landed);
        if ls.llc.capacity() == 0 {
            ls.llc = self.spare_groups.pop().unwrap_or_default();
        }
        ls.llc.push((id, seq));
        for &(gid, gseq) in &ls.llc {
            let r = self.records[gid as usize].as_mut().unwrap();
            debug_assert_eq!(r.seq, gseq);
            r.t_wpq = t_wpq;
        }
        // One queue entry stands for the whole group (the newest record's): when it is due,
        // `advance` writes the line's dirty records back together, oldest first. The older
        // records' entries are stale now (their `t_wpq` moved).
        self.schedule_persist(t_wpq, id);
        self.llc_fifo.push_back((id, seq));
        // Drop entries of lines that already left the cache, so the queue stays as long as
        // the cache's contents and not as long as the run.
        while let Some(&(fid, fseq)) = self.llc_fifo.front() {
            if self.rec(fid, fseq).is_some_and(|r| r.in_llc) {
                break;
            }
            self.llc_fifo.pop_front();
        }
        if self.llc_count > self.p.ddio_lines {
            self.force_evict(t);
        }
        t_wpq
    }

    pub(super) fn force_evict(&mut self, now: Instant) {
        while let Some((id, seq)) = self.llc_fifo.pop_front() {
            let live = self.rec(id, seq).is_some_and(|r| r.in_llc);
            if live {
                let line = self.records[id as usize].as_ref().unwrap().line;
                self.stats.forced_evictions += 1;
                // A write-back by the cache, not a CPU `clwb`: the hierarchy's clock is not
                // moved (`now` may be the new line's landing time, ahead of it), no CPU
                // fence waits for it, and only what is visible by the clock leaves: an
                // inbound DMA still in flight stays with its line's group.
                let (fence, at) = (self.fence_until, self.now.min(now));
                self.clwb_line(at, 0, line);
                self.fence_until = fence;
                return;
            }
        }
    }

    /// Time a write leaving the IIO/LLC at `t` reaches its channel's memory controller:
    /// mesh latency plus a seeded per-write spread. Inlined always (once per streamed
    /// line; a call cost as much as the draw).
    #[inline(always)]
    pub(super) fn imc_arrival(&mut self, t: Instant, _addr: u64) -> Instant {
        let jitter = match self.p.jitter_span {
            Some(s) => self.rng.draw(s),
            None => 0,
        };
        t + self.p.imc + Duration::from_nanos(jitter)
    }

    /// Admission into the channel's WPQ at or after `t`, waiting for a free entry; books
    /// the bank that the entry drains to. Returns the admission time. Inlined always: it
    /// runs once per streamed line, and a call's saved registers are a noticeable part
    /// of it (a plain `#[inline]` was not taken).
    #[inline(always)]
    pub(super) fn admit_wpq(&mut self, t: Instant, addr: u64) -> Instant {
        let loc = self.pm_location(addr);
        let (row_hit, conflict, cap) = (self.p.row_hit, self.p.write_conflict, self.p.wpq);
        let ch = &mut self.channels[loc.channel as usize];
        let mut t = t;
        while ch.draining.front().is_some_and(|d| *d <= t) {
            ch.draining.pop_front();
        }
        if ch.draining.len() >= cap {
            let d = ch.draining.pop_front().unwrap();
            t = t.max(d);
        }
        let bank = &mut ch.banks[loc.bank as usize];
        let service = if bank.1 == loc.row { row_hit } else { conflict };
        let drained = t.max(bank.0) + service;
        *bank = (drained, loc.row);
        ch.draining.insert(drained);
        t
    }

    /// Schedules an inbound DMA's PM record (DDIO off), slot `id` and sequence `seq`, of
    /// `line`, visible at `t_visible`, into the WPQ, keeping same-line order; it becomes
    /// its line's latest in-flight DMA. Counts the record as pending in its line: one
    /// lookup of the line per record on this, the streaming path. Returns the record's
    /// `t_wpq`; the caller makes the record with it (the slot may still be empty here).
    /// Inlined always into the streaming path, its one caller; the line's snoop out of the
    /// LLC, which a stream never needs, is a call.
    #[inline(always)]
    pub(super) fn schedule_wpq(
        &mut self,
        id: u32,
        seq: u64,
        line: u64,
        t_visible: Instant,
        t_imc: Instant,
    ) -> Instant {
        let t = self.admit_wpq(t_imc, line);
        let ls = self.lines.get_or_default(line);
        ls.pending += 1;
        ls.last_dma = Some((id, seq));
        let t = t.max(ls.floor_wpq);
        ls.floor_wpq = t;
        // A DMA write to a line dirty in the LLC snoops it out: the old data goes first.
        if !ls.llc.is_empty() {
            let group = std::mem::take(&mut ls.llc);
            self.snoop_llc(group, t);
        }
        self.persist.push_nearly_sorted((t, t_visible, seq, id));
        t
    }

    /// The records of `group`, a line's dirty records in the LLC, leave it to reach the
    /// WPQ by `t` (see [`schedule_wpq`](Self::schedule_wpq)).
    #[inline(never)]
    fn snoop_llc(&mut self, group: Vec<super::RecRef>, t: Instant) {
        for &(gid, gseq) in &group {
            self.leave_llc(gid, gseq, t);
        }
        self.recycle_group(group);
    }
}
