//! Power failure (see [`MemoryHierarchy`]): what the persistence domain keeps at an
//! instant (seed 000 Table 1's domains), the image a crash would leave, and the restart.

use super::{MemoryHierarchy, Record, Space};
use crate::config::PersistenceDomain;
use crate::mem::SparseMem;
use crate::time::Instant;

impl MemoryHierarchy {
    /// The PM image that would survive a power failure at `at` (which must not precede the
    /// last operation), without changing the hierarchy.
    pub fn crash_image(&mut self, at: Instant) -> SparseMem {
        self.advance(at);
        let mut img = self.media.snapshot();
        for (_, r) in self.survivors(at) {
            img.write(r.addr(), r.bytes());
        }
        // Held writes go out last (they are in the medium already, over what it held).
        for h in self.held.in_arrival_order() {
            img.write(h.addr, &h.data);
        }
        img
    }

    /// Power failure at `at`: the persistence domain keeps what it protects, everything
    /// else (DRAM, caches or buffers outside the domain) is lost, and the machine restarts
    /// with the surviving PM image visible and durable.
    pub fn power_fail(&mut self, at: Instant) {
        self.advance(at);
        let survivors: Vec<(u64, Vec<u8>)> = self
            .survivors(at)
            .into_iter()
            .map(|(_, r)| (r.addr(), r.bytes().to_vec()))
            .collect();
        for (addr, bytes) in survivors {
            self.media.write(addr, &bytes);
        }
        // The RNIC buffer's held writes are written out last, and stay.
        for h in self.held.take() {
            self.media.write(h.addr, &h.data);
        }
        // The machine restarts with what the medium holds; nothing else is visible.
        self.pm_visible.clear();
        self.dram.clear();
        self.records.clear();
        self.free.clear();
        self.vis_fifo.clear();
        self.persist.clear();
        self.lines.clear();
        self.llc_fifo.clear();
        self.llc_count = 0;
        for c in &mut self.channels {
            c.draining.clear();
            c.banks.iter_mut().for_each(|b| *b = (at, u64::MAX));
        }
        self.rnic_dma_free = at;
        self.last_visible = at;
        self.max_dma_visible = at;
        self.max_dma_wpq = at;
        self.fence_until = Instant::ZERO;
    }

    /// A copy of what survives a crash now (the same as [`crash_image`](Self::crash_image)).
    pub fn durable(&mut self, now: Instant) -> SparseMem {
        self.crash_image(now)
    }

    /// Whether the `len` bytes at PM `addr` hold the same value in the image that would
    /// survive a crash at `now` as in the visible image.
    pub fn is_persistent(&mut self, now: Instant, addr: u64, len: usize) -> bool {
        let img = self.crash_image(now);
        let mut vis = vec![0u8; len];
        self.pm_visible.read_over(addr, &mut vis, &*self.media);
        img.read_vec(addr, len) == vis
            && !self.vis_fifo.iter().any(|&(_, id, seq)| {
                self.records[id as usize]
                    .as_ref()
                    .filter(|r| r.seq == seq && r.space == Space::Pm)
                    .is_some_and(|r| r.addr() < addr + len as u64 && addr < r.addr() + r.len as u64)
            })
    }

    fn survivors(&self, at: Instant) -> Vec<(u64, &Record)> {
        let mut out: Vec<(u64, &Record)> = self
            .records
            .iter()
            .flatten()
            .filter(|r| r.space == Space::Pm && !r.in_media)
            .filter(|r| match self.domain {
                PersistenceDomain::Dmp => r.t_wpq <= at,
                PersistenceDomain::Mhp => r.t_visible <= at,
                PersistenceDomain::Wsp => r.t_arrive <= at,
            })
            .map(|r| (r.seq, r))
            .collect();
        // Same-line writes apply in visibility order, which is their version order (a CPU
        // store can be created after, yet become visible before, an inbound DMA).
        out.sort_unstable_by_key(|(seq, r)| (r.t_visible, *seq));
        out
    }
}
