//! A durability oracle for the soft RNIC's runtime. The server node's PM is a
//! medium that records what its `sync` made durable (as `Pool` does with `msync`: what was
//! written since the last sync is taken, then written back). The client checks, at each
//! completion of a FLUSH, that the server's durable image holds the flushed bytes: the
//! server wrote the FLUSH response to its socket before the client read it, so the sync
//! that must precede that write has happened by then.

use remora_model::mem::{PmMedia, SparseMem};
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::Rnic;
use remora_model::FlushPlacement;
use remora_soft::runtime::{real_time_profile, RtNode};
use remora_verbs::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

const REGION: u64 = 1 << 20;

/// A PM medium that keeps, besides the live bytes, the image its syncs made durable.
#[derive(Debug)]
struct Oracle {
    live: SparseMem,
    /// Written since the last sync.
    pending: Vec<(u64, Vec<u8>)>,
    durable: Arc<Mutex<SparseMem>>,
    /// The next sync fails (as an `msync` returning EIO makes `Pool::sync` panic), after
    /// taking what was pending (as `Pool::sync` takes its dirty range before the msync).
    fail_next: Arc<AtomicBool>,
}

impl PmMedia for Oracle {
    fn read(&self, addr: u64, buf: &mut [u8]) {
        self.live.read(addr, buf);
    }
    fn write(&mut self, addr: u64, data: &[u8]) {
        self.live.write(addr, data);
        self.pending.push((addr, data.to_vec()));
    }
    fn sync(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        if self.fail_next.swap(false, Ordering::SeqCst) {
            panic!("msync of the PM pool failed: Input/output error (os error 5)");
        }
        let mut d = self.durable.lock().unwrap();
        for (a, b) in pending {
            d.write(a, &b);
        }
    }
    fn snapshot(&self) -> SparseMem {
        self.live.clone()
    }
}

#[derive(Clone)]
struct ServerHandles {
    durable: Arc<Mutex<SparseMem>>,
    fail_next: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
}

/// Starts a server node (id 1) on its own thread with an oracle medium; the client's
/// thread gets its QP and region through `hear`.
fn server(
    config: &str,
    profile: LatencyProfile,
    listener: std::net::TcpListener,
    tell: mpsc::Sender<(QpNum, Remote)>,
    hear: mpsc::Receiver<QpNum>,
) -> (ServerHandles, std::thread::JoinHandle<()>) {
    let durable = Arc::new(Mutex::new(SparseMem::new()));
    let fail_next = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let h = ServerHandles {
        durable: durable.clone(),
        fail_next: fail_next.clone(),
        done: done.clone(),
    };
    let config = config.to_string();
    let t = std::thread::spawn(move || {
        remora_exec::block_on(async move {
            let stream =
                remora_exec::net::TcpStream::from_std(listener.accept().unwrap().0).unwrap();
            stream.set_nodelay(true).unwrap();
            let media = Oracle {
                live: SparseMem::new(),
                pending: Vec::new(),
                durable,
                fail_next,
            };
            let rnic = Rnic::with_media(
                1,
                config.parse().unwrap(),
                &real_time_profile(&profile),
                Prng::from_seed(1),
                Box::new(media),
            );
            let node = RtNode::new(rnic);
            remora_exec::spawn_local(node.clone().drive());
            let pd = node.alloc_pd().unwrap();
            let a = node.alloc(Space::Pm, REGION, 4096);
            let mr = node.reg_mr(pd, Space::Pm, a, REGION, Access::ALL).unwrap();
            let cq = node.create_cq(64).unwrap();
            let qp = node.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
            let (r, w) = stream.into_split();
            node.attach(0, r, w, |_| {});
            tell.send((
                qp,
                Remote {
                    addr: mr.addr,
                    rkey: mr.rkey,
                },
            ))
            .unwrap();
            let peer_qp = hear.recv().unwrap();
            node.connect(qp, 0, peer_qp).unwrap();
            while !done.load(Ordering::SeqCst) {
                remora_exec::time::sleep(Duration::from_millis(2)).await;
            }
            node.close();
        })
    });
    (h, t)
}

