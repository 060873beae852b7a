//! Non-posted operations are ordered after every earlier one: READs, atomics and FLUSH after
//! WRITEs see (or make visible, durable) their data; also a READ standing in for FLUSH.

use super::*;

// ================================================================ b. non-posted after all

/// A READ after pipelined WRITEs returns their data (non-posted operations are ordered
/// after every earlier operation), whatever the server configuration and memory.
#[test]
fn a_read_after_pipelined_writes_returns_the_written_data() {
    for name in [
        "DMP+DDIO+PM-RQWRB",
        "DMP+noDDIO+PM-RQWRB",
        "MHP+DDIO+PM-RQWRB",
        "WSP+noDDIO+PM-RQWRB",
    ] {
        for seed in 0..3 {
            let p = Pair::new(seed, cfg(name));
            let a = p.mr.addr + 512;
            let mut expect = Vec::new();
            let mut wrs = Vec::new();
            for i in 0..16u64 {
                let d = pattern(256, i as u8);
                expect.extend_from_slice(&d);
                wrs.push(p.write(i, a + i * 256, d).signaled(false));
            }
            let l = p.lmr.addr;
            wrs.push(p.read(100, a, 4096, l));
            let wcs = p.run_ops(wrs);
            assert_eq!(ids(&wcs), vec![100]);
            all_ok(&wcs);
            assert_eq!(wcs[0].0.opcode, WcOpcode::RdmaRead);
            assert_eq!(wcs[0].0.byte_len, 4096);
            assert!(p.client_bytes(l, 4096) == expect, "{name} seed {seed}");
        }
    }
}

/// A READ immediately after a single large WRITE to the same bytes returns the new data,
/// even though the WRITE is far from visible when the READ reaches the server.
#[test]
fn a_read_right_behind_a_large_write_sees_all_of_it() {
    for seed in 0..4 {
        let p = Pair::new(seed, cfg("DMP+DDIO+PM-RQWRB"));
        let a = p.mr.addr;
        let big = pattern(32 * 1024, 3);
        let l = p.lmr.addr;
        let wcs = p.run_ops(vec![
            p.write(1, a, big.clone()).signaled(false),
            p.read(2, a + 32 * 1024 - 64, 64, l),
        ]);
        assert_eq!(ids(&wcs), vec![2]);
        all_ok(&wcs);
        assert_eq!(p.client_bytes(l, 64), big[big.len() - 64..].to_vec());
    }
}

/// CAS, FETCH_ADD, ATOMIC WRITE and READ after WRITEs see the WRITEs' values.
#[test]
fn atomics_after_writes_see_the_written_values() {
    for seed in 0..4 {
        let p = Pair::new(seed, cfg("DMP+noDDIO+PM-RQWRB"));
        let a = p.mr.addr + 1024;
        let l = p.lmr.addr;
        let w = |id, off: u64, v: u64| p.write(id, a + off, v.to_le_bytes().to_vec());
        let wcs = p.run_ops(vec![
            w(1, 0, 0x1111).signaled(false),
            p.cas(2, a, 0x1111, 0x2222, l),
            w(3, 8, 0x2000).signaled(false),
            p.faa(4, a + 8, 5, l + 8),
            w(5, 16, 0x3333).signaled(false),
            p.cas(6, a + 16, 0x1111, 0x9999, l + 16),
            w(7, 24, 0x4444).signaled(false),
            p.atomic_write(8, a + 24, 0x6666),
            p.read(9, a, 32, l + 64),
        ]);
        assert_eq!(ids(&wcs), vec![2, 4, 6, 8, 9], "seed {seed}");
        all_ok(&wcs);
        let opcodes: Vec<WcOpcode> = wcs.iter().map(|(wc, _)| wc.opcode).collect();
        assert_eq!(
            opcodes,
            vec![
                WcOpcode::CompSwap,
                WcOpcode::FetchAdd,
                WcOpcode::CompSwap,
                WcOpcode::AtomicWrite,
                WcOpcode::RdmaRead
            ]
        );
        let res = p.client_bytes(l, 24);
        assert_eq!(u64_at(&res[0..]), 0x1111, "CAS returns the WRITE's value");
        assert_eq!(
            u64_at(&res[8..]),
            0x2000,
            "FETCH_ADD returns the WRITE's value"
        );
        assert_eq!(
            u64_at(&res[16..]),
            0x3333,
            "failed CAS returns the WRITE's value"
        );
        let read = p.client_bytes(l + 64, 32);
        let words: Vec<u64> = read.chunks(8).map(u64_at).collect();
        assert_eq!(words, vec![0x2222, 0x2005, 0x3333, 0x6666], "seed {seed}");
        let srv: Vec<u64> = p.pm(a, 32).chunks(8).map(u64_at).collect();
        assert_eq!(srv, words);
    }
}

