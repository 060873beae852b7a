//! Posted operations may pass earlier non-posted ones (a WRITE overtaking a FLUSH) unless
//! fenced; a fence waits for earlier non-posted operations only.

use super::*;
use remora_model::time::Duration;

// ================================================================ c. posted may pass non-posted

struct Wfw {
    /// When the second update became visible at the server (server CPU polling).
    b_visible: Instant,
    /// Whether the first WRITE was durable at that moment.
    a_durable_then: bool,
    /// Client completions (all three signaled) with the step at which they were polled.
    wcs: Vec<(WorkCompletion, Instant)>,
    /// When the second update left the client's RNIC.
    b_sent: Instant,
}

/// WRITE(x) to A, FLUSH(A), then a second update of B, posted back to back; the
/// simulation is run in 10 ns steps with `run_until`, and after each step the server's
/// visible B and the client's CQ are inspected.
fn write_flush_then(seed: u64, second: impl Fn(&Pair, u64) -> SendWr, expect_b: &[u8]) -> Wfw {
    let p = Pair::new(seed, cfg("DMP+noDDIO+PM-RQWRB"));
    let (a, b) = (p.mr.addr, p.mr.addr + 8192);
    let x = pattern(64, 1);
    p.sim.with_rnic(p.client.id(), |r, _| r.record_events(true));
    p.post_all(vec![
        p.write(1, a, x.clone()),
        p.flush(2, a, 64, PERSIST),
        second(&p, b),
    ]);
    let step = ns(10);
    let stop = ticker(&p.sim, &p.client, step);
    let mut t = Instant::ZERO;
    let mut wcs = Vec::new();
    let mut b_visible = None;
    let mut a_durable_then = false;
    while wcs.len() < 3 || b_visible.is_none() {
        t += step;
        assert!(t < at(1_000_000), "seed {seed}: stuck: {wcs:?}");
        p.sim.run_until(t);
        assert_eq!(p.sim.now(), t, "the ticker keeps time moving");
        if b_visible.is_none() && p.pm(b, expect_b.len()) == expect_b {
            b_visible = Some(t);
            a_durable_then = p.durable(a, 64) == x;
        }
        let mut out = Vec::new();
        p.sim
            .with_rnic(p.client.id(), |r, _| r.poll_cq(p.ccq, 16, &mut out));
        wcs.extend(out.into_iter().map(|wc| (wc, t)));
    }
    stop.set(true);
    p.sim.run();
    let events = p.sim.with_rnic(p.client.id(), |r, _| r.take_events());
    assert_eq!(
        ids(&wcs),
        vec![1, 2, 3],
        "seed {seed}: completions in order"
    );
    all_ok(&wcs);
    Wfw {
        b_visible: b_visible.unwrap(),
        a_durable_then,
        wcs,
        b_sent: transmitted(&events, 3),
    }
}

/// Seed 000 §2: "posted operations can be ordered at the responder before prior
/// non-posted operations": an unfenced WRITE after a FLUSH becomes visible at the server
/// before the FLUSH's completion reaches the client, and (for some seed) while the WRITE
/// before the FLUSH is not yet persistent.
#[test]
fn an_unfenced_write_can_take_effect_before_an_earlier_flush_completes() {
    let y = pattern(64, 2);
    let (mut b_before_flush, mut b_before_a_durable) = (0, 0);
    for seed in 0..6 {
        let r = write_flush_then(seed, |p, b| p.write(3, b, y.clone()), &y);
        let flush_done = time_of(&r.wcs, 2);
        assert!(
            r.b_sent < flush_done,
            "seed {seed}: pipelined, not held back"
        );
        b_before_flush += (r.b_visible < flush_done) as u32;
        b_before_a_durable += !r.a_durable_then as u32;
    }
    // A translation miss can delay B's DMA past the FLUSH's completion, so this is a
    // "can", checked over several seeds.
    assert!(
        b_before_flush >= 3,
        "B became visible before the FLUSH completed in only {b_before_flush} of 6 runs"
    );
    assert!(
        b_before_a_durable > 0,
        "the later WRITE never became visible before the earlier one was persistent"
    );
}

