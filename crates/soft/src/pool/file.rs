//! The pool file on its file system: made whole under a temporary name and linked, locked
//! for one server at a time, its blocks allocated up front, mapped, and the mount it lives
//! on (`tmpfs`, `dax`) looked up.

use super::header::Header;
use super::{PoolError, HEADER_BYTES};
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Creations of pools this process has begun: the number in a creator's temporary name.
static CREATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Temporary names [`create`] passes over (taken by files it did not make) before it gives up.
const CREATION_TRIES: u32 = 64;

/// The number the next creation of this process takes (for tests).
#[cfg(test)]
pub(super) fn next_creation() -> u64 {
    CREATIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Makes a new pool at `path` under a temporary name in the same directory (created
/// exclusively, locked, allocated, header written and synced), then links it to `path`
/// and syncs the directory ([`PoolError::NameNotDurable`], the link removed again, if
/// that fails). `None` if another process published a pool at `path` first (the caller
/// opens that).
pub(super) fn create(path: &Path, len: u64) -> Result<Option<File>, PoolError> {
    let io = |err| PoolError::Io {
        path: path.to_path_buf(),
        err,
    };
    // A name of this pid and number may exist all the same: a previous process with this
    // pid left it (a server restarted in a container is pid 1 each time), empty if it died
    // before it locked it (see `remove_stale_creations`), or a process in another pid
    // namespace uses it. The next number, then.
    let mut tries = 0;
    let (tmp, file) = loop {
        let n = CREATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = creation_name(path, std::process::id(), n).ok_or_else(|| {
            io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a file path",
            ))
        })?;
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(file) => break (tmp, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < CREATION_TRIES => {
                tries += 1;
            }
            Err(e) => return Err(io(e)),
        }
    };
    // Whatever happens from here, the temporary name goes; a published pool keeps its link.
    struct Unlink<'a>(&'a Path);
    impl Drop for Unlink<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.0);
        }
    }
    let _unlink = Unlink(&tmp);
    lock(path, &file)?;
    // On a copy-on-write file system the blocks allocated below would hold only the first
    // write into them; marked so while the file is still empty, they hold every write
    // (`Pool::open` reports a pool where this did not take).
    if copy_on_write(fs_magic(&file).map_err(io)?).is_some() {
        let _ = set_nocow(&file);
    }
    let size = HEADER_BYTES + len;
    // A file system that keeps no count of its blocks is not asked in advance; the
    // allocation below says whether the pool fits.
    if let Some(free) = free_bytes(&tmp).map_err(io)? {
        if free < size {
            return Err(PoolError::NoSpace {
                path: path.to_path_buf(),
                need: size,
                free,
            });
        }
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
    // The new name is durable too (a no-op on file systems in memory). If it cannot be
    // made so, an OS crash could lose the name, and with it whatever a server acknowledged
    // into the pool: the pool is not served, and its name goes again (nobody else has it
    // open: this process holds its lock, and nothing was written into it). A later start
    // then makes the pool anew and syncs its name; a pool left at `path` would be opened
    // as it is, with nothing to say that its name was never made durable.
    let dir = parent_dir(path);
    if let Err(err) = sync_dir(dir) {
        return Err(PoolError::NameNotDurable {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            err,
            unlink: std::fs::remove_file(path).err(),
        });
    }
    Ok(Some(file))
}

/// Makes `dir`'s entries durable (an `fsync` of the directory).
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(test)]
    if let Some(errno) = FAIL_DIR_SYNC.with(|f| f.take()) {
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    File::open(dir).and_then(|d| d.sync_all())
}

#[cfg(test)]
thread_local! {
    /// The error the next [`sync_dir`] of this thread fails with, instead of syncing.
    static FAIL_DIR_SYNC: std::cell::Cell<Option<i32>> = const { std::cell::Cell::new(None) };
}

/// Makes this thread's next directory sync fail with `errno` (for tests).
#[cfg(test)]
pub(super) fn fail_next_dir_sync(errno: i32) {
    FAIL_DIR_SYNC.with(|f| f.set(Some(errno)));
}

