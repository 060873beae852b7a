//! `--server-prefix` with a prefix that forks the server rather than exec'ing it: the
//! server is the prefix's child, and its SIGKILLs (each life's, the interruption's) must
//! reach it, not only the prefix. A prefix that moves the server out of reach is refused.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The processes of this build's `remora` whose command line names `dir` (where the test's
/// loop keeps its pools): its servers. Those found are killed, so that a failing test
/// leaves none behind.
fn servers_left(dir: &Path) -> Vec<String> {
    let exe = env!("CARGO_BIN_EXE_remora");
    let dir = dir.to_str().unwrap();
    let mut left = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(line) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = String::from_utf8_lossy(&line)
            .split('\0')
            .map(String::from)
            .collect();
        let zombie = std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.split_whitespace().next() == Some("Z"))
        });
        if !zombie && args[0] == exe && args.iter().any(|a| a.contains(dir)) {
            left.push(format!("{pid}: {}", args.join(" ")));
            // SAFETY: kill(2) of a server this test's loop started and left running.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
    left
}

/// Runs `remora` with `args` and `TMPDIR` set to a scratch directory named `name` (where
/// the loop keeps its pools), then fails if a server of it is left running: its exit
/// status, stdout and stderr.
fn run_leaving_no_server(name: &str, args: &[&str]) -> (bool, String, String) {
    let tmp = scratch(name);
    let out = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(args)
        .env("TMPDIR", tmp.path())
        .output()
        .expect("run remora");
    let (ok, out, err) = (out.status.success(), text(&out.stdout), text(&out.stderr));
    let left = servers_left(tmp.path());
    assert!(
        left.is_empty(),
        "servers left running: {left:#?}\n{out}\n{err}"
    );
    (ok, out, err)
}

/// The RPC loop's three lives on one target, its servers started through `prefix`.
fn rpc_loop(name: &str, prefix: &str) -> (bool, String, String) {
    run_leaving_no_server(
        name,
        &[
            "rpc-crashcheck",
            "--targets",
            "correct",
            "--kills",
            "3",
            "--only",
            "WFlush-RPC/emulated/DMP+noDDIO+PM-RQWRB",
            "--server-prefix",
            prefix,
        ],
    )
}

#[test]
fn a_forking_prefix_does_not_keep_the_real_loops_servers_alive() {
    let (ok, out, err) = run_leaving_no_server(
        "prefix-crashcheck",
        &[
            "crashcheck",
            "--real",
            "--targets",
            "correct",
            "--no-reuse",
            "--kills",
            "3",
            "--only",
            "singleton/DMP+noDDIO+PM-RQWRB/SEND",
            "--server-prefix",
            "timeout 600",
        ],
    );
    assert!(ok && out.contains("| pass |"), "{out}\n{err}");
}

#[test]
fn a_forking_prefix_does_not_keep_the_rpc_loops_servers_alive() {
    let (ok, out, err) = rpc_loop("prefix-rpc-crashcheck", "timeout 600");
    assert!(ok && out.contains("| pass |"), "{out}\n{err}");
}

#[test]
fn a_prefix_that_moves_the_server_out_of_its_group_is_refused() {
    // `setsid` forks its command into a session of its own, out of the process group a
    // SIGKILL reaches: refused at the first start, naming the prefix, and nothing left.
    let (ok, out, err) = rpc_loop("prefix-setsid", "setsid");
    assert!(!ok, "succeeded: {out}");
    assert!(
        err.contains("--server-prefix \"setsid\"") && err.contains("out of the process group"),
        "{err}"
    );
}

/// Whether a server of this build on the pools in `dir` runs within 60 s (polled every
/// 20 ms, without killing: `servers_left` kills what it finds): the loop is under way.
/// Then 300 ms more, so that the loop is in the middle of its lives.
fn serving_soon(dir: &Path) -> bool {
    let exe = env!("CARGO_BIN_EXE_remora");
    let serving = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|l| {
                let l = String::from_utf8_lossy(&l);
                l.starts_with(&format!("{exe}\0serve")) && l.contains(dir.to_str().unwrap())
            })
        })
    };
    let started = (0..3000).any(|_| {
        serving() || {
            std::thread::sleep(Duration::from_millis(20));
            false
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    started
}

/// Starts `remora` with `args` (a crash loop) with `TMPDIR` a scratch directory named
/// `name`, sends it `sig` once its servers run (to its whole process group, as a terminal
/// does, if `group`; else to it alone), and fails unless a server had started and none is
/// left after the loop ended: its exit status and standard error.
fn signalled_loop(
    name: &str,
    args: &[&str],
    sig: libc::c_int,
    group: bool,
) -> (std::process::ExitStatus, String) {
    use std::os::unix::process::CommandExt as _;
    let tmp = scratch(name);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_remora"));
    cmd.args(args)
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if group {
        cmd.process_group(0);
    }
    let mut run = cmd.spawn().expect("run remora");
    let started = serving_soon(tmp.path());
    let pid = run.id() as libc::pid_t;
    let target = if group { -pid } else { pid };
    // SAFETY: kill(2) on a child this test started and has not reaped (or on its group,
    // which it leads).
    assert_eq!(unsafe { libc::kill(target, sig) }, 0);
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    let status = run.wait().unwrap();
    // What the loop killed has a moment to go.
    std::thread::sleep(Duration::from_millis(200));
    let left = servers_left(tmp.path());
    assert!(started, "no server started within 60 s: {err}");
    assert!(left.is_empty(), "servers left running: {left:#?}\n{err}");
    (status, err)
}

#[test]
fn sigterm_of_a_loop_with_a_forking_prefix_leaves_no_server() {
    let args = [
        "crashcheck",
        "--real",
        "--targets",
        "correct",
        "--no-reuse",
        "--server-prefix",
        "timeout 600",
    ];
    let (status, err) = signalled_loop("prefix-interrupt", &args, libc::SIGTERM, false);
    assert!(!status.success() && err.contains("interrupted"), "{err}");
}

/// A terminal's hangup reaches the loop's whole process group (a shell sends its jobs
/// SIGHUP when the terminal goes away). The servers used to be in that group and died of
/// it with the loop; in groups of their own they are reached only through the loop, which
/// must then kill them rather than die of SIGHUP and leave them running on their pools.
#[test]
fn a_hangup_of_the_loops_group_leaves_no_server() {
    let args = ["crashcheck", "--real", "--targets", "correct", "--no-reuse"];
    let (status, err) = signalled_loop("prefix-hangup", &args, libc::SIGHUP, true);
    assert!(!status.success(), "{err}");
}
