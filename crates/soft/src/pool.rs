//! The PM pool file: persistent memory for the soft RNIC, as a memory-mapped file.
//!
//! Layout: a 4 KiB header, then the PM data area. The header holds a magic string, a
//! version, the data offset and length, and a CRC-32C of the header, so a wrong, damaged
//! or truncated file is refused with a clear error and never overwritten. After them comes
//! the layout record (its own length and CRC-32C): the first server to open the pool
//! writes what it keeps where (its slots, logs or stores, from its options), and a server
//! whose options would lay the data out differently is refused rather than reading one
//! layout's bytes as another's ([`Pool::claim_layout`]). Pools made before the record
//! existed have zeros there: no record, and the next server writes one.
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
//!
//! One server at a time: an open pool holds an exclusive `flock` on its file for as long as
//! it lives, so a second server on the same file is refused (naming the holder's pid)
//! instead of writing over the first one's data; the kernel drops the lock when the holder
//! dies, so a restart after `kill -9` takes it at once. A new pool is made whole under a
//! temporary name (header written and synced, every block allocated) and only then linked
//! to its path, so no crash or concurrent start leaves a half-made file where a pool
//! belongs; then its directory is synced, and a pool whose name cannot be made durable
//! that way is unlinked again and not served ([`PoolError::NameNotDurable`]). Its blocks
//! are allocated up front, as PMDK's pools are: a file system too small for the pool says
//! so at start-up, not with a `SIGBUS` when a store first touches a hole in the mapping
//! under load. Blocks a pool shares with another file (a reflinked copy, on XFS) are made
//! its own at open, as a write would need them. On a copy-on-write file system (btrfs)
//! allocated blocks hold only the first write into them, so a new pool is marked `nocow`
//! before it is sized, and a pool that is not (an older one, or a copy) is reported at
//! start-up ([`Durability::overwrite_space`]).

mod file;
mod header;

pub use header::{Header, HeaderError, HEADER_BYTES, LAYOUT_MAX, POOL_VERSION};

use crate::dax::{SyncMap, WriteBack, CACHE_LINE};
use file::{
    allocate, create, dangling_link, fs_magic, in_memory, lock, mount_of, nocow,
    remove_stale_creations, unreserved_overwrites, unsafe_map,
};
use header::LAYOUT_AT;
use memmap2::MmapMut;
use remora_model::mem::{PmMedia, SparseMem, PAGE_BYTES};
use remora_model::rnic::PM_BASE;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// Smallest data area accepted.
pub const MIN_POOL_BYTES: u64 = 1 << 20;
/// Largest data area accepted (16 TiB): the PM address space a node maps the pool at
/// (from `PM_BASE`, 2^44) stays far from overflowing, and no size sum can wrap.
pub const MAX_POOL_BYTES: u64 = 1 << 44;

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
    /// Another process holds the pool (a pool serves one server at a time).
    #[error(
        "pool {path}: in use by another process{}; a pool serves one server at a time",
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    InUse {
        /// The pool file.
        path: PathBuf,
        /// The holder's pid, as `/proc/locks` names it.
        holder: Option<u32>,
    },
    /// The file system cannot hold the pool's blocks.
    #[error("pool {path}: needs {need} bytes on its file system, which has {free} free")]
    NoSpace {
        /// The pool file.
        path: PathBuf,
        /// Bytes the pool file needs.
        need: u64,
        /// Bytes the file system has free for this user.
        free: u64,
    },
    /// A new pool was linked at its path, but its directory could not be synced, so its
    /// name might not survive an OS crash: the pool is not served, and its name is removed
    /// again (the pool held nothing), unless that failed too.
    #[error(
        "pool {path}: made, but syncing its directory {dir} failed ({err}), so its name \
         might not survive an OS crash; {}",
        name_left(unlink)
    )]
    NameNotDurable {
        /// The pool file.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
        /// Why the directory's sync failed.
        err: std::io::Error,
        /// Why the new name could not be removed again; `None`: it was.
        unlink: Option<std::io::Error>,
    },
    /// The pool was laid out by a server with other options (or another protocol's server,
    /// or an older version of this one).
    #[error(
        "pool {path}: laid out for \"{found}\"; this server would lay it out for \"{want}\". \
         Its data is kept: serve it with the options it was made with (by the version of \
         remora that made it, if no options of this one give that layout), or use another \
         pool file"
    )]
    Layout {
        /// The pool file.
        path: PathBuf,
        /// The layout the pool records.
        found: String,
        /// The layout this server's options give.
        want: String,
    },
    /// A data area below [`MIN_POOL_BYTES`] was asked for.
    #[error("pool {path}: {asked} bytes asked for; a pool holds at least {min} bytes of PM")]
    BelowMinimum {
        /// The pool file.
        path: PathBuf,
        /// Bytes asked for.
        asked: u64,
        /// [`MIN_POOL_BYTES`].
        min: u64,
    },
    /// A data area above [`MAX_POOL_BYTES`] was asked for.
    #[error("pool {path}: {asked} bytes asked for; a pool holds at most {max} bytes of PM")]
    AboveMaximum {
        /// The pool file.
        path: PathBuf,
        /// Bytes asked for.
        asked: u64,
        /// [`MAX_POOL_BYTES`].
        max: u64,
    },
    /// The pool's path is a symbolic link to a file that does not exist.
    #[error(
        "pool {0}: a symbolic link to a missing file; give the link's target, or remove the link"
    )]
    DanglingLink(PathBuf),
    /// The file is shorter than its header says: cut short by a copy or a full disk.
    #[error(
        "pool {path}: truncated: its header says {data_len} bytes of PM, the file holds {have}; \
         it is left as it is"
    )]
    Truncated {
        /// The pool file.
        path: PathBuf,
        /// Data bytes present after the header.
        have: u64,
        /// Data bytes the header records.
        data_len: u64,
    },
    /// An existing pool is smaller than the server asks for.
    #[error(
        "pool {path}: holds {have} bytes of PM, {asked} asked for; a pool does not grow: \
         ask for {have} or fewer, or use another pool file"
    )]
    SmallerThanAsked {
        /// The pool file.
        path: PathBuf,
        /// Data bytes the pool has.
        have: u64,
        /// Data bytes asked for.
        asked: u64,
    },
}

