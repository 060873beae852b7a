//! `remora rpc-serve --objects`: a store nobody can use (no objects, or more than the
//! address space holds) is refused at start-up, before the pool is made, not served to
//! clients that are all turned away.

mod common;
use common::text;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `rpc-serve --objects N`; a server that starts is killed after a few seconds and
/// reported as started.
fn rpc_serve_objects(objects: &str) -> (bool, String, bool) {
    let dir = common::scratch("rpc-serve-objects");
    let pool = dir.path().join("pool.pm");
    let mut child = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args([
            "rpc-serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            "DMP+noDDIO+PM-RQWRB",
            "--design",
            "SFlush-RPC",
            "--objects",
            objects,
            "--pool",
        ])
        .arg(&pool)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run remora");
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            assert!(!status.success());
            assert_ne!(status.code(), Some(101), "{}", text(&out.stderr));
            return (false, text(&out.stderr), pool.exists());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    (true, String::new(), pool.exists())
}

#[test]
fn a_store_of_no_objects_is_refused() {
    let (started, err, made) = rpc_serve_objects("0");
    assert!(!started, "rpc-serve started a store of no objects");
    assert!(err.contains("--objects"), "{err}");
    assert!(!made);
}

#[test]
fn a_store_past_the_address_space_is_refused() {
    let (started, err, made) = rpc_serve_objects("18446744073709551615");
    assert!(
        !started,
        "rpc-serve started a store of 2^64-1 objects in a 16 MiB pool"
    );
    assert!(err.contains("objects"), "{err}");
    assert!(!made);
}

#[test]
fn a_store_that_fits_is_served() {
    let (started, err, _) = rpc_serve_objects("64");
    assert!(started, "{err}");
}
