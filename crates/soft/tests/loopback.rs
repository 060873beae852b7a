//! The library and RemoteLog, unchanged, between a client and a `serve` server over TCP.

use remora::{Primitive, ServerSetup, Shape, Update};
use remora_model::profile::LatencyProfile;
use remora_model::rnic::Objects;
use remora_model::ServerConfig;
use remora_remotelog::log::{is_record, LogClient, LogShape};
use remora_soft::server::{serve, Admission, ServeOptions};
use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::mpsc;

/// A directory for one test's pool files, removed with them when the test ends.
struct TestDir(tempfile::TempDir);

impl TestDir {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("remora-soft-test-")
            .tempdir();
        TestDir(dir.expect("temporary directory"))
    }

    fn pool(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

/// Starts a server on a thread of its own; returns its address.
fn start_server(config: &str, pool: PathBuf, shape: LogShape) -> std::net::SocketAddr {
    start_server_on("127.0.0.1:0", config, pool, shape, 8 << 20)
}

fn start_server_on(
    listen: &str,
    config: &str,
    pool: PathBuf,
    shape: LogShape,
    pool_bytes: u64,
) -> std::net::SocketAddr {
    start_server_watched(listen, config, pool, shape, pool_bytes, LEASE).0
}

/// What [`start_server_watched`] gives: the server's address, its live RNIC objects and
/// how many connection slots its pool holds.
type Watched = (
    std::net::SocketAddr,
    remora_soft::server::LiveObjects,
    usize,
);

/// [`start_server_on`], also giving the server's live RNIC objects.
fn start_server_watched(
    listen: &str,
    config: &str,
    pool: PathBuf,
    shape: LogShape,
    pool_bytes: u64,
    lease: std::time::Duration,
) -> Watched {
    start_server_faulty(listen, config, pool, shape, pool_bytes, lease, None)
}

/// [`start_server_watched`], deliberately wrong as `fault` says (a negative control).
fn start_server_faulty(
    listen: &str,
    config: &str,
    pool: PathBuf,
    shape: LogShape,
    pool_bytes: u64,
    lease: std::time::Duration,
    fault: Option<remora_soft::server::ServeFault>,
) -> Watched {
    start_server_with(ServeOptions {
        listen: listen.to_string(),
        pool,
        pool_bytes: remora_soft::pool::PoolBytes::AtLeast(pool_bytes),
        config: config.parse().unwrap(),
        profile: LatencyProfile::default_profile(),
        setup: ServerSetup {
            region_len: shape.region_len(),
            ..ServerSetup::default()
        },
        lease,
        admission: Admission::DEFAULT,
        fault,
        slot_task: None,
    })
}

/// Starts a server with `opts` on a thread of its own.
fn start_server_with(opts: ServeOptions) -> Watched {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Err(e) = remora_exec::block_on(serve(opts, |s| {
            tx.send((s.addr, s.objects.clone(), s.slots)).unwrap()
        })) {
            eprintln!("server: {e}");
        }
    });
    rx.recv().unwrap()
}

/// The servers' lease: `remora serve`'s default.
const LEASE: std::time::Duration = std::time::Duration::from_secs(60);

fn run_client<T>(f: impl std::future::Future<Output = T>) -> T {
    remora_exec::block_on(f)
}

/// A library client connected to `addr` with `primitive`'s methods, and its node (the
/// connection lives while both are kept).
async fn client_of(
    addr: &str,
    primitive: Primitive,
) -> (
    remora_soft::runtime::RtNode,
    remora::Client<remora_soft::runtime::RtNode>,
) {
    client_with(addr, primitive, &LatencyProfile::default_profile()).await
}

/// [`client_of`] with the client's node on `profile`.
async fn client_with(
    addr: &str,
    primitive: Primitive,
    profile: &LatencyProfile,
) -> (
    remora_soft::runtime::RtNode,
    remora::Client<remora_soft::runtime::RtNode>,
) {
    let (node, _, mut client) = remora_soft::client::connect(addr, profile).await.unwrap();
    client.connect(primitive, Shape::default()).await.unwrap();
    (node, client)
}

#[test]
fn remotelog_appends_over_tcp_for_every_primitive() {
    let dir = TestDir::new();
    let shape = LogShape {
        capacity: 1024,
        ..LogShape::default()
    };
    for config in [
        "DMP+noDDIO+PM-RQWRB",
        "DMP+DDIO+DRAM-RQWRB",
        "MHP+DDIO+PM-RQWRB",
    ] {
        let addr = start_server(config, dir.pool(config), shape).to_string();
        for primitive in Primitive::ALL {
            for update in Update::ALL {
                let (records, hello) = run_client(async {
                    let (_node, cfg, mut client) =
                        remora_soft::client::connect(&addr, &LatencyProfile::default_profile())
                            .await
                            .unwrap();
                    assert_eq!(cfg.name(), config);
                    let hello = client.connect(primitive, Shape::default()).await.unwrap();
                    let mut log = LogClient::new(client, shape, update);
                    for _ in 0..20 {
                        log.append().await.unwrap();
                    }
                    // Read the records back through RDMA READ. A one-sided SEND is applied
                    // by the server after it is durable in the receive ring (seed 000 §3.3:
                    // reading it back needs coordination), so poll until the server has
                    // applied them all, within a bound (a loaded machine may take a while).
                    let c = log.client();
                    let mut rs = Vec::new();
                    for _attempt in 0..200 {
                        rs.clear();
                        for i in 0..20u64 {
                            rs.push(
                                c.read(shape.slot(i), shape.record_bytes as u32)
                                    .await
                                    .unwrap(),
                            );
                        }
                        if rs.iter().enumerate().all(|(i, r)| is_record(r, i as u64)) {
                            break;
                        }
                        remora_exec::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                    (rs, hello)
                });
                assert_eq!(hello.config.name(), config);
                for (i, r) in records.iter().enumerate() {
                    assert!(
                        is_record(r, i as u64),
                        "{config} {primitive:?} {update:?}: record {i}"
                    );
                }
            }
        }
    }
}

#[test]
fn bad_peers_lose_their_connection_and_the_server_keeps_serving() {
    let dir = TestDir::new();
    let shape = LogShape {
        capacity: 256,
        ..LogShape::default()
    };
    let addr = start_server("DMP+noDDIO+PM-RQWRB", dir.pool("bad-peers"), shape).to_string();
    run_client(async {
        // 1. Not the connection manager's protocol at all: refused.
        let mut s = remora_exec::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(&[0xEE; 24]).await.unwrap();
        let mut b = [0u8; 24];
        s.read_exact(&mut b).await.unwrap();
        assert!(matches!(
            remora_soft::cm::Cm::parse(&b),
            Ok(remora_soft::cm::Cm::Refused { .. })
        ));
        // 1b. The opening right, then another frame where its Ready belongs: refused too
        // (it was closed without a word).
        let mut s = remora_exec::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(&remora_soft::cm::Cm::Hello { key: 0 }.emit())
            .await
            .unwrap();
        s.read_exact(&mut b).await.unwrap();
        s.write_all(&remora_soft::cm::Cm::Hello { key: 0 }.emit())
            .await
            .unwrap();
        s.read_exact(&mut b).await.unwrap();
        assert!(matches!(
            remora_soft::cm::Cm::parse(&b),
            Ok(remora_soft::cm::Cm::Refused {
                code: remora_soft::cm::RefuseCode::Version
            })
        ));
        // 2. A good handshake, then garbage instead of packets: the connection is closed.
        let mut s = remora_exec::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(&remora_soft::cm::Cm::Hello { key: 0 }.emit())
            .await
            .unwrap();
        s.read_exact(&mut b).await.unwrap();
        s.write_all(
            &remora_soft::cm::Cm::Ready {
                qp: remora_model::verbs::QpNum(0),
            }
            .emit(),
        )
        .await
        .unwrap();
        s.read_exact(&mut b).await.unwrap();
        s.write_all(&[0x42; 100]).await.unwrap();
        let mut rest = Vec::new();
        let closed =
            remora_exec::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut rest))
                .await;
        assert!(
            closed.is_ok(),
            "the server must close a connection that sends garbage"
        );
        // 3. A client that disconnects in the middle of its work.
        let (_n, mut client) = client_of(&addr, Primitive::Send).await;
        client.persist(64, &[1; 64]).await.unwrap();
        drop(client);
        drop(_n);
        // 4. A well-behaved client is served, and its data is there.
        let (_n, client) = client_of(&addr, Primitive::Write).await;
        let mut log = LogClient::new(client, shape, Update::Compound);
        for _ in 0..10 {
            log.append().await.unwrap();
        }
        let r = log.client().read(shape.slot(9), 64).await.unwrap();
        assert!(is_record(&r, 9));
    });
}

