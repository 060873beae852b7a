//! The processes the benchmark talks to: the echo process (`remora bench echo`: raw TCP
//! ping-pong, a raw stream to sink, the soft RNIC's frames to apply, or a ping-pong served
//! from the soft RNIC's executor), the CPU placement they are pinned to, and the child
//! processes themselves (the echo process and `remora serve` servers).

use super::{thread_cpu_ns, wall};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// First byte of a raw streaming connection: then the stream's length (u64, little-endian),
/// the stream, and, once all of it was read, one byte back followed by the receiving
/// thread's CPU time in ns (u64, little-endian).
pub(super) const STREAM_LEAD: u8 = 0xFE;

/// First byte of a connection streaming the soft wire's frames without the model: then
/// the number of WRITEs (u64) and their rkey (u32), both little-endian, the frames, and
/// once every WRITE was applied, the same acknowledgement as [`STREAM_LEAD`]'s.
pub(super) const FRAMES_LEAD: u8 = 0xFD;

/// First byte of a ping-pong connection the echo process serves from a task of the soft
/// RNIC's executor (`remora-exec`, epoll wake-ups: the soft RNIC server's I/O path)
/// instead of a blocking thread.
pub(super) const EXEC_LEAD: u8 = 0xFC;

/// Remote key of the model-free frame stream's WRITEs (the sink refuses any other).
pub(super) const FRAMES_RKEY: u32 = 0x5eed;

/// Bytes of the sink's memory region: the 1024 lines the streams cycle through.
const FRAMES_REGION: usize = 1024 * 64;

