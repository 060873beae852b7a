//! The server data path driven directly (no simulator): visibility versus persistence,
//! what each persistence domain keeps in a power failure, ordering of persistence, restart,
//! sparse addressing and PM geometry.

use proptest::prelude::*;
use remora_model::config::PersistenceDomain::{self, Dmp, Mhp, Wsp};
use remora_model::hierarchy::{FlushPlacement, FlushRange, MemoryHierarchy, Space, LINE};
use remora_model::mem::SparseMem;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::PM_BASE;
use remora_model::time::{Duration, Instant};
use std::collections::BTreeSet;

fn hier(domain: PersistenceDomain, ddio: bool, seed: u64) -> MemoryHierarchy {
    MemoryHierarchy::new(
        domain,
        ddio,
        &LatencyProfile::default_profile(),
        Prng::from_seed(seed),
    )
}

/// A FLUSH that names all of PM: these tests flush everything they wrote.
const ALL_PM: FlushRange = FlushRange::all(Space::Pm);

fn ns(n: u64) -> Instant {
    Instant::from_nanos(n)
}

fn load(h: &mut MemoryHierarchy, at: Instant, space: Space, addr: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    h.cpu_load(at, space, addr, &mut buf);
    buf
}

const A: u64 = PM_BASE + 0x10_000;

const ALL_CONFIGS: [(PersistenceDomain, bool); 6] = [
    (Dmp, true),
    (Dmp, false),
    (Mhp, true),
    (Mhp, false),
    (Wsp, true),
    (Wsp, false),
];

// ------------------------------------------------------------------ visibility vs persistence

/// DMP+DDIO: a DMA write is visible (a load sees it) long before it is durable; it is durable
/// once the CPU wrote it back with clwb and the sfence returned.
#[test]
fn visible_is_not_durable_until_clwb_and_sfence_under_dmp_ddio() {
    for seed in 0..20 {
        let mut h = hier(Dmp, true, seed);
        let t0 = ns(1_000);
        let vis = h.dma_write(t0, Space::Pm, A, &[0xab; 64]).visible;
        assert!(vis > t0, "a DMA takes time to cross PCIe and the IIO");
        assert_eq!(
            load(&mut h, t0, Space::Pm, A, 64),
            vec![0; 64],
            "not visible on arrival"
        );
        assert_eq!(
            load(&mut h, vis, Space::Pm, A, 64),
            vec![0xab; 64],
            "visible at t_visible"
        );
        assert_eq!(
            h.crash_image(vis).read_vec(A, 64),
            vec![0; 64],
            "seed {seed}: visible in the LLC is not durable under DMP"
        );
        assert!(!h.is_persistent(vis, A, 64));
        let issue = h.clwb(vis, A, 64);
        let done = h.sfence(vis + issue);
        assert!(done > vis + issue, "the fence waits for the write-back");
        assert_eq!(
            h.crash_image(done).read_vec(A, 64),
            vec![0xab; 64],
            "seed {seed}: durable once clwb+sfence returned"
        );
        assert!(h.is_persistent(done, A, 64));
        assert!(h.stats().clwb_lines >= 1);
    }
}

/// DMP without DDIO: visible is still not durable (the write travels on to the WPQ); a FLUSH
/// with persistence placement waits for it.
#[test]
fn dmp_without_ddio_is_durable_at_persistent_flush_completion_not_at_visibility() {
    for seed in 0..20 {
        let mut h = hier(Dmp, false, seed);
        let t0 = ns(1_000);
        let vis = h.dma_write(t0, Space::Pm, A, &[0x5a; 256]).visible;
        let done = h.flush_done(t0, FlushPlacement::Persistence, ALL_PM);
        assert!(done > vis);
        assert_eq!(
            load(&mut h, vis, Space::Pm, A, 256),
            vec![0x5a; 256],
            "seed {seed}"
        );
        assert_ne!(
            h.crash_image(vis).read_vec(A, 256),
            vec![0x5a; 256],
            "seed {seed}: the last line cannot be in the WPQ at t_visible"
        );
        assert_eq!(
            h.crash_image(done).read_vec(A, 256),
            vec![0x5a; 256],
            "seed {seed}"
        );
    }
}

// ------------------------------------------------------------------ per-domain survival

/// WSP keeps what reached the RNIC, even at the instant it arrived.
#[test]
fn wsp_keeps_a_write_from_its_arrival() {
    for ddio in [true, false] {
        for seed in 0..10 {
            let mut h = hier(Wsp, ddio, seed);
            let t0 = ns(5_000);
            let vis = h.dma_write(t0, Space::Pm, A, &[7; 200]).visible;
            assert!(vis > t0);
            assert_eq!(
                h.crash_image(t0).read_vec(A, 200),
                vec![7; 200],
                "WSP ddio={ddio} seed {seed}: kept at arrival"
            );
        }
    }
}