#[test]
fn ipv6_loopback_works_too() {
    let dir = TestDir::new();
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback here");
        return;
    }
    let shape = LogShape {
        capacity: 256,
        ..LogShape::default()
    };
    let addr = start_server_on(
        "[::1]:0",
        "WSP+noDDIO+PM-RQWRB",
        dir.pool("ipv6"),
        shape,
        8 << 20,
    );
    assert!(addr.is_ipv6());
    run_client(async {
        let (_n, client) = client_of(&addr.to_string(), Primitive::Write).await;
        let mut log = LogClient::new(client, shape, Update::Singleton);
        for _ in 0..10 {
            log.append().await.unwrap();
        }
    });
}

/// A `DMP+noDDIO+PM-RQWRB` server whose pool holds exactly `slots` regions of
/// `region_bytes`, with no lease (a slot its client left is taken over, cleared, by the
/// next new client at once); its address.
fn takeover_server(dir: &TestDir, region_bytes: u64, slots: usize) -> String {
    takeover_server_of(dir, "DMP+noDDIO+PM-RQWRB", region_bytes, slots)
}

/// [`takeover_server`] in `config`.
fn takeover_server_of(dir: &TestDir, config: &str, region_bytes: u64, slots: usize) -> String {
    takeover_server_faulty(dir, config, region_bytes, slots, None)
}

/// [`takeover_server_of`], deliberately wrong as `fault` says.
fn takeover_server_faulty(
    dir: &TestDir,
    config: &str,
    region_bytes: u64,
    slots: usize,
    fault: Option<remora_soft::server::ServeFault>,
) -> String {
    let shape = LogShape {
        capacity: region_bytes / 64,
        ..LogShape::default()
    };
    let setup = ServerSetup {
        region_len: shape.region_len(),
        ..ServerSetup::default()
    };
    let parsed: ServerConfig = config.parse().unwrap();
    let (addr, _, made) = start_server_faulty(
        "127.0.0.1:0",
        config,
        dir.pool("takeover"),
        shape,
        remora_soft::server::pool_bytes_for(slots as u64, &setup, parsed.rqwrb),
        std::time::Duration::ZERO,
        fault,
    );
    assert_eq!(made, slots);
    addr.to_string()
}

/// A peer that speaks verbs to `remora serve` directly, without the library: its own queue
/// pair, a receive posted for the server's `Hello` (which names the region and its rkey),
/// and a local buffer.
struct RawPeer {
    node: remora_soft::runtime::RtNode,
    qp: remora_model::verbs::QpNum,
    scq: remora_model::verbs::CqId,
    buf: remora_model::rnic::MrInfo,
    hello: remora::wire::Hello,
}

impl RawPeer {
    async fn connect(addr: &str) -> RawPeer {
        use remora_model::rnic::QpAttr;
        use remora_model::verbs::{Access, RecvWr, Sge};
        use remora_model::Space;
        use remora_verbs::Verbs;
        let opening = remora_soft::client::open(addr, &LatencyProfile::default_profile(), None)
            .await
            .unwrap();
        let v = opening.node().clone();
        let pd = v.alloc_pd().unwrap();
        let base = v.alloc(Space::Dram, 4096, 4096);
        let buf = v
            .reg_mr(pd, Space::Dram, base, 4096, Access::LOCAL_WRITE)
            .unwrap();
        let (scq, rcq) = (v.create_cq(16).unwrap(), v.create_cq(16).unwrap());
        let qp = v.create_qp(pd, scq, rcq, QpAttr::default()).unwrap();
        let sge = Sge {
            addr: base + 2048,
            len: 256,
            lkey: buf.lkey,
        };
        v.post_recv(qp, RecvWr { wr_id: 0, sge }).unwrap();
        let node = opening.finish(qp).await.unwrap();
        let wc = remora_verbs::next_completion(&node, rcq).await;
        assert_eq!(wc.status, remora_model::verbs::WcStatus::Success);
        let mut b = vec![0u8; wc.byte_len as usize];
        node.load(Space::Dram, base + 2048, &mut b);
        let Ok(remora::wire::Frame::Hello(hello)) = remora::wire::Frame::parse(&b) else {
            panic!("the server's first message is its Hello: {b:?}");
        };
        RawPeer {
            node,
            qp,
            scq,
            buf,
            hello,
        }
    }

    /// Posts one signaled request (its local side: the first bytes of the buffer) and
    /// returns its completion.
    async fn run(
        &self,
        opcode: remora_model::verbs::Opcode,
        len: u32,
        remote: remora_model::verbs::Remote,
    ) -> remora_model::verbs::WorkCompletion {
        use remora_model::verbs::{Payload, SendWr, Sge};
        use remora_verbs::Verbs;
        let sge = Sge {
            addr: self.buf.addr,
            len,
            lkey: self.buf.lkey,
        };
        let wr = SendWr::new(7, opcode, Payload::Sge(sge), Some(remote));
        self.node.post_send(self.qp, wr).unwrap();
        let done = remora_verbs::next_completion(&self.node, self.scq);
        remora_exec::time::timeout(std::time::Duration::from_secs(10), done)
            .await
            .expect("every request completes, in error or not")
    }
}

