//! Pools on a copy-on-write file system (btrfs): blocks allocated up front hold only the
//! first write into them there, and every later one is written to new blocks, so a pool
//! whose file system filled up after its start failed a store (`SIGBUS`) under load. A
//! pool the server makes is marked not to be copied on write before it is sized, and one
//! that is not (made before, or copied) is reported at start-up.
//!
//! These tests fill the file system they run on, so they run only where
//! `REMORA_TEST_COW_DIR` names a directory on a small one (at most 1 GiB), e.g. as root:
//!
//! ```text
//! truncate -s 160M /tmp/btrfs.img && mkfs.btrfs -q /tmp/btrfs.img
//! mkdir -p /mnt/cow && mount -o loop /tmp/btrfs.img /mnt/cow
//! REMORA_TEST_COW_DIR=/mnt/cow cargo test -p remora-soft --test pool_cow
//! ```

use remora_model::mem::PmMedia;
use remora_model::rnic::PM_BASE;
use remora_soft::pool::{Pool, HEADER_BYTES};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Set in the child: the pool path it writes.
const CHILD: &str = "REMORA_TEST_POOL_COW_CHILD";
/// Bytes of PM in the test's pool.
const POOL_BYTES: u64 = 32 << 20;
/// The largest file system the tests fill.
const MAX_FS_BYTES: u64 = 1 << 30;
/// Held by a test while it uses the file system: one fills it.
static FS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The directory the tests may fill, if one was given and its file system is small.
fn cow_dir(test: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("REMORA_TEST_COW_DIR").map(PathBuf::from) else {
        eprintln!("{test}: skipped: REMORA_TEST_COW_DIR names no copy-on-write directory");
        return None;
    };
    let st = nix_statvfs(&dir);
    let size = st.0 * st.1;
    assert!(
        size <= MAX_FS_BYTES,
        "{}: a file system of {size} bytes; the test fills it, so give one of at most {MAX_FS_BYTES}",
        dir.display()
    );
    Some(dir)
}

/// `(f_blocks, f_frsize)` of the file system `dir` is on.
fn nix_statvfs(dir: &Path) -> (u64, u64) {
    let out = Command::new("stat")
        .args(["-f", "-c", "%b %S"])
        .arg(dir)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut f = text.split_whitespace().map(|x| x.parse::<u64>().unwrap());
    (f.next().unwrap(), f.next().unwrap())
}

/// Whether `dir` is on btrfs (which copies every block on write).
fn is_btrfs(dir: &Path) -> bool {
    let out = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "btrfs"
}

/// Fills the file system `dir` is on with a file of its own until it takes no more.
fn fill(dir: &Path) -> PathBuf {
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let block = vec![1u8; 1 << 20];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
    filler
}

/// In the child: every page of the pool written three times over, each round synced.
fn child(path: &Path) {
    let mut pool = Pool::open_or_create(path, POOL_BYTES).unwrap();
    for round in 0..3u64 {
        for page in (0..POOL_BYTES).step_by(4096) {
            pool.write(PM_BASE + page, &(round + 1).to_le_bytes());
        }
        pool.sync();
        println!("child: round {round} written and synced");
    }
}

/// A pool the server made goes on taking writes into its blocks after its file system
/// filled up (each block overwritten, as a server's ring and regions are).
#[test]
fn a_new_pool_on_a_copy_on_write_file_system_takes_overwrites_once_it_is_full() {
    if let Some(path) = std::env::var_os(CHILD) {
        return child(Path::new(&path));
    }
    let name = "a_new_pool_on_a_copy_on_write_file_system_takes_overwrites_once_it_is_full";
    let Some(dir) = cow_dir(name) else {
        return;
    };
    let _fs = FS.lock().unwrap_or_else(|e| e.into_inner());
    let path = dir.join("pool-overwrites");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(dir.join("filler"));
    // Space freed is free once the file system commits (btrfs).
    Command::new("sync").arg("-f").arg(&dir).status().unwrap();
    drop(Pool::open_or_create(&path, POOL_BYTES).unwrap());
    let filler = fill(&dir);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, &path)
        .output()
        .unwrap();
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(
        out.status.success(),
        "the pool failed a write once its file system was full ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
}

