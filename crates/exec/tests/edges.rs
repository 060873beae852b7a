//! Edge cases of the reactor and the timers, found in review: the end of a connection that
//! arrives with its last bytes, a reader whose socket never runs dry, and timers reset,
//! dropped and abandoned at random.

// The timer tests read the executor's wall clock, as its runtimes do.
#![allow(clippy::disallowed_methods)]

use remora_exec::net::{TcpListener, TcpStream};
use remora_exec::time::{now, sleep, sleep_until, timeout, Instant};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// The peer writes a few bytes and closes while the reader waits on an empty socket: the
/// poller reports data and end together, the read of the data is short, and the end must
/// still be seen (a read returning 0), not waited for.
#[test]
fn the_end_that_comes_with_the_last_bytes_is_seen() {
    remora_exec::block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let reader = remora_exec::spawn_local(async move {
            let (s, _) = l.accept().await.unwrap();
            let (mut r, _w) = s.into_split();
            let mut buf = Vec::with_capacity(1 << 16);
            let mut reads = Vec::new();
            loop {
                buf.clear();
                match timeout(Duration::from_secs(5), r.read_buf(&mut buf)).await {
                    Ok(Ok(0)) => return Ok(reads),
                    Ok(Ok(n)) => reads.push(n),
                    Ok(Err(e)) => return Err(format!("error {e}")),
                    Err(_) => return Err(format!("no end seen after reads {reads:?}")),
                }
            }
        });
        let mut c = TcpStream::connect(addr).await.unwrap();
        // The reader accepts and waits on an empty socket first.
        sleep(Duration::from_millis(50)).await;
        c.write_all(b"hello").await.unwrap();
        drop(c);
        assert_eq!(reader.await.unwrap().unwrap(), vec![5]);
    });
}

/// The same with a peer in another thread, while the executor is busy: data and end are
/// both there when the reactor next looks.
#[test]
fn the_end_is_seen_when_data_and_end_arrive_while_busy() {
    remora_exec::block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            use std::io::Write;
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            c.write_all(b"hello").unwrap();
        });
        let (mut s, _) = l.accept().await.unwrap();
        let mut b = [0u8; 1];
        // Wait on the empty socket (its readiness is spent)...
        assert!(timeout(Duration::from_millis(20), s.read(&mut b))
            .await
            .is_err());
        // ...then stay busy while the bytes and the end arrive.
        std::thread::sleep(Duration::from_millis(200));
        remora_exec::yield_now().await;
        let mut buf = Vec::with_capacity(1 << 16);
        assert_eq!(s.read_buf(&mut buf).await.unwrap(), 5);
        buf.clear();
        let end = timeout(Duration::from_secs(5), s.read_buf(&mut buf)).await;
        peer.join().unwrap();
        assert!(matches!(end, Ok(Ok(0))), "{end:?}");
    });
}

/// A reader whose socket always has data yields after its budget of operations, so the
/// other ready tasks run while it streams.
#[test]
fn a_reader_that_never_runs_dry_lets_others_run() {
    remora_exec::block_on(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        const BYTES: usize = 2 << 20;
        let peer = std::thread::spawn(move || {
            use std::io::Write;
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            let _ = c.write_all(&vec![1u8; BYTES]);
        });
        let (mut s, _) = l.accept().await.unwrap();
        std::thread::sleep(Duration::from_millis(100)); // the data is queued
        let other_ran = Rc::new(Cell::new(false));
        let o = other_ran.clone();
        remora_exec::spawn_local(async move { o.set(true) });
        let mut b = [0u8; 16];
        let (mut reads_before_other, mut total) = (0u32, 0);
        while total < BYTES {
            let n = s.read(&mut b).await.unwrap();
            if n == 0 {
                break;
            }
            total += n;
            if !other_ran.get() {
                reads_before_other += 1;
            }
        }
        peer.join().unwrap();
        assert!(other_ran.get());
        assert!(
            reads_before_other <= remora_exec::BUDGET,
            "{reads_before_other} reads before another ready task ran"
        );
    });
}

/// Timers reset earlier and later, kept, dropped for new ones and abandoned half-way, at
/// random: every full wait ends, not before its deadline and not long after it (an item
/// lost from the heap would make a wait hang).
#[test]
fn timers_reset_dropped_and_abandoned_at_random_all_end_in_time() {
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let plans: Vec<Vec<u64>> = (0..40).map(|_| (0..30).map(|_| rnd()).collect()).collect();
    remora_exec::block_on(async move {
        let worst = Rc::new(Cell::new(Duration::ZERO));
        let mut hs = Vec::new();
        for plan in plans {
            let worst = worst.clone();
            hs.push(remora_exec::spawn_local(async move {
                let mut s = std::pin::pin!(sleep_until(now()));
                for r in plan {
                    let d = Duration::from_micros(r % 3000);
                    let deadline: Instant = match (r >> 20) % 4 {
                        0 => now() + d,
                        1 => s.deadline(),
                        2 => now(),
                        _ => now() + d * 2,
                    };
                    s.as_mut().reset(deadline);
                    match (r >> 30) % 3 {
                        0 => {
                            timeout(Duration::from_secs(5), s.as_mut())
                                .await
                                .expect("a sleep hung");
                            let now = now();
                            assert!(now >= s.deadline(), "woke early");
                            let late = now.saturating_duration_since(s.deadline());
                            worst.set(worst.get().max(late));
                        }
                        1 => {
                            let _ = timeout(Duration::from_micros(r % 1500), s.as_mut()).await;
                        }
                        _ => {
                            s.set(sleep_until(now() + d));
                            remora_exec::yield_now().await;
                        }
                    }
                }
            }));
        }
        for h in hs {
            h.await.unwrap();
        }
        // Waits are rounded up to the poller's millisecond; far more means a lost wake-up.
        assert!(
            worst.get() < Duration::from_millis(500),
            "{:?}",
            worst.get()
        );
    });
}

/// A sleep past the clock's range does not panic.
#[test]
fn a_sleep_past_the_clocks_range_is_just_long() {
    remora_exec::block_on(async {
        let r = timeout(Duration::from_millis(5), sleep(Duration::MAX)).await;
        assert!(r.is_err());
    });
}
