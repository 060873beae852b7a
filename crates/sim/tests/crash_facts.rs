//! The model's key remote-persistence facts (seed 000 §3.2–§3.3), through the full
//! simulator: a client node issues RDMA operations to a server node, and the server loses
//! power at a chosen moment (`FaultPlan`, `crash_now`). What survives is read from the
//! server's durable image after the power failure.

use remora_model::config::*;
use remora_model::profile::LatencyProfile;
use remora_model::time::{Duration, Instant};
use remora_sim::{CrashAt, FaultPlan, NodeHandle, Sim};
use remora_verbs::*;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

struct Rig {
    sim: Sim,
    server: NodeHandle,
    client: NodeHandle,
    spd: PdId,
    /// 1 MiB of server PM, every right.
    mr: MrInfo,
    sqp: QpNum,
    scq: CqId,
    qp: QpNum,
    cq: CqId,
}

fn cfg(name: &str) -> ServerConfig {
    name.parse().unwrap()
}

/// A server with `server_cfg` and a client on the same transport, one connection.
fn rig(seed: u64, server_cfg: ServerConfig) -> Rig {
    let sim = Sim::new(seed, LatencyProfile::default_profile());
    let server = sim.add_node("server", server_cfg);
    let client = sim.add_node("client", server_cfg);
    let spd = server.alloc_pd().unwrap();
    let base = server.alloc(Space::Pm, 1 << 20, 4096);
    let mr = server
        .reg_mr(spd, Space::Pm, base, 1 << 20, Access::ALL)
        .unwrap();
    let scq = server.create_cq(256).unwrap();
    let sqp = server.create_qp(spd, scq, scq, QpAttr::default()).unwrap();
    let cpd = client.alloc_pd().unwrap();
    let cq = client.create_cq(256).unwrap();
    let qp = client.create_qp(cpd, cq, cq, QpAttr::default()).unwrap();
    sim.connect((&client, qp), (&server, sqp)).unwrap();
    Rig {
        sim,
        server,
        client,
        spd,
        mr,
        sqp,
        scq,
        qp,
        cq,
    }
}

impl Rig {
    fn remote(&self, addr: u64) -> Option<Remote> {
        Some(Remote {
            addr,
            rkey: self.mr.rkey,
        })
    }
    fn write(&self, id: u64, addr: u64, data: Vec<u8>) -> SendWr {
        SendWr::new(id, Opcode::Write, Payload::inline(data), self.remote(addr))
    }
    fn flush(&self, id: u64, addr: u64, len: u64) -> SendWr {
        let op = Opcode::Flush {
            placement: FlushPlacement::Persistence,
            len,
        };
        SendWr::new(id, op, Payload::None, self.remote(addr))
    }
    fn atomic_write(&self, id: u64, addr: u64, value: u64) -> SendWr {
        let op = Opcode::AtomicWrite { value };
        SendWr::new(id, op, Payload::None, self.remote(addr))
    }
    /// What a power failure of the server now would leave (after one: what it left).
    fn durable(&self, addr: u64, len: usize) -> Vec<u8> {
        self.sim.with_rnic(self.server.id(), |r, now| {
            r.hierarchy().durable(now).read_vec(addr, len)
        })
    }
    /// What a load on the server sees now.
    fn visible(&self, space: Space, addr: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        self.sim.with_rnic(self.server.id(), |r, now| {
            r.cpu_load(now, space, addr, &mut buf)
        });
        buf
    }
    /// Posts `wrs` back to back from the client and waits for `signaled` completions;
    /// returns them with their times.
    fn run_ops(&self, wrs: Vec<SendWr>) -> Vec<(WorkCompletion, Instant)> {
        let (c, qp, cq) = (self.client.clone(), self.qp, self.cq);
        let signaled = wrs.iter().filter(|w| w.signaled).count();
        self.sim
            .block_on(Instant::NEVER, async move {
                for wr in wrs {
                    c.post_send(qp, wr).unwrap();
                }
                let mut out = Vec::new();
                for _ in 0..signaled {
                    let wc = next_completion(&c, cq).await;
                    out.push((wc, c.now()));
                }
                out
            })
            .expect("the client's operations complete")
    }
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ salt | 1)
        .collect()
}

// ------------------------------------------------------------------ singleton updates

