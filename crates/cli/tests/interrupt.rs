//! Ctrl-C or SIGTERM in the middle of a command that starts servers: the command ends
//! with a failure status and leaves nothing behind, no server process and no pool file.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut kids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split after its `)`.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if rest.split_whitespace().nth(1) == Some(&pid.to_string()) {
            kids.push(p);
        }
    }
    kids
}

/// Whether `pid` still runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.split_whitespace().next() != Some("Z"))
    })
}

/// Runs `remora` with `args` (and `TMPDIR` set to `tmp`, where the crash loops keep their
/// pools), sends `sig` to it alone once it has started a server, and checks that it fails,
/// saying why, and that none of its servers runs on and `tmp` is left empty.
fn interrupted_leaves_nothing(args: &[&str], tmp: &Path, sig: libc::c_int) {
    let mut run = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(args)
        .env("TMPDIR", tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run remora");
    let pid = run.id();
    // Polled every 20 ms, for up to 60 s.
    let mut kids = children_of(pid);
    for _ in 0..3000 {
        if !kids.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        kids = children_of(pid);
    }
    assert!(!kids.is_empty(), "{args:?} started no server within 60 s");
    // Let it get under way, with a server or two started.
    std::thread::sleep(Duration::from_millis(500));
    let mut kids: Vec<u32> = kids.into_iter().chain(children_of(pid)).collect();
    kids.sort_unstable();
    kids.dedup();
    // Its servers take SIGINT and SIGTERM themselves (the mask is not inherited). A child
    // caught between its fork and its exec still runs the command's image, with the
    // command's mask until its `pre_exec` clears it: it is no server yet, so it is not
    // judged (its command line is still the command's).
    let cmdline = |p: u32| std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
    let own = cmdline(pid);
    let mut blocking = Vec::new();
    for &k in kids.iter().filter(|&&k| cmdline(k) != own) {
        let status = std::fs::read_to_string(format!("/proc/{k}/status")).unwrap_or_default();
        if let Some(blocked) = status.lines().find_map(|l| l.strip_prefix("SigBlk:")) {
            let blocked = u64::from_str_radix(blocked.trim(), 16).unwrap();
            let both = 1 << (libc::SIGINT - 1) | 1 << (libc::SIGTERM - 1);
            if blocked & both != 0 {
                blocking.push(k);
            }
        }
    }
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    let status = run.wait().unwrap();
    // Its children have a moment to go, then whatever is left is reported (and killed,
    // so the test itself leaves nothing).
    for _ in 0..250 {
        if !kids.iter().any(|&k| running(k)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = kids.iter().copied().filter(|&k| running(k)).collect();
    for &k in &left {
        // SAFETY: kill(2) on a process this test saw as its child's child, still running.
        unsafe { libc::kill(k as libc::pid_t, libc::SIGKILL) };
    }
    let files: Vec<_> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(!status.success(), "{args:?} interrupted succeeded: {err}");
    assert!(left.is_empty(), "{args:?}: servers left running: {left:?}");
    assert!(files.is_empty(), "{args:?}: left behind: {files:?}");
    assert!(
        blocking.is_empty(),
        "{args:?}: children block SIGINT or SIGTERM: {blocking:?}"
    );
    assert!(err.contains("interrupted"), "{args:?}: {err}");
}

#[test]
fn sigterm_of_the_real_crash_loop_leaves_no_server_and_no_pool() {
    let tmp = scratch("interrupt-crashcheck");
    let args = ["crashcheck", "--real", "--targets", "correct", "--no-reuse"];
    interrupted_leaves_nothing(&args, tmp.path(), libc::SIGTERM);
}

#[test]
fn ctrl_c_of_the_durable_rpc_crash_loop_leaves_no_server_and_no_pool() {
    let tmp = scratch("interrupt-rpc-crashcheck");
    let args = ["rpc-crashcheck", "--targets", "correct", "--kills", "20"];
    interrupted_leaves_nothing(&args, tmp.path(), libc::SIGINT);
}

#[test]
fn sigterm_of_bench_soft_leaves_no_peer_and_no_pool() {
    let tmp = scratch("interrupt-bench-soft");
    let dir = tmp.path().to_str().unwrap();
    let args = ["bench", "soft", "--n", "2000", "--pool-dir", dir];
    interrupted_leaves_nothing(&args, tmp.path(), libc::SIGTERM);
}
