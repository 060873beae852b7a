//! The pool file on its file system: made whole under a temporary name and linked, locked
//! for one server at a time, its blocks allocated up front, mapped, and the mount it lives
//! on (`tmpfs`, `dax`) looked up.

use super::header::Header;
use super::{PoolError, HEADER_BYTES};
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Makes a new pool at `path` under a temporary name in the same directory (created
/// exclusively, locked, allocated, header written and synced), then links it to `path`.
/// `None` if another process published a pool at `path` first (the caller opens that).
pub(super) fn create(path: &Path, len: u64) -> Result<Option<File>, PoolError> {
    let io = |err| PoolError::Io {
        path: path.to_path_buf(),
        err,
    };
    static CREATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CREATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = creation_name(path, std::process::id(), n).ok_or_else(|| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file path",
        ))
    })?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(io)?;
    // Whatever happens from here, the temporary name goes; a published pool keeps its link.
    struct Unlink<'a>(&'a Path);
    impl Drop for Unlink<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.0);
        }
    }
    let _unlink = Unlink(&tmp);
    lock(path, &file)?;
    let size = HEADER_BYTES + len;
    let free = free_bytes(&tmp).map_err(io)?;
    if free < size {
        return Err(PoolError::NoSpace {
            path: path.to_path_buf(),
            need: size,
            free,
        });
    }
    file.set_len(size).map_err(io)?;
    allocate(path, &file, size)?;
    file.write_all_at(
        &Header {
            data_len: len,
            layout: None,
        }
        .emit(),
        0,
    )
    .map_err(io)?;
    file.sync_all().map_err(io)?;
    match std::fs::hard_link(&tmp, path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
        Err(e) => return Err(io(e)),
    }
    // The new name is durable too (a no-op on file systems in memory).
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(Some(file))
}

/// The temporary name a creator of the pool at `path` uses: `.<name>.creating-<pid>-<n>`
/// beside it (`n` tells apart the creators of one process).
pub(super) fn creation_name(path: &Path, pid: u32, n: u64) -> Option<PathBuf> {
    Some(path.with_file_name(format!("{}{pid}-{n}", creation_prefix(path)?)))
}

fn creation_prefix(path: &Path) -> Option<String> {
    Some(format!(
        ".{}.creating-",
        path.file_name()?.to_string_lossy()
    ))
}

/// Removes temporary files that creators of the pool at `path` left behind when they died
/// mid-creation (their pid is gone); a live creator's file is left alone.
pub(super) fn remove_stale_creations(path: &Path) {
    let Some(prefix) = creation_prefix(path) else {
        return;
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Takes the pool's exclusive lock without waiting; [`PoolError::InUse`] if another open
/// file holds it.
#[allow(unsafe_code)]
pub(super) fn lock(path: &Path, file: &File) -> Result<(), PoolError> {
    loop {
        // SAFETY: flock on a descriptor this function borrows; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {
                // `/proc/locks` is read a page at a time with the lock list unlocked in
                // between, so while other processes take and drop locks a read can miss
                // the holder's line (seen once in a CI run with many pools at once): a few
                // reads before the holder goes unnamed.
                let meta = file.metadata().ok();
                let holder = (0..HOLDER_READS).find_map(|_| meta.as_ref().and_then(lock_holder));
                return Err(PoolError::InUse {
                    path: path.to_path_buf(),
                    holder,
                });
            }
            _ => {
                return Err(PoolError::Io {
                    path: path.to_path_buf(),
                    err,
                })
            }
        }
    }
}

/// Reads of `/proc/locks` [`lock`] makes to name a pool's holder.
const HOLDER_READS: usize = 5;

/// The pid holding a `flock` on the file, from `/proc/locks` (whose lines read
/// `1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF`).
pub(super) fn lock_holder(meta: &std::fs::Metadata) -> Option<u32> {
    let dev = meta.dev();
    let id = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Waiters are listed as `1: -> FLOCK ...`: not holders.
        (f.len() >= 6 && f[1] == "FLOCK" && f[5] == id)
            .then(|| f[4].parse().ok())
            .flatten()
    })
}

/// Bytes free for this user on the file system `path` is on.
#[allow(unsafe_code)]
pub(super) fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a NUL-terminated path and a buffer of the struct's size, which statvfs fills
    // on success (checked before the read).
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it filled the struct.
    let st = unsafe { st.assume_init() };
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Allocates every block of the pool file's first `size` bytes, so no store into the
/// mapping can fault for want of space.
#[allow(unsafe_code)]
pub(super) fn allocate(path: &Path, file: &File, size: u64) -> Result<(), PoolError> {
    // SAFETY: posix_fallocate on a borrowed descriptor; it returns the error number.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) };
    match rc {
        0 => Ok(()),
        libc::ENOSPC => Err(PoolError::NoSpace {
            path: path.to_path_buf(),
            need: size,
            free: free_bytes(path).unwrap_or(0),
        }),
        e => Err(PoolError::Io {
            path: path.to_path_buf(),
            err: std::io::Error::from_raw_os_error(e),
        }),
    }
}

#[allow(unsafe_code)]
pub(super) fn unsafe_map(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: the pool file is ours for the life of the process (its exclusive lock keeps
    // other remora processes out); if some other program truncated it under us, accesses
    // could fault, which is the documented hazard of memmap2's mapping.
    unsafe { MmapMut::map_mut(file) }
}

/// The file system a path lives on.
pub(super) struct Mount {
    pub(super) fs_type: String,
    pub(super) dax: bool,
}

/// The mount `path` lives on (the longest mount point above it, from
/// /proc/self/mountinfo): its file system type and whether it is mounted with `dax`.
pub(super) fn mount_of(path: &Path) -> Option<Mount> {
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
