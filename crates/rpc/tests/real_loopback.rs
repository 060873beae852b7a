//! The durable RPCs, unchanged, between a client and a soft-RNIC server over TCP: every
//! durable design (emulated Flush) on DMP without and with DDIO, a second client on the
//! same server, IPv6, and the errors a user can cause.

use remora_model::profile::LatencyProfile;
use remora_model::ServerConfig;
use remora_rpc::durable::{DurableOptions, Fault};
use remora_rpc::real::{
    serve_durable, ClientSettings, DurableClaim, RealClient, RealConnectError, RealServeOptions,
    RealStarted,
};
use remora_rpc::{Design, FlushForm, Op, RpcClient};
use remora_soft::client::ConnectError;
use remora_soft::cm::RefuseCode;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// A directory for one test's pool files, removed with them when the test ends.
struct TestDir(tempfile::TempDir);

impl TestDir {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("remora-rpc-real-test-")
            .tempdir();
        TestDir(dir.expect("temporary directory"))
    }

    fn pool(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

fn options(design: Design) -> DurableOptions {
    let mut o = DurableOptions::new(design);
    o.flush.form = FlushForm::Emulated;
    o.capacity = 8;
    o.objects = 4;
    o.max_value = 200;
    o
}

/// Starts a one-connection server on a thread of its own; returns what it reported, or
/// its error.
fn start(
    listen: &str,
    config: &str,
    pool: PathBuf,
    opts: DurableOptions,
) -> Result<RealStarted, String> {
    start_n(listen, config, pool, opts, 1)
}

/// [`start`] with `connections` connections.
fn start_n(
    listen: &str,
    config: &str,
    pool: PathBuf,
    opts: DurableOptions,
    connections: u32,
) -> Result<RealStarted, String> {
    start_leased(
        listen,
        config,
        pool,
        opts,
        connections,
        Duration::from_secs(60),
    )
}

/// [`start_n`] with a `lease` for logs whose client left with replies it never got.
fn start_leased(
    listen: &str,
    config: &str,
    pool: PathBuf,
    opts: DurableOptions,
    connections: u32,
    lease: Duration,
) -> Result<RealStarted, String> {
    start_admitting(
        listen,
        config,
        pool,
        opts,
        connections,
        lease,
        remora_soft::server::Admission::DEFAULT,
    )
}

/// [`start_leased`] with `admission` for connections in their handshake.
fn start_admitting(
    listen: &str,
    config: &str,
    pool: PathBuf,
    opts: DurableOptions,
    connections: u32,
    lease: Duration,
    admission: remora_soft::server::Admission,
) -> Result<RealStarted, String> {
    let (tx, rx) = mpsc::channel();
    let config: ServerConfig = config.parse().unwrap();
    let listen = listen.to_string();
    std::thread::spawn(move || {
        let o = RealServeOptions {
            listen,
            pool,
            pool_bytes: remora_soft::pool::PoolBytes::AtLeast(2 << 20),
            config,
            profile: LatencyProfile::default_profile(),
            opts,
            connections,
            journal: None,
            lease,
            admission,
        };
        let tx2 = tx.clone();
        let r = remora_exec::block_on(serve_durable(o, move |s| tx2.send(Ok(s.clone())).unwrap()));
        if let Err(e) = r {
            let _ = tx.send(Err(e.to_string()));
        }
    });
    rx.recv_timeout(std::time::Duration::from_secs(30))
        .expect("server started or failed")
}

/// Runs a client to its end, failing after 60 s (a server whose threads stopped still
/// answers the client's RDMA probes, so the client alone would wait).
fn run_client<T>(f: impl std::future::Future<Output = T>) -> T {
    remora_exec::block_on(async {
        remora_exec::time::timeout(std::time::Duration::from_secs(60), f).await
    })
    .expect("client finished within 60 s")
}

fn value(i: u64) -> Vec<u8> {
    vec![(i as u8).wrapping_mul(29).wrapping_add(3); 40 + i as usize % 100]
}

/// `n` Puts over four keys with a Get after every third; checks every Get and the drained
/// replies. Returns the sequence numbers of the Puts' replies.
async fn workload(c: &mut RealClient, first: u64, n: u64) -> Vec<u64> {
    let mut last = std::collections::BTreeMap::new();
    let mut puts = Vec::new();
    for i in first..first + n {
        let key = i % 4;
        let done = c
            .client
            .call(Op::Put {
                key,
                value: value(i),
            })
            .await
            .unwrap();
        assert!(done.durable_at.is_some(), "a Put returns once durable");
        puts.push(done.seq);
        last.insert(key, i);
        if i % 3 == 2 {
            let g = c.client.call(Op::Get { key }).await.unwrap();
            assert_eq!(g.reply.unwrap().value, value(i), "Get after Put {i}");
        }
    }
    let replies = c.client.drain().await.unwrap();
    let got: Vec<u64> = replies.iter().map(|r| r.seq).collect();
    for s in &puts {
        assert!(
            got.contains(s),
            "reply of Put seq {s} never arrived: {got:?}"
        );
    }
    puts
}

#[test]
fn every_durable_design_runs_over_tcp_on_dmp_with_and_without_ddio() {
    let dir = TestDir::new();
    for config in ["DMP+noDDIO+PM-RQWRB", "DMP+DDIO+PM-RQWRB"] {
        for design in Design::DURABLE {
            let name = format!("{design}-{config}");
            let s = start("127.0.0.1:0", config, dir.pool(&name), options(design)).unwrap();
            assert!(s.created);
            assert_eq!(s.recovery.reexecuted, 0);
            let addr = s.addr.to_string();
            run_client(async {
                let settings = ClientSettings {
                    design: Some(design),
                    ..ClientSettings::default()
                };
                let mut c =
                    RealClient::connect(&addr, &LatencyProfile::default_profile(), &settings)
                        .await
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(c.hello.opts.design, design);
                assert_eq!(c.hello.info.config.name(), config);
                let puts = workload(&mut c, 0, 20).await;
                assert_eq!(puts.len(), 20, "{name}");
                // More requests than the ring holds went round it.
                assert!(c.client.issued() > 8, "{name}");
            });
        }
    }
}

/// A server running a negative control (a deliberate protocol error the crash checker
/// must catch; some are the client's, such as acknowledging a Put once its WRITE completes)
/// announces it in its hello. A client joins it only when asked: it used to take the fault
/// on silently and report Puts durable that were not.
#[test]
fn a_client_refuses_a_negative_control_it_was_not_asked_to_join() {
    let dir = TestDir::new();
    let mut o = options(Design::WFlushRpc);
    o.fault = Some(Fault::AckOnWriteCompletion);
    let s = start("127.0.0.1:0", "DMP+noDDIO+PM-RQWRB", dir.pool("fault"), o).unwrap();
    let addr = s.addr.to_string();
    let p = LatencyProfile::default_profile();
    run_client(async {
        let e = RealClient::connect(&addr, &p, &ClientSettings::default())
            .await
            .err();
        assert!(
            matches!(
                e,
                Some(RealConnectError::Fault {
                    fault: Fault::AckOnWriteCompletion,
                    ..
                })
            ),
            "{e:?}"
        );
        // Asked to, it joins (the crash checker's negative control).
        let settings = ClientSettings {
            fault: Some(Fault::AckOnWriteCompletion),
            ..ClientSettings::default()
        };
        let mut c = RealClient::connect(&addr, &p, &settings).await.unwrap();
        workload(&mut c, 0, 3).await;
    });
}

#[test]
fn a_second_client_continues_on_the_same_log_and_store() {
    let dir = TestDir::new();
    let s = start(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        dir.pool("second"),
        options(Design::WFlushRpc),
    )
    .unwrap();
    let addr = s.addr.to_string();
    let p = LatencyProfile::default_profile();
    let issued = run_client(async {
        let mut c = RealClient::connect(&addr, &p, &ClientSettings::default())
            .await
            .unwrap();
        workload(&mut c, 0, 10).await;
        c.client.issued()
    });
    // The first client's process is gone (its runtime dropped): the server takes the next.
    run_client(async {
        let mut c = RealClient::connect(&addr, &p, &ClientSettings::default())
            .await
            .unwrap();
        assert_eq!(
            c.hello.info.processed, issued,
            "the server kept its watermark"
        );
        // Key 1's last Put was i = 9.
        let g = c.client.call(Op::Get { key: 1 }).await.unwrap();
        assert_eq!(g.reply.unwrap().value, value(9));
        workload(&mut c, 10, 10).await;
    });
}

#[test]
fn ipv6_loopback_works_too() {
    let dir = TestDir::new();
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback here");
        return;
    }
    let s = start(
        "[::1]:0",
        "DMP+DDIO+PM-RQWRB",
        dir.pool("ipv6"),
        options(Design::SRFlushRpc),
    )
    .unwrap();
    assert!(s.addr.is_ipv6());
    run_client(async {
        let mut c = RealClient::connect(
            &s.addr.to_string(),
            &LatencyProfile::default_profile(),
            &ClientSettings::default(),
        )
        .await
        .unwrap();
        workload(&mut c, 0, 6).await;
    });
}

