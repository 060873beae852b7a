//! The process side of the real SIGKILL crash loops, shared by `remora crashcheck --real`
//! ([`crate::real`]) and `remora rpc-crashcheck` ([`crate::rpcreal`]): a scratch directory
//! for pool files, choosing targets, starting a server child process and reading its
//! start-up lines, killing it from a timer thread at a random moment, and the Markdown
//! cell that states a target's verdict. What a loop does between kills (its workload and
//! its judgement) stays with the loop.
//!
//! The servers' standard error goes to one log per run ([`KillArgs::server_log`]), not to
//! the loop's terminal: a healthy loop's servers report hundreds of departures and refusals
//! it provokes on purpose. A server that fails to start has its words in the error, and a
//! loop that fails shows the log's last lines ([`with_server_tail`]).

use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Settings both real crash loops share: how many kills, when, where the pool files go,
/// and how the server processes are started.
#[derive(Clone, Debug)]
pub struct KillArgs {
    /// SIGKILLs per target.
    pub kills: u64,
    /// Longest life of a server before its SIGKILL, in ms (each life is uniform in
    /// 1..=this, [`life_ms`]).
    pub max_life_ms: u64,
    /// Seed of the kill times.
    pub seed: u64,
    /// Where pool files go.
    pub dir: PathBuf,
    /// Latency profile of the client side's model.
    pub profile: LatencyProfile,
    /// Its name or path, handed to the server processes.
    pub profile_arg: String,
    /// A command the server is started through (e.g. `ip netns exec NS`), empty for none
    /// ([`server_command`]).
    pub server_prefix: Vec<String>,
    /// Address the servers listen on (port 0 picks one).
    pub server_listen: String,
    /// The file every server's standard error is appended to, each life under a header
    /// line ([`ServerProc::start`]).
    pub server_log: PathBuf,
}

impl KillArgs {
    /// The settings a crash-loop command's flags give: the profile `profile` names is
    /// loaded, `server_prefix` is split into words, and the servers' log is `server_log`
    /// (started empty), or `servers.log` in `dir` if `None`.
    #[allow(clippy::too_many_arguments)]
    pub fn from_flags(
        kills: u64,
        max_life_ms: u64,
        seed: u64,
        dir: &Path,
        profile: &str,
        server_prefix: &str,
        server_listen: String,
        server_log: Option<&Path>,
    ) -> Result<KillArgs, String> {
        let server_log = server_log.map_or_else(|| dir.join("servers.log"), Path::to_path_buf);
        std::fs::File::create(&server_log).map_err(|e| {
            format!(
                "cannot create the servers' log {}: {e}",
                server_log.display()
            )
        })?;
        Ok(KillArgs {
            kills,
            max_life_ms,
            seed,
            dir: dir.to_path_buf(),
            profile: crate::profiles::load(profile)?,
            profile_arg: profile.to_string(),
            server_prefix: server_prefix.split_whitespace().map(String::from).collect(),
            server_listen,
            server_log,
        })
    }
}

/// The soft RNIC's single-threaded executor: the nodes and the clients run on one thread,
/// and what one `block_on` spawns runs on in the next.
pub fn runtime() -> Result<remora_exec::Runtime, String> {
    remora_exec::Runtime::new().map_err(|e| format!("cannot create the executor: {e}"))
}

/// Runs a client on a [`runtime`], as a task (a panic in it becomes an error).
pub fn run_client<T: 'static>(
    client: impl std::future::Future<Output = Result<T, String>> + 'static,
) -> Result<T, String> {
    let rt = runtime()?;
    rt.block_on(async move {
        remora_exec::spawn_local(client)
            .await
            .map_err(|e| format!("the client task failed: {e}"))?
    })
}

/// The command that runs `exe`, through `prefix` (e.g. `ip netns exec NS`) when it is not
/// empty.
pub fn server_command(exe: &Path, prefix: &[String]) -> Command {
    match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(exe);
            c
        }
        None => Command::new(exe),
    }
}

/// A server child process, in a process group of its own with whatever its prefix forked;
/// the group is killed (and reaped) when dropped, so no process outlives the loop,
/// whichever way it ends.
pub struct ServerProc {
    child: Option<Child>,
    /// The address its first line (`listening on ADDR`) named.
    pub addr: String,
    /// The lines it printed after that one, as many as [`ServerProc::start`] asked for.
    pub said: Vec<String>,
}