/// The directory `path` is named in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Whether `path` is a symbolic link whose target does not exist: creating "through" it
/// would fail for ever (the link's name exists, the file it names does not).
pub(super) fn dangling_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
        && matches!(std::fs::metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

/// Whether `file` lives on a file system in memory (tmpfs, ramfs), by the file system's
/// magic number (`fstatfs`), not by its mount's name: a pool there needs no `msync` (the
/// mapping is the file), and one anywhere else must never be taken for it.
pub(super) fn in_memory(file: &File) -> std::io::Result<bool> {
    // linux/magic.h (the libc crate names TMPFS_MAGIC, not RAMFS_MAGIC).
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    let magic = fs_magic(file)?;
    Ok(magic == libc::TMPFS_MAGIC as u64 || magic == RAMFS_MAGIC)
}

/// The magic number of the file system `file` is on (`fstatfs`'s `f_type`).
#[allow(unsafe_code)]
pub(super) fn fs_magic(file: &File) -> std::io::Result<u64> {
    // SAFETY: `statfs` is plain data, filled by the kernel for an open descriptor.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_type as u64)
}

/// File systems that write every new version of a block elsewhere (copy on write), by
/// their magic numbers (linux/magic.h): blocks allocated in advance there hold the first
/// write into them only, unless the file is marked not to be copied ([`nocow`]).
const COPY_ON_WRITE: [(u64, &str); 3] = [
    (0x9123_683e, "btrfs"),
    (0xca45_1a4e, "bcachefs"),
    (0x2fc1_2fc1, "zfs"),
];

/// The name of the copy-on-write file system of magic number `magic`, if it is one.
pub(super) fn copy_on_write(magic: u64) -> Option<&'static str> {
    COPY_ON_WRITE
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

/// `FS_NOCOW_FL` (linux/fs.h, `chattr +C`): the file's blocks are written in place.
const FS_NOCOW_FL: libc::c_int = 0x0080_0000;

/// Whether `file` is marked to have its blocks written in place (`FS_NOCOW_FL`).
#[allow(unsafe_code)]
pub(super) fn nocow(file: &File) -> std::io::Result<bool> {
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int (the kernel's type, whatever the ioctl's
    // name says) into `flags`.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(flags & FS_NOCOW_FL != 0)
}

/// Marks `file` to have its blocks written in place (`chattr +C`). btrfs takes the mark
/// only while the file is empty; [`nocow`] says whether it took.
#[allow(unsafe_code)]
fn set_nocow(file: &File) -> std::io::Result<()> {
    let mut flags: libc::c_int = 0;
    // SAFETY: as in `nocow`; FS_IOC_SETFLAGS reads one int.
    unsafe {
        if libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        flags |= FS_NOCOW_FL;
        if libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Why writes into a pool file's allocated blocks may still need space the file system
/// no longer has (a full file system then fails a store with `SIGBUS`, or an `msync`,
/// under load: the server stops before it acknowledges the write, but it stops), or
/// `None` if they may not: the file is on a copy-on-write file system (by its magic
/// number `magic`) and not marked `nocow`.
pub(super) fn unreserved_overwrites(magic: u64, nocow: bool) -> Option<String> {
    let fs = copy_on_write(magic)?;
    if nocow {
        return None;
    }
    let remedy = if fs == "btrfs" {
        "a pool this server makes is marked so; an older one or a copy is not: copy it into \
         an empty file marked `chattr +C` (or into a directory so marked), or keep the file \
         system's free space above the pool's size"
    } else {
        "keep the file system's free space above the pool's size"
    };
    Some(format!(
        "{fs} copies blocks on write and the pool file is not marked nocow, so the blocks \
         allocated for it hold only the first write into them, and a later write fails if \
         the file system is full ({remedy})"
    ))
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
/// mid-creation: a name exactly as [`creation_name`] makes them, of a pid that is gone (or
/// a file that is not empty, whatever its pid), and a file nobody holds the lock of (a
/// creator locks its file from just after making it, before it writes anything, until it
/// links it or dies, and a server holds the lock of the pool it serves, whatever its
/// name). A live creator's file, or a pool in use under such a name, is left alone.
#[allow(unsafe_code)]
pub(super) fn remove_stale_creations(path: &Path) {
    let Some(prefix) = creation_prefix(path) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(parent_dir(path)) else {
        return;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split_once('-'))
            .filter(|(pid, n)| digits(pid) && digits(n))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        // Not following a link: a link with this name is not a creator's file.
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(entry.path())
        else {
            continue;
        };
        // An empty file of a live pid may be a creator's between making and locking it. A
        // file with anything in it is not (a creator grows it only once it holds the
        // lock), whoever has that pid now: a pid is reused, by a server restarted in a
        // container (pid 1 each time) at once, and a creator killed mid-way must not
        // leave, for as long as its pid lives on, a file as large as the pool.
        let empty = file.metadata().map_or(true, |m| m.len() == 0);
        if empty && Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
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

/// Bytes free for this user on the file system `path` is on; `None` for one that keeps no
/// count of its blocks (`ramfs`, a `tmpfs` mounted without a size limit: `statvfs` says 0
/// blocks in all, and 0 free, however much it can hold).
#[allow(unsafe_code)]
pub(super) fn free_bytes(path: &Path) -> std::io::Result<Option<u64>> {
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
    if st.f_blocks == 0 {
        return Ok(None);
    }
    Ok(Some(st.f_bavail.saturating_mul(st.f_frsize)))
}

/// Allocates every block of the pool file's first `size` bytes, so no store into the
/// mapping can fault for want of space, and gives the file blocks of its own where it
/// shares some with another file (a copy by `cp --reflink`, `cp`'s default on XFS), which
/// a write would otherwise copy into new space first. Only what the file lacks is asked
/// for, where the file system says (`FIEMAP`): XFS reserves space for a whole `fallocate`
/// before it looks at what is allocated, so a full file system refused to restart a server
/// on a pool it holds whole.
#[allow(unsafe_code)]
pub(super) fn allocate(path: &Path, file: &File, size: u64) -> Result<(), PoolError> {
    let no_space = || PoolError::NoSpace {
        path: path.to_path_buf(),
        need: size,
        free: free_bytes(path).ok().flatten().unwrap_or(0),
    };
    let failed = |e| PoolError::Io {
        path: path.to_path_buf(),
        err: std::io::Error::from_raw_os_error(e),
    };
    let lacks = lacks(file, size).unwrap_or(Lacks {
        holes: true,
        shared: true,
    });
    if lacks.holes {
        // SAFETY: posix_fallocate on a borrowed descriptor; it returns the error number.
        match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) } {
            0 => {}
            libc::ENOSPC => return Err(no_space()),
            e => return Err(failed(e)),
        }
    }
    if lacks.shared {
        // SAFETY: fallocate on a borrowed descriptor; it returns -1 and sets errno.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_UNSHARE_RANGE,
                0,
                size as libc::off_t,
            )
        };
        match if rc == 0 { 0 } else { errno() } {
            // Done, or a file system that does not share blocks this way (btrfs: see
            // `unreserved_overwrites`).
            0 | libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS => {}
            libc::ENOSPC => return Err(no_space()),
            e => return Err(failed(e)),
        }
    }
    Ok(())
}

/// The calling thread's last error number.
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// What a file's blocks lack for every write into them to have its space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Lacks {
    /// Some bytes have no block (a hole).
    pub(super) holes: bool,
    /// Some blocks are shared with another file (a reflinked copy, a snapshot).
    pub(super) shared: bool,
}

/// `struct fiemap` (linux/fiemap.h), with room for [`FIEMAP_EXTENTS`] extents.
#[repr(C)]
struct Fiemap {
    start: u64,
    length: u64,
    flags: u32,
    mapped_extents: u32,
    extent_count: u32,
    reserved: u32,
    extents: [FiemapExtent; FIEMAP_EXTENTS],
}

/// `struct fiemap_extent`.
#[repr(C)]
#[derive(Clone, Copy)]
struct FiemapExtent {
    logical: u64,
    physical: u64,
    length: u64,
    reserved64: [u64; 2],
    flags: u32,
    reserved: [u32; 3],
}

/// Extents asked for at a time.
const FIEMAP_EXTENTS: usize = 64;
/// `FS_IOC_FIEMAP`: `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xc020_660b;
/// Write the file's dirty pages first, so what is mapped is what is allocated.
const FIEMAP_FLAG_SYNC: u32 = 0x1;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
const FIEMAP_EXTENT_SHARED: u32 = 0x2000;

/// What `file`'s first `size` bytes lack (`FIEMAP`); an error where the file system maps
/// no extents.
#[allow(unsafe_code)]
pub(super) fn lacks(file: &File, size: u64) -> std::io::Result<Lacks> {
    let mut lacks = Lacks {
        holes: false,
        shared: false,
    };
    let mut at = 0;
    while at < size {
        // SAFETY: plain data, all zeroes valid.
        let mut m: Box<Fiemap> = Box::new(unsafe { std::mem::zeroed() });
        m.start = at;
        m.length = size - at;
        m.flags = FIEMAP_FLAG_SYNC;
        m.extent_count = FIEMAP_EXTENTS as u32;
        // SAFETY: FS_IOC_FIEMAP fills at most `extent_count` extents of the struct.
        if unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP as _, &mut *m) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = (m.mapped_extents as usize).min(FIEMAP_EXTENTS);
        if n == 0 {
            break;
        }
        for e in &m.extents[..n] {
            lacks.holes |= e.logical > at;
            lacks.shared |= e.flags & FIEMAP_EXTENT_SHARED != 0;
            at = at.max(e.logical.saturating_add(e.length));
        }
        if m.extents[n - 1].flags & FIEMAP_EXTENT_LAST != 0 {
            break;
        }
    }
    lacks.holes |= at < size;
    Ok(lacks)
}