/// What [`PoolError::NameNotDurable`] left at the pool's path.
fn name_left(unlink: &Option<std::io::Error>) -> String {
    match unlink {
        None => "it was removed again (it held nothing) and is not served; \
                 start again once the file system is sound"
            .into(),
        Some(e) => format!(
            "removing it again failed too ({e}): a valid, empty pool is left there, which \
             a later start serves as it is, its name perhaps not durable; remove it first"
        ),
    }
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
    /// Why writes into the pool's allocated blocks may still need space (a copy-on-write
    /// file system, the file not marked nocow), if they may: a full file system then
    /// stops the server under load, not at start-up.
    pub overwrite_space: Option<String>,
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.fmt_mode(f)?;
        match &self.overwrite_space {
            Some(why) => write!(f, "; WARNING: space for writes is not reserved: {why}"),
            None => Ok(()),
        }
    }
}

impl Durability {
    fn fmt_mode(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
    /// Open for the pool's life: it holds the exclusive lock.
    _file: File,
    map: Mapping,
    /// Byte range of the mapping written since the last `sync`.
    dirty: Option<(usize, usize)>,
    /// Under [`SyncMode::MapSync`]: the line-aligned ranges written since the last `sync`
    /// (adjacent writes merged), so a sync writes back only lines that were written.
    dirty_lines: Vec<(usize, usize)>,
    /// The header as read at open (and as [`Pool::claim_layout`] changed it); its
    /// `data_len` is the pool's length.
    header: Header,
    created: bool,
    durability: Durability,
}

/// How much PM a server asks of its pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolBytes {
    /// A new pool gets this many bytes; an existing one keeps its size, whatever it is
    /// (the server was given no size: it serves the pool it finds).
    New(u64),
    /// A new pool gets this many bytes; an existing one must hold at least as many
    /// ([`PoolError::SmallerThanAsked`]), as a size given explicitly asks.
    AtLeast(u64),
}

impl PoolBytes {
    /// The size a new pool is created with.
    pub fn new_len(self) -> u64 {
        match self {
            PoolBytes::New(n) | PoolBytes::AtLeast(n) => n,
        }
    }
}

impl Pool {
    /// Opens the pool at `path`, creating it with a data area of `len` bytes if it does not
    /// exist. An existing file must be a valid pool at least `len` bytes large, and no other
    /// process may have it open ([`PoolError::InUse`]).
    pub fn open_or_create(path: &Path, len: u64) -> Result<Pool, PoolError> {
        Pool::open(path, PoolBytes::AtLeast(len))
    }

