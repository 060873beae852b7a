//! A durable-RPC server (`rpc-serve`) that clients connect to and leave, many times over
//! and in every way (cleanly, by reset, mid-handshake, mid-operation), gives back what
//! each connection took: its file descriptors return to where they were, and its RNIC
//! holds no more queue pairs, CQs, regions or protection domains than at start-up (each
//! connection's log has at most one set, made ready for its next client).

use remora_model::profile::LatencyProfile;
use remora_model::ServerConfig;
use remora_rpc::durable::DurableOptions;
use remora_rpc::real::{serve_durable, ClientSettings, RealClient, RealServeOptions, RealStarted};
use remora_rpc::{Design, FlushForm, Op, RpcClient};
use std::sync::mpsc;
use std::time::Duration;

/// Rounds of each way to leave.
const ROUNDS: usize = 10;

fn options() -> DurableOptions {
    let mut o = DurableOptions::new(Design::WFlushRpc);
    o.flush.form = FlushForm::Emulated;
    o.capacity = 8;
    o.objects = 4;
    o.max_value = 200;
    o
}

fn start(pool: std::path::PathBuf) -> RealStarted {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let o = RealServeOptions {
            listen: "127.0.0.1:0".into(),
            pool,
            pool_bytes: remora_soft::pool::PoolBytes::AtLeast(2 << 20),
            config: "DMP+noDDIO+PM-RQWRB".parse::<ServerConfig>().unwrap(),
            profile: LatencyProfile::default_profile(),
            opts: options(),
            connections: 2,
            journal: None,
            lease: Duration::ZERO,
            admission: remora_soft::server::Admission::DEFAULT,
        };
        let r = remora_exec::block_on(serve_durable(o, move |s| tx.send(s.clone()).unwrap()));
        if let Err(e) = r {
            panic!("server: {e}");
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("server started")
}

/// Claims a new connection on a raw socket and reads the server's hello, whose key it
/// returns.
fn raw_claim(addr: &str) -> (std::net::TcpStream, u64) {
    use remora_rpc::real::DurableClaim;
    use remora_soft::cm::{Cm, CM_FRAME};
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&Cm::Hello { key: 0 }.emit()).unwrap();
    s.write_all(&DurableClaim { node: 0, key: 0 }.emit())
        .unwrap();
    let mut f = [0u8; CM_FRAME];
    s.read_exact(&mut f).unwrap();
    assert!(matches!(Cm::parse(&f), Ok(Cm::Assign { .. })), "{f:?}");
    let mut hello = [0u8; remora_rpc::real::HELLO_BYTES];
    s.read_exact(&mut hello).unwrap();
    let key = remora_rpc::real::DurableHello::parse(&hello).unwrap().key;
    (s, key)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The process's open descriptors once they are back to `at_most`, or after 10 s.
fn settled_fds(at_most: usize) -> usize {
    #[allow(clippy::disallowed_methods)] // a real server's closes take real time
    let start = std::time::Instant::now();
    loop {
        let n = open_fds();
        if n <= at_most || start.elapsed() > Duration::from_secs(10) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    remora_exec::block_on(async { remora_exec::time::timeout(Duration::from_secs(60), f).await })
        .expect("finished within 60 s")
}

#[test]
fn connections_that_come_and_go_leave_no_descriptors_behind() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path().join("pool"));
    let addr = s.addr.to_string();
    let objects = |o: remora_model::rnic::Objects| [o.qps, o.cqs, o.mrs, o.pds];
    let at_start = objects(s.objects.get());
    let p = LatencyProfile::default_profile();
    // One served connection first (whatever is made once, on first use, is made).
    run(async {
        let mut c = RealClient::connect(&addr, &p, &ClientSettings::default())
            .await
            .unwrap();
        c.client.drain().await.unwrap();
        c.node.close();
    });
    std::thread::sleep(Duration::from_millis(300));
    let base = open_fds();
    for round in 0..ROUNDS {
        // Served, then closed cleanly after its work.
        run(async {
            let mut c = RealClient::connect(&addr, &p, &ClientSettings::default())
                .await
                .unwrap();
            let put = Op::Put {
                key: round as u64 % 4,
                value: vec![round as u8; 50],
            };
            c.client.call(put).await.unwrap();
            c.client.drain().await.unwrap();
            c.node.close();
        });
        // Served, then gone mid-operation (its node closed with a Put in flight).
        run(async {
            let c = RealClient::connect(&addr, &p, &ClientSettings::default())
                .await
                .unwrap();
            let mut client = c.client;
            let put = Op::Put {
                key: 1,
                value: vec![7; 100],
            };
            let _ = remora_exec::time::timeout(Duration::from_micros(50), client.call(put)).await;
            c.node.close();
        });
        // Gone mid-handshake: its Hello only, or nothing at all.
        {
            use std::io::Write;
            let mut raw = std::net::TcpStream::connect(&addr).unwrap();
            raw.write_all(&remora_soft::cm::Cm::Hello { key: 0 }.emit())
                .unwrap();
            drop(raw);
            drop(std::net::TcpStream::connect(&addr).unwrap());
            // After the server's hello, by reset; after its Ready (the server's QP is
            // connected), by reset; after Accepted, by reset.
            for step in 0..3 {
                let (mut raw, _) = raw_claim(&addr);
                use remora_soft::cm::{Cm, CM_FRAME};
                use std::io::Read;
                if step > 0 {
                    let qp = remora_model::verbs::QpNum(77);
                    raw.write_all(&Cm::Ready { qp }.emit()).unwrap();
                }
                if step > 1 {
                    let mut f = [0u8; CM_FRAME];
                    raw.read_exact(&mut f).unwrap();
                    assert!(matches!(Cm::parse(&f), Ok(Cm::Accepted { .. })), "{f:?}");
                }
                socket2::SockRef::from(&raw)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
            }
        }
    }
    #[allow(clippy::disallowed_methods)] // a real server's closes take real time
    let t = std::time::Instant::now();
    while objects(s.objects.get()) > at_start && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let live = objects(s.objects.get());
    eprintln!("objects: {at_start:?} at start, {live:?} after");
    assert!(
        live.iter().zip(at_start).all(|(l, s)| *l <= s),
        "live RNIC objects [qps, cqs, mrs, pds] {live:?} after {ROUNDS} rounds of \
         connections, {at_start:?} at start-up"
    );
    let after = settled_fds(base);
    eprintln!("fds: {base} before, {after} after");
    assert!(
        after <= base,
        "{after} descriptors open after {ROUNDS} rounds of connections, {base} before"
    );
}
