//! The PM pool file: persistent memory for the soft RNIC, as a memory-mapped file.
//!
//! Layout: a 4 KiB header, then the PM data area. The header holds a magic string, a
//! version, the data offset and length, and a CRC-32C of the header, so a wrong, damaged
//! or truncated file is refused with a clear error and never overwritten.
//!
//! Durability: the model writes a line into the pool at the instant the line enters the
//! server's persistence domain ([`remora_model::mem::PmMedia`]). A `kill -9` keeps what the
//! process wrote to the mapping (the page cache survives the process); to survive an OS
//! crash as well, the runtime `msync`s the pages written so far before any packet leaves
//! the process, so nothing is acknowledged before it is on stable storage. A pool on a
//! memory file system (`tmpfs`, `ramfs`, e.g. `/dev/shm`) has no stable storage below the
//! page cache: `msync` does nothing there but cost a system call, so it is skipped
//! ([`SyncMode::Memory`]) and the file still holds exactly the crash image. On a DAX file
//! system the pool is mapped with `MAP_SYNC` and the lines written are made durable with
//! `clwb` (or `clflushopt`, `clflush`) and one `sfence` instead ([`SyncMode::MapSync`],
//! [`crate::dax`]); the pool asks the kernel for such a mapping, and its refusal is how it
//! tells a page-cache-backed file from a DAX one.

use crate::dax::{SyncMap, WriteBack, CACHE_LINE};
use memmap2::MmapMut;
use remora_model::mem::{PmMedia, SparseMem, PAGE_BYTES};
use remora_model::rnic::PM_BASE;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"REMORAPM";
/// Pool format version.
pub const POOL_VERSION: u32 = 1;
/// Bytes of the header (and offset of the data area).
pub const HEADER_BYTES: u64 = 4096;
/// Smallest data area accepted.
pub const MIN_POOL_BYTES: u64 = 1 << 20;

/// Why a pool file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The file system said no.
    #[error("pool {path}: {err}")]
    Io {
        /// The pool file.
        path: PathBuf,
        /// The error.
        err: std::io::Error,
    },
    /// Not a remora pool (wrong magic): refused, not overwritten.
    #[error("pool {0}: not a remora PM pool (bad magic); refusing to touch it")]
    NotAPool(PathBuf),
    /// Another format version.
    #[error("pool {path}: format version {found}, this build reads {POOL_VERSION}")]
    Version {
        /// The pool file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
    },
    /// The header's checksum or fields are wrong.
    #[error("pool {path}: damaged header ({why})")]
    Damaged {
        /// The pool file.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
    /// Smaller than asked or than the header says.
    #[error("pool {path}: {have} bytes, need {need}")]
    TooSmall {
        /// The pool file.
        path: PathBuf,
        /// Bytes present.
        have: u64,
        /// Bytes needed.
        need: u64,
    },
}

/// How writes reach stable storage.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// `msync` of the pages written, before any packet that may depend on them leaves.
    Msync,
    /// The file lives in memory (`tmpfs`, `ramfs`): the mapping is the file, it survives
    /// the process, and there is nothing further to sync to.
    Memory,
    /// A `MAP_SYNC` mapping on a DAX file system: each line written is written back with
    /// this instruction and one `sfence` follows, before any packet that may depend on them
    /// leaves; no system call.
    MapSync(WriteBack),
}

/// How an open pool makes its writes durable, and why, for the server's start-up line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Durability {
    /// The mechanism.
    pub mode: SyncMode,
    /// The mount table marks the file system `dax`.
    pub dax_mount: bool,
    /// Why a `MAP_SYNC` mapping was not used, when one was asked for (the kernel's answer).
    pub map_sync_refused: Option<String>,
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.mode {
            SyncMode::MapSync(w) => write!(
                f,
                "MAP_SYNC mapping on a DAX file system: persistence by {} + sfence of the lines written",
                w.name()
            ),
            SyncMode::Memory => f.write_str("in memory (tmpfs): the mapping is the file, no msync"),
            SyncMode::Msync => {
                f.write_str("persistence by msync of touched pages")?;
                match (&self.map_sync_refused, self.dax_mount) {
                    (Some(why), true) => write!(
                        f,
                        " (the mount says dax, but the kernel refused MAP_SYNC: {why})"
                    ),
                    (Some(why), false) => {
                        write!(f, " (not DAX: the kernel refused MAP_SYNC: {why})")
                    }
                    (None, _) => Ok(()),
                }
            }
        }
    }
}