    /// Opens the pool at `path`, creating it as `bytes` says if it does not exist; an
    /// existing file must be a valid pool (of a size `bytes` accepts), and no other process
    /// may have it open ([`PoolError::InUse`]).
    pub fn open(path: &Path, bytes: PoolBytes) -> Result<Pool, PoolError> {
        let io = |err| PoolError::Io {
            path: path.to_path_buf(),
            err,
        };
        let len = bytes.new_len();
        if len < MIN_POOL_BYTES {
            return Err(PoolError::BelowMinimum {
                path: path.to_path_buf(),
                asked: len,
                min: MIN_POOL_BYTES,
            });
        }
        if len > MAX_POOL_BYTES {
            return Err(PoolError::AboveMaximum {
                path: path.to_path_buf(),
                asked: len,
                max: MAX_POOL_BYTES,
            });
        }
        remove_stale_creations(path);
        let (file, created) = loop {
            match OpenOptions::new().read(true).write(true).open(path) {
                Ok(file) => {
                    lock(path, &file)?;
                    break (file, false);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if dangling_link(path) {
                        return Err(PoolError::DanglingLink(path.to_path_buf()));
                    }
                    // Someone else may publish a pool at `path` meanwhile: then open theirs.
                    if let Some(file) = create(path, len)? {
                        break (file, true);
                    }
                }
                Err(e) => return Err(io(e)),
            }
        };
        let size = file.metadata().map_err(io)?.len();
        if size < HEADER_BYTES {
            // A pool cut inside its header is said to be one; anything else is not a pool.
            let mut head = [0u8; 8];
            let n = std::os::unix::fs::FileExt::read_at(&file, &mut head, 0).unwrap_or(0);
            if n == head.len() && Header::parse_magic(&head) {
                return Err(PoolError::Damaged {
                    path: path.to_path_buf(),
                    why: "file cut short inside its header",
                });
            }
            return Err(PoolError::NotAPool(path.to_path_buf()));
        }
        let dax_mount = mount_of(path).is_some_and(|m| m.dax);
        let in_memory = in_memory(&file).map_err(io)?;
        let (map, mut durability) = map_for_durability(&file, in_memory, dax_mount).map_err(io)?;
        let header = Header::parse(&map[..]).map_err(|e| e.at(path))?;
        let data_len = header.data_len;
        if size < HEADER_BYTES + data_len {
            return Err(PoolError::Truncated {
                path: path.to_path_buf(),
                have: size.saturating_sub(HEADER_BYTES),
                data_len,
            });
        }
        if matches!(bytes, PoolBytes::AtLeast(_)) && data_len < len {
            return Err(PoolError::SmallerThanAsked {
                path: path.to_path_buf(),
                have: data_len,
                asked: len,
            });
        }
        // A pool created sparse (by an older build, or copied) gets its holes filled now.
        allocate(path, &file, HEADER_BYTES + data_len)?;
        // Allocated is not enough where blocks are copied on write: said at start-up.
        let magic = fs_magic(&file).map_err(io)?;
        durability.overwrite_space = unreserved_overwrites(magic, nocow(&file).unwrap_or(false));
        Ok(Pool {
            path: path.to_path_buf(),
            _file: file,
            map,
            dirty: None,
            dirty_lines: Vec::new(),
            header,
            created,
            durability,
        })
    }

    /// Bytes of PM.
    pub fn len(&self) -> u64 {
        self.header.data_len
    }
    /// True for an empty data area (never: pools have a minimum size).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    /// The layout the header records, if a server recorded one.
    pub fn layout(&self) -> Option<&str> {
        self.header.layout.as_deref()
    }

    /// Records `layout` (what the server keeps where, described from the options that
    /// decide it) in a pool that has no record yet, or checks it against the recorded one:
    /// a server whose options would lay the data out differently gets
    /// [`PoolError::Layout`] and the pool is left as it was. The record is durable before
    /// this returns: the text first, then its length and checksum in one aligned 8-byte
    /// word, so a crash midway leaves no record (the word still zero) rather than a part.
    pub fn claim_layout(&mut self, layout: &str) -> Result<(), PoolError> {
        match &self.header.layout {
            Some(found) if found == layout => return Ok(()),
            Some(found) => {
                return Err(PoolError::Layout {
                    path: self.path.clone(),
                    found: found.clone(),
                    want: layout.to_string(),
                })
            }
            None => {}
        }
        let header = Header {
            data_len: self.header.data_len,
            layout: Some(layout.to_string()),
        };
        let bytes = header.emit();
        let text = LAYOUT_AT + 8..LAYOUT_AT + 8 + layout.len();
        self.map[text.clone()].copy_from_slice(&bytes[text]);
        self.sync_header()?;
        let word = LAYOUT_AT..LAYOUT_AT + 8;
        self.map[word.clone()].copy_from_slice(&bytes[word]);
        self.sync_header()?;
        self.header = header;
        Ok(())
    }

