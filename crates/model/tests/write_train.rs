//! A write train (the soft wire's framing of a run of WRITEs) is handled exactly as the
//! packets it stands for: same memory (visible and after a power failure at any instant),
//! same counters, same refusals, and the same last acknowledgement (the train's ACKs are
//! coalesced into the last one, which acknowledges every earlier WRITE).

use proptest::prelude::*;
use remora_model::hierarchy::Space;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{MrInfo, QpAttr, Rnic};
use remora_model::time::{Duration, Instant};
use remora_model::verbs::*;
use remora_model::wire::{Body, Frame, Packet, TrainTail, WireError, WriteTrain};

const REQUESTER: NodeId = 1;
const RESPONDER: NodeId = 2;
const REGION: u64 = 1 << 14;

struct Node {
    rnic: Rnic,
    qp: QpNum,
    mr: MrInfo,
}

fn node(id: NodeId, config: &str, seed: u64) -> Node {
    let mut rnic = Rnic::new(
        id,
        config.parse().unwrap(),
        &LatencyProfile::default_profile(),
        Prng::from_seed(seed),
    );
    let pd = rnic.alloc_pd();
    let space = if id == RESPONDER {
        Space::Pm
    } else {
        Space::Dram
    };
    let a = rnic.alloc(space, REGION, 4096);
    let mr = rnic.reg_mr(pd, space, a, REGION, Access::ALL).unwrap();
    let cq = rnic.create_cq(4096).unwrap();
    let qp = rnic.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    Node { rnic, qp, mr }
}

/// A connected requester and two identical responders (one gets packets, one trains).
fn setup(config: &str, seed: u64) -> (Node, Node, Node) {
    let mut a = node(REQUESTER, config, seed);
    let mut b = node(RESPONDER, config, seed + 1);
    let mut c = node(RESPONDER, config, seed + 1);
    a.rnic.connect(a.qp, RESPONDER, b.qp).unwrap();
    b.rnic.connect(b.qp, REQUESTER, a.qp).unwrap();
    c.rnic.connect(c.qp, REQUESTER, a.qp).unwrap();
    (a, b, c)
}

/// One WRITE of a generated run: offset in (or beyond) the responder's region, length,
/// and whether it names a wrong rkey.
#[derive(Clone, Debug)]
struct W {
    off: u64,
    len: usize,
    bad_key: bool,
}

fn writes() -> impl Strategy<Value = Vec<W>> {
    let w = (0..REGION + 256, 1usize..200, prop::bool::weighted(0.03))
        .prop_map(|(off, len, bad_key)| W { off, len, bad_key });
    prop::collection::vec(w, 1..80)
}

/// Posts the run and returns the packets the requester transmits.
fn packets(a: &mut Node, b: &Node, run: &[W], now: Instant) -> Vec<Packet> {
    for (i, w) in run.iter().enumerate() {
        let data: Vec<u8> = (0..w.len).map(|j| (i * 31 + j) as u8).collect();
        let rkey = if w.bad_key { 0xdead } else { b.mr.rkey };
        let remote = Remote {
            addr: b.mr.addr + w.off,
            rkey,
        };
        a.rnic
            .post_send(
                now,
                a.qp,
                SendWr::new(i as u64, Opcode::Write, Payload::inline(data), Some(remote))
                    .signaled(false),
            )
            .unwrap();
    }
    a.rnic.process_doorbells(now);
    let mut out = Vec::new();
    while let Some((_, p)) = a.rnic.poll_transmit() {
        out.push(p);
    }
    out
}

/// Frames `pkts` as the soft runtime does: trains where WRITEs may join, packets otherwise.
fn frame(pkts: &[Packet]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut tail: Option<TrainTail> = None;
    for p in pkts {
        if !tail.as_mut().is_some_and(|t| t.push(p, &mut out)) {
            tail = TrainTail::start(p, &mut out);
            if tail.is_none() {
                p.emit_into(&mut out);
            }
        }
    }
    out
}

/// Feeds a framed byte stream to `rnic` at `now`; returns the frames' kinds (true = train).
fn feed(rnic: &mut Rnic, mut bytes: &[u8], now: Instant) -> Vec<bool> {
    let mut kinds = Vec::new();
    while let Some(len) = Packet::frame_len(bytes).unwrap() {
        match Frame::parse(&bytes[..len]).unwrap() {
            Frame::Packet(p) => {
                kinds.push(false);
                rnic.handle_packet(now, &p);
            }
            Frame::WriteTrain(t) => {
                kinds.push(true);
                rnic.handle_write_train(now, &t);
            }
        }
        bytes = &bytes[len..];
    }
    kinds
}

fn responses(rnic: &mut Rnic) -> Vec<(Instant, Packet)> {
    std::iter::from_fn(|| rnic.poll_transmit()).collect()
}

/// Drops ACKs that a later ACK leaving at the same instant covers (what coalescing does).
fn coalesced(v: &[(Instant, Packet)]) -> Vec<(Instant, Packet)> {
    let mut out: Vec<(Instant, Packet)> = Vec::new();
    for (t, p) in v {
        if let Some((lt, lp)) = out.last() {
            if lp.body == Body::Ack && p.body == Body::Ack && lt == t && lp.dst_qp == p.dst_qp {
                out.pop();
            }
        }
        out.push((*t, p.clone()));
    }
    out
}

