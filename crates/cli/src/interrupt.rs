//! Ctrl-C or SIGTERM in the middle of a command that starts server processes and keeps
//! scratch files (`crashcheck --real`, `rpc-crashcheck`, `bench soft`). The signals'
//! default action ends the process at once, without its destructors: its servers would run
//! on (a SIGTERM of this process alone never reaches them) and its pool files stay behind.
//! So such a command waits for the signals on a thread of its own, which SIGKILLs the
//! children still running, removes the scratch directories and exits as the signal would.
//!
//! Each child starts in a process group of its own and is killed as a group
//! ([`kill_group`]): a server started through a prefix that forks it (`timeout 600`,
//! `strace -f`, `unshare --fork`) rather than exec'ing it is the prefix's child, and a
//! SIGKILL of the prefix alone would leave it running, holding its pool file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// What an interrupted command must not leave behind.
struct Live {
    /// Children started through [`spawn`] and not yet reaped.
    children: Vec<u32>,
    /// Scratch directories made and not yet removed.
    dirs: Vec<PathBuf>,
}

static LIVE: Mutex<Live> = Mutex::new(Live {
    children: Vec::new(),
    dirs: Vec::new(),
});

fn live() -> MutexGuard<'static, Live> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// From here on, SIGINT, SIGTERM, SIGHUP and SIGQUIT remove what [`spawn`] and [`dir_made`] registered,
/// then end the process by the signal's default action (as a shell expects). Call it
/// before the process starts any thread: the signals are blocked in the calling thread and
/// in every thread started after, so only the waiting thread takes them (children start
/// with them unblocked: [`spawn`] clears the mask, which they would otherwise inherit).
pub fn clean_up_on_signals() -> Result<(), String> {
    // SAFETY: the set is initialised by sigemptyset before use, and pthread_sigmask
    // changes only this thread's mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        // A terminal's hangup and quit go to the foreground process group, which the
        // children (each in a group of its own) are not in: they reach them through this.
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::sigaddset(&mut set, libc::SIGQUIT);
        match libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) {
            0 => set,
            e => return Err(format!("cannot block the terminating signals: error {e}")),
        }
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: a valid signal set and a valid place for the signal's number.
            if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                clean_up_and_exit(sig);
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(())
}

fn clean_up_and_exit(sig: libc::c_int) -> ! {
    // Held to the exit: meanwhile no child is started or taken off the list.
    let live = live();
    for &pid in &live.children {
        // One reaped an instant ago and not yet off the list ([`reaping`]) no longer exists
        // (its pid is not reused so soon): the kills find nothing and the wait returns at
        // once. Waited for, so that no server is still writing into a directory removed
        // below; a group that outlives the bound is said (the exit cannot wait for ever).
        if let Err(e) = kill_and_reap(pid) {
            eprintln!("\nerror: {e}");
        }
    }
    for dir in &live.dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
    let name = match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        _ => "SIGTERM",
    };
    eprintln!(
        "\nerror: interrupted by {name}: servers killed: {}, scratch directories removed: {}",
        live.children.len(),
        live.dirs.len()
    );
    // Ended by the signal itself, not by an exit status of 128 + its number: a shell that
    // runs this in a loop or a script stops at Ctrl-C only when its child died of SIGINT
    // (one that exited is taken to have handled it, and the loop goes on). Its default
    // action, unblocked in this thread, ends the process; the exit is the fallback.
    // SAFETY: resets the signal's disposition, unblocks it in this thread only and sends
    // it to this thread; none of them touches memory of ours.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    std::process::exit(128 + sig);
}

