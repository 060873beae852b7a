//! The native RDMA Flush primitives of seed 003 §4.1 (WFlush, SFlush, RFlush), observed
//! through the simulator: completions, error completions, timing, and what survives a
//! power failure of the responder at the moment the requester (or, for RFlush, the peer
//! notified) learns the data is durable, under every persistence domain with DDIO on and
//! off.
//!
//! Crash truth, asserted below for each primitive:
//!
//! | server | after the primitive's completion |
//! |---|---|
//! | DMP, DDIO off | durable |
//! | DMP, DDIO on | **not** durable: the lines wait in the LLC, which an RNIC cannot write back (seed 000 §3.1.2, seed 003 §4.4.2) |
//! | MHP, DDIO on/off | durable |
//! | WSP, DDIO on/off | durable |

mod fabric_common;

use fabric_common::*;
use remora_model::time::{Duration, Instant};
use remora_model::LatencyProfile;
use remora_verbs::*;
use std::cell::RefCell;
use std::rc::Rc;

const CONFIGS: [&str; 6] = [
    "DMP+noDDIO+PM-RQWRB",
    "DMP+DDIO+PM-RQWRB",
    "MHP+DDIO+PM-RQWRB",
    "MHP+noDDIO+PM-RQWRB",
    "WSP+DDIO+PM-RQWRB",
    "WSP+noDDIO+PM-RQWRB",
];
const SEEDS: u64 = 10;
const LEN: usize = 4096;

/// What one run of a primitive showed.
#[derive(Debug)]
struct Run {
    /// Image a power failure would leave when the data operation alone completed (or, for
    /// RFlush, when the receiver learned of the data).
    before: Vec<u8>,
    /// What survived a power failure at the primitive's completion (the notification's
    /// arrival for RFlush).
    after: Vec<u8>,
    data: Vec<u8>,
}

/// The shipped default profile, and `slow-data-path`, whose data path is a thousand times
/// slower: there a response that waited for visibility instead of persistence would reach
/// the requester long before the data reaches the persistence domain, so the truth table
/// catches a primitive that waits for too little.
fn profiles() -> [LatencyProfile; 2] {
    [
        LatencyProfile::default_profile(),
        LatencyProfile::builtin("slow-data-path").unwrap(),
    ]
}

/// Checks the crash-truth table over `SEEDS` seeds of `run(seed, config, profile)` for
/// both [`profiles`].
fn check_truth(what: &str, run: impl Fn(u64, &str, &LatencyProfile) -> Run) {
    for p in profiles() {
        check_truth_with(&format!("{what} ({})", p.name), |s, c| run(s, c, &p));
    }
}

fn check_truth_with(what: &str, run: impl Fn(u64, &str) -> Run) {
    for config in CONFIGS {
        let mut lost_after = Vec::new();
        let mut lost_before = Vec::new();
        for seed in 0..SEEDS {
            let r = run(seed, config);
            if r.after != r.data {
                lost_after.push(seed);
            }
            if r.before != r.data {
                lost_before.push(seed);
            }
        }
        if config == "DMP+DDIO+PM-RQWRB" {
            // A DDIO line stays in the LLC ~20 us on average; the primitives take a few us.
            assert!(
                lost_after.len() as u64 >= SEEDS - 2,
                "{what} under {config}: durable at completion in too many seeds \
                 (lost only in {lost_after:?}); the RNIC cannot write back the LLC"
            );
        } else {
            assert!(
                lost_after.is_empty(),
                "{what} under {config}: data lost after the completion in seeds {lost_after:?}"
            );
        }
        if config == "DMP+noDDIO+PM-RQWRB" {
            // Negative control: without the primitive the data was not yet durable.
            assert!(
                !lost_before.is_empty(),
                "{what} under {config}: the data was always durable before the primitive"
            );
        }
    }
}

// ------------------------------------------------------------------ WFlush

#[test]
fn wflush_is_the_persistent_flush_of_the_written_range() {
    let r = Remote {
        addr: 4096,
        rkey: 7,
    };
    let wr = SendWr::wflush(3, r, 100);
    assert_eq!(
        wr.opcode,
        Opcode::Flush {
            placement: FlushPlacement::Persistence,
            len: 100
        }
    );
    assert_eq!((wr.wr_id, wr.remote, wr.local.len()), (3, Some(r), 0));
    assert!(wr.signaled && wr.opcode.is_non_posted());
}