#[allow(unsafe_code)]
pub(super) fn unsafe_map(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: the pool file is ours for the life of the process (its exclusive lock keeps
    // other remora processes out); if some other program truncated it under us, accesses
    // could fault, which is the documented hazard of memmap2's mapping.
    unsafe { MmapMut::map_mut(file) }
}

/// The mount a path lives on. (Whether it is in memory is asked of the file itself:
/// [`in_memory`].)
pub(super) struct Mount {
    /// Mounted with DAX.
    pub(super) dax: bool,
}

/// The mount `path` lives on (the longest mount point above it, from
/// /proc/self/mountinfo): whether it is mounted with `dax`.
pub(super) fn mount_of(path: &Path) -> Option<Mount> {
    let abs = std::fs::canonicalize(path).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(usize, Mount)> = None;
    for line in info.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 {
            continue;
        }
        let (mount, opts) = (unescape_mount_field(f[4]), f[5]);
        // After the optional fields, " - " then the file system type and its options.
        let after = f.iter().position(|x| *x == "-").map(|i| &f[i + 1..]);
        let super_opts = after.and_then(|a| a.get(2)).copied().unwrap_or("");
        if abs.starts_with(&mount) && best.as_ref().is_none_or(|(l, _)| mount.len() > *l) {
            best = Some((
                mount.len(),
                Mount {
                    dax: dax_option(opts) || dax_option(super_opts),
                },
            ));
        }
    }
    best.map(|(_, m)| m)
}