impl ServerProc {
    /// Spawns `cmd` (a server of `exe`, called `what` in errors) with its stdout piped and
    /// its stderr appended to `log` under a header line, reads its `listening on ADDR` line
    /// and then `lines` more. The pipe is closed after that: the servers print only at
    /// start-up. A server that does not start is waited for, and what it wrote to `log`
    /// is in the error; one a prefix moved out of its process group is refused
    /// (`left_group`).
    pub fn start(
        cmd: &mut Command,
        exe: &Path,
        what: &str,
        lines: usize,
        log: &Path,
    ) -> Result<ServerProc, String> {
        use std::io::Write;
        // A group the last kill could not clear may still hold what this life would use.
        if let Some(e) = UNKILLED.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Err(e);
        }
        // The header goes first, the server's own lines after it (appended: the file is
        // every life's).
        let mut header = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(log)
            .map_err(|e| format!("cannot open the servers' log {}: {e}", log.display()))?;
        let argv: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy()).collect();
        writeln!(header, "--- {what}: {} ---", argv.join(" "))
            .map_err(|e| format!("cannot write the servers' log {}: {e}", log.display()))?;
        let from = header.metadata().map_or(0, |m| m.len());
        let mut child = crate::interrupt::spawn(cmd.stdout(Stdio::piped()).stderr(header))
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        // From here on, a failure drops `proc`, which kills the child.
        let mut proc = ServerProc {
            child: None,
            addr: String::new(),
            said: Vec::new(),
        };
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        proc.child = Some(child);
        let mut line = String::new();
        out.read_line(&mut line).map_err(|e| e.to_string())?;
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            // Its stderr is complete once it has exited.
            if let Some(mut c) = proc.child.take() {
                let _ = crate::interrupt::kill_group(&mut c);
                crate::interrupt::reaping(c.id());
            }
            let said = std::fs::read(log)
                .ok()
                .and_then(|b| {
                    b.get(from as usize..)
                        .map(|b| String::from_utf8_lossy(b).into_owned())
                })
                .unwrap_or_default();
            let said = match said.trim_end() {
                "" => "nothing on its standard error".to_string(),
                s => format!("on its standard error:\n  {}", s.replace('\n', "\n  ")),
            };
            return Err(format!("{what} did not start: {line:?}; it said {said}"));
        };
        proc.addr = addr.to_string();
        if cmd.get_program() != exe.as_os_str() {
            // Without a prefix the server is the child itself, in its group.
            let pgid = proc.child.as_ref().map_or(0, Child::id);
            // No child starts meanwhile: between its fork and its exec it would hold this
            // pipe too, outside the group, and be taken for the server.
            crate::interrupt::no_spawn_during(|| left_group(cmd, exe, out.get_ref(), pgid))?;
        }
        for _ in 0..lines {
            let mut l = String::new();
            out.read_line(&mut l).map_err(|e| e.to_string())?;
            proc.said.push(l);
        }
        Ok(proc)
    }

    /// SIGKILLs the server's process group after `ms` milliseconds, from a thread of its
    /// own (a group that outlives it fails the next [`start`](Self::start)): like a power
    /// cut, the kill does not wait for the client to be at a convenient point. A
    /// [`Killer`] dropped before then kills at once.
    pub fn kill_after(&mut self, ms: u64) -> Killer {
        let mut child = self.child.take().expect("server running");
        let (now, wait) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            // Ends early when the Killer is dropped (its sender with it).
            let _ = wait.recv_timeout(std::time::Duration::from_millis(ms));
            // When the SIGKILL was sent: what failed before it, the kill did not cause.
            #[allow(clippy::disallowed_methods)] // a real process's kill, on the wall clock
            let at = std::time::Instant::now();
            let killed = crate::interrupt::kill_group(&mut child);
            crate::interrupt::reaping(child.id());
            if let Err(e) = &killed {
                *UNKILLED.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
            }
            killed.is_ok().then_some(at)
        });
        Killer {
            thread: Some(thread),
            now: Some(now),
        }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Err(e) = crate::interrupt::kill_group(&mut c) {
                eprintln!("error: {e}");
            }
            crate::interrupt::reaping(c.id());
        }
    }
}