#[test]
fn bad_input_gets_a_clear_error() {
    let dir = TestDir::new();
    // A file that is not a pool is refused and left alone.
    let foreign = dir.pool("foreign");
    std::fs::write(&foreign, vec![b'x'; 8192]).unwrap();
    let e = start(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        foreign.clone(),
        options(Design::WFlushRpc),
    )
    .unwrap_err();
    assert!(e.contains("not a remora PM pool"), "{e}");
    assert_eq!(std::fs::read(&foreign).unwrap(), vec![b'x'; 8192]);
    // A baseline design has no redo log.
    let e = start(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        dir.pool("baseline"),
        options(Design::DaRpc),
    )
    .unwrap_err();
    assert!(e.contains("not a durable RPC design"), "{e}");
    // A pool whose log was laid out for other options.
    let pool = dir.pool("other-layout");
    let s = start(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        pool.clone(),
        options(Design::WFlushRpc),
    )
    .unwrap();
    let mut other = options(Design::WFlushRpc);
    other.capacity = 16;
    // While `s` serves it, the pool is refused to any other server.
    let e = start(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        pool.clone(),
        other.clone(),
    )
    .unwrap_err();
    assert!(e.contains("in use by another process"), "{e}");
    // A copy carries the layout record `s` wrote: refused at start-up, naming both layouts.
    let copy = dir.pool("other-layout-copy");
    std::fs::copy(&pool, &copy).unwrap();
    let e = start("127.0.0.1:0", "DMP+noDDIO+PM-RQWRB", copy, other).unwrap_err();
    assert!(
        e.contains("laid out for") && e.contains(", 16 entries each"),
        "{e}"
    );
    // A pool whose logs commit entries by their frames (native W-RFlush without DDIO),
    // restarted with emulated RFlush (by operators): refused, or recovery would cut off
    // every acknowledged entry not yet processed.
    let mut native = options(Design::WRFlushRpc);
    native.flush.form = remora_rpc::FlushForm::Native;
    let framed = dir.pool("framed");
    start(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        framed.clone(),
        native.clone(),
    )
    .unwrap();
    let copy = dir.pool("framed-copy");
    std::fs::copy(&framed, &copy).unwrap();
    let mut emulated = native;
    emulated.flush.form = remora_rpc::FlushForm::Emulated;
    let e = start("127.0.0.1:0", "DMP+noDDIO+PM-RQWRB", copy, emulated).unwrap_err();
    assert!(
        e.contains("laid out for") && e.contains("committed by its frame"),
        "{e}"
    );
    // A client that asks for another design than the server runs.
    run_client(async {
        let settings = ClientSettings {
            design: Some(Design::SFlushRpc),
            ..ClientSettings::default()
        };
        let e = RealClient::connect(
            &s.addr.to_string(),
            &LatencyProfile::default_profile(),
            &settings,
        )
        .await
        .err()
        .expect("design mismatch refused");
        assert!(
            e.to_string().contains("runs WFlush-RPC, not SFlush-RPC"),
            "{e}"
        );
    });
}