/// A mountinfo field with its octal escapes (`\040` for a space, `\011` tab, `\012`
/// newline, `\134` backslash) decoded, as the kernel's `seq_file` writes them.
fn unescape_mount_field(f: &str) -> String {
    let b = f.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) if b[i] == b'\\' => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + (c - b'0') as u32);
                out.push(v as u8);
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a mount's option list asks for DAX (`dax`, `dax=always`, `dax=inode`; not
/// `dax=never`).
fn dax_option(opts: &str) -> bool {
    opts.split(',')
        .any(|o| matches!(o, "dax" | "dax=always" | "dax=inode"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file's holes are found, and a file allocated whole lacks nothing (so it is not
    /// allocated again: XFS refuses that on a full file system).
    #[test]
    fn holes_are_found_and_a_whole_file_lacks_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)
            .unwrap();
        let size = 1 << 20;
        f.set_len(size).unwrap();
        f.write_all_at(b"start", 0).unwrap();
        let Ok(sparse) = lacks(&f, size) else {
            eprintln!("skipped: no FIEMAP on the test directory's file system");
            return;
        };
        assert!(sparse.holes, "{sparse:?}");
        allocate(&p, &f, size).unwrap();
        let whole = lacks(&f, size).unwrap();
        assert_eq!(
            whole,
            Lacks {
                holes: false,
                shared: false
            }
        );
    }

    /// Only a copy-on-write file system's pool without the nocow mark is reported.
    #[test]
    fn overwrites_are_unreserved_on_copy_on_write_file_systems_without_nocow() {
        const EXT4: u64 = 0xef53;
        const XFS: u64 = 0x5846_5342;
        for magic in [EXT4, XFS, libc::TMPFS_MAGIC as u64] {
            for nocow in [false, true] {
                assert_eq!(unreserved_overwrites(magic, nocow), None, "{magic:#x}");
            }
        }
        for (magic, name) in COPY_ON_WRITE {
            assert_eq!(unreserved_overwrites(magic, true), None, "{name}");
            let why = unreserved_overwrites(magic, false).expect(name);
            assert!(why.starts_with(name), "{why}");
            assert!(why.contains("hold only the first write"), "{why}");
        }
        assert!(unreserved_overwrites(0x9123_683e, false)
            .unwrap()
            .contains("chattr +C"));
    }

    #[test]
    fn mount_points_are_unescaped_and_dax_options_read_whole() {
        assert_eq!(unescape_mount_field("/mnt/my\\040disk"), "/mnt/my disk");
        assert_eq!(unescape_mount_field("/a\\134b\\011c"), "/a\\b\tc");
        assert_eq!(unescape_mount_field("/plain"), "/plain");
        assert_eq!(unescape_mount_field("/short\\04"), "/short\\04");
        assert!(dax_option("rw,dax=always"));
        assert!(dax_option("dax"));
        assert!(!dax_option("rw,dax=never"));
        assert!(!dax_option("rw,relatime"));
    }

    #[test]
    fn a_bare_name_is_in_the_current_directory() {
        assert_eq!(parent_dir(Path::new("pool")), Path::new("."));
        assert_eq!(parent_dir(Path::new("d/pool")), Path::new("d"));
        assert_eq!(parent_dir(Path::new("/pool")), Path::new("/"));
    }

    #[test]
    fn a_link_to_nothing_is_dangling_and_a_missing_name_is_not() {
        let dir = std::env::temp_dir().join(format!("pool-link-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(dir.join("nowhere"), &link).unwrap();
        assert!(dangling_link(&link));
        assert!(!dangling_link(&dir.join("missing")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