/// Why a server's process group outlived its SIGKILL ([`ServerProc::kill_after`]), for
/// the next [`ServerProc::start`] to fail with: a server of the last life may still hold
/// the pool.
static UNKILLED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Fails, naming the prefix, when a process that holds the server's standard output
/// (`pipe`, its read end) is outside the process group `pgid` the server was started in:
/// a prefix that starts its command in a session or group of its own (`setsid`, `sudo`
/// with a pty) puts the server where a SIGKILL of the group does not reach. Those
/// processes are killed here (the caller kills the group), so none runs on. Processes of
/// another user cannot be seen unless this one runs as root.
fn left_group(
    cmd: &Command,
    exe: &Path,
    pipe: &std::process::ChildStdout,
    pgid: u32,
) -> Result<(), String> {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::MetadataExt as _;
    let ino = std::fs::metadata(format!("/proc/self/fd/{}", pipe.as_raw_fd()))
        .map_err(|e| format!("cannot inspect the server's standard output: {e}"))?
        .ino();
    let link = std::ffi::OsString::from(format!("pipe:[{ino}]"));
    let me = std::process::id();
    let mut outside = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // Only the server's side holds the write end; this process holds the read end.
        if pid == me {
            continue;
        }
        let holds = std::fs::read_dir(e.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == link));
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces, so split after its `)`.
        let group = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .nth(2)?
                    .parse()
                    .ok()
            });
        if holds && group.is_some_and(|g: u32| g != pgid) {
            let line = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let line = String::from_utf8_lossy(&line).replace('\0', " ");
            outside.push(format!("{pid} `{}`", line.trim_end()));
            // SAFETY: kill(2) of a process just seen holding our pipe; reaped here if it
            // was adopted ([`crate::interrupt`]), else by its parent or init.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
                libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
            }
        }
    }
    if outside.is_empty() {
        return Ok(());
    }
    let prefix: Vec<_> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args().take_while(|a| *a != exe.as_os_str()))
        .map(|a| a.to_string_lossy())
        .collect();
    Err(format!(
        "--server-prefix {:?} moved the server out of the process group it was started \
         in ({}; killed), where its SIGKILL would not reach it: use a prefix that runs its \
         command in the group it was started in (one that execs it, as `ip netns exec \
         NS`, or forks it, as `timeout`)",
        prefix.join(" "),
        outside.join(", ")
    ))
}

/// A pending SIGKILL ([`ServerProc::kill_after`]). Dropped without a join (a loop that
/// ends on a verdict before the kill was due), it kills the server at once and waits for
/// it: a detached thread would die with this process before its kill, and the server
/// would run on.
pub struct Killer {
    thread: Option<std::thread::JoinHandle<Option<std::time::Instant>>>,
    /// Dropped to have the kill sent now.
    now: Option<std::sync::mpsc::Sender<()>>,
}