/// Requests a responder must refuse get the error completion an RNIC gives (wrong rkey,
/// out of bounds, misaligned atomic: `IBV_WC_REM_ACCESS_ERR`), each on a peer of its own;
/// the server keeps serving a client connected all along, and what it had made durable
/// before is intact.
#[test]
fn bad_requests_get_error_completions_and_lose_nothing() {
    use remora_model::verbs::{Opcode, Remote, WcStatus};
    let dir = TestDir::new();
    let shape = LogShape {
        capacity: 256,
        ..LogShape::default()
    };
    let addr = start_server("DMP+noDDIO+PM-RQWRB", dir.pool("bad-requests"), shape).to_string();
    run_client(async {
        let (_n, client) = client_of(&addr, Primitive::Write).await;
        let mut log = LogClient::new(client, shape, Update::Singleton);
        for _ in 0..10 {
            log.append().await.unwrap();
        }

        // Well-formed requests work over the wire (each connection has a region of its
        // own): a WRITE of a record, FETCH_AND_ADD 0 returning its first eight bytes, and
        // a READ of it.
        let peer = RawPeer::connect(&addr).await;
        let (base, rkey) = (peer.hello.region_addr, peer.hello.region_rkey);
        let at = Remote {
            addr: base + shape.slot(3),
            rkey,
        };
        let rec = remora_remotelog::log::record(3, 64);
        let local = |buf: &mut [u8]| {
            remora_verbs::Verbs::load(&peer.node, remora_model::Space::Dram, peer.buf.addr, buf)
        };
        remora_verbs::Verbs::store(&peer.node, remora_model::Space::Dram, peer.buf.addr, &rec);
        assert_eq!(
            peer.run(Opcode::Write, 64, at).await.status,
            WcStatus::Success
        );
        remora_verbs::Verbs::store(
            &peer.node,
            remora_model::Space::Dram,
            peer.buf.addr,
            &[0; 64],
        );
        let wc = peer.run(Opcode::FetchAdd { add: 0 }, 8, at).await;
        assert_eq!(wc.status, WcStatus::Success);
        let mut got = [0u8; 64];
        local(&mut got[..8]);
        assert_eq!(got[..8], rec[..8]);
        assert_eq!(
            peer.run(Opcode::Read, 64, at).await.status,
            WcStatus::Success
        );
        local(&mut got);
        assert_eq!(got[..], rec[..]);

        // Each refused request on a peer of its own (an error moves an RC queue pair to
        // the error state), aimed at that peer's own region, so only the fault named is
        // wrong; one uses the first peer's key, valid but of another connection.
        let other_rkey = rkey;
        // (region base, region end, its rkey, the other connection's) -> the request.
        type Case = fn(u64, u64, u32, u32) -> (Opcode, u32, Remote);
        let cases: [(&str, Case); 5] = [
            ("an rkey of no region", |base, _, rkey, _| {
                (
                    Opcode::Write,
                    64,
                    Remote {
                        addr: base,
                        rkey: rkey ^ 0x5a5a,
                    },
                )
            }),
            ("another connection's rkey", |base, _, _, other| {
                (
                    Opcode::Write,
                    64,
                    Remote {
                        addr: base,
                        rkey: other,
                    },
                )
            }),
            ("a WRITE past the region", |_, end, rkey, _| {
                (
                    Opcode::Write,
                    64,
                    Remote {
                        addr: end - 8,
                        rkey,
                    },
                )
            }),
            ("a READ past the region", |_, end, rkey, _| {
                (
                    Opcode::Read,
                    64,
                    Remote {
                        addr: end - 8,
                        rkey,
                    },
                )
            }),
            ("a misaligned atomic", |base, _, rkey, _| {
                let cas = Opcode::CompareSwap {
                    compare: 0,
                    swap: u64::MAX,
                };
                (
                    cas,
                    8,
                    Remote {
                        addr: base + 64 + 3,
                        rkey,
                    },
                )
            }),
        ];
        for (what, case) in cases {
            let peer = RawPeer::connect(&addr).await;
            let h = &peer.hello;
            let end = h.region_addr + h.region_len;
            let (opcode, len, remote) = case(h.region_addr, end, h.region_rkey, other_rkey);
            let wc = peer.run(opcode, len, remote).await;
            assert_eq!(wc.status, WcStatus::RemAccessErr, "{what}");
            // Its queue pair can carry nothing more: the server ends the connection too,
            // so a client cannot hold sockets and buffers beyond its slot.
            let mut waited = 0;
            while peer.node.attached(0) {
                waited += 1;
                assert!(waited < 500, "{what}: the server kept the connection");
                remora_exec::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }

        // The client connected all along is still served, and nothing durable was lost.
        for _ in 0..10 {
            log.append().await.unwrap();
        }
        for i in 0..20 {
            let r = log.client().read(shape.slot(i), 64).await.unwrap();
            assert!(is_record(&r, i), "record {i}");
        }
    });
}

/// A client on a thread of its own, connected until told to go (its runtime, and with it
/// the connection, ends then).
fn hold_client(addr: &str) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let addr = addr.to_string();
    let t = std::thread::spawn(move || {
        run_client(async move {
            let (_n, mut client) = client_of(&addr, Primitive::Write).await;
            client.persist(0, &[7; 64]).await.unwrap();
            ready_tx.send(()).unwrap();
            // Polls the stop channel without blocking the runtime the node runs on.
            while stop_rx.try_recv().is_err() {
                remora_exec::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
    });
    ready_rx.recv().unwrap();
    (stop_tx, t)
}

/// One connection that reads the 64 bytes at offset 64, then makes `mark` durable there;
/// returns what it read (run in a runtime of its own, so the connection ends with it).
fn mark_in_turn(addr: &str, mark: u8) -> Result<Vec<u8>, remora_soft::client::ConnectError> {
    run_client(async { Ok(connect_and_mark(addr, mark).await?.1) })
}

/// The connection of [`mark_in_turn`], in the caller's runtime: its node (the connection
/// lives while the node's tasks run) and what it read.
async fn connect_and_mark(
    addr: &str,
    mark: u8,
) -> Result<(remora_soft::runtime::RtNode, Vec<u8>), remora_soft::client::ConnectError> {
    let (node, before, _key) = claim_and_mark(addr, 0, mark).await?;
    Ok((node, before))
}

/// [`connect_and_mark`] as the client whose key is `key` (0: a new client); also gives the
/// client's key.
async fn claim_and_mark(
    addr: &str,
    key: u64,
    mark: u8,
) -> Result<(remora_soft::runtime::RtNode, Vec<u8>, u64), remora_soft::client::ConnectError> {
    let mut c =
        remora_soft::client::connect_as(addr, &LatencyProfile::default_profile(), key).await?;
    c.client
        .connect(Primitive::Write, Shape::default())
        .await
        .unwrap();
    let before = c.client.read(64, 64).await.unwrap();
    c.client.persist(64, &[mark; 64]).await.unwrap();
    Ok((c.node, before, c.key))
}

/// A server whose pool holds exactly two clients' regions (`DMP+noDDIO+PM-RQWRB`), and its
/// live RNIC objects; a slot is kept for its client for `lease` after the client leaves.
fn two_slot_server(
    dir: &TestDir,
    name: &str,
    lease: std::time::Duration,
) -> (String, remora_soft::server::LiveObjects) {
    // Regions large enough that two and a half fill a pool of the smallest size.
    let shape = LogShape {
        capacity: 6400,
        ..LogShape::default()
    };
    let setup = ServerSetup {
        region_len: shape.region_len(),
        ..ServerSetup::default()
    };
    let config = "DMP+noDDIO+PM-RQWRB";
    let slot = setup
        .footprint(config.parse::<ServerConfig>().unwrap().rqwrb)
        .pm
        .next_multiple_of(4096);
    assert!(2 * slot + slot / 2 >= remora_soft::pool::MIN_POOL_BYTES);
    // Room for the page of client keys too.
    assert!(slot / 2 >= 4096);
    let (addr, objects, _) = start_server_watched(
        "127.0.0.1:0",
        config,
        dir.pool(name),
        shape,
        2 * slot + slot / 2,
        lease,
    );
    (addr.to_string(), objects)
}

/// A pool with room for two clients' regions serves two at once, refuses a third with a
/// clear error (the connection manager's `Resources`), and serves any number in turn: with
/// no lease, a closed connection's slot goes to the next new client, cleared (it finds
/// none of its predecessor's bytes), instead of the server running out of PM.
#[test]
fn a_pool_serves_clients_in_turn_and_refuses_one_too_many_at_once() {
    let dir = TestDir::new();
    let (addr, objects) = two_slot_server(&dir, "slots", std::time::Duration::ZERO);
    let (stop_a, a) = hold_client(&addr);
    let (stop_b, b) = hold_client(&addr);
    match mark_in_turn(&addr, 1) {
        Err(remora_soft::client::ConnectError::Refused { code, .. }) => {
            assert_eq!(code, remora_soft::cm::RefuseCode::Resources)
        }
        other => panic!("a third client at once must be refused: {other:?}"),
    }
    stop_b.send(()).unwrap();
    b.join().unwrap();
    // What the server holds with one client (a) connected: b's objects are gone.
    let one_client = settled(&objects, |o| o.qps == 1);
    assert_eq!((one_client.cqs, one_client.mrs, one_client.pds), (2, 2, 1));
    // Many more clients than slots, one after another, each connecting as soon as the last
    // closed (the server waits for the closed connection's slot, and for the last
    // connection's writes in flight to it): each finds its slot cleared of its
    // predecessor's mark (the first, of b's).
    for mark in 1..12u8 {
        let before = mark_in_turn(&addr, mark).expect("a free slot");
        assert_eq!(before, vec![0; 64], "client {mark}");
    }
    // Each of them freed its queue pair, CQs, regions and protection domain as it ended.
    assert_eq!(settled(&objects, |o| o == one_client), one_client);
    stop_a.send(()).unwrap();
    a.join().unwrap();
    assert_eq!(settled(&objects, |o| o.qps == 0), Objects::default());
}

/// The server's live objects once `done` holds of them (they are updated as a connection
/// ends, which the server notices a little after the client closed), or after 5 s.
fn settled(objects: &remora_soft::server::LiveObjects, done: impl Fn(Objects) -> bool) -> Objects {
    for _ in 0..200 {
        if done(objects.get()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    objects.get()
}

/// A peer that connects and goes silent, before or in the middle of the connection
/// manager's handshake, is dropped after [`HANDSHAKE_TIMEOUT`] instead of holding its
/// socket for ever, and the server serves others meanwhile.
///
/// [`HANDSHAKE_TIMEOUT`]: remora_soft::cm::HANDSHAKE_TIMEOUT
#[test]
fn a_silent_peer_is_dropped_after_the_handshake_timeout() {
    use std::io::{Read, Write};
    let dir = TestDir::new();
    let addr = start_server(
        "DMP+noDDIO+PM-RQWRB",
        dir.pool("silent"),
        LogShape::default(),
    );
    let t0 = wall();
    let silent = std::net::TcpStream::connect(addr).unwrap();
    let mut halfway = std::net::TcpStream::connect(addr).unwrap();
    halfway
        .write_all(&remora_soft::cm::Cm::Hello { key: 0 }.emit())
        .unwrap();
    // Others are served meanwhile.
    let before = mark_in_turn(&addr.to_string(), 1).expect("a client is served");
    assert_eq!(before.len(), 64);
    let wait = remora_soft::cm::HANDSHAKE_TIMEOUT + std::time::Duration::from_secs(5);
    for (name, mut s, assign) in [("silent", silent, 0), ("halfway", halfway, 1)] {
        s.set_read_timeout(Some(wait)).unwrap();
        // The halfway peer gets its Assign first; then both see the server close.
        let mut got = Vec::new();
        let r = s.read_to_end(&mut got);
        assert!(
            r.is_ok(),
            "{name}: the server did not close the connection: {r:?}"
        );
        assert_eq!(got.len(), assign * remora_soft::cm::CM_FRAME, "{name}");
        assert!(
            t0.elapsed() >= remora_soft::cm::HANDSHAKE_TIMEOUT,
            "{name}: closed before the time-out"
        );
    }
}

/// A client gives up, with an error that says so, on a server that accepts the TCP
/// connection and never answers (another service on that port, or a stuck server).
#[test]
fn a_client_gives_up_on_a_silent_server() {
    let (addr, hold) = raw_server(|s| s);
    connect_times_out(&addr, "did not answer");
    drop(hold.join().unwrap());
}

/// A server of its own on a loopback port: `serve` runs on its thread with the first
/// connection it accepts. Its address, and the thread, which gives what `serve` returns.
fn raw_server<T: Send + 'static>(
    serve: impl FnOnce(std::net::TcpStream) -> T + Send + 'static,
) -> (String, std::thread::JoinHandle<T>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let thread = std::thread::spawn(move || serve(listener.accept().unwrap().0));
    (addr, thread)
}

/// Connects to `addr` and expects a time-out error saying `what`, after the handshake's
/// time-out.
fn connect_times_out(addr: &str, what: &str) {
    let t0 = wall();
    let r = run_client(async {
        remora_soft::client::connect(addr, &LatencyProfile::default_profile())
            .await
            .map(|_| ())
    });
    match r {
        Err(e @ remora_soft::client::ConnectError::Timeout { .. }) => {
            assert!(e.to_string().contains(what), "{e}")
        }
        other => panic!("expected a time-out: {other:?}"),
    }
    assert!(t0.elapsed() >= remora_soft::cm::HANDSHAKE_TIMEOUT);
}

/// A server that accepts the connection and then never sends its Hello: the client gives
/// up with a time-out error (it waited for ever before).
#[test]
fn a_client_gives_up_on_a_server_that_accepts_and_never_says_hello() {
    use remora_soft::cm::Cm;
    use std::io::Write;
    let (addr, hold) = raw_server(|mut s| {
        raw_serve_until_ready(&mut s);
        s.write_all(
            &Cm::Accepted {
                qp: remora_model::verbs::QpNum(0),
                key: 0,
            }
            .emit(),
        )
        .unwrap();
        s // held open, silent
    });
    connect_times_out(&addr, "Hello");
    drop(hold.join().unwrap());
}

/// The wall clock: these tests time a real server's time-outs.
#[allow(clippy::disallowed_methods)]
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

/// A client process that goes on after a connection closes it with `RtNode::close`: the
/// server frees the slot, so one process can use more connections in turn than the server
/// has slots (before, every connection stayed open until the process's
/// runtime ended, and the third was refused).
#[test]
fn a_client_node_closed_frees_its_slot_within_one_process() {
    let dir = TestDir::new();
    let (addr, objects) = two_slot_server(&dir, "close", std::time::Duration::ZERO);
    let marks = run_client(async {
        let mut marks = Vec::new();
        for mark in 1..=6u8 {
            let (node, before) = connect_and_mark(&addr, mark)
                .await
                .unwrap_or_else(|e| panic!("connection {mark}: {e}"));
            marks.push(before[0]);
            node.close();
        }
        marks
    });
    // Six connections served by a two-slot pool. Each found a mark an earlier connection
    // left in its slot, or none (the server notices a close a little later, so the next
    // connection may get the other slot).
    assert_eq!(marks.len(), 6);
    for (i, &m) in marks.iter().enumerate() {
        assert!(m as usize <= i, "connection {} found mark {m}", i + 1);
    }
    assert_eq!(settled(&objects, |o| o.qps == 0), Objects::default());
}

/// A slot is its client's: a client that comes back with its key gets its own region back,
/// whichever client comes back first; a new client meanwhile gets a slot nobody holds, and
/// is refused (`Resources`) while every free slot is kept for its client; a key the server
/// never gave is refused (`NotOwner`). Before, slots went by connection order, and a
/// returning client could be given another client's region.
#[test]
fn a_returning_client_gets_its_own_slot_and_others_wait_for_the_lease() {
    use remora_soft::client::ConnectError;
    use remora_soft::cm::RefuseCode;
    let dir = TestDir::new();
    let (addr, _) = two_slot_server(&dir, "owned", LEASE);
    let refused = |r: Result<(remora_soft::runtime::RtNode, Vec<u8>, u64), ConnectError>| match r {
        Err(ConnectError::Refused { code, .. }) => code,
        Ok(_) => panic!("connected"),
        Err(e) => panic!("{e}"),
    };
    run_client(async {
        let (a, _, ka) = claim_and_mark(&addr, 0, 1).await.unwrap();
        let (b, before, kb) = claim_and_mark(&addr, 0, 2).await.unwrap();
        assert_eq!(before, vec![0; 64], "b has a slot of its own");
        assert!(ka != 0 && kb != 0 && ka != kb);
        a.close();
        b.close();
        // Both slots are kept for their clients: a new client waits, and is refused.
        let t0 = wall();
        assert_eq!(
            refused(claim_and_mark(&addr, 0, 3).await),
            RefuseCode::Resources
        );
        assert!(t0.elapsed() >= remora_soft::server::SLOT_WAIT);
        // A key the server never gave is refused at once, whatever the slots' state.
        assert_eq!(
            refused(claim_and_mark(&addr, !ka, 3).await),
            RefuseCode::NotOwner
        );
        // b comes back first, and finds its own mark, not a's; then a finds its own.
        let (b, before, key) = claim_and_mark(&addr, kb, 4).await.unwrap();
        assert_eq!((before[0], key), (2, kb));
        let (a, before, key) = claim_and_mark(&addr, ka, 5).await.unwrap();
        assert_eq!((before[0], key), (1, ka));
        a.close();
        b.close();
    });
}

/// Handshakes at once never share a slot: of four new clients on a two-slot server, two
/// get a slot each (fresh regions, distinct keys) and two are refused (`Resources`); when
/// both come back at once, each twice, each key gets its own region and its second copy is
/// refused while the first holds it.
#[test]
fn handshakes_at_once_never_share_a_slot() {
    use remora_soft::client::ConnectError;
    use remora_soft::cm::RefuseCode;
    let dir = TestDir::new();
    let (addr, _) = two_slot_server(&dir, "race", LEASE);
    // Runs `claims` (key, mark) at once; gives each one's node, what it read, its key and
    // mark, or its refusal code.
    async fn at_once(
        addr: &str,
        claims: &[(u64, u8)],
    ) -> Vec<Result<(remora_soft::runtime::RtNode, u8, u64, u8), RefuseCode>> {
        let tasks: Vec<_> = claims
            .iter()
            .map(|&(key, mark)| {
                let addr = addr.to_string();
                remora_exec::spawn_local(async move {
                    match claim_and_mark(&addr, key, mark).await {
                        Ok((node, before, key)) => Ok((node, before[0], key, mark)),
                        Err(ConnectError::Refused { code, .. }) => Err(code),
                        Err(e) => panic!("{e}"),
                    }
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }
    run_client(async {
        let first = at_once(&addr, &[(0, 1), (0, 2), (0, 3), (0, 4)]).await;
        let won: Vec<_> = first.iter().filter_map(|r| r.as_ref().ok()).collect();
        let refused: Vec<_> = first.iter().filter_map(|r| r.as_ref().err()).collect();
        assert_eq!(won.len(), 2, "two slots");
        assert_eq!(refused, vec![&RefuseCode::Resources; 2]);
        assert!(won.iter().all(|w| w.1 == 0), "each found a fresh region");
        assert_ne!(won[0].2, won[1].2);
        let owners: Vec<(u64, u8)> = won.iter().map(|w| (w.2, w.3)).collect();
        for w in &won {
            w.0.close();
        }
        let back = at_once(
            &addr,
            &[
                (owners[0].0, 11),
                (owners[1].0, 12),
                (owners[0].0, 13),
                (owners[1].0, 14),
            ],
        )
        .await;
        let mut found: Vec<(u64, u8)> = back
            .iter()
            .filter_map(|r| r.as_ref().ok().map(|w| (w.2, w.1)))
            .collect();
        found.sort();
        let mut want = owners.clone();
        want.sort();
        assert_eq!(found, want, "each key found its own mark");
        assert_eq!(back.iter().filter(|r| r.is_err()).count(), 2);
    });
}

/// After its lease, a slot goes to a new client (the one whose lease ran out first),
/// cleared, and its old client's key is refused from then on (`NotOwner`): its region is
/// another's. A claim of the key that marks a slot being cleared is refused too.
#[test]
fn after_the_lease_a_new_client_takes_the_slot_and_its_old_key_is_refused() {
    use remora_soft::client::ConnectError;
    use remora_soft::cm::RefuseCode;
    let dir = TestDir::new();
    let (addr, _) = two_slot_server(&dir, "lease", std::time::Duration::from_millis(300));
    run_client(async {
        let (a, _, ka) = claim_and_mark(&addr, 0, 1).await.unwrap();
        a.close();
        remora_exec::time::sleep(std::time::Duration::from_millis(100)).await;
        let (b, _, kb) = claim_and_mark(&addr, 0, 2).await.unwrap();
        b.close();
        // Both kept; the new client waits until a's lease, the first, runs out, and gets
        // a's slot, cleared of a's mark, under a key of its own.
        let (c, before, kc) = claim_and_mark(&addr, 0, 3).await.unwrap();
        assert_eq!(before, vec![0; 64], "a's region was cleared for c");
        assert!(kc != ka && kc != kb);
        c.close();
        match claim_and_mark(&addr, ka, 4).await {
            Err(ConnectError::Refused { code, .. }) => assert_eq!(code, RefuseCode::NotOwner),
            Ok(_) => panic!("a's old key got a slot"),
            Err(e) => panic!("{e}"),
        }
        match claim_and_mark(&addr, remora_soft::cm::CLEARING_KEY, 4).await {
            Err(ConnectError::Refused { code, .. }) => assert_eq!(code, RefuseCode::NotOwner),
            Ok(_) => panic!("the clearing key got a slot"),
            Err(e) => panic!("{e}"),
        }
        // c's slot, which had a's mark, keeps c's.
        let (_c, before, _) = claim_and_mark(&addr, kc, 6).await.unwrap();
        assert_eq!(before[0], 3);
        let (_b, before, _) = claim_and_mark(&addr, kb, 5).await.unwrap();
        assert_eq!(before[0], 2);
    });
}

/// A lease too long for the clock (`--lease-secs` takes any u64) means "for ever": the
/// server starts, and a client leaves and comes back (the sum panicked before).
#[test]
fn a_lease_past_the_clocks_range_means_for_ever() {
    let dir = TestDir::new();
    let (addr, _) = two_slot_server(&dir, "forever", std::time::Duration::from_secs(u64::MAX));
    run_client(async {
        let (a, _, ka) = claim_and_mark(&addr, 0, 1).await.unwrap();
        a.close();
        let (a, before, _) = claim_and_mark(&addr, ka, 2).await.unwrap();
        assert_eq!(before[0], 1);
        a.close();
    });
}

#[test]
fn a_client_whose_ack_timeout_means_never_still_runs() {
    // A profile may set the ACK time-out to u64::MAX nanoseconds ("never"): the model's
    // timer then lies at its `NEVER`, and the driver's wall-clock deadline for it must
    // saturate, not overflow the executor's clock.
    let dir = TestDir::new();
    let shape = LogShape {
        capacity: 64,
        ..LogShape::default()
    };
    let addr = start_server("DMP+noDDIO+PM-RQWRB", dir.pool("never"), shape).to_string();
    let mut profile = LatencyProfile::default_profile();
    profile.rnic.ack_timeout_ns = u64::MAX;
    // Bounded: a driver that died of the overflow leaves the appends waiting for ever.
    let appended = run_client(remora_exec::time::timeout(
        std::time::Duration::from_secs(60),
        async {
            let (_node, client) = client_with(&addr, Primitive::Write, &profile).await;
            let mut log = LogClient::new(client, shape, Update::Singleton);
            for _ in 0..20 {
                log.append().await.unwrap();
            }
            20
        },
    ));
    assert_eq!(appended, Ok(20), "the client's appends did not finish");
}

/// A server that cannot start leaves its pool as it was: one too small for a client is
/// refused before its layout is recorded (an existing pool keeps its bytes; none is
/// created at a new path), and one that cannot listen never opens its pool. Before, the
/// refused start recorded its layout first, and the pool could then be served with no
/// options at all.
#[test]
fn a_refused_start_leaves_the_pool_as_it_was() {
    use remora_soft::pool::{Pool, PoolBytes, MIN_POOL_BYTES};
    use remora_soft::server::ServeError;
    let dir = TestDir::new();
    let start = |listen: &str, pool: PathBuf, region_len: u64| {
        let opts = ServeOptions {
            listen: listen.to_string(),
            pool,
            pool_bytes: PoolBytes::AtLeast(MIN_POOL_BYTES),
            config: "DMP+noDDIO+PM-RQWRB".parse().unwrap(),
            profile: LatencyProfile::default_profile(),
            setup: ServerSetup {
                region_len,
                ..ServerSetup::default()
            },
            lease: LEASE,
            admission: Admission::DEFAULT,
            fault: None,
            slot_task: None,
        };
        remora_exec::block_on(serve(opts, |_| panic!("it must not start")))
            .expect_err("the start is refused")
    };
    // A new path, a size too small for one client: no file is made.
    let fresh = dir.pool("fresh");
    let e = start("127.0.0.1:0", fresh.clone(), 4 << 20);
    assert!(matches!(e, ServeError::PoolTooSmall { .. }), "{e}");
    assert!(
        e.to_string().contains("fresh"),
        "the error names the pool: {e}"
    );
    assert!(!fresh.exists());
    // A region no pool can hold (its footprint's sums would wrap): refused before any file.
    for region in [u64::MAX - 100, 8] {
        let e = start("127.0.0.1:0", fresh.clone(), region);
        assert!(
            matches!(e, ServeError::RegionBytes(r) if r == region),
            "{e}"
        );
        assert!(!fresh.exists());
    }
    // An existing pool without a layout record: refused, and byte for byte as it was.
    let old = dir.pool("old");
    drop(Pool::open_or_create(&old, MIN_POOL_BYTES).unwrap());
    let before = std::fs::read(&old).unwrap();
    let e = start("127.0.0.1:0", old.clone(), 4 << 20);
    assert!(matches!(e, ServeError::PoolTooSmall { .. }), "{e}");
    assert!(
        std::fs::read(&old).unwrap() == before,
        "the pool was written"
    );
    // It still serves with options that fit it.
    let addr = start_server_on(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        old,
        LogShape::default(),
        MIN_POOL_BYTES,
    );
    assert!(addr.port() > 0);
    // A server that cannot listen does not touch its pool either.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    let unheard = dir.pool("unheard");
    let e = start(&busy, unheard.clone(), 64 << 10);
    assert!(matches!(e, ServeError::Listen { .. }), "{e}");
    assert!(!unheard.exists());
}

/// A slot cleared for a new client does not stall the server's other connections: the
/// clear goes a chunk at a time with the others served in between. Counted, not timed:
/// how many persists a connected client completes while a new client's connection is
/// being set up, for a slot never used (no clear: the baseline, the handshake's round
/// trips) and for a slot taken over (its 64 MiB cleared, in 1 MiB chunks: the busy
/// client's next persist is served after each, so about one per chunk). A clear that held
/// the server's thread would leave the second count near the first; one that yielded to
/// the other tasks but not to the sockets did (the sockets were looked at only after the
/// whole clear).
#[test]
fn other_connections_are_served_while_a_slot_is_cleared() {
    let dir = TestDir::new();
    // Three slots, no lease: a slot left is taken over at once.
    let addr = takeover_server(&dir, 64 << 20, 3);
    run_client(async {
        // Slot 0 gets a client that leaves: the slot to take over.
        let (x, _, _) = claim_and_mark(&addr, 0, 1).await.unwrap();
        x.close();
        // The busy client, in slot 1, persisting until told to stop.
        let done = Rc::new(Cell::new(0u64));
        let stop = Rc::new(Cell::new(false));
        let busy = {
            let (addr, done, stop) = (addr.clone(), done.clone(), stop.clone());
            remora_exec::spawn_local(async move {
                let (_n, mut client) = client_of(&addr, Primitive::Write).await;
                while !stop.get() {
                    client.persist(128, &[9; 64]).await.unwrap();
                    done.set(done.get() + 1);
                }
            })
        };
        // Let it get going.
        while done.get() < 10 {
            remora_exec::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        // Persists completed while a new client connects and reads its region.
        let during_connect = |key: u64| {
            let (addr, done) = (addr.clone(), done.clone());
            async move {
                let before = done.get();
                let (node, found, _) = claim_and_mark(&addr, key, 3).await.unwrap();
                (done.get() - before, node, found)
            }
        };
        // Slot 2, never used: no clear.
        let (baseline, c, found) = during_connect(0).await;
        assert_eq!(found, vec![0; 64]);
        // Slot 0 (or 2, left just now): taken over, cleared first.
        c.close();
        let (clearing, _b, found) = during_connect(0).await;
        assert_eq!(
            found,
            vec![0; 64],
            "the slot was cleared for the new client"
        );
        stop.set(true);
        busy.await.unwrap();
        assert!(
            clearing >= baseline + 16,
            "the busy client completed {clearing} persists during a takeover's clear and \
             {baseline} during a connection without one: the clear held the server"
        );
    });
}

/// `pool_bytes_for` gives a pool of exactly that many slots, with the receive ring in PM
/// (in the slot) or in DRAM: a byte less holds one fewer; also where the keys' table needs
/// a second page (a page holds 512 keys).
#[test]
fn pool_bytes_for_gives_exactly_that_many_slots() {
    let dir = TestDir::new();
    let cases = [
        (
            "DMP+noDDIO+PM-RQWRB",
            20_000,
            vec![(2u64, 0u64), (3, 0), (3, 1)],
        ),
        ("DMP+DDIO+DRAM-RQWRB", 20_000, vec![(2, 0), (3, 0), (3, 1)]),
        ("DMP+noDDIO+PM-RQWRB", 1, vec![(513, 0), (513, 1)]),
    ];
    for (config, capacity, counts) in cases {
        let shape = LogShape {
            capacity,
            ..LogShape::default()
        };
        let setup = ServerSetup {
            region_len: shape.region_len(),
            ..ServerSetup::default()
        };
        let rqwrb = config.parse::<ServerConfig>().unwrap().rqwrb;
        for (n, less) in counts {
            let bytes = remora_soft::server::pool_bytes_for(n, &setup, rqwrb) - less;
            let name = format!("{config}-{capacity}-{n}-{less}");
            let (_, _, slots) =
                start_server_watched("127.0.0.1:0", config, dir.pool(&name), shape, bytes, LEASE);
            assert_eq!(slots as u64, n - less, "{name}: {bytes} bytes");
        }
    }
}

/// A raw new client's handshake with `addr`, up to its `Ready`: the stream, to read the
/// server's next frames from.
fn raw_ready(addr: &str) -> std::net::TcpStream {
    use remora_soft::cm::Cm;
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(2 * remora_soft::cm::HANDSHAKE_TIMEOUT))
        .unwrap();
    s.write_all(&Cm::Hello { key: 0 }.emit()).unwrap();
    assert!(matches!(raw_next(&mut s), Cm::Assign { .. }));
    let ready = Cm::Ready {
        qp: remora_model::verbs::QpNum(0),
    };
    s.write_all(&ready.emit()).unwrap();
    s
}

/// The server's next connection-manager frame on `s`.
fn raw_next(s: &mut std::net::TcpStream) -> remora_soft::cm::Cm {
    use std::io::Read;
    let mut b = [0u8; remora_soft::cm::CM_FRAME];
    s.read_exact(&mut b).unwrap();
    remora_soft::cm::Cm::parse(&b).unwrap()
}

/// A new client given a slot another client had is told, after each chunk of the slot's
/// clear, how far it got (each `Clearing` frame restarts the client's wait, so a clear of
/// gigabytes outlasts no client's patience). A new client that leaves during the clear
/// leaves the slot clean and nobody's: the next new client is given it at once, not made
/// to wait for the same clear again (before, the slot kept a key nobody had learned, and
/// was cleared again for every client that gave up), and finds none of the slot's last
/// client's bytes.
#[test]
fn a_new_client_is_told_how_its_slots_clear_goes_and_one_that_leaves_leaves_it_clean() {
    use remora_soft::cm::Cm;
    let dir = TestDir::new();
    // One slot, no lease: a slot left is taken over at once.
    let addr = takeover_server(&dir, 128 << 20, 1);
    // A client that leaves its mark: the slot is taken over by the next.
    mark_in_turn(&addr, 1).unwrap();
    let mut b = raw_ready(&addr);
    let mut steps = Vec::new();
    let key = loop {
        match raw_next(&mut b) {
            Cm::Clearing { done, total } => steps.push((done, total)),
            Cm::Accepted { key, .. } => break key,
            other => panic!("{other:?} during a takeover's handshake"),
        }
    };
    assert_ne!(key, 0);
    // A 1 MiB chunk at a time: one frame each, each further on, to the total.
    let total = steps[0].1;
    assert!(total >= 128 << 20, "{total} bytes cleared");
    assert_eq!(steps.len() as u64, total.div_ceil(1 << 20), "{steps:?}");
    assert!(steps.windows(2).all(|w| w[0].0 < w[1].0 && w[1].1 == total));
    assert_eq!(steps.last().unwrap().0, total);
    drop(b);
    // A library client takes the slot over (cleared for it), and leaves its mark.
    let (found, cleared) = run_client(claim_mark_and_count(&addr, 2)).unwrap();
    assert_eq!((found, cleared), (vec![0; 64], total));
    // The next new client leaves as soon as its clear begins.
    drop(raw_ready(&addr));
    // The one after is given the slot without a clear, and finds it clean. (It may come
    // while the clear of the one that left is still on: then it is refused, and tries
    // again.)
    let (found, cleared) = claim_when_free(&addr, 3);
    assert_eq!(cleared, 0, "the slot was cleared again");
    assert_eq!(
        found,
        vec![0; 64],
        "the slot was left as its last client left it"
    );
}

/// The negative control of the test above: a server that stops a slot's clear once the
/// new client it clears for is found gone (`--fault abandon-clear`) hands the next new
/// client the rest of the old client's region. Without this the test above could not be
/// shown to catch it (the crash loop's takeover targets catch it too, within a few dozen
/// SIGKILLs).
#[test]
fn a_clear_abandoned_when_its_client_leaves_hands_the_next_client_old_bytes() {
    let dir = TestDir::new();
    let fault = Some(remora_soft::server::ServeFault::AbandonClear);
    let addr = takeover_server_faulty(&dir, "DMP+noDDIO+PM-RQWRB", 128 << 20, 1, fault);
    mark_in_turn(&addr, 1).unwrap();
    // Taken over (its clear finishes: nobody leaves), then marked at the region's end.
    let (found, _) = run_client(claim_mark_and_count(&addr, 2)).unwrap();
    assert_eq!(found, vec![0; 64]);
    // A new client leaves as soon as its clear begins; this server stops clearing then,
    // long before the region's last MiB.
    drop(raw_ready(&addr));
    let (found, cleared) = claim_when_free(&addr, 3);
    assert_eq!(cleared, 0);
    assert_eq!(found, vec![2; 64], "the wrong server was not caught");
}

/// [`claim_mark_and_count`] in a runtime of its own, tried again while the server
/// refuses it (the only slot still busy with the clear for a client that left).
fn claim_when_free(addr: &str, mark: u8) -> (Vec<u8>, u64) {
    for _ in 0..20 {
        match run_client(claim_mark_and_count(addr, mark)) {
            Err(remora_soft::client::ConnectError::Refused { .. }) => {}
            other => return other.unwrap(),
        }
    }
    run_client(claim_mark_and_count(addr, mark)).unwrap()
}

/// A new client's connection that reads its region's last 64 bytes (the clear's last
/// chunk, so a clear cut short leaves them) and then marks them: what it read, and how
/// many bytes the server cleared for it.
async fn claim_mark_and_count(
    addr: &str,
    mark: u8,
) -> Result<(Vec<u8>, u64), remora_soft::client::ConnectError> {
    let mut c =
        remora_soft::client::connect_as(addr, &LatencyProfile::default_profile(), 0).await?;
    let hello = c
        .client
        .connect(Primitive::Write, Shape::default())
        .await
        .unwrap();
    let at = hello.region_len - 64;
    let before = c.client.read(at, 64).await.unwrap();
    c.client.persist(at, &[mark; 64]).await.unwrap();
    Ok((before, c.cleared))
}

/// A scripted server: it takes a new client's handshake up to its `Ready`, then sends
/// `frames`, each after its pause, and waits for the client to go.
fn scripted_server(
    frames: Vec<(remora_soft::cm::Cm, std::time::Duration)>,
) -> (String, std::thread::JoinHandle<()>) {
    use std::io::{Read, Write};
    raw_server(move |mut s| {
        raw_serve_until_ready(&mut s);
        for (f, pause) in frames {
            std::thread::sleep(pause);
            if s.write_all(&f.emit()).is_err() {
                return; // the client gave up
            }
        }
        // Until the client goes.
        let _ = s.read_to_end(&mut Vec::new());
    })
}

/// A scripted server's side of a new client's handshake up to its `Ready`: its `Hello`
/// read, an `Assign` sent (node 1, a `DMP+noDDIO+PM-RQWRB` server), its `Ready` read.
fn raw_serve_until_ready(s: &mut std::net::TcpStream) {
    use remora_soft::cm::Cm;
    use std::io::Write;
    assert_eq!(raw_next(s), Cm::Hello { key: 0 });
    let assign = Cm::Assign {
        client: 1,
        server: 0,
        config: "DMP+noDDIO+PM-RQWRB".parse().unwrap(),
    };
    s.write_all(&assign.emit()).unwrap();
    assert!(matches!(raw_next(s), Cm::Ready { .. }));
}

/// A library client's handshake with `addr`, up to the server's `Accepted`.
fn finish_handshake(
    addr: &str,
) -> Result<remora_soft::client::Finished, remora_soft::client::ConnectError> {
    use remora_model::rnic::QpAttr;
    use remora_verbs::Verbs;
    run_client(async {
        let profile = LatencyProfile::default_profile();
        let opening = remora_soft::client::open(addr, &profile, None).await?;
        let v = opening.node().clone();
        let pd = v.alloc_pd().unwrap();
        let (scq, rcq) = (v.create_cq(4).unwrap(), v.create_cq(4).unwrap());
        let qp = v.create_qp(pd, scq, rcq, QpAttr::default()).unwrap();
        let done = opening.finish_keyed(qp).await?;
        done.node.close();
        Ok(done)
    })
}

/// A client waits through a slot's clear for as long as the server reports progress, even
/// when the whole clear takes longer than [`HANDSHAKE_TIMEOUT`] (before, it gave up
/// then, whatever the server was doing).
///
/// [`HANDSHAKE_TIMEOUT`]: remora_soft::cm::HANDSHAKE_TIMEOUT
#[test]
fn a_client_waits_through_a_clear_longer_than_its_handshake_timeout() {
    use remora_soft::cm::{Cm, CLEAR_STEP, HANDSHAKE_TIMEOUT};
    let pause = std::time::Duration::from_millis(500);
    let n = (HANDSHAKE_TIMEOUT + 2 * pause).as_millis() / pause.as_millis();
    let total = 1 << 30;
    let mut frames: Vec<_> = (1..=n as u64)
        .map(|i| {
            let done = i * CLEAR_STEP;
            (Cm::Clearing { done, total }, pause)
        })
        .collect();
    frames.push((Cm::Clearing { done: total, total }, pause));
    let accepted = Cm::Accepted {
        qp: remora_model::verbs::QpNum(0),
        key: 5,
    };
    frames.push((accepted, std::time::Duration::ZERO));
    let (addr, server) = scripted_server(frames);
    let t0 = wall();
    let done = finish_handshake(&addr).unwrap();
    assert_eq!((done.key, done.cleared), (5, total));
    assert!(t0.elapsed() > HANDSHAKE_TIMEOUT);
    server.join().unwrap();
}

/// A client waits only while the clear progresses: a server whose `Clearing` frames repeat
/// themselves, move by less than [`CLEAR_STEP`] short of the end, or change their total is
/// not clearing, and the client ends the handshake with a protocol error (it would wait
/// for ever on such a server).
///
/// [`CLEAR_STEP`]: remora_soft::cm::CLEAR_STEP
#[test]
fn a_client_refuses_clearing_frames_that_do_not_progress() {
    use remora_soft::cm::{Cm, CLEAR_STEP};
    let total = 64 * CLEAR_STEP;
    let step = |done, total| (Cm::Clearing { done, total }, std::time::Duration::ZERO);
    for (what, frames) in [
        (
            "repeated",
            vec![step(CLEAR_STEP, total), step(CLEAR_STEP, total)],
        ),
        (
            "too small a step",
            vec![step(CLEAR_STEP, total), step(CLEAR_STEP + 1, total)],
        ),
        (
            "another total",
            vec![step(CLEAR_STEP, total), step(2 * CLEAR_STEP, 2 * total)],
        ),
        ("too small a first step", vec![step(CLEAR_STEP - 1, total)]),
    ] {
        let (addr, server) = scripted_server(frames);
        match finish_handshake(&addr) {
            Err(e @ remora_soft::client::ConnectError::ClearStalled { .. }) => {
                assert!(e.to_string().contains("not progress"), "{what}: {e}")
            }
            other => panic!("{what}: {:?}", other.map(|f| f.cleared)),
        }
        server.join().unwrap();
    }
    // The last frame may be a small step: to the end.
    let accepted = Cm::Accepted {
        qp: remora_model::verbs::QpNum(0),
        key: 5,
    };
    let (addr, server) = scripted_server(vec![
        step(total - 1, total),
        step(total, total),
        (accepted, std::time::Duration::ZERO),
    ]);
    assert_eq!(finish_handshake(&addr).unwrap().cleared, total);
    server.join().unwrap();
}

/// A server that closes the connection in the middle of the handshake (it stopped, say) is
/// reported as having closed it, not as unreachable ("cannot reach ...: unexpected end of
/// file" before).
#[test]
fn a_client_says_when_the_server_closed_its_handshake() {
    use remora_soft::cm::Cm;
    let (addr, server) = raw_server(|mut s| {
        assert_eq!(raw_next(&mut s), Cm::Hello { key: 0 });
    });
    let r = run_client(async {
        remora_soft::client::connect(&addr, &LatencyProfile::default_profile())
            .await
            .map(|_| ())
    });
    server.join().unwrap();
    match r {
        Err(e @ remora_soft::client::ConnectError::Lost { .. }) => {
            let said = e.to_string();
            assert!(
                said.contains("during the handshake: the server closed it"),
                "{said}"
            );
        }
        other => panic!("expected the connection lost: {other:?}"),
    }
}

/// A slot's clear covers its PM and, with receive buffers in DRAM, its DRAM ring after it;
/// a range's last chunk is short when the region is not a whole number of MiB. The server
/// still reports in whole steps (at least `CLEAR_STEP` more each time, or the end), so a
/// library client takes such a slot over (before, the short chunk's report ended its
/// handshake as a protocol error whenever a DRAM range followed).
#[test]
fn a_slot_of_two_ranges_and_an_odd_size_is_reported_in_whole_steps() {
    use remora_soft::cm::{Cm, CLEAR_STEP};
    for config in ["DMP+DDIO+DRAM-RQWRB", "DMP+noDDIO+PM-RQWRB"] {
        let dir = TestDir::new();
        let addr = takeover_server_of(&dir, config, 1_500_032, 1);
        mark_in_turn(&addr, 1).unwrap();
        let mut b = raw_ready(&addr);
        let (mut last, mut total) = (0, None);
        loop {
            match raw_next(&mut b) {
                Cm::Clearing { done, total: t } => {
                    assert_eq!(*total.get_or_insert(t), t, "{config}");
                    assert!(
                        done == t || done >= last + CLEAR_STEP,
                        "{config}: {last} then {done} of {t}"
                    );
                    last = done;
                }
                Cm::Accepted { .. } => break,
                other => panic!("{config}: {other:?} during a takeover's handshake"),
            }
        }
        assert_eq!(
            Some(last),
            total,
            "{config}: the clear was reported to its end"
        );
        drop(b);
        let (found, cleared) = run_client(claim_mark_and_count(&addr, 2)).unwrap();
        assert_eq!((found, cleared), (vec![0; 64], last), "{config}");
    }
}

/// A new client that leaves before `Accepted` leaves its slot nobody's and clean however
/// small the slot: here its clear is one chunk, reported once, at its end, which a closed
/// connection still takes, so the server learns the client left from the connection
/// itself (closed after the clear, or refusing `Accepted`; either alone passes this, with
/// neither it fails). The next new client is given the slot without a clear, and finds
/// nothing of the slot's last client.
#[test]
fn a_new_client_that_leaves_before_accepted_leaves_a_small_slot_clean() {
    let dir = TestDir::new();
    // The smallest pool, with room for one 512 KiB region (and its ring): a clear of less
    // than a MiB.
    let shape = LogShape {
        capacity: (512 << 10) / 64,
        ..LogShape::default()
    };
    let (addr, _, slots) = start_server_watched(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        dir.pool("small"),
        shape,
        remora_soft::pool::MIN_POOL_BYTES,
        std::time::Duration::ZERO,
    );
    assert_eq!(slots, 1);
    let addr = addr.to_string();
    let (found, cleared) = run_client(claim_mark_and_count(&addr, 1)).unwrap();
    assert_eq!((found, cleared), (vec![0; 64], 0));
    // Takes the slot over, and leaves right after its `Ready`.
    drop(raw_ready(&addr));
    let (found, cleared) = claim_when_free(&addr, 2);
    assert_eq!(cleared, 0, "the slot was cleared again");
    assert_eq!(found, vec![0; 64], "the slot kept its last client's mark");
}

/// Connections that open and stop halfway each hold a place among those in their
/// handshake until [`HANDSHAKE_TIMEOUT`]: past the bound from one address, or from all,
/// the next connection is refused at once as busy (the library's client says so), while
/// another address still gets in, and a place given back is the next connection's.
///
/// [`HANDSHAKE_TIMEOUT`]: remora_soft::cm::HANDSHAKE_TIMEOUT
#[test]
fn connections_past_the_handshake_bounds_are_refused_as_busy_at_once() {
    use remora_soft::cm::{Cm, RefuseCode};
    use std::io::{Read, Write};
    let dir = TestDir::new();
    let (addr, _, _) = start_server_with(ServeOptions {
        listen: "127.0.0.1:0".into(),
        pool: dir.pool("busy"),
        pool_bytes: remora_soft::pool::PoolBytes::AtLeast(8 << 20),
        config: "DMP+noDDIO+PM-RQWRB".parse().unwrap(),
        profile: LatencyProfile::default_profile(),
        setup: ServerSetup::default(),
        lease: LEASE,
        admission: Admission {
            handshakes: 4,
            per_address: 3,
        },
        fault: None,
        slot_task: None,
    });
    // A connection from 127.0.0.`host` (all of 127/8 is the loopback).
    let from = |host: u8| -> std::net::TcpStream {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.bind(&std::net::SocketAddr::from(([127, 0, 0, host], 0)).into())
            .unwrap();
        s.connect(&addr.into()).unwrap();
        let s: std::net::TcpStream = s.into();
        // Well under the handshake's time-out: a refusal comes at once.
        s.set_read_timeout(Some(remora_soft::cm::HANDSHAKE_TIMEOUT / 4))
            .unwrap();
        s
    };
    // Admitted: its Hello is answered with Assign, and it stops there.
    let halfway = |host: u8| {
        let mut s = from(host);
        s.write_all(&Cm::Hello { key: 0 }.emit()).unwrap();
        assert!(
            matches!(raw_next(&mut s), Cm::Assign { .. }),
            "a connection from 127.0.0.{host} is admitted"
        );
        s
    };
    // Refused: the server says so unasked, and closes.
    let refused = |host: u8| {
        let t0 = wall();
        let mut s = from(host);
        let mut got = Vec::new();
        s.read_to_end(&mut got)
            .expect("the server refuses and closes before the read's time-out");
        assert_eq!(
            Cm::parse(&got),
            Ok(Cm::Refused {
                code: RefuseCode::Busy
            }),
            "from 127.0.0.{host}"
        );
        assert!(t0.elapsed() < remora_soft::cm::HANDSHAKE_TIMEOUT / 4);
    };
    let one: Vec<_> = (0..3).map(|_| halfway(1)).collect();
    // The address's bound: a fourth from it is refused, by the library's client too.
    refused(1);
    match mark_in_turn(&addr.to_string(), 1) {
        Err(remora_soft::client::ConnectError::Refused { code, .. }) => {
            assert_eq!(code, RefuseCode::Busy)
        }
        other => panic!("the client is refused as busy: {other:?}"),
    }
    // Another address gets in, up to the bound of all.
    let two = halfway(2);
    refused(3);
    // A place given back (the peer left) is the next connection's, once the server has
    // seen the end.
    drop(one);
    let mut tries = 0;
    let three = loop {
        let mut s = from(3);
        let _ = s.write_all(&Cm::Hello { key: 0 }.emit());
        let mut b = [0u8; remora_soft::cm::CM_FRAME];
        match s.read_exact(&mut b).map(|_| Cm::parse(&b)) {
            Ok(Ok(Cm::Assign { .. })) => break s,
            Ok(Ok(Cm::Refused {
                code: RefuseCode::Busy,
            }))
            | Err(_)
                if tries < 100 =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => panic!("a connection from 127.0.0.3 is admitted: {other:?}"),
        }
    };
    drop((two, three));
    // Once the others are gone, a client is served.
    let mut tries = 0;
    let marked = loop {
        match mark_in_turn(&addr.to_string(), 7) {
            Ok(m) => break m,
            // The server may not have seen the others' ends yet.
            Err(remora_soft::client::ConnectError::Refused { code, .. })
                if code == RefuseCode::Busy && tries < 100 =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("a client is served: {e}"),
        }
    };
    assert_eq!(marked.len(), 64);
}

/// Review: a returning client whose reconnection fails just before `Accepted` (its
/// connection reset) has had a connection end: its slot is kept for it for a lease from
/// then, as after any of its connections. The server leaves the slot's lease as it was,
/// so a new client takes the slot over (clearing it) once the *old* lease runs out, and
/// the client, coming back within a lease of its last connection, finds its acknowledged
/// data gone (`NotOwner`).
#[test]
fn a_returning_client_whose_reconnection_breaks_keeps_its_slot_for_a_lease() {
    use remora_soft::cm::Cm;
    use std::io::Write;
    use std::time::Duration;
    let dir = TestDir::new();
    let shape = LogShape {
        capacity: (512 << 10) / 64,
        ..LogShape::default()
    };
    let lease = Duration::from_secs(4);
    let (addr, _, slots) = start_server_watched(
        "127.0.0.1:0",
        "DMP+noDDIO+PM-RQWRB",
        dir.pool("relet"),
        shape,
        remora_soft::pool::MIN_POOL_BYTES,
        lease,
    );
    assert_eq!(slots, 1);
    let addr = addr.to_string();
    // The client persists its mark and leaves.
    let key = run_client(async {
        let (a, _, key) = claim_and_mark(&addr, 0, 1).await.unwrap();
        a.close();
        key
    });
    let t0 = wall();
    std::thread::sleep(Duration::from_secs(3));
    // It comes back within its lease; this connection is reset right after its `Ready`,
    // before the server's `Accepted`.
    {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.write_all(&Cm::Hello { key }.emit()).unwrap();
        assert!(matches!(raw_next(&mut s), Cm::Assign { .. }));
        let ready = Cm::Ready {
            qp: remora_model::verbs::QpNum(0),
        };
        s.write_all(&ready.emit()).unwrap();
        socket2::SockRef::from(&s)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    } // RST
      // Past the first lease, well within a lease of the failed connection: a new client.
    std::thread::sleep((t0 + Duration::from_millis(4500)).saturating_duration_since(wall()));
    let newcomer = run_client(async {
        match claim_and_mark(&addr, 0, 2).await {
            Ok((n, before, _)) => {
                n.close();
                Some(before[0])
            }
            Err(_) => None,
        }
    });
    // The client comes back again: its slot, with its mark.
    let back = run_client(async {
        match claim_and_mark(&addr, key, 3).await {
            Ok((n, before, _)) => {
                n.close();
                Ok(before[0])
            }
            Err(e) => Err(e.to_string()),
        }
    });
    assert_eq!(
        (newcomer, back),
        (None, Ok(1)),
        "(what a new client found in the slot, what the returning client found)"
    );
}

#[test]
fn a_slot_task_works_in_its_clients_region_while_the_client_is_connected() {
    use remora_verbs::{Space, Verbs};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let dir = TestDir::new();
    // The task counts in the first word of its client's region, and says when it ended.
    let ended = Arc::new(AtomicU64::new(0));
    let e = ended.clone();
    let task = remora_soft::server::SlotTask {
        name: "counter".into(),
        make: Arc::new(move |node, region, running| {
            let e = e.clone();
            Box::pin(async move {
                let mut n = 0u64;
                while running.get() {
                    n += 1;
                    node.store(Space::Pm, region.addr, &n.to_le_bytes());
                    node.persist_local(region.addr, 8).await;
                    node.compute(remora_model::time::Duration::from_micros(200))
                        .await;
                }
                e.fetch_add(1, Ordering::SeqCst);
            })
        }),
    };
    let shape = LogShape {
        capacity: 16,
        ..LogShape::default()
    };
    let (addr, _, _) = start_server_with(ServeOptions {
        listen: "127.0.0.1:0".into(),
        pool: dir.pool("task"),
        pool_bytes: remora_soft::pool::PoolBytes::AtLeast(8 << 20),
        config: "DMP+noDDIO+PM-RQWRB".parse().unwrap(),
        profile: LatencyProfile::default_profile(),
        setup: ServerSetup {
            region_len: shape.region_len(),
            ..ServerSetup::default()
        },
        lease: LEASE,
        admission: Admission::DEFAULT,
        fault: None,
        slot_task: Some(task),
    });
    let addr = addr.to_string();
    run_client(async {
        let (node, mut client) = client_of(&addr, Primitive::Write).await;
        // The count goes up while the client is connected: the task runs, in its region.
        let word = |b: Vec<u8>| u64::from_le_bytes(b[..8].try_into().unwrap());
        let first = word(client.read(0, 8).await.unwrap());
        let mut later = first;
        for _ in 0..500 {
            remora_exec::time::sleep(std::time::Duration::from_millis(2)).await;
            later = word(client.read(0, 8).await.unwrap());
            if later > first {
                break;
            }
        }
        assert!(later > first, "the count stayed at {first}");
        assert_eq!(ended.load(Ordering::SeqCst), 0, "the task ended early");
        drop(client);
        drop(node);
    });
    // The connection's end ends the task.
    for _ in 0..500 {
        if ended.load(Ordering::SeqCst) == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        ended.load(Ordering::SeqCst),
        1,
        "the task outlived its connection"
    );
}