/// MHP keeps what is visible (caches included) but not what is still in the RNIC buffer or
/// the IIO: a crash one nanosecond before t_visible loses the write, at t_visible keeps it.
#[test]
fn mhp_keeps_the_cache_but_not_the_rnic_or_iio() {
    for ddio in [true, false] {
        for seed in 0..10 {
            let mut h = hier(Mhp, ddio, seed);
            let t0 = ns(5_000);
            let vis = h.dma_write(t0, Space::Pm, A, &[9; 64]).visible;
            assert!(vis > t0);
            assert_eq!(
                h.crash_image(t0).read_vec(A, 64),
                vec![0; 64],
                "MHP ddio={ddio}: in the RNIC buffer at arrival, lost"
            );
            assert_eq!(
                h.crash_image(ns(vis.as_nanos() - 1)).read_vec(A, 64),
                vec![0; 64],
                "MHP ddio={ddio} seed {seed}: still in the IIO, lost"
            );
            assert_eq!(
                h.crash_image(vis).read_vec(A, 64),
                vec![9; 64],
                "MHP ddio={ddio} seed {seed}: visible, kept"
            );
        }
    }
}

/// DMP keeps only the WPQ and the DIMMs: the same DDIO write sitting in the LLC is lost under
/// DMP and kept under MHP.
#[test]
fn the_llc_is_lost_under_dmp_and_kept_under_mhp() {
    let mut lost_under_dmp = 0;
    for seed in 0..20 {
        let crash_after = Duration::from_nanos(300);
        let mut dmp = hier(Dmp, true, seed);
        let mut mhp = hier(Mhp, true, seed);
        let t0 = ns(2_000);
        let vd = dmp.dma_write(t0, Space::Pm, A, &[3; 64]).visible;
        let vm = mhp.dma_write(t0, Space::Pm, A, &[3; 64]).visible;
        assert_eq!(vd, vm, "the same seed gives the same data path timing");
        // A FLUSH cannot push DDIO data out of the LLC.
        let fd = dmp.flush_done(t0, FlushPlacement::Persistence, ALL_PM);
        if dmp.crash_image(vd + crash_after).read_vec(A, 64) == vec![0; 64] {
            lost_under_dmp += 1;
        }
        assert_eq!(
            mhp.crash_image(vm + crash_after).read_vec(A, 64),
            vec![3; 64],
            "seed {seed}: MHP keeps the LLC"
        );
        assert!(fd > vd);
    }
    // Natural eviction is spread over ~40 us; a write evicted within 300 ns is rare.
    assert!(
        lost_under_dmp >= 18,
        "DMP kept an LLC line in {} of 20 seeds",
        20 - lost_under_dmp
    );
}

/// DRAM is volatile in every domain: a DMA write or a CPU store to DRAM is gone after a power
/// failure, however long ago it happened.
#[test]
fn dram_never_survives() {
    for (domain, ddio) in ALL_CONFIGS {
        let mut h = hier(domain, ddio, 11);
        let t0 = ns(1_000);
        let dram_a = 0x2000;
        let dram_b = 0x9000;
        let vis = h.dma_write(t0, Space::Dram, dram_a, &[0xd1; 128]).visible;
        h.cpu_store(vis, Space::Dram, dram_b, &[0xd2; 32]);
        // The same numeric address in PM is a different byte.
        h.dma_write(vis, Space::Pm, PM_BASE + dram_a, &[0xe1; 8]);
        let later = vis + Duration::from_millis(1);
        assert_eq!(
            load(&mut h, later, Space::Dram, dram_a, 128),
            vec![0xd1; 128]
        );
        assert_eq!(load(&mut h, later, Space::Dram, dram_b, 32), vec![0xd2; 32]);
        let img = h.crash_image(later);
        assert_eq!(img.read_vec(dram_a, 128), vec![0; 128], "{domain:?}");
        h.power_fail(later);
        assert_eq!(
            load(&mut h, later, Space::Dram, dram_a, 128),
            vec![0; 128],
            "{domain:?} ddio={ddio}"
        );
        assert_eq!(load(&mut h, later, Space::Dram, dram_b, 32), vec![0; 32]);
        if !(domain == Dmp && ddio) {
            assert_eq!(
                load(&mut h, later, Space::Pm, PM_BASE + dram_a, 8),
                vec![0xe1; 8],
                "{domain:?} ddio={ddio}: the PM write long ago survived"
            );
        }
    }
}

// ------------------------------------------------------------------ ordering of persistence

/// One seeded run of "DMA write a, then DMA write b to another line" under DMP without DDIO.
/// Returns (crash times at which b survived without a, times a load saw b without a).
fn reorder_run(seed: u64, a: u64, b: u64) -> (Vec<Instant>, usize, Instant) {
    let mut h = hier(Dmp, false, seed);
    let t0 = ns(1_000);
    h.dma_write(t0, Space::Pm, a, &[0xaa; 64]);
    h.dma_write(t0 + Duration::from_nanos(1), Space::Pm, b, &[0xbb; 64]);
    let done = h.flush_done(
        t0 + Duration::from_nanos(1),
        FlushPlacement::Persistence,
        ALL_PM,
    );
    let mut b_without_a = Vec::new();
    let mut visible_b_without_a = 0;
    for t in t0.as_nanos() + 1..=done.as_nanos() {
        let img = h.crash_image(ns(t));
        let has_a = img.read_vec(a, 64) == vec![0xaa; 64];
        let has_b = img.read_vec(b, 64) == vec![0xbb; 64];
        if has_b && !has_a {
            b_without_a.push(ns(t));
        }
        let va = load(&mut h, ns(t), Space::Pm, a, 64) == vec![0xaa; 64];
        let vb = load(&mut h, ns(t), Space::Pm, b, 64) == vec![0xbb; 64];
        if vb && !va {
            visible_b_without_a += 1;
        }
    }
    let img = h.crash_image(done);
    assert_eq!(
        img.read_vec(a, 64),
        vec![0xaa; 64],
        "seed {seed}: a durable at FLUSH"
    );
    assert_eq!(
        img.read_vec(b, 64),
        vec![0xbb; 64],
        "seed {seed}: b durable at FLUSH"
    );
    (b_without_a, visible_b_without_a, done)
}