/// DMP+DDIO (seed 000 §3.2): WRITE + FLUSH cannot persist, the data stops in the LLC; the
/// responder's clwb+sfence afterwards does.
#[test]
fn dmp_ddio_write_flush_can_be_lost_but_responder_clwb_persists() {
    let data = pattern(256, 0x11);
    let mut lost = Vec::new();
    for seed in 0..10 {
        for responder_flushes in [false, true] {
            let r = rig(seed, cfg("DMP+DDIO+PM-RQWRB"));
            let addr = r.mr.addr + 4096;
            let wcs = r.run_ops(vec![
                r.write(1, addr, data.clone()).signaled(false),
                r.flush(2, addr, 256),
            ]);
            assert_eq!(wcs[0].0.status, WcStatus::Success);
            assert_eq!(wcs[0].0.opcode, WcOpcode::Flush);
            assert_eq!(
                r.visible(Space::Pm, addr, 256),
                data,
                "visible at FLUSH completion"
            );
            if responder_flushes {
                let s = r.server.clone();
                r.sim
                    .block_on(
                        Instant::NEVER,
                        async move { s.persist_local(addr, 256).await },
                    )
                    .unwrap();
            }
            r.sim.crash_now(r.server.id());
            let d = r.durable(addr, 256);
            if responder_flushes {
                assert_eq!(
                    d, data,
                    "seed {seed}: clwb+sfence on the responder persists"
                );
            } else if d != data {
                lost.push(seed);
            }
        }
    }
    // A DDIO line leaves the LLC after ~20 us on average; the FLUSH returns in ~1.5 us.
    assert!(
        lost.len() >= 8,
        "WRITE+FLUSH under DMP+DDIO was durable in too many seeds (lost only in {lost:?})"
    );
}

/// DMP without DDIO: WRITE + FLUSH (persistence) is durable when the FLUSH completes, and
/// not when the WRITE alone completes.
#[test]
fn dmp_noddio_write_flush_is_durable_at_flush_completion() {
    let data = pattern(4096, 0x22);
    for seed in 0..50 {
        let r = rig(seed, cfg("DMP+noDDIO+PM-RQWRB"));
        let addr = r.mr.addr + 8192;
        let ops = |r: &Rig| vec![r.write(1, addr, data.clone()), r.flush(2, addr, 4096)];
        let wcs = r.run_ops(ops(&r));
        assert!(wcs.iter().all(|(wc, _)| wc.status == WcStatus::Success));
        let (t_write, t_flush) = (wcs[0].1, wcs[1].1);
        assert!(t_write < t_flush);
        r.sim.crash_now(r.server.id());
        assert_eq!(r.durable(addr, 4096), data, "seed {seed}");

        // The same run with the server losing power as the WRITE completes.
        let r = rig(seed, cfg("DMP+noDDIO+PM-RQWRB"));
        r.sim
            .set_faults(&FaultPlan::crash(r.server.id(), CrashAt::Time(t_write)));
        let wcs = r.run_ops(ops(&r));
        assert_eq!((wcs[0].0.status, wcs[0].1), (WcStatus::Success, t_write));
        assert_ne!(
            wcs[1].0.status,
            WcStatus::Success,
            "the FLUSH cannot complete"
        );
        assert_eq!(r.sim.crashed(), vec![(r.server.id(), t_write)]);
        assert_ne!(
            r.durable(addr, 4096),
            data,
            "seed {seed}: a completed WRITE is not durable under DMP"
        );
    }
}

/// Index of the first byte of `got` that differs from `data`; asserts that from there on
/// `got` is zero (the write survived as a prefix).
fn surviving_prefix(got: &[u8], data: &[u8]) -> usize {
    let n = got
        .iter()
        .zip(data)
        .position(|(a, b)| a != b)
        .unwrap_or(data.len());
    assert!(
        got[n..].iter().all(|&b| b == 0),
        "the surviving part is not a prefix"
    );
    n
}