impl Drop for Killer {
    fn drop(&mut self) {
        drop(self.now.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Killer {
    /// Waits until the kill landed and the process was reaped; true if it was killed.
    pub fn join(self) -> bool {
        self.join_at().is_some()
    }

    /// [`join`](Self::join), giving when the SIGKILL was sent, if it was.
    pub fn join_at(mut self) -> Option<std::time::Instant> {
        let t = self.thread.take().expect("joined once");
        t.join().ok().flatten()
    }

    /// Waits for the kill; true if it was sent at or before `failed_at` (what failed then
    /// may have failed of it).
    pub fn sent_before(self, failed_at: std::time::Instant) -> bool {
        self.join_at().is_some_and(|at| at <= failed_at)
    }
}

/// Whether a failure now was caused by the life's early SIGKILL ([`early_kill`]), if one
/// was drawn: only a kill sent before the failure may cut the clients' return short. Takes
/// the kill (and waits for it).
pub fn failed_of_early_kill(early: &mut Option<Killer>) -> bool {
    let failed_at = wall();
    early.take().is_some_and(|k| k.sent_before(failed_at))
}

/// `err` with the last lines of the servers' log at `log` after it, for a loop that
/// failed: what the servers said last is often why.
pub fn with_server_tail(err: String, log: &Path) -> String {
    const TAIL: usize = 20;
    let Ok(text) = std::fs::read_to_string(log) else {
        return err;
    };
    let lines: Vec<&str> = text.lines().collect();
    // Nothing to add when the error already quotes the last line (a server that did not
    // start).
    if lines.last().is_none_or(|l| err.contains(l)) {
        return err;
    }
    let tail = &lines[lines.len().saturating_sub(TAIL)..];
    format!(
        "{err}\nthe servers' last {} of {} lines of standard error:\n  {}",
        tail.len(),
        lines.len(),
        tail.join("\n  ")
    )
}

/// The wall clock, for latencies of real operations and the instants of real SIGKILLs.
#[allow(clippy::disallowed_methods)] // real processes, on the wall clock
pub fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

/// The latest a life's early SIGKILL lands, in ms after the server listens ([`early_kill`]):
/// the clients' return (the server's recovery of their logs, handshakes, reads of what
/// survived) takes a few milliseconds.
pub const EARLY_KILL_MS: u64 = 5;

/// In a quarter of the lives between the first and the last (drawn from `rng`), a SIGKILL
/// of `server` within [`EARLY_KILL_MS`] of its start, so that it lands while the clients
/// come back, not only among their operations. A client's failure counts as the kill's
/// only if the kill was sent before it ([`Killer::sent_before`]).
pub fn early_kill(
    rng: &mut Prng,
    life: u64,
    kills: u64,
    server: &mut ServerProc,
) -> Option<Killer> {
    (life > 0 && life < kills && rng.range_inclusive(0, 3) == 0)
        .then(|| server.kill_after(rng.range_inclusive(0, EARLY_KILL_MS)))
}

/// How long the next server lives before its SIGKILL: uniform in `1..=max_ms` (at least
/// one millisecond).
pub fn life_ms(rng: &mut Prng, max_ms: u64) -> u64 {
    rng.range_inclusive(1, max_ms.max(1))
}

/// A directory of pool files under the system's temporary directory, removed with
/// everything in it when dropped (also when a loop fails half-way).
pub struct Scratch {
    /// Its path.
    pub dir: PathBuf,
}

impl Scratch {
    /// Creates `<tmp>/<name>-<pid>`.
    pub fn new(name: &str) -> Result<Scratch, String> {
        Scratch::under(&std::env::temp_dir(), name)
    }

    /// Creates `<parent>/<name>-<pid>` (and `parent` if missing); an interruption
    /// removes it too ([`crate::interrupt`]).
    pub fn under(parent: &Path, name: &str) -> Result<Scratch, String> {
        let dir = parent.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        crate::interrupt::dir_made(&dir);
        Ok(Scratch { dir })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        crate::interrupt::dir_removed(&self.dir);
    }
}

/// Keeps the targets `--targets` (`correct`, `negative` or `all`) and `--only` (a
/// substring of the name) select; fails when none is left (a typo in `--only` must not
/// pass as an empty, successful run).
pub fn select<T>(
    targets: &mut Vec<T>,
    sel: &str,
    only: Option<&str>,
    wrong: impl Fn(&T) -> bool,
    name: impl Fn(&T) -> &str,
) -> Result<(), String> {
    match sel {
        "all" => {}
        "correct" => targets.retain(|t| !wrong(t)),
        "negative" => targets.retain(|t| wrong(t)),
        other => return Err(format!("--targets {other:?}: correct, negative or all")),
    }
    if let Some(f) = only {
        targets.retain(|t| name(t).contains(f));
    }
    if targets.is_empty() {
        return Err(format!(
            "no target matches --targets {sel}{}",
            only.map_or(String::new(), |f| format!(" --only {f:?}"))
        ));
    }
    Ok(())
}

/// Runs `one(target, index)` on every target in order, reporting `(done, total)` after
/// each; stops at the first error.
pub fn run_all<T, R>(
    targets: &[T],
    progress: &dyn Fn(usize, usize),
    mut one: impl FnMut(&T, u64) -> Result<R, String>,
) -> Result<Vec<R>, String> {
    let mut reports = Vec::with_capacity(targets.len());
    for (i, t) in targets.iter().enumerate() {
        reports.push(one(t, i as u64)?);
        progress(i + 1, targets.len());
    }
    Ok(reports)
}

/// A Markdown table of crash-loop reports: the `header` cells, one row of cells per
/// report, then a blank line and `summary`.
pub fn table(
    header: &[&str],
    rows: impl IntoIterator<Item = Vec<String>>,
    summary: &str,
) -> String {
    let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    let mut s = line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    s.push('|');
    s.push_str(&"---|".repeat(header.len()));
    s.push('\n');
    for r in rows {
        s.push_str(&line(&r));
    }
    s.push('\n');
    s.push_str(summary);
    s.push('\n');
    s
}

/// The `result` cell of a real loop: `pass`, `caught: ...`, `**not caught**` or
/// `**FAIL** ...`.
pub fn result_cell(wrong: bool, violations: u64, example: Option<&str>) -> String {
    remora_sim::crashcheck::result_cell(wrong, violations, example, "**not caught**")
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    /// A pending kill dropped before it is due (a loop that ends on a verdict) kills the
    /// server then: it used to leave it to a detached thread that this process's exit
    /// could end first, and the server ran on with no parent.
    #[test]
    fn a_pending_kill_dropped_kills_the_server_at_once() {
        let child = crate::interrupt::spawn(std::process::Command::new("sleep").arg("60")).unwrap();
        let pid = child.id();
        let mut server = super::ServerProc {
            child: Some(child),
            addr: String::new(),
            said: Vec::new(),
        };
        let start = super::wall();
        drop(server.kill_after(60_000));
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "the drop waited for the kill's time"
        );
        // Reaped by the drop: no process of that pid is our child any more.
        let gone = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| !s.contains("(sleep)"));
        assert!(gone, "pid {pid} still runs after its Killer was dropped");
    }

    /// The processes whose command line is `args`, not zombies.
    fn running(args: &[&str]) -> Vec<u32> {
        let want = args.join("\0") + "\0";
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let line = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let zombie = std::fs::read_to_string(e.path().join("stat"))
                .map_or(true, |s| s.rsplit_once(") Z ").is_some());
            if line == want.as_bytes() && !zombie {
                found.push(pid);
            }
        }
        found
    }