fn wflush_run(seed: u64, config: &str, p: &LatencyProfile) -> Run {
    let net = Rc::new(Net::with_profile(seed, cfg(config), QpType::Rc, p.clone()));
    let data = pattern(LEN, 0x31);
    let off = 8192;
    let addr = net.server.pm.addr + off;
    let n = net.clone();
    let d = data.clone();
    let (before, t_w, t_f) = net.block_on(async move {
        let c = &n.client;
        c.h.post_send(
            n.cqp,
            SendWr::new(
                1,
                Opcode::Write,
                Payload::inline(d),
                Some(c_remote(&n, off)),
            ),
        )
        .unwrap();
        c.h.post_send(n.cqp, SendWr::wflush(2, c_remote(&n, off), LEN as u64))
            .unwrap();
        let w = next_completion(&c.h, c.scq).await;
        assert_eq!(
            (w.status, w.opcode),
            (WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let before = n.server_image(addr, LEN);
        let t_w = c.h.now();
        let f = next_completion(&c.h, c.scq).await;
        assert_eq!((f.status, f.opcode), (WcStatus::Success, WcOpcode::Flush));
        (before, t_w, c.h.now())
    });
    assert!(t_w < t_f);
    let after = net.crash_server(addr, LEN);
    Run {
        before,
        after,
        data,
    }
}

fn c_remote(n: &Net, off: u64) -> Remote {
    n.server.remote_pm(off)
}

#[test]
fn wflush_crash_truth_in_every_domain() {
    check_truth("WRITE + WFlush", wflush_run);
}

#[test]
fn wflush_needs_the_flush_persistent_right() {
    let net = Net::new(1, cfg("DMP+noDDIO+PM-RQWRB"), QpType::Rc);
    let s = &net.server;
    let mr =
        s.h.reg_mr(
            s.pd,
            Space::Pm,
            s.pm.addr,
            4096,
            Access::REMOTE_WRITE | Access::FLUSH_GLOBAL,
        )
        .unwrap();
    let c = net.client.clone();
    let qp = net.cqp;
    let wc = net.block_on(async move {
        let r = Remote {
            addr: mr.addr,
            rkey: mr.rkey,
        };
        c.h.post_send(qp, SendWr::wflush(9, r, 64)).unwrap();
        next_completion(&c.h, c.scq).await
    });
    assert_eq!(wc.status, WcStatus::RemAccessErr);
}

// ------------------------------------------------------------------ SFlush

/// A SEND of `data` into a receive buffer in the server's PM (or DRAM), then an SFlush.
/// Returns the image at the SEND's completion, the durable image after a power failure at
/// the SFlush's completion, and both completion times.
fn sflush_scenario(
    net: Rc<Net>,
    data: Vec<u8>,
    pm_buffer: bool,
) -> (Vec<u8>, WorkCompletion, Instant, Instant) {
    let buf = net.server.sge(pm_buffer, 64 * 1024, LEN as u32);
    net.server.recv(net.sqp, 77, buf);
    let n = net.clone();
    net.block_on(async move {
        let c = &n.client;
        let t0 = c.h.now();
        c.h.post_send(
            n.cqp,
            SendWr::new(1, Opcode::Send, Payload::inline(data), None),
        )
        .unwrap();
        c.h.post_send(n.cqp, SendWr::sflush(2)).unwrap();
        let s = next_completion(&c.h, c.scq).await;
        assert_eq!((s.status, s.opcode), (WcStatus::Success, WcOpcode::Send));
        let before = n.server_image(buf.addr, LEN);
        let t_send = c.h.now();
        let f = next_completion(&c.h, c.scq).await;
        let _ = t0;
        (before, f, t_send, c.h.now())
    })
}

fn sflush_run(seed: u64, config: &str, p: &LatencyProfile) -> Run {
    let net = Rc::new(Net::with_profile(seed, cfg(config), QpType::Rc, p.clone()));
    let data = pattern(LEN, 0x52);
    let (before, f, _, _) = sflush_scenario(net.clone(), data.clone(), true);
    assert_eq!((f.status, f.opcode), (WcStatus::Success, WcOpcode::SFlush));
    let addr = net.server.sge(true, 64 * 1024, 0).addr;
    let after = net.crash_server(addr, LEN);
    Run {
        before,
        after,
        data,
    }
}

#[test]
fn sflush_crash_truth_in_every_domain() {
    check_truth("SEND + SFlush", sflush_run);
}

#[test]
fn sflush_pays_the_profiles_address_lookup() {
    let cost = |lookup_ns: u64| {
        let mut p = LatencyProfile::default_profile();
        p.rnic.sflush_lookup_ns = lookup_ns;
        let net = Rc::new(Net::with_profile(
            4,
            cfg("DMP+noDDIO+PM-RQWRB"),
            QpType::Rc,
            p,
        ));
        let (_, f, t_send, t_flush) = sflush_scenario(net, pattern(256, 1), true);
        assert_eq!(f.status, WcStatus::Success);
        t_flush - t_send
    };
    let default = LatencyProfile::default_profile().rnic.sflush_lookup_ns;
    assert_eq!(default, 7000, "seed 003 §4.1.3: about 7 us");
    let (slow, fast) = (cost(default), cost(0));
    assert!(slow >= Duration::from_nanos(default), "{slow:?}");
    assert!(fast < Duration::from_nanos(2000), "{fast:?}");
    let extra = Duration::from_nanos(slow.as_nanos() - fast.as_nanos());
    assert!(
        extra >= Duration::from_nanos(default - 1000) && extra <= Duration::from_nanos(default),
        "the lookup added {extra:?}"
    );
}

#[test]
fn sflush_of_a_send_that_landed_in_dram_is_refused() {
    let net = Rc::new(Net::new(2, cfg("DMP+noDDIO+DRAM-RQWRB"), QpType::Rc));
    let (_, f, _, _) = sflush_scenario(net, pattern(128, 3), false);
    assert_eq!(
        (f.status, f.opcode),
        (WcStatus::RemInvReqErr, WcOpcode::SFlush)
    );
}

#[test]
fn sflush_covers_the_last_send_before_it() {
    // Two SENDs: the first lands in DRAM, the second in PM; the SFlush follows the second.
    let net = Rc::new(Net::new(5, cfg("DMP+noDDIO+PM-RQWRB"), QpType::Rc));
    let (dram, pm) = (net.server.sge(false, 0, 512), net.server.sge(true, 0, 512));
    net.server.recv(net.sqp, 1, dram);
    net.server.recv(net.sqp, 2, pm);
    let n = net.clone();
    let (a, b) = (pattern(512, 1), pattern(512, 2));
    let (a2, b2) = (a.clone(), b.clone());
    let wcs = net.block_on(async move {
        let c = &n.client;
        for (id, d) in [(1, a2), (2, b2)] {
            c.h.post_send(
                n.cqp,
                SendWr::new(id, Opcode::Send, Payload::inline(d), None),
            )
            .unwrap();
        }
        c.h.post_send(n.cqp, SendWr::sflush(3)).unwrap();
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(next_completion(&c.h, c.scq).await);
        }
        out
    });
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(wcs[2].opcode, WcOpcode::SFlush);
    assert_eq!(net.crash_server(pm.addr, 512), b);
    let _ = a;
}

/// An RC pair whose server is DMP without DDIO on the slow data path: lines reach the WPQ
/// up to milliseconds after they are visible, far out of order.
fn slow_dmp_net(seed: u64) -> Rc<Net> {
    let profile = LatencyProfile::builtin("slow-data-path").unwrap();
    Rc::new(Net::with_profile(
        seed,
        cfg("DMP+noDDIO+PM-RQWRB"),
        QpType::Rc,
        profile,
    ))
}

#[test]
fn one_sflush_after_a_batch_covers_every_send_of_the_batch() {
    // Seed 003 §4.3: the durable RPCs post one SFlush after a batch of SENDs. It must
    // persist each SEND's landing buffer, not only the last one's: on the slow data path
    // (the mesh's spread is milliseconds) an earlier SEND's lines may persist after the
    // last one's, and a power failure at the SFlush's completion must still keep all.
    const N: u64 = 5;
    const BYTES: u32 = 256;
    for seed in 1..=8 {
        let net = slow_dmp_net(seed);
        let bufs: Vec<Sge> = (0..N)
            .map(|i| net.server.sge(true, i * 4096, BYTES))
            .collect();
        for (i, b) in bufs.iter().enumerate() {
            net.server.recv(net.sqp, i as u64, *b);
        }
        let n = net.clone();
        let wcs = net.block_on(async move {
            let c = &n.client;
            for id in 0..N {
                let data = Payload::inline(pattern(BYTES as usize, id as u8 + 1));
                c.h.post_send(n.cqp, SendWr::new(id, Opcode::Send, data, None))
                    .unwrap();
            }
            c.h.post_send(n.cqp, SendWr::sflush(100)).unwrap();
            let mut out = Vec::new();
            for _ in 0..=N {
                out.push(next_completion(&c.h, c.scq).await);
            }
            out
        });
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        assert_eq!(wcs.last().unwrap().opcode, WcOpcode::SFlush);
        for (i, b) in bufs.iter().enumerate() {
            let kept = net.server_image(b.addr, BYTES as usize);
            assert_eq!(
                kept,
                pattern(BYTES as usize, i as u8 + 1),
                "seed {seed}: SEND {i} of the batch is not durable at the SFlush's completion"
            );
        }
    }
}

#[test]
fn an_sflush_after_more_sends_than_the_rnic_remembers_still_covers_them_all() {
    // The responder's RNIC remembers the last 1,024 landings. A batch longer than that
    // has SENDs it no longer knows: the SFlush then persists all of PM rather than skip
    // them (a SEND to PM, 1,028 to DRAM, one to PM, one SFlush).
    const BYTES: u32 = 256;
    const DRAM_SENDS: u64 = 1028;
    for seed in 1..=8 {
        let net = slow_dmp_net(seed);
        let first = net.server.sge(true, 0, BYTES);
        let last = net.server.sge(true, 4096, BYTES);
        let dram = net.server.sge(false, 0, BYTES);
        // The receive queue holds 1,024: the server reposts as SENDs land.
        let posted_first = 1023;
        let bufs: Vec<Sge> = std::iter::once(first)
            .chain((0..DRAM_SENDS).map(|_| dram))
            .chain(std::iter::once(last))
            .collect();
        for (i, b) in bufs.iter().take(posted_first).enumerate() {
            net.server.recv(net.sqp, i as u64, *b);
        }
        // The server reposts as SENDs land.
        let n = net.clone();
        let total = bufs.len();
        net.sim.spawn(async move {
            let s = &n.server;
            for landed in 0..total {
                let wc = next_completion(&s.h, s.rcq).await;
                assert_eq!(wc.status, WcStatus::Success, "SEND {landed}");
                if let Some(b) = bufs.get(posted_first + landed) {
                    s.recv(n.sqp, (posted_first + landed) as u64, *b);
                }
            }
        });
        // The send queue holds 1,024 too: rounds of 512, each waited for.
        let n = net.clone();
        let flushed = net.block_on(async move {
            let c = &n.client;
            for round in (0..total as u64).collect::<Vec<_>>().chunks(512) {
                for &id in round {
                    let data = Payload::inline(pattern(BYTES as usize, 1 + (id % 200) as u8));
                    let last = id == *round.last().unwrap();
                    let wr = SendWr::new(id, Opcode::Send, data, None).signaled(last);
                    c.h.post_send(n.cqp, wr).unwrap();
                }
                let wc = next_completion(&c.h, c.scq).await;
                assert_eq!(wc.status, WcStatus::Success);
            }
            c.h.post_send(n.cqp, SendWr::sflush(9_999)).unwrap();
            next_completion(&c.h, c.scq).await
        });
        assert_eq!(
            (flushed.status, flushed.opcode),
            (WcStatus::Success, WcOpcode::SFlush)
        );
        assert_eq!(
            net.server_image(first.addr, BYTES as usize),
            pattern(BYTES as usize, 1),
            "seed {seed}: the batch's first SEND is not durable at the SFlush's completion"
        );
    }
}

#[test]
fn sflush_is_refused_at_post_time_where_it_cannot_work() {
    // No SEND before it.
    let net = Net::new(1, cfg("DMP+noDDIO+PM-RQWRB"), QpType::Rc);
    let e = net
        .client
        .h
        .post_send(net.cqp, SendWr::sflush(1))
        .unwrap_err();
    assert!(
        matches!(e, VerbsError::Invalid(m) if m.contains("follow a SEND")),
        "{e}"
    );
    // Only on RC (seed 003 §4.1.1: it waits for the responder's ACK).
    for t in [QpType::Uc, QpType::Ud] {
        let net = Net::new(1, cfg("DMP+noDDIO+PM-RQWRB"), t);
        let mut wr = SendWr::sflush(1);
        if t == QpType::Ud {
            wr = wr.to(net.to_server());
        }
        let e = net.client.h.post_send(net.cqp, wr).unwrap_err();
        assert_eq!(
            e,
            VerbsError::NotOnQpType {
                op: "SFlush",
                qp_type: t.name()
            }
        );
    }
    // A NIC without the FLUSH machinery has neither SFlush nor RFlush.
    let net = Net::new(1, cfg("DMP+noDDIO+PM-RQWRB,legacy"), QpType::Rc);
    net.client
        .h
        .post_send(
            net.cqp,
            SendWr::new(1, Opcode::Send, Payload::inline(vec![1]), None),
        )
        .unwrap();
    let e = net
        .client
        .h
        .post_send(net.cqp, SendWr::sflush(2))
        .unwrap_err();
    assert_eq!(e, VerbsError::Unsupported("SFlush"));
    let range = net.client.sge(true, 0, 64);
    let e = net
        .client
        .h
        .post_send(net.cqp, SendWr::rflush(3, range, 0))
        .unwrap_err();
    assert_eq!(e, VerbsError::Unsupported("RFlush"));
}

// ------------------------------------------------------------------ RFlush

/// The client delivers `LEN` bytes to the server's PM (RC/UC: WRITE_WITH_IMM; UD: a SEND
/// into a PM receive buffer); the server, told by its receive completion, posts an RFlush
/// of the range; the client waits for the notification. Returns the run, the server's
/// RFlush completion, the client's notification and the image when the server posted.
fn rflush_run_on(
    seed: u64,
    config: &str,
    t: QpType,
    p: &LatencyProfile,
) -> (Run, WorkCompletion, WorkCompletion) {
    let net = Rc::new(Net::with_profile(seed, cfg(config), t, p.clone()));
    let data = pattern(LEN, 0x7a);
    let off = 128 * 1024;
    let range = net.server.sge(true, off, LEN as u32);
    net.server.recv(net.sqp, 10, range);
    net.client.recv(net.cqp, 20, net.client.sge(false, 0, 64));
    // The receiver: waits for the data, then RFlushes it.
    let server_out = Rc::new(RefCell::new(None));
    {
        let (n, out) = (net.clone(), server_out.clone());
        net.sim.spawn(async move {
            let s = &n.server;
            let wc = next_completion(&s.h, s.rcq).await;
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            let before = n.server_image(range.addr, LEN);
            let mut wr = SendWr::rflush(11, range, 0xF1);
            if t == QpType::Ud {
                wr = wr.to(n.to_client());
            }
            s.h.post_send(n.sqp, wr).unwrap();
            let done = next_completion(&s.h, s.scq).await;
            // The RFlush's own completion comes after the data is in the domain, too.
            let at_done = n.server_image(range.addr, LEN);
            *out.borrow_mut() = Some((before, done, at_done));
        });
    }
    let (n, server_done) = (net.clone(), server_out.clone());
    let d = data.clone();
    let note = net.block_on(async move {
        let c = &n.client;
        let wr = match t {
            QpType::Ud => {
                SendWr::new(1, Opcode::SendWithImm(5), Payload::inline(d), None).to(n.to_server())
            }
            _ => SendWr::new(
                1,
                Opcode::WriteWithImm(5),
                Payload::inline(d),
                Some(n.server.remote_pm(off)),
            ),
        };
        c.h.post_send(n.cqp, wr).unwrap();
        let note = next_completion(&c.h, c.rcq).await;
        // What a power failure as the notification arrives would leave.
        let after = n.server_image(range.addr, LEN);
        // On RC the RFlush completes when the notification is acknowledged.
        while server_done.borrow().is_none() {
            c.h.sleep(Duration::from_nanos(100)).await;
        }
        (note, after)
    });
    let (note, after) = note;
    let (before, done, at_done) = server_out.borrow_mut().take().expect("server finished");
    let crashed = net.crash_server(range.addr, LEN);
    if config != "DMP+DDIO+PM-RQWRB" {
        assert_eq!(
            at_done, data,
            "{config} {t:?}: durable at the RFlush completion"
        );
        assert_eq!(
            crashed, data,
            "{config} {t:?}: durable after a power failure"
        );
    }
    (
        Run {
            before,
            after,
            data,
        },
        done,
        note,
    )
}

#[test]
fn rflush_crash_truth_on_every_service_type_and_domain() {
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        check_truth(&format!("RFlush on {}", t.name()), |seed, config, p| {
            let (run, done, note) = rflush_run_on(seed, config, t, p);
            assert_eq!(
                (done.status, done.opcode),
                (WcStatus::Success, WcOpcode::RFlush)
            );
            assert_eq!(note.status, WcStatus::Success);
            assert_eq!(note.opcode, WcOpcode::Recv);
            assert_eq!((note.imm, note.byte_len), (Some(0xF1), 0));
            let want_src = (t == QpType::Ud).then_some((0, QpNum(0)));
            assert_eq!(
                note.src, want_src,
                "the notification names its sender on UD"
            );
            run
        });
    }
}