/// A raw TCP echo server (the other process of the ping-pong), until the peer closes.
/// A connection that starts with `STREAM_LEAD` is a stream to sink instead, and one
/// that starts with `FRAMES_LEAD` a stream of frames to apply (`sink_frames`).
pub fn echo_server(listen: &str) -> Result<(), String> {
    let l = std::net::TcpListener::bind(listen).map_err(|e| e.to_string())?;
    println!(
        "listening on {}",
        l.local_addr().map_err(|e| e.to_string())?
    );
    std::io::stdout().flush().ok();
    for s in l.incoming() {
        let Ok(mut s) = s else { continue };
        let _ = s.set_nodelay(true);
        std::thread::spawn(move || {
            let mut b = [0u8; 65536];
            if s.peek(&mut b[..1]).is_ok_and(|n| n == 1) && b[0] == FRAMES_LEAD {
                if sink_frames(&mut s).is_ok() {
                    let mut ack = [1u8; 9];
                    ack[1..].copy_from_slice(&thread_cpu_ns().to_le_bytes());
                    let _ = s.write_all(&ack);
                }
                return;
            }
            if s.peek(&mut b[..1]).is_ok_and(|n| n == 1) && b[0] == EXEC_LEAD {
                let _ = s.read_exact(&mut b[..1]);
                let _ = exec_echo(s);
                return;
            }
            if s.peek(&mut b[..1]).is_ok_and(|n| n == 1) && b[0] == STREAM_LEAD {
                // Streaming: sink the announced bytes, then acknowledge with one byte.
                let mut head = [0u8; 9];
                if s.read_exact(&mut head).is_err() {
                    return;
                }
                let mut left = u64::from_le_bytes(head[1..].try_into().expect("8 bytes"));
                while left > 0 {
                    match s.read(&mut b[..(left.min(65536) as usize)]) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => left -= n as u64,
                    }
                }
                // The acknowledgement carries the thread's CPU time, for the report's
                // per-message CPU of each side.
                let mut ack = [1u8; 9];
                ack[1..].copy_from_slice(&thread_cpu_ns().to_le_bytes());
                let _ = s.write_all(&ack);
                return;
            }
            loop {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if s.write_all(&b[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    Ok(())
}

/// Echoes a connection from a task of the soft RNIC's executor, as the soft RNIC's
/// server reads and writes its connections (`read_buf`, then a non-blocking write), until
/// the peer closes.
fn exec_echo(s: TcpStream) -> std::io::Result<()> {
    let rt = crate::killloop::runtime().map_err(std::io::Error::other)?;
    rt.block_on(async move {
        let s = remora_exec::net::TcpStream::from_std(s)?;
        remora_exec::spawn_local(async move {
            let (mut r, w) = s.into_split();
            let mut buf = Vec::with_capacity(1 << 16);
            loop {
                buf.clear();
                if r.read_buf(&mut buf).await? == 0 {
                    return Ok(());
                }
                let mut done = 0;
                while done < buf.len() {
                    match w.try_write(&buf[done..]) {
                        Ok(n) => done += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            w.writable().await?
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        })
        .await
        .map_err(std::io::Error::other)?
    })
}

/// The receiving side of the model-free frame stream: reads the soft wire's frames with
/// the soft RNIC's own decoder ([`Frame::parse`](remora_model::wire::Frame::parse)),
/// checks each WRITE's rkey and bounds as a responder does, and copies its data into a
/// memory region: what any receiver of these frames must do, with no RNIC state machine
/// and no memory-hierarchy model. Returns the region once the announced WRITEs were
/// applied; an error for anything else (a frame that is not a write train, a wrong key, an
/// out-of-bounds write, a closed connection).
pub(super) fn sink_frames(s: &mut impl Read) -> Result<Vec<u8>, String> {
    use remora_model::wire::{Frame, Packet};
    let mut head = [0u8; 13];
    s.read_exact(&mut head).map_err(|e| e.to_string())?;
    let mut left = u64::from_le_bytes(head[1..9].try_into().expect("8 bytes"));
    let rkey = u32::from_le_bytes(head[9..13].try_into().expect("4 bytes"));
    let mut region = vec![0u8; FRAMES_REGION];
    // Frames are parsed where they lie; the unparsed tail moves to the front once per read.
    let mut buf = vec![0u8; 1 << 17];
    let (mut start, mut end) = (0usize, 0usize);
    while left > 0 {
        if end == buf.len() {
            buf.copy_within(start..end, 0);
            (start, end) = (0, end - start);
            if end == buf.len() {
                buf.resize(buf.len() * 2, 0); // a frame longer than the buffer
            }
        }
        match s.read(&mut buf[end..]) {
            Ok(0) => return Err("closed before the last WRITE".into()),
            Ok(n) => end += n,
            Err(e) => return Err(e.to_string()),
        }
        while let Some(len) = Packet::frame_len(&buf[start..end]).map_err(|e| e.to_string())? {
            if end - start < len {
                break;
            }
            let Frame::WriteTrain(train) =
                Frame::parse(&buf[start..start + len]).map_err(|e| e.to_string())?
            else {
                return Err("not a write train".into());
            };
            if train.rkey != rkey {
                return Err(format!("wrong rkey {:#x}", train.rkey));
            }
            for w in train.writes() {
                let at = w.addr as usize;
                let dst = at
                    .checked_add(w.data.len())
                    .and_then(|e| region.get_mut(at..e))
                    .ok_or_else(|| format!("WRITE out of bounds at {:#x}", w.addr))?;
                dst.copy_from_slice(w.data);
                left = left.saturating_sub(1);
            }
            start += len;
        }
    }
    Ok(region)
}

/// The CPU placement of the benchmark's processes, so every series runs on the same
/// machine: on this VM a wake-up across cores and one on the same core differ by tens of
/// µs, and where the scheduler puts each process changes from run to run (and within one).
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum Placement {
    /// The benchmark's thread on one CPU, every peer process on another: two hosts'
    /// arrangement, each side with a core of its own.
    Split,
    /// Everything on one CPU: a round trip is the two sides' CPU work, no idle wake-up.
    Shared,
    /// Wherever the scheduler puts them.
    Free,
}

impl Placement {
    /// The CPUs (benchmark thread, peers); `None` for [`Placement::Free`] or on a machine
    /// with fewer CPUs than the placement needs.
    pub(super) fn cpus(self) -> Option<(usize, usize)> {
        let have = std::thread::available_parallelism().map_or(1, |n| n.get());
        match self {
            Placement::Split if have >= 2 => Some((0, 1)),
            Placement::Shared => Some((0, 0)),
            _ => None,
        }
    }

    /// The name `--placement` takes (clap's, so the two cannot drift apart).
    pub fn name(self) -> String {
        super::flag_value(&self)
    }
}

/// Pins the calling thread (or, after `fork`, the child) to `cpu`; false where the
/// platform refuses.
pub(super) fn pin_to(cpu: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it, and
        // sched_setaffinity only reads it (pid 0 is the calling thread).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        false
    }
}

thread_local! {
    /// The CPU peer processes started from this thread are pinned to.
    pub(super) static PEER_CPU: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// A peer process the benchmark started: its child, the address it listens on, and the
/// thread that holds its stderr. A peer's stderr is not the benchmark's: a server prints its
/// counters there when it stops, which would interleave with the report. It is shown only
/// when the peer failed (did not start, or did not exit cleanly on SIGTERM).
pub(super) struct Proc {
    child: Child,
    addr: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}
impl Proc {
    pub(super) fn start(exe: &Path, args: &[&str]) -> Result<Proc, String> {
        let mut cmd = Command::new(exe);
        if let Some(cpu) = PEER_CPU.with(|c| c.get()) {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: between fork and exec the closure makes one system call and
            // allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    pin_to(cpu);
                    Ok(())
                });
            }
        }
        let mut child =
            crate::interrupt::spawn(cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped()))
                .map_err(|e| format!("cannot start {} {}: {e}", exe.display(), args.join(" ")))?;
        // Drained as it comes, so a chatty peer never blocks on a full pipe.
        let mut err = child.stderr.take().expect("piped");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        });
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line);
        match line.trim().strip_prefix("listening on ") {
            Some(addr) if read.is_ok() => Ok(Proc {
                child,
                addr: addr.to_string(),
                stderr: Some(stderr),
            }),
            _ => {
                // It printed no address: it failed or is about to; its stderr says why.
                let _ = child.kill();
                let _ = child.wait();
                crate::interrupt::reaping(child.id());
                Err(format!(
                    "`{} {}` did not start: {}",
                    exe.display(),
                    args.join(" "),
                    stderr.join().unwrap_or_default().trim()
                ))
            }
        }
    }

    /// The address the peer listens on.
    pub(super) fn addr(&self) -> &str {
        &self.addr
    }

    /// The peer's process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the peer wrote to stderr (once it has exited).
    fn take_stderr(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}
impl Drop for Proc {
    /// Asks the peer to stop (SIGTERM: a server shuts down cleanly, as its user would stop
    /// it, and an instrumented build writes its profile) and kills it if it has not ended
    /// within two seconds. A peer that does not exit cleanly has its stderr shown.
    fn drop(&mut self) {
        use std::os::unix::process::ExitStatusExt as _;
        let pid = self.child.id();
        let mut status = None;
        let mut asked = false;
        // One that has already ended is not signalled: once reaped, its pid may be
        // another process's.
        if let Ok(Some(s)) = self.child.try_wait() {
            status = Some(s);
        } else {
            // SAFETY: kill(2) with the pid of a child that try_wait found still running
            // and that nothing else reaps, so it is still ours.
            asked = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) } == 0;
        }
        let deadline = wall() + std::time::Duration::from_secs(2);
        while asked && wall() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                status = Some(s);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let failure = match status {
            // The echo process keeps SIGTERM's default action: ending by it is its clean stop.
            Some(s) if s.success() || s.signal() == Some(libc::SIGTERM) => None,
            Some(s) if asked => Some(format!("peer {pid} exited with {s} after SIGTERM")),
            Some(s) => Some(format!("peer {pid} had already exited, with {s}")),
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                Some(if asked {
                    format!("peer {pid} did not stop within 2 s of SIGTERM; killed")
                } else {
                    format!("peer {pid} could not be sent SIGTERM; killed")
                })
            }
        };
        // Registered until reaped, so that an interruption meanwhile still kills it (a pid
        // is not reused in the instant between the reaping and this).
        crate::interrupt::reaping(pid);
        let stderr = self.take_stderr();
        if let Some(failure) = failure {
            eprintln!("{failure}; its stderr:\n{}", stderr.trim_end());
        }
    }
}

