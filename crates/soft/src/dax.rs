//! Persistence on a DAX file system: the pool file mapped with `MAP_SYNC`, so the kernel
//! keeps the file's block mapping durable by itself and a store is persistent once its
//! cache line has left the CPU caches. The soft RNIC then makes the lines it wrote durable
//! with a write-back per line (`clwb`, or `clflushopt`, or `clflush` on CPUs without
//! either) and one `sfence`, as a PM application would (seed 000 §2.1; PMDK's
//! `pmem_persist` does the same), instead of an `msync` system call.
//!
//! The write-back is needed whatever the platform's persistence domain: under ADR the
//! caches are outside it, and a process cannot tell ADR from eADR reliably (the
//! `/sys/bus/nd` attribute describes regions, not the mapping in hand), so it always writes
//! back, which is correct under both.

use std::fs::File;
use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Bytes of a CPU cache line (x86-64).
pub const CACHE_LINE: usize = 64;

/// The instruction that writes a cache line back to memory.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WriteBack {
    /// `clwb`: writes the line back and may keep it cached (best for data read again).
    Clwb,
    /// `clflushopt`: writes back and invalidates; weakly ordered, fenced once at the end.
    ClflushOpt,
    /// `clflush`: writes back and invalidates; ordered with every other store (slowest).
    Clflush,
}

impl WriteBack {
    /// The best write-back this CPU has, or `None` off x86-64.
    pub fn detect() -> Option<WriteBack> {
        #[cfg(target_arch = "x86_64")]
        {
            // CPUID leaf 7, sub-leaf 0, EBX: bit 24 CLWB, bit 23 CLFLUSHOPT. CLFLUSH is part
            // of SSE2, which every x86-64 CPU has.
            #[allow(unused_unsafe)] // `__cpuid_count` is safe in newer Rust versions
            // SAFETY: CPUID exists on every x86-64 CPU; leaf 7 is read-only.
            let ebx = unsafe { std::arch::x86_64::__cpuid_count(7, 0) }.ebx;
            Some(if ebx & (1 << 24) != 0 {
                WriteBack::Clwb
            } else if ebx & (1 << 23) != 0 {
                WriteBack::ClflushOpt
            } else {
                WriteBack::Clflush
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    /// The instruction's mnemonic.
    pub fn name(self) -> &'static str {
        match self {
            WriteBack::Clwb => "clwb",
            WriteBack::ClflushOpt => "clflushopt",
            WriteBack::Clflush => "clflush",
        }
    }
}

/// Writes back every cache line that overlaps `bytes` with `insn`, then fences: on return
/// the bytes are in the persistence domain of a `MAP_SYNC` mapping on a DAX file system.
pub fn persist(insn: WriteBack, bytes: &[u8]) {
    write_back(insn, bytes);
    fence();
}

/// Orders every earlier write-back before later stores (`sfence`): the write-backs of
/// [`write_back`] are complete once it returns.
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a store fence has no operands.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Starts the write-back of every cache line that overlaps `bytes` with `insn` (weakly
/// ordered: [`fence`] after the last one).
pub fn write_back(insn: WriteBack, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let start = bytes.as_ptr() as usize / CACHE_LINE * CACHE_LINE;
        let end = bytes.as_ptr() as usize + bytes.len();
        for line in (start..end).step_by(CACHE_LINE) {
            let p = line as *const u8;
            // SAFETY: `p` lies in a cache line that overlaps `bytes`, which is mapped; the
            // write-back instructions neither read nor change the data.
            unsafe {
                match insn {
                    WriteBack::Clwb => {
                        std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
                    }
                    WriteBack::ClflushOpt => std::arch::asm!(
                        "clflushopt [{0}]",
                        in(reg) p,
                        options(nostack, preserves_flags)
                    ),
                    WriteBack::Clflush => std::arch::x86_64::_mm_clflush(p),
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (insn, bytes);
        unreachable!("no write-back instruction: WriteBack::detect() gave None");
    }
}

/// A shared, writable `MAP_SYNC` mapping of a whole file (memmap2 has no `MAP_SYNC`
/// option). The kernel refuses it, with `EOPNOTSUPP`, for a file that is not on a DAX file
/// system: that refusal is how the pool tells DAX from page-cache-backed files.
#[derive(Debug)]
pub struct SyncMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by one `SyncMap` and only reached through `&`/`&mut` of it,
// like a `Vec<u8>`.
unsafe impl Send for SyncMap {}

impl SyncMap {
    /// Maps all of `file` (opened read-write) with `MAP_SHARED_VALIDATE | MAP_SYNC`.
    pub fn map(file: &File) -> io::Result<SyncMap> {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            use std::os::fd::AsRawFd as _;
            let len = usize::try_from(file.metadata()?.len())
                .map_err(|_| io::Error::other("file larger than the address space"))?;
            if len == 0 {
                return Err(io::Error::other("empty file"));
            }
            // SAFETY: a fresh mapping chosen by the kernel; nothing else is touched.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                    file.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
            Ok(SyncMap { ptr, len })
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        {
            let _ = file;
            Err(io::Error::from(io::ErrorKind::Unsupported))
        }
    }
}

impl Deref for SyncMap {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for the life of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for SyncMap {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, writable, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for SyncMap {
    fn drop(&mut self) {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        // SAFETY: unmaps exactly the mapping `map` made; nothing refers to it any more.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_back_this_cpu_has_runs_and_leaves_the_data() {
        let Some(best) = WriteBack::detect() else {
            eprintln!("skipped: no write-back instruction on this architecture");
            return;
        };
        // The detected instruction and every weaker one (all x86-64 CPUs with CLWB have
        // CLFLUSHOPT, and every one has CLFLUSH).
        let all = [WriteBack::Clwb, WriteBack::ClflushOpt, WriteBack::Clflush];
        let from = all.iter().position(|&w| w == best).unwrap();
        let mut buf = vec![0u8; 4 * CACHE_LINE + 3];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = i as u8;
        }
        for &insn in &all[from..] {
            // Unaligned start and end: every overlapping line is written back.
            persist(insn, &buf[5..3 * CACHE_LINE + 1]);
            persist(insn, &buf[..0]);
            assert!(
                buf.iter().enumerate().all(|(i, &b)| b == i as u8),
                "{insn:?}"
            );
        }
    }

    #[test]
    fn map_sync_is_refused_off_dax_and_works_on_it() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        match SyncMap::map(&file) {
            // A DAX file system (a machine with PM): the mapping is the file.
            Ok(mut m) => {
                assert_eq!(m.len(), 8192);
                m[100] = 1;
                persist(WriteBack::detect().unwrap(), &m[100..101]);
                drop(m);
                assert_eq!(std::fs::read(&path).unwrap()[100], 1);
            }
            // Anywhere else the kernel refuses MAP_SYNC (EOPNOTSUPP on Linux).
            Err(e) => {
                #[cfg(target_os = "linux")]
                assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
                let _ = e;
            }
        }
    }
}