/// The pool's mapping: memmap2's for `msync` and in-memory pools, a `MAP_SYNC` one on DAX.
#[derive(Debug)]
enum Mapping {
    Plain(MmapMut),
    Sync(SyncMap),
}

impl std::ops::Deref for Mapping {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Mapping::Plain(m) => m,
            Mapping::Sync(m) => m,
        }
    }
}

impl std::ops::DerefMut for Mapping {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Mapping::Plain(m) => m,
            Mapping::Sync(m) => m,
        }
    }
}

/// An open pool: the mapping and its geometry.
#[derive(Debug)]
pub struct Pool {
    path: PathBuf,
    map: Mapping,
    /// Byte range of the mapping written since the last `sync`.
    dirty: Option<(usize, usize)>,
    /// Under [`SyncMode::MapSync`]: the line-aligned ranges written since the last `sync`
    /// (adjacent writes merged), so a sync writes back only lines that were written.
    dirty_lines: Vec<(usize, usize)>,
    len: u64,
    created: bool,
    durability: Durability,
}

fn header(len: u64) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0u8; HEADER_BYTES as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&POOL_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&HEADER_BYTES.to_le_bytes());
    h[24..32].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c(&h[..64]);
    h[64..68].copy_from_slice(&crc.to_le_bytes());
    h
}