/// MHP (seed 000 §3.2): the cache is persistent but the RNIC buffer and IIO are not, so a
/// crash when a large WRITE completes loses the part still on its way; after a FLUSH it all
/// survives.
#[test]
fn mhp_needs_the_flush_for_data_still_in_the_rnic() {
    let data = pattern(64 * 1024, 0x33);
    for config in ["MHP+DDIO+PM-RQWRB", "MHP+noDDIO+PM-RQWRB"] {
        for seed in 0..5 {
            let addr = rig(seed, cfg(config)).mr.addr;
            let ops = |r: &Rig| vec![r.write(1, addr, data.clone()), r.flush(2, addr, 1 << 16)];
            let r = rig(seed, cfg(config));
            let wcs = r.run_ops(ops(&r));
            let (t_write, t_flush) = (wcs[0].1, wcs[1].1);

            let r = rig(seed, cfg(config));
            r.sim
                .set_faults(&FaultPlan::crash(r.server.id(), CrashAt::Time(t_write)));
            let wcs = r.run_ops(ops(&r));
            assert_eq!(wcs[0].0.status, WcStatus::Success);
            let got = r.durable(addr, data.len());
            let kept = surviving_prefix(&got, &data);
            assert!(
                kept < data.len(),
                "{config} seed {seed}: all of a 64 KiB WRITE survived a crash at its completion"
            );

            let r = rig(seed, cfg(config));
            r.sim
                .set_faults(&FaultPlan::crash(r.server.id(), CrashAt::Time(t_flush)));
            let wcs = r.run_ops(ops(&r));
            assert!(wcs.iter().all(|(wc, _)| wc.status == WcStatus::Success));
            assert_eq!(r.sim.crashed().len(), 1);
            assert_eq!(r.durable(addr, data.len()), data, "{config} seed {seed}");
        }
    }
}

/// WSP (seed 000 §3.2): on InfiniBand and RoCE a WRITE's completion proves it reached the
/// responder's RNIC, which is persistent: a crash at completion keeps all of it, even the
/// part not yet DMAed.
#[test]
fn wsp_completion_suffices_on_infiniband_and_roce() {
    let data = pattern(64 * 1024, 0x44);
    for config in ["WSP+DDIO+PM-RQWRB", "WSP+noDDIO+PM-RQWRB@roce"] {
        for seed in 0..5 {
            let r = rig(seed, cfg(config));
            let addr = r.mr.addr;
            let wcs = r.run_ops(vec![r.write(1, addr, data.clone())]);
            let t_write = wcs[0].1;

            let r = rig(seed, cfg(config));
            r.sim
                .set_faults(&FaultPlan::crash(r.server.id(), CrashAt::Time(t_write)));
            let wcs = r.run_ops(vec![r.write(1, addr, data.clone())]);
            assert_eq!((wcs[0].0.status, wcs[0].1), (WcStatus::Success, t_write));
            assert_eq!(r.sim.crashed(), vec![(r.server.id(), t_write)]);
            assert_eq!(r.durable(addr, data.len()), data, "{config} seed {seed}");
        }
    }
}

/// WSP on iWARP (seed 000 §3.2): a WRITE completes once the requester's transport has it,
/// before it reached the responder; a crash then loses it, and a FLUSH is needed.
#[test]
fn wsp_on_iwarp_needs_the_flush() {
    let data = pattern(256, 0x55);
    let config = cfg("WSP+DDIO+PM-RQWRB@iwarp");
    for seed in 0..10 {
        let r = rig(seed, config);
        let addr = r.mr.addr;
        let ops = |r: &Rig| vec![r.write(1, addr, data.clone()), r.flush(2, addr, 256)];
        let wcs = r.run_ops(ops(&r));
        assert!(wcs.iter().all(|(wc, _)| wc.status == WcStatus::Success));
        let (t_write, t_flush) = (wcs[0].1, wcs[1].1);
        let one_way =
            Duration::from_nanos(LatencyProfile::default_profile().network.nic_rtt_ns / 2);
        assert!(
            t_write < Instant::ZERO + one_way,
            "iWARP completes before the WRITE can have crossed the wire ({t_write})"
        );

        let r = rig(seed, config);
        r.sim
            .set_faults(&FaultPlan::crash(r.server.id(), CrashAt::Time(t_write)));
        let wcs = r.run_ops(ops(&r));
        assert_eq!((wcs[0].0.status, wcs[0].1), (WcStatus::Success, t_write));
        assert_eq!(
            r.durable(addr, 256),
            vec![0; 256],
            "seed {seed}: the completed WRITE never reached the server"
        );

        let r = rig(seed, config);
        r.sim
            .set_faults(&FaultPlan::crash(r.server.id(), CrashAt::Time(t_flush)));
        r.run_ops(ops(&r));
        assert_eq!(
            r.durable(addr, 256),
            data,
            "seed {seed}: durable after the FLUSH"
        );
    }
}

