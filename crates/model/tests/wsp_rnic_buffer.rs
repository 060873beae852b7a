//! Under WSP the RNIC buffer is in the persistence domain (seed 000 Table 1): a non-posted
//! write (an ATOMIC WRITE) that waits in it, behind an earlier non-posted request of its
//! QP, is kept by a power failure. So the medium, which a real-time runtime's pool file
//! is, must hold it from its arrival, over any later write of the same bytes, or a
//! `kill -9` in that window loses what a power failure keeps; and `crash_image` must say
//! what `power_fail` keeps. Once the write can no longer execute (its queue pair failed),
//! the medium must give it up again.

use remora_model::hierarchy::Space;
use remora_model::mem::{PmMedia, SparseMem};
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{MrInfo, QpAttr, Rnic};
use remora_model::time::Instant;
use remora_model::verbs::*;
use remora_model::wire::Packet;
use std::sync::{Arc, Mutex};

/// A medium the test can read while the RNIC owns it: the pool file's stand-in. It also
/// keeps every write, in order.
#[derive(Debug, Clone, Default)]
struct Shared(Arc<Mutex<SparseMem>>, Arc<Mutex<Writes>>);

/// Every write of a medium, in order: (address, bytes).
type Writes = Vec<(u64, Vec<u8>)>;
impl PmMedia for Shared {
    fn read(&self, addr: u64, buf: &mut [u8]) {
        self.0.lock().unwrap().read(addr, buf)
    }
    fn write(&mut self, addr: u64, data: &[u8]) {
        self.1.lock().unwrap().push((addr, data.to_vec()));
        self.0.lock().unwrap().write(addr, data)
    }
    fn snapshot(&self) -> SparseMem {
        self.0.lock().unwrap().clone()
    }
}

struct Node {
    rnic: Rnic,
    qp: QpNum,
    mr: MrInfo,
    media: Shared,
}

fn node(id: NodeId) -> Node {
    let media = Shared::default();
    let mut rnic = Rnic::with_media(
        id,
        "WSP+noDDIO+PM-RQWRB".parse().unwrap(),
        &LatencyProfile::default_profile(),
        Prng::from_seed(id as u64),
        Box::new(media.clone()),
    );
    let pd = rnic.alloc_pd();
    let a = rnic.alloc(Space::Pm, 1 << 16, 4096);
    let mr = rnic.reg_mr(pd, Space::Pm, a, 1 << 16, Access::ALL).unwrap();
    let cq = rnic.create_cq(64).unwrap();
    let qp = rnic.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    Node {
        rnic,
        qp,
        mr,
        media,
    }
}

const T: Instant = Instant::from_nanos(1_000);
const OLD: u64 = 0x0101_0101_0101_0101;
const ATOMIC: u64 = 0x1122_3344_5566_7788;

/// A requester and a WSP responder; the responder's target word holds [`OLD`], durable and
/// visible. The requester has posted a FLUSH, then an ATOMIC WRITE of [`ATOMIC`] to the
/// target, then (`later`) a posted WRITE of 8 bytes to it; the responder has handled the
/// packets at [`T`]. Returns the pair and the target's address.
fn deferred_atomic_write(later: Option<u64>) -> (Node, Node, u64) {
    let (mut a, mut b) = (node(1), node(2));
    a.rnic.connect(a.qp, 2, b.qp).unwrap();
    b.rnic.connect(b.qp, 1, a.qp).unwrap();
    let target = b.mr.addr + 64;
    b.rnic
        .cpu_store(Instant::ZERO, Space::Pm, target, &OLD.to_le_bytes());
    let r = Remote {
        addr: b.mr.addr,
        rkey: b.mr.rkey,
    };
    let at = Remote { addr: target, ..r };
    a.rnic.post_send(T, a.qp, SendWr::wflush(1, r, 64)).unwrap();
    let atomic = Opcode::AtomicWrite { value: ATOMIC };
    let wr = SendWr::new(2, atomic, Payload::None, Some(at)).signaled(true);
    a.rnic.post_send(T, a.qp, wr).unwrap();
    if let Some(v) = later {
        let wr = SendWr::new(
            3,
            Opcode::Write,
            Payload::inline(v.to_le_bytes().to_vec()),
            Some(at),
        );
        a.rnic.post_send(T, a.qp, wr).unwrap();
    }
    a.rnic.process_doorbells(T);
    let pkts: Vec<Packet> = std::iter::from_fn(|| a.rnic.poll_transmit().map(|(_, p)| p)).collect();
    assert_eq!(pkts.len(), 2 + later.is_some() as usize, "{pkts:?}");
    for p in &pkts {
        b.rnic.handle_packet(T, p);
    }
    (a, b, target)
}

