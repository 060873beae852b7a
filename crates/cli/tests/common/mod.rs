//! Helpers the integration tests of the `remora` binary share.
// Each test file uses its own part of them.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs the built `remora` binary with `args` to completion.
pub fn remora(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(args)
        .output()
        .expect("run remora")
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh directory `<tmp>/remora-<name>-XXXXXX`, removed with everything in it when
/// dropped, however the test ends (a failed assertion included): tests leave nothing behind.
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("remora-{name}-"))
        .tempdir()
        .expect("create a scratch directory")
}

/// Runs `remora` with `args` and checks that it refuses them: a failure that is not a
/// panic, naming `what` (the flag, or the reason) on standard error.
pub fn refused_naming(args: &[&str], what: &str) {
    let out = remora(args);
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "{args:?} succeeded, {what} ignored: {}",
        text(&out.stdout)
    );
    assert_ne!(out.status.code(), Some(101), "{err}");
    assert!(err.contains(what), "{args:?}: {err}");
}

/// The quickest `bench rpc` run (one design, the micro set); add `--out` and the rest.
pub const QUICK_BENCH_RPC: [&str; 7] = [
    "bench",
    "rpc",
    "--quick",
    "--sets",
    "micro",
    "--designs",
    "SFlush-RPC",
];

/// Starts a server process, `remora` with `args` (standard output discarded): if it exits
/// within about ten seconds, it must have failed, and its exit status and standard error
/// are returned; if it is still running then, it is killed and `None` returned (it
/// started).
pub fn server_refusal<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
) -> Option<(std::process::ExitStatus, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run remora");
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            assert!(!status.success());
            return Some((status, text(&out.stderr)));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Starts `serve` in this process, on a thread of its own, on a new pool of `pool_bytes`
/// in `dir`, with `config`, regions of `region_len` bytes and RemoteLog's `collector` in
/// each; returns the address it listens on.
pub fn serve_collecting(
    dir: &std::path::Path,
    config: &str,
    region_len: u64,
    pool_bytes: u64,
    collector: remora_cli::real::LogCollector,
) -> String {
    let opts = remora_soft::server::ServeOptions {
        listen: "127.0.0.1:0".into(),
        pool: dir.join("pool.pm"),
        pool_bytes: remora_soft::pool::PoolBytes::AtLeast(pool_bytes),
        config: config.parse().unwrap(),
        profile: remora_model::profile::LatencyProfile::default_profile(),
        setup: remora::ServerSetup {
            region_len,
            ..remora::ServerSetup::default()
        },
        lease: std::time::Duration::from_secs(60),
        admission: remora_soft::server::Admission::DEFAULT,
        fault: None,
        slot_task: Some(collector.slot_task()),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = remora_exec::block_on(remora_soft::server::serve(opts, |s| {
            tx.send(s.addr).unwrap()
        }));
    });
    rx.recv().unwrap().to_string()
}

/// The quickest `--results` run of `remotelog` (`cmd` "remotelog") or of `bench rpc`
/// (any other `cmd`), with its outputs in `out` and its page at `page`.
pub fn results_run(cmd: &str, out: &Path, page: &Path) -> std::process::Output {
    let (out, page) = (out.to_str().unwrap(), page.to_str().unwrap());
    match cmd {
        "remotelog" => remora(&[
            "remotelog",
            "--appends",
            "1",
            "--threads",
            "1",
            "--out",
            out,
            "--results",
            page,
        ]),
        _ => {
            let mut a = QUICK_BENCH_RPC.to_vec();
            a.extend(["--threads", "1", "--out", out, "--results", page]);
            remora(&a)
        }
    }
}