    /// Makes the header's bytes durable, as [`PmMedia::sync`] does the data's.
    fn sync_header(&mut self) -> Result<(), PoolError> {
        self.write_back(0..HEADER_BYTES as usize)
            .map_err(|err| PoolError::Io {
                path: self.path.clone(),
                err,
            })?;
        self.fence();
        Ok(())
    }

    /// Sends the mapping's bytes `r` towards stable storage as the pool's mode does: an
    /// `msync` of the pages they are on, or a write-back of their lines (ordered by a later
    /// [`fence`](Self::fence)); nothing in memory.
    fn write_back(&self, r: std::ops::Range<usize>) -> std::io::Result<()> {
        match (&self.map, self.durability.mode) {
            (_, SyncMode::Memory) => Ok(()),
            (Mapping::Plain(m), SyncMode::Msync) => {
                let page = PAGE_BYTES as usize;
                let start = r.start / page * page;
                let end = (r.end.div_ceil(page) * page).min(self.map.len());
                m.flush_range(start, end - start)
            }
            (_, SyncMode::MapSync(insn)) => {
                crate::dax::write_back(insn, &self.map[r.start..r.end.min(self.map.len())]);
                Ok(())
            }
            (Mapping::Sync(_), SyncMode::Msync) => unreachable!("msync mode has a plain mapping"),
        }
    }

    /// Orders the line write-backs issued so far (`MAP_SYNC` only; `msync` has returned
    /// when its pages are on storage).
    fn fence(&self) {
        if let SyncMode::MapSync(_) = self.durability.mode {
            crate::dax::fence();
        }
    }

    /// The mapping's bytes of the PM access `addr..addr + len`; panics outside the pool.
    /// Inlined with its checks, the panics out of line: the medium's every line comes
    /// here, and their formatting made every call save registers and set up a frame.
    #[inline]
    fn range(&self, addr: u64, len: usize) -> std::ops::Range<usize> {
        let Some(off) = addr.checked_sub(PM_BASE) else {
            below_pm_base()
        };
        let end = off + len as u64;
        if end > self.len() {
            beyond_the_pool(off, len, self.len());
        }
        (HEADER_BYTES + off) as usize..(HEADER_BYTES + end) as usize
    }

    /// Notes the mapping's bytes `r` as written, if the sync mode asks: a pool in memory
    /// (the streaming benchmark's) notes nothing, and the rest is out of line, so that a
    /// write, once per line the hierarchy persists, saves no registers for it.
    #[inline(always)]
    fn written(&mut self, r: std::ops::Range<usize>) {
        if !matches!(self.durability.mode, SyncMode::Memory) {
            self.note_written(r);
        }
    }

    /// Notes that the mapping's bytes `r` were written, for the next
    /// [`sync`](PmMedia::sync) (a pool in memory has nothing to note).
    #[inline(never)]
    fn note_written(&mut self, r: std::ops::Range<usize>) {
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
                overwrite_space: None,
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
                overwrite_space: None,
            },
        )),
        Err(e) => plain(SyncMode::Msync, Some(e.to_string())),
    }
}

/// [`Pool::range`]'s refusal of an address below the PM base.
#[cold]
#[inline(never)]
fn below_pm_base() -> ! {
    panic!("PM address below the PM base")
}

/// [`Pool::range`]'s refusal of an access that ends past the pool's `pool_len` bytes.
#[cold]
#[inline(never)]
fn beyond_the_pool(off: u64, len: usize, pool_len: u64) -> ! {
    panic!("PM access {off:#x}+{len} beyond the {pool_len}-byte pool")
}

