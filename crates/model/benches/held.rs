//! What the writes WSP holds in the RNIC buffer cost the hierarchy (`hierarchy/held.rs`):
//! a burst of non-posted writes, each waiting for the one before, held on arrival and let
//! go as each executes. ATOMIC WRITEs spread over 8,192 words, and stacked on one word;
//! and two patterns a peer that means harm may send, which make a walk visit many held
//! writes (see the module's doc): 16-byte writes stacked at two addresses 8 bytes apart,
//! ATOMIC WRITEs spread while one 1 MiB write stays held elsewhere (on another QP), and
//! 4 KiB writes each starting a byte below the one before (64 MiB of them at 16,384).
//! `cargo bench -p remora-model --bench held`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use remora_model::hierarchy::Space;
use remora_model::prng::Prng;
use remora_model::profile::LatencyProfile;
use remora_model::rnic::{MrInfo, QpAttr, Rnic};
use remora_model::time::{Duration, Instant};
use remora_model::verbs::*;
use remora_model::wire::{Body, Packet};

/// Bytes of the server's region.
const REGION: u64 = 4 << 20;

/// A WSP server node, a client QP number for it, and its region.
fn server() -> (Rnic, QpNum, QpNum, MrInfo) {
    let mut r = Rnic::new(
        2,
        "WSP+noDDIO+PM-RQWRB".parse().unwrap(),
        &LatencyProfile::default_profile(),
        Prng::from_seed(2),
    );
    let pd = r.alloc_pd();
    let a = r.alloc(Space::Pm, REGION, 4096);
    let mr = r.reg_mr(pd, Space::Pm, a, REGION, Access::ALL).unwrap();
    let cq = r.create_cq(64).unwrap();
    let qp = r.create_qp(pd, cq, cq, QpAttr::default()).unwrap();
    let peer_qp = QpNum(7);
    r.connect(qp, 1, peer_qp).unwrap();
    (r, qp, peer_qp, mr)
}

/// What the burst's writes are.
#[derive(Copy, Clone)]
enum Pattern {
    /// ATOMIC WRITEs over this many words.
    Spread(u64),
    /// 16-byte non-posted writes at two addresses 8 bytes apart, in turn.
    Offset,
    /// ATOMIC WRITEs over 8,192 words while a 1 MiB write stays held past them.
    LongHeld,
    /// 4 KiB non-posted writes, each starting a byte below the one before (the cover
    /// of each leaves its first byte open, so no walk stops early).
    Descending,
}

/// `n` writes of `pattern` at once, then the RNIC's time until every one executed;
/// returns how many were held at once.
fn burst(n: u32, pattern: Pattern) -> usize {
    let (mut r, qp, peer_qp, mr) = server();
    let t = Instant::ZERO + Duration::from_micros(1);
    if let Pattern::LongHeld = pattern {
        let far = mr.addr + REGION - (1 << 20);
        r.hierarchy()
            .hold(u64::MAX, Space::Pm, far, &vec![9; 1 << 20]);
    }
    for psn in 0..n {
        let i = psn as u64;
        let (addr, data, atomic) = match pattern {
            Pattern::Spread(words) => (mr.addr + 8 * (i % words), vec![psn as u8; 8], true),
            Pattern::Offset => (mr.addr + 8 * (i % 2), vec![psn as u8; 16], false),
            Pattern::LongHeld => (mr.addr + 8 * (i % 8192), vec![psn as u8; 8], true),
            Pattern::Descending => (mr.addr + 16384 - i, vec![psn as u8; 4096], false),
        };
        let p = Packet {
            src: 1,
            dst: 2,
            src_qp: peer_qp,
            dst_qp: qp,
            psn,
            body: Body::NonPostedWrite {
                addr,
                rkey: mr.rkey,
                data: data.into(),
                atomic,
            },
        };
        r.handle_packet(t, &p);
    }
    let held = r.hierarchy().held_writes();
    let rest = usize::from(matches!(pattern, Pattern::LongHeld));
    let mut now = t;
    while r.hierarchy().held_writes() > rest {
        now += Duration::from_micros(100);
        r.handle_timeout(now);
        while r.poll_transmit().is_some() {}
    }
    held - rest
}

fn held(c: &mut Criterion) {
    let mut g = c.benchmark_group("held non-posted writes, held and let go");
    g.sample_size(10);
    let patterns = [
        (
            "ATOMIC WRITEs spread over 8192 words",
            Pattern::Spread(8192),
        ),
        ("ATOMIC WRITEs stacked on one word", Pattern::Spread(1)),
        ("16-byte writes stacked 8 bytes apart", Pattern::Offset),
        (
            "ATOMIC WRITEs spread, a 1 MiB write held",
            Pattern::LongHeld,
        ),
        (
            "4 KiB writes each a byte below the last",
            Pattern::Descending,
        ),
    ];
    for n in [4096u32, 16384] {
        for (name, pattern) in patterns {
            g.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
                b.iter(|| assert_eq!(burst(n, pattern), n as usize - 1))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, held);
criterion_main!(benches);