/// With the fence flag the second WRITE is not even transmitted until the FLUSH
/// completed, so it becomes visible only after that, and only once A is persistent.
#[test]
fn a_fenced_write_after_a_flush_waits_for_the_flush() {
    let y = pattern(64, 2);
    for seed in 0..6 {
        let r = write_flush_then(seed, |p, b| p.write(3, b, y.clone()).fenced(true), &y);
        let flush_done = time_of(&r.wcs, 2);
        // The CQ is polled every 10 ns: the true completion time lies in the step before.
        assert!(
            r.b_sent + ns(10) >= flush_done,
            "seed {seed}: fenced WRITE sent at {} before the FLUSH completed at {flush_done}",
            r.b_sent
        );
        assert!(r.b_visible > flush_done, "seed {seed}");
        assert!(
            r.a_durable_then,
            "seed {seed}: A persistent before B visible"
        );
        let rtt = Duration::from_nanos(
            remora_model::profile::LatencyProfile::default_profile()
                .network
                .nic_rtt_ns,
        );
        assert!(
            time_of(&r.wcs, 3) >= flush_done + rtt,
            "seed {seed}: the fenced WRITE needs its own round trip after the FLUSH"
        );
    }
}

/// An ATOMIC WRITE is non-posted: ordered after the FLUSH without a fence, so A is
/// persistent before B is visible (seed 000 §2), and it is pipelined (sent before the
/// FLUSH completes).
#[test]
fn an_atomic_write_after_a_flush_is_ordered_without_a_fence() {
    let v = 0x5a5a_1234_u64;
    for seed in 0..6 {
        let r = write_flush_then(seed, |p, b| p.atomic_write(3, b, v), &v.to_le_bytes());
        let flush_done = time_of(&r.wcs, 2);
        assert!(
            r.a_durable_then,
            "seed {seed}: A persistent before B visible"
        );
        assert!(r.b_sent < flush_done, "seed {seed}: pipelined");
        assert_eq!(r.wcs[2].0.opcode, WcOpcode::AtomicWrite);
    }
}

// ================================================================ d. fence after non-posted

/// Returns (READ completion, WRITE completion, WRITE transmit time).
fn read_then_write(seed: u64, fence: bool) -> (Instant, Instant, Instant, Duration) {
    let p = Pair::new(seed, cfg("DMP+noDDIO+PM-RQWRB"));
    p.sim.with_rnic(p.client.id(), |r, _| r.record_events(true));
    let (a, b) = (p.mr.addr, p.mr.addr + 4096);
    let wcs = p.run_ops(vec![
        p.read(1, a, 64, p.lmr.addr),
        p.write(2, b, pattern(64, 4)).fenced(fence),
    ]);
    assert_eq!(ids(&wcs), vec![1, 2], "seed {seed} fence {fence}");
    all_ok(&wcs);
    assert_eq!(p.pm(b, 64), pattern(64, 4));
    let events = p.sim.with_rnic(p.client.id(), |r, _| r.take_events());
    (wcs[0].1, wcs[1].1, transmitted(&events, 2), p.rtt())
}

/// A fenced WRITE after a READ is transmitted only once the READ's result is back at
/// the requester (a round trip after the unfenced WRITE would have left), and completes
/// after the READ: its latency is the READ's round trip plus its own.
#[test]
fn a_fenced_write_waits_for_an_earlier_read() {
    for seed in 0..4 {
        let (r0, w0, tx0, rtt) = read_then_write(seed, false);
        let (r1, w1, tx1, _) = read_then_write(seed, true);
        assert_eq!(r0, r1, "seed {seed}: the fence does not slow the READ");
        assert!(tx0 < r0, "seed {seed}: unfenced WRITE is pipelined");
        assert!(
            tx1 >= tx0 + rtt,
            "seed {seed}: fenced WRITE sent at {tx1}, unfenced at {tx0}"
        );
        assert!(w1 > r1, "seed {seed}: fenced WRITE done {w1}, READ {r1}");
        assert!(w1 > w0, "seed {seed}");
        assert!(
            w1 >= Instant::ZERO + rtt.mul(2),
            "seed {seed}: two round trips in sequence, done at {w1}"
        );
    }
}

/// The fence waits only for earlier non-posted operations: after a large WRITE it
/// changes nothing.
#[test]
fn a_fence_does_not_wait_for_earlier_posted_operations() {
    let run = |fence: bool| {
        let p = Pair::new(1, cfg("DMP+noDDIO+PM-RQWRB"));
        p.sim.with_rnic(p.client.id(), |r, _| r.record_events(true));
        let wcs = p.run_ops(vec![
            p.write(1, p.mr.addr, pattern(16 * 1024, 1)),
            p.write(2, p.mr.addr + 65536, pattern(64, 2)).fenced(fence),
        ]);
        assert_eq!(ids(&wcs), vec![1, 2]);
        all_ok(&wcs);
        let events = p.sim.with_rnic(p.client.id(), |r, _| r.take_events());
        (transmitted(&events, 2), wcs[0].1, wcs[1].1)
    };
    let (tx0, _, w0) = run(false);
    let (tx1, first_done, w1) = run(true);
    assert_eq!(tx0, tx1);
    assert!(tx1 < first_done, "not held back by the posted WRITE");
    assert_eq!(w0, w1);
}