fn word(bytes: Vec<u8>) -> u64 {
    u64::from_le_bytes(bytes.try_into().unwrap())
}

/// What the medium (the pool file a `kill -9` leaves), the crash image and a power failure
/// keep of the target word, and what a load sees, now.
fn kept(b: &mut Node, target: u64, now: Instant) -> (u64, u64, u64, u64) {
    let medium = word(b.media.0.lock().unwrap().read_vec(target, 8));
    let image = word(b.rnic.crash_image(now).read_vec(target, 8));
    let mut seen = [0u8; 8];
    b.rnic.cpu_load(now, Space::Pm, target, &mut seen);
    b.rnic.power_fail(now);
    b.rnic.restart(now);
    let mut after = [0u8; 8];
    b.rnic.cpu_load(now, Space::Pm, target, &mut after);
    (
        medium,
        image,
        u64::from_le_bytes(seen),
        u64::from_le_bytes(after),
    )
}

#[test]
fn a_waiting_atomic_write_is_in_the_medium_from_its_arrival_and_not_yet_visible() {
    let (_a, mut b, target) = deferred_atomic_write(None);
    let (medium, image, seen, after_power_fail) = kept(&mut b, target, T);
    assert_eq!(
        after_power_fail, ATOMIC,
        "WSP keeps the RNIC buffer's requests"
    );
    assert_eq!(image, ATOMIC, "crash_image says what power_fail keeps");
    assert_eq!(
        medium, ATOMIC,
        "the pool file holds it, as a kill -9 must keep it"
    );
    assert_eq!(seen, OLD, "it is not visible before it executes");
}

/// A posted WRITE behind the waiting ATOMIC WRITE executes first (it does not wait for the
/// FLUSH), so the ATOMIC WRITE lands last: in memory once it executes, and in what a power
/// failure keeps meanwhile.
#[test]
fn a_later_write_of_the_same_bytes_stays_under_the_waiting_one() {
    let later = 0x7777_7777_7777_7777;
    let (_a, mut b, target) = deferred_atomic_write(Some(later));
    let (medium, image, seen, after_power_fail) = kept(&mut b, target, T);
    assert_eq!(seen, OLD, "the later WRITE is not visible yet either");
    assert_eq!((medium, image, after_power_fail), (ATOMIC, ATOMIC, ATOMIC));

    // Without a failure, both execute, the ATOMIC WRITE last.
    let (_a, mut b, target) = deferred_atomic_write(Some(later));
    let mut t = T;
    while let Some(next) = b.rnic.poll_timeout() {
        t = next.max(t);
        b.rnic.handle_timeout(t);
    }
    let end = t + remora_model::time::Duration::from_millis(1);
    // From its arrival on, the medium held the ATOMIC WRITE at every instant: no write
    // put anything else there afterwards for good (a SIGKILL between two writes of the
    // medium keeps what the first left).
    let writes = b.media.1.lock().unwrap().clone();
    let first = writes
        .iter()
        .position(|(a, d)| *a == target && d[..] == ATOMIC.to_le_bytes())
        .expect("the ATOMIC WRITE reached the medium");
    for (i, (a, d)) in writes.iter().enumerate().skip(first + 1) {
        if *a <= target && target < *a + d.len() as u64 {
            let o = (target - a) as usize;
            assert_eq!(
                &d[o..o + 8],
                &ATOMIC.to_le_bytes(),
                "write {i}: {writes:02x?}"
            );
        }
    }
    let (medium, image, seen, _) = kept(&mut b, target, end);
    assert_eq!((medium, image, seen), (ATOMIC, ATOMIC, ATOMIC));
}

/// A queue pair that fails drops what waits in its buffer: the medium gives the ATOMIC
/// WRITE up and holds what lies under it, the later WRITE's bytes, which had arrived.
#[test]
fn a_failed_queue_pair_gives_its_waiting_write_up() {
    let later = 0x7777_7777_7777_7777;
    let (_a, mut b, target) = deferred_atomic_write(Some(later));
    b.rnic.fail_qp(T, b.qp).unwrap();
    let (medium, image, _, after_power_fail) = kept(&mut b, target, T);
    assert_eq!((medium, image, after_power_fail), (later, later, later));

    let (_a, mut b, target) = deferred_atomic_write(None);
    b.rnic.dereg_mr(b.mr.lkey).unwrap();
    let (medium, image, _, after_power_fail) = kept(&mut b, target, T);
    assert_eq!(
        (medium, image, after_power_fail),
        (OLD, OLD, OLD),
        "a write whose region went can no longer execute"
    );
}