#[test]
fn clients_get_a_connection_and_a_log_each_and_a_full_server_refuses() {
    let dir = TestDir::new();
    let s = start_n(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        dir.pool("multi"),
        options(Design::WFlushRpc),
        2,
    )
    .unwrap();
    assert_eq!(s.logs.len(), 2);
    assert_ne!(s.logs[0].0.layout.base, s.logs[1].0.layout.base);
    let addr = s.addr.to_string();
    run_client(async {
        let p = LatencyProfile::default_profile();
        let settings = ClientSettings::default();
        let mut a = RealClient::connect(&addr, &p, &settings).await.unwrap();
        let mut b = RealClient::connect(&addr, &p, &settings).await.unwrap();
        // Node ids and connection ids name the connection; each has its own log, and the
        // store is shared.
        assert_eq!((a.hello.opts.conn, b.hello.opts.conn), (1, 2));
        assert_eq!(
            (
                remora_verbs::Verbs::node(&a.node),
                remora_verbs::Verbs::node(&b.node)
            ),
            (1, 2)
        );
        assert_ne!(a.hello.info.layout.base, b.hello.info.layout.base);
        assert_eq!(a.hello.kv_base, b.hello.kv_base);
        // Each numbers its requests from 1 on its own log.
        assert_eq!(workload(&mut a, 0, 10).await[0], 1);
        assert_eq!(workload(&mut b, 0, 10).await[0], 1);
        // A third client finds both connections in use and, after a wait, is refused.
        let e = RealClient::connect(&addr, &p, &settings)
            .await
            .err()
            .expect("a third client is refused");
        assert!(e.to_string().contains("refused"), "{e}");
        // Both connections still work.
        assert_eq!(workload(&mut a, 10, 3).await[0], 14);
    });
}

