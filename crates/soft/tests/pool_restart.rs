//! A server restarted with the pid of a creator killed mid-way, as a server in a container
//! is (pid 1 at every start): its pool is made all the same. The server runs as pid 1 of
//! a pid namespace of its own (`unshare`); the test is skipped where user namespaces are
//! not allowed.

use remora_soft::pool::{Pool, MIN_POOL_BYTES};
use std::path::Path;
use std::process::Command;

/// Set in the child (pid 1 of its namespace): the pool path it opens.
const CHILD: &str = "REMORA_TEST_POOL_RESTART_CHILD";

/// A creator that was pid 1, killed after it had grown its temporary file, left
/// `.pool.creating-1-0`; the next pid 1 names its first creation the same. It failed at
/// every start with "File exists" (review), and the file, as large as the pool, stayed.
#[test]
fn a_server_restarted_as_pid_1_creates_its_pool() {
    const NAME: &str = "a_server_restarted_as_pid_1_creates_its_pool";
    if let Some(path) = std::env::var_os(CHILD) {
        assert_eq!(std::process::id(), 1, "the child runs as pid 1");
        let pool = Pool::open_or_create(Path::new(&path), MIN_POOL_BYTES);
        println!("child: {:?}", pool.as_ref().map(|p| p.created()));
        pool.unwrap();
        return;
    }
    let probe = Command::new("unshare")
        .args(["-rpf", "--mount-proc", "true"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: no user and pid namespaces here (unshare -rpf)");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("remora-pool-restart-")
        .tempdir()
        .unwrap();
    let pool = dir.path().join("pool");
    let stale = dir.path().join(".pool.creating-1-0");
    std::fs::write(&stale, vec![0u8; 8192]).unwrap();
    let out = Command::new("unshare")
        .args(["-rpf", "--mount-proc"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, &pool)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the server as pid 1 could not make its pool: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["pool".to_string()], "the stale file is gone");
}