/// Starts `cmd` in a process group of its own (whose id is the child's pid), registered
/// until [`reaping`] says it is about to be reaped. From the first call on, this process
/// adopts the orphans of its descendants ([`adopt_orphans`]), so that [`kill_group`] can
/// reap what a child forked.
pub fn spawn(cmd: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt as _;
    adopt_orphans();
    cmd.process_group(0);
    // SAFETY: between fork and exec the closure makes async-signal-safe calls only and
    // allocates nothing. A server must take SIGINT and SIGTERM itself.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    // Locked across the start, so that no child starts unregistered.
    let mut live = live();
    let child = cmd.spawn()?;
    live.children.push(child.id());
    Ok(child)
}

/// Runs `f` while no child is started through [`spawn`].
pub fn no_spawn_during<T>(f: impl FnOnce() -> T) -> T {
    let _live = live();
    f()
}

/// `pid`, from [`spawn`], was just reaped: an interruption no longer kills it (its pid may
/// become another process's). Called after the wait, not before, so that an interruption
/// while the child is being stopped still kills it; a pid is not reused in that instant.
pub fn reaping(pid: u32) {
    live().children.retain(|&p| p != pid);
}

/// `dir` was made: an interruption removes it, with everything in it.
pub fn dir_made(dir: &Path) {
    live().dirs.push(dir.to_path_buf());
}

/// `dir` was removed.
pub fn dir_removed(dir: &Path) {
    live().dirs.retain(|d| d != dir);
}

/// How long [`kill_group`] waits for a group's last process to be gone.
const GROUP_GONE: std::time::Duration = std::time::Duration::from_secs(10);

/// Makes this process the child subreaper of its descendants (Linux): a process whose
/// parent dies (a server whose prefix was SIGKILLed with it) is reparented here rather
/// than to init, so [`reap_group`] can reap it, and it is never a zombie that a container's
/// init leaves for ever. Done once; where it fails, init reaps them.
fn adopt_orphans() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(target_os = "linux")]
        // SAFETY: prctl(2) with an integer option; it touches no memory of ours.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
    });
}

/// SIGKILLs the process group of `child`, a child from [`spawn`] not yet reaped (so the
/// group exists and its id is no other's), reaps it, and waits until nothing of its group
/// is left ([`reap_group`]). The caller then calls [`reaping`].
pub fn kill_group(child: &mut Child) -> Result<(), String> {
    kill_and_reap(child.id())
}

/// [`kill_group`] of the child whose pid is `pid` (the interruption's clean-up has only
/// the pids).
fn kill_and_reap(pid: u32) -> Result<(), String> {
    let pid_t = pid as libc::pid_t;
    // SAFETY: kill(2) and waitpid(2) on an unreaped child of ours and its group: the ids
    // stay ours while the leader is at least a zombie. Killed by its pid too, should it
    // have left its group.
    unsafe {
        libc::kill(-pid_t, libc::SIGKILL);
        libc::kill(pid_t, libc::SIGKILL);
        libc::waitpid(pid_t, std::ptr::null_mut(), 0);
    }
    reap_group(pid)
}

/// Waits, for up to [`GROUP_GONE`], until no process is left in the group `pgid` (just
/// SIGKILLed, its leader reaped), reaping those this process adopted ([`adopt_orphans`]):
/// the next life must not start while a server of the last one still holds the pool.
fn reap_group(pgid: u32) -> Result<(), String> {
    let pgid = pgid as libc::pid_t;
    #[allow(clippy::disallowed_methods)] // a bound on waiting for real processes
    let deadline = std::time::Instant::now() + GROUP_GONE;
    loop {
        // SAFETY: waitpid(2) and kill(2) on a group of ours, which no other group can
        // take the id of while any process of it exists (zombies included).
        unsafe {
            // Adopted members that died are reaped; a zombie still counts as a member.
            while libc::waitpid(-pgid, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
            if libc::kill(-pgid, 0) != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            {
                return Ok(());
            }
            // One forked after the SIGKILL, or not yet reparented: killed again.
            libc::kill(-pgid, libc::SIGKILL);
        }
        #[allow(clippy::disallowed_methods)] // see above
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "process group {pgid} still has processes {} s after its SIGKILL",
                GROUP_GONE.as_secs()
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