#[test]
fn rflush_is_refused_at_post_time_for_a_bad_range() {
    let net = Net::new(1, cfg("DMP+noDDIO+PM-RQWRB"), QpType::Rc);
    let s = &net.server;
    let post = |wr: SendWr| s.h.post_send(net.sqp, wr);
    let is_invalid = |e: VerbsError| matches!(e, VerbsError::Invalid(_));
    // DRAM is nothing an RNIC can persist.
    assert!(is_invalid(
        post(SendWr::rflush(1, s.sge(false, 0, 64), 0)).unwrap_err()
    ));
    // Outside the MR, or an unknown key.
    assert!(is_invalid(
        post(SendWr::rflush(1, s.sge(true, REGION - 32, 64), 0)).unwrap_err()
    ));
    let mut bad = s.sge(true, 0, 64);
    bad.lkey = 0xdead;
    assert!(is_invalid(post(SendWr::rflush(1, bad, 0)).unwrap_err()));
    // No payload, no remote address.
    let mut wr = SendWr::rflush(1, s.sge(true, 0, 64), 0);
    wr.local = Payload::inline(vec![1]);
    assert!(is_invalid(post(wr).unwrap_err()));
    // A UD RFlush must name where the notification goes.
    let net = Net::new(1, cfg("DMP+noDDIO+PM-RQWRB"), QpType::Ud);
    let e = net
        .server
        .h
        .post_send(net.sqp, SendWr::rflush(1, net.server.sge(true, 0, 64), 0))
        .unwrap_err();
    assert!(is_invalid(e));
}

