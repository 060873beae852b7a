//! Writes held in the RNIC buffer under WSP (see [`MemoryHierarchy::hold`]): the medium
//! holds each one, over later writes of the same bytes, from its arrival until it leaves
//! the buffer, so that a real-time runtime's pool file is what a power failure would keep
//! at every instant. Apart from the hierarchy's data path: almost always there are none.

use super::{MemoryHierarchy, Space};
use crate::config::PersistenceDomain;

/// A write waiting in the RNIC buffer under WSP (see [`MemoryHierarchy::hold`]).
#[derive(Clone, Debug)]
pub(super) struct Held {
    key: u64,
    pub(super) addr: u64,
    pub(super) data: Vec<u8>,
    /// What the medium holds under `data` without any held write: put back when the write
    /// leaves the buffer.
    base: Vec<u8>,
}

impl Held {
    /// The overlap of `self` with `addr..addr+len`, as offsets into `self` and into the
    /// other range.
    fn overlap(&self, addr: u64, len: usize) -> Option<(usize, usize, usize)> {
        let lo = self.addr.max(addr);
        let hi = (self.addr + self.data.len() as u64).min(addr + len as u64);
        (lo < hi).then(|| {
            (
                (lo - self.addr) as usize,
                (lo - addr) as usize,
                (hi - lo) as usize,
            )
        })
    }
}

impl MemoryHierarchy {
    /// A write that reached the RNIC buffer and waits there to execute (a non-posted write
    /// behind an earlier non-posted request of its QP), identified by `key`. Under WSP the
    /// RNIC buffer is in the persistence domain, and a power failure writes such a write
    /// out after everything else (`Rnic::power_fail`), so the medium holds it, over every
    /// later write of the same bytes, from now until [`release_held`](Self::release_held): then a
    /// real-time runtime's pool file is what a power failure would keep at every instant.
    /// It is not visible until it executes. Only PM writes under WSP are held; elsewhere
    /// this does nothing.
    pub fn hold(&mut self, key: u64, space: Space, addr: u64, data: &[u8]) {
        if self.domain != PersistenceDomain::Wsp || space != Space::Pm || data.is_empty() {
            return;
        }
        self.pin_visible(addr, data.len());
        // Under the earlier held writes the medium's base is theirs, not what it shows.
        let mut base = vec![0u8; data.len()];
        self.media.read(addr, &mut base);
        for h in &self.held {
            if let Some((i, j, n)) = h.overlap(addr, data.len()) {
                base[j..j + n].copy_from_slice(&h.base[i..i + n]);
            }
        }
        self.media.write(addr, data);
        self.held.push(Held {
            key,
            addr,
            data: data.to_vec(),
            base,
        });
    }

    /// The held write `key` leaves the RNIC buffer: it executed (and reached the medium as
    /// any write does) or it never will (its queue pair failed, its region went). The medium
    /// gets back what lies under it, with the other held writes over that.
    pub fn release_held(&mut self, key: u64) {
        let Some(at) = self.held.iter().position(|h| h.key == key) else {
            return;
        };
        let h = self.held.remove(at);
        // What lies under it, with the other held writes still on top, in one write.
        let mut merged = h.base;
        for o in &self.held {
            if let Some((i, j, n)) = o.overlap(h.addr, merged.len()) {
                merged[j..j + n].copy_from_slice(&o.data[i..i + n]);
            }
        }
        self.media.write(h.addr, &merged);
    }

    /// How many writes are held.
    pub fn held_writes(&self) -> usize {
        self.held.len()
    }

    /// Keys of the held writes, in arrival order.
    pub fn held_keys(&self) -> Vec<u64> {
        self.held.iter().map(|h| h.key).collect()
    }

    /// Writes `bytes` at `addr` into the medium.
    pub(super) fn media_write(&mut self, addr: u64, bytes: &[u8]) {
        if self.held.is_empty() {
            self.media.write(addr, bytes);
        } else {
            self.write_under_held(addr, bytes);
        }
    }

    /// [`media_write`](Self::media_write) under held writes: where one covers `addr..`,
    /// `bytes` become its base and it stays on top. One write of the medium, the held
    /// bytes already in it, so that a SIGKILL between two writes never leaves the medium
    /// without a held write. Out of line: held writes are rare, and the streaming path
    /// writes the medium once per line.
    #[cold]
    #[inline(never)]
    pub(super) fn write_under_held(&mut self, addr: u64, bytes: &[u8]) {
        let mut merged = bytes.to_vec();
        for h in &mut self.held {
            if let Some((i, j, n)) = h.overlap(addr, bytes.len()) {
                h.base[i..i + n].copy_from_slice(&bytes[j..j + n]);
                merged[j..j + n].copy_from_slice(&h.data[i..i + n]);
            }
        }
        self.media.write(addr, &merged);
    }
}