    /// A prefix that forks its command (here a shell that runs it and then something
    /// else) is the child: killing it alone used to leave the server running. Both ways a
    /// server is killed, its pending kill and its drop, reach what the prefix forked.
    #[test]
    fn a_server_forked_by_its_prefix_is_killed_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("servers.log");
        for by_killer in [true, false] {
            // A duration no other process has: the server's command line.
            let secs = format!("600.{}{}", std::process::id(), u8::from(by_killer));
            let script = format!("echo listening on here; exec sleep {secs}");
            let mut cmd = std::process::Command::new("sh");
            cmd.args(["-c", "\"$@\"; true", "sh", "/bin/sh", "-c", &script]);
            let mut server =
                super::ServerProc::start(&mut cmd, Path::new("/bin/sh"), "server", 0, &log)
                    .unwrap();
            assert_eq!(server.addr, "here");
            // Its line comes before its `exec`: polled until the server is `sleep`.
            let started = (0..500).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                running(&["sleep", &secs]).len() == 1
            });
            assert!(started, "the server did not start");
            if by_killer {
                assert!(server.kill_after(0).join(), "the kill was not sent");
            } else {
                drop(server);
            }
            let left = running(&["sleep", &secs]);
            assert!(
                left.is_empty(),
                "server {left:?} runs on (by_killer {by_killer})"
            );
        }
    }

    /// A prefix that starts its command in a session of its own takes it out of the group
    /// its SIGKILL goes to: refused, naming the prefix, and the server is not left running.
    #[test]
    fn a_prefix_that_leaves_the_group_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("servers.log");
        let secs = format!("600.{}9", std::process::id());
        let script = format!("echo listening on here; exec sleep {secs}");
        let mut cmd = std::process::Command::new("setsid");
        cmd.args(["/bin/sh", "-c", &script]);
        let e = super::ServerProc::start(&mut cmd, Path::new("/bin/sh"), "server", 0, &log)
            .err()
            .expect("setsid was accepted");
        assert!(
            e.contains("--server-prefix \"setsid\" moved the server out of the process group"),
            "{e}"
        );
        let left = running(&["sleep", &secs]);
        assert!(left.is_empty(), "server {left:?} runs on");
    }

    #[test]
    fn select_filters_by_kind_and_name_and_refuses_an_empty_choice() {
        let all = || vec![("a/x", false), ("b/x", true), ("c/y", false)];
        let pick = |sel: &str, only: Option<&str>| {
            let mut v = all();
            super::select(&mut v, sel, only, |t| t.1, |t| t.0).map(|()| v)
        };
        assert_eq!(pick("all", None).unwrap().len(), 3);
        assert_eq!(pick("correct", Some("x")).unwrap(), vec![("a/x", false)]);
        assert_eq!(pick("negative", None).unwrap(), vec![("b/x", true)]);
        let e = pick("negative", Some("y")).unwrap_err();
        assert!(
            e.contains("no target matches --targets negative --only \"y\""),
            "{e}"
        );
        assert!(pick("all", Some("nomatch"))
            .unwrap_err()
            .contains("no target matches"));
        assert!(pick("some", None)
            .unwrap_err()
            .contains("correct, negative or all"));
    }

    #[test]
    fn tables_are_markdown_with_a_summary() {
        let t = super::table(
            &["target", "result"],
            [
                vec!["a".into(), "pass".into()],
                vec!["b".into(), "**not caught**".into()],
            ],
            "2 targets",
        );
        assert_eq!(
            t,
            "| target | result |\n|---|---|\n| a | pass |\n| b | **not caught** |\n\n2 targets\n"
        );
    }
}