/// A connection's place among those in their handshake is given back once it is served:
/// with room for one handshake at a time, clients connect one after another and stay
/// connected, and only one that stops halfway makes the next wait, refused as busy.
#[test]
fn a_served_connection_leaves_the_handshake_bound_to_the_next() {
    use remora_soft::cm::{Cm, RefuseCode};
    use std::io::Write;
    let dir = TestDir::new();
    let s = start_admitting(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        dir.pool("admit"),
        options(Design::WFlushRpc),
        3,
        Duration::from_secs(60),
        remora_soft::server::Admission {
            handshakes: 1,
            per_address: 1,
        },
    )
    .unwrap();
    let addr = s.addr.to_string();
    run_client(async {
        let p = LatencyProfile::default_profile();
        let settings = ClientSettings::default();
        let mut a = RealClient::connect(&addr, &p, &settings).await.unwrap();
        let mut b = RealClient::connect(&addr, &p, &settings).await.unwrap();
        let first = workload(&mut a, 0, 3).await;
        assert_eq!(first[0], 1);
        assert_eq!(workload(&mut b, 0, 3).await[0], 1);
        // A connection that says Hello and no more holds the one place.
        let mut halfway = std::net::TcpStream::connect(&addr).unwrap();
        halfway.write_all(&Cm::Hello { key: 0 }.emit()).unwrap();
        // Its Hello has been read once the server answers another connection as busy;
        // until then the next connection may be the one admitted.
        let mut tries = 0;
        loop {
            match RealClient::connect(&addr, &p, &settings).await {
                Err(RealConnectError::Connect(remora_soft::client::ConnectError::Refused {
                    code: RefuseCode::Busy,
                    ..
                })) => break,
                other => {
                    assert!(
                        tries < 100,
                        "the third client is refused as busy: {:?}",
                        other.err()
                    );
                    tries += 1;
                    remora_exec::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
        drop(halfway);
        // The clients that got in are served throughout.
        assert!(workload(&mut a, 3, 3).await[0] > *first.last().unwrap());
    });
}

/// A new client does not take a connection whose log holds replies its previous client
/// has not come back for (it got them, and its own requests followed the other client's)
/// until that client has stayed away for the lease; a claim of that connection without its
/// key is refused, at once; and a client whose connection was given away since it left is
/// told so when it comes back, instead of counting the other client's requests as its own.
#[test]
fn a_new_client_never_takes_another_clients_unfinished_log() {
    let dir = TestDir::new();
    let lease = Duration::from_secs(2);
    let pool = dir.pool("owned");
    let o = slow_processing();
    let s = start_leased("127.0.0.1:0", "DMP+noDDIO+PM-RQWRB", pool, o, 1, lease).unwrap();
    let addr = s.addr.to_string();
    run_client(async {
        let p = LatencyProfile::default_profile();
        let settings = ClientSettings::default();
        let put = |key: u64| Op::Put {
            key,
            value: value(key),
        };
        // A's connection ends (as if it crashed) with two Puts logged, not executed.
        let mut a = leaves_two_puts_unexecuted(&addr).await;
        let e = RealClient::connect(&addr, &p, &settings)
            .await
            .err()
            .expect("the only connection holds A's unfinished work");
        assert!(e.to_string().contains("refused"), "{e}");
        // Nor does a client that claims A's connection without A's key.
        let forged = DurableClaim {
            node: 1,
            key: a.hello.key ^ 1,
        };
        let frame = forged.emit();
        match remora_soft::client::open_with(&addr, &p, None, &frame).await {
            Err(ConnectError::Refused {
                code: RefuseCode::NotOwner,
                ..
            }) => {}
            Err(e) => panic!("a forged claim: {e}"),
            Ok(_) => panic!("a forged claim was accepted"),
        }
        // A comes back to its log and gets both replies.
        back_for_replies(&mut a, &addr, &[1, 2]).await;
        // A had everything; its log may go to a new client at once, with a new key.
        assert!(a.node.detach(0));
        let mut b = RealClient::connect(&addr, &p, &settings).await.unwrap();
        assert_ne!(b.hello.key, a.hello.key, "a new client, a new key");
        assert_eq!(workload(&mut b, 2, 2).await[0], 3, "B follows A's log");
        // A, back while B holds its old connection, is told so (not that the connection
        // is busy, after a wait: the key is checked first).
        let e = a
            .reconnect(&addr)
            .await
            .expect_err("A's log was given away");
        assert!(
            e.to_string()
                .contains("gave connection 1 to another client"),
            "{e}"
        );
        // B leaves with a Put unexecuted; after the lease a new client gets the log, and
        // none of B's replies.
        let last = b.client.call(put(1)).await.unwrap().seq;
        assert!(b.node.detach(0));
        std::thread::sleep(lease + Duration::from_secs(1));
        let mut c = RealClient::connect(&addr, &p, &settings).await.unwrap();
        assert_eq!(c.hello.info.processed, last, "B's Put was recovered");
        assert!(
            c.client.drain().await.unwrap().is_empty(),
            "C gets none of B's replies"
        );
        assert_eq!(workload(&mut c, 7, 1).await[0], last + 1);
    });
}

/// WFlush-RPC whose Puts are durable long before they are executed, so a client that
/// leaves right away leaves them for recovery.
fn slow_processing() -> DurableOptions {
    let mut o = options(Design::WFlushRpc);
    o.costs.processing = remora_model::time::Duration::from_millis(300);
    o
}

/// A client of `addr` that Puts keys 0 and 1 and whose connection then ends (as if it
/// crashed) with both logged, not executed (a [`slow_processing`] server).
async fn leaves_two_puts_unexecuted(addr: &str) -> RealClient {
    let p = LatencyProfile::default_profile();
    let mut a = RealClient::connect(addr, &p, &ClientSettings::default())
        .await
        .unwrap();
    for key in 0..2 {
        let put = Op::Put {
            key,
            value: value(key),
        };
        a.client.call(put).await.unwrap();
    }
    assert!(a.node.detach(0), "the client was connected");
    a
}

/// A client of `addr` whose one Put is done and whose reply it has: it leaves nothing
/// unfinished on its log.
async fn finished_client(addr: &str) -> RealClient {
    let p = LatencyProfile::default_profile();
    let mut a = RealClient::connect(addr, &p, &ClientSettings::default())
        .await
        .unwrap();
    let put = Op::Put {
        key: 1,
        value: value(1),
    };
    a.client.call(put).await.unwrap();
    a.client.drain().await.unwrap();
    a
}

/// `c` reconnects to `addr` and drains: the replies are those of `seqs`, kept for it.
async fn back_for_replies(c: &mut RealClient, addr: &str, seqs: &[u64]) {
    c.reconnect(addr).await.unwrap();
    let replies = c.client.drain().await.unwrap();
    let got: Vec<u64> = replies.iter().map(|r| r.seq).collect();
    assert_eq!(got, seqs, "the replies kept for the client");
}

/// Claims `claim` on a raw socket and reads the server's hello, whose key it returns (a
/// new client's, or the claim's).
fn raw_claim(addr: &str, claim: DurableClaim) -> (std::net::TcpStream, u64) {
    use remora_soft::cm::{Cm, CM_FRAME};
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&Cm::Hello { key: 0 }.emit()).unwrap();
    s.write_all(&claim.emit()).unwrap();
    let mut f = [0u8; CM_FRAME];
    s.read_exact(&mut f).unwrap();
    assert!(matches!(Cm::parse(&f), Ok(Cm::Assign { .. })), "{f:?}");
    let mut hello = [0u8; remora_rpc::real::HELLO_BYTES];
    s.read_exact(&mut hello).unwrap();
    let key = remora_rpc::real::DurableHello::parse(&hello).unwrap().key;
    (s, key)
}

/// The durable RPCs identify clients by their claim: a connection-manager key (`remora
/// serve`'s identity) is refused with `NotOwner`, not ignored.
#[test]
fn a_connection_manager_key_is_refused() {
    use remora_soft::cm::{Cm, RefuseCode, CM_FRAME};
    use std::io::{Read, Write};
    let dir = TestDir::new();
    let o = options(Design::WFlushRpc);
    let s = start("127.0.0.1:0", "DMP+noDDIO+PM-RQWRB", dir.pool("cmkey"), o).unwrap();
    let mut c = std::net::TcpStream::connect(s.addr).unwrap();
    c.write_all(&Cm::Hello { key: 7 }.emit()).unwrap();
    let mut f = [0u8; CM_FRAME];
    c.read_exact(&mut f).unwrap();
    assert_eq!(
        Cm::parse(&f),
        Ok(Cm::Refused {
            code: RefuseCode::NotOwner
        })
    );
}

/// A client's reconnection that waits for its busy connection is refused if, meanwhile,
/// the log went to a new client: its key is checked again when it gets the connection.
/// (It was checked once, before the wait, so the client got the log the new client had
/// used, as its own: told its key still held, it took the other client's requests for
/// its own.)
#[test]
fn a_reconnection_that_waited_while_its_log_went_to_a_new_client_is_refused() {
    use remora_soft::cm::{Cm, CM_FRAME};
    use std::io::{Read, Write};
    let dir = TestDir::new();
    let o = options(Design::WFlushRpc);
    let s = start("127.0.0.1:0", "DMP+noDDIO+PM-RQWRB", dir.pool("rewait"), o).unwrap();
    let addr = s.addr.to_string();
    run_client(async {
        let a = finished_client(&addr).await;
        // While A still holds its connection: a new client B waits for one, then A's
        // reconnection (from elsewhere, with A's key) waits for it too.
        let b = {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let (mut s, key) = raw_claim(&addr, DurableClaim { node: 0, key: 0 });
                let qp = remora_model::verbs::QpNum(77);
                s.write_all(&Cm::Ready { qp }.emit()).unwrap();
                let mut f = [0u8; CM_FRAME];
                s.read_exact(&mut f).unwrap();
                assert!(matches!(Cm::parse(&f), Ok(Cm::Accepted { .. })), "{f:?}");
                key
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let back = {
            let (addr, key) = (addr.clone(), a.hello.key);
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(&addr).unwrap();
                s.write_all(&Cm::Hello { key: 0 }.emit()).unwrap();
                s.write_all(&DurableClaim { node: 1, key }.emit()).unwrap();
                let mut f = [0u8; CM_FRAME];
                s.read_exact(&mut f).unwrap();
                Cm::parse(&f).unwrap()
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        // A's connection ends: B, first in line, gets the log (A had everything), with a
        // key of its own, and goes away; then A's reconnection gets the connection.
        assert!(a.node.detach(0));
        let key_b = b.join().unwrap();
        assert_ne!(key_b, a.hello.key);
        match back.join().unwrap() {
            Cm::Refused {
                code: RefuseCode::NotOwner,
            } => {}
            other => panic!("A's waiting reconnection, after B had the log: {other:?}"),
        }
    });
}

/// A new client's key reaches the log's PM only once the client is ready, just before it
/// is told the connection is its own: a server killed between its hello and the client's
/// `Ready` (what the pool file holds is what a SIGKILL leaves) keeps the log its previous
/// client's. (The key was made durable before the hello, so such a crash left the log
/// with a key nobody held, and its client, back, was told it had been taken over.)
#[test]
fn a_new_clients_key_is_durable_only_once_the_client_is_ready() {
    use remora_soft::cm::{Cm, CM_FRAME};
    use std::io::{Read, Write};
    let dir = TestDir::new();
    let pool = dir.pool("key-at-ready");
    let o = options(Design::WFlushRpc);
    let s = start("127.0.0.1:0", "DMP+noDDIO+PM-RQWRB", pool.clone(), o).unwrap();
    let addr = s.addr.to_string();
    let durable = |key: u64| {
        let b = std::fs::read(&pool).unwrap();
        b.windows(8).any(|w| w == key.to_le_bytes())
    };
    run_client(async {
        let a = finished_client(&addr).await;
        assert!(a.node.detach(0));
        // A had everything: a new client B may take its log.
        let (mut b, key_b) = raw_claim(&addr, DurableClaim { node: 0, key: 0 });
        assert!(
            durable(a.hello.key) && !durable(key_b),
            "B has its hello, not yet its Ready: the log's durable key is still A's"
        );
        let qp = remora_model::verbs::QpNum(77);
        b.write_all(&Cm::Ready { qp }.emit()).unwrap();
        let mut f = [0u8; CM_FRAME];
        b.read_exact(&mut f).unwrap();
        assert!(matches!(Cm::parse(&f), Ok(Cm::Accepted { .. })), "{f:?}");
        assert!(
            durable(key_b) && !durable(a.hello.key),
            "B was accepted: the log's durable key is B's"
        );
    });
}

/// Completes the handshake as the client of node 1 with `key` and goes away at once: no
/// RNIC on this side ever acknowledges what the server sends.
fn vanish_after_handshake(addr: &str, key: u64) {
    use remora_soft::cm::{Cm, CM_FRAME};
    use std::io::{Read, Write};
    let (mut s, _) = raw_claim(addr, DurableClaim { node: 1, key });
    let qp = remora_model::verbs::QpNum(77);
    s.write_all(&Cm::Ready { qp }.emit()).unwrap();
    let mut f = [0u8; CM_FRAME];
    s.read_exact(&mut f).unwrap();
    assert!(matches!(Cm::parse(&f), Ok(Cm::Accepted { .. })), "{f:?}");
}

/// A new client whose handshake breaks after the server's hello (a client that crashed
/// there) takes nothing from the log's previous client: that client's key and the replies
/// kept for it stay, and the key the hello carried opens nothing. (The log kept the broken
/// client's key, so its client was told it had been taken over, and the replies were
/// dropped.)
#[test]
fn a_new_clients_broken_handshake_leaves_the_log_as_it_was() {
    let dir = TestDir::new();
    let lease = Duration::from_secs(1);
    let pool = dir.pool("broken");
    let o = slow_processing();
    let s = start_leased("127.0.0.1:0", "DMP+noDDIO+PM-RQWRB", pool, o, 1, lease).unwrap();
    let addr = s.addr.to_string();
    run_client(async {
        let p = LatencyProfile::default_profile();
        // A leaves with two Puts logged, not executed, and stays away past its lease: a
        // new client may take the log.
        let mut a = leaves_two_puts_unexecuted(&addr).await;
        std::thread::sleep(lease + Duration::from_millis(500));
        let (mut broken, key) = raw_claim(&addr, DurableClaim { node: 0, key: 0 });
        assert_ne!(
            key, a.hello.key,
            "the new client was given a key of its own"
        );
        // It goes away before it is ready; the server's close says it has handled that.
        {
            use std::io::Read;
            broken.shutdown(std::net::Shutdown::Write).unwrap();
            let _ = broken.read_to_end(&mut Vec::new());
        }
        let stolen = DurableClaim { node: 1, key }.emit();
        match remora_soft::client::open_with(&addr, &p, None, &stolen).await {
            Err(ConnectError::Refused {
                code: RefuseCode::NotOwner,
                ..
            }) => {}
            Err(e) => panic!("the broken handshake's key: {e}"),
            Ok(_) => panic!("the broken handshake's key opened the connection"),
        }
        back_for_replies(&mut a, &addr, &[1, 2]).await;
    });
}

/// The replies of requests recovery executed stay the client's until its RNIC acknowledges
/// them: a client that completes its handshake and vanishes at once gets them on its next
/// connection, and meanwhile no new client takes its log. (They were taken as delivered
/// once sent, and the log went to the next new client.)
#[test]
fn replies_a_vanished_client_never_acknowledged_stay_its_own() {
    let dir = TestDir::new();
    let o = slow_processing();
    let s = start("127.0.0.1:0", "DMP+noDDIO+PM-RQWRB", dir.pool("vanish"), o).unwrap();
    let addr = s.addr.to_string();
    run_client(async {
        let p = LatencyProfile::default_profile();
        let settings = ClientSettings::default();
        // A leaves with two Puts logged, not executed; then comes back from elsewhere, is
        // sent their replies, and vanishes before anything acknowledges them.
        let mut a = leaves_two_puts_unexecuted(&addr).await;
        vanish_after_handshake(&addr, a.hello.key);
        let e = RealClient::connect(&addr, &p, &settings)
            .await
            .err()
            .expect("the only connection holds A's undelivered replies");
        assert!(e.to_string().contains("refused"), "{e}");
        back_for_replies(&mut a, &addr, &[1, 2]).await;
    });
}