/// A SEND lands in a posted receive buffer; with the buffer in PM a FLUSH makes the message
/// durable (MHP, or DMP without DDIO: seed 000 Table 2 "PM-RQWRB"); in DRAM it is lost.
#[test]
fn a_send_into_a_pm_receive_buffer_survives_one_in_dram_does_not() {
    let msg = pattern(512, 0x66);
    for (config, space) in [
        ("MHP+DDIO+PM-RQWRB", Space::Pm),
        ("DMP+noDDIO+PM-RQWRB", Space::Pm),
        ("MHP+DDIO+DRAM-RQWRB", Space::Dram),
        ("DMP+noDDIO+DRAM-RQWRB", Space::Dram),
    ] {
        for seed in 0..5 {
            let r = rig(seed, cfg(config));
            let buf = r.server.alloc(space, 4096, 64);
            let bmr = r
                .server
                .reg_mr(r.spd, space, buf, 4096, Access::LOCAL_WRITE)
                .unwrap();
            let sge = Sge {
                addr: buf,
                len: 4096,
                lkey: bmr.lkey,
            };
            r.server
                .post_recv(r.sqp, RecvWr { wr_id: 77, sge })
                .unwrap();
            let send = SendWr::new(1, Opcode::Send, Payload::inline(msg.clone()), None);
            let wcs = r.run_ops(vec![send.signaled(false), r.flush(2, r.mr.addr, 64)]);
            assert_eq!(wcs[0].0.status, WcStatus::Success);
            let recv = r
                .server
                .poll_one(r.scq)
                .expect("the server received the SEND");
            assert_eq!(
                (recv.wr_id, recv.status, recv.opcode, recv.byte_len),
                (77, WcStatus::Success, WcOpcode::Recv, 512)
            );
            assert_eq!(r.visible(space, buf, 512), msg);
            r.sim.crash_now(r.server.id());
            match space {
                Space::Pm => assert_eq!(r.durable(buf, 512), msg, "{config} seed {seed}"),
                Space::Dram => {
                    assert_eq!(r.visible(Space::Dram, buf, 512), vec![0; 512], "{config}")
                }
            }
        }
    }
}

// ------------------------------------------------------------------ compound updates

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Recipe {
    /// WRITE(a), WRITE(b), FLUSH.
    Pipelined,
    /// WRITE(a), FLUSH, ATOMIC WRITE(b), FLUSH, all posted back to back.
    FlushAtomicWrite,
    /// WRITE(a), FLUSH, WRITE(b), FLUSH, all posted back to back (posted b may pass the FLUSH).
    FlushPostedWrite,
    /// WRITE(a), FLUSH, wait for its completion, WRITE(b), FLUSH.
    FlushWait,
}

const B: u64 = 0xbbbb_bbbb_bbbb_bbbb;

struct Sweep {
    /// First crash time at which b is durable and a is not.
    b_without_a: Option<Instant>,
    /// Crash times at which a is durable and b is not (the window the recipe must allow).
    a_without_b: u64,
}

fn addrs(r: &Rig) -> (u64, u64) {
    (r.mr.addr, r.mr.addr + 256) // different lines, different PM channels
}

fn spawn_recipe(r: &Rig, recipe: Recipe) -> Rc<Cell<Option<Instant>>> {
    let (a, b) = addrs(r);
    let (c, qp, cq) = (r.client.clone(), r.qp, r.cq);
    let wa = r.write(1, a, vec![0xaa; 64]).signaled(false);
    let wb = match recipe {
        Recipe::FlushAtomicWrite => r.atomic_write(3, b, B),
        _ => r.write(3, b, B.to_le_bytes().to_vec()),
    }
    .signaled(false);
    let f1 = r.flush(2, a, 64);
    let f2 = r.flush(4, b, 8);
    let done = Rc::new(Cell::new(None));
    let d = done.clone();
    r.sim.spawn(async move {
        let wrs = match recipe {
            Recipe::Pipelined => vec![vec![wa, wb, f2]],
            Recipe::FlushWait => vec![vec![wa, f1], vec![wb, f2]],
            _ => vec![vec![wa, f1.signaled(false), wb, f2]],
        };
        for batch in wrs {
            for wr in batch {
                c.post_send(qp, wr).unwrap();
            }
            let wc = next_completion(&c, cq).await;
            if wc.status != WcStatus::Success {
                return; // the server crashed
            }
        }
        d.set(Some(c.now()));
    });
    done
}

