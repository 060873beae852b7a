//! The executor's blocking receive (see `remora_exec::net`): while one stream carries the
//! traffic it waits in `recv` on that stream, and anything else that comes (input on
//! another stream, a connection to accept, a wake-up from another thread, a signal, a
//! timer) must still be served at once, not after the receive's 10 ms time-out. Each test
//! checks, through `wait_stats`, that the executor really was blocked in a receive when the
//! other thing came, and that it was served well within the time-out.

// The tests read the executor's wall clock, as its runtimes do.
#![allow(clippy::disallowed_methods)]

use remora_exec::net::{TcpListener, TcpStream};
use remora_exec::time::{now, sleep, Instant};
use remora_exec::{spawn_local, wait_stats, yield_now};
use std::io::{Read, Write};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

/// How long the other thread waits before it acts: long enough for the executor to be
/// blocked in its receive, well inside the receive's 10 ms time-out.
const DELAY: Duration = Duration::from_millis(3);
/// What "at once" must beat: half the receive's time-out.
const PROMPT: Duration = Duration::from_millis(5);
/// Trials per test (the median is asserted: a loaded machine may delay one trial).
const TRIALS: usize = 12;

/// A connected pair: the executor's end and a standard blocking end.
async fn pair() -> (TcpStream, std::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let s = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    s.set_nodelay(true).unwrap();
    let (peer, _) = l.accept().unwrap();
    peer.set_nodelay(true).unwrap();
    (s, peer)
}

/// An echo of `peer` in a thread, until the executor's end closes.
fn echo(mut peer: std::net::TcpStream) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        loop {
            match peer.read(&mut b) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if peer.write_all(&b[..n]).is_err() {
                        return;
                    }
                }
            }
        }
    })
}

/// `k` round trips on `s`, which makes it the stream the executor waits on.
async fn ping(s: &mut TcpStream, k: usize) {
    let mut b = [0u8; 32];
    for i in 0..k {
        s.write_all(&[i as u8; 32]).await.unwrap();
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(b, [i as u8; 32]);
    }
}

/// A trial's wait for the action to be served; it ends at the instant it was.
type Served<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Instant> + 'a>>;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The busy stream the executor waits on, with its echo thread.
async fn busy() -> (TcpStream, std::thread::JoinHandle<()>) {
    let (s, peer) = pair().await;
    (s, echo(peer))
}

/// A thread that runs `act` [`DELAY`] after each message it is sent, until its sender is
/// dropped.
fn actor(
    mut act: impl FnMut() + Send + 'static,
) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        while rx.recv().is_ok() {
            std::thread::sleep(DELAY);
            act();
        }
    });
    (tx, t)
}

/// Most trials were interrupts of a blocking receive, and the action was served well
/// within the receive's time-out.
fn assert_served(what: &str, (lat, interrupts): (Duration, u64)) {
    assert!(
        interrupts as usize >= TRIALS / 2,
        "{what}: {interrupts} interrupts in {TRIALS} trials"
    );
    assert!(lat < PROMPT, "{what} waited {lat:?} (median)");
}

/// Runs `trials` of: ping the busy stream (so it is the one waited on), refresh the
/// executor's look at every source, tell `other` to act after [`DELAY`], and await
/// `served` (which returns when the action was served). Returns the median time from
/// the action to its service and how many trials were interrupts of a blocking receive.
async fn trials<S>(
    busy: &mut TcpStream,
    act: mpsc::Sender<()>,
    state: &mut S,
    served: impl for<'a> Fn(&'a mut S) -> Served<'a>,
) -> (Duration, u64) {
    let before = wait_stats();
    let mut lat = Vec::new();
    for _ in 0..TRIALS {
        ping(busy, 10).await;
        yield_now().await;
        let t0 = now();
        act.send(()).unwrap();
        // The busy stream's reader waits (as a soft RNIC's reader always does): the
        // stream the executor blocks on.
        let mut b = [0u8; 1];
        let at = match remora_exec::first(busy.read(&mut b), served(state)).await {
            remora_exec::Either::Left(r) => panic!("the echo sent unasked: {r:?}"),
            remora_exec::Either::Right(at) => at,
        };
        // The other thread acted DELAY after t0.
        lat.push(at.saturating_duration_since(t0).saturating_sub(DELAY));
    }
    (median(lat), wait_stats().interrupted - before.interrupted)
}

