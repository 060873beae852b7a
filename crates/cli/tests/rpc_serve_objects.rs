//! `remora rpc-serve --objects`: a store nobody can use (no objects, or more than the
//! address space holds) is refused at start-up, before the pool is made, not served to
//! clients that are all turned away.

mod common;

/// Runs `rpc-serve --objects N`; a server that starts is killed after a few seconds and
/// reported as started.
fn rpc_serve_objects(objects: &str) -> (bool, String, bool) {
    let dir = common::scratch("rpc-serve-objects");
    let pool = dir.path().join("pool.pm");
    let pool_arg = pool.to_str().unwrap();
    match common::server_refusal([
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
        pool_arg,
    ]) {
        Some((status, err)) => {
            assert_ne!(status.code(), Some(101), "{err}");
            (false, err, pool.exists())
        }
        None => (true, String::new(), pool.exists()),
    }
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
