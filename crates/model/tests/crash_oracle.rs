//! The model's crash images and responses against plain oracles: each line's image after a
//! power failure is what its domain keeps (seed 000 §2, Table 1), and no FLUSH or READ
//! response (nor an atomic's) leaves before what it answers for is persistent. Both run
//! with the default profile and the slow data path, and with DDIO shares of a few lines,
//! whose forced evictions once moved the hierarchy's clock into the future (found by an
//! adversarial review, with the failed compare-and-swap that answered before the write
//! it returned was visible).

use remora_model::config::PersistenceDomain::{self, Dmp};
use remora_model::hierarchy::{MemoryHierarchy, Space, LINE};
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::PM_BASE;
use remora_model::time::Instant;

fn ns(n: u64) -> Instant {
    Instant::from_nanos(n)
}

fn hier_with(domain: PersistenceDomain, ddio: bool, p: &LatencyProfile) -> MemoryHierarchy {
    MemoryHierarchy::new(domain, ddio, p, Prng::from_seed(7))
}

/// DMP + DDIO with the DDIO share full: the forced eviction of an inbound write must not
/// move the hierarchy's clock to that write's (future) LLC entry time.
#[test]
fn ddio_capacity_eviction_does_not_advance_time_into_the_future() {
    let mut p = LatencyProfile::default_profile();
    p.host.ddio_lines = 4;
    let mut h = hier_with(Dmp, true, &p);
    let a = PM_BASE + 0x10_000;
    // One WRITE of 8 lines overflows a 4-line DDIO share.
    let vis = h
        .dma_write(ns(1_000), Space::Pm, a, &[0xab; 8 * LINE as usize])
        .visible;
    assert!(h.stats().forced_evictions > 0, "the share overflowed");
    // Shortly after the WRITE arrived (before any line is even visible), a crash: no line
    // can be durable yet, and the hierarchy must accept the call.
    let t = ns(1_001);
    assert!(t < vis);
    let img = h.crash_image(t);
    assert_eq!(
        img.read_vec(a, 8 * LINE as usize),
        vec![0; 8 * LINE as usize]
    );
}

/// The same with a later WRITE arriving right after: the model must accept it.
#[test]
fn ddio_capacity_eviction_then_next_write() {
    let mut p = LatencyProfile::default_profile();
    p.host.ddio_lines = 4;
    let mut h = hier_with(Dmp, true, &p);
    let a = PM_BASE + 0x10_000;
    h.dma_write(ns(1_000), Space::Pm, a, &[0xab; 8 * LINE as usize]);
    h.dma_write(ns(1_010), Space::Pm, a + 0x1000, &[0xcd; 64]);
}

/// With the shipped default profile (65,536 DDIO lines): one 4.25 MiB WRITE fills the
/// DDIO share, and the next WRITE (or a crash) 1 ns later panics.
#[test]
fn ddio_capacity_eviction_default_profile() {
    let p = LatencyProfile::default_profile();
    let mut h = hier_with(Dmp, true, &p);
    let a = PM_BASE + 0x100_0000;
    let n = 68 * 1024 * LINE as usize; // 4.25 MiB
    h.dma_write(ns(1_000), Space::Pm, a, &vec![1u8; n]);
    assert!(h.stats().forced_evictions > 0);
    h.dma_write(ns(1_001), Space::Pm, PM_BASE, &[2u8; 64]);
}

// ---------------------------------------------------------------- crash-image oracle

use proptest::prelude::*;
use remora_model::config::PersistenceDomain::{Mhp, Wsp};
use remora_model::hierarchy::{FlushPlacement, FlushRange};
use remora_model::time::Duration;

const CONFIGS: [(PersistenceDomain, bool); 6] = [
    (Dmp, true),
    (Dmp, false),
    (Mhp, true),
    (Mhp, false),
    (Wsp, true),
    (Wsp, false),
];