/// Starts `remora serve` for `config` on a fresh pool file at `pool`, on a loopback port,
/// with `more` of its flags.
pub(super) fn start_server(
    exe: &Path,
    pool: &Path,
    config: &str,
    more: &[String],
) -> Result<Proc, String> {
    let _ = std::fs::remove_file(pool);
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--pool",
        pool.to_str().unwrap_or(""),
        "--config",
        config,
    ];
    args.extend(more.iter().map(String::as_str));
    Proc::start(exe, &args)
}

#[cfg(test)]
mod tests {
    use super::super::stream::encode_frames;
    use super::*;

    /// The head [`frames_stream_run`](super::super::stream::frames_stream_run) sends: lead,
    /// WRITE count, rkey.
    fn head(writes: u64, rkey: u32) -> Vec<u8> {
        let mut h = vec![FRAMES_LEAD];
        h.extend_from_slice(&writes.to_le_bytes());
        h.extend_from_slice(&rkey.to_le_bytes());
        h
    }

    #[test]
    fn the_frame_sink_applies_every_write_of_the_stream() {
        // Two batches, the second crossing the region's end (line 1023, then line 0).
        let mut stream = head(1030, FRAMES_RKEY);
        for (first, n, byte) in [(0, 1020, 0x11u8), (1020, 10, 0x22)] {
            let data = remora_model::bytes::Bytes::copy_from(&[byte; 64]);
            encode_frames(first, n, FRAMES_RKEY, &data, &mut stream);
        }
        let region = sink_frames(&mut std::io::Cursor::new(stream)).unwrap();
        // Lines 6..1020 hold the first batch's data; 1020..1024 and 0..6 the second's.
        assert!(region[6 * 64..1020 * 64].iter().all(|&b| b == 0x11));
        assert!(region[1020 * 64..].iter().all(|&b| b == 0x22));
        assert!(region[..6 * 64].iter().all(|&b| b == 0x22));
    }