/// Seed 000 §2: writes become visible in order but may become persistent out of order. Under
/// DMP without DDIO there is a seed and a crash time at which b survived and a did not; a load
/// never sees b without a.
#[test]
fn dmp_without_ddio_can_persist_two_lines_out_of_order() {
    let (a, b) = (A, A + 256); // different lines, different channels
    let mut found = None;
    let mut seeds_reordered = 0;
    for seed in 0..200 {
        let (bad, vis_bad, _) = reorder_run(seed, a, b);
        assert_eq!(vis_bad, 0, "seed {seed}: visibility is in order");
        if let Some(&t) = bad.first() {
            seeds_reordered += 1;
            found.get_or_insert((seed, t));
        }
    }
    let (seed, t) = found.expect("no seed in 0..200 persisted b before a");
    assert!(seeds_reordered >= 5, "only {seeds_reordered} seeds reorder");
    // The same crash through power_fail: the restarted machine sees b but not a.
    let mut h = hier(Dmp, false, seed);
    let t0 = ns(1_000);
    h.dma_write(t0, Space::Pm, a, &[0xaa; 64]);
    h.dma_write(t0 + Duration::from_nanos(1), Space::Pm, b, &[0xbb; 64]);
    h.power_fail(t);
    assert_eq!(load(&mut h, t, Space::Pm, b, 64), vec![0xbb; 64]);
    assert_eq!(load(&mut h, t, Space::Pm, a, 64), vec![0; 64]);
}

/// Same lines, same channel: the per-write mesh jitter alone reorders too.
#[test]
fn same_channel_writes_can_also_persist_out_of_order() {
    let (a, b) = (A, A + 64);
    assert_eq!(
        hier(Dmp, false, 0).pm_location(a).channel,
        hier(Dmp, false, 0).pm_location(b).channel
    );
    assert!((0..200).any(|seed| !reorder_run(seed, a, b).0.is_empty()));
}

#[derive(Clone, Debug)]
enum Op {
    /// A DMA write of a whole line after `gap` ns.
    Dma { line: u8, gap: u16 },
    /// clwb of a line followed by sfence (the CPU thread waits for the fence).
    Clwb { line: u8, gap: u16 },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0u16..600).prop_map(|(line, gap)| Op::Dma { line, gap }),
        1 => (0u8..3, 0u16..600).prop_map(|(line, gap)| Op::Clwb { line, gap }),
    ]
}

fn line_addr(line: u8) -> u64 {
    // Lines on both channels and in different banks.
    A + line as u64 * 320 / LINE * LINE
}