/// At a FLUSH's completion every earlier WRITE is visible at the server; with persistence
/// placement, and where the RNIC can reach the persistence domain, also durable.
#[test]
fn a_flush_completion_implies_earlier_writes_are_visible() {
    for (name, placement, durable) in [
        ("DMP+DDIO+PM-RQWRB", VISIBLE, false),
        ("DMP+noDDIO+PM-RQWRB", PERSIST, true),
        ("MHP+DDIO+PM-RQWRB", PERSIST, true),
        ("WSP+DDIO+PM-RQWRB", PERSIST, true),
    ] {
        for seed in 0..3 {
            let p = Pair::new(seed, cfg(name));
            let a = p.mr.addr;
            let data = pattern(4096, 9);
            let (c, sim, sid, cq, qp) =
                (p.client.clone(), p.sim.clone(), p.server.id(), p.ccq, p.cqp);
            let wrs = vec![
                p.write(1, a, data.clone()).signaled(false),
                p.flush(2, a, 4096, placement),
            ];
            let d = data.clone();
            let (wc, vis, dur) = p
                .sim
                .block_on(Instant::NEVER, async move {
                    for wr in wrs {
                        c.post_send(qp, wr).unwrap();
                    }
                    let wc = next_completion(&c, cq).await;
                    let vis = peek(&sim, sid, Space::Pm, a, 4096) == d;
                    let dur =
                        sim.with_rnic(sid, |r, now| r.crash_image(now).read_vec(a, 4096)) == d;
                    (wc, vis, dur)
                })
                .unwrap();
            assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
            assert_eq!(wc.opcode, WcOpcode::Flush);
            assert!(vis, "{name} seed {seed}: visible at the FLUSH completion");
            if durable {
                assert!(dur, "{name} seed {seed}: durable at the FLUSH completion");
            }
        }
    }
}

// ================================================================ h. FLUSH emulated by READ

/// Without native FLUSH (a legacy RNIC) a READ after the WRITEs stands in for it. Under
/// DMP without DDIO that READ makes the WRITE persistent by its completion.
#[test]
fn a_read_after_a_write_persists_it_under_dmp_without_ddio() {
    for seed in 0..6 {
        let p = Opts::new(seed, cfg("DMP+noDDIO+PM-RQWRB"))
            .client(cfg("DMP+noDDIO+PM-RQWRB,legacy"))
            .build();
        let caps = p.client.config().caps;
        assert_eq!(FlushMethod::for_caps(caps), FlushMethod::ReadAfterWrite);
        let (a, data) = (p.mr.addr, pattern(4096, seed as u8));
        let flush = FlushMethod::for_caps(caps).work_request(
            2,
            PERSIST,
            p.remote(a).unwrap(),
            4096,
            p.local(p.lmr.addr, 8),
        );
        let (wc, durable, visible) = write_then_observe(&p, data.clone(), flush);
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
        assert_eq!(wc.opcode, WcOpcode::RdmaRead);
        assert!(visible, "seed {seed}");
        assert!(durable, "seed {seed}: durable at the READ's completion");
        assert_eq!(p.client_bytes(p.lmr.addr, 8), data[..8].to_vec());
    }
}

/// Under DMP with DDIO the READ completes once the data is in the LLC, which is not
/// persistent: at the READ's completion the WRITE is visible but (for some seed) not in
/// the crash image.
#[test]
fn a_read_after_a_write_does_not_persist_it_under_dmp_with_ddio() {
    let mut lost = 0;
    for seed in 0..6 {
        let p = Opts::new(seed, cfg("DMP+DDIO+PM-RQWRB"))
            .client(cfg("DMP+DDIO+PM-RQWRB,legacy"))
            .build();
        let (a, data) = (p.mr.addr, pattern(4096, seed as u8));
        let flush = FlushMethod::ReadAfterWrite.work_request(
            2,
            PERSIST,
            p.remote(a).unwrap(),
            4096,
            p.local(p.lmr.addr, 8),
        );
        let (wc, durable, visible) = write_then_observe(&p, data, flush);
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
        assert!(visible, "seed {seed}: the READ pushed the WRITE to the LLC");
        lost += !durable as u32;
    }
    assert!(
        lost > 0,
        "the READ never left the data outside the crash image"
    );
}

/// WRITE(data) then `second` at time 0; at the second's completion returns whether the
/// data is durable and visible at the server.
fn write_then_observe(p: &Pair, data: Vec<u8>, second: SendWr) -> (WorkCompletion, bool, bool) {
    let (c, sim, sid, cq, qp) = (p.client.clone(), p.sim.clone(), p.server.id(), p.ccq, p.cqp);
    let a = p.mr.addr;
    let wrs = vec![p.write(1, a, data.clone()).signaled(false), second];
    p.sim
        .block_on(Instant::NEVER, async move {
            for wr in wrs {
                c.post_send(qp, wr).unwrap();
            }
            let wc = next_completion(&c, cq).await;
            let len = data.len();
            let dur = sim.with_rnic(sid, |r, now| r.crash_image(now).read_vec(a, len)) == data;
            let vis = peek(&sim, sid, Space::Pm, a, len) == data;
            (wc, dur, vis)
        })
        .unwrap()
}