#[test]
fn a_lone_ping_pong_waits_in_blocking_receives() {
    remora_exec::block_on(async {
        let (mut s, peer) = pair().await;
        let t = echo(peer);
        let before = wait_stats();
        ping(&mut s, 500).await;
        // Counted over the waits, not the pings: an answer that is already there when
        // the reader looks needs no wait (in a debug build most are). Not all waits: one
        // that comes when epoll's last look at every source is older than the receive's
        // time-out goes to epoll, which a loaded machine makes more frequent.
        let w = wait_stats().since(before);
        let waits = w.received + w.epoll_waits;
        assert!(
            waits > 0 && w.received * 5 >= waits,
            "only {} of {waits} waits for an answer were blocking receives ({w})",
            w.received
        );
        drop(s);
        t.join().unwrap();
    });
}

#[test]
fn input_on_another_stream_interrupts_the_wait() {
    remora_exec::block_on(async {
        let (mut busy, echo) = busy().await;
        let (mut quiet, mut quiet_peer) = pair().await;
        let (tx, writer) = actor(move || quiet_peer.write_all(b"x").unwrap());
        let r = trials(&mut busy, tx, &mut quiet, |q| {
            Box::pin(async move {
                let mut b = [0u8; 1];
                q.read_exact(&mut b).await.unwrap();
                now()
            })
        })
        .await;
        assert_served("input on the quiet stream", r);
        writer.join().unwrap();
        drop(busy);
        echo.join().unwrap();
    });
}

#[test]
fn a_connection_to_accept_interrupts_the_wait() {
    remora_exec::block_on(async {
        let (mut busy, echo) = busy().await;
        let mut l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut conns = Vec::new();
        let (tx, connector) =
            actor(move || conns.push(std::net::TcpStream::connect(addr).unwrap()));
        let r = trials(&mut busy, tx, &mut l, |l| {
            Box::pin(async move {
                let _ = l.accept().await.unwrap();
                now()
            })
        })
        .await;
        assert_served("a connection to accept", r);
        connector.join().unwrap();
        drop(busy);
        echo.join().unwrap();
    });
}

/// A flag another thread sets, and the waker it then wakes.
#[derive(Default)]
struct Remote(Mutex<(bool, Option<Waker>)>);