/// The client's side of a connection to a [`server`]: its node (id 0), queue pair and
/// completion queue, the server's region, and the server's handles.
#[derive(Clone)]
struct Conn {
    node: RtNode,
    qp: QpNum,
    cq: CqId,
    remote: Remote,
    server: ServerHandles,
}

impl Conn {
    /// The server's region at `off`.
    fn at(&self, off: u64) -> Remote {
        Remote {
            addr: self.remote.addr + off,
            rkey: self.remote.rkey,
        }
    }

    /// The next completion, or `None` after 5 s without one.
    async fn next(&self) -> Option<WorkCompletion> {
        remora_exec::time::timeout(Duration::from_secs(5), next_completion(&self.node, self.cq))
            .await
            .ok()
    }
}

/// Starts a [`server`] of `config`/`profile`, connects a client node to it over loopback,
/// runs `body` on the client's executor, then stops both.
async fn with_conn<T>(
    config: &str,
    profile: LatencyProfile,
    body: impl AsyncFnOnce(Conn) -> T,
) -> T {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx_s, rx_s) = mpsc::channel();
    let (tx_c, rx_c) = mpsc::channel();
    let (server, t) = server(config, profile.clone(), listener, tx_s, rx_c);
    let stream = remora_exec::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let rnic = Rnic::new(
        0,
        config.parse().unwrap(),
        &real_time_profile(&profile),
        Prng::from_seed(0),
    );
    let node = RtNode::new(rnic);
    remora_exec::spawn_local(node.clone().drive());
    let pd = node.alloc_pd().unwrap();
    let cq = node.create_cq(1 << 12).unwrap();
    let qp = node.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    let (r, w) = stream.into_split();
    node.attach(1, r, w, |_| {});
    let (peer_qp, remote) = rx_s.recv().unwrap();
    tx_c.send(qp).unwrap();
    node.connect(qp, 1, peer_qp).unwrap();
    let conn = Conn {
        node,
        qp,
        cq,
        remote,
        server,
    };
    let out = body(conn.clone()).await;
    conn.server.done.store(true, Ordering::SeqCst);
    conn.node.close();
    t.join().unwrap();
    out
}

/// What the client saw of one FLUSH: its status, and whether the server's durable image
/// held the flushed bytes when the client had its completion.
#[derive(Debug, PartialEq)]
struct Seen {
    status: WcStatus,
    durable: bool,
}

/// Runs a client (node 0) against a server of `config`/`profile`: `rounds` times, `writes`
/// WRITEs of 64 bytes (the last one's bytes are checked) then one FLUSH of them, posted
/// together; `before_flush(round)` runs before each round's posts.
fn run(
    config: &str,
    profile: LatencyProfile,
    rounds: usize,
    writes: usize,
    before_flush: impl Fn(usize, &ServerHandles),
) -> Vec<Seen> {
    remora_exec::block_on(with_conn(config, profile, async |c: Conn| {
        let mut seen = Vec::new();
        for round in 0..rounds {
            before_flush(round, &c.server);
            let base = (round * writes * 64) as u64 % (REGION - (writes as u64) * 64);
            let mut last = Vec::new();
            for i in 0..writes {
                let data: Vec<u8> = (0..64)
                    .map(|j| (round * 131 + i * 7 + j + 1) as u8 | 1)
                    .collect();
                let mut wr = SendWr::new(
                    i as u64,
                    Opcode::Write,
                    Payload::inline(data.clone()),
                    Some(c.at(base + i as u64 * 64)),
                );
                wr.signaled = false;
                c.node.post_send(c.qp, wr).unwrap();
                last = data;
            }
            let last_addr = c.remote.addr + base + (writes as u64 - 1) * 64;
            let flush = SendWr::new(
                1 << 40,
                Opcode::Flush {
                    placement: FlushPlacement::Persistence,
                    len: writes as u64 * 64,
                },
                Payload::None,
                Some(c.at(base)),
            );
            c.node.post_send(c.qp, flush).unwrap();
            let Some(wc) = c.next().await else {
                break;
            };
            let ok = c.server.durable.lock().unwrap().read_vec(last_addr, 64) == last;
            if std::env::var_os(CHILD).is_some() {
                // The parent reads what the child saw up to its end, abort or not.
                use std::io::Write;
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, "seen {round} {:?} {ok}", wc.status);
                let _ = o.flush();
            }
            seen.push(Seen {
                status: wc.status,
                durable: ok,
            });
            if wc.status != WcStatus::Success {
                break;
            }
        }
        seen
    }))
}

