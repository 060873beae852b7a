//! The CPU's side of the memory system (see [`MemoryHierarchy`]): loads, stores into the
//! write-back LLC, `clwb` and `sfence` (seed 000 §2: what a server's own code does to make
//! its writes persistent).

use super::{MemoryHierarchy, Space, LINE};
use crate::config::PersistenceDomain;
use crate::time::{Duration, Instant};

impl MemoryHierarchy {
    /// A CPU load at `now` of what is visible.
    pub fn cpu_load(&mut self, now: Instant, space: Space, addr: u64, buf: &mut [u8]) {
        self.advance(now);
        self.read_visible(space, addr, buf);
    }

    /// A CPU store at `now`: visible at once, in the LLC (write-back cache) until evicted
    /// or written back with [`clwb`](Self::clwb).
    pub fn cpu_store(&mut self, now: Instant, space: Space, addr: u64, data: &[u8]) {
        self.advance(now);
        match space {
            Space::Dram => self.dram.write(addr, data),
            Space::Pm => {
                self.pm_visible.write_over(addr, data, &*self.media);
                let mut done = 0usize;
                while done < data.len() {
                    let a = addr + done as u64;
                    let n = ((LINE - a % LINE) as usize).min(data.len() - done);
                    let (id, _) =
                        self.new_record(Space::Pm, a, &data[done..done + n], now, now, false);
                    self.pend(a);
                    // Under MHP and WSP a store is durable once visible, which is now.
                    if self.domain != PersistenceDomain::Dmp {
                        self.write_media(id);
                    }
                    let line = a / LINE * LINE;
                    let inflight = self.inflight_dmas(line, now);
                    if self.domain == PersistenceDomain::Wsp {
                        // A power failure drains the cache before the RNIC and IIO buffers:
                        // a DMA still in flight lands over this store.
                        for &dma in &inflight {
                            let r = self.records[dma as usize].as_ref().unwrap();
                            if r.in_media {
                                let (addr, bytes) = (r.addr(), r.bytes().to_vec());
                                self.media_write(addr, &bytes);
                            }
                        }
                    }
                    // The oldest in-flight DMA that bypasses the cache: the first to commit.
                    let bypass = inflight.iter().find_map(|&dma| {
                        let r = self.records[dma as usize].as_ref().unwrap();
                        (!r.in_llc).then_some(r.t_wpq)
                    });
                    match bypass {
                        // The first in-flight DMA's commit snoops this store's line out of
                        // the cache ahead of its own data: both reach the WPQ together, the
                        // store first (the heap orders same-instant entries by visibility).
                        // Taking a later DMA's time would let the store persist after, and
                        // over, an earlier DMA of other bytes of the line.
                        Some(t_wpq) => {
                            self.records[id as usize].as_mut().unwrap().t_wpq = t_wpq;
                            self.schedule_persist(t_wpq, id);
                        }
                        None => {
                            self.enter_llc(id, now);
                        }
                    }
                    self.stats.cpu_lines += 1;
                    done += n;
                }
            }
        }
    }

    /// `clwb`/`clflushopt` of every line overlapping `addr..addr+len` at `now`: dirty lines
    /// head for the WPQ; [`sfence`](Self::sfence) waits for them, and for any earlier write
    /// of those lines still in flight to the WPQ. Returns the issue cost.
    pub fn clwb(&mut self, now: Instant, addr: u64, len: u64) -> Duration {
        self.advance(now);
        if len == 0 {
            return Duration::ZERO;
        }
        let first = addr / LINE * LINE;
        let lines = (addr + len).div_ceil(LINE) - addr / LINE;
        if lines > self.lines.len() as u64 {
            // A range wider than the lines that have state (a peer may name a whole
            // region, gigabytes): only those can have anything to write back, so visit
            // them, in address order as the walk below would, instead of every line.
            let last = first + (lines - 1) * LINE;
            let mut pending: Vec<u64> = self
                .lines
                .keys()
                .filter(|l| (first..=last).contains(l))
                .collect();
            pending.sort_unstable();
            for line in pending {
                self.clwb_line(now, (line - first) / LINE, line);
            }
        } else {
            for i in 0..lines {
                self.clwb_line(now, i, first + i * LINE);
            }
        }
        self.p.clwb.mul(lines)
    }

    /// [`clwb`](Self::clwb) of `line`, the `i`-th of its range (its write-back issues after
    /// the `i` before it).
    pub(super) fn clwb_line(&mut self, now: Instant, i: u64, line: u64) {
        let Some(ls) = self.lines.get_mut(line) else {
            return;
        };
        // A write of this line already on its way to the memory controller (an inbound
        // DMA with DDIO off, or an earlier write-back) is held by another agent; the
        // write-back completes, and the fence waits, only once it has landed.
        if ls.floor_wpq > now {
            self.fence_until = self.fence_until.max(ls.floor_wpq);
        }
        if ls.llc.is_empty() {
            return;
        }
        // Only lines already in the cache can be written back: an inbound DMA still in
        // the RNIC or IIO stays where it is.
        let mut later = std::mem::take(&mut ls.llc);
        let mut recs = std::mem::take(&mut self.clwb_scratch);
        recs.clear();
        let records = &self.records;
        later.retain(|&(id, seq)| {
            let visible = records[id as usize]
                .as_ref()
                .filter(|r| r.seq == seq)
                .is_some_and(|r| r.t_visible <= now);
            if visible {
                recs.push((id, seq));
            }
            !visible
        });
        if recs.is_empty() {
            self.lines.get_mut(line).unwrap().llc = later;
            self.clwb_scratch = recs;
            return;
        }
        // The records that stay keep their write-back time; the group's queue entry may
        // have left with `recs`, so the newest that stays carries it now.
        if let Some(&(lid, _)) = later.last() {
            let t = self.records[lid as usize].as_ref().unwrap().t_wpq;
            self.schedule_persist(t, lid);
        }
        self.lines.get_mut(line).unwrap().llc = later;
        let t_imc = self.imc_arrival(now + self.p.clwb.mul(i + 1), line);
        let t = self.admit_wpq(t_imc, line);
        let ls = self.lines.get_mut(line).unwrap();
        let t = t.max(ls.floor_wpq);
        ls.floor_wpq = t;
        for &(id, seq) in &recs {
            let live = self.leave_llc(id, seq, t);
            assert!(live, "LLC list holds live records");
            self.stats.clwb_lines += 1;
        }
        self.fence_until = self.fence_until.max(t);
        self.clwb_scratch = recs;
    }

    /// `sfence` at `now`: returns when the CPU may go on, i.e. when every line written back
    /// since the last fence is in the WPQ (the ADR domain).
    pub fn sfence(&mut self, now: Instant) -> Instant {
        let t = now.max(self.fence_until) + self.p.sfence;
        self.fence_until = Instant::ZERO;
        t
    }
}