impl Remote {
    async fn wait(&self) {
        std::future::poll_fn(|cx| {
            let mut g = self.0.lock().unwrap();
            if std::mem::take(&mut g.0) {
                return Poll::Ready(());
            }
            g.1 = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    fn fire(&self) {
        let w = {
            let mut g = self.0.lock().unwrap();
            g.0 = true;
            g.1.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }
}

#[test]
fn a_wake_up_from_another_thread_interrupts_the_wait() {
    remora_exec::block_on(async {
        let (mut busy, echo) = busy().await;
        let mut remote = Arc::new(Remote::default());
        let (tx, waker) = actor({
            let remote = remote.clone();
            move || remote.fire()
        });
        let r = trials(&mut busy, tx, &mut remote, |r| {
            Box::pin(async move {
                r.wait().await;
                now()
            })
        })
        .await;
        assert_served("a wake-up from another thread", r);
        waker.join().unwrap();
        drop(busy);
        echo.join().unwrap();
    });
}

#[test]
fn a_caught_signal_interrupts_the_wait() {
    remora_exec::block_on(async {
        let (mut busy, echo) = busy().await;
        let mut signals = remora_exec::signal::Signals::new(&[libc::SIGUSR2]).unwrap();
        // To the actor's thread only (other tests' executors run in this process): its
        // handler writes the signal pipe, whose input interrupts the executor.
        // SAFETY: raises a signal this process catches (its handler is installed).
        let (tx, raiser) = actor(|| unsafe {
            libc::raise(libc::SIGUSR2);
        });
        let r = trials(&mut busy, tx, &mut signals, |s| {
            Box::pin(async move {
                s.recv().await;
                now()
            })
        })
        .await;
        assert_served("a caught signal", r);
        raiser.join().unwrap();
        drop(busy);
        echo.join().unwrap();
    });
}

/// A timer lets the executor block in a receive, and must still fire on time: one due
/// further away than two time-outs because a receive never lasts that long, a nearer one
/// because the executor's POSIX timer interrupts the receive at its deadline.
#[test]
fn a_timer_fires_on_time_while_the_executor_waits_in_a_receive() {
    for ms in [25, 2] {
        timer_on_time(Duration::from_millis(ms));
    }
}

fn timer_on_time(d: Duration) {
    remora_exec::block_on(async {
        let reader = {
            let (mut r, mut w) = pair().await;
            // A reader that waits on a silent stream, the only one: the receive.
            ping_with(&mut r, &mut w).await;
            let task = spawn_local(async move {
                let mut b = [0u8; 1];
                let _ = r.read(&mut b).await;
            });
            (task, w)
        };
        let before = wait_stats();
        let mut late = Vec::new();
        for _ in 0..5 {
            let t0 = now();
            sleep(d).await;
            late.push(t0.elapsed().saturating_sub(d));
        }
        let s = wait_stats().since(before);
        assert!(
            s.receives() > 0,
            "the executor never waited in a receive: {s:?}"
        );
        if d < Duration::from_millis(20) {
            assert!(s.timer_fired > 0, "the POSIX timer never fired: {s:?}");
        }
        let late = median(late);
        assert!(late < PROMPT, "a {d:?} timer fired {late:?} late (median)");
        drop(reader);
    });
}

/// What a blocking receive takes comes out in order through reads of any size (small
/// reads copy from the stash, `read_buf` into an empty buffer takes it whole), and the
/// peer's end, or a reset, comes after it.
#[test]
fn stashed_bytes_and_the_end_come_out_in_order() {
    remora_exec::block_on(async {
        for (reset, whole) in [(false, false), (true, false), (false, true), (true, true)] {
            let (mut s, mut peer) = pair().await;
            ping_with(&mut s, &mut peer).await;
            let before = wait_stats();
            let closer = std::thread::spawn(move || {
                std::thread::sleep(DELAY);
                let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
                peer.write_all(&data).unwrap();
                std::thread::sleep(DELAY);
                if reset {
                    // SO_LINGER 0: close sends a reset.
                    let l = libc::linger {
                        l_onoff: 1,
                        l_linger: 0,
                    };
                    use std::os::fd::AsRawFd;
                    // SAFETY: a valid option value on an open socket.
                    unsafe {
                        libc::setsockopt(
                            peer.as_raw_fd(),
                            libc::SOL_SOCKET,
                            libc::SO_LINGER,
                            (&l as *const libc::linger).cast(),
                            std::mem::size_of::<libc::linger>() as libc::socklen_t,
                        )
                    };
                }
            });
            let mut got = Vec::new();
            let mut b = [0u8; 7];
            let mut v = Vec::new();
            let end = loop {
                let r = if whole {
                    v.clear();
                    s.read_buf(&mut v)
                        .await
                        .inspect(|_| got.extend_from_slice(&v))
                } else {
                    s.read(&mut b)
                        .await
                        .inspect(|&n| got.extend_from_slice(&b[..n]))
                };
                match r {
                    Ok(0) => break Ok(()),
                    Ok(_) => {}
                    Err(e) => break Err(e),
                }
            };
            closer.join().unwrap();
            assert_eq!(got, (0..1000u32).map(|i| i as u8).collect::<Vec<_>>());
            match (reset, end) {
                (false, Ok(())) => {}
                (true, Err(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
                (r, e) => panic!("reset {r}, read_buf {whole}: the end came as {e:?}"),
            }
            assert!(
                wait_stats().received > before.received,
                "nothing came by a blocking receive"
            );
        }
    });
}

/// A few round trips with the peer answering from this thread's blocking end (no
/// echo thread: the peer is then handed to another thread).
async fn ping_with(s: &mut TcpStream, peer: &mut std::net::TcpStream) {
    for _ in 0..3 {
        s.write_all(b"p").await.unwrap();
        let mut b = [0u8; 1];
        peer.read_exact(&mut b).unwrap();
        peer.write_all(&b).unwrap();
        s.read_exact(&mut b).await.unwrap();
    }
}

/// Two streams busy at once: input on the one not waited on keeps signalling, so the
/// executor goes back to epoll alone whenever that outweighs the receives it saves, and
/// every byte still arrives (`ping` checks each answer).
#[test]
fn two_busy_streams_do_not_make_an_interrupt_storm() {
    remora_exec::block_on(async {
        let (a, pa) = pair().await;
        let (b, pb) = pair().await;
        let ta = echo(pa);
        let tb = echo(pb);
        let before = wait_stats();
        let run = |mut s: TcpStream| {
            spawn_local(async move {
                ping(&mut s, 2000).await;
            })
        };
        let (x, y) = (run(a), run(b));
        x.await.unwrap();
        y.await.unwrap();
        let s = wait_stats().since(before);
        // Between two switch-offs the score allows 9 interrupts plus one per 8 receives.
        let (interrupted, received, offs) = (s.interrupted, s.received, s.switched_off);
        assert!(
            interrupted <= 9 * (offs + 1) + received / 8,
            "{interrupted} interrupts for {received} receives and {offs} switch-offs"
        );
        ta.join().unwrap();
        tb.join().unwrap();
    });
}

/// A read that empties the stash short of what it asked, after epoll has looked (and may
/// have spent the edge of bytes that came after the receive), must not spend the stream's
/// readiness: those bytes would wait for an edge that never comes (found in review; on
/// the first version the last reads below timed out).
#[test]
fn bytes_after_a_stash_are_not_lost_when_epoll_looked_in_between() {
    remora_exec::block_on(async {
        let (mut t, mut pt) = pair().await;
        let (s, _ps) = pair().await;
        let (mut sr, sw) = s.into_split();
        // Another stream with a reader waiting, for the executor to wait on later.
        let _quiet = spawn_local(async move {
            let mut v = Vec::with_capacity(100);
            let _ = sr.read_buf(&mut v).await;
        });
        let peer = std::thread::spawn(move || {
            for _ in 0..20 {
                let mut b = [0u8; 1];
                pt.read_exact(&mut b).unwrap();
                pt.write_all(&b).unwrap();
            }
            std::thread::sleep(DELAY);
            pt.write_all(&[1u8; 100]).unwrap();
            std::thread::sleep(Duration::from_millis(1));
            pt.write_all(&[2u8; 50]).unwrap();
            std::thread::sleep(Duration::from_secs(2));
        });
        for _ in 0..20 {
            t.write_all(b"p").await.unwrap();
            let mut b = [0u8; 1];
            t.read_exact(&mut b).await.unwrap();
        }
        let before = wait_stats();
        let mut head = [0u8; 10];
        t.read_exact(&mut head).await.unwrap();
        assert!(
            wait_stats().received > before.received,
            "the first bytes did not come by a blocking receive"
        );
        // The 50 bytes arrive; one look by epoll spends their edge.
        std::thread::sleep(Duration::from_millis(5));
        yield_now().await;
        let mut got = head.to_vec();
        let mut big = [0u8; 4096];
        let n = t.read(&mut big).await.unwrap();
        got.extend_from_slice(&big[..n]);
        // The other stream becomes the most recently active: the one waited on.
        sw.try_write(b"x").unwrap();
        while got.len() < 150 {
            let r = remora_exec::time::timeout(Duration::from_secs(1), t.read(&mut big)).await;
            let n = r
                .expect("bytes that came after the stash were never delivered")
                .unwrap();
            got.extend_from_slice(&big[..n]);
        }
        assert_eq!(got, [[1u8; 100].as_slice(), &[2u8; 50]].concat());
        peer.join().unwrap();
    });
}

/// A thread that blocks `SIGURG` could not be interrupted out of a receive: its executor
/// never blocks in one, and waits in epoll as before.
#[test]
fn a_thread_that_blocks_the_interrupt_signal_waits_in_epoll() {
    std::thread::spawn(|| {
        // SAFETY: a zeroed set made valid by sigemptyset, then this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGURG);
            assert_eq!(
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()),
                0
            );
        }
        remora_exec::block_on(async {
            let (mut s, peer) = pair().await;
            let t = echo(peer);
            ping(&mut s, 200).await;
            let w = wait_stats();
            assert_eq!(w.receives(), 0, "{w:?}");
            drop(s);
            t.join().unwrap();
        });
    })
    .join()
    .unwrap();
}

/// A stream armed while another was waited on, then used for a ping-pong whose answers
/// come while the executor still runs (here: it computes after each send, as a shared CPU
/// lets the peer answer before the send even returns): it must disarm itself when it
/// sends, not signal every answer (each signal costs about a microsecond and counts
/// against blocking receives).
#[test]
fn a_stream_put_to_use_stops_signalling() {
    remora_exec::block_on(async {
        let (mut a, pa) = pair().await;
        let ta = echo(pa);
        let (mut b, pb) = pair().await;
        let tb = echo(pb);
        // B is the busiest, then A: the executor waits on A with B armed.
        ping(&mut b, 5).await;
        ping(&mut a, 20).await;
        let before = wait_stats();
        let mut back = [0u8; 32];
        for i in 0..200u32 {
            b.write_all(&[i as u8; 32]).await.unwrap();
            // The answer arrives meanwhile (the echo is another thread).
            let t0 = now();
            while t0.elapsed() < Duration::from_micros(300) {
                std::hint::spin_loop();
            }
            b.read_exact(&mut back).await.unwrap();
            assert_eq!(back, [i as u8; 32]);
        }
        let signals = wait_stats().input_signals - before.input_signals;
        assert!(signals <= 2, "{signals} input signals in 200 round trips");
        drop((a, b));
        ta.join().unwrap();
        tb.join().unwrap();
    });
}