/// Sanity of the oracle: with syncs that succeed, every FLUSH completion finds its bytes
/// durable (DMP, slow data path; and write trains of 32 WRITEs).
#[test]
fn flush_completions_find_their_bytes_durable() {
    for (config, profile) in [
        ("DMP+noDDIO+PM-RQWRB", LatencyProfile::default_profile()),
        (
            "DMP+noDDIO+PM-RQWRB",
            LatencyProfile::builtin("slow-data-path").unwrap(),
        ),
        ("MHP+noDDIO+PM-RQWRB", LatencyProfile::default_profile()),
        ("WSP+DDIO+PM-RQWRB", LatencyProfile::default_profile()),
    ] {
        for writes in [1, 32] {
            let seen = run(config, profile.clone(), 20, writes, |_, _| {});
            assert_eq!(seen.len(), 20, "{config} {writes}: {seen:?}");
            for s in &seen {
                assert_eq!(
                    *s,
                    Seen {
                        status: WcStatus::Success,
                        durable: true
                    },
                    "{config} {} writes {writes}",
                    profile.name
                );
            }
        }
    }
}

/// Set in the child process of [`a_failed_sync_stops_the_process_before_its_acknowledgement_leaves`].
const CHILD: &str = "REMORA_TEST_FAILED_SYNC_CHILD";