impl PmMedia for Pool {
    fn read(&self, addr: u64, buf: &mut [u8]) {
        let r = self.range(addr, buf.len());
        buf.copy_from_slice(&self.map[r]);
    }
    fn write(&mut self, addr: u64, data: &[u8]) {
        let r = self.range(addr, data.len());
        // A whole line (every line a stream persists) is a fixed-size copy, inline.
        remora_model::mem::copy_bytes(&mut self.map[r.clone()], data);
        self.written(r);
    }
    fn sync(&mut self) {
        match self.durability.mode {
            // Nothing below the page cache for a file that lives in memory.
            SyncMode::Memory => {}
            // msync of the pages written since the last sync.
            SyncMode::Msync => {
                if let Some((a, b)) = self.dirty.take() {
                    self.write_back(a..b).expect("msync of the PM pool failed");
                }
            }
            // Write back the lines written since the last sync; one fence for all of them.
            SyncMode::MapSync(_) => {
                if self.dirty_lines.is_empty() {
                    return;
                }
                // Taken out and put back so the loop can borrow `self`; the capacity stays.
                let mut lines = std::mem::take(&mut self.dirty_lines);
                for &(a, b) in &lines {
                    self.write_back(a..b).expect("line write-back cannot fail");
                }
                lines.clear();
                self.dirty_lines = lines;
                self.fence();
            }
        }
    }
    fn snapshot(&self) -> SparseMem {
        let mut m = SparseMem::new();
        let data = &self.map[HEADER_BYTES as usize..(HEADER_BYTES + self.len()) as usize];
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
    use super::file::creation_name;
    use super::*;
    use std::os::unix::fs::{FileExt, MetadataExt};

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
        if !File::open(shm).and_then(|d| in_memory(&d)).unwrap_or(false) {
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
        if File::open(shm).and_then(|d| in_memory(&d)).unwrap_or(false) {
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

    /// A write that ends past the pool is refused with the pool's size, whether it is a
    /// whole line or not; one below the PM base likewise.
    #[test]
    fn writes_outside_the_pool_are_refused() {
        let dir = tmp_dir();
        let p = dir.path().join("outside");
        let mut pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
        let end = PM_BASE + pool.len();
        pool.write(end - 64, &[7u8; 64]); // the last line: in
        let message = |f: &mut dyn FnMut()| {
            let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap()
        };
        let beyond = format!("beyond the {}-byte pool", pool.len());
        assert!(message(&mut || pool.write(end - 32, &[7u8; 64])).ends_with(&beyond));
        assert!(message(&mut || pool.write(end - 4, &[7u8; 8])).ends_with(&beyond));
        let below = "PM address below the PM base";
        assert_eq!(message(&mut || pool.write(PM_BASE - 64, &[7u8; 64])), below);
        assert_eq!(message(&mut || pool.write(0, &[7u8; 3])), below);
        assert_eq!(pool.snapshot().read_vec(end - 64, 64), vec![7u8; 64]);
    }

    /// Entries of a test directory (to see that nothing else was left in it).
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_pool_in_use_is_refused_naming_its_holder_until_it_is_closed() {
        let dir = tmp_dir();
        let p = dir.path().join("shared");
        let mut first = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
        first.write(PM_BASE + 128, b"first server's");
        let e = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap_err();
        match &e {
            PoolError::InUse { holder, .. } => {
                // /proc/locks names the process holding it: this one.
                assert_eq!(*holder, Some(std::process::id()), "{e}");
            }
            _ => panic!("a second opener must be refused: {e}"),
        }
        assert!(e.to_string().contains("in use by another process"), "{e}");
        drop(first);
        let second = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
        assert!(!second.created());
        assert_eq!(
            second.snapshot().read_vec(PM_BASE + 128, 14),
            b"first server's"
        );
    }

    #[test]
    fn racing_creators_make_one_pool_and_the_loser_is_refused() {
        let dir = tmp_dir();
        for round in 0..16 {
            let p = dir.path().join(format!("race-{round}"));
            let start = std::sync::Barrier::new(2);
            let results: Vec<Result<Pool, PoolError>> = std::thread::scope(|s| {
                let opens: Vec<_> = (0..2)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            Pool::open_or_create(&p, MIN_POOL_BYTES)
                        })
                    })
                    .collect();
                opens.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let created = results
                .iter()
                .filter(|r| r.as_ref().is_ok_and(|p| p.created()))
                .count();
            let in_use = results
                .iter()
                .filter(|r| matches!(r, Err(PoolError::InUse { .. })))
                .count();
            assert_eq!((created, in_use), (1, 1), "round {round}: {results:?}");
        }
        // Only the pools: no temporary file of a creator is left.
        let want: Vec<String> = {
            let mut v: Vec<String> = (0..16).map(|r| format!("race-{r}")).collect();
            v.sort();
            v
        };
        assert_eq!(names(dir.path()), want);
    }

    #[test]
    fn a_pool_has_all_its_blocks_and_a_sparse_one_is_filled_at_open() {
        let dir = tmp_dir();
        let size = HEADER_BYTES + MIN_POOL_BYTES;
        let p = dir.path().join("new");
        drop(Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap());
        let allocated = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
        assert!(allocated(&p) >= size, "{} of {size}", allocated(&p));
        // A valid pool whose data area is a hole (as an older build made them): opening it
        // allocates the hole and keeps the data.
        let p = dir.path().join("sparse");
        let f = File::create(&p).unwrap();
        f.set_len(size).unwrap();
        let header = Header {
            data_len: MIN_POOL_BYTES,
            layout: None,
        };
        f.write_all_at(&header.emit(), 0).unwrap();
        f.write_all_at(b"kept", size - 4).unwrap();
        drop(f);
        assert!(allocated(&p) < size / 2, "the test file starts sparse");
        let pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
        assert!(allocated(&p) >= size);
        assert_eq!(
            pool.snapshot().read_vec(PM_BASE + MIN_POOL_BYTES - 4, 4),
            b"kept"
        );
    }

    /// A new pool whose directory cannot be synced once the pool is linked there (an I/O
    /// error) might lose its name in an OS crash, and with it every write acknowledged
    /// into it: it is not served, the error says what happened and what is left, and the
    /// name is removed again, so the next start makes the pool anew, its name synced,
    /// rather than serving one whose name may not be durable.
    #[test]
    fn a_new_pool_whose_directory_cannot_be_synced_is_refused_and_leaves_nothing() {
        let dir = tmp_dir();
        let p = dir.path().join("unsynced");
        super::file::fail_next_dir_sync(libc::EIO);
        let e = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap_err();
        assert!(matches!(e, PoolError::NameNotDurable { .. }), "{e}");
        let msg = e.to_string();
        for says in [
            "might not survive an OS crash",
            "removed again",
            "Input/output error",
        ] {
            assert!(msg.contains(says), "{msg}");
        }
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
        let pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
        assert!(pool.created(), "the next start makes the pool anew");
    }

    #[test]
    fn a_pool_its_file_system_cannot_hold_is_refused_and_leaves_nothing() {
        let dir = tmp_dir();
        let p = dir.path().join("huge");
        let e = Pool::open_or_create(&p, MAX_POOL_BYTES).unwrap_err();
        assert!(matches!(e, PoolError::NoSpace { .. }), "{e}");
        assert!(e.to_string().contains("free"), "{e}");
        assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    }

    /// A size no pool may have (one whose sums would wrap) is refused before anything is
    /// made, as is a header that records one.
    #[test]
    fn sizes_beyond_the_largest_are_refused() {
        let dir = tmp_dir();
        let p = dir.path().join("absurd");
        for asked in [MAX_POOL_BYTES + 1, u64::MAX, u64::MAX - 4095] {
            let e = Pool::open_or_create(&p, asked).unwrap_err();
            assert!(matches!(e, PoolError::AboveMaximum { .. }), "{e}");
            assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
        }
        for data_len in [0, 100, u64::MAX] {
            let mut h = Header {
                data_len: MIN_POOL_BYTES,
                layout: None,
            }
            .emit();
            // The field and its checksum as a writer of that size would have made them.
            h[24..32].copy_from_slice(&u64::to_le_bytes(data_len));
            let crc = crc32c::crc32c(&h[..64]);
            h[64..68].copy_from_slice(&crc.to_le_bytes());
            std::fs::write(&p, h).unwrap();
            let e = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap_err();
            assert!(e.to_string().contains("data length out of range"), "{e}");
            assert_eq!(std::fs::read(&p).unwrap(), h, "left as it was");
        }
    }

    /// A symbolic link to a missing file is refused with an error that says so (it made the
    /// creation loop for ever: the link's name exists, the file does not).
    #[test]
    fn a_dangling_link_is_refused() {
        let dir = tmp_dir();
        let p = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &p).unwrap();
        let e = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap_err();
        assert!(matches!(e, PoolError::DanglingLink(_)), "{e}");
        assert_eq!(names(dir.path()), vec!["link".to_string()]);
    }