/// Applies the ops whose time is at most `crash` and returns the crash image at `crash` with,
/// per line, how many writes were applied and how many were visible by `crash`.
fn run_prefix(
    domain: PersistenceDomain,
    ddio: bool,
    seed: u64,
    ops: &[Op],
    crash: Instant,
) -> (SparseMem, [u8; 3], [u8; 3]) {
    let mut h = hier(domain, ddio, seed);
    let mut t = ns(1_000);
    let mut written = [0u8; 3];
    let mut visible = [0u8; 3];
    for op in ops {
        match *op {
            Op::Dma { line, gap } => {
                t += Duration::from_nanos(gap as u64);
                if t > crash {
                    break;
                }
                written[line as usize] += 1;
                let k = written[line as usize];
                let vis = h.dma_write(t, Space::Pm, line_addr(line), &[k; 64]).visible;
                if vis <= crash {
                    visible[line as usize] = k;
                }
            }
            Op::Clwb { line, gap } => {
                // May race an in-flight DMA to the line: the clwb must leave it alone.
                t += Duration::from_nanos(gap as u64);
                if t > crash {
                    break;
                }
                let issue = h.clwb(t, line_addr(line), LINE);
                // The CPU thread waits for its fence before the next operation.
                t = h.sfence(t + issue);
            }
        }
    }
    (h.crash_image(crash), written, visible)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Same-line writes persist in order, in every domain: at every crash time each line
    /// holds one whole written version (or zero), the surviving version never goes back as
    /// the crash time moves later, and it is exactly what the domain protects (WSP: the last
    /// arrived; MHP: the last visible; DMP: never newer than the last visible).
    #[test]
    fn same_line_writes_persist_in_order(
        seed in 0u64..1_000,
        config in 0usize..6,
        ops in prop::collection::vec(op_strategy(), 1..30),
        crashes in prop::collection::btree_set(0u64..60_000, 1..12),
    ) {
        let (domain, ddio) = ALL_CONFIGS[config];
        let mut last = [0u8; 3];
        let mut times: Vec<u64> = crashes.into_iter().map(|c| 1_000 + c).collect();
        times.push(1_000_000); // long after: everything has left the LLC
        for c in times {
            let (img, written, visible) = run_prefix(domain, ddio, seed, &ops, ns(c));
            for line in 0..3u8 {
                let v = img.read_vec(line_addr(line), 64);
                let k = v[0];
                prop_assert!(v.iter().all(|&x| x == k), "torn line {line} at {c}: {v:?}");
                prop_assert!(k <= written[line as usize], "line {line} holds a write from the future");
                prop_assert!(k >= last[line as usize],
                    "{domain:?} ddio={ddio} line {line}: version {k} at crash {c} after {} earlier",
                    last[line as usize]);
                last[line as usize] = k;
                match domain {
                    Wsp => prop_assert_eq!(k, written[line as usize], "WSP keeps every arrival"),
                    Mhp => prop_assert_eq!(k, visible[line as usize], "MHP keeps the visible version"),
                    Dmp => prop_assert!(k <= visible[line as usize],
                        "DMP line {line} at {c}: version {k} durable but only {} visible",
                        visible[line as usize]),
                }
            }
        }
        // Long after the last write, every line holds its last version.
        let (img, written, _) = run_prefix(domain, ddio, seed, &ops, ns(1_000_000));
        for line in 0..3u8 {
            prop_assert_eq!(img.read_vec(line_addr(line), 64), vec![written[line as usize]; 64]);
        }
    }
}

/// Under DMP a line cannot be durable before it is visible: a `clwb` issued while an inbound
/// DMA to that line is still crossing PCIe has nothing of it in the cache to write back.
#[test]
fn dmp_never_persists_a_line_before_it_is_visible() {
    for seed in 0..20 {
        let mut h = hier(Dmp, true, seed);
        let t0 = ns(1_000);
        let vis = h.dma_write(t0, Space::Pm, A, &[0x77; 64]).visible;
        let t1 = t0 + Duration::from_nanos(1);
        let issue = h.clwb(t1, A, 64);
        let done = h.sfence(t1 + issue);
        let check = done.min(ns(vis.as_nanos() - 1));
        assert_eq!(
            h.crash_image(check).read_vec(A, 64),
            vec![0; 64],
            "seed {seed}: durable at {check} although it becomes visible only at {vis}"
        );
        assert_eq!(
            load(&mut h, check, Space::Pm, A, 64),
            vec![0; 64],
            "seed {seed}: a load sees it at {check}, before it is visible at {vis}"
        );
    }
}