/// A copy of a pool that shares its blocks with the original (`cp --reflink`, what `cp`
/// does by default on XFS and btrfs) goes on taking writes after its file system filled
/// up: the start gave it blocks of its own.
#[test]
fn a_reflinked_copy_of_a_pool_takes_overwrites_once_the_file_system_is_full() {
    let name = "a_reflinked_copy_of_a_pool_takes_overwrites_once_the_file_system_is_full";
    if let Some(path) = std::env::var_os(CHILD) {
        return child(Path::new(&path));
    }
    let Some(dir) = cow_dir(name) else {
        return;
    };
    let _fs = FS.lock().unwrap_or_else(|e| e.into_inner());
    let (path, copy) = (dir.join("pool-original"), dir.join("pool-copy"));
    for f in [&path, &copy, &dir.join("filler")] {
        let _ = std::fs::remove_file(f);
    }
    Command::new("sync").arg("-f").arg(&dir).status().unwrap();
    // A pool in use: its blocks written (a copy shares no unwritten blocks, only holes).
    let mut pool = Pool::open_or_create(&path, POOL_BYTES).unwrap();
    for page in (0..POOL_BYTES).step_by(4096) {
        pool.write(PM_BASE + page, b"written");
    }
    pool.sync();
    drop(pool);
    let cp = Command::new("cp")
        .arg("--reflink=always")
        .arg(&path)
        .arg(&copy)
        .status()
        .unwrap();
    if !cp.success() {
        eprintln!("{name}: skipped: this file system makes no reflinked copies");
        std::fs::remove_file(&path).unwrap();
        return;
    }
    // The server starts on the copy, then the file system fills up.
    drop(Pool::open_or_create(&copy, POOL_BYTES).unwrap());
    let filler = fill(&dir);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, &copy)
        .output()
        .unwrap();
    for f in [&filler, &path, &copy] {
        std::fs::remove_file(f).unwrap();
    }
    assert!(
        out.status.success(),
        "the copy failed a write once its file system was full ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
}

/// A valid pool file that is copied on write (one an older build made, or a copy) is
/// reported at start-up: its blocks do not hold later writes.
#[test]
fn a_pool_copied_on_write_is_reported_at_start_up() {
    let name = "a_pool_copied_on_write_is_reported_at_start_up";
    let Some(dir) = cow_dir(name) else {
        return;
    };
    if !is_btrfs(&dir) {
        eprintln!("{name}: skipped: {} is not on btrfs", dir.display());
        return;
    }
    let _fs = FS.lock().unwrap_or_else(|e| e.into_inner());
    let path = dir.join("pool-copied");
    let _ = std::fs::remove_file(&path);
    let header = remora_soft::pool::Header {
        data_len: POOL_BYTES,
        layout: None,
    };
    let f = std::fs::File::create(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &header.emit(), 0).unwrap();
    f.set_len(HEADER_BYTES + POOL_BYTES).unwrap();
    drop(f);
    let pool = Pool::open_or_create(&path, POOL_BYTES).unwrap();
    let d = pool.durability().clone();
    drop(pool);
    std::fs::remove_file(&path).unwrap();
    let why = d.overwrite_space.as_deref().expect("the pool is reported");
    assert!(
        why.contains("btrfs") && why.contains("not marked nocow"),
        "{why}"
    );
    assert!(d.to_string().contains(why), "{d}");
    // A pool the server makes is not.
    let path = dir.join("pool-made");
    let _ = std::fs::remove_file(&path);
    let pool = Pool::open_or_create(&path, POOL_BYTES).unwrap();
    assert_eq!(pool.durability().overwrite_space, None);
    drop(pool);
    std::fs::remove_file(&path).unwrap();
}
