//! An interrupted command that cleaned up after itself still ends *by* the signal, not
//! with an exit status of 128 + its number: a shell running it in a loop or a script
//! (bash's wait-and-cooperative-exit) stops at Ctrl-C only when its child died of SIGINT;
//! a child that exited with 130 is taken to have handled the signal, and the loop runs on.

mod common;
use common::*;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Whether `pid` has a child process.
fn has_child(pid: u32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(str::to_string))
                == Some(pid.to_string())
        })
    })
}

fn ends_by(args: &[&str], sig: libc::c_int) {
    let tmp = scratch("interrupt-status");
    let mut run = Command::new(env!("CARGO_BIN_EXE_remora"))
        .args(args)
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run remora");
    let pid = run.id();
    for _ in 0..3000 {
        if has_child(pid) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    let status = run.wait().unwrap();
    assert!(err.contains("interrupted"), "{args:?}: {err}");
    assert_eq!(
        (status.signal(), status.code()),
        (Some(sig), None),
        "{args:?}: interrupted by signal {sig}, it ended with {status} instead of by the signal: \
         a shell loop running it goes on to its next command"
    );
}

#[test]
fn ctrl_c_of_the_durable_rpc_crash_loop_ends_it_by_sigint() {
    ends_by(
        &["rpc-crashcheck", "--targets", "correct", "--kills", "20"],
        libc::SIGINT,
    );
}

#[test]
fn sigterm_of_the_real_crash_loop_ends_it_by_sigterm() {
    ends_by(
        &["crashcheck", "--real", "--targets", "correct", "--no-reuse"],
        libc::SIGTERM,
    );
}
