//! Clearing a range of memory that nothing writes any more (see
//! [`MemoryHierarchy::zero_idle`]): what a server does before it gives one client's memory
//! to another. Apart from the data path: it is never on it.

use super::{MemoryHierarchy, Space};
use crate::time::Instant;

/// Bytes of zeros written to the medium at a time.
const CHUNK: usize = 64 * 1024;

impl MemoryHierarchy {
    /// Makes `addr..addr+len` of `space` all zero at `now`, visible and (PM) in the medium
    /// at once, as a server's CPU would with non-temporal stores and a fence before it
    /// hands the memory to someone else. Only a range that nothing still writes can be
    /// cleared so: `Err(t)` (nothing changed) while a write to it is in flight, with `t`
    /// the latest instant one of them changes stage, after which to try again. The caller
    /// also [`sync_media`](Self::sync_media)s before it relies on the zeros surviving a
    /// machine crash.
    pub fn zero_idle(
        &mut self,
        now: Instant,
        space: Space,
        addr: u64,
        len: u64,
    ) -> Result<(), Instant> {
        self.advance(now);
        let end = addr.saturating_add(len);
        let overlaps = |a: u64, n: u64| a < end && addr < a + n;
        let busy = self
            .records
            .iter()
            .flatten()
            .filter(|r| r.space == space && overlaps(r.addr(), r.len as u64))
            .map(|r| match space {
                // A DRAM record is gone once visible; a PM one once in the WPQ.
                Space::Dram => r.t_visible,
                Space::Pm => r.t_wpq.max(r.t_visible),
            })
            .max();
        // A write held in the RNIC buffer leaves it when its QP goes on or goes away: not
        // at a time the hierarchy knows, so the caller tries again a little later.
        let held = space == Space::Pm && self.held.overlaps(addr, len);
        if let Some(t) = busy {
            return Err(t.max(now));
        }
        if held {
            return Err(now);
        }
        match space {
            Space::Dram => self.dram.zero_range(addr, len),
            Space::Pm => {
                let zeros = [0u8; CHUNK];
                let mut a = addr;
                while a < end {
                    let n = ((end - a) as usize).min(CHUNK);
                    self.media.write(a, &zeros[..n]);
                    a += n as u64;
                }
                // The visible image now reads through to the cleared medium.
                self.pm_visible.zero_range(addr, len);
            }
        }
        Ok(())
    }
}
