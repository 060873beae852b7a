//! A peer that does not read what it is sent cannot make a node buffer without bound: two
//! real-time nodes, each on a thread of its own (so one can stop reading while the other
//! goes on), joined by a loopback TCP connection.

use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::Rnic;
use remora_soft::runtime::{real_time_profile, Limits, NetStats, RtNode};
use remora_verbs::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Bytes each READ asks for.
const READ: u32 = 64 << 10;
/// Each node's PM region (READs go to its 16 pieces in turn).
const REGION: u64 = 16 * READ as u64;
/// The backlog limit the nodes run with (the shipped one is 64 MiB).
const LIMIT: u64 = 1 << 20;

/// One node: its RNIC, a PM region filled with a pattern of `id`'s and a DRAM buffer,
/// CQs for `n` completions and one RC QP.
struct Node {
    node: RtNode,
    region: MrInfo,
    buf: MrInfo,
    scq: CqId,
    qp: QpNum,
}

/// The pattern node `id` keeps at `off` of its region.
fn pattern(id: NodeId, off: u64) -> u8 {
    (off / 4096) as u8 ^ (id as u8).wrapping_mul(0x5b)
}

impl Node {
    fn new(id: NodeId, held: usize, n: usize) -> Node {
        let profile = real_time_profile(&LatencyProfile::default_profile());
        let rnic = Rnic::new(
            id,
            "DMP+noDDIO+PM-RQWRB".parse().unwrap(),
            &profile,
            Prng::from_seed(id as u64),
        );
        let node = RtNode::new(rnic);
        node.set_limits(Limits {
            backlog: LIMIT,
            held: held as u64,
            ..Limits::default()
        });
        remora_exec::spawn_local(node.clone().drive());
        let pd = node.alloc_pd().unwrap();
        let a = node.alloc(Space::Pm, REGION, 4096);
        let region = node.reg_mr(pd, Space::Pm, a, REGION, Access::ALL).unwrap();
        let bytes: Vec<u8> = (0..REGION).map(|off| pattern(id, off)).collect();
        node.store(Space::Pm, a, &bytes);
        let a = node.alloc(Space::Dram, REGION, 4096);
        let buf = node
            .reg_mr(pd, Space::Dram, a, REGION, Access::ALL)
            .unwrap();
        let scq = node.create_cq(n).unwrap();
        let rcq = node.create_cq(16).unwrap();
        let qp = node.create_qp(pd, scq, rcq, QpAttr::default()).unwrap();
        Node {
            node,
            region,
            buf,
            scq,
            qp,
        }
    }

    /// Posts `n` signaled READs of the peer's region, piece after piece, each into the
    /// same piece of this node's buffer.
    fn post_reads(&self, peer: Remote, n: usize) {
        for i in 0..n {
            let off = (i as u64 % 16) * READ as u64;
            let sge = Sge {
                addr: self.buf.addr + off,
                len: READ,
                lkey: self.buf.lkey,
            };
            let at = Remote {
                addr: peer.addr + off,
                rkey: peer.rkey,
            };
            let wr = SendWr::new(i as u64, Opcode::Read, Payload::Sge(sge), Some(at));
            self.node.post_send(self.qp, wr).unwrap();
        }
    }

    /// Waits for `n` completions (at most `within`), each a success; then checks that the
    /// buffer holds the peer's pattern.
    async fn complete(&self, peer: NodeId, n: usize, within: Duration) {
        let all = async {
            for _ in 0..n {
                let wc = next_completion(&self.node, self.scq).await;
                assert_eq!(
                    wc.status,
                    WcStatus::Success,
                    "{wc:?} {}",
                    self.node.net_stats()
                );
            }
        };
        remora_exec::time::timeout(within, all)
            .await
            .expect("every READ completes");
        let mut got = vec![0u8; REGION as usize];
        self.node.load(Space::Dram, self.buf.addr, &mut got);
        let bad = (0..REGION).find(|&off| got[off as usize] != pattern(peer, off));
        assert_eq!(bad, None, "node {} read its peer's pattern", 1 - peer);
    }

    fn remote(&self) -> Remote {
        Remote {
            addr: self.region.addr,
            rkey: self.region.rkey,
        }
    }
}

/// What one side's thread tells the other: its QP and region.
type Hello = (QpNum, Remote);

/// How one side reaches the other: node 0 accepts on a listener, node 1 connects to it;
/// each tells the other its QP and region; both count who is done.
struct Wiring {
    listener: Option<std::net::TcpListener>,
    addr: std::net::SocketAddr,
    tell: mpsc::Sender<Hello>,
    hear: mpsc::Receiver<Hello>,
    done: Arc<AtomicUsize>,
}