/// Runs `recipe` and inspects the crash image at every nanosecond until the last FLUSH
/// completes.
fn sweep(seed: u64, config: ServerConfig, recipe: Recipe) -> Sweep {
    let r = rig(seed, config);
    let (a, b) = addrs(&r);
    let done = spawn_recipe(&r, recipe);
    let mut out = Sweep {
        b_without_a: None,
        a_without_b: 0,
    };
    let mut t = 400; // nothing reaches the server before half a round trip
    loop {
        let at = Instant::from_nanos(t);
        r.sim.run_until(at);
        let (has_a, has_b) = r.sim.with_rnic(r.server.id(), |n, _| {
            let img = n.hierarchy().crash_image(at);
            (img.read_vec(a, 64) == vec![0xaa; 64], img.read_u64(b) == B)
        });
        if has_b && !has_a && out.b_without_a.is_none() {
            out.b_without_a = Some(at);
        }
        if has_a && !has_b {
            out.a_without_b += 1;
        }
        if done.get().is_some_and(|d| d <= at) {
            assert!(
                has_a && has_b,
                "seed {seed} {recipe:?}: both durable at the end"
            );
            return out;
        }
        assert!(t < 100_000, "seed {seed} {recipe:?}: did not finish");
        t += 1;
    }
}

/// Seed 000 §3.3: under DMP without DDIO two pipelined WRITEs can persist out of order, even
/// with a FLUSH after them; confirmed by a real power failure at the found instant.
#[test]
fn pipelined_writes_are_unsafe_under_dmp_without_ddio() {
    let config = cfg("DMP+noDDIO+PM-RQWRB");
    let (seed, t) = (0..50)
        .find_map(|seed| {
            sweep(seed, config, Recipe::Pipelined)
                .b_without_a
                .map(|t| (seed, t))
        })
        .expect("some seed persists b before a");
    let r = rig(seed, config);
    let (a, b) = addrs(&r);
    r.sim
        .set_faults(&FaultPlan::crash(r.server.id(), CrashAt::Time(t)));
    let done = spawn_recipe(&r, Recipe::Pipelined);
    r.sim.run();
    assert_eq!(done.get(), None, "the FLUSH cannot complete");
    assert_eq!(r.sim.crashed(), vec![(r.server.id(), t)]);
    assert_eq!(
        u64::from_le_bytes(r.durable(b, 8).try_into().unwrap()),
        B,
        "b survived"
    );
    assert_eq!(r.durable(a, 64), vec![0; 64], "a did not");
}

/// The same posting order is safe under MHP, where visibility (in order) is persistence.
#[test]
fn pipelined_writes_are_safe_under_mhp() {
    for config in ["MHP+DDIO+PM-RQWRB", "MHP+noDDIO+PM-RQWRB"] {
        let mut window = 0;
        for seed in 0..25 {
            let s = sweep(seed, cfg(config), Recipe::Pipelined);
            assert_eq!(s.b_without_a, None, "{config} seed {seed}: b without a");
            window += s.a_without_b;
        }
        assert!(window > 0, "{config}: the sweep saw a durable without b");
    }
}

/// Seed 000 Table 3, DMP without DDIO: WRITE(a), FLUSH, ATOMIC WRITE(b), FLUSH is safe (the
/// ATOMIC WRITE is ordered after the FLUSH at the responder); with a posted WRITE(b) in its
/// place it is not.
#[test]
fn atomic_write_after_flush_orders_persistence_under_dmp_without_ddio() {
    let config = cfg("DMP+noDDIO+PM-RQWRB");
    for seed in 0..50 {
        let s = sweep(seed, config, Recipe::FlushAtomicWrite);
        assert_eq!(s.b_without_a, None, "seed {seed}: b without a");
        assert!(s.a_without_b > 0);
    }
    assert!(
        (0..50).any(|seed| sweep(seed, config, Recipe::FlushPostedWrite)
            .b_without_a
            .is_some()),
        "a posted WRITE(b) passes the FLUSH and can persist before a"
    );
}