impl Pool {
    /// Opens the pool at `path`, creating it with a data area of `len` bytes if it does not
    /// exist. An existing file must be a valid pool at least `len` bytes large.
    pub fn open_or_create(path: &Path, len: u64) -> Result<Pool, PoolError> {
        let io = |err| PoolError::Io {
            path: path.to_path_buf(),
            err,
        };
        if len < MIN_POOL_BYTES {
            return Err(PoolError::TooSmall {
                path: path.to_path_buf(),
                have: len,
                need: MIN_POOL_BYTES,
            });
        }
        let created = !path.exists();
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create(created)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        if created {
            file.set_len(HEADER_BYTES + len).map_err(io)?;
            let mut map = unsafe_map(&file).map_err(io)?;
            map[..HEADER_BYTES as usize].copy_from_slice(&header(len));
            map.flush_range(0, HEADER_BYTES as usize).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        let size = file.metadata().map_err(io)?.len();
        if size < HEADER_BYTES {
            return Err(PoolError::NotAPool(path.to_path_buf()));
        }
        let mount = mount_of(path);
        let dax_mount = mount.as_ref().is_some_and(|m| m.dax);
        let in_memory = mount
            .as_ref()
            .is_some_and(|m| matches!(m.fs_type.as_str(), "tmpfs" | "ramfs"));
        let (map, durability) = map_for_durability(&file, in_memory, dax_mount).map_err(io)?;
        let h = &map[..HEADER_BYTES as usize];
        if &h[..8] != MAGIC {
            return Err(PoolError::NotAPool(path.to_path_buf()));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        if version != POOL_VERSION {
            return Err(PoolError::Version {
                path: path.to_path_buf(),
                found: version,
            });
        }
        if crc32c::crc32c(&h[..64]).to_le_bytes() != h[64..68] {
            return Err(PoolError::Damaged {
                path: path.to_path_buf(),
                why: "header checksum mismatch",
            });
        }
        if u64::from_le_bytes(h[16..24].try_into().expect("8 bytes")) != HEADER_BYTES {
            return Err(PoolError::Damaged {
                path: path.to_path_buf(),
                why: "unknown data offset",
            });
        }
        let data_len = u64::from_le_bytes(h[24..32].try_into().expect("8 bytes"));
        if size < HEADER_BYTES + data_len {
            return Err(PoolError::TooSmall {
                path: path.to_path_buf(),
                have: size.saturating_sub(HEADER_BYTES),
                need: data_len,
            });
        }
        if data_len < len {
            return Err(PoolError::TooSmall {
                path: path.to_path_buf(),
                have: data_len,
                need: len,
            });
        }
        Ok(Pool {
            path: path.to_path_buf(),
            map,
            dirty: None,
            dirty_lines: Vec::new(),
            len: data_len,
            created,
            durability,
        })
    }

    /// Bytes of PM.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True for an empty data area (never: pools have a minimum size).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// True if this run created the file.
    pub fn created(&self) -> bool {
        self.created
    }
    /// How writes are made durable.
    pub fn sync_mode(&self) -> SyncMode {
        self.durability.mode
    }
    /// How writes are made durable, and why (for the server's start-up line).
    pub fn durability(&self) -> &Durability {
        &self.durability
    }

    fn range(&self, addr: u64, len: usize) -> std::ops::Range<usize> {
        let off = addr
            .checked_sub(PM_BASE)
            .expect("PM address below the PM base");
        let end = off + len as u64;
        assert!(
            end <= self.len,
            "PM access {off:#x}+{len} beyond the {}-byte pool",
            self.len
        );
        (HEADER_BYTES + off) as usize..(HEADER_BYTES + end) as usize
    }
}

/// Maps the pool file for the durability its file system allows: in memory, a plain
/// mapping and nothing to sync; elsewhere a `MAP_SYNC` mapping if the kernel grants one
/// (DAX) and the CPU can write lines back, else a plain mapping synced with `msync`.
fn map_for_durability(
    file: &File,
    in_memory: bool,
    dax_mount: bool,
) -> std::io::Result<(Mapping, Durability)> {
    let plain = |mode, refused| {
        Ok((
            Mapping::Plain(unsafe_map(file)?),
            Durability {
                mode,
                dax_mount,
                map_sync_refused: refused,
            },
        ))
    };
    if in_memory {
        return plain(SyncMode::Memory, None);
    }
    let Some(insn) = WriteBack::detect() else {
        return plain(
            SyncMode::Msync,
            Some("no cache-line write-back instruction on this CPU".into()),
        );
    };
    match SyncMap::map(file) {
        Ok(m) => Ok((
            Mapping::Sync(m),
            Durability {
                mode: SyncMode::MapSync(insn),
                dax_mount,
                map_sync_refused: None,
            },
        )),
        Err(e) => plain(SyncMode::Msync, Some(e.to_string())),
    }
}

#[allow(unsafe_code)]
fn unsafe_map(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: the pool file is ours for the life of the process; if another process
    // truncated it under us, accesses could fault, which is the documented hazard of
    // memmap2's mapping and the reason the server holds the only handle.
    unsafe { MmapMut::map_mut(file) }
}

/// The file system a path lives on.
struct Mount {
    fs_type: String,
    dax: bool,
}

/// The mount `path` lives on (the longest mount point above it, from
/// /proc/self/mountinfo): its file system type and whether it is mounted with `dax`.
fn mount_of(path: &Path) -> Option<Mount> {
    let abs = std::fs::canonicalize(path).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(usize, Mount)> = None;
    for line in info.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 {
            continue;
        }
        let (mount, opts) = (f[4], f[5]);
        // After the optional fields, " - " then the file system type and its options.
        let after = f.iter().position(|x| *x == "-").map(|i| &f[i + 1..]);
        let fs_type = after.and_then(|a| a.first()).copied().unwrap_or("");
        let super_opts = after.and_then(|a| a.get(2)).copied().unwrap_or("");
        if abs.starts_with(mount) && best.as_ref().is_none_or(|(l, _)| mount.len() > *l) {
            best = Some((
                mount.len(),
                Mount {
                    fs_type: fs_type.to_string(),
                    dax: opts.contains("dax") || super_opts.contains("dax"),
                },
            ));
        }
    }
    best.map(|(_, m)| m)
}

impl PmMedia for Pool {
    fn read(&self, addr: u64, buf: &mut [u8]) {
        let r = self.range(addr, buf.len());
        buf.copy_from_slice(&self.map[r]);
    }
    fn write(&mut self, addr: u64, data: &[u8]) {
        let r = self.range(addr, data.len());
        self.map[r.clone()].copy_from_slice(data);
        match self.durability.mode {
            SyncMode::Memory => {}
            SyncMode::Msync => {
                self.dirty = Some(match self.dirty {
                    Some((a, b)) => (a.min(r.start), b.max(r.end)),
                    None => (r.start, r.end),
                });
            }
            SyncMode::MapSync(_) => {
                let (a, b) = (
                    r.start / CACHE_LINE * CACHE_LINE,
                    r.end.div_ceil(CACHE_LINE) * CACHE_LINE,
                );
                match self.dirty_lines.last_mut() {
                    // Streams of records are contiguous: one range, not one per write.
                    Some(last) if a <= last.1 && b >= last.0 => {
                        *last = (last.0.min(a), last.1.max(b));
                    }
                    _ => self.dirty_lines.push((a, b)),
                }
            }
        }
    }
    fn sync(&mut self) {
        match self.durability.mode {
            // Nothing below the page cache for a file that lives in memory.
            SyncMode::Memory => {}
            // msync of the pages written since the last sync.
            SyncMode::Msync => {
                if let Some((a, b)) = self.dirty.take() {
                    let page = PAGE_BYTES as usize;
                    let start = a / page * page;
                    let end = (b.div_ceil(page) * page).min(self.map.len());
                    let Mapping::Plain(m) = &self.map else {
                        unreachable!("msync mode has a plain mapping")
                    };
                    m.flush_range(start, end - start)
                        .expect("msync of the PM pool failed");
                }
            }
            // Write back the lines written since the last sync; one fence for all of them.
            SyncMode::MapSync(insn) => {
                let end = self.map.len();
                if self.dirty_lines.is_empty() {
                    return;
                }
                for (a, b) in self.dirty_lines.drain(..) {
                    crate::dax::write_back(insn, &self.map[a..b.min(end)]);
                }
                crate::dax::fence();
            }
        }
    }
    fn snapshot(&self) -> SparseMem {
        let mut m = SparseMem::new();
        let data = &self.map[HEADER_BYTES as usize..(HEADER_BYTES + self.len) as usize];
        for (i, chunk) in data.chunks(PAGE_BYTES as usize).enumerate() {
            if chunk.iter().any(|&b| b != 0) {
                m.write(PM_BASE + (i as u64) * PAGE_BYTES, chunk);
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test's own directory, removed with its files when the test ends.
    fn tmp_dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("remora-pool-test-")
            .tempdir()
            .expect("temporary directory")
    }

    #[test]
    fn data_survives_reopening() {
        let dir = tmp_dir();
        let p = dir.path().join("reopen");
        {
            let mut pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
            assert!(pool.created());
            pool.write(PM_BASE + 4000, b"persistent");
        }
        let pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
        assert!(!pool.created());
        let mut b = [0u8; 10];
        pool.read(PM_BASE + 4000, &mut b);
        assert_eq!(&b, b"persistent");
        assert_eq!(pool.snapshot().read_vec(PM_BASE + 4000, 10), b"persistent");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_pool_in_memory_skips_msync_and_keeps_its_data() {
        let shm = Path::new("/dev/shm");
        if mount_of(shm).is_none_or(|m| m.fs_type != "tmpfs") {
            eprintln!("skipped: no tmpfs at /dev/shm");
            return;
        }
        let p = shm.join(format!("remora-pool-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        {
            let mut pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
            assert_eq!(pool.sync_mode(), SyncMode::Memory);
            pool.write(PM_BASE + 64, b"in memory");
            pool.sync();
        }
        let pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
        assert_eq!(pool.snapshot().read_vec(PM_BASE + 64, 9), b"in memory");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn the_pool_says_how_it_persists_and_why() {
        // A file system backed by the page cache (the test directory): MAP_SYNC is asked
        // for and refused, so msync it is, with the kernel's reason in the start-up line.
        let dir = tmp_dir();
        let p = dir.path().join("durability");
        let pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
        let d = pool.durability().clone();
        match d.mode {
            SyncMode::Msync => {
                let why = d.map_sync_refused.as_deref().expect("a reason");
                assert!(!why.is_empty());
                assert!(d.to_string().contains("refused MAP_SYNC"), "{d}");
            }
            // The test directory is on DAX (a machine with PM) or in memory.
            SyncMode::MapSync(w) => assert!(d.to_string().contains(w.name()), "{d}"),
            SyncMode::Memory => assert!(d.to_string().contains("in memory"), "{d}"),
        }
        drop(pool);
        let shm = Path::new("/dev/shm");
        if mount_of(shm).is_some_and(|m| m.fs_type == "tmpfs") {
            let p = shm.join(format!("remora-pool-durability-{}", std::process::id()));
            let _ = std::fs::remove_file(&p);
            let pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
            assert_eq!(pool.sync_mode(), SyncMode::Memory);
            assert_eq!(pool.durability().map_sync_refused, None, "not even asked");
            drop(pool);
            std::fs::remove_file(&p).unwrap();
        }
    }

    /// The `MAP_SYNC` mode's bookkeeping on an ordinary shared mapping (no DAX here): the
    /// lines written are tracked as merged ranges, a sync writes each back with the CPU's
    /// instruction and empties the list, and the data reaches the file.
    #[test]
    fn write_back_mode_tracks_the_lines_written_and_syncs_them() {
        let Some(insn) = WriteBack::detect() else {
            eprintln!("skipped: no write-back instruction on this architecture");
            return;
        };
        let dir = tmp_dir();
        let p = dir.path().join("writeback");
        let mut pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
        pool.durability.mode = SyncMode::MapSync(insn);
        let h = HEADER_BYTES as usize;
        // Two adjacent records merge into one range; a distant one starts another; an
        // unaligned write covers both lines it touches.
        pool.write(PM_BASE, &[1u8; 64]);
        pool.write(PM_BASE + 64, &[2u8; 64]);
        pool.write(PM_BASE + 100_000, &[3u8; 8]);
        pool.write(PM_BASE + 100_060, &[4u8; 8]);
        assert_eq!(
            pool.dirty_lines,
            vec![(h, h + 128), (h + 99_968, h + 100_096)]
        );
        assert_eq!(pool.dirty, None, "no msync range in this mode");
        pool.sync();
        assert!(pool.dirty_lines.is_empty());
        pool.sync(); // nothing written: nothing to do
        drop(pool);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[h..h + 64], &[1u8; 64]);
        assert_eq!(&bytes[h + 64..h + 128], &[2u8; 64]);
        assert_eq!(&bytes[h + 100_060..h + 100_068], &[4u8; 8]);
    }

    #[test]
    fn wrong_damaged_or_small_files_are_refused_and_left_alone() {
        let dir = tmp_dir();
        let tmp = |name: &str| dir.path().join(name);
        let p = tmp("foreign");
        std::fs::write(&p, vec![b'x'; 8192]).unwrap();
        assert!(matches!(
            Pool::open_or_create(&p, MIN_POOL_BYTES),
            Err(PoolError::NotAPool(_))
        ));
        assert_eq!(
            std::fs::read(&p).unwrap(),
            vec![b'x'; 8192],
            "a foreign file is not overwritten"
        );

        let p = tmp("damaged");
        drop(Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap());
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[30] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        let e = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap_err();
        assert!(e.to_string().contains("damaged header"), "{e}");

        let p = tmp("small");
        drop(Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap());
        let e = Pool::open_or_create(&p, 4 * MIN_POOL_BYTES).unwrap_err();
        assert!(matches!(e, PoolError::TooSmall { .. }), "{e}");
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(HEADER_BYTES + 100).unwrap();
        assert!(matches!(
            Pool::open_or_create(&p, MIN_POOL_BYTES),
            Err(PoolError::TooSmall { .. })
        ));

        let p = tmp("version");
        drop(Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap());
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[8] = 9;
        std::fs::write(&p, &bytes).unwrap();
        assert!(matches!(
            Pool::open_or_create(&p, MIN_POOL_BYTES),
            Err(PoolError::Version { found: 9, .. })
        ));
        assert!(
            Pool::open_or_create(&p, 1000).is_err(),
            "a pool below the minimum size"
        );
    }
}