    #[test]
    fn the_frame_sink_refuses_a_wrong_key_a_short_stream_and_a_bad_frame() {
        let data = remora_model::bytes::Bytes::copy_from(&[7u8; 64]);
        let mut wrong = head(4, FRAMES_RKEY);
        encode_frames(0, 4, FRAMES_RKEY + 1, &data, &mut wrong);
        let e = sink_frames(&mut std::io::Cursor::new(wrong)).unwrap_err();
        assert!(e.contains("wrong rkey"), "{e}");

        let mut short = head(5, FRAMES_RKEY);
        encode_frames(0, 4, FRAMES_RKEY, &data, &mut short);
        let e = sink_frames(&mut std::io::Cursor::new(short)).unwrap_err();
        assert!(e.contains("closed before the last WRITE"), "{e}");

        let mut bad = head(4, FRAMES_RKEY);
        let at = bad.len();
        encode_frames(0, 4, FRAMES_RKEY, &data, &mut bad);
        bad[at] ^= 0xff; // the frame's magic
        assert!(sink_frames(&mut std::io::Cursor::new(bad)).is_err());
    }

    /// A peer that fails before it prints its address is reported with what it wrote to
    /// stderr; one that starts gives its address and pid.
    #[test]
    fn a_peer_that_does_not_start_is_reported_with_its_stderr() {
        let sh = Path::new("/bin/sh");
        let err = match Proc::start(sh, &["-c", "echo 'pool is corrupt' >&2; exit 3"]) {
            Err(e) => e,
            Ok(_) => panic!("a peer that printed no address started"),
        };
        assert!(err.contains("did not start: pool is corrupt"), "{err}");
        let peer = Proc::start(sh, &["-c", "echo listening on 127.0.0.1:9; exec sleep 30"])
            .expect("a peer that printed its address");
        assert_eq!(peer.addr(), "127.0.0.1:9");
        assert!(peer.pid() > 0);
        // Dropping it stops it by SIGTERM (sleep's default action), within the 2 s.
        let t = wall();
        drop(peer);
        assert!(wall() - t < std::time::Duration::from_secs(2));
    }
}