#[derive(Clone, Debug)]
enum Op {
    Dma {
        line: u8,
        off: u8,
        len: u8,
        gap: u16,
    },
    Store {
        line: u8,
        off: u8,
        len: u8,
        gap: u16,
    },
    Clwb {
        line: u8,
        gap: u16,
    },
    Flush {
        line: u8,
        gap: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let part = (0u8..3, 0u8..64).prop_flat_map(|(l, o)| (Just(l), Just(o), 1u8..=(64 - o)));
    prop_oneof![
        4 => (part.clone(), 0u16..GAP).prop_map(|((line, off, len), gap)| Op::Dma { line, off, len, gap }),
        2 => (part, 0u16..GAP).prop_map(|((line, off, len), gap)| Op::Store { line, off, len, gap }),
        1 => (0u8..3, 0u16..GAP).prop_map(|(line, gap)| Op::Clwb { line, gap }),
        1 => (0u8..3, 0u16..GAP).prop_map(|(line, gap)| Op::Flush { line, gap }),
    ]
}

const GAP: u16 = 60;

fn laddr(line: u8) -> u64 {
    PM_BASE + 0x20_000 + line as u64 * 320 / LINE * LINE
}

/// One version of a line: (visible, creation seq, arrival, off, len, value).
type Ver = (Instant, usize, Instant, u8, u8, u8);

struct Run {
    img: remora_model::mem::SparseMem,
    /// Per line, its versions created by the crash.
    vers: [Vec<Ver>; 3],
    /// Per line, the versions (by creation seq) guaranteed durable by the crash.
    guaranteed: [Vec<usize>; 3],
}

/// The profiles the oracles run with: the default one, and the slow data path, under which
/// a missing wait for the WPQ shows (the default one's last PCIe hop hides it).
fn profile(slow: bool, ddio_lines: Option<u64>) -> LatencyProfile {
    let mut p = if slow {
        LatencyProfile::builtin("slow-data-path").expect("a built-in profile")
    } else {
        LatencyProfile::default_profile()
    };
    if let Some(n) = ddio_lines {
        p.host.ddio_lines = n;
    }
    p
}

fn run(
    domain: PersistenceDomain,
    ddio: bool,
    p: &LatencyProfile,
    seed: u64,
    ops: &[Op],
    crash: Instant,
) -> Run {
    let mut h = MemoryHierarchy::new(domain, ddio, p, Prng::from_seed(seed));
    let mut t = ns(1_000);
    let mut vers: [Vec<Ver>; 3] = Default::default();
    let mut guaranteed: [Vec<usize>; 3] = Default::default();
    for (i, op) in ops.iter().enumerate() {
        let val = i as u8 + 1;
        match *op {
            Op::Dma {
                line,
                off,
                len,
                gap,
            } => {
                t += Duration::from_nanos(gap as u64);
                if t > crash {
                    break;
                }
                let v = h
                    .dma_write(
                        t,
                        Space::Pm,
                        laddr(line) + off as u64,
                        &vec![val; len as usize],
                    )
                    .visible;
                vers[line as usize].push((v, i, t, off, len, val));
            }
            Op::Store {
                line,
                off,
                len,
                gap,
            } => {
                t += Duration::from_nanos(gap as u64);
                if t > crash {
                    break;
                }
                h.cpu_store(
                    t,
                    Space::Pm,
                    laddr(line) + off as u64,
                    &vec![val; len as usize],
                );
                vers[line as usize].push((t, i, t, off, len, val));
            }
            Op::Clwb { line, gap } => {
                t += Duration::from_nanos(gap as u64);
                if t > crash {
                    break;
                }
                let issue = h.clwb(t, laddr(line), LINE);
                let done = h.sfence(t + issue);
                // Every version visible when the clwb issued is durable once the fence returns.
                if done <= crash {
                    for v in &vers[line as usize] {
                        if v.0 <= t {
                            guaranteed[line as usize].push(v.1);
                        }
                    }
                }
                t = done;
            }
            Op::Flush { line, gap } => {
                t += Duration::from_nanos(gap as u64);
                if t > crash {
                    break;
                }
                let r = FlushRange {
                    space: Space::Pm,
                    addr: laddr(line),
                    len: LINE,
                };
                let done = h.flush_done(t, FlushPlacement::Persistence, r);
                // A persistent FLUSH is a guarantee for earlier DMAs except under DMP+DDIO.
                if done <= crash && !(domain == Dmp && ddio) {
                    for v in &vers[line as usize] {
                        let is_dma = matches!(ops[v.1], Op::Dma { .. });
                        if is_dma {
                            guaranteed[line as usize].push(v.1);
                        }
                    }
                }
            }
        }
    }
    Run {
        img: h.crash_image(crash),
        vers,
        guaranteed,
    }
}

fn apply(vers: &[Ver]) -> Vec<u8> {
    let mut img = vec![0u8; 64];
    for &(_, _, _, off, len, val) in vers {
        img[off as usize..(off + len) as usize].fill(val);
    }
    img
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    /// The crash image of each line is what the domain keeps: WSP every version that
    /// arrived, MHP every visible one, DMP a prefix (in version order) of the visible
    /// ones that includes every version guaranteed durable by a clwb+sfence or a FLUSH.
    #[test]
    fn crash_image_matches_the_domain_oracle(
        seed in 0u64..1_000,
        config in 0usize..6,
        slow in any::<bool>(),
        ddio_lines in prop_oneof![Just(None), Just(Some(1u64)), Just(Some(2)), Just(Some(16))],
        ops in prop::collection::vec(op(), 1..30),
        crashes in prop::collection::btree_set(0u64..40_000, 1..10),
    ) {
        let (domain, ddio) = CONFIGS[config];
        let p = profile(slow, ddio_lines);
        let mut times: Vec<u64> = crashes.into_iter().map(|c| 1_000 + c).collect();
        times.push(1_000_000);
        for c in times {
            let r = run(domain, ddio, &p, seed, &ops, ns(c));
            let crash = ns(c);
            for line in 0..3usize {
                let got = r.img.read_vec(laddr(line as u8), 64);
                let mut v = r.vers[line].clone();
                v.sort_by_key(|x| (x.0, x.1));
                match domain {
                    Wsp => prop_assert_eq!(&got, &apply(&v), "WSP line {} at {}", line, c),
                    Mhp => {
                        let vis: Vec<Ver> = v.iter().copied().filter(|x| x.0 <= crash).collect();
                        prop_assert_eq!(&got, &apply(&vis), "MHP line {} at {}", line, c);
                    }
                    Dmp => {
                        let nvis = v.iter().filter(|x| x.0 <= crash).count();
                        let g = v.iter().rposition(|x| r.guaranteed[line].contains(&x.1)).map_or(0, |p| p + 1);
                        prop_assert!(g <= nvis, "guaranteed {} > visible {}", g, nvis);
                        let ok = (g..=nvis).any(|k| apply(&v[..k]) == got);
                        prop_assert!(ok, "DMP ddio={} line {} at {}: image {:?} is no prefix in {}..={} of {:?}", ddio, line, c, got, g, nvis, v);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------- RNIC level

use remora_model::rnic::{MrInfo, QpAttr, Rnic};
use remora_model::verbs::*;
use remora_model::wire::{Body, Packet};

struct Node {
    rnic: Rnic,
    qp: QpNum,
    mr: MrInfo,
}

fn node(id: NodeId, cfg: &str, p: &LatencyProfile) -> Node {
    let mut p = p.clone();
    p.rnic.translation_miss_every = 0;
    let mut rnic = Rnic::new(id, cfg.parse().unwrap(), &p, Prng::from_seed(id as u64));
    let pd = rnic.alloc_pd();
    let a = rnic.alloc(Space::Pm, 1 << 20, 4096);
    let mr = rnic.reg_mr(pd, Space::Pm, a, 1 << 20, Access::ALL).unwrap();
    let cq = rnic.create_cq(64).unwrap();
    let qp = rnic.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    Node { rnic, qp, mr }
}

/// MHP: a WRITE, then a CAS (same QP) of a word the WRITE wrote, whose compare fails. The
/// CAS is ordered after the WRITE (it returns the WRITE's value), and its response tells
/// the requester so; a power failure when that response leaves must not lose the value
/// the requester was just shown (under MHP a visible write is durable; a READ's response
/// waits for every earlier write to be visible, `dma_read`).
#[test]
fn a_failed_cas_response_does_not_precede_the_earlier_write_it_returns() {
    let p = LatencyProfile::default_profile();
    let (mut a, mut b) = (
        node(1, "MHP+DDIO+PM-RQWRB", &p),
        node(2, "MHP+DDIO+PM-RQWRB", &p),
    );
    a.rnic.connect(a.qp, 2, b.qp).unwrap();
    b.rnic.connect(b.qp, 1, a.qp).unwrap();
    let t = ns(1_000);
    let len = 64 * 1024u64;
    let r = Remote {
        addr: b.mr.addr,
        rkey: b.mr.rkey,
    };
    let last = b.mr.addr + len - 8;
    a.rnic
        .post_send(
            t,
            a.qp,
            SendWr::new(
                1,
                Opcode::Write,
                Payload::inline(vec![0x5a; len as usize]),
                Some(r),
            ),
        )
        .unwrap();
    let sge = Sge {
        addr: a.mr.addr,
        len: 8,
        lkey: a.mr.lkey,
    };
    let cas = Opcode::CompareSwap {
        compare: 1,
        swap: 2,
    };
    a.rnic
        .post_send(
            t,
            a.qp,
            SendWr::new(2, cas, Payload::Sge(sge), Some(Remote { addr: last, ..r })),
        )
        .unwrap();
    a.rnic.process_doorbells(t);
    let pkts: Vec<Packet> = std::iter::from_fn(|| a.rnic.poll_transmit().map(|(_, p)| p)).collect();
    assert_eq!(pkts.len(), 2);
    for p in &pkts {
        b.rnic.handle_packet(t, p);
    }
    let resp: Vec<(Instant, Packet)> = std::iter::from_fn(|| b.rnic.poll_transmit()).collect();
    let (leaves, old) = resp
        .iter()
        .find_map(|(at, p)| match p.body {
            Body::AtomicResp(v) => Some((*at, v)),
            _ => None,
        })
        .expect("a CAS response");
    assert_eq!(old, u64::from_le_bytes([0x5a; 8]), "the CAS saw the WRITE");
    let img = b.rnic.crash_image(leaves);
    assert_eq!(
        img.read_vec(last, 8),
        vec![0x5a; 8],
        "the CAS response leaves at {leaves:?}; a power failure then loses the value it returned"
    );
}

/// A FLUSH with persistence placement of a DRAM region is refused (NAK remote access),
/// never answered as done: DRAM loses everything at a power failure, so a "persistent"
/// answer would be a lie the requester builds on. A server can register DRAM with every
/// right (`Access::ALL`); rxe refuses `IB_ACCESS_FLUSH_PERSISTENT` on non-pmem memory, and
/// the model's SFlush and RFlush already refuse DRAM. Before the fix the FLUSH was answered
/// `Done` and the WRITE it answered for was gone after a power failure then (found by
/// review).
#[test]
fn a_persistent_flush_of_a_dram_region_is_refused() {
    let p = LatencyProfile::default_profile();
    for cfg in [
        "DMP+noDDIO+PM-RQWRB",
        "MHP+DDIO+PM-RQWRB",
        "WSP+DDIO+PM-RQWRB",
    ] {
        let (mut a, mut b) = (node(1, cfg, &p), node(2, cfg, &p));
        a.rnic.connect(a.qp, 2, b.qp).unwrap();
        b.rnic.connect(b.qp, 1, a.qp).unwrap();
        let pd = b.rnic.alloc_pd();
        let at = b.rnic.alloc(Space::Dram, 4096, 4096);
        let dram = b
            .rnic
            .reg_mr(pd, Space::Dram, at, 4096, Access::ALL)
            .unwrap();
        // The QP must be in the MR's protection domain: a second QP pair on it.
        let cq = b.rnic.create_cq(64).unwrap();
        let bqp = b.rnic.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
        let apd = a.rnic.alloc_pd();
        let acq = a.rnic.create_cq(64).unwrap();
        let aqp = a.rnic.create_qp(apd, acq, acq, QpAttr::default()).unwrap();
        a.rnic.connect(aqp, 2, bqp).unwrap();
        b.rnic.connect(bqp, 1, aqp).unwrap();
        let r = Remote {
            addr: dram.addr,
            rkey: dram.rkey,
        };
        let t = ns(1_000);
        let write = SendWr::new(1, Opcode::Write, Payload::inline(vec![0x5a; 64]), Some(r));
        a.rnic.post_send(t, aqp, write).unwrap();
        a.rnic.post_send(t, aqp, SendWr::wflush(2, r, 64)).unwrap();
        a.rnic.process_doorbells(t);
        let pkts: Vec<Packet> =
            std::iter::from_fn(|| a.rnic.poll_transmit().map(|(_, p)| p)).collect();
        assert_eq!(pkts.len(), 2);
        for p in &pkts {
            b.rnic.handle_packet(t, p);
        }
        let resp: Vec<(Instant, Packet)> = std::iter::from_fn(|| b.rnic.poll_transmit()).collect();
        let flush = resp
            .iter()
            .find(|(_, p)| p.psn == pkts[1].psn)
            .expect("the FLUSH is answered");
        assert_eq!(
            flush.1.body,
            Body::Nak(remora_model::wire::NakCode::RemoteAccess),
            "{cfg}: a persistent FLUSH of DRAM answered {:?} at {:?}",
            flush.1.body,
            flush.0
        );
    }
}

#[derive(Clone, Debug)]
enum ROp {
    Write { off: u16, len: u16, gap: u16 },
    Flush { off: u16, len: u16, gap: u16 },
    Read { off: u16, len: u16, gap: u16 },
    AtomicWrite { word: u16, gap: u16 },
}

const SPAN: u16 = 1024;

fn rop() -> impl Strategy<Value = ROp> {
    let range = (0..SPAN).prop_flat_map(|o| (Just(o), 0..=(SPAN - o).min(300)));
    prop_oneof![
        5 => (range.clone(), 0u16..300).prop_map(|((off, len), gap)| ROp::Write { off, len, gap }),
        2 => (range.clone(), 0u16..300).prop_map(|((off, len), gap)| ROp::Flush { off, len, gap }),
        1 => (range, 0u16..300).prop_map(|((off, len), gap)| ROp::Read { off, len, gap }),
        1 => (0..SPAN / 8, 0u16..300).prop_map(|(word, gap)| ROp::AtomicWrite { word, gap }),
    ]
}

/// Runs `ops` from one requester QP to a responder of `cfg`, each request reaching the
/// responder `gap` ns after the one before; at the `k`-th response that is a FLUSH's or a
/// READ's (in the order the responder makes them), returns (op index, departure, crash
/// image of the region at the departure).
fn flush_run(
    cfg: &str,
    p: &LatencyProfile,
    ops: &[ROp],
    k: usize,
) -> Option<(usize, Vec<u8>, Vec<usize>)> {
    let (mut a, mut b) = (node(1, cfg, p), node(2, cfg, p));
    b.rnic.record_events(true);
    a.rnic.connect(a.qp, 2, b.qp).unwrap();
    b.rnic.connect(b.qp, 1, a.qp).unwrap();
    let t0 = ns(10_000);
    let base = b.mr.addr;
    let r = Remote {
        addr: base,
        rkey: b.mr.rkey,
    };
    let lsge = |len: u16| Sge {
        addr: a.mr.addr,
        len: len as u32,
        lkey: a.mr.lkey,
    };
    let mut psn_op = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let wr = match *op {
            ROp::Write { off, len, .. } => SendWr::new(
                i as u64,
                Opcode::Write,
                Payload::inline(vec![i as u8 + 1; len as usize]),
                Some(Remote {
                    addr: base + off as u64,
                    ..r
                }),
            ),
            ROp::Flush { off, len, .. } => SendWr::wflush(
                i as u64,
                Remote {
                    addr: base + off as u64,
                    ..r
                },
                len as u64,
            ),
            ROp::Read { off, len, .. } => SendWr::new(
                i as u64,
                Opcode::Read,
                Payload::Sge(lsge(len)),
                Some(Remote {
                    addr: base + off as u64,
                    ..r
                }),
            ),
            ROp::AtomicWrite { word, .. } => SendWr::new(
                i as u64,
                Opcode::AtomicWrite {
                    value: u64::from_le_bytes([i as u8 + 1; 8]),
                },
                Payload::None,
                Some(Remote {
                    addr: base + word as u64 * 8,
                    ..r
                }),
            ),
        };
        a.rnic.post_send(t0, a.qp, wr).unwrap();
        psn_op.push(i);
    }
    a.rnic.process_doorbells(t0);
    let pkts: Vec<Packet> = std::iter::from_fn(|| a.rnic.poll_transmit().map(|(_, p)| p)).collect();
    assert_eq!(pkts.len(), ops.len());
    let first_psn = pkts[0].psn;
    let mut arrive = t0;
    let mut arrivals = Vec::new();
    for (p, op) in pkts.into_iter().zip(ops) {
        let gap = match *op {
            ROp::Write { gap, .. }
            | ROp::Flush { gap, .. }
            | ROp::Read { gap, .. }
            | ROp::AtomicWrite { gap, .. } => gap,
        };
        arrive += Duration::from_nanos(gap as u64);
        arrivals.push((arrive, p));
    }
    let mut arrivals = arrivals.into_iter().peekable();
    let mut seen = 0;
    loop {
        let next_pkt = arrivals.peek().map(|(t, _)| *t);
        let next_timer = b.rnic.poll_timeout();
        let now = match (next_pkt, next_timer) {
            (Some(p), Some(t)) => p.min(t),
            (a, b) => a.or(b)?,
        };
        if next_pkt == Some(now) {
            let (_, p) = arrivals.next().unwrap();
            b.rnic.handle_packet(now, &p);
        } else {
            b.rnic.handle_timeout(now);
        }
        while let Some((at, p)) = b.rnic.poll_transmit() {
            if matches!(p.body, Body::Done | Body::ReadResp(_)) {
                let idx = psn_op[p.psn.wrapping_sub(first_psn) as usize];
                if matches!(ops[idx], ROp::Flush { .. } | ROp::Read { .. }) {
                    if seen == k {
                        let img = b
                            .rnic
                            .crash_image(at.max(now))
                            .read_vec(base, SPAN as usize);
                        // The requests' execution order (their effects' order).
                        let exec: Vec<usize> = b
                            .rnic
                            .take_events()
                            .into_iter()
                            .filter(|e| e.kind == remora_model::rnic::EventKind::Executed)
                            .map(|e| psn_op[(e.id as u32).wrapping_sub(first_psn) as usize])
                            .collect();
                        return Some((idx, img, exec));
                    }
                    seen += 1;
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// When a FLUSH's (or a READ's, used as one) response leaves the responder, every byte
    /// of its range (a READ: every byte) holds the last earlier WRITE over it, or a later
    /// one that passed the FLUSH: never an older value.
    #[test]
    fn a_flush_or_read_response_never_precedes_persistence(
        cfg in 0usize..5,
        slow in any::<bool>(),
        ops in prop::collection::vec(rop(), 1..25),
    ) {
        let cfg = ["DMP+noDDIO+PM-RQWRB", "MHP+DDIO+PM-RQWRB", "MHP+noDDIO+PM-RQWRB",
                   "WSP+DDIO+PM-RQWRB", "WSP+noDDIO+PM-RQWRB"][cfg];
        let p = profile(slow, None);
        let covers = |op: &ROp, byte: u16| match *op {
            ROp::Write { off, len, .. } => off <= byte && byte < off + len,
            ROp::AtomicWrite { word, .. } => word * 8 <= byte && byte < word * 8 + 8,
            _ => false,
        };
        for k in 0.. {
            let Some((idx, img, exec)) = flush_run(cfg, &p, &ops, k) else { break };
            let rank = |j: usize| exec.iter().position(|&e| e == j);
            let (lo, hi) = match ops[idx] {
                ROp::Flush { off, len, .. } => (off, off + len),
                _ => (0, SPAN),
            };
            for byte in lo..hi {
                // The earlier write over the byte that took effect last.
                let Some(last) = (0..idx).filter(|&j| covers(&ops[j], byte))
                    .max_by_key(|&j| rank(j).expect("an earlier request executed")) else { continue };
                let got = img[byte as usize];
                let ok = (0..ops.len()).any(|j| covers(&ops[j], byte) && got == j as u8 + 1
                    && match rank(j) {
                        Some(r) => r >= rank(last).unwrap(),
                        // Under WSP a non-posted write waiting in the RNIC buffer is kept.
                        None => cfg.starts_with("WSP") && matches!(ops[j], ROp::AtomicWrite { .. }),
                    });
                prop_assert!(ok, "{} op {} ({:?}): byte {} holds {} at the response, older than write {}",
                    cfg, idx, ops[idx], byte, got, last);
            }
        }
    }
}

/// The shipped slow-data-path profile (LLC residency 2 ms): a stream of one-line WRITEs
/// 10 ns apart fills the 65,536-line DDIO share after ~0.7 ms of traffic.
#[test]
fn ddio_capacity_eviction_streaming_slow_profile() {
    let p = LatencyProfile::builtin("slow-data-path").unwrap();
    let mut h = hier_with(Dmp, true, &p);
    let mut t = ns(1_000);
    for i in 0..70_000u64 {
        h.dma_write(t, Space::Pm, PM_BASE + i * LINE, &[i as u8; 64]);
        t += Duration::from_nanos(10);
    }
    assert!(h.stats().forced_evictions > 0);
}