fn check_equivalent(config: &str, seed: u64, run: &[W], drop_at: Option<usize>) {
    let (mut a, mut b, mut c) = setup(config, seed);
    let now = Instant::from_nanos(10_000);
    let mut pkts = packets(&mut a, &b, run, now);
    if let Some(i) = drop_at {
        // A lost packet: the responder sees a PSN gap. A run of one packet keeps it: with
        // nothing left there is no train to compare.
        if i < pkts.len() && pkts.len() > 1 {
            pkts.remove(i);
        }
    }
    let arrive = now + Duration::from_micros(2);
    for p in &pkts {
        b.rnic.handle_packet(arrive, p);
    }
    let kinds = feed(&mut c.rnic, &frame(&pkts), arrive);
    assert!(kinds[0], "a run of plain WRITEs starts a train");
    assert_eq!(b.rnic.stats(), c.rnic.stats());
    assert_eq!(coalesced(&responses(&mut b.rnic)), responses(&mut c.rnic));
    for dt in [0, 300, 1_000, 3_000, 100_000] {
        let t = arrive + Duration::from_nanos(dt);
        let (mb, mc) = (b.rnic.crash_image(t), c.rnic.crash_image(t));
        let (mut vb, mut vc) = (vec![0u8; REGION as usize], vec![0u8; REGION as usize]);
        b.rnic.cpu_load(t, Space::Pm, b.mr.addr, &mut vb);
        c.rnic.cpu_load(t, Space::Pm, c.mr.addr, &mut vc);
        assert_eq!(vb, vc, "visible memory at +{dt} ns");
        assert_eq!(
            mb.read_vec(b.mr.addr, REGION as usize),
            mc.read_vec(c.mr.addr, REGION as usize),
            "crash image at +{dt} ns"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_train_is_handled_as_its_packets(
        run in writes(),
        seed in 0u64..1000,
        ddio in any::<bool>(),
        drop_at in prop::option::of(0usize..80),
    ) {
        let config = if ddio { "DMP+DDIO+PM-RQWRB" } else { "DMP+noDDIO+PM-RQWRB" };
        check_equivalent(config, seed, &run, drop_at);
        check_equivalent("WSP+noDDIO+PM-RQWRB", seed, &run, drop_at);
    }

    #[test]
    fn trains_round_trip_and_refuse_truncation(run in writes()) {
        let (mut a, b, _) = setup("DMP+noDDIO+PM-RQWRB", 7);
        let run: Vec<W> = run.into_iter().map(|w| W { bad_key: false, ..w }).collect();
        let pkts = packets(&mut a, &b, &run, Instant::from_nanos(1));
        let bytes = frame(&pkts);
        let len = Packet::frame_len(&bytes).unwrap().unwrap();
        prop_assert_eq!(len, bytes.len(), "one rkey, consecutive PSNs: one train");
        let Frame::WriteTrain(t) = Frame::parse(&bytes).unwrap() else {
            panic!("a train")
        };
        let back: Vec<Packet> = t.writes().map(|w| w.to_packet(&t)).collect();
        prop_assert_eq!(&back, &pkts);
        for n in 0..bytes.len() {
            prop_assert!(WriteTrain::parse(&bytes[..n]).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert_eq!(WriteTrain::parse(&longer), Err(WireError::Trailing(1)));
    }

    #[test]
    fn arbitrary_train_bytes_never_panic(
        mut b in prop::collection::vec(any::<u8>(), 32..256),
        count in 0u32..4,
    ) {
        // A valid header so the body's checks are reached.
        b[..4].copy_from_slice(&[0x44, 0x52, 1, 14]);
        let body = (b.len() - 32) as u32;
        b[28..32].copy_from_slice(&body.to_le_bytes());
        if b.len() >= 40 {
            b[36..40].copy_from_slice(&count.to_le_bytes());
        }
        if let Ok(Frame::WriteTrain(t)) = Frame::parse(&b) {
            prop_assert_eq!(t.writes().count() as u32, t.len());
        }
    }
}

#[test]
fn train_fields_outside_their_range_are_named() {
    let (mut a, b, _) = setup("DMP+noDDIO+PM-RQWRB", 3);
    let run = [
        W {
            off: 0,
            len: 64,
            bad_key: false,
        },
        W {
            off: 64,
            len: 64,
            bad_key: false,
        },
    ];
    let bytes = frame(&packets(&mut a, &b, &run, Instant::from_nanos(1)));
    let bad = |at: usize, v: u8| {
        let mut x = bytes.clone();
        x[at] = v;
        WriteTrain::parse(&x).map(|t| t.len())
    };
    assert_eq!(bad(4, 1), Err(WireError::BadValue("flags")));
    assert_eq!(bad(36, 0), Err(WireError::BadValue("train length")));
    // More entries than the body holds.
    assert!(matches!(bad(36, 3), Err(WireError::Truncated { .. })));
    // The first entry's flags: AckReq only.
    assert_eq!(
        bad(40 + 12, 2),
        Err(WireError::BadValue("train entry flags"))
    );
    assert_eq!(
        bad(40 + 13, 1),
        Err(WireError::BadValue("train entry flags"))
    );
    // A data length that overruns the frame.
    assert!(bad(40 + 9, 1).is_err());
    assert_eq!(bad(3, 99), Err(WireError::UnknownOpcode(99)));
    assert_eq!(bad(0, 0), Err(WireError::BadMagic));
    assert_eq!(WriteTrain::parse(&bytes).map(|t| t.len()), Ok(2));
    assert_eq!(Packet::parse(&bytes), Err(WireError::UnknownOpcode(14)));
}