/// Without a receive posted at the peer, RC retries the notification (RNR) until one is
/// posted; UC and UD drop it (and count it), and the RFlush still completes.
#[test]
fn rflush_notification_without_a_receive() {
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        let net = Rc::new(Net::new(3, cfg("DMP+noDDIO+PM-RQWRB"), t));
        let range = net.server.sge(true, 0, 256);
        let mut wr = SendWr::rflush(1, range, 9);
        if t == QpType::Ud {
            wr = wr.to(net.to_client());
        }
        net.server.h.post_send(net.sqp, wr).unwrap();
        net.sim.run_until(Instant::from_nanos(60_000));
        let done = net.server.h.poll_one(net.server.scq);
        let stats = net.stats(&net.client);
        if t == QpType::Rc {
            assert_eq!(done, None, "RC waits for the peer's receive");
            assert!(net.stats(&net.client).rnr_naks >= 2);
            net.client.recv(net.cqp, 5, net.client.sge(false, 0, 64));
            let n = net.clone();
            let (done, note) = net.block_on(async move {
                let d = next_completion(&n.server.h, n.server.scq).await;
                let note = next_completion(&n.client.h, n.client.rcq).await;
                (d, note)
            });
            assert_eq!(
                (done.status, done.opcode),
                (WcStatus::Success, WcOpcode::RFlush)
            );
            assert_eq!((note.wr_id, note.imm), (5, Some(9)));
        } else {
            let done = done.expect("UC/UD complete at transmit");
            assert_eq!(
                (done.status, done.opcode),
                (WcStatus::Success, WcOpcode::RFlush)
            );
            assert_eq!(stats.unreliable_no_recv, 1, "{t:?}: {stats:?}");
            assert_eq!(net.client.h.poll_one(net.client.rcq), None);
        }
    }
}