    /// A pool cut inside its header is called damaged, not "not a pool".
    #[test]
    fn a_pool_cut_inside_its_header_is_damaged() {
        let dir = tmp_dir();
        let p = dir.path().join("cut");
        drop(Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap());
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(HEADER_BYTES - 1).unwrap();
        let e = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap_err();
        assert!(e.to_string().contains("cut short inside its header"), "{e}");
    }

    #[test]
    fn files_of_creators_that_died_are_removed_and_a_live_ones_kept() {
        let dir = tmp_dir();
        let p = dir.path().join("pool");
        // A pid no process has (above the kernel's largest), and one that is alive (this
        // process). Not a child spawned and reaped: while it is between fork and exec it
        // holds this test binary's descriptors, the pool locks of tests running beside
        // this one among them, and a test that closes and reopens its pool then finds it
        // still locked.
        let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 22);
        let dead = pid_max + 1;
        let me = std::process::id();
        std::fs::write(creation_name(&p, dead, 0).unwrap(), b"half made").unwrap();
        // A live creator's: empty between making and locking it, locked once it grows.
        std::fs::write(creation_name(&p, me, 99).unwrap(), b"").unwrap();
        let growing = creation_name(&p, me, 98).unwrap();
        std::fs::write(&growing, b"half made").unwrap();
        let held = File::open(&growing).unwrap();
        lock(&growing, &held).unwrap();
        // Another pool's temporary file is not this pool's business.
        let other = creation_name(&dir.path().join("other"), dead, 0).unwrap();
        std::fs::write(&other, b"another pool's").unwrap();
        drop(Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap());
        assert_eq!(
            names(dir.path()),
            vec![
                format!(".other.creating-{dead}-0"),
                format!(".pool.creating-{me}-98"),
                format!(".pool.creating-{me}-99"),
                "pool".to_string()
            ]
        );
        drop(held);
    }

    /// A creator killed mid-way leaves its temporary file under its pid, and a later
    /// server with that pid (a restart in a container: pid 1 each time) names its own
    /// temporary file the same: it failed with "File exists" at every start, and the
    /// file, as large as the pool, stayed for as long as the pid lived (review). A file
    /// with anything in it is stale whoever has its pid now, and goes; an empty one may be
    /// a live creator's, is kept, and the creation takes the next name.
    #[test]
    fn a_creator_killed_mid_way_does_not_block_a_later_one_with_its_pid() {
        let dir = tmp_dir();
        let me = std::process::id();
        // The names the next creations of this process take (tests running beside this
        // one create pools too).
        let p = dir.path().join("pool");
        let next = super::file::next_creation();
        for n in next..next + 32 {
            std::fs::write(creation_name(&p, me, n).unwrap(), b"half made").unwrap();
        }
        let pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
        assert!(pool.created());
        drop(pool);
        assert_eq!(names(dir.path()), vec!["pool".to_string()]);
        // Killed before it locked its file: empty, kept, passed over.
        let q = dir.path().join("queue");
        let next = super::file::next_creation();
        let mut want = vec!["pool".to_string(), "queue".to_string()];
        for n in next..next + 8 {
            let name = creation_name(&q, me, n).unwrap();
            std::fs::write(&name, b"").unwrap();
            want.push(name.file_name().unwrap().to_string_lossy().into_owned());
        }
        let pool = Pool::open_or_create(&q, MIN_POOL_BYTES).unwrap();
        assert!(pool.created());
        drop(pool);
        want.sort();
        assert_eq!(names(dir.path()), want);
    }

    /// A file named as a dead creator's temporary file of this pool, but which is a pool
    /// a live server holds (whatever its name), is not removed by a server starting here;
    /// nor is one whose name only begins like a creator's.
    #[test]
    fn a_pool_in_use_under_a_creators_temporary_name_is_left_alone() {
        let dir = tmp_dir();
        let x = dir.path().join("x");
        let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 22);
        let dead = pid_max + 1;
        let other = creation_name(&x, dead, 0).unwrap();
        let mut live = Pool::open_or_create(&other, MIN_POOL_BYTES).unwrap();
        live.write(PM_BASE, b"acknowledged");
        live.sync();
        let lookalike = x.with_file_name(format!(".x.creating-{dead}-0.keep"));
        std::fs::write(&lookalike, b"not a creator's").unwrap();
        drop(Pool::open_or_create(&x, MIN_POOL_BYTES).unwrap());
        assert!(
            other.exists(),
            "the live pool {} was removed",
            other.display()
        );
        assert!(lookalike.exists(), "{} was removed", lookalike.display());
        drop(live);
    }

    #[test]
    fn the_first_server_records_its_layout_and_another_layout_is_refused() {
        let dir = tmp_dir();
        let p = dir.path().join("layout");
        {
            let mut pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
            assert_eq!(pool.layout(), None, "a new pool has no record");
            pool.claim_layout("slots of 8192 bytes").unwrap();
            pool.write(PM_BASE + 8192, b"slot one");
            // The same server again: fine, and idempotent.
            pool.claim_layout("slots of 8192 bytes").unwrap();
        }
        let before = std::fs::read(&p).unwrap();
        {
            let mut pool = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap();
            assert_eq!(pool.layout(), Some("slots of 8192 bytes"));
            let e = pool.claim_layout("slots of 4096 bytes").unwrap_err();
            assert!(
                matches!(&e, PoolError::Layout { found, want, .. }
                    if found == "slots of 8192 bytes" && want == "slots of 4096 bytes"),
                "{e}"
            );
            assert!(
                e.to_string().contains("with the options it was made with"),
                "{e}"
            );
        }
        assert!(
            std::fs::read(&p).unwrap() == before,
            "a refused server changes nothing"
        );
        // A damaged record is refused as such, not taken for another layout or for none.
        let mut bytes = before;
        bytes[LAYOUT_AT + 8] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        let e = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap_err();
        assert!(
            e.to_string().contains("layout record checksum mismatch"),
            "{e}"
        );
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
        assert!(
            matches!(e, PoolError::SmallerThanAsked { have, asked, .. }
                if have == MIN_POOL_BYTES && asked == 4 * MIN_POOL_BYTES),
            "{e}"
        );
        assert!(e.to_string().contains("a pool does not grow"), "{e}");
        // Given no size, a server serves the pool it finds, whatever its size.
        let pool = Pool::open(&p, PoolBytes::New(4 * MIN_POOL_BYTES)).unwrap();
        assert_eq!(pool.len(), MIN_POOL_BYTES);
        drop(pool);
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(HEADER_BYTES + 100).unwrap();
        let e = Pool::open_or_create(&p, MIN_POOL_BYTES).unwrap_err();
        assert!(
            matches!(e, PoolError::Truncated { have: 100, data_len, .. } if data_len == MIN_POOL_BYTES),
            "{e}"
        );
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            HEADER_BYTES + 100,
            "a truncated pool is left as it is"
        );
        let e = Pool::open_or_create(&tmp("tiny"), MIN_POOL_BYTES - 1).unwrap_err();
        assert!(matches!(e, PoolError::BelowMinimum { .. }), "{e}");

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

    #[test]
    fn a_layout_record_cut_short_or_with_its_length_zeroed_is_caught_or_absent() {
        let header = Header {
            data_len: MIN_POOL_BYTES,
            layout: Some("x".into()),
        };
        // A one-byte text: one flipped bit makes its length zero; the checksum still says
        // there is a record. Two bits make it two: its checksum no longer matches.
        let mut b = header.emit();
        b[LAYOUT_AT] ^= 1;
        assert_eq!(
            Header::parse(&b),
            Err(HeaderError::Damaged("layout record length out of range"))
        );
        b[LAYOUT_AT] ^= 3;
        assert_eq!(
            Header::parse(&b),
            Err(HeaderError::Damaged("layout record checksum mismatch"))
        );
        // A crash after the text, before the word: no record (the text is ignored).
        let mut b = Header {
            layout: None,
            ..header.clone()
        }
        .emit();
        b[LAYOUT_AT + 8] = b'x';
        assert_eq!(Header::parse(&b).unwrap().layout, None);
        // A zero length with a valid checksum of it (found by `cargo fuzz run
        // pool_header`): no record `emit` writes, so damage, not an empty layout that
        // every server's claim would then report as another's.
        let mut b = Header {
            layout: None,
            ..header.clone()
        }
        .emit();
        b[LAYOUT_AT + 4..LAYOUT_AT + 8]
            .copy_from_slice(&super::header::layout_crc(b"").to_le_bytes());
        assert_eq!(
            Header::parse(&b),
            Err(HeaderError::Damaged("layout record length out of range"))
        );
    }

    proptest::proptest! {
        /// Any bytes: a header or an error, never a panic.
        #[test]
        fn any_bytes_parse_or_are_refused(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..5000)) {
            let _ = Header::parse(&b);
        }

        /// A header reads back as it was written, and a flipped bit in what it checks
        /// (the fixed fields, their checksum, the layout record) is refused; a flip in the
        /// unused rest changes nothing.
        #[test]
        fn a_header_round_trips_and_a_flipped_bit_is_caught(
            data_len in MIN_POOL_BYTES..(1u64 << 40),
            layout in proptest::option::of("[ -~]{1,300}"),
            at in 0usize..HEADER_BYTES as usize,
            bit in 0u8..8,
        ) {
            let header = Header { data_len, layout };
            let mut b = header.emit();
            proptest::prop_assert_eq!(Header::parse(&b), Ok(header.clone()));
            b[at] ^= 1 << bit;
            let text_len = header.layout.as_ref().map_or(0, |t| t.len());
            let checked = at < 68 || (LAYOUT_AT..LAYOUT_AT + 8 + text_len).contains(&at);
            match Header::parse(&b) {
                Ok(h) => {
                    proptest::prop_assert!(!checked, "flip at {} accepted", at);
                    proptest::prop_assert_eq!(h, header);
                }
                Err(_) => proptest::prop_assert!(checked, "flip at {} refused", at),
            }
        }
    }
}