/// Runs node `id` on a thread of its own: it connects to its peer, swaps QPs and regions
/// with it, runs `work`, then serves until the peer is done too; returns its counters.
fn side<F, Fut>(
    id: NodeId,
    held: usize,
    n: usize,
    w: Wiring,
    work: F,
) -> std::thread::JoinHandle<NetStats>
where
    F: FnOnce(Node, Hello) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Node>,
{
    std::thread::spawn(move || {
        remora_exec::block_on(async move {
            let stream = match w.listener {
                Some(l) => remora_exec::net::TcpStream::from_std(l.accept().unwrap().0).unwrap(),
                None => remora_exec::net::TcpStream::connect(w.addr).await.unwrap(),
            };
            stream.set_nodelay(true).unwrap();
            let me = Node::new(id, held, n);
            let (r, wr) = stream.into_split();
            me.node.attach(1 - id, r, wr, |_| {});
            w.tell.send((me.qp, me.remote())).unwrap();
            let peer = w.hear.recv().unwrap();
            me.node.connect(me.qp, 1 - id, peer.0).unwrap();
            let me = work(me, peer).await;
            // Both sides serve until both are done: a node closed drops what it has not
            // sent, and its peer's requests fail.
            w.done.fetch_add(1, Ordering::SeqCst);
            while w.done.load(Ordering::SeqCst) < 2 {
                remora_exec::time::sleep(Duration::from_millis(5)).await;
            }
            let stats = me.node.net_stats();
            me.node.close();
            stats
        })
    })
}

/// Two sides: node 0 runs `a`, node 1 runs `b`; their counters.
fn two<FA, FB, A, B>(held: usize, n: usize, a: FA, b: FB) -> (NetStats, NetStats)
where
    FA: FnOnce(Node, Hello) -> A + Send + 'static,
    FB: FnOnce(Node, Hello) -> B + Send + 'static,
    A: std::future::Future<Output = Node>,
    B: std::future::Future<Output = Node>,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx0, rx0) = mpsc::channel();
    let (tx1, rx1) = mpsc::channel();
    let done = Arc::new(AtomicUsize::new(0));
    let w0 = Wiring {
        listener: Some(listener),
        addr,
        tell: tx0,
        hear: rx1,
        done: done.clone(),
    };
    let w1 = Wiring {
        listener: None,
        addr,
        tell: tx1,
        hear: rx0,
        done,
    };
    let s0 = side(0, held, n, w0, a);
    let s1 = side(1, held, n, w1, b);
    (s0.join().unwrap(), s1.join().unwrap())
}

/// Lets the node's driver send what was posted, without reading much of what comes back.
async fn let_posts_leave() {
    for _ in 0..4 {
        remora_exec::yield_now().await;
    }
}

#[test]
fn a_peer_that_does_not_read_gets_no_more_than_the_limit_queued_for_it() {
    // 512 READs of 64 KiB: 32 MiB of responses asked for in 30 KiB of requests, by a client
    // that then stops reading for a second. The server queues about the limit for it,
    // holds the rest of its requests (and, past 8 KiB of them, stops reading it), and
    // serves them all once the client reads again.
    const N: usize = 512;
    let (server, client) = two(
        8 << 10,
        N,
        |me, _| async move { me },
        |me, peer| async move {
            me.post_reads(peer.1, N);
            let_posts_leave().await;
            std::thread::sleep(Duration::from_secs(1));
            me.complete(0, N, Duration::from_secs(30)).await;
            me
        },
    );
    // Without the limit the server queued nearly all 32 MiB the kernel's buffers did not
    // take.
    assert!(
        server.peak_backlog <= LIMIT + 2 * READ as u64,
        "at most the limit and a READ's response pending: {} bytes",
        server.peak_backlog
    );
    assert!(server.held_back > 0, "the server held requests: {server}");
    assert!(
        server.paused > 0,
        "and stopped reading for a while: {server}"
    );
    assert_eq!(client.held_back, 0, "{client}");
}

#[test]
fn two_peers_that_each_back_up_the_other_go_on_reading_each_other() {
    // Both read 32 MiB from each other at once with a 1 MiB limit: each holds the other's
    // requests while its own output backs up, and reads on for the responses it waits
    // for. Past 8 KiB of held requests each stops reading the other (512 READ requests
    // are 30 KiB), so each waits for the other to read: after a few milliseconds without
    // progress each reads once more, which lets the other go on (without that, both
    // waited until their READs timed out).
    const N: usize = 512;
    let both = |peer_id: NodeId| {
        move |me: Node, peer: Hello| async move {
            me.post_reads(peer.1, N);
            me.complete(peer_id, N, Duration::from_secs(60)).await;
            me
        }
    };
    let (a, b) = two(8 << 10, N, both(1), both(0));
    for s in [a, b] {
        assert!(s.peak_backlog <= LIMIT + 2 * READ as u64, "{s}");
    }
    assert!(a.paused > 0 || b.paused > 0, "reading paused: {a} / {b}");
}
