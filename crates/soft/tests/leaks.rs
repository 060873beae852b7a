//! A `serve` server that clients connect to and leave, many times over and in every way
//! (cleanly, by reset, mid-handshake, mid-operation, mid-clear), gives back what each
//! connection took: its RNIC's live objects and the process's file descriptors return to
//! where they were.

use remora::{Primitive, ServerSetup, Shape};
use remora_model::profile::LatencyProfile;
use remora_model::rnic::Objects;
use remora_model::ServerConfig;
use remora_soft::cm::{Cm, CM_FRAME};
use remora_soft::server::{serve, Admission, LiveObjects, ServeOptions};
use std::sync::mpsc;
use std::time::Duration;

const ROUNDS: usize = 10;

/// The tests of this file run one at a time: one counts the process's descriptors.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A two-slot server with no lease (every connection's slot goes to the next new client,
/// cleared), its pool at `pool`.
fn options(pool: std::path::PathBuf) -> ServeOptions {
    let config: ServerConfig = "DMP+noDDIO+PM-RQWRB".parse().unwrap();
    let setup = ServerSetup {
        region_len: 1 << 20,
        ..ServerSetup::default()
    };
    let bytes = remora_soft::server::pool_bytes_for(2, &setup, config.rqwrb)
        .max(remora_soft::pool::MIN_POOL_BYTES);
    ServeOptions {
        listen: "127.0.0.1:0".into(),
        pool,
        pool_bytes: remora_soft::pool::PoolBytes::AtLeast(bytes),
        config,
        profile: LatencyProfile::default_profile(),
        setup,
        lease: Duration::ZERO,
        admission: Admission::DEFAULT,
        fault: None,
        slot_task: None,
    }
}

/// [`options`]'s server on a thread of its own.
fn start(pool: std::path::PathBuf) -> (String, LiveObjects) {
    let opts = options(pool);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Err(e) = remora_exec::block_on(serve(opts, |s| {
            tx.send((s.addr.to_string(), s.objects.clone())).unwrap()
        })) {
            panic!("server: {e}");
        }
    });
    rx.recv_timeout(Duration::from_secs(30)).unwrap()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Waits up to 10 s for `done`.
fn within(done: impl Fn() -> bool) {
    #[allow(clippy::disallowed_methods)] // a real server's closes take real time
    let start = std::time::Instant::now();
    while !done() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    remora_exec::block_on(async { remora_exec::time::timeout(Duration::from_secs(60), f).await })
        .expect("finished within 60 s")
}

/// One round of clients leaving every way: served and closed cleanly after its work,
/// served and gone mid-operation, then reset at each step of the handshake.
async fn one_round(addr: &str, p: &LatencyProfile, round: usize) {
    let (node, _, mut c) = remora_soft::client::connect(addr, p).await.unwrap();
    c.connect(Primitive::Write, Shape::default()).await.unwrap();
    c.persist(64, &[round as u8; 64]).await.unwrap();
    node.close();
    let (node, _, mut c) = remora_soft::client::connect(addr, p).await.unwrap();
    c.connect(Primitive::Write, Shape::default()).await.unwrap();
    let big = vec![round as u8; 256 << 10];
    let _ = remora_exec::time::timeout(Duration::from_micros(100), c.persist(0, &big)).await;
    node.close();
    for step in 0..3 {
        raw_until(addr, step).await;
    }
}

#[test]
fn clients_that_come_and_go_leave_no_objects_or_descriptors_behind() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (addr, objects) = start(dir.path().join("pool"));
    let p = LatencyProfile::default_profile();
    std::thread::sleep(Duration::from_millis(200));
    let base = open_fds();
    for round in 0..ROUNDS {
        run(one_round(&addr, &p, round));
        drop(std::net::TcpStream::connect(&addr).unwrap());
    }
    within(|| objects.get() == Objects::default());
    assert_eq!(
        objects.get(),
        Objects::default(),
        "live RNIC objects after {ROUNDS} rounds of connections"
    );
    // The count judged is the one the wait saw: a second count after it could catch a
    // descriptor the server opened meanwhile (its accept of the last, dropped connection).
    let after = std::cell::Cell::new(usize::MAX);
    within(|| {
        after.set(open_fds());
        after.get() <= base
    });
    let after = after.get();
    eprintln!("fds: {base} before, {after} after");
    assert!(after <= base, "{after} descriptors open, {base} before");
}

/// A raw client's handshake up to `step` (0: its Hello; 1: its Ready; 2: the server's
/// Accepted, after any clear), then a reset.
async fn raw_until(addr: &str, step: u8) {
    let mut s = remora_exec::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&Cm::Hello { key: 0 }.emit()).await.unwrap();
    let mut f = [0u8; CM_FRAME];
    if step > 0 {
        s.read_exact(&mut f).await.unwrap();
        assert!(matches!(Cm::parse(&f), Ok(Cm::Assign { .. })), "{f:?}");
        let qp = remora_model::verbs::QpNum(77);
        s.write_all(&Cm::Ready { qp }.emit()).await.unwrap();
    }
    if step > 1 {
        loop {
            s.read_exact(&mut f).await.unwrap();
            match Cm::parse(&f) {
                Ok(Cm::Clearing { .. }) => continue,
                Ok(Cm::Accepted { .. }) => break,
                other => panic!("{other:?}"),
            }
        }
    }
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
}

/// The server's node itself (on the test's thread) holds nothing for clients gone: no
/// connection, no packet held for one, no task waiting for a completion.
#[test]
fn a_servers_node_keeps_no_table_entry_for_clients_gone() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    use std::cell::RefCell;
    use std::rc::Rc;
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path().join("pool"));
    remora_exec::block_on(async move {
        let up = Rc::new(RefCell::new(None));
        let up2 = up.clone();
        remora_exec::spawn_local(async move {
            serve(opts, move |s| {
                *up2.borrow_mut() = Some((s.addr.to_string(), s.node.clone(), s.objects.clone()))
            })
            .await
            .unwrap();
        });
        while up.borrow().is_none() {
            remora_exec::time::sleep(Duration::from_millis(1)).await;
        }
        let (addr, node, objects) = up.borrow_mut().take().unwrap();
        let at_start = node.tables();
        let tasks = remora_exec::tasks();
        let p = LatencyProfile::default_profile();
        for round in 0..ROUNDS {
            one_round(&addr, &p, round).await;
        }
        for _ in 0..5000 {
            if node.tables() == at_start
                && objects.get() == Objects::default()
                && remora_exec::tasks() <= tasks
            {
                break;
            }
            remora_exec::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(node.tables(), at_start, "the server node's tables");
        assert_eq!(objects.get(), Objects::default());
        let waiting = node.with(|r, _| (1..200).map(|p| r.waiting_requests(p)).sum::<u64>());
        assert_eq!(waiting, 0, "requests waiting in the RNIC");
        eprintln!(
            "tables {:?}, tasks {} (at start {tasks})",
            node.tables(),
            remora_exec::tasks()
        );
        assert!(
            remora_exec::tasks() <= tasks,
            "tasks alive: {}, {tasks} at start",
            remora_exec::tasks()
        );
    });
}
