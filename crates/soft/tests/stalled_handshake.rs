//! A client that stops reading during its handshake holds its handshake place no longer
//! than the handshake's time-out, whichever frame the server is sending it: the refusal
//! after the wait for a slot and the `Accepted` after a slot's clear too, not only the
//! frames sent inside the handshake's own time-out.
//!
//! Through `serve` the server's send buffer (about 1.7 MB on loopback once TCP has grown
//! it) only fills after some 70,000 `Clearing` frames, a clear of some 70 GiB, so the
//! frame writes are tested here on a socket whose buffers are already full: the server's
//! send buffer and the client's receive buffer shrunk, and filled before the frame.

use remora_exec::net::{TcpListener, TcpStream};
use remora_model::verbs::QpNum;
use remora_soft::cm::{RefuseCode, HANDSHAKE_TIMEOUT};
use std::time::Duration;

/// A connected pair on loopback: the server's end, and a client socket with a small
/// receive buffer that never reads; the server's end is set up as `cm_hello` sets it up
/// (no delay, the dead-peer watch) and filled until it takes no more.
async fn full_connection() -> (TcpStream, socket2::Socket) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    // Set before the connection, so its window is small from the start.
    client.set_recv_buffer_size(1).unwrap();
    client.connect(&addr.into()).unwrap();
    let (mut server, _) = listener.accept().await.unwrap();
    server.set_nodelay(true).unwrap();
    remora_soft::cm::watch_peer(&server).unwrap();
    socket2::SockRef::from(&server)
        .set_send_buffer_size(1)
        .unwrap();
    // Far more than both buffers hold: the write stops once they are full.
    let junk = vec![0u8; 16 << 20];
    let filled = remora_exec::time::timeout(Duration::from_millis(500), server.write_all(&junk));
    assert!(filled.await.is_err(), "the socket took 16 MiB unread");
    (server, client)
}

/// Runs `write` (a handshake frame's write to a client that reads nothing) and expects it
/// to give up, with a time-out error, within the handshake's time-out (and a margin).
fn gives_up(what: &str, write: impl AsyncFnOnce(&mut TcpStream) -> std::io::Result<()>) {
    remora_exec::block_on(async {
        let (mut server, _client) = full_connection().await;
        let t0 = wall();
        let bound = HANDSHAKE_TIMEOUT + Duration::from_secs(5);
        let r = remora_exec::time::timeout(bound, write(&mut server)).await;
        let took = t0.elapsed();
        let Ok(r) = r else {
            panic!("{what}: still waiting for a client that reads nothing after {took:?}");
        };
        let e = r.expect_err("a client that reads nothing took the frame");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{what}: {e}");
        assert!(
            e.to_string().contains("reads nothing"),
            "{what}: the error says why: {e}"
        );
        assert!(took >= HANDSHAKE_TIMEOUT, "{what}: gave up after {took:?}");
    });
}

/// The server's `Accepted`, sent after a slot's clear (outside the handshake's time-out).
#[test]
fn accepted_to_a_client_that_reads_nothing_gives_up_after_the_handshake_time_out() {
    gives_up("Accepted", async |s| {
        remora_soft::server::cm_accepted(s, QpNum(1), 7).await
    });
}

/// The server's refusal, sent after the wait for a free slot.
#[test]
fn a_refusal_to_a_client_that_reads_nothing_gives_up_after_the_handshake_time_out() {
    gives_up("Refused", async |s| {
        remora_soft::server::cm_refuse(s, RefuseCode::Resources).await
    });
}

/// The wall clock: these tests time a real socket's time-out.
#[allow(clippy::disallowed_methods)]
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}