/// A CPU store to a line while an inbound DMA to the same line is still crossing PCIe: the
/// store is visible first, the DMA commits later and wins (loads see the DMA's value for
/// ever after). The durable image must end with the same value, in every domain.
#[test]
fn a_cpu_store_racing_a_dma_persists_in_visibility_order() {
    let mut wrong = Vec::new();
    for (domain, ddio) in ALL_CONFIGS {
        let mut h = hier(domain, ddio, 0);
        let t0 = ns(1_000);
        let vis = h.dma_write(t0, Space::Pm, A, &[1; 64]).visible;
        let ts = t0 + Duration::from_nanos(10);
        h.cpu_store(ts, Space::Pm, A, &[2; 64]);
        if domain == Wsp {
            // Both arrived; a power failure now drains the RNIC buffer after the cache.
            let early = h.crash_image(ts + Duration::from_nanos(10)).read_vec(A, 64);
            if early != vec![1; 64] {
                wrong.push(format!(
                    "{domain:?} ddio={ddio}: crash before the DMA commits keeps {}",
                    early[0]
                ));
            }
        }
        let quiet = vis + Duration::from_millis(1);
        assert_eq!(
            load(&mut h, quiet, Space::Pm, A, 64),
            vec![1; 64],
            "the DMA committed last"
        );
        let issue = h.clwb(quiet, A, 64);
        let end = h.sfence(quiet + issue) + Duration::from_millis(1);
        let durable = h.crash_image(end).read_vec(A, 64);
        if durable != vec![1; 64] || !h.is_persistent(end, A, 64) {
            wrong.push(format!(
                "{domain:?} ddio={ddio}: durable {} long after, visible 1",
                durable[0]
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The same race with two partial-line DMAs of other bytes of the line, both crossing PCIe
/// when the store lands over both: loads end with the two DMAs' bytes, and so must what a
/// power failure keeps. A line remembers only its latest DMA that bypasses the cache; the
/// store used to persist with that one (after, and over, the first) under DMP, and under
/// WSP only the latest was laid over the store again. Whole-line writes (the proptests')
/// cannot show it: the latest DMA covers the first. Several seeds, since the mesh's jitter
/// decides whether the first DMA reaches the WPQ before the store's write-back.
#[test]
fn a_cpu_store_racing_two_partial_line_dmas_persists_in_visibility_order() {
    let mut wrong = Vec::new();
    for (domain, ddio) in ALL_CONFIGS {
        for seed in 0..20 {
            let mut h = hier(domain, ddio, seed);
            let t0 = ns(1_000);
            h.dma_write(t0, Space::Pm, A, &[0xaa; 8]);
            let vis = h.dma_write(t0, Space::Pm, A + 8, &[0xbb; 8]).visible;
            let ts = t0 + Duration::from_nanos(1);
            assert!(ts < vis, "both DMAs still in flight");
            h.cpu_store(ts, Space::Pm, A, &[0x55; 16]);
            let quiet = vis + Duration::from_millis(1);
            let mut expect = vec![0xaa; 8];
            expect.extend([0xbb; 8]);
            assert_eq!(
                load(&mut h, quiet, Space::Pm, A, 16),
                expect,
                "the DMAs committed last"
            );
            let issue = h.clwb(quiet, A, LINE);
            let end = h.sfence(quiet + issue) + Duration::from_millis(1);
            let durable = h.crash_image(end).read_vec(A, 16);
            if durable != expect {
                wrong.push(format!(
                    "{domain:?} ddio={ddio} seed {seed}: durable {durable:02x?}"
                ));
                break;
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Under WSP a write is durable from its arrival, but it must not be *visible* before the IIO
/// commits it: visibility is in order, so a load must never see a later write without an
/// earlier one.
#[test]
fn wsp_does_not_make_a_write_visible_before_it_commits() {
    for ddio in [true, false] {
        let mut h = hier(Wsp, ddio, 0);
        let (a, b) = (A, A + (1 << 20)); // different 4 KiB pages
        let t0 = ns(1_000);
        // Page of a is already in the visible overlay (an earlier, visible write).
        let v0 = h.dma_write(t0, Space::Pm, a + 64, &[0xee; 8]).visible;
        let t1 = v0 + Duration::from_micros(1);
        let va = h.dma_write(t1, Space::Pm, a, &[0xaa; 64]).visible;
        h.dma_write(t1, Space::Pm, b, &[0xbb; 64]);
        let check = t1 + Duration::from_nanos(1);
        assert!(check < va);
        let seen_a = load(&mut h, check, Space::Pm, a, 64);
        let seen_b = load(&mut h, check, Space::Pm, b, 64);
        assert_eq!(seen_a, vec![0; 64], "a is not visible before {va}");
        assert_eq!(
            seen_b,
            vec![0; 64],
            "ddio={ddio}: b (later than a) is visible at {check}, before a"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// DMA writes and CPU stores to the same lines, then a long quiet period with every line
    /// written back: the durable image equals what loads see (the last version in visibility
    /// order), in every domain.
    #[test]
    fn durable_image_converges_to_the_visible_image(
        seed in 0u64..1_000,
        config in 0usize..6,
        ops in prop::collection::vec((any::<bool>(), 0u8..3, 0u16..500), 1..30),
    ) {
        let (domain, ddio) = ALL_CONFIGS[config];
        let mut h = hier(domain, ddio, seed);
        let mut t = ns(1_000);
        let mut last_vis = t;
        for (i, (dma, line, gap)) in ops.iter().enumerate() {
            t += Duration::from_nanos(*gap as u64);
            let v = [i as u8 + 1; 64];
            if *dma {
                last_vis = last_vis.max(h.dma_write(t, Space::Pm, line_addr(*line), &v).visible);
            } else {
                // Stores may race DMAs still in flight to the same line.
                h.cpu_store(t, Space::Pm, line_addr(*line), &v);
            }
        }
        let quiet = t + Duration::from_millis(1);
        for line in 0..3u8 {
            let issue = h.clwb(quiet, line_addr(line), LINE);
            h.sfence(quiet + issue);
        }
        let end = quiet + Duration::from_millis(1);
        let img = h.crash_image(end);
        for line in 0..3u8 {
            let vis = load(&mut h, end, Space::Pm, line_addr(line), 64);
            prop_assert_eq!(img.read_vec(line_addr(line), 64), vis.clone(),
                "{:?} ddio={} line {}: durable differs from visible", domain, ddio, line);
            prop_assert!(h.is_persistent(end, line_addr(line), 64));
        }
    }
}

// ------------------------------------------------------------------ power failure and restart

/// After a power failure the machine restarts with the surviving image both visible and
/// durable; what was visible but not durable is gone; DRAM is zero; the data path works on.
#[test]
fn power_fail_restarts_from_the_surviving_image() {
    for (domain, ddio) in [(Dmp, false), (Mhp, true), (Wsp, false)] {
        let mut h = hier(domain, ddio, 5);
        let (a, b) = (A, A + 4096);
        let t0 = ns(1_000);
        h.dma_write(t0, Space::Pm, a, &[0xa0; 64]);
        let fa = h.flush_done(t0, FlushPlacement::Persistence, ALL_PM);
        let tb = fa + Duration::from_micros(1);
        let vb = h.dma_write(tb, Space::Pm, b, &[0xb0; 64]).visible;
        h.cpu_store(tb, Space::Dram, 0x3000, b"volatile");
        // Crash once b is visible (after its arrival) but before DMP could have persisted it.
        let crash = vb;
        assert_eq!(load(&mut h, crash, Space::Pm, b, 64), vec![0xb0; 64]);
        let expect_b = domain != Dmp;
        h.power_fail(crash);
        assert_eq!(
            load(&mut h, crash, Space::Pm, a, 64),
            vec![0xa0; 64],
            "{domain:?}"
        );
        let b_now = load(&mut h, crash, Space::Pm, b, 64);
        assert_eq!(
            b_now,
            if expect_b {
                vec![0xb0; 64]
            } else {
                vec![0; 64]
            },
            "{domain:?}: b after the restart"
        );
        assert_eq!(load(&mut h, crash, Space::Dram, 0x3000, 8), vec![0; 8]);
        // What is visible now is durable: a second crash changes nothing.
        assert!(h.is_persistent(crash, a, 64));
        assert!(h.is_persistent(crash, b, 64));
        let img = h.crash_image(crash);
        assert_eq!(img.read_vec(a, 64), vec![0xa0; 64]);
        assert_eq!(img.read_vec(b, 64), b_now);
        // The restarted data path works and is durable after a FLUSH.
        let t2 = crash + Duration::from_micros(1);
        let v2 = h.dma_write(t2, Space::Pm, b, &[0xb2; 64]).visible;
        assert!(v2 > t2);
        let f2 = h.flush_done(t2, FlushPlacement::Persistence, ALL_PM);
        assert_eq!(load(&mut h, f2, Space::Pm, b, 64), vec![0xb2; 64]);
        if !(domain == Dmp && ddio) {
            assert_eq!(h.crash_image(f2).read_vec(b, 64), vec![0xb2; 64]);
        }
    }
}

// ------------------------------------------------------------------ sparse memory, geometry

/// A write 60 GiB into PM works and costs a page or two, not gigabytes.
#[test]
fn a_write_sixty_gib_into_pm_costs_little() {
    let far = PM_BASE + (60 << 30) - 32; // crosses a page boundary
    for (domain, ddio) in ALL_CONFIGS {
        let mut h = hier(domain, ddio, 1);
        let t0 = ns(1_000);
        let data: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
        h.dma_write(t0, Space::Pm, far, &data);
        h.cpu_store(t0, Space::Pm, far + 1000, b"cpu");
        let done = h.flush_done(t0, FlushPlacement::Persistence, ALL_PM);
        let later = done + Duration::from_millis(1);
        let issue = h.clwb(later, far, 1003);
        let end = h.sfence(later + issue);
        assert_eq!(load(&mut h, end, Space::Pm, far, 200), data);
        let img = h.crash_image(end);
        assert_eq!(img.read_vec(far, 200), data, "{domain:?} ddio={ddio}");
        assert_eq!(img.read_vec(far + 1000, 3), b"cpu");
        assert!(
            img.resident_bytes() <= 3 * 4096,
            "{} bytes resident",
            img.resident_bytes()
        );
    }
}

/// PM geometry (seed 004 Table III with a 256-byte interleave): consecutive 256-byte units
/// alternate over 2 channels, a unit stays in one place, rows fill 8 banks per channel.
#[test]
fn pm_geometry_interleaves_two_channels_and_eight_banks() {
    let h = hier(Dmp, false, 0);
    for base in [0, PM_BASE] {
        let mut seen: BTreeSet<(u32, u32)> = BTreeSet::new();
        let row0 = h.pm_location(base).row;
        let units = 2 * 8 * (2048 / 256); // channels x banks x units per row
        for u in 0..units {
            let addr = base + u * 256;
            let loc = h.pm_location(addr);
            assert_eq!(loc.channel as u64, u % 2, "unit {u}");
            assert_eq!(loc.row, row0, "the first row of every bank fills first");
            for off in [1, 64, 255] {
                assert_eq!(h.pm_location(addr + off), loc, "a unit does not split");
            }
            seen.insert((loc.channel, loc.bank));
        }
        assert_eq!(seen.len(), 16, "2 channels x 8 banks all used: {seen:?}");
        assert!(seen.iter().all(|&(c, b)| c < 2 && b < 8));
        // The next unit opens row 1 of bank 0 on channel 0.
        let next = h.pm_location(base + units * 256);
        assert_eq!((next.channel, next.bank, next.row), (0, 0, row0 + 1));
        // Within a channel, 2 KB of consecutive channel-local bytes share a row of one bank.
        let l0 = h.pm_location(base);
        let l1 = h.pm_location(base + 2 * 256 * 7);
        assert_eq!((l0.channel, l0.bank, l0.row), (l1.channel, l1.bank, l1.row));
        let l2 = h.pm_location(base + 2 * 256 * 8);
        assert_eq!((l2.channel, l2.bank), (0, 1));
    }
}

// ------------------------------------------------------------------ clearing a range

/// `zero_idle` refuses (and changes nothing) while a write to the range is in flight, in
/// any configuration; once nothing is, it zeroes the range in the visible image, in what a
/// crash keeps and in DRAM, leaving the bytes around it alone.
#[test]
fn zero_idle_waits_for_writes_in_flight_then_clears_only_its_range() {
    for (domain, ddio) in ALL_CONFIGS {
        let mut h = hier(domain, ddio, 7);
        let t0 = ns(1_000);
        // Around the range, and in it (a DMA and a CPU store, PM and DRAM).
        h.dma_write(t0, Space::Pm, A - 64, &[1; 64]);
        h.dma_write(t0, Space::Pm, A + 4096, &[2; 64]);
        h.dma_write(t0, Space::Pm, A + 100, &[3; 200]);
        h.cpu_store(t0, Space::Pm, A + 1000, &[4; 8]);
        h.dma_write(t0, Space::Dram, 0x9000, &[5; 64]);
        let busy = h
            .zero_idle(t0, Space::Pm, A, 4096)
            .expect_err("writes to the range are in flight");
        assert!(busy > t0, "{domain:?} ddio {ddio}");
        h.zero_idle(t0, Space::Dram, 0x9000, 64)
            .expect_err("a DMA to the DRAM range is in flight");
        assert_eq!(load(&mut h, busy, Space::Pm, A + 1000, 8), vec![4; 8]);
        // Once every write is where it ends (the CPU store's line written back too).
        let late = ns(100_000_000);
        let fence = h.clwb(late, A, 4096);
        let done = h.sfence(late + fence);
        h.zero_idle(done, Space::Pm, A, 4096)
            .unwrap_or_else(|t| panic!("{domain:?} ddio {ddio}: still busy until {t:?}"));
        h.zero_idle(done, Space::Dram, 0x9000, 64).unwrap();
        assert_eq!(load(&mut h, done, Space::Pm, A, 4096), vec![0; 4096]);
        assert_eq!(load(&mut h, done, Space::Dram, 0x9000, 64), vec![0; 64]);
        assert_eq!(load(&mut h, done, Space::Pm, A - 64, 64), vec![1; 64]);
        assert_eq!(load(&mut h, done, Space::Pm, A + 4096, 64), vec![2; 64]);
        let img = h.crash_image(done);
        assert_eq!(
            img.read_vec(A, 4096),
            vec![0; 4096],
            "{domain:?} ddio {ddio}"
        );
        assert_eq!(img.read_vec(A + 4096, 64), vec![2; 64]);
    }
}

/// Under WSP a write held in the RNIC buffer is in the persistence domain: a range under it
/// is not cleared (nothing changes) until the write leaves the buffer.
#[test]
fn zero_idle_waits_for_a_held_write() {
    let mut h = hier(Wsp, false, 3);
    let t0 = ns(1_000);
    h.hold(7, Space::Pm, A + 64, &[9; 64]);
    assert_eq!(h.zero_idle(t0, Space::Pm, A, 4096), Err(t0));
    assert_eq!(h.crash_image(t0).read_vec(A + 64, 64), vec![9; 64]);
    // Elsewhere, nothing holds it back.
    h.zero_idle(t0, Space::Pm, A + 4096, 4096).unwrap();
    h.release_held(7);
    h.zero_idle(t0, Space::Pm, A, 4096).unwrap();
    assert_eq!(h.crash_image(t0).read_vec(A, 4096), vec![0; 4096]);
}

#[test]
fn a_flush_waits_for_the_writes_to_its_range_and_for_no_other() {
    // DMP without DDIO: a FLUSH returns once earlier writes to the bytes it names are in
    // the WPQ. A FLUSH of other bytes does not wait for them, so a method that names the
    // wrong range acknowledges data a power failure then loses.
    let t0 = ns(1_000);
    let (a, other) = (PM_BASE, PM_BASE + (1 << 20));
    let mut h = hier(Dmp, false, 5);
    h.dma_write(t0, Space::Pm, a, &[0x11; 4096]);
    let range = |addr, len| FlushRange {
        space: Space::Pm,
        addr,
        len,
    };
    let elsewhere = h.flush_done(t0, FlushPlacement::Persistence, range(other, 64));
    // Its last line, named alone: the FLUSH waits for that line, whatever else it wrote.
    let last = h.flush_done(t0, FlushPlacement::Persistence, range(a + 4032, 64));
    let whole = h.flush_done(t0, FlushPlacement::Persistence, range(a, 4096));
    assert!(
        elsewhere < last && last <= whole,
        "{elsewhere:?} {last:?} {whole:?}"
    );
    assert_eq!(whole, h.flush_done(t0, FlushPlacement::Persistence, ALL_PM));
    h.advance(elsewhere);
    assert!(
        !h.is_persistent(elsewhere, a, 4096),
        "a FLUSH of other bytes covered them"
    );
    h.advance(whole);
    assert!(h.is_persistent(whole, a, 4096));
    // DRAM is another space: a FLUSH of the same addresses there covers nothing in PM.
    let dram = FlushRange {
        space: Space::Dram,
        addr: a,
        len: 4096,
    };
    let mut h = hier(Dmp, false, 5);
    h.dma_write(t0, Space::Pm, a, &[0x11; 4096]);
    let d = h.flush_done(t0, FlushPlacement::Persistence, dram);
    assert!(!h.is_persistent(d, a, 4096));
}

proptest! {
    /// Whatever was written, when a FLUSH of a range completes every earlier write to that
    /// range is persistent (DMP without DDIO, where the FLUSH waits for the WPQ).
    #[test]
    fn at_a_flushs_completion_its_range_is_persistent(
        writes in proptest::collection::vec((0u64..64, 1usize..300, 0u64..50), 1..40),
        lo in 0u64..64, lines in 1u64..16, seed in 0u64..1000,
    ) {
        let mut h = hier(Dmp, false, seed);
        let mut t = ns(1_000);
        // Each write its own bytes: a FLUSH that missed a newer write over older bytes
        // would show.
        for (i, (line, len, gap)) in writes.iter().enumerate() {
            h.dma_write(t, Space::Pm, PM_BASE + line * LINE, &vec![i as u8 + 1; *len]);
            t += Duration::from_nanos(*gap);
        }
        let (addr, len) = (PM_BASE + lo * LINE, lines * LINE);
        let done = h.flush_done(t, FlushPlacement::Persistence, FlushRange { space: Space::Pm, addr, len });
        h.advance(done);
        for (line, wlen, _) in &writes {
            let (wa, wb) = (PM_BASE + line * LINE, PM_BASE + line * LINE + *wlen as u64);
            let (x, y) = (wa.max(addr), wb.min(addr + len));
            if x < y {
                prop_assert!(h.is_persistent(done, x, (y - x) as usize));
            }
        }
    }

    /// The same on the slow data path with a burst at one instant: lines reach the WPQ in
    /// a spread of milliseconds, far out of order, so the queue to the WPQ files them in
    /// its heap as well as its sorted part, and the FLUSH must find them in both.
    #[test]
    fn a_flush_finds_its_lines_however_far_out_of_order_they_persist(
        n in 50u64..400, pick in 0u64..400, seed in 0u64..1000,
    ) {
        let mut h = MemoryHierarchy::new(
            Dmp,
            false,
            &LatencyProfile::builtin("slow-data-path").unwrap(),
            Prng::from_seed(seed),
        );
        let t = ns(1_000);
        for i in 0..n {
            h.dma_write(t, Space::Pm, PM_BASE + i * LINE, &[i as u8 + 1; LINE as usize]);
        }
        let addr = PM_BASE + (pick % n) * LINE;
        let range = FlushRange { space: Space::Pm, addr, len: LINE };
        let done = h.flush_done(t, FlushPlacement::Persistence, range);
        h.advance(done);
        prop_assert!(h.is_persistent(done, addr, LINE as usize));
    }
}

/// DMP+DDIO hierarchy with `before` lines written below `A` and the lines `A + 64 i` for
/// `i` in `0..n` not in the `skip` mask, written at 1 µs and all visible (in the LLC) by
/// 5 µs; then `clwb` of the `n` lines from `A` and `tail` lines more, and an `sfence` at
/// 5 µs. Returns the fence's end and the crash image of the window at several times after.
fn clwb_run(seed: u64, before: u64, n: u64, skip: u64, tail: u64) -> (Instant, Vec<Vec<u8>>) {
    let mut h = hier(Dmp, true, seed);
    for i in 0..before {
        h.dma_write(ns(1_000), Space::Pm, A - (i + 1) * LINE, &[0x11; 64]);
    }
    for i in (0..n).filter(|i| skip >> i & 1 == 0) {
        h.dma_write(ns(1_000), Space::Pm, A + i * LINE, &[i as u8 + 1; 64]);
    }
    let t = ns(5_000);
    h.clwb(t, A, (n + tail) * LINE);
    let done = h.sfence(t);
    let span = ((before + n) * LINE) as usize;
    let images = [0, 200, 1_000, 5_000]
        .iter()
        .map(|&d| {
            h.crash_image(done + Duration::from_nanos(d))
                .read_vec(A - before * LINE, span)
        })
        .collect();
    (done, images)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// A clwb of a range wider than the lines that have state visits only those (a peer may
    /// name gigabytes), in address order: it writes back exactly what the line-by-line walk
    /// writes back, at the same times, gaps in the range included.
    #[test]
    fn a_wide_clwb_writes_back_what_the_line_by_line_walk_does(
        seed in 0u64..1_000,
        n in 1u64..8,
        extra in 0u64..3,
        skip in 0u64..128,
    ) {
        // At least one line written, and as many lines of state below A as the range has
        // lines: the clwb of the `n` lines walks them one by one.
        let skip = skip & !1;
        let before = n + extra;
        let walked = clwb_run(seed, before, n, skip, 0);
        // The same with a gigabyte more: wider than the state, so only the lines with
        // state are visited (the lines below A are outside both ranges).
        let wide = clwb_run(seed, before, n, skip, (1 << 30) / LINE);
        prop_assert_eq!(&walked, &wide);
        // Every line written in the range is durable once the fence returned.
        for i in (0..n).filter(|i| skip >> i & 1 == 0) {
            let at = ((before + i) * LINE) as usize;
            prop_assert_eq!(walked.1[0][at], i as u8 + 1);
        }
    }
}