/// A sync that fails (an `msync` returning EIO: `Pool::sync` panics) stops the process at
/// once, as a power failure would: the packets queued on the promise of that sync never
/// leave. (Found by review: the executor caught the panic of the task that stepped and
/// went on, and the writer of the connection the panic ended sent what was queued, so the
/// FLUSH completed successfully with its bytes not durable.) The test runs itself in a
/// child process, which must die of SIGABRT having seen round 0's FLUSH succeed and no
/// later one.
#[test]
fn a_failed_sync_stops_the_process_before_its_acknowledgement_leaves() {
    const NAME: &str = "a_failed_sync_stops_the_process_before_its_acknowledgement_leaves";
    if std::env::var_os(CHILD).is_some() {
        run(
            "DMP+noDDIO+PM-RQWRB",
            LatencyProfile::default_profile(),
            3,
            1,
            |round, h| {
                if round == 1 {
                    h.fail_next.store(true, Ordering::SeqCst);
                }
            },
        );
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("seen 0 Success true"),
        "round 0 completes durable: {stdout}"
    );
    assert!(
        !stdout.contains("seen 1 Success") && !stdout.contains("seen 2 Success"),
        "a FLUSH completed after the sync of its bytes failed: {stdout}"
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "the process stops at the failed sync ({:?}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `rounds` of: `writes` 64-byte WRITEs (unsignaled), then a FLUSH of them, then an
/// ATOMIC WRITE (non-posted, behind the FLUSH: deferred to its barrier, held in the
/// medium under WSP), then a FLUSH of the ATOMIC WRITE's line; all posted at once. Checks
/// at each FLUSH completion that what it covers is durable, and under WSP (the RNIC in the
/// domain) also at the ATOMIC WRITE's. Returns the bad completions.
fn run_np(config: &str, profile: LatencyProfile, rounds: usize, writes: usize) -> Vec<String> {
    let wsp = config.starts_with("WSP");
    remora_exec::block_on(with_conn(config, profile, async |c: Conn| {
        let mut bad = Vec::new();
        for round in 0..rounds {
            let base = (round as u64 * 8192) % (REGION - 8192);
            let mut expect: Vec<(u64, Vec<u8>)> = Vec::new();
            for i in 0..writes {
                let data: Vec<u8> = (0..64)
                    .map(|j| (round * 131 + i * 7 + j + 1) as u8 | 1)
                    .collect();
                let off = base + i as u64 * 64;
                let mut wr = SendWr::new(
                    0,
                    Opcode::Write,
                    Payload::inline(data.clone()),
                    Some(c.at(off)),
                );
                wr.signaled = false;
                c.node.post_send(c.qp, wr).unwrap();
                expect.push((c.remote.addr + off, data));
            }
            let f1 = SendWr::new(
                1,
                Opcode::Flush {
                    placement: FlushPlacement::Persistence,
                    len: writes as u64 * 64,
                },
                Payload::None,
                Some(c.at(base)),
            );
            c.node.post_send(c.qp, f1).unwrap();
            let aoff = base + 4096;
            let value = 0x0101_0101_0101_0101u64 * ((round as u64 % 250) + 1);
            let aw = SendWr::new(
                2,
                Opcode::AtomicWrite { value },
                Payload::None,
                Some(c.at(aoff)),
            );
            c.node.post_send(c.qp, aw).unwrap();
            let f2 = SendWr::new(
                3,
                Opcode::Flush {
                    placement: FlushPlacement::Persistence,
                    len: 8,
                },
                Payload::None,
                Some(c.at(aoff)),
            );
            c.node.post_send(c.qp, f2).unwrap();
            for _ in 0..3 {
                let Some(wc) = c.next().await else {
                    bad.push(format!("round {round}: no completion"));
                    break;
                };
                if wc.status != WcStatus::Success {
                    bad.push(format!("round {round}: {wc:?}"));
                    break;
                }
                let d = c.server.durable.lock().unwrap();
                let check = |what: &str, a: u64, v: &[u8], bad: &mut Vec<String>| {
                    if d.read_vec(a, v.len()) != v {
                        bad.push(format!(
                            "round {round}: {what} completed, {a:#x} not durable"
                        ));
                    }
                };
                let atomic = c.remote.addr + aoff;
                match wc.wr_id {
                    1 => {
                        for (a, v) in &expect {
                            check("FLUSH 1", *a, v, &mut bad);
                        }
                    }
                    2 if wsp => check("ATOMIC WRITE (WSP)", atomic, &value.to_le_bytes(), &mut bad),
                    3 => check("FLUSH 2", atomic, &value.to_le_bytes(), &mut bad),
                    _ => {}
                }
            }
        }
        bad
    }))
}

#[test]
fn non_posted_requests_behind_a_flush_complete_durable() {
    let mut all = Vec::new();
    for (config, profile) in [
        ("DMP+noDDIO+PM-RQWRB", LatencyProfile::default_profile()),
        (
            "DMP+noDDIO+PM-RQWRB",
            LatencyProfile::builtin("slow-data-path").unwrap(),
        ),
        (
            "MHP+noDDIO+PM-RQWRB",
            LatencyProfile::builtin("slow-data-path").unwrap(),
        ),
        ("WSP+DDIO+PM-RQWRB", LatencyProfile::default_profile()),
        (
            "WSP+DDIO+PM-RQWRB",
            LatencyProfile::builtin("slow-data-path").unwrap(),
        ),
    ] {
        for writes in [1, 16] {
            for b in run_np(config, profile.clone(), 10, writes) {
                all.push(format!("{config} {} {writes}: {b}", profile.name));
            }
        }
    }
    assert!(all.is_empty(), "{all:#?}");
}