/// Seed 000 §3.3: waiting for the first FLUSH's completion before WRITE(b) is safe too.
#[test]
fn waiting_for_the_flush_orders_persistence_under_dmp_without_ddio() {
    let config = cfg("DMP+noDDIO+PM-RQWRB");
    for seed in 0..50 {
        let s = sweep(seed, config, Recipe::FlushWait);
        assert_eq!(s.b_without_a, None, "seed {seed}: b without a");
        assert!(s.a_without_b > 0);
    }
}

// ------------------------------------------------------------------ fault injection

/// A crash planned at the k-th event kills the node's tasks (they never run again), the
/// client's operations to it fail after the ACK timeout, and the run terminates.
#[test]
fn a_crash_at_the_kth_event_kills_the_node_and_the_run_ends() {
    for k in [0u64, 1, 40, 200] {
        let r = rig(3, cfg("DMP+noDDIO+PM-RQWRB"));
        let ticks = Rc::new(Cell::new(0u64));
        let last_tick = Rc::new(Cell::new(Instant::ZERO));
        let (s, tk, lt) = (r.server.clone(), ticks.clone(), last_tick.clone());
        r.sim.spawn_on(&r.server, async move {
            for _ in 0..10_000 {
                s.sleep(Duration::from_micros(1)).await;
                tk.set(tk.get() + 1);
                lt.set(s.now());
            }
        });
        let results = Rc::new(RefCell::new(Vec::new()));
        let (c, qp, cq, res) = (r.client.clone(), r.qp, r.cq, results.clone());
        let (w, f) = (
            r.write(1, r.mr.addr, vec![1; 64]).signaled(false),
            r.flush(2, r.mr.addr, 64),
        );
        r.sim.spawn_on(&r.client, async move {
            for _ in 0..100 {
                if c.post_send(qp, w.clone()).is_err() || c.post_send(qp, f.clone()).is_err() {
                    res.borrow_mut().push(None);
                    return;
                }
                let wc = next_completion(&c, cq).await;
                res.borrow_mut().push(Some(wc.status));
                if wc.status != WcStatus::Success {
                    return;
                }
                c.sleep(Duration::from_micros(2)).await;
            }
        });
        r.sim
            .set_faults(&FaultPlan::crash(r.server.id(), CrashAt::Event(k)));
        let events = r.sim.run();
        assert!(events > k, "k={k}: {events} events");
        let crashed = r.sim.crashed();
        assert_eq!(crashed.len(), 1, "k={k}");
        let (node, at) = crashed[0];
        assert_eq!(node, r.server.id());
        assert!(
            ticks.get() < 10_000,
            "k={k}: the server task ran to the end"
        );
        assert!(
            last_tick.get() <= at,
            "k={k}: a server task ran after the crash"
        );
        assert!(
            r.sim.now() >= at + Duration::from_micros(1000),
            "k={k}: time went on (the client timed out) after the crash at {at}"
        );
        let res = results.borrow();
        assert!(
            res.last()
                .is_some_and(|s| *s == Some(WcStatus::RetryExcErr)),
            "k={k}: the client's last operation timed out: {res:?}"
        );
        assert!(r.server.alloc_pd().is_err(), "k={k}: the server is down");
    }
}

/// A crash at a virtual time stops the node's tasks at that time.
#[test]
fn a_crash_at_a_time_stops_the_node_there() {
    let r = rig(4, cfg("MHP+DDIO+PM-RQWRB"));
    let last_tick = Rc::new(Cell::new(Instant::ZERO));
    let (s, lt) = (r.server.clone(), last_tick.clone());
    r.sim.spawn_on(&r.server, async move {
        for _ in 0..1_000 {
            s.sleep(Duration::from_micros(1)).await;
            lt.set(s.now());
        }
    });
    let crash = Instant::from_nanos(30_500);
    r.sim
        .set_faults(&FaultPlan::crash(r.server.id(), CrashAt::Time(crash)));
    r.sim.run();
    assert_eq!(r.sim.crashed(), vec![(r.server.id(), crash)]);
    assert_eq!(last_tick.get(), Instant::from_nanos(30_000));
}
