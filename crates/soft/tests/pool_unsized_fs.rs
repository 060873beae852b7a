//! Pools on file systems that keep no count of their blocks: `ramfs`, and a `tmpfs`
//! mounted without a size limit (`size=0`). Their `statvfs` says 0 blocks, 0 free. Each
//! runs in a mount namespace of its own (`unshare -rm`), where the file system is mounted
//! on a directory of the test's; skipped where user namespaces are not allowed.

use remora_model::mem::PmMedia;
use remora_model::rnic::PM_BASE;
use remora_soft::pool::{Pool, SyncMode, MIN_POOL_BYTES};
use std::path::Path;
use std::process::Command;

/// Set in the child (inside the namespace): the pool path it opens.
const CHILD: &str = "REMORA_TEST_POOL_UNSIZED_FS_CHILD";

/// In the child: makes the pool, writes, reopens, reads back.
fn child(path: &Path) {
    {
        let mut pool = Pool::open_or_create(path, MIN_POOL_BYTES).unwrap();
        assert!(pool.created());
        assert_eq!(pool.sync_mode(), SyncMode::Memory);
        pool.write(PM_BASE + MIN_POOL_BYTES - 8, b"the end!");
        pool.sync();
    }
    let pool = Pool::open_or_create(path, MIN_POOL_BYTES).unwrap();
    assert_eq!(
        pool.snapshot().read_vec(PM_BASE + MIN_POOL_BYTES - 8, 8),
        b"the end!"
    );
    println!("child: pool made and read back");
}

/// Runs test `name` in a child that mounts `mount` (`mount -t` arguments) on a directory
/// of its own first; `None` where namespaces are not allowed.
fn in_namespace(name: &str, mount: &str) -> Option<std::process::Output> {
    let probe = Command::new("unshare")
        .args(["-rm", "sh", "-c"])
        .arg("d=$(mktemp -d) && mount -t tmpfs none \"$d\"; rc=$?; umount \"$d\" 2>/dev/null; rmdir \"$d\"; exit $rc")
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: no user and mount namespaces here (unshare -rm)");
        return None;
    }
    let dir = tempfile::Builder::new()
        .prefix("remora-pool-unsized-")
        .tempdir()
        .unwrap();
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c"])
        .arg(format!(
            "mount -t {mount} \"$1\" && exec \"$2\" --exact {name} --nocapture --test-threads=1"
        ))
        .arg("sh")
        .arg(dir.path())
        .arg(std::env::current_exe().unwrap())
        .env(CHILD, dir.path().join("pool"))
        .output()
        .unwrap();
    // The mount went with the namespace: the directory is empty again.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    Some(out)
}

fn check(out: std::process::Output) {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A pool on `ramfs` (one of the two file systems in memory the pool names) was refused:
/// "needs 1052672 bytes on its file system, which has 0 free" (review).
#[test]
fn a_pool_on_ramfs_is_made() {
    if let Some(p) = std::env::var_os(CHILD) {
        return child(Path::new(&p));
    }
    if let Some(out) = in_namespace("a_pool_on_ramfs_is_made", "ramfs none") {
        check(out);
    }
}

/// The same for a `tmpfs` without a size limit.
#[test]
fn a_pool_on_a_tmpfs_without_a_size_is_made() {
    if let Some(p) = std::env::var_os(CHILD) {
        return child(Path::new(&p));
    }
    if let Some(out) = in_namespace(
        "a_pool_on_a_tmpfs_without_a_size_is_made",
        "tmpfs -o size=0 none",
    ) {
        check(out);
    }
}

/// A `tmpfs` too small for the pool still refuses it at once, naming the space it has.
#[test]
fn a_pool_on_a_tmpfs_too_small_is_refused() {
    if let Some(p) = std::env::var_os(CHILD) {
        let e = Pool::open_or_create(Path::new(&p), MIN_POOL_BYTES).unwrap_err();
        assert!(e.to_string().contains("which has"), "{e}");
        println!("child: refused: {e}");
        return;
    }
    if let Some(out) = in_namespace(
        "a_pool_on_a_tmpfs_too_small_is_refused",
        "tmpfs -o size=1M none",
    ) {
        check(out);
    }
}
